//! Ended applications keep what they had (issue 18, item 7): times, attempts and failures,
//! requests with their resources, labels and commands, containers with resources, times and how
//! they ended — while the scheduler runs, after a restart, and when read back from the store
//! beyond `[engine] max_completed_apps`. Real `gantry-scheduler` and `gantry-agent` on loopback.

use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::{AppInfo, AppState, SubmitApp};
use gantry_tests::{TestAgent, start_scheduler, wait_until};
use serde_json::json;
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

fn app(rt: &tokio::runtime::Runtime, client: &Client, id: u64) -> AppInfo {
    rt.block_on(client.app(id)).expect("app")
}

/// What an ended app must still say, in every reading.
fn check(a: &AppInfo, state: AppState, failures: u32, command: &[&str]) {
    assert_eq!(a.state, state, "{}", a.diagnostics);
    assert!(a.started_time > 0, "startedTime");
    assert!(
        a.finished_time >= a.started_time,
        "finishedTime {} < startedTime {}",
        a.finished_time,
        a.started_time
    );
    assert_eq!(a.elapsed_time, a.finished_time - a.started_time);
    assert_eq!(a.max_app_attempts, 3);
    assert_eq!(a.failures, failures);
    assert_eq!(a.progress, 100.0);
    assert_eq!(a.requests.len(), 1, "requests");
    let r = &a.requests[0];
    assert_eq!((r.resource.cpu_millis, r.resource.memory_bytes, r.count), (20, 16 << 20, 1));
    assert_eq!(r.labels.get("kind").map(String::as_str), Some("k9"));
    assert_eq!(r.command, command);
    assert!(!a.containers.is_empty(), "containers");
    for c in &a.containers {
        assert_eq!((c.resource.cpu_millis, c.resource.memory_bytes), (20, 16 << 20), "container {}", c.id);
        assert!(c.started_time > 0 && c.finished_time >= c.started_time, "container {} times", c.id);
        assert!(c.exit_code.is_some(), "container {} exit code", c.id);
        assert!(!c.diagnostics.is_empty(), "container {} says how it ended", c.id);
    }
}

#[test]
fn ended_apps_keep_their_history_across_restarts_and_from_the_store() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = gantry_tests::scheduler_config(
        dir.path(),
        "node_timeout_ms = 3000\ncycle_interval_ms = 50",
        "[engine]\nmax_completed_apps = 1\n[store]\nmax_completed_apps = 10\n",
    );
    let client = Client::new(&files.api).expect("client").with_timeout(Duration::from_secs(20));
    let agents: std::net::SocketAddr = files.agents.parse().expect("address");
    let _agent = TestAgent::start(dir.path(), "hist-n1", "r1", &[("kind", "k9")], agents);
    let mut scheduler = start_scheduler(&files.config);
    let submit = |command: &[&str]| -> u64 {
        let body: SubmitApp = serde_json::from_value(json!({
            "application-name": "hist",
            "max-app-attempts": 3,
            "containers": [{
                "resource": {"cpuMillis": 20, "memoryBytes": 16 << 20, "gpus": 0},
                "labels": {"kind": "k9"},
                "command": command
            }]
        }))
        .expect("submission");
        wait_until("a submission", GUARD, || rt.block_on(client.submit(&body)).ok())
    };
    let failing = submit(&["false"]);
    let ok = submit(&["true"]);
    for (id, state) in [(failing, AppState::Failed), (ok, AppState::Finished)] {
        wait_until(&format!("app {id} to end"), GUARD, || {
            (app(&rt, &client, id).state == state).then_some(())
        });
    }
    // Both ended a moment ago: the older one is beyond max_completed_apps = 1 once the next
    // cycle compacts, and is read from the store; the newer is in memory.
    std::thread::sleep(Duration::from_millis(300));
    let before = (app(&rt, &client, failing), app(&rt, &client, ok));
    check(&before.0, AppState::Failed, 3, &["false"]);
    assert_eq!(before.0.containers.len(), 3, "three attempts");
    check(&before.1, AppState::Finished, 0, &["true"]);

    scheduler.kill9();
    let _scheduler = start_scheduler(&files.config);
    let after = wait_until("the scheduler after the restart", GUARD, || {
        Some((rt.block_on(client.app(failing)).ok()?, rt.block_on(client.app(ok)).ok()?))
    });
    assert_eq!(after, before, "an ended app reads the same after a restart");
}
