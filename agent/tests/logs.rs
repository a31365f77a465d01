//! Container logs served by the real `gantry-agent` binary over its scheduler stream (`ReadLog`
//! down, `LogChunk` up), against a fake scheduler on 127.0.0.1: whole files, tails, the 4 MiB
//! cap, redirected log paths, running, ended and forgotten containers, requests the agent must
//! refuse, and log files (or directories on their path) that the container replaced with a
//! symbolic link or a FIFO. Needs root (containers run as `nobody`). Timeouts are failure guards.

mod common;

use common::{GUARD, Server, Session};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_gantry-agent");

/// The agent process, killed when dropped; its containers are killed by the test's last kill
/// or ended by themselves.
struct AgentProcess(Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads messages until `pick` accepts one (statuses and other chatter are skipped).
async fn until<T>(s: &mut Session, what: &str, mut pick: impl FnMut(Up) -> Option<T>) -> T {
    let deadline = Instant::now() + GUARD;
    loop {
        assert!(Instant::now() < deadline, "guard: no {what}");
        if let Some(t) = pick(s.recv().await) {
            return t;
        }
    }
}

/// Launches a container running `sh -c script`, with optional stdout/stderr paths.
async fn launch(s: &mut Session, id: u64, script: &str, stdout: &str, stderr: &str) {
    s.send(Down::Launch(v1::Launch {
        container_id: id,
        app_id: 1,
        argv: vec!["sh".into(), "-c".into(), script.into()],
        stdout: stdout.into(),
        stderr: stderr.into(),
        ..Default::default()
    }))
    .await;
}

/// Launches a container and waits for its exit; returns its exit code.
async fn run_to_end(s: &mut Session, id: u64, script: &str, stdout: &str) -> i32 {
    launch(s, id, script, stdout, "").await;
    until(s, &format!("the exit of container {id}"), |m| match m {
        Up::ContainerExited(e) if e.container_id == id => Some(e.exit_code),
        Up::LaunchFailed(f) if f.container_id == id => panic!("launch failed: {f:?}"),
        _ => None,
    })
    .await
}

/// Sends one `ReadLog` and waits for its `LogChunk`.
async fn read_log(
    s: &mut Session,
    request_id: u64,
    container_id: u64,
    stream: v1::LogStream,
    tail: Option<u64>,
) -> v1::LogChunk {
    s.send(Down::ReadLog(v1::ReadLog {
        request_id,
        container_id,
        stream: stream as i32,
        tail_bytes: tail,
        ..Default::default()
    }))
    .await;
    until(s, &format!("the answer to read {request_id}"), |m| match m {
        Up::LogChunk(c) if c.request_id == request_id => Some(c),
        _ => None,
    })
    .await
}

fn assert_data(chunk: &v1::LogChunk, data: &[u8], file_size: u64) {
    assert_eq!(chunk.error, "", "no error expected");
    assert_eq!(String::from_utf8_lossy(&chunk.data), String::from_utf8_lossy(data));
    assert_eq!(chunk.file_size_bytes, file_size);
}

fn assert_refused(chunk: &v1::LogChunk, needles: &[&str]) {
    assert!(chunk.data.is_empty() && chunk.file_size_bytes == 0, "nothing of the file is sent: {chunk:?}");
    for needle in needles {
        assert!(chunk.error.contains(needle), "{:?} lacks {needle:?}", chunk.error);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_serves_log_tails_and_refuses_what_leaves_the_container_directory() {
    use v1::LogStream::{Stderr, Stdout};
    let dir = tempfile::tempdir().expect("tempdir");
    // Containers run as nobody, who must be able to reach their directories.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let work = dir.path().join("work");
    let cgroup = format!("gantry-logs-test-{}", std::process::id());
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"logs-{pid}\"\nwork_root = {root:?}\nmetrics_listen = \"127.0.0.1:0\"\n\
             cgroup_name = \"{cgroup}\"\nsample_interval_ms = 200\nkill_grace_ms = 500\n",
            pid = std::process::id(),
            root = work.display().to_string(),
        ),
    )
    .expect("config");
    let mut server = Server::start(false).await;
    let agent = AgentProcess(
        Command::new(AGENT)
            .args(["run", "--config"])
            .arg(&config)
            .args(["--scheduler", &format!("http://{}", server.addr)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start agent"),
    );
    let (mut s, _) = server.handshake().await;

    // An ended container: whole files, tails, an empty tail, both streams.
    let code = run_to_end(&mut s, 1, "printf 'out-1\\nout-2\\n'; printf 'err-1\\n' >&2", "").await;
    assert_eq!(code, 0);
    assert_data(&read_log(&mut s, 1, 1, Stdout, None).await, b"out-1\nout-2\n", 12);
    assert_data(&read_log(&mut s, 2, 1, Stdout, Some(6)).await, b"out-2\n", 12);
    assert_data(&read_log(&mut s, 3, 1, Stdout, Some(1000)).await, b"out-1\nout-2\n", 12);
    assert_data(&read_log(&mut s, 4, 1, Stdout, Some(0)).await, b"", 12);
    assert_data(&read_log(&mut s, 5, 1, Stderr, None).await, b"err-1\n", 6);

    // Forgotten once its exit is acknowledged: the logs stay readable.
    s.send(Down::AckExit(v1::AckExit { container_id: 1, ..Default::default() })).await;
    let reported = work.join("containers/1/reported");
    let start = Instant::now();
    while !reported.exists() {
        assert!(start.elapsed() < GUARD, "guard: container 1 was never forgotten");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_data(&read_log(&mut s, 6, 1, Stdout, Some(6)).await, b"out-2\n", 12);

    // Requests the agent cannot serve are answered with a reason, never dropped.
    assert_refused(&read_log(&mut s, 7, 99, Stdout, None).await, &["no container 99 on this node"]);
    assert_refused(&read_log(&mut s, 8, 0, Stdout, None).await, &["container id 0"]);
    assert_refused(&read_log(&mut s, 9, 1, v1::LogStream::Unspecified, None).await, &["unknown log stream"]);

    // A launch that redirected its stdout: the file it actually wrote is read.
    run_to_end(&mut s, 2, "echo redirected", "logs/out.txt").await;
    assert_data(&read_log(&mut s, 10, 2, Stdout, None).await, b"redirected\n", 11);
    // No stderr was written yet the file exists (the shim creates both): empty, not an error.
    assert_data(&read_log(&mut s, 11, 2, Stderr, None).await, b"", 0);

    // A running container's output so far.
    launch(&mut s, 3, "echo running-now; exec sleep 300", "", "").await;
    let start = Instant::now();
    let mut request = 100;
    loop {
        request += 1;
        let chunk = read_log(&mut s, request, 3, Stdout, None).await;
        if chunk.data == b"running-now\n" {
            break;
        }
        assert!(start.elapsed() < GUARD, "guard: never saw the running container's output: {chunk:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.send(Down::Kill(v1::Kill {
        container_id: 3,
        grace_ms: Some(0),
        reason: "test".into(),
        ..Default::default()
    }))
    .await;

    // More than the 4 MiB cap: the last 4 MiB, and the real size.
    let big = 5u64 << 20;
    run_to_end(&mut s, 4, &format!("head -c {big} /dev/zero; printf END"), "").await;
    let chunk = read_log(&mut s, 200, 4, Stdout, None).await;
    assert_eq!(chunk.error, "");
    assert_eq!(chunk.file_size_bytes, big + 3);
    assert_eq!(chunk.data.len() as u64, gantry_proto::MAX_LOG_CHUNK_BYTES);
    assert!(chunk.data.ends_with(b"\0\0END"));
    let chunk = read_log(&mut s, 201, 4, Stdout, Some(64 << 20)).await;
    assert_eq!(chunk.data.len() as u64, gantry_proto::MAX_LOG_CHUNK_BYTES, "a larger tail is capped too");

    // The container's user owns its directory and may swap its log for a symbolic link to a
    // file only root can read: the agent (root) must not follow it.
    run_to_end(&mut s, 5, "echo hello; rm stdout; ln -s /etc/shadow stdout", "").await;
    let planted = work.join("containers/5/work/stdout");
    assert!(planted.symlink_metadata().expect("planted link").file_type().is_symlink());
    assert_refused(
        &read_log(&mut s, 300, 5, Stdout, None).await,
        &["stdout of container 5", "symbolic link", "refused"],
    );
    // The same with a directory on the path of a redirected log.
    run_to_end(&mut s, 6, "echo hello; rm -r logs; ln -s /etc logs", "logs/passwd").await;
    assert!(work.join("containers/6/work/logs").symlink_metadata().expect("link").file_type().is_symlink());
    assert_refused(&read_log(&mut s, 301, 6, Stdout, None).await, &["\"logs\"", "symbolic link", "refused"]);
    // A FIFO in the log's place would block a plain open for ever.
    run_to_end(&mut s, 7, "rm stderr; mkfifo stderr", "").await;
    assert_refused(&read_log(&mut s, 302, 7, Stderr, None).await, &["not a regular file", "refused"]);
    // A hard link to a file of another user (possible where fs.protected_hardlinks is off) is
    // refused by owner; here the agent plants it, as root, where the container could.
    run_to_end(&mut s, 8, "rm stdout", "").await;
    let linked = std::fs::hard_link(&config, work.join("containers/8/work/stdout"));
    linked.expect("hard link in the test's own file system");
    assert_refused(&read_log(&mut s, 303, 8, Stdout, None).await, &["belongs to uid 0", "refused"]);

    drop(s);
    drop(agent);
    gantry_kill_leftovers(&work, &cgroup);
}

/// Kills what the test's containers left and removes the agent's parent cgroups.
fn gantry_kill_leftovers(work: &Path, cgroup: &str) {
    for e in std::fs::read_dir(work.join("containers")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("pid")) else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        if let Some(pid) = v["pid"].as_i64().and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 1) {
            let _ =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    for controller in ["memory", "cpu", "cpuacct", "pids", "freezer", "unified"] {
        let parent = Path::new("/sys/fs/cgroup").join(controller).join(cgroup);
        for child in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            let _ = std::fs::remove_dir(child.path());
        }
        let _ = std::fs::remove_dir(&parent);
    }
}
