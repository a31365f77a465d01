//! The scheduler's own `/metrics`: the scheduling loop (pending demand, allocations, cycle
//! time), plugins (hook latency, rejected decisions, failures, quarantine), queues (guaranteed,
//! maximum, used and pending resources), the cluster (nodes, applications and containers by
//! state, connected agents) and the store (group-commit latency and batch size).
//!
//! The engine is sans-IO and keeps no metrics of its own beyond [`gantry_engine::EngineStats`],
//! so the daemon feeds this module: plain-value setters for what only the daemon sees (agent
//! streams, submissions, store commits, cycle time), [`SchedulerMetrics::update_from_engine`] for
//! everything the engine's state and counters already say, and [`TimedPolicy`] around each
//! plugin for hook latency (the engine owns no clock, so it cannot time its plugins itself).
//!
//! The exposition (OpenMetrics for Prometheus, the classic text format 0.0.4 for everything else,
//! chosen by the `Accept` header) is the agent's, shared through `gantry-exposition`.
//!
//! Split by concern: the label sets and gauge types (`labels.rs`), the registration of every
//! metric (`register.rs`), what only the daemon sees (`daemon.rs`), what the engine knows
//! (`engine.rs`), the timing of plugins (`timed_policy.rs`); this file holds the registry, its
//! lock and the exposition.

#![forbid(unsafe_code)]

mod daemon;
mod engine;
mod labels;
mod register;
#[cfg(test)]
mod tests;
mod timed_policy;

pub use timed_policy::TimedPolicy;

use gantry_exposition::StateLabels;
use gantry_sdk::abi::*;
use labels::*;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, PoisonError};
use thiserror::Error;

pub use gantry_exposition::Format;

/// The `plugin` label of the built-in first-fit FIFO, which stands in for a failed or
/// quarantined placement plugin (its decisions are never rejected; the series shows it).
pub const BUILTIN_PLUGIN: &str = "builtin";

/// Why the metrics could not be encoded.
#[derive(Debug, Error)]
pub enum MetricsError {
    /// The registry could not be written in the asked format.
    #[error("cannot encode the scheduler's metrics: {0}")]
    Exposition(#[from] gantry_exposition::ExpositionError),
}

/// An amount of resources in plain numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amount {
    /// CPU in millicores (exported in cores).
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Whole GPUs.
    pub gpus: u64,
}

impl From<GantryResources> for Amount {
    fn from(r: GantryResources) -> Self {
        Amount { cpu_millis: r.cpu_millis, memory_bytes: r.memory_bytes, gpus: u64::from(r.gpus) }
    }
}

/// One queue's figures, all in absolute resources (not shares of the parent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSample<'a> {
    /// Full dotted path, e.g. `root.prod`.
    pub path: &'a str,
    /// What the queue is guaranteed at the current cluster size.
    pub guaranteed: Amount,
    /// What it may grow to using idle capacity.
    pub maximum: Amount,
    /// What its live containers (and its children's) hold.
    pub used: Amount,
    /// What its pending requests (and its children's) still ask for.
    pub pending: Amount,
}

/// Which labelled series exist, so that series of things that are gone can be removed, and so
/// that a scrape never sees a half-applied update (updates and encoding both hold it).
#[derive(Debug, Default)]
pub(super) struct Series {
    queues: HashSet<String>,
    nodes: HashSet<String>,
    nodes_idle: HashSet<String>,
    idle_nodes: HashSet<String>,
    conditions: HashSet<ConditionLabels>,
    apps: HashSet<String>,
    containers: HashSet<String>,
}

/// The scheduler's metrics. Share it behind an [`Arc`]: every method takes `&self`.
#[derive(Debug)]
pub struct SchedulerMetrics {
    registry: Registry,
    series: Mutex<Series>,

    pending_requests: IntGauge,
    pending_containers: IntGauge,
    allocations: Counter,
    fallback_cycles: Counter,
    cycle_duration: Histogram,
    hook_duration: HistogramFamily<HookLabels>,
    rejected: Family<RejectLabels, Counter>,
    plugin_failures: Family<PluginLabels, Counter>,
    plugin_quarantines: Family<PluginLabels, Counter>,
    plugin_panics: Family<PluginLabels, Counter>,
    plugin_quarantined: Family<PluginLabels, IntGauge>,
    plugin_call_timeouts: Family<HookLabels, Counter>,
    submissions: Counter,

    queue_guaranteed: QueueGauges,
    queue_maximum: QueueGauges,
    queue_used: QueueGauges,
    queue_pending: QueueGauges,

    queue_preemption_candidates: Family<QueueLabels, IntGauge>,
    queue_preempted_containers: Family<QueueLabels, Counter>,
    queue_preempted_cpu_cores: Family<QueueLabels, Counter<f64, AtomicU64>>,
    queue_preempted_memory_bytes: Family<QueueLabels, Counter>,
    queue_preempted_gpus: Family<QueueLabels, Counter>,

    reservations: IntGauge,
    reservation_events: Family<OutcomeLabels, Counter>,
    reservation_plan_cpu_cores: Family<PlanLabels, FloatGauge>,
    reservation_plan_memory_bytes: Family<PlanLabels, IntGauge>,
    reservation_plan_gpus: Family<PlanLabels, IntGauge>,

    nodes: Family<StateLabels, IntGauge>,
    nodes_idle: Family<StateLabels, IntGauge>,
    node_idle_seconds: Family<NodeLabels, FloatGauge>,
    node_conditions: Family<ConditionLabels, IntGauge>,
    apps: Family<StateLabels, IntGauge>,
    containers: Family<StateLabels, IntGauge>,
    agent_streams: IntGauge,
    registrations_refused: Family<ReasonLabels, Counter>,

    store_commit_duration: Histogram,
    store_batch_size: Histogram,
    store_pruned_apps: Counter,
    store_prune_duration: Histogram,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl SchedulerMetrics {
    /// The series bookkeeping; a panic elsewhere while holding it leaves nothing half-written
    /// that matters, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The exposition in the Prometheus text format 0.0.4. Encoding into a string cannot fail
    /// with the metrics registered here; should it ever, the error is logged and the text is
    /// empty (use [`SchedulerMetrics::try_encode`] to see the error).
    pub fn encode(&self) -> String {
        self.try_encode(Format::PrometheusText).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot encode metrics");
            String::new()
        })
    }

    /// The exposition in the given format.
    pub fn try_encode(&self, format: Format) -> Result<String, MetricsError> {
        let _series = self.lock();
        expose(&self.registry, format)
    }

    /// What to answer a scrape with, given its `Accept` header: the content type and the body,
    /// OpenMetrics for Prometheus and the classic text format for everything else.
    pub fn render(&self, accept: Option<&str>) -> Result<(&'static str, String), MetricsError> {
        let format = Format::negotiate(accept);
        Ok((format.content_type(), self.try_encode(format)?))
    }
}

/// Encodes `registry` in `format`. Both daemons serve the same exposition — OpenMetrics for
/// Prometheus, the classic text format 0.0.4 for curl and `promtool`, converted from the
/// OpenMetrics text that prometheus-client writes — so that code lives once, in the
/// `gantry-exposition` crate beside `gantry-proto`, which the agent's `/metrics` uses too; this
/// function is the scheduler's one way into it.
fn expose(registry: &Registry, format: Format) -> Result<String, MetricsError> {
    Ok(gantry_exposition::encode(registry, format)?)
}
