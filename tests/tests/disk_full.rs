//! The scheduler's disk fills up (issue 10's fault injection): its data directory is a small
//! tmpfs of its own, filled to the last byte while the daemon runs. Submissions are refused with
//! 503 and a message and nothing refused runs (the engine had taken each one before the commit
//! failed: it is withdrawn, KILLED with the reason); what was acknowledged before stays; when space
//! returns, service resumes; the store passes SQLite's integrity check afterwards. Needs root
//! (mount), as the cgroup tests do.

use gantry_scheduler::api::client::{Client, ClientError};
use gantry_scheduler::api::types::SubmitApp;
use std::time::Duration;

fn app(name: &str) -> SubmitApp {
    serde_json::from_value(serde_json::json!({
        "application-name": name,
        "containers": [{"resource": {"cpuMillis": 10, "memoryBytes": 1 << 20, "gpus": 0}, "command": ["true"]}]
    }))
    .expect("submission")
}

#[test]
fn a_full_disk_refuses_submissions_with_503_and_service_resumes_when_space_returns() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let _fs = gantry_tests::Tmpfs::mount(&data, "8m");
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\ndata_dir = {:?}\n",
        data.display().to_string()
    );
    let (bound, stop) = gantry_tests::start_daemon(&rt, &toml);
    let client =
        Client::new(&bound.api_addr.to_string()).expect("client").with_timeout(Duration::from_secs(20));

    let before = rt.block_on(client.submit(&app("before"))).expect("accepted while there is room");

    gantry_tests::fill_disk(&data.join("filler"));
    let mut refused = 0;
    let mut accepted_while_full = Vec::new();
    for i in 0..20 {
        match rt.block_on(client.submit(&app(&format!("full-{i}")))) {
            Err(ClientError::Api { status: 503, message, .. }) => {
                assert!(message.contains("stored"), "{message}");
                refused += 1;
            }
            Ok(id) => accepted_while_full.push(id),
            Err(e) => panic!("submission {i}: {e}"),
        }
    }
    // SQLite may still fit a page or two in space it holds; most submissions must be refused.
    assert!(refused >= 15, "{refused} of 20 refused; accepted {accepted_while_full:?}");
    // Nothing refused runs: the engine had taken each submission before its commit failed, so
    // it withdraws it — KILLED, with the reason — and no container of it is left.
    std::thread::sleep(Duration::from_millis(300));
    for a in rt.block_on(client.apps(&Default::default())).expect("list") {
        if a.id == before || accepted_while_full.contains(&a.id) {
            continue;
        }
        assert_eq!(
            a.state,
            gantry_scheduler::api::types::AppState::Killed,
            "refused app {} is {:?}",
            a.id,
            a.state
        );
        assert!(a.diagnostics.contains("could not be stored"), "{}", a.diagnostics);
    }

    // Space returns: service resumes without a restart.
    std::fs::remove_file(data.join("filler")).expect("free the space");
    let after = rt.block_on(client.submit(&app("after"))).expect("accepted again");

    // Stop, and check the store: intact, and holding every acknowledged app.
    let _ = stop.send(());
    std::thread::sleep(Duration::from_millis(500));
    let store = gantry_scheduler::store::Store::open(data.join("gantry.db")).expect("store opens");
    store.check_integrity().expect("integrity");
    let ids: Vec<u64> = store.load().expect("load").apps.iter().map(|a| a.id.0).collect();
    for id in [before, after].iter().chain(&accepted_while_full) {
        assert!(ids.contains(id), "acknowledged app {id} is stored: {ids:?}");
    }
}
