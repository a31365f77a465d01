//! Types shared by the agent's parts: what a container launch asks for, how a container ended,
//! and what the probe measures. Plain data, serialisable (the state directory and
//! `gantry-agent probe` use JSON).

pub use gantry_proto::ClusterId;
use serde::{Deserialize, Serialize};

/// A container on this node: the cluster id of the scheduler run that launched it, and its id
/// there. Container ids repeat across scheduler states (a scheduler on a fresh data directory
/// numbers from 1 again), so the agent never names a container by its id alone: directories,
/// cgroups, kills, exits and log reads all go by the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ContainerKey {
    /// The launching scheduler run's cluster id ([`ClusterId::LEGACY`] for one older than
    /// cluster ids).
    pub cluster: ClusterId,
    /// The container id within that cluster.
    pub id: u64,
}

impl ContainerKey {
    /// The container `id` of `cluster`.
    pub const fn new(cluster: ClusterId, id: u64) -> ContainerKey {
        ContainerKey { cluster, id }
    }

    /// The container `id` of the legacy cluster.
    pub const fn legacy(id: u64) -> ContainerKey {
        ContainerKey { cluster: ClusterId::LEGACY, id }
    }

    /// Reads a name written by [`Display`](std::fmt::Display): `<id>` (legacy, as agents older
    /// than cluster ids named their containers' directories) or `<id>.<cluster id>`.
    pub fn from_name(name: &str) -> Option<ContainerKey> {
        let (id, cluster) = match name.split_once('.') {
            Some((id, cluster)) if !cluster.is_empty() => (id, ClusterId::parse(cluster).ok()?),
            Some(_) => return None,
            None => (name, ClusterId::LEGACY),
        };
        // One spelling per id: digits only, no sign, no leading zero.
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || (id.len() > 1 && id.starts_with('0')) {
            return None;
        }
        Some(ContainerKey { cluster, id: id.parse().ok()? })
    }
}

/// `<id>` for the legacy cluster, `<id>.<cluster id>` otherwise: the container's directory
/// name, its cgroup's (after a `c`), and how logs name it.
impl std::fmt::Display for ContainerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cluster.is_legacy() {
            write!(f, "{}", self.id)
        } else {
            write!(f, "{}.{}", self.id, self.cluster)
        }
    }
}

/// Serde for a [`ClusterId`] field in its wire form (absent or empty = legacy).
pub mod cluster_serde {
    use super::ClusterId;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the wire form.
    pub fn serialize<S: Serializer>(cluster: &ClusterId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&cluster.to_wire())
    }

    /// Reads the wire form, refusing anything else.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ClusterId, D::Error> {
        let text = String::deserialize(d)?;
        ClusterId::parse(&text).map_err(serde::de::Error::custom)
    }

    /// For `skip_serializing_if`: the legacy cluster is left out.
    pub fn is_legacy(cluster: &ClusterId) -> bool {
        cluster.is_legacy()
    }
}

/// A container launch as the scheduler asks for it. Paths are relative to the container's own
/// directory under the agent's work root; nothing may point outside it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Container id (from the scheduler; unique per cluster).
    pub container_id: u64,
    /// The launching scheduler run's cluster id.
    #[serde(default, with = "cluster_serde", skip_serializing_if = "cluster_serde::is_legacy")]
    pub cluster: ClusterId,
    /// Application id.
    pub app_id: u64,
    /// Program and arguments; `argv[0]` is looked up in `PATH` if it has no slash.
    pub argv: Vec<String>,
    /// Extra environment variables (the agent adds `GANTRY_*` and GPU variables).
    pub env: Vec<(String, String)>,
    /// Working directory relative to the container directory (default: the container directory).
    pub workdir: Option<String>,
    /// Account to run as (default: the agent's configured container user, else a uid of the
    /// submitter's own).
    pub user: Option<String>,
    /// The user who submitted the application (who a dynamic uid is for); empty from schedulers
    /// older than isolation.
    #[serde(default)]
    pub submitter: String,
    /// Most processes and threads at once; `None`: the node's `[isolation] max_pids`, 0: none.
    #[serde(default)]
    pub max_pids: Option<u64>,
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
    /// Disk allowance in bytes (what its files may hold); 0 = the node's default
    /// (`container_disk_bytes`).
    #[serde(default)]
    pub disk_bytes: u64,
}

impl LaunchSpec {
    /// The container this launch makes.
    pub fn key(&self) -> ContainerKey {
        ContainerKey::new(self.cluster, self.container_id)
    }
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
    /// Killed by the agent because its files held more than its disk allowance.
    DiskLimit,
}

impl ExitReason {
    /// A short kebab-case name (`exited`, `signaled`, `killed-by-request`, `memory-limit`, `lost`,
    /// `fenced`, `disk-limit`), used in metrics labels and logs.
    pub fn name(&self) -> &'static str {
        match self {
            ExitReason::Exited { .. } => "exited",
            ExitReason::Signaled { .. } => "signaled",
            ExitReason::KilledByRequest => "killed-by-request",
            ExitReason::MemoryLimit => "memory-limit",
            ExitReason::Lost => "lost",
            ExitReason::Fenced => "fenced",
            ExitReason::DiskLimit => "disk-limit",
        }
    }

    /// An exit status in the shell's convention: the code, or 128 + signal, or 137 for kills.
    pub fn exit_code(&self) -> i32 {
        match *self {
            ExitReason::Exited { code } => code,
            ExitReason::Signaled { signal } => 128 + signal,
            ExitReason::KilledByRequest
            | ExitReason::MemoryLimit
            | ExitReason::Fenced
            | ExitReason::DiskLimit => 137,
            ExitReason::Lost => -1,
        }
    }
}

/// A container's end, as reported to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerExit {
    /// Container id.
    pub container_id: u64,
    /// Its cluster id.
    #[serde(default, with = "cluster_serde", skip_serializing_if = "cluster_serde::is_legacy")]
    pub cluster: ClusterId,
    /// Why it ended.
    pub reason: ExitReason,
    /// When it ended, Unix ms (as observed; for exits during an agent outage, as recorded by the
    /// container's supervisor).
    pub finished_at_ms: u64,
    /// For [`ExitReason::MemoryLimit`]: the memory it was seen using and its limit, so the user
    /// is told how far over it went (as YARN's "1.1 GB of 1 GB physical memory used").
    #[serde(default)]
    pub memory: Option<MemorySeen>,
    /// For [`ExitReason::DiskLimit`]: the disk it was seen using and its allowance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskSeen>,
}

/// The disk a container was killed for: what its files held when measured, and its allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DiskSeen {
    /// Bytes its files held (allocated blocks) when the agent measured them.
    pub used_bytes: u64,
    /// Its allowance, bytes.
    pub limit_bytes: u64,
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

impl ContainerExit {
    /// An exit of container `key` with nothing known beyond its reason and time.
    pub fn new(key: ContainerKey, reason: ExitReason, finished_at_ms: u64) -> ContainerExit {
        ContainerExit {
            container_id: key.id,
            cluster: key.cluster,
            reason,
            finished_at_ms,
            memory: None,
            disk: None,
        }
    }

    /// The container that ended.
    pub fn key(&self) -> ContainerKey {
        ContainerKey::new(self.cluster, self.container_id)
    }
}

/// Resource use of one container.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ContainerUsage {
    /// Container id.
    pub container_id: u64,
    /// Its cluster id.
    #[serde(default, with = "cluster_serde", skip_serializing_if = "cluster_serde::is_legacy")]
    pub cluster: ClusterId,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_read_back_and_legacy_ones_are_bare_ids() {
        let cluster = ClusterId::parse("00000000000000000000000000000abc").expect("cluster id");
        for key in
            [ContainerKey::legacy(7), ContainerKey::new(cluster, 7), ContainerKey::new(cluster, u64::MAX)]
        {
            assert_eq!(ContainerKey::from_name(&key.to_string()), Some(key), "{key}");
        }
        assert_eq!(ContainerKey::legacy(12).to_string(), "12", "the layout of agents before cluster ids");
        assert_eq!(ContainerKey::new(cluster, 12).to_string(), "12.00000000000000000000000000000abc");
        for other in
            ["", "x", "07", "+7", "7.", ".7", "7.ABC", "7.abc", "7.0000000000000000000000000000abc/..", "tmp"]
        {
            assert_eq!(ContainerKey::from_name(other), None, "{other:?}");
        }
    }

    #[test]
    fn records_without_a_cluster_read_as_legacy() {
        let exit: ContainerExit =
            serde_json::from_str(r#"{"container_id":3,"reason":{"reason":"lost"},"finished_at_ms":5}"#)
                .expect("an exit written before cluster ids");
        assert_eq!(exit.key(), ContainerKey::legacy(3));
        assert!(!serde_json::to_string(&exit).expect("json").contains("cluster"));
    }
}
