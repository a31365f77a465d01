//! Rayon reservations in the engine (seed 001; Curino et al., SoCC 2014): the plan, admission at
//! submission, the plan follower and replanning after a capacity loss.
//!
//! One configured leaf queue is *reservable* (YARN's plan queue): its guaranteed capacity is what
//! the plan ([`gantry_rayon::plan::Plan`]) hands out over time. At construction the engine gives
//! it a child `<plan>.default`, where best-effort work submitted to the plan queue runs. Each
//! accepted reservation gets a leaf `<plan>.reservation_<id>` whose guarantee **at every moment
//! is its planned allocation at that moment** ([`GuaranteeRule::Fixed`]); `default` takes what
//! the reservations leave ([`GuaranteeRule::Rest`]). Every queue of the plan may borrow up to the
//! whole plan queue, so idle reserved capacity is lent out, and a preemption plugin (which reads
//! guarantees) takes it back when the reservation's own work is waiting. When a reservation ends
//! (its deadline passes, it is deleted, or a replan rejects it) its applications move to
//! `default` and its queue is retired (its slot is reused by a later reservation).
//!
//! Times: a request's RDL expression counts from its `arrival` (default: now); the engine keeps
//! it in engine time (`window(arrival, deadline, expr shifted by arrival)`). The plan covers two
//! horizons from an origin on a step boundary and moves its origin forward once a horizon has
//! passed, so a deadline may always lie up to one horizon ahead.
//!
//! Replanning re-places only what a capacity loss overcommits ([`gantry_rayon::replan`]). A
//! reservation that has already run for a while is re-placed for the work left: what its plan
//! gave it before now is credited to its atoms in pre-order (exact for one atom and for `order`
//! chains; an approximation for `all` and `any`), and its windows start now.

use std::collections::BTreeMap;

use gantry_rayon::agents::{self, Agent};
use gantry_rayon::milp;
use gantry_rayon::plan::{Piece, Plan, Vector};
use gantry_rayon::rdl::{Atom, Expr, Window};
use gantry_rayon::replan::{self, ReservationInfo};
use gantry_sdk::abi::*;

use crate::error::EngineError;
use crate::event::Command;
use crate::model::{ReservationId, Resources, check_name};
use crate::state::{ClusterState, GuaranteeRule};

/// The name of the plan queue's child for work without a reservation.
pub const DEFAULT_CHILD: &str = "default";

/// How a capacity loss is re-planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replanner {
    /// Rayon's: move and reshape within windows, reject as few as possible (lowest priority,
    /// then newest).
    Rayon,
    /// YARN's `SimpleCapacityReplanner`: delete the newest reservations until the plan fits.
    YarnSimple,
}

/// The reservation system's configuration (`[reservations]` in the scheduler's TOML).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanConfig {
    /// The reservable leaf queue, e.g. `root.prod`.
    pub queue: String,
    /// The admission agent.
    pub agent: Agent,
    /// How a capacity loss is re-planned.
    pub replanner: Replanner,
    /// Plan step, ms.
    pub step_ms: u64,
    /// How far ahead a deadline may lie, ms.
    pub horizon_ms: u64,
}

impl PlanConfig {
    /// A plan on `queue` with the defaults: GREE, Rayon's replanner, 1 s steps, 24 h ahead.
    pub fn new(queue: impl Into<String>) -> Self {
        PlanConfig {
            queue: queue.into(),
            agent: Agent::Gree,
            replanner: Replanner::Rayon,
            step_ms: 1_000,
            horizon_ms: 24 * 3_600_000,
        }
    }
}

/// A client's reservation request.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationRequest {
    /// The plan queue it reserves in.
    pub queue: String,
    /// A name for people (need not be unique).
    pub name: String,
    /// Who asked.
    pub user: String,
    /// Higher is more important when a replan must reject something.
    pub priority: i32,
    /// When its window opens, engine ms; `None` = now. The expression counts from here.
    pub arrival_ms: Option<u64>,
    /// Deadline, engine ms; `None` = one horizon after the arrival.
    pub deadline_ms: Option<u64>,
    /// What it needs, times relative to the arrival.
    pub definition: Expr,
}

/// Capacity held from `start_ms` to `end_ms` (engine time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedPiece {
    /// Start, ms.
    pub start_ms: u64,
    /// End (exclusive), ms.
    pub end_ms: u64,
    /// Held throughout.
    pub resources: Resources,
}

/// An accepted reservation.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedReservation {
    /// Its id.
    pub id: ReservationId,
    /// As requested.
    pub request: ReservationRequest,
    /// The arrival the engine used, ms.
    pub arrival_ms: u64,
    /// The deadline the engine used, ms.
    pub deadline_ms: u64,
    /// When it was accepted, ms.
    pub submit_ms: u64,
    /// Index of its queue.
    pub queue: u32,
    /// Its allocation over time, sorted by start (pieces may overlap; they add up).
    pub pieces: Vec<PlannedPiece>,
    /// The expression in engine time.
    absolute: Expr,
}

impl PlannedReservation {
    /// What it holds at `ms`.
    pub fn allocated_at(&self, ms: u64) -> Resources {
        self.pieces
            .iter()
            .filter(|p| p.start_ms <= ms && ms < p.end_ms)
            .fold(Resources::default(), |acc, p| acc.plus(&p.resources))
    }

    /// The expression in engine time (windows absolute).
    pub fn absolute_definition(&self) -> &Expr {
        &self.absolute
    }
}

/// A request checked and put in engine and plan time.
struct Prepared {
    arrival: u64,
    deadline: u64,
    /// In engine time.
    abs: Expr,
    /// In plan time, starting no earlier than now.
    expr: Expr,
}

/// A reservation as a driver's store gives it back.
#[derive(Debug)]
pub(crate) struct Restored {
    pub(crate) id: ReservationId,
    pub(crate) request: ReservationRequest,
    pub(crate) submit_ms: u64,
    pub(crate) pieces: Vec<PlannedPiece>,
}

/// Why a reservation left the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationEnd {
    /// Its deadline passed.
    Expired,
    /// A client deleted it.
    Deleted,
    /// A replan after a capacity loss could not keep it.
    Replanned,
}

/// A copy of the plan for the offline optimiser, which runs outside the engine (it may take
/// seconds); its answer comes back as [`crate::Event::PlanOptimized`] and is applied only if
/// the plan has not changed since (`generation`).
#[derive(Debug, Clone)]
pub struct OptimizerJob {
    /// The plan's generation when copied.
    pub generation: u64,
    /// The plan.
    pub plan: Plan,
    /// Reservations that have not started, in plan time.
    pub requests: Vec<milp::Request>,
}

/// The plan and the reservations in it.
#[derive(Debug)]
pub struct ReservationBook {
    config: PlanConfig,
    plan_queue: u32,
    default_queue: u32,
    plan: Option<Plan>,
    origin_ms: u64,
    capacity: Resources,
    reservations: BTreeMap<u64, PlannedReservation>,
    free_queues: Vec<u32>,
    generation: u64,
    /// The plan step whose allocations the queues' guarantees show; `None` after a change.
    followed_step: Option<u64>,
}

fn vec_of(r: &Resources) -> Vector {
    gantry_rayon::plan::vector(r)
}

fn res_of(v: &Vector) -> Resources {
    Resources {
        cpu_millis: v[0].max(0) as u64,
        memory_bytes: v[1].max(0) as u64,
        gpus: u32::try_from(v[2].max(0)).unwrap_or(u32::MAX),
        reserved: 0,
    }
}

/// `e` with every window instant mapped by `f`.
fn map_times(e: &Expr, f: &dyn Fn(u64) -> u64) -> Expr {
    match e {
        Expr::Atom(a) => Expr::Atom(*a),
        Expr::Window(w) => Expr::Window(Window {
            start_ms: f(w.start_ms),
            end_ms: f(w.end_ms),
            inner: Box::new(map_times(&w.inner, f)),
        }),
        Expr::Order(v) => Expr::Order(v.iter().map(|x| map_times(x, f)).collect()),
        Expr::All(v) => Expr::All(v.iter().map(|x| map_times(x, f)).collect()),
        Expr::Any(v) => Expr::Any(v.iter().map(|x| map_times(x, f)).collect()),
    }
}

/// Cost of a bundle: its largest share of the plan's capacity (so work in different
/// dimensions can be credited in one unit).
fn bundle_cost(b: &Resources, cap: &Resources) -> f64 {
    let v = vec_of(b);
    let c = vec_of(cap);
    (0..3).filter(|&d| c[d] > 0).map(|d| v[d] as f64 / c[d] as f64).fold(0.0, f64::max)
}

/// Why a started reservation cannot be re-placed: a part's window closed with work left.
struct Unplaceable;

/// What is left of `e` at `now` when `credit` (in [`bundle_cost`]·ms) has been done, credited
/// to atoms in pre-order; `None` when nothing is left.
fn remaining(e: &Expr, credit: &mut f64, now: u64, cap: &Resources) -> Result<Option<Expr>, Unplaceable> {
    match e {
        Expr::Atom(a) => {
            let unit = bundle_cost(&a.bundle, cap);
            let total = unit * a.work as f64;
            let taken = credit.min(total);
            *credit -= taken;
            let left_ms = if unit > 0.0 { ((total - taken) / unit).ceil() as u64 } else { 0 };
            if left_ms == 0 || (unit > 0.0 && total - taken < unit * 0.5) {
                return Ok(None);
            }
            let g = u64::from(a.min_parallel.max(1));
            let w = left_ms.max(g.saturating_mul(a.min_lease_ms)).div_ceil(g).saturating_mul(g).min(a.work);
            Ok(Some(Expr::Atom(Atom { work: w, ..*a })))
        }
        Expr::Window(w) => {
            let inner = remaining(&w.inner, credit, now, cap)?;
            match inner {
                None => Ok(None),
                Some(_) if w.end_ms <= now => Err(Unplaceable),
                Some(inner) => Ok(Some(Expr::Window(Window {
                    start_ms: w.start_ms.max(now),
                    end_ms: w.end_ms,
                    inner: Box::new(inner),
                }))),
            }
        }
        Expr::Order(v) | Expr::All(v) => {
            let mut parts = Vec::new();
            for x in v {
                if let Some(p) = remaining(x, credit, now, cap)? {
                    parts.push(p);
                }
            }
            Ok(match parts.len() {
                0 => None,
                _ if matches!(e, Expr::Order(_)) => Some(Expr::Order(parts)),
                _ => Some(Expr::All(parts)),
            })
        }
        Expr::Any(v) => {
            // The credit went to one alternative, which one is not known: each is trimmed by it.
            // If one is done, so is the `any`.
            let mut parts = Vec::new();
            let mut left = *credit;
            for x in v {
                let mut c = *credit;
                match remaining(x, &mut c, now, cap) {
                    Ok(None) => {
                        *credit = c;
                        return Ok(None);
                    }
                    Ok(Some(p)) => parts.push(p),
                    Err(Unplaceable) => {}
                }
                left = left.min(c);
            }
            *credit = left;
            if parts.is_empty() { Err(Unplaceable) } else { Ok(Some(Expr::Any(parts))) }
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
        let steps = config.horizon_ms.div_ceil(config.step_ms).saturating_mul(2);
        if steps > 4_000_000 {
            return Err(bad(format!(
                "horizon_ms / step_ms is {}, more than 2,000,000 steps (the plan keeps two horizons)",
                steps / 2
            )));
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
        Ok(ReservationBook {
            config,
            plan_queue,
            default_queue,
            plan: None,
            origin_ms: 0,
            capacity: Resources::default(),
            reservations: BTreeMap::new(),
            free_queues: Vec::new(),
            generation: 0,
            followed_step: None,
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

    /// What the plan can hand out now (the plan queue's guarantee).
    pub fn capacity(&self) -> Resources {
        self.capacity
    }

    /// The plan's generation: it changes whenever a reservation is added, moved or removed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The plan's capacity and what reservations hold, per step from `from_ms` to `to_ms` in
    /// steps of `every_ms` (rounded to plan steps): `(ms, capacity, reserved)`.
    pub fn skyline(&self, from_ms: u64, to_ms: u64, every_ms: u64) -> Vec<(u64, Resources, Resources)> {
        let Some(plan) = &self.plan else { return Vec::new() };
        let every = every_ms.max(plan.step_ms());
        let mut out = Vec::new();
        let mut t = from_ms.max(self.origin_ms);
        while t < to_ms && out.len() < 100_000 {
            let step = ((t - self.origin_ms) / plan.step_ms()) as usize;
            let (Some(cap), Some(used)) = (plan.capacity_at(step), plan.used_at(step)) else { break };
            out.push((t, res_of(&cap), res_of(&used)));
            t = t.saturating_add(every);
        }
        out
    }

    /// Path of the queue of reservation `id`.
    pub fn queue_path(id: ReservationId, plan_queue: &str) -> String {
        format!("{plan_queue}.reservation_{}", id.0)
    }

    /// The plan, created or moved forward so that `now` lies in its first horizon.
    fn plan_at(&mut self, now: u64) -> &mut Plan {
        let step = self.config.step_ms;
        let steps = (self.config.horizon_ms.div_ceil(step) * 2) as usize;
        let stale = match &self.plan {
            None => true,
            Some(_) => now >= self.origin_ms.saturating_add(self.config.horizon_ms),
        };
        if stale {
            let origin = now / step * step;
            let mut plan = Plan::new(step, steps, &self.capacity).unwrap_or_else(|_| {
                // step ≥ 1 and steps ≥ 2 were checked in `new`.
                unreachable!("plan dimensions were checked at construction")
            });
            for r in self.reservations.values() {
                let pieces = to_steps(&r.pieces, origin, step, steps);
                if !pieces.is_empty() {
                    let _ = plan.restore(r.id.0, pieces);
                }
            }
            self.plan = Some(plan);
            self.origin_ms = origin;
        }
        self.plan.as_mut().unwrap_or_else(|| unreachable!("the plan was just set"))
    }

    fn pieces_of(&self, id: u64) -> Vec<PlannedPiece> {
        let Some(plan) = &self.plan else { return Vec::new() };
        let step = plan.step_ms();
        let mut out: Vec<PlannedPiece> = plan
            .pieces(id)
            .unwrap_or(&[])
            .iter()
            .map(|p| PlannedPiece {
                start_ms: self.origin_ms + p.start as u64 * step,
                end_ms: self.origin_ms + p.end as u64 * step,
                resources: res_of(&p.demand),
            })
            .collect();
        out.sort_by_key(|p| (p.start_ms, p.end_ms));
        out
    }

    /// The absolute expression of a request, or why it is invalid.
    fn absolute(&self, req: &ReservationRequest, now: u64) -> Result<(u64, u64, Expr), EngineError> {
        let invalid = |reason: String| EngineError::Invalid { what: "reservation", reason };
        check_name("reservation name", &req.name, true)?;
        check_name("reservation user", &req.user, true)?;
        if req.queue != self.config.queue {
            return Err(EngineError::UnknownQueue(format!(
                "{} (reservations are made in `{}`)",
                req.queue, self.config.queue
            )));
        }
        let arrival = req.arrival_ms.unwrap_or(now);
        let deadline = req.deadline_ms.unwrap_or(arrival.saturating_add(self.config.horizon_ms));
        if deadline <= arrival {
            return Err(invalid(format!("deadline {deadline} is not after arrival {arrival}")));
        }
        if deadline <= now {
            return Err(invalid(format!("deadline {deadline} has passed (now {now})")));
        }
        let inner = map_times(&req.definition, &|t| arrival.saturating_add(t));
        let abs = Expr::Window(Window { start_ms: arrival, end_ms: deadline, inner: Box::new(inner) });
        abs.validate().map_err(|e| invalid(e.to_string()))?;
        Ok((arrival, deadline, abs))
    }

    /// `abs` in plan time, its windows starting no earlier than `now`.
    fn plan_expr(&self, abs: &Expr, now: u64) -> Expr {
        let origin = self.origin_ms;
        let from = now.max(origin);
        let inner = map_times(abs, &|t| t.max(from) - origin);
        let end = self.origin_ms + self.plan.as_ref().map_or(0, Plan::horizon_ms);
        Expr::Window(Window { start_ms: from - origin, end_ms: end - origin, inner: Box::new(inner) })
    }

    /// Admits a new reservation; `Ok(Err(reason))` is a rejection (nothing changed).
    pub(crate) fn submit(
        &mut self,
        state: &mut ClusterState,
        now: u64,
        id: ReservationId,
        req: ReservationRequest,
    ) -> Result<Result<Vec<PlannedPiece>, String>, EngineError> {
        if self.reservations.contains_key(&id.0) {
            return Err(EngineError::Conflict(format!("reservation {} already exists", id.0)));
        }
        let Prepared { arrival, deadline, abs, expr } = match self.prepare(&req, now)? {
            Ok(prepared) => prepared,
            Err(why) => return Ok(Err(why)),
        };
        let agent = self.config.agent;
        let plan = self.plan_at(now);
        if let Err(rejection) = agents::admit(plan, &expr, agent, id.0) {
            return Ok(Err(format!("no room in the plan: {rejection}")));
        }
        let queue = self.take_queue(state, id);
        let pieces = self.pieces_of(id.0);
        self.reservations.insert(
            id.0,
            PlannedReservation {
                id,
                request: req,
                arrival_ms: arrival,
                deadline_ms: deadline,
                submit_ms: now,
                queue,
                pieces: pieces.clone(),
                absolute: abs,
            },
        );
        self.changed();
        Ok(Ok(pieces))
    }

    /// A request's arrival, deadline, expression in engine time and in plan time (the plan
    /// moved forward to `now`); an error for an invalid request, `Ok(Err(reason))` for a deadline
    /// beyond the horizon.
    fn prepare(
        &mut self,
        req: &ReservationRequest,
        now: u64,
    ) -> Result<Result<Prepared, String>, EngineError> {
        let (arrival, deadline, abs) = self.absolute(req, now)?;
        let limit = now.saturating_add(self.config.horizon_ms);
        if deadline > limit {
            return Ok(Err(format!(
                "deadline {deadline} is beyond the planning horizon ({} ms from now, until {limit})",
                self.config.horizon_ms
            )));
        }
        self.plan_at(now);
        let expr = self.plan_expr(&abs, now);
        Ok(Ok(Prepared { arrival, deadline, abs, expr }))
    }

    /// Replaces a reservation's definition. If the new one does not fit as the plan stands,
    /// the reservations that have not started yet are taken out and placed again after it
    /// (within their own windows); only if all of them fit again is the update accepted. On a
    /// rejection nothing changes. Moved reservations are reported as `ReservationReplanned`.
    pub(crate) fn update(
        &mut self,
        now: u64,
        id: ReservationId,
        req: ReservationRequest,
        commands: &mut Vec<Command>,
    ) -> Result<Result<Vec<PlannedPiece>, String>, EngineError> {
        if !self.reservations.contains_key(&id.0) {
            return Err(EngineError::Conflict(format!("reservation {} does not exist", id.0)));
        }
        let Prepared { arrival, deadline, abs, expr } = match self.prepare(&req, now)? {
            Ok(prepared) => prepared,
            Err(why) => return Ok(Err(why)),
        };
        let agent = self.config.agent;
        let mut trial = self.plan_at(now).clone();
        trial.remove(id.0);
        let mut moved = Vec::new();
        if agents::admit(&mut trial, &expr, agent, id.0).is_err() {
            // Make room: take out every reservation that has not started, place the updated one,
            // then the others most important first.
            let mut waiting: Vec<&PlannedReservation> = self
                .reservations
                .values()
                .filter(|r| r.id != id && r.pieces.first().is_some_and(|p| p.start_ms > now))
                .collect();
            waiting.sort_by_key(|r| (std::cmp::Reverse(r.request.priority), r.submit_ms, r.id.0));
            let mut trial2 = self.plan.clone().unwrap_or_else(|| unreachable!("plan_at set it"));
            trial2.remove(id.0);
            for r in &waiting {
                trial2.remove(r.id.0);
            }
            if let Err(rejection) = agents::admit(&mut trial2, &expr, agent, id.0) {
                return Ok(Err(format!("no room in the plan: {rejection}")));
            }
            for r in &waiting {
                let e = self.plan_expr(&r.absolute, now);
                if agents::admit(&mut trial2, &e, agent, r.id.0).is_err() {
                    return Ok(Err(format!(
                        "no room in the plan without rejecting reservation {} (tried moving {} reservations that have not started)",
                        r.id.0,
                        waiting.len()
                    )));
                }
            }
            moved = waiting
                .iter()
                .filter(|r| trial2.pieces(r.id.0) != self.plan.as_ref().and_then(|p| p.pieces(r.id.0)))
                .map(|r| r.id.0)
                .collect();
            trial = trial2;
        }
        self.plan = Some(trial);
        let pieces = self.pieces_of(id.0);
        if let Some(r) = self.reservations.get_mut(&id.0) {
            r.request = req;
            r.arrival_ms = arrival;
            r.deadline_ms = deadline;
            r.absolute = abs;
            r.pieces = pieces.clone();
        }
        for m in moved {
            let p = self.pieces_of(m);
            if let Some(r) = self.reservations.get_mut(&m) {
                r.pieces = p.clone();
            }
            commands.push(Command::ReservationReplanned { reservation: ReservationId(m), pieces: p });
        }
        self.changed();
        Ok(Ok(pieces))
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

    /// Puts back a reservation from a driver's store with the allocation it had; one whose
    /// deadline passed meanwhile is answered `ReservationEnded { Expired }` so the driver can
    /// forget it.
    pub(crate) fn restore(
        &mut self,
        state: &mut ClusterState,
        now: u64,
        restored: Restored,
        commands: &mut Vec<Command>,
    ) -> Result<(), EngineError> {
        let Restored { id, request: req, submit_ms, mut pieces } = restored;
        if self.reservations.contains_key(&id.0) {
            return Err(EngineError::Conflict(format!("reservation {} already exists", id.0)));
        }
        let arrival = req.arrival_ms.unwrap_or(submit_ms);
        let deadline = req.deadline_ms.unwrap_or(arrival.saturating_add(self.config.horizon_ms));
        if deadline <= now {
            // It ended while the scheduler was down: nothing to restore.
            commands.push(Command::ReservationEnded { reservation: id, why: ReservationEnd::Expired });
            return Ok(());
        }
        let probe =
            ReservationRequest { arrival_ms: Some(arrival), deadline_ms: Some(deadline), ..req.clone() };
        let (arrival, deadline, abs) = self.absolute(&probe, arrival)?;
        pieces.sort_by_key(|p| (p.start_ms, p.end_ms));
        if pieces.iter().any(|p| p.end_ms <= p.start_ms) {
            return Err(EngineError::Invalid {
                what: "restored reservation",
                reason: "an empty piece".into(),
            });
        }
        let plan = self.plan_at(now);
        let (step, steps) = (plan.step_ms(), plan.steps());
        let in_steps = to_steps(&pieces, self.origin_ms, step, steps);
        if !in_steps.is_empty() {
            let plan = self.plan_at(now);
            plan.restore(id.0, in_steps)
                .map_err(|e| EngineError::Invalid { what: "restored reservation", reason: e.to_string() })?;
        }
        let queue = self.take_queue(state, id);
        state.next_reservation = state.next_reservation.max(id.0 + 1);
        self.reservations.insert(
            id.0,
            PlannedReservation {
                id,
                request: req,
                arrival_ms: arrival,
                deadline_ms: deadline,
                submit_ms,
                queue,
                pieces,
                absolute: abs,
            },
        );
        self.changed();
        Ok(())
    }

    /// The queue for reservation `id`: a retired one renamed, or a new one.
    fn take_queue(&mut self, state: &mut ClusterState, id: ReservationId) -> u32 {
        let path = Self::queue_path(id, &self.config.queue);
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

    fn changed(&mut self) {
        self.generation += 1;
        self.followed_step = None;
    }

    /// Takes reservation `id` out of the plan: its applications move to `default`, its queue
    /// is retired.
    fn end(&mut self, state: &mut ClusterState, id: u64, why: ReservationEnd, commands: &mut Vec<Command>) {
        let Some(r) = self.reservations.remove(&id) else { return };
        if let Some(plan) = &mut self.plan {
            plan.remove(id);
        }
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
        state.retire_queue(r.queue);
        self.free_queues.push(r.queue);
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

    /// The plan follower, run each cycle: moves the plan forward, ends reservations whose
    /// deadline has passed, and sets each reservation queue's guarantee to its allocation now.
    pub(crate) fn follow(&mut self, state: &mut ClusterState, now: u64, commands: &mut Vec<Command>) {
        let expired: Vec<u64> =
            self.reservations.values().filter(|r| r.deadline_ms <= now).map(|r| r.id.0).collect();
        for id in expired {
            self.end(state, id, ReservationEnd::Expired, commands);
        }
        let step = now / self.config.step_ms;
        if self.followed_step == Some(step) {
            return;
        }
        self.followed_step = Some(step);
        for r in self.reservations.values() {
            state.set_queue_rule(r.queue, GuaranteeRule::Fixed(r.allocated_at(now)));
        }
        state.recompute_capacity();
    }

    /// Follows a change of the plan queue's guarantee (nodes registered, lost or drained): the
    /// plan's capacity from now on becomes it, and what a loss overcommits is re-planned. (A
    /// plan still over capacity once a restart's nodes are back is re-planned at the next loss.)
    pub(crate) fn capacity_changed(
        &mut self,
        state: &mut ClusterState,
        now: u64,
        commands: &mut Vec<Command>,
    ) {
        let cap = state.queues[self.plan_queue as usize].absolute_guaranteed;
        if cap == self.capacity {
            return;
        }
        let old = self.capacity;
        let decreased =
            cap.cpu_millis < old.cpu_millis || cap.memory_bytes < old.memory_bytes || cap.gpus < old.gpus;
        self.capacity = cap;
        if self.plan.is_none() {
            return;
        }
        let origin = self.origin_ms;
        let plan = self.plan_at(now);
        let from = ((now.max(origin) - origin) / plan.step_ms()) as usize;
        let steps = plan.steps();
        if from < steps {
            let _ = plan.set_capacity(from, steps, &cap);
        }
        // Only a loss re-plans: while a restarted scheduler's nodes come back one by one the
        // restored plan is over the capacity seen so far, and nothing must move for that.
        if decreased && plan.overcommitted().is_some() {
            self.replan(state, now, commands);
        }
    }

    /// Re-plans after a capacity loss with the configured replanner.
    fn replan(&mut self, state: &mut ClusterState, now: u64, commands: &mut Vec<Command>) {
        let cap = self.capacity;
        let mut infos = Vec::with_capacity(self.reservations.len());
        for r in self.reservations.values() {
            let done: f64 = r
                .pieces
                .iter()
                .filter(|p| p.start_ms < now)
                .map(|p| bundle_cost(&p.resources, &cap) * (p.end_ms.min(now) - p.start_ms) as f64)
                .sum();
            let mut credit = done;
            let (expr, movable) = match remaining(&r.absolute, &mut credit, now, &cap) {
                Ok(Some(e)) => (self.plan_expr(&e, now), true),
                // Done, or a part's window closed with work left: keep what it holds or reject it.
                Ok(None) | Err(Unplaceable) => (self.plan_expr(&r.absolute, now), false),
            };
            let mut info = ReservationInfo::new(r.id.0, expr, i64::from(r.request.priority), r.submit_ms);
            info.movable = movable;
            infos.push(info);
        }
        let agent = self.config.agent;
        let replanner = self.config.replanner;
        let plan = self.plan_at(now);
        // Pieces before now do not matter any more; a moved reservation keeps them in its record.
        let outcome = match replanner {
            Replanner::Rayon => replan::replan(plan, &infos, agent),
            Replanner::YarnSimple => replan::replan_yarn_simple(plan, &infos),
        };
        for m in &outcome.moved {
            let future = self.pieces_of(m.id);
            if let Some(r) = self.reservations.get_mut(&m.id) {
                let mut pieces: Vec<PlannedPiece> = r
                    .pieces
                    .iter()
                    .filter(|p| p.start_ms < now)
                    .map(|p| PlannedPiece { end_ms: p.end_ms.min(now), ..*p })
                    .collect();
                pieces.extend(
                    future
                        .into_iter()
                        .filter(|p| p.end_ms > now)
                        .map(|p| PlannedPiece { start_ms: p.start_ms.max(now), ..p }),
                );
                pieces.sort_by_key(|p| (p.start_ms, p.end_ms));
                r.pieces = pieces.clone();
                commands.push(Command::ReservationReplanned { reservation: r.id, pieces });
            }
        }
        for &id in &outcome.rejected {
            self.end(state, id, ReservationEnd::Replanned, commands);
        }
        tracing::info!(
            strategy = outcome.strategy,
            affected = outcome.affected.len(),
            moved = outcome.moved.len(),
            rejected = outcome.rejected.len(),
            "re-planned reservations after a capacity loss"
        );
        self.changed();
    }

    /// A copy of the plan and the reservations that have not started, for the optimiser.
    pub fn optimizer_job(&self, now: u64) -> Option<OptimizerJob> {
        let plan = self.plan.clone()?;
        let requests = self
            .reservations
            .values()
            .filter(|r| r.pieces.first().is_some_and(|p| p.start_ms > now))
            .map(|r| milp::Request { id: r.id.0, expr: self.plan_expr(&r.absolute, now) })
            .collect();
        Some(OptimizerJob { generation: self.generation, plan, requests })
    }

    /// Applies an optimiser's answer computed on [`OptimizerJob`] `generation`; refused if the
    /// plan has changed since or the answer does not fit. Returns the reservations moved.
    pub(crate) fn apply_optimized(
        &mut self,
        generation: u64,
        outcome: &milp::Outcome,
        commands: &mut Vec<Command>,
    ) -> Result<usize, EngineError> {
        if generation != self.generation {
            return Err(EngineError::Conflict(format!(
                "the plan changed while the optimiser ran (generation {generation}, now {})",
                self.generation
            )));
        }
        if !outcome.rejected.is_empty() {
            return Err(EngineError::Conflict(format!(
                "the optimiser would reject {} reservations; the plan is kept",
                outcome.rejected.len()
            )));
        }
        let Some(plan) = &mut self.plan else {
            return Err(EngineError::Conflict("there is no plan yet".into()));
        };
        let before: BTreeMap<u64, Vec<Piece>> =
            outcome.pieces.iter().filter_map(|(id, _)| Some((*id, plan.pieces(*id)?.to_vec()))).collect();
        if outcome.pieces.iter().any(|(id, _)| !self.reservations.contains_key(id)) {
            return Err(EngineError::Conflict("the optimiser's answer names an unknown reservation".into()));
        }
        outcome
            .apply(plan)
            .map_err(|e| EngineError::Conflict(format!("the optimiser's answer does not fit: {e}")))?;
        let changed: Vec<u64> = outcome
            .pieces
            .iter()
            .filter(|(id, _)| plan.pieces(*id).map(<[Piece]>::to_vec) != before.get(id).cloned())
            .map(|(id, _)| *id)
            .collect();
        let moved = changed.len();
        for id in changed {
            let pieces = self.pieces_of(id);
            if let Some(r) = self.reservations.get_mut(&id) {
                r.pieces = pieces.clone();
            }
            commands.push(Command::ReservationReplanned { reservation: ReservationId(id), pieces });
        }
        self.changed();
        Ok(moved)
    }
}

/// `pieces` (engine time) as plan steps from `origin`, clipped to the plan.
fn to_steps(pieces: &[PlannedPiece], origin: u64, step: u64, steps: usize) -> Vec<Piece> {
    pieces
        .iter()
        .filter_map(|p| {
            let s = (p.start_ms.max(origin) - origin) / step;
            let e = (p.end_ms.saturating_sub(origin)).div_ceil(step).min(steps as u64);
            (p.end_ms > origin && s < e).then(|| Piece {
                start: s as usize,
                end: e as usize,
                demand: vec_of(&p.resources),
            })
        })
        .collect()
}
