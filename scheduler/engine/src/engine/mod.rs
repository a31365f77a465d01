//! The engine: events in, commands out. A `Tick` runs one scheduling cycle:
//! admit → order pending → place → validate → commit → commands (and `rebalance` when due).
//!
//! This file holds the [`Engine`] itself, its construction and the dispatch of each [`Event`];
//! the work is split by concern beside it:
//! - `submit.rs`: new and recovered applications and containers;
//! - `lifecycle.rs`: what happens to a container and its application after placement (exits,
//!   losses, stops, kills, gang restarts);
//! - `cycle.rs`: one scheduling cycle, phase by phase, and the commit of placements;
//! - `policy_health.rs`: calling a policy, judging its answers, quarantine;
//! - `stats.rs`: the counters and status records the engine hands out;
//! - `queries.rs`: read access for drivers (state, diagnostics, history).

mod cycle;
mod lifecycle;
mod policy_health;
mod queries;
mod stats;
mod submit;

pub use lifecycle::{APP_KILL_GRACE_MS, KILLED_BY_REQUEST};
pub(crate) use policy_health::PolicySlot;
pub use stats::{EngineStats, PolicyStatus, Reclaimed, ReservationStats};

use crate::error::EngineError;
use crate::event::{Command, Event, KillReason, NodeCondition};
use crate::fifo::FirstFitFifo;
use crate::model::*;
use crate::policy::{Policy, Profile, StaticPolicy};
use crate::reservations::book::Restored;
use crate::reservations::{ReservationBook, ReservationEnd};
use crate::rng::SplitMix64;
use crate::state::{ClusterState, app_is_terminal, container_is_live};
use crate::validate::PlaceNote;
use crate::waiting::WaitingBook;
use gantry_sdk::Decisions;
use gantry_sdk::abi::*;
use submit::{RestoredApp, RestoredContainer};

/// The sans-IO scheduling engine.
pub struct Engine {
    config: EngineConfig,
    pub(crate) state: ClusterState,
    pub(crate) policies: Vec<PolicySlot>,
    pub(crate) profile: Profile,
    fallback: StaticPolicy<FirstFitFifo>,
    pub(crate) rng: SplitMix64,
    pub(crate) now_ms: u64,
    pub(crate) cycle: u64,
    next_rebalance_ms: u64,
    pub(crate) stats: EngineStats,
    pub(crate) buf: Decisions,
    pending: Vec<u32>,
    /// Apps that may have containers left to place (indexes): new apps, and apps whose
    /// containers were stopped, lost or failed since. Saves walking every app each cycle.
    maybe_pending: Vec<u32>,
    /// Compaction renumbered the apps: the next pending computation walks them all.
    rescan_pending: bool,
    pub(crate) commands: Vec<Command>,
    /// The reservations, when a queue is reservable.
    pub(crate) book: Option<ReservationBook>,
    /// What this cycle's `place` call said besides placing (WAITs, refusals), by request.
    place_notes: Vec<(u32, PlaceNote)>,
    /// The plugin (policy index) whose decisions this cycle's placement used; `None` for the
    /// built-in first fit.
    place_policy: Option<u32>,
    /// Why each waiting application waits (see [`crate::waiting`]).
    waiting: WaitingBook,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("now_ms", &self.now_ms)
            .field("cycle", &self.cycle)
            .field("nodes", &self.state.nodes.len())
            .field("apps", &self.state.apps.len())
            .field("containers", &self.state.containers.len())
            .finish()
    }
}

impl Engine {
    /// An engine with `policies` serving the extension points named by `profile`.
    pub fn new(
        config: EngineConfig,
        policies: Vec<Box<dyn Policy>>,
        profile: Profile,
    ) -> Result<Self, EngineError> {
        let hooks = [
            ("admit", profile.admit, GANTRY_HOOK_ADMIT),
            ("order", profile.order, GANTRY_HOOK_ORDER),
            ("place", profile.place, GANTRY_HOOK_PLACE),
            ("rebalance", profile.rebalance, GANTRY_HOOK_REBALANCE),
            ("reserve", profile.reserve, GANTRY_HOOK_RESERVE),
        ];
        for (name, slot, hook) in hooks {
            if let Some(i) = slot {
                let p = policies.get(i).ok_or_else(|| {
                    EngineError::Profile(format!("{name} names policy #{i}, which is not loaded"))
                })?;
                if !p.hooks().has(hook) {
                    return Err(EngineError::Profile(format!(
                        "{name} is assigned to `{}`, which does not implement it",
                        p.name()
                    )));
                }
            }
        }
        if config.quarantine_after == 0 {
            return Err(EngineError::Invalid {
                what: "quarantine_after",
                reason: "must be at least 1".into(),
            });
        }
        if profile.reserve.is_some() && config.reservations.is_none() {
            return Err(EngineError::Profile(
                "reserve names a reservation planner, but no queue is reservable: configure [reservations]"
                    .into(),
            ));
        }
        let mut state = ClusterState::new(&config)?;
        let book = config.reservations.clone().map(|c| ReservationBook::new(c, &mut state)).transpose()?;
        Ok(Engine {
            book,
            rng: SplitMix64::new(config.seed),
            state,
            policies: policies.into_iter().map(PolicySlot::new).collect(),
            profile,
            fallback: StaticPolicy::new(FirstFitFifo::default()),
            now_ms: 0,
            cycle: 0,
            next_rebalance_ms: 0,
            stats: EngineStats::default(),
            buf: Decisions::new(),
            pending: Vec::new(),
            maybe_pending: Vec::new(),
            rescan_pending: true,
            commands: Vec::new(),
            place_notes: Vec::new(),
            place_policy: None,
            waiting: WaitingBook::default(),
            config,
        })
    }

    /// An engine with no plugins: built-in admission, order and first-fit FIFO placement.
    pub fn builtin(config: EngineConfig) -> Result<Self, EngineError> {
        Self::new(config, Vec::new(), Profile::default())
    }

    /// Applies one event at time `now_ms` (clamped to be monotonic) and returns the commands it
    /// causes. A refused event returns an error and changes nothing.
    pub fn handle(&mut self, now_ms: u64, event: Event) -> Result<Vec<Command>, EngineError> {
        let before = self.now_ms;
        self.now_ms = self.now_ms.max(now_ms);
        self.commands.clear();
        let result = self.apply(event);
        if result.is_ok() && self.book.is_some() {
            self.follow_plan_capacity();
            let r = &mut self.stats.reservations;
            for c in &self.commands {
                match c {
                    Command::ReservationAdmitted { .. } => r.admitted += 1,
                    Command::ReservationRejected { .. } => r.rejected += 1,
                    Command::ReservationReplanned { .. } => r.moved += 1,
                    Command::ReservationEnded { why: ReservationEnd::Expired, .. } => r.expired += 1,
                    Command::ReservationEnded { why: ReservationEnd::Deleted, .. } => r.deleted += 1,
                    Command::ReservationEnded { why: ReservationEnd::Replanned, .. } => {
                        r.replan_rejected += 1
                    }
                    _ => {}
                }
            }
        }
        if result.is_err() {
            // A refused event changes nothing, not even the clock.
            self.now_ms = before;
            self.commands.clear();
        }
        result.map(|()| std::mem::take(&mut self.commands))
    }

    fn apply(&mut self, event: Event) -> Result<(), EngineError> {
        match event {
            Event::NodeRegistered(spec) => {
                let was_lost =
                    self.state.node_index.get(&spec.name).map(|&i| self.state.nodes[i as usize].state)
                        == Some(GANTRY_NODE_LOST);
                let NodeId(idx) = self.state.register_node(&spec)?;
                // A new node, or one back from the dead, is empty from now on.
                let meta = &mut self.state.node_meta[idx as usize];
                if meta.live_containers == 0 && (was_lost || meta.idle_since_ms.is_none()) {
                    meta.idle_since_ms = Some(self.now_ms);
                }
            }
            Event::NodeStateChanged { node, state } => {
                let idx = self.node_idx(&node)?;
                let n = &mut self.state.nodes[idx as usize];
                if n.state == GANTRY_NODE_LOST {
                    return Err(EngineError::Conflict(format!("node `{node}` is lost; it must re-register")));
                }
                n.state = match state {
                    NodeCondition::Running => GANTRY_NODE_RUNNING,
                    NodeCondition::Draining => GANTRY_NODE_DRAINING,
                    NodeCondition::Unhealthy => GANTRY_NODE_UNHEALTHY,
                };
                self.state.recompute_capacity();
                self.state.node_generation += 1;
            }
            Event::NodeLost { node } => {
                let idx = self.node_idx(&node)?;
                self.lose_node(idx);
            }
            Event::NodeUsageReported { node, used } => {
                let idx = self.node_idx(&node)?;
                if self.state.nodes[idx as usize].state == GANTRY_NODE_LOST {
                    return Err(EngineError::Conflict(format!("node `{node}` is lost; it must re-register")));
                }
                self.state.node_usage[idx as usize] = GantryNodeUsage {
                    cpu_millis: used.cpu_millis,
                    memory_bytes: used.memory_bytes,
                    gpus_busy: used.gpus,
                    reserved: 0,
                    // 0 means "never sampled", so a sample at time 0 is stamped 1 ms.
                    sampled_ms: self.now_ms.max(1),
                };
            }
            Event::AppSubmitted(spec) => self.submit(spec)?,
            Event::AppSubmittedWithId { app, spec } => {
                if app.0 == 0 || app.0 >= self.state.next_app {
                    return Err(EngineError::Invalid {
                        what: "application id",
                        reason: format!("application {} was never handed out", app.0),
                    });
                }
                let restored = RestoredApp {
                    id: app,
                    state: GANTRY_APP_NEW,
                    failures: 0,
                    submit_ms: self.now_ms,
                    completed: Vec::new(),
                    from_store: false,
                };
                let id = self.insert_app(spec, Some(restored))?;
                self.commands.push(Command::AppAccepted { app: id });
            }
            Event::IdsTaken { app_below, container_below, reservation_below } => {
                let st = &mut self.state;
                st.next_app = st.next_app.max(app_below);
                st.next_container = st.next_container.max(container_below);
                st.next_reservation = st.next_reservation.max(reservation_below);
            }
            Event::AppRestored { app, spec, state, failures, submit_ms, completed } => {
                let restored =
                    RestoredApp { id: app, state, failures, submit_ms, completed, from_store: true };
                let id = self.insert_app(spec, Some(restored))?;
                // Every container completed before the restart, but its end was not stored:
                // nothing will exit again to finish it, so it finishes now.
                if let Some(i) = self.state.app_index(id) {
                    self.finish_if_done(i);
                }
            }
            Event::ContainerRestored { container, app, request, node, gpus, running } => {
                self.restore_container(RestoredContainer { container, app, request, node, gpus, running })?;
            }
            Event::RestoreEnded => self.restart_partial_gangs(),
            Event::AppKillRequested { app } => {
                let i = self.app_idx(app)?;
                if app_is_terminal(self.state.apps[i as usize].state) {
                    return Err(EngineError::Conflict(format!("application {} has already ended", app.0)));
                }
                self.end_app(i, GANTRY_APP_KILLED, KILLED_BY_REQUEST.into(), KillReason::AppKilled);
            }
            Event::AppWithdrawn { app, reason } => {
                let i = self.app_idx(app)?;
                if !app_is_terminal(self.state.apps[i as usize].state) {
                    self.end_app(i, GANTRY_APP_KILLED, reason, KillReason::AppKilled);
                }
            }
            Event::ReservationSubmitted { id, request } => self.submit_reservation(id, request)?,
            Event::ReservationUpdated { id, request } => self.update_reservation(id, request)?,
            Event::ReservationDeleted { id } => {
                let book = self.book.as_mut().ok_or(EngineError::NoReservationPlanner)?;
                book.delete(&mut self.state, id, &mut self.commands)?;
            }
            Event::ReservationRestored { id, request, submit_ms, allocation } => {
                let now = self.now_ms;
                let book = self.book.as_mut().ok_or(EngineError::NoReservationPlanner)?;
                let restored = Restored { id, request, submit_ms, allocation };
                book.restore(&mut self.state, now, restored, &mut self.commands)?;
            }
            Event::OptimizeReservations => {
                if self.book.is_none() || self.profile.reserve.is_none() {
                    return Err(EngineError::NoReservationPlanner);
                }
                self.optimize_reservations();
            }
            Event::ContainerStarted { container } => {
                let i = self.container_idx(container)?;
                let c = &mut self.state.containers[i as usize];
                if c.state == GANTRY_CONTAINER_ALLOCATED {
                    c.state = GANTRY_CONTAINER_RUNNING;
                    let a = c.app as usize;
                    if self.state.apps[a].state == GANTRY_APP_ACCEPTED {
                        self.state.apps[a].state = GANTRY_APP_RUNNING;
                        self.app_changed(a as u32, String::new());
                    }
                }
            }
            Event::ContainerExited { container, exit_code, diagnostics } => {
                let i = self.container_idx(container)?;
                self.container_exited(i, exit_code, false, &diagnostics);
            }
            Event::ContainerLost { container } => {
                let i = self.container_idx(container)?;
                self.container_exited(i, -1, true, "was lost: its node's agent no longer had it");
            }
            Event::Tick => self.run_cycle(),
        }
        Ok(())
    }

    // ----- lookups ------------------------------------------------------------------------

    fn node_idx(&self, name: &str) -> Result<u32, EngineError> {
        self.state.node_index.get(name).copied().ok_or_else(|| EngineError::UnknownNode(name.to_owned()))
    }

    fn app_idx(&self, app: AppId) -> Result<u32, EngineError> {
        self.state.app_index.get(&app.0).copied().ok_or(EngineError::UnknownApp(app.0))
    }

    fn container_idx(&self, c: ContainerId) -> Result<u32, EngineError> {
        match self.state.container_index.get(&c.0) {
            Some(&i) if container_is_live(self.state.containers[i as usize].state) => Ok(i),
            _ => Err(EngineError::UnknownContainer(c.0)),
        }
    }
}
