//! Retention of ended applications on a real daemon and agent. Ended applications beyond
//! `[engine] max_completed_apps` leave memory but not the store: the listing shows only the
//! newest, and each older one is still found by id, read from SQLite, with the state and
//! diagnostics it ended with. Beyond `[store] max_completed_apps` they leave the store too, in
//! the background, and are unknown from then on.

use gantry_scheduler::api::AppFilter;
use gantry_scheduler::api::client::{Client, ClientError};
use gantry_scheduler::api::types::AppState;
use gantry_tests::{TestAgent, gantry_cli, sample, scrape, wait_until};
use std::path::Path;
use std::time::Duration;

/// A daemon on ephemeral ports, storing in `dir/data`, with `extra` sections.
fn daemon_toml(dir: &Path, extra: &str) -> String {
    format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\n\
         data_dir = {:?}\n{extra}",
        dir.join("data").display().to_string()
    )
}

/// Submits each command in turn and waits for it to end before the next, so they end in this
/// order; returns their ids.
fn run_one_by_one(rt: &tokio::runtime::Runtime, client: &Client, api: &str, commands: &[&str]) -> Vec<u64> {
    let mut ids = Vec::new();
    for cmd in commands {
        let out = gantry_cli(
            api,
            &["submit", "--json", "--max-attempts", "1", "--cpu", "10m", "--mem", "16M", "--", cmd],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
            .as_u64()
            .expect("id");
        wait_until("the app to end", Duration::from_secs(60), || {
            rt.block_on(client.app(id)).ok().filter(|a| a.state.is_terminal()).map(|_| ())
        });
        ids.push(id);
    }
    ids
}

#[test]
fn an_ended_app_older_than_memory_keeps_is_still_found_by_id_from_the_store() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    // The store keeps more than memory, so the older ones stay readable whatever the pruning.
    let toml =
        daemon_toml(dir.path(), "[engine]\nmax_completed_apps = 1\n[store]\nmax_completed_apps = 10\n");
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &toml);
    let _agent = TestAgent::start(dir.path(), "retention-node", "r1", &[], bound.agent_addr);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    let ids = run_one_by_one(&rt, &client, &api, &["true", "false", "true"]);
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

/// The ids of the applications and containers in the daemon's store file, read beside it.
fn stored(db: &Path) -> (Vec<u64>, Vec<u64>) {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open the store read-only");
    let ids = |sql: &str| -> Vec<u64> {
        let mut stmt = conn.prepare(sql).expect("query");
        stmt.query_map([], |r| r.get(0)).expect("rows").collect::<Result<_, _>>().expect("ids")
    };
    (ids("SELECT id FROM apps ORDER BY id"), ids("SELECT app FROM containers ORDER BY app"))
}

#[test]
fn ended_apps_beyond_the_store_retention_are_pruned_in_the_background_and_then_unknown() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = daemon_toml(
        dir.path(),
        "[engine]\nmax_completed_apps = 1\n[store]\nmax_completed_apps = 2\nprune_interval = \"200ms\"\n",
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &toml);
    let _agent = TestAgent::start(dir.path(), "pruned-node", "r1", &[], bound.agent_addr);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    let ids = run_one_by_one(&rt, &client, &api, &["true", "false", "true", "true"]);

    // The two that ended last stay, with their containers; the pruner removes the rest.
    let db = dir.path().join("data").join("gantry.db");
    let (apps, containers) =
        wait_until("the store to hold only the retained apps", Duration::from_secs(60), || {
            let (apps, containers) = stored(&db);
            (apps.len() == 2).then_some((apps, containers))
        });
    assert_eq!(apps, [ids[2], ids[3]]);
    assert_eq!(containers, [ids[2], ids[3]], "one container each; the pruned apps' went with them");

    // Pruned: neither in memory (which keeps one) nor in the store.
    for &pruned in &ids[..2] {
        match rt.block_on(client.app(pruned)) {
            Err(ClientError::Api { status: 404, .. }) => {}
            other => panic!("app {pruned} was pruned, yet: {other:?}"),
        }
    }
    // Retained: the older one from the store, the newer one from memory.
    let from_store = rt.block_on(client.app(ids[2])).expect("a retained app, from the store");
    assert_eq!(from_store.state, AppState::Finished);
    let from_memory = rt.block_on(client.app(ids[3])).expect("the newest, from memory");
    assert_eq!(from_memory.state, AppState::Finished);

    let metrics = scrape(bound.api_addr);
    assert_eq!(sample(&metrics, "gantry_store_pruned_apps_total"), Some(2.0), "{metrics}");
    assert!(sample(&metrics, "gantry_store_prune_duration_seconds_count").unwrap_or(0.0) >= 1.0);
}
