//! Kills interrupted half way, and the cgroups an agent leaves behind (issue 19, item 8): the real
//! `gantry-agent` binary against the fake scheduler on 127.0.0.1, on the real cgroup v1 freezer.
//!
//! The v1 kill freezes a container's cgroup, SIGKILLs its members and thaws it. An agent killed
//! between the freeze and the thaw leaves the processes frozen, in state D, for good. These tests
//! freeze a container's cgroup by hand exactly as such a kill leaves it (`freezer.state` FROZEN
//! and the `kill-reason` file the executor writes first), kill -9 the agent, and check that the
//! kill is finished — by the restarted agent, or by the container's supervisor alone — and that
//! the exit is reported. A last test checks that a clean stop leaves no cgroup directory behind.
//! Timeouts are failure guards only. Needs root and the v1 freezer (skipped, saying so, without).

mod common;

use common::{AgentProcess, GUARD, Server, Session};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 6] = ["memory", "cpu", "cpuacct", "pids", "freezer", "unified"];

fn freezer_available() -> bool {
    let ok = nix::unistd::geteuid().is_root() && Path::new(CGROUP_ROOT).join("freezer/cgroup.procs").exists();
    if !ok {
        eprintln!("skipped: needs root and the cgroup v1 freezer");
    }
    ok
}

/// The agent's cgroups, named `.0`, and its work root `.1`: on drop the containers' supervisors
/// are killed (a test may leave one stopped), every process left in the cgroups is killed (the
/// freezer thawed first, or frozen processes could not die) and every directory removed, so a
/// failing test leaves nothing frozen or behind.
struct CgroupGuard(String, PathBuf);

impl CgroupGuard {
    fn parents(&self) -> Vec<PathBuf> {
        CONTROLLERS
            .iter()
            .map(|c| Path::new(CGROUP_ROOT).join(c).join(&self.0))
            .filter(|p| p.is_dir())
            .collect()
    }

    fn freezer(&self, leaf: &str) -> PathBuf {
        Path::new(CGROUP_ROOT).join("freezer").join(&self.0).join(leaf)
    }

    fn children(&self) -> Vec<PathBuf> {
        let dirs =
            self.parents().into_iter().flat_map(|p| std::fs::read_dir(p).into_iter().flatten().flatten());
        dirs.map(|e| e.path()).filter(|p| p.is_dir()).collect()
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        let controls = std::fs::read_dir(self.1.join("containers")).into_iter().flatten().flatten();
        for control in controls {
            let text = std::fs::read_to_string(control.path().join("pid")).unwrap_or_default();
            if let Some(shim) =
                serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["shim_pid"].as_i64())
            {
                let _ = kill(Pid::from_raw(shim as i32), Signal::SIGKILL);
            }
        }
        for child in self.children() {
            let _ = std::fs::write(child.join("freezer.state"), "THAWED");
        }
        for child in self.children() {
            let procs = std::fs::read_to_string(child.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        for child in self.children() {
            let start = Instant::now();
            while std::fs::remove_dir(&child).is_err() && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for parent in self.parents() {
            let _ = std::fs::remove_dir(&parent);
        }
    }
}

/// A running `gantry-agent run`, killed with SIGKILL when dropped.
/// An agent's configuration under `dir`: no fencing (these tests kill the agent and must see
/// the frozen kill finished, not a fencing kill of the supervisor's own), its own cgroup.
fn config(dir: &Path, cgroup: &str) -> PathBuf {
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "node_name = \"frozen\"\nwork_root = {root:?}\nmetrics_listen = \"127.0.0.1:0\"\n\
             cgroup_name = \"{cgroup}\"\nsample_interval_ms = 200\nkill_grace_ms = 500\nfencing_timeout_ms = 0\n",
            root = dir.join("work").display().to_string(),
        ),
    )
    .expect("config");
    path
}

async fn until<T>(s: &mut Session, what: &str, mut pick: impl FnMut(&Up) -> Option<T>) -> T {
    let deadline = Instant::now() + GUARD;
    loop {
        assert!(Instant::now() < deadline, "guard: no {what}");
        if let Some(t) = pick(&s.recv().await) {
            return t;
        }
    }
}

async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + GUARD;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "guard: gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn launch(s: &mut Session, id: u64, argv: &[&str]) {
    s.send(Down::Launch(v1::Launch {
        container_id: id,
        app_id: 100 + id,
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        cpu_millis: 100,
        memory_bytes: 32 << 20,
        ..Default::default()
    }))
    .await;
    until(s, "ContainerStarted", |m| match m {
        Up::ContainerStarted(c) if c.container_id == id => Some(()),
        Up::LaunchFailed(f) => panic!("launch failed: {f:?}"),
        _ => None,
    })
    .await;
}

/// Container 1's exit, from the registration's resync or the stream, is the kill that was
/// interrupted (`killed-by-request`); once acknowledged, its cgroup goes.
async fn reported_as_killed_and_removed(s: &mut Session, register: &v1::Register, guard: &CgroupGuard) {
    let exit = match register.unacked_exits.iter().find(|e| e.container_id == 1) {
        Some(e) => e.clone(),
        None => exit_of(s, 1).await,
    };
    assert_eq!(exit.reason, v1::ExitReason::KilledByRequest as i32, "the kill it finished: {exit:?}");
    s.send(Down::AckExit(v1::AckExit { container_id: 1, ..Default::default() })).await;
    wait_for("the container's cgroup to be removed", || {
        guard.parents().iter().all(|p| !p.join("c1").exists()).then_some(())
    })
    .await;
}

async fn exit_of(s: &mut Session, id: u64) -> v1::ContainerExited {
    until(s, &format!("the exit of container {id}"), |m| match m {
        Up::ContainerExited(e) if e.container_id == id => Some(e.clone()),
        _ => None,
    })
    .await
}

/// (command pid, shim pid) from a container's pid record.
fn pids(work: &Path, id: u64) -> (i32, i32) {
    let text = std::fs::read_to_string(work.join(format!("containers/{id}/pid"))).expect("pid file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("pid JSON");
    let get = |k: &str| v[k].as_i64().expect("pid") as i32;
    (get("pid"), get("shim_pid"))
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn freezer_state(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("freezer.state")).map(|s| s.trim().to_owned()).unwrap_or_default()
}

/// Leaves container `id` as a v1 kill interrupted between its freeze and its thaw leaves it: the
/// kill reason recorded, the cgroup FROZEN (the command in it, stopped), the agent gone.
async fn interrupt_a_kill(work: &Path, freezer: &Path, id: u64, agent: &mut AgentProcess) {
    std::fs::write(work.join(format!("containers/{id}/kill-reason")), "request").expect("kill reason");
    std::fs::write(freezer.join("freezer.state"), "FROZEN").expect("freeze");
    wait_for("the cgroup to freeze", || (freezer_state(freezer) == "FROZEN").then_some(())).await;
    agent.kill9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_finishes_a_kill_its_predecessor_left_frozen() {
    if !freezer_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let guard = CgroupGuard(format!("gantry-frozen-restart-{}", std::process::id()), dir.path().join("work"));
    let config = config(dir.path(), &guard.0);
    let work = guard.1.clone();
    let mut server = Server::start(false).await;
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, _) = server.handshake().await;
    launch(&mut s, 1, &["sleep", "300"]).await;
    let (cmd, shim) = pids(&work, 1);
    let freezer = guard.freezer("c1");

    interrupt_a_kill(&work, &freezer, 1, &mut agent).await;
    drop(s);
    // The supervisor is stopped too, so that only the restarted agent can finish the kill.
    kill(Pid::from_raw(shim), Signal::SIGSTOP).expect("SIGSTOP the supervisor");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(freezer_state(&freezer), "FROZEN", "nothing else thaws it");
    assert!(alive(cmd), "the frozen command lives on");

    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, register) = server.handshake().await;
    wait_for("the restarted agent to kill and thaw the frozen container", || {
        (freezer_state(&freezer) == "THAWED" && !alive(cmd)).then_some(())
    })
    .await;
    kill(Pid::from_raw(shim), Signal::SIGCONT).expect("SIGCONT the supervisor");
    reported_as_killed_and_removed(&mut s, &register, &guard).await;
    assert!(agent.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_alone_finishes_a_kill_left_frozen() {
    if !freezer_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let guard = CgroupGuard(format!("gantry-frozen-shim-{}", std::process::id()), dir.path().join("work"));
    let config = config(dir.path(), &guard.0);
    let work = guard.1.clone();
    let mut server = Server::start(false).await;
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, _) = server.handshake().await;
    launch(&mut s, 1, &["sleep", "300"]).await;
    let (cmd, _) = pids(&work, 1);
    let freezer = guard.freezer("c1");

    interrupt_a_kill(&work, &freezer, 1, &mut agent).await;
    drop(s);
    // No agent: the supervisor notices its cgroup frozen with its command alive, finishes the
    // kill and records the exit.
    let exit_file = work.join("containers/1/exit.json");
    wait_for("the supervisor to finish the kill", || {
        (freezer_state(&freezer) == "THAWED" && !alive(cmd) && exit_file.exists()).then_some(())
    })
    .await;
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&exit_file).expect("exit record")).expect("JSON");
    assert_eq!(rec["status"]["signaled"]["signal"], 9, "{rec}");

    // An agent started later reports it as the kill it was.
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, register) = server.handshake().await;
    reported_as_killed_and_removed(&mut s, &register, &guard).await;
    assert!(agent.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_cgroup_directory_behind() {
    if !freezer_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let guard = CgroupGuard(format!("gantry-clean-stop-{}", std::process::id()), dir.path().join("work"));
    let config = config(dir.path(), &guard.0);
    let mut server = Server::start(false).await;
    let mut agent = AgentProcess::start(&config, server.addr);
    let (mut s, _) = server.handshake().await;
    assert!(!guard.parents().is_empty(), "the agent made its parent cgroup");

    // One container ends by itself, one is killed; both exits are acknowledged.
    launch(&mut s, 2, &["sleep", "300"]).await;
    s.send(Down::Kill(v1::Kill { container_id: 2, grace_ms: Some(100), ..Default::default() })).await;
    exit_of(&mut s, 2).await;
    launch(&mut s, 1, &["sh", "-c", "sleep 0.5"]).await;
    exit_of(&mut s, 1).await;
    for id in [1, 2] {
        s.send(Down::AckExit(v1::AckExit { container_id: id, ..Default::default() })).await;
    }
    wait_for("the containers' cgroups to be removed", || {
        guard.parents().iter().all(|p| !p.join("c1").exists() && !p.join("c2").exists()).then_some(())
    })
    .await;
    assert!(agent.terminate().success(), "SIGTERM stops the agent cleanly");
    let left: Vec<PathBuf> = guard.parents();
    assert!(left.is_empty(), "a clean stop with no container left removes the parent cgroup: {left:?}");
}
