//! What a replan may change of an accepted reservation, and what it must place again.
//!
//! The host refuses an answer that changes an allocation before now (`past_changed`) or leaves a
//! run of an atom shorter than its lease (`short_lease`). So, per atom (pieces are per atom, so
//! this is exact):
//!
//! - what lies before `now` is **kept**, the piece running at `now` cut there;
//! - a run that began less than a lease ago is **committed** until its lease is over (rounded up
//!   to a plan step, never past the run's own end): cutting it at `now` would leave it short;
//! - the atom's work left is its `w` less the bundle-milliseconds kept (past and committed), to
//!   place from the end of the committed part on (from `now` without one).
//!
//! The expression to re-place ([`Split::expr`], plan time) is the definition reduced to the
//! work left: complete atoms dropped, an `order`'s later parts starting after everything kept of
//! the earlier ones, an `any` narrowed to the alternative it has begun. The committed parts go
//! in front of it as rigid atoms (`g = h` = their bundles, a lease and a window of exactly their
//! steps), so a move keeps them in place and all of it fits, or none; their allocation in the
//! answer is the old pieces themselves. A reservation that has not started is its whole
//! definition with windows from now.

use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::{GantryAllocation, GantryResources};

use crate::agents::count_atoms;
use crate::plugin::mirror::{Mirror, canonical};

/// A reservation prepared for a replan.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Pieces that stay as they are, engine time: the past (cut at now) and committed runs.
    pub kept: Vec<GantryAllocation>,
    /// What to place again, plan time.
    pub expr: Expr,
    /// Per atom of `expr` in pre-order: the definition's atom it stands for, or `None` for a
    /// committed part (whose allocation is in `kept`) or a placeholder.
    pub map: Vec<Option<u32>>,
}

/// Bundle-milliseconds of `pieces`.
fn work(pieces: &[GantryAllocation]) -> u128 {
    pieces.iter().map(|p| u128::from(p.end_ms.saturating_sub(p.start_ms)) * u128::from(p.bundles)).sum()
}

/// Per atom: the pieces that stay, their end, and the work left.
struct AtomState {
    kept: Vec<GantryAllocation>,
    /// Committed pieces (from now on), to become rigid atoms.
    committed: Vec<GantryAllocation>,
    /// When the kept pieces end (0 when none).
    kept_end: u64,
    /// Whether anything of it lies before now.
    began: bool,
    /// From when its work left may be placed.
    from: u64,
    /// Bundle-ms left.
    left: u64,
}

fn atom_state(atom: &Atom, pieces: &[GantryAllocation], now: u64, mirror: &Mirror) -> AtomState {
    // The run holding `now`: the piece across it and those joined to it before and after.
    let across = pieces.iter().position(|p| p.start_ms < now && now < p.end_ms);
    let cut = match across {
        None => now,
        Some(k) => {
            let mut first = k;
            while first > 0 && pieces[first - 1].end_ms == pieces[first].start_ms {
                first -= 1;
            }
            let mut last = k;
            while last + 1 < pieces.len() && pieces[last + 1].start_ms == pieces[last].end_ms {
                last += 1;
            }
            let lease_over = pieces[first].start_ms.saturating_add(atom.min_lease_ms);
            if lease_over > now { mirror.ceil_ms(lease_over).min(pieces[last].end_ms).max(now) } else { now }
        }
    };
    let clip = |p: &GantryAllocation, lo: u64, hi: u64| {
        let (s, e) = (p.start_ms.max(lo), p.end_ms.min(hi));
        (s < e).then_some(GantryAllocation { start_ms: s, end_ms: e, ..*p })
    };
    let kept: Vec<GantryAllocation> = pieces.iter().filter_map(|p| clip(p, 0, cut)).collect();
    let committed: Vec<GantryAllocation> = pieces.iter().filter_map(|p| clip(p, now, cut)).collect();
    let done = work(&kept);
    AtomState {
        kept_end: kept.iter().map(|p| p.end_ms).max().unwrap_or(0),
        began: pieces.iter().any(|p| p.start_ms < now),
        committed,
        kept,
        from: cut,
        left: u64::try_from(u128::from(atom.work).saturating_sub(done)).unwrap_or(u64::MAX),
    }
}

/// Builds the rest of `e` (atoms from pre-order index `base`), engine time; pushes the
/// definition's atom index of each atom it keeps onto `map`.
fn rest(
    e: &Expr,
    base: usize,
    floor: u64,
    deadline: u64,
    st: &[AtomState],
    map: &mut Vec<Option<u32>>,
) -> Option<Expr> {
    match e {
        Expr::Atom(a) => {
            let s = &st[base];
            if s.left == 0 {
                return None;
            }
            map.push(Some(base as u32));
            Some(Expr::Window(Window {
                start_ms: floor.max(s.from),
                end_ms: deadline,
                inner: Box::new(Expr::Atom(Atom { work: s.left, ..*a })),
            }))
        }
        Expr::Window(w) => rest(&w.inner, base, floor, deadline, st, map).map(|inner| {
            Expr::Window(Window { start_ms: w.start_ms, end_ms: w.end_ms, inner: Box::new(inner) })
        }),
        Expr::All(parts) | Expr::Order(parts) => {
            let order = matches!(e, Expr::Order(_));
            let mut floor = floor;
            let mut b = base;
            let mut out = Vec::new();
            for p in parts {
                let n = count_atoms(p);
                if let Some(x) = rest(p, b, floor, deadline, st, map) {
                    out.push(x);
                }
                if order {
                    // What follows starts after everything kept of this part.
                    floor = floor.max(st[b..b + n].iter().map(|s| s.kept_end).max().unwrap_or(0));
                }
                b += n;
            }
            match (out.is_empty(), order) {
                (true, _) => None,
                (false, true) => Some(Expr::Order(out)),
                (false, false) => Some(Expr::All(out)),
            }
        }
        Expr::Any(parts) => {
            let mut bases = Vec::with_capacity(parts.len());
            let mut b = base;
            for p in parts {
                bases.push(b);
                b += count_atoms(p);
            }
            let began = |k: usize| st[bases[k]..bases[k] + count_atoms(&parts[k])].iter().any(|s| s.began);
            if let Some(k) = (0..parts.len()).find(|&k| began(k)) {
                // The alternative it has begun is the one it runs.
                return rest(&parts[k], bases[k], floor, deadline, st, map);
            }
            let mark = map.len();
            let mut out = Vec::new();
            for (p, &b) in parts.iter().zip(&bases) {
                match rest(p, b, floor, deadline, st, map) {
                    Some(x) => out.push(x),
                    None => {
                        // An alternative with nothing left: the `any` is complete.
                        map.truncate(mark);
                        return None;
                    }
                }
            }
            Some(Expr::Any(out))
        }
    }
}

/// Prepares reservation `abs` (its definition, engine time) holding `pieces` (canonical) for a
/// replan at `now` in `mirror`'s plan time.
pub fn split(abs: &Expr, deadline: u64, pieces: &[GantryAllocation], now: u64, mirror: &Mirror) -> Split {
    let atoms = abs.atoms();
    let started = pieces.iter().any(|p| p.start_ms < now);
    if !started {
        return Split {
            kept: Vec::new(),
            expr: mirror.plan_expr(abs, now),
            map: (0..atoms.len() as u32).map(Some).collect(),
        };
    }
    let st: Vec<AtomState> = atoms
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mine: Vec<GantryAllocation> =
                pieces.iter().filter(|p| p.atom as usize == i).copied().collect();
            atom_state(a, &mine, now, mirror)
        })
        .collect();
    let mut parts = Vec::new();
    let mut map = Vec::new();
    let origin = mirror.origin_ms();
    for (i, s) in st.iter().enumerate() {
        for c in &s.committed {
            // Rigid: exactly its steps, its bundles all along (the first one from the current step).
            let (lo, hi) = (mirror.floor_ms(c.start_ms), mirror.ceil_ms(c.end_ms));
            let (Ok(b), true) = (u32::try_from(c.bundles), hi > lo) else { continue };
            let len = hi - lo;
            parts.push(Expr::Window(Window {
                start_ms: lo - origin,
                end_ms: hi - origin,
                inner: Box::new(Expr::Atom(Atom {
                    bundle: atoms[i].bundle,
                    min_parallel: b,
                    max_parallel: b,
                    min_lease_ms: len,
                    work: len.saturating_mul(u64::from(b)),
                })),
            }));
            map.push(None);
        }
    }
    let mut rest_map = Vec::new();
    if let Some(r) = rest(abs, 0, now, deadline, &st, &mut rest_map) {
        parts.push(mirror.plan_expr(&r, now));
        map.extend(rest_map);
    }
    let expr = match parts.len() {
        // Nothing left to place: a placeholder without work, so a move drops what is planned
        // after the kept pieces (excess) and keeps the rest.
        0 => {
            map.push(None);
            Expr::Atom(Atom {
                bundle: atoms.first().map_or(GantryResources::default(), |a| a.bundle),
                min_parallel: 1,
                max_parallel: 1,
                min_lease_ms: 1,
                work: 0,
            })
        }
        1 => parts.pop().unwrap_or_else(|| unreachable!("one part")),
        _ => Expr::All(parts),
    };
    Split { kept: canonical(st.into_iter().flat_map(|s| s.kept)), expr, map }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_sdk::abi::GantryResources;

    const MIN: u64 = 60_000;

    fn cpu() -> GantryResources {
        GantryResources { cpu_millis: 1000, ..Default::default() }
    }

    fn atom(g: u32, h: u32, lease: u64, work: u64) -> Expr {
        Expr::Atom(Atom { bundle: cpu(), min_parallel: g, max_parallel: h, min_lease_ms: lease, work })
    }

    fn piece(atom: u32, s: u64, e: u64, b: u64) -> GantryAllocation {
        GantryAllocation { reservation: 0, atom, start_ms: s, end_ms: e, bundles: b }
    }

    fn mirror() -> Mirror {
        Mirror::new(0, 1000, 24 * 60 * MIN, GantryResources { cpu_millis: 100_000, ..Default::default() })
            .expect("plan")
    }

    fn window(s: u64, e: u64, inner: Expr) -> Expr {
        Expr::Window(Window { start_ms: s, end_ms: e, inner: Box::new(inner) })
    }

    #[test]
    fn not_started_is_the_whole_definition() {
        let m = mirror();
        let abs = window(0, 60 * MIN, atom(1, 4, 0, 40 * MIN));
        let s = split(&abs, 60 * MIN, &[piece(0, 30 * MIN, 40 * MIN, 4)], 10 * MIN, &m);
        assert!(s.kept.is_empty());
        assert_eq!(s.map, vec![Some(0)]);
        assert_eq!(s.expr, m.plan_expr(&abs, 10 * MIN));
    }

    #[test]
    fn running_atom_is_cut_at_now_and_credited_exactly() {
        let m = mirror();
        // 4 bundles for 20 min of 40 min of work; at 10 min, 10 min are done.
        let abs = window(0, 60 * MIN, atom(1, 4, 0, 80 * MIN));
        let s = split(&abs, 60 * MIN, &[piece(0, 0, 20 * MIN, 4)], 10 * MIN, &m);
        assert_eq!(s.kept, vec![piece(0, 0, 10 * MIN, 4)]);
        assert_eq!(s.map, vec![Some(0)]);
        let want =
            m.plan_expr(&window(0, 60 * MIN, window(10 * MIN, 60 * MIN, atom(1, 4, 0, 40 * MIN))), 10 * MIN);
        assert_eq!(s.expr, want);
    }

    #[test]
    fn a_young_run_is_committed_until_its_lease_is_over() {
        let m = mirror();
        // Lease 30 min; the run began at 5 min; at 10 min it must go on until 35 min.
        let abs = window(0, 120 * MIN, atom(2, 2, 30 * MIN, 120 * MIN));
        let s = split(&abs, 120 * MIN, &[piece(0, 5 * MIN, 65 * MIN, 2)], 10 * MIN, &m);
        assert_eq!(s.kept, vec![piece(0, 5 * MIN, 35 * MIN, 2)]);
        // A rigid committed part, then the rest: 120 − 60 bundle-min left, from 35 min.
        assert_eq!(s.map, vec![None, Some(0)]);
        let Expr::All(parts) = &s.expr else { panic!("all: {:?}", s.expr) };
        assert_eq!(
            parts[0],
            window(10 * MIN, 35 * MIN, atom(2, 2, 25 * MIN, 50 * MIN)),
            "exactly the committed steps, in plan time"
        );
        let rest = window(0, 120 * MIN, window(35 * MIN, 120 * MIN, atom(2, 2, 30 * MIN, 60 * MIN)));
        assert_eq!(parts[1], m.plan_expr(&rest, 10 * MIN));
    }

    #[test]
    fn order_and_any_follow_what_has_begun() {
        let m = mirror();
        // order(any(A, B), C): B ran and is done; C has not started; at 30 min.
        let abs = window(
            0,
            120 * MIN,
            Expr::Order(vec![
                Expr::Any(vec![atom(1, 1, 0, 10 * MIN), atom(1, 2, 0, 20 * MIN)]),
                atom(1, 1, 0, 10 * MIN),
            ]),
        );
        let pieces = [piece(1, 0, 10 * MIN, 2), piece(2, 50 * MIN, 60 * MIN, 1)];
        let s = split(&abs, 120 * MIN, &pieces, 30 * MIN, &m);
        assert_eq!(s.kept, vec![piece(1, 0, 10 * MIN, 2)]);
        assert_eq!(s.map, vec![Some(2)]);
        let rest =
            window(0, 120 * MIN, Expr::Order(vec![window(30 * MIN, 120 * MIN, atom(1, 1, 0, 10 * MIN))]));
        assert_eq!(s.expr, m.plan_expr(&rest, 30 * MIN));
    }

    #[test]
    fn complete_reservation_gets_a_placeholder() {
        let m = mirror();
        let abs = window(0, 120 * MIN, atom(1, 1, 0, 10 * MIN));
        // Done by 10 min, with an excess piece planned later.
        let s = split(
            &abs,
            120 * MIN,
            &[piece(0, 0, 10 * MIN, 1), piece(0, 40 * MIN, 41 * MIN, 1)],
            20 * MIN,
            &m,
        );
        assert_eq!(s.kept, vec![piece(0, 0, 10 * MIN, 1)]);
        assert_eq!(s.map, vec![None]);
        assert!(matches!(s.expr, Expr::Atom(Atom { work: 0, .. })));
    }
}
