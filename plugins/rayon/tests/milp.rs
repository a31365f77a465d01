//! The offline optimiser on tiny plans: optima computed by hand, random plans that stay
//! feasible and covered, the model-size bound. Kept tiny: microlp's branch and bound is slow in
//! debug builds.

use std::time::Duration;

use gantry_rayon::agents::{Agent, admit};
use gantry_rayon::milp::{self, Options, Request};
use gantry_rayon::plan::{Piece, Plan};
use gantry_rdl::Expr;
use proptest::prelude::*;

mod common;
use common::{atom, cpu, window};

fn piece(start: usize, end: usize, c: i64) -> Piece {
    Piece { start, end, demand: [c, 0, 0] }
}

fn opts() -> Options {
    Options { time_limit: Duration::from_secs(20), ..Options::default() }
}

/// For random plans: a short limit (an answer cut short is still the warm start or better).
fn quick() -> Options {
    Options { time_limit: Duration::from_millis(500), ..Options::default() }
}

fn admitted(plan: &mut Plan, id: u64, expr: Expr) -> Request {
    admit(plan, &expr, Agent::Gree, id).unwrap_or_else(|e| panic!("reservation {id} rejected: {e}"));
    Request { id, expr }
}

/// Alone on a 4-step plan of two bundles, a malleable atom of 2 bundle-steps: GREE holds both
/// bundles at the last step; the optimum is one bundle over the last two steps. Allocation
/// cost `c · ((1 + ε/2) + (1 + ε/4))` with `c = 1/2` (a bundle is half the CPU) against
/// `c · 2 · (1 + ε/4)` for GREE's shape; smoothness `c · (1 + 1)` (start, stop) against
/// `c · (2 + 2)`: the flat shape wins, and it is the latest flat one.
#[test]
fn flat_and_late_beats_tall() {
    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let r = admitted(&mut plan, 1, window(0, 4000, atom(1000, 1, 2, 0, 2000)));
    assert_eq!(plan.pieces(1).expect("held"), &[piece(3, 4, 2000)][..]);
    let out = milp::optimize(&plan, &[r], &opts()).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert!(out.stats.optimal);
    assert_eq!(out.stats.slot_steps, 1);
    assert_eq!(out.stats.cells, 4);
    assert_eq!(out.stats.rejections, 0);
    assert_eq!(out.pieces, vec![(1, vec![piece(2, 4, 1000)])]);
    let eps = 0.01;
    let want = 0.5 * ((1.0 + eps * 0.5) + (1.0 + eps * 0.25)) + 0.5 * 2.0;
    assert!((out.stats.objective - want).abs() < 1e-6, "objective {} want {want}", out.stats.objective);
    // GREE's shape: two bundles (cost 1) at the last step, one start and one stop of two.
    let input = (1.0 + eps * 0.25) + 2.0;
    assert!((out.stats.input_objective - input).abs() < 1e-6, "input {}", out.stats.input_objective);
    assert_eq!((out.stats.changes_before, out.stats.changes_after), (2, 2));
    out.apply(&mut plan).expect("apply");
    assert_eq!(plan.pieces(1).expect("held"), &[piece(2, 4, 1000)][..]);
    assert_eq!(plan.overcommitted(), None);
}

/// Reservation 1 fills the first two steps; reservation 2 is `any` of the same work in the first
/// half or in the second: only the second fits, flat (one bundle over steps 2 and 3; GREE held
/// two bundles at step 3).
///
/// An `order` of two stages of one bundle-step each, GREE's shape back to back at steps 2 and
/// 3: the model's fixed halves (`[0, 2)` and `[2, 4)`) allow at best steps 1 and 3, costing
/// `0.5 · (1.0075 + 1.0025) + 0.5 · 4` (two starts and stops) against GREE's
/// `0.5 · (1.005 + 1.0025) + 0.5 · 2` (one start and stop of the reservation's total): kept.
#[test]
fn any_takes_the_alternative_that_fits_and_order_keeps_stages_apart() {
    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let a = admitted(&mut plan, 1, window(0, 2000, atom(1000, 1, 2, 0, 4000)));
    let b = admitted(
        &mut plan,
        2,
        Expr::Any(vec![
            window(0, 2000, atom(1000, 1, 2, 0, 2000)),
            window(2000, 4000, atom(1000, 1, 2, 0, 2000)),
        ]),
    );
    let out = milp::optimize(&plan, &[a, b], &opts()).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert_eq!(out.stats.rejections, 0);
    assert_eq!(out.pieces, vec![(1, vec![piece(0, 2, 2000)]), (2, vec![piece(2, 4, 1000)])]);
    assert_eq!((out.stats.changes_before, out.stats.changes_after), (4, 4));

    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let c = admitted(
        &mut plan,
        3,
        window(0, 4000, Expr::Order(vec![atom(1000, 1, 1, 0, 1000), atom(1000, 1, 1, 0, 1000)])),
    );
    let out = milp::optimize(&plan, &[c], &opts()).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert_eq!(out.stats.kept, 1);
    assert_eq!(out.pieces, vec![(3, vec![piece(3, 4, 1000), piece(2, 3, 1000)])]);
    let want = 0.5 * (1.005 + 1.0025) + 0.5 * 2.0;
    assert!((out.stats.objective - want).abs() < 1e-6, "objective {} want {want}", out.stats.objective);
}

/// With slots of two steps, a window `[1, 3)` holds no whole slot: the model cannot move the
/// reservation, so it keeps its old pieces.
#[test]
fn coarse_slots_keep_the_old_pieces() {
    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let r = admitted(&mut plan, 1, window(1000, 3000, atom(1000, 1, 2, 0, 2000)));
    let old = plan.pieces(1).expect("held").to_vec();
    let o = Options { slot_steps: Some(2), ..opts() };
    let out = milp::optimize(&plan, &[r], &o).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert_eq!((out.stats.rejections, out.stats.kept), (0, 1));
    assert_eq!(out.pieces, vec![(1, old)]);
}

/// Capacity lost at the last step, where GREE held two bundles: keeping the input no longer
/// fits, the model moves the reservation to one bundle over steps 2 and 3.
#[test]
fn capacity_loss_moves_what_no_longer_fits() {
    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let r = admitted(&mut plan, 1, window(0, 4000, atom(1000, 1, 2, 0, 2000)));
    plan.set_capacity(3, 4, &cpu(1000)).expect("capacity");
    assert_eq!(plan.overcommitted(), Some(3));
    let out = milp::optimize(&plan, &[r], &opts()).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert_eq!((out.stats.rejections, out.stats.kept), (0, 0));
    assert_eq!(out.pieces, vec![(1, vec![piece(2, 4, 1000)])]);
    out.apply(&mut plan).expect("apply");
    assert_eq!(plan.overcommitted(), None);
}

/// All capacity lost inside the window: the reservation is rejected and taken out of the plan.
#[test]
fn capacity_loss_rejects_what_cannot_fit_anywhere() {
    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let keep = admitted(&mut plan, 1, window(0, 2000, atom(1000, 1, 1, 0, 1000)));
    let lost = admitted(&mut plan, 2, window(2000, 4000, atom(1000, 1, 2, 0, 2000)));
    plan.set_capacity(2, 4, &cpu(0)).expect("capacity");
    let out = milp::optimize(&plan, &[keep, lost], &opts()).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert_eq!(out.stats.rejections, 1);
    assert_eq!(out.rejected, vec![2]);
    assert_eq!(out.pieces, vec![(1, vec![piece(1, 2, 1000)])]);
    out.apply(&mut plan).expect("apply");
    assert_eq!(plan.pieces(2), None);
    assert_eq!(plan.overcommitted(), None);
}

/// A lease of two steps makes slots of two steps, and the 7-step horizon's last slot (one
/// step) is not used: three cells; every piece lasts at least the lease.
#[test]
fn slots_are_at_least_the_lease() {
    let mut plan = Plan::new(1000, 7, &cpu(2000)).expect("plan");
    let r = admitted(&mut plan, 1, window(0, 7000, atom(1000, 1, 2, 2000, 2000)));
    let out = milp::optimize(&plan, std::slice::from_ref(&r), &opts()).expect("optimise");
    assert_eq!(out.stats.kept_input, None);
    assert_eq!((out.stats.slot_steps, out.stats.cells), (2, 3));
    assert_eq!(milp::model_size(&plan, &[r], &opts()), (2, 3));
    assert_eq!(out.pieces.len(), 1);
    assert!(out.pieces[0].1.iter().all(|p| p.end - p.start >= 2), "{:?}", out.pieces);
    out.apply(&mut plan).expect("apply");
    assert_eq!(plan.overcommitted(), None);
}

#[test]
fn unknown_and_duplicate_requests_are_errors() {
    let mut plan = Plan::new(1000, 4, &cpu(2000)).expect("plan");
    let r = admitted(&mut plan, 1, window(0, 4000, atom(1000, 1, 2, 0, 2000)));
    let unknown = Request { id: 9, expr: r.expr.clone() };
    assert!(milp::optimize(&plan, &[unknown], &opts()).is_err());
    assert!(milp::optimize(&plan, &[r.clone(), r], &opts()).is_err());
    let none = milp::optimize(&plan, &[], &opts()).expect("nothing to do");
    assert!(none.pieces.is_empty() && none.rejected.is_empty());
}

/// An hour of one-second steps and ten reservations over all of it would be 36,000 cells at
/// one step a slot: the slots coarsen to stay within the bound.
#[test]
fn model_size_is_bounded() {
    let mut plan = Plan::new(1000, 3600, &cpu(100_000)).expect("plan");
    let requests: Vec<Request> =
        (0..10).map(|i| admitted(&mut plan, i, window(0, 3_600_000, atom(1000, 1, 4, 0, 600_000)))).collect();
    let o = Options::default();
    let (slot, cells) = milp::model_size(&plan, &requests, &o);
    assert!(cells <= o.max_cells, "{cells} cells");
    assert!(slot >= 24, "slot {slot}");
    let (slot1, cells1) = milp::model_size(&plan, &requests, &Options { slot_steps: Some(1), ..o });
    assert_eq!((slot1, cells1), (1, 36_000));
}

fn reservation() -> impl Strategy<Value = Expr> {
    (1u64..=3, 1u32..=2, 1u32..=2, 1u64..=6, 0usize..6, 2usize..=8).prop_map(
        |(c, g, k, gang_steps, s, len)| {
            let end = (s + len).min(8);
            let s = s.min(end.saturating_sub(2));
            window(
                s as u64 * 1000,
                end as u64 * 1000,
                atom(c * 1000, g, g * k, 0, gang_steps * u64::from(g) * 1000),
            )
        },
    )
}

/// `all`, `any` or `order` of two or three small atoms in a window.
fn composite() -> impl Strategy<Value = Expr> {
    let part = (1u64..=2, 1u32..=2, 1u64..=3).prop_map(|(c, h, steps)| atom(c * 1000, 1, h, 0, steps * 1000));
    (0u8..3, prop::collection::vec(part, 2..=3), 0usize..3, 5usize..=8).prop_map(|(op, parts, s, e)| {
        let inner = match op {
            0 => Expr::All(parts),
            1 => Expr::Any(parts),
            _ => Expr::Order(parts),
        };
        window(s as u64 * 1000, e as u64 * 1000, inner)
    })
}

/// `pieces` lie in the request's window (a window around one atom), in whole gangs, at most
/// `h`, and cover its work.
fn covered(r: &Request, pieces: &[Piece]) -> Result<(), TestCaseError> {
    let Expr::Window(w) = &r.expr else { panic!("a window") };
    let Expr::Atom(a) = *w.inner else { panic!("an atom") };
    let lo = (w.start_ms / 1000) as usize;
    let hi = (w.end_ms / 1000) as usize;
    let gang = a.bundle.cpu_millis as i64 * i64::from(a.min_parallel);
    let mut gang_steps = 0i64;
    for p in pieces {
        prop_assert!(p.start >= lo && p.end <= hi, "{:?} outside [{lo}, {hi})", p);
        prop_assert_eq!(p.demand[0] % gang, 0);
        prop_assert!(p.demand[0] / gang <= i64::from(a.max_parallel / a.min_parallel));
        gang_steps += (p.demand[0] / gang) * (p.end - p.start) as i64;
    }
    prop_assert!(gang_steps as u64 * u64::from(a.min_parallel) * 1000 >= a.work);
    Ok(())
}

/// Admits what GREE accepts of `exprs` on an 8-step plan of 6 CPUs.
fn admitted_all(exprs: Vec<Expr>) -> (Plan, Vec<Request>) {
    let mut plan = Plan::new(1000, 8, &cpu(6000)).expect("plan");
    let mut requests = Vec::new();
    for (id, e) in exprs.into_iter().enumerate() {
        if admit(&mut plan, &e, Agent::Gree, id as u64).is_ok() {
            requests.push(Request { id: id as u64, expr: e });
        }
    }
    (plan, requests)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever GREE accepted on an 8-step plan, the optimiser's answer fits the plan, keeps
    /// each reservation inside its window and covers its work.
    #[test]
    fn random_plans_stay_feasible_and_covered(exprs in prop::collection::vec(reservation(), 1..4)) {
        let (mut plan, requests) = admitted_all(exprs);
        prop_assume!(!requests.is_empty());
        let out = milp::optimize(&plan, &requests, &quick()).expect("optimise");
        prop_assert_eq!(&out.stats.kept_input, &None);
        prop_assert_eq!(out.stats.rejections, 0);
        for (r, (id, pieces)) in requests.iter().zip(&out.pieces) {
            prop_assert_eq!(r.id, *id);
            covered(r, pieces)?;
        }
        out.apply(&mut plan).expect("apply");
        prop_assert_eq!(plan.overcommitted(), None);
    }

    /// After losing capacity over a random range, the answer fits: the placed reservations are
    /// covered, the rejected ones are out, and the plan is no longer overcommitted.
    #[test]
    fn capacity_loss_ends_within_capacity(
        exprs in prop::collection::vec(reservation(), 1..4),
        start in 0usize..8,
        len in 1usize..=8,
        left in 0u64..=5,
    ) {
        let (mut plan, requests) = admitted_all(exprs);
        prop_assume!(!requests.is_empty());
        plan.set_capacity(start, (start + len).min(8), &cpu(left * 1000)).expect("capacity");
        let out = milp::optimize(&plan, &requests, &quick()).expect("optimise");
        prop_assert_eq!(&out.stats.kept_input, &None);
        prop_assert_eq!(out.pieces.len() + out.rejected.len(), requests.len());
        for (id, pieces) in &out.pieces {
            let r = requests.iter().find(|r| r.id == *id).expect("requested");
            covered(r, pieces)?;
        }
        out.apply(&mut plan).expect("apply");
        prop_assert_eq!(plan.overcommitted(), None);
        for id in &out.rejected {
            prop_assert_eq!(plan.pieces(*id), None);
        }
    }

    /// Operators: the answer stays in each reservation's window and within capacity, and
    /// nothing is rejected.
    #[test]
    fn random_operators_stay_feasible(exprs in prop::collection::vec(composite(), 1..4)) {
        let (mut plan, requests) = admitted_all(exprs);
        prop_assume!(!requests.is_empty());
        let out = milp::optimize(&plan, &requests, &quick()).expect("optimise");
        prop_assert_eq!(&out.stats.kept_input, &None);
        prop_assert_eq!(out.stats.rejections, 0);
        for (r, (_, pieces)) in requests.iter().zip(&out.pieces) {
            let Expr::Window(w) = &r.expr else { panic!("a window") };
            let (lo, hi) = ((w.start_ms / 1000) as usize, (w.end_ms / 1000) as usize);
            prop_assert!(pieces.iter().all(|p| p.start >= lo && p.end <= hi), "{:?}", pieces);
        }
        out.apply(&mut plan).expect("apply");
        prop_assert_eq!(plan.overcommitted(), None);
    }
}
