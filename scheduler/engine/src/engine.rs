//! The engine: events in, commands out. A `Tick` runs one scheduling cycle:
//! admit → order pending → place → validate → commit → commands (and `rebalance` when due).

use crate::error::EngineError;
use crate::event::{Command, Event, KillReason, NodeCondition};
use crate::fifo::FirstFitFifo;
use crate::model::*;
use crate::plugin_log::{Incident, LogLimiter};
use crate::policy::{Policy, PolicyError, Profile, StaticPolicy, hook_name};
use crate::reservations::book::Restored;
use crate::reservations::{ReservationBook, ReservationEnd};
use crate::rng::SplitMix64;
use crate::state::{AppMeta, AppSummary, ClusterState, ContainerMeta, app_is_terminal, container_is_live};
use crate::validate::{self, PlaceNote, RebalanceAction, Rejections};
use crate::waiting::{self, WaitingBook};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, View};

/// Identity of an application recovered from a durable store.
struct RestoredApp {
    id: AppId,
    state: u32,
    failures: u32,
    submit_ms: u64,
    /// Completed containers per request (may be shorter than the requests).
    completed: Vec<u32>,
    /// Recovered from the driver's store (not a new submission under a handed-out id): an app
    /// of a reservation that ended meanwhile may fall back to the plan's default queue.
    from_store: bool,
}

/// A container recovered from a durable store.
struct RestoredContainer {
    container: ContainerId,
    app: AppId,
    request: u32,
    node: String,
    gpus: Vec<u32>,
    running: bool,
}

/// The diagnostics of an application killed by its user (the driver stores the same words
/// before it asks the engine, so the store and the engine agree).
pub const KILLED_BY_REQUEST: &str = "killed by request";

/// Grace period given to containers of a killed application, ms.
pub const APP_KILL_GRACE_MS: u64 = 10_000;

/// Counters of the engine's work, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Containers placed (launch commands issued).
    pub placements: u64,
    /// Decisions rejected by validation, by reason.
    pub rejected: Rejections,
    /// Policy calls that failed (error code, panic, protocol violation, or malformed output).
    pub policy_failures: u64,
    /// Times a policy was quarantined.
    pub quarantines: u64,
    /// Cycles whose placement was done by the built-in first-fit FIFO instead of a configured
    /// plugin (because it failed or was quarantined).
    pub fallback_placements: u64,
    /// Containers preempted (PREEMPT or KILL by a rebalance policy), and what they held, by the
    /// index of their leaf queue (queues are never removed, so indexes are stable).
    pub preempted_by_queue: Vec<Reclaimed>,
    /// What the reservation plan did.
    pub reservations: ReservationStats,
}

/// Counts of the reservation plan's outcomes since the engine started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReservationStats {
    /// Submissions and updates accepted.
    pub admitted: u64,
    /// Submissions and updates rejected (no room).
    pub rejected: u64,
    /// Allocations changed by a replan, an update that made room, or the optimiser.
    pub moved: u64,
    /// Reservations ended at their deadline.
    pub expired: u64,
    /// Reservations deleted by a client.
    pub deleted: u64,
    /// Reservations a replan after a capacity loss could not keep.
    pub replan_rejected: u64,
    /// `reserve` calls the built-in answered instead of the planner (none configured,
    /// quarantined, failed, or its answer refused).
    pub builtin: u64,
}

/// What rebalancing took from one queue since the engine started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    /// Containers stopped.
    pub containers: u64,
    /// Their resources, summed.
    pub resources: Resources,
}

/// A loaded policy, its health and its record.
pub(crate) struct PolicySlot {
    pub(crate) policy: Box<dyn Policy>,
    consecutive_failures: u32,
    pub(crate) quarantined_until: Option<u64>,
    /// Its decisions refused by validation, by reason, since the engine started.
    pub(crate) rejected: Rejections,
    /// Its failed calls since the engine started.
    failures: u64,
    /// Times it was quarantined since the engine started.
    quarantines: u64,
    /// Its failed calls that were panics, and calls past its budget, since the engine started.
    panics: u64,
    timeouts: u64,
    /// Which of its incidents to log.
    pub(crate) log: LogLimiter,
}

impl PolicySlot {
    /// A call succeeded: the failures in a row start again from zero.
    pub(crate) fn succeeded(&mut self) {
        self.consecutive_failures = 0;
    }
}

/// What a policy call produced.
enum CallResult {
    /// Decisions to validate (in the engine's reusable buffer).
    Decisions,
    /// No policy for the hook (or quarantined): use the built-in behaviour.
    Builtin,
}

/// Health, identity and record of a loaded policy, for status pages and per-plugin metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyStatus {
    /// Policy name.
    pub name: String,
    /// Failed calls in a row.
    pub consecutive_failures: u32,
    /// Until when (engine ms) it is quarantined.
    pub quarantined_until: Option<u64>,
    /// Its decisions refused by validation, by reason, since the engine started.
    pub rejected: Rejections,
    /// Its failed calls (error, panic, protocol violation, malformed output) so far.
    pub failures: u64,
    /// Times it was quarantined so far.
    pub quarantines: u64,
    /// Its failed calls that were panics caught at the boundary.
    pub panics: u64,
    /// Its failed calls that ran past its budget (or came while such a call still ran).
    pub timeouts: u64,
}

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
            policies: policies
                .into_iter()
                .map(|policy| PolicySlot {
                    policy,
                    consecutive_failures: 0,
                    quarantined_until: None,
                    rejected: Rejections::default(),
                    failures: 0,
                    quarantines: 0,
                    panics: 0,
                    timeouts: 0,
                    log: LogLimiter::default(),
                })
                .collect(),
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
                self.insert_app(spec, Some(restored))?;
            }
            Event::ContainerRestored { container, app, request, node, gpus, running } => {
                self.restore_container(RestoredContainer { container, app, request, node, gpus, running })?;
            }
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

    // ----- submissions ---------------------------------------------------------------------

    fn submit(&mut self, spec: AppSpec) -> Result<(), EngineError> {
        let id = self.insert_app(spec, None)?;
        self.commands.push(Command::AppAccepted { app: id });
        Ok(())
    }

    /// Records an application: a new one (the engine picks its id), or one recovered from a
    /// driver's durable store with its id, state and failures so far.
    fn insert_app(&mut self, spec: AppSpec, restored: Option<RestoredApp>) -> Result<AppId, EngineError> {
        spec.validate()?;
        let queue =
            match self.state.queue_index.get(&spec.queue) {
                Some(&q) if self.state.queues[q as usize].flags & GANTRY_QUEUE_LEAF != 0 => q,
                _ => match self.book.as_ref().and_then(|b| {
                    b.resolve_queue(&spec.queue, restored.as_ref().is_some_and(|r| r.from_store))
                }) {
                    Some(q) => q,
                    None => return Err(EngineError::UnknownQueue(spec.queue)),
                },
            };
        if let Some(r) = &restored {
            if r.id.0 == 0 || self.state.app_index.contains_key(&r.id.0) {
                return Err(EngineError::Conflict(format!("application {} already exists", r.id.0)));
            }
            if !matches!(r.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                return Err(EngineError::Invalid {
                    what: "restored application",
                    reason: format!("state {} is not a live state", r.state),
                });
            }
            let too_many = r.completed.len() > spec.requests.len()
                || r.completed.iter().zip(&spec.requests).any(|(&done, q)| done > q.count);
            if too_many {
                return Err(EngineError::Invalid {
                    what: "restored application",
                    reason: format!("completed containers {:?} exceed its requests", r.completed),
                });
            }
        }
        let st = &mut self.state;
        let id = match &restored {
            Some(r) => {
                st.next_app = st.next_app.max(r.id.0 + 1);
                r.id.0
            }
            None => {
                st.next_app += 1;
                st.next_app - 1
            }
        };
        let submit_ms = restored.as_ref().map_or(self.now_ms, |r| r.submit_ms);
        let mut completed = vec![0; spec.requests.len()];
        if let Some(r) = &restored {
            completed[..r.completed.len()].copy_from_slice(&r.completed);
        }
        let app_idx = st.apps.len() as u32;
        let start = st.requests.len() as u32;
        for (k, r) in spec.requests.iter().enumerate() {
            let selector = st.intern_labels(&r.selector);
            let preferred = st.intern_labels(&r.preferred);
            let mut flags = 0;
            if r.gang {
                flags |= GANTRY_REQUEST_GANG;
            }
            if r.master {
                flags |= GANTRY_REQUEST_MASTER;
            }
            flags |= match r.rack_affinity {
                RackAffinity::None => 0,
                RackAffinity::Preferred => GANTRY_REQUEST_SAME_RACK_PREFERRED,
                RackAffinity::Required => GANTRY_REQUEST_SAME_RACK_REQUIRED,
            };
            st.requests.push(GantryRequest {
                id: st.next_request,
                app: app_idx,
                flags,
                resources: r.resources,
                count: r.count,
                // Completed containers stay placed: their work is done.
                placed: completed[k],
                priority: r.priority,
                reserved: 0,
                selector,
                preferred,
                expected_ms: r.expected_ms,
                slow_ms: r.slow_ms,
                deadline_ms: r.deadline_ms,
                submit_ms,
            });
            st.next_request += 1;
        }
        let user = st.strings.intern(&spec.user);
        let failures = restored.as_ref().map_or(0, |r| r.failures);
        self.maybe_pending.push(st.apps.len() as u32);
        st.apps.push(GantryApp {
            id,
            queue,
            // A restored app is at most ACCEPTED until its containers are restored too.
            state: restored.as_ref().map_or(GANTRY_APP_NEW, |r| r.state.min(GANTRY_APP_ACCEPTED)),
            user,
            priority: spec.priority,
            attempt: failures + 1,
            submit_ms,
            requests: GantryRange { start, len: spec.requests.len() as u32 },
            used: GantryResources::default(),
        });
        let max_attempts =
            if spec.max_attempts == 0 { self.config.default_max_attempts } else { spec.max_attempts };
        st.app_meta.push(AppMeta {
            name: spec.name,
            max_attempts,
            failures,
            live_containers: 0,
            diagnostics: String::new(),
            completed,
            waiting: GANTRY_NONE,
        });
        st.app_index.insert(id, app_idx);
        if restored.as_ref().is_some_and(|r| r.state > GANTRY_APP_ACCEPTED) {
            // Stored RUNNING, ACCEPTED here until its containers come back: said, so the driver's
            // store follows (it is RUNNING again, and said, once one is restored running).
            self.app_changed(app_idx, String::new());
        }
        Ok(AppId(id))
    }

    /// Re-creates a container recovered from a driver's durable store on its node, with its id
    /// and GPUs, charging node, app and queues as a placement would.
    fn restore_container(&mut self, r: RestoredContainer) -> Result<(), EngineError> {
        let app = self.app_idx(r.app)?;
        let node = self.node_idx(&r.node)?;
        let st = &self.state;
        if r.container.0 == 0 || st.container_index.contains_key(&r.container.0) {
            return Err(EngineError::Conflict(format!("container {} already exists", r.container.0)));
        }
        let a = st.apps[app as usize];
        if app_is_terminal(a.state) || r.request >= a.requests.len {
            return Err(EngineError::Invalid {
                what: "restored container",
                reason: format!("application {} has no live request {}", r.app.0, r.request),
            });
        }
        let request = a.requests.start + r.request;
        let req = st.requests[request as usize];
        let n = st.nodes[node as usize];
        if req.placed >= req.count || !n.allocated.plus(&req.resources).fits_in(&n.capacity) {
            return Err(EngineError::Conflict(format!(
                "container {} does not fit its request or node any more",
                r.container.0
            )));
        }
        let free: Vec<u32> = View::range(&st.gpus, n.gpus)
            .iter()
            .filter(|g| g.container == GANTRY_NONE)
            .map(|g| g.index)
            .collect();
        if r.gpus.len() != req.resources.gpus as usize || !r.gpus.iter().all(|g| free.contains(g)) {
            return Err(EngineError::Conflict(format!(
                "container {} holds GPUs {:?} that are not free on `{}`",
                r.container.0, r.gpus, r.node
            )));
        }
        self.state.next_container = self.state.next_container.max(r.container.0 + 1);
        let idx = self.insert_container(request, node, r.container.0, Some(&r.gpus));
        let running = r.running;
        let st = &mut self.state;
        if running {
            st.containers[idx as usize].state = GANTRY_CONTAINER_RUNNING;
            if st.apps[app as usize].state == GANTRY_APP_ACCEPTED {
                st.apps[app as usize].state = GANTRY_APP_RUNNING;
                // Said, so the driver stores it: a silent change left the store behind.
                self.app_changed(app, String::new());
            }
        }
        Ok(())
    }

    // ----- lifecycle -----------------------------------------------------------------------

    fn app_changed(&mut self, app: u32, diagnostics: String) {
        let a = &self.state.apps[app as usize];
        self.commands.push(Command::AppStateChanged { app: AppId(a.id), state: a.state, diagnostics });
    }

    /// Releases a container's resources from its node, app, queues and GPUs.
    fn release(&mut self, i: u32) {
        let now = self.now_ms;
        let st = &mut self.state;
        let c = st.containers[i as usize];
        let meta = &mut st.node_meta[c.node as usize];
        meta.live_containers = meta.live_containers.saturating_sub(1);
        if meta.live_containers == 0 {
            meta.idle_since_ms = Some(now);
        }
        let node = &mut st.nodes[c.node as usize];
        node.allocated = node.allocated.minus(&c.resources);
        let gpus = node.gpus;
        for g in &mut st.gpus[gpus.start as usize..(gpus.start + gpus.len) as usize] {
            if g.container == i {
                g.container = GANTRY_NONE;
            }
        }
        let node_state = node.state;
        let app = &mut st.apps[c.app as usize];
        app.used = app.used.minus(&c.resources);
        let queue = app.queue;
        st.charge_queue(queue, &c.resources, false);
        st.dirty = true;
        if !matches!(node_state, GANTRY_NODE_RUNNING | GANTRY_NODE_LOST) {
            // What a draining node holds is part of the queues' base (see recompute_capacity).
            st.recompute_capacity();
        }
    }

    /// Counts a container a rebalance policy stops against its leaf queue, once: one already
    /// stopping (preempted earlier and killed in its grace, or ending with its app) is not.
    fn count_reclaimed(&mut self, container: u32) {
        let c = self.state.containers[container as usize];
        if c.state == GANTRY_CONTAINER_STOPPING {
            return;
        }
        let queue = self.state.apps[c.app as usize].queue as usize;
        let by_queue = &mut self.stats.preempted_by_queue;
        if by_queue.len() <= queue {
            by_queue.resize(queue + 1, Reclaimed::default());
        }
        by_queue[queue].containers += 1;
        by_queue[queue].resources = by_queue[queue].resources.plus(&c.resources);
    }

    /// Asks a live container to stop; it stays live (and holds resources) until its exit. A
    /// stopping container is no longer a preemption candidate.
    fn stop_container(&mut self, i: u32, grace_ms: u64, reason: KillReason) {
        self.state.container_meta[i as usize].candidate_since_ms = None;
        let c = &mut self.state.containers[i as usize];
        c.flags &= !GANTRY_CONTAINER_PREEMPT_CANDIDATE;
        if c.state == GANTRY_CONTAINER_STOPPING && grace_ms > 0 {
            return;
        }
        if c.state != GANTRY_CONTAINER_STOPPING {
            // It no longer counts as placed for its request (a gang restart resets the whole gang).
            let r = &mut self.state.requests[c.request as usize];
            r.placed = r.placed.saturating_sub(1);
            self.maybe_pending.push(c.app);
        }
        c.state = GANTRY_CONTAINER_STOPPING;
        if reason == KillReason::Preempted {
            c.flags |= GANTRY_CONTAINER_PREEMPTING;
        }
        let meta = &mut self.state.container_meta[i as usize];
        meta.kill_reason.get_or_insert(reason);
        self.commands.push(Command::Kill {
            container: ContainerId(c.id),
            node: NodeId(c.node),
            grace_ms,
            reason,
        });
    }

    /// Ends an app: records the state and stops all its live containers.
    fn end_app(&mut self, app: u32, state: u32, diagnostics: String, reason: KillReason) {
        self.state.apps[app as usize].state = state;
        self.state.app_meta[app as usize].diagnostics.clone_from(&diagnostics);
        self.waiting.forget(&mut self.state, app);
        self.state.dirty = true;
        self.app_changed(app, diagnostics);
        for i in 0..self.state.containers.len() as u32 {
            let c = self.state.containers[i as usize];
            if c.app == app && matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING) {
                self.stop_container(i, APP_KILL_GRACE_MS, reason);
            }
        }
    }

    /// Puts a container's request back to pending after the container was lost, failed or
    /// preempted. A gang restarts as a whole: its live siblings are stopped.
    fn repend(&mut self, i: u32) {
        let c = self.state.containers[i as usize];
        let req = self.state.requests[c.request as usize];
        if req.flags & GANTRY_REQUEST_GANG != 0 {
            for j in 0..self.state.containers.len() as u32 {
                let s = self.state.containers[j as usize];
                if j != i
                    && s.request == c.request
                    && matches!(s.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
                {
                    self.stop_container(j, 0, KillReason::GangRestart);
                }
            }
            self.state.requests[c.request as usize].placed = 0;
            let k = c.request - self.state.apps[c.app as usize].requests.start;
            self.state.app_meta[c.app as usize].completed[k as usize] = 0;
            self.maybe_pending.push(c.app);
        }
    }

    /// A container ended: `words` is how, as its driver tells it (empty: its exit status).
    fn container_exited(&mut self, i: u32, exit_code: i32, lost: bool, words: &str) {
        let c = self.state.containers[i as usize];
        let was_stopping = c.state == GANTRY_CONTAINER_STOPPING;
        let told = self.exit_words(i, exit_code, words);
        self.state.ended_words.insert(c.id, told.clone());
        self.release(i);
        let meta = &mut self.state.app_meta[c.app as usize];
        meta.live_containers = meta.live_containers.saturating_sub(1);
        let new_state = if lost {
            GANTRY_CONTAINER_LOST
        } else if was_stopping {
            GANTRY_CONTAINER_KILLED
        } else if exit_code == 0 {
            GANTRY_CONTAINER_COMPLETED
        } else {
            GANTRY_CONTAINER_FAILED
        };
        self.state.containers[i as usize].state = new_state;
        self.state.container_meta[i as usize].exit_code = Some(exit_code);
        let app = c.app;
        if app_is_terminal(self.state.apps[app as usize].state) {
            return;
        }
        if was_stopping {
            if self.state.container_meta[i as usize].kill_reason == Some(KillReason::Preempted) {
                self.state.app_meta[app as usize].diagnostics = format!("{told}; it runs again");
            }
            // Its request was put back (a gang restarted) when it was asked to stop; it may have
            // been the app's last live container.
            self.finish_if_done(app);
        } else if new_state == GANTRY_CONTAINER_COMPLETED {
            let k = c.request - self.state.apps[app as usize].requests.start;
            self.state.app_meta[app as usize].completed[k as usize] += 1;
            self.finish_if_done(app);
        } else {
            let r = &mut self.state.requests[c.request as usize];
            r.placed = r.placed.saturating_sub(1);
            self.maybe_pending.push(app);
            let meta = &mut self.state.app_meta[app as usize];
            if new_state == GANTRY_CONTAINER_FAILED {
                meta.failures += 1;
                if meta.failures >= meta.max_attempts {
                    let msg = format!("{told}; {} of {} attempts used", meta.failures, meta.max_attempts);
                    self.end_app(app, GANTRY_APP_FAILED, msg, KillReason::AppFailed);
                    return;
                }
                meta.diagnostics = format!(
                    "attempt {} of {} failed: {told}; it runs again",
                    meta.failures, meta.max_attempts
                );
                self.state.apps[app as usize].attempt = meta.failures + 1;
            } else {
                meta.diagnostics = format!("{told}; it runs again (a loss uses no attempt)");
            }
            self.repend(i);
        }
    }

    /// How container `i` ended, in words: "container 7 " and `words` (the driver's account, or
    /// else its exit status), and why the engine had asked it to stop, if it had.
    fn exit_words(&self, i: u32, exit_code: i32, words: &str) -> String {
        let id = self.state.containers[i as usize].id;
        let how = if words.is_empty() { format!("exited with status {exit_code}") } else { words.to_owned() };
        match self.state.container_meta[i as usize].kill_reason {
            Some(reason) => format!("container {id} {how}; it had been asked to stop: {}", reason.describe()),
            None => format!("container {id} {how}"),
        }
    }

    fn finish_if_done(&mut self, app: u32) {
        let a = self.state.apps[app as usize];
        let all_placed = View::range(&self.state.requests, a.requests).iter().all(|r| r.placed == r.count);
        if all_placed && self.state.app_meta[app as usize].live_containers == 0 {
            let msg = "all containers completed".to_owned();
            self.state.apps[app as usize].state = GANTRY_APP_FINISHED;
            self.state.app_meta[app as usize].diagnostics.clone_from(&msg);
            self.state.dirty = true;
            self.app_changed(app, msg);
        }
    }

    fn lose_node(&mut self, node: u32) {
        self.state.nodes[node as usize].state = GANTRY_NODE_LOST;
        self.state.node_generation += 1;
        // A lost node's last measurement says nothing about the machine that comes back.
        self.state.node_usage[node as usize] = GantryNodeUsage::default();
        let words = format!(
            "was lost with its node {} (no word from its agent)",
            self.state.str(self.state.nodes[node as usize].name)
        );
        for i in 0..self.state.containers.len() as u32 {
            let c = self.state.containers[i as usize];
            if c.node == node && container_is_live(c.state) {
                self.container_exited(i, -1, true, &words);
            }
        }
        self.state.recompute_capacity();
    }

    // ----- the cycle -----------------------------------------------------------------------

    fn run_cycle(&mut self) {
        self.cycle += 1;
        self.stats.cycles += 1;
        // Last cycle's pending indexes are stale once compaction renumbers requests.
        self.pending.clear();
        self.rescan_pending |= self.state.compact();
        if let Some(book) = &mut self.book {
            book.follow(&mut self.state, self.now_ms, &mut self.commands);
        }
        self.optimize_when_due();
        self.admit_phase();
        self.rescan_pending |= self.state.compact();
        self.compute_pending();
        if !self.pending.is_empty() {
            self.order_phase();
            self.place_phase();
        }
        // Why the rest wait (and, with nothing pending, that nothing does).
        self.waiting.note(
            &mut self.state,
            &self.pending,
            &mut self.place_notes,
            self.place_policy,
            self.cycle,
        );
        self.place_notes.clear();
        if self.now_ms >= self.next_rebalance_ms {
            self.next_rebalance_ms = self.now_ms.saturating_add(self.config.rebalance_interval_ms);
            if self.profile.rebalance.is_some() {
                // Show rebalance what is still pending after this cycle's placements.
                self.compute_pending();
            }
            self.rebalance_phase();
        }
    }

    /// Builds the view for `hook` and calls the policy in `slot` (unless absent or quarantined),
    /// leaving its decisions in `self.buf`. Failures count toward quarantine.
    fn call(&mut self, hook: u32, slot: Option<usize>) -> CallResult {
        let Some(i) = slot else { return CallResult::Builtin };
        let now = self.now_ms;
        let p = &mut self.policies[i];
        if let Some(until) = p.quarantined_until {
            if now < until {
                return CallResult::Builtin;
            }
            p.quarantined_until = None;
            if std::mem::take(&mut p.log.quarantine_logged) {
                tracing::info!(policy = p.policy.name(), "quarantine over; trying the plugin again");
            }
        }
        let changes = self.state.view_changes(i);
        let view = self.state.view(hook, now, self.cycle, self.rng.next_u64(), &self.pending);
        self.buf.clear();
        match p.policy.call_with_changes(&view, &changes, &mut self.buf) {
            Ok(()) => CallResult::Decisions,
            Err(e) => {
                self.buf.clear();
                self.policy_failed(i, hook, &e);
                CallResult::Builtin
            }
        }
    }

    /// Counts a failed call of policy `i` toward its quarantine, and logs it (rate-limited,
    /// [`crate::plugin_log`]).
    pub(crate) fn policy_failed(&mut self, i: usize, hook: u32, e: &PolicyError) {
        self.stats.policy_failures += 1;
        let now = self.now_ms;
        let p = &mut self.policies[i];
        p.failures += 1;
        p.consecutive_failures += 1;
        let incident = Incident::of(e);
        match incident {
            Incident::Panicked => p.panics += 1,
            Incident::TimedOut => p.timeouts += 1,
            _ => {}
        }
        if let Some(l) = p.log.note(incident, now) {
            tracing::warn!(
                policy = p.policy.name(),
                hook = hook_name(hook),
                engine_ms = now,
                in_a_row = p.consecutive_failures,
                count = l.count,
                unlogged = l.unlogged,
                error = %e,
                "plugin call failed"
            );
        }
        if p.consecutive_failures >= self.config.quarantine_after {
            p.quarantined_until = Some(now.saturating_add(self.config.quarantine_ms));
            p.consecutive_failures = 0;
            p.quarantines += 1;
            self.stats.quarantines += 1;
            let logged = p.log.note(Incident::Quarantined, now);
            p.log.quarantine_logged = logged.is_some();
            if let Some(l) = logged {
                tracing::error!(
                    policy = p.policy.name(),
                    engine_ms = now,
                    quarantine_ms = self.config.quarantine_ms,
                    count = l.count,
                    unlogged = l.unlogged,
                    "plugin quarantined; the built-in policy stands in"
                );
            }
        }
    }

    /// Records the outcome of validating a `hook` call's decisions against the policy's health,
    /// and logs what was refused (rate-limited per reason): the plugin, the hook, the reason, how
    /// many, and the first such decision with what it concerned.
    fn judge(&mut self, slot: Option<usize>, hook: u32, rej: &Rejections) {
        self.stats.rejected.merge(rej);
        let Some(i) = slot else { return };
        let now = self.now_ms;
        let p = &mut self.policies[i];
        p.rejected.merge(rej);
        for (reason, n) in rej.iter() {
            let Some(l) = p.log.note(Incident::Rejected(reason), now) else { continue };
            let decision = rej.first(reason).map(|d| crate::plugin_log::describe(&self.state, &d, reason));
            tracing::warn!(
                policy = p.policy.name(),
                hook = hook_name(hook),
                engine_ms = now,
                reason = reason.as_str(),
                n,
                decision = decision.as_deref().unwrap_or(""),
                calls = l.count,
                unlogged_calls = l.unlogged,
                "decisions rejected"
            );
        }
        if rej.any_malformed() {
            let what: Vec<String> = rej
                .iter()
                .filter(|(r, _)| r.is_malformed())
                .map(|(r, n)| match rej.first(r) {
                    Some(d) if r == crate::validate::RejectReason::BadKind => {
                        format!("{n} {} (kind {})", r.as_str(), d.kind)
                    }
                    _ => format!("{n} {}", r.as_str()),
                })
                .collect();
            let e = PolicyError::Protocol(format!("malformed decisions: {}", what.join(", ")));
            self.policy_failed(i, hook, &e);
        } else {
            self.policies[i].consecutive_failures = 0;
        }
    }

    fn admit_phase(&mut self) {
        let any_new = self.state.apps.iter().any(|a| a.state == GANTRY_APP_NEW);
        if !any_new {
            return;
        }
        let slot = self.profile.admit;
        let mut outcome = validate::AdmitOutcome::default();
        if let CallResult::Decisions = self.call(GANTRY_HOOK_ADMIT, slot) {
            let mut rej = Rejections::default();
            outcome = validate::admit(&self.state, self.buf.as_slice(), &mut rej);
            self.judge(slot, GANTRY_HOOK_ADMIT, &rej);
        }
        for (app, reason) in outcome.rejected_apps {
            self.state.apps[app as usize].state = GANTRY_APP_REJECTED;
            let msg = format!("rejected at admission (reason code {reason})");
            self.state.app_meta[app as usize].diagnostics.clone_from(&msg);
            self.state.dirty = true;
            self.app_changed(app, msg);
        }
        for i in 0..self.state.apps.len() as u32 {
            if self.state.apps[i as usize].state == GANTRY_APP_NEW {
                self.state.apps[i as usize].state = GANTRY_APP_ACCEPTED;
                self.app_changed(i, String::new());
            }
        }
    }

    /// Pending requests in the default order: app priority, request priority (both higher
    /// first), then submission time and id (FIFO). Also refreshes each queue's `pending`.
    fn compute_pending(&mut self) {
        let st = &mut self.state;
        self.pending.clear();
        for q in &mut st.queues {
            q.pending = GantryResources::default();
        }
        let mut candidates = std::mem::take(&mut self.maybe_pending);
        if std::mem::take(&mut self.rescan_pending) {
            candidates.clear();
            candidates.extend(0..st.apps.len() as u32);
        } else {
            candidates.sort_unstable();
            candidates.dedup();
        }
        for ai in candidates {
            let Some(a) = st.apps.get(ai as usize) else { continue };
            if a.state == GANTRY_APP_NEW {
                // Not admitted yet: it may be next cycle.
                self.maybe_pending.push(ai);
                continue;
            }
            if !matches!(a.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                continue;
            }
            let mut any = false;
            for ri in a.requests.start..a.requests.start + a.requests.len {
                let r = &st.requests[ri as usize];
                debug_assert_eq!(r.app, ai);
                if r.placed < r.count {
                    any = true;
                    self.pending.push(ri);
                    let want = r.resources.times(r.count - r.placed);
                    let mut q = a.queue;
                    while let Some(rec) = st.queues.get_mut(q as usize) {
                        rec.pending = rec.pending.plus(&want);
                        q = rec.parent;
                    }
                }
            }
            if any {
                // Still pending after this cycle's placements? The next computation finds out.
                self.maybe_pending.push(ai);
            }
        }
        let (apps, requests) = (&st.apps, &st.requests);
        self.pending.sort_by_key(|&ri| {
            let r = &requests[ri as usize];
            let a = &apps[r.app as usize];
            (std::cmp::Reverse(a.priority), std::cmp::Reverse(r.priority), a.submit_ms, a.id, r.id)
        });
    }

    fn order_phase(&mut self) {
        let slot = self.profile.order;
        if let CallResult::Decisions = self.call(GANTRY_HOOK_ORDER, slot) {
            let mut rej = Rejections::default();
            let ordered = validate::order(&self.state, &self.pending, self.buf.as_slice(), &mut rej);
            self.pending = ordered;
            self.judge(slot, GANTRY_HOOK_ORDER, &rej);
        }
    }

    fn place_phase(&mut self) {
        let slot = self.profile.place;
        self.place_notes.clear();
        self.place_policy = None;
        let placements = match self.call(GANTRY_HOOK_PLACE, slot) {
            CallResult::Decisions => {
                let mut rej = Rejections::default();
                let p = validate::place(&self.state, self.buf.as_slice(), &mut rej, &mut self.place_notes);
                self.judge(slot, GANTRY_HOOK_PLACE, &rej);
                self.place_policy = slot.map(|i| i as u32);
                p
            }
            CallResult::Builtin => {
                if slot.is_some() {
                    self.stats.fallback_placements += 1;
                }
                let view = self.state.view(GANTRY_HOOK_PLACE, self.now_ms, self.cycle, 0, &self.pending);
                self.buf.clear();
                if let Err(e) = self.fallback.call(&view, &mut self.buf) {
                    tracing::error!(error = %e, "built-in placement failed");
                    self.buf.clear();
                }
                let mut rej = Rejections::default();
                let p = validate::place(&self.state, self.buf.as_slice(), &mut rej, &mut self.place_notes);
                self.place_notes.clear();
                debug_assert_eq!(rej.total(), 0, "built-in placement made invalid decisions");
                self.stats.rejected.merge(&rej);
                p
            }
        };
        for p in placements {
            self.commit_placement(p.request, p.node);
        }
    }

    fn commit_placement(&mut self, request: u32, node: u32) {
        let id = self.state.next_container;
        self.state.next_container += 1;
        let idx = self.insert_container(request, node, id, None);
        let st = &self.state;
        let c = st.containers[idx as usize];
        let app = st.apps[c.app as usize];
        let gpus = View::range(&st.gpus, st.nodes[node as usize].gpus)
            .iter()
            .filter(|g| g.container == idx)
            .map(|g| g.index)
            .collect();
        self.stats.placements += 1;
        self.commands.push(Command::Launch {
            container: ContainerId(id),
            app: AppId(app.id),
            request: request - app.requests.start,
            node: NodeId(node),
            resources: c.resources,
            gpus,
        });
    }

    /// Adds a container record (ALLOCATED) for `request` on `node` and charges it everywhere;
    /// GPUs are the given indexes, or the node's first free ones. Returns its index.
    fn insert_container(&mut self, request: u32, node: u32, id: u64, gpus: Option<&[u32]>) -> u32 {
        let st = &mut self.state;
        let req = st.requests[request as usize];
        let idx = st.containers.len() as u32;
        let meta = &mut st.node_meta[node as usize];
        meta.live_containers += 1;
        meta.idle_since_ms = None;
        let n = &mut st.nodes[node as usize];
        n.allocated = n.allocated.plus(&req.resources);
        let range = n.gpus;
        let mut taken = 0;
        for g in &mut st.gpus[range.start as usize..(range.start + range.len) as usize] {
            if taken == req.resources.gpus {
                break;
            }
            let wanted = gpus.is_none_or(|list| list.contains(&g.index));
            if g.container == GANTRY_NONE && wanted {
                g.container = idx;
                taken += 1;
            }
        }
        st.requests[request as usize].placed += 1;
        st.app_meta[req.app as usize].live_containers += 1;
        let app = &mut st.apps[req.app as usize];
        app.used = app.used.plus(&req.resources);
        let queue = app.queue;
        st.charge_queue(queue, &req.resources, true);
        let flags = if req.flags & GANTRY_REQUEST_MASTER != 0 { GANTRY_CONTAINER_MASTER } else { 0 };
        st.containers.push(GantryContainer {
            id,
            app: req.app,
            request,
            node,
            state: GANTRY_CONTAINER_ALLOCATED,
            resources: req.resources,
            start_ms: self.now_ms,
            flags,
            reserved: 0,
        });
        st.container_meta.push(ContainerMeta::default());
        st.container_index.insert(id, idx);
        idx
    }

    fn rebalance_phase(&mut self) {
        let slot = self.profile.rebalance;
        if slot.is_none() {
            return;
        }
        if let CallResult::Decisions = self.call(GANTRY_HOOK_REBALANCE, slot) {
            let mut rej = Rejections::default();
            let actions = validate::rebalance(&self.state, self.buf.as_slice(), &mut rej);
            self.judge(slot, GANTRY_HOOK_REBALANCE, &rej);
            // The candidates are exactly this call's marks: clear the others first.
            let now = self.now_ms;
            let marked: std::collections::HashSet<u32> = actions
                .iter()
                .filter_map(|a| match a {
                    RebalanceAction::Mark { container } => Some(*container),
                    _ => None,
                })
                .collect();
            for (i, (c, m)) in
                self.state.containers.iter_mut().zip(&mut self.state.container_meta).enumerate()
            {
                if marked.contains(&(i as u32)) {
                    c.flags |= GANTRY_CONTAINER_PREEMPT_CANDIDATE;
                    m.candidate_since_ms.get_or_insert(now);
                } else {
                    c.flags &= !GANTRY_CONTAINER_PREEMPT_CANDIDATE;
                    m.candidate_since_ms = None;
                }
            }
            for a in actions {
                match a {
                    RebalanceAction::Mark { .. } => {}
                    RebalanceAction::Preempt { container, grace_ms } => {
                        self.count_reclaimed(container);
                        self.stop_container(container, grace_ms, KillReason::Preempted);
                        self.repend(container);
                    }
                    RebalanceAction::Kill { container } => {
                        self.count_reclaimed(container);
                        self.stop_container(container, 0, KillReason::PolicyKill);
                        self.repend(container);
                    }
                    RebalanceAction::SetQueueCapacity { queue, guaranteed } => {
                        self.state.queues[queue as usize].guaranteed = guaranteed;
                        self.state.recompute_capacity();
                    }
                }
            }
        }
    }

    // ----- read access ---------------------------------------------------------------------

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

    /// Names and health of the loaded policies.
    pub fn policy_status(&self) -> Vec<PolicyStatus> {
        self.policies
            .iter()
            .map(|p| PolicyStatus {
                name: p.policy.name().to_owned(),
                consecutive_failures: p.consecutive_failures,
                quarantined_until: p.quarantined_until,
                rejected: p.rejected.clone(),
                failures: p.failures,
                quarantines: p.quarantines,
                panics: p.panics,
                timeouts: p.timeouts,
            })
            .collect()
    }

    /// Refuses a submission a container of which asks for more of a resource than the largest
    /// node that is not lost has (YARN's InvalidResourceRequestException against its maximum
    /// allocation). Accepts everything while no node is registered: right after a start or a
    /// restart the nodes are still coming, and an empty cluster is no measure.
    pub fn check_fits(&self, spec: &AppSpec) -> Result<(), EngineError> {
        let Some(largest) = self.state.largest_node() else { return Ok(()) };
        for (k, r) in spec.requests.iter().enumerate() {
            if let Some((dimension, need, max)) = waiting::exceeds(&r.resources, &largest) {
                return Err(EngineError::InvalidResourceRequest(format!(
                    "request {k} asks for {} per container, more than the maximum allocation of {} \
                     (the largest registered node's)",
                    dimension.amount(need),
                    dimension.amount(max)
                )));
            }
        }
        Ok(())
    }

    /// Why a live application waits, in words, as of the last cycle (`None` when nothing of it
    /// is pending, or it is not live).
    pub fn waiting_reason(&self, app: AppId) -> Option<String> {
        let names =
            |p: u32| self.policies.get(p as usize).map_or_else(String::new, |s| s.policy.name().to_owned());
        self.waiting.get(&self.state, app).map(|w| w.describe(&self.state, names))
    }

    /// An application's diagnostics as users see them: why it waits (if it does), then what
    /// happened to it last ([`AppMeta::diagnostics`]); remembered ones' final diagnostics.
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

impl ClusterState {
    /// Nodes.
    pub fn nodes(&self) -> &[GantryNode] {
        &self.nodes
    }
    /// Queues.
    pub fn queues(&self) -> &[GantryQueue] {
        &self.queues
    }
    /// Live applications.
    pub fn apps(&self) -> &[GantryApp] {
        &self.apps
    }
    /// Requests of live applications.
    pub fn requests(&self) -> &[GantryRequest] {
        &self.requests
    }
    /// Live containers (and, until the next cycle, those that just ended).
    pub fn containers(&self) -> &[GantryContainer] {
        &self.containers
    }
    /// GPUs.
    pub fn gpus(&self) -> &[GantryGpu] {
        &self.gpus
    }
    /// Label records (node labels, selectors, preferences).
    pub fn labels(&self) -> &[GantryLabel] {
        &self.labels
    }
    /// The id the next new application will get.
    pub fn next_app_id(&self) -> u64 {
        self.next_app
    }
    /// Reservations.
    pub fn reservations(&self) -> &[GantryReservation] {
        &self.reservations
    }
    /// Total allocatable resources of schedulable nodes.
    pub fn cluster(&self) -> GantryResources {
        self.cluster
    }
    /// The text of a string reference.
    pub fn str(&self, r: GantryStrRef) -> &str {
        self.strings.get(r)
    }
    /// A node's index by name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.node_index.get(name).map(|&i| NodeId(i))
    }
    /// A live app's index by id.
    pub fn app_index(&self, id: AppId) -> Option<u32> {
        self.app_index.get(&id.0).copied()
    }
    /// Side data of a live app, by index.
    pub fn app_meta(&self, i: u32) -> Option<&AppMeta> {
        self.app_meta.get(i as usize)
    }
    /// A live container's index by id.
    pub fn container_index(&self, id: ContainerId) -> Option<u32> {
        self.container_index.get(&id.0).copied()
    }
    /// Side data of a container, by index.
    pub fn container_meta(&self, i: u32) -> Option<&ContainerMeta> {
        self.container_meta.get(i as usize)
    }
}
