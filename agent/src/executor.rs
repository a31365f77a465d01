//! The executor: turns launch specs into supervised process trees, kills them, collects how
//! they ended, and re-adopts them after an agent restart.
//!
//! Containers are named by [`ContainerKey`]: the cluster id of the scheduler run that launched
//! them and their id there, since a scheduler on fresh state numbers from 1 again while this
//! node keeps the containers (and directories) of the earlier one. Only the same key is "the
//! same container": a launch is refused only if its key exists, and kills, exits and log reads
//! go by key.
//!
//! Each container has a *control directory* `<containers>/<key>/` (`<id>.<cluster id>`, or
//! `<id>` for the legacy cluster, as agents older than cluster ids wrote them), owned by the agent and not
//! writable by the container, holding what must survive the agent: `spec.json` (the resolved
//! [`ShimSpec`]), `pid` (pids and start times), `exit.json` (written by the shim), `kill-reason`
//! (why the agent killed it), `reported` (after [`Executor::forget`]) and `shim.log`. Inside it,
//! `work/` is the *container directory*: owned by the container's user, the default working
//! directory, the base of every path in the spec, and where stdout/stderr land. Keeping the
//! control files out of the user's reach means a container cannot forge the pid file the agent
//! signals, or the exit record it reports.
//!
//! Every container runs under its own [shim](crate::shim), which is the command's parent; the
//! executor talks to a container only through files, signals and its cgroup, so a restarted
//! agent can pick up where the old one stopped ([`Executor::adopt`]).
//!
//! [`Executor::read_log`] serves the end of a container's stdout or stderr to the scheduler.
//! The container directory belongs to the container's user, who can replace a log file (or a
//! directory on its path) with a symbolic link to anything the agent, as root, may read; so the
//! path is walked one component at a time from the root-owned control directory with
//! `O_NOFOLLOW`, and only a regular file owned by the container's user is read.

use crate::cgroup::{CgroupError, CgroupUsage, ContainerCgroup, Layout, Limits};
use crate::config::AgentConfig;
use crate::model::{
    ContainerExit, ContainerKey, ContainerUsage, DiskSeen, ExitReason, LaunchSpec, MemorySeen,
};
use crate::procfs::{ProcStat, descendants, live_start_time, tree_usage};
use crate::shim::{
    self, DEFAULT_PATH, EXIT_FILE, ExitRecord, ExitStatus, LAUNCH_ERROR_FILE, PID_FILE, PidRecord,
    SHIM_LOG_FILE, SPEC_FILE, ShimError, ShimSpec,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The container directory's name inside the control directory.
pub const WORK_DIR: &str = "work";
/// Why the agent killed a container (`request` or `memory-limit`); the first writer wins.
pub const KILL_REASON_FILE: &str = "kill-reason";
/// What the monitor saw when it killed a container for memory ([`MemorySeen`] as JSON); the
/// first writer wins, like [`KILL_REASON_FILE`].
pub const MEMORY_SEEN_FILE: &str = "memory-seen.json";
/// What the disk round saw when it killed a container for disk ([`DiskSeen`] as JSON).
pub const DISK_SEEN_FILE: &str = "disk-seen.json";
/// Written once the container's exit has been reported; adoption skips such directories.
pub const REPORTED_FILE: &str = "reported";
/// Largest argv plus environment accepted, bytes (the kernel's own limit is near 2 MiB).
pub const MAX_ARGS_BYTES: usize = 1 << 20;
/// Smallest CPU limit, millicores: the kernel's minimum CFS quota is 1 ms per 100 ms period.
pub const MIN_CPU_MILLIS: u64 = 10;
/// Largest CPU limit, millicores (10 000 cores): anything above is a mistake.
pub const MAX_CPU_MILLIS: u64 = 10_000_000;
/// Smallest memory limit, bytes: below this not even a shell starts.
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;
/// Largest memory limit, bytes (1 PiB): anything above is a mistake.
pub const MAX_MEMORY_BYTES: u64 = 1 << 50;

/// Most bytes one [`Executor::read_log`] returns (4 MiB, the protocol's cap on a log chunk):
/// a longer read gets the file's last this many bytes.
pub const MAX_LOG_READ_BYTES: u64 = gantry_proto::MAX_LOG_CHUNK_BYTES;

/// How long a shim may take to start the command.
const LAUNCH_DEADLINE: Duration = Duration::from_secs(10);
/// How long a container may take to end after SIGKILL (the shim's own cleanup deadline is 15 s).
const KILL_DEADLINE: Duration = Duration::from_secs(20);

/// Whether containers get cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupMode {
    /// Use v2 or v1 when available and writable, else fall back to rlimits.
    #[default]
    Auto,
    /// Never use cgroups: rlimits for memory, the process tree for kills and usage.
    Off,
}

/// What the executor needs from the agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorSettings {
    /// Directory holding one control directory per container.
    pub containers_dir: PathBuf,
    /// Account containers run as unless the spec names one; `None`: a uid of their user's own
    /// from `dynamic_uids`.
    pub default_user: Option<String>,
    /// Uids handed to users without an account (kept in `<work_root>/uids.json`).
    pub dynamic_uids: crate::isolation::UidRange,
    /// Processes per container unless the spec says (0: unlimited).
    pub max_pids: u64,
    /// A private `/tmp` and `/dev/shm` per container (root agents only).
    pub private_tmp: bool,
    /// Whether containers may gain privileges (setuid, file capabilities, the bounding set).
    pub allow_privilege_escalation: bool,
    /// Whether containers may run as root.
    pub allow_root: bool,
    /// Default SIGTERM → SIGKILL grace period.
    pub kill_grace: Duration,
    /// Name of the parent cgroup of all containers.
    pub cgroup_name: String,
    /// GPUs on this node (valid indexes are `0..gpu_count`).
    pub gpu_count: u32,
    /// The program run as `<program> shim <dir>`: the agent's own binary.
    pub shim_program: PathBuf,
    /// Whether to use cgroups.
    pub cgroups: CgroupMode,
    /// Disk allowance of a container whose launch names none, bytes; 0 = unlimited.
    pub default_disk_bytes: u64,
}

impl ExecutorSettings {
    /// Settings from the agent's configuration.
    pub fn from_config(cfg: &AgentConfig, gpu_count: u32, shim_program: PathBuf) -> ExecutorSettings {
        ExecutorSettings {
            containers_dir: cfg.containers_dir(),
            default_user: Some(cfg.container_user.clone()).filter(|u| !u.is_empty()),
            // Checked by the configuration's validation.
            dynamic_uids: cfg.isolation.uid_range().unwrap_or(crate::isolation::UidRange::SYSTEMD),
            max_pids: cfg.isolation.max_pids,
            private_tmp: cfg.isolation.private_tmp,
            allow_privilege_escalation: cfg.isolation.allow_privilege_escalation,
            allow_root: cfg.allow_root,
            kill_grace: Duration::from_millis(cfg.kill_grace_ms),
            cgroup_name: cfg.cgroup_name.clone(),
            gpu_count,
            shim_program,
            cgroups: CgroupMode::Auto,
            default_disk_bytes: cfg.container_disk_bytes,
        }
    }
}

/// Why a launch spec was refused. Nothing was launched.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    /// No program.
    #[error("argv is empty: a container needs a program to run")]
    EmptyArgv,
    /// `argv[0]` is the empty string.
    #[error("argv[0] is empty: a container needs a program to run")]
    EmptyProgram,
    /// A string holds a NUL byte, which no process can be given.
    #[error("{field} contains a NUL byte")]
    Nul {
        /// Which part of the spec.
        field: String,
    },
    /// An environment variable name is empty or holds `=`.
    #[error("environment variable name {name:?} is invalid: it must be non-empty and contain no '='")]
    EnvName {
        /// The name.
        name: String,
    },
    /// argv and environment are too large.
    #[error("argv and environment are {bytes} bytes, more than the {MAX_ARGS_BYTES}-byte limit")]
    TooLarge {
        /// Their size.
        bytes: usize,
    },
    /// No such account.
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    /// The account database could not be read.
    #[error("cannot look up user {user:?}: {message}")]
    UserLookup {
        /// The user.
        user: String,
        /// Why.
        message: String,
    },
    /// uid 0 without `allow_root`.
    #[error("user {0:?} is root; containers may run as root only when allow_root is set")]
    RootNotAllowed(String),
    /// A non-root agent can only start containers as itself.
    #[error("the agent runs as uid {agent_uid} and cannot start containers as {user:?} (uid {uid})")]
    CannotSwitchUser {
        /// The user.
        user: String,
        /// Its uid.
        uid: u32,
        /// The agent's uid.
        agent_uid: u32,
    },
    /// An absolute path.
    #[error("{field} {path:?} must be a path relative to the container directory")]
    AbsolutePath {
        /// `workdir`, `stdout` or `stderr`.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// A path with `..`.
    #[error("{field} {path:?} escapes the container directory ('..' is not allowed)")]
    PathEscape {
        /// `workdir`, `stdout` or `stderr`.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// A log path that names no file.
    #[error("{field} {path:?} does not name a file")]
    NotAFile {
        /// `stdout` or `stderr`.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// CPU limit out of range.
    #[error("cpu_millis {0} is out of range: 0 (no limit) or {MIN_CPU_MILLIS}..={MAX_CPU_MILLIS}")]
    CpuLimit(u64),
    /// Memory limit out of range.
    #[error("memory_bytes {0} is out of range: 0 (no limit) or {MIN_MEMORY_BYTES}..={MAX_MEMORY_BYTES}")]
    MemoryLimit(u64),
    /// A GPU index the node does not have.
    #[error("GPU {index} does not exist on this node ({count} GPUs)")]
    NoSuchGpu {
        /// The index.
        index: u32,
        /// GPUs on the node.
        count: u32,
    },
    /// A GPU index listed twice.
    #[error("GPU {0} is listed twice")]
    DuplicateGpu(u32),
    /// A process limit out of range.
    #[error("max_pids {0} is out of range: 0 (no limit) or at most {max}", max = crate::isolation::MAX_PIDS_LIMIT)]
    PidsLimit(u64),
    /// No uid could be given to the submitting user.
    #[error("no uid for user {user:?}: {message}")]
    NoDynamicUid {
        /// The submitting user.
        user: String,
        /// Why.
        message: String,
    },
    /// A container of this cluster and id is on this node already.
    #[error("container {0} already exists on this node")]
    AlreadyExists(ContainerKey),
}

impl SpecError {
    /// Whether the node, not the request, is at fault: its user could not be given a uid (the
    /// uid table could not be written, or the node's range is used up). Counts towards the
    /// node's `LaunchFailures` condition; every other refusal is the request's own.
    pub fn blames_the_node(&self) -> bool {
        matches!(self, SpecError::NoDynamicUid { .. })
    }
}

/// Why an executor operation failed.
#[derive(Debug, Error)]
pub enum ExecError {
    /// The spec was refused; nothing was launched.
    #[error("launch refused: {0}")]
    Spec(#[from] SpecError),
    /// A file or directory of the executor could not be used.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A cgroup operation failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// A control file could not be read or written.
    #[error(transparent)]
    Shim(#[from] ShimError),
    /// The supervisor could not be started.
    #[error("cannot start the container supervisor {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The container did not start; nothing is left of it.
    #[error("container {id} failed to start: {message}")]
    Start {
        /// The container.
        id: ContainerKey,
        /// Why (from the supervisor).
        message: String,
    },
    /// No such container.
    #[error("unknown container {0}")]
    Unknown(ContainerKey),
    /// The container has not ended (so it cannot be forgotten).
    #[error("container {0} is still running")]
    StillRunning(ContainerKey),
    /// The container did not end after SIGKILL.
    #[error("container {id} did not end within {secs} s of SIGKILL")]
    KillTimeout {
        /// The container.
        id: ContainerKey,
        /// Seconds waited.
        secs: u64,
    },
}

/// Which of a container's two log files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    /// The command's standard output.
    Stdout,
    /// The command's standard error.
    Stderr,
}

impl LogStream {
    /// `stdout` or `stderr`, as messages and the default file names say it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

impl std::fmt::Display for LogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The end of a log file, as [`Executor::read_log`] read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogRead {
    /// The last bytes of the file: as many as asked, at most [`MAX_LOG_READ_BYTES`].
    pub data: Vec<u8>,
    /// The file's size when it was read; more than `data.len()` for a tail or a capped read.
    pub file_size_bytes: u64,
}

/// Why a container's log could not be read. The text goes to the scheduler, and from there to
/// the person asking, so it names the container and the file.
#[derive(Debug, Error)]
pub enum LogError {
    /// Container ids start at 1.
    #[error("container id 0 is not a valid id")]
    ZeroContainerId,
    /// The node has no directory for this container (never ran here, or was cleaned up).
    #[error("no container {} on this node", .0.id)]
    NoContainer(ContainerKey),
    /// The container has no such file (yet).
    #[error("no {stream} for container {}", id.id)]
    NoFile {
        /// The container.
        id: ContainerKey,
        /// Which file.
        stream: LogStream,
    },
    /// The file, or a directory on its way, is not what the container's launch created: a
    /// symbolic link, something other than a regular file, or a file of another owner.
    #[error("{stream} of container {} {why}: refused", id.id)]
    Refused {
        /// The container.
        id: ContainerKey,
        /// Which file.
        stream: LogStream,
        /// What is wrong with it.
        why: String,
    },
    /// Reading failed.
    #[error("cannot read {stream} of container {}: {source}", id.id)]
    Io {
        /// The container.
        id: ContainerKey,
        /// Which file.
        stream: LogStream,
        /// Why.
        source: io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ExecError + 'a {
    move |source| ExecError::Io { what, path: path.to_owned(), source }
}

/// Why the agent killed a container, as recorded in its control directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// The scheduler asked.
    Request,
    /// The monitor found it over its memory limit.
    MemoryLimit,
    /// The agent fenced itself: no word from the scheduler for its fencing timeout.
    Fenced,
    /// The disk round found its files over its disk allowance.
    DiskLimit,
}

impl KillReason {
    /// The word recorded in the kill-reason file.
    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::Request => "request",
            KillReason::MemoryLimit => "memory-limit",
            KillReason::Fenced => "fenced",
            KillReason::DiskLimit => "disk-limit",
        }
    }

    fn parse(s: &str) -> Option<KillReason> {
        match s.trim() {
            "request" => Some(KillReason::Request),
            "memory-limit" => Some(KillReason::MemoryLimit),
            "fenced" => Some(KillReason::Fenced),
            "disk-limit" => Some(KillReason::DiskLimit),
            _ => None,
        }
    }
}

/// How a container ended, from the shim's record, the agent's kill reason and the cgroup's
/// OOM-kill count. An OOM kill inside a container that still exited 0 is not a memory-limit end
/// (the job coped); a non-zero or signalled end after an OOM kill is.
pub fn classify_exit(status: ExitStatus, kill: Option<KillReason>, oom_kills: u64) -> ExitReason {
    match (kill, status) {
        (Some(KillReason::Request), _) => ExitReason::KilledByRequest,
        (Some(KillReason::MemoryLimit), _) => ExitReason::MemoryLimit,
        (Some(KillReason::Fenced), _) => ExitReason::Fenced,
        (Some(KillReason::DiskLimit), _) => ExitReason::DiskLimit,
        (None, ExitStatus::Exited { code: 0 }) => ExitReason::Exited { code: 0 },
        (None, _) if oom_kills > 0 => ExitReason::MemoryLimit,
        (None, ExitStatus::Exited { code }) => ExitReason::Exited { code },
        (None, ExitStatus::Signaled { signal }) => ExitReason::Signaled { signal },
    }
}

/// A launched container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerHandle {
    /// The container.
    pub key: ContainerKey,
    /// The command's pid (also its process group id).
    pub pid: u32,
    /// The supervisor's pid.
    pub shim_pid: u32,
    /// The container directory (working directory and logs).
    pub container_dir: PathBuf,
    /// Its cgroup, if any.
    pub cgroup: Option<ContainerCgroup>,
}

/// One container the executor knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The container.
    pub key: ContainerKey,
    /// Whether it is still running (its exit not yet collected).
    pub running: bool,
    /// The command's pid.
    pub pid: u32,
    /// The supervisor's pid.
    pub shim_pid: u32,
    /// Its application.
    pub app_id: u64,
    /// When its command started, Unix ms (when the supervisor recorded its pid).
    pub started_at_ms: u64,
}

/// What [`Executor::adopt`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adopted {
    /// Containers running again under this executor.
    pub running: Vec<ContainerKey>,
    /// Containers that ended while the agent was down (or were lost); their exits come out of
    /// the next [`Executor::collect_exits`].
    pub ended: Vec<ContainerKey>,
}

/// A process named by pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcRef {
    pid: u32,
    start_time: u64,
}

impl ProcRef {
    fn nix(self) -> Pid {
        Pid::from_raw(i32::try_from(self.pid).unwrap_or(i32::MAX))
    }
}

struct Tracked {
    control: PathBuf,
    app_id: u64,
    started_at_ms: u64,
    cgroup: Option<ContainerCgroup>,
    memory_limit: u64,
    /// Its user and disk allowance (0 = unlimited), for the disk round.
    uid: u32,
    disk_limit: u64,
    shim: ProcRef,
    cmd: ProcRef,
    /// The shim, when this executor started it (so it must reap it).
    child: Option<Child>,
    ended: bool,
    /// Someone holds its [`ExitNotice`] and collects its exit with [`Executor::collect_exit`];
    /// [`Executor::collect_exits`] leaves it alone, so its exit is never reported before its
    /// launch is.
    watched: bool,
}

#[derive(Default)]
struct Inner {
    containers: HashMap<ContainerKey, Tracked>,
    launching: HashSet<ContainerKey>,
    /// Exits found by adoption, not yet collected.
    pending: Vec<ContainerExit>,
    /// Shims of forgotten containers still to be reaped.
    zombies: Vec<Child>,
}

/// Launches, kills and watches containers. All methods take `&self` and return quickly, except
/// [`Executor::kill`] (async; it waits the grace period) and [`Executor::launch`] (blocks until
/// the shim has started the command, normally a few milliseconds). Dropping an executor leaves
/// its containers running, as the agent's death does.
pub struct Executor {
    settings: ExecutorSettings,
    layout: Layout,
    /// Per-user uids for containers without an account.
    uids: crate::isolation::UidTable,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("settings", &self.settings).field("layout", &self.layout).finish()
    }
}

impl Executor {
    /// Creates the containers directory and the parent cgroup. Falls back to rlimits (logged)
    /// when there are no cgroups or they are not writable.
    pub fn new(settings: ExecutorSettings) -> Result<Executor, ExecError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&settings.containers_dir)
            .map_err(io_err("create", &settings.containers_dir))?;
        let layout = match settings.cgroups {
            CgroupMode::Off => Layout::None,
            CgroupMode::Auto => {
                let layout = Layout::detect();
                if layout == Layout::None {
                    tracing::warn!("no usable cgroup hierarchy; memory limits fall back to RLIMIT_AS");
                    layout
                } else if let Err(e) = layout.prepare_parent(&settings.cgroup_name) {
                    tracing::warn!(
                        "cgroups ({}) not writable ({e}); memory limits fall back to RLIMIT_AS",
                        layout.name()
                    );
                    Layout::None
                } else {
                    tracing::info!("containers get cgroup {} under {}", layout.name(), settings.cgroup_name);
                    layout
                }
            }
        };
        let work_root = settings.containers_dir.parent().unwrap_or(&settings.containers_dir);
        let uids = crate::isolation::UidTable::new(work_root, settings.dynamic_uids);
        Ok(Executor { settings, layout, uids, inner: Mutex::new(Inner::default()) })
    }

    /// The cgroup layout in use ([`Layout::None`] in the rlimit fallback).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The settings.
    pub fn settings(&self) -> &ExecutorSettings {
        &self.settings
    }

    /// A container's control directory, `<containers>/<key>`.
    pub fn control_dir(&self, id: ContainerKey) -> PathBuf {
        self.settings.containers_dir.join(id.to_string())
    }

    /// A container's directory: its default working directory, holding its logs.
    pub fn container_dir(&self, id: ContainerKey) -> PathBuf {
        self.control_dir(id).join(WORK_DIR)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks a launch spec and resolves it (user, paths, environment) into what the shim
    /// needs. Refuses with a clear message; has no effect.
    pub fn validate(&self, spec: &LaunchSpec) -> Result<ShimSpec, SpecError> {
        let argv0 = spec.argv.first().ok_or(SpecError::EmptyArgv)?;
        if argv0.is_empty() {
            return Err(SpecError::EmptyProgram);
        }
        for (i, a) in spec.argv.iter().enumerate() {
            no_nul(&format!("argv[{i}]"), a)?;
        }
        for (k, v) in &spec.env {
            no_nul(&format!("environment variable {k:?}"), k)?;
            no_nul(&format!("environment variable {k:?}"), v)?;
            if k.is_empty() || k.contains('=') {
                return Err(SpecError::EnvName { name: k.clone() });
            }
        }
        let bytes: usize = spec.argv.iter().map(|a| a.len() + 1).sum::<usize>()
            + spec.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
        if bytes > MAX_ARGS_BYTES {
            return Err(SpecError::TooLarge { bytes });
        }
        if spec.cpu_millis != 0 && !(MIN_CPU_MILLIS..=MAX_CPU_MILLIS).contains(&spec.cpu_millis) {
            return Err(SpecError::CpuLimit(spec.cpu_millis));
        }
        if spec.memory_bytes != 0 && !(MIN_MEMORY_BYTES..=MAX_MEMORY_BYTES).contains(&spec.memory_bytes) {
            return Err(SpecError::MemoryLimit(spec.memory_bytes));
        }
        let mut seen = HashSet::new();
        for &index in &spec.gpus {
            if index >= self.settings.gpu_count {
                return Err(SpecError::NoSuchGpu { index, count: self.settings.gpu_count });
            }
            if !seen.insert(index) {
                return Err(SpecError::DuplicateGpu(index));
            }
        }
        let workdir = contained("workdir", spec.workdir.as_deref().unwrap_or("."), false)?;
        let stdout = contained("stdout", spec.stdout.as_deref().unwrap_or("stdout"), true)?;
        let stderr = contained("stderr", spec.stderr.as_deref().unwrap_or("stderr"), true)?;

        let max_pids = spec.max_pids.unwrap_or(self.settings.max_pids);
        if max_pids > crate::isolation::MAX_PIDS_LIMIT {
            return Err(SpecError::PidsLimit(max_pids));
        }
        let user = self.identity(spec)?;
        let id = spec.key();
        if self.is_known(id) || self.control_dir(id).exists() {
            return Err(SpecError::AlreadyExists(id));
        }

        let gpu_list = spec.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let container_dir = self.container_dir(id);
        let home = user.home.clone().unwrap_or_else(|| container_dir.clone());
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), DEFAULT_PATH.into()),
            ("HOME".into(), home.to_string_lossy().into_owned()),
            ("USER".into(), user.name.clone()),
            ("LOGNAME".into(), user.name.clone()),
        ];
        env.extend(spec.env.iter().cloned());
        // The agent's own variables win over the spec's: the GPU hand-over must not be undone.
        if !id.cluster.is_legacy() {
            env.push(("GANTRY_CLUSTER_ID".into(), id.cluster.to_wire()));
        }
        env.extend([
            ("GANTRY_CONTAINER_ID".into(), id.id.to_string()),
            ("GANTRY_APP_ID".into(), spec.app_id.to_string()),
            ("CUDA_VISIBLE_DEVICES".into(), gpu_list.clone()),
            ("NVIDIA_VISIBLE_DEVICES".into(), if gpu_list.is_empty() { "void".into() } else { gpu_list }),
        ]);
        let privileged = nix::unistd::geteuid().is_root();
        Ok(ShimSpec {
            container_id: id.id,
            cluster: id.cluster,
            app_id: spec.app_id,
            argv: spec.argv.clone(),
            env: last_wins(env),
            workdir: container_dir.join(workdir),
            stdout: container_dir.join(stdout),
            stderr: container_dir.join(stderr),
            container_dir,
            uid: user.uid,
            gid: user.gid,
            groups: user.groups,
            cgroup: None,
            limits: Limits { memory_bytes: spec.memory_bytes, cpu_millis: spec.cpu_millis, max_pids },
            rlimit_as_bytes: None,
            rlimit_nproc: None,
            // A mount namespace and the bounding set need privileges a non-root agent lacks.
            private_tmp: (self.settings.private_tmp && privileged)
                .then(|| self.control_dir(id).join(crate::sandbox::PRIVATE_DIR).join("tmp")),
            shm_bytes: if spec.memory_bytes == 0 {
                crate::sandbox::DEFAULT_SHM_BYTES
            } else {
                spec.memory_bytes
            },
            no_new_privileges: !self.settings.allow_privilege_escalation,
            drop_bounding_set: !self.settings.allow_privilege_escalation && privileged,
            gpus: spec.gpus.clone(),
            disk_bytes: if spec.disk_bytes == 0 { self.settings.default_disk_bytes } else { spec.disk_bytes },
        })
    }

    /// Who a container runs as ([`crate::isolation::identity`]).
    fn identity(&self, spec: &LaunchSpec) -> Result<crate::isolation::Identity, SpecError> {
        crate::isolation::identity(
            spec,
            self.settings.default_user.as_deref(),
            self.settings.allow_root,
            &self.uids,
        )
    }

    fn is_known(&self, id: ContainerKey) -> bool {
        let inner = self.lock();
        inner.containers.contains_key(&id) || inner.launching.contains(&id)
    }

    /// Launches a container: control and container directories, cgroup with limits, and the
    /// shim, which starts the command. Returns once the command runs. On any error nothing is
    /// left behind: no directory, no cgroup, no process.
    pub fn launch(&self, spec: &LaunchSpec) -> Result<ContainerHandle, ExecError> {
        let (handle, _) = self.launch_watched(spec)?;
        self.unwatch(handle.key);
        Ok(handle)
    }

    /// [`Executor::launch`], also returning the container's [`ExitNotice`]: readable (at end of
    /// file) the moment its supervisor ends, so a caller can collect the exit at once with
    /// [`Executor::collect_exit`] instead of scanning.
    pub fn launch_watched(&self, spec: &LaunchSpec) -> Result<(ContainerHandle, ExitNotice), ExecError> {
        let shim_spec = self.validate(spec)?;
        let (uid, disk_limit) = (shim_spec.uid, shim_spec.disk_bytes);
        let id = spec.key();
        {
            let mut inner = self.lock();
            if inner.containers.contains_key(&id) || !inner.launching.insert(id) {
                return Err(SpecError::AlreadyExists(id).into());
            }
        }
        let control = self.control_dir(id);
        // Traversable, not listable: the container reaches `work/` through it and sees nothing else.
        let created = std::fs::DirBuilder::new().mode(0o711).create(&control);
        let result = match created {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(SpecError::AlreadyExists(id).into()),
            Err(e) => Err(ExecError::Io { what: "create", path: control.clone(), source: e }),
            Ok(()) => {
                let cgroup = self.layout.container(&self.settings.cgroup_name, id);
                let started = self.start(shim_spec, &control, cgroup.as_ref());
                if started.is_err() {
                    if let Some(cg) = &cgroup {
                        let _ = cg.kill_all();
                        let _ = cg.remove();
                    }
                    let _ = std::fs::remove_dir_all(&control);
                }
                started.map(|(child, rec, notice)| (child, rec, notice, cgroup))
            }
        };
        let mut inner = self.lock();
        inner.launching.remove(&id);
        let (child, rec, notice, cgroup) = result?;
        inner.containers.insert(
            id,
            Tracked {
                app_id: spec.app_id,
                started_at_ms: started_at_ms(&control),
                control: control.clone(),
                cgroup: cgroup.clone(),
                memory_limit: spec.memory_bytes,
                uid,
                disk_limit,
                shim: ProcRef { pid: rec.shim_pid, start_time: rec.shim_start_time },
                cmd: ProcRef { pid: rec.pid, start_time: rec.start_time },
                child: Some(child),
                ended: false,
                watched: true,
            },
        );
        let handle = ContainerHandle {
            key: id,
            pid: rec.pid,
            shim_pid: rec.shim_pid,
            container_dir: control.join(WORK_DIR),
            cgroup,
        };
        Ok((handle, ExitNotice(notice)))
    }

    /// Whether a launch of this id is in progress (between [`Executor::launch`] being called and
    /// returning).
    pub fn is_launching(&self, id: ContainerKey) -> bool {
        self.lock().launching.contains(&id)
    }

    fn start(
        &self,
        mut spec: ShimSpec,
        control: &Path,
        cgroup: Option<&ContainerCgroup>,
    ) -> Result<(Child, PidRecord, OwnedFd), ExecError> {
        let id = spec.key();
        // The container's own: no other uid may read it, its logs included.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&spec.container_dir)
            .map_err(io_err("create", &spec.container_dir))?;
        if let Some(tmp) = &spec.private_tmp {
            crate::sandbox::make_private_tmp(tmp).map_err(io_err("create", tmp))?;
        }
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(
                &spec.container_dir,
                Some(nix::unistd::Uid::from_raw(spec.uid)),
                Some(nix::unistd::Gid::from_raw(spec.gid)),
            )
            .map_err(|e| ExecError::Io {
                what: "chown",
                path: spec.container_dir.clone(),
                source: e.into(),
            })?;
        }
        if let Some(cg) = cgroup {
            cg.create(spec.limits)?;
        } else if spec.limits.memory_bytes > 0 {
            spec.rlimit_as_bytes = Some(spec.limits.memory_bytes);
        }
        // Without a pids controller the process limit falls back to RLIMIT_NPROC, which counts
        // every process of the uid (the user's other containers on this node too).
        if spec.limits.max_pids != 0 && !cgroup.is_some_and(ContainerCgroup::limits_pids) {
            spec.rlimit_nproc = Some(spec.limits.max_pids);
        }
        spec.cgroup = cgroup.cloned();
        shim::write_json(&control.join(SPEC_FILE), &spec)?;
        // Room to record the container's end should it fill the disk (see `crate::disk`).
        crate::disk::create_reserve(control).map_err(io_err("reserve space in", control))?;

        let log_path = control.join(SHIM_LOG_FILE);
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&log_path)
            .map_err(io_err("create", &log_path))?;
        let log2 = log.try_clone().map_err(io_err("open", &log_path))?;
        let program = &self.settings.shim_program;
        // The shim says "running" (one byte) and "ended" (end of file) through this pipe.
        let (notice, notify) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| {
            ExecError::Io { what: "create a pipe for", path: program.clone(), source: e.into() }
        })?;
        // No pre-exec code, so that the standard library starts the shim with posix_spawn (a
        // vfork) rather than fork, which would copy this multi-threaded process's page tables
        // for every container. The shim makes its own session; the pipe is its stdin.
        let mut cmd = Command::new(program);
        cmd.arg("shim")
            .arg(control)
            .arg(shim::NOTIFY_ON_STDIN)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(notify))
            .stdout(log)
            .stderr(log2);
        let mut child =
            cmd.spawn().map_err(|source| ExecError::Spawn { program: program.clone(), source })?;
        // The parent's copy of the write end went with `cmd`: only the shim holds it now.
        drop(cmd);

        let pid_path = control.join(PID_FILE);
        match wait_for_notice(&notice, LAUNCH_DEADLINE) {
            Notice::Running | Notice::Ended => {}
            Notice::SetupFailed(message) => {
                // The shim says why itself (on a full disk, no file could hold it); it exits.
                let _ = child.wait();
                return Err(ExecError::Start { id, message });
            }
            Notice::Failed(e) => {
                abort_shim(&mut child);
                return Err(ExecError::Io { what: "wait for", path: program.clone(), source: e });
            }
            Notice::TimedOut => {
                abort_shim(&mut child);
                return Err(ExecError::Start {
                    id,
                    message: format!(
                        "the supervisor did not start it within {} s",
                        LAUNCH_DEADLINE.as_secs()
                    ),
                });
            }
        }
        // The pid record is written before the notice; without it the shim failed (or died).
        if pid_path.exists() {
            return match shim::read_json(&pid_path) {
                Ok(rec) => Ok((child, rec, notice)),
                Err(e) => {
                    abort_shim(&mut child);
                    Err(e.into())
                }
            };
        }
        let status =
            child.wait().map_err(|e| ExecError::Io { what: "wait for", path: program.clone(), source: e })?;
        let message = std::fs::read_to_string(control.join(LAUNCH_ERROR_FILE))
            .or_else(|_| std::fs::read_to_string(&log_path))
            .unwrap_or_default();
        let message = message.trim();
        let message =
            if message.is_empty() { format!("the supervisor exited ({status})") } else { message.to_owned() };
        Err(ExecError::Start { id, message })
    }

    /// The ids and pids of every container the executor knows (running, or ended and not yet
    /// forgotten), by id.
    pub fn list(&self) -> Vec<ContainerInfo> {
        let inner = self.lock();
        let mut out: Vec<ContainerInfo> = inner
            .containers
            .iter()
            .map(|(&key, t)| ContainerInfo {
                key,
                running: !t.ended,
                pid: t.cmd.pid,
                shim_pid: t.shim.pid,
                app_id: t.app_id,
                started_at_ms: t.started_at_ms,
            })
            .collect();
        out.sort_by_key(|c| c.key);
        out
    }

    /// The running containers.
    pub fn running(&self) -> Vec<ContainerKey> {
        self.list().into_iter().filter(|c| c.running).map(|c| c.key).collect()
    }

    /// A container's cgroup (`None` without cgroups).
    pub fn cgroup(&self, id: ContainerKey) -> Result<Option<ContainerCgroup>, ExecError> {
        self.lock().containers.get(&id).map(|t| t.cgroup.clone()).ok_or(ExecError::Unknown(id))
    }

    /// A running container's processes (for attributing GPU processes to containers).
    pub fn pids(&self, id: ContainerKey) -> Result<Vec<u32>, ExecError> {
        let (cgroup, shim) = self.running_parts(id)?;
        match cgroup {
            Some(cg) => Ok(cg.pids()?),
            None => Ok(shim_tree(shim).into_iter().map(|p| p.pid).collect()),
        }
    }

    /// A running container's usage: from its cgroup, or summed over its process tree.
    pub fn usage(&self, id: ContainerKey) -> Result<ContainerUsage, ExecError> {
        let memory_limit = self.lock().containers.get(&id).map_or(0, |t| t.memory_limit);
        let (cgroup, shim) = self.running_parts(id)?;
        match cgroup {
            Some(cg) => {
                let u = cg.usage()?;
                Ok(ContainerUsage {
                    container_id: id.id,
                    cluster: id.cluster,
                    cpu_seconds: u.cpu_seconds,
                    memory_working_set_bytes: u.memory_working_set_bytes,
                    memory_limit_bytes: u.memory_limit_bytes,
                    processes: u.processes,
                })
            }
            None => {
                let procs = shim_tree(shim);
                let (cpu_seconds, rss) = tree_usage(&procs);
                Ok(ContainerUsage {
                    container_id: id.id,
                    cluster: id.cluster,
                    cpu_seconds,
                    memory_working_set_bytes: rss,
                    memory_limit_bytes: memory_limit,
                    processes: u32::try_from(procs.len()).unwrap_or(u32::MAX),
                })
            }
        }
    }

    /// The cgroup's full accounting (throttling and OOM kills included); `None` without cgroups.
    pub fn cgroup_usage(&self, id: ContainerKey) -> Result<Option<CgroupUsage>, ExecError> {
        let (cgroup, _) = self.running_parts(id)?;
        Ok(match cgroup {
            Some(cg) => Some(cg.usage()?),
            None => None,
        })
    }

    fn running_parts(&self, id: ContainerKey) -> Result<(Option<ContainerCgroup>, ProcRef), ExecError> {
        let inner = self.lock();
        let t = inner.containers.get(&id).ok_or(ExecError::Unknown(id))?;
        Ok((t.cgroup.clone(), t.shim))
    }

    /// Records why the agent kills a container (the first reason recorded wins), unless it has
    /// already ended.
    fn mark(&self, control: &Path, reason: KillReason) -> Result<(), ExecError> {
        if control.join(EXIT_FILE).exists() {
            return Ok(());
        }
        let path = control.join(KILL_REASON_FILE);
        let write = || -> io::Result<()> {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
            let written = f.write_all(reason.as_str().as_bytes()).and_then(|()| f.sync_all());
            if written.is_err() {
                // An empty reason would stand for none: try again from scratch (the reserve).
                let _ = std::fs::remove_file(&path);
            }
            written
        };
        match crate::disk::with_reserve(control, write) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(ExecError::Io { what: "write", path, source: e }),
        }
    }

    /// Whether the container's supervisor still runs: the recorded pid with the recorded start
    /// time (a pid reused by another process does not count).
    fn shim_alive(t: &mut Tracked) -> bool {
        if let Some(child) = &mut t.child {
            return matches!(child.try_wait(), Ok(None));
        }
        if live_start_time(t.shim.pid) == Some(t.shim.start_time) {
            return true;
        }
        reap_if_own_zombie(t.shim);
        false
    }

    /// Asks a container to stop: records the kill as requested and sends SIGTERM to its process
    /// group. The first half of [`Executor::kill`], for callers that run their own timer.
    pub fn request_kill(&self, id: ContainerKey) -> Result<(), ExecError> {
        self.signal(id, Some(KillReason::Request), Signal::SIGTERM)
    }

    /// SIGKILLs everything left of a container: cgroup-wide, or — without a cgroup — its process
    /// group and every descendant of its supervisor. The second half of [`Executor::kill`].
    pub fn force_kill(&self, id: ContainerKey) -> Result<(), ExecError> {
        self.signal(id, None, Signal::SIGKILL)
    }

    /// Kills a container for exceeding its memory limit; its exit is reported as
    /// [`ExitReason::MemoryLimit`] with `seen`, the usage that condemned it. Returns once SIGKILL
    /// is sent.
    pub fn kill_for_memory(&self, id: ContainerKey, seen: MemorySeen) -> Result<(), ExecError> {
        let control =
            self.lock().containers.get(&id).map(|t| t.control.clone()).ok_or(ExecError::Unknown(id))?;
        let path = control.join(MEMORY_SEEN_FILE);
        if !path.exists() {
            // Only read back for a memory-limit end; a container that ended first keeps its own.
            shim::write_json(&path, &seen)?;
        }
        self.signal(id, Some(KillReason::MemoryLimit), Signal::SIGKILL)
    }

    /// Kills a container whose files hold more than its disk allowance; its exit is reported as
    /// [`ExitReason::DiskLimit`] with `seen`. Returns once SIGKILL is sent.
    pub fn kill_for_disk(&self, id: ContainerKey, seen: DiskSeen) -> Result<(), ExecError> {
        let control =
            self.lock().containers.get(&id).map(|t| t.control.clone()).ok_or(ExecError::Unknown(id))?;
        let path = control.join(DISK_SEEN_FILE);
        if !path.exists() {
            crate::disk::with_reserve(&control, || shim::write_json(&path, &seen))?;
        }
        self.signal(id, Some(KillReason::DiskLimit), Signal::SIGKILL)
    }

    /// The running containers with a disk allowance: key, control directory, user and
    /// allowance, for the disk round.
    pub fn disk_limited(&self) -> Vec<(ContainerKey, PathBuf, u32, u64)> {
        let inner = self.lock();
        inner
            .containers
            .iter()
            .filter(|(_, t)| !t.ended && t.disk_limit > 0)
            .map(|(&key, t)| (key, t.control.clone(), t.uid, t.disk_limit))
            .collect()
    }

    /// Whether the executor runs or launches this container: its files must stay.
    pub fn is_live(&self, id: ContainerKey) -> bool {
        let inner = self.lock();
        inner.launching.contains(&id) || inner.containers.get(&id).is_some_and(|t| !t.ended)
    }

    fn signal(&self, id: ContainerKey, reason: Option<KillReason>, signal: Signal) -> Result<(), ExecError> {
        let (control, cgroup, shim, cmd) = {
            let mut inner = self.lock();
            let t = inner.containers.get_mut(&id).ok_or(ExecError::Unknown(id))?;
            if t.ended || t.control.join(EXIT_FILE).exists() || !Self::shim_alive(t) {
                return Ok(());
            }
            (t.control.clone(), t.cgroup.clone(), t.shim, t.cmd)
        };
        if let Some(reason) = reason {
            self.mark(&control, reason)?;
        }
        if signal == Signal::SIGTERM {
            let _ = nix::sys::signal::killpg(cmd.nix(), Signal::SIGTERM);
            return Ok(());
        }
        match cgroup {
            Some(cg) => cg.kill_all()?,
            None => {
                let _ = nix::sys::signal::killpg(cmd.nix(), Signal::SIGKILL);
                for p in descendants(shim.pid) {
                    let _ =
                        nix::sys::signal::kill(ProcRef { pid: p.pid, start_time: 0 }.nix(), Signal::SIGKILL);
                }
            }
        }
        Ok(())
    }

    /// Whether a container has ended (its supervisor recorded the exit, or is gone). Unknown ids
    /// count as ended.
    pub fn has_ended(&self, id: ContainerKey) -> bool {
        let mut inner = self.lock();
        match inner.containers.get_mut(&id) {
            None => true,
            Some(t) => t.ended || t.control.join(EXIT_FILE).exists() || !Self::shim_alive(t),
        }
    }

    /// Kills a container gracefully: SIGTERM to its process group, up to `grace` for it to end,
    /// then SIGKILL to everything left. Returns once it has ended; its exit (reported as
    /// [`ExitReason::KilledByRequest`]) comes out of [`Executor::collect_exits`].
    pub async fn kill(&self, id: ContainerKey, grace: Duration) -> Result<(), ExecError> {
        self.kill_as(id, grace, KillReason::Request).await
    }

    /// [`Executor::kill`] recording `reason` instead (the first reason recorded wins), e.g.
    /// [`KillReason::Fenced`] so the exit says why the agent stopped it.
    pub async fn kill_as(
        &self,
        id: ContainerKey,
        grace: Duration,
        reason: KillReason,
    ) -> Result<(), ExecError> {
        self.signal(id, Some(reason), Signal::SIGTERM)?;
        if !self.wait_ended(id, grace).await {
            self.force_kill(id)?;
            if !self.wait_ended(id, KILL_DEADLINE).await {
                return Err(ExecError::KillTimeout { id, secs: KILL_DEADLINE.as_secs() });
            }
        }
        Ok(())
    }

    async fn wait_ended(&self, id: ContainerKey, limit: Duration) -> bool {
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            if self.has_ended(id) {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(pause.min(limit.saturating_sub(start.elapsed()))).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The containers that ended since the last call (non-blocking), with why and when. Each
    /// exit is returned once per agent run; call [`Executor::forget`] once it is reported.
    pub fn collect_exits(&self) -> Vec<ContainerExit> {
        let mut inner = self.lock();
        let mut out = std::mem::take(&mut inner.pending);
        inner.zombies.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        out.extend(
            inner
                .containers
                .iter_mut()
                .filter(|(_, t)| !t.watched)
                .filter_map(|(&id, t)| Self::exit_if_ended(id, t)),
        );
        out
    }

    /// Hands a container launched with [`Executor::launch_watched`] back to
    /// [`Executor::collect_exits`] (its notice was dropped, or could not be watched).
    pub fn unwatch(&self, id: ContainerKey) {
        if let Some(t) = self.lock().containers.get_mut(&id) {
            t.watched = false;
        }
    }

    /// [`Executor::unwatch`] for every container.
    pub fn unwatch_all(&self) {
        for t in self.lock().containers.values_mut() {
            t.watched = false;
        }
    }

    /// One container's exit, if it has ended and its exit was not collected yet (by this call,
    /// [`Executor::collect_exits`], or adoption). The cheap path after its [`ExitNotice`] fired.
    pub fn collect_exit(&self, id: ContainerKey) -> Option<ContainerExit> {
        let mut inner = self.lock();
        if let Some(i) = inner.pending.iter().position(|e| e.key() == id) {
            return Some(inner.pending.swap_remove(i));
        }
        inner.containers.get_mut(&id).and_then(|t| Self::exit_if_ended(id, t))
    }

    fn exit_if_ended(id: ContainerKey, t: &mut Tracked) -> Option<ContainerExit> {
        if t.ended {
            return None;
        }
        let exit_path = t.control.join(EXIT_FILE);
        let record = if exit_path.exists() {
            shim::read_json::<ExitRecord>(&exit_path).ok()
        } else if Self::shim_alive(t) {
            return None;
        } else {
            // The shim may have written its record just before it ended.
            shim::read_json::<ExitRecord>(&exit_path).ok()
        };
        if let Some(child) = &mut t.child {
            let _ = child.try_wait();
        }
        t.ended = true;
        Some(match record {
            Some(rec) => recorded_exit(id, &t.control, &rec, t.cgroup.as_ref(), t.memory_limit),
            None => lost(id, t.cgroup.as_ref(), t.cmd),
        })
    }

    /// Re-adopts the containers of a previous agent run, after a restart: a live supervisor
    /// (same pid and start time) → running again; a recorded exit → reported with its recorded
    /// time; neither → [`ExitReason::Lost`] (and whatever is left in its cgroup is killed).
    /// Ended ones come out of the next [`Executor::collect_exits`].
    pub fn adopt(&self) -> Result<Adopted, ExecError> {
        let dir = &self.settings.containers_dir;
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Adopted::default()),
            Err(e) => return Err(ExecError::Io { what: "list", path: dir.clone(), source: e }),
        };
        // Other entries (a name that is no container's) are left alone.
        let mut ids: Vec<ContainerKey> =
            entries.filter_map(|e| ContainerKey::from_name(e.ok()?.file_name().to_str()?)).collect();
        ids.sort_unstable();
        let mut adopted = Adopted::default();
        for id in ids {
            if self.is_known(id) {
                continue;
            }
            let control = self.control_dir(id);
            crate::isolation::restrict_control_dir(&control);
            let spec = shim::read_json::<ShimSpec>(&control.join(SPEC_FILE));
            let cgroup = match &spec {
                Ok(s) => s.cgroup.clone(),
                Err(_) => self.layout.container(&self.settings.cgroup_name, id),
            };
            if control.join(REPORTED_FILE).exists() {
                // A cgroup whose removal failed earlier.
                if let Some(cg) = cgroup.filter(|cg| cg.exists()) {
                    let _ = cg.remove();
                }
                continue;
            }
            let pid = shim::read_json::<PidRecord>(&control.join(PID_FILE)).ok();
            let mut t = Tracked {
                app_id: spec.as_ref().map_or(0, |s| s.app_id),
                started_at_ms: started_at_ms(&control),
                control: control.clone(),
                cgroup: cgroup.clone(),
                memory_limit: spec.as_ref().map_or(0, |s| s.limits.memory_bytes),
                uid: spec.as_ref().map_or(0, |s| s.uid),
                disk_limit: spec.as_ref().map_or(0, |s| s.disk_bytes),
                shim: pid.map_or(ProcRef { pid: 0, start_time: 0 }, |r| ProcRef {
                    pid: r.shim_pid,
                    start_time: r.shim_start_time,
                }),
                cmd: pid.map_or(ProcRef { pid: 0, start_time: 0 }, |r| ProcRef {
                    pid: r.pid,
                    start_time: r.start_time,
                }),
                child: None,
                ended: true,
                watched: false,
            };
            let exit = if let Ok(rec) = shim::read_json::<ExitRecord>(&control.join(EXIT_FILE)) {
                reap_if_own_zombie(t.shim);
                recorded_exit(id, &control, &rec, cgroup.as_ref(), t.memory_limit)
            } else if pid.is_some() && t.shim.pid != 0 && Self::shim_alive(&mut t) {
                t.ended = false;
                self.lock().containers.insert(id, t);
                adopted.running.push(id);
                continue;
            } else {
                tracing::warn!("container {id}: supervisor gone without an exit record; reporting it lost");
                lost(id, cgroup.as_ref(), t.cmd)
            };
            let mut inner = self.lock();
            inner.containers.insert(id, t);
            inner.pending.push(exit);
            adopted.ended.push(id);
        }
        Ok(adopted)
    }

    /// Forgets an ended container once its exit is reported: removes its cgroup and marks its
    /// control directory reported (the logs stay). Idempotent.
    pub fn forget(&self, id: ContainerKey) -> Result<(), ExecError> {
        let control = self.control_dir(id);
        let tracked = {
            let mut inner = self.lock();
            match inner.containers.get(&id) {
                Some(t) if !t.ended => return Err(ExecError::StillRunning(id)),
                Some(_) => {}
                None if control.is_dir() => {}
                None => return Err(ExecError::Unknown(id)),
            }
            inner.containers.remove(&id)
        };
        let cgroup = match tracked {
            Some(mut t) => {
                match t.child.take() {
                    Some(mut child) => {
                        if matches!(child.try_wait(), Ok(None)) {
                            self.lock().zombies.push(child);
                        }
                    }
                    None => reap_if_own_zombie(t.shim),
                }
                t.cgroup
            }
            None => shim::read_json::<ShimSpec>(&control.join(SPEC_FILE)).ok().and_then(|s| s.cgroup),
        };
        let reported = control.join(REPORTED_FILE);
        shim::write_atomic(&reported, b"").map_err(io_err("write", &reported))?;
        if let Some(cg) = cgroup {
            if cg.remove().is_err() {
                cg.kill_all()?;
                cg.remove()?;
            }
        }
        Ok(())
    }

    /// Removes the parent cgroup of all containers if it is empty (for uninstalling and tests).
    pub fn remove_parent_cgroup(&self) -> Result<(), CgroupError> {
        self.layout.remove_parent(&self.settings.cgroup_name)
    }

    /// Reads the end of a container's stdout or stderr: the last `tail` bytes, or the whole
    /// file when `tail` is `None`, never more than [`MAX_LOG_READ_BYTES`] (the last ones).
    ///
    /// Works for every container whose control directory is still here: running, ended, and
    /// forgotten ([`Executor::forget`] keeps the logs). The file is the one the container
    /// actually used, from its `spec.json` (a launch may redirect its logs). Blocking file I/O:
    /// call it off an async executor's threads.
    ///
    /// Never follows a symbolic link and never leaves the container directory: every directory
    /// on the path is opened relative to the previous one with `O_NOFOLLOW`, and the file must be
    /// a regular file owned by the container's user (a hard link to someone else's file is
    /// refused too). The file is opened `O_NONBLOCK`, so a FIFO planted in its place cannot
    /// hang the read before it is refused.
    pub fn read_log(
        &self,
        id: ContainerKey,
        stream: LogStream,
        tail: Option<u64>,
    ) -> Result<LogRead, LogError> {
        use nix::fcntl::{OFlag, openat};
        use nix::sys::stat::Mode;
        use std::os::unix::fs::{FileExt, MetadataExt};

        if id.id == 0 {
            return Err(LogError::ZeroContainerId);
        }
        let control = self.control_dir(id);
        let refused = |why: String| LogError::Refused { id, stream, why };
        let io = |source: io::Error| LogError::Io { id, stream, source };
        // The control directory and its spec are root-owned: trusted. Without a spec (a launch
        // still writing it) the default file name is the one.
        let spec = shim::read_json::<ShimSpec>(&control.join(SPEC_FILE)).ok();
        let default_name = Path::new(stream.as_str());
        let relative: PathBuf = match &spec {
            Some(spec) => {
                let path = match stream {
                    LogStream::Stdout => &spec.stdout,
                    LogStream::Stderr => &spec.stderr,
                };
                // Relative to the container directory as it was at launch (the work root may
                // have moved since); the walk below starts from where it is now.
                path.strip_prefix(&spec.container_dir)
                    .map_err(|_| {
                        refused(format!("is recorded as {}, outside its directory", path.display()))
                    })?
                    .to_owned()
            }
            None => default_name.to_owned(),
        };
        let parts: Vec<&std::ffi::OsStr> = relative
            .components()
            .map(|c| match c {
                Component::Normal(part) => Ok(part),
                _ => Err(refused(format!("path {} is not a plain relative path", relative.display()))),
            })
            .collect::<Result<_, _>>()?;
        let Some((mut file_name, mut dirs)) = parts.split_last() else {
            return Err(refused("path is empty".into()));
        };
        // Once its files are cleaned up, an ended container's logs are in `logs/` (see
        // `crate::cleanup`), named by stream (one file when both streams shared one).
        let mut first = std::ffi::OsStr::new(WORK_DIR);
        let kept = crate::cleanup::kept_log_name(spec.as_ref(), stream);
        if std::fs::symlink_metadata(control.join(crate::cleanup::LOGS_DIR).join(kept)).is_ok() {
            (first, file_name, dirs) = (std::ffi::OsStr::new(crate::cleanup::LOGS_DIR), &kept, &[]);
        }

        let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut dir = match nix::fcntl::open(&control, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => {
                return Err(LogError::NoContainer(id));
            }
            Err(e) => return Err(io(e.into())),
        };
        // `work/` itself belongs to the container's user but sits in the root-owned control
        // directory, so it cannot be swapped; it is checked like the rest all the same.
        for part in std::iter::once(first).chain(dirs.iter().copied()) {
            dir = match openat(&dir, part, dir_flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::ENOENT) => return Err(LogError::NoFile { id, stream }),
                // O_NOFOLLOW on a symbolic link gives ELOOP; O_DIRECTORY on a file, ENOTDIR.
                Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => {
                    return Err(refused(format!(
                        "has {:?} on its path, which is a symbolic link or not a directory",
                        part
                    )));
                }
                Err(e) => return Err(io(e.into())),
            };
        }
        let file_flags =
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        let file = match openat(&dir, *file_name, file_flags, Mode::empty()) {
            Ok(fd) => std::fs::File::from(fd),
            Err(nix::errno::Errno::ENOENT) => return Err(LogError::NoFile { id, stream }),
            Err(nix::errno::Errno::ELOOP) => return Err(refused("is a symbolic link".into())),
            Err(e) => return Err(io(e.into())),
        };
        let meta = file.metadata().map_err(io)?;
        if !meta.file_type().is_file() {
            return Err(refused("is not a regular file".into()));
        }
        if let Some(spec) = &spec {
            if meta.uid() != spec.uid {
                return Err(refused(format!(
                    "belongs to uid {}, not to the container's user (uid {})",
                    meta.uid(),
                    spec.uid
                )));
            }
        }
        let size = meta.len();
        let want = tail.unwrap_or(u64::MAX).min(MAX_LOG_READ_BYTES).min(size);
        let start = size - want;
        // `want` ≤ MAX_LOG_READ_BYTES, so it fits in memory and in usize.
        let mut data = vec![0u8; usize::try_from(want).unwrap_or(0)];
        let mut filled = 0;
        while filled < data.len() {
            match file.read_at(&mut data[filled..], start + filled as u64) {
                Ok(0) => break, // truncated meanwhile
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        data.truncate(filled);
        Ok(LogRead { data, file_size_bytes: size })
    }
}

/// A container's end as its supervisor recorded it: classified, and for a memory-limit end,
/// with the memory it was seen using (`limit` is the one its launch asked for).
fn recorded_exit(
    id: ContainerKey,
    control: &Path,
    rec: &ExitRecord,
    cgroup: Option<&ContainerCgroup>,
    limit: u64,
) -> ContainerExit {
    let kill =
        std::fs::read_to_string(control.join(KILL_REASON_FILE)).ok().and_then(|s| KillReason::parse(&s));
    let oom = cgroup.and_then(|cg| cg.oom_kills().ok()).unwrap_or(0).max(rec.oom_kills);
    let reason = classify_exit(rec.status, kill, oom);
    let memory = (reason == ExitReason::MemoryLimit).then(|| memory_at_exit(control, cgroup, limit));
    let disk = (reason == ExitReason::DiskLimit)
        .then(|| shim::read_json::<DiskSeen>(&control.join(DISK_SEEN_FILE)).unwrap_or_default());
    ContainerExit { memory, disk, ..ContainerExit::new(id, reason, rec.finished_at_ms) }
}

/// What a container ended for its memory limit was seen using: the monitor's measurement when
/// it killed it, else the cgroup's peak (the kernel's OOM killer acted); and its limit.
fn memory_at_exit(control: &Path, cgroup: Option<&ContainerCgroup>, limit: u64) -> MemorySeen {
    if let Ok(seen) = shim::read_json::<MemorySeen>(&control.join(MEMORY_SEEN_FILE)) {
        return MemorySeen {
            limit_bytes: if seen.limit_bytes == 0 { limit } else { seen.limit_bytes },
            ..seen
        };
    }
    MemorySeen { used_bytes: cgroup.and_then(ContainerCgroup::memory_peak).unwrap_or(0), limit_bytes: limit }
}

/// A container whose supervisor vanished without a record: whatever is left in its cgroup is
/// killed (no stray processes), and it is reported lost now.
fn lost(id: ContainerKey, cgroup: Option<&ContainerCgroup>, cmd: ProcRef) -> ContainerExit {
    if let Some(cg) = cgroup.filter(|cg| cg.exists()) {
        if let Err(e) = cg.kill_all() {
            tracing::warn!("container {id}: {e}");
        }
    }
    // Without a cgroup, at least the command's process group (only if the pid is still the
    // command: same start time).
    if cmd.pid != 0 && live_start_time(cmd.pid) == Some(cmd.start_time) {
        let _ = nix::sys::signal::killpg(cmd.nix(), Signal::SIGKILL);
    }
    ContainerExit::new(id, ExitReason::Lost, shim::now_ms())
}

/// The processes under a supervisor — none once it is gone, so that a reused pid is never
/// taken for it.
fn shim_tree(shim: ProcRef) -> Vec<ProcStat> {
    if live_start_time(shim.pid) == Some(shim.start_time) { descendants(shim.pid) } else { Vec::new() }
}

/// Ends a supervisor that failed to start its container, with whatever it started.
fn abort_shim(child: &mut Child) {
    for p in descendants(child.id()) {
        let _ = nix::sys::signal::kill(ProcRef { pid: p.pid, start_time: 0 }.nix(), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reaps a dead supervisor that is this process's child (an executor of the same process that
/// was dropped started it); only a zombie with the recorded start time is touched, so another
/// child's status is never taken.
fn reap_if_own_zombie(shim: ProcRef) {
    if let Some(stat) = ProcStat::read(shim.pid) {
        if stat.state == 'Z' && stat.start_time == shim.start_time && stat.ppid == std::process::id() {
            let _ = nix::sys::wait::waitpid(shim.nix(), Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        }
    }
}

/// The read end of a container's notification pipe after launch: it reaches end of file when
/// the container's supervisor exits (the container ended, or its supervisor died). Dropping it
/// changes nothing for the container.
#[derive(Debug)]
pub struct ExitNotice(OwnedFd);

impl ExitNotice {
    /// The pipe's read end, for an event loop (make it non-blocking first).
    pub fn into_fd(self) -> OwnedFd {
        self.0
    }
}

/// What the launch pipe said.
enum Notice {
    /// The shim recorded the command's pid.
    Running,
    /// End of file before that: the shim exited.
    Ended,
    /// The shim could not set the container up, and said why.
    SetupFailed(String),
    TimedOut,
    Failed(io::Error),
}

/// Waits for the shim's first word on the launch pipe, up to `limit`.
fn wait_for_notice(pipe: &OwnedFd, limit: Duration) -> Notice {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Notice::TimedOut;
        }
        let timeout = nix::poll::PollTimeout::try_from(left).unwrap_or(nix::poll::PollTimeout::MAX);
        let mut fds = [nix::poll::PollFd::new(pipe.as_fd(), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Notice::Failed(e.into()),
        }
        // "R" alone, or "E" and the reason in one write (see `shim::NotifyFd`).
        let mut byte = [0u8; 1];
        return match nix::unistd::read(pipe, &mut byte) {
            Ok(0) => Notice::Ended,
            Ok(_) if byte[0] == shim::NOTIFY_FAILED => {
                // Written at once with its first byte: already in the pipe.
                let mut reason = [0u8; libc::PIPE_BUF];
                let n = nix::unistd::read(pipe, &mut reason).unwrap_or(0);
                Notice::SetupFailed(String::from_utf8_lossy(&reason[..n]).trim().to_owned())
            }
            Ok(_) => Notice::Running,
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(e) => Notice::Failed(e.into()),
        };
    }
}

/// Refuses a string no process can be given (it holds a NUL byte).
pub(crate) fn no_nul(field: &str, s: &str) -> Result<(), SpecError> {
    if s.contains('\0') { Err(SpecError::Nul { field: field.to_owned() }) } else { Ok(()) }
}

/// A spec path made relative and normalised; refuses absolute paths and `..`.
fn contained(field: &'static str, raw: &str, file: bool) -> Result<PathBuf, SpecError> {
    no_nul(field, raw)?;
    let path = Path::new(raw);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => return Err(SpecError::PathEscape { field, path: raw.to_owned() }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(SpecError::AbsolutePath { field, path: raw.to_owned() });
            }
        }
    }
    if file && out.as_os_str().is_empty() {
        return Err(SpecError::NotAFile { field, path: raw.to_owned() });
    }
    Ok(out)
}

/// Keeps the last value of each variable, in first-seen order.
fn last_wins(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in env {
        match index.get(&k) {
            Some(&i) => out[i].1 = v,
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    out
}

/// When a container's command started: the time its supervisor wrote the pid record (0 if
/// unknown).
fn started_at_ms(control: &Path) -> u64 {
    std::fs::metadata(control.join(PID_FILE))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_container_directory() {
        assert_eq!(contained("workdir", ".", false), Ok(PathBuf::new()));
        assert_eq!(contained("stdout", "./logs//out.txt", true), Ok(PathBuf::from("logs/out.txt")));
        assert!(matches!(contained("stdout", "/var/log/x", true), Err(SpecError::AbsolutePath { .. })));
        assert!(matches!(contained("workdir", "a/../../b", false), Err(SpecError::PathEscape { .. })));
        assert!(matches!(contained("stderr", ".", true), Err(SpecError::NotAFile { .. })));
        assert!(matches!(contained("stderr", "a\0b", true), Err(SpecError::Nul { .. })));
    }

    #[test]
    fn exits_are_classified_by_kill_reason_then_oom_then_status() {
        let code = |code| ExitStatus::Exited { code };
        let sig = ExitStatus::Signaled { signal: 9 };
        assert_eq!(classify_exit(sig, Some(KillReason::Request), 1), ExitReason::KilledByRequest);
        assert_eq!(classify_exit(code(0), Some(KillReason::MemoryLimit), 0), ExitReason::MemoryLimit);
        assert_eq!(classify_exit(code(137), None, 1), ExitReason::MemoryLimit);
        assert_eq!(classify_exit(sig, None, 2), ExitReason::MemoryLimit);
        assert_eq!(
            classify_exit(code(0), None, 1),
            ExitReason::Exited { code: 0 },
            "the job coped with the OOM"
        );
        assert_eq!(classify_exit(code(3), None, 0), ExitReason::Exited { code: 3 });
        assert_eq!(classify_exit(sig, None, 0), ExitReason::Signaled { signal: 9 });
        assert_eq!(KillReason::parse("memory-limit\n"), Some(KillReason::MemoryLimit));
        assert_eq!(KillReason::parse(KillReason::Fenced.as_str()), Some(KillReason::Fenced));
        assert_eq!(classify_exit(sig, Some(KillReason::Fenced), 0), ExitReason::Fenced);
    }

    #[test]
    fn later_environment_values_win() {
        let env = vec![("A".into(), "1".into()), ("B".into(), "2".into()), ("A".into(), "3".into())];
        assert_eq!(last_wins(env), vec![("A".to_owned(), "3".to_owned()), ("B".to_owned(), "2".to_owned())]);
    }
}
