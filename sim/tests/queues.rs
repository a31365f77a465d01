//! Per-queue outputs and preemption in the simulator: a preempted container keeps its resources
//! for its grace period and its work starts again from scratch; `queues.csv`, `queues.svg` and
//! the summary's `queues` section say what each leaf queue held, asked for, was guaranteed and
//! would ideally get, when it reached its guarantee, and what was taken from it.

use gantry_engine::{
    Engine, EngineConfig, NodeSpec, Policy, Profile, QueueSpec, RackAffinity, Resources, StaticPolicy,
};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use gantry_sim::queues::QueueSample;
use gantry_sim::report::{ReportOptions, summarise, write_all};
use gantry_sim::sim::{JobOutcome, SimOptions, SimResult, run};
use gantry_sim::trace::{Job, Stage};

const S: u64 = 1_000;
const GIB: u64 = 1 << 30;

/// Preempts, once, the `victims` newest running containers of queue `from` as soon as queue
/// `for_queue` has a request waiting, each with `grace_ms`.
struct PreemptOnce {
    from: &'static str,
    for_queue: &'static str,
    victims: usize,
    grace_ms: u64,
    done: bool,
}

impl Plugin for PreemptOnce {
    const NAME: &'static core::ffi::CStr = c"preempt-once";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: Hooks = Hooks { admit: false, order: false, place: false, rebalance: true, reserve: false };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Err(PluginError::new("built by the test"))
    }

    fn rebalance(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        if self.done {
            return Ok(());
        }
        let queue_of = |app: u32| {
            view.apps
                .get(app as usize)
                .and_then(|a| view.queues.get(a.queue as usize))
                .map(|q| view.str(q.name))
        };
        if !view.requests.iter().any(|r| r.placed < r.count && queue_of(r.app) == Some(self.for_queue)) {
            return Ok(());
        }
        let mut running: Vec<(u64, u32)> = view
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.state == GANTRY_CONTAINER_RUNNING && queue_of(c.app) == Some(self.from))
            .map(|(i, c)| (c.id, i as u32))
            .collect();
        running.sort_unstable();
        for &(_, i) in running.iter().rev().take(self.victims) {
            out.preempt(i, self.grace_ms);
        }
        self.done = true;
        Ok(())
    }
}

fn node(name: &str, cores: u64, mem_gib: u64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        rack: "r0".into(),
        labels: Vec::new(),
        capacity: Resources::new(cores * 1000, mem_gib * GIB, 0),
        gpu_list: Vec::new(),
    }
}

fn job(name: &str, queue: &str, at: u64, count: u32, duration: u64) -> Job {
    Job {
        name: name.into(),
        submit_ms: at,
        queue: queue.into(),
        user: "u".into(),
        class: queue.into(),
        priority: 0,
        time_limit_ms: None,
        stages: vec![Stage {
            resources: Resources::new(1000, GIB, 0),
            count,
            gang: false,
            selector: Vec::new(),
            preferred: Vec::new(),
            rack_affinity: RackAffinity::None,
            duration_ms: duration,
            slow_duration_ms: duration,
        }],
    }
}

fn queues(specs: &[(&str, f64, f64)]) -> Vec<QueueSpec> {
    specs.iter().map(|&(p, g, m)| QueueSpec { path: p.into(), guaranteed: g, maximum: m }).collect()
}

/// Queues a and b (half each, both may take everything) on one node of 4 cores / 4 GiB, and the
/// preempting plugin: two of b's containers for a, with a 5 s grace, called every second.
fn two_queue_engine() -> Engine {
    let config = EngineConfig {
        queues: queues(&[("root.a", 0.5, 1.0), ("root.b", 0.5, 1.0)]),
        rebalance_interval_ms: S,
        ..EngineConfig::default()
    };
    let plugin =
        PreemptOnce { from: "root.b", for_queue: "root.a", victims: 2, grace_ms: 5 * S, done: false };
    let policies: Vec<Box<dyn Policy>> = vec![Box::new(StaticPolicy::new(plugin))];
    Engine::new(config, policies, Profile { rebalance: Some(0), ..Profile::default() }).expect("engine")
}

fn at<'a>(r: &'a SimResult, t_ms: u64, queue: &str) -> &'a QueueSample {
    let leaf = r.queues.leaves.iter().position(|l| l.path == queue).expect("leaf queue");
    r.queues.samples.iter().find(|s| s.t_ms == t_ms && s.leaf == leaf).expect("sample")
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a_preempted_container_holds_its_resources_for_the_grace_and_its_work_restarts() {
    // b fills the node with four 100 s containers at 0; a asks for two at 10 s. a has the
    // higher priority: in the engine's default order b's victims, submitted first, would
    // otherwise take their room back (a preemption policy orders queues below their guarantee
    // first, which this test's plugin does not).
    let mut a = job("a", "root.a", 10 * S, 2, 20 * S);
    a.priority = 1;
    let jobs = [job("b", "root.b", 0, 4, 100 * S), a];
    let nodes = [node("n0", 4, 4)];
    let options = SimOptions { sample_ms: S, ..SimOptions::default() };
    let r = run(&mut || Ok(two_queue_engine()), &nodes, &jobs, &options).expect("run");
    let (b, a) = (&r.jobs[0], &r.jobs[1]);
    // Preempted at 10 s, the victims exit when their 5 s grace is over: a starts at 15 s.
    assert_eq!((a.start_ms, a.end_ms, a.outcome), (Some(15 * S), Some(35 * S), JobOutcome::Completed));
    // b's two victims run again once a is done, for their whole 100 s: 35 + 100.
    assert_eq!((b.end_ms, b.preempted, b.outcome), (Some(135 * S), 2, JobOutcome::Completed));
    assert_eq!(r.preemptions, 2);
    assert_eq!(r.launches, 4 + 2 + 2);

    // During the grace b still holds the whole node; its two victims are pending again too.
    let (a12, b12) = (at(&r, 12 * S, "root.a"), at(&r, 12 * S, "root.b"));
    assert!(near(b12.used.memory, 1.0) && near(b12.used.cpu, 1.0), "{b12:?}");
    assert!(near(b12.pending.memory, 0.5), "{b12:?}");
    assert!(near(a12.used.memory, 0.0) && near(a12.pending.memory, 0.5), "{a12:?}");
    // Ideal: a wants half (its guarantee), b the rest.
    assert!(near(a12.ideal.memory, 0.5) && near(b12.ideal.memory, 0.5), "{a12:?} {b12:?}");
    assert!(near(a12.guaranteed.memory, 0.5) && near(a12.guaranteed.cpu, 0.5));
    // After the exits a holds its half; b's victims wait.
    let (a16, b16) = (at(&r, 16 * S, "root.a"), at(&r, 16 * S, "root.b"));
    assert!(near(a16.used.memory, 0.5) && near(a16.pending.memory, 0.0), "{a16:?}");
    assert!(near(b16.used.memory, 0.5) && near(b16.pending.memory, 0.5), "{b16:?}");
    // Alone before a arrives, b's ideal is the whole node.
    assert!(near(at(&r, 5 * S, "root.b").ideal.memory, 1.0));
    assert!(near(at(&r, 5 * S, "root.a").ideal.memory, 0.0));

    let s = summarise(&r, &ReportOptions::default());
    let qa = &s.queues["root.a"];
    let qb = &s.queues["root.b"];
    assert_eq!(
        (qb.preempted_containers, qb.preempted.memory_bytes, qb.preempted.cpu_millis),
        (2, 2 * GIB, 2000)
    );
    assert_eq!(qa.preempted_containers, 0);
    assert_eq!((qa.guaranteed, qa.maximum, qa.first_submit_s), (0.5, 1.0, Some(10.0)));
    // a first holds all of its guarantee at 15 s; b held its own from the start.
    let m = &qa.reached_guarantee_s.memory;
    assert_eq!((m.p50, m.p90, m.p100), (Some(15.0), Some(15.0), Some(15.0)));
    assert_eq!(qa.reached_guarantee_s.cpu.p100, Some(15.0));
    assert_eq!(qb.reached_guarantee_s.memory.p100, Some(0.0));
}

#[test]
fn a_victim_that_ends_during_its_grace_frees_its_room_then_and_runs_again() {
    // b's containers would end at 12 s, inside the 5 s grace that starts at 10 s.
    let jobs = [job("b", "root.b", 0, 4, 12 * S), job("a", "root.a", 10 * S, 2, 20 * S)];
    let r =
        run(&mut || Ok(two_queue_engine()), &[node("n0", 4, 4)], &jobs, &SimOptions::default()).expect("run");
    assert_eq!(r.jobs[1].start_ms, Some(12 * S), "the natural end frees the room");
    // The engine put the victims' request back when it asked them to stop, so their work runs
    // again (as in the daemon): from 12 s, beside a, for 12 s.
    assert_eq!(r.jobs[0].end_ms, Some(24 * S));
    assert_eq!(r.launches, 4 + 2 + 2);
}

#[test]
fn the_ideal_follows_the_hierarchy_and_the_files_are_written() {
    // root.x (60 %: x.p and x.q, half each) and root.y (40 %); 10 cores / 10 GiB.
    let config = EngineConfig {
        queues: queues(&[
            ("root.x", 0.6, 1.0),
            ("root.y", 0.4, 1.0),
            ("root.x.p", 0.5, 1.0),
            ("root.x.q", 0.5, 1.0),
        ]),
        ..EngineConfig::default()
    };
    let mut engine = || Engine::builtin(config.clone()).map_err(|e| e.to_string());
    // x.p takes the whole cluster; y arrives at 30 s and waits (no preemption); x.q never asks.
    let jobs = [job("p", "root.x.p", 0, 10, 100 * S), job("y", "root.y", 30 * S, 10, 10 * S)];
    let options = SimOptions { sample_ms: 10 * S, ..SimOptions::default() };
    let r = run(&mut engine, &[node("n0", 10, 10)], &jobs, &options).expect("run");
    let paths: Vec<&str> = r.queues.leaves.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["root.y", "root.x.p", "root.x.q"], "leaves in the engine's queue order");
    // Before y: x.p's ideal is everything. With y: x's 60 % all to x.p (x.q wants nothing).
    assert!(near(at(&r, 20 * S, "root.x.p").ideal.memory, 1.0));
    let (p, q, y) = (at(&r, 40 * S, "root.x.p"), at(&r, 40 * S, "root.x.q"), at(&r, 40 * S, "root.y"));
    assert!(near(p.ideal.memory, 0.6) && near(p.ideal.cpu, 0.6), "{p:?}");
    assert!(near(q.ideal.memory, 0.0) && near(y.ideal.memory, 0.4), "{q:?} {y:?}");
    assert!(near(p.used.memory, 1.0) && near(y.pending.memory, 1.0) && near(y.used.memory, 0.0));
    assert!(near(p.guaranteed.memory, 0.3) && near(y.guaranteed.memory, 0.4), "{p:?} {y:?}");
    let s = summarise(&r, &ReportOptions::default());
    assert!(near(s.queues["root.x.p"].guaranteed, 0.3));
    // y first holds anything at 100 s, when x.p's containers end.
    assert_eq!(s.queues["root.y"].reached_guarantee_s.memory.p50, Some(100.0));
    assert_eq!(s.queues["root.x.q"].reached_guarantee_s.memory.p50, None, "never asked");

    let dir = tempfile::tempdir().expect("tempdir");
    write_all(&dir.path().join("one"), &r, &ReportOptions::default()).expect("write");
    write_all(&dir.path().join("two"), &r, &ReportOptions::default()).expect("write");
    for f in ["queues.csv", "queues.svg", "summary.json"] {
        let one = std::fs::read(dir.path().join("one").join(f)).expect("read");
        let two = std::fs::read(dir.path().join("two").join(f)).expect("read");
        assert!(!one.is_empty() && one == two, "{f}");
    }
    let csv = std::fs::read_to_string(dir.path().join("one/queues.csv")).expect("csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "t_s,queue,cpu_used,memory_used,cpu_pending,memory_pending,cpu_guaranteed,memory_guaranteed,cpu_ideal,memory_ideal"
        )
    );
    assert_eq!(lines.clone().count(), r.queues.samples.len());
    assert!(
        csv.contains("\n40.000,root.x.p,1.0000,1.0000,0.0000,0.0000,0.3000,0.3000,0.6000,0.6000\n"),
        "{csv}"
    );
    assert!(
        csv.contains("\n40.000,root.y,0.0000,0.0000,1.0000,1.0000,0.4000,0.4000,0.4000,0.4000\n"),
        "{csv}"
    );
    let svg = std::fs::read_to_string(dir.path().join("one/queues.svg")).expect("svg");
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    for title in ["Memory held by each leaf queue", "root.x.p: memory (guaranteed 30 %)", "root.y: memory"] {
        assert!(svg.contains(title), "{title}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("one/summary.json")).expect("json"))
            .expect("summary.json");
    let y = &json["queues"]["root.y"];
    assert_eq!(y["reached_guarantee_s"]["memory"]["50"], 100.0, "{y}");
    assert_eq!(y["preempted_containers"], 0);
    assert!(y["reached_guarantee_s"]["cpu"]["100"].is_number());
}
