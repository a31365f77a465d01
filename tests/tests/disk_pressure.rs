//! Disk on a shared node (issue 19, item 3), on the real daemon, real agents and real processes,
//! each agent's work root a small tmpfs of its own that the test fills (needs root, as the
//! cgroup tests do):
//!
//! - a container that fills the work filesystem ends as its own failure, with its exit status
//!   (not LOST and rerun); the node reports `DiskPressure` until the agent has cleaned up after
//!   ended containers, earliest first, and then takes work again;
//! - a container over its disk allowance is killed with the reason `disk-limit`, and its
//!   application is told how much it used of how much;
//! - a node whose work filesystem is full takes no new work while a healthy node beside it runs
//!   every application, `gantry nodes` and the metrics say why, an operator's drain is not
//!   undone by the condition clearing, and the node comes back when space returns;
//! - a launch that fails for a full disk says so (no "exit 127", no empty logs), and launches
//!   that keep failing take the node out of service until the condition clears;
//! - an ended container's work is removed after its retention, its logs still read, and a
//!   running container's files are never touched.

use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::{AppInfo, AppState, ContainerState, NodeState};
use gantry_tests::{TestAgent, Tmpfs, container_control_dir, fill_disk, gantry_cli, wait_until};
use std::path::Path;
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

/// An in-process scheduler with short cycles and node timeout.
fn scheduler(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
) -> (gantry_scheduler::server::Bound, tokio::sync::oneshot::Sender<()>) {
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\n\
         node_timeout_ms = 5000\ndata_dir = {:?}\n",
        dir.join("data").display().to_string()
    );
    gantry_tests::start_daemon(rt, &toml)
}

/// `gantry submit --json ARGS` of a small container, returning the new application's id.
fn submit(api: &str, args: &[&str]) -> u64 {
    submit_with_memory(api, "16M", args)
}

/// [`submit`] with `memory` (tmpfs pages are charged to the writer's memory cgroup: a container
/// that writes 20 MiB there needs more than that of memory).
fn submit_with_memory(api: &str, memory: &str, args: &[&str]) -> u64 {
    let out = gantry_cli(api, &[&["submit", "--json", "--cpu", "10m", "--mem", memory], args].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
        .as_u64()
        .expect("id")
}

fn ended(rt: &tokio::runtime::Runtime, client: &Client, app: u64) -> AppInfo {
    wait_until(&format!("application {app} to end"), GUARD, || {
        rt.block_on(client.app(app)).ok().filter(|a| a.state.is_terminal())
    })
}

/// `gantry nodes`' line for `node`.
fn nodes_line(api: &str, node: &str) -> String {
    let out = gantry_cli(api, &["nodes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(node))
        .unwrap_or_default()
        .to_owned()
}

fn wait_running(rt: &tokio::runtime::Runtime, client: &Client, names: &[&str]) {
    wait_until("the nodes to register", GUARD, || {
        let nodes = rt.block_on(client.nodes()).ok()?;
        names
            .iter()
            .all(|name| nodes.iter().any(|n| n.id == *name && n.state == NodeState::Running))
            .then_some(())
    });
}

#[test]
fn a_container_that_fills_the_disk_or_passes_its_allowance_fails_as_itself_and_is_not_rerun() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let _fs = Tmpfs::mount(&dir.path().join("disk-node"), "48m");
    let (bound, _stop) = scheduler(&rt, dir.path());
    let agent = TestAgent::start_with(
        dir.path(),
        "disk-node",
        "r1",
        &[],
        bound.agent_addr,
        "disk_check_interval_ms = 200\n",
    );
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    wait_running(&rt, &client, &["disk-node"]);

    // 1. It fills the whole work filesystem (its allowance, 10 GiB by default, is larger) and
    //    exits 3 when its write fails. Before: the supervisor could not record the exit on the
    //    full disk, so the container was reported LOST and run again.
    let filler = submit_with_memory(
        &api,
        "256M",
        &[
            "--max-attempts",
            "1",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=fill bs=1M count=200 2>/dev/null; exit 3",
        ],
    );
    let app = ended(&rt, &client, filler);
    assert_eq!(app.containers.len(), 1, "run once, not rerun: {:?}", app.containers);
    let c = &app.containers[0];
    assert_eq!(
        (app.state, c.state, c.exit_code),
        (AppState::Failed, ContainerState::Failed, Some(3)),
        "{app:?}"
    );
    assert!(c.diagnostics.contains("exited with status 3"), "{}", c.diagnostics);
    // The full disk is pressure; the agent cleans up after the ended container (its exit is
    // reported) without waiting for its retention, and the node takes work again.
    // (Waiting for both: the node may still look healthy before the agent's first disk round
    // has seen the pressure.)
    let control = container_control_dir(&agent.work, c.id).expect("its control directory");
    wait_until("its files to be cleaned up and the node to come back", GUARD, || {
        let n = rt.block_on(client.node("disk-node")).ok()?;
        let back = n.state == NodeState::Running && n.health_report.is_empty();
        (back && !control.join("work").exists()).then_some(())
    });

    // 2. Over its allowance (8 MiB, asked for with `--disk`): killed with the reason disk-limit,
    //    and told how much it used of how much.
    let hog = submit_with_memory(
        &api,
        "256M",
        &[
            "--max-attempts",
            "1",
            "--disk",
            "8M",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=big bs=1M count=20 2>/dev/null; sleep 60",
        ],
    );
    let app = ended(&rt, &client, hog);
    assert_eq!(app.containers.len(), 1, "not rerun: {:?}", app.containers);
    let c = &app.containers[0];
    assert_eq!((app.state, c.state, c.exit_code), (AppState::Failed, ContainerState::Failed, Some(137)));
    // Measured while it wrote: somewhere past 8 MiB, at most its 20.
    assert!(
        c.diagnostics.contains("was killed for writing beyond its disk allowance: it used "),
        "{}",
        c.diagnostics
    );
    assert!(c.diagnostics.contains("of its 8Mi disk allowance (exit status 137)"), "{}", c.diagnostics);
    assert!(app.diagnostics.contains("disk allowance"), "{}", app.diagnostics);
    let metrics = gantry_tests::scrape(agent.metrics.parse().expect("address"));
    assert_eq!(
        gantry_tests::sample(&metrics, "gantry_container_kills_total{reason=\"disk-limit\"}"),
        Some(1.0)
    );
}

#[test]
fn a_node_under_disk_pressure_takes_no_new_work_says_why_and_comes_back() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = dir.path().join("full");
    let _fs = Tmpfs::mount(&fs, "32m");
    let (bound, _stop) = scheduler(&rt, dir.path());
    let extra = "disk_check_interval_ms = 200\n";
    let _full =
        TestAgent::start_with(dir.path(), "full", "r1", &[("disk", "small")], bound.agent_addr, extra);
    let _healthy = TestAgent::start_with(dir.path(), "healthy", "r1", &[], bound.agent_addr, extra);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    wait_running(&rt, &client, &["full", "healthy"]);

    fill_disk(&fs.join("filler"));
    let line = wait_until("gantry nodes to show the pressure", GUARD, || {
        Some(nodes_line(&api, "full")).filter(|l| l.contains("DiskPressure"))
    });
    assert!(line.contains("UNHEALTHY") && line.contains("of its space free"), "{line}");
    let node = rt.block_on(client.node("full")).expect("node");
    assert!(node.health_report.starts_with("DiskPressure: "), "{}", node.health_report);
    let metrics = gantry_tests::scrape(bound.api_addr);
    assert_eq!(
        gantry_tests::sample(&metrics, "gantry_node_condition{node=\"full\",condition=\"DiskPressure\"}"),
        Some(1.0)
    );

    // Ten applications, one attempt each: all run on the healthy node.
    let apps: Vec<u64> = (0..10)
        .map(|i| submit(&api, &["--max-attempts", "1", "--", "sh", "-c", &format!("echo {i}")]))
        .collect();
    for id in apps {
        let app = ended(&rt, &client, id);
        assert_eq!(app.state, AppState::Finished, "{app:?}");
        assert!(app.containers.iter().all(|c| c.node_id == "healthy"), "{:?}", app.containers);
    }

    // An operator drains it meanwhile; space returns: the condition clears, the drain stands.
    let out = gantry_cli(&api, &["node", "drain", "full"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(fs.join("filler")).expect("free the space");
    let node = wait_until("the pressure to clear", GUARD, || {
        rt.block_on(client.node("full")).ok().filter(|n| n.health_report.is_empty())
    });
    assert_eq!(node.state, NodeState::Decommissioning, "the drain is not undone: {node:?}");
    let metrics = gantry_tests::scrape(bound.api_addr);
    assert_eq!(
        gantry_tests::sample(&metrics, "gantry_node_condition{node=\"full\",condition=\"DiskPressure\"}"),
        None
    );
    let out = gantry_cli(&api, &["node", "undrain", "full"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(nodes_line(&api, "full").contains("RUNNING"), "{}", nodes_line(&api, "full"));
    let back = submit(&api, &["--max-attempts", "1", "--label", "disk=small", "--", "true"]);
    let app = ended(&rt, &client, back);
    assert_eq!((app.state, app.containers[0].node_id.as_str()), (AppState::Finished, "full"));
}

#[test]
fn a_launch_that_fails_for_a_full_disk_says_so_and_failing_launches_take_the_node_out() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = dir.path().join("lf");
    let _fs = Tmpfs::mount(&fs, "16m");
    let (bound, _stop) = scheduler(&rt, dir.path());
    // Pressure checks off, so that launches reach the full disk.
    let extra = "disk_check_interval_ms = 200\ndisk_pressure_free_percent = 0\nlaunch_failures_threshold = 2\n\
                 launch_failures_clear_ms = 3000\n";
    let _agent = TestAgent::start_with(dir.path(), "lf", "r1", &[], bound.agent_addr, extra);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    wait_running(&rt, &client, &["lf"]);
    fill_disk(&fs.join("filler"));

    let first = submit(&api, &["--max-attempts", "1", "--", "true"]);
    let app = ended(&rt, &client, first);
    let c = &app.containers[0];
    assert_eq!((c.state, c.exit_code), (ContainerState::Failed, None), "it never ran: no exit status: {c:?}");
    assert!(c.diagnostics.contains("could not be launched on node lf"), "{}", c.diagnostics);
    assert!(c.diagnostics.contains("No space left on device"), "the real reason: {}", c.diagnostics);
    let logs = gantry_cli(&api, &["logs", &first.to_string()]);
    assert!(!logs.status.success(), "no empty log for a container that never ran");
    let said = String::from_utf8_lossy(&logs.stderr);
    assert!(said.contains("no logs") && said.contains("No space left on device"), "{said}");

    // A second failure in a row: the node reports LaunchFailures and takes no new work.
    ended(&rt, &client, submit(&api, &["--max-attempts", "1", "--", "true"]));
    let line = wait_until("gantry nodes to show the failures", GUARD, || {
        Some(nodes_line(&api, "lf")).filter(|l| l.contains("LaunchFailures"))
    });
    assert!(line.contains("UNHEALTHY") && line.contains("No space left on device"), "{line}");
    let waiting = submit(&api, &["--max-attempts", "1", "--", "true"]);
    std::thread::sleep(Duration::from_millis(500));
    let app = rt.block_on(client.app(waiting)).expect("app");
    assert!(app.containers.is_empty(), "nothing is placed on it: {app:?}");

    // Space returns; the condition clears with time (nothing can launch there to clear it), and
    // the waiting application runs.
    std::fs::remove_file(fs.join("filler")).expect("free the space");
    let app = ended(&rt, &client, waiting);
    assert_eq!(app.state, AppState::Finished, "{app:?}");
}

#[test]
fn an_ended_containers_work_is_cleaned_after_retention_and_its_logs_still_read() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (bound, _stop) = scheduler(&rt, dir.path());
    let extra = "disk_check_interval_ms = 200\nwork_retention_ms = 1000\nlog_retention_ms = 600000\n";
    let agent = TestAgent::start_with(dir.path(), "tidy", "r1", &[], bound.agent_addr, extra);
    let api = bound.api_addr.to_string();
    let client = Client::new(&api).expect("client");
    wait_running(&rt, &client, &["tidy"]);

    let live = submit(&api, &["--", "sh", "-c", "head -c 100000 /dev/zero > data; echo live; sleep 120"]);
    let done = submit(
        &api,
        &["--", "sh", "-c", "echo hello out; echo hello err >&2; head -c 100000 /dev/zero > data"],
    );
    let app = ended(&rt, &client, done);
    assert_eq!(app.state, AppState::Finished, "{app:?}");
    let control = container_control_dir(&agent.work, app.containers[0].id).expect("control directory");
    wait_until("its work to be cleaned up", GUARD, || (!control.join("work").exists()).then_some(()));

    let out = gantry_cli(&api, &["logs", &done.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello out\n");
    let out = gantry_cli(&api, &["logs", "--stderr", &done.to_string()]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello err\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The running container's files stay, however long past the retention it runs.
    let running = wait_until("the long container to run", GUARD, || {
        let a = rt.block_on(client.app(live)).ok()?;
        a.containers.first().filter(|c| c.state == ContainerState::Running).map(|c| c.id)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let live_dir = container_control_dir(&agent.work, running).expect("control directory");
    assert!(live_dir.join("work").join("data").exists(), "a running container's files are never removed");
    let out = gantry_cli(&api, &["logs", &live.to_string()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "live\n");
}
