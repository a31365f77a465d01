//! A plugin that hangs (issue 10's fault injection): the real test plugin `.so` with a per-call
//! time budget. A `place` call that never returns fails after the budget and first-fit places the
//! work in the same cycle; the plugin is not called again (each call fails at once) until the
//! stuck call returns, and then serves again; the copy of the view a budgeted call reads is
//! exactly the view a direct call reads. Durations here are budgets the code is given and
//! failure guards, never timing assertions.

use gantry_engine::{Command, Engine, EngineConfig, Event, Policy, PolicyError, Profile};
use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::{AppState, SubmitApp};
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::{Decisions, Hooks, View};
use gantry_tests::{
    SyntheticCluster, TestAgent, app, launches, register_all, rust_plugin, sample, scrape, small_cluster,
    tick, wait_until,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The budget the tests give the plugin.
const BUDGET: Duration = Duration::from_millis(200);
/// Failure guard of every wait.
const GUARD: Duration = Duration::from_secs(60);

fn test_plugin(mode: &str, budget: Duration) -> DynamicPlugin {
    let path = rust_plugin("gantry_testplugin").expect("build test plugin");
    DynamicPlugin::load_budgeted(&path, &format!(r#"{{"mode": "{mode}"}}"#), budget).expect("load")
}

fn engine_with(plugin: Box<dyn Policy>, profile: Profile, quarantine_after: u32) -> Engine {
    let config = EngineConfig { quarantine_after, quarantine_ms: 10_000, ..Default::default() };
    let mut e = Engine::new(config, vec![plugin], profile).expect("engine");
    register_all(&mut e, &small_cluster()).expect("nodes");
    e
}

#[test]
fn a_hanging_call_fails_after_its_budget_and_later_calls_fail_at_once() {
    let mut plugin = test_plugin("hang", BUDGET);
    assert_eq!(plugin.call_budget(), Some(BUDGET));
    let cluster = SyntheticCluster::new(10, 20);
    let mut out = Decisions::new();
    assert_eq!(
        plugin.call(&cluster.view(), &mut out),
        Err(PolicyError::TimedOut { hook: "place", budget_ms: 200 })
    );
    for _ in 0..3 {
        assert_eq!(
            plugin.call(&cluster.view(), &mut out),
            Err(PolicyError::StillRunning { hook: "place" }),
            "no second call waits behind the stuck one"
        );
    }
    assert!(out.is_empty());
    // Dropping a plugin whose call never returns must not wait for it.
    drop(plugin);
}

#[test]
fn a_hanging_place_plugin_leaves_the_work_to_first_fit() {
    let mut e = engine_with(
        Box::new(test_plugin("hang", BUDGET)),
        Profile { place: Some(0), ..Default::default() },
        3,
    );
    for k in 0..4 {
        e.handle(0, Event::AppSubmitted(app(&format!("a{k}"), 1000, 2, 0, 2, false))).expect("submit");
    }
    assert_eq!(launches(&tick(&mut e, 1)), 8, "first-fit placed the work in the cycle that timed out");
    assert_eq!((e.stats().policy_failures, e.stats().fallback_placements), (1, 1));
    for t in 2..=3 {
        e.handle(t, Event::AppSubmitted(app("more", 500, 1, 0, 1, false))).expect("submit");
        assert_eq!(launches(&tick(&mut e, t)), 1);
    }
    assert_eq!(e.stats().policy_failures, 3, "the calls while stuck failed too");
    assert_eq!(e.stats().quarantines, 1, "and three in a row quarantine it");
}

/// Whether the cycle at `t` was placed by the plugin itself (not by the built-in stand-in).
fn placed_by_plugin(e: &mut Engine, t: u64) -> bool {
    let before = e.stats().fallback_placements;
    e.handle(t, Event::AppSubmitted(app(&format!("at-{t}"), 100, 1, 0, 1, false))).expect("submit");
    let placed = launches(&tick(e, t));
    assert_eq!(placed, 1, "every cycle places its app, by plugin or stand-in");
    e.stats().fallback_placements == before
}

#[test]
fn a_slow_plugin_serves_again_once_its_stuck_call_returns() {
    // quarantine_after high: this test is about the stuck state, not the quarantine.
    let mut e = engine_with(
        Box::new(test_plugin("slow-then-ok", BUDGET)),
        Profile { place: Some(0), ..Default::default() },
        1000,
    );
    assert!(!placed_by_plugin(&mut e, 1), "the first call is slow: first-fit stands in");
    let mut t = 1;
    wait_until("the plugin places again", GUARD, || {
        t += 1;
        placed_by_plugin(&mut e, t).then_some(())
    });
    assert_eq!(e.stats().policy_failures, t - 1, "every cycle before the last one failed over");
    assert!(placed_by_plugin(&mut e, t + 1), "and it keeps serving");
    assert_eq!(e.policy_status()[0].consecutive_failures, 0);
}

/// Passes calls on to a plugin and keeps what each call answered.
struct Recorder {
    inner: DynamicPlugin,
    answers: Arc<Mutex<Vec<Result<(), PolicyError>>>>,
}

impl Policy for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn hooks(&self) -> Hooks {
        self.inner.hooks()
    }
    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        let r = self.inner.call(view, out);
        self.answers.lock().expect("answers").push(r.clone());
        r
    }
}

/// Runs the same events through an engine whose every hook is the `checksum` plugin, called
/// with `budget`, and returns what each call answered (the checksum of the view it saw).
fn checksums(budget: Duration) -> Vec<Result<(), PolicyError>> {
    let answers = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder { inner: test_plugin("checksum", budget), answers: Arc::clone(&answers) };
    let all = Profile { admit: Some(0), order: Some(0), place: Some(0), rebalance: Some(0), reserve: None };
    let mut e = engine_with(Box::new(recorder), all, 1000);
    for (t, gpus) in [(0, 0), (3_000, 1), (6_000, 2)] {
        e.handle(t, Event::AppSubmitted(app(&format!("cpu-{t}"), 1000, 2, 0, 3, false))).expect("submit");
        e.handle(t, Event::AppSubmitted(app(&format!("gpu-{t}"), 2000, 8, gpus, 2, true))).expect("submit");
        for c in tick(&mut e, t + 1) {
            if let Command::Launch { container, .. } = c {
                e.handle(t + 2, Event::ContainerStarted { container }).expect("started");
            }
        }
    }
    drop(e);
    Arc::try_unwrap(answers).expect("engine gone").into_inner().expect("answers")
}

#[test]
fn a_budgeted_call_sees_exactly_the_view_a_direct_call_sees() {
    let direct = checksums(Duration::ZERO);
    let budgeted = checksums(Duration::from_secs(30));
    // admit, order, place each cycle, and rebalance in the cycles a round is due.
    assert!(direct.len() >= 9, "{direct:?}");
    for answer in &direct {
        let Err(PolicyError::Failed(msg)) = answer else { panic!("not a checksum: {answer:?}") };
        assert!(msg.contains(CHECKSUM_PREFIX), "{msg}");
    }
    assert_eq!(direct, budgeted, "each call's view has the same checksum on both paths");
    let distinct: std::collections::HashSet<_> = direct.iter().map(|a| format!("{a:?}")).collect();
    assert!(distinct.len() > direct.len() / 2, "the checksum follows the view: {direct:?}");
}

/// The start of the checksum plugin's message (the test plugin is a `cdylib` only, so its
/// `CHECKSUM_PREFIX` is repeated here).
const CHECKSUM_PREFIX: &str = "view checksum ";

#[test]
fn a_daemon_with_a_hanging_plugin_keeps_scheduling_and_answering() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = rust_plugin("gantry_testplugin").expect("build test plugin");
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\ndata_dir = {:?}\n\
         [[plugins]]\nname = \"stuck\"\npath = {:?}\ncall_budget_ms = {}\n[plugins.config]\nmode = \"hang\"\n\
         [profile]\nplace = \"stuck\"\n",
        dir.path().join("data").display().to_string(),
        path.display().to_string(),
        BUDGET.as_millis(),
    );
    let (bound, stop) = gantry_tests::start_daemon(&rt, &toml);
    let _agent = TestAgent::start(dir.path(), "hang-node", "rack-a", &[], bound.agent_addr);
    let client = Client::new(&bound.api_addr.to_string()).expect("client").with_timeout(GUARD);
    let submit = |name: &str| {
        let body: SubmitApp = serde_json::from_value(serde_json::json!({
            "application-name": name,
            "containers": [{"resource": {"cpuMillis": 10, "memoryBytes": 1 << 20, "gpus": 0}, "command": ["true"]}]
        }))
        .expect("submission");
        rt.block_on(client.submit(&body)).expect("submitted")
    };
    let ids: Vec<u64> = (0..3).map(|k| submit(&format!("app-{k}"))).collect();
    for id in ids {
        wait_until("the app is placed and runs", GUARD, || {
            let state = rt.block_on(client.app_state(id)).expect("the REST API answers");
            matches!(state, AppState::Running | AppState::Finished).then_some(())
        });
    }
    let metrics = scrape(bound.api_addr);
    let timeouts = "gantry_scheduler_plugin_call_timeouts_total{plugin=\"stuck\",hook=\"place\"}";
    assert_eq!(
        sample(&metrics, timeouts),
        Some(1.0),
        "one call timed out; the rest failed at once:\n{metrics}"
    );
    let failures =
        sample(&metrics, "gantry_scheduler_plugin_failures_total{plugin=\"stuck\"}").unwrap_or(0.0);
    assert!(failures >= 1.0, "{metrics}");
    assert!(sample(&metrics, "gantry_scheduler_fallback_placement_cycles_total").unwrap_or(0.0) >= 1.0);
    let _ = stop.send(());
}
