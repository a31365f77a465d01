//! The monitor: every sampling interval it measures the host, each running container and each
//! GPU, enforces memory limits the kernel cannot (containers without a cgroup), and feeds the
//! metrics. The CPU quota needs no enforcement here: the cgroup's CFS quota throttles it.

use crate::config::AgentConfig;
use crate::executor::Executor;
use crate::metrics::AgentMetrics;
use crate::model::{ContainerUsage, GpuInfo, HostUsage, MemorySeen, NodeReport};
use crate::probe::{self, GpuProbe, HostSampler, ProbeError};
use crate::procfs;
use std::collections::HashMap;
use std::sync::Arc;

/// What one sample saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Identity, capacity, allocatable, usage, GPUs and containers, as registered and reported.
    pub report: NodeReport,
    /// Containers killed for memory in this sample.
    pub memory_kills: Vec<crate::model::ContainerKey>,
}

/// Samples and enforces; owned by the agent's main loop.
pub struct Monitor {
    config: AgentConfig,
    executor: Arc<Executor>,
    metrics: Arc<AgentMetrics>,
    host: HostSampler,
    gpus: GpuProbe,
    usages: Vec<(ContainerUsage, u64)>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").field("containers", &self.usages.len()).finish()
    }
}

impl Monitor {
    /// A monitor over `executor`'s containers, using `gpus` (initialised once by the caller).
    pub fn new(
        config: AgentConfig,
        executor: Arc<Executor>,
        metrics: Arc<AgentMetrics>,
        gpus: GpuProbe,
    ) -> Result<Self, ProbeError> {
        Ok(Monitor { config, executor, metrics, host: HostSampler::new()?, gpus, usages: Vec::new() })
    }

    /// Takes one sample: host, containers, GPUs; kills containers over their memory limit
    /// (those without a cgroup: with one, the kernel's OOM killer enforces the limit and the
    /// executor classifies the exit); updates the metrics.
    pub fn sample(&mut self) -> Result<Sample, ProbeError> {
        let host: HostUsage = self.host.sample()?;
        let running = self.executor.list();
        let mut memory_kills = Vec::new();
        self.usages.clear();
        let mut shims: HashMap<u32, u64> = HashMap::with_capacity(running.len());
        for c in running.iter().filter(|c| c.running) {
            // GPU processes are attributed by container id (the wire's `GpuUsage` has no cluster).
            shims.insert(c.shim_pid, c.key.id);
            let Ok(usage) = self.executor.usage(c.key) else {
                continue; // it ended between list() and usage(); collect_exits reports it
            };
            if usage.memory_limit_bytes > 0 && usage.memory_working_set_bytes > usage.memory_limit_bytes {
                tracing::warn!(
                    container = %c.key,
                    working_set = usage.memory_working_set_bytes,
                    limit = usage.memory_limit_bytes,
                    "container over its memory limit; killing it"
                );
                let seen = MemorySeen {
                    used_bytes: usage.memory_working_set_bytes,
                    limit_bytes: usage.memory_limit_bytes,
                };
                if self.executor.kill_for_memory(c.key, seen).is_ok() {
                    memory_kills.push(c.key);
                }
            }
            self.usages.push((usage, c.app_id));
        }
        let gpu_sample = self.gpus.sample(|pid| procfs::container_of_pid(pid, &shims));
        let gpus: Vec<GpuInfo> = gpu_sample.gpus;
        let report = probe::node_report(
            &self.config,
            host,
            gpus,
            gpu_sample.note,
            self.usages.iter().map(|(u, _)| *u).collect(),
        );
        self.metrics.update_report(&report);
        self.metrics.update_containers(&self.usages);
        let live = running.iter().filter(|c| c.running).count() as u64;
        let ended = running.len() as u64 - live;
        self.metrics.set_container_states(&[("running", live), ("exited", ended)]);
        Ok(Sample { report, memory_kills })
    }
}
