//! [`TimedPolicy`]: a plugin wrapped so that its hook calls are timed (the engine owns no clock)
//! and known by the configuration's name.

use super::SchedulerMetrics;
use super::labels::{HOOKS, HookLabels};
use gantry_engine::{Policy, PolicyError, ViewChanges, hook_name};
use gantry_sdk::{Decisions, Hooks, View};
use prometheus_client::metrics::histogram::Histogram;
use std::sync::Arc;
use std::time::Instant;

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
