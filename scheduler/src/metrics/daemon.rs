//! What only the daemon sees, as plain-value setters: cycle time, hook latency and timeouts,
//! submissions, store commits and pruning, agent streams, refused registrations, node
//! conditions.

use super::SchedulerMetrics;
use super::labels::*;
use std::collections::HashSet;
use std::time::Duration;

impl SchedulerMetrics {
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
}
