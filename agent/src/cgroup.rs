//! Control groups for containers, written as plain files (no library), for both layouts found on
//! bare metal: the unified cgroup v2 hierarchy, and the v1 hierarchies (one mount per controller)
//! that many racks — and these machines — still run.
//!
//! A container gets `<parent>/c<container_id>` in every controller used: memory (limit, working
//! set, OOM kills), cpu (CFS quota, throttling), cpuacct (CPU seconds; v1 only), freezer (an atomic
//! kill of the whole tree; v1 only) and pids (`pids.max`) when mounted. Where no cgroup is writable the agent
//! falls back to the process tree under the container's shim ([`crate::procfs`]).

use crate::model::ContainerKey;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};
use thiserror::Error;

/// CFS period used for every container, µs (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;
/// v1 `memory.limit_in_bytes` (and v2 `memory.max` values) at or above this mean "no limit".
const UNLIMITED: u64 = 1 << 62;
/// How long a kill of a whole cgroup may take before it is reported as failed.
const KILL_DEADLINE: Duration = Duration::from_secs(10);
/// How long to wait for a freezer to reach FROZEN before killing anyway.
const FREEZE_DEADLINE: Duration = Duration::from_millis(1000);

/// Why a cgroup operation failed.
#[derive(Debug, Error)]
pub enum CgroupError {
    /// A cgroup file or directory could not be read, written, created or removed.
    #[error("cgroup: cannot {op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A cgroup file held something unexpected.
    #[error("cgroup: cannot parse {path}: {text:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held (shortened).
        text: String,
    },
    /// Processes were still in the cgroup after the kill deadline.
    #[error("cgroup {path} still holds {count} processes after {secs} s of SIGKILL")]
    Survivors {
        /// The cgroup that would not empty.
        path: PathBuf,
        /// How many processes were left.
        count: usize,
        /// The deadline, seconds.
        secs: u64,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io { op, path: path.to_owned(), source }
}

/// The v1 controller mounts the agent uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct V1Mounts {
    /// `memory` controller mount.
    pub memory: PathBuf,
    /// `cpu` controller mount (may be the same as `cpuacct`, e.g. `/sys/fs/cgroup/cpu,cpuacct`).
    pub cpu: PathBuf,
    /// `cpuacct` controller mount.
    pub cpuacct: PathBuf,
    /// `freezer` controller mount.
    pub freezer: PathBuf,
    /// `pids` controller mount, if any (`pids.max` when the container has a process limit).
    pub pids: Option<PathBuf>,
}

/// Which cgroup hierarchy the machine offers the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Layout {
    /// Unified hierarchy with the `memory` and `cpu` controllers available at this mount.
    V2 {
        /// The cgroup2 mount point.
        root: PathBuf,
    },
    /// Legacy hierarchies, one mount per controller (or per group of controllers).
    V1(V1Mounts),
    /// No usable cgroups: limits fall back to rlimits, kills to the process tree.
    None,
}

impl Layout {
    /// Detects the layout of this machine from `/proc/self/mountinfo`. v2 is preferred when its
    /// mount has the memory and cpu controllers; otherwise v1 when memory, cpu, cpuacct and
    /// freezer are mounted; otherwise [`Layout::None`].
    pub fn detect() -> Layout {
        match std::fs::read_to_string("/proc/self/mountinfo") {
            Ok(text) => Layout::from_mountinfo(&text, |root| {
                std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default()
            }),
            Err(e) => {
                tracing::warn!("cannot read /proc/self/mountinfo ({e}); running without cgroups");
                Layout::None
            }
        }
    }

    /// Detection from the text of a mountinfo file; `controllers` reads a cgroup2 mount's
    /// `cgroup.controllers` (a parameter so the parsing can be tested without the machine).
    pub fn from_mountinfo(text: &str, controllers: impl Fn(&Path) -> String) -> Layout {
        let mut v1: HashMap<String, PathBuf> = HashMap::new();
        let mut v2: Vec<PathBuf> = Vec::new();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let Some(mount_point) = left.split(' ').nth(4) else { continue };
            let mount_point = PathBuf::from(unescape_mount(mount_point));
            let mut right = right.split(' ');
            let (Some(fstype), Some(_source), Some(options)) = (right.next(), right.next(), right.next())
            else {
                continue;
            };
            match fstype {
                "cgroup2" => v2.push(mount_point),
                "cgroup" => {
                    for opt in options.split(',') {
                        if matches!(opt, "memory" | "cpu" | "cpuacct" | "freezer" | "pids") {
                            v1.entry(opt.to_owned()).or_insert_with(|| mount_point.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        for root in v2 {
            let have = controllers(&root);
            let have: HashSet<&str> = have.split_whitespace().collect();
            if have.contains("memory") && have.contains("cpu") {
                return Layout::V2 { root };
            }
        }
        match (v1.remove("memory"), v1.remove("cpu"), v1.remove("cpuacct"), v1.remove("freezer")) {
            (Some(memory), Some(cpu), Some(cpuacct), Some(freezer)) => {
                Layout::V1(V1Mounts { memory, cpu, cpuacct, freezer, pids: v1.remove("pids") })
            }
            _ => Layout::None,
        }
    }

    /// A short name for logs: `v2`, `v1` or `none`.
    pub fn name(&self) -> &'static str {
        match self {
            Layout::V2 { .. } => "v2",
            Layout::V1(_) => "v1",
            Layout::None => "none",
        }
    }

    /// The parent cgroup's directory in every controller used (deduplicated).
    pub fn parent_dirs(&self, parent: &str) -> Vec<PathBuf> {
        match self {
            Layout::V2 { root } => vec![root.join(parent)],
            Layout::V1(m) => {
                let mut dirs = Vec::new();
                for mount in
                    [Some(&m.memory), Some(&m.cpu), Some(&m.cpuacct), Some(&m.freezer), m.pids.as_ref()]
                        .into_iter()
                        .flatten()
                {
                    let d = mount.join(parent);
                    if !dirs.contains(&d) {
                        dirs.push(d);
                    }
                }
                dirs
            }
            Layout::None => Vec::new(),
        }
    }

    /// Creates the parent cgroup of all containers (and, on v2, delegates the memory, cpu and
    /// pids controllers to its children). Fails when the hierarchy is not writable, which is how
    /// the agent learns that it must fall back to rlimits.
    pub fn prepare_parent(&self, parent: &str) -> Result<(), CgroupError> {
        for dir in self.parent_dirs(parent) {
            mkdir(&dir)?;
        }
        if let Layout::V2 { root } = self {
            // Controllers must be enabled in every ancestor's subtree_control to reach the
            // containers; the root usually has them already (systemd enables them).
            enable_controllers(root)?;
            enable_controllers(&root.join(parent))?;
        }
        Ok(())
    }

    /// Removes the parent cgroup if it is empty (for uninstalling and for tests), in every
    /// controller: one that fails does not keep the others; the first error is returned.
    pub fn remove_parent(&self, parent: &str) -> Result<(), CgroupError> {
        let mut first = Ok(());
        for dir in self.parent_dirs(parent) {
            if let Err(e) = rmdir_retry(&dir) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Removes the parent cgroup if no container cgroup is left under it in any controller
    /// (what an agent does on a clean stop); true if it is gone. A parent still holding
    /// containers is left alone at once, without the retries of [`Layout::remove_parent`].
    pub fn remove_parent_if_empty(&self, parent: &str) -> Result<bool, CgroupError> {
        let dirs = self.parent_dirs(parent);
        let has_children = |d: &PathBuf| {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        };
        if dirs.iter().any(has_children) {
            return Ok(false);
        }
        self.remove_parent(parent).map(|()| true)
    }

    /// The cgroup a container gets under `parent` (paths only; see [`ContainerCgroup::create`]):
    /// `c<key>`, so containers of the same id from different clusters never share one.
    pub fn container(&self, parent: &str, key: ContainerKey) -> Option<ContainerCgroup> {
        self.child(parent, &format!("c{key}"))
    }

    /// The cgroup `leaf` under `parent`, in every controller used.
    fn child(&self, parent: &str, leaf: &str) -> Option<ContainerCgroup> {
        match self {
            Layout::V2 { root } => Some(ContainerCgroup::V2 { dir: root.join(parent).join(leaf) }),
            Layout::V1(m) => Some(ContainerCgroup::V1 {
                memory: m.memory.join(parent).join(leaf),
                cpu: m.cpu.join(parent).join(leaf),
                cpuacct: m.cpuacct.join(parent).join(leaf),
                freezer: m.freezer.join(parent).join(leaf),
                pids: m.pids.as_ref().map(|p| p.join(parent).join(leaf)),
            }),
            Layout::None => None,
        }
    }

    /// Finishes the kills an earlier agent left half done: every container cgroup under `parent`
    /// that is frozen (or freezing) has all its members SIGKILLed and is thawed. Gantry freezes a
    /// cgroup only to kill it (v1, and v2 kernels without `cgroup.kill`), so a frozen one found at
    /// start-up is an agent that died between the freeze and the thaw, and its processes would
    /// otherwise stay frozen for good. Returns the cgroups finished, and why any could not be.
    pub fn finish_interrupted_kills(&self, parent: &str) -> (Vec<String>, Vec<CgroupError>) {
        let base = match self {
            Layout::V2 { root } => root.join(parent),
            Layout::V1(m) => m.freezer.join(parent),
            Layout::None => return (Vec::new(), Vec::new()),
        };
        let (mut finished, mut errors) = (Vec::new(), Vec::new());
        let leaves = std::fs::read_dir(&base)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok());
        for leaf in leaves {
            let Some(cg) = self.child(parent, &leaf) else { continue };
            match cg.freeze_requested() {
                Ok(false) => {}
                Ok(true) => match cg.kill_all() {
                    Ok(()) => finished.push(leaf),
                    Err(e) => errors.push(e),
                },
                Err(e) => errors.push(e),
            }
        }
        (finished, errors)
    }
}

/// Mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
    let available = read_string(&dir.join("cgroup.controllers"))?;
    let enabled = read_string(&dir.join("cgroup.subtree_control"))?;
    let enabled: HashSet<&str> = enabled.split_whitespace().collect();
    let want: Vec<String> = available
        .split_whitespace()
        .filter(|c| matches!(*c, "memory" | "cpu" | "pids") && !enabled.contains(c))
        .map(|c| format!("+{c}"))
        .collect();
    if want.is_empty() {
        return Ok(());
    }
    write_value(&dir.join("cgroup.subtree_control"), &want.join(" "))
}

/// The limits a container's cgroup enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Limits {
    /// Memory limit, bytes (0 = none).
    pub memory_bytes: u64,
    /// CPU limit, millicores (0 = none): a CFS quota of `millis * 100` µs per 100 ms period.
    pub cpu_millis: u64,
    /// Most processes and threads at once (0 = none): `pids.max`, so a fork bomb in one
    /// container cannot exhaust the node's pid space. Absent in specs written before it.
    #[serde(default)]
    pub max_pids: u64,
}

/// What a container's cgroup has accounted.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CgroupUsage {
    /// CPU time, user + system, seconds.
    pub cpu_seconds: f64,
    /// Memory charged to the cgroup (page cache included), bytes.
    pub memory_usage_bytes: u64,
    /// Working set: usage less inactive file cache (what kubelet and cAdvisor report), bytes.
    pub memory_working_set_bytes: u64,
    /// Memory limit, bytes (0 = none).
    pub memory_limit_bytes: u64,
    /// CFS periods in which the cgroup was throttled.
    pub nr_throttled: u64,
    /// Time spent throttled, seconds.
    pub throttled_seconds: f64,
    /// Processes of the cgroup killed by the OOM killer.
    pub oom_kills: u64,
    /// Processes in the cgroup.
    pub processes: u32,
}

/// One container's cgroup: its directory in each controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerCgroup {
    /// Unified hierarchy: one directory.
    V2 {
        /// The container's cgroup directory.
        dir: PathBuf,
    },
    /// Legacy hierarchy: one directory per controller.
    V1 {
        /// In the memory controller.
        memory: PathBuf,
        /// In the cpu controller.
        cpu: PathBuf,
        /// In the cpuacct controller.
        cpuacct: PathBuf,
        /// In the freezer controller.
        freezer: PathBuf,
        /// In the pids controller, if mounted.
        pids: Option<PathBuf>,
    },
}

impl ContainerCgroup {
    /// Every directory of this cgroup (deduplicated; controllers may share a mount).
    pub fn dirs(&self) -> Vec<PathBuf> {
        match self {
            ContainerCgroup::V2 { dir } => vec![dir.clone()],
            ContainerCgroup::V1 { memory, cpu, cpuacct, freezer, pids } => {
                let mut dirs: Vec<PathBuf> = Vec::new();
                for d in [Some(memory), Some(cpu), Some(cpuacct), Some(freezer), pids.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    if !dirs.contains(d) {
                        dirs.push(d.clone());
                    }
                }
                dirs
            }
        }
    }

    /// The `cgroup.procs` files a process writes its pid into to join this cgroup.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().into_iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The directory whose `cgroup.procs` lists the members (the freezer's on v1, since that is
    /// the controller the kill works through).
    fn members_dir(&self) -> &Path {
        match self {
            ContainerCgroup::V2 { dir } => dir,
            ContainerCgroup::V1 { freezer, .. } => freezer,
        }
    }

    /// Creates the cgroup and writes its limits. An existing empty cgroup of the same name (left
    /// by a crash) is reused.
    pub fn create(&self, limits: Limits) -> Result<(), CgroupError> {
        for dir in self.dirs() {
            mkdir(&dir)?;
        }
        match self {
            ContainerCgroup::V2 { dir } => {
                let mem =
                    if limits.memory_bytes == 0 { "max".to_owned() } else { limits.memory_bytes.to_string() };
                write_value(&dir.join("memory.max"), &mem)?;
                if limits.memory_bytes != 0 {
                    // Without swap limit the memory limit could be dodged by swapping; and an
                    // OOM ends the whole container rather than one random process of it.
                    write_optional(&dir.join("memory.swap.max"), "0");
                    write_optional(&dir.join("memory.oom.group"), "1");
                }
                let quota = if limits.cpu_millis == 0 {
                    "max".to_owned()
                } else {
                    (limits.cpu_millis * 100).to_string()
                };
                write_value(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
                if limits.max_pids != 0 {
                    write_value(&dir.join("pids.max"), &limits.max_pids.to_string())?;
                }
            }
            ContainerCgroup::V1 { memory, cpu, pids, .. } => {
                let mem =
                    if limits.memory_bytes == 0 { "-1".to_owned() } else { limits.memory_bytes.to_string() };
                write_value(&memory.join("memory.limit_in_bytes"), &mem)?;
                if limits.memory_bytes != 0 {
                    // memory+swap, where swap accounting is on; must not be below the memory limit.
                    write_optional(&memory.join("memory.memsw.limit_in_bytes"), &mem);
                }
                write_value(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                let quota = if limits.cpu_millis == 0 {
                    "-1".to_owned()
                } else {
                    (limits.cpu_millis * 100).to_string()
                };
                write_value(&cpu.join("cpu.cfs_quota_us"), &quota)?;
                // Without a pids controller the executor limits processes by rlimit instead.
                if let (Some(pids), true) = (pids, limits.max_pids != 0) {
                    write_value(&pids.join("pids.max"), &limits.max_pids.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Whether this cgroup can limit its processes (`pids.max`): always on v2, on v1 only where
    /// the pids controller is mounted.
    pub fn limits_pids(&self) -> bool {
        matches!(self, ContainerCgroup::V2 { .. } | ContainerCgroup::V1 { pids: Some(_), .. })
    }

    /// Moves a process (and its future children) into this cgroup.
    pub fn join(&self, pid: u32) -> Result<(), CgroupError> {
        for f in self.procs_files() {
            write_value(&f, &pid.to_string())?;
        }
        Ok(())
    }

    /// Whether the cgroup's directories exist.
    pub fn exists(&self) -> bool {
        self.dirs().iter().all(|d| d.is_dir())
    }

    /// The processes in the cgroup (thread-group ids).
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        let path = self.members_dir().join("cgroup.procs");
        let text = read_string(&path)?;
        text.split_whitespace()
            .map(|p| p.parse().map_err(|_| CgroupError::Parse { path: path.clone(), text: short(&text) }))
            .collect()
    }

    /// Processes of the cgroup killed by the OOM killer so far.
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        match self {
            ContainerCgroup::V2 { dir } => keyed(&dir.join("memory.events"), "oom_kill"),
            ContainerCgroup::V1 { memory, .. } => keyed(&memory.join("memory.oom_control"), "oom_kill"),
        }
    }

    /// The most memory the cgroup has held since it was created, bytes (v1
    /// `memory.max_usage_in_bytes`, v2 `memory.peak`, which kernels before 5.19 lack): what a
    /// container the OOM killer ended had reached. `None` where the kernel does not say.
    pub fn memory_peak(&self) -> Option<u64> {
        match self {
            ContainerCgroup::V2 { dir } => read_u64(&dir.join("memory.peak")).ok(),
            ContainerCgroup::V1 { memory, .. } => read_u64(&memory.join("memory.max_usage_in_bytes")).ok(),
        }
    }

    /// Reads everything the monitor reports about the container.
    pub fn usage(&self) -> Result<CgroupUsage, CgroupError> {
        let processes = u32::try_from(self.pids()?.len()).unwrap_or(u32::MAX);
        match self {
            ContainerCgroup::V2 { dir } => {
                let cpu_stat = dir.join("cpu.stat");
                let usage = read_u64(&dir.join("memory.current"))?;
                let inactive = keyed(&dir.join("memory.stat"), "inactive_file")?;
                let limit = read_limit(&dir.join("memory.max"))?;
                Ok(CgroupUsage {
                    cpu_seconds: keyed(&cpu_stat, "usage_usec")? as f64 / 1e6,
                    memory_usage_bytes: usage,
                    memory_working_set_bytes: usage.saturating_sub(inactive),
                    memory_limit_bytes: limit,
                    nr_throttled: keyed(&cpu_stat, "nr_throttled").unwrap_or(0),
                    throttled_seconds: keyed(&cpu_stat, "throttled_usec").unwrap_or(0) as f64 / 1e6,
                    oom_kills: self.oom_kills()?,
                    processes,
                })
            }
            ContainerCgroup::V1 { memory, cpu, cpuacct, .. } => {
                let usage = read_u64(&memory.join("memory.usage_in_bytes"))?;
                let inactive = keyed(&memory.join("memory.stat"), "total_inactive_file")?;
                let limit = read_limit(&memory.join("memory.limit_in_bytes"))?;
                let cpu_stat = cpu.join("cpu.stat");
                Ok(CgroupUsage {
                    cpu_seconds: read_u64(&cpuacct.join("cpuacct.usage"))? as f64 / 1e9,
                    memory_usage_bytes: usage,
                    memory_working_set_bytes: usage.saturating_sub(inactive),
                    memory_limit_bytes: limit,
                    nr_throttled: keyed(&cpu_stat, "nr_throttled").unwrap_or(0),
                    throttled_seconds: keyed(&cpu_stat, "throttled_time").unwrap_or(0) as f64 / 1e9,
                    oom_kills: self.oom_kills()?,
                    processes,
                })
            }
        }
    }

    /// Sends `signal` to every process in the cgroup (no freezing: for polite signals).
    pub fn signal_all(&self, signal: nix::sys::signal::Signal) -> Result<(), CgroupError> {
        for pid in self.pids()? {
            let _ = nix::sys::signal::kill(to_pid(pid), signal);
        }
        Ok(())
    }

    /// SIGKILLs everything in the cgroup, including processes forking as fast as they can, and
    /// returns once the cgroup is empty. v2 uses `cgroup.kill` where the kernel has it; otherwise
    /// (and on v1) the cgroup is frozen, every member is killed, and it is thawed, in rounds.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let pids = self.pids()?;
            if pids.is_empty() {
                // An empty cgroup left frozen (a kill interrupted after the last member died)
                // is thawed too: nothing gantry kills stays frozen.
                if self.freeze_requested().unwrap_or(false) {
                    self.thaw()?;
                }
                return Ok(());
            }
            if start.elapsed() > KILL_DEADLINE {
                return Err(CgroupError::Survivors {
                    path: self.members_dir().to_owned(),
                    count: pids.len(),
                    secs: KILL_DEADLINE.as_secs(),
                });
            }
            match self {
                ContainerCgroup::V2 { dir } if dir.join("cgroup.kill").exists() => {
                    write_value(&dir.join("cgroup.kill"), "1")?;
                }
                _ => self.freeze_kill_thaw()?,
            }
            sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    fn freeze_kill_thaw(&self) -> Result<(), CgroupError> {
        let (state_file, frozen, thawed) = match self {
            ContainerCgroup::V2 { dir } => (dir.join("cgroup.freeze"), "1", "0"),
            ContainerCgroup::V1 { freezer, .. } => (freezer.join("freezer.state"), "FROZEN", "THAWED"),
        };
        write_value(&state_file, frozen)?;
        let start = Instant::now();
        while start.elapsed() < FREEZE_DEADLINE && !self.is_frozen()? {
            sleep(Duration::from_millis(1));
        }
        let killed = self.signal_all(nix::sys::signal::Signal::SIGKILL);
        // Thaw even when listing failed: a frozen cgroup must never be left behind.
        write_value(&state_file, thawed)?;
        killed
    }

    fn freeze_file(&self) -> (PathBuf, &'static str) {
        match self {
            ContainerCgroup::V2 { dir } => (dir.join("cgroup.freeze"), "0"),
            ContainerCgroup::V1 { freezer, .. } => (freezer.join("freezer.state"), "THAWED"),
        }
    }

    /// Whether the cgroup is frozen or being frozen (v1 `freezer.state` FROZEN or FREEZING, v2
    /// `cgroup.freeze` 1; false where the kernel has no v2 freezer). Gantry freezes only to kill,
    /// so a cgroup that stays so is a kill that was interrupted.
    pub fn freeze_requested(&self) -> Result<bool, CgroupError> {
        let (path, thawed) = self.freeze_file();
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(text.trim() != thawed),
            Err(e) if e.kind() == io::ErrorKind::NotFound && matches!(self, ContainerCgroup::V2 { .. }) => {
                Ok(false)
            }
            Err(e) => Err(CgroupError::Io { op: "read", path, source: e }),
        }
    }

    /// Thaws the cgroup.
    pub fn thaw(&self) -> Result<(), CgroupError> {
        let (path, thawed) = self.freeze_file();
        write_value(&path, thawed)
    }

    fn is_frozen(&self) -> Result<bool, CgroupError> {
        match self {
            ContainerCgroup::V2 { dir } => Ok(keyed(&dir.join("cgroup.events"), "frozen")? == 1),
            ContainerCgroup::V1 { freezer, .. } => {
                Ok(read_string(&freezer.join("freezer.state"))?.trim() == "FROZEN")
            }
        }
    }

    /// Removes the cgroup (it must be empty; removal is retried briefly while the kernel
    /// finishes tearing down the last processes). Missing directories are fine.
    pub fn remove(&self) -> Result<(), CgroupError> {
        for dir in self.dirs() {
            rmdir_retry(&dir)?;
        }
        Ok(())
    }
}

fn to_pid(pid: u32) -> nix::unistd::Pid {
    nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(CgroupError::Io { op: "create", path: dir.to_owned(), source: e }),
    }
}

fn rmdir_retry(dir: &Path) -> Result<(), CgroupError> {
    let start = Instant::now();
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if start.elapsed() < Duration::from_secs(2) && e.raw_os_error() == Some(libc::EBUSY) => {
                sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(CgroupError::Io { op: "remove", path: dir.to_owned(), source: e }),
        }
    }
}

fn write_value(path: &Path, value: &str) -> Result<(), CgroupError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path).map_err(io_err("open", path))?;
    f.write_all(value.as_bytes()).map_err(io_err("write", path))
}

/// Writes a setting that only some kernels have; its absence or refusal is not an error.
fn write_optional(path: &Path, value: &str) {
    if path.exists() {
        if let Err(e) = write_value(path, value) {
            tracing::debug!("optional cgroup setting not applied: {e}");
        }
    }
}

fn read_string(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(io_err("read", path))
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

fn read_u64(path: &Path) -> Result<u64, CgroupError> {
    let text = read_string(path)?;
    text.trim().parse().map_err(|_| CgroupError::Parse { path: path.to_owned(), text: short(&text) })
}

/// A memory limit file: a number, `max` (v2) or a huge number (v1 "unlimited") → 0.
fn read_limit(path: &Path) -> Result<u64, CgroupError> {
    let text = read_string(path)?;
    let t = text.trim();
    if t == "max" || t == "-1" {
        return Ok(0);
    }
    let v: u64 = t.parse().map_err(|_| CgroupError::Parse { path: path.to_owned(), text: short(&text) })?;
    Ok(if v >= UNLIMITED { 0 } else { v })
}

/// A value from a flat-keyed file (`key value` per line: cpu.stat, memory.stat, memory.events).
fn keyed(path: &Path, key: &str) -> Result<u64, CgroupError> {
    let text = read_string(path)?;
    parse_keyed(&text, key)
        .ok_or_else(|| CgroupError::Parse { path: path.to_owned(), text: format!("no `{key}`") })
}

fn parse_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k == key { v.trim().parse().ok() } else { None }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_layout_with_combined_cpu_mount() {
        let layout = Layout::from_mountinfo(MOUNTINFO_V1, |_| String::new());
        let Layout::V1(m) = &layout else { panic!("expected v1, got {layout:?}") };
        assert_eq!(m.cpu, m.cpuacct);
        assert_eq!(m.cpu, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(m.pids.as_deref(), Some(Path::new("/sys/fs/cgroup/pids")));
        assert_eq!(layout.parent_dirs("g").len(), 4, "the shared cpu,cpuacct mount appears once");
        let cg = layout.container("g", ContainerKey::legacy(7)).expect("v1 cgroup");
        assert_eq!(cg.procs_files().len(), 4);
        assert!(cg.procs_files()[0].ends_with("memory/g/c7/cgroup.procs"));
    }

    #[test]
    fn v2_wins_only_with_memory_and_cpu_controllers() {
        let v2 = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let layout = Layout::from_mountinfo(v2, |_| "cpuset cpu io memory pids".into());
        assert_eq!(layout, Layout::V2 { root: "/sys/fs/cgroup".into() });
        assert_eq!(Layout::from_mountinfo(v2, |_| "pids".into()), Layout::None);
        // A hybrid machine whose cgroup2 mount has no controllers uses v1.
        assert_eq!(Layout::from_mountinfo(MOUNTINFO_V1, |_| String::new()).name(), "v1");
        let cg = layout.container("gantry", ContainerKey::legacy(3)).expect("v2 cgroup");
        assert_eq!(cg, ContainerCgroup::V2 { dir: "/sys/fs/cgroup/gantry/c3".into() });
        let cluster = crate::model::ClusterId::from_bits(0xabc);
        let cg = layout.container("gantry", ContainerKey::new(cluster, 3)).expect("v2 cgroup");
        assert_eq!(
            cg,
            ContainerCgroup::V2 { dir: "/sys/fs/cgroup/gantry/c3.00000000000000000000000000000abc".into() },
            "another cluster's container 3 has a cgroup of its own"
        );
    }

    #[test]
    fn missing_freezer_means_no_cgroups() {
        let text: String =
            MOUNTINFO_V1.lines().filter(|l| !l.contains("freezer")).map(|l| format!("{l}\n")).collect();
        assert_eq!(Layout::from_mountinfo(&text, |_| String::new()), Layout::None);
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount(r"/a\040b"), "/a b");
        assert_eq!(unescape_mount(r"/plain"), "/plain");
        assert_eq!(unescape_mount(r"/end\04"), r"/end\04");
    }

    #[test]
    fn keyed_files_and_limits() {
        assert_eq!(parse_keyed("nr_periods 5\nnr_throttled 3\nthrottled_time 9\n", "nr_throttled"), Some(3));
        assert_eq!(parse_keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"), Some(2));
        assert_eq!(parse_keyed("total_inactive_file 10\ninactive_file 4\n", "inactive_file"), Some(4));
        assert_eq!(parse_keyed("a 1\n", "b"), None);
    }
}
