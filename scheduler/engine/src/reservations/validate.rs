//! The host's check of a planner's answer to a `reserve` call (ABI 1.3; sdk/ABI.md §8, §13).
//! Atomic: if any decision or piece is refused, the whole answer is (nothing changes).
//!
//! What an allocation must be, from the RDL's meaning (gantry-rdl's documentation):
//!
//! - **Malformed** (the planner could not have meant anything by it): a decision of another kind
//!   (`bad_kind`), naming no reservation of the view (`unknown_subject`) or one already decided
//!   (`duplicate`), a rejection the call does not allow (`wrong_state`: in OPTIMIZE, or in
//!   ADMIT/UPDATE of a reservation other than the subject), a piece for a reservation without a
//!   PLAN decision, of an atom the definition does not have, empty, of zero bundles, or more than
//!   [`MAX_ALLOCATION_PIECES`] for one reservation (`bad_allocation`).
//! - **Infeasible**, per planned reservation:
//!   - `outside_window`: a piece (its part from now on) outside its atom's window — the
//!     intersection of every window above it, the outermost being `[arrival, deadline)` — or,
//!     for a reservation that held nothing before now, a piece starting before now;
//!   - `past_changed`: what the reservation held before now is not exactly what it held (each
//!     atom's bundles over time, however the pieces are cut);
//!   - `gang_size`: from now on, an atom holds a number of bundles that is not a multiple of its
//!     `g` or is above its `h` (a piece alone, or pieces that overlap, summed);
//!   - `short_lease`: a maximal run of an atom's allocation (its pieces merged where they touch
//!     or overlap) lasting less than the lease `l`. A run that ends by now is not judged (a
//!     replan may cut a running allocation at now); one that reaches the deadline is;
//!   - `work_missing`: the definition is not complete — an atom is complete with at least `w`
//!     bundle-ms in all (past included), `window`, `all` and `order` need every part complete,
//!     `any` one of them;
//!   - `order_broken`: a part of an `order` holds something before the previous part's last
//!     piece ends.
//! - `over_capacity`: from now on, the sum of all allocations after the answer exceeds the plan's
//!   capacity in a dimension at an instant where the answer adds to it (so an answer never makes
//!   the plan fuller where it is already over, as it may be while a restarted scheduler's nodes
//!   come back); in REPLAN, anywhere from now on (a replan must leave a plan that fits).
//!
//! Each reason is counted once per decision (malformed decisions), per piece (`bad_allocation`),
//! per reservation (the infeasible ones) or per answer (`over_capacity`).

use std::collections::{BTreeMap, BTreeSet};

use gantry_rdl::{Atom, Expr};
use gantry_sdk::abi::*;

use super::AtomInterval;
use super::book::Subject;
use super::skyline::{self, Delta, Demand, Skyline};
use crate::model::ReservationId;
use crate::validate::RejectReason;

/// The most pieces one reservation's allocation may have in an answer.
pub const MAX_ALLOCATION_PIECES: usize = 1 << 17;

/// What a `reserve` call was about.
pub(crate) struct Call<'a> {
    /// `GANTRY_RESERVE_*`.
    pub(crate) cause: u32,
    /// The view index of the subject (ADMIT, UPDATE), else `GANTRY_NONE`.
    pub(crate) subject: u32,
    pub(crate) now: u64,
    /// The plan's capacity.
    pub(crate) capacity: Demand,
    /// Reservations in the view.
    pub(crate) reservations: usize,
    /// The reservation at a view index.
    pub(crate) lookup: &'a dyn Fn(u32) -> Option<Subject<'a>>,
    /// What the accepted allocations hold together before the answer.
    pub(crate) skyline: &'a Skyline,
}

/// A valid answer.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    /// New allocations (each sorted by atom, then start).
    pub(crate) planned: Vec<(ReservationId, Vec<AtomInterval>)>,
    /// Rejections with the planner's reason code.
    pub(crate) rejected: Vec<(ReservationId, u32)>,
}

/// One refused item of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The reservation it concerns, if it names one of the view's.
    pub reservation: Option<ReservationId>,
    /// Why.
    pub reason: RejectReason,
    /// What exactly, in words.
    pub detail: String,
}

/// The name of a `GANTRY_RESERVE_*` cause.
pub fn cause_name(cause: u32) -> &'static str {
    match cause {
        GANTRY_RESERVE_ADMIT => "ADMIT",
        GANTRY_RESERVE_UPDATE => "UPDATE",
        GANTRY_RESERVE_REPLAN => "REPLAN",
        GANTRY_RESERVE_OPTIMIZE => "OPTIMIZE",
        _ => "unknown",
    }
}

/// Checks an answer: its decisions and its allocation pieces.
pub(crate) fn check(
    call: &Call<'_>,
    decisions: &[GantryDecision],
    pieces: &[GantryAllocation],
) -> Result<Answer, Vec<Refusal>> {
    let mut refusals = Vec::new();
    let mut refuse = |reservation: Option<ReservationId>, reason, detail: String| {
        refusals.push(Refusal { reservation, reason, detail });
    };
    // View index → None for PLAN, Some(code) for REJECT.
    let mut decided: BTreeMap<u32, Option<u32>> = BTreeMap::new();
    for d in decisions {
        let subject = (call.lookup)(d.subject);
        let id = subject.map(|s| s.id);
        let plan = match d.kind {
            GANTRY_DECISION_PLAN_RESERVATION => true,
            GANTRY_DECISION_REJECT_RESERVATION => false,
            k => {
                refuse(
                    id,
                    RejectReason::BadKind,
                    format!("decision kind {k} is not PLAN_RESERVATION or REJECT_RESERVATION"),
                );
                continue;
            }
        };
        let Some(s) = subject else {
            refuse(
                None,
                RejectReason::UnknownSubject,
                format!("reservation index {} is not in the view (it has {})", d.subject, call.reservations),
            );
            continue;
        };
        if decided.contains_key(&d.subject) {
            refuse(id, RejectReason::Duplicate, "decided twice".into());
            continue;
        }
        if !plan {
            let allowed = match call.cause {
                GANTRY_RESERVE_ADMIT | GANTRY_RESERVE_UPDATE => d.subject == call.subject,
                GANTRY_RESERVE_REPLAN => s.accepted,
                _ => false,
            };
            if !allowed {
                refuse(
                    id,
                    RejectReason::WrongState,
                    format!("a {} call may not reject this reservation", cause_name(call.cause)),
                );
                continue;
            }
        }
        decided.insert(d.subject, if plan { None } else { Some(d.reason) });
    }
    let mut groups: BTreeMap<u32, Vec<AtomInterval>> = BTreeMap::new();
    for p in pieces {
        let subject = (call.lookup)(p.reservation);
        let id = subject.map(|s| s.id);
        let Some(s) = subject.filter(|_| decided.get(&p.reservation) == Some(&None)) else {
            refuse(
                id,
                RejectReason::BadAllocation,
                format!(
                    "a piece for reservation index {}, which has no PLAN_RESERVATION decision",
                    p.reservation
                ),
            );
            continue;
        };
        let bad = if p.atom as usize >= s.atoms.len() {
            Some(format!("a piece of atom {}; the definition has {}", p.atom, s.atoms.len()))
        } else if p.start_ms >= p.end_ms {
            Some(format!("an empty piece [{}, {})", p.start_ms, p.end_ms))
        } else if p.bundles == 0 {
            Some(format!("a piece of zero bundles at [{}, {})", p.start_ms, p.end_ms))
        } else {
            None
        };
        if let Some(detail) = bad {
            refuse(id, RejectReason::BadAllocation, detail);
            continue;
        }
        groups.entry(p.reservation).or_default().push(AtomInterval {
            atom: p.atom,
            start_ms: p.start_ms,
            end_ms: p.end_ms,
            bundles: p.bundles,
        });
    }
    for (i, g) in &groups {
        if g.len() > MAX_ALLOCATION_PIECES {
            let id = (call.lookup)(*i).map(|s| s.id);
            refuse(
                id,
                RejectReason::BadAllocation,
                format!("{} pieces, more than {MAX_ALLOCATION_PIECES}", g.len()),
            );
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let mut answer = Answer::default();
    let mut delta = Delta::default();
    for (&i, &decision) in &decided {
        let Some(s) = (call.lookup)(i) else { continue };
        match decision {
            None => {
                let mut allocation = groups.remove(&i).unwrap_or_default();
                allocation.sort();
                for (reason, detail) in feasibility(&s, &allocation, call.now) {
                    refusals.push(Refusal { reservation: Some(s.id), reason, detail });
                }
                future(&mut delta, s.old_atoms, s.old, call.now, -1);
                future(&mut delta, s.atoms, &allocation, call.now, 1);
                answer.planned.push((s.id, allocation));
            }
            Some(code) => {
                if call.cause == GANTRY_RESERVE_REPLAN {
                    future(&mut delta, s.old_atoms, s.old, call.now, -1);
                }
                answer.rejected.push((s.id, code));
            }
        }
    }
    let everywhere = call.cause == GANTRY_RESERVE_REPLAN;
    if skyline::over_after(call.skyline, &delta, call.now, &call.capacity, everywhere) {
        refusals.push(Refusal {
            reservation: None,
            reason: RejectReason::OverCapacity,
            detail: if everywhere {
                "the plan would still exceed its capacity".into()
            } else {
                "the allocations would exceed the plan's capacity".into()
            },
        });
    }
    if refusals.is_empty() { Ok(answer) } else { Err(refusals) }
}

/// Adds `sign` × what `allocation` holds from `now` on.
fn future(delta: &mut Delta, atoms: &[Atom], allocation: &[AtomInterval], now: u64, sign: i128) {
    for p in allocation.iter().filter(|p| p.end_ms > now) {
        if let Some(a) = atoms.get(p.atom as usize) {
            delta.add(p.start_ms.max(now), p.end_ms, &skyline::demand(&a.bundle, p.bundles), sign);
        }
    }
}

/// Each atom's window, in pre-order: the intersection of every window above it (`(0, u64::MAX)`
/// when none).
pub(crate) fn atom_windows(e: &Expr) -> Vec<(u64, u64)> {
    fn walk(e: &Expr, lo: u64, hi: u64, out: &mut Vec<(u64, u64)>) {
        match e {
            Expr::Atom(_) => out.push((lo, hi)),
            Expr::Window(w) => walk(&w.inner, lo.max(w.start_ms), hi.min(w.end_ms), out),
            Expr::Order(v) | Expr::All(v) | Expr::Any(v) => v.iter().for_each(|x| walk(x, lo, hi, out)),
        }
    }
    let mut out = Vec::new();
    walk(e, 0, u64::MAX, &mut out);
    out
}

/// Per atom, the bundles held before `now` as maximal segments of constant height: what
/// `past_changed` compares, whatever the pieces' cut.
fn past(atoms: usize, allocation: &[AtomInterval], now: u64) -> Vec<Vec<(u64, u64, i128)>> {
    let mut deltas: Vec<Delta> = (0..atoms).map(|_| Delta::default()).collect();
    for p in allocation.iter().filter(|p| p.start_ms < now) {
        if let Some(d) = deltas.get_mut(p.atom as usize) {
            d.add(p.start_ms, p.end_ms.min(now), &[i128::from(p.bundles), 0, 0], 1);
        }
    }
    deltas
        .iter()
        .map(|d| {
            let mut out: Vec<(u64, u64, i128)> = Vec::new();
            for (s, e, v) in d.segments() {
                match out.last_mut() {
                    Some(last) if last.1 == s && last.2 == v[0] => last.1 = e,
                    _ => out.push((s, e, v[0])),
                }
            }
            out
        })
        .collect()
}

/// The infeasibilities of `allocation` (sorted by atom, then start) for reservation `s`, one per
/// reason.
fn feasibility(s: &Subject<'_>, allocation: &[AtomInterval], now: u64) -> Vec<(RejectReason, String)> {
    let mut found: BTreeMap<RejectReason, String> = BTreeMap::new();
    let mut note = |reason: RejectReason, detail: String| {
        found.entry(reason).or_insert(detail);
    };
    let atoms = s.atoms;
    let n = atoms.len().max(s.old_atoms.len());
    let (old_past, new_past) = (past(n, s.old, now), past(n, allocation, now));
    if old_past != new_past {
        if old_past.iter().all(Vec::is_empty) {
            note(RejectReason::OutsideWindow, format!("a piece starts before now ({now})"));
        } else {
            note(RejectReason::PastChanged, format!("what it held before now ({now}) changed"));
        }
    }
    let windows = atom_windows(s.absolute);
    let mut work = vec![0u128; atoms.len()];
    let mut spans: Vec<Option<(u64, u64)>> = vec![None; atoms.len()];
    for (k, a) in atoms.iter().enumerate() {
        let ps: Vec<&AtomInterval> = allocation.iter().filter(|p| p.atom as usize == k).collect();
        let (lo, hi) = windows.get(k).copied().unwrap_or((0, u64::MAX));
        let g = u64::from(a.min_parallel.max(1));
        let h = u64::from(a.max_parallel);
        let mut sweep = Delta::default();
        for p in &ps {
            work[k] = work[k].saturating_add(u128::from(p.end_ms - p.start_ms) * u128::from(p.bundles));
            spans[k] = Some(match spans[k] {
                None => (p.start_ms, p.end_ms),
                Some((s0, e0)) => (s0.min(p.start_ms), e0.max(p.end_ms)),
            });
            if p.end_ms <= now {
                continue;
            }
            if p.start_ms.max(now) < lo || p.end_ms > hi {
                note(
                    RejectReason::OutsideWindow,
                    format!("atom {k}: piece [{}, {}) outside its window [{lo}, {hi})", p.start_ms, p.end_ms),
                );
            }
            sweep.add(p.start_ms.max(now), p.end_ms, &[i128::from(p.bundles), 0, 0], 1);
        }
        for (s0, e0, v) in sweep.segments() {
            let n = u64::try_from(v[0].max(0)).unwrap_or(u64::MAX);
            if n > 0 && (n % g != 0 || n > h) {
                note(
                    RejectReason::GangSize,
                    format!("atom {k}: {n} bundles at [{s0}, {e0}), not a multiple of g = {g} up to h = {h}"),
                );
            }
        }
        // Maximal runs: pieces are sorted by start within the atom.
        let mut run: Option<(u64, u64)> = None;
        let mut runs = Vec::new();
        for p in &ps {
            run = match run {
                Some((s0, e0)) if p.start_ms <= e0 => Some((s0, e0.max(p.end_ms))),
                Some(r) => {
                    runs.push(r);
                    Some((p.start_ms, p.end_ms))
                }
                None => Some((p.start_ms, p.end_ms)),
            };
        }
        runs.extend(run);
        for (s0, e0) in runs {
            if e0 > now && e0 - s0 < a.min_lease_ms {
                note(
                    RejectReason::ShortLease,
                    format!(
                        "atom {k}: a run [{s0}, {e0}) is shorter than the lease of {} ms",
                        a.min_lease_ms
                    ),
                );
            }
        }
    }
    let mut next = 0;
    if !complete(s.absolute, &mut next, &work) {
        let short: Vec<String> = atoms
            .iter()
            .enumerate()
            .filter(|(k, a)| work[*k] < u128::from(a.work))
            .map(|(k, a)| format!("atom {k} has {} of {} bundle-ms", work[k], a.work))
            .collect();
        note(RejectReason::WorkMissing, short.join(", "));
    }
    let mut next = 0;
    let mut broken = None;
    span_of(s.absolute, &mut next, &spans, &mut broken);
    if let Some(detail) = broken {
        note(RejectReason::OrderBroken, detail);
    }
    found.into_iter().collect()
}

/// Whether `e` is complete given each atom's work (pre-order from `*next`).
fn complete(e: &Expr, next: &mut usize, work: &[u128]) -> bool {
    match e {
        Expr::Atom(a) => {
            let k = *next;
            *next += 1;
            work.get(k).copied().unwrap_or(0) >= u128::from(a.work)
        }
        Expr::Window(w) => complete(&w.inner, next, work),
        // Every part is walked (no short cut): the atoms' numbering runs on through them.
        Expr::Order(v) | Expr::All(v) => {
            let mut all = true;
            for x in v {
                all &= complete(x, next, work);
            }
            all
        }
        Expr::Any(v) => {
            let mut any = false;
            for x in v {
                any |= complete(x, next, work);
            }
            any
        }
    }
}

/// The time `e`'s atoms' pieces span (pre-order from `*next`); notes the first `order` whose
/// parts overlap.
fn span_of(
    e: &Expr,
    next: &mut usize,
    spans: &[Option<(u64, u64)>],
    broken: &mut Option<String>,
) -> Option<(u64, u64)> {
    let join = |a: Option<(u64, u64)>, b: Option<(u64, u64)>| match (a, b) {
        (Some((s1, e1)), Some((s2, e2))) => Some((s1.min(s2), e1.max(e2))),
        (x, None) | (None, x) => x,
    };
    match e {
        Expr::Atom(_) => {
            let k = *next;
            *next += 1;
            spans.get(k).copied().flatten()
        }
        Expr::Window(w) => span_of(&w.inner, next, spans, broken),
        Expr::All(v) | Expr::Any(v) => {
            v.iter().fold(None, |acc, x| join(acc, span_of(x, next, spans, broken)))
        }
        Expr::Order(v) => {
            let mut total = None;
            let mut prev: Option<(usize, (u64, u64))> = None;
            for (i, x) in v.iter().enumerate() {
                let sp = span_of(x, next, spans, broken);
                if let (Some((j, p)), Some(c)) = (prev, sp) {
                    if c.0 < p.1 && broken.is_none() {
                        *broken =
                            Some(format!("order part {i} starts at {} before part {j} ends at {}", c.0, p.1));
                    }
                }
                if let Some(c) = sp {
                    prev = Some((i, c));
                }
                total = join(total, sp);
            }
            total
        }
    }
}

/// The reasons found in `refusals`, each once, in order (for a log line).
pub(crate) fn reasons(refusals: &[Refusal]) -> String {
    let set: BTreeSet<RejectReason> = refusals.iter().map(|r| r.reason).collect();
    set.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
}
