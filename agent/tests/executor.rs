//! The executor against the real machine: real processes under the real shim (the agent binary),
//! real cgroups, real users. Needs root (CI runs as root). Every test uses its own work root and
//! its own parent cgroup, and a guard that kills and removes whatever a test leaves, even when
//! it fails.

mod common;

use gantry_agent::cgroup::{ContainerCgroup, Layout};
use gantry_agent::executor::{CgroupMode, ExecError, Executor, ExecutorSettings};
use gantry_agent::launch_spec::SpecError;
use gantry_agent::model::{
    ClusterId, ContainerExit, ContainerKey, DiskSeen, ExitReason, LaunchSpec, MemorySeen,
};
use gantry_agent::procfs::{ProcStat, live_start_time};
use gantry_agent::shim::now_ms;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Upper bound for anything to happen (correctness bound, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// A work root and parent cgroup for one test; dropping it kills and removes everything left.
struct Env {
    _root: tempfile::TempDir,
    settings: ExecutorSettings,
}

impl Env {
    fn new(tag: &str, cgroups: CgroupMode, gpu_count: u32) -> Env {
        let root =
            // Not under /tmp: containers see a /tmp of their own, and some tests hand them files.
            tempfile::Builder::new()
                .prefix(&format!("gantry-exec-{tag}-"))
                .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
                .expect("tempdir");
        // Containers run as unprivileged uids, which must be able to reach their directories.
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod work root");
        let settings = ExecutorSettings {
            containers_dir: root.path().join("containers"),
            default_user: None,
            dynamic_uids: gantry_agent::isolation::UidRange::SYSTEMD,
            max_pids: gantry_agent::isolation::DEFAULT_MAX_PIDS,
            private_tmp: true,
            allow_privilege_escalation: false,
            allow_root: false,
            kill_grace: Duration::from_secs(10),
            cgroup_name: format!("gantry-test-{}-{tag}", std::process::id()),
            gpu_count,
            shim_program: PathBuf::from(env!("CARGO_BIN_EXE_gantry-agent")),
            cgroups,
            default_disk_bytes: 0,
        };
        Env { _root: root, settings }
    }

    fn executor(&self) -> Executor {
        Executor::new(self.settings.clone()).expect("executor")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        common::clean_up_executor(&self.settings);
    }
}

/// Container `id` of the legacy cluster (as agents before cluster ids named every container).
fn k(id: u64) -> ContainerKey {
    ContainerKey::legacy(id)
}

fn spec(id: u64, argv: &[&str]) -> LaunchSpec {
    spec_in(ClusterId::LEGACY, id, argv)
}

/// A launch of container `id` by the scheduler run with cluster id `cluster`.
fn spec_in(cluster: ClusterId, id: u64, argv: &[&str]) -> LaunchSpec {
    LaunchSpec {
        container_id: id,
        cluster,
        app_id: 77,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        submitter: "tester".into(),
        ..LaunchSpec::default()
    }
}

/// Polls `collect_exits` until every container has ended.
fn wait_exits(exec: &Executor, ids: &[ContainerKey]) -> HashMap<ContainerKey, ContainerExit> {
    let start = Instant::now();
    let mut got = HashMap::new();
    while ids.iter().any(|id| !got.contains_key(id)) {
        for e in exec.collect_exits() {
            got.insert(e.key(), e);
        }
        assert!(start.elapsed() < PATIENCE, "containers {ids:?} did not all end; ended: {got:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    got
}

fn wait_exit(exec: &Executor, id: ContainerKey) -> ContainerExit {
    wait_exits(exec, &[id])[&id]
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn read_pid(path: &Path) -> u32 {
    read(path).trim().parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The uid a process runs as (the real uid from /proc/<pid>/status).
fn uid_of(pid: u32) -> u32 {
    let status = read(Path::new(&format!("/proc/{pid}/status")));
    let line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid line");
    line.split_whitespace().nth(1).and_then(|u| u.parse().ok()).expect("uid")
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

#[tokio::test]
async fn limits_are_written_to_the_cgroup_and_the_command_runs_inside_it() {
    let env = Env::new("limits", CgroupMode::Auto, 0);
    let exec = env.executor();
    assert_ne!(*exec.layout(), Layout::None, "this machine has writable cgroups");
    let mut s = spec(1, &["sleep", "60"]);
    s.memory_bytes = 64 << 20;
    s.cpu_millis = 500;
    let h = exec.launch(&s).expect("launch");
    let cg = h.cgroup.clone().expect("a cgroup");
    let procs = |dir: &Path| read(&dir.join("cgroup.procs"));
    match &cg {
        ContainerCgroup::V1 { memory, cpu, cpuacct, freezer, pids } => {
            assert_eq!(read(&memory.join("memory.limit_in_bytes")).trim(), (64u64 << 20).to_string());
            assert_eq!(read(&cpu.join("cpu.cfs_period_us")).trim(), "100000");
            assert_eq!(read(&cpu.join("cpu.cfs_quota_us")).trim(), "50000");
            for dir in
                [Some(memory), Some(cpu), Some(cpuacct), Some(freezer), pids.as_ref()].into_iter().flatten()
            {
                let members = procs(dir);
                assert!(
                    members.lines().any(|l| l == h.pid.to_string()),
                    "{} lists the command: {members}",
                    dir.display()
                );
                assert!(!members.lines().any(|l| l == h.shim_pid.to_string()), "the shim stays outside");
            }
        }
        ContainerCgroup::V2 { dir } => {
            assert_eq!(read(&dir.join("memory.max")).trim(), (64u64 << 20).to_string());
            assert_eq!(read(&dir.join("cpu.max")).trim(), "50000 100000");
            assert!(procs(dir).lines().any(|l| l == h.pid.to_string()));
            assert!(!procs(dir).lines().any(|l| l == h.shim_pid.to_string()));
        }
    }
    let u = exec.usage(k(1)).expect("usage");
    assert_eq!(u.memory_limit_bytes, 64 << 20);
    assert!(u.processes >= 1, "{u:?}");
    assert!(u.memory_working_set_bytes > 0, "{u:?}");
    assert_eq!(exec.pids(k(1)).expect("pids"), vec![h.pid]);

    exec.kill(k(1), Duration::from_secs(5)).await.expect("kill");
    assert_eq!(wait_exit(&exec, k(1)).reason, ExitReason::KilledByRequest);
    assert!(matches!(exec.forget(k(2)), Err(ExecError::Unknown(key)) if key == k(2)));
    exec.forget(k(1)).expect("forget");
    for dir in cg.dirs() {
        assert!(!dir.exists(), "{} removed after forget", dir.display());
    }
    assert!(exec.container_dir(k(1)).join("stdout").exists(), "logs stay after forget");
}

#[test]
fn a_memory_hog_ends_with_memory_limit() {
    let env = Env::new("oom", CgroupMode::Auto, 0);
    let exec = env.executor();
    let mut s = spec(1, &["sh", "-c", "head -c 300M /dev/zero | tail"]);
    s.memory_bytes = 50 << 20;
    exec.launch(&s).expect("launch");
    assert_eq!(wait_exit(&exec, k(1)).reason, ExitReason::MemoryLimit);
    exec.forget(k(1)).expect("forget");
}

/// A container the kernel's OOM killer ends is reported with how much it was using and its
/// limit, so the user reads "50 MiB used of 50 MiB" rather than a bare status 137.
#[test]
fn a_memory_limit_kill_reports_the_usage_and_the_limit() {
    let env = Env::new("oomseen", CgroupMode::Auto, 0);
    let exec = env.executor();
    assert_ne!(*exec.layout(), Layout::None, "this machine has writable cgroups");
    // Every byte written, so the pages are really charged to the cgroup.
    let script = "b = []\nwhile True: b.append(b'x' * (4 << 20))\n";
    let mut s = spec(1, &["python3", "-c", script]);
    s.memory_bytes = 50 << 20;
    exec.launch(&s).expect("launch");
    let exit = wait_exit(&exec, k(1));
    assert_eq!(exit.reason, ExitReason::MemoryLimit);
    let seen = exit.memory.expect("a memory-limit end says what it used");
    assert_eq!(seen.limit_bytes, 50 << 20, "{seen:?}");
    // The cgroup's peak: at the limit when the OOM killer acted (page cache may round it).
    assert!(seen.used_bytes >= 45 << 20 && seen.used_bytes <= 51 << 20, "{seen:?}");
    exec.forget(k(1)).expect("forget");
}

/// VmRSS of a process, bytes: the kernel's own count of its resident memory.
fn vm_rss(pid: u32) -> u64 {
    let status = read(Path::new(&format!("/proc/{pid}/status")));
    let kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// The usage a container reports (its cgroup's working set, or its process tree without one)
/// agrees within 10% with what the kernel counts for its processes.
fn reported_memory_matches_the_kernel(tag: &str, mode: CgroupMode) {
    let env = Env::new(tag, mode, 0);
    let exec = env.executor();
    let script = "import sys, time\nb = bytearray(120 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\n\
                  print('ready', flush=True)\ntime.sleep(60)\n";
    let h = exec.launch(&spec(1, &["python3", "-c", script])).expect("launch");
    let stdout = h.container_dir.join("stdout");
    wait_for("the workload to touch its memory", || {
        std::fs::read_to_string(&stdout).is_ok_and(|s| s.contains("ready"))
    });
    let kernel: u64 = exec.pids(k(1)).expect("pids").iter().map(|&p| vm_rss(p)).sum();
    let reported = exec.usage(k(1)).expect("usage").memory_working_set_bytes;
    let kernel_after: u64 = exec.pids(k(1)).expect("pids").iter().map(|&p| vm_rss(p)).sum();
    let kernel = (kernel + kernel_after) / 2;
    assert!(kernel >= 120 << 20, "the workload holds its 120 MiB: {kernel}");
    let diff = reported.abs_diff(kernel) as f64 / kernel as f64;
    assert!(diff <= 0.10, "reported {reported} vs the kernel's VmRSS {kernel}: {:.1}% apart", diff * 100.0);
    exec.force_kill(k(1)).expect("kill");
    wait_exit(&exec, k(1));
    exec.forget(k(1)).expect("forget");
}

#[test]
fn reported_memory_matches_the_kernel_with_cgroups() {
    reported_memory_matches_the_kernel("memcg", CgroupMode::Auto);
}

#[test]
fn reported_memory_matches_the_kernel_without_cgroups() {
    reported_memory_matches_the_kernel("memtree", CgroupMode::Off);
}

#[test]
fn the_monitor_can_kill_for_memory() {
    let env = Env::new("memkill", CgroupMode::Auto, 0);
    let exec = env.executor();
    let mut s = spec(1, &["sleep", "60"]);
    s.memory_bytes = 64 << 20;
    exec.launch(&s).expect("launch");
    // What the monitor measured is what the exit reports (the limit from the launch when the
    // measurement had none).
    exec.kill_for_memory(k(1), MemorySeen { used_bytes: 70 << 20, limit_bytes: 0 }).expect("kill for memory");
    let exit = wait_exit(&exec, k(1));
    assert_eq!(exit.reason, ExitReason::MemoryLimit);
    assert_eq!(exit.reason.exit_code(), 137);
    assert_eq!(exit.memory, Some(MemorySeen { used_bytes: 70 << 20, limit_bytes: 64 << 20 }));
}

#[test]
fn the_disk_round_can_kill_for_disk_and_the_exit_says_how_much() {
    let env = Env::new("diskkill", CgroupMode::Auto, 0);
    let exec = env.executor();
    let mut s = spec(1, &["sleep", "60"]);
    s.disk_bytes = 8 << 20;
    exec.launch(&s).expect("launch");
    let limited = exec.disk_limited();
    assert_eq!(limited.len(), 1);
    assert_eq!((limited[0].0, limited[0].3), (k(1), 8 << 20), "the launch's allowance");
    let seen = DiskSeen { used_bytes: 9 << 20, limit_bytes: 8 << 20 };
    exec.kill_for_disk(k(1), seen).expect("kill for disk");
    let exit = wait_exit(&exec, k(1));
    assert_eq!((exit.reason, exit.reason.exit_code()), (ExitReason::DiskLimit, 137));
    assert_eq!(exit.disk, Some(seen));
    assert!(exec.disk_limited().is_empty(), "an ended container is not measured");
}

#[test]
fn logs_still_read_once_an_ended_containers_files_are_cleaned_up() {
    use gantry_agent::executor::LogStream;
    let env = Env::new("cleanlogs", CgroupMode::Auto, 0);
    let exec = env.executor();
    let mut s = spec(1, &["sh", "-c", "echo out; echo err >&2; echo data > data"]);
    s.stdout = Some("logs/o".into());
    exec.launch(&s).expect("launch");
    wait_exit(&exec, k(1));
    exec.forget(k(1)).expect("forget");
    let control = exec.control_dir(k(1));
    gantry_agent::cleanup::remove_files(&control).expect("clean up");
    assert!(!control.join("work").exists(), "its files are gone");
    assert_eq!(exec.read_log(k(1), LogStream::Stdout, None).expect("stdout").data, b"out\n");
    assert_eq!(exec.read_log(k(1), LogStream::Stderr, Some(2)).expect("stderr").data, b"r\n");
}

#[test]
fn a_cpu_quota_throttles_a_busy_loop() {
    let env = Env::new("cpu", CgroupMode::Auto, 0);
    let exec = env.executor();
    let mut s = spec(1, &["sh", "-c", "while :; do :; done"]);
    s.cpu_millis = 200;
    let start = Instant::now();
    exec.launch(&s).expect("launch");
    std::thread::sleep(Duration::from_secs(2));
    let u = exec.cgroup_usage(k(1)).expect("usage").expect("cgroup usage");
    let wall = start.elapsed().as_secs_f64();
    assert!(u.nr_throttled > 0, "the loop was throttled: {u:?}");
    assert!(u.cpu_seconds > 0.0, "the loop ran: {u:?}");
    // 200 millicores allow 0.2 CPU-seconds per second; unthrottled it would use a whole core.
    assert!(u.cpu_seconds < 0.6 * wall, "{} CPU-seconds in {wall:.2} s is not throttled", u.cpu_seconds);
    let usage = exec.usage(k(1)).expect("usage");
    assert!(usage.cpu_seconds > 0.0 && usage.cpu_seconds <= wall + 1.0, "{usage:?}");
}

/// A container that ignores SIGTERM and daemonises a grandchild (double fork + setsid) that
/// ignores it too; after kill nothing of it may survive.
async fn kill_leaves_no_survivors(tag: &str, mode: CgroupMode) {
    let env = Env::new(tag, mode, 0);
    let exec = env.executor();
    let script = r#"
trap '' TERM
echo $$ > main.pid
( setsid sh -c 'echo $$ > grand.pid; exec sleep 1000' & )
sleep 1000 &
echo $! > child.pid
wait
"#;
    let h = exec.launch(&spec(1, &["sh", "-c", script])).expect("launch");
    let dir = h.container_dir.clone();
    wait_for("the pid files", || {
        ["main.pid", "grand.pid", "child.pid"]
            .iter()
            .all(|f| std::fs::read_to_string(dir.join(f)).is_ok_and(|s| s.ends_with('\n')))
    });
    let pids: Vec<u32> =
        ["main.pid", "grand.pid", "child.pid"].iter().map(|f| read_pid(&dir.join(f))).collect();
    let (main, grand) = (pids[0], pids[1]);
    assert_eq!(main, h.pid);
    let started: Vec<(u32, u64)> = pids
        .iter()
        .map(|&p| (p, live_start_time(p).unwrap_or_else(|| panic!("{p} is alive before the kill"))))
        .collect();
    let grand_stat = ProcStat::read(grand).expect("grandchild stat");
    assert_ne!(grand_stat.pgrp, main, "the grandchild left the container's process group");
    if mode == CgroupMode::Off {
        wait_for("the grandchild to be re-parented to the shim", || {
            ProcStat::read(grand).is_some_and(|s| s.ppid == h.shim_pid)
        });
    }

    exec.kill(k(1), Duration::from_millis(300)).await.expect("kill");
    for (pid, start) in started {
        assert_ne!(live_start_time(pid), Some(start), "process {pid} survived the kill");
    }
    if let Some(cg) = &h.cgroup {
        assert_eq!(cg.pids().expect("cgroup.procs"), Vec::<u32>::new(), "the cgroup is empty");
    }
    // The shim writes exit.json (which is what ends `kill`) a moment before it exits itself.
    wait_for("the shim to end too", || live_start_time(h.shim_pid).is_none());
    assert_eq!(wait_exit(&exec, k(1)).reason, ExitReason::KilledByRequest);
    exec.forget(k(1)).expect("forget");
}

#[tokio::test]
async fn kill_leaves_no_survivors_with_cgroups() {
    kill_leaves_no_survivors("kill", CgroupMode::Auto).await;
}

#[tokio::test]
async fn kill_leaves_no_survivors_without_cgroups() {
    kill_leaves_no_survivors("kill-nocg", CgroupMode::Off).await;
}

#[test]
fn without_cgroups_the_memory_limit_is_an_address_space_rlimit() {
    let env = Env::new("rlimit", CgroupMode::Off, 0);
    let exec = env.executor();
    assert_eq!(*exec.layout(), Layout::None);
    let mut s = spec(1, &["sleep", "60"]);
    s.memory_bytes = 256 << 20;
    let h = exec.launch(&s).expect("launch");
    assert!(h.cgroup.is_none());
    let limits = read(Path::new(&format!("/proc/{}/limits", h.pid)));
    let line = limits.lines().find(|l| l.starts_with("Max address space")).expect("address space line");
    assert!(line.contains(&(256u64 << 20).to_string()), "{line}");
    let u = exec.usage(k(1)).expect("usage from the process tree");
    assert_eq!((u.processes, u.memory_limit_bytes), (1, 256 << 20));
    // Right after exec the new image may have no page resident yet (it has not run).
    wait_for("the command's memory to show", || {
        exec.usage(k(1)).is_ok_and(|u| u.memory_working_set_bytes > 0)
    });
    exec.force_kill(k(1)).expect("kill");
    assert_eq!(wait_exit(&exec, k(1)).reason, ExitReason::Signaled { signal: 9 });
}

#[test]
fn bad_specs_are_refused_and_launch_nothing() {
    let env = Env::new("bad", CgroupMode::Auto, 2);
    let exec = env.executor();
    type Edit = Box<dyn Fn(&mut LaunchSpec)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("argv is empty", Box::new(|s| s.argv.clear())),
        ("argv[0] is empty", Box::new(|s| s.argv = vec![String::new()])),
        ("NUL", Box::new(|s| s.argv.push("a\0b".into()))),
        ("unknown user", Box::new(|s| s.user = Some("no-such-gantry-user".into()))),
        ("allow_root", Box::new(|s| s.user = Some("root".into()))),
        ("escapes the container directory", Box::new(|s| s.workdir = Some("../other".into()))),
        ("escapes the container directory", Box::new(|s| s.stderr = Some("logs/../../../x".into()))),
        ("relative to the container directory", Box::new(|s| s.stdout = Some("/tmp/gantry-evil".into()))),
        ("does not name a file", Box::new(|s| s.stdout = Some(".".into()))),
        ("GPU 2 does not exist", Box::new(|s| s.gpus = vec![0, 2])),
        ("GPU 1 is listed more than once", Box::new(|s| s.gpus = vec![1, 1])),
        ("environment variable name", Box::new(|s| s.env = vec![("A=B".into(), "x".into())])),
        ("cpu_millis 5", Box::new(|s| s.cpu_millis = 5)),
        ("memory_bytes 1 ", Box::new(|s| s.memory_bytes = 1)),
    ];
    for (i, (want, edit)) in cases.iter().enumerate() {
        let id = 100 + i as u64;
        let mut s = spec(id, &["sleep", "60"]);
        edit(&mut s);
        let err = exec.validate(&s).expect_err(want).to_string();
        assert!(err.contains(want), "case {i}: {err:?} should mention {want:?}");
        let err = exec.launch(&s).expect_err(want).to_string();
        assert!(err.contains(want), "case {i}: {err:?}");
        assert!(!exec.control_dir(k(id)).exists(), "case {i}: no directory");
        if let Some(cg) = exec.layout().container(&env.settings.cgroup_name, k(id)) {
            assert!(cg.dirs().iter().all(|d| !d.exists()), "case {i}: no cgroup");
        }
        let path = exec.control_dir(k(id));
        assert_eq!(processes_mentioning(&path.to_string_lossy()), Vec::<u32>::new(), "case {i}: no process");
    }
    assert!(exec.list().is_empty());

    // An id already in use is refused, and the running container is untouched.
    let h = exec.launch(&spec(1, &["sleep", "60"])).expect("launch");
    let err = exec.launch(&spec(1, &["true"])).expect_err("duplicate id");
    assert!(matches!(err, ExecError::Spec(SpecError::AlreadyExists(key)) if key == k(1)), "{err}");
    assert!(live_start_time(h.pid).is_some());

    // A spec that passes validation but cannot be set up (its log file would be its working
    // directory) fails at launch and leaves nothing behind either.
    let mut s = spec(2, &["true"]);
    s.workdir = Some("x".into());
    s.stdout = Some("x".into());
    let err = exec.launch(&s).expect_err("setup failure").to_string();
    assert!(err.contains("failed to start") && err.contains("Is a directory"), "{err}");
    assert!(!exec.control_dir(k(2)).exists());
    if let Some(cg) = exec.layout().container(&env.settings.cgroup_name, k(2)) {
        assert!(cg.dirs().iter().all(|d| !d.exists()), "no cgroup left");
    }
}

#[test]
fn exit_codes_signals_and_exec_failures_are_reported() {
    let env = Env::new("codes", CgroupMode::Auto, 0);
    let exec = env.executor();
    let before = now_ms();
    exec.launch(&spec(1, &["true"])).expect("true");
    exec.launch(&spec(2, &["sh", "-c", "exit 3"])).expect("exit 3");
    exec.launch(&spec(3, &["sh", "-c", "kill -9 $$"])).expect("kill -9");
    exec.launch(&spec(4, &["/nonexistent/gantry-program"])).expect("launches; exec fails in the container");
    exec.launch(&spec(5, &["no-such-gantry-program"])).expect("PATH search fails in the container");
    let exits = wait_exits(&exec, &[1, 2, 3, 4, 5].map(k));
    let after = now_ms();
    assert_eq!(exits[&k(1)].reason, ExitReason::Exited { code: 0 });
    assert_eq!(exits[&k(2)].reason, ExitReason::Exited { code: 3 });
    assert_eq!(exits[&k(3)].reason, ExitReason::Signaled { signal: 9 });
    assert_eq!(exits[&k(4)].reason, ExitReason::Exited { code: 127 });
    assert_eq!(exits[&k(5)].reason, ExitReason::Exited { code: 127 });
    for e in exits.values() {
        assert!((before..=after).contains(&e.finished_at_ms), "{e:?} not in {before}..={after}");
    }
    let err = read(&exec.container_dir(k(4)).join("stderr"));
    assert!(err.contains("cannot execute /nonexistent/gantry-program"), "{err}");
    assert!(exec.collect_exits().is_empty(), "each exit is reported once");
    for id in 1..=5 {
        exec.forget(k(id)).expect("forget");
    }
    assert!(exec.list().is_empty());
}

#[tokio::test]
async fn containers_run_as_their_users_own_uid_with_their_logs_and_environment() {
    let env = Env::new("env", CgroupMode::Auto, 4);
    let exec = env.executor();
    let mut s = spec(
        1,
        &[
            "sh",
            "-c",
            r#"echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$GANTRY_CONTAINER_ID|$GANTRY_APP_ID|$FOO|$(pwd)"; echo oops >&2; exec sleep 60"#,
        ],
    );
    s.gpus = vec![2, 0];
    s.env = vec![("FOO".into(), "bar".into()), ("CUDA_VISIBLE_DEVICES".into(), "3".into())];
    let h = exec.launch(&s).expect("launch");
    let out = h.container_dir.join("stdout");
    wait_for("stdout", || std::fs::read_to_string(&out).is_ok_and(|s| s.ends_with('\n')));
    let dir = h.container_dir.to_string_lossy().into_owned();
    assert_eq!(read(&out), format!("2,0|2,0|1|77|bar|{dir}\n"));
    wait_for("stderr", || {
        std::fs::read_to_string(h.container_dir.join("stderr")).is_ok_and(|s| s == "oops\n")
    });
    let uid = uid_of(h.pid);
    let range = gantry_agent::isolation::UidRange::SYSTEMD;
    assert!((range.first..=range.last).contains(&uid), "runs as a dynamic uid of its user's own, not {uid}");
    let log = std::fs::metadata(&out).expect("stdout");
    assert_eq!(log.uid(), uid, "log files belong to the container");
    assert_eq!(log.mode() & 0o777, 0o600, "and only to it");
    exec.kill(k(1), Duration::from_secs(5)).await.expect("kill");

    let mut s = spec(
        2,
        &["sh", "-c", r#"echo "[$CUDA_VISIBLE_DEVICES]|$NVIDIA_VISIBLE_DEVICES|$(pwd)"; echo e >&2"#],
    );
    s.workdir = Some("sub/dir".into());
    s.stdout = Some("logs/out.txt".into());
    s.stderr = Some("logs/err.txt".into());
    exec.launch(&s).expect("launch");
    assert_eq!(wait_exit(&exec, k(2)).reason, ExitReason::Exited { code: 0 });
    let dir = exec.container_dir(k(2));
    assert_eq!(read(&dir.join("logs/out.txt")), format!("[]|void|{}\n", dir.join("sub/dir").display()));
    assert_eq!(read(&dir.join("logs/err.txt")), "e\n");
}

#[tokio::test]
async fn a_restarted_agent_adopts_a_running_container_and_can_kill_it() {
    let env = Env::new("adopt", CgroupMode::Auto, 0);
    let a = env.executor();
    let h = a.launch(&spec(1, &["sleep", "60"])).expect("launch");
    drop(a); // the agent dies; the container does not
    let cmd_start = live_start_time(h.pid).expect("still running without an agent");

    let b = env.executor();
    let adopted = b.adopt().expect("adopt");
    assert_eq!((adopted.running, adopted.ended), (vec![k(1)], vec![]));
    assert_eq!(b.running(), vec![k(1)]);
    assert!(b.usage(k(1)).expect("usage").processes >= 1);
    assert!(b.collect_exits().is_empty(), "still running");
    b.kill(k(1), Duration::from_secs(5)).await.expect("kill");
    assert_eq!(wait_exit(&b, k(1)).reason, ExitReason::KilledByRequest);
    assert_ne!(live_start_time(h.pid), Some(cmd_start), "the command is gone");
    b.forget(k(1)).expect("forget");
    assert_eq!(
        b.adopt().expect("adopt again"),
        Default::default(),
        "a reported container is not adopted again"
    );
}

#[test]
fn an_exit_while_the_agent_is_down_is_reported_with_its_time() {
    let env = Env::new("downexit", CgroupMode::Auto, 0);
    let a = env.executor();
    let before = now_ms();
    a.launch(&spec(1, &["sh", "-c", "exit 3"])).expect("launch");
    let exit_file = a.control_dir(k(1)).join("exit.json");
    drop(a);
    wait_for("the shim's exit record", || exit_file.exists());
    let after = now_ms();

    let b = env.executor();
    let adopted = b.adopt().expect("adopt");
    assert_eq!((adopted.running, adopted.ended), (vec![], vec![k(1)]));
    let exits = b.collect_exits();
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0].reason, ExitReason::Exited { code: 3 });
    assert!((before..=after).contains(&exits[0].finished_at_ms), "recorded time {exits:?}");
    b.forget(k(1)).expect("forget");
}

#[test]
fn a_reused_pid_is_not_adopted() {
    // This test process stands in for "another process with the shim's pid": it must have been
    // started in an earlier clock tick (start times count 10 ms ticks) than the shim will be.
    std::thread::sleep(Duration::from_millis(50));
    let env = Env::new("reuse", CgroupMode::Auto, 0);
    let a = env.executor();
    let h = a.launch(&spec(1, &["sleep", "60"])).expect("launch");
    let pid_file = a.control_dir(k(1)).join("pid");
    drop(a);
    // Pretend the shim's pid now belongs to another process: this test process, which is alive
    // but started at another time.
    let mut rec: serde_json::Value = serde_json::from_str(&read(&pid_file)).expect("pid json");
    let shim_start = rec["shim_start_time"].as_u64().expect("shim start");
    assert_ne!(live_start_time(std::process::id()), Some(shim_start));
    rec["shim_pid"] = std::process::id().into();
    std::fs::write(&pid_file, rec.to_string()).expect("rewrite pid file");

    let b = env.executor();
    let adopted = b.adopt().expect("adopt");
    assert_eq!((adopted.running, adopted.ended), (vec![], vec![k(1)]));
    assert_eq!(b.collect_exits()[0].reason, ExitReason::Lost);
    // What was left in the lost container's cgroup was killed, not this process. (SIGKILL is
    // delivered when the thawed process next runs: on a loaded machine, a moment later.)
    wait_for("the stray command to be killed", || live_start_time(h.pid).is_none());
    // The real shim notices and ends; reap it (it is this process's child).
    let shim = nix::unistd::Pid::from_raw(h.shim_pid as i32);
    wait_for("the real shim to end", || {
        matches!(
            nix::sys::wait::waitpid(shim, Some(nix::sys::wait::WaitPidFlag::WNOHANG)),
            Ok(nix::sys::wait::WaitStatus::Exited(..)) | Err(_)
        )
    });
    b.forget(k(1)).expect("forget");
}

/// A container whose main process exits and leaves a daemon behind: the daemon goes with it.
fn leftovers_die_with_the_container(tag: &str, mode: CgroupMode) {
    let env = Env::new(tag, mode, 0);
    let exec = env.executor();
    // The main process waits for the test's go-ahead, then exits, leaving the daemon behind.
    let script = "( setsid sh -c 'trap \"\" TERM; echo $$ > daemon.pid; exec sleep 1000' & )
while [ ! -e go ]; do sleep 0.01; done";
    let h = exec.launch(&spec(1, &["sh", "-c", script])).expect("launch");
    let pid_file = h.container_dir.join("daemon.pid");
    wait_for("the daemon's pid", || std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')));
    let daemon = read_pid(&pid_file);
    let start = live_start_time(daemon).expect("the daemon runs");
    std::fs::write(h.container_dir.join("go"), "").expect("go-ahead");
    assert_eq!(wait_exit(&exec, k(1)).reason, ExitReason::Exited { code: 0 });
    assert_ne!(live_start_time(daemon), Some(start), "the daemon {daemon} outlived its container");
    if let Some(cg) = &h.cgroup {
        assert!(cg.pids().expect("cgroup.procs").is_empty());
    }
}

#[test]
fn leftovers_die_with_the_container_with_cgroups() {
    leftovers_die_with_the_container("leftover", CgroupMode::Auto);
}

#[test]
fn leftovers_die_with_the_container_without_cgroups() {
    leftovers_die_with_the_container("leftover-nocg", CgroupMode::Off);
}

/// A supervisor killed from outside: the container is reported lost and its command killed.
fn a_vanished_supervisor_means_lost(tag: &str, mode: CgroupMode) {
    let env = Env::new(tag, mode, 0);
    let exec = env.executor();
    let h = exec.launch(&spec(1, &["sleep", "60"])).expect("launch");
    let cmd_start = live_start_time(h.pid).expect("running");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(h.shim_pid as i32), nix::sys::signal::Signal::SIGKILL)
        .expect("kill the shim");
    assert_eq!(wait_exit(&exec, k(1)).reason, ExitReason::Lost);
    wait_for("the orphaned command to die", || live_start_time(h.pid) != Some(cmd_start));
    exec.forget(k(1)).expect("forget");
}

#[test]
fn a_vanished_supervisor_means_lost_with_cgroups() {
    a_vanished_supervisor_means_lost("lost", CgroupMode::Auto);
}

#[test]
fn a_vanished_supervisor_means_lost_without_cgroups() {
    a_vanished_supervisor_means_lost("lost-nocg", CgroupMode::Off);
}

/// Blocks until the pipe behind an exit notice reaches end of file (the supervisor exited).
fn wait_end_of_file(notice: gantry_agent::executor::ExitNotice) {
    use std::io::Read;
    let mut pipe = std::fs::File::from(notice.into_fd());
    let mut rest = Vec::new();
    pipe.read_to_end(&mut rest).expect("read the notice pipe");
    assert!(rest.is_empty(), "nothing follows the running notice: {rest:?}");
}

#[test]
fn a_watched_container_reports_its_exit_through_its_notice_only() {
    let env = Env::new("notice", CgroupMode::Auto, 0);
    let exec = env.executor();
    // A container that waits for a file, so the test decides when it ends.
    let gate = env.settings.containers_dir.parent().expect("work root").join("gate");
    let script = format!("while [ ! -e {} ]; do sleep 0.01; done; exit 7", gate.display());
    let (handle, notice) = exec.launch_watched(&spec(1, &["/bin/sh", "-c", &script])).expect("launch");
    assert!(live_start_time(handle.pid).is_some(), "the command runs when launch returns");
    // A scan never reports a watched container, before or after it ends.
    assert!(exec.collect_exits().is_empty());
    assert!(exec.collect_exit(k(1)).is_none(), "still running");
    std::fs::write(&gate, b"").expect("open the gate");
    wait_end_of_file(notice);
    assert!(exec.collect_exits().is_empty(), "a scan leaves an ended watched container to its watcher");
    let exit = exec.collect_exit(k(1)).expect("ended once the notice reached end of file");
    assert_eq!(exit.reason, ExitReason::Exited { code: 7 });
    assert!(exec.collect_exit(k(1)).is_none(), "reported once");
    exec.forget(k(1)).expect("forget");

    // Handed back, a container's exit comes out of the scan as before.
    let (_, notice) = exec.launch_watched(&spec(2, &["true"])).expect("launch");
    drop(notice);
    exec.unwatch(k(2));
    let exit = wait_exit(&exec, k(2));
    assert_eq!(exit.reason, ExitReason::Exited { code: 0 });
}

#[test]
fn the_shim_only_binary_supervises_containers_like_the_agent_binary() {
    let mut env = Env::new("shimbin", CgroupMode::Auto, 0);
    env.settings.shim_program = PathBuf::from(env!("CARGO_BIN_EXE_gantry-shim"));
    assert_eq!(
        gantry_agent::shim::program_beside(Path::new(env!("CARGO_BIN_EXE_gantry-agent"))),
        env.settings.shim_program,
        "the agent picks the shim binary beside it"
    );
    let exec = env.executor();
    let (handle, notice) = exec.launch_watched(&spec(1, &["sh", "-c", "echo out; exit 3"])).expect("launch");
    wait_end_of_file(notice);
    let exit = exec.collect_exit(k(1)).expect("ended");
    assert_eq!(exit.reason, ExitReason::Exited { code: 3 });
    assert_eq!(read(&handle.container_dir.join("stdout")), "out\n");
    // Without arguments it refuses, naming its use.
    let out = std::process::Command::new(&env.settings.shim_program).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
}

/// Two scheduler runs' cluster ids (a scheduler on fresh state numbers its containers from 1
/// again, while this node keeps the earlier run's).
const OLD: ClusterId = ClusterId::from_bits(0x01d);
const NEW: ClusterId = ClusterId::from_bits(0x2e3);

#[tokio::test]
async fn containers_of_the_same_id_in_two_clusters_coexist_and_a_kill_touches_only_its_own() {
    let env = Env::new("twoclusters", CgroupMode::Auto, 0);
    let exec = env.executor();
    let (old, new, legacy) = (ContainerKey::new(OLD, 1), ContainerKey::new(NEW, 1), k(1));
    let run = |cluster: ClusterId, word: &str| {
        exec.launch(&spec_in(cluster, 1, &["sh", "-c", &format!("echo {word}; exec sleep 60")])).expect(word)
    };
    let old_h = run(OLD, "old");
    let new_h = run(NEW, "new");
    let legacy_h = run(ClusterId::LEGACY, "legacy");
    assert_eq!(exec.running(), {
        let mut all = vec![old, new, legacy];
        all.sort();
        all
    });
    // Each has its own directories and cgroup.
    assert_eq!(exec.control_dir(old), env.settings.containers_dir.join("1.0000000000000000000000000000001d"));
    assert_eq!(
        exec.control_dir(legacy),
        env.settings.containers_dir.join("1"),
        "as agents before cluster ids"
    );
    for h in [&old_h, &new_h] {
        assert_ne!(h.container_dir, legacy_h.container_dir);
        assert_ne!(h.cgroup.as_ref().map(|c| c.dirs()), legacy_h.cgroup.as_ref().map(|c| c.dirs()));
    }
    assert_ne!(old_h.container_dir, new_h.container_dir);
    let spec_json = read(&exec.control_dir(new).join("spec.json"));
    assert!(spec_json.contains(&NEW.to_wire()), "the spec records its cluster: {spec_json}");
    for (key, word) in [(old, "old\n"), (new, "new\n"), (legacy, "legacy\n")] {
        wait_for("its output", || {
            exec.read_log(key, gantry_agent::executor::LogStream::Stdout, None)
                .is_ok_and(|r| r.data == word.as_bytes())
        });
    }
    // Only the same cluster and id is "already there".
    let err = exec.launch(&spec_in(NEW, 1, &["true"])).expect_err("the same key twice");
    assert!(matches!(err, ExecError::Spec(SpecError::AlreadyExists(key)) if key == new), "{err}");

    // A kill of the new run's container 1 leaves the others of id 1 running.
    exec.kill(new, Duration::from_secs(5)).await.expect("kill");
    let exit = wait_exit(&exec, new);
    assert_eq!((exit.reason, exit.cluster, exit.container_id), (ExitReason::KilledByRequest, NEW, 1));
    assert!(live_start_time(new_h.pid).is_none(), "the killed one is gone");
    for h in [&old_h, &legacy_h] {
        assert!(live_start_time(h.pid).is_some(), "container {} of another cluster still runs", h.key);
    }
    assert!(!exec.has_ended(old) && !exec.has_ended(legacy));
    exec.forget(new).expect("forget");
    assert!(matches!(exec.forget(new), Ok(())), "idempotent");
    assert!(!exec.has_ended(old), "forgetting one forgets no other");
}

#[tokio::test]
async fn a_restarted_agent_adopts_every_clusters_containers_by_their_own_keys() {
    let env = Env::new("adoptkeys", CgroupMode::Auto, 0);
    let a = env.executor();
    // What an agent before cluster ids left (no cluster in its spec), and two runs' containers 4.
    let legacy_h = a.launch(&spec(4, &["sleep", "60"])).expect("legacy");
    let old_h = a.launch(&spec_in(OLD, 4, &["sleep", "60"])).expect("old");
    a.launch(&spec_in(NEW, 4, &["sh", "-c", "exit 3"])).expect("new");
    let legacy_spec = read(&a.control_dir(k(4)).join("spec.json"));
    assert!(!legacy_spec.contains("\"cluster\""), "written as before cluster ids: {legacy_spec}");
    let new_exit = a.control_dir(ContainerKey::new(NEW, 4)).join("exit.json");
    drop(a);
    wait_for("the new run's container to end while the agent is down", || new_exit.exists());

    let b = env.executor();
    let adopted = b.adopt().expect("adopt");
    let mut running = vec![k(4), ContainerKey::new(OLD, 4)];
    running.sort();
    assert_eq!((adopted.running, adopted.ended), (running.clone(), vec![ContainerKey::new(NEW, 4)]));
    assert_eq!(b.running(), running);
    let exits = b.collect_exits();
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(
        (exits[0].key(), exits[0].reason),
        (ContainerKey::new(NEW, 4), ExitReason::Exited { code: 3 })
    );

    // Killing the old run's container 4 leaves the legacy one alone, and the other way round.
    b.kill(ContainerKey::new(OLD, 4), Duration::from_secs(5)).await.expect("kill old");
    assert_eq!(wait_exit(&b, ContainerKey::new(OLD, 4)).reason, ExitReason::KilledByRequest);
    assert!(live_start_time(old_h.pid).is_none());
    assert!(live_start_time(legacy_h.pid).is_some(), "the legacy container 4 still runs");
    b.kill(k(4), Duration::from_secs(5)).await.expect("kill legacy");
    assert_eq!(wait_exit(&b, k(4)).reason, ExitReason::KilledByRequest);
    for key in [k(4), ContainerKey::new(OLD, 4), ContainerKey::new(NEW, 4)] {
        b.forget(key).expect("forget");
    }
    assert_eq!(b.adopt().expect("adopt again"), Default::default(), "reported ones are not adopted again");
}
