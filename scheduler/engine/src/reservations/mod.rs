//! Reservations in the engine (Rayon, Curino et al., SoCC 2014; seed 001): only the generic
//! mechanism. Planning is a plugin's (the `reserve` hook of ABI 1.3); the engine keeps the
//! records, calls the planner, checks every answer, and follows the accepted allocations.
//!
//! One configured leaf queue is *reservable* (YARN's plan queue). At construction the engine
//! gives it a child `<plan>.default`, where best-effort work submitted to the plan queue runs.
//! Each accepted reservation gets a leaf `<plan>.reservation_<id>` whose guarantee **at every
//! moment is its allocation at that moment** ([`follow`]); `default` takes what the reservations
//! leave. Every queue of the plan may borrow up to the whole plan queue, so idle reserved
//! capacity is lent out, and a preemption plugin (which reads guarantees) takes it back when the
//! reservation's own work is waiting. When a reservation ends (its deadline passes, it is
//! deleted, or a replan gives it up) its applications move to `default` and its queue is retired
//! (its slot is reused by a later reservation).
//!
//! - [`book`]: the records (definition in engine time, allocation as [`AtomInterval`]s), their
//!   queues, expiry, restore.
//! - [`follow`]: the plan follower.
//! - [`view`]: the ABI arrays every hook's view carries (`View::plan`).
//! - [`validate`]: the host's check of a planner's answer.
//! - [`call`]: calling the planner (ADMIT, UPDATE, REPLAN, OPTIMIZE) and the built-ins that stand
//!   in when it fails.
//!
//! Times: a request's RDL expression counts from its `arrival` (default: now); the engine keeps
//! it in engine time, `window(arrival, deadline, expr shifted by arrival)`, and a deadline may
//! lie at most one horizon after the submission.

pub mod book;
mod call;
mod follow;
pub(crate) mod skyline;
pub mod validate;
pub(crate) mod view;

use gantry_rdl::{Atom, Expr};

use crate::model::{ReservationId, Resources};

pub use book::{PlannedReservation, ReservationBook};

/// The name of the plan queue's child for work without a reservation.
pub const DEFAULT_CHILD: &str = "default";

/// The reservation system's configuration (`[reservations]` in the scheduler's TOML). The
/// planner itself is a plugin (`Profile::reserve`) with its own configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanConfig {
    /// The reservable leaf queue, e.g. `root.prod`.
    pub queue: String,
    /// The follower's step, ms: the reservation queues' guarantees are set again at most once a
    /// step (a hint for the planner's grid, `View::plan.step_ms`).
    pub step_ms: u64,
    /// How far after its submission a deadline may lie, ms.
    pub horizon_ms: u64,
    /// How often the planner is asked to re-organise the plan (`GANTRY_RESERVE_OPTIMIZE`, at a
    /// cycle), ms; 0 = never.
    pub optimize_interval_ms: u64,
    /// How long it takes to make room for a reservation, ms: the preemption policy's round, its
    /// wait before a kill and the kill's grace, and a cycle. A reservation queue's guarantee is
    /// raised this long before each piece of its allocation starts, so that the room is there
    /// when it starts; and a new reservation's allocation starts no sooner than this after its
    /// admission (room cannot be made before it exists). 0 (the default) = the plan exactly:
    /// the room is made after the piece has started. What it should be depends on the
    /// preemption plugin's settings (deploy/OPERATIONS.md).
    pub enforce_ahead_ms: u64,
}

/// The most [`PlanConfig::enforce_ahead_ms`] may be: an hour.
pub const MAX_ENFORCE_AHEAD_MS: u64 = 3_600_000;

impl PlanConfig {
    /// A plan on `queue` with the defaults: 1 s steps, 24 h ahead, no periodic optimisation,
    /// guarantees that follow the plan exactly (no enforcement ahead).
    pub fn new(queue: impl Into<String>) -> Self {
        PlanConfig {
            queue: queue.into(),
            step_ms: 1_000,
            horizon_ms: 24 * 3_600_000,
            optimize_interval_ms: 0,
            enforce_ahead_ms: 0,
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
    /// Higher is more important when a replan must give something up.
    pub priority: i32,
    /// When its window opens, engine ms; `None` = now. The expression counts from here.
    pub arrival_ms: Option<u64>,
    /// Deadline, engine ms; `None` = one horizon after the arrival.
    pub deadline_ms: Option<u64>,
    /// What it needs, times relative to the arrival.
    pub definition: Expr,
}

/// `bundles` bundles of atom `atom` (its pre-order index in the definition) held over
/// `[start_ms, end_ms)`, engine time: one piece of an allocation, as the ABI's
/// `GantryAllocation` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AtomInterval {
    /// Pre-order index of the atom.
    pub atom: u32,
    /// Start, ms.
    pub start_ms: u64,
    /// End (exclusive), ms.
    pub end_ms: u64,
    /// Bundles held throughout.
    pub bundles: u64,
}

/// Resources held from `start_ms` to `end_ms` (engine time): an allocation summed over its
/// atoms ([`pieces`]), for people, the API and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedPiece {
    /// Start, ms.
    pub start_ms: u64,
    /// End (exclusive), ms.
    pub end_ms: u64,
    /// Held throughout.
    pub resources: Resources,
}

/// Why a reservation left the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationEnd {
    /// Its deadline passed.
    Expired,
    /// A client deleted it.
    Deleted,
    /// A replan after a capacity loss gave it up.
    Replanned,
}

/// `allocation` (of a reservation whose atoms are `atoms`, in pre-order) summed into resources
/// over time: consecutive pieces, none empty, adjacent ones different.
pub fn pieces(atoms: &[Atom], allocation: &[AtomInterval]) -> Vec<PlannedPiece> {
    let mut delta = skyline::Delta::default();
    for p in allocation {
        if let Some(a) = atoms.get(p.atom as usize) {
            delta.add(p.start_ms, p.end_ms, &skyline::demand(&a.bundle, p.bundles), 1);
        }
    }
    let mut out: Vec<PlannedPiece> = Vec::new();
    for (start_ms, end_ms, d) in delta.segments() {
        let resources = skyline::resources(&d);
        match out.last_mut() {
            Some(last) if last.end_ms == start_ms && last.resources == resources => last.end_ms = end_ms,
            _ => out.push(PlannedPiece { start_ms, end_ms, resources }),
        }
    }
    out
}

/// What `allocation` holds at `ms`.
pub fn allocated_at(atoms: &[Atom], allocation: &[AtomInterval], ms: u64) -> Resources {
    let mut d = skyline::ZERO;
    for p in allocation.iter().filter(|p| p.start_ms <= ms && ms < p.end_ms) {
        if let Some(a) = atoms.get(p.atom as usize) {
            let x = skyline::demand(&a.bundle, p.bundles);
            for (s, v) in d.iter_mut().zip(x) {
                *s = s.saturating_add(v);
            }
        }
    }
    skyline::resources(&d)
}

/// An allocation stored before allocations named their atoms (resources per piece, each piece
/// one atom's, as the linked-in planner kept them), attributed to atoms: each piece goes to the
/// first atom in pre-order whose bundle divides it evenly (the same number of bundles in every
/// dimension the bundle has) and whose window, `arrival_ms` + the expression's own windows,
/// contains it; failing that, to the first atom whose window contains it (or the first atom),
/// with as many bundles as its largest dimension needs. Exact for one atom whose bundle divides
/// every piece (what the old planner wrote); a best effort for several atoms of equal bundles,
/// which cannot be told apart. Pieces of no resources are dropped.
pub fn legacy_allocation(definition: &Expr, arrival_ms: u64, pieces: &[PlannedPiece]) -> Vec<AtomInterval> {
    let atoms = definition.atoms();
    let windows = validate::atom_windows(definition);
    let inside = |i: usize, p: &PlannedPiece| {
        windows.get(i).is_none_or(|&(lo, hi)| {
            arrival_ms.saturating_add(lo) <= p.start_ms && p.end_ms <= arrival_ms.saturating_add(hi)
        })
    };
    let mut out = Vec::with_capacity(pieces.len());
    for p in pieces.iter().filter(|p| p.start_ms < p.end_ms && !p.resources.is_zero()) {
        let exact = atoms.iter().enumerate().find_map(|(i, a)| {
            let n = even_bundles(&a.bundle, &p.resources)?;
            inside(i, p).then_some((i, n))
        });
        let (atom, bundles) = exact.unwrap_or_else(|| {
            let i = (0..atoms.len()).find(|&i| inside(i, p)).unwrap_or(0);
            (i, atoms.get(i).map_or(1, |a| covering_bundles(&a.bundle, &p.resources)))
        });
        out.push(AtomInterval {
            atom: u32::try_from(atom).unwrap_or(u32::MAX),
            start_ms: p.start_ms,
            end_ms: p.end_ms,
            bundles: bundles.max(1),
        });
    }
    out.sort();
    out
}

/// `r` = n × `bundle` exactly, n ≥ 1.
fn even_bundles(bundle: &Resources, r: &Resources) -> Option<u64> {
    let dims = [
        (bundle.cpu_millis, r.cpu_millis),
        (bundle.memory_bytes, r.memory_bytes),
        (u64::from(bundle.gpus), u64::from(r.gpus)),
    ];
    let mut n = None;
    for (b, x) in dims {
        match (b, x) {
            (0, 0) => {}
            (0, _) => return None,
            (b, x) if x % b != 0 => return None,
            (b, x) => match n {
                None => n = Some(x / b),
                Some(m) if m == x / b => {}
                Some(_) => return None,
            },
        }
    }
    n.filter(|&n| n > 0)
}

/// The fewest bundles that hold `r` in every dimension the bundle has.
fn covering_bundles(bundle: &Resources, r: &Resources) -> u64 {
    [
        (bundle.cpu_millis, r.cpu_millis),
        (bundle.memory_bytes, r.memory_bytes),
        (u64::from(bundle.gpus), u64::from(r.gpus)),
    ]
    .iter()
    .filter(|(b, _)| *b > 0)
    .map(|(b, x)| x.div_ceil(*b))
    .max()
    .unwrap_or(1)
}

/// The queue path of reservation `id` under plan queue `plan_queue`.
pub fn queue_path(id: ReservationId, plan_queue: &str) -> String {
    format!("{plan_queue}.reservation_{}", id.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_sum_the_atoms_over_time() {
        let e = gantry_rdl::parse_text("all(atom(1c/1GiB, 1, 4, 1s, 4s), atom(1gpu, 1, 1, 1s, 2s))")
            .expect("rdl");
        let a = [
            AtomInterval { atom: 0, start_ms: 0, end_ms: 2_000, bundles: 2 },
            AtomInterval { atom: 1, start_ms: 1_000, end_ms: 3_000, bundles: 1 },
        ];
        let gib = 1 << 30;
        assert_eq!(
            pieces(&e.atoms(), &a),
            vec![
                PlannedPiece { start_ms: 0, end_ms: 1_000, resources: Resources::new(2_000, 2 * gib, 0) },
                PlannedPiece { start_ms: 1_000, end_ms: 2_000, resources: Resources::new(2_000, 2 * gib, 1) },
                PlannedPiece { start_ms: 2_000, end_ms: 3_000, resources: Resources::new(0, 0, 1) },
            ]
        );
        assert_eq!(allocated_at(&e.atoms(), &a, 1_500), Resources::new(2_000, 2 * gib, 1));
    }

    #[test]
    fn pieces_stored_without_atoms_are_attributed_to_atoms() {
        let gib = 1 << 30;
        let piece = |s, e, r| PlannedPiece { start_ms: s, end_ms: e, resources: r };
        // One atom: exact.
        let one = gantry_rdl::parse_text("atom(1c/2GiB, 1, 4, 10s, 40s)").expect("rdl");
        let old = [piece(90_000, 100_000, Resources::new(4_000, 8 * gib, 0))];
        assert_eq!(
            legacy_allocation(&one, 0, &old),
            vec![AtomInterval { atom: 0, start_ms: 90_000, end_ms: 100_000, bundles: 4 }]
        );
        // An order of two atoms of different bundles: each piece divides one of them.
        let two = gantry_rdl::parse_text("order(atom(1c/1GiB, 1, 2, 1s, 2s), atom(2c/1GiB, 1, 1, 1s, 1s))")
            .expect("rdl");
        let old = [
            piece(5_000, 6_000, Resources::new(2_000, 2 * gib, 0)),
            piece(6_000, 7_000, Resources::new(2_000, gib, 0)),
        ];
        assert_eq!(
            legacy_allocation(&two, 1_000, &old),
            vec![
                AtomInterval { atom: 0, start_ms: 5_000, end_ms: 6_000, bundles: 2 },
                AtomInterval { atom: 1, start_ms: 6_000, end_ms: 7_000, bundles: 1 },
            ]
        );
        // Nothing divides it: the first atom whose window holds it, enough bundles to cover it.
        let odd = [piece(0, 1_000, Resources::new(2_500, gib, 0))];
        assert_eq!(
            legacy_allocation(&one, 0, &odd),
            vec![AtomInterval { atom: 0, start_ms: 0, end_ms: 1_000, bundles: 3 }]
        );
    }
}
