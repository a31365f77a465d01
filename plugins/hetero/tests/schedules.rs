//! Hand-checked schedules on small clusters, through the real engine: the plugin is linked
//! statically and every decision it makes passes the engine's validation (each test ends by
//! checking that nothing was rejected and no call failed).
//!
//! Nodes have 2 CPUs and 8 GiB, and every container asks for a whole node, as in the seed's
//! cluster; so "k containers" means "k machines".

use gantry_engine::{
    AppId, AppSpec, Command, ContainerId, Engine, EngineConfig, Event, NodeSpec, Profile, QueueSpec,
    RackAffinity, RequestSpec, Resources, StaticPolicy,
};
use gantry_hetero::Hetero;
use std::collections::BTreeMap;

const GIB: u64 = 1 << 30;
const S: u64 = 1000;

/// What a test job asks for.
#[derive(Clone, Copy)]
struct Spec {
    k: u32,
    gpu: bool,
    rack: bool,
    fast_s: u64,
    slow_s: u64,
    deadline_s: Option<u64>,
    /// Pins the job to one rack (a selector on the nodes' `rack` label).
    on: Option<&'static str>,
    /// All or nothing (default) or as many as fit.
    gang: bool,
    /// Leaf queue [default: `root.default`].
    queue: Option<&'static str>,
}

impl Spec {
    /// A gang of `k` whole nodes without preferences.
    fn plain(k: u32, run_s: u64) -> Spec {
        Spec {
            k,
            gpu: false,
            rack: false,
            fast_s: run_s,
            slow_s: run_s,
            deadline_s: None,
            on: None,
            gang: true,
            queue: None,
        }
    }
    /// The seed's GPU job: prefers `gpu = true` machines.
    fn gpu(k: u32, fast_s: u64, slow_s: u64) -> Spec {
        Spec { gpu: true, fast_s, slow_s, ..Spec::plain(k, fast_s) }
    }
    /// The seed's MPI job: prefers one rack.
    fn mpi(k: u32, fast_s: u64, slow_s: u64) -> Spec {
        Spec { rack: true, fast_s, slow_s, ..Spec::plain(k, fast_s) }
    }
}

/// An engine with the plugin, a cluster, and the jobs by name.
struct Bed {
    engine: Engine,
    now_ms: u64,
    names: BTreeMap<u64, String>,
    apps: BTreeMap<String, AppId>,
    /// Job name → (container, node name) of its launches.
    placed: BTreeMap<String, Vec<(ContainerId, String)>>,
}

impl Bed {
    /// `racks`: (rack name, nodes, GPU machines?), nodes named `<rack>-<i>`, in this order.
    fn new(config: &str, racks: &[(&str, usize, bool)]) -> Bed {
        Self::with_queues(config, racks, Vec::new())
    }

    /// [`Bed::new`] with these queues below `root`.
    fn with_queues(config: &str, racks: &[(&str, usize, bool)], queues: Vec<QueueSpec>) -> Bed {
        let plugin = StaticPolicy::<Hetero>::create(config).expect("config accepted");
        let profile = Profile { place: Some(0), ..Profile::default() };
        let engine_config = EngineConfig { seed: 7, queues, ..EngineConfig::default() };
        let mut engine = Engine::new(engine_config, vec![Box::new(plugin)], profile).expect("engine");
        for &(rack, n, gpu) in racks {
            for i in 0..n {
                let mut labels = vec![("rack".to_owned(), rack.to_owned())];
                if gpu {
                    labels.push(("gpu".into(), "true".into()));
                }
                let spec = NodeSpec {
                    name: format!("{rack}-{i}"),
                    rack: rack.into(),
                    labels,
                    capacity: Resources::new(2000, 8 * GIB, 0),
                    gpu_list: Vec::new(),
                };
                engine.handle(0, Event::NodeRegistered(spec)).expect("register");
            }
        }
        Bed { engine, now_ms: 0, names: BTreeMap::new(), apps: BTreeMap::new(), placed: BTreeMap::new() }
    }

    fn submit(&mut self, name: &str, s: Spec) {
        let request = RequestSpec {
            resources: Resources::new(2000, 8 * GIB, 0),
            count: s.k,
            gang: s.gang,
            selector: s.on.map(|r| vec![("rack".to_owned(), r.to_owned())]).unwrap_or_default(),
            preferred: if s.gpu { vec![("gpu".into(), "true".into())] } else { Vec::new() },
            rack_affinity: if s.rack { RackAffinity::Preferred } else { RackAffinity::None },
            expected_ms: s.fast_s * S,
            slow_ms: s.slow_s * S,
            deadline_ms: s.deadline_s.map_or(0, |d| self.now_ms + d * S),
            ..RequestSpec::default()
        };
        let spec = AppSpec {
            name: name.into(),
            queue: s.queue.unwrap_or("root.default").into(),
            user: "test".into(),
            requests: vec![request],
            ..AppSpec::default()
        };
        let cmds = self.engine.handle(self.now_ms, Event::AppSubmitted(spec)).expect("submit");
        let app = Command::accepted_app(&cmds).expect("accepted");
        self.names.insert(app.0, name.into());
        self.apps.insert(name.into(), app);
    }

    /// Runs a scheduling cycle at `at_s`; the launched containers start at once.
    fn tick(&mut self, at_s: u64) {
        self.now_ms = at_s * S;
        let cmds = self.engine.handle(self.now_ms, Event::Tick).expect("tick");
        for c in cmds {
            if let Command::Launch { container, app, node, .. } = c {
                let name = self.names[&app.0].clone();
                let st = self.engine.state();
                let node = st.str(st.nodes()[node.0 as usize].name).to_owned();
                self.placed.entry(name).or_default().push((container, node));
                self.engine.handle(self.now_ms, Event::ContainerStarted { container }).expect("started");
            }
        }
    }

    /// Ends a job's containers successfully at `at_s`.
    fn finish(&mut self, name: &str, at_s: u64) {
        self.now_ms = at_s * S;
        for (c, _) in self.placed.get(name).cloned().unwrap_or_default() {
            self.engine.handle(self.now_ms, Event::container_exited(c, 0)).expect("exit");
        }
    }

    /// The nodes a job got (sorted), empty if it has not started.
    fn nodes(&self, name: &str) -> Vec<String> {
        let mut v: Vec<String> =
            self.placed.get(name).map(|p| p.iter().map(|x| x.1.clone()).collect()).unwrap_or_default();
        v.sort();
        v
    }

    fn started(&self, name: &str) -> bool {
        !self.nodes(name).is_empty()
    }

    /// Nothing the plugin decided was refused, and no call failed.
    fn assert_clean(&self) {
        let st = self.engine.stats();
        assert_eq!(st.rejected.total(), 0, "rejected decisions: {:?}", st.rejected);
        assert_eq!(st.policy_failures, 0);
        assert_eq!(st.fallback_placements, 0);
    }
}

fn all_racks_of(nodes: &[String], prefix: &str) -> bool {
    nodes.iter().all(|n| n.starts_with(prefix))
}

const POLICIES: [&str; 5] = ["fcfs", "fcfs-random", "fcfs-hetero", "sjf-hetero", "greedy-utility"];
const PLACEMENTS: [&str; 3] = ["none", "soft", "hard"];

#[test]
fn a_gang_never_starts_partially_under_any_policy_or_mode() {
    for policy in POLICIES {
        for placement in PLACEMENTS {
            let cfg = format!(r#"{{"policy":"{policy}","placement":"{placement}"}}"#);
            let mut b = Bed::new(&cfg, &[("a", 4, false)]);
            b.submit("first", Spec::plain(2, 100));
            b.tick(0);
            b.submit("gang", Spec::plain(4, 50));
            for t in 1..5 {
                b.tick(t);
                assert!(!b.started("gang"), "{cfg}: 4-gang started with 2 nodes free: {:?}", b.nodes("gang"));
            }
            b.finish("first", 100);
            b.tick(100);
            assert_eq!(b.nodes("gang").len(), 4, "{cfg}: the gang starts whole once 4 nodes are free");
            b.assert_clean();
        }
    }
}

#[test]
fn hard_placement_never_leaves_the_preferred_resources() {
    for policy in POLICIES {
        let cfg = format!(r#"{{"policy":"{policy}","placement":"hard"}}"#);
        let mut b = Bed::new(&cfg, &[("gpu", 2, true), ("a", 4, false), ("b", 4, false)]);
        b.submit("holder", Spec::gpu(1, 100, 200));
        // One busy node in each plain rack: 6 plain nodes free, but no rack has 4.
        b.submit("busy-a", Spec { on: Some("a"), ..Spec::plain(1, 500) });
        b.submit("busy-b", Spec { on: Some("b"), ..Spec::plain(1, 500) });
        b.tick(0);
        assert!(all_racks_of(&b.nodes("holder"), "gpu-"), "{cfg}: holder on a GPU node");
        b.submit("gpu2", Spec::gpu(2, 40, 70));
        b.submit("mpi4", Spec::mpi(4, 60, 80));
        for t in 1..10 {
            b.tick(t);
            assert!(!b.started("gpu2"), "{cfg}: gpu2 placed off preference: {:?}", b.nodes("gpu2"));
            assert!(!b.started("mpi4"), "{cfg}: mpi4 placed across racks: {:?}", b.nodes("mpi4"));
        }
        b.finish("holder", 100);
        b.tick(100);
        assert_eq!(b.nodes("gpu2"), ["gpu-0", "gpu-1"], "{cfg}");
        b.finish("busy-b", 120);
        b.tick(120);
        assert_eq!(b.nodes("mpi4"), ["b-0", "b-1", "b-2", "b-3"], "{cfg}");
        b.assert_clean();
    }
}

#[test]
fn soft_placement_runs_off_preference_when_the_preferred_nodes_are_busy() {
    let mut b = Bed::new(
        r#"{"policy":"fcfs-hetero","placement":"soft","improvements":"none"}"#,
        &[("gpu", 2, true), ("a", 4, false)],
    );
    b.submit("holder", Spec::gpu(2, 100, 200));
    b.tick(0);
    b.submit("gpu2", Spec::gpu(2, 40, 70));
    b.tick(1);
    assert_eq!(b.nodes("gpu2"), ["a-0", "a-1"]);
    b.assert_clean();
}

#[test]
fn fcfs_is_strict_and_backfilling_only_takes_what_the_head_does_not_need() {
    // Five plain nodes; `running` holds a-0 and a-1 until t = 100. The 4-gang `head` cannot
    // start; strict FCFS starts nothing behind it.
    let setup = |cfg: &str| {
        let mut b = Bed::new(cfg, &[("a", 5, false)]);
        b.submit("running", Spec::plain(2, 100));
        b.tick(0);
        assert_eq!(b.nodes("running"), ["a-0", "a-1"]);
        b.submit("head", Spec::plain(4, 100));
        b.submit("long", Spec::plain(1, 500));
        b.submit("long2", Spec::plain(1, 500));
        b.submit("short", Spec::plain(1, 50));
        b.tick(1);
        b
    };
    let strict = setup(r#"{"policy":"fcfs","improvements":"none"}"#);
    for name in ["head", "long", "long2", "short"] {
        assert!(!strict.started(name), "strict FCFS started {name} behind a blocked head");
    }
    strict.assert_clean();

    // EASY backfilling: the head holds a-0..a-3 from t = 100. `long` fits on a-4, which the
    // head does not need; `long2` would delay the head; `short` ends before t = 100.
    let mut easy = setup(r#"{"policy":"fcfs","improvements":"none","backfill":true}"#);
    assert_eq!(easy.nodes("long"), ["a-4"]);
    assert!(!easy.started("long2"), "long2 would delay the head: {:?}", easy.nodes("long2"));
    assert!(easy.started("short"));
    let short_node = easy.nodes("short")[0].clone();
    easy.finish("short", 51);
    easy.finish("running", 100);
    easy.tick(100);
    assert_eq!(
        easy.nodes("head"),
        ["a-0", "a-1", "a-2", "a-3"],
        "the head starts on time (short was on {short_node})"
    );
    easy.assert_clean();
}

#[test]
fn sjf_orders_by_run_time_or_by_machine_seconds() {
    // Four nodes: `wide` (4 × 100 s = 400 machine-seconds) and `narrow` (1 × 150 s) compete.
    let run = |cfg: &str| {
        let mut b = Bed::new(cfg, &[("a", 4, false)]);
        b.submit("wide", Spec::plain(4, 100));
        b.submit("narrow", Spec::plain(1, 150));
        b.tick(0);
        b.assert_clean();
        (b.started("wide"), b.started("narrow"))
    };
    assert_eq!(run(r#"{"policy":"sjf-hetero","improvements":"none"}"#), (true, false));
    assert_eq!(
        run(r#"{"policy":"sjf-hetero","improvements":"none","sjf_machine_seconds":true}"#),
        (false, true)
    );
}

#[test]
fn no_mixing_keeps_a_slow_job_off_the_few_preferred_nodes() {
    let run = |no_mixing: bool| {
        let cfg = format!(
            r#"{{"policy":"fcfs-hetero","placement":"soft","improvements":"none","no_mixing":{no_mixing}}}"#
        );
        let mut b = Bed::new(&cfg, &[("gpu", 2, true), ("a", 4, false)]);
        b.submit("holder", Spec::gpu(1, 100, 200));
        b.tick(0);
        b.submit("gpu2", Spec::gpu(2, 40, 70));
        b.tick(1);
        b.assert_clean();
        b.nodes("gpu2")
    };
    assert_eq!(run(false), ["a-0", "gpu-1"], "without the switch the free GPU node is mixed in");
    assert_eq!(run(true), ["a-0", "a-1"]);
}

#[test]
fn protect_preferred_keeps_rack_jobs_off_the_gpu_rack() {
    let run = |protect: bool| {
        let cfg = format!(
            r#"{{"policy":"fcfs-hetero","placement":"hard","improvements":"none","protect_preferred":{protect}}}"#
        );
        let mut b = Bed::new(&cfg, &[("gpu", 4, true), ("a", 5, false)]);
        // A GPU job has been seen, so GPU machines are known to be wanted.
        b.submit("gpu1", Spec::gpu(1, 10, 20));
        b.tick(0);
        b.finish("gpu1", 10);
        b.submit("mpi4", Spec::mpi(4, 60, 80));
        b.tick(10);
        b.assert_clean();
        b.nodes("mpi4")
    };
    // Best fit alone prefers the GPU rack (4 free, exactly enough) over the plain one (5 free).
    assert_eq!(run(false), ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]);
    assert_eq!(run(true), ["a-0", "a-1", "a-2", "a-3"]);
}

#[test]
fn wait_for_better_waits_only_when_waiting_finishes_sooner() {
    // `holder` has both GPU nodes until `free_at`; gpu2 runs 39 s there, 71 s elsewhere.
    let run = |free_at: u64| {
        let cfg =
            r#"{"policy":"fcfs-hetero","placement":"soft","improvements":"none","wait_for_better":true}"#;
        let mut b = Bed::new(cfg, &[("gpu", 2, true), ("a", 4, false)]);
        b.submit("holder", Spec::gpu(2, free_at, free_at));
        b.tick(0);
        b.submit("gpu2", Spec::gpu(2, 39, 71));
        b.tick(1);
        let at_once = b.nodes("gpu2");
        b.finish("holder", free_at);
        b.tick(free_at);
        b.assert_clean();
        (at_once, b.nodes("gpu2"))
    };
    // Free at 30: 30 + 39 = 69 < 1 + 71, so it waits and then runs fast.
    let (now, later) = run(30);
    assert!(now.is_empty(), "started slow at once: {now:?}");
    assert_eq!(later, ["gpu-0", "gpu-1"]);
    // Free at 40: 40 + 39 = 79 > 72, so it runs slow at once.
    let (now, _) = run(40);
    assert_eq!(now, ["a-0", "a-1"]);
}

#[test]
fn hopeless_starts_are_skipped_only_with_the_switch() {
    let run = |skip: bool| {
        let cfg = format!(
            r#"{{"policy":"fcfs-hetero","placement":"soft","improvements":"none","skip_hopeless":{skip}}}"#
        );
        let mut b = Bed::new(&cfg, &[("gpu", 2, true), ("a", 4, false)]);
        b.submit("holder", Spec::gpu(2, 80, 80));
        b.tick(0);
        // Deadline 100 s: slow (200 s) misses it now, fast (50 s) misses it from t = 80.
        b.submit("doomed", Spec { deadline_s: Some(100), ..Spec::gpu(2, 50, 200) });
        b.tick(0);
        b.assert_clean();
        b.started("doomed")
    };
    assert!(run(false));
    assert!(!run(true));
}

#[test]
fn a_hopeless_job_does_not_hold_up_strict_fcfs() {
    // doomed wants 3 GPU machines (there are 2) by t = 100 but runs 200 s elsewhere: nothing
    // can finish it in time, so under strict FCFS it must not stop `next` either.
    let mut b = Bed::new(
        r#"{"policy":"fcfs-hetero","placement":"soft","improvements":"none","skip_hopeless":true}"#,
        &[("gpu", 2, true), ("a", 3, false)],
    );
    b.submit("holder", Spec::gpu(2, 80, 80));
    b.tick(0);
    b.submit("doomed", Spec { deadline_s: Some(100), ..Spec::gpu(3, 50, 200) });
    b.submit("next", Spec::plain(1, 30));
    b.tick(1);
    assert!(!b.started("doomed"));
    assert_eq!(b.nodes("next"), ["a-0"]);
    b.assert_clean();
}

#[test]
fn a_plain_request_gets_what_its_queue_maximum_allows_and_no_more() {
    // root.small may use half of the 4 nodes: of 4 containers, 2 are placed now.
    let queues = vec![
        QueueSpec { path: "root.default".into(), guaranteed: 0.5, maximum: 1.0 },
        QueueSpec { path: "root.small".into(), guaranteed: 0.5, maximum: 0.5 },
    ];
    let mut b = Bed::with_queues(r#"{}"#, &[("a", 4, false)], queues);
    b.submit("four", Spec { gang: false, queue: Some("root.small"), ..Spec::plain(4, 100) });
    b.tick(0);
    assert_eq!(b.nodes("four").len(), 2);
    b.assert_clean();
}

#[test]
fn random_placement_is_seeded_and_still_honours_hard_preferences() {
    let run = |placement: &str| {
        let cfg = format!(r#"{{"policy":"fcfs-random","placement":"{placement}"}}"#);
        let mut b = Bed::new(&cfg, &[("gpu", 3, true), ("a", 6, false), ("b", 6, false)]);
        for i in 0..4 {
            b.submit(&format!("j{i}"), Spec::gpu(2, 10, 20));
        }
        b.tick(0);
        b.assert_clean();
        (0..4).map(|i| b.nodes(&format!("j{i}"))).collect::<Vec<_>>()
    };
    let none = run("none");
    assert_eq!(none, run("none"), "same seed, same placements");
    let first_fit: Vec<Vec<String>> =
        vec![vec!["gpu-0".into(), "gpu-1".into()], vec!["a-0".into(), "gpu-2".into()]];
    assert_ne!(none[..2], first_fit[..], "random placement looks like first fit");
    let hard = run("hard");
    assert!(all_racks_of(&hard[0], "gpu-"), "{hard:?}");
    assert!(hard[1..].iter().all(Vec::is_empty), "only one 2-gang fits on 3 GPU nodes: {hard:?}");
}

#[test]
fn greedy_utility_starts_the_job_that_earns_most_now() {
    // Two 2-gangs of 50 s wait for the two nodes `holder` frees at t = 20. `old` was submitted
    // at 0, `new` at 10: started at 20, old earns 1200 − 70 and new 1200 − 60, so greedy picks
    // `new` (the seed's greedy favours the least waited); FCFS picks `old`.
    let run = |policy: &str| {
        let cfg = format!(r#"{{"policy":"{policy}","placement":"soft","improvements":"none"}}"#);
        let mut b = Bed::new(&cfg, &[("a", 2, false)]);
        b.submit("holder", Spec::plain(2, 20));
        b.tick(0);
        b.submit("old", Spec::plain(2, 50));
        b.tick(1);
        b.now_ms = 10 * S;
        b.submit("new", Spec::plain(2, 50));
        b.tick(10);
        b.finish("holder", 20);
        b.tick(20);
        b.assert_clean();
        (b.started("old"), b.started("new"))
    };
    assert_eq!(run("greedy-utility"), (false, true));
    assert_eq!(run("fcfs-hetero"), (true, false));
}
