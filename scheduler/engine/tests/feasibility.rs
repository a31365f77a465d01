//! The SDK's `Feasibility` promises a plugin that a placement it accepts is one the host accepts.
//! Property: on random clusters (racks, labels, nodes that do not schedule, nested queues with
//! maxima, apps with gangs, same-rack and selector requests, some already running), a plugin
//! that emits only what `Feasibility` accepted — trying random requests and nodes, interleaving
//! requests within one call — never has a decision refused, and every placement it makes
//! launches. Deterministic: a fixed proptest seed.

use gantry_engine::rng::SplitMix64;
use gantry_engine::{
    AppSpec, Command, ContainerId, Engine, EngineConfig, Event, NodeCondition, NodeSpec, Profile, QueueSpec,
    RackAffinity, RequestSpec, Resources, StaticPolicy,
};
use gantry_sdk::{Decisions, Feasibility, Hooks, Plugin, PluginError, View};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const GIB: u64 = 1 << 30;
const LABELS: [(&str, &str); 3] = [("zone", "a"), ("zone", "b"), ("disk", "ssd")];

/// Places at random, but only what `Feasibility` accepts; counts what it emitted.
struct Careful {
    salt: u64,
    emitted: Arc<AtomicU64>,
}

impl Plugin for Careful {
    const NAME: &'static core::ffi::CStr = c"careful";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Err(PluginError::new("built by the test"))
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let mut rng = SplitMix64::new(view.seed ^ self.salt);
        let mut fit = Feasibility::new(view);
        let nodes = view.nodes.len() as u64;
        if nodes == 0 {
            return Ok(());
        }
        let pick = |rng: &mut SplitMix64| (rng.next_u64() % (nodes + 1)) as u32; // may be out of range
        let mut order: Vec<u32> = view.pending.to_vec();
        // Rounds over the pending requests in a shuffled order, one attempt each: decisions of
        // different requests interleave within the call.
        for _round in 0..6 {
            for i in (1..order.len()).rev() {
                order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            for &r in &order {
                if fit.is_gang(r) {
                    if fit.placed(r) > 0 {
                        continue;
                    }
                    let count = view.requests[r as usize].count;
                    let members: Vec<u32> = (0..count).map(|_| pick(&mut rng)).collect();
                    if fit.try_place_gang(r, &members).is_ok() {
                        members.iter().for_each(|&n| out.place(r, n));
                    }
                } else {
                    let n = pick(&mut rng);
                    if fit.try_place(r, n).is_ok() {
                        out.place(r, n);
                    }
                }
            }
        }
        self.emitted.fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct NodeGen {
    rack: u8,
    labels: u8,
    cores: u64,
    mem_gib: u64,
    condition: u8,
}

#[derive(Debug, Clone)]
struct RequestGen {
    millis: u64,
    mem_half_gib: u64,
    count: u32,
    gang: bool,
    same_rack: bool,
    selector: Option<u8>,
}

#[derive(Debug, Clone)]
struct AppGen {
    queue: u8,
    requests: Vec<RequestGen>,
}

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (0u8..3, 0u8..8, 1u64..9, 2u64..33, 0u8..6).prop_map(|(rack, labels, cores, mem_gib, condition)| {
        NodeGen { rack, labels, cores, mem_gib, condition }
    })
}

fn request_gen() -> impl Strategy<Value = RequestGen> {
    (100u64..4000, 1u64..12, 1u32..5, 0u8..10, 0u8..10, prop::option::of(0u8..3)).prop_map(
        |(millis, mem_half_gib, count, gang, same_rack, selector)| RequestGen {
            millis,
            mem_half_gib,
            count,
            gang: gang < 3,
            same_rack: same_rack < 3,
            selector,
        },
    )
}

fn app_gen() -> impl Strategy<Value = AppGen> {
    (0u8..3, prop::collection::vec(request_gen(), 1..3))
        .prop_map(|(queue, requests)| AppGen { queue, requests })
}

const LEAVES: [&str; 3] = ["root.a.x", "root.a.y", "root.b"];

fn engine(maxima: (f64, f64), careful: Careful) -> Engine {
    let q = |path: &str, guaranteed: f64, maximum: f64| QueueSpec { path: path.into(), guaranteed, maximum };
    let config = EngineConfig {
        queues: vec![
            q("root.a", 0.5, maxima.0.max(0.5)),
            q("root.b", 0.5, 1.0),
            q("root.a.x", 0.5, maxima.1.max(0.5)),
            q("root.a.y", 0.5, 1.0),
        ],
        ..EngineConfig::default()
    };
    let profile = Profile { place: Some(0), ..Profile::default() };
    Engine::new(config, vec![Box::new(StaticPolicy::new(careful))], profile).expect("engine")
}

fn check(
    nodes: &[NodeGen],
    apps: &[AppGen],
    maxima: (f64, f64),
    salt: u64,
    exits: u8,
) -> Result<(), TestCaseError> {
    let emitted = Arc::new(AtomicU64::new(0));
    let mut e = engine(maxima, Careful { salt, emitted: Arc::clone(&emitted) });
    for (i, n) in nodes.iter().enumerate() {
        let labels = LABELS
            .iter()
            .enumerate()
            .filter(|(k, _)| n.labels & (1 << k) != 0)
            .map(|(_, (k, v))| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let spec = NodeSpec {
            name: format!("n{i}"),
            rack: ["", "r1", "r2"][n.rack as usize].into(),
            labels,
            capacity: Resources::new(n.cores * 1000, n.mem_gib * GIB, 0),
            gpu_list: vec![],
        };
        e.handle(0, Event::NodeRegistered(spec)).expect("node");
    }
    let mut launched: Vec<ContainerId> = Vec::new();
    let mut t = 1;
    for round in 0..2 {
        for a in apps.iter().skip(round) {
            let spec = AppSpec {
                name: "app".into(),
                queue: LEAVES[a.queue as usize].into(),
                user: "u".into(),
                requests: a
                    .requests
                    .iter()
                    .map(|r| RequestSpec {
                        resources: Resources::new(r.millis, r.mem_half_gib * GIB / 2, 0),
                        count: r.count,
                        gang: r.gang,
                        rack_affinity: if r.same_rack { RackAffinity::Required } else { RackAffinity::None },
                        selector: r
                            .selector
                            .map(|k| vec![(LABELS[k as usize].0.to_owned(), LABELS[k as usize].1.to_owned())])
                            .unwrap_or_default(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            // Refused submissions (nothing could ever hold them) are not this test's business.
            let _ = e.handle(t, Event::AppSubmitted(spec));
        }
        // Some nodes stop scheduling after the first round: views with a mix of states.
        if round == 1 {
            for (i, n) in nodes.iter().enumerate() {
                let state = match n.condition {
                    0 => NodeCondition::Draining,
                    1 => NodeCondition::Unhealthy,
                    _ => continue,
                };
                e.handle(t, Event::NodeStateChanged { node: format!("n{i}"), state }).expect("condition");
            }
        }
        t += 1;
        let before = e.stats().placements;
        let commands = e.handle(t, Event::Tick).expect("tick");
        let rejected = e.stats().rejected.clone();
        prop_assert_eq!(rejected.total(), 0, "a placement Feasibility accepted was refused: {:?}", rejected);
        prop_assert_eq!(e.stats().fallback_placements, 0);
        prop_assert_eq!(e.stats().placements, emitted.load(Ordering::Relaxed), "every placement launched");
        prop_assert!(e.stats().placements >= before);
        e.state().check_invariants().map_err(TestCaseError::fail)?;
        for c in &commands {
            if let Command::Launch { container, .. } = c {
                launched.push(*container);
            }
        }
        // A few containers start (same-rack requests then have placed containers) and some end.
        for (k, c) in launched.iter().enumerate() {
            t += 1;
            let _ = e.handle(t, Event::ContainerStarted { container: *c });
            if (k as u8) < exits {
                let _ = e.handle(t, Event::container_exited(*c, 0));
            }
        }
        launched.clear();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(20),
        ..ProptestConfig::default()
    })]

    #[test]
    fn what_feasibility_accepts_the_engine_accepts(
        nodes in prop::collection::vec(node_gen(), 1..10),
        apps in prop::collection::vec(app_gen(), 1..8),
        maxima in (0.0f64..1.0, 0.0f64..1.0),
        salt in any::<u64>(),
        exits in 0u8..4,
    ) {
        check(&nodes, &apps, maxima, salt, exits)?;
    }
}
