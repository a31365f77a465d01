//! What the engine knows: plain-value setters for its figures (pending demand, totals, plugin
//! health, queues, states) and [`SchedulerMetrics::update_from_engine`], which reads them all at
//! once under one lock.

use super::labels::*;
use super::{BUILTIN_PLUGIN, QueueSample, SchedulerMetrics, Series};
use gantry_engine::{Engine, RejectReason};
use gantry_sdk::abi::*;
use std::collections::HashSet;

impl SchedulerMetrics {
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
}
