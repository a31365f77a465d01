//! The controller's decisions one scenario each, on the simulated agents and store of
//! `common/world.rs`: each is a rule the fault schedules of `faults.rs` found missing.

mod common;

use common::world::{World, app};
use gantry_controller::{Controller, ControllerConfig, Input, Output, Reply};
use gantry_engine::AppId;
use gantry_proto::ClusterId;
use gantry_sdk::abi::*;

/// The app of the reply `to`, which must have been accepted.
fn accepted(w: &World, to: u64) -> AppId {
    match w.answers.get(&to) {
        Some(Reply::Submitted(Ok(app))) => *app,
        other => panic!("submission not accepted: {other:?}"),
    }
}

fn app_state(w: &World, app: AppId) -> Option<u32> {
    w.ctl.engine().app_state(app)
}

#[test]
fn a_held_launch_of_an_app_killed_meanwhile_is_not_sent_and_nothing_waits_for_it() {
    let mut w = World::new(1);
    let to = w.submit(app(1, false), 60_000);
    w.commit_all();
    let app = accepted(&w, to);
    w.advance(1_000); // placed; the launch waits for its record
    assert_eq!(w.store.in_flight(), 2, "the container's record and the app's state");
    let kill = w.kill(app);
    w.commit_all(); // the launch's record commits before the kill's
    assert!(matches!(w.answers.get(&kill), Some(Reply::Killed(Ok(())))));
    assert!(w.agents["n0"].running.is_empty(), "a killed app's container was launched");
    w.advance(2_000);
    w.commit_all();
    assert_eq!(app_state(&w, app), Some(GANTRY_APP_KILLED));
    assert!(
        w.ctl.engine().state().containers().is_empty(),
        "the engine still waits for a container that never ran"
    );
}

#[test]
fn status_acknowledgements_are_not_held_behind_a_slow_commit() {
    // A launch waits for its record; the node's status acknowledgements must not, or the agent,
    // hearing nothing for its fencing timeout, kills everything it runs.
    let mut w = World::new(1);
    w.submit(app(1, false), 600_000);
    w.commit_all();
    w.advance(1_000);
    assert!(w.store.in_flight() > 0, "the launch's record is not committed");
    let heard = w.agents["n0"].heard_ms;
    w.advance(5_000);
    assert!(w.agents["n0"].heard_ms > heard, "the agent heard nothing while a commit was slow");
}

#[test]
fn a_kill_lost_with_its_stream_is_sent_again_when_the_agent_registers() {
    // The app is killed while its node's stream is down, so the kill never arrives; when the
    // agent registers again the stopping container is asked again, or it would run on until it
    // ends by itself (beside its replacement, for a gang restart or a preemption).
    let mut w = World::new(1);
    let to = w.submit(app(1, false), 600_000);
    w.commit_all();
    let app = accepted(&w, to);
    w.advance(1_000);
    w.commit_all();
    assert_eq!(w.agents["n0"].running.len(), 1);
    w.disconnect("n0");
    w.kill(app);
    w.commit_all();
    assert_eq!(w.agents["n0"].running.len(), 1, "the kill cannot have arrived");
    w.connect("n0");
    assert!(
        w.agents["n0"].running.is_empty(),
        "a stopping container kept running after its agent registered again"
    );
    w.commit_all();
    assert_eq!(app_state(&w, app), Some(GANTRY_APP_KILLED));
}

#[test]
fn a_failed_state_write_is_written_again_from_what_is_known_then() {
    let mut w = World::new(1);
    let to = w.submit(app(1, false), 1_000);
    w.commit_all();
    let app = accepted(&w, to);
    w.advance(1_000);
    w.commit_all();
    w.advance(2_000); // it ran and ended
    assert_eq!(app_state(&w, app), Some(GANTRY_APP_FINISHED));
    // The disk is full for every job now in flight (the exit's and the app's end).
    while w.commit(true) {}
    assert_ne!(w.store.app(app).map(|a| a.state), Some(GANTRY_APP_FINISHED));
    // Space returns: within a liveness check the records are written again.
    w.advance(1_000);
    w.commit_all();
    assert_eq!(w.store.app(app).map(|a| a.state), Some(GANTRY_APP_FINISHED));
    assert!(w.store.containers().all(|c| c.state == GANTRY_CONTAINER_COMPLETED));
}

#[test]
fn two_drain_changes_in_flight_end_as_the_store_ends_whatever_order_they_are_answered_in() {
    let mut w = World::new(1);
    let (drain, undrain) = (w.next_reply(), w.next_reply());
    let mut ctl = std::mem::replace(
        &mut w.ctl,
        Controller::new(common::world::engine(), ControllerConfig::new(ClusterId::from_bits(9)), 0),
    );
    let now = w.now;
    ctl.handle(now, Input::SetNodeDrain { reply: drain, node: "n0".into(), drained: true });
    ctl.handle(now, Input::SetNodeDrain { reply: undrain, node: "n0".into(), drained: false });
    let jobs: Vec<u64> = ctl
        .take_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::Store { write, .. } => Some(write),
            _ => None,
        })
        .collect();
    assert_eq!(jobs.len(), 2);
    // The undrain (stored second) is answered first, then the drain.
    ctl.handle(now, Input::Committed { write: jobs[1], result: Ok(()) });
    ctl.handle(now, Input::Committed { write: jobs[0], result: Ok(()) });
    let st = ctl.engine().state();
    let n = st.node_by_name("n0").expect("node");
    assert_eq!(st.nodes()[n.0 as usize].state, GANTRY_NODE_RUNNING, "the earlier change overrode the later");
    assert!(!ctl.drained_nodes().contains("n0"), "nor does it come back at the next registration");
}

#[test]
fn a_scheduler_that_did_not_run_past_the_node_timeout_loses_no_node_for_it() {
    // The process stalls (or its host is suspended) for a minute: its agents kept reporting, but
    // nothing was read. Its first poll after that must not declare them all lost — the silence
    // was the scheduler's — and a node that stays silent is still lost a timeout later.
    let mut w = World::new(2);
    w.advance(1_000);
    w.partition("n1");
    w.now += 60_000;
    w.ctl.poll(w.now);
    w.settle();
    assert_eq!(w.ctl.stats().nodes_lost, 0, "nodes lost for the scheduler's own absence");
    w.advance(9_000);
    assert_eq!(w.ctl.stats().nodes_lost, 0, "within a timeout of the scheduler's return");
    w.advance(2_000);
    assert_eq!(w.ctl.stats().nodes_lost, 1, "the silent node is lost a timeout after the return");
    assert!(w.ctl.agents().contains_key("n0") && !w.ctl.agents().contains_key("n1"));
}

/// A `rebalance` policy that records when it is called.
struct RecordsRebalance {
    calls: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

impl gantry_sdk::Plugin for RecordsRebalance {
    const NAME: &'static core::ffi::CStr = c"records-rebalance";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: gantry_sdk::Hooks = gantry_sdk::Hooks { rebalance: true, ..gantry_sdk::Hooks::NONE };

    fn create(_config: &str) -> Result<Self, gantry_sdk::PluginError> {
        Err(gantry_sdk::PluginError::new("built by the test"))
    }

    fn rebalance(
        &mut self,
        view: &gantry_sdk::View<'_>,
        _out: &mut gantry_sdk::Decisions,
    ) -> Result<(), gantry_sdk::PluginError> {
        self.calls.lock().expect("calls").push(view.now_ms);
        Ok(())
    }
}

/// An engine whose `rebalance` policy (every 1,000 ms) records when it runs.
fn engine_recording_rebalance() -> (gantry_engine::Engine, std::sync::Arc<std::sync::Mutex<Vec<u64>>>) {
    let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let plugin = RecordsRebalance { calls: calls.clone() };
    let config = gantry_engine::EngineConfig { rebalance_interval_ms: 1_000, ..Default::default() };
    let profile = gantry_engine::Profile { rebalance: Some(0), ..Default::default() };
    let policy: Box<dyn gantry_engine::Policy> = Box::new(gantry_engine::StaticPolicy::new(plugin));
    (gantry_engine::Engine::new(config, vec![policy], profile).expect("engine"), calls)
}

#[test]
fn the_rebalance_policy_runs_on_its_interval_not_at_the_next_cycle() {
    // The engine runs `rebalance` in the first cycle at or after its interval. A cycle that
    // something made due in between (an exit, a submission) pushes the interval's cycle a full
    // interval later, so `rebalance` drifted up to a cycle interval late — preemption for a
    // reservation that starts now, late by as much (the simulator's rayon-swim runs showed it).
    // The controller now wakes for the engine's rebalance time too.
    let (engine, calls) = engine_recording_rebalance();
    let mut ctl = Controller::new(engine, ControllerConfig::new(ClusterId::from_bits(9)), 0);
    // Rebalance is due from the start: the first poll runs a cycle for it.
    ctl.poll(0);
    // Something makes a cycle due at 500 ms: the next one by the interval is at 1,500 ms.
    let spec = app(1, false);
    ctl.handle(
        500,
        Input::Submit { reply: 1, spec, id: None, caller: None, templates: vec![Default::default()] },
    );
    assert!(ctl.poll(500));
    assert_eq!(ctl.next_cycle_ms(), 1_500);
    // But rebalance is due at 1,000 ms: the controller wakes then, and the cycle runs it.
    assert_eq!(ctl.next_deadline_ms(), 1_000);
    assert!(ctl.poll(1_000), "a cycle for the rebalance time");
    assert_eq!(*calls.lock().expect("calls"), vec![0, 1_000]);
}

#[test]
fn a_rebalance_time_the_engine_cannot_move_on_does_not_wake_the_driver_again_and_again() {
    // After a restart, cycles wait for the agents to come back: the engine's rebalance time
    // stays where it was. The controller must not report it as due at every poll (the daemon
    // would spin until the recovery ends).
    let (engine, calls) = engine_recording_rebalance();
    // The store says a container runs on n0, whose agent has not come back yet.
    use gantry_controller::records::{AppRecord, ContainerRecord, Write};
    let mut store = gantry_controller::memstore::MemStore::new();
    let app = AppRecord {
        id: AppId(1),
        spec: app(1, false),
        launch: serde_json::Value::Null,
        submit_ms: 0,
        state: GANTRY_APP_RUNNING,
        state_ms: 0,
        diagnostics: String::new(),
    };
    let container = ContainerRecord {
        id: gantry_engine::ContainerId(1),
        app: AppId(1),
        request: 0,
        node: "n0".into(),
        resources: gantry_engine::Resources::new(1_000, 1 << 28, 0),
        gpus: Vec::new(),
        state: GANTRY_CONTAINER_RUNNING,
        started_ms: Some(0),
        exit_code: None,
        reason: None,
        finished_ms: None,
        cluster: ClusterId::from_bits(10),
    };
    store.submit(1, vec![Write::InsertApp(app), Write::UpsertContainer(container)]);
    assert!(store.commit_next(false).is_some_and(|(_, r)| r.is_ok()));
    let config = ControllerConfig { durable: true, ..ControllerConfig::new(ClusterId::from_bits(11)) };
    let mut ctl = Controller::recover(engine, config, store.recovered(), 0);
    assert!(ctl.recovering());
    for now in [0, 1, 2, 3] {
        ctl.poll(now);
        let at = ctl.next_deadline_ms();
        assert!(at > now, "at {now} the driver is told to come back at {at}: it would spin");
    }
    assert!(calls.lock().expect("calls").is_empty(), "no cycle ran during the recovery");
}
