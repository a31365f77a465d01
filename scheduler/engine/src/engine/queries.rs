//! Read access for drivers: the clock, the state, counters, policy health, the reservation book,
//! why an application waits, diagnostics and the history of ended applications.

use super::{Engine, EngineStats};
use crate::error::EngineError;
use crate::model::*;
use crate::reservations::ReservationBook;
use crate::state::{AppSummary, ClusterState};
use crate::waiting;

impl Engine {
    /// The nodes that hold no container and are not lost, longest idle first: the downscale
    /// signal the REST API, the metrics and the simulator's autoscaler all read.
    pub fn idle_nodes(&self) -> Vec<crate::state::IdleNode> {
        self.state.idle_nodes()
    }

    /// The engine's clock.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The reservations, if a queue is reservable.
    pub fn reservation_book(&self) -> Option<&ReservationBook> {
        self.book.as_ref()
    }

    /// When the next cycle would run the `rebalance` policy (`None` without one): it runs in the
    /// first cycle at or after this, so a driver that wants it on time cycles then.
    pub fn next_rebalance_ms(&self) -> Option<u64> {
        self.profile.rebalance.map(|_| self.next_rebalance_ms)
    }

    /// Whether reservations can be planned: a reservable queue and a planner (`Profile::reserve`).
    pub fn plans_reservations(&self) -> bool {
        self.book.is_some() && self.profile.reserve.is_some()
    }

    /// The id the next reservation submitted without one gets.
    pub fn next_reservation_id(&self) -> u64 {
        self.state.next_reservation
    }

    /// Counters.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The records and side tables.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// Refuses a submission a container of which asks for more of a resource than the largest
    /// node that is not lost has (YARN's InvalidResourceRequestException against its maximum
    /// allocation). Accepts everything while no node is registered: right after a start or a
    /// restart the nodes are still coming, and an empty cluster is no measure.
    pub fn check_fits(&self, spec: &AppSpec) -> Result<(), EngineError> {
        let Some(largest) = self.state.largest_node() else { return Ok(()) };
        refuse_above(spec, &largest, "the largest registered node's")
    }

    /// [`Engine::check_fits`] against a maximum allocation the caller knows better than the
    /// registered nodes do: an autoscaled cluster's largest machine, started or not.
    pub fn check_fits_within(&self, spec: &AppSpec, max: &Resources) -> Result<(), EngineError> {
        refuse_above(spec, max, "the cluster's largest machine's")
    }

    /// Why a live application waits, in words, as of the last cycle (`None` when nothing of it
    /// is pending, or it is not live).
    pub fn waiting_reason(&self, app: AppId) -> Option<String> {
        let names =
            |p: u32| self.policies.get(p as usize).map_or_else(String::new, |s| s.policy.name().to_owned());
        self.waiting.get(&self.state, app).map(|w| w.describe(&self.state, names))
    }

    /// An application's diagnostics as users see them: why it waits (if it does), then what
    /// happened to it last ([`AppMeta::diagnostics`](crate::state::AppMeta::diagnostics)); remembered ones' final diagnostics.
    pub fn app_diagnostics(&self, app: AppId) -> Option<String> {
        let Some(i) = self.state.app_index(app) else {
            return self.state.history.iter().rev().find(|s| s.id == app).map(|s| s.diagnostics.clone());
        };
        let kept = &self.state.app_meta(i)?.diagnostics;
        Some(match self.waiting_reason(app) {
            Some(w) if kept.is_empty() => w,
            Some(w) => format!("{w}; {kept}"),
            None => kept.clone(),
        })
    }

    /// How a container that ended in the last event ended, in words (until the next cycle
    /// drops it): what drivers keep for its diagnostics.
    pub fn container_diagnostics(&self, container: ContainerId) -> Option<&str> {
        self.state.ended_words.get(&container.0).map(String::as_str)
    }

    /// The state of an application, live or remembered.
    pub fn app_state(&self, app: AppId) -> Option<u32> {
        if let Some(&i) = self.state.app_index.get(&app.0) {
            return Some(self.state.apps[i as usize].state);
        }
        self.state.history.iter().rev().find(|s| s.id == app).map(|s| s.state)
    }

    /// Attempts an application gets when its submission names none.
    pub fn default_max_attempts(&self) -> u32 {
        self.config.default_max_attempts
    }

    /// How many terminal applications are remembered for queries (`EngineConfig::history_len`).
    pub fn history_len(&self) -> usize {
        self.state.history_len
    }

    /// Terminal applications remembered for queries, oldest first.
    pub fn history(&self) -> impl Iterator<Item = &AppSummary> {
        self.state.history.iter()
    }
}

/// Refuses `spec` if a container of it asks for more of a resource than `max` (`whose` says
/// whose maximum it is).
fn refuse_above(spec: &AppSpec, max: &Resources, whose: &str) -> Result<(), EngineError> {
    for (k, r) in spec.requests.iter().enumerate() {
        if let Some((dimension, need, max)) = waiting::exceeds(&r.resources, max) {
            return Err(EngineError::InvalidResourceRequest(format!(
                "request {k} asks for {} per container, more than the maximum allocation of {} ({whose})",
                dimension.amount(need),
                dimension.amount(max)
            )));
        }
    }
    Ok(())
}
