//! Measuring the machine: host CPU and memory, GPUs (and the containers using them), and the
//! [`NodeReport`] the agent registers with. Processes are read by [`crate::procfs`].
//!
//! Host numbers are read straight from `/proc/stat` and `/proc/meminfo` rather than through the
//! `sysinfo` crate: the agent has a 20 MB RSS budget and samples every second, these two files are
//! all it needs, and reading them into buffers that live between samples keeps the hot path free
//! of allocations. GPUs come from NVML through `nvml-wrapper`, which loads the library at run time,
//! so a machine without the NVIDIA driver still runs the agent and reports zero GPUs.

use crate::config::AgentConfig;
use crate::model::{ContainerUsage, GpuInfo, HostUsage, NodeReport, Resources};
use crate::procfs::{ProcStat, clock_ticks_per_second};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Why a measurement failed.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// A kernel interface file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A kernel interface file did not have the expected format.
    #[error("cannot parse {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

const PROC_STAT: &str = "/proc/stat";
const PROC_MEMINFO: &str = "/proc/meminfo";

/// Logical CPUs online (`_SC_NPROCESSORS_ONLN`).
pub fn online_cpus() -> Option<u32> {
    let n = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN).ok().flatten()?;
    u32::try_from(n).ok().filter(|&n| n > 0)
}

/// Reads a whole file into `buf`, reusing its capacity.
fn read_into(path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    File::open(path)?.read_to_end(buf).map(|_| ())
}

fn read_error(path: &str) -> impl FnOnce(io::Error) -> ProbeError + '_ {
    move |source| ProbeError::Read { path: PathBuf::from(path), source }
}

fn parse_error(path: &str, message: impl Into<String>) -> ProbeError {
    ProbeError::Parse { path: PathBuf::from(path), message: message.into() }
}

/// Aggregate CPU time of the host from `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// All time: user, nice, system, idle, iowait, irq, softirq and steal. (Guest time is already
    /// part of user and nice, so it is not added again.)
    pub total: u64,
    /// Time doing nothing: idle + iowait.
    pub idle: u64,
    /// Number of `cpuN` lines, i.e. logical CPUs online.
    pub cpus: u32,
}

impl CpuTimes {
    /// Busy (non-idle) ticks.
    pub fn busy(&self) -> u64 {
        self.total.saturating_sub(self.idle)
    }

    /// Fraction of time busy between `earlier` and `self`, all CPUs together, in 0..=1; `None`
    /// when no time passed. Counters that went backwards (iowait can, on some kernels) count as 0.
    pub fn busy_fraction_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return None;
        }
        let busy = self.busy().saturating_sub(earlier.busy());
        Some((busy as f64 / total as f64).clamp(0.0, 1.0))
    }
}

/// Parses the text of `/proc/stat`: the aggregate `cpu` line and the count of `cpuN` lines.
pub fn parse_proc_stat(text: &str) -> Result<CpuTimes, String> {
    let mut times = None;
    let mut cpus = 0u32;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            // The cpu lines come first; nothing after them is needed.
            if times.is_some() {
                break;
            }
            continue;
        };
        if rest.starts_with(' ') {
            let mut fields = [0u64; 8];
            let mut n = 0;
            for (slot, word) in fields.iter_mut().zip(rest.split_ascii_whitespace()) {
                *slot = word.parse().map_err(|_| format!("bad number `{word}` in the cpu line"))?;
                n += 1;
            }
            if n < 4 {
                return Err(format!("the cpu line has {n} fields, fewer than 4"));
            }
            let [user, nice, system, idle, iowait, irq, softirq, steal] = fields;
            let total = [user, nice, system, idle, iowait, irq, softirq, steal]
                .iter()
                .fold(0u64, |sum, &v| sum.saturating_add(v));
            times = Some(CpuTimes { total, idle: idle.saturating_add(iowait), cpus: 0 });
        } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
            cpus += 1;
        }
    }
    let mut times = times.ok_or("no aggregate cpu line")?;
    times.cpus = cpus;
    Ok(times)
}

/// Memory figures from `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    /// MemTotal.
    pub total_bytes: u64,
    /// MemAvailable (or, on kernels older than 3.14 that lack it, MemFree + Buffers + Cached).
    pub available_bytes: u64,
}

/// Parses the text of `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, String> {
    let (mut total, mut available, mut free, mut buffers, mut cached) = (None, None, 0u64, 0u64, 0u64);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        if !matches!(key, "MemTotal" | "MemAvailable" | "MemFree" | "Buffers" | "Cached") {
            continue;
        }
        let mut words = value.split_ascii_whitespace();
        let number: u64 = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| format!("bad value for {key}: `{}`", value.trim()))?;
        let bytes = match words.next() {
            Some("kB") => number.saturating_mul(1024),
            None => number,
            Some(unit) => return Err(format!("unknown unit `{unit}` for {key}")),
        };
        match key {
            "MemTotal" => total = Some(bytes),
            "MemAvailable" => available = Some(bytes),
            "MemFree" => free = bytes,
            "Buffers" => buffers = bytes,
            _ => cached = bytes,
        }
    }
    let total_bytes = total.ok_or("no MemTotal line")?;
    let available_bytes =
        available.unwrap_or_else(|| free.saturating_add(buffers).saturating_add(cached)).min(total_bytes);
    Ok(MemInfo { total_bytes, available_bytes })
}

/// Reads `/proc/meminfo` once.
pub fn read_meminfo() -> Result<MemInfo, ProbeError> {
    let mut buf = Vec::new();
    read_meminfo_into(&mut buf)
}

fn read_meminfo_into(buf: &mut Vec<u8>) -> Result<MemInfo, ProbeError> {
    read_into(Path::new(PROC_MEMINFO), buf).map_err(read_error(PROC_MEMINFO))?;
    let text = std::str::from_utf8(buf).map_err(|e| parse_error(PROC_MEMINFO, e.to_string()))?;
    parse_meminfo(text).map_err(|m| parse_error(PROC_MEMINFO, m))
}

fn read_cpu_times_into(buf: &mut Vec<u8>) -> Result<CpuTimes, ProbeError> {
    read_into(Path::new(PROC_STAT), buf).map_err(read_error(PROC_STAT))?;
    let text = std::str::from_utf8(buf).map_err(|e| parse_error(PROC_STAT, e.to_string()))?;
    parse_proc_stat(text).map_err(|m| parse_error(PROC_STAT, m))
}

/// Samples host CPU and memory. It keeps the previous `/proc/stat` reading, so each
/// [`sample`](Self::sample) reports CPU use over the interval since the one before, and it reuses
/// its read buffer, so sampling every second allocates nothing.
#[derive(Debug)]
pub struct HostSampler {
    buf: Vec<u8>,
    prev: CpuTimes,
    last_usage: f64,
    ticks_per_second: f64,
}

impl HostSampler {
    /// Takes the first reading. Until a later sample sees time pass, CPU use is the average since
    /// boot.
    pub fn new() -> Result<Self, ProbeError> {
        let mut buf = Vec::with_capacity(16 * 1024);
        let prev = read_cpu_times_into(&mut buf)?;
        let last_usage = prev.busy_fraction_since(&CpuTimes::default()).unwrap_or(0.0);
        Ok(HostSampler { buf, prev, last_usage, ticks_per_second: clock_ticks_per_second() as f64 })
    }

    /// Reads `/proc/stat` and `/proc/meminfo` now. `cpu_usage` covers the time since the previous
    /// sample (if no clock tick passed since, the previous figure is repeated).
    pub fn sample(&mut self) -> Result<HostUsage, ProbeError> {
        let now = read_cpu_times_into(&mut self.buf)?;
        if let Some(usage) = now.busy_fraction_since(&self.prev) {
            self.last_usage = usage;
        }
        self.prev = now;
        let mem = read_meminfo_into(&mut self.buf)?;
        let cpu_cores = if now.cpus > 0 { now.cpus } else { online_cpus().unwrap_or(1) };
        Ok(HostUsage {
            cpu_cores,
            cpu_usage: self.last_usage,
            cpu_seconds_total: now.busy() as f64 / self.ticks_per_second,
            memory_total_bytes: mem.total_bytes,
            memory_available_bytes: mem.available_bytes,
            memory_used_bytes: mem.total_bytes.saturating_sub(mem.available_bytes),
        })
    }
}

/// The session a process belongs to, if it exists. A container's shim leads a session of its
/// own, but a process can leave it: to tell which container a process belongs to, use
/// [`container_of_pid`](crate::procfs::container_of_pid).
pub fn session_of(pid: u32) -> Option<i32> {
    ProcStat::read(pid).and_then(|s| i32::try_from(s.session).ok())
}

/// `nvmlDeviceGetMigMode`'s value for "enabled" (`NVML_DEVICE_MIG_ENABLE` in `nvml.h`).
const NVML_MIG_ENABLED: u32 = 1;

/// GPUs, as NVML sees them at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSample {
    /// One entry per usable device: physical GPUs, and MIG instances in place of GPUs in MIG mode.
    pub gpus: Vec<GpuInfo>,
    /// Why there are no GPUs, when there are none.
    pub note: Option<String>,
}

/// Reads GPUs through NVML. NVML is loaded once, when the probe is made; without it (no driver,
/// no library) every sample is empty with a note saying why, and that note is logged once, not
/// once per sample.
///
/// Devices are numbered as NVML numbers them. A GPU in MIG mode is replaced by its MIG instances,
/// each its own device with `mig = true` and an index after all physical GPUs (so the scheduler
/// counts and hands out instances, which is what CUDA can use on such a GPU); the GPU's own index
/// is then left unused. A field NVML cannot give (say, utilisation on a MIG instance) is reported
/// as empty or zero rather than losing the device.
pub struct GpuProbe {
    nvml: Option<Nvml>,
    init_note: Option<String>,
    logged_note: Option<String>,
    notes_logged: u32,
    lost_warned: Vec<u32>,
}

impl std::fmt::Debug for GpuProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuProbe")
            .field("nvml", &self.nvml.is_some())
            .field("init_note", &self.init_note)
            .field("notes_logged", &self.notes_logged)
            .finish()
    }
}

impl GpuProbe {
    /// Loads NVML from the system's default library (`libnvidia-ml.so`).
    pub fn new() -> Self {
        Self::from_init(Nvml::init())
    }

    /// Loads NVML from a given library file (for unusual installs, and to test the path without
    /// NVML on any machine).
    pub fn with_library(path: impl AsRef<OsStr>) -> Self {
        Self::from_init(Nvml::builder().lib_path(path.as_ref()).init())
    }

    fn from_init(init: Result<Nvml, NvmlError>) -> Self {
        let mut probe = GpuProbe {
            nvml: None,
            init_note: None,
            logged_note: None,
            notes_logged: 0,
            lost_warned: Vec::new(),
        };
        match init {
            Ok(nvml) => probe.nvml = Some(nvml),
            Err(e) => {
                let note = format!("NVML not available: {e}");
                probe.log_note(&note);
                probe.init_note = Some(note);
            }
        }
        probe
    }

    /// Whether NVML was loaded.
    pub fn nvml_loaded(&self) -> bool {
        self.nvml.is_some()
    }

    /// How many times a "no GPUs" note has been logged; it is logged when it first appears or
    /// changes, never once per sample.
    pub fn notes_logged(&self) -> u32 {
        self.notes_logged
    }

    fn log_note(&mut self, note: &str) {
        if self.logged_note.as_deref() != Some(note) {
            tracing::info!(note, "reporting zero GPUs");
            self.logged_note = Some(note.to_owned());
            self.notes_logged += 1;
        }
    }

    /// Reads every device now. `container_of` maps a pid using a GPU to the container it belongs
    /// to (e.g. through [`container_of_pid`](crate::procfs::container_of_pid)); pids it maps to `None` are not reported.
    pub fn sample(&mut self, container_of: impl Fn(u32) -> Option<u64>) -> GpuSample {
        let (gpus, note) = match &self.nvml {
            None => (Vec::new(), self.init_note.clone()),
            Some(nvml) => match nvml.device_count() {
                Err(e) => (Vec::new(), Some(format!("NVML cannot count GPUs: {e}"))),
                Ok(count) => {
                    let gpus = read_devices(nvml, count, &container_of, &mut self.lost_warned);
                    let note = gpus.is_empty().then(|| {
                        if count == 0 {
                            "NVML found no GPUs".to_owned()
                        } else {
                            format!("NVML found {count} GPUs but none is usable")
                        }
                    });
                    (gpus, note)
                }
            },
        };
        match &note {
            Some(n) => self.log_note(n),
            None => self.logged_note = None,
        }
        GpuSample { gpus, note }
    }
}

impl Default for GpuProbe {
    fn default() -> Self {
        Self::new()
    }
}

fn read_devices(
    nvml: &Nvml,
    count: u32,
    container_of: &impl Fn(u32) -> Option<u64>,
    lost_warned: &mut Vec<u32>,
) -> Vec<GpuInfo> {
    let mut gpus = Vec::with_capacity(count as usize);
    let mut next_mig_index = count;
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(d) => {
                lost_warned.retain(|&i| i != index);
                d
            }
            Err(e) => {
                if !lost_warned.contains(&index) {
                    tracing::warn!(index, error = %e, "GPU not reachable through NVML; not reported");
                    lost_warned.push(index);
                }
                continue;
            }
        };
        let mig_on = matches!(device.mig_mode(), Ok(m) if m.current == NVML_MIG_ENABLED);
        if !mig_on {
            gpus.push(describe(&device, index, false, container_of));
            continue;
        }
        let slots = device.mig_device_count().unwrap_or_else(|e| {
            tracing::debug!(index, error = %e, "NVML cannot count MIG slots");
            0
        });
        for slot in 0..slots {
            match device.mig_device_by_index(slot) {
                Ok(mig) => {
                    gpus.push(describe(&mig, next_mig_index, true, container_of));
                    next_mig_index += 1;
                }
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => {} // an empty slot
                Err(e) => tracing::debug!(index, slot, error = %e, "NVML cannot open MIG instance"),
            }
        }
    }
    gpus
}

/// Logs a field NVML could not give at debug level (it would repeat every sample) and returns
/// the fallback.
fn field<T>(index: u32, what: &'static str, result: Result<T, NvmlError>, fallback: T) -> T {
    result.unwrap_or_else(|e| {
        tracing::debug!(index, field = what, error = %e, "NVML field unavailable");
        fallback
    })
}

fn describe(
    device: &Device<'_>,
    index: u32,
    mig: bool,
    container_of: &impl Fn(u32) -> Option<u64>,
) -> GpuInfo {
    let uuid = field(index, "uuid", device.uuid(), String::new());
    let model = field(index, "name", device.name(), "unknown".to_owned());
    let (memory_total_bytes, memory_used_bytes) =
        field(index, "memory", device.memory_info().map(|m| (m.total, m.used)), (0, 0));
    let utilization_percent =
        field(index, "utilization", device.utilization_rates().map(|u| u.gpu.min(100)), 0);
    let mut containers = Vec::new();
    for (what, processes) in [
        ("compute processes", device.running_compute_processes()),
        ("graphics processes", device.running_graphics_processes()),
    ] {
        containers
            .extend(field(index, what, processes, Vec::new()).iter().filter_map(|p| container_of(p.pid)));
    }
    containers.sort_unstable();
    containers.dedup();
    GpuInfo {
        index,
        uuid,
        model,
        memory_total_bytes,
        memory_used_bytes,
        utilization_percent,
        mig,
        containers,
    }
}

/// What the agent registers and reports. Capacity is what the machine has: logical CPUs × 1000
/// millicores, MemTotal, and one GPU per reported device (MIG instances count one each when a
/// GPU is in MIG mode). Allocatable is capacity less the configured reserve, saturating at zero,
/// as kubelet computes it. Name, rack and labels come from the configuration.
pub fn node_report(
    config: &AgentConfig,
    host: HostUsage,
    gpus: Vec<GpuInfo>,
    gpu_note: Option<String>,
    containers: Vec<ContainerUsage>,
) -> NodeReport {
    let capacity = Resources {
        cpu_millis: u64::from(host.cpu_cores).saturating_mul(1000),
        memory_bytes: host.memory_total_bytes,
        gpus: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
    };
    let reserve = &config.reserve;
    let allocatable = Resources {
        cpu_millis: capacity.cpu_millis.saturating_sub(reserve.cpu_millis),
        memory_bytes: capacity.memory_bytes.saturating_sub(reserve.memory_bytes),
        gpus: capacity.gpus.saturating_sub(reserve.gpus),
    };
    NodeReport {
        name: config.node_name(),
        rack: config.rack.clone(),
        labels: config.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        capacity,
        allocatable,
        usage: host,
        gpus,
        gpu_note,
        containers,
    }
}

/// Measures the machine once, for `gantry-agent probe`: host usage over `interval` (blocking for
/// that long), GPUs with their containers unresolved, and no containers.
pub fn probe_node(config: &AgentConfig, interval: Duration) -> Result<NodeReport, ProbeError> {
    let mut host = HostSampler::new()?;
    let mut gpus = GpuProbe::new();
    std::thread::sleep(interval);
    let usage = host.sample()?;
    let sample = gpus.sample(|_| None);
    Ok(node_report(config, usage, sample.gpus, sample.note, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 20 3 2 10 7 1\n\
                        cpu0 50 2 25 400 10 1 1 5 3 0\n\
                        cpu1 50 3 25 400 10 2 1 5 4 1\n\
                        intr 12345 0 0\n\
                        ctxt 999\n";

    #[test]
    fn proc_stat_sums_all_but_guest_and_counts_cpus() {
        let t = parse_proc_stat(STAT).expect("parses");
        assert_eq!(t.total, 100 + 5 + 50 + 800 + 20 + 3 + 2 + 10, "guest is inside user already");
        assert_eq!(t.idle, 820, "idle + iowait");
        assert_eq!(t.busy(), 170);
        assert_eq!(t.cpus, 2);
        let old = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").expect("4-field kernels");
        assert_eq!((old.total, old.idle, old.cpus), (10, 4, 1));
        for bad in ["", "intr 1 2\n", "cpu 1 2 x 4\n", "cpu 1 2\n"] {
            assert!(parse_proc_stat(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn busy_fraction_is_over_the_interval_and_clamped() {
        let a = CpuTimes { total: 1000, idle: 800, cpus: 2 };
        let b = CpuTimes { total: 1200, idle: 850, cpus: 2 };
        assert_eq!(b.busy_fraction_since(&a), Some(0.75));
        assert_eq!(a.busy_fraction_since(&a), None, "no time passed");
        let backwards = CpuTimes { total: 1100, idle: 950, cpus: 2 };
        assert_eq!(backwards.busy_fraction_since(&a), Some(0.0), "busy went backwards");
    }

    #[test]
    fn meminfo_in_bytes_with_a_fallback_for_old_kernels() {
        let m = parse_meminfo("MemTotal:  1000 kB\nMemFree:  100 kB\nMemAvailable:  600 kB\nCached: 5 kB\n")
            .expect("parses");
        assert_eq!(m, MemInfo { total_bytes: 1_024_000, available_bytes: 614_400 });
        let old = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 30 kB\n")
            .expect("parses");
        assert_eq!(old.available_bytes, 150 * 1024);
        for bad in ["MemFree: 1 kB\n", "MemTotal: x kB\n", "MemTotal: 1 MB\n"] {
            assert!(parse_meminfo(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reserve_is_subtracted_saturating() {
        let mut config =
            AgentConfig { node_name: Some("n1".into()), rack: "r1".into(), ..Default::default() };
        config.labels.insert("zone".into(), "b".into());
        config.reserve.cpu_millis = 500;
        config.reserve.memory_bytes = 1 << 30;
        config.reserve.gpus = 5;
        let host = HostUsage { cpu_cores: 4, memory_total_bytes: 8 << 30, ..Default::default() };
        let gpu = GpuInfo {
            index: 0,
            uuid: "GPU-x".into(),
            model: "m".into(),
            memory_total_bytes: 1,
            memory_used_bytes: 0,
            utilization_percent: 0,
            mig: false,
            containers: vec![],
        };
        let r = node_report(&config, host, vec![gpu], None, vec![]);
        assert_eq!(r.capacity, Resources { cpu_millis: 4000, memory_bytes: 8 << 30, gpus: 1 });
        assert_eq!(r.allocatable, Resources { cpu_millis: 3500, memory_bytes: 7 << 30, gpus: 0 });
        assert_eq!((r.name.as_str(), r.rack.as_str()), ("n1", "r1"));
        assert_eq!(r.labels, vec![("zone".to_owned(), "b".to_owned())]);
    }

    #[test]
    fn missing_nvml_gives_a_note_logged_once() {
        let mut probe = GpuProbe::with_library("/nonexistent/libnvidia-ml.so.1");
        assert!(!probe.nvml_loaded());
        for _ in 0..3 {
            let s = probe.sample(|_| Some(1));
            assert!(s.gpus.is_empty());
            assert!(s.note.as_deref().is_some_and(|n| n.starts_with("NVML not available")), "{s:?}");
        }
        assert_eq!(probe.notes_logged(), 1);
    }

    #[test]
    fn probes_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<HostSampler>();
        send::<GpuProbe>();
    }
}
