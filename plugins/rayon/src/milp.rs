//! The offline optimiser: the paper's MILP (Rayon, SoCC 2014, §4.1) over the accepted plan,
//! used to re-organise reservations when there is time.
//!
//! [`optimize`] takes the plan and some of its reservations (id and RDL expression), takes them
//! out of a copy of the plan, and lays them out again with a mixed-integer linear program solved
//! by [good_lp](https://docs.rs/good_lp): the pure-Rust `microlp` solver by default, HiGHS with
//! the cargo feature `highs` (not compiled nor tested on the machine this was written on: it
//! needs cmake and a C++ compiler; with it enabled, the model is still handed to microlp — the
//! feature only makes HiGHS available to the crate). The plan itself is not changed; the answer
//! is per reservation new pieces, which [`Outcome::apply`] puts in the plan.
//!
//! ## Model
//!
//! - **Slots.** Time is cut into slots of `slot` plan steps (the last one may be shorter). The
//!   slot length is the least for which the model has at most [`Options::max_cells`] integer
//!   cells (an atom × a slot inside its window); a slot a window only partly covers is not used
//!   by that atom. Coarser slots lose placements the plan's steps would allow: a reservation
//!   that then fits no more is "rejected" by the model and keeps its old pieces (see below).
//! - **Variables.** `x[a][k]`: gangs of atom `a` running in slot `k`, integer `0..=⌊h/g⌋`;
//!   `r[j]`: binary slack of reservation `j` (1 = rejected), shared by all its atoms; one binary
//!   per alternative of an `any`; continuous `d[a][k] ≥ |x[a][k+1] − x[a][k]|`.
//! - **Activity.** A reservation's root is active `1 − r[j]`; `window`, `all` and `order` pass
//!   their activity to every part (all or nothing); `any` splits it over one binary per
//!   alternative summing to it (exactly one alternative when accepted). An atom with activity
//!   `y` covers its work, `Σ_k len_k · x[a][k] ≥ W_a · y` (`W_a` in gang-steps, as the agents
//!   count it), and runs nothing when inactive, `x[a][k] ≤ ⌊h/g⌋ · y`.
//! - **Capacity.** Per slot and dimension, `Σ_a gang_a · x[a][k]` is at most the least free
//!   capacity over the slot's steps of the plan without the reservations being optimised.
//! - **Order.** Stage boundaries are fixed: an `order`'s window is split between its stages in
//!   proportion to their least durations, so stages cannot overlap and keep their order. The
//!   real boundaries could move; this is weaker than the paper's start/end integer variables.
//! - **Objective.** `Σ cost(gang_a) · len_k · x[a][k] · (1 + ε · (K − k) / K)` (the cost of the
//!   allocation, `ε` a small surcharge on earlier slots so it leans late like GREE) `+ λ ·
//!   Σ cost(gang_a) · d[a][k]` (smoothness: height changes, including starting at the first
//!   and stopping after the last slot of the window, so fewer preemptions) `+ M · Σ r[j]`, with
//!   `M` above the cost of any acceptance so the model rejects only what it cannot place.
//!   `cost(v)` is the gang's share of the largest capacity, summed over dimensions.
//!
//! ## What comes back
//!
//! The solver runs under [`Options::time_limit`]. Its answer (rounded) is checked: every
//! accepted reservation's new pieces are added to the plan without the optimised reservations
//! with [`Plan::add`], which checks capacity at every step; a reservation the model rejected
//! keeps its old pieces if they still fit. If the solver fails (time out before a feasible
//! answer, numerical trouble) or anything does not fit, the input is returned unchanged, so
//! the answer is always a feasible plan and never rejects more than the input did.
//!
//! ## Not done yet
//!
//! - The minimum lease is not modelled: it holds when the slot is at least the lease (every
//!   constant-height run is at least one slot), except for a shorter last slot of the horizon.
//! - No warm start from the current allocation (the plan's pieces are not split by atom); the
//!   fallback to the input is what guarantees a feasible answer.
//! - `order` stage boundaries are fixed (above); the paper's movable boundaries are not built.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use good_lp::{
    Expression, ProblemVariables, Solution, SolutionStatus, SolverModel, Variable, WithTimeLimit, constraint,
    microlp, variable,
};

use crate::plan::{self, DIMS, Piece, Plan, Vector};
use crate::rdl::{Atom, Expr};

/// A reservation to re-organise: its id in the plan and its expression.
#[derive(Debug, Clone)]
pub struct Request {
    /// The reservation's id in the plan.
    pub id: u64,
    /// Its RDL expression.
    pub expr: Expr,
}

/// Knobs of the optimiser.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The most integer cells (atom × slot); slots get coarser until the model fits.
    pub max_cells: usize,
    /// The solver's time limit.
    pub time_limit: Duration,
    /// Surcharge on the earliest slot relative to the latest (`ε`).
    pub early_surcharge: f64,
    /// Weight of a height change of one gang relative to one gang-step of allocation (`λ`).
    pub smoothness: f64,
    /// A fixed slot length in steps, instead of the least that fits `max_cells`.
    pub slot_steps: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_cells: 1500,
            time_limit: Duration::from_secs(10),
            early_surcharge: 0.01,
            smoothness: 1.0,
            slot_steps: None,
        }
    }
}

/// Why nothing could be optimised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MilpError {
    /// A request names a reservation the plan does not hold.
    Unknown(u64),
    /// Two requests name the same reservation.
    Duplicate(u64),
    /// A request's expression is invalid for the model.
    Invalid(u64, String),
}

impl fmt::Display for MilpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MilpError::Unknown(id) => write!(f, "reservation {id} is not in the plan"),
            MilpError::Duplicate(id) => write!(f, "reservation {id} is requested twice"),
            MilpError::Invalid(id, why) => write!(f, "reservation {id}: {why}"),
        }
    }
}

impl std::error::Error for MilpError {}

/// What the optimiser did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Plan steps per slot.
    pub slot_steps: usize,
    /// Integer cells (atom × slot) in the model.
    pub cells: usize,
    /// The objective of the solver's answer (0 when it gave none).
    pub objective: f64,
    /// Whether the solver proved its answer optimal.
    pub optimal: bool,
    /// Reservations the model rejected (they kept their old pieces).
    pub rejections: usize,
    /// Height changes (steps where a reservation's total demand differs from the step before,
    /// counting its start and end) over all optimised reservations, before.
    pub changes_before: usize,
    /// The same, after.
    pub changes_after: usize,
    /// Time in the solver.
    pub solve_time: Duration,
    /// Why the input was returned unchanged, if it was.
    pub kept_input: Option<String>,
}

/// The optimiser's answer: new pieces per reservation (in request order) and statistics.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `(id, pieces)` per request.
    pub pieces: Vec<(u64, Vec<Piece>)>,
    /// What happened.
    pub stats: Stats,
}

impl Outcome {
    /// Replaces the requests' pieces in `plan` with the new ones. All or nothing: on error
    /// the plan is as it was.
    pub fn apply(&self, plan: &mut Plan) -> Result<(), plan::PlanError> {
        let mut old = Vec::with_capacity(self.pieces.len());
        for (id, _) in &self.pieces {
            if let Some(p) = plan.remove(*id) {
                old.push((*id, p));
            }
        }
        for (k, (id, pieces)) in self.pieces.iter().enumerate() {
            if let Err(e) = plan.add(*id, pieces.clone()) {
                for (id, _) in &self.pieces[..k] {
                    plan.remove(*id);
                }
                for (id, p) in old {
                    // Gives back exactly what was there: it fitted before.
                    let _ = plan.add(id, p);
                }
                return Err(e);
            }
        }
        Ok(())
    }
}

/// An atom of a request in plan units.
struct AtomVars {
    req: usize,
    gang: Vector,
    max_gangs: u64,
    /// Gang-steps of work.
    work: u64,
    /// Slot indices inside the window and their variables.
    cells: Vec<(usize, Variable)>,
    /// The atom's activity.
    active: Expression,
}

/// Atom with its step window and activity, before slot variables exist.
struct FlatAtom {
    req: usize,
    atom: Atom,
    lo: usize,
    hi: usize,
    active: Expression,
}

/// Re-organises the reservations `requests` of `plan` (see the [module documentation](self)).
pub fn optimize(plan: &Plan, requests: &[Request], opts: &Options) -> Result<Outcome, MilpError> {
    let mut base = plan.clone();
    let mut input: Vec<(u64, Vec<Piece>)> = Vec::with_capacity(requests.len());
    for r in requests {
        if input.iter().any(|(id, _)| *id == r.id) {
            return Err(MilpError::Duplicate(r.id));
        }
        let pieces = base.remove(r.id).ok_or(MilpError::Unknown(r.id))?;
        input.push((r.id, pieces));
    }
    let steps = plan.steps();
    let step_ms = plan.step_ms();
    let changes_before: usize = input.iter().map(|(_, p)| changes(p, steps)).sum();

    let mut vars = ProblemVariables::new();
    let (rejected, flat, any_rows) = layout(plan, requests, &mut vars);
    let slot = choose_slot(&flat, steps, opts);
    let n_slots = steps.div_ceil(slot);
    let slot_range = |k: usize| (k * slot, ((k + 1) * slot).min(steps));

    let largest = [0usize, 1, 2]
        .map(|d| (0..steps).filter_map(|i| plan.capacity_at(i)).map(|c| c[d]).max().unwrap_or(0));
    let cost = |v: &Vector| -> f64 {
        (0..DIMS).filter(|&d| largest[d] > 0).map(|d| v[d] as f64 / largest[d] as f64).sum::<f64>().max(1e-6)
    };

    let mut atoms = Vec::with_capacity(flat.len());
    for f in flat {
        let g = u64::from(f.atom.min_parallel);
        if g == 0 || f.atom.max_parallel < f.atom.min_parallel {
            return Err(MilpError::Invalid(requests[f.req].id, "g is 0 or above h".into()));
        }
        let work = u64::try_from(u128::from(f.atom.work).div_ceil(u128::from(g) * u128::from(step_ms)))
            .map_err(|_| MilpError::Invalid(requests[f.req].id, "work too large".into()))?;
        let max_gangs = u64::from(f.atom.max_parallel / f.atom.min_parallel);
        let cells = if work == 0 {
            Vec::new()
        } else {
            slots_in(f.lo, f.hi, slot, steps)
                .into_iter()
                .map(|k| (k, vars.add(variable().integer().min(0).max(max_gangs as f64))))
                .collect()
        };
        atoms.push(AtomVars {
            req: f.req,
            gang: plan::scale(&plan::vector(&f.atom.bundle), i64::from(f.atom.min_parallel)),
            max_gangs,
            work,
            cells,
            active: f.active,
        });
    }
    let n_cells: usize = atoms.iter().map(|a| a.cells.len()).sum();

    // Objective.
    let mut alloc_cost = Expression::from(0.0);
    let mut smooth = Expression::from(0.0);
    let mut smooth_rows = Vec::new();
    let mut big_m = 1.0;
    for a in &atoms {
        let c = cost(&a.gang);
        big_m += 2.0 * c * (a.work as f64 + slot as f64 * a.max_gangs as f64)
            + 2.0 * opts.smoothness * c * a.max_gangs as f64 * a.cells.len() as f64;
        for (n, &(k, x)) in a.cells.iter().enumerate() {
            let (s, e) = slot_range(k);
            let late = (n_slots - k) as f64 / n_slots as f64;
            alloc_cost += c * (e - s) as f64 * (1.0 + opts.early_surcharge * late) * x;
            if n == 0 {
                smooth += opts.smoothness * c * x;
            }
            if let Some(&(k2, x2)) = a.cells.get(n + 1) {
                if k2 == k + 1 {
                    let d = vars.add(variable().min(0));
                    smooth += opts.smoothness * c * d;
                    smooth_rows.push((d, x, x2));
                } else {
                    smooth += opts.smoothness * c * (x + x2);
                }
            } else {
                smooth += opts.smoothness * c * x;
            }
        }
    }
    let mut objective = alloc_cost + smooth;
    for r in &rejected {
        objective += big_m * *r;
    }

    let mut model =
        vars.minimise(objective.clone()).using(microlp).with_time_limit(opts.time_limit.as_secs_f64());
    for (d, x, x2) in smooth_rows {
        model = model.with(constraint!(d >= x2 - x)).with(constraint!(d >= x - x2));
    }
    for (alts, parent) in any_rows {
        let sum: Expression = alts.iter().map(|v| Expression::from(*v)).sum();
        model = model.with(constraint!(sum == parent));
    }
    for a in &atoms {
        if a.work == 0 {
            continue;
        }
        let mut covered = Expression::from(0.0);
        for &(k, x) in &a.cells {
            let (s, e) = slot_range(k);
            covered += (e - s) as f64 * x;
            model = model.with(constraint!(x <= a.max_gangs as f64 * a.active.clone()));
        }
        model = model.with(constraint!(covered >= a.work as f64 * a.active.clone()));
    }
    // Capacity per slot and dimension, scaled by the largest gang in that dimension.
    let mut by_slot: HashMap<usize, Vec<(usize, Variable)>> = HashMap::new();
    for (i, a) in atoms.iter().enumerate() {
        for &(k, x) in &a.cells {
            by_slot.entry(k).or_default().push((i, x));
        }
    }
    let mut slots: Vec<_> = by_slot.into_iter().collect();
    slots.sort_by_key(|(k, _)| *k);
    for (k, cells) in &slots {
        let (s, e) = slot_range(*k);
        let free = base.min_free(s, e).unwrap_or([0; DIMS]);
        for (d, &room_d) in free.iter().enumerate() {
            let scale = cells.iter().map(|&(i, _)| atoms[i].gang[d]).max().unwrap_or(0);
            if scale <= 0 {
                continue;
            }
            let used: Expression =
                cells.iter().map(|&(i, x)| (atoms[i].gang[d] as f64 / scale as f64) * x).sum();
            let room_d = room_d.max(0);
            let room = (room_d / scale) as f64 + (room_d % scale) as f64 / scale as f64;
            model = model.with(constraint!(used <= room));
        }
    }

    let t0 = Instant::now();
    let solved = model.solve();
    let solve_time = t0.elapsed();
    let mut stats =
        Stats { slot_steps: slot, cells: n_cells, changes_before, solve_time, ..Stats::default() };
    let keep = |mut stats: Stats, why: String| {
        stats.kept_input = Some(why);
        stats.changes_after = stats.changes_before;
        Outcome { pieces: input.clone(), stats }
    };
    let sol = match solved {
        Ok(s) => s,
        Err(e) => return Ok(keep(stats, format!("solver: {e}"))),
    };
    stats.optimal = matches!(sol.status(), SolutionStatus::Optimal);
    stats.objective = sol.eval(&objective);

    // New pieces per reservation, checked against capacity.
    let mut new: Vec<Option<Vec<Piece>>> =
        rejected.iter().map(|r| (sol.value(*r) < 0.5).then(Vec::new)).collect();
    for a in &atoms {
        let Some(pieces) = new[a.req].as_mut() else { continue };
        let mut run: Option<Piece> = None;
        for &(k, x) in &a.cells {
            let gangs = sol.value(x).round().clamp(0.0, a.max_gangs as f64) as i64;
            let (s, e) = slot_range(k);
            let demand = plan::scale(&a.gang, gangs);
            match run.as_mut() {
                Some(p) if p.end == s && p.demand == demand => p.end = e,
                _ => {
                    if let Some(p) = run.take().filter(|p| p.demand != [0; DIMS]) {
                        pieces.push(p);
                    }
                    run = Some(Piece { start: s, end: e, demand });
                }
            }
        }
        if let Some(p) = run.filter(|p| p.demand != [0; DIMS]) {
            pieces.push(p);
        }
        let got: u64 = pieces_of_atom_work(a, &sol, slot, steps);
        if got < a.work && sol.eval(&a.active) > 0.5 {
            return Ok(keep(
                stats,
                format!("reservation {}: an atom's work is not covered", requests[a.req].id),
            ));
        }
    }
    let mut check = base;
    let mut out = Vec::with_capacity(requests.len());
    for (j, r) in requests.iter().enumerate() {
        if let Some(p) = &new[j] {
            if let Err(e) = check.add(r.id, p.clone()) {
                return Ok(keep(stats, format!("reservation {}: {e}", r.id)));
            }
        }
        out.push((r.id, new[j].take()));
    }
    let mut final_pieces = Vec::with_capacity(out.len());
    for ((id, p), (_, old)) in out.into_iter().zip(&input) {
        match p {
            Some(p) => final_pieces.push((id, p)),
            None => {
                stats.rejections += 1;
                if let Err(e) = check.add(id, old.clone()) {
                    return Ok(keep(
                        stats,
                        format!(
                            "reservation {id} rejected by the model and its old pieces no longer fit: {e}"
                        ),
                    ));
                }
                final_pieces.push((id, old.clone()));
            }
        }
    }
    if check.overcommitted().is_some() && plan.overcommitted().is_none() {
        return Ok(keep(stats, "the new plan is overcommitted".into()));
    }
    stats.changes_after = final_pieces.iter().map(|(_, p)| changes(p, steps)).sum();
    Ok(Outcome { pieces: final_pieces, stats })
}

/// The slot length (steps) and the number of integer cells the model of `requests` would have,
/// without solving it.
pub fn model_size(plan: &Plan, requests: &[Request], opts: &Options) -> (usize, usize) {
    let mut vars = ProblemVariables::new();
    let (_, flat, _) = layout(plan, requests, &mut vars);
    let steps = plan.steps();
    let slot = choose_slot(&flat, steps, opts);
    let cells =
        flat.iter().filter(|a| a.atom.work > 0).map(|a| slots_in(a.lo, a.hi, slot, steps).len()).sum();
    (slot, cells)
}

/// Rows of `any`: its alternatives' binaries and the activity they share.
type AnyRows = Vec<(Vec<Variable>, Expression)>;

/// Each request's rejection binary, its atoms with windows and activities, and the `any` rows.
fn layout(
    plan: &Plan,
    requests: &[Request],
    vars: &mut ProblemVariables,
) -> (Vec<Variable>, Vec<FlatAtom>, AnyRows) {
    let rejected: Vec<Variable> = requests.iter().map(|_| vars.add(variable().binary())).collect();
    let mut flat = Vec::new();
    let mut any_rows = Vec::new();
    for (j, r) in requests.iter().enumerate() {
        let root = Expression::from(1.0) - rejected[j];
        let mut walk = Walk { plan, vars, req: j, flat: &mut flat, any_rows: &mut any_rows };
        walk.expr(&r.expr, 0, plan.steps(), root);
    }
    (rejected, flat, any_rows)
}

/// The least slot length (steps) for which the atoms have at most `max_cells` cells, or the
/// fixed one.
fn choose_slot(flat: &[FlatAtom], steps: usize, opts: &Options) -> usize {
    if let Some(s) = opts.slot_steps {
        return s.max(1);
    }
    let cells_for = |s: usize| -> usize {
        flat.iter().filter(|a| a.atom.work > 0).map(|a| slots_in(a.lo, a.hi, s, steps).len()).sum()
    };
    let limit = opts.max_cells.max(1);
    let mut s = 1usize;
    loop {
        let c = cells_for(s);
        if c <= limit || s >= steps {
            return s;
        }
        s = (s + 1).max(s.saturating_mul(c).div_ceil(limit));
    }
}

/// Gang-steps the rounded answer gives an atom.
fn pieces_of_atom_work(a: &AtomVars, sol: &impl Solution, slot: usize, steps: usize) -> u64 {
    a.cells
        .iter()
        .map(|&(k, x)| {
            let gangs = sol.value(x).round().clamp(0.0, a.max_gangs as f64) as u64;
            let len = ((k + 1) * slot).min(steps) - k * slot;
            gangs * len as u64
        })
        .sum()
}

/// Slots `k` of length `slot` that lie inside steps `[lo, hi)` (the last slot of the horizon
/// may be shorter).
fn slots_in(lo: usize, hi: usize, slot: usize, steps: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut k = lo.div_ceil(slot);
    while k * slot < steps && ((k + 1) * slot).min(steps) <= hi {
        out.push(k);
        k += 1;
    }
    out
}

/// Steps where the total demand of `pieces` differs from the step before (step −1 and step
/// `steps` holding nothing).
pub fn changes(pieces: &[Piece], steps: usize) -> usize {
    let mut delta: Vec<(usize, Vector, i64)> = Vec::new();
    for p in pieces {
        delta.push((p.start, p.demand, 1));
        delta.push((p.end.min(steps), p.demand, -1));
    }
    delta.sort_by_key(|d| d.0);
    let mut cur = [0i64; DIMS];
    let mut n = 0;
    let mut i = 0;
    while i < delta.len() {
        let at = delta[i].0;
        let before = cur;
        while i < delta.len() && delta[i].0 == at {
            for (d, c) in cur.iter_mut().enumerate() {
                *c += delta[i].2 * delta[i].1[d];
            }
            i += 1;
        }
        if cur != before {
            n += 1;
        }
    }
    n
}

/// Flattens an expression into atoms with step windows and activities.
struct Walk<'a> {
    plan: &'a Plan,
    vars: &'a mut ProblemVariables,
    req: usize,
    flat: &'a mut Vec<FlatAtom>,
    any_rows: &'a mut AnyRows,
}

impl Walk<'_> {
    fn expr(&mut self, e: &Expr, lo: usize, hi: usize, active: Expression) {
        match e {
            Expr::Atom(a) => self.flat.push(FlatAtom { req: self.req, atom: *a, lo, hi, active }),
            Expr::Window(w) => {
                let lo = lo.max(self.plan.step_at_or_after(w.start_ms));
                let hi = hi.min(self.plan.step_before(w.end_ms));
                self.expr(&w.inner, lo, hi.max(lo), active);
            }
            Expr::All(parts) => {
                for p in parts {
                    self.expr(p, lo, hi, active.clone());
                }
            }
            Expr::Any(parts) => {
                let alts: Vec<Variable> = parts.iter().map(|_| self.vars.add(variable().binary())).collect();
                for (p, v) in parts.iter().zip(&alts) {
                    self.expr(p, lo, hi, Expression::from(*v));
                }
                self.any_rows.push((alts, active));
            }
            Expr::Order(stages) => {
                // Fixed boundaries in proportion to the stages' least durations.
                let need: Vec<u128> = stages.iter().map(|s| u128::from(s.min_duration_ms()).max(1)).collect();
                let total: u128 = need.iter().sum();
                let len = (hi.saturating_sub(lo)) as u128;
                let mut acc = 0u128;
                let mut start = lo;
                for (s, n) in stages.iter().zip(&need) {
                    acc += n;
                    let end = lo + usize::try_from(len * acc / total.max(1)).unwrap_or(0);
                    self.expr(s, start, end.max(start), active.clone());
                    start = end.max(start);
                }
            }
        }
    }
}
