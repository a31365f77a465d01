//! The plan against a plain per-step array: adds, removes, capacity changes and every query.

#![allow(clippy::needless_range_loop)] // the references index steps and dimensions plainly

use gantry_rayon::plan::{DIMS, Piece, Plan, PlanError, Vector};
use gantry_sdk::abi::GantryResources;
use proptest::prelude::*;

fn res(v: [u64; 3]) -> GantryResources {
    GantryResources { cpu_millis: v[0], memory_bytes: v[1], gpus: v[2] as u32, reserved: 0 }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u64, Vec<(usize, usize, Vector)>),
    Remove(u64),
    Capacity(usize, usize, [u64; 3]),
}

fn op(steps: usize) -> impl Strategy<Value = Op> {
    let range = (0..steps, 1..=steps).prop_map(move |(a, l)| (a, (a + l).min(steps)));
    let demand = (0i64..6, 0i64..6, 0i64..2).prop_map(|(a, b, c)| [a, b, c]);
    prop_oneof![
        4 => (0u64..8, prop::collection::vec((range.clone(), demand), 1..4)).prop_map(|(id, v)| {
            Op::Add(id, v.into_iter().map(|((s, e), d)| (s, e, d)).collect())
        }),
        2 => (0u64..8).prop_map(Op::Remove),
        1 => (range, (4u64..12, 4u64..12, 0u64..3)).prop_map(|((s, e), (a, b, c))| Op::Capacity(s, e, [a, b, c])),
    ]
}

/// The reference: capacity and usage per step.
struct Naive {
    cap: Vec<Vector>,
    used: Vec<Vector>,
    res: std::collections::HashMap<u64, Vec<(usize, usize, Vector)>>,
}

impl Naive {
    fn free(&self, i: usize) -> Vector {
        let mut f = [0; DIMS];
        for (d, x) in f.iter_mut().enumerate() {
            *x = self.cap[i][d] - self.used[i][d];
        }
        f
    }
    fn fits(&self, dem: &Vector, i: usize) -> bool {
        let f = self.free(i);
        (0..DIMS).all(|d| dem[d] <= 0 || f[d] >= dem[d])
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn plan_matches_a_per_step_array(
        steps in 1usize..40,
        ops in prop::collection::vec(op(40), 1..30),
        query in ((0i64..8, 0i64..8, 0i64..2), 0usize..40, 0usize..41, 1usize..6),
    ) {
        let mut plan = Plan::new(1000, steps, &res([8, 8, 1])).expect("plan");
        let mut naive = Naive {
            cap: vec![[8, 8, 1]; steps],
            used: vec![[0; DIMS]; steps],
            res: Default::default(),
        };
        for op in ops {
            match op {
                Op::Add(id, v) => {
                    let v: Vec<_> = v.into_iter().filter(|p| p.1 <= steps && p.0 < p.1).collect();
                    if v.is_empty() { continue; }
                    let pieces: Vec<Piece> = v.iter().map(|&(start, end, demand)| Piece { start, end, demand }).collect();
                    // The reference: every piece fits, counting earlier pieces of the same id.
                    let mut used = naive.used.clone();
                    let mut fit = !naive.res.contains_key(&id);
                    for &(s, e, d) in &v {
                        for i in s..e {
                            for k in 0..DIMS {
                                if d[k] > 0 && naive.cap[i][k] - used[i][k] < d[k] { fit = false; }
                                used[i][k] += d[k];
                            }
                        }
                    }
                    let r = plan.add(id, pieces);
                    prop_assert_eq!(r.is_ok(), fit, "{:?}", r);
                    if fit {
                        naive.used = used;
                        naive.res.insert(id, v);
                    } else if naive.res.contains_key(&id) {
                        prop_assert_eq!(r, Err(PlanError::Duplicate(id)));
                    }
                }
                Op::Remove(id) => {
                    let r = plan.remove(id);
                    prop_assert_eq!(r.is_some(), naive.res.contains_key(&id));
                    if let Some(v) = naive.res.remove(&id) {
                        for (s, e, d) in v {
                            for i in s..e {
                                for k in 0..DIMS { naive.used[i][k] -= d[k]; }
                            }
                        }
                    }
                }
                Op::Capacity(s, e, c) => {
                    let e = e.min(steps);
                    let r = plan.set_capacity(s, e, &res(c));
                    prop_assert_eq!(r.is_ok(), s < e);
                    if s < e {
                        for i in s..e { naive.cap[i] = [c[0] as i64, c[1] as i64, c[2] as i64]; }
                    }
                }
            }
            for i in 0..steps {
                prop_assert_eq!(plan.free_at(i), Some(naive.free(i)), "step {}", i);
                prop_assert_eq!(plan.used_at(i), Some(naive.used[i]));
            }
        }
        // Queries over a window.
        let ((a, b, c), lo, hi, len) = query;
        let dem: Vector = [a, b, c];
        let hi = hi.min(steps);
        let lo = lo.min(hi);
        let frees: Vec<Vector> = (lo..hi).map(|i| naive.free(i)).collect();
        let min = (lo < hi).then(|| {
            let mut m = [i64::MAX; DIMS];
            for f in &frees { for d in 0..DIMS { m[d] = m[d].min(f[d]); } }
            m
        });
        prop_assert_eq!(plan.min_free(lo, hi), min);
        let latest = (lo..hi).rev().find(|&i| naive.fits(&dem, i));
        let earliest = (lo..hi).find(|&i| naive.fits(&dem, i));
        prop_assert_eq!(plan.latest_fit(&dem, lo, hi), latest);
        prop_assert_eq!(plan.earliest_fit(&dem, lo, hi), earliest);
        prop_assert_eq!(plan.fits(&dem, lo, hi), lo < hi && (lo..hi).all(|i| naive.fits(&dem, i)));
        // Runs: maximal runs of fitting steps, the latest / earliest of at least `len`.
        let mut runs = Vec::new();
        let mut i = lo;
        while i < hi {
            if naive.fits(&dem, i) {
                let s = i;
                while i < hi && naive.fits(&dem, i) { i += 1; }
                runs.push((s, i));
            } else {
                i += 1;
            }
        }
        let long: Vec<_> = runs.iter().copied().filter(|r| r.1 - r.0 >= len).collect();
        prop_assert_eq!(plan.latest_run(&dem, lo, hi, len), long.last().copied());
        prop_assert_eq!(plan.earliest_run(&dem, lo, hi, len), long.first().copied());
        let over = (0..steps).find(|&i| (0..DIMS).any(|d| naive.free(i)[d] < 0));
        prop_assert_eq!(plan.overcommitted(), over);
        // Removing everything gives back exactly the capacity.
        let ids: Vec<u64> = plan.reservation_ids().collect();
        for id in ids { plan.remove(id); }
        prop_assert!(plan.is_empty());
        for i in 0..steps {
            prop_assert_eq!(plan.used_at(i), Some([0; DIMS]));
        }
    }
}

#[test]
fn a_day_at_one_second_is_small() {
    let plan = Plan::with_horizon(1000, 24 * 3600 * 1000, &res([320_000_000, 1 << 50, 0])).expect("plan");
    assert_eq!(plan.steps(), 86_400);
    let mb = plan.memory_bytes() as f64 / 1e6;
    assert!(mb < 30.0, "{mb} MB");
}

#[test]
fn bad_ranges_and_duplicates_are_refused() {
    let mut plan = Plan::new(1000, 10, &res([4, 4, 0])).expect("plan");
    assert!(Plan::new(0, 10, &res([1, 1, 1])).is_err());
    assert!(Plan::new(1000, 0, &res([1, 1, 1])).is_err());
    let p = |start, end| Piece { start, end, demand: [1, 1, 0] };
    assert_eq!(plan.add(1, vec![p(5, 11)]), Err(PlanError::BadRange { start: 5, end: 11 }));
    assert_eq!(plan.add(1, vec![p(5, 5)]), Err(PlanError::BadRange { start: 5, end: 5 }));
    plan.add(1, vec![p(0, 10)]).expect("fits");
    assert_eq!(plan.add(1, vec![p(0, 1)]), Err(PlanError::Duplicate(1)));
    let err = plan
        .add(2, vec![p(0, 2), Piece { start: 3, end: 4, demand: [4, 0, 0] }])
        .expect_err("no room at step 3");
    assert!(matches!(err, PlanError::NoRoom { step: 3, .. }), "{err}");
    assert_eq!(plan.used_at(0), Some([1, 1, 0]));
    assert!(plan.set_capacity(3, 3, &res([1, 1, 1])).is_err());
}
