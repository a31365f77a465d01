//! A network partition between an agent and the scheduler (issue 10's fault injection), on real
//! network namespaces joined by a veth pair. The scheduler and a second agent share one
//! namespace; the partitioned agent is alone in the other. Cutting the link (the partitioned
//! side's veth set down: the scheduler's packets to it vanish, no RST reaches either side) must
//! make the scheduler declare the node lost after its node timeout and rerun the app on the other
//! agent, and make the partitioned agent kill its copy after its fencing timeout. On heal the
//! agent registers again, its fenced exit is acknowledged, nothing is started a second time, and
//! the node is RUNNING again.
//!
//! Needs root and iproute2 (`ip netns`, veth) and `nsenter` (util-linux). Addresses are from
//! 198.18.0.0/15 (RFC 2544, benchmarking) and exist only inside the test's own namespaces.
//! The figures it prints (node lost, rerun, fenced, overlap of the two copies) are recorded in
//! RELIABILITY.md; only their order is asserted.

use gantry_tests::{KilledOnDrop, TestAgent, gantry_cli_in, start_scheduler_in, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A correctness bound on every wait, never a timing assertion.
const GUARD: Duration = Duration::from_secs(60);
const SCHEDULER_IP: &str = "198.18.0.1";
const AGENT_IP: &str = "198.18.0.2";
const NODE_TIMEOUT_MS: u64 = 3_000;
const FENCING_TIMEOUT_MS: u64 = 2_000;

/// Runs `ip ARGS`, failing the test with iproute2's words if it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("running `ip` failed ({e}): this test needs iproute2 (ip netns, veth) and root")
    });
    assert!(
        out.status.success(),
        "ip {} failed: {} (this test needs root and iproute2 with network namespaces)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A network namespace of the test's own, deleted when dropped (with the veth end inside it,
/// which takes its peer along).
struct NetNs(String);

impl NetNs {
    fn add(name: String) -> NetNs {
        ip(&["netns", "add", &name]);
        let ns = NetNs(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.0)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The scheduler's REST API, reached from inside its namespace.
struct Api<'a> {
    netns: &'a Path,
    addr: String,
}

impl Api<'_> {
    fn json(&self, args: &[&str]) -> Option<Value> {
        let out = gantry_cli_in(Some(self.netns), &self.addr, args);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("the CLI's JSON"))
    }

    fn node_state(&self, node: &str) -> Option<String> {
        let v = self.json(&["nodes", "--json"])?;
        let nodes = v["nodes"]["node"].as_array()?;
        let n = nodes.iter().find(|n| n["id"] == node)?;
        n["state"].as_str().map(str::to_owned)
    }

    /// Submits `gantry submit ARGS` and returns the new app's id.
    fn submit(&self, args: &[&str]) -> u64 {
        let out = gantry_cli_in(Some(self.netns), &self.addr, &[&["submit"], args].concat());
        assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
        // "application ID accepted"
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace().nth(1).and_then(|w| w.parse().ok()).expect("the app's id in the CLI's answer")
    }

    fn app(&self, id: u64) -> Option<Value> {
        Some(self.json(&["app", &id.to_string(), "--json"])?["app"].clone())
    }
}

/// The containers of an app: (id, state, node).
fn containers(app: &Value) -> Vec<(u64, String, String)> {
    app["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (c["id"].as_u64().unwrap_or_default(), s("state"), s("nodeId"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn command_pid(work: &Path, container: u64) -> Option<u64> {
    let text =
        std::fs::read_to_string(gantry_tests::container_control_dir(work, container)?.join("pid")).ok()?;
    serde_json::from_str::<Value>(&text).ok()?["pid"].as_u64()
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// One sample of an agent's `/metrics`, fetched from inside its namespace (bash's /dev/tcp: no
/// HTTP client needed there).
fn agent_metric(netns: &Path, metrics: &str, series: &str) -> Option<f64> {
    let (host, port) = metrics.rsplit_once(':')?;
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port} && printf 'GET /metrics HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' >&3 && cat <&3"
    );
    let out = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["bash", "-c", &script])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_partitioned_agent_fences_its_copy_the_scheduler_reruns_it_and_they_reconcile_on_heal() {
    let pid = std::process::id();
    // Dropped last (declared first): processes go before their namespaces.
    let server_ns = NetNs::add(format!("gantry-part-s-{pid}"));
    let agent_ns = NetNs::add(format!("gantry-part-a-{pid}"));
    let (veth_agent, veth_server) = (format!("gpa{pid}"), format!("gps{pid}"));
    ip(&[
        "link",
        "add",
        &veth_agent,
        "netns",
        &agent_ns.0,
        "type",
        "veth",
        "peer",
        "name",
        &veth_server,
        "netns",
        &server_ns.0,
    ]);
    ip(&["-n", &server_ns.0, "addr", "add", &format!("{SCHEDULER_IP}/30"), "dev", &veth_server]);
    ip(&["-n", &agent_ns.0, "addr", "add", &format!("{AGENT_IP}/30"), "dev", &veth_agent]);
    ip(&["-n", &server_ns.0, "link", "set", &veth_server, "up"]);
    ip(&["-n", &agent_ns.0, "link", "set", &veth_agent, "up"]);

    let dir = tempfile::tempdir().expect("tempdir");
    let shared = gantry_tests::container_writable_dir(dir.path(), "out");
    let out_file = shared.join("copies");

    // The agent endpoint listens beyond loopback (on the veth), so agents join with a token.
    std::fs::write(dir.path().join("join"), "partition-test-join-token\n").expect("join token");
    let config = dir.path().join("scheduler.toml");
    let (api_addr, agent_port) = ("127.0.0.1:7070", 7071);
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"{api_addr}\"\nagent_listen = \"{SCHEDULER_IP}:{agent_port}\"\ndata_dir = \"data\"\n\
             node_timeout_ms = {NODE_TIMEOUT_MS}\ncycle_interval_ms = 100\n[security]\njoin_token_file = \"join\"\n"
        ),
    )
    .expect("scheduler config");
    let (server_path, agent_path) = (server_ns.path(), agent_ns.path());
    let _scheduler: KilledOnDrop = start_scheduler_in(Some(&server_path), &config);
    let api = Api { netns: &server_path, addr: api_addr.to_owned() };
    let scheduler: std::net::SocketAddr = format!("{SCHEDULER_IP}:{agent_port}").parse().expect("address");
    let agent_extra = format!(
        "join_token_file = {:?}\nfencing_timeout_ms = {FENCING_TIMEOUT_MS}",
        dir.path().join("join").display().to_string()
    );
    let far = TestAgent::start_in(Some(&agent_path), dir.path(), "far", "r1", &[], scheduler, &agent_extra);
    wait_until("the far agent to register", GUARD, || {
        (api.node_state("far").as_deref() == Some("RUNNING")).then_some(())
    });

    // The app appends its container id and the time to a shared file every 100 ms.
    let script = format!(
        "while :; do echo \"$GANTRY_CONTAINER_ID $(date +%s%3N)\" >> {}; sleep 0.1; done",
        out_file.display()
    );
    let app_id = api.submit(&["--cpu", "100m", "--mem", "16M", "--", "sh", "-c", &script]);
    let first = wait_until("the app to run on the far agent", GUARD, || {
        let cs = containers(&api.app(app_id)?);
        cs.first().filter(|(_, state, node)| state == "RUNNING" && node == "far").map(|c| c.0)
    });
    wait_until("the first copy's output", GUARD, || {
        gantry_tests::container_timestamps(&out_file).iter().any(|l| l.0 == first).then_some(())
    });
    let first_pid = wait_until("the first copy's pid", GUARD, || command_pid(&far.work, first));

    // The second agent, beside the scheduler, gives the work somewhere to rerun.
    let _near =
        TestAgent::start_in(Some(&server_path), dir.path(), "near", "r1", &[], scheduler, &agent_extra);
    wait_until("the near agent to register", GUARD, || {
        (api.node_state("near").as_deref() == Some("RUNNING")).then_some(())
    });

    // Cut: the far side's veth goes down. Nothing is reset; packets just stop arriving.
    let cut_ms = now_ms();
    ip(&["-n", &agent_ns.0, "link", "set", &veth_agent, "down"]);

    let lost_ms = wait_until("the scheduler to declare the far node lost", GUARD, || {
        (api.node_state("far").as_deref() == Some("LOST")).then(now_ms)
    });
    let second = wait_until("the app to rerun on the near agent", GUARD, || {
        let cs = containers(&api.app(app_id)?);
        cs.iter().find(|(id, state, node)| *id != first && state == "RUNNING" && node == "near").map(|c| c.0)
    });
    wait_until("the first copy to be killed by the fenced agent", GUARD, || {
        (!alive(first_pid)).then_some(())
    });
    wait_until("the second copy's output", GUARD, || {
        gantry_tests::container_timestamps(&out_file).iter().any(|l| l.0 == second).then_some(())
    });
    let heal_ms = now_ms();
    let reason = gantry_tests::container_control_dir(&far.work, first)
        .and_then(|dir| std::fs::read_to_string(dir.join("kill-reason")).ok())
        .expect("the fenced agent recorded why it killed the first copy");
    assert_eq!(reason.trim(), "fenced");

    let lines = gantry_tests::container_timestamps(&out_file);
    let first_last = lines.iter().filter(|l| l.0 == first).map(|l| l.1).max().expect("first copy's lines");
    let second_first =
        lines.iter().filter(|l| l.0 == second).map(|l| l.1).min().expect("second copy's lines");
    assert!(first_last < heal_ms, "the first copy stopped while the link was still cut");
    eprintln!(
        "partition figures (ms after the cut): node lost {}, first copy's last line {}, second copy's first line {}, overlap of the copies {} (negative: a gap)",
        lost_ms - cut_ms,
        first_last.saturating_sub(cut_ms),
        second_first.saturating_sub(cut_ms),
        first_last as i64 - second_first as i64,
    );

    // Heal: the far agent registers again and reports the fenced exit, which the scheduler
    // acknowledges (the agent marks it reported) without starting anything.
    ip(&["-n", &agent_ns.0, "link", "set", &veth_agent, "up"]);
    wait_until("the far node to be RUNNING again", GUARD, || {
        (api.node_state("far").as_deref() == Some("RUNNING")).then_some(())
    });
    let reported = gantry_tests::container_control_dir(&far.work, first)
        .expect("the first copy's directory")
        .join("reported");
    wait_until("the fenced exit to be acknowledged", GUARD, || reported.exists().then_some(()));
    eprintln!(
        "partition figures: far node RUNNING and its exit acknowledged {} ms after the heal",
        now_ms() - heal_ms
    );
    assert_eq!(
        agent_metric(&agent_path, &far.metrics, "gantry_container_kills_total{reason=\"fenced\"}"),
        Some(1.0),
        "the far agent counted one fenced container"
    );
    // A new app placed and finished after the reconciliation proves that a scheduling cycle
    // ran after it: had the fenced exit made the scheduler rerun anything, it would show now.
    let probe_id = api.submit(&["--cpu", "10m", "--mem", "8M", "--", "true"]);
    wait_until("an app submitted after the heal to finish", GUARD, || {
        (api.app(probe_id)?["state"] == "FINISHED").then_some(())
    });
    let app = api.app(app_id).expect("the app");
    let cs = containers(&app);
    // (The lost first copy may already be compacted out of the app's list.)
    assert!(cs.iter().all(|c| c.0 == first || c.0 == second), "one rerun and no more: {cs:?}");
    assert!(cs.contains(&(second, "RUNNING".to_owned(), "near".to_owned())), "the rerun left alone: {cs:?}");
    assert_eq!(app["state"], "RUNNING");
    assert_eq!(app["failures"], 0, "a node loss is not the app's failure");
    assert!(!alive(first_pid), "the first copy stays dead");
    let lines = gantry_tests::container_timestamps(&out_file);
    assert_eq!(
        lines.iter().filter(|l| l.0 == first).map(|l| l.1).max(),
        Some(first_last),
        "the first copy wrote nothing after it was fenced"
    );
    assert!(lines.iter().all(|l| l.0 == first || l.0 == second), "only the two copies ever ran");

    let out = gantry_cli_in(Some(api.netns), &api.addr, &["kill", &app_id.to_string()]);
    assert!(out.status.success(), "kill: {}", String::from_utf8_lossy(&out.stderr));
}
