//! GREE and GREE-L on small plans whose shapes are computed by hand (1 s steps, CPU only).

use gantry_rayon::agents::{Agent, Allocation, Interval, admit};
use gantry_rayon::plan::{Piece, Plan};
use gantry_rdl::Expr;

mod common;
use common::{atom, cpu, window};

fn iv(start_ms: u64, end_ms: u64, bundles: u64) -> Interval {
    Interval { start_ms, end_ms, bundles }
}

/// Ten one-second steps of 10 CPU units.
fn plan10() -> Plan {
    Plan::new(1000, 10, &cpu(10)).expect("plan")
}

fn block(plan: &mut Plan, id: u64, start: usize, end: usize, c: i64) {
    plan.add(id, vec![Piece { start, end, demand: [c, 0, 0] }]).expect("room for the blocker");
}

fn used(plan: &Plan) -> Vec<i64> {
    (0..plan.steps()).map(|i| plan.used_at(i).expect("step")[0]).collect()
}

fn ok(r: Result<Allocation, gantry_rayon::agents::Rejection>) -> Allocation {
    r.unwrap_or_else(|e| panic!("rejected: {e}"))
}

#[test]
fn gree_is_tallest_rightmost() {
    let mut plan = plan10();
    // 10 bundle-steps, at most 4 at a time: 4, 4 at the end, 2 before.
    let a = ok(admit(&mut plan, &atom(1, 1, 4, 0, 10_000), Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(7000, 8000, 2), iv(8000, 10_000, 4)]]);
    assert_eq!(used(&plan), vec![0, 0, 0, 0, 0, 0, 0, 2, 4, 4]);
}

#[test]
fn gree_goes_taller_where_more_fits() {
    let mut plan = plan10();
    block(&mut plan, 100, 8, 10, 8);
    // Two fit at the end, four before: 2, 2 | 4 | 2.
    let a = ok(admit(&mut plan, &atom(1, 1, 4, 0, 10_000), Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(6000, 7000, 2), iv(7000, 8000, 4), iv(8000, 10_000, 2)]]);
}

#[test]
fn gree_keeps_gangs_and_lease() {
    let mut plan = plan10();
    // g = 2, h = 4, lease 3 s, 12 bundle-steps = 6 gang-steps: two gangs for 3 s.
    let a = ok(admit(&mut plan, &atom(1, 2, 4, 3000, 12_000), Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(7000, 10_000, 4)]]);
    // Lease 3 s with only 2 free steps at the end: the run is skipped.
    let mut plan = plan10();
    block(&mut plan, 100, 7, 8, 10);
    let a = ok(admit(&mut plan, &atom(1, 1, 2, 3000, 6000), Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(4000, 7000, 2)]]);
}

#[test]
fn gree_splits_the_rest_to_hold_the_lease() {
    // h = 3, lease 2 s, 7 bundle-steps: 3, 3 then 1 would leave a one-step piece; the balanced
    // shape holds the lease exactly: one bundle for 3 s, then two for 2 s.
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &atom(1, 1, 3, 2000, 7000), Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(5000, 8000, 1), iv(8000, 10_000, 2)]]);
}

#[test]
fn capacity_lost_is_respected() {
    // Steps 5..10 down to 2 CPUs (nodes lost): two at a time there.
    let mut plan = plan10();
    plan.set_capacity(5, 10, &cpu(2)).expect("range");
    let a = ok(admit(&mut plan, &atom(1, 1, 4, 0, 8000), Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(6000, 10_000, 2)]]);
    assert_eq!(plan.overcommitted(), None);
    // Losing more now overcommits the plan, which says where.
    plan.set_capacity(8, 9, &cpu(1)).expect("range");
    assert_eq!(plan.overcommitted(), Some(8));
}

#[test]
fn a_rigid_gang_takes_the_latest_run_long_enough() {
    // g = h = 2 for 3 s (MPI-like); step 8 full, so step 9 alone is too short.
    for agent in [Agent::Gree, Agent::GreeL] {
        let mut plan = plan10();
        block(&mut plan, 100, 8, 9, 10);
        let a = ok(admit(&mut plan, &atom(1, 2, 2, 3000, 6000), agent, 1));
        assert_eq!(a.atoms, vec![vec![iv(5000, 8000, 2)]], "{agent:?}");
    }
}

#[test]
fn gree_l_keeps_gangs_and_lease() {
    // g = 2, h = 4, lease 3 s, 16 bundle-steps = 8 gang-steps: one gang for 8 s.
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &atom(1, 2, 4, 3000, 16_000), Agent::GreeL, 1));
    assert_eq!(a.atoms, vec![vec![iv(2000, 10_000, 2)]]);
}

#[test]
fn gree_l_is_flat() {
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &atom(1, 1, 4, 0, 10_000), Agent::GreeL, 1));
    assert_eq!(a.atoms, vec![vec![iv(0, 10_000, 1)]]);

    // The first three steps full: one bundle over 7 steps cannot do 10, two over 5 can.
    let mut plan = plan10();
    block(&mut plan, 100, 0, 3, 10);
    let a = ok(admit(&mut plan, &atom(1, 1, 4, 0, 10_000), Agent::GreeL, 1));
    assert_eq!(a.atoms, vec![vec![iv(5000, 10_000, 2)]]);

    // Step 5 full: 9 bundle-steps at height 2 over [0, 5): 1 then 2, 2, 2, 2.
    let mut plan = plan10();
    block(&mut plan, 100, 5, 6, 10);
    let a = ok(admit(&mut plan, &atom(1, 1, 2, 0, 9000), Agent::GreeL, 1));
    assert_eq!(a.atoms, vec![vec![iv(0, 1000, 1), iv(1000, 5000, 2)]]);
}

#[test]
fn gree_l_falls_back_to_gree() {
    // h = 1 and step 5 full: no flat span of 9 steps, so GREE's shape on both sides.
    let mut plan = plan10();
    block(&mut plan, 100, 5, 6, 10);
    let a = ok(admit(&mut plan, &atom(1, 1, 1, 0, 9000), Agent::GreeL, 1));
    assert_eq!(a.atoms, vec![vec![iv(0, 5000, 1), iv(6000, 10_000, 1)]]);
}

#[test]
fn order_chains_stages_last_first() {
    let mut plan = plan10();
    let e = Expr::Order(vec![atom(1, 1, 2, 0, 4000), atom(1, 1, 2, 0, 4000)]);
    let a = ok(admit(&mut plan, &e, Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(6000, 8000, 2)], vec![iv(8000, 10_000, 2)]]);
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &e, Agent::GreeL, 1));
    // Flat: the second stage one bundle over [6, 10), the first over [2, 6).
    assert_eq!(a.atoms, vec![vec![iv(2000, 6000, 1)], vec![iv(6000, 10_000, 1)]]);
}

#[test]
fn order_leaves_earlier_stages_their_least_time() {
    // The first stage needs 3 steps (one bundle at most); the second could spread over the whole
    // 6-step window at one bundle, which would leave the first only 2. It starts no earlier than
    // step 3 instead: two bundles over [4, 6), the first stage over [1, 4).
    let e = window(0, 6000, Expr::Order(vec![atom(1, 1, 1, 0, 3000), atom(1, 1, 4, 0, 4000)]));
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &e, Agent::GreeL, 1));
    assert_eq!(a.atoms, vec![vec![iv(1000, 4000, 1)], vec![iv(4000, 6000, 2)]]);
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &e, Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(2000, 5000, 1)], vec![iv(5000, 6000, 4)]]);
}

#[test]
fn window_narrows() {
    let mut plan = plan10();
    // [2.5 s, 6.5 s) holds whole steps 3..6 only.
    let e = window(2500, 6500, atom(1, 1, 1, 0, 3000));
    let a = ok(admit(&mut plan, &e, Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![iv(3000, 6000, 1)]]);
    let e = window(2500, 6500, atom(1, 1, 1, 0, 4000));
    let r = admit(&mut plan, &e, Agent::Gree, 2).expect_err("only three whole steps");
    assert_eq!(r.atom, Some(0));
    assert!(r.reason.contains("too short"), "{r}");
}

#[test]
fn any_takes_the_first_that_fits() {
    let mut plan = plan10();
    let e = Expr::Any(vec![
        atom(20, 1, 1, 0, 1000), // a bundle larger than the cluster
        atom(1, 1, 1, 0, 2000),
        atom(1, 1, 1, 0, 1000),
    ]);
    let a = ok(admit(&mut plan, &e, Agent::Gree, 1));
    assert_eq!(a.atoms, vec![vec![], vec![iv(8000, 10_000, 1)], vec![]]);
}

#[test]
fn all_is_all_or_nothing() {
    let mut plan = plan10();
    block(&mut plan, 100, 0, 10, 5);
    let before = used(&plan);
    let e = Expr::All(vec![
        window(0, 5000, atom(1, 1, 5, 0, 5000)),
        window(0, 5000, atom(1, 1, 5, 0, 25_000)), // fits alone, not after the first
    ]);
    // Free in total but not in time: the second part fits only in steps the first one took.
    let e2 = Expr::All(vec![
        window(0, 5000, atom(5, 1, 1, 0, 3000)), // the last three steps
        window(0, 5000, atom(1, 1, 1, 0, 3000)), // one at a time: two steps left
    ]);
    for (agent, e) in [(Agent::Gree, &e), (Agent::GreeL, &e), (Agent::Gree, &e2), (Agent::GreeL, &e2)] {
        let r = admit(&mut plan, e, agent, 1).expect_err("the second part does not fit");
        assert_eq!(r.atom, Some(1), "{r}");
        assert!(r.reason.contains("no room") || r.reason.contains("not enough free"), "{r}");
        assert_eq!(used(&plan), before);
        assert!(plan.pieces(1).is_none());
    }
    // Without the first part the second fits.
    let e = window(0, 5000, atom(1, 1, 5, 0, 25_000));
    ok(admit(&mut plan, &e, Agent::Gree, 1));
    assert_eq!(used(&plan), vec![10, 10, 10, 10, 10, 5, 5, 5, 5, 5]);
    plan.remove(1).expect("reservation 1");
    assert_eq!(used(&plan), before);
}

#[test]
fn duplicate_ids_are_refused() {
    let mut plan = plan10();
    ok(admit(&mut plan, &atom(1, 1, 1, 0, 1000), Agent::Gree, 7));
    let r = admit(&mut plan, &atom(1, 1, 1, 0, 1000), Agent::Gree, 7).expect_err("dup");
    assert!(r.reason.contains("already"));
}

/// Issue 22 (`rayon-swim`): 25 tasks of 4,629 ms, due 13,887 ms after they arrive (13 whole
/// steps). As fluid work, 9 bundles for 13 steps hold it (117 ≥ 115.7 bundle-seconds), but a
/// bundle runs whole tasks: two waves, 18 of them. Work that is a whole number of leases is
/// that many tasks, and each bundle gets whole tasks: GREE the rectangle that starts latest (25
/// bundles, one task each), GREE-L the lowest (13 bundles, two each).
#[test]
fn a_task_atom_gets_whole_tasks_on_every_bundle() {
    let e = window(0, 13_887, atom(1, 1, 25, 4629, 25 * 4629));
    for (agent, want) in [(Agent::Gree, iv(8000, 13_000, 25)), (Agent::GreeL, iv(3000, 13_000, 13))] {
        let mut plan = Plan::new(1000, 20, &cpu(40)).expect("plan");
        let a = ok(admit(&mut plan, &e, agent, 1));
        assert_eq!(a.atoms, vec![vec![want]], "{agent:?}");
        let tasks = want.bundles * ((want.end_ms - want.start_ms) / 4629);
        assert!(tasks >= 25, "{agent:?}: {tasks} tasks");
    }
    // Work that is not a whole number of leases stays fluid: 10 bundle-steps, lease 3 s.
    let mut plan = plan10();
    let a = ok(admit(&mut plan, &atom(1, 1, 4, 3000, 10_000), Agent::GreeL, 1));
    assert_eq!(a.atoms[0].iter().map(|x| (x.end_ms - x.start_ms) / 1000 * x.bundles).sum::<u64>(), 10);
}

/// A stage of tasks too large for any one rectangle of free room still fits as a staircase of
/// whole tasks (issue 22: `rayon-planning`'s contended pool, seed 2, rejected a large job when
/// task atoms took one rectangle only). Steps 0–4 have 4 units free, steps 5–9 all 10; 60 tasks
/// of one step, at most 10 at a time: 10 bundles × 5 tasks at the end, then 4 × 3 before.
#[test]
fn a_task_atom_too_large_for_one_rectangle_takes_a_staircase_of_whole_tasks() {
    for agent in [Agent::Gree, Agent::GreeL] {
        let mut plan = plan10();
        block(&mut plan, 100, 0, 5, 6);
        let a = ok(admit(&mut plan, &atom(1, 1, 10, 1000, 60_000), agent, 1));
        assert_eq!(a.atoms, vec![vec![iv(2000, 5000, 4), iv(5000, 10_000, 10)]], "{agent:?}");
    }
}
