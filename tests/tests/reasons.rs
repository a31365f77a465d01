//! What users are told, on the real daemon and a real agent: a container killed for exceeding
//! its memory limit shows the memory it used and its limit in its application's diagnostics
//! (not a bare "exit 137"); a request larger than every node is refused with a 4xx that names
//! the resource and the maximum, and nothing of it is stored; a request for a label no node
//! carries is accepted and says why it waits.

use gantry_scheduler::api::AppFilter;
use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::{AppState, NodeState, SubmitApp};
use gantry_tests::{TestAgent, gantry_cli, wait_until};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

/// `gantry submit --json ARGS`, returning the new application's id.
fn submit(api: &str, args: &[&str]) -> u64 {
    let out = gantry_cli(api, &[&["submit", "--json"], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
        .as_u64()
        .expect("id")
}

#[test]
fn users_are_told_why_a_container_ended_why_an_app_waits_and_why_a_request_is_refused() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\n\
         node_timeout_ms = 1000\ndata_dir = {:?}\n",
        data.display().to_string()
    );
    let started = Instant::now();
    let (bound, stop) = gantry_tests::start_daemon(&rt, &toml);
    let _agent = TestAgent::start(dir.path(), "reasons-node", "r1", &[], bound.agent_addr);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    let node = wait_until("the node to register", GUARD, || {
        rt.block_on(client.nodes()).ok()?.into_iter().find(|n| n.state == NodeState::Running)
    });

    // 1. Over its memory limit: the kernel (or the agent's monitor) ends it, and the app says
    //    how much it used of how much, in its diagnostics and its container's.
    let hog = "b = []\nwhile True: b.append(b'x' * (4 << 20))\n";
    let oom =
        submit(&api, &["--max-attempts", "1", "--cpu", "100m", "--mem", "32M", "--", "python3", "-c", hog]);
    let app = wait_until("the memory hog to fail", GUARD, || {
        rt.block_on(client.app(oom)).ok().filter(|a| a.state.is_terminal())
    });
    assert_eq!(app.state, AppState::Failed);
    assert!(
        app.diagnostics.contains("was killed for running beyond its memory limit"),
        "{}",
        app.diagnostics
    );
    assert!(app.diagnostics.contains("of 32Mi used"), "usage and limit: {}", app.diagnostics);
    assert!(app.diagnostics.ends_with("1 of 1 attempts used"), "{}", app.diagnostics);
    let container = app.containers.first().expect("its container is listed");
    assert!(container.diagnostics.contains("beyond its memory limit"), "{}", container.diagnostics);
    let shown = gantry_cli(&api, &["app", &oom.to_string()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("beyond its memory limit"), "gantry app shows it:\n{shown}");

    // 2. More memory than the node has: refused at submission (once the agents have had a node
    //    timeout to come back), naming the resource and the maximum; nothing is stored.
    std::thread::sleep(Duration::from_millis(1_100).saturating_sub(started.elapsed()));
    let too_big = node.total_resource.memory_bytes + (1 << 30);
    let body: SubmitApp = serde_json::from_value(serde_json::json!({
        "application-name": "too-big",
        "containers": [{"resource": {"cpuMillis": 100, "memoryBytes": too_big}, "command": ["true"]}],
    }))
    .expect("submission");
    let refused = rt.block_on(client.submit(&body)).expect_err("larger than every node");
    assert_eq!(refused.status(), Some(422), "{refused}");
    let message = refused.to_string();
    assert!(message.contains("invalid resource request") && message.contains("of memory"), "{message}");
    assert!(message.contains("maximum allocation"), "{message}");
    let listed: Vec<u64> =
        rt.block_on(client.apps(&AppFilter::default())).expect("apps").iter().map(|a| a.id).collect();
    assert_eq!(listed, [oom], "the refused request is not an application");

    // 3. A label no node carries: accepted (a node may join with it), and it says why it waits.
    let labelled = submit(&api, &["--label", "gpu=a100", "--cpu", "10m", "--mem", "16M", "--", "true"]);
    let waiting = wait_until("the reason to show", GUARD, || {
        let a = rt.block_on(client.app(labelled)).ok()?;
        (!a.diagnostics.is_empty()).then_some(a)
    });
    assert_eq!(waiting.state, AppState::Accepted);
    assert_eq!(waiting.diagnostics, "waiting: no node has label gpu=a100");

    // The store holds the two applications and nothing of the refused one.
    let _ = stop.send(());
    std::thread::sleep(Duration::from_millis(500));
    let store = gantry_scheduler::store::Store::open(data.join("gantry.db")).expect("store opens");
    let mut stored: Vec<u64> = store.load().expect("load").apps.iter().map(|a| a.id.0).collect();
    stored.sort_unstable();
    assert_eq!(stored, [oom, labelled]);
}
