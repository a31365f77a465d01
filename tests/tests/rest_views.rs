//! What the REST API and the CLI show of a live cluster — the daemon in this process, real
//! `gantry-agent`s on loopback: a request's labels as submitted, progress as the share of the
//! containers an app needs that completed, and `GET /nodes?states=` filtering by state.

use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::{AppInfo, AppState, SubmitApp};
use gantry_tests::{TestAgent, gantry_cli, wait_until};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

/// The names of the nodes `GET /nodes{query}` answers, sorted.
fn node_names(rt: &tokio::runtime::Runtime, client: &Client, query: &str) -> Vec<String> {
    let v = rt.block_on(client.get_value(&format!("/ws/v1/cluster/nodes{query}"))).expect(query);
    let mut names: Vec<String> = v["nodes"]["node"]
        .as_array()
        .expect("a node array")
        .iter()
        .map(|n| n["id"].as_str().expect("an id").to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn labels_progress_and_node_states_read_back_from_a_live_cluster() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\n\
         data_dir = {:?}\n",
        dir.path().join("data").display().to_string()
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &toml);
    let _k9 = TestAgent::start(dir.path(), "views-k9", "r1", &[("kind", "k9")], bound.agent_addr);
    let _plain = TestAgent::start(dir.path(), "views-plain", "r1", &[], bound.agent_addr);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    wait_until("both nodes", GUARD, || (rt.block_on(client.nodes()).ok()?.len() == 2).then_some(()));

    // A selector given to the CLI is shown back by the API and by `gantry app`, and enforced.
    let out = gantry_cli(
        &api,
        &["submit", "--json", "--label", "kind=k9", "--cpu", "10m", "--mem", "16M", "--", "sleep", "600"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let labelled = serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
        .as_u64()
        .expect("id");
    let app = wait_until("the labelled app's container", GUARD, || {
        rt.block_on(client.app(labelled)).ok().filter(|a| a.containers.len() == 1)
    });
    assert_eq!(app.requests[0].labels, BTreeMap::from([("kind".to_owned(), "k9".to_owned())]));
    assert_eq!(app.containers[0].node_id, "views-k9", "the selector is enforced");
    let raw = rt.block_on(client.get_value(&format!("/ws/v1/cluster/apps/{labelled}"))).expect("raw app");
    assert_eq!(raw["app"]["requests"][0]["labels"], json!({"kind": "k9"}));
    let out = gantry_cli(&api, &["app", &labelled.to_string()]);
    let page = String::from_utf8_lossy(&out.stdout);
    let group = page.lines().skip_while(|l| !l.starts_with("GROUP")).nth(1).unwrap_or_default();
    assert!(group.contains("kind=k9"), "`gantry app` shows the selector:\n{page}");

    // Two groups, one container each: one completes, the other runs on. Half of the app's
    // containers completed, though both were placed.
    let half: SubmitApp = serde_json::from_value(json!({
        "application-name": "half",
        "containers": [
            {"resource": {"cpuMillis": 10, "memoryBytes": 16 << 20}, "command": ["true"]},
            {"resource": {"cpuMillis": 10, "memoryBytes": 16 << 20}, "command": ["sleep", "600"]}
        ]
    }))
    .expect("submission");
    let half = rt.block_on(client.submit(&half)).expect("submitted");
    let done_and_running = |a: &AppInfo| {
        a.state == AppState::Running && a.requests[0].completed == 1 && a.requests[1].placed == 1
    };
    let app = wait_until("one container completed, one running", GUARD, || {
        rt.block_on(client.app(half)).ok().filter(done_and_running)
    });
    assert_eq!(app.progress, 50.0, "{app:?}");
    assert_eq!((app.requests[0].placed, app.requests[1].completed), (1, 0));

    // Node states filter the listing, by YARN's names in any case; an unknown one is refused.
    assert_eq!(node_names(&rt, &client, "?states=RUNNING"), ["views-k9", "views-plain"]);
    rt.block_on(client.set_node_drain("views-plain", true)).expect("drain");
    assert_eq!(node_names(&rt, &client, "?states=RUNNING"), ["views-k9"]);
    assert_eq!(node_names(&rt, &client, "?states=decommissioning"), ["views-plain"]);
    assert_eq!(node_names(&rt, &client, "?states=LOST,UNHEALTHY"), Vec::<String>::new());
    assert_eq!(node_names(&rt, &client, ""), ["views-k9", "views-plain"]);
    let e = rt.block_on(client.get_value("/ws/v1/cluster/nodes?states=ASLEEP")).expect_err("unknown state");
    assert_eq!(e.status(), Some(400), "{e}");

    for id in [labelled, half] {
        rt.block_on(client.kill(id)).expect("kill");
    }
}
