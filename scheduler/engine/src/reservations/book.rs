//! The book of reservations: their records (definition in engine time, accepted allocation),
//! their queues (`<plan>.reservation_<id>` under the plan queue, retired and reused when a
//! reservation ends), what all allocations hold together ([`Skyline`]), expiry and restore.
//!
//! Every change of a record goes through here so that the record, the skyline and the view's
//! arrays ([`super::view`]) never disagree.

use std::collections::BTreeMap;

use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::*;

use super::skyline::{self, Demand, Skyline};
use super::view::Entry;
use super::{AtomInterval, DEFAULT_CHILD, PlanConfig, PlannedPiece, ReservationEnd, ReservationRequest};
use crate::error::EngineError;
use crate::event::Command;
use crate::model::{ReservationId, Resources, check_name};
use crate::state::{ClusterState, GuaranteeRule};

/// An accepted reservation.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedReservation {
    /// Its id.
    pub id: ReservationId,
    /// As requested (the latest accepted update's).
    pub request: ReservationRequest,
    /// The arrival the engine used, ms.
    pub arrival_ms: u64,
    /// The deadline the engine used, ms.
    pub deadline_ms: u64,
    /// When it was accepted, ms.
    pub submit_ms: u64,
    /// Index of its queue.
    pub queue: u32,
    /// Its allocation, sorted by atom, then start.
    pub allocation: Vec<AtomInterval>,
    /// The expression in engine time: `window(arrival, deadline, request's shifted)`.
    absolute: Expr,
    /// Its atoms in pre-order.
    atoms: Vec<Atom>,
}

impl PlannedReservation {
    /// What it holds at `ms`.
    pub fn allocated_at(&self, ms: u64) -> Resources {
        super::allocated_at(&self.atoms, &self.allocation, ms)
    }

    /// The most its allocation holds at one instant.
    pub fn peak(&self) -> Resources {
        peak(&self.atoms, &self.allocation)
    }

    /// Its allocation summed into resources over time.
    pub fn pieces(&self) -> Vec<PlannedPiece> {
        super::pieces(&self.atoms, &self.allocation)
    }

    /// The expression in engine time (windows absolute).
    pub fn absolute_definition(&self) -> &Expr {
        &self.absolute
    }

    /// Its atoms in pre-order (what allocation pieces' `atom` indexes).
    pub fn atoms(&self) -> &[Atom] {
        &self.atoms
    }

    /// Whether any of its allocation lies before `now`.
    pub fn started(&self, now: u64) -> bool {
        self.allocation.iter().any(|p| p.start_ms < now)
    }
}

/// A request checked and put in engine time.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) request: ReservationRequest,
    pub(crate) arrival_ms: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) absolute: Expr,
    pub(crate) atoms: Vec<Atom>,
    /// Why it cannot be kept although valid: too little time is left after the time it takes
    /// to make room (`enforce_ahead_ms`).
    pub(crate) too_late: Option<String>,
}

/// The reservation a `reserve` call is about (ADMIT: a new one; UPDATE: an accepted one's new
/// definition), shown in the view while the planner answers.
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    pub(crate) id: ReservationId,
    pub(crate) prepared: Prepared,
    /// A submission (NEW), not an update.
    pub(crate) new: bool,
}

/// A reservation as a driver's store gives it back.
#[derive(Debug)]
pub(crate) struct Restored {
    pub(crate) id: ReservationId,
    pub(crate) request: ReservationRequest,
    pub(crate) submit_ms: u64,
    pub(crate) allocation: Vec<AtomInterval>,
}

/// What the validator needs of one reservation in a view.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) id: ReservationId,
    /// ACCEPTED (else NEW).
    pub(crate) accepted: bool,
    pub(crate) absolute: &'a Expr,
    pub(crate) atoms: &'a [Atom],
    /// Its accepted allocation (empty while NEW).
    pub(crate) old: &'a [AtomInterval],
    /// The atoms `old` names (an update's old definition's, else `atoms`).
    pub(crate) old_atoms: &'a [Atom],
}

/// The plan and the reservations in it.
#[derive(Debug)]
pub struct ReservationBook {
    config: PlanConfig,
    pub(crate) plan_queue: u32,
    pub(crate) default_queue: u32,
    capacity: Resources,
    reservations: BTreeMap<u64, PlannedReservation>,
    free_queues: Vec<u32>,
    generation: u64,
    /// What all accepted allocations hold together.
    pub(crate) skyline: Skyline,
    /// The reservation of the `reserve` call under way.
    pub(crate) staged: Option<Staged>,
    /// The follower step whose allocations the queues' guarantees show; `None` after a change.
    pub(crate) followed_step: Option<u64>,
    /// When the next OPTIMIZE call is due, engine ms.
    pub(crate) next_optimize_ms: u64,
}

/// The most `allocation` holds at one instant.
pub(crate) fn peak(atoms: &[Atom], allocation: &[AtomInterval]) -> Resources {
    super::pieces(atoms, allocation).iter().fold(Resources::default(), |m, p| m.max_each(&p.resources))
}

/// Adds (`sign` 1) or takes back (-1) `allocation` in `sky`.
fn on_skyline(sky: &mut Skyline, atoms: &[Atom], allocation: &[AtomInterval], sign: i128) {
    for p in allocation {
        if let Some(a) = atoms.get(p.atom as usize) {
            sky.add(p.start_ms, p.end_ms, &skyline::demand(&a.bundle, p.bundles), sign);
        }
    }
}

impl ReservationBook {
    /// Sets up the plan on `config.queue`: checks it is a configured leaf and gives it its
    /// `default` child.
    pub(crate) fn new(config: PlanConfig, state: &mut ClusterState) -> Result<Self, EngineError> {
        let bad = |m: String| EngineError::QueueConfig(format!("reservations: {m}"));
        if config.step_ms == 0 || config.horizon_ms < config.step_ms {
            return Err(bad("step_ms must be at least 1 and horizon_ms at least one step".into()));
        }
        let Some(&plan_queue) = state.queue_index.get(&config.queue) else {
            return Err(bad(format!("queue `{}` is not configured", config.queue)));
        };
        if state.queues[plan_queue as usize].flags & GANTRY_QUEUE_LEAF == 0 {
            return Err(bad(format!("queue `{}` must be a leaf queue", config.queue)));
        }
        let default_path = format!("{}.{DEFAULT_CHILD}", config.queue);
        let default_queue = state.add_queue(&default_path, plan_queue, 1.0, GuaranteeRule::Rest);
        state.recompute_capacity();
        state.plan.queue = plan_queue;
        state.plan.step_ms = config.step_ms;
        state.plan.horizon_ms = config.horizon_ms;
        Ok(ReservationBook {
            config,
            plan_queue,
            default_queue,
            capacity: Resources::default(),
            reservations: BTreeMap::new(),
            free_queues: Vec::new(),
            generation: 0,
            skyline: Skyline::default(),
            staged: None,
            followed_step: None,
            next_optimize_ms: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PlanConfig {
        &self.config
    }

    /// The accepted reservations, by id.
    pub fn reservations(&self) -> impl Iterator<Item = &PlannedReservation> {
        self.reservations.values()
    }

    /// One accepted reservation.
    pub fn get(&self, id: ReservationId) -> Option<&PlannedReservation> {
        self.reservations.get(&id.0)
    }

    /// How many reservations are accepted.
    pub fn len(&self) -> usize {
        self.reservations.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.reservations.is_empty()
    }

    /// What the plan can hand out now (the plan queue's guarantee).
    pub fn capacity(&self) -> Resources {
        self.capacity
    }

    /// The plan's generation: it changes whenever a reservation is added, moved or removed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The plan's capacity and what reservations hold, from `from_ms` to `to_ms` every
    /// `every_ms` (at least a follower step, at most 100,000 samples): `(ms, capacity, reserved)`.
    pub fn skyline(&self, from_ms: u64, to_ms: u64, every_ms: u64) -> Vec<(u64, Resources, Resources)> {
        let every = every_ms.max(self.config.step_ms).max(1);
        let mut out = Vec::new();
        let mut t = from_ms;
        while t < to_ms && out.len() < 100_000 {
            out.push((
                t,
                self.capacity,
                skyline::resources(&self.skyline.max_over(t, t.saturating_add(every))),
            ));
            t = t.saturating_add(every);
        }
        out
    }

    /// Path of the queue of reservation `id`.
    pub fn queue_path(id: ReservationId, plan_queue: &str) -> String {
        super::queue_path(id, plan_queue)
    }

    fn changed(&mut self) {
        self.generation += 1;
        self.followed_step = None;
    }

    /// A request checked and put in engine time, or why it is invalid.
    pub(crate) fn prepare(&self, request: ReservationRequest, now: u64) -> Result<Prepared, EngineError> {
        let invalid = |reason: String| EngineError::Invalid { what: "reservation", reason };
        check_name("reservation name", &request.name, true)?;
        check_name("reservation user", &request.user, true)?;
        if request.queue != self.config.queue {
            return Err(invalid(format!(
                "queue `{}` is not reservable: reservations are made in `{}`",
                request.queue, self.config.queue
            )));
        }
        let arrival = request.arrival_ms.unwrap_or(now);
        let deadline = request.deadline_ms.unwrap_or(arrival.saturating_add(self.config.horizon_ms));
        if deadline <= arrival {
            return Err(invalid(format!("deadline {deadline} is not after arrival {arrival}")));
        }
        if deadline <= now {
            return Err(invalid(format!("deadline {deadline} has passed (now {now})")));
        }
        let inner = request.definition.map_times(&|t| arrival.saturating_add(t));
        let absolute = Expr::Window(Window { start_ms: arrival, end_ms: deadline, inner: Box::new(inner) });
        absolute.validate().map_err(|e| invalid(e.to_string()))?;
        let atoms = absolute.atoms();
        Ok(Prepared { request, arrival_ms: arrival, deadline_ms: deadline, absolute, atoms, too_late: None })
    }

    /// `p` as a planner is asked to plan it at `now`: room for it cannot be made before it is
    /// admitted, so its allocation starts no sooner than `enforce_ahead_ms` from now (the
    /// expression's own times still count from the arrival). A request that leaves too little
    /// time then is valid but cannot be kept: [`Self::cannot_plan`] says why.
    pub(crate) fn for_admission(&self, mut p: Prepared, now: u64) -> Prepared {
        let ahead = self.config.enforce_ahead_ms;
        let earliest = now.saturating_add(ahead);
        if let Expr::Window(w) = &p.absolute {
            if ahead > 0 && earliest >= w.end_ms {
                p.too_late = Some(format!(
                    "no time to make room for it: its deadline is {} ms after its admission, within the \
                     {ahead} ms it takes ([reservations] enforce_ahead_ms)",
                    w.end_ms.saturating_sub(now)
                ));
            } else if ahead > 0 && earliest > w.start_ms {
                let narrowed = Expr::Window(Window { start_ms: earliest, ..w.clone() });
                match narrowed.validate() {
                    Ok(()) => p.absolute = narrowed,
                    Err(e) => {
                        p.too_late = Some(format!(
                            "no time to make room for it: allocations start {ahead} ms after admission \
                             ([reservations] enforce_ahead_ms), and then {e}"
                        ));
                    }
                }
            }
        }
        p
    }

    /// Why `p` cannot be planned, if its deadline lies beyond the horizon from `now` or too
    /// close to leave time to make room for it.
    pub(crate) fn cannot_plan(&self, p: &Prepared, now: u64) -> Option<String> {
        if let Some(why) = &p.too_late {
            return Some(why.clone());
        }
        let limit = now.saturating_add(self.config.horizon_ms);
        (p.deadline_ms > limit).then(|| {
            format!(
                "deadline {} is beyond the planning horizon ({} ms from now, until {limit})",
                p.deadline_ms, self.config.horizon_ms
            )
        })
    }

    fn entry(&self, r: &PlannedReservation, state: u32) -> Entry {
        Entry {
            id: r.id.0,
            queue: r.queue,
            state,
            arrival_ms: r.arrival_ms,
            deadline_ms: r.deadline_ms,
            accepted_ms: r.submit_ms,
            priority: r.request.priority,
        }
    }

    /// Shows a new reservation (NEW, no allocation) in the view for an ADMIT call; returns its
    /// view index.
    pub(crate) fn stage_new(
        &mut self,
        state: &mut ClusterState,
        id: ReservationId,
        prepared: Prepared,
    ) -> Result<u32, EngineError> {
        let e = Entry {
            id: id.0,
            queue: self.plan_queue,
            state: GANTRY_RESERVATION_NEW,
            arrival_ms: prepared.arrival_ms,
            deadline_ms: prepared.deadline_ms,
            accepted_ms: 0,
            priority: prepared.request.priority,
        };
        let at = state.plan_insert(&e, &prepared.absolute)?;
        self.staged = Some(Staged { id, prepared, new: true });
        Ok(at)
    }

    /// Shows an accepted reservation's new definition (and its old allocation) in the view for
    /// an UPDATE call; returns its view index.
    pub(crate) fn stage_update(
        &mut self,
        state: &mut ClusterState,
        id: ReservationId,
        prepared: Prepared,
    ) -> Result<u32, EngineError> {
        let Some(r) = self.reservations.get(&id.0) else {
            return Err(EngineError::Conflict(format!("reservation {} does not exist", id.0)));
        };
        let mut e = self.entry(r, GANTRY_RESERVATION_ACCEPTED);
        e.arrival_ms = prepared.arrival_ms;
        e.deadline_ms = prepared.deadline_ms;
        e.priority = prepared.request.priority;
        state.plan_set_definition(id.0, &prepared.absolute)?;
        state.plan_set_entry(&e);
        self.staged = Some(Staged { id, prepared, new: false });
        state
            .plan
            .index_of(id.0)
            .ok_or_else(|| EngineError::Conflict(format!("reservation {} is not in the view", id.0)))
    }

    /// Ends the staging of a call whose subject was not accepted: a new reservation leaves the
    /// view, an update's old definition comes back.
    pub(crate) fn unstage(&mut self, state: &mut ClusterState) {
        let Some(s) = self.staged.take() else { return };
        if s.new {
            state.plan_remove(s.id.0);
        } else if let Some(r) = self.reservations.get(&s.id.0) {
            let e = self.entry(r, GANTRY_RESERVATION_ACCEPTED);
            // The old definition was in the view a moment ago; it cannot fail now.
            let _ = state.plan_set_definition(s.id.0, &r.absolute);
            state.plan_set_entry(&e);
        }
    }

    /// Accepts the staged reservation with `allocation` (sorted): a new one gets its queue, an
    /// update its new definition. Returns its queue's index.
    pub(crate) fn accept_staged(
        &mut self,
        state: &mut ClusterState,
        now: u64,
        allocation: Vec<AtomInterval>,
    ) -> Option<u32> {
        let s = self.staged.take()?;
        let Prepared { request, arrival_ms, deadline_ms, absolute, atoms, .. } = s.prepared;
        let (queue, submit_ms) = if s.new {
            (self.take_queue(state, s.id), now)
        } else {
            let old = self.reservations.remove(&s.id.0)?;
            on_skyline(&mut self.skyline, &old.atoms, &old.allocation, -1);
            (old.queue, old.submit_ms)
        };
        on_skyline(&mut self.skyline, &atoms, &allocation, 1);
        let r = PlannedReservation {
            id: s.id,
            request,
            arrival_ms,
            deadline_ms,
            submit_ms,
            queue,
            allocation,
            absolute,
            atoms,
        };
        let e = self.entry(&r, GANTRY_RESERVATION_ACCEPTED);
        state.plan_set_entry(&e);
        state.plan_set_allocation(r.id.0, &r.allocation, r.peak());
        self.reservations.insert(r.id.0, r);
        self.changed();
        Some(queue)
    }

    /// Gives accepted reservation `id` a new allocation (sorted). Returns whether it changed.
    pub(crate) fn set_allocation(
        &mut self,
        state: &mut ClusterState,
        id: ReservationId,
        allocation: Vec<AtomInterval>,
    ) -> bool {
        let Some(r) = self.reservations.get_mut(&id.0) else { return false };
        if r.allocation == allocation {
            return false;
        }
        on_skyline(&mut self.skyline, &r.atoms, &r.allocation, -1);
        on_skyline(&mut self.skyline, &r.atoms, &allocation, 1);
        r.allocation = allocation;
        state.plan_set_allocation(id.0, &r.allocation, r.peak());
        self.changed();
        true
    }

    /// What the validator needs of the reservation at view index `i`.
    pub(crate) fn subject<'a>(&'a self, state: &ClusterState, i: u32) -> Option<Subject<'a>> {
        let id = state.reservations.get(i as usize)?.id;
        let record = self.reservations.get(&id);
        match &self.staged {
            Some(s) if s.id.0 == id => Some(Subject {
                id: s.id,
                accepted: !s.new,
                absolute: &s.prepared.absolute,
                atoms: &s.prepared.atoms,
                old: record.map_or(&[], |r| &r.allocation),
                old_atoms: record.map_or(&[], |r| &r.atoms),
            }),
            _ => record.map(|r| Subject {
                id: r.id,
                accepted: true,
                absolute: &r.absolute,
                atoms: &r.atoms,
                old: &r.allocation,
                old_atoms: &r.atoms,
            }),
        }
    }

    /// Deletes a reservation; its applications move to the default queue.
    pub(crate) fn delete(
        &mut self,
        state: &mut ClusterState,
        id: ReservationId,
        commands: &mut Vec<Command>,
    ) -> Result<(), EngineError> {
        if !self.reservations.contains_key(&id.0) {
            return Err(EngineError::Conflict(format!("reservation {} does not exist", id.0)));
        }
        self.end(state, id.0, ReservationEnd::Deleted, commands);
        Ok(())
    }

    /// Puts back a reservation from a driver's store with the allocation it had (not checked
    /// against the plan: while a restarted scheduler's nodes come back the plan is over the
    /// capacity seen so far). One whose deadline passed meanwhile is answered
    /// `ReservationEnded { Expired }` so the driver can forget it.
    pub(crate) fn restore(
        &mut self,
        state: &mut ClusterState,
        now: u64,
        restored: Restored,
        commands: &mut Vec<Command>,
    ) -> Result<(), EngineError> {
        let Restored { id, request, submit_ms, mut allocation } = restored;
        if id.0 == 0 || self.reservations.contains_key(&id.0) || state.plan.index_of(id.0).is_some() {
            return Err(EngineError::Conflict(format!("reservation {} already exists", id.0)));
        }
        let arrival = request.arrival_ms.unwrap_or(submit_ms);
        let deadline = request.deadline_ms.unwrap_or(arrival.saturating_add(self.config.horizon_ms));
        if deadline <= now {
            // It ended while the scheduler was down: nothing to restore.
            commands.push(Command::ReservationEnded { reservation: id, why: ReservationEnd::Expired });
            return Ok(());
        }
        let original = request.clone();
        let probe = ReservationRequest { arrival_ms: Some(arrival), deadline_ms: Some(deadline), ..request };
        let prepared = self.prepare(probe, arrival)?;
        let invalid = |reason: String| EngineError::Invalid { what: "restored reservation", reason };
        for p in &allocation {
            if p.atom as usize >= prepared.atoms.len() {
                return Err(invalid(format!("a piece names atom {}, of {}", p.atom, prepared.atoms.len())));
            }
            if p.end_ms <= p.start_ms || p.bundles == 0 {
                return Err(invalid("an empty piece".into()));
            }
        }
        allocation.sort();
        let queue = self.take_queue(state, id);
        let Prepared { arrival_ms, deadline_ms, absolute, atoms, .. } = prepared;
        let r = PlannedReservation {
            id,
            // As the client gave it (the arrival and deadline the engine used are beside it).
            request: original,
            arrival_ms,
            deadline_ms,
            submit_ms,
            queue,
            allocation,
            absolute,
            atoms,
        };
        let e = self.entry(&r, GANTRY_RESERVATION_ACCEPTED);
        if let Err(err) = state.plan_insert(&e, &r.absolute) {
            self.release_queue(state, queue);
            return Err(err);
        }
        on_skyline(&mut self.skyline, &r.atoms, &r.allocation, 1);
        state.plan_set_allocation(id.0, &r.allocation, r.peak());
        state.next_reservation = state.next_reservation.max(id.0 + 1);
        self.reservations.insert(id.0, r);
        self.changed();
        Ok(())
    }

    /// The queue for reservation `id`: a retired one renamed, or a new one.
    fn take_queue(&mut self, state: &mut ClusterState, id: ReservationId) -> u32 {
        let path = super::queue_path(id, &self.config.queue);
        let q = match self.free_queues.pop() {
            Some(q) => {
                state.rename_queue(q, &path, 1.0);
                q
            }
            None => state.add_queue(&path, self.plan_queue, 1.0, GuaranteeRule::Fixed(Resources::default())),
        };
        state.set_queue_rule(q, GuaranteeRule::Fixed(Resources::default()));
        q
    }

    fn release_queue(&mut self, state: &mut ClusterState, queue: u32) {
        state.retire_queue(queue);
        self.free_queues.push(queue);
    }

    /// Takes reservation `id` out of the plan: its applications move to `default`, its queue
    /// is retired.
    pub(crate) fn end(
        &mut self,
        state: &mut ClusterState,
        id: u64,
        why: ReservationEnd,
        commands: &mut Vec<Command>,
    ) {
        let Some(r) = self.reservations.remove(&id) else { return };
        on_skyline(&mut self.skyline, &r.atoms, &r.allocation, -1);
        state.plan_remove(id);
        let apps: Vec<u32> = state
            .apps
            .iter()
            .enumerate()
            .filter(|(_, a)| a.queue == r.queue)
            .map(|(i, _)| i as u32)
            .collect();
        for a in apps {
            state.move_app(a, self.default_queue);
        }
        self.release_queue(state, r.queue);
        commands.push(Command::ReservationEnded { reservation: r.id, why });
        self.changed();
    }

    /// Resolves an application's queue path for the plan: the plan queue itself means its
    /// `default`; a restored application whose reservation has ended goes to `default` too.
    pub(crate) fn resolve_queue(&self, path: &str, restored: bool) -> Option<u32> {
        if path == self.config.queue {
            return Some(self.default_queue);
        }
        let under = path.strip_prefix(self.config.queue.as_str()).is_some_and(|rest| rest.starts_with('.'));
        (restored && under).then_some(self.default_queue)
    }

    /// Follows the plan queue's guarantee (nodes registered, lost or drained): the plan's
    /// capacity from now on becomes it. Returns whether it fell in some dimension.
    pub(crate) fn set_capacity(&mut self, state: &mut ClusterState, cap: Resources) -> bool {
        let old = self.capacity;
        self.capacity = cap;
        state.plan.capacity = cap;
        cap.cpu_millis < old.cpu_millis || cap.memory_bytes < old.memory_bytes || cap.gpus < old.gpus
    }

    /// The capacity as a demand.
    pub(crate) fn capacity_demand(&self) -> Demand {
        skyline::of(&self.capacity)
    }

    /// The first instant from `now` on where the accepted allocations exceed the capacity.
    pub(crate) fn overcommitted(&self, now: u64) -> Option<u64> {
        self.skyline.first_over(now, &self.capacity_demand())
    }

    /// The accepted reservations holding something at `t`, newest first (YARN's order of
    /// deletion: latest accepted, then highest id).
    pub(crate) fn active_newest_first(&self, t: u64) -> Vec<ReservationId> {
        let mut v: Vec<&PlannedReservation> =
            self.reservations.values().filter(|r| !r.allocated_at(t).is_zero()).collect();
        v.sort_by_key(|r| (std::cmp::Reverse(r.submit_ms), std::cmp::Reverse(r.id.0)));
        v.iter().map(|r| r.id).collect()
    }

    /// Checks the book against itself: what all allocations hold together is the sum of the
    /// records' allocations, each sorted and naming atoms of its definition, and no reservation is
    /// left staged. Used by tests.
    pub fn check(&self) -> Result<(), String> {
        let mut sum = self.skyline.empty_like();
        for r in self.reservations.values() {
            if !r.allocation.is_sorted() || r.allocation.iter().any(|p| p.atom as usize >= r.atoms.len()) {
                return Err(format!("reservation {}: allocation unsorted or naming no atom", r.id.0));
            }
            on_skyline(&mut sum, &r.atoms, &r.allocation, 1);
        }
        if sum != self.skyline {
            return Err("the skyline is not the sum of the allocations".into());
        }
        if let Some(s) = &self.staged {
            return Err(format!("reservation {} is still staged", s.id.0));
        }
        Ok(())
    }

    /// Ids of the reservations whose deadline has passed at `now`.
    pub(crate) fn expired(&self, now: u64) -> Vec<u64> {
        self.reservations.values().filter(|r| r.deadline_ms <= now).map(|r| r.id.0).collect()
    }

    /// The records, for the follower.
    pub(crate) fn records(&self) -> impl Iterator<Item = &PlannedReservation> {
        self.reservations.values()
    }
}
