//! The per-container supervisor: the agent's own binary run as `gantry-agent shim <dir>`.
//!
//! The agent starts one shim per container in a session of its own. The shim, not the agent, is
//! the container's parent, so a container keeps running — and its exit status is recorded —
//! while the agent is down or restarting. The shim
//!
//! 1. reads `<dir>/spec.json` ([`ShimSpec`], written by the executor, already validated),
//! 2. becomes a child subreaper, so processes that daemonise inside the container are
//!    re-parented to it rather than to init and can still be found and killed,
//! 3. forks the command: the child joins the container's cgroup (so the whole tree is inside
//!    before the command starts, while the shim itself stays outside and survives a cgroup-wide
//!    kill), applies rlimits where there is no cgroup, drops to the container's user, opens its
//!    log files *as that user* (a planted symlink cannot make root write anywhere), and execs,
//! 4. records `<dir>/pid` ([`PidRecord`]: pids and start times, for adoption after an agent
//!    restart), waits for the command (fencing it if the agent's lease runs out, and finishing
//!    a kill the agent left frozen: [`crate::shim_wait`]), kills whatever is left of the
//!    container, and
//! 5. records `<dir>/exit.json` ([`ExitRecord`]) and exits 0.
//!
//! A setup failure before the command runs is written to `<dir>/launch-error` and the shim exits
//! with [`SHIM_SETUP_FAILED`]; the agent's launch reports it as an error.
//!
//! An agent that starts a shim itself also hands it the write end of a pipe as its standard
//! input, the *notify pipe* (`gantry-agent shim <dir> --notify-on-stdin`). The shim writes one byte to it once the pid record is
//! written, and holds it open until it exits, so the agent learns both "running" and "ended" the
//! moment they happen instead of polling files. The command never inherits it. Files stay the
//! source of truth: a shim adopted after an agent restart has no notify pipe and is watched by
//! scanning.

use crate::cgroup::{ContainerCgroup, Limits};
use crate::procfs::{ProcStat, descendants, live_start_time};
use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid};
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// The shim's launch description, in the control directory.
pub const SPEC_FILE: &str = "spec.json";
/// The pids and start times of the shim and the command ([`PidRecord`]).
pub const PID_FILE: &str = "pid";
/// How the command ended ([`ExitRecord`]).
pub const EXIT_FILE: &str = "exit.json";
/// Why the container could not be started (text).
pub const LAUNCH_ERROR_FILE: &str = "launch-error";
/// The shim's own stdout and stderr.
pub const SHIM_LOG_FILE: &str = "shim.log";
/// The shim's exit status when the container could not be set up (nothing ran).
pub const SHIM_SETUP_FAILED: i32 = 3;
/// Exit status of a command that could not be executed (as in a shell).
pub const EXEC_FAILED: i32 = 127;
/// `PATH` of a container whose spec sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long the shim keeps killing and reaping leftovers after the command ended.
const CLEANUP_DEADLINE: Duration = Duration::from_secs(15);

/// Everything the shim needs, resolved by the executor: no lookups are left to the shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimSpec {
    /// Container id.
    pub container_id: u64,
    /// The cluster id of the scheduler run that launched it (absent in specs written before
    /// cluster ids: the legacy cluster). The directory's name says the same.
    #[serde(
        default,
        with = "crate::model::cluster_serde",
        skip_serializing_if = "crate::model::cluster_serde::is_legacy"
    )]
    pub cluster: crate::model::ClusterId,
    /// Application id.
    pub app_id: u64,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The complete environment of the command (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// The container directory (owned by the container's user).
    pub container_dir: PathBuf,
    /// Absolute working directory, inside `container_dir` (created if missing).
    pub workdir: PathBuf,
    /// Absolute stdout file, inside `container_dir`.
    pub stdout: PathBuf,
    /// Absolute stderr file, inside `container_dir`.
    pub stderr: PathBuf,
    /// User id to run as.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The container's cgroup, already created with its limits; `None` without cgroups.
    pub cgroup: Option<ContainerCgroup>,
    /// The limits asked for (enforced by the cgroup, or by `rlimit_as_bytes`).
    pub limits: Limits,
    /// `RLIMIT_AS` for the command where no cgroup enforces the memory limit.
    pub rlimit_as_bytes: Option<u64>,
    /// `RLIMIT_NPROC` for the command where no cgroup enforces the process limit.
    #[serde(default)]
    pub rlimit_nproc: Option<u64>,
    /// The directory mounted on `/tmp` in a mount namespace of the container's own (with a fresh
    /// `/dev/shm`); `None`: the host's (specs written before isolation, or a non-root agent).
    #[serde(default)]
    pub private_tmp: Option<PathBuf>,
    /// Size of the private `/dev/shm`, bytes.
    #[serde(default)]
    pub shm_bytes: u64,
    /// Set no_new_privs before exec.
    #[serde(default)]
    pub no_new_privileges: bool,
    /// Empty the capability bounding set before dropping to the user.
    #[serde(default)]
    pub drop_bounding_set: bool,
    /// GPU indexes handed over (already in the environment; kept for the record).
    pub gpus: Vec<u32>,
    /// Disk allowance, bytes (the agent measures and enforces it; 0 = unlimited). Absent in
    /// specs written before disk allowances: unlimited.
    #[serde(default)]
    pub disk_bytes: u64,
}

impl ShimSpec {
    /// The container it describes.
    pub fn key(&self) -> crate::model::ContainerKey {
        crate::model::ContainerKey::new(self.cluster, self.container_id)
    }
}

/// The shim's and the command's pids with their start times (`/proc/<pid>/stat` field 22), so
/// that a restarted agent can tell its container from an unrelated process that reused a pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidRecord {
    /// The shim.
    pub shim_pid: u32,
    /// The shim's start time, clock ticks after boot.
    pub shim_start_time: u64,
    /// The command (also its process group id).
    pub pid: u32,
    /// The command's start time, clock ticks after boot.
    pub start_time: u64,
}

/// How the command's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExitStatus {
    /// It exited with this status.
    Exited {
        /// Exit status.
        code: i32,
    },
    /// A signal ended it.
    Signaled {
        /// Signal number.
        signal: i32,
    },
}

/// The shim's record of the container's end, written before it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// How the command ended.
    pub status: ExitStatus,
    /// When, Unix ms.
    pub finished_at_ms: u64,
    /// The cgroup's OOM-kill count at the end (0 without cgroups).
    pub oom_kills: u64,
}

/// Why the shim could not do its job.
#[derive(Debug, Error)]
pub enum ShimError {
    /// A file could not be read or written.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A JSON file is malformed.
    #[error("{path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A system call failed.
    #[error("{what}: {errno}")]
    Sys {
        /// What was attempted.
        what: &'static str,
        /// Why.
        errno: Errno,
    },
    /// The spec holds something no process can be given (a NUL byte).
    #[error("{0}")]
    Spec(String),
    /// `fork` is only sound in a single-threaded process.
    #[error("the shim must run single-threaded (found {0} threads)")]
    Threads(usize),
    /// The command's environment could not be set up (it did not run).
    #[error("container setup failed: {0}")]
    Setup(String),
}

fn sys(what: &'static str) -> impl FnOnce(Errno) -> ShimError {
    move |errno| ShimError::Sys { what, errno }
}

/// Writes a file so that readers see either the old or the complete new content, even if the
/// writer dies midway: a temporary file, then rename(2), which replaces the name atomically.
/// The file is readable by its owner only (the agent): control files hold the container's
/// environment, secrets included.
///
/// Deliberately not fsync'd. These files describe processes, and processes do not survive the
/// machine: after a crash of the operating system every container is gone, the scheduler has
/// already declared the node lost, and a record that did not reach the disk only makes
/// adoption report the container lost, which it is. Against the death of the agent or the
/// shim, which is what the files are for, the page cache is enough. Two fsyncs per file (file
/// and directory) cost about 1 ms each on a commodity disk, four files per container.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| io::Error::other("path has no file name"))?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(data)?;
    }
    std::fs::rename(&tmp, path)
}

/// Reads a JSON file written by the agent or a shim.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ShimError> {
    let text = std::fs::read(path).map_err(|source| ShimError::Io {
        what: "read",
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| ShimError::Json { path: path.to_owned(), source })
}

/// Writes a JSON file atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ShimError> {
    let data = serde_json::to_vec_pretty(value)
        .map_err(|source| ShimError::Json { path: path.to_owned(), source })?;
    write_atomic(path, &data).map_err(|source| ShimError::Io { what: "write", path: path.to_owned(), source })
}

/// Unix time now, ms.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Entry point of `gantry-agent shim <dir>`; returns the process exit status. Must be called
/// before the process starts any thread (it forks).
pub fn run_shim(dir: &Path, notify: Option<NotifyFd>) -> i32 {
    match supervise(dir, notify.as_ref()) {
        Ok(()) => 0,
        Err(Failure::Setup(e)) => {
            eprintln!("gantry-shim: {e}");
            // The pipe first: on a full disk neither file below can hold the reason.
            if let Some(n) = &notify {
                n.failed(&e.to_string());
            }
            if let Err(w) = write_atomic(&dir.join(LAUNCH_ERROR_FILE), e.to_string().as_bytes()) {
                eprintln!("gantry-shim: cannot record the launch error: {w}");
            }
            SHIM_SETUP_FAILED
        }
        Err(Failure::Running(e)) => {
            eprintln!("gantry-shim: {e}");
            1
        }
    }
}

/// A failure before the command ran (the launch failed) or after (the record is incomplete).
enum Failure {
    Setup(ShimError),
    Running(ShimError),
}

/// No-op handler: the container's group-wide SIGTERM must not end the shim. A handler rather
/// than SIG_IGN, because handlers — unlike an ignored disposition — are reset by exec.
extern "C" fn ignore_signal(_: libc::c_int) {}

/// The byte a shim writes to its notify pipe once the command runs and its pid is recorded.
pub const NOTIFY_RUNNING: u8 = b'R';
/// The byte a shim writes to its notify pipe, followed by the reason as text, when the
/// container could not be set up (nothing runs).
pub const NOTIFY_FAILED: u8 = b'E';

/// The argument that tells a shim its standard input is the agent's notification pipe.
pub const NOTIFY_ON_STDIN: &str = "--notify-on-stdin";

/// The write end of the agent's notification pipe, inherited by the shim as its standard input
/// (so the agent can start shims with `posix_spawn`, which copies no page tables, rather than
/// `fork` plus a descriptor shuffle of its own).
#[derive(Debug)]
pub struct NotifyFd(std::os::fd::OwnedFd);

impl NotifyFd {
    /// Takes the pipe off standard input: a close-on-exec duplicate (the command never inherits
    /// it), with `/dev/null` put on standard input in its place.
    pub fn from_stdin() -> io::Result<NotifyFd> {
        use std::os::fd::AsFd;
        let pipe = std::io::stdin().as_fd().try_clone_to_owned()?;
        let null = std::fs::File::open("/dev/null")?;
        nix::unistd::dup2_stdin(&null)?;
        Ok(NotifyFd(pipe))
    }

    fn running(&self) {
        // A gone agent (EPIPE; Rust's runtime ignores SIGPIPE) is fine: the files say the same.
        let _ = nix::unistd::write(&self.0, &[NOTIFY_RUNNING]);
    }

    /// Tells the agent why the container could not be set up: one write, within the pipe's
    /// atomic size, so the agent reads it whole.
    fn failed(&self, reason: &str) {
        let mut message = vec![NOTIFY_FAILED];
        message.extend(reason.bytes().take(libc::PIPE_BUF - 1));
        let _ = nix::unistd::write(&self.0, &message);
    }
}

fn supervise(dir: &Path, notify: Option<&NotifyFd>) -> Result<(), Failure> {
    // A session of its own, so that signals meant for the agent's terminal or process group
    // (Ctrl-C on `gantry dev`) never reach the container. Fails only if it leads one already.
    let _ = nix::unistd::setsid();
    let spec: ShimSpec = read_json(&dir.join(SPEC_FILE)).map_err(Failure::Setup)?;
    let threads = thread_count();
    if threads > 1 {
        return Err(Failure::Setup(ShimError::Threads(threads)));
    }
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(sys("PR_SET_CHILD_SUBREAPER"))
        .map_err(Failure::Setup)?;
    let action = SigAction::new(SigHandler::Handler(ignore_signal), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler does nothing, so it is async-signal-safe; installing it races with no
    // other thread (the shim is single-threaded, checked above).
    unsafe { nix::sys::signal::sigaction(Signal::SIGTERM, &action) }
        .map_err(sys("sigaction(SIGTERM)"))
        .map_err(Failure::Setup)?;

    let prepared = Prepared::new(&spec).map_err(Failure::Setup)?;
    // Before the fork, so no child's end is missed; the command's setup resets the mask.
    crate::shim_wait::block_sigchld().map_err(Failure::Setup)?;
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe2")).map_err(Failure::Setup)?;
    // SAFETY: the process is single-threaded (checked above), so the child may run any code,
    // allocation included, until it execs or exits; it never returns into the caller.
    let fork = unsafe { nix::unistd::fork() }.map_err(sys("fork")).map_err(Failure::Setup)?;
    let child = match fork {
        ForkResult::Child => {
            drop(read_end);
            let err = match prepared.exec(&spec) {
                Err(ChildError::Setup(msg)) => msg,
                Ok(never) => match never {},
            };
            let mut pipe = std::fs::File::from(write_end);
            let _ = pipe.write_all(err.as_bytes());
            // SAFETY: _exit is async-signal-safe and ends the child without running the
            // parent's exit handlers or flushing buffers it copied.
            unsafe { libc::_exit(126) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(write_end);
    let mut message = String::new();
    let read = std::fs::File::from(read_end).read_to_string(&mut message);
    if !message.is_empty() || read.is_err() {
        let _ = waitpid(child, None);
        let message =
            if message.is_empty() { "lost contact with the container's process".into() } else { message };
        return Err(Failure::Setup(ShimError::Setup(message)));
    }

    let me = std::process::id();
    let cmd = u32::try_from(child.as_raw()).unwrap_or(0);
    let record = PidRecord {
        shim_pid: me,
        shim_start_time: live_start_time(me).unwrap_or(0),
        pid: cmd,
        // The command may already be gone (`true`); then its start time no longer matters.
        start_time: ProcStat::read(cmd).map_or(0, |s| s.start_time),
    };
    if let Err(e) = write_json(&dir.join(PID_FILE), &record) {
        // Without the pid file the agent cannot tell the launch succeeded: end the container.
        let _ = nix::sys::signal::killpg(child, Signal::SIGKILL);
        clean_up(&spec, me);
        return Err(Failure::Setup(e));
    }
    if let Some(n) = notify {
        n.running();
    }

    let status = crate::shim_wait::wait_for(child, &spec, dir).map_err(Failure::Running)?;
    let finished_at_ms = now_ms();
    clean_up(&spec, me);
    crate::sandbox::remove_private_tmp(&spec);
    let oom_kills = spec.cgroup.as_ref().and_then(|cg| cg.oom_kills().ok()).unwrap_or(0);
    // A container that filled the disk still gets its end recorded: the control directory's
    // reserve is given up for it.
    let record = ExitRecord { status, finished_at_ms, oom_kills };
    crate::disk::with_reserve(dir, || write_json(&dir.join(EXIT_FILE), &record)).map_err(Failure::Running)
}

fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(1)
}

/// Kills everything left of the container — cgroup-wide, and every descendant of the shim
/// (daemonised processes were re-parented to it) — and reaps it all, within a deadline.
fn clean_up(spec: &ShimSpec, me: u32) {
    // The shim is a subreaper: every process left of the container is its child or a child's
    // descendant. With no child left there is nothing to kill, and no need to scan /proc; but a
    // cgroup a kill left frozen is thawed all the same (nothing stays frozen).
    if no_children_left() {
        if let Some(cg) = spec.cgroup.as_ref().filter(|cg| cg.freeze_requested().unwrap_or(false)) {
            if let Err(e) = cg.thaw() {
                eprintln!("gantry-shim: {e}");
            }
        }
        return;
    }
    let start = Instant::now();
    loop {
        if let Some(cg) = &spec.cgroup {
            if let Err(e) = cg.kill_all() {
                eprintln!("gantry-shim: {e}");
            }
        }
        for p in descendants(me) {
            let _ = nix::sys::signal::kill(
                Pid::from_raw(i32::try_from(p.pid).unwrap_or(i32::MAX)),
                Signal::SIGKILL,
            );
        }
        if no_children_left() {
            return;
        }
        if start.elapsed() > CLEANUP_DEADLINE {
            eprintln!("gantry-shim: processes survive after {} s of SIGKILL", CLEANUP_DEADLINE.as_secs());
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reaps exited children; true when none is left (`ECHILD`).
fn no_children_left() -> bool {
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return true,
        }
    }
}

/// Why the child could not exec (sent to the shim through the pipe).
enum ChildError {
    Setup(String),
}

/// Everything the child needs, converted before the fork.
struct Prepared {
    argv: Vec<CString>,
    env: Vec<CString>,
    /// Paths to try for `argv[0]`, in order (a `PATH` search when it has no slash).
    program: Vec<CString>,
}

fn cstring(what: &str, s: &str) -> Result<CString, ShimError> {
    CString::new(s).map_err(|_| ShimError::Spec(format!("{what} contains a NUL byte")))
}

impl Prepared {
    fn new(spec: &ShimSpec) -> Result<Prepared, ShimError> {
        let argv = spec.argv.iter().map(|a| cstring("argv", a)).collect::<Result<Vec<_>, _>>()?;
        let env = spec
            .env
            .iter()
            .map(|(k, v)| cstring("env", &format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()?;
        let argv0 = spec.argv.first().ok_or_else(|| ShimError::Spec("argv is empty".into()))?;
        let program = if argv0.contains('/') {
            vec![cstring("argv[0]", argv0)?]
        } else {
            let path =
                spec.env.iter().rev().find(|(k, _)| k == "PATH").map_or(DEFAULT_PATH, |(_, v)| v.as_str());
            path.split(':')
                .map(|d| {
                    if d.is_empty() { argv0.clone() } else { format!("{}/{argv0}", d.trim_end_matches('/')) }
                })
                .map(|p| cstring("PATH", &p))
                .collect::<Result<Vec<_>, _>>()?
        };
        Ok(Prepared { argv, env, program })
    }

    /// In the forked child: set the process up and exec the command. Returns only on a setup
    /// failure; an exec failure is written to the container's stderr and ends the child with 127.
    fn exec(&self, spec: &ShimSpec) -> Result<Infallible, ChildError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| ChildError::Setup(format!("{what}: {e}"));
        // Its own process group, so the agent can signal the container without the shim.
        nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(|e| fail("setpgid", &e))?;
        reset_signals();
        if let Some(cg) = &spec.cgroup {
            cg.join(std::process::id()).map_err(|e| fail("joining the cgroup", &e))?;
        }
        if let Some(bytes) = spec.rlimit_as_bytes {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, bytes, bytes)
                .map_err(|e| fail("setrlimit(RLIMIT_AS)", &e))?;
        }
        if let Some(n) = spec.rlimit_nproc {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NPROC, n, n)
                .map_err(|e| fail("setrlimit(RLIMIT_NPROC)", &e))?;
        }
        crate::sandbox::enter(spec).map_err(ChildError::Setup)?;
        crate::sandbox::drop_bounding_set(spec).map_err(ChildError::Setup)?;
        let uid = Uid::from_raw(spec.uid);
        let gid = Gid::from_raw(spec.gid);
        if nix::unistd::geteuid() != uid || nix::unistd::getegid() != gid {
            let groups: Vec<Gid> = spec.groups.iter().map(|g| Gid::from_raw(*g)).collect();
            nix::unistd::setgroups(&groups).map_err(|e| fail("setgroups", &e))?;
            nix::unistd::setgid(gid).map_err(|e| fail("setgid", &e))?;
            nix::unistd::setuid(uid).map_err(|e| fail("setuid", &e))?;
        }
        // From here on as the container's user.
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true).mode(0o700);
        for d in
            [Some(spec.workdir.as_path()), spec.stdout.parent(), spec.stderr.parent()].into_iter().flatten()
        {
            dirs.create(d).map_err(|e| fail(&format!("creating {}", d.display()), &e))?;
        }
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| fail(&format!("opening {}", p.display()), &e))
        };
        let out = open(&spec.stdout)?;
        let err = open(&spec.stderr)?;
        nix::unistd::chdir(&spec.workdir)
            .map_err(|e| fail(&format!("entering {}", spec.workdir.display()), &e))?;
        nix::unistd::dup2_stdout(&out).map_err(|e| fail("dup2(stdout)", &e))?;
        nix::unistd::dup2_stderr(&err).map_err(|e| fail("dup2(stderr)", &e))?;
        drop((out, err));
        crate::sandbox::confine(spec).map_err(ChildError::Setup)?;

        let mut errno = Errno::ENOENT;
        let mut denied = false;
        for program in &self.program {
            match nix::unistd::execve(program, &self.argv, &self.env) {
                Err(Errno::ENOENT | Errno::ENOTDIR) => {}
                Err(Errno::EACCES) => denied = true,
                Err(e) => {
                    errno = e;
                    break;
                }
                Ok(never) => match never {},
            }
        }
        if denied && errno == Errno::ENOENT {
            errno = Errno::EACCES;
        }
        let msg = format!("gantry: cannot execute {}: {}\n", spec.argv[0], errno.desc());
        let _ = nix::unistd::write(std::io::stderr(), msg.as_bytes());
        // SAFETY: _exit is async-signal-safe and ends the child without running the parent's
        // exit handlers or flushing buffers it copied.
        unsafe { libc::_exit(EXEC_FAILED) }
    }
}

/// Default dispositions and an empty signal mask for the command: the Rust runtime ignores
/// SIGPIPE, and the agent may have been started with signals ignored (nohup); ignored signals
/// would survive exec.
fn reset_signals() {
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in Signal::iterator() {
        if signal != Signal::SIGKILL && signal != Signal::SIGSTOP {
            // SAFETY: restoring the default disposition installs no handler code at all.
            let _ = unsafe { nix::sys::signal::sigaction(signal, &default) };
        }
    }
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// If this process was started as `<binary> shim <DIR> [--notify-on-stdin]` (by an agent launching a
/// container), runs the supervisor and exits; otherwise returns. Call it first thing in `main`:
/// the supervisor forks and must stay single-threaded.
pub fn dispatch() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|cmd| cmd != "shim") {
        return;
    }
    let (Some(dir), flag, None) = (args.next(), args.next(), args.next()) else { return };
    let notify = match flag {
        None => None,
        Some(f) if f == NOTIFY_ON_STDIN => match NotifyFd::from_stdin() {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("gantry-shim: taking the notify pipe off standard input: {e}");
                std::process::exit(SHIM_SETUP_FAILED);
            }
        },
        Some(_) => return,
    };
    std::process::exit(run_shim(Path::new(&dir), notify));
}

/// The name of the shim-only binary, installed beside the agent.
pub const SHIM_BINARY: &str = "gantry-shim";

/// The program to start shims with, for a process whose own executable is `exe`: the small
/// [`SHIM_BINARY`] beside it if there is one, else `exe` itself (every gantry binary dispatches
/// `shim` first thing in `main`). Both take the same arguments.
pub fn program_beside(exe: &Path) -> PathBuf {
    exe.parent()
        .map(|dir| dir.join(SHIM_BINARY))
        .filter(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .unwrap_or_else(|| exe.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.json");
        write_atomic(&p, b"one").expect("first write");
        write_atomic(&p, b"two").expect("second write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind: {names:?}");
    }

    #[test]
    fn exit_records_round_trip_as_json() {
        let rec = ExitRecord { status: ExitStatus::Signaled { signal: 9 }, finished_at_ms: 5, oom_kills: 1 };
        let text = serde_json::to_string(&rec).expect("serialise");
        assert!(text.contains("\"signaled\""), "{text}");
        assert_eq!(serde_json::from_str::<ExitRecord>(&text).expect("parse"), rec);
    }

    #[test]
    fn program_search_uses_the_containers_path() {
        let spec = ShimSpec {
            container_id: 1,
            cluster: crate::model::ClusterId::LEGACY,
            app_id: 1,
            argv: vec!["prog".into()],
            env: vec![("PATH".into(), "/a:/b/:".into())],
            container_dir: "/w".into(),
            workdir: "/w".into(),
            stdout: "/w/stdout".into(),
            stderr: "/w/stderr".into(),
            uid: 0,
            gid: 0,
            groups: vec![],
            cgroup: None,
            limits: Limits::default(),
            rlimit_as_bytes: None,
            rlimit_nproc: None,
            private_tmp: None,
            shm_bytes: 0,
            no_new_privileges: false,
            drop_bounding_set: false,
            gpus: vec![],
            disk_bytes: 0,
        };
        let p = Prepared::new(&spec).expect("prepared");
        let got: Vec<_> = p.program.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        assert_eq!(got, ["/a/prog", "/b/prog", "prog"]);
        let mut nul = spec.clone();
        nul.argv = vec!["a\0b".into()];
        assert!(Prepared::new(&nul).is_err());
    }
}
