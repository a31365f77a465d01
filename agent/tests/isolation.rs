//! Containers of different users on one node, attacking each other through the real shim and
//! real cgroups (issue 19, items 1 and 2). Needs root, as the executor tests do.
//!
//! Each test runs the attack twice where that shows something: with the isolation settings
//! (the defaults), where it must fail, and with the settings the agent had before them
//! (`container_user = "nobody"`, no process limit, the host's `/tmp`, privileges kept), where it
//! succeeds — so the test proves it can see the hole it guards.

mod common;

use gantry_agent::executor::{CgroupMode, Executor, ExecutorSettings};
use gantry_agent::isolation::{DEFAULT_MAX_PIDS, UidRange};
use gantry_agent::model::{ContainerKey, ExitReason, LaunchSpec};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(60);

/// A work root and parent cgroup; dropping it kills and removes what is left.
struct Node {
    root: tempfile::TempDir,
    settings: ExecutorSettings,
}

impl Node {
    /// A node whose users get uids from `first_uid` on: each test its own, so that a test's
    /// `kill -9 -1` cannot reach the containers of a test running beside it (every work root
    /// has a uid table of its own, and they would all start at the same uid).
    fn new(tag: &str, first_uid: u32) -> Node {
        // Not under /tmp: the tests hand containers files, and containers see a /tmp of their own.
        let root = tempfile::Builder::new()
            .prefix(&format!("gantry-iso-{tag}-"))
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let settings = ExecutorSettings {
            containers_dir: root.path().join("containers"),
            default_user: None,
            dynamic_uids: UidRange { first: first_uid, last: first_uid + 9 },
            max_pids: DEFAULT_MAX_PIDS,
            private_tmp: true,
            allow_privilege_escalation: false,
            allow_root: false,
            kill_grace: Duration::from_secs(2),
            cgroup_name: format!("gantry-test-{}-iso-{tag}", std::process::id()),
            gpu_count: 0,
            default_disk_bytes: 0,
            shim_program: PathBuf::from(env!("CARGO_BIN_EXE_gantry-agent")),
            cgroups: CgroupMode::Auto,
        };
        Node { root, settings }
    }

    /// The same node as the agent ran it before isolation (then every container ran as
    /// `nobody`; here the tests give everyone one uid of the test's own, which is the same
    /// thing without reaching other tests' `nobody` containers).
    fn legacy(tag: &str, first_uid: u32) -> Node {
        let mut node = Node::new(tag, first_uid);
        node.settings.max_pids = 0;
        node.settings.private_tmp = false;
        node.settings.allow_privilege_escalation = true;
        node
    }

    fn executor(&self) -> Executor {
        Executor::new(self.settings.clone()).expect("executor")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        common::clean_up_executor(&self.settings);
    }
}

fn k(id: u64) -> ContainerKey {
    ContainerKey::legacy(id)
}

fn launch(id: u64, submitter: &str, script: &str) -> LaunchSpec {
    LaunchSpec {
        container_id: id,
        app_id: id,
        submitter: submitter.into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        ..LaunchSpec::default()
    }
}

fn wait_exit(exec: &Executor, id: ContainerKey) -> ExitReason {
    let start = Instant::now();
    loop {
        if let Some(e) = exec.collect_exits().into_iter().find(|e| e.key() == id) {
            return e.reason;
        }
        assert!(start.elapsed() < PATIENCE, "container {id:?} did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < PATIENCE, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// What container A (alice) manages to do to container B (bob), which holds a secret in its
/// environment and in a file, and runs until killed: one line per attempt, `ok` or `denied`.
fn attack(node: &Node, exec: &Executor, victim_user: &str, attacker: &str) -> (String, bool, String) {
    let mut victim = launch(
        1,
        victim_user,
        "echo private > secret; echo ready > ready; echo bob-was-here; exec sleep 600",
    );
    victim.env = vec![("SECRET_TOKEN".into(), "s3cr3t".into())];
    exec.launch(&victim).expect("launch bob's container");
    let b_work = exec.container_dir(k(1));
    let b_control = exec.control_dir(k(1));
    wait_for_file(&b_work.join("ready"));
    let script = format!(
        "try() {{ if eval \"$2\" >/dev/null 2>&1; then echo \"$1 ok\"; else echo \"$1 denied\"; fi; }}
         try spec 'grep -q s3cr3t {spec}'
         try file 'cat {work}/secret'
         try log 'echo forged-by-alice >> {work}/stdout'
         try list 'ls {containers}'
         kill -9 -1 2>/dev/null; echo killed-all",
        spec = b_control.join("spec.json").display(),
        work = b_work.display(),
        containers = node.settings.containers_dir.display(),
    );
    exec.launch(&launch(2, attacker, &script)).expect("launch alice's container");
    assert_eq!(wait_exit(exec, k(2)), ExitReason::Exited { code: 0 });
    let report = read(&exec.container_dir(k(2)).join("stdout"));
    std::thread::sleep(Duration::from_millis(200));
    let victim_alive = !exec.has_ended(k(1)) && exec.collect_exits().iter().all(|e| e.key() != k(1));
    let victim_log = read(&b_work.join("stdout"));
    (report, victim_alive, victim_log)
}

#[test]
fn containers_of_different_users_cannot_read_forge_or_kill_each_other() {
    let node = Node::new("users", 63000);
    let exec = node.executor();
    let (report, alive, log) = attack(&node, &exec, "bob", "alice");
    assert_eq!(report, "spec denied\nfile denied\nlog denied\nlist denied\nkilled-all\n");
    assert!(alive, "kill -9 -1 from another user's container must not reach bob's");
    assert_eq!(log, "bob-was-here\n", "bob's log is bob's alone");

    let (a, b) = (exec.pids(k(1)).expect("bob's pids"), exec.container_dir(k(1)));
    assert!(!a.is_empty());
    let bob = std::fs::metadata(&b).expect("bob's directory");
    assert_eq!(bob.mode() & 0o777, 0o700, "a container directory is its user's alone");
    let alice = std::fs::metadata(exec.container_dir(k(2))).expect("alice's directory");
    assert_ne!(bob.uid(), alice.uid(), "two users, two uids");
    for uid in [bob.uid(), alice.uid()] {
        assert!((63000..=63009).contains(&uid), "uid {uid} is from the dynamic range");
    }
    let control = exec.control_dir(k(1));
    assert_eq!(std::fs::metadata(&control).expect("control").mode() & 0o777, 0o711);
    for f in ["spec.json", "pid"] {
        let mode = std::fs::metadata(control.join(f)).expect(f).mode();
        assert_eq!(mode & 0o777, 0o600, "{f} is root's alone");
    }
    // The uids are kept: a restarted agent gives bob the same one.
    let again = node.executor();
    again.launch(&launch(3, "bob", "id -u")).expect("bob again");
    assert_eq!(wait_exit(&again, k(3)), ExitReason::Exited { code: 0 });
    assert_eq!(read(&again.container_dir(k(3)).join("stdout")).trim(), bob.uid().to_string());
}

#[test]
fn with_one_account_for_everyone_the_same_attack_succeeds() {
    let node = Node::legacy("shared-uid", 63010);
    let (report, alive, log) = attack(&node, &node.executor(), "everyone", "everyone");
    // The control files are root's now whatever the account; the rest is what one shared uid
    // gives away.
    assert!(report.contains("file ok") && report.contains("log ok"), "{report}");
    assert!(!alive, "one uid for everyone: kill -9 -1 reaches every container");
    assert!(log.contains("forged-by-alice"), "{log}");
}

/// Starts 200 background sleeps; prints how many started.
const FORK_BOMB: &str = "n=0; for i in $(seq 200); do sleep 30 2>/dev/null & if [ $? -eq 0 ]; then n=$((n+1)); fi; done; \
                         echo started; kill $(jobs -p) 2>/dev/null; exit 0";

fn processes_allowed(node: &Node, max_pids: Option<u64>) -> (ExitReason, String, String) {
    let exec = node.executor();
    let mut s = launch(1, "alice", FORK_BOMB);
    s.max_pids = max_pids;
    exec.launch(&s).expect("launch");
    let reason = wait_exit(&exec, k(1));
    let dir = exec.container_dir(k(1));
    (reason, read(&dir.join("stdout")), read(&dir.join("stderr")))
}

#[test]
fn a_fork_bomb_stops_at_the_process_limit() {
    let node = Node::new("pids", 63020);
    let (reason, out, err) = processes_allowed(&node, Some(50));
    // The shell cannot fork its 51st process, and dash gives up there.
    assert_ne!(reason, ExitReason::Exited { code: 0 }, "{out}{err}");
    assert!(!out.contains("started"), "{out}");
    assert!(err.contains("fork"), "{err}");
    let limited = Node::new("pids-cgroup", 63030);
    let exec = limited.executor();
    let mut s = launch(2, "alice", "sleep 30");
    s.max_pids = Some(64);
    let h = exec.launch(&s).expect("launch");
    if let Some(gantry_agent::cgroup::ContainerCgroup::V1 { pids: Some(dir), .. }) = &h.cgroup {
        assert_eq!(read(&dir.join("pids.max")).trim(), "64");
    }
    let node_default = Node::new("pids-default", 63040);
    let exec = node_default.executor();
    let h = exec.launch(&launch(3, "alice", "sleep 30")).expect("launch");
    if let Some(gantry_agent::cgroup::ContainerCgroup::V1 { pids: Some(dir), .. }) = &h.cgroup {
        assert_eq!(read(&dir.join("pids.max")).trim(), DEFAULT_MAX_PIDS.to_string(), "the node's default");
    }
}

#[test]
fn without_a_process_limit_the_fork_bomb_runs() {
    let node = Node::legacy("no-pids", 63050);
    let (reason, out, err) = processes_allowed(&node, None);
    assert_eq!(reason, ExitReason::Exited { code: 0 }, "{err}");
    assert_eq!(out, "started\n");
    assert!(!err.contains("fork"), "no limit, no refusal: {err}");
}

/// Container 1 leaves files in /tmp and /dev/shm and waits; container 2 (another user) looks
/// for them. Returns what 2 saw and where 1's /tmp file ended up on the host.
fn tmp_probe(exec: &Executor, tag: &str) -> (String, PathBuf) {
    let name = format!("gantry-iso-{tag}-{}", std::process::id());
    let writer =
        format!("echo a > /tmp/{name}; echo a > /dev/shm/{name}; echo ready > ready; exec sleep 600");
    exec.launch(&launch(1, "alice", &writer)).expect("launch");
    wait_for_file(&exec.container_dir(k(1)).join("ready"));
    let reader = format!(
        "cat /tmp/{name} 2>/dev/null || echo no-tmp; cat /dev/shm/{name} 2>/dev/null || echo no-shm; \
         stat -c %a /tmp /dev/shm"
    );
    exec.launch(&launch(2, "bob", &reader)).expect("launch");
    assert_eq!(wait_exit(exec, k(2)), ExitReason::Exited { code: 0 });
    (read(&exec.container_dir(k(2)).join("stdout")), PathBuf::from(format!("/tmp/{name}")))
}

#[test]
fn tmp_and_shm_are_private_and_go_with_the_container() {
    let node = Node::new("tmp", 63060);
    let exec = node.executor();
    let (seen, host_file) = tmp_probe(&exec, "private");
    assert_eq!(seen, "no-tmp\nno-shm\n1777\n1777\n", "another container sees its own /tmp and /dev/shm");
    assert!(!host_file.exists(), "nothing reaches the host's /tmp");
    let private = exec.control_dir(k(1)).join(gantry_agent::sandbox::PRIVATE_DIR);
    assert!(private.join("tmp").is_dir(), "the container's /tmp lives in its control directory");
    exec.force_kill(k(1)).expect("kill");
    wait_exit(&exec, k(1));
    assert!(!private.exists(), "and goes with the container");
}

#[test]
fn with_the_hosts_tmp_files_leak_between_containers() {
    let node = Node::legacy("shared-tmp", 63070);
    let (seen, host_file) = tmp_probe(&node.executor(), "shared");
    let shm = PathBuf::from("/dev/shm").join(host_file.file_name().expect("name"));
    let (leaked_tmp, leaked_shm) = (host_file.exists(), shm.exists());
    let _ = std::fs::remove_file(&host_file);
    let _ = std::fs::remove_file(&shm);
    assert!(seen.starts_with("a\na\n"), "{seen}");
    assert!(leaked_tmp && leaked_shm, "and outlive the container on the host");
}

/// A setuid-root copy of `id`, where containers can run it (outside /tmp).
fn setuid_id(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let id = bin.join("suid-id");
    std::fs::copy("/usr/bin/id", &id).expect("copy id");
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).expect("setuid");
    id
}

fn privileges(node: &Node) -> String {
    let exec = node.executor();
    let id = setuid_id(node.root.path());
    let script = format!(
        "grep -E '^NoNewPrivs:' /proc/self/status | tr -s '\\t ' ' '; grep -E '^CapBnd:' /proc/self/status | tr -s '\\t ' ' '; {} -u; {} -ru",
        id.display(),
        id.display()
    );
    exec.launch(&launch(1, "alice", &script)).expect("launch");
    assert_eq!(wait_exit(&exec, k(1)), ExitReason::Exited { code: 0 });
    read(&exec.container_dir(k(1)).join("stdout"))
}

#[test]
fn setuid_binaries_give_nothing_back() {
    let node = Node::new("privs", 63080);
    let out = privileges(&node);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NoNewPrivs: 1");
    assert_eq!(lines[1], "CapBnd: 0000000000000000");
    assert_ne!(lines[2], "0", "a setuid-root binary does not make the container root: {out}");
    assert_eq!(lines[2], lines[3], "the effective uid stays the real one");
}

#[test]
fn with_privileges_kept_a_setuid_binary_makes_root() {
    let node = Node::legacy("privs-kept", 63090);
    let out = privileges(&node);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NoNewPrivs: 0");
    assert_eq!(lines[2], "0", "setuid root works without no_new_privs: {out}");
}
