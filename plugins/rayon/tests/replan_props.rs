//! The replanner over random plans and random capacity losses: afterwards nothing is
//! overcommitted, unaffected reservations keep their exact pieces, kept ones are unchanged,
//! moved ones satisfy their expression (windows, gangs between g and h, lease, work, order and
//! any) and the plan holds exactly what their new allocations say, and gantry rejects no more
//! than YARN's SimpleCapacityReplanner on the same loss. Prints counts over the run (see them
//! with `--nocapture`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use gantry_rayon::agents::{Agent, Allocation, admit, count_atoms};
use gantry_rayon::plan::{DIMS, Piece, Plan, Vector, vector};
use gantry_rayon::replan::{ReservationInfo, affected, replan, replan_yarn_simple};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const STEP: u64 = 1000;

fn res(c: u64, m: u64, g: u32) -> GantryResources {
    GantryResources { cpu_millis: c, memory_bytes: m, gpus: g, reserved: 0 }
}

fn atom() -> impl Strategy<Value = Expr> {
    ((1u64..4, 0u64..4, prop::bool::weighted(0.1)), 1u32..3, 0u32..4, 0u64..3000, 1u64..30_000).prop_map(
        |((c, m, gpu), g, extra, lease, work)| {
            Expr::Atom(Atom {
                bundle: res(c, m, u32::from(gpu)),
                min_parallel: g,
                max_parallel: g * (1 + extra),
                min_lease_ms: lease,
                work: work.div_ceil(u64::from(g)) * u64::from(g),
            })
        },
    )
}

fn expr() -> impl Strategy<Value = Expr> {
    let tree = atom().prop_recursive(2, 6, 3, |inner| {
        prop_oneof![
            (0u64..40_000, 2000u64..40_000, inner.clone()).prop_map(|(s, l, e)| {
                Expr::Window(Window { start_ms: s, end_ms: s + l, inner: Box::new(e) })
            }),
            prop::collection::vec(inner.clone(), 1..3).prop_map(Expr::Order),
            prop::collection::vec(inner.clone(), 1..3).prop_map(Expr::All),
            prop::collection::vec(inner, 1..3).prop_map(Expr::Any),
        ]
    });
    // Most reservations have a deadline window with room to move.
    (0u64..30_000, 5000u64..50_000, tree, prop::bool::weighted(0.8)).prop_map(|(s, l, e, w)| {
        if w { Expr::Window(Window { start_ms: s, end_ms: s + l, inner: Box::new(e) }) } else { e }
    })
}

fn placed(e: &Expr, alloc: &Allocation, base: usize) -> bool {
    (base..base + count_atoms(e)).any(|i| alloc.atoms.get(i).is_some_and(|v| !v.is_empty()))
}

/// Checks that `alloc` satisfies `e` (first atom `base`) within `[lo, hi)` ms; returns the span
/// of what was placed.
fn satisfies(
    e: &Expr,
    alloc: &Allocation,
    lo: u64,
    hi: u64,
    base: usize,
) -> Result<Option<(u64, u64)>, String> {
    match e {
        Expr::Atom(a) => {
            let iv = alloc.atoms.get(base).ok_or(format!("atom {base} missing"))?;
            if a.work == 0 {
                return Ok(None);
            }
            let g = u64::from(a.min_parallel);
            let lease = a.min_lease_ms.div_ceil(STEP).max(1) * STEP;
            for x in iv {
                if x.start_ms < lo || x.end_ms > hi || x.start_ms >= x.end_ms {
                    return Err(format!("atom {base}: {x:?} outside [{lo}, {hi})"));
                }
                if x.bundles < g || x.bundles % g != 0 || x.bundles > u64::from(a.max_parallel) {
                    return Err(format!("atom {base}: {x:?} breaks g {g}, h {}", a.max_parallel));
                }
                if x.end_ms - x.start_ms < lease {
                    return Err(format!("atom {base}: {x:?} shorter than the lease"));
                }
            }
            if alloc.work_ms(base) < u128::from(a.work) {
                return Err(format!("atom {base}: {} bundle-ms for work {}", alloc.work_ms(base), a.work));
            }
            Ok(alloc.span_ms(base))
        }
        Expr::Window(w) => satisfies(&w.inner, alloc, lo.max(w.start_ms), hi.min(w.end_ms), base),
        Expr::All(parts) | Expr::Order(parts) => {
            let ordered = matches!(e, Expr::Order(_));
            let mut span: Option<(u64, u64)> = None;
            let mut b = base;
            for p in parts {
                if let Some((s, t)) = satisfies(p, alloc, lo, hi, b)? {
                    if ordered && span.is_some_and(|(_, end)| end > s) {
                        return Err(format!("order: stage at atom {b} starts before the previous ends"));
                    }
                    span = Some(span.map_or((s, t), |(a, c)| (a.min(s), c.max(t))));
                }
                b += count_atoms(p);
            }
            Ok(span)
        }
        Expr::Any(alts) => {
            let mut b = base;
            let mut found = None;
            for p in alts {
                if placed(p, alloc, b) {
                    if found.is_some() {
                        return Err(format!("any at atom {base}: two alternatives placed"));
                    }
                    found = Some(satisfies(p, alloc, lo, hi, b)?);
                }
                b += count_atoms(p);
            }
            // An alternative of no work places nothing and may be the one taken.
            Ok(found.flatten())
        }
    }
}

/// Per step, what `alloc` holds of `e`'s atoms.
fn demand_of(e: &Expr, alloc: &Allocation, steps: usize) -> Vec<Vector> {
    let list = e.atoms();
    let mut out = vec![[0i64; DIMS]; steps];
    for (a, ivs) in list.iter().zip(&alloc.atoms) {
        let b = vector(&a.bundle);
        for x in ivs {
            let (s, t) = ((x.start_ms / STEP) as usize, (x.end_ms / STEP) as usize);
            for u in out.iter_mut().take(t).skip(s) {
                for (v, w) in u.iter_mut().zip(&b) {
                    *v += w * x.bundles as i64;
                }
            }
        }
    }
    out
}

fn pieces_demand(pieces: &[Piece], steps: usize) -> Vec<Vector> {
    let mut out = vec![[0i64; DIMS]; steps];
    for p in pieces {
        for u in out.iter_mut().take(p.end).skip(p.start) {
            for (x, y) in u.iter_mut().zip(&p.demand) {
                *x += y;
            }
        }
    }
    out
}

#[derive(Default, Debug)]
struct Counts {
    cases: u64,
    overcommitted: u64,
    affected: u64,
    gantry_rejected: u64,
    yarn_rejected: u64,
    gantry_moved: u64,
    gantry_fewer: u64,
    gantry_none_yarn_some: u64,
    strategies: BTreeMap<&'static str, u64>,
}

type Case = (usize, (u64, u64, u32), Vec<(usize, usize, u64, u64)>, Vec<(Expr, i64, bool)>, bool);

fn run_case(case: Case, counts: &RefCell<Counts>) -> Result<(), TestCaseError> {
    let (steps, cap, losses, exprs, gree) = case;
    let agent = if gree { Agent::Gree } else { Agent::GreeL };
    let mut plan = Plan::new(STEP, steps, &res(cap.0, cap.1, cap.2)).expect("plan");
    let mut infos = Vec::new();
    let mut allocs = HashMap::new();
    for (k, (e, priority, movable)) in exprs.into_iter().enumerate() {
        let id = 100 + k as u64;
        if let Ok(a) = admit(&mut plan, &e, agent, id) {
            let mut info = ReservationInfo::new(id, e, priority, k as u64);
            info.movable = movable;
            infos.push(info);
            allocs.insert(id, a);
        }
    }
    for (s, len, dc, dm) in losses {
        let s = s % steps;
        let e = (s + len).min(steps);
        let now = plan.capacity_at(s).expect("step");
        let lower =
            res((now[0] as u64).saturating_sub(dc), (now[1] as u64).saturating_sub(dm), now[2] as u32);
        plan.set_capacity(s, e, &lower).expect("range");
    }
    counts.borrow_mut().cases += 1;
    let before = plan.clone();
    let hit = affected(&plan);
    let mut gantry = plan.clone();
    let r = replan(&mut gantry, &infos, agent);
    prop_assert_eq!(&r.affected, &hit);
    if plan.overcommitted().is_none() {
        prop_assert!(hit.is_empty());
        prop_assert_eq!(r.changed(), 0);
        return Ok(());
    }
    let mut yarn = plan.clone();
    let y = replan_yarn_simple(&mut yarn, &infos);

    // Nothing stays overcommitted.
    prop_assert_eq!(gantry.overcommitted(), None, "{:?}", r);
    prop_assert_eq!(r.overcommitted, None);
    prop_assert_eq!(yarn.overcommitted(), None);
    prop_assert!(y.moved.is_empty());

    // The report partitions the reservations; only affected ones changed.
    let all: BTreeSet<u64> = before.reservation_ids().collect();
    let kept: BTreeSet<u64> = r.kept.iter().copied().collect();
    let moved: BTreeSet<u64> = r.moved.iter().map(|m| m.id).collect();
    let rejected: BTreeSet<u64> = r.rejected.iter().copied().collect();
    prop_assert_eq!(kept.len() + moved.len() + rejected.len(), all.len());
    prop_assert_eq!(&kept | &(&moved | &rejected), all.clone());
    let hit_set: BTreeSet<u64> = hit.iter().copied().collect();
    prop_assert!(moved.is_subset(&hit_set) && rejected.is_subset(&hit_set));
    for &id in &all {
        if !hit_set.contains(&id) {
            prop_assert_eq!(gantry.pieces(id), before.pieces(id), "unaffected {} changed", id);
        }
    }
    for &id in &kept {
        prop_assert_eq!(gantry.pieces(id), before.pieces(id), "kept {} changed", id);
    }
    for &id in &rejected {
        prop_assert!(gantry.pieces(id).is_none());
    }
    let by_id: HashMap<u64, &ReservationInfo> = infos.iter().map(|i| (i.id, i)).collect();
    for m in &r.moved {
        let info = by_id[&m.id];
        prop_assert!(info.movable, "unmovable {} moved", m.id);
        prop_assert_eq!(m.allocation.atoms.len(), count_atoms(&info.expr));
        if let Err(msg) = satisfies(&info.expr, &m.allocation, 0, u64::MAX, 0) {
            prop_assert!(false, "moved {}: {}\n{:?}\n{:?}", m.id, msg, info.expr, m.allocation);
        }
        let held = pieces_demand(gantry.pieces(m.id).unwrap_or(&[]), steps);
        prop_assert_eq!(demand_of(&info.expr, &m.allocation, steps), held, "moved {} allocation", m.id);
    }
    // The original allocations of the kept ones were valid when admitted; still the same pieces.
    for &id in &kept {
        prop_assert!(allocs.contains_key(&id));
    }

    // No more rejections than YARN's replanner.
    prop_assert!(
        r.rejected.len() <= y.rejected.len(),
        "gantry rejects {:?}, YARN {:?}",
        r.rejected,
        y.rejected
    );

    let mut c = counts.borrow_mut();
    c.overcommitted += 1;
    c.affected += hit.len() as u64;
    c.gantry_rejected += r.rejected.len() as u64;
    c.yarn_rejected += y.rejected.len() as u64;
    c.gantry_moved += r.moved.len() as u64;
    c.gantry_fewer += u64::from(r.rejected.len() < y.rejected.len());
    c.gantry_none_yarn_some += u64::from(r.rejected.is_empty() && !y.rejected.is_empty());
    *c.strategies.entry(r.strategy).or_default() += 1;
    Ok(())
}

#[test]
fn replanning_clears_overcommitment_and_beats_yarn() {
    let cases = std::env::var("REPLAN_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let strategy = (
        10usize..60,
        (4u64..24, 4u64..24, 0u32..3),
        prop::collection::vec((0usize..60, 1usize..30, 0u64..12, 0u64..8), 1..3),
        prop::collection::vec((expr(), 0i64..4, prop::bool::weighted(0.9)), 1..14),
        prop::bool::ANY,
    );
    let counts = RefCell::new(Counts::default());
    let result = runner.run(&strategy, |case| run_case(case, &counts));
    let c = counts.into_inner();
    println!("replan property test: {c:#?}");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(c.overcommitted > 0, "no case had an overcommitment");
}
