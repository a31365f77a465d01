//! Adaptive replanning after capacity is lost (Rayon, SoCC 2014, §5; item 6 of issue 9).
//!
//! The caller lowers the plan's capacity with [`Plan::set_capacity`] (nodes lost or drained);
//! where reservations now hold more than there is, [`Plan::overcommitted`] reports a step.
//! [`replan`] repairs the plan:
//!
//! - **Affected** reservations are those holding some dimension at a step where that dimension
//!   is overcommitted. Only they may change; every other reservation keeps its exact pieces.
//! - Several strategies are tried, each on a copy of the plan, and the best outcome is kept:
//!   fewest rejections, then the least important rejections, then fewest reservations changed.
//!   - *keep, then move*: affected reservations, most important first (highest priority, then
//!     oldest), keep their pieces if those fit again, else are re-admitted within their windows
//!     by the plan's agent (moved and reshaped), else rejected;
//!   - *move all*: every affected reservation is taken out and re-admitted, most important first;
//!   - *unmovable first, then move*: as *keep, then move*, but the reservations that may not
//!     move are put back first (an unmovable one can only stay, a movable one can go elsewhere);
//!   - *reject the least important*: the `k` least important (lowest priority, then newest) are
//!     rejected and the rest placed as above, for the smallest `k` (found by binary search, at
//!     most the other strategies' rejections) that places all the rest;
//!   - *delete newest, then rescue*: YARN's order of deletion restricted to reservations that
//!     hold an overcommitted dimension, after which the deleted ones are re-admitted where they
//!     still fit.
//! - Reservations without a [`ReservationInfo`] (the caller knows no expression for them) are
//!   pinned: never moved nor rejected. A reservation marked not movable (already running, say)
//!   keeps its pieces or is rejected. If what is pinned still overcommits the plan, the report
//!   says so ([`Replan::overcommitted`]); everything else is still cleared.
//!
//! [`replan_yarn_simple`] is the baseline: Hadoop YARN's `SimpleCapacityReplanner`, which walks
//! the plan's steps in time order and, at each overcommitted step, deletes the reservations
//! active there, newest first, until the step fits again. It never moves anything.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, HashMap};

use crate::agents::{Agent, Allocation, admit};
use crate::plan::{DIMS, Piece, Plan};
use gantry_rdl::Expr;

/// What the replanner knows of one reservation in the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationInfo {
    /// The reservation's id in the plan.
    pub id: u64,
    /// What it asked for: a moved reservation is re-admitted against this expression.
    pub expr: Expr,
    /// Importance: higher is more important (rejected later).
    pub priority: i64,
    /// Submission order: lower is older (more important at equal priority).
    pub submitted: u64,
    /// Whether its pieces may move; one that may not keeps them or is rejected.
    pub movable: bool,
}

impl ReservationInfo {
    /// A movable reservation.
    pub fn new(id: u64, expr: Expr, priority: i64, submitted: u64) -> Self {
        ReservationInfo { id, expr, priority, submitted, movable: true }
    }

    /// Sort key, most important first.
    fn rank(&self) -> (Reverse<i64>, u64, u64) {
        (Reverse(self.priority), self.submitted, self.id)
    }
}

/// A reservation placed anew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Its id.
    pub id: u64,
    /// Its new allocation, per atom as [`admit`] reports it.
    pub allocation: Allocation,
}

/// What a replan did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Replan {
    /// The strategy whose outcome was kept.
    pub strategy: &'static str,
    /// Reservations that held an overcommitted dimension at an overcommitted step.
    pub affected: Vec<u64>,
    /// Reservations in the plan holding exactly the pieces they held before (the unaffected ones
    /// and affected ones that could stay).
    pub kept: Vec<u64>,
    /// Reservations placed anew.
    pub moved: Vec<Moved>,
    /// Reservations taken out of the plan.
    pub rejected: Vec<u64>,
    /// A step still overcommitted afterwards (only where pinned reservations, or ones that may
    /// not move and have no info, hold more than the capacity); `None` when the plan fits.
    pub overcommitted: Option<usize>,
}

impl Replan {
    /// Whether anything changed.
    pub fn changed(&self) -> usize {
        self.moved.len() + self.rejected.len()
    }
}

/// The `(step, dimension)` cells where free capacity is negative, as a per-dimension set of
/// steps; empty when nothing is overcommitted.
fn over_cells(plan: &Plan) -> [BTreeSet<usize>; DIMS] {
    let mut cells: [BTreeSet<usize>; DIMS] = Default::default();
    let mut step = plan.overcommitted();
    while let Some(s) = step {
        if let Some(free) = plan.free_at(s) {
            for d in 0..DIMS {
                if free[d] < 0 {
                    cells[d].insert(s);
                }
            }
        }
        // The next overcommitted step after `s`: scan on with the trees' minimum.
        step = next_over(plan, s + 1);
    }
    cells
}

/// The first step at or after `from` whose free capacity is negative in some dimension.
fn next_over(plan: &Plan, from: usize) -> Option<usize> {
    let steps = plan.steps();
    if from >= steps {
        return None;
    }
    // Binary search on the range minimum: the least `s` such that `[from, s]` has a negative.
    let neg = |end: usize| plan.min_free(from, end).is_some_and(|m| m.iter().any(|&x| x < 0));
    if !neg(steps) {
        return None;
    }
    let (mut lo, mut hi) = (from + 1, steps);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if neg(mid) { hi = mid } else { lo = mid + 1 }
    }
    Some(lo - 1)
}

/// Whether `pieces` hold some dimension at a cell of `cells`.
fn touches(pieces: &[Piece], cells: &[BTreeSet<usize>; DIMS]) -> bool {
    pieces
        .iter()
        .any(|p| (0..DIMS).any(|d| p.demand[d] > 0 && cells[d].range(p.start..p.end).next().is_some()))
}

/// The reservations of `plan` affected by its overcommitment, by id, ascending.
pub fn affected(plan: &Plan) -> Vec<u64> {
    let cells = over_cells(plan);
    if cells.iter().all(BTreeSet::is_empty) {
        return Vec::new();
    }
    let mut ids: Vec<u64> =
        plan.reservation_ids().filter(|&id| plan.pieces(id).is_some_and(|p| touches(p, &cells))).collect();
    ids.sort_unstable();
    ids
}

/// Pieces in a canonical order, to compare two holdings.
fn canonical(pieces: &[Piece]) -> Vec<Piece> {
    let mut v = pieces.to_vec();
    v.sort_by_key(|p| (p.start, p.end, p.demand));
    v
}

/// One strategy's result, before it is compared.
struct Outcome {
    name: &'static str,
    plan: Plan,
    moved: Vec<Moved>,
    rejected: Vec<u64>,
}

/// How a strategy re-places a reservation it has taken out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Its old pieces if they fit, else the agent.
    KeepFirst,
    /// The agent only (its old pieces if the agent finds exactly them).
    Agent,
}

/// Re-places `order` (taken out of `plan` already) one by one; returns the moved and the ones
/// that did not fit.
fn place_all(
    plan: &mut Plan,
    order: &[&ReservationInfo],
    old: &HashMap<u64, Vec<Piece>>,
    agent: Agent,
    how: Place,
) -> (Vec<Moved>, Vec<u64>) {
    let mut moved = Vec::new();
    let mut failed = Vec::new();
    for info in order {
        let Some(before) = old.get(&info.id) else { continue };
        if (how == Place::KeepFirst || !info.movable) && plan.add(info.id, before.clone()).is_ok() {
            continue;
        }
        if !info.movable {
            failed.push(info.id);
            continue;
        }
        match readmit(plan, info, before, agent) {
            Some(Some(allocation)) => moved.push(Moved { id: info.id, allocation }),
            Some(None) => {}
            None => failed.push(info.id),
        }
    }
    (moved, failed)
}

/// Re-admits `info` (out of `plan`) with `agent`: `None` if it does not fit, `Some(None)` if
/// the agent found exactly the pieces it held `before` (they are then restored in their old
/// order, so the reservation is kept as it was), else its new allocation.
fn readmit(
    plan: &mut Plan,
    info: &ReservationInfo,
    before: &[Piece],
    agent: Agent,
) -> Option<Option<Allocation>> {
    let allocation = admit(plan, &info.expr, agent, info.id).ok()?;
    let same = plan.pieces(info.id).is_some_and(|p| canonical(p) == canonical(before));
    if !same {
        return Some(Some(allocation));
    }
    // The same holding: give it back and put the old pieces in again (they fit: the same sums).
    plan.remove(info.id);
    match plan.add(info.id, before.to_vec()) {
        Ok(()) => Some(None),
        // Cannot happen (the same demand per step was just held); re-admit to stay consistent.
        Err(_) => admit(plan, &info.expr, agent, info.id).ok().map(Some),
    }
}

/// Takes `ids` out of a copy of `plan`.
fn without(plan: &Plan, ids: &[u64]) -> Plan {
    let mut p = plan.clone();
    for &id in ids {
        p.remove(id);
    }
    p
}

/// Re-plans `plan` after a capacity loss, moving, reshaping and as a last resort rejecting the
/// affected reservations (see the [module documentation](self)). `infos` describes the
/// reservations the replanner may touch; `agent` is the plan's admission agent. The plan is
/// updated in place; unaffected reservations keep their exact pieces.
pub fn replan(plan: &mut Plan, infos: &[ReservationInfo], agent: Agent) -> Replan {
    let affected_ids = affected(plan);
    let all_ids: Vec<u64> = {
        let mut v: Vec<u64> = plan.reservation_ids().collect();
        v.sort_unstable();
        v
    };
    if affected_ids.is_empty() {
        return Replan {
            strategy: "none",
            kept: all_ids,
            overcommitted: plan.overcommitted(),
            ..Replan::default()
        };
    }
    let by_id: HashMap<u64, &ReservationInfo> = infos.iter().map(|i| (i.id, i)).collect();
    // The affected reservations the replanner may touch, most important first.
    let mut touchable: Vec<&ReservationInfo> =
        affected_ids.iter().filter_map(|id| by_id.get(id).copied()).collect();
    touchable.sort_by_key(|i| i.rank());
    let ids: Vec<u64> = touchable.iter().map(|i| i.id).collect();
    let old: HashMap<u64, Vec<Piece>> =
        ids.iter().filter_map(|&id| plan.pieces(id).map(|p| (id, p.to_vec()))).collect();
    let base = without(plan, &ids);

    let mut outcomes = Vec::new();
    for (name, how) in [("keep, then move", Place::KeepFirst), ("move all", Place::Agent)] {
        let mut p = base.clone();
        let (moved, rejected) = place_all(&mut p, &touchable, &old, agent, how);
        outcomes.push(Outcome { name, plan: p, moved, rejected });
    }
    // Reservations that may not move first (they can only stay where they are), then the rest:
    // a movable one may find room elsewhere, an unmovable one only in its place.
    if touchable.iter().any(|i| !i.movable) {
        let order: Vec<&ReservationInfo> = touchable
            .iter()
            .filter(|i| !i.movable)
            .chain(touchable.iter().filter(|i| i.movable))
            .copied()
            .collect();
        let mut p = base.clone();
        let (moved, rejected) = place_all(&mut p, &order, &old, agent, Place::KeepFirst);
        outcomes.push(Outcome { name: "unmovable first, then move", plan: p, moved, rejected });
    }
    // Reject the k least important and place the rest, for the smallest k that places them
    // all: only a k no larger than the greedy strategies' rejections can do better, and k is
    // found by binary search (a few re-placements of every affected reservation, not one per
    // k; where more rejections do not always make room, the k found may not be the least).
    let fewest = outcomes.iter().map(|o| o.rejected.len()).min().unwrap_or(0);
    let n = touchable.len();
    let try_k = |k: usize| {
        let mut p = base.clone();
        let (moved, failed) = place_all(&mut p, &touchable[..n - k], &old, agent, Place::KeepFirst);
        let rejected: Vec<u64> = touchable[n - k..].iter().rev().map(|i| i.id).collect();
        failed.is_empty().then_some(Outcome { name: "reject the least important", plan: p, moved, rejected })
    };
    if fewest > 0 {
        let hi = fewest.min(n);
        if let Some(mut found) = try_k(hi) {
            let (mut lo, mut hi) = (1, hi);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match try_k(mid) {
                    Some(o) => {
                        found = o;
                        hi = mid;
                    }
                    None => lo = mid + 1,
                }
            }
            outcomes.push(found);
        }
    }
    outcomes.push(delete_then_rescue(plan, &touchable, &old, agent));

    let rank_of: HashMap<u64, (Reverse<i64>, u64, u64)> =
        touchable.iter().map(|i| (i.id, i.rank())).collect();
    let mut best: Option<Outcome> = None;
    for o in outcomes {
        best = match best {
            Some(b) if compare(&b, &o, &rank_of) != Ordering::Greater => Some(b),
            _ => Some(o),
        };
    }
    let Some(best) = best else {
        return Replan::default();
    };
    *plan = best.plan;
    let changed: BTreeSet<u64> =
        best.moved.iter().map(|m| m.id).chain(best.rejected.iter().copied()).collect();
    let mut rejected = best.rejected;
    rejected.sort_unstable();
    let mut moved = best.moved;
    moved.sort_by_key(|m| m.id);
    Replan {
        strategy: best.name,
        affected: affected_ids,
        kept: all_ids.into_iter().filter(|id| !changed.contains(id)).collect(),
        moved,
        rejected,
        overcommitted: plan.overcommitted(),
    }
}

/// `Less` when `a` is better: fewer rejections, then less important ones (compared most
/// important first), then fewer changes.
fn compare(a: &Outcome, b: &Outcome, rank: &HashMap<u64, (Reverse<i64>, u64, u64)>) -> Ordering {
    let ranks = |o: &Outcome| {
        let mut r: Vec<(Reverse<i64>, u64, u64)> =
            o.rejected.iter().filter_map(|id| rank.get(id).copied()).collect();
        r.sort_unstable();
        r
    };
    a.rejected
        .len()
        .cmp(&b.rejected.len())
        // A smaller rank is more important: rejecting it is worse, so the larger list wins.
        .then_with(|| ranks(b).cmp(&ranks(a)))
        .then_with(|| (a.moved.len() + a.rejected.len()).cmp(&(b.moved.len() + b.rejected.len())))
}

/// YARN's deletion order restricted to the reservations that hold an overcommitted dimension,
/// then the deleted ones re-admitted (most important first) where they still fit.
fn delete_then_rescue(
    plan: &Plan,
    touchable: &[&ReservationInfo],
    old: &HashMap<u64, Vec<Piece>>,
    agent: Agent,
) -> Outcome {
    let mut p = plan.clone();
    let mut newest_first: Vec<&ReservationInfo> = touchable.to_vec();
    newest_first.sort_by_key(|i| (Reverse(i.submitted), Reverse(i.id)));
    let mut deleted: Vec<&ReservationInfo> = Vec::new();
    let mut from = 0;
    while let Some(s) = next_over(&p, from) {
        for info in &newest_first {
            let Some(free) = p.free_at(s) else { break };
            if free.iter().all(|&x| x >= 0) {
                break;
            }
            let holds = p.pieces(info.id).is_some_and(|ps| {
                ps.iter()
                    .any(|q| q.start <= s && s < q.end && (0..DIMS).any(|d| free[d] < 0 && q.demand[d] > 0))
            });
            if holds {
                p.remove(info.id);
                deleted.push(info);
            }
        }
        // Cleared, or overcommitted by pinned reservations only: go on after it.
        from = s + 1;
    }
    deleted.sort_by_key(|i| i.rank());
    let mut moved = Vec::new();
    let mut rejected = Vec::new();
    for info in deleted {
        let Some(before) = old.get(&info.id) else { continue };
        if p.add(info.id, before.clone()).is_ok() {
            continue;
        }
        if !info.movable {
            rejected.push(info.id);
            continue;
        }
        match readmit(&mut p, info, before, agent) {
            Some(Some(allocation)) => moved.push(Moved { id: info.id, allocation }),
            Some(None) => {}
            None => rejected.push(info.id),
        }
    }
    Outcome { name: "delete newest, then rescue", plan: p, moved, rejected }
}

/// Hadoop YARN's `SimpleCapacityReplanner`: at each overcommitted step, in time order, deletes
/// the reservations active there (holding anything at that step), newest first, until the step
/// fits; nothing is moved. Reservations without a [`ReservationInfo`] are never deleted (their
/// age is unknown); where they alone overcommit a step the report says so.
pub fn replan_yarn_simple(plan: &mut Plan, infos: &[ReservationInfo]) -> Replan {
    let affected_ids = affected(plan);
    // Deleting only frees capacity, so every step overcommitted on the way is overcommitted
    // now: only reservations active at one of those steps can be deleted.
    let cells = over_cells(plan);
    let any_dim: BTreeSet<usize> = cells.iter().flatten().copied().collect();
    let active_somewhere = |id: u64| {
        plan.pieces(id).is_some_and(|ps| {
            ps.iter()
                .any(|q| q.demand.iter().any(|&x| x > 0) && any_dim.range(q.start..q.end).next().is_some())
        })
    };
    let mut newest_first: Vec<&ReservationInfo> = infos.iter().filter(|i| active_somewhere(i.id)).collect();
    newest_first.sort_by_key(|i| (Reverse(i.submitted), Reverse(i.id)));
    let mut rejected = Vec::new();
    let mut from = 0;
    while let Some(s) = next_over(plan, from) {
        for info in &newest_first {
            if plan.free_at(s).is_none_or(|f| f.iter().all(|&x| x >= 0)) {
                break;
            }
            let active = plan.pieces(info.id).is_some_and(|ps| {
                ps.iter().any(|q| q.start <= s && s < q.end && q.demand.iter().any(|&x| x > 0))
            });
            if active {
                plan.remove(info.id);
                rejected.push(info.id);
            }
        }
        from = s + 1;
    }
    rejected.sort_unstable();
    let mut kept: Vec<u64> = plan.reservation_ids().collect();
    kept.sort_unstable();
    Replan {
        strategy: "YARN SimpleCapacityReplanner",
        affected: affected_ids,
        kept,
        moved: Vec::new(),
        rejected,
        overcommitted: plan.overcommitted(),
    }
}
