//! Ended applications beyond `[engine] max_completed_apps` leave memory but not the store: the
//! listing shows only the newest, and each older one is still found by id, read from SQLite,
//! with the state and diagnostics it ended with.

use gantry_scheduler::api::AppFilter;
use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::AppState;
use gantry_tests::{TestAgent, gantry_cli, wait_until};
use std::time::Duration;

#[test]
fn an_ended_app_older_than_memory_keeps_is_still_found_by_id_from_the_store() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\n\
         data_dir = {:?}\n[engine]\nmax_completed_apps = 1\n",
        dir.path().join("data").display().to_string()
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &toml);
    let _agent = TestAgent::start(dir.path(), "retention-node", "r1", &[], bound.agent_addr);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    let mut ids = Vec::new();
    for cmd in ["true", "false", "true"] {
        let out = gantry_cli(
            &api,
            &["submit", "--json", "--max-attempts", "1", "--cpu", "10m", "--mem", "16M", "--", cmd],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
            .as_u64()
            .expect("id");
        // One at a time, so the oldest is the first to leave memory.
        wait_until("the app to end", Duration::from_secs(60), || {
            rt.block_on(client.app(id)).ok().filter(|a| a.state.is_terminal()).map(|_| ())
        });
        ids.push(id);
    }
    let listed: Vec<u64> =
        rt.block_on(client.apps(&AppFilter::default())).expect("apps").iter().map(|a| a.id).collect();
    assert_eq!(listed, [ids[2]], "memory keeps one ended app");
    // The older two come from the store, as they ended.
    let first = rt.block_on(client.app(ids[0])).expect("the first app, from the store");
    assert_eq!(first.state, AppState::Finished);
    let second = rt.block_on(client.app(ids[1])).expect("the second app, from the store");
    assert_eq!(second.state, AppState::Failed, "`false` exits 1 and had one attempt");
    assert!(!second.diagnostics.is_empty(), "its diagnostics were stored");
    assert!(rt.block_on(client.app(ids[2] + 100)).is_err(), "an id never stored is still unknown");
}
