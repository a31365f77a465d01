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

#![forbid(unsafe_code)]

use gantry_engine::{Engine, Policy, PolicyError, RejectReason, ViewChanges, hook_name};
use gantry_exposition::StateLabels;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, View};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use thiserror::Error;

pub use gantry_exposition::Format;

/// The `plugin` label of the built-in first-fit FIFO, which stands in for a failed or
/// quarantined placement plugin (its decisions are never rejected; the series shows it).
pub const BUILTIN_PLUGIN: &str = "builtin";

/// Node states, as the `state` label of `gantry_nodes` spells them.
const NODE_STATES: [(u32, &str); 4] = [
    (GANTRY_NODE_RUNNING, "running"),
    (GANTRY_NODE_DRAINING, "draining"),
    (GANTRY_NODE_UNHEALTHY, "unhealthy"),
    (GANTRY_NODE_LOST, "lost"),
];

/// Application states, as the `state` label of `gantry_apps` spells them.
const APP_STATES: [(u32, &str); 7] = [
    (GANTRY_APP_NEW, "new"),
    (GANTRY_APP_ACCEPTED, "accepted"),
    (GANTRY_APP_RUNNING, "running"),
    (GANTRY_APP_FINISHED, "finished"),
    (GANTRY_APP_FAILED, "failed"),
    (GANTRY_APP_KILLED, "killed"),
    (GANTRY_APP_REJECTED, "rejected"),
];

/// Container states that hold resources, as the `state` label of `gantry_containers` spells them.
/// Ended containers are not listed: the engine drops them at its next cycle, so a gauge of them
/// would only show what ended in the last fraction of a second.
const CONTAINER_STATES: [(u32, &str); 3] = [
    (GANTRY_CONTAINER_ALLOCATED, "allocated"),
    (GANTRY_CONTAINER_RUNNING, "running"),
    (GANTRY_CONTAINER_STOPPING, "stopping"),
];

/// The extension points; the `hook` label is [`hook_name`]'s spelling.
const HOOKS: [u32; 4] = [GANTRY_HOOK_ADMIT, GANTRY_HOOK_ORDER, GANTRY_HOOK_PLACE, GANTRY_HOOK_REBALANCE];

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

/// Label of per-queue series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

/// Label of reservation outcome counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Label of the plan's gauges: `capacity` (what the plan hands out) or `reserved` (held now).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PlanLabels {
    kind: &'static str,
}

/// Label of per-plugin series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

/// Labels of hook latency.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HookLabels {
    plugin: String,
    hook: String,
}

/// Label of per-node series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

/// Label of counters by a fixed reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Labels of `gantry_node_condition`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, EncodeLabelSet)]
struct ConditionLabels {
    node: String,
    condition: String,
}

/// Labels of rejected decisions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RejectLabels {
    plugin: String,
    reason: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type IntGauge = Gauge<u64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The three resource gauges of one queue figure (guaranteed, maximum, used or pending).
#[derive(Debug, Default)]
struct QueueGauges {
    cpu_cores: Family<QueueLabels, FloatGauge>,
    memory_bytes: Family<QueueLabels, IntGauge>,
    gpus: Family<QueueLabels, IntGauge>,
}

impl QueueGauges {
    fn register(&self, registry: &mut Registry, figure: &str, help: &str) {
        registry.register(
            format!("gantry_queue_{figure}_cpu_cores"),
            format!("{help}, CPU in cores"),
            self.cpu_cores.clone(),
        );
        registry.register_with_unit(
            format!("gantry_queue_{figure}_memory"),
            format!("{help}, memory"),
            Unit::Bytes,
            self.memory_bytes.clone(),
        );
        registry.register(format!("gantry_queue_{figure}_gpus"), format!("{help}, GPUs"), self.gpus.clone());
    }

    fn set(&self, labels: &QueueLabels, amount: Amount) {
        self.cpu_cores.get_or_create(labels).set(amount.cpu_millis as f64 / 1000.0);
        self.memory_bytes.get_or_create(labels).set(amount.memory_bytes);
        self.gpus.get_or_create(labels).set(amount.gpus);
    }

    fn remove(&self, labels: &QueueLabels) {
        self.cpu_cores.remove(labels);
        self.memory_bytes.remove(labels);
        self.gpus.remove(labels);
    }
}

/// Which labelled series exist, so that series of things that are gone can be removed, and so
/// that a scrape never sees a half-applied update (updates and encoding both hold it).
#[derive(Debug, Default)]
struct Series {
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

/// Buckets for the cycle and for plugin hooks: 50 µs to about 1.6 s. A cycle over a few thousand
/// nodes takes around a millisecond; the upper buckets catch a plugin that stalls the loop.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Raises a counter to `total` if that is higher: counters that mirror a running total kept
/// elsewhere (the engine's) must never go down, even if that total is reset.
fn raise_to(counter: &Counter, total: u64) {
    let current = counter.get();
    if total > current {
        counter.inc_by(total - current);
    }
}

/// Counts records by state, in the order of `names`; states not in `names` are not counted.
fn count_states<'a>(names: &[(u32, &'a str)], states: impl Iterator<Item = u32>) -> Vec<(&'a str, u64)> {
    let mut counts: Vec<(&str, u64)> = names.iter().map(|(_, name)| (*name, 0)).collect();
    for state in states {
        if let Some(i) = names.iter().position(|(id, _)| *id == state) {
            counts[i].1 += 1;
        }
    }
    counts
}

impl SchedulerMetrics {
    /// Registers every metric. Counters with known label values (rejection reasons) are created
    /// at 0, and every state is listed, so that `rate()` and alerts work from the first scrape.
    pub fn new() -> Self {
        let mut m = SchedulerMetrics {
            registry: Registry::default(),
            series: Mutex::new(Series::default()),
            pending_requests: IntGauge::default(),
            pending_containers: IntGauge::default(),
            allocations: Counter::default(),
            fallback_cycles: Counter::default(),
            cycle_duration: latency_histogram(),
            hook_duration: Family::new_with_constructor(latency_histogram),
            rejected: Family::default(),
            plugin_failures: Family::default(),
            plugin_quarantines: Family::default(),
            plugin_panics: Family::default(),
            plugin_quarantined: Family::default(),
            plugin_call_timeouts: Family::default(),
            submissions: Counter::default(),
            queue_guaranteed: QueueGauges::default(),
            queue_maximum: QueueGauges::default(),
            queue_used: QueueGauges::default(),
            queue_pending: QueueGauges::default(),
            queue_preemption_candidates: Family::default(),
            reservations: IntGauge::default(),
            reservation_events: Family::default(),
            reservation_plan_cpu_cores: Family::default(),
            reservation_plan_memory_bytes: Family::default(),
            reservation_plan_gpus: Family::default(),
            queue_preempted_containers: Family::default(),
            queue_preempted_cpu_cores: Family::default(),
            queue_preempted_memory_bytes: Family::default(),
            queue_preempted_gpus: Family::default(),
            nodes: Family::default(),
            nodes_idle: Family::default(),
            node_idle_seconds: Family::default(),
            node_conditions: Family::default(),
            apps: Family::default(),
            containers: Family::default(),
            agent_streams: IntGauge::default(),
            registrations_refused: Family::default(),
            // Group commits wait for one fsync: from a fraction of a millisecond on NVMe to tens
            // of milliseconds on spinning disks; 100 µs to about 3.3 s.
            store_commit_duration: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            // Writes per commit: 1 when idle, thousands under a burst of submissions.
            store_batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            store_pruned_apps: Counter::default(),
            // A round with nothing to remove takes a millisecond; one through a backlog of a
            // million ended apps, minutes: 1 ms to about 9 min.
            store_prune_duration: Histogram::new(exponential_buckets(0.001, 2.0, 20)),
        };
        let r = &mut m.registry;

        r.register(
            "gantry_scheduler_pending_requests",
            "Requests of admitted applications that still have containers to place",
            m.pending_requests.clone(),
        );
        r.register(
            "gantry_scheduler_pending_containers",
            "Containers that admitted applications ask for and that are not placed yet",
            m.pending_containers.clone(),
        );
        r.register(
            "gantry_scheduler_allocations",
            "Containers placed on a node (launch commands issued) since the scheduler started",
            m.allocations.clone(),
        );
        r.register(
            "gantry_scheduler_fallback_placement_cycles",
            "Cycles whose placement was made by the built-in first-fit FIFO because the configured \
             place plugin failed or is quarantined",
            m.fallback_cycles.clone(),
        );
        r.register_with_unit(
            "gantry_scheduler_cycle_duration",
            "Time one scheduling cycle (admit, order, place, validate, commit, rebalance) takes",
            Unit::Seconds,
            m.cycle_duration.clone(),
        );
        r.register_with_unit(
            "gantry_scheduler_plugin_hook_duration",
            "Time a plugin takes to answer one hook call",
            Unit::Seconds,
            m.hook_duration.clone(),
        );
        r.register(
            "gantry_scheduler_rejected_decisions",
            "Plugin decisions the engine refused to apply, by plugin and reason",
            m.rejected.clone(),
        );
        r.register(
            "gantry_scheduler_plugin_failures",
            "Plugin calls that failed: error, panic, broken protocol or malformed decisions",
            m.plugin_failures.clone(),
        );
        r.register(
            "gantry_scheduler_plugin_quarantines",
            "Times a plugin was quarantined after failing repeatedly",
            m.plugin_quarantines.clone(),
        );
        r.register(
            "gantry_scheduler_plugin_panics",
            "Plugin calls that panicked (caught at the boundary; each also counts as a failure)",
            m.plugin_panics.clone(),
        );
        r.register(
            "gantry_scheduler_plugin_quarantined",
            "1 while a plugin is quarantined and the built-in policy stands in for it, else 0",
            m.plugin_quarantined.clone(),
        );
        r.register(
            "gantry_scheduler_plugin_call_timeouts",
            "Plugin calls that ran past the plugin's call_budget_ms (each also counts as a failure)",
            m.plugin_call_timeouts.clone(),
        );
        r.register(
            "gantry_scheduler_submissions",
            "Application submissions acknowledged (committed to the store)",
            m.submissions.clone(),
        );
        m.queue_guaranteed.register(
            r,
            "guaranteed",
            "Capacity guaranteed to a queue at the current cluster size",
        );
        m.queue_maximum.register(r, "maximum", "Capacity a queue may grow to by using idle capacity");
        m.queue_used.register(r, "used", "Resources held by a queue's live containers, children included");
        m.queue_pending.register(
            r,
            "pending",
            "Resources a queue's admitted requests still ask for, children included",
        );
        r.register(
            "gantry_queue_preemption_candidates",
            "Containers of a leaf queue a rebalance policy has marked for preemption and not stopped yet",
            m.queue_preemption_candidates.clone(),
        );
        r.register(
            "gantry_queue_preempted_containers",
            "Containers of a leaf queue stopped by a rebalance policy (preempted or killed)",
            m.queue_preempted_containers.clone(),
        );
        r.register(
            "gantry_queue_preempted_cpu_cores",
            "CPU held by the containers of a leaf queue that a rebalance policy stopped, in cores",
            m.queue_preempted_cpu_cores.clone(),
        );
        r.register_with_unit(
            "gantry_queue_preempted_memory",
            "Memory held by the containers of a leaf queue that a rebalance policy stopped",
            Unit::Bytes,
            m.queue_preempted_memory_bytes.clone(),
        );
        r.register(
            "gantry_queue_preempted_gpus",
            "GPUs held by the containers of a leaf queue that a rebalance policy stopped",
            m.queue_preempted_gpus.clone(),
        );
        r.register(
            "gantry_reservations",
            "Reservations accepted into the plan and not ended",
            m.reservations.clone(),
        );
        r.register(
            "gantry_reservation_events",
            "Reservation outcomes: admitted, rejected (no room), moved (allocation changed), expired, deleted, replan_rejected (dropped after a capacity loss)",
            m.reservation_events.clone(),
        );
        r.register(
            "gantry_reservation_plan_cpu_cores",
            "The reservation plan now: capacity it hands out and CPU reserved, in cores",
            m.reservation_plan_cpu_cores.clone(),
        );
        r.register_with_unit(
            "gantry_reservation_plan_memory",
            "The reservation plan now: capacity it hands out and memory reserved",
            Unit::Bytes,
            m.reservation_plan_memory_bytes.clone(),
        );
        r.register(
            "gantry_reservation_plan_gpus",
            "The reservation plan now: capacity it hands out and GPUs reserved",
            m.reservation_plan_gpus.clone(),
        );
        r.register("gantry_nodes", "Nodes known to the scheduler, by state", m.nodes.clone());
        r.register(
            "gantry_nodes_idle",
            "Nodes that hold no container and are not lost, by state: what an autoscaler could remove",
            m.nodes_idle.clone(),
        );
        r.register_with_unit(
            "gantry_node_idle",
            "How long a node has held no container (a series only while it is empty and not lost)",
            Unit::Seconds,
            m.node_idle_seconds.clone(),
        );
        r.register(
            "gantry_node_condition",
            "1 while a node's agent reports the condition (DiskPressure, LaunchFailures): the node takes no new work; no series otherwise",
            m.node_conditions.clone(),
        );
        r.register(
            "gantry_apps",
            "Applications by state; ended states count those the scheduler still remembers",
            m.apps.clone(),
        );
        r.register(
            "gantry_containers",
            "Containers holding resources in the cluster, by state",
            m.containers.clone(),
        );
        r.register(
            "gantry_agent_streams",
            "Agents with an open stream to the scheduler",
            m.agent_streams.clone(),
        );
        r.register(
            "gantry_scheduler_registrations_refused",
            "Agent registrations refused because another live agent holds the node name, by reason",
            m.registrations_refused.clone(),
        );
        r.register_with_unit(
            "gantry_store_commit_duration",
            "Time one group commit to the store takes, fsync included",
            Unit::Seconds,
            m.store_commit_duration.clone(),
        );
        r.register(
            "gantry_store_batch_size",
            "Writes made durable by one group commit",
            m.store_batch_size.clone(),
        );
        r.register(
            "gantry_store_pruned_apps",
            "Ended applications removed from the store by its retention ([store] max_completed_apps, retain_completed_for)",
            m.store_pruned_apps.clone(),
        );
        r.register_with_unit(
            "gantry_store_prune_duration",
            "Time one pruning round of the store takes (every [store] prune_interval)",
            Unit::Seconds,
            m.store_prune_duration.clone(),
        );
        gantry_exposition::register_build_info(
            r,
            "gantry_scheduler_build_info",
            "The scheduler's version; always 1",
            env!("CARGO_PKG_VERSION"),
        );

        for reason in RejectReason::ALL {
            let _ = m.rejected.get_or_create(&RejectLabels {
                plugin: BUILTIN_PLUGIN.into(),
                reason: reason.as_str().into(),
            });
        }
        for conflict in gantry_controller::node_claim::Conflict::ALL {
            let _ = m.registrations_refused.get_or_create(&ReasonLabels { reason: conflict.as_str() });
        }
        m.set_nodes_by_state(&NODE_STATES.map(|(_, name)| (name, 0)));
        m.set_apps_by_state(&APP_STATES.map(|(_, name)| (name, 0)));
        m.set_containers_by_state(&CONTAINER_STATES.map(|(_, name)| (name, 0)));
        m
    }

    /// The series bookkeeping; a panic elsewhere while holding it leaves nothing half-written
    /// that matters, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ----- what only the daemon sees -------------------------------------------------------

    /// Records how long one scheduling cycle (one `Tick` through the engine) took.
    pub fn observe_cycle(&self, duration: Duration) {
        self.cycle_duration.observe(duration.as_secs_f64());
    }

    /// Counts a plugin call that ran past its `call_budget_ms`.
    pub fn count_plugin_call_timeout(&self, plugin: &str, hook: &str) {
        let labels = HookLabels { plugin: plugin.to_owned(), hook: hook.to_owned() };
        self.plugin_call_timeouts.get_or_create(&labels).inc();
    }

    /// Records how long `plugin` took to answer `hook` (`admit`, `order`, `place`, `rebalance`).
    /// [`TimedPolicy`] calls this; use it directly only for plugins called some other way.
    pub fn observe_hook(&self, plugin: &str, hook: &str, duration: Duration) {
        self.hook_duration
            .get_or_create(&HookLabels { plugin: plugin.into(), hook: hook.into() })
            .observe(duration.as_secs_f64());
    }

    /// Counts `n` acknowledged submissions (call it after the commit, not before).
    pub fn record_submissions(&self, n: u64) {
        self.submissions.inc_by(n);
    }

    /// Records one group commit: its duration and how many writes it made durable.
    pub fn observe_store_commit(&self, duration: Duration, batch_size: usize) {
        self.store_commit_duration.observe(duration.as_secs_f64());
        self.store_batch_size.observe(batch_size as f64);
    }

    /// Records one pruning round of the store: how long it took and how many ended apps it
    /// removed.
    pub fn observe_store_prune(&self, duration: Duration, pruned_apps: u64) {
        self.store_prune_duration.observe(duration.as_secs_f64());
        self.store_pruned_apps.inc_by(pruned_apps);
    }

    /// How many agents have an open stream.
    pub fn set_agent_streams(&self, connected: u64) {
        self.agent_streams.set(connected);
    }

    /// Counts an agent registration refused because another live agent holds its node name
    /// (`reason`: a [`gantry_controller::node_claim::Conflict`] label).
    pub fn count_registration_refused(&self, reason: &'static str) {
        self.registrations_refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The conditions nodes report now, as (node, condition): each gets a series of 1, and
    /// those no longer reported lose theirs.
    pub fn set_node_conditions(&self, conditions: &[(String, String)]) {
        let mut series = self.lock();
        let now: HashSet<ConditionLabels> = conditions
            .iter()
            .map(|(node, condition)| ConditionLabels { node: node.clone(), condition: condition.clone() })
            .collect();
        for gone in series.conditions.difference(&now) {
            self.node_conditions.remove(gone);
        }
        for labels in &now {
            self.node_conditions.get_or_create(labels).set(1);
        }
        series.conditions = now;
    }

    // ----- what the engine knows, as plain values ------------------------------------------

    /// Pending demand: requests with containers left to place, and how many containers.
    pub fn set_pending(&self, requests: u64, containers: u64) {
        let _series = self.lock();
        self.pending_requests.set(requests);
        self.pending_containers.set(containers);
    }

    /// Containers placed since start, as a running total (the counter never goes down).
    pub fn set_allocations_total(&self, total: u64) {
        let _series = self.lock();
        raise_to(&self.allocations, total);
    }

    /// Cycles placed by the built-in policy instead of the configured one, as a running total.
    pub fn set_fallback_cycles_total(&self, total: u64) {
        let _series = self.lock();
        raise_to(&self.fallback_cycles, total);
    }

    /// Decisions of `plugin` rejected for `reason`, as a running total.
    pub fn set_rejected_total(&self, plugin: &str, reason: &str, total: u64) {
        let _series = self.lock();
        self.raise_rejected(plugin, reason, total);
    }

    fn raise_rejected(&self, plugin: &str, reason: &str, total: u64) {
        let labels = RejectLabels { plugin: plugin.into(), reason: reason.into() };
        raise_to(&self.rejected.get_or_create(&labels), total);
    }

    /// Failed calls of `plugin`, as a running total.
    pub fn set_plugin_failures_total(&self, plugin: &str, total: u64) {
        let _series = self.lock();
        raise_to(&self.plugin_failures.get_or_create(&PluginLabels { plugin: plugin.into() }), total);
    }

    /// Quarantines of `plugin`, as a running total.
    pub fn set_plugin_quarantines_total(&self, plugin: &str, total: u64) {
        let _series = self.lock();
        raise_to(&self.plugin_quarantines.get_or_create(&PluginLabels { plugin: plugin.into() }), total);
    }

    /// Whether `plugin` is quarantined now.
    pub fn set_plugin_quarantined(&self, plugin: &str, quarantined: bool) {
        self.plugin_quarantined
            .get_or_create(&PluginLabels { plugin: plugin.into() })
            .set(u64::from(quarantined));
    }

    /// Every queue's figures. Series of queues not in `queues` are removed.
    pub fn set_queues(&self, queues: &[QueueSample<'_>]) {
        let mut series = self.lock();
        self.set_queues_locked(&mut series, queues);
    }

    fn set_queues_locked(&self, series: &mut Series, queues: &[QueueSample<'_>]) {
        let mut live = HashSet::with_capacity(queues.len());
        for q in queues {
            let labels = QueueLabels { queue: q.path.to_owned() };
            self.queue_guaranteed.set(&labels, q.guaranteed);
            self.queue_maximum.set(&labels, q.maximum);
            self.queue_used.set(&labels, q.used);
            self.queue_pending.set(&labels, q.pending);
            live.insert(labels.queue);
        }
        for gone in series.queues.difference(&live) {
            let labels = QueueLabels { queue: gone.clone() };
            for gauges in [&self.queue_guaranteed, &self.queue_maximum, &self.queue_used, &self.queue_pending]
            {
                gauges.remove(&labels);
            }
        }
        series.queues = live;
    }

    /// How many nodes are in each state (e.g. `("lost", 1)`). A state reported before but
    /// missing now is set to 0, so that sums over states stay continuous.
    pub fn set_nodes_by_state(&self, counts: &[(&str, u64)]) {
        let mut series = self.lock();
        set_states(&self.nodes, &mut series.nodes, counts);
    }

    /// How many applications are in each state; as [`SchedulerMetrics::set_nodes_by_state`].
    pub fn set_apps_by_state(&self, counts: &[(&str, u64)]) {
        let mut series = self.lock();
        set_states(&self.apps, &mut series.apps, counts);
    }

    /// How many containers are in each state; as [`SchedulerMetrics::set_nodes_by_state`].
    pub fn set_containers_by_state(&self, counts: &[(&str, u64)]) {
        let mut series = self.lock();
        set_states(&self.containers, &mut series.containers, counts);
    }

    // ----- the engine, all at once ---------------------------------------------------------

    /// Reads everything the engine knows: nodes, applications and containers by state, pending
    /// demand, every queue, plugin health, and the engine's running totals. Call it after each
    /// batch of events (it walks the records once: a few microseconds per thousand) or before
    /// each scrape; the whole update is applied under one lock, so a scrape never sees half.
    ///
    /// Rejections, failures and quarantines are per plugin, under the name the engine knows it
    /// by (see [`TimedPolicy`] for giving it the configured name); rejections of the built-in
    /// stand-in are under `plugin="builtin"` ([`BUILTIN_PLUGIN`]).
    pub fn update_from_engine(&self, engine: &Engine) {
        let st = engine.state();
        let stats = engine.stats();

        // Pending demand, as the engine defines it: requests of admitted (accepted or running)
        // applications with containers left to place, charged to their queue and its ancestors.
        let queues = st.queues();
        let apps = st.apps();
        let mut pending = vec![GantryResources::default(); queues.len()];
        let (mut pending_requests, mut pending_containers) = (0u64, 0u64);
        for r in st.requests() {
            let Some(app) = apps.get(r.app as usize) else { continue };
            if !matches!(app.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) || r.placed >= r.count {
                continue;
            }
            let left = r.count - r.placed;
            pending_requests += 1;
            pending_containers += u64::from(left);
            let want = r.resources.times(left);
            let mut q = app.queue;
            // Bounded by the number of queues, so a corrupt parent link cannot loop forever.
            for _ in 0..queues.len() {
                let Some(slot) = pending.get_mut(q as usize) else { break };
                *slot = slot.plus(&want);
                q = queues[q as usize].parent;
            }
        }
        let samples: Vec<QueueSample<'_>> = queues
            .iter()
            .zip(&pending)
            .map(|(q, pending)| QueueSample {
                path: st.str(q.name),
                guaranteed: q.absolute_guaranteed.into(),
                maximum: q.absolute_maximum.into(),
                used: q.used.into(),
                pending: (*pending).into(),
            })
            .collect();

        let nodes = count_states(&NODE_STATES, st.nodes().iter().map(|n| n.state));
        // Ended applications leave the records at the engine's next cycle and go to its history,
        // so counting both never counts one twice.
        let app_states =
            count_states(&APP_STATES, apps.iter().map(|a| a.state).chain(engine.history().map(|h| h.state)));
        let containers = count_states(&CONTAINER_STATES, st.containers().iter().map(|c| c.state));
        let now = engine.now_ms();
        let idle = engine.idle_nodes();
        let nodes_idle = count_states(&NODE_STATES, idle.iter().map(|n| n.state));
        let idle_seconds: Vec<(String, f64)> = idle
            .iter()
            .filter_map(|n| st.nodes().get(n.index as usize).map(|rec| (st.str(rec.name), n.since_ms)))
            .map(|(name, since)| (name.to_owned(), now.saturating_sub(since) as f64 / 1000.0))
            .collect();
        let policies = engine.policy_status();
        let mut candidates = vec![0u64; queues.len()];
        for c in st.containers().iter().filter(|c| c.flags & GANTRY_CONTAINER_PREEMPT_CANDIDATE != 0) {
            if let Some(slot) = apps.get(c.app as usize).and_then(|a| candidates.get_mut(a.queue as usize)) {
                *slot += 1;
            }
        }

        let mut series = self.lock();
        self.pending_requests.set(pending_requests);
        self.pending_containers.set(pending_containers);
        set_states(&self.nodes, &mut series.nodes, &nodes);
        set_states(&self.nodes_idle, &mut series.nodes_idle, &nodes_idle);
        let live: HashSet<String> = idle_seconds.iter().map(|(name, _)| name.clone()).collect();
        for (name, seconds) in idle_seconds {
            self.node_idle_seconds.get_or_create(&NodeLabels { node: name }).set(seconds);
        }
        for busy in series.idle_nodes.difference(&live) {
            self.node_idle_seconds.remove(&NodeLabels { node: busy.clone() });
        }
        series.idle_nodes = live;
        set_states(&self.apps, &mut series.apps, &app_states);
        set_states(&self.containers, &mut series.containers, &containers);
        self.set_queues_locked(&mut series, &samples);
        for (q, rec) in queues.iter().enumerate() {
            if rec.flags & GANTRY_QUEUE_LEAF == 0 {
                continue;
            }
            let labels = QueueLabels { queue: st.str(rec.name).to_owned() };
            self.queue_preemption_candidates.get_or_create(&labels).set(candidates[q]);
            let taken = stats.preempted_by_queue.get(q).copied().unwrap_or_default();
            raise_to(&self.queue_preempted_containers.get_or_create(&labels), taken.containers);
            raise_to(&self.queue_preempted_memory_bytes.get_or_create(&labels), taken.resources.memory_bytes);
            raise_to(&self.queue_preempted_gpus.get_or_create(&labels), u64::from(taken.resources.gpus));
            let cpu = self.queue_preempted_cpu_cores.get_or_create(&labels);
            let total = taken.resources.cpu_millis as f64 / 1000.0;
            if total > cpu.get() {
                cpu.inc_by(total - cpu.get());
            }
        }
        if let Some(book) = engine.reservation_book() {
            self.reservations.set(book.reservations().count() as u64);
            let r = stats.reservations;
            for (outcome, n) in [
                ("admitted", r.admitted),
                ("rejected", r.rejected),
                ("moved", r.moved),
                ("expired", r.expired),
                ("deleted", r.deleted),
                ("replan_rejected", r.replan_rejected),
            ] {
                raise_to(&self.reservation_events.get_or_create(&OutcomeLabels { outcome }), n);
            }
            let reserved =
                book.reservations().fold(GantryResources::default(), |acc, r| acc.plus(&r.allocated_at(now)));
            for (kind, v) in [("capacity", book.capacity()), ("reserved", reserved)] {
                let labels = PlanLabels { kind };
                self.reservation_plan_cpu_cores.get_or_create(&labels).set(v.cpu_millis as f64 / 1000.0);
                self.reservation_plan_memory_bytes.get_or_create(&labels).set(v.memory_bytes);
                self.reservation_plan_gpus.get_or_create(&labels).set(u64::from(v.gpus));
            }
        }
        raise_to(&self.allocations, stats.placements);
        raise_to(&self.fallback_cycles, stats.fallback_placements);
        for reason in RejectReason::ALL {
            // The engine's total less every plugin's own is what the built-in policy had refused.
            let plugins: u64 = policies.iter().map(|p| p.rejected.get(reason)).sum();
            self.raise_rejected(
                BUILTIN_PLUGIN,
                reason.as_str(),
                stats.rejected.get(reason).saturating_sub(plugins),
            );
            for p in &policies {
                self.raise_rejected(&p.name, reason.as_str(), p.rejected.get(reason));
            }
        }
        for p in &policies {
            let labels = PluginLabels { plugin: p.name.clone() };
            raise_to(&self.plugin_failures.get_or_create(&labels), p.failures);
            raise_to(&self.plugin_quarantines.get_or_create(&labels), p.quarantines);
            raise_to(&self.plugin_panics.get_or_create(&labels), p.panics);
            self.set_plugin_quarantined(&p.name, p.quarantined_until.is_some_and(|until| now < until));
        }
    }

    // ----- exposition ----------------------------------------------------------------------

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

/// Sets one gauge per state; states seen before but missing from `counts` go to 0.
fn set_states(family: &Family<StateLabels, IntGauge>, seen: &mut HashSet<String>, counts: &[(&str, u64)]) {
    let mut now = HashSet::with_capacity(counts.len());
    for (state, count) in counts {
        family.get_or_create(&StateLabels { state: (*state).to_owned() }).set(*count);
        now.insert((*state).to_owned());
    }
    for state in seen.difference(&now) {
        family.get_or_create(&StateLabels { state: state.clone() }).set(0);
    }
    seen.extend(now);
}

/// Encodes `registry` in `format`. Both daemons serve the same exposition — OpenMetrics for
/// Prometheus, the classic text format 0.0.4 for curl and `promtool`, converted from the
/// OpenMetrics text that prometheus-client writes — so that code lives once, in the
/// `gantry-exposition` crate beside `gantry-proto`, which the agent's `/metrics` uses too; this
/// function is the scheduler's one way into it.
fn expose(registry: &Registry, format: Format) -> Result<String, MetricsError> {
    Ok(gantry_exposition::encode(registry, format)?)
}

/// A policy that records how long each of its hook calls takes in
/// `gantry_scheduler_plugin_hook_duration_seconds`, under a name of the operator's choosing.
///
/// The engine owns no clock (it is sans-IO), so it cannot time its plugins; the daemon wraps each
/// plugin in this before handing it to the engine. The name also replaces the plugin's own in
/// the engine's logs and in `gantry_scheduler_plugin_quarantined`, so that latency, quarantine and
/// logs all speak of the plugin as the configuration names it (two instances of one library get
/// two names).
pub struct TimedPolicy {
    name: String,
    inner: Box<dyn Policy>,
    metrics: Arc<SchedulerMetrics>,
    /// The histogram of each hook the plugin implements, looked up once so a call allocates
    /// nothing.
    histograms: Vec<(u32, Histogram)>,
}

impl std::fmt::Debug for TimedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedPolicy").field("name", &self.name).field("inner", &self.inner.name()).finish()
    }
}

impl TimedPolicy {
    /// Wraps `inner`, to be known as `name` (the plugin's local name in the configuration).
    pub fn new(name: impl Into<String>, inner: Box<dyn Policy>, metrics: Arc<SchedulerMetrics>) -> Self {
        let name = name.into();
        let hooks = inner.hooks();
        let histograms = HOOKS
            .into_iter()
            .filter(|id| hooks.has(*id))
            .map(|id| {
                let labels = HookLabels { plugin: name.clone(), hook: hook_name(id).to_owned() };
                (id, metrics.hook_duration.get_or_create(&labels).clone())
            })
            .collect();
        TimedPolicy { name, inner, metrics, histograms }
    }
}

impl Policy for TimedPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn hooks(&self) -> Hooks {
        self.inner.hooks()
    }

    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        self.timed(view, |inner| inner.call(view, out))
    }

    fn call_with_changes(
        &mut self,
        view: &View<'_>,
        changes: &ViewChanges,
        out: &mut Decisions,
    ) -> Result<(), PolicyError> {
        self.timed(view, |inner| inner.call_with_changes(view, changes, out))
    }
}

impl TimedPolicy {
    /// Makes `call` on the wrapped policy, timed into the hook's histogram.
    fn timed(
        &mut self,
        view: &View<'_>,
        call: impl FnOnce(&mut dyn Policy) -> Result<(), PolicyError>,
    ) -> Result<(), PolicyError> {
        let start = Instant::now();
        let result = call(self.inner.as_mut());
        let elapsed = start.elapsed();
        match self.histograms.iter().find(|(id, _)| *id == view.hook) {
            Some((_, histogram)) => histogram.observe(elapsed.as_secs_f64()),
            None => self.metrics.observe_hook(&self.name, hook_name(view.hook), elapsed),
        }
        if let Err(PolicyError::TimedOut { hook, .. }) = &result {
            self.metrics.count_plugin_call_timeout(&self.name, hook);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_engine::{AppSpec, Command, EngineConfig, Event, GpuSpec, NodeSpec, Profile, QueueSpec};
    use gantry_engine::{NodeCondition, RequestSpec, Resources};
    use std::io::Write;
    use std::process::Stdio;

    const GIB: u64 = 1 << 30;

    fn res(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> Resources {
        Resources { cpu_millis, memory_bytes, gpus, reserved: 0 }
    }

    /// The value of `series` (name and labels, exactly as exposed) in classic text.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Like [`sample`], failing the test with the exposition when the series is missing.
    fn value(text: &str, series: &str) -> f64 {
        sample(text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
    }

    #[test]
    fn node_conditions_have_a_series_while_they_hold() {
        let m = SchedulerMetrics::new();
        let disk = "gantry_node_condition{node=\"n1\",condition=\"DiskPressure\"}";
        let launches = "gantry_node_condition{node=\"n2\",condition=\"LaunchFailures\"}";
        m.set_node_conditions(&[
            ("n1".into(), "DiskPressure".into()),
            ("n2".into(), "LaunchFailures".into()),
        ]);
        let t = m.encode();
        assert_eq!((value(&t, disk), value(&t, launches)), (1.0, 1.0));
        m.set_node_conditions(&[("n2".into(), "LaunchFailures".into())]);
        let t = m.encode();
        assert_eq!(
            (sample(&t, disk), sample(&t, launches)),
            (None, Some(1.0)),
            "a cleared condition has no series"
        );
    }

    /// `root.prod` (60 % guaranteed) and `root.dev` (40 %, at most 50 %).
    fn config() -> EngineConfig {
        EngineConfig {
            queues: vec![
                QueueSpec { path: "root.prod".into(), guaranteed: 0.6, maximum: 1.0 },
                QueueSpec { path: "root.dev".into(), guaranteed: 0.4, maximum: 0.5 },
            ],
            quarantine_after: 1,
            ..EngineConfig::default()
        }
    }

    fn node(name: &str, gpus: u32) -> Event {
        Event::NodeRegistered(NodeSpec {
            name: name.into(),
            rack: "r1".into(),
            labels: Vec::new(),
            capacity: res(4000, 8 * GIB, gpus),
            gpu_list: (0..gpus)
                .map(|index| GpuSpec { index, model: "A100".into(), memory_bytes: 80 * GIB })
                .collect(),
        })
    }

    fn app(queue: &str, resources: Resources, count: u32) -> Event {
        Event::AppSubmitted(AppSpec {
            name: "t".into(),
            queue: queue.into(),
            user: "alice".into(),
            requests: vec![RequestSpec { resources, count, ..RequestSpec::default() }],
            ..AppSpec::default()
        })
    }

    /// Applies events at `now`, then confirms every container launched as started.
    fn run(engine: &mut Engine, now: u64, events: Vec<Event>) {
        for event in events {
            let commands = engine.handle(now, event).expect("event accepted");
            for c in commands {
                if let Command::Launch { container, .. } = c {
                    engine.handle(now, Event::ContainerStarted { container }).expect("started");
                }
            }
        }
    }

    /// Two 4-core nodes (n1 with a GPU) and three apps: prod gets 2 × 1 core and 0.5 core + 1
    /// GPU on n1; dev gets one 3-core container on n2, and its second waits, because two would
    /// exceed dev's maximum of 4 cores.
    fn small_cluster(engine: &mut Engine) {
        run(
            engine,
            0,
            vec![
                node("n1", 1),
                node("n2", 0),
                app("root.prod", res(1000, GIB, 0), 2),
                app("root.dev", res(3000, GIB, 0), 2),
                app("root.prod", res(500, GIB, 1), 1),
            ],
        );
        run(engine, 1, vec![Event::Tick]);
    }

    /// Runs `promtool check metrics` on `text`; its verdict and everything it printed.
    fn promtool_check_metrics(text: &str) -> (bool, String) {
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run promtool ({e}); install Prometheus' promtool (Debian: `prometheus`)")
            });
        child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
        let out = child.wait_with_output().expect("promtool finishes");
        let printed =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), printed)
    }

    /// A plugin that places request 0 on a node that does not exist: malformed, so rejected and
    /// counted as a failure.
    struct Garbage;

    impl Policy for Garbage {
        fn name(&self) -> &str {
            "garbage"
        }
        fn hooks(&self) -> Hooks {
            Hooks { place: true, ..Hooks::NONE }
        }
        fn call(&mut self, _view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
            out.place(0, 999);
            Ok(())
        }
    }

    /// A plugin that panics in every call, as the plugin host reports it.
    struct Panicky;

    impl Policy for Panicky {
        fn name(&self) -> &str {
            "panicky"
        }
        fn hooks(&self) -> Hooks {
            Hooks { place: true, ..Hooks::NONE }
        }
        fn call(&mut self, _view: &View<'_>, _out: &mut Decisions) -> Result<(), PolicyError> {
            Err(PolicyError::Panicked("plugin panicked: boom at src/lib.rs:1:1".into()))
        }
    }

    #[test]
    fn a_panic_counts_as_a_panic_and_a_failure_of_the_plugin() {
        let metrics = Arc::new(SchedulerMetrics::new());
        let timed = TimedPolicy::new("crashy", Box::new(Panicky), Arc::clone(&metrics));
        let profile = Profile { place: Some(0), ..Profile::default() };
        let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
        small_cluster(&mut engine);
        metrics.update_from_engine(&engine);
        let t = metrics.encode();
        assert_eq!(value(&t, "gantry_scheduler_plugin_panics_total{plugin=\"crashy\"}"), 1.0);
        assert_eq!(value(&t, "gantry_scheduler_plugin_failures_total{plugin=\"crashy\"}"), 1.0);
        assert_eq!(engine.policy_status()[0].panics, 1);
    }

    /// A plugin whose every call ran past its budget, as the plugin host reports it.
    struct OverBudget;

    impl Policy for OverBudget {
        fn name(&self) -> &str {
            "over-budget"
        }
        fn hooks(&self) -> Hooks {
            Hooks { place: true, ..Hooks::NONE }
        }
        fn call(&mut self, _view: &View<'_>, _out: &mut Decisions) -> Result<(), PolicyError> {
            Err(PolicyError::TimedOut { hook: "place", budget_ms: 200 })
        }
    }

    /// An engine whose place plugin `slow` times out, after one cycle of [`small_cluster`].
    fn timed_out_engine(metrics: &Arc<SchedulerMetrics>) -> Engine {
        let timed = TimedPolicy::new("slow", Box::new(OverBudget), Arc::clone(metrics));
        let profile = Profile { place: Some(0), ..Profile::default() };
        let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
        small_cluster(&mut engine);
        metrics.update_from_engine(&engine);
        engine
    }

    /// Every family of the classic exposition, with its type.
    const FAMILIES: [(&str, &str); 48] = [
        ("gantry_scheduler_pending_requests", "gauge"),
        ("gantry_scheduler_pending_containers", "gauge"),
        ("gantry_scheduler_allocations_total", "counter"),
        ("gantry_scheduler_fallback_placement_cycles_total", "counter"),
        ("gantry_scheduler_cycle_duration_seconds", "histogram"),
        ("gantry_scheduler_plugin_hook_duration_seconds", "histogram"),
        ("gantry_scheduler_rejected_decisions_total", "counter"),
        ("gantry_scheduler_plugin_failures_total", "counter"),
        ("gantry_scheduler_plugin_quarantines_total", "counter"),
        ("gantry_scheduler_plugin_panics_total", "counter"),
        ("gantry_scheduler_plugin_quarantined", "gauge"),
        ("gantry_scheduler_plugin_call_timeouts_total", "counter"),
        ("gantry_scheduler_submissions_total", "counter"),
        ("gantry_queue_guaranteed_cpu_cores", "gauge"),
        ("gantry_queue_guaranteed_memory_bytes", "gauge"),
        ("gantry_queue_guaranteed_gpus", "gauge"),
        ("gantry_queue_maximum_cpu_cores", "gauge"),
        ("gantry_queue_maximum_memory_bytes", "gauge"),
        ("gantry_queue_maximum_gpus", "gauge"),
        ("gantry_queue_used_cpu_cores", "gauge"),
        ("gantry_queue_used_memory_bytes", "gauge"),
        ("gantry_queue_used_gpus", "gauge"),
        ("gantry_queue_pending_cpu_cores", "gauge"),
        ("gantry_queue_pending_memory_bytes", "gauge"),
        ("gantry_queue_pending_gpus", "gauge"),
        ("gantry_queue_preemption_candidates", "gauge"),
        ("gantry_queue_preempted_containers_total", "counter"),
        ("gantry_queue_preempted_cpu_cores_total", "counter"),
        ("gantry_queue_preempted_memory_bytes_total", "counter"),
        ("gantry_queue_preempted_gpus_total", "counter"),
        ("gantry_reservations", "gauge"),
        ("gantry_reservation_events_total", "counter"),
        ("gantry_reservation_plan_cpu_cores", "gauge"),
        ("gantry_reservation_plan_memory_bytes", "gauge"),
        ("gantry_reservation_plan_gpus", "gauge"),
        ("gantry_nodes", "gauge"),
        ("gantry_nodes_idle", "gauge"),
        ("gantry_node_idle_seconds", "gauge"),
        ("gantry_node_condition", "gauge"),
        ("gantry_apps", "gauge"),
        ("gantry_containers", "gauge"),
        ("gantry_agent_streams", "gauge"),
        ("gantry_scheduler_registrations_refused_total", "counter"),
        ("gantry_store_commit_duration_seconds", "histogram"),
        ("gantry_store_batch_size", "histogram"),
        ("gantry_store_pruned_apps_total", "counter"),
        ("gantry_store_prune_duration_seconds", "histogram"),
        ("gantry_scheduler_build_info", "gauge"),
    ];

    /// Metrics with a series in every family: a real engine with a (misbehaving) plugin, and
    /// every figure only the daemon sees.
    fn populated() -> SchedulerMetrics {
        let metrics = Arc::new(SchedulerMetrics::new());
        // The reservation families first, from an engine with a plan (the engine below has none;
        // their series stay).
        let (mut planned, _) = planned_engine();
        run(&mut planned, 0, vec![node("n1", 0), reservation("atom(1c/1GiB, 1, 2, 10s, 20s)")]);
        metrics.update_from_engine(&planned);
        drop(timed_out_engine(&metrics));
        let timed = TimedPolicy::new("garbage", Box::new(Garbage), Arc::clone(&metrics));
        let profile = Profile { place: Some(0), ..Profile::default() };
        let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
        small_cluster(&mut engine);
        metrics.update_from_engine(&engine);
        drop(engine);
        let metrics = Arc::into_inner(metrics).expect("the engine and its plugin are gone");
        metrics.set_agent_streams(2);
        metrics.set_node_conditions(&[("n1".into(), "DiskPressure".into())]);
        metrics.record_submissions(3);
        metrics.observe_cycle(Duration::from_micros(300));
        metrics.observe_store_commit(Duration::from_millis(2), 3);
        metrics.observe_store_prune(Duration::from_millis(40), 500);
        metrics
    }

    #[test]
    fn every_family_is_exposed_with_help_and_type() {
        let text = populated().encode();
        for (name, kind) in FAMILIES {
            let help = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("# HELP {name} ")))
                .unwrap_or_else(|| panic!("no HELP for {name} in:\n{text}"));
            assert!(help.len() > 10, "{name}: HELP {help:?} says too little");
            assert!(text.contains(&format!("\n# TYPE {name} {kind}\n")), "{name} is not a {kind}:\n{text}");
        }
        let families: HashSet<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
        let helps: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
        assert_eq!(helps.len(), families.len(), "families exposed but not listed here: {helps:#?}");
        assert!(!text.contains("# UNIT") && !text.contains("# EOF"), "classic text has no UNIT or EOF");

        let openmetrics = SchedulerMetrics::new().try_encode(Format::OpenMetrics).expect("encodes");
        assert!(openmetrics.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
        assert!(openmetrics.contains("# TYPE gantry_scheduler_allocations counter\n"));
        assert!(openmetrics.contains("# UNIT gantry_scheduler_cycle_duration_seconds seconds\n"));
        assert!(
            openmetrics.contains("gantry_scheduler_build_info{version=\"")
                && text.contains(&format!(
                    "gantry_scheduler_build_info{{version=\"{}\"}} 1",
                    env!("CARGO_PKG_VERSION")
                ))
        );
    }

    #[test]
    fn idle_nodes_have_a_series_only_while_empty_and_not_lost() {
        let mut engine = Engine::builtin(config()).expect("engine");
        run(&mut engine, 1_000, vec![node("n1", 0), node("n2", 0), node("n3", 0)]);
        run(&mut engine, 2_000, vec![app("root.prod", res(1000, GIB, 0), 1), Event::Tick]);
        run(
            &mut engine,
            31_000,
            vec![Event::NodeStateChanged { node: "n3".into(), state: NodeCondition::Draining }],
        );
        let m = SchedulerMetrics::new();
        m.update_from_engine(&engine);
        let t = m.encode();
        // First fit put the container on n1; n2 and n3 have been empty since they registered.
        assert_eq!(value(&t, "gantry_nodes_idle{state=\"running\"}"), 1.0);
        assert_eq!(value(&t, "gantry_nodes_idle{state=\"draining\"}"), 1.0);
        assert_eq!(sample(&t, "gantry_node_idle_seconds{node=\"n1\"}"), None, "busy: no series");
        assert_eq!(value(&t, "gantry_node_idle_seconds{node=\"n2\"}"), 30.0);
        assert_eq!(value(&t, "gantry_node_idle_seconds{node=\"n3\"}"), 30.0);
        assert!(promtool_check_metrics(&t).0, "promtool accepts it");

        run(&mut engine, 40_000, vec![Event::NodeLost { node: "n2".into() }]);
        m.update_from_engine(&engine);
        let t = m.encode();
        assert_eq!(sample(&t, "gantry_node_idle_seconds{node=\"n2\"}"), None, "lost: no series");
        assert_eq!(value(&t, "gantry_nodes_idle{state=\"running\"}"), 0.0);
        assert_eq!(value(&t, "gantry_node_idle_seconds{node=\"n3\"}"), 39.0);
    }

    #[test]
    fn figures_of_a_real_engine_appear() {
        let mut engine = Engine::builtin(config()).expect("engine");
        small_cluster(&mut engine);
        let m = SchedulerMetrics::new();
        m.update_from_engine(&engine);
        let t = m.encode();

        assert_eq!(value(&t, "gantry_nodes{state=\"running\"}"), 2.0);
        assert_eq!(value(&t, "gantry_nodes{state=\"lost\"}"), 0.0);
        assert_eq!(value(&t, "gantry_apps{state=\"running\"}"), 3.0);
        assert_eq!(value(&t, "gantry_apps{state=\"new\"}"), 0.0);
        assert_eq!(value(&t, "gantry_containers{state=\"running\"}"), 4.0);
        assert_eq!(value(&t, "gantry_containers{state=\"allocated\"}"), 0.0);
        assert_eq!(value(&t, "gantry_scheduler_allocations_total"), 4.0);
        assert_eq!(value(&t, "gantry_scheduler_pending_requests"), 1.0);
        assert_eq!(value(&t, "gantry_scheduler_pending_containers"), 1.0);

        let q = |figure: &str, resource: &str, queue: &str| {
            value(&t, &format!("gantry_queue_{figure}_{resource}{{queue=\"{queue}\"}}"))
        };
        assert_eq!(q("guaranteed", "cpu_cores", "root"), 8.0);
        assert_eq!(q("guaranteed", "memory_bytes", "root"), (16 * GIB) as f64);
        assert_eq!(q("guaranteed", "gpus", "root"), 1.0);
        assert_eq!(q("guaranteed", "cpu_cores", "root.prod"), 4.8);
        assert_eq!(q("guaranteed", "cpu_cores", "root.dev"), 3.2);
        assert_eq!(q("maximum", "cpu_cores", "root.dev"), 4.0);
        assert_eq!(q("used", "cpu_cores", "root.prod"), 2.5);
        assert_eq!(q("used", "memory_bytes", "root.prod"), (3 * GIB) as f64);
        assert_eq!(q("used", "gpus", "root.prod"), 1.0);
        assert_eq!(q("used", "cpu_cores", "root.dev"), 3.0);
        assert_eq!(q("used", "cpu_cores", "root"), 5.5);
        assert_eq!(q("pending", "cpu_cores", "root.dev"), 3.0);
        assert_eq!(q("pending", "memory_bytes", "root.dev"), GIB as f64);
        assert_eq!(q("pending", "cpu_cores", "root"), 3.0, "pending demand is charged to ancestors");
        assert_eq!(q("pending", "cpu_cores", "root.prod"), 0.0);
        for reason in RejectReason::ALL {
            let series = format!(
                "gantry_scheduler_rejected_decisions_total{{plugin=\"builtin\",reason=\"{}\"}}",
                reason.as_str()
            );
            assert_eq!(value(&t, &series), 0.0, "built-in placement is never rejected");
        }

        // n2 is lost: its container with it; dev's two containers wait again, and the gauges
        // that went up come down.
        run(&mut engine, 2, vec![Event::NodeLost { node: "n2".into() }]);
        m.update_from_engine(&engine);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_nodes{state=\"running\"}"), 1.0);
        assert_eq!(value(&t, "gantry_nodes{state=\"lost\"}"), 1.0);
        assert_eq!(value(&t, "gantry_containers{state=\"running\"}"), 3.0);
        assert_eq!(value(&t, "gantry_scheduler_pending_containers"), 2.0);
        assert_eq!(value(&t, "gantry_queue_used_cpu_cores{queue=\"root.dev\"}"), 0.0);
        assert_eq!(value(&t, "gantry_queue_pending_cpu_cores{queue=\"root.dev\"}"), 6.0);
        assert_eq!(
            value(&t, "gantry_queue_guaranteed_cpu_cores{queue=\"root\"}"),
            4.0,
            "n2 no longer counts"
        );
        assert_eq!(value(&t, "gantry_scheduler_allocations_total"), 4.0, "a counter does not go down");

        // Killing an app ends it; once the engine forgets its records it is counted from history.
        let app = engine.state().apps()[0].id;
        run(&mut engine, 3, vec![Event::AppKillRequested { app: gantry_engine::AppId(app) }]);
        let stopping: Vec<_> = engine
            .state()
            .containers()
            .iter()
            .filter(|c| c.state == GANTRY_CONTAINER_STOPPING)
            .map(|c| gantry_engine::ContainerId(c.id))
            .collect();
        assert_eq!(stopping.len(), 2, "the killed app's two containers are stopping");
        m.update_from_engine(&engine);
        assert_eq!(value(&m.encode(), "gantry_containers{state=\"stopping\"}"), 2.0);
        for container in stopping {
            engine.handle(4, Event::container_exited(container, 143)).expect("exit");
        }
        run(&mut engine, 5, vec![Event::Tick]);
        m.update_from_engine(&engine);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_apps{state=\"killed\"}"), 1.0);
        assert_eq!(value(&t, "gantry_apps{state=\"running\"}"), 2.0, "the GPU app and dev (waiting) run on");
        assert_eq!(value(&t, "gantry_apps{state=\"accepted\"}"), 0.0);
        assert_eq!(value(&t, "gantry_containers{state=\"stopping\"}"), 0.0);
    }

    #[test]
    fn a_call_over_budget_counts_as_a_timeout_and_a_failure() {
        let metrics = Arc::new(SchedulerMetrics::new());
        let engine = timed_out_engine(&metrics);
        let t = metrics.encode();
        assert_eq!(
            value(&t, "gantry_scheduler_plugin_call_timeouts_total{plugin=\"slow\",hook=\"place\"}"),
            1.0
        );
        assert_eq!(value(&t, "gantry_scheduler_plugin_failures_total{plugin=\"slow\"}"), 1.0);
        assert_eq!(value(&t, "gantry_scheduler_plugin_quarantined{plugin=\"slow\"}"), 1.0);
        assert_eq!(engine.stats().fallback_placements, 1, "first-fit placed that cycle");
        assert!(engine.stats().placements > 0);
    }

    #[test]
    fn plugin_health_and_hook_latency_come_through_timed_policy() {
        let metrics = Arc::new(SchedulerMetrics::new());
        let timed = TimedPolicy::new("packing-west", Box::new(Garbage), Arc::clone(&metrics));
        let profile = Profile { place: Some(0), ..Profile::default() };
        let mut engine = Engine::new(config(), vec![Box::new(timed)], profile).expect("engine");
        small_cluster(&mut engine);
        metrics.update_from_engine(&engine);
        let t = metrics.encode();

        let calls =
            "gantry_scheduler_plugin_hook_duration_seconds_count{plugin=\"packing-west\",hook=\"place\"}";
        assert_eq!(value(&t, calls), 1.0, "one place call timed");
        assert!(
            sample(
                &t,
                "gantry_scheduler_plugin_hook_duration_seconds_count{plugin=\"packing-west\",hook=\"admit\"}"
            )
            .is_none(),
            "no series for hooks the plugin lacks"
        );
        assert_eq!(
            value(
                &t,
                "gantry_scheduler_rejected_decisions_total{plugin=\"packing-west\",reason=\"unknown_node\"}"
            ),
            1.0,
            "rejections are the plugin's own"
        );
        assert_eq!(
            value(
                &t,
                "gantry_scheduler_rejected_decisions_total{plugin=\"builtin\",reason=\"unknown_node\"}"
            ),
            0.0
        );
        assert_eq!(value(&t, "gantry_scheduler_plugin_failures_total{plugin=\"packing-west\"}"), 1.0);
        assert_eq!(value(&t, "gantry_scheduler_plugin_quarantines_total{plugin=\"packing-west\"}"), 1.0);
        assert_eq!(
            value(&t, "gantry_scheduler_plugin_quarantined{plugin=\"packing-west\"}"),
            1.0,
            "quarantined under the configured name"
        );

        // The next cycle is placed by the built-in policy while the plugin sits out its
        // quarantine (60 s by default); past it, the gauge falls back to 0 and the plugin is tried
        // (and fails) again.
        run(&mut engine, 10, vec![Event::Tick]);
        metrics.update_from_engine(&engine);
        let t = metrics.encode();
        assert_eq!(value(&t, calls), 1.0, "not called while quarantined");
        assert!(value(&t, "gantry_scheduler_fallback_placement_cycles_total") >= 1.0);
        run(&mut engine, 60_002, vec![node("n3", 0)]);
        metrics.update_from_engine(&engine);
        assert_eq!(
            value(&metrics.encode(), "gantry_scheduler_plugin_quarantined{plugin=\"packing-west\"}"),
            0.0
        );
    }

    #[test]
    fn counters_never_go_down_and_gone_series_go() {
        let m = SchedulerMetrics::new();
        m.set_allocations_total(5);
        m.set_allocations_total(3);
        m.set_rejected_total("rayon", "does_not_fit", 7);
        m.set_rejected_total("rayon", "does_not_fit", 2);
        let a = Amount { cpu_millis: 1500, memory_bytes: 10, gpus: 2 };
        let queue = |path| QueueSample { path, guaranteed: a, maximum: a, used: a, pending: a };
        m.set_queues(&[queue("root"), queue("root.a")]);
        m.set_nodes_by_state(&[("running", 3), ("lost", 2)]);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_queue_used_cpu_cores{queue=\"root.a\"}"), 1.5);
        assert_eq!(value(&t, "gantry_queue_pending_gpus{queue=\"root.a\"}"), 2.0);

        m.set_queues(&[queue("root")]);
        m.set_nodes_by_state(&[("running", 3)]);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_scheduler_allocations_total"), 5.0);
        assert_eq!(
            value(&t, "gantry_scheduler_rejected_decisions_total{plugin=\"rayon\",reason=\"does_not_fit\"}"),
            7.0
        );
        assert!(!t.contains("queue=\"root.a\""), "a queue that is gone has no series:\n{t}");
        assert_eq!(value(&t, "gantry_queue_used_cpu_cores{queue=\"root\"}"), 1.5);
        assert_eq!(value(&t, "gantry_nodes{state=\"lost\"}"), 0.0, "a state no longer reported reads 0");
    }

    /// `config()` with `root.prod` reservable.
    fn planned_config() -> EngineConfig {
        EngineConfig { reservations: Some(gantry_engine::PlanConfig::new("root.prod")), ..config() }
    }

    /// An engine of `planned_config()` with the engine's test planner (earliest fit) as `reserve`.
    fn planned_engine() -> (Engine, gantry_engine::test_planner::Handle) {
        let (planner, handle) = gantry_engine::test_planner::TestPlanner::earliest();
        let profile = Profile { reserve: Some(0), ..Profile::default() };
        let policies: Vec<Box<dyn Policy>> = vec![Box::new(gantry_engine::StaticPolicy::new(planner))];
        (Engine::new(planned_config(), policies, profile).expect("engine"), handle)
    }

    /// A reservation in `root.prod` due at 100 s.
    fn reservation(rdl: &str) -> Event {
        Event::ReservationSubmitted {
            id: None,
            request: gantry_engine::ReservationRequest {
                queue: "root.prod".into(),
                name: "r".into(),
                user: "u".into(),
                priority: 0,
                arrival_ms: None,
                deadline_ms: Some(100_000),
                definition: gantry_rdl::parse_text(rdl).expect("rdl"),
            },
        }
    }

    #[test]
    fn the_reservation_plan_is_exposed() {
        let (mut engine, planner) = planned_engine();
        run(&mut engine, 0, vec![node("n1", 0), node("n2", 0)]);
        // 2 cores for 10 s, placed at 0-10 s; then one too large for the plan (4.8 cores).
        run(
            &mut engine,
            0,
            vec![reservation("atom(1c/1GiB, 1, 2, 10s, 20s)"), reservation("atom(5c/1GiB, 1, 1, 10s, 10s)")],
        );
        // A planner answer refused (bundles above the atom's most): counted by reason, per plugin.
        planner.tamper(|_, out| {
            let pieces: Vec<_> = out
                .allocations()
                .iter()
                .map(|p| gantry_sdk::abi::GantryAllocation { bundles: p.bundles + 1, ..*p })
                .collect();
            let decisions = out.as_slice().to_vec();
            out.clear();
            out.extend_from_slice(&decisions);
            out.extend_allocations(&pieces);
        });
        run(&mut engine, 0, vec![reservation("atom(1c/1GiB, 1, 1, 1s, 1s)")]);
        run(&mut engine, 5_000, vec![Event::Tick]);
        let m = SchedulerMetrics::new();
        m.update_from_engine(&engine);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_reservations"), 1.0);
        assert_eq!(value(&t, "gantry_reservation_events_total{outcome=\"admitted\"}"), 1.0);
        assert_eq!(value(&t, "gantry_reservation_events_total{outcome=\"rejected\"}"), 2.0);
        assert_eq!(
            value(
                &t,
                "gantry_scheduler_rejected_decisions_total{plugin=\"test-planner\",reason=\"gang_size\"}"
            ),
            1.0
        );
        assert_eq!(value(&t, "gantry_reservation_plan_cpu_cores{kind=\"capacity\"}"), 4.8);
        assert_eq!(value(&t, "gantry_reservation_plan_cpu_cores{kind=\"reserved\"}"), 2.0);
        assert_eq!(value(&t, "gantry_reservation_plan_memory_bytes{kind=\"reserved\"}"), (2 * GIB) as f64);
        assert_eq!(value(&t, "gantry_queue_guaranteed_cpu_cores{queue=\"root.prod.reservation_1\"}"), 2.0);
        assert_eq!(value(&t, "gantry_queue_guaranteed_cpu_cores{queue=\"root.prod.default\"}"), 2.8);
        let (ok, printed) = promtool_check_metrics(&t);
        assert!(ok && printed.is_empty(), "promtool check metrics:\n{printed}\non:\n{t}");
        // At the deadline it ends.
        run(&mut engine, 100_000, vec![Event::Tick]);
        m.update_from_engine(&engine);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_reservations"), 0.0);
        assert_eq!(value(&t, "gantry_reservation_events_total{outcome=\"expired\"}"), 1.0);
        assert_eq!(value(&t, "gantry_reservation_plan_cpu_cores{kind=\"reserved\"}"), 0.0);
    }

    #[test]
    fn daemon_figures_are_recorded() {
        let m = SchedulerMetrics::new();
        m.set_agent_streams(3);
        m.record_submissions(2);
        m.record_submissions(1);
        m.observe_cycle(Duration::from_micros(700));
        m.observe_store_commit(Duration::from_millis(3), 40);
        m.observe_store_commit(Duration::from_millis(5), 1);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_agent_streams"), 3.0);
        assert_eq!(value(&t, "gantry_scheduler_submissions_total"), 3.0);
        assert_eq!(value(&t, "gantry_scheduler_cycle_duration_seconds_count"), 1.0);
        assert_eq!(value(&t, "gantry_scheduler_cycle_duration_seconds_bucket{le=\"0.0008\"}"), 1.0);
        assert_eq!(value(&t, "gantry_scheduler_cycle_duration_seconds_bucket{le=\"0.0004\"}"), 0.0);
        assert_eq!(value(&t, "gantry_store_commit_duration_seconds_count"), 2.0);
        assert_eq!(value(&t, "gantry_store_batch_size_sum"), 41.0);
        assert_eq!(value(&t, "gantry_store_batch_size_bucket{le=\"1.0\"}"), 1.0);
        m.observe_store_prune(Duration::from_millis(20), 500);
        m.observe_store_prune(Duration::from_micros(500), 0);
        let t = m.encode();
        assert_eq!(value(&t, "gantry_store_pruned_apps_total"), 500.0);
        assert_eq!(value(&t, "gantry_store_prune_duration_seconds_count"), 2.0);
        assert_eq!(value(&t, "gantry_store_prune_duration_seconds_bucket{le=\"0.001\"}"), 1.0);
    }

    #[test]
    fn promtool_accepts_the_exposition() {
        let text = populated().encode();
        let (ok, printed) = promtool_check_metrics(&text);
        assert!(ok && printed.is_empty(), "promtool check metrics:\n{printed}\non:\n{text}");
    }

    #[test]
    fn render_answers_prometheus_in_openmetrics_and_others_in_text() {
        let m = SchedulerMetrics::new();
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let (content_type, body) = m.render(Some(prometheus)).expect("renders");
        assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
        assert!(body.ends_with("# EOF\n"));
        for accept in [None, Some("*/*"), Some("text/plain")] {
            let (content_type, body) = m.render(accept).expect("renders");
            assert!(content_type.starts_with("text/plain; version=0.0.4"), "{accept:?}: {content_type}");
            assert!(body.contains("# TYPE gantry_scheduler_allocations_total counter\n"), "{accept:?}");
        }
    }
}
