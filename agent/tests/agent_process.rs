//! The real `gantry-agent` binary against a fake scheduler on 127.0.0.1: `probe` reports this
//! machine; `run` registers, launches, reports usage and metrics, survives `kill -9` of itself
//! (containers keep running and are re-adopted; an exit that happened meanwhile is reported with
//! its code and time), and kills on request. Timeouts are failure guards only.

mod common;

use common::{AGENT, AgentProcess, GUARD, Server, Session};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn meminfo_total_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let line = text.lines().find(|l| l.starts_with("MemTotal:")).expect("MemTotal");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("number");
    kib * 1024
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(GUARD)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

#[test]
fn probe_prints_this_machine_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(AGENT)
        .args(["probe", "--node-name", "probe-test", "--rack", "r9", "--label", "zone=b", "--work-root"])
        .arg(dir.path())
        .output()
        .expect("run probe");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["name"], "probe-test");
    assert_eq!(v["rack"], "r9");
    assert_eq!(v["labels"], serde_json::json!([["zone", "b"]]));
    let cores = std::thread::available_parallelism().expect("cores").get() as u64;
    assert_eq!(v["capacity"]["cpu_millis"], cores * 1000);
    assert_eq!(v["capacity"]["memory_bytes"], meminfo_total_bytes(), "memory total is /proc/meminfo's");
    // Default reserve: 500 millicores and 1 GiB.
    assert_eq!(v["allocatable"]["cpu_millis"], (cores * 1000).saturating_sub(500));
    assert_eq!(v["allocatable"]["memory_bytes"], meminfo_total_bytes().saturating_sub(1 << 30));
    assert_eq!(v["gpus"], serde_json::json!([]), "no GPUs on this machine");
    assert!(v["gpu_note"].as_str().is_some_and(|n| !n.is_empty()), "says why there are no GPUs");
    let usage = &v["usage"];
    assert!(usage["cpu_usage"].as_f64().is_some_and(|u| (0.0..=1.0).contains(&u)));
}

/// A running `gantry-agent run`, killed with SIGKILL when dropped.
/// Reads messages until `pick` accepts one (statuses and other chatter are skipped).
async fn until<T>(s: &mut Session, what: &str, mut pick: impl FnMut(&Up) -> Option<T>) -> T {
    let deadline = Instant::now() + GUARD;
    loop {
        assert!(Instant::now() < deadline, "guard: no {what}");
        let msg = s.recv().await;
        if let Some(t) = pick(&msg) {
            return t;
        }
    }
}

fn launch(id: u64, argv: &[&str], memory_bytes: i64) -> Down {
    Down::Launch(v1::Launch {
        container_id: id,
        app_id: 100 + id,
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        cpu_millis: 500,
        memory_bytes,
        ..Default::default()
    })
}

fn pid_alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_containers_survives_kill_9_and_reports_what_happened_meanwhile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metrics_port = free_port();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"e2e-{pid}\"\nrack = \"r1\"\nwork_root = {root:?}\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\
             cgroup_name = \"gantry-e2e-{pid}\"\nsample_interval_ms = 200\nkill_grace_ms = 2000\n",
            pid = std::process::id(),
            root = dir.path().join("work").display().to_string(),
        ),
    )
    .expect("config");
    let mut server = Server::start(false).await;
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, register) = server.handshake().await;
    assert_eq!(register.node_name, format!("e2e-{}", std::process::id()));
    assert_eq!(register.capacity.as_ref().map(|c| c.memory_bytes), Some(meminfo_total_bytes()));

    // One long-running container, one that ends on its own while the agent is down.
    s.send(launch(1, &["sleep", "300"], 64 << 20)).await;
    s.send(launch(2, &["sh", "-c", "sleep 2; exit 7"], 0)).await;
    let mut started = Vec::new();
    while started.len() < 2 {
        let id = until(&mut s, "ContainerStarted", |m| match m {
            Up::ContainerStarted(c) => Some(c.container_id),
            Up::LaunchFailed(f) => panic!("launch failed: {f:?}"),
            _ => None,
        })
        .await;
        started.push(id);
    }
    started.sort_unstable();
    assert_eq!(started, vec![1, 2]);
    let usage = until(&mut s, "a Status with container 1", |m| match m {
        Up::Status(st) => st.containers.iter().find(|c| c.container_id == 1).cloned(),
        _ => None,
    })
    .await;
    assert_eq!(usage.memory_limit_bytes, 64 << 20);
    let metrics = http_get(metrics_port, "/metrics");
    assert!(
        metrics.contains(&format!("gantry_node_memory_total_bytes {}", meminfo_total_bytes())),
        "{metrics}"
    );
    assert!(metrics.contains("gantry_container_memory_limit_bytes{container=\"1\""), "{metrics}");

    // The command's pid, from the container's control directory.
    let pid_file = dir.path().join("work/containers/1/pid");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pid_file).expect("pid file")).expect("pid JSON");
    let sleep_pid = rec["pid"].as_i64().expect("pid") as i32;
    assert!(pid_alive(sleep_pid));

    // kill -9 the agent; container 2 ends while nobody watches.
    drop(s);
    agent.kill9();
    let killed_at = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pid_alive(sleep_pid), "containers outlive the agent");

    // Restart: container 1 is re-adopted, container 2's exit is reported with its code and time.
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, register) = server.handshake().await;
    let live: Vec<u64> = register.containers.iter().map(|c| c.container_id).collect();
    assert_eq!(live, vec![1], "the running container is adopted, the ended one is not live");
    let exit2 = match register.unacked_exits.iter().find(|e| e.container_id == 2) {
        Some(e) => e.clone(),
        None => {
            until(&mut s, "the exit of container 2", |m| match m {
                Up::ContainerExited(e) if e.container_id == 2 => Some(e.clone()),
                _ => None,
            })
            .await
        }
    };
    assert_eq!(exit2.reason, v1::ExitReason::Exited as i32);
    assert_eq!(exit2.exit_code, 7);
    assert!(
        exit2.finished_at_ms >= killed_at && exit2.finished_at_ms <= now_ms(),
        "finished at {} is when it ended, during the outage (killed at {killed_at})",
        exit2.finished_at_ms
    );
    s.send(Down::AckExit(v1::AckExit { container_id: 2, ..Default::default() })).await;

    // Kill by request: TERM, grace, KILL; reported as such; nothing survives.
    s.send(Down::Kill(v1::Kill {
        container_id: 1,
        grace_ms: Some(500),
        reason: "test".into(),
        ..Default::default()
    }))
    .await;
    let exit1 = until(&mut s, "the exit of container 1", |m| match m {
        Up::ContainerExited(e) if e.container_id == 1 => Some(e.clone()),
        _ => None,
    })
    .await;
    assert_eq!(exit1.reason, v1::ExitReason::KilledByRequest as i32);
    assert!(!pid_alive(sleep_pid));
    s.send(Down::AckExit(v1::AckExit { container_id: 1, ..Default::default() })).await;
    let metrics = http_get(metrics_port, "/metrics");
    assert!(metrics.contains("gantry_container_kills_total{reason=\"killed-by-request\"} 1"), "{metrics}");

    // A kill for a container the agent does not have is answered, not ignored.
    s.send(Down::Kill(v1::Kill {
        container_id: 99,
        grace_ms: None,
        reason: "stale".into(),
        ..Default::default()
    }))
    .await;
    let lost = until(&mut s, "the answer for an unknown container", |m| match m {
        Up::ContainerExited(e) if e.container_id == 99 => Some(e.reason),
        _ => None,
    })
    .await;
    assert_eq!(lost, v1::ExitReason::Lost as i32);

    let status = agent.terminate();
    assert!(status.success(), "SIGTERM stops the agent cleanly: {status:?}");
    // The agent keeps its parent cgroups across restarts by design; this test is over.
    for controller in ["memory", "cpu", "cpuacct", "pids", "freezer", "unified"] {
        let _ = std::fs::remove_dir(
            Path::new("/sys/fs/cgroup").join(controller).join(format!("gantry-e2e-{}", std::process::id())),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_exits_follow_their_start_and_a_kill_during_launch_is_carried_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("agent.toml");
    let cgroup = format!("gantry-e2e-race-{}", std::process::id());
    std::fs::write(
        &config,
        format!(
            "node_name = \"race\"\nwork_root = {root:?}\nmetrics_listen = \"127.0.0.1:{port}\"\n\
             cgroup_name = \"{cgroup}\"\nsample_interval_ms = 60000\nkill_grace_ms = 2000\n\
             fencing_timeout_ms = 0\n",
            port = free_port(),
            root = dir.path().join("work").display().to_string(),
        ),
    )
    .expect("config");
    let mut server = Server::start(false).await;
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, _) = server.handshake().await;

    // Twenty `true`s at once: each is reported started, then exited with 0 — in that order, and
    // long before the (one-minute) sampling tick, so through the shims' notify pipes.
    for id in 1..=20 {
        s.send(launch(id, &["true"], 0)).await;
    }
    let mut started = std::collections::HashSet::new();
    let mut exited = std::collections::HashSet::new();
    let begun = Instant::now();
    while exited.len() < 20 {
        match until(&mut s, "starts and exits", |m| match m {
            Up::ContainerStarted(c) => Some((c.container_id, None)),
            Up::ContainerExited(e) => Some((e.container_id, Some(e.clone()))),
            Up::LaunchFailed(f) => panic!("launch failed: {f:?}"),
            _ => None,
        })
        .await
        {
            (id, None) => assert!(started.insert(id), "container {id} started twice"),
            (id, Some(e)) => {
                assert!(started.contains(&id), "container {id}'s exit came before its start");
                assert_eq!((e.reason, e.exit_code), (v1::ExitReason::Exited as i32, 0));
                assert!(exited.insert(id));
                s.send(Down::AckExit(v1::AckExit { container_id: id, ..Default::default() })).await;
            }
        }
    }
    assert!(begun.elapsed() < Duration::from_secs(60), "exits did not wait for the sampling tick");

    // A kill sent right behind its launch finds the launch in flight (or just done): the
    // container is killed, never reported lost while it runs on.
    s.send(launch(50, &["sleep", "300"], 0)).await;
    s.send(Down::Kill(v1::Kill {
        container_id: 50,
        grace_ms: Some(200),
        reason: "changed my mind".into(),
        ..Default::default()
    }))
    .await;
    let exit = until(&mut s, "the exit of container 50", |m| match m {
        Up::ContainerExited(e) if e.container_id == 50 => Some(e.clone()),
        Up::LaunchFailed(f) => panic!("launch failed: {f:?}"),
        _ => None,
    })
    .await;
    assert_eq!(exit.reason, v1::ExitReason::KilledByRequest as i32, "{exit:?}");
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("work/containers/50/pid")).expect("pid file"),
    )
    .expect("pid JSON");
    assert!(!pid_alive(rec["pid"].as_i64().expect("pid") as i32), "the killed command is gone");
    // Acknowledged, so the agent removes its cgroup (and then its parent when it stops).
    s.send(Down::AckExit(v1::AckExit { container_id: 50, ..Default::default() })).await;
    let c50 = Path::new("/sys/fs/cgroup/memory").join(&cgroup).join("c50");
    let start = Instant::now();
    while c50.exists() {
        assert!(start.elapsed() < GUARD, "guard: the acknowledged container's cgroup stays");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let status = agent.terminate();
    assert!(status.success(), "{status:?}");
    for controller in ["memory", "cpu", "cpuacct", "pids", "freezer", "unified"] {
        let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(controller).join(&cgroup));
    }
}
