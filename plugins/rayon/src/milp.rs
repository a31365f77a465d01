//! The offline optimiser: the paper's MILP (Rayon, SoCC 2014, §4.1) over the accepted plan,
//! used to re-organise reservations when there is time.
//!
//! [`optimize`] takes the plan and some of its reservations (id and RDL expression), takes them
//! out of a copy of the plan, and lays them out again with a mixed-integer linear program solved
//! by [good_lp](https://docs.rs/good_lp): the pure-Rust `microlp` solver by default, HiGHS with
//! the cargo feature `highs`. **The `highs` feature was not compiled nor tested where this was
//! written** (it needs cmake and a C++ compiler); the code path only swaps the solver, whose
//! good_lp model implements the same traits. The plan itself is not changed: the answer is new
//! pieces per reservation, which [`Outcome::apply`] puts in the plan.
//!
//! ## Model
//!
//! - **Slots.** Time is cut into slots of `slot` plan steps from step 0 (the last one may be
//!   shorter). The slot length is the least, and at least the longest lease of the atoms, for
//!   which the model has at most [`Options::max_cells`] integer cells (an atom × a slot inside
//!   its window; 1,500 by default), or [`Options::slot_steps`]. So the minimum lease holds:
//!   every constant-height run is a slot or more, and an atom does not use a last slot of the
//!   horizon shorter than its lease. A slot a window only partly covers is not used by that atom,
//!   and a slot's capacity is the least free over its steps: coarse slots lose placements the
//!   plan's steps allow, so a reservation may then only be kept as it is (below).
//! - **Variables.** `x[a][k]`: gangs of atom `a` running in slot `k`, integer `0..=⌊h/g⌋`. Per
//!   reservation `j` two binaries shared by all its atoms: `r[j]` (rejected, the paper's slack)
//!   and `keep[j]` (left exactly as it is in the input), at most one of them. One binary per
//!   alternative of an `any`; continuous `d[a][k] ≥ |x[a][k+1] − x[a][k]|`.
//! - **Activity.** A reservation's root is active `1 − r[j] − keep[j]`; `window`, `all` and
//!   `order` pass their activity to every part (all or nothing); `any` splits it over one binary
//!   per alternative summing to it (exactly one alternative when moved). An atom with activity
//!   `y` covers its work, `Σ_k len_k · x[a][k] ≥ W_a · y` (`W_a` in gang-steps, as the agents
//!   count it), and runs nothing when inactive, `x[a][k] ≤ ⌊h/g⌋ · y`.
//! - **Capacity.** Per slot and dimension, `Σ_a gang_a · x[a][k] + Σ_j keep[j] · old_j(k)` is
//!   at most the least free capacity over the slot's steps of the plan without the optimised
//!   reservations (`old_j(k)`: the most reservation `j` held in the slot in the input).
//! - **Order.** Stage boundaries are fixed: an `order`'s window is split between its stages in
//!   proportion to their least durations, so stages cannot overlap and keep their order. This
//!   is weaker than the paper's start/end variables: a tight input may only be kept.
//! - **Objective.** `Σ cost(gang_a) · len_k · x[a][k] · (1 + ε · (K − k) / K)` (the cost of the
//!   allocation, `ε` a small surcharge on earlier slots so it leans late like GREE) `+ λ ·
//!   Σ cost(gang_a) · d[a][k]` (smoothness: height changes, including the start at the first
//!   and the stop after the last slot of the window, so fewer preemptions) `+ Σ_j keep[j] ·
//!   C_j` (`C_j`: the input's cost in the same terms, its height changes counted on the
//!   reservation's total) `+ M · Σ r[j]`, with `M` above the cost of any placement, so the
//!   model rejects only what it cannot place. `cost(v)` is `v`'s share of the largest capacity,
//!   summed over dimensions.
//!
//! ## What comes back
//!
//! The solver starts from the input (every `keep[j] = 1`, except `r[j] = 1` for reservations
//! holding something where the input plan is overcommitted: a feasible start whenever the
//! reservations not optimised fit by themselves) and runs under [`Options::time_limit`]. Its answer (rounded) is
//! checked: moved reservations' pieces, then kept ones, are added to the plan without the
//! optimised reservations with [`Plan::add`], which checks capacity at every step; one the
//! model rejected keeps its old pieces if they still fit, else it is in
//! [`Outcome::rejected`]. If the solver fails (time out before a feasible answer, numerical
//! trouble) or a moved or kept reservation does not fit, the input comes back unchanged
//! ([`Stats::kept_input`] says why). So on a plan within capacity nothing is ever rejected;
//! after a capacity loss the model moves what it can and rejects the rest.
//!
//! ## Not done yet
//!
//! - The minimum lease is enforced only through the slot length (above): long leases make
//!   slots coarse. A fixed [`Options::slot_steps`] below a lease does not respect it.
//! - `order` stage boundaries are fixed (above); the paper's movable boundaries are not built.
//! - Rejection does not weigh priority or age (every reservation's slack weighs the same).
//! - Reservations not optimised stay where they are (they only take capacity away).
//! - microlp is slow: on 40 reservations of a 600-step plan (1,400 cells, 7-step slots) it
//!   returns its warm start (the input) within a 20 s limit, release build included; with
//!   coarse slots moving a reservation also overshoots its work by up to a slot of gangs, so
//!   keeping GREE's exact shapes is often optimal anyway. At one-step slots (3 to 5
//!   reservations, 700 to 1,200 cells) it does move most of them to cheaper shapes within
//!   20 s, without proving optimality (`tests/milp_scale.rs`, ignored by default).

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use good_lp::{
    Expression, ProblemVariables, Solution, SolutionStatus, SolverModel, Variable, WithInitialSolution,
    WithTimeLimit, constraint, variable,
};

/// The solver: HiGHS with the `highs` feature, else microlp.
#[cfg(feature = "highs")]
use good_lp::highs as solver;
#[cfg(not(feature = "highs"))]
use good_lp::microlp as solver;

use crate::agents::{Allocation, Interval};
use crate::plan::{self, DIMS, Piece, Plan, Vector};
use gantry_rdl::{Atom, Expr};

/// A reservation to re-organise: its id in the plan and its expression.
#[derive(Debug, Clone, PartialEq)]
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
    /// The objective of keeping every reservation as it is (the input), for comparison.
    pub input_objective: f64,
    /// Whether the solver proved its answer optimal.
    pub optimal: bool,
    /// Reservations placed nowhere (see [`Outcome::rejected`]).
    pub rejections: usize,
    /// Reservations that kept their old pieces (the model chose to, or rejected them and the
    /// old pieces still fit).
    pub kept: usize,
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
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `(id, pieces)` per request placed (moved or kept), in request order.
    pub pieces: Vec<(u64, Vec<Piece>)>,
    /// Requests that could not be placed at all (only when the input plan no longer fits, e.g.
    /// after a capacity loss): [`Outcome::apply`] takes them out of the plan.
    pub rejected: Vec<u64>,
    /// The requests the model placed anew (not kept as they were), per atom as an admission
    /// agent reports them ([`Allocation`], plan time, atoms in pre-order), in request order:
    /// what a planner answers a host with. Their `pieces` are the same allocations.
    pub allocations: Vec<(u64, Allocation)>,
    /// What happened.
    pub stats: Stats,
}

impl Outcome {
    /// Replaces the requests' pieces in `plan` with the new ones. All or nothing: on error
    /// the plan is as it was.
    pub fn apply(&self, plan: &mut Plan) -> Result<(), plan::PlanError> {
        let mut old = Vec::with_capacity(self.pieces.len());
        for id in self.pieces.iter().map(|(id, _)| id).chain(&self.rejected) {
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
    /// Its pre-order index within its request.
    index: usize,
    /// `g`: bundles per gang.
    g: u64,
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
    /// Least steps per constant-height run.
    lease: usize,
    active: Expression,
}

impl FlatAtom {
    /// The slots the atom may use: inside its window and, where the last slot of the horizon is
    /// shorter, at least its lease long.
    fn slots(&self, slot: usize, steps: usize) -> Vec<usize> {
        let mut out = slots_in(self.lo, self.hi, slot, steps);
        out.retain(|&k| ((k + 1) * slot).min(steps) - k * slot >= self.lease);
        out
    }
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
    if requests.is_empty() {
        return Ok(Outcome {
            pieces: Vec::new(),
            rejected: Vec::new(),
            allocations: Vec::new(),
            stats: Stats::default(),
        });
    }
    let changes_before: usize = input.iter().map(|(_, p)| changes(p, steps)).sum();

    let mut vars = ProblemVariables::new();
    let Layout { rejected, kept, flat, any_rows } = layout(plan, requests, &mut vars);
    let slot = choose_slot(&flat, steps, opts);
    let n_slots = steps.div_ceil(slot);
    let slot_range = |k: usize| (k * slot, ((k + 1) * slot).min(steps));

    let largest = [0usize, 1, 2]
        .map(|d| (0..steps).filter_map(|i| plan.capacity_at(i)).map(|c| c[d]).max().unwrap_or(0));
    let lin = |v: &Vector| -> f64 {
        (0..DIMS).filter(|&d| largest[d] > 0).map(|d| v[d] as f64 / largest[d] as f64).sum::<f64>()
    };
    let cost = |v: &Vector| -> f64 { lin(v).max(1e-6) };
    let late = |k: usize| (n_slots - k) as f64 / n_slots as f64;

    // The input's pieces: most held per slot, and their cost in the objective's terms.
    let mut old_slots: Vec<HashMap<usize, Vector>> = Vec::with_capacity(input.len());
    let mut old_cost: Vec<f64> = Vec::with_capacity(input.len());
    for (_, pieces) in &input {
        let (per_slot, c) = old_shape(pieces, steps, slot, &lin, &late, opts);
        old_slots.push(per_slot);
        old_cost.push(c);
    }

    let mut atoms = Vec::with_capacity(flat.len());
    let mut index_in_req = vec![0usize; requests.len()];
    for f in flat {
        let index = index_in_req[f.req];
        index_in_req[f.req] += 1;
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
            f.slots(slot, steps)
                .into_iter()
                .map(|k| (k, vars.add(variable().integer().min(0).max(max_gangs as f64))))
                .collect()
        };
        atoms.push(AtomVars {
            req: f.req,
            index,
            g,
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
    // Above any placement: every atom's work at most a slot over, its height changing at
    // every slot, and every reservation kept as it is.
    let mut big_m = 1.0 + old_cost.iter().sum::<f64>();
    for a in &atoms {
        let c = cost(&a.gang);
        big_m += 2.0 * c * (a.work as f64 + slot as f64 * a.max_gangs as f64)
            + 2.0 * opts.smoothness * c * a.max_gangs as f64 * a.cells.len() as f64;
        for (n, &(k, x)) in a.cells.iter().enumerate() {
            let (s, e) = slot_range(k);
            alloc_cost += c * (e - s) as f64 * (1.0 + opts.early_surcharge * late(k)) * x;
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
    for (r, (k, c)) in rejected.iter().zip(kept.iter().zip(&old_cost)) {
        objective += big_m * *r + *c * *k;
    }

    // Warm start: every reservation kept as it is, except those holding something where the
    // input plan is overcommitted (after a capacity loss), rejected. Feasible whenever the
    // reservations not optimised fit by themselves.
    let overcommitted: Vec<bool> = input
        .iter()
        .map(|(_, pieces)| {
            pieces.iter().any(|p| plan.min_free(p.start, p.end).is_some_and(|f| f.iter().any(|&v| v < 0)))
        })
        .collect();
    let mut hint: Vec<(Variable, f64)> = Vec::new();
    for ((k, r), &over) in kept.iter().zip(&rejected).zip(&overcommitted) {
        hint.push((*k, if over { 0.0 } else { 1.0 }));
        hint.push((*r, if over { 1.0 } else { 0.0 }));
    }
    hint.extend(atoms.iter().flat_map(|a| a.cells.iter().map(|&(_, x)| (x, 0.0))));
    hint.extend(smooth_rows.iter().map(|&(d, _, _)| (d, 0.0)));
    hint.extend(any_rows.iter().flat_map(|(alts, _)| alts.iter().map(|v| (*v, 0.0))));
    let mut model = vars
        .minimise(objective.clone())
        .using(solver)
        .with_time_limit(opts.time_limit.as_secs_f64())
        .with_initial_solution(hint);
    for (r, k) in rejected.iter().zip(&kept) {
        model = model.with(constraint!(*r + *k <= 1));
    }
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
    // Per slot: the cells' terms (a variable and its demand per unit), and the reservations
    // that held something there in the input. Within a slot, capacity is checked on each
    // segment between the input pieces' ends, so keeping every reservation as it is stays
    // feasible whatever the slot length.
    let mut cell_terms: HashMap<usize, Vec<(Variable, Vector)>> = HashMap::new();
    for a in &atoms {
        for &(k, x) in &a.cells {
            cell_terms.entry(k).or_default().push((x, a.gang));
        }
    }
    let mut held_in: HashMap<usize, Vec<usize>> = HashMap::new();
    for (j, per_slot) in old_slots.iter().enumerate() {
        for &k in per_slot.keys() {
            held_in.entry(k).or_default().push(j);
        }
    }
    let mut cuts: Vec<usize> =
        input.iter().flat_map(|(_, p)| p.iter().flat_map(|q| [q.start, q.end])).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut slots: Vec<usize> = cell_terms.keys().chain(held_in.keys()).copied().collect();
    slots.sort_unstable();
    slots.dedup();
    for k in slots {
        let (s, e) = slot_range(k);
        let mut bounds = vec![s];
        bounds.extend_from_slice(&cuts[cuts.partition_point(|&c| c <= s)..cuts.partition_point(|&c| c < e)]);
        bounds.push(e);
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            let mut terms: Vec<(Variable, Vector)> = cell_terms.get(&k).cloned().unwrap_or_default();
            for &j in held_in.get(&k).map_or(&[][..], Vec::as_slice) {
                let v = demand_at(&input[j].1, a);
                if v != [0; DIMS] {
                    terms.push((kept[j], v));
                }
            }
            let free = base.min_free(a, b).unwrap_or([0; DIMS]);
            for (d, &room_d) in free.iter().enumerate() {
                let scale = terms.iter().map(|(_, v)| v[d]).max().unwrap_or(0);
                if scale <= 0 {
                    continue;
                }
                let used: Expression = terms.iter().map(|&(x, v)| (v[d] as f64 / scale as f64) * x).sum();
                let room_d = room_d.max(0);
                let room = (room_d / scale) as f64 + (room_d % scale) as f64 / scale as f64;
                model = model.with(constraint!(used <= room));
            }
        }
    }

    let t0 = Instant::now();
    let solved = model.solve();
    let solve_time = t0.elapsed();
    let mut stats = Stats {
        slot_steps: slot,
        cells: n_cells,
        changes_before,
        solve_time,
        input_objective: old_cost.iter().sum(),
        ..Stats::default()
    };
    let keep = |mut stats: Stats, why: String| {
        stats.kept_input = Some(why);
        stats.changes_after = stats.changes_before;
        Outcome { pieces: input.clone(), rejected: Vec::new(), allocations: Vec::new(), stats }
    };
    let sol = match solved {
        Ok(s) => s,
        Err(e) => return Ok(keep(stats, format!("solver: {e}"))),
    };
    stats.optimal = matches!(sol.status(), SolutionStatus::Optimal);
    stats.objective = sol.eval(&objective);

    // New pieces per reservation, checked against capacity.
    let mut new: Vec<Option<Vec<Piece>>> = rejected
        .iter()
        .zip(&kept)
        .map(|(r, k)| (sol.value(*r) < 0.5 && sol.value(*k) < 0.5).then(Vec::new))
        .collect();
    let mut new_atoms: Vec<Vec<Vec<Interval>>> = index_in_req.iter().map(|&n| vec![Vec::new(); n]).collect();
    for a in &atoms {
        let Some(pieces) = new[a.req].as_mut() else { continue };
        let mut run: Option<Piece> = None;
        for &(k, x) in &a.cells {
            let gangs = sol.value(x).round().clamp(0.0, a.max_gangs as f64) as i64;
            let (s, e) = slot_range(k);
            if gangs > 0 {
                let ivs = &mut new_atoms[a.req][a.index];
                let (start_ms, end_ms) = (s as u64 * step_ms, e as u64 * step_ms);
                let bundles = gangs as u64 * a.g;
                match ivs.last_mut() {
                    Some(l) if l.end_ms == start_ms && l.bundles == bundles => l.end_ms = end_ms,
                    _ => ivs.push(Interval { start_ms, end_ms, bundles }),
                }
            }
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
            let why = format!("reservation {}: an atom's work is not covered", requests[a.req].id);
            return Ok(keep(stats, why));
        }
    }
    // Moved ones first, then kept ones; those the model rejected keep their old pieces if these
    // still fit.
    let mut check = base;
    let mut placed: Vec<Option<Vec<Piece>>> = vec![None; requests.len()];
    let mut allocations = Vec::new();
    for (j, r) in requests.iter().enumerate() {
        if let Some(p) = new[j].take() {
            if let Err(e) = check.add(r.id, p.clone()) {
                return Ok(keep(stats, format!("reservation {}: {e}", r.id)));
            }
            placed[j] = Some(p);
            allocations.push((r.id, Allocation { atoms: std::mem::take(&mut new_atoms[j]) }));
        }
    }
    for pass in [true, false] {
        for (j, (id, old)) in input.iter().enumerate() {
            let is_kept = sol.value(kept[j]) >= 0.5;
            if placed[j].is_some() || is_kept != pass {
                continue;
            }
            match check.add(*id, old.clone()) {
                Ok(()) => {
                    stats.kept += 1;
                    placed[j] = Some(old.clone());
                }
                Err(e) if pass => {
                    return Ok(keep(stats, format!("reservation {id} kept but no longer fits: {e}")));
                }
                Err(_) => {}
            }
        }
    }
    if check.overcommitted().is_some() && plan.overcommitted().is_none() {
        return Ok(keep(stats, "the new plan is overcommitted".into()));
    }
    let mut pieces = Vec::with_capacity(requests.len());
    let mut rejected_ids = Vec::new();
    for (r, p) in requests.iter().zip(placed) {
        match p {
            Some(p) => pieces.push((r.id, p)),
            None => rejected_ids.push(r.id),
        }
    }
    stats.rejections = rejected_ids.len();
    stats.changes_after = pieces.iter().map(|(_, p)| changes(p, steps)).sum();
    Ok(Outcome { pieces, rejected: rejected_ids, allocations, stats })
}

/// What `pieces` hold together at `step`.
fn demand_at(pieces: &[Piece], step: usize) -> Vector {
    let mut v = [0i64; DIMS];
    for p in pieces.iter().filter(|p| p.start <= step && step < p.end) {
        for (v, d) in v.iter_mut().zip(&p.demand) {
            *v += d;
        }
    }
    v
}

/// The most `pieces` hold per slot (slots where they hold something), and their cost in the
/// objective's terms: allocation with the early surcharge, and height changes (of the
/// reservation's total, where the model counts them per atom).
fn old_shape(
    pieces: &[Piece],
    steps: usize,
    slot: usize,
    lin: &dyn Fn(&Vector) -> f64,
    late: &dyn Fn(usize) -> f64,
    opts: &Options,
) -> (HashMap<usize, Vector>, f64) {
    let mut per_slot: HashMap<usize, Vector> = HashMap::new();
    let (Some(lo), Some(hi)) =
        (pieces.iter().map(|p| p.start).min(), pieces.iter().map(|p| p.end.min(steps)).max())
    else {
        return (per_slot, 0.0);
    };
    let mut diff = vec![[0i64; DIMS]; hi.saturating_sub(lo) + 1];
    for p in pieces {
        let s = p.start.saturating_sub(lo).min(diff.len() - 1);
        let e = p.end.min(steps).saturating_sub(lo).min(diff.len() - 1);
        for (d, &v) in p.demand.iter().enumerate() {
            diff[s][d] += v;
            diff[e][d] -= v;
        }
    }
    let mut cur = [0i64; DIMS];
    let mut cost = 0.0;
    for (i, dv) in diff.iter().enumerate() {
        cost += opts.smoothness * lin(&dv.map(i64::abs));
        for (c, v) in cur.iter_mut().zip(dv) {
            *c += v;
        }
        let step = lo + i;
        if step < hi && cur != [0; DIMS] {
            let k = step / slot;
            cost += lin(&cur) * (1.0 + opts.early_surcharge * late(k));
            let m = per_slot.entry(k).or_insert([0; DIMS]);
            for (m, c) in m.iter_mut().zip(&cur) {
                *m = (*m).max(*c);
            }
        }
    }
    (per_slot, cost)
}

/// The slot length (steps) and the number of integer cells the model of `requests` would have,
/// without solving it.
pub fn model_size(plan: &Plan, requests: &[Request], opts: &Options) -> (usize, usize) {
    let mut vars = ProblemVariables::new();
    let flat = layout(plan, requests, &mut vars).flat;
    let steps = plan.steps();
    let slot = choose_slot(&flat, steps, opts);
    let cells = flat.iter().filter(|a| a.atom.work > 0).map(|a| a.slots(slot, steps).len()).sum();
    (slot, cells)
}

/// Rows of `any`: its alternatives' binaries and the activity they share.
type AnyRows = Vec<(Vec<Variable>, Expression)>;

/// Each request's rejection and keep binaries, its atoms with windows and activities, and the `any` rows.
fn layout(plan: &Plan, requests: &[Request], vars: &mut ProblemVariables) -> Layout {
    let rejected: Vec<Variable> = requests.iter().map(|_| vars.add(variable().binary())).collect();
    let kept: Vec<Variable> = requests.iter().map(|_| vars.add(variable().binary())).collect();
    let mut flat = Vec::new();
    let mut any_rows = Vec::new();
    for (j, r) in requests.iter().enumerate() {
        let root = Expression::from(1.0) - rejected[j] - kept[j];
        let mut walk = Walk { plan, vars, req: j, flat: &mut flat, any_rows: &mut any_rows };
        walk.expr(&r.expr, 0, plan.steps(), root);
    }
    Layout { rejected, kept, flat, any_rows }
}

/// What [`layout`] builds.
struct Layout {
    rejected: Vec<Variable>,
    kept: Vec<Variable>,
    flat: Vec<FlatAtom>,
    any_rows: AnyRows,
}

/// The least slot length (steps), at least the longest lease, for which the atoms have at most
/// `max_cells` cells, or the fixed one.
fn choose_slot(flat: &[FlatAtom], steps: usize, opts: &Options) -> usize {
    if let Some(s) = opts.slot_steps {
        return s.max(1);
    }
    let cells_for = |s: usize| -> usize {
        flat.iter().filter(|a| a.atom.work > 0).map(|a| a.slots(s, steps).len()).sum()
    };
    let limit = opts.max_cells.max(1);
    // At least the longest lease, so every constant-height run (a slot or more) holds it.
    let mut s =
        flat.iter().filter(|a| a.atom.work > 0).map(|a| a.lease).max().unwrap_or(1).clamp(1, steps.max(1));
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
            Expr::Atom(a) => {
                let step_ms = self.plan.step_ms();
                let lease = usize::try_from(a.min_lease_ms.div_ceil(step_ms).max(1)).unwrap_or(usize::MAX);
                self.flat.push(FlatAtom { req: self.req, atom: *a, lo, hi, lease, active });
            }
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
