//! Every metric the scheduler exports, registered in one place: its name, help text and unit,
//! and the series that exist from the first scrape.

use super::labels::*;
use super::{BUILTIN_PLUGIN, SchedulerMetrics, Series};
use gantry_engine::RejectReason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Mutex;

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
}
