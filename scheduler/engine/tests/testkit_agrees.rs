//! The SDK's test kit derives what the engine derives: a plugin test's hand-built view
//! (`gantry_sdk::testkit::ViewBuilder::settle`) shows the same node allocations, GPU holders,
//! application and queue usage, pending demand and queue capacities as the view the engine
//! builds for the same cluster. If the engine's bookkeeping changes, this fails until the kit
//! follows.

use gantry_engine::{AppSpec, Engine, EngineConfig, Event, NodeCondition, NodeSpec, QueueSpec, RequestSpec};
use gantry_sdk::View;
use gantry_sdk::abi::*;
use gantry_sdk::testkit::ViewBuilder;

const GIB: u64 = 1 << 30;

fn node(name: &str, cores: u64, mem_gib: u64, gpus: u32) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        rack: "r1".into(),
        labels: Vec::new(),
        capacity: GantryResources::new(cores * 1000, mem_gib * GIB, gpus),
        gpu_list: Vec::new(),
    }
}

fn app(queue: &str, each: GantryResources, count: u32) -> AppSpec {
    AppSpec {
        name: "job".into(),
        queue: queue.into(),
        user: "ann".into(),
        requests: vec![RequestSpec { resources: each, count, ..Default::default() }],
        ..Default::default()
    }
}

#[test]
fn a_settled_hand_built_view_matches_the_engines() {
    let shares = [("root.a", 0.3, 0.5), ("root.b", 0.7, 1.0), ("root.b.x", 0.6, 0.9), ("root.b.y", 0.4, 1.0)];
    let queues =
        shares.iter().map(|&(p, g, m)| QueueSpec { path: p.into(), guaranteed: g, maximum: m }).collect();
    let mut e = Engine::builtin(EngineConfig { queues, ..Default::default() }).expect("engine");
    for n in [node("n0", 8, 16, 2), node("n1", 4, 8, 0), node("n2", 6, 12, 0)] {
        e.handle(0, Event::NodeRegistered(n)).expect("node");
    }
    let apps = [
        ("root.a", GantryResources::new(1000, GIB, 0), 2),
        ("root.b.x", GantryResources::new(2000, 2 * GIB, 1), 1),
        // Fits no node: it stays pending.
        ("root.b.y", GantryResources::new(64_000, GIB, 0), 1),
    ];
    for (queue, each, count) in apps {
        e.handle(0, Event::AppSubmitted(app(queue, each, count))).expect("app");
    }
    e.handle(1, Event::Tick).expect("tick");
    // The node holding the containers drains: what it holds stays in the queues' base.
    e.handle(2, Event::NodeStateChanged { node: "n0".into(), state: NodeCondition::Draining })
        .expect("drain");
    e.handle(3, Event::Tick).expect("tick");
    let s = e.state();
    assert_eq!(s.containers().len(), 3, "the two small apps placed: {:?}", s.containers());

    // The same cluster, by hand.
    let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
    let root = b.queue("root", GANTRY_NONE, 1.0, 1.0);
    for &(path, g, m) in &shares {
        let parent = path.rsplit_once('.').map_or("root", |(p, _)| p);
        let parent = s.queues().iter().position(|q| s.str(q.name) == parent).map_or(root, |i| i as u32);
        b.queue(path, parent, g, m);
    }
    for n in s.nodes() {
        b.node(s.str(n.name), n.capacity).state(n.state);
    }
    for a in s.apps() {
        let i = b.app(a.queue).index();
        for r in View::range(s.requests(), a.requests) {
            let req = b.request(i, r.resources, r.count);
            if r.placed < r.count {
                req.pending();
            }
        }
    }
    for c in s.containers() {
        b.container(c.request, c.node);
    }
    b.settle();

    let (mine, theirs) = (b.view(), (s.nodes(), s.gpus(), s.queues(), s.apps()));
    let allocated = |n: &[GantryNode]| n.iter().map(|n| n.allocated).collect::<Vec<_>>();
    assert_eq!(allocated(mine.nodes), allocated(theirs.0), "node allocations");
    let holders = |g: &[GantryGpu]| g.iter().map(|g| (g.node, g.index, g.container)).collect::<Vec<_>>();
    assert_eq!(holders(mine.gpus), holders(theirs.1), "GPU records and their holders");
    let figures = |q: &[GantryQueue]| {
        q.iter()
            .map(|q| (q.parent, q.flags, q.used, q.pending, q.absolute_guaranteed, q.absolute_maximum))
            .collect::<Vec<_>>()
    };
    assert_eq!(figures(mine.queues), figures(theirs.2), "queue usage, demand and capacities");
    let used = |a: &[GantryApp]| a.iter().map(|a| (a.queue, a.used, a.requests)).collect::<Vec<_>>();
    assert_eq!(used(mine.apps), used(theirs.3), "application usage and request ranges");
    assert_eq!(mine.cluster, s.cluster(), "the cluster total");
    assert!(mine.queues.iter().any(|q| !q.pending.is_zero()), "the scenario has pending demand");
}
