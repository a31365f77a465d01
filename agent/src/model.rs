//! Types shared by the agent's parts: what a container launch asks for, how a container ended,
//! and what the probe measures. Plain data, serialisable (the state directory and
//! `gantry-agent probe` use JSON).

use serde::{Deserialize, Serialize};

/// A container launch as the scheduler asks for it. Paths are relative to the container's own
/// directory under the agent's work root; nothing may point outside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Container id (from the scheduler; unique per cluster).
    pub container_id: u64,
    /// Application id.
    pub app_id: u64,
    /// Program and arguments; `argv[0]` is looked up in `PATH` if it has no slash.
    pub argv: Vec<String>,
    /// Extra environment variables (the agent adds `GANTRY_*` and GPU variables).
    pub env: Vec<(String, String)>,
    /// Working directory relative to the container directory (default: the container directory).
    pub workdir: Option<String>,
    /// Account to run as (default: the agent's configured container user).
    pub user: Option<String>,
    /// CPU limit in millicores (CFS quota); 0 = no limit.
    pub cpu_millis: u64,
    /// Memory limit in bytes; 0 = no limit.
    pub memory_bytes: u64,
    /// Indexes of the GPUs handed to the container.
    pub gpus: Vec<u32>,
    /// stdout file relative to the container directory (default `stdout`).
    pub stdout: Option<String>,
    /// stderr file relative to the container directory (default `stderr`).
    pub stderr: Option<String>,
}

/// Why a container ended. Distinct reasons so the scheduler can tell a job's own failure from
/// the agent's enforcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum ExitReason {
    /// The process exited by itself with this status.
    Exited {
        /// Exit status.
        code: i32,
    },
    /// The process was killed by a signal nobody in gantry sent.
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// Killed because the scheduler (or a user through it) asked.
    KilledByRequest,
    /// Killed for exceeding its memory limit.
    MemoryLimit,
    /// The agent lost track of it (its processes vanished while the agent was down and no exit
    /// record was left).
    Lost,
    /// Killed by the agent itself because it had heard nothing from the scheduler for its
    /// fencing timeout: the scheduler has declared (or is about to declare) the node lost and
    /// reruns the work elsewhere, so this copy must not keep running beside the new one.
    Fenced,
}

impl ExitReason {
    /// A short kebab-case name (`exited`, `signaled`, `killed-by-request`, `memory-limit`, `lost`,
    /// `fenced`), used in metrics labels and logs.
    pub fn name(&self) -> &'static str {
        match self {
            ExitReason::Exited { .. } => "exited",
            ExitReason::Signaled { .. } => "signaled",
            ExitReason::KilledByRequest => "killed-by-request",
            ExitReason::MemoryLimit => "memory-limit",
            ExitReason::Lost => "lost",
            ExitReason::Fenced => "fenced",
        }
    }

    /// An exit status in the shell's convention: the code, or 128 + signal, or 137 for kills.
    pub fn exit_code(&self) -> i32 {
        match *self {
            ExitReason::Exited { code } => code,
            ExitReason::Signaled { signal } => 128 + signal,
            ExitReason::KilledByRequest | ExitReason::MemoryLimit | ExitReason::Fenced => 137,
            ExitReason::Lost => -1,
        }
    }
}

/// A container's end, as reported to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerExit {
    /// Container id.
    pub container_id: u64,
    /// Why it ended.
    pub reason: ExitReason,
    /// When it ended, Unix ms (as observed; for exits during an agent outage, as recorded by the
    /// container's supervisor).
    pub finished_at_ms: u64,
    /// For [`ExitReason::MemoryLimit`]: the memory it was seen using and its limit, so the user
    /// is told how far over it went (as YARN's "1.1 GB of 1 GB physical memory used").
    #[serde(default)]
    pub memory: Option<MemorySeen>,
}

impl ContainerExit {
    /// An exit with nothing known beyond its reason and time.
    pub fn new(container_id: u64, reason: ExitReason, finished_at_ms: u64) -> ContainerExit {
        ContainerExit { container_id, reason, finished_at_ms, memory: None }
    }
}

/// The memory a container ended for: what it was seen using, and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemorySeen {
    /// In use, bytes: the working set the monitor measured when it killed the container, or
    /// the cgroup's peak when the kernel's OOM killer ended it; 0 = not known.
    pub used_bytes: u64,
    /// The limit, bytes; 0 = not known.
    pub limit_bytes: u64,
}

/// Resource use of one container.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ContainerUsage {
    /// Container id.
    pub container_id: u64,
    /// CPU time used so far (user + system), seconds.
    pub cpu_seconds: f64,
    /// Memory working set (usage less inactive file cache), bytes.
    pub memory_working_set_bytes: u64,
    /// Memory limit in bytes (0 = none).
    pub memory_limit_bytes: u64,
    /// Number of processes.
    pub processes: u32,
}

/// One GPU (or MIG instance) as NVML reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Index (as NVML numbers devices; MIG instances get indexes after the physical GPUs).
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Model name.
    pub model: String,
    /// Memory total, bytes.
    pub memory_total_bytes: u64,
    /// Memory used, bytes.
    pub memory_used_bytes: u64,
    /// Utilisation, percent (0–100).
    pub utilization_percent: u32,
    /// Whether this is a MIG instance.
    pub mig: bool,
    /// Containers whose processes use it.
    pub containers: Vec<u64>,
}

/// Host-wide usage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct HostUsage {
    /// Logical CPUs.
    pub cpu_cores: u32,
    /// CPU busy fraction over the last sampling interval, 0..=1 (all cores together).
    pub cpu_usage: f64,
    /// Total CPU time used by the host since boot, seconds (all cores).
    pub cpu_seconds_total: f64,
    /// MemTotal, bytes.
    pub memory_total_bytes: u64,
    /// MemAvailable, bytes.
    pub memory_available_bytes: u64,
    /// Used = total − available, bytes.
    pub memory_used_bytes: u64,
}

/// Resources in the scheduler's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Resources {
    /// Millicores.
    pub cpu_millis: u64,
    /// Bytes.
    pub memory_bytes: u64,
    /// Whole GPUs.
    pub gpus: u32,
}

/// What the agent registers and reports: `gantry-agent probe` prints exactly this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Node name.
    pub name: String,
    /// Rack.
    pub rack: String,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// What the machine has.
    pub capacity: Resources,
    /// Capacity less the configured reserve: what the scheduler may hand out.
    pub allocatable: Resources,
    /// Host usage now.
    pub usage: HostUsage,
    /// GPUs (empty without NVML or GPUs).
    pub gpus: Vec<GpuInfo>,
    /// Why there are no GPUs, if there are none (e.g. "NVML not found").
    pub gpu_note: Option<String>,
    /// Running containers' usage.
    pub containers: Vec<ContainerUsage>,
}
