//! Container logs through remote agents, on the real binaries: a `gantry-scheduler` that knows
//! nothing of its agents' disks, a `gantry-agent` on loopback with a work root of its own, and
//! the `gantry` CLI. The scheduler asks the agent that ran a container over its stream, as
//! YARN's ResourceManager leaves container logs to the NodeManager: `gantry logs` and
//! `GET …/containers/{id}/logs/{stdout,stderr}?tail=N` return what the container printed, for
//! finished and running containers; a node whose agent is gone answers 503 naming the node.
//! Timeouts are failure guards only.

use gantry_tests::{KilledOnDrop as Proc, agent_bin, kill_leftover_containers, start_scheduler};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

/// The agent, and what it leaves behind: containers outlive a killed agent by design.
struct Agent {
    proc: Proc,
    work: PathBuf,
    cgroup: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.proc.kill9();
        kill_leftover_containers(&self.work, &self.cgroup);
    }
}

fn gantry(api: &str, args: &[&str]) -> std::process::Output {
    gantry_tests::gantry_cli(api, args)
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.success(), "gantry failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One HTTP/1.1 GET; returns the status code and the body, or `None` when nothing listens.
fn try_http_get(api: &str, path: &str) -> Option<(u16, Vec<u8>)> {
    let mut s = std::net::TcpStream::connect(api).ok()?;
    s.set_read_timeout(Some(GUARD)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n").expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("end of the head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status code");
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "a log answer has a known length: {head}"
    );
    Some((status, raw[split + 4..].to_vec()))
}

/// One HTTP/1.1 GET to a listening scheduler; returns the status code and the body.
fn http_get(api: &str, path: &str) -> (u16, Vec<u8>) {
    try_http_get(api, path).expect("the scheduler listens")
}

/// An error answer's `RemoteException`.
fn remote_exception(body: &[u8]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(body).expect("a JSON error body");
    v["RemoteException"].clone()
}

fn wait<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    gantry_tests::wait_until(what, GUARD, f)
}

fn app(api: &str, id: u64) -> serde_json::Value {
    serde_json::from_str(&stdout_of(&gantry(api, &["app", &id.to_string(), "--json"]))).expect("JSON")
}

/// Waits for an app to reach `state`; returns its first container's id.
fn wait_state(api: &str, id: u64, state: &str) -> u64 {
    wait(&format!("app {id} to be {state}"), || {
        let v = app(api, id);
        (v["app"]["state"] == state).then(|| v["app"]["containers"][0]["id"].as_u64()).flatten()
    })
}

fn logs_path(container: u64, file: &str, tail: Option<u64>) -> String {
    let query = tail.map(|t| format!("?tail={t}")).unwrap_or_default();
    format!("/ws/v1/cluster/containers/{container}/logs/{file}{query}")
}

#[test]
fn logs_come_from_the_agent_that_ran_the_container_and_a_gone_agent_gives_503() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Containers run as nobody, who must reach their directories under the agent's work root.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711)).expect("chmod");
    let files =
        gantry_tests::scheduler_config(dir.path(), "node_timeout_ms = 120000\ncycle_interval_ms = 50", "");
    let (api, config) = (files.api.clone(), files.config.clone());
    let mut scheduler = start_scheduler(&config);
    // The agent's work root is its own: nothing tells the scheduler where it is.
    let work = dir.path().join("elsewhere").join("agent-root");
    let cgroup = format!("gantry-logs-e2e-{}", std::process::id());
    let agent_config = dir.path().join("agent.toml");
    std::fs::write(
        &agent_config,
        format!(
            "node_name = \"far-node\"\nwork_root = {:?}\nmetrics_listen = \"127.0.0.1:0\"\ncgroup_name = \"{cgroup}\"\n\
             sample_interval_ms = 200\nkill_grace_ms = 500\n[reserve]\ncpu_millis = 0\nmemory_bytes = 0\n",
            work.display().to_string()
        ),
    )
    .expect("agent config");
    std::fs::create_dir_all(work.parent().expect("parent")).expect("work root parent");
    std::fs::set_permissions(
        work.parent().expect("parent"),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .expect("chmod");
    let mut agent = Agent {
        proc: Proc(
            Command::new(agent_bin().expect("agent binary"))
                .args(["run", "--config"])
                .arg(&agent_config)
                .args(["--scheduler", &format!("http://{}", files.agents)])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("start agent"),
        ),
        work: work.clone(),
        cgroup,
    };
    wait("the scheduler to listen and the agent to register", || {
        String::from_utf8_lossy(&gantry(&api, &["nodes"]).stdout).contains("RUNNING").then_some(())
    });

    // A finished app that wrote to both streams.
    let script = "printf 'first out\\nsecond out\\n'; printf 'only err\\n' >&2";
    let out = gantry(&api, &["submit", "--cpu", "100m", "--mem", "16M", "--", "sh", "-c", script]);
    let submitted = stdout_of(&out);
    assert!(submitted.contains("application 1 accepted"), "{submitted}");
    let done = wait_state(&api, 1, "FINISHED");

    // `gantry logs`, the real CLI: whole stdout, stderr, and a tail.
    assert_eq!(stdout_of(&gantry(&api, &["logs", "1"])), "first out\nsecond out\n");
    assert_eq!(stdout_of(&gantry(&api, &["logs", "1", "--stderr"])), "only err\n");
    assert_eq!(stdout_of(&gantry(&api, &["logs", "1", "--tail", "11"])), "second out\n");

    // The REST endpoint: the same bytes as text, tails, and clear errors.
    let (status, body) = http_get(&api, &logs_path(done, "stdout", None));
    assert_eq!((status, body.as_slice()), (200, &b"first out\nsecond out\n"[..]));
    assert_eq!(http_get(&api, &logs_path(done, "stdout", Some(4))), (200, b"out\n".to_vec()));
    assert_eq!(http_get(&api, &logs_path(done, "stdout", Some(0))), (200, Vec::new()));
    assert_eq!(http_get(&api, &logs_path(done, "stderr", Some(1000))), (200, b"only err\n".to_vec()));
    let (status, body) = http_get(&api, &logs_path(999, "stdout", None));
    assert_eq!(status, 404);
    let e = remote_exception(&body);
    assert_eq!(e["exception"], "NotFoundException");
    assert!(e["message"].as_str().is_some_and(|m| m.contains("container 999")), "{e}");

    // A running container: its output so far, through the same path.
    let out = gantry(
        &api,
        &["submit", "--cpu", "100m", "--mem", "16M", "--", "sh", "-c", "echo still running; exec sleep 600"],
    );
    stdout_of(&out);
    let running = wait_state(&api, 2, "RUNNING");
    wait("the running container's output", || {
        let (status, body) = http_get(&api, &logs_path(running, "stdout", None));
        (status == 200 && body == b"still running\n").then_some(())
    });
    assert_eq!(stdout_of(&gantry(&api, &["logs", "2"])), "still running\n");

    // kill -9 of the scheduler: the restarted one knows from its store which node ran each
    // container, and reads their logs there once the agent is back, the ended app's included.
    scheduler.kill9();
    scheduler = start_scheduler(&config);
    wait("the agent to re-register with the restarted scheduler", || {
        let (status, body) = try_http_get(&api, &logs_path(done, "stdout", Some(11)))?;
        assert_ne!(
            status,
            404,
            "the restarted scheduler forgot the container: {}",
            String::from_utf8_lossy(&body)
        );
        (status == 200).then_some(body)
    });
    assert_eq!(stdout_of(&gantry(&api, &["logs", "1", "--tail", "11"])), "second out\n");
    assert_eq!(stdout_of(&gantry(&api, &["logs", "2"])), "still running\n");

    // kill -9 of the agent: its stream ends, and every log on its node is unavailable (503,
    // naming the node) rather than hanging or pretending the container is unknown.
    agent.proc.kill9();
    for container in [running, done] {
        let (status, body) = wait("503 for a container of the dead agent", || {
            let (status, body) = http_get(&api, &logs_path(container, "stdout", None));
            (status != 200).then_some((status, body))
        });
        assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
        let e = remote_exception(&body);
        assert_eq!(e["exception"], "ServiceUnavailableException");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(message.contains("far-node") && message.contains(&container.to_string()), "{message}");
    }
    let out = gantry(&api, &["logs", "2"]);
    assert!(!out.status.success(), "gantry logs fails when the node is gone");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("far-node"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(agent);
    drop(scheduler);
}
