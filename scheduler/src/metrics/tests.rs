//! The scheduler's metrics: names, labels, state sets, the engine's figures and the exposition.

use super::*;
use gantry_engine::{AppSpec, Command, EngineConfig, Event, GpuSpec, NodeSpec, Profile, QueueSpec};
use gantry_engine::{Engine, Policy, PolicyError, RejectReason};
use gantry_engine::{NodeCondition, RequestSpec, Resources};
use gantry_sdk::{Decisions, Hooks, View};
use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

const GIB: u64 = 1 << 30;

fn res(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> Resources {
    Resources { cpu_millis, memory_bytes, gpus, reserved: 0 }
}

/// The value of `series` (name and labels, exactly as exposed) in classic text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Like [`sample`], failing the test with the exposition when the series is missing.
fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

#[test]
fn node_conditions_have_a_series_while_they_hold() {
    let m = SchedulerMetrics::new();
    let disk = "gantry_node_condition{node=\"n1\",condition=\"DiskPressure\"}";
    let launches = "gantry_node_condition{node=\"n2\",condition=\"LaunchFailures\"}";
    m.set_node_conditions(&[("n1".into(), "DiskPressure".into()), ("n2".into(), "LaunchFailures".into())]);
    let t = m.encode();
    assert_eq!((value(&t, disk), value(&t, launches)), (1.0, 1.0));
    m.set_node_conditions(&[("n2".into(), "LaunchFailures".into())]);
    let t = m.encode();
    assert_eq!(
        (sample(&t, disk), sample(&t, launches)),
        (None, Some(1.0)),
        "a cleared condition has no series"
    );
}

/// `root.prod` (60 % guaranteed) and `root.dev` (40 %, at most 50 %).
fn config() -> EngineConfig {
    EngineConfig {
        queues: vec![
            QueueSpec { path: "root.prod".into(), guaranteed: 0.6, maximum: 1.0 },
            QueueSpec { path: "root.dev".into(), guaranteed: 0.4, maximum: 0.5 },
        ],
        quarantine_after: 1,
        ..EngineConfig::default()
    }
}

fn node(name: &str, gpus: u32) -> Event {
    Event::NodeRegistered(NodeSpec {
        name: name.into(),
        rack: "r1".into(),
        labels: Vec::new(),
        capacity: res(4000, 8 * GIB, gpus),
        gpu_list: (0..gpus)
            .map(|index| GpuSpec { index, model: "A100".into(), memory_bytes: 80 * GIB })
            .collect(),
    })
}

fn app(queue: &str, resources: Resources, count: u32) -> Event {
    Event::AppSubmitted(AppSpec {
        name: "t".into(),
        queue: queue.into(),
        user: "alice".into(),
        requests: vec![RequestSpec { resources, count, ..RequestSpec::default() }],
        ..AppSpec::default()
    })
}

/// Applies events at `now`, then confirms every container launched as started.
fn run(engine: &mut Engine, now: u64, events: Vec<Event>) {
    for event in events {
        let commands = engine.handle(now, event).expect("event accepted");
        for c in commands {
            if let Command::Launch { container, .. } = c {
                engine.handle(now, Event::ContainerStarted { container }).expect("started");
            }
        }
    }
}

/// Two 4-core nodes (n1 with a GPU) and three apps: prod gets 2 × 1 core and 0.5 core + 1
/// GPU on n1; dev gets one 3-core container on n2, and its second waits, because two would
/// exceed dev's maximum of 4 cores.
fn small_cluster(engine: &mut Engine) {
    run(
        engine,
        0,
        vec![
            node("n1", 1),
            node("n2", 0),
            app("root.prod", res(1000, GIB, 0), 2),
            app("root.dev", res(3000, GIB, 0), 2),
            app("root.prod", res(500, GIB, 1), 1),
        ],
    );
    run(engine, 1, vec![Event::Tick]);
}

/// Runs `promtool check metrics` on `text`; its verdict and everything it printed.
fn promtool_check_metrics(text: &str) -> (bool, String) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}); install Prometheus' promtool (Debian: `prometheus`)")
        });
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
    let out = child.wait_with_output().expect("promtool finishes");
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), printed)
}

/// A plugin that places request 0 on a node that does not exist: malformed, so rejected and
/// counted as a failure.
struct Garbage;

impl Policy for Garbage {
    fn name(&self) -> &str {
        "garbage"
    }
    fn hooks(&self) -> Hooks {
        Hooks { place: true, ..Hooks::NONE }
    }
    fn call(&mut self, _view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        out.place(0, 999);
        Ok(())
    }
}

/// A plugin that panics in every call, as the plugin host reports it.
struct Panicky;

impl Policy for Panicky {
    fn name(&self) -> &str {
        "panicky"
    }
    fn hooks(&self) -> Hooks {
        Hooks { place: true, ..Hooks::NONE }
    }
    fn call(&mut self, _view: &View<'_>, _out: &mut Decisions) -> Result<(), PolicyError> {
        Err(PolicyError::Panicked("plugin panicked: boom at src/lib.rs:1:1".into()))
    }
}

#[test]
fn a_panic_counts_as_a_panic_and_a_failure_of_the_plugin() {
    let metrics = Arc::new(SchedulerMetrics::new());
    let timed = TimedPolicy::new("crashy", Box::new(Panicky), Arc::clone(&metrics));
    let profile = Profile { place: Some(0), ..Profile::default() };
    let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
    small_cluster(&mut engine);
    metrics.update_from_engine(&engine);
    let t = metrics.encode();
    assert_eq!(value(&t, "gantry_scheduler_plugin_panics_total{plugin=\"crashy\"}"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_plugin_failures_total{plugin=\"crashy\"}"), 1.0);
    assert_eq!(engine.policy_status()[0].panics, 1);
}

/// A plugin whose every call ran past its budget, as the plugin host reports it.
struct OverBudget;

impl Policy for OverBudget {
    fn name(&self) -> &str {
        "over-budget"
    }
    fn hooks(&self) -> Hooks {
        Hooks { place: true, ..Hooks::NONE }
    }
    fn call(&mut self, _view: &View<'_>, _out: &mut Decisions) -> Result<(), PolicyError> {
        Err(PolicyError::TimedOut { hook: "place", budget_ms: 200 })
    }
}

/// An engine whose place plugin `slow` times out, after one cycle of [`small_cluster`].
fn timed_out_engine(metrics: &Arc<SchedulerMetrics>) -> Engine {
    let timed = TimedPolicy::new("slow", Box::new(OverBudget), Arc::clone(metrics));
    let profile = Profile { place: Some(0), ..Profile::default() };
    let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
    small_cluster(&mut engine);
    metrics.update_from_engine(&engine);
    engine
}

/// Every family of the classic exposition, with its type.
const FAMILIES: [(&str, &str); 48] = [
    ("gantry_scheduler_pending_requests", "gauge"),
    ("gantry_scheduler_pending_containers", "gauge"),
    ("gantry_scheduler_allocations_total", "counter"),
    ("gantry_scheduler_fallback_placement_cycles_total", "counter"),
    ("gantry_scheduler_cycle_duration_seconds", "histogram"),
    ("gantry_scheduler_plugin_hook_duration_seconds", "histogram"),
    ("gantry_scheduler_rejected_decisions_total", "counter"),
    ("gantry_scheduler_plugin_failures_total", "counter"),
    ("gantry_scheduler_plugin_quarantines_total", "counter"),
    ("gantry_scheduler_plugin_panics_total", "counter"),
    ("gantry_scheduler_plugin_quarantined", "gauge"),
    ("gantry_scheduler_plugin_call_timeouts_total", "counter"),
    ("gantry_scheduler_submissions_total", "counter"),
    ("gantry_queue_guaranteed_cpu_cores", "gauge"),
    ("gantry_queue_guaranteed_memory_bytes", "gauge"),
    ("gantry_queue_guaranteed_gpus", "gauge"),
    ("gantry_queue_maximum_cpu_cores", "gauge"),
    ("gantry_queue_maximum_memory_bytes", "gauge"),
    ("gantry_queue_maximum_gpus", "gauge"),
    ("gantry_queue_used_cpu_cores", "gauge"),
    ("gantry_queue_used_memory_bytes", "gauge"),
    ("gantry_queue_used_gpus", "gauge"),
    ("gantry_queue_pending_cpu_cores", "gauge"),
    ("gantry_queue_pending_memory_bytes", "gauge"),
    ("gantry_queue_pending_gpus", "gauge"),
    ("gantry_queue_preemption_candidates", "gauge"),
    ("gantry_queue_preempted_containers_total", "counter"),
    ("gantry_queue_preempted_cpu_cores_total", "counter"),
    ("gantry_queue_preempted_memory_bytes_total", "counter"),
    ("gantry_queue_preempted_gpus_total", "counter"),
    ("gantry_reservations", "gauge"),
    ("gantry_reservation_events_total", "counter"),
    ("gantry_reservation_plan_cpu_cores", "gauge"),
    ("gantry_reservation_plan_memory_bytes", "gauge"),
    ("gantry_reservation_plan_gpus", "gauge"),
    ("gantry_nodes", "gauge"),
    ("gantry_nodes_idle", "gauge"),
    ("gantry_node_idle_seconds", "gauge"),
    ("gantry_node_condition", "gauge"),
    ("gantry_apps", "gauge"),
    ("gantry_containers", "gauge"),
    ("gantry_agent_streams", "gauge"),
    ("gantry_scheduler_registrations_refused_total", "counter"),
    ("gantry_store_commit_duration_seconds", "histogram"),
    ("gantry_store_batch_size", "histogram"),
    ("gantry_store_pruned_apps_total", "counter"),
    ("gantry_store_prune_duration_seconds", "histogram"),
    ("gantry_scheduler_build_info", "gauge"),
];

/// Metrics with a series in every family: a real engine with a (misbehaving) plugin, and
/// every figure only the daemon sees.
fn populated() -> SchedulerMetrics {
    let metrics = Arc::new(SchedulerMetrics::new());
    // The reservation families first, from an engine with a plan (the engine below has none;
    // their series stay).
    let (mut planned, _) = planned_engine();
    run(&mut planned, 0, vec![node("n1", 0), reservation("atom(1c/1GiB, 1, 2, 10s, 20s)")]);
    metrics.update_from_engine(&planned);
    drop(timed_out_engine(&metrics));
    let timed = TimedPolicy::new("garbage", Box::new(Garbage), Arc::clone(&metrics));
    let profile = Profile { place: Some(0), ..Profile::default() };
    let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
    small_cluster(&mut engine);
    metrics.update_from_engine(&engine);
    drop(engine);
    let metrics = Arc::into_inner(metrics).expect("the engine and its plugin are gone");
    metrics.set_agent_streams(2);
    metrics.set_node_conditions(&[("n1".into(), "DiskPressure".into())]);
    metrics.record_submissions(3);
    metrics.observe_cycle(Duration::from_micros(300));
    metrics.observe_store_commit(Duration::from_millis(2), 3);
    metrics.observe_store_prune(Duration::from_millis(40), 500);
    metrics
}

#[test]
fn every_family_is_exposed_with_help_and_type() {
    let text = populated().encode();
    for (name, kind) in FAMILIES {
        let help = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# HELP {name} ")))
            .unwrap_or_else(|| panic!("no HELP for {name} in:\n{text}"));
        assert!(help.len() > 10, "{name}: HELP {help:?} says too little");
        assert!(text.contains(&format!("\n# TYPE {name} {kind}\n")), "{name} is not a {kind}:\n{text}");
    }
    let families: HashSet<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
    let helps: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
    assert_eq!(helps.len(), families.len(), "families exposed but not listed here: {helps:#?}");
    assert!(!text.contains("# UNIT") && !text.contains("# EOF"), "classic text has no UNIT or EOF");

    let openmetrics = SchedulerMetrics::new().try_encode(Format::OpenMetrics).expect("encodes");
    assert!(openmetrics.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
    assert!(openmetrics.contains("# TYPE gantry_scheduler_allocations counter\n"));
    assert!(openmetrics.contains("# UNIT gantry_scheduler_cycle_duration_seconds seconds\n"));
    assert!(
        openmetrics.contains("gantry_scheduler_build_info{version=\"")
            && text.contains(&format!(
                "gantry_scheduler_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            ))
    );
}

#[test]
fn idle_nodes_have_a_series_only_while_empty_and_not_lost() {
    let mut engine = Engine::builtin(config()).expect("engine");
    run(&mut engine, 1_000, vec![node("n1", 0), node("n2", 0), node("n3", 0)]);
    run(&mut engine, 2_000, vec![app("root.prod", res(1000, GIB, 0), 1), Event::Tick]);
    run(
        &mut engine,
        31_000,
        vec![Event::NodeStateChanged { node: "n3".into(), state: NodeCondition::Draining }],
    );
    let m = SchedulerMetrics::new();
    m.update_from_engine(&engine);
    let t = m.encode();
    // First fit put the container on n1; n2 and n3 have been empty since they registered.
    assert_eq!(value(&t, "gantry_nodes_idle{state=\"running\"}"), 1.0);
    assert_eq!(value(&t, "gantry_nodes_idle{state=\"draining\"}"), 1.0);
    assert_eq!(sample(&t, "gantry_node_idle_seconds{node=\"n1\"}"), None, "busy: no series");
    assert_eq!(value(&t, "gantry_node_idle_seconds{node=\"n2\"}"), 30.0);
    assert_eq!(value(&t, "gantry_node_idle_seconds{node=\"n3\"}"), 30.0);
    assert!(promtool_check_metrics(&t).0, "promtool accepts it");

    run(&mut engine, 40_000, vec![Event::NodeLost { node: "n2".into() }]);
    m.update_from_engine(&engine);
    let t = m.encode();
    assert_eq!(sample(&t, "gantry_node_idle_seconds{node=\"n2\"}"), None, "lost: no series");
    assert_eq!(value(&t, "gantry_nodes_idle{state=\"running\"}"), 0.0);
    assert_eq!(value(&t, "gantry_node_idle_seconds{node=\"n3\"}"), 39.0);
}

#[test]
fn figures_of_a_real_engine_appear() {
    let mut engine = Engine::builtin(config()).expect("engine");
    small_cluster(&mut engine);
    let m = SchedulerMetrics::new();
    m.update_from_engine(&engine);
    let t = m.encode();

    assert_eq!(value(&t, "gantry_nodes{state=\"running\"}"), 2.0);
    assert_eq!(value(&t, "gantry_nodes{state=\"lost\"}"), 0.0);
    assert_eq!(value(&t, "gantry_apps{state=\"running\"}"), 3.0);
    assert_eq!(value(&t, "gantry_apps{state=\"new\"}"), 0.0);
    assert_eq!(value(&t, "gantry_containers{state=\"running\"}"), 4.0);
    assert_eq!(value(&t, "gantry_containers{state=\"allocated\"}"), 0.0);
    assert_eq!(value(&t, "gantry_scheduler_allocations_total"), 4.0);
    assert_eq!(value(&t, "gantry_scheduler_pending_requests"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_pending_containers"), 1.0);

    let q = |figure: &str, resource: &str, queue: &str| {
        value(&t, &format!("gantry_queue_{figure}_{resource}{{queue=\"{queue}\"}}"))
    };
    assert_eq!(q("guaranteed", "cpu_cores", "root"), 8.0);
    assert_eq!(q("guaranteed", "memory_bytes", "root"), (16 * GIB) as f64);
    assert_eq!(q("guaranteed", "gpus", "root"), 1.0);
    assert_eq!(q("guaranteed", "cpu_cores", "root.prod"), 4.8);
    assert_eq!(q("guaranteed", "cpu_cores", "root.dev"), 3.2);
    assert_eq!(q("maximum", "cpu_cores", "root.dev"), 4.0);
    assert_eq!(q("used", "cpu_cores", "root.prod"), 2.5);
    assert_eq!(q("used", "memory_bytes", "root.prod"), (3 * GIB) as f64);
    assert_eq!(q("used", "gpus", "root.prod"), 1.0);
    assert_eq!(q("used", "cpu_cores", "root.dev"), 3.0);
    assert_eq!(q("used", "cpu_cores", "root"), 5.5);
    assert_eq!(q("pending", "cpu_cores", "root.dev"), 3.0);
    assert_eq!(q("pending", "memory_bytes", "root.dev"), GIB as f64);
    assert_eq!(q("pending", "cpu_cores", "root"), 3.0, "pending demand is charged to ancestors");
    assert_eq!(q("pending", "cpu_cores", "root.prod"), 0.0);
    for reason in RejectReason::ALL {
        let series = format!(
            "gantry_scheduler_rejected_decisions_total{{plugin=\"builtin\",reason=\"{}\"}}",
            reason.as_str()
        );
        assert_eq!(value(&t, &series), 0.0, "built-in placement is never rejected");
    }

    // n2 is lost: its container with it; dev's two containers wait again, and the gauges
    // that went up come down.
    run(&mut engine, 2, vec![Event::NodeLost { node: "n2".into() }]);
    m.update_from_engine(&engine);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_nodes{state=\"running\"}"), 1.0);
    assert_eq!(value(&t, "gantry_nodes{state=\"lost\"}"), 1.0);
    assert_eq!(value(&t, "gantry_containers{state=\"running\"}"), 3.0);
    assert_eq!(value(&t, "gantry_scheduler_pending_containers"), 2.0);
    assert_eq!(value(&t, "gantry_queue_used_cpu_cores{queue=\"root.dev\"}"), 0.0);
    assert_eq!(value(&t, "gantry_queue_pending_cpu_cores{queue=\"root.dev\"}"), 6.0);
    assert_eq!(value(&t, "gantry_queue_guaranteed_cpu_cores{queue=\"root\"}"), 4.0, "n2 no longer counts");
    assert_eq!(value(&t, "gantry_scheduler_allocations_total"), 4.0, "a counter does not go down");

    // Killing an app ends it; once the engine forgets its records it is counted from history.
    let app = engine.state().apps()[0].id;
    run(&mut engine, 3, vec![Event::AppKillRequested { app: gantry_engine::AppId(app) }]);
    let stopping: Vec<_> = engine
        .state()
        .containers()
        .iter()
        .filter(|c| c.state == GANTRY_CONTAINER_STOPPING)
        .map(|c| gantry_engine::ContainerId(c.id))
        .collect();
    assert_eq!(stopping.len(), 2, "the killed app's two containers are stopping");
    m.update_from_engine(&engine);
    assert_eq!(value(&m.encode(), "gantry_containers{state=\"stopping\"}"), 2.0);
    for container in stopping {
        engine.handle(4, Event::container_exited(container, 143)).expect("exit");
    }
    run(&mut engine, 5, vec![Event::Tick]);
    m.update_from_engine(&engine);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_apps{state=\"killed\"}"), 1.0);
    assert_eq!(value(&t, "gantry_apps{state=\"running\"}"), 2.0, "the GPU app and dev (waiting) run on");
    assert_eq!(value(&t, "gantry_apps{state=\"accepted\"}"), 0.0);
    assert_eq!(value(&t, "gantry_containers{state=\"stopping\"}"), 0.0);
}

#[test]
fn a_call_over_budget_counts_as_a_timeout_and_a_failure() {
    let metrics = Arc::new(SchedulerMetrics::new());
    let engine = timed_out_engine(&metrics);
    let t = metrics.encode();
    assert_eq!(value(&t, "gantry_scheduler_plugin_call_timeouts_total{plugin=\"slow\",hook=\"place\"}"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_plugin_failures_total{plugin=\"slow\"}"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_plugin_quarantined{plugin=\"slow\"}"), 1.0);
    assert_eq!(engine.stats().fallback_placements, 1, "first-fit placed that cycle");
    assert!(engine.stats().placements > 0);
}

#[test]
fn plugin_health_and_hook_latency_come_through_timed_policy() {
    let metrics = Arc::new(SchedulerMetrics::new());
    let timed = TimedPolicy::new("packing-west", Box::new(Garbage), Arc::clone(&metrics));
    let profile = Profile { place: Some(0), ..Profile::default() };
    let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
    small_cluster(&mut engine);
    metrics.update_from_engine(&engine);
    let t = metrics.encode();

    let calls = "gantry_scheduler_plugin_hook_duration_seconds_count{plugin=\"packing-west\",hook=\"place\"}";
    assert_eq!(value(&t, calls), 1.0, "one place call timed");
    assert!(
        sample(
            &t,
            "gantry_scheduler_plugin_hook_duration_seconds_count{plugin=\"packing-west\",hook=\"admit\"}"
        )
        .is_none(),
        "no series for hooks the plugin lacks"
    );
    assert_eq!(
        value(
            &t,
            "gantry_scheduler_rejected_decisions_total{plugin=\"packing-west\",reason=\"unknown_node\"}"
        ),
        1.0,
        "rejections are the plugin's own"
    );
    assert_eq!(
        value(&t, "gantry_scheduler_rejected_decisions_total{plugin=\"builtin\",reason=\"unknown_node\"}"),
        0.0
    );
    assert_eq!(value(&t, "gantry_scheduler_plugin_failures_total{plugin=\"packing-west\"}"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_plugin_quarantines_total{plugin=\"packing-west\"}"), 1.0);
    assert_eq!(
        value(&t, "gantry_scheduler_plugin_quarantined{plugin=\"packing-west\"}"),
        1.0,
        "quarantined under the configured name"
    );

    // The next cycle is placed by the built-in policy while the plugin sits out its
    // quarantine (60 s by default); past it, the gauge falls back to 0 and the plugin is tried
    // (and fails) again.
    run(&mut engine, 10, vec![Event::Tick]);
    metrics.update_from_engine(&engine);
    let t = metrics.encode();
    assert_eq!(value(&t, calls), 1.0, "not called while quarantined");
    assert!(value(&t, "gantry_scheduler_fallback_placement_cycles_total") >= 1.0);
    run(&mut engine, 60_002, vec![node("n3", 0)]);
    metrics.update_from_engine(&engine);
    assert_eq!(value(&metrics.encode(), "gantry_scheduler_plugin_quarantined{plugin=\"packing-west\"}"), 0.0);
}

#[test]
fn counters_never_go_down_and_gone_series_go() {
    let m = SchedulerMetrics::new();
    m.set_allocations_total(5);
    m.set_allocations_total(3);
    m.set_rejected_total("rayon", "does_not_fit", 7);
    m.set_rejected_total("rayon", "does_not_fit", 2);
    let a = Amount { cpu_millis: 1500, memory_bytes: 10, gpus: 2 };
    let queue = |path| QueueSample { path, guaranteed: a, maximum: a, used: a, pending: a };
    m.set_queues(&[queue("root"), queue("root.a")]);
    m.set_nodes_by_state(&[("running", 3), ("lost", 2)]);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_queue_used_cpu_cores{queue=\"root.a\"}"), 1.5);
    assert_eq!(value(&t, "gantry_queue_pending_gpus{queue=\"root.a\"}"), 2.0);

    m.set_queues(&[queue("root")]);
    m.set_nodes_by_state(&[("running", 3)]);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_scheduler_allocations_total"), 5.0);
    assert_eq!(
        value(&t, "gantry_scheduler_rejected_decisions_total{plugin=\"rayon\",reason=\"does_not_fit\"}"),
        7.0
    );
    assert!(!t.contains("queue=\"root.a\""), "a queue that is gone has no series:\n{t}");
    assert_eq!(value(&t, "gantry_queue_used_cpu_cores{queue=\"root\"}"), 1.5);
    assert_eq!(value(&t, "gantry_nodes{state=\"lost\"}"), 0.0, "a state no longer reported reads 0");
}

/// `config()` with `root.prod` reservable.
fn planned_config() -> EngineConfig {
    EngineConfig { reservations: Some(gantry_engine::PlanConfig::new("root.prod")), ..config() }
}

/// An engine of `planned_config()` with the engine's test planner (earliest fit) as `reserve`.
fn planned_engine() -> (Engine, gantry_engine::test_planner::Handle) {
    let (planner, handle) = gantry_engine::test_planner::TestPlanner::earliest();
    let profile = Profile { reserve: Some(0), ..Profile::default() };
    let policies: Vec<Box<dyn Policy>> = vec![Box::new(gantry_engine::StaticPolicy::new(planner))];
    (Engine::new(planned_config(), policies, profile).expect("engine"), handle)
}

/// A reservation in `root.prod` due at 100 s.
fn reservation(rdl: &str) -> Event {
    Event::ReservationSubmitted {
        id: None,
        request: gantry_engine::ReservationRequest {
            queue: "root.prod".into(),
            name: "r".into(),
            user: "u".into(),
            priority: 0,
            arrival_ms: None,
            deadline_ms: Some(100_000),
            definition: gantry_rdl::parse_text(rdl).expect("rdl"),
        },
    }
}

#[test]
fn the_reservation_plan_is_exposed() {
    let (mut engine, planner) = planned_engine();
    run(&mut engine, 0, vec![node("n1", 0), node("n2", 0)]);
    // 2 cores for 10 s, placed at 0-10 s; then one too large for the plan (4.8 cores).
    run(
        &mut engine,
        0,
        vec![reservation("atom(1c/1GiB, 1, 2, 10s, 20s)"), reservation("atom(5c/1GiB, 1, 1, 10s, 10s)")],
    );
    // A planner answer refused (bundles above the atom's most): counted by reason, per plugin.
    planner.tamper(|_, out| {
        let pieces: Vec<_> = out
            .allocations()
            .iter()
            .map(|p| gantry_sdk::abi::GantryAllocation { bundles: p.bundles + 1, ..*p })
            .collect();
        let decisions = out.as_slice().to_vec();
        out.clear();
        out.extend_from_slice(&decisions);
        out.extend_allocations(&pieces);
    });
    run(&mut engine, 0, vec![reservation("atom(1c/1GiB, 1, 1, 1s, 1s)")]);
    run(&mut engine, 5_000, vec![Event::Tick]);
    let m = SchedulerMetrics::new();
    m.update_from_engine(&engine);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_reservations"), 1.0);
    assert_eq!(value(&t, "gantry_reservation_events_total{outcome=\"admitted\"}"), 1.0);
    assert_eq!(value(&t, "gantry_reservation_events_total{outcome=\"rejected\"}"), 2.0);
    assert_eq!(
        value(&t, "gantry_scheduler_rejected_decisions_total{plugin=\"test-planner\",reason=\"gang_size\"}"),
        1.0
    );
    assert_eq!(value(&t, "gantry_reservation_plan_cpu_cores{kind=\"capacity\"}"), 4.8);
    assert_eq!(value(&t, "gantry_reservation_plan_cpu_cores{kind=\"reserved\"}"), 2.0);
    assert_eq!(value(&t, "gantry_reservation_plan_memory_bytes{kind=\"reserved\"}"), (2 * GIB) as f64);
    assert_eq!(value(&t, "gantry_queue_guaranteed_cpu_cores{queue=\"root.prod.reservation_1\"}"), 2.0);
    assert_eq!(value(&t, "gantry_queue_guaranteed_cpu_cores{queue=\"root.prod.default\"}"), 2.8);
    let (ok, printed) = promtool_check_metrics(&t);
    assert!(ok && printed.is_empty(), "promtool check metrics:\n{printed}\non:\n{t}");
    // At the deadline it ends.
    run(&mut engine, 100_000, vec![Event::Tick]);
    m.update_from_engine(&engine);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_reservations"), 0.0);
    assert_eq!(value(&t, "gantry_reservation_events_total{outcome=\"expired\"}"), 1.0);
    assert_eq!(value(&t, "gantry_reservation_plan_cpu_cores{kind=\"reserved\"}"), 0.0);
}

#[test]
fn daemon_figures_are_recorded() {
    let m = SchedulerMetrics::new();
    m.set_agent_streams(3);
    m.record_submissions(2);
    m.record_submissions(1);
    m.observe_cycle(Duration::from_micros(700));
    m.observe_store_commit(Duration::from_millis(3), 40);
    m.observe_store_commit(Duration::from_millis(5), 1);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_agent_streams"), 3.0);
    assert_eq!(value(&t, "gantry_scheduler_submissions_total"), 3.0);
    assert_eq!(value(&t, "gantry_scheduler_cycle_duration_seconds_count"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_cycle_duration_seconds_bucket{le=\"0.0008\"}"), 1.0);
    assert_eq!(value(&t, "gantry_scheduler_cycle_duration_seconds_bucket{le=\"0.0004\"}"), 0.0);
    assert_eq!(value(&t, "gantry_store_commit_duration_seconds_count"), 2.0);
    assert_eq!(value(&t, "gantry_store_batch_size_sum"), 41.0);
    assert_eq!(value(&t, "gantry_store_batch_size_bucket{le=\"1.0\"}"), 1.0);
    m.observe_store_prune(Duration::from_millis(20), 500);
    m.observe_store_prune(Duration::from_micros(500), 0);
    let t = m.encode();
    assert_eq!(value(&t, "gantry_store_pruned_apps_total"), 500.0);
    assert_eq!(value(&t, "gantry_store_prune_duration_seconds_count"), 2.0);
    assert_eq!(value(&t, "gantry_store_prune_duration_seconds_bucket{le=\"0.001\"}"), 1.0);
}

#[test]
fn promtool_accepts_the_exposition() {
    let text = populated().encode();
    let (ok, printed) = promtool_check_metrics(&text);
    assert!(ok && printed.is_empty(), "promtool check metrics:\n{printed}\non:\n{text}");
}

#[test]
fn render_answers_prometheus_in_openmetrics_and_others_in_text() {
    let m = SchedulerMetrics::new();
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (content_type, body) = m.render(Some(prometheus)).expect("renders");
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    assert!(body.ends_with("# EOF\n"));
    for accept in [None, Some("*/*"), Some("text/plain")] {
        let (content_type, body) = m.render(accept).expect("renders");
        assert!(content_type.starts_with("text/plain; version=0.0.4"), "{accept:?}: {content_type}");
        assert!(body.contains("# TYPE gantry_scheduler_allocations_total counter\n"), "{accept:?}");
    }
}
