//! Properties of GREE and GREE-L over random plans and random expressions: every accepted
//! allocation lies inside its windows, runs whole gangs between g and h, holds the lease, covers
//! its work, and follows order / all / any; the plan never exceeds capacity and matches the
//! allocations step by step; a rejection changes nothing; removing everything empties the plan.

#![allow(clippy::needless_range_loop)] // the references index steps and dimensions plainly

use gantry_rayon::agents::{Agent, Allocation, admit, count_atoms};
use gantry_rayon::plan::{DIMS, Plan, Vector, vector};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;
use proptest::prelude::*;

const STEP: u64 = 1000;

fn res(c: u64, m: u64, g: u32) -> GantryResources {
    GantryResources { cpu_millis: c, memory_bytes: m, gpus: g, reserved: 0 }
}

fn atom() -> impl Strategy<Value = Expr> {
    ((1u64..5, 0u64..5, prop::bool::weighted(0.1)), 1u32..4, 0u32..4, 0u64..4500, 1u64..40_000).prop_map(
        |((c, m, gpu), g, extra, lease, work)| {
            Expr::Atom(Atom {
                bundle: res(c, m, u32::from(gpu)),
                min_parallel: g,
                max_parallel: g * (1 + extra / 2) + extra % 2,
                min_lease_ms: lease,
                work,
            })
        },
    )
}

fn expr() -> impl Strategy<Value = Expr> {
    atom().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (0u64..50_000, 500u64..60_000, inner.clone()).prop_map(|(s, l, e)| {
                Expr::Window(Window { start_ms: s, end_ms: s + l, inner: Box::new(e) })
            }),
            prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::Order),
            prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::All),
            prop::collection::vec(inner, 1..4).prop_map(Expr::Any),
        ]
    })
}

fn taken(e: &Expr, alloc: &Allocation, base: usize) -> bool {
    (base..base + count_atoms(e)).any(|i| !alloc.atoms[i].is_empty())
}

/// Checks `e` (first atom `base`), which must run within `[lo, hi)` ms if `must`; returns the
/// span `[start, end)` ms of what it placed.
fn check(
    e: &Expr,
    alloc: &Allocation,
    lo: u64,
    hi: u64,
    base: usize,
    must: bool,
) -> Result<Option<(u64, u64)>, String> {
    match e {
        Expr::Atom(a) => {
            let iv = &alloc.atoms[base];
            if iv.is_empty() {
                return if must { Err(format!("atom {base} not placed")) } else { Ok(None) };
            }
            if !must {
                return Err(format!("atom {base} placed in an alternative not taken"));
            }
            let g = u64::from(a.min_parallel);
            let lease = a.min_lease_ms.div_ceil(STEP).max(1) * STEP;
            for (k, x) in iv.iter().enumerate() {
                if x.start_ms < lo || x.end_ms > hi || x.start_ms >= x.end_ms {
                    return Err(format!("atom {base}: {x:?} outside [{lo}, {hi})"));
                }
                if x.bundles % g != 0 || x.bundles < g || x.bundles > u64::from(a.max_parallel) {
                    return Err(format!("atom {base}: {x:?} breaks g {g} h {}", a.max_parallel));
                }
                if x.end_ms - x.start_ms < lease {
                    return Err(format!("atom {base}: {x:?} shorter than the lease {lease}"));
                }
                if k > 0 && iv[k - 1].end_ms > x.start_ms {
                    return Err(format!("atom {base}: intervals overlap or are out of order"));
                }
                if k > 0 && iv[k - 1].end_ms == x.start_ms && iv[k - 1].bundles == x.bundles {
                    return Err(format!("atom {base}: adjacent equal intervals not merged"));
                }
            }
            // Whole tasks (`w` a whole number of leases of at least a step): every piece runs
            // whole tasks on its own, together at least the atom's, with less than a task and a
            // step per gang of each piece over.
            if a.min_lease_ms >= STEP && a.work % (g * a.min_lease_ms) == 0 {
                let n = a.work / (g * a.min_lease_ms);
                let runs: u64 =
                    iv.iter().map(|x| x.bundles / g * ((x.end_ms - x.start_ms) / a.min_lease_ms)).sum();
                if runs < n {
                    return Err(format!("atom {base}: {iv:?} runs {runs} whole tasks of {n}"));
                }
                let total = alloc.work_ms(base);
                let slack: u128 =
                    iv.iter().map(|x| u128::from(x.bundles) * u128::from(a.min_lease_ms + STEP)).sum();
                if total > u128::from(a.work) + slack {
                    return Err(format!("atom {base}: {total} bundle-ms for {n} tasks (work {})", a.work));
                }
                return Ok(alloc.span_ms(base));
            }
            let total = alloc.work_ms(base);
            let w = u128::from(a.work);
            let l_steps = u128::from(lease / STEP);
            let bound = u128::from(g * STEP) * if l_steps <= 1 { 1 } else { 2 * l_steps };
            if total < w || total - w >= bound {
                return Err(format!("atom {base}: {total} bundle-ms for work {w} (bound {bound})"));
            }
            Ok(alloc.span_ms(base))
        }
        Expr::Window(w) => check(&w.inner, alloc, lo.max(w.start_ms), hi.min(w.end_ms), base, must),
        Expr::All(parts) => {
            let mut span: Option<(u64, u64)> = None;
            let mut b = base;
            for p in parts {
                if let Some((s, e)) = check(p, alloc, lo, hi, b, must)? {
                    span = Some(span.map_or((s, e), |(a, c)| (a.min(s), c.max(e))));
                }
                b += count_atoms(p);
            }
            Ok(span)
        }
        Expr::Order(stages) => {
            let mut span: Option<(u64, u64)> = None;
            let mut b = base;
            for p in stages {
                if let Some((s, e)) = check(p, alloc, lo, hi, b, must)? {
                    if let Some((_, prev_end)) = span {
                        if prev_end > s {
                            return Err(format!(
                                "order: a stage at atom {b} starts before the previous ends"
                            ));
                        }
                    }
                    span = Some(span.map_or((s, e), |(a, _)| (a, e)));
                }
                b += count_atoms(p);
            }
            Ok(span)
        }
        Expr::Any(alts) => {
            let mut b = base;
            for (i, p) in alts.iter().enumerate() {
                if must && taken(p, alloc, b) {
                    let span = check(p, alloc, lo, hi, b, true)?;
                    b += count_atoms(p);
                    // The rest must be empty.
                    for q in &alts[i + 1..] {
                        check(q, alloc, lo, hi, b, false)?;
                        b += count_atoms(q);
                    }
                    return Ok(span);
                }
                check(p, alloc, lo, hi, b, false)?;
                b += count_atoms(p);
            }
            if must { Err(format!("any at atom {base}: no alternative taken")) } else { Ok(None) }
        }
    }
}

fn snapshot(plan: &Plan) -> Vec<Vector> {
    (0..plan.steps()).map(|i| plan.free_at(i).expect("step")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    #[test]
    fn admissions_keep_every_promise(
        steps in 10usize..70,
        cap in (4u64..24, 4u64..24, 0u32..3),
        loss in (0usize..70, 0usize..30, 0u64..6),
        exprs in prop::collection::vec((expr(), prop::bool::ANY), 1..12),
    ) {
        let mut plan = Plan::new(STEP, steps, &res(cap.0, cap.1, cap.2)).expect("plan");
        // Some nodes lost for a while.
        let (ls, ll, lc) = loss;
        let (ls, le) = (ls.min(steps - 1), (ls + ll).min(steps));
        if ls < le {
            plan.set_capacity(ls, le, &res(cap.0.saturating_sub(lc), cap.1, cap.2)).expect("range");
        }
        let capacity: Vec<Vector> = (0..steps).map(|i| plan.capacity_at(i).expect("step")).collect();
        let mut expected = vec![[0i64; DIMS]; steps];
        let mut accepted = 0u64;
        for (id, (e, gree)) in exprs.iter().enumerate() {
            let id = id as u64;
            let agent = if *gree { Agent::Gree } else { Agent::GreeL };
            let before = plan.clone();
            let free_before = snapshot(&plan);
            match admit(&mut plan, e, agent, id) {
                Ok(alloc) => {
                    accepted += 1;
                    prop_assert_eq!(alloc.atoms.len(), count_atoms(e));
                    if let Err(m) = check(e, &alloc, 0, u64::MAX, 0, true) {
                        prop_assert!(false, "{:?} {}: {}\n{:?}\n{:?}", agent, id, m, e, alloc);
                    }
                    // A top-level any took the first alternative that fits.
                    if let Expr::Any(alts) = e {
                        let mut b = 0;
                        for alt in alts {
                            if taken(alt, &alloc, b) { break; }
                            let mut probe = before.clone();
                            prop_assert!(admit(&mut probe, alt, agent, id).is_err(), "an earlier alternative fits");
                            b += count_atoms(alt);
                        }
                    }
                    let list = e.atoms();
                    for (a, ivs) in list.iter().zip(&alloc.atoms) {
                        let b = vector(&a.bundle);
                        for x in ivs {
                            let (s, t) = ((x.start_ms / STEP) as usize, (x.end_ms / STEP) as usize);
                            prop_assert_eq!(x.start_ms % STEP, 0);
                            for u in &mut expected[s..t] {
                                for d in 0..DIMS { u[d] += b[d] * x.bundles as i64; }
                            }
                        }
                    }
                    prop_assert!(plan.pieces(id).is_some());
                }
                Err(r) => {
                    prop_assert!(!r.reason.is_empty());
                    prop_assert_eq!(snapshot(&plan), free_before, "a rejection changed the plan");
                    prop_assert!(plan.pieces(id).is_none());
                }
            }
            for i in 0..steps {
                let used = plan.used_at(i).expect("step");
                prop_assert_eq!(used, expected[i], "step {}", i);
                for d in 0..DIMS {
                    prop_assert!(used[d] <= capacity[i][d], "over capacity at step {}", i);
                }
            }
        }
        prop_assert_eq!(plan.len() as u64, accepted);
        let ids: Vec<u64> = plan.reservation_ids().collect();
        for id in ids { plan.remove(id); }
        for i in 0..steps {
            prop_assert_eq!(plan.used_at(i), Some([0; DIMS]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    /// An `order` of malleable stages (g = 1, lease at most a step) whose stages fit one after
    /// another at their full width in its window is accepted by both agents on an empty plan: a
    /// later stage never takes the time an earlier one needs.
    #[test]
    fn an_order_that_fits_back_to_back_is_accepted(
        cap in (4u64..24, 4u64..24),
        stages in prop::collection::vec((1u64..5, 0u64..5, 1u32..7, 0u64..=STEP, 1u64..20_000), 1..5),
        start in 0usize..10,
        extra in 0usize..5,
    ) {
        let mut least = 0usize;
        let mut parts = Vec::new();
        for &(c, m, h, lease, work) in &stages {
            let fit = (cap.0 / c).min(cap.1.checked_div(m).unwrap_or(u64::MAX));
            let gangs = u64::from(h).min(fit).max(1);
            least += work.div_ceil(STEP).div_ceil(gangs) as usize;
            parts.push(Expr::Atom(Atom {
                bundle: res(c, m, 0),
                min_parallel: 1,
                max_parallel: h,
                min_lease_ms: lease.max(1),
                work,
            }));
        }
        let len = least + extra;
        let e = Expr::Window(Window {
            start_ms: start as u64 * STEP,
            end_ms: (start + len) as u64 * STEP,
            inner: Box::new(Expr::Order(parts)),
        });
        for agent in [Agent::Gree, Agent::GreeL] {
            let mut plan = Plan::new(STEP, start + len + 3, &res(cap.0, cap.1, 0)).expect("plan");
            match admit(&mut plan, &e, agent, 1) {
                Ok(alloc) => {
                    if let Err(m) = check(&e, &alloc, 0, u64::MAX, 0, true) {
                        prop_assert!(false, "{:?}: {}\n{:?}\n{:?}", agent, m, e, alloc);
                    }
                }
                Err(r) => prop_assert!(false, "{:?} rejected {:?}: {}", agent, e, r),
            }
        }
    }
}
