//! The executor: turns launch specs into supervised process trees, kills them, collects how
//! they ended, and re-adopts them after an agent restart.
//!
//! Containers are named by [`ContainerKey`]: the cluster id of the scheduler run that launched
//! them and their id there, since a scheduler on fresh state numbers from 1 again while this
//! node keeps the containers (and directories) of the earlier one. Only the same key is "the
//! same container": a launch is refused only if its key exists, and kills, exits and log reads
//! go by key.
//!
//! Each container has a *control directory* `<containers>/<key>/` (`<id>.<cluster id>`, or `<id>`
//! for the legacy cluster, as agents older than cluster ids wrote them), owned by the agent and not
//! writable by the container, holding what must survive the agent: `spec.json` (the resolved
//! [`ShimSpec`](crate::shim::ShimSpec)), `pid` (pids and start times), `exit.json` (written by the
//! shim), `kill-reason` (why the agent killed it), `reported` (after [`Executor::forget`]) and
//! `shim.log`. Inside it, `work/` is the *container directory*: owned by the container's user, the
//! default working directory, the base of every path in the spec, and where stdout/stderr land.
//! Keeping the control files out of the user's reach means a container cannot forge the pid file
//! the agent signals, or the exit record it reports.
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
//!
//! One concern per file: this one holds the settings, the errors and the registry of tracked
//! containers (what is known of each, listing and usage); `launch.rs` prepares a spec and starts
//! its shim, `kill.rs` stops containers and records why, `exits.rs` finds and classifies how they
//! ended, `adopt.rs` takes over those of a previous agent run, and `logs.rs` reads their logs.
//! The launch spec itself is checked in [`crate::launch_spec`].

mod adopt;
mod exits;
mod kill;
mod launch;
mod logs;

pub use exits::classify_exit;
pub use kill::AgentKillReason;
pub use launch::ExitNotice;
pub use logs::{LogError, LogRead, LogStream, MAX_LOG_READ_BYTES};

use crate::cgroup::{CgroupError, CgroupUsage, ContainerCgroup, Layout};
use crate::config::AgentConfig;
use crate::launch_spec::SpecError;
use crate::model::{ContainerExit, ContainerKey, ContainerUsage};
use crate::procfs::{ProcStat, descendants, live_start_time, tree_usage};
use crate::shim::{PID_FILE, ShimError};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use thiserror::Error;

/// The container directory's name inside the control directory.
pub const WORK_DIR: &str = "work";
/// Why the agent killed a container (`request` or `memory-limit`); the first writer wins.
pub const KILL_REASON_FILE: &str = "kill-reason";
/// What the monitor saw when it killed a container for memory
/// ([`MemorySeen`](crate::model::MemorySeen) as JSON); the first writer wins, like
/// [`KILL_REASON_FILE`].
pub const MEMORY_SEEN_FILE: &str = "memory-seen.json";
/// What the disk round saw when it killed a container for disk
/// ([`DiskSeen`](crate::model::DiskSeen) as JSON).
pub const DISK_SEEN_FILE: &str = "disk-seen.json";
/// Written once the container's exit has been reported; adoption skips such directories.
pub const REPORTED_FILE: &str = "reported";

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

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ExecError + 'a {
    move |source| ExecError::Io { what, path: path.to_owned(), source }
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

impl Tracked {
    /// Whether the container's supervisor still runs: the recorded pid with the recorded start
    /// time (a pid reused by another process does not count).
    fn shim_alive(&mut self) -> bool {
        if let Some(child) = &mut self.child {
            return matches!(child.try_wait(), Ok(None));
        }
        if live_start_time(self.shim.pid) == Some(self.shim.start_time) {
            return true;
        }
        reap_if_own_zombie(self.shim);
        false
    }
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

    fn is_known(&self, id: ContainerKey) -> bool {
        let inner = self.lock();
        inner.containers.contains_key(&id) || inner.launching.contains(&id)
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

    /// Removes the parent cgroup of all containers if it is empty (for uninstalling and tests).
    pub fn remove_parent_cgroup(&self) -> Result<(), CgroupError> {
        self.layout.remove_parent(&self.settings.cgroup_name)
    }
}

/// The processes under a supervisor — none once it is gone, so that a reused pid is never
/// taken for it.
fn shim_tree(shim: ProcRef) -> Vec<ProcStat> {
    if live_start_time(shim.pid) == Some(shim.start_time) { descendants(shim.pid) } else { Vec::new() }
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

/// When a container's command started: the time its supervisor wrote the pid record (0 if
/// unknown).
fn started_at_ms(control: &Path) -> u64 {
    std::fs::metadata(control.join(PID_FILE))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}
