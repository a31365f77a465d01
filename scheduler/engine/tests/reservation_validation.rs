//! The host's check of a reservation planner's answers (ABI 1.3): every reason an answer is
//! refused, each provoked by tampering with the test planner's good answer. A refused answer is
//! refused whole, counted by reason (in the engine's stats and the planner's own record), counts
//! as a failed call (toward quarantine), the built-in stands in, and nothing accepted before is
//! lost.

mod planning;

use gantry_engine::test_planner::Mode;
use gantry_engine::{Command, Engine, Event, RejectReason, StaticPolicy};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use planning::*;

/// Rebuilds `out` with its decisions and its pieces changed by `f` (pieces of reservation index
/// `subject` only).
fn edit_pieces(out: &mut Decisions, subject: u32, f: impl Fn(&GantryAllocation) -> Vec<GantryAllocation>) {
    let decisions = out.as_slice().to_vec();
    let pieces: Vec<GantryAllocation> = out
        .allocations()
        .iter()
        .flat_map(|p| if p.reservation == subject { f(p) } else { vec![*p] })
        .collect();
    out.clear();
    out.extend_from_slice(&decisions);
    out.extend_allocations(&pieces);
}

/// An engine with A (the whole plan at 0-10 s) accepted, the planner then set to `tamper` with its
/// answers; submits `rdl` (deadline 100 s) at `now` and checks it is rejected because the answer
/// was refused for `reason` (`count` times), that nothing accepted changed, and the call counted
/// as failed.
fn refused(
    rdl: &str,
    reason: RejectReason,
    count: u64,
    tamper: impl FnMut(&View<'_>, &mut Decisions) + Send + 'static,
) {
    let (mut e, planner) = engine();
    admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    let before = book(&e);
    let view_before = e.state().reservations().to_vec();
    planner.tamper(tamper);
    let why = rejected(&mut e, 0, request(rdl, 100));
    assert!(why.contains("was refused") && why.contains(reason.as_str()), "{reason:?}: {why}");
    assert_eq!(book(&e), before, "{reason:?}: nothing accepted changed");
    assert_eq!(e.state().reservations(), view_before.as_slice(), "{reason:?}: the view is as it was");
    assert_eq!(e.stats().rejected.get(reason), count, "{reason:?}: counted in the stats");
    assert_eq!(e.policy_status()[0].rejected.get(reason), count, "{reason:?}: counted for the planner");
    assert_eq!(e.policy_status()[0].failures, 1, "{reason:?}: a failed call");
    assert_eq!(e.stats().reservations.builtin, 1);
}

#[test]
fn malformed_decisions_are_refused() {
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadKind, 1, |view, out| {
        out.push(GantryDecision {
            kind: 99,
            subject: view.plan.subject,
            target: GANTRY_NONE,
            reason: 0,
            value: 0,
        });
    });
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadKind, 1, |view, out| {
        // A placement's kind in a reserve answer.
        out.place(view.plan.subject, 0);
    });
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::UnknownSubject, 1, |_, out| {
        out.plan_reservation(999, []);
    });
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::Duplicate, 1, |view, out| {
        out.reject_reservation(view.plan.subject, 1);
    });
    // In ADMIT only the subject may be rejected.
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::WrongState, 1, |view, out| {
        out.reject_reservation(1 - view.plan.subject, 1);
    });
}

#[test]
fn malformed_pieces_are_refused() {
    // An atom the definition does not have; zero bundles; an empty piece.
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadAllocation, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| vec![*p, GantryAllocation { atom: 1, ..*p }]);
    });
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadAllocation, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| vec![*p, GantryAllocation { bundles: 0, ..*p }]);
    });
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadAllocation, 2, |view, out| {
        edit_pieces(out, view.plan.subject, |p| {
            vec![*p, GantryAllocation { end_ms: p.start_ms, ..*p }, GantryAllocation { end_ms: 0, ..*p }]
        });
    });
    // A piece for a reservation the answer does not plan.
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadAllocation, 1, |view, out| {
        let other = 1 - view.plan.subject;
        out.extend_allocations(&[GantryAllocation {
            reservation: other,
            atom: 0,
            start_ms: 0,
            end_ms: 10_000,
            bundles: 8,
        }]);
    });
}

#[test]
fn infeasible_allocations_are_refused() {
    // Past the deadline (100 s).
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::OutsideWindow, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| {
            vec![GantryAllocation { start_ms: 95_000, end_ms: 105_000, ..*p }]
        });
    });
    // Outside an inner window.
    refused(
        "window(50s, 70s, atom(1c/2GiB, 1, 4, 10s, 40s))",
        RejectReason::OutsideWindow,
        1,
        |view, out| {
            edit_pieces(out, view.plan.subject, |p| {
                vec![GantryAllocation { start_ms: 65_000, end_ms: 75_000, ..*p }]
            });
        },
    );
    // Before now: the engine is at 0, so a new reservation starting earlier cannot be; use the
    // window's own start instead (a piece before the arrival is outside it).
    refused(
        "window(50s, 70s, atom(1c/2GiB, 1, 4, 10s, 40s))",
        RejectReason::OutsideWindow,
        1,
        |view, out| {
            edit_pieces(out, view.plan.subject, |p| {
                vec![GantryAllocation { start_ms: 45_000, end_ms: 55_000, ..*p }]
            });
        },
    );
    // 3 bundles of a gang of 2; 6 bundles of at most 4.
    refused("atom(1c/2GiB, 2, 4, 10s, 40s)", RejectReason::GangSize, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| {
            vec![GantryAllocation { bundles: 3, end_ms: p.end_ms + 5_000, ..*p }]
        });
    });
    refused("atom(1c/2GiB, 2, 4, 10s, 40s)", RejectReason::GangSize, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| vec![GantryAllocation { bundles: 6, ..*p }]);
    });
    // Two pieces that overlap add up: 4 + 4 > h = 4.
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::GangSize, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| {
            vec![*p, GantryAllocation { start_ms: p.end_ms - 1_000, end_ms: p.end_ms + 9_000, ..*p }]
        });
    });
    // Two runs of 5 s with a gap, a lease of 10 s.
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::ShortLease, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| {
            let mid = p.start_ms + 5_000;
            vec![
                GantryAllocation { end_ms: mid, ..*p },
                GantryAllocation { start_ms: mid + 1_000, end_ms: p.end_ms + 1_000, ..*p },
            ]
        });
    });
    // Half the work (a lease of 1 s, so only the work is short).
    refused("atom(1c/2GiB, 1, 4, 1s, 40s)", RejectReason::WorkMissing, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| vec![GantryAllocation { end_ms: p.start_ms + 5_000, ..*p }]);
    });
    // `all` needs both parts; `any` one (so dropping one alternative's pieces is fine, both not).
    refused(
        "all(atom(1c/1GiB, 1, 1, 5s, 5s), atom(1c/1GiB, 1, 1, 5s, 5s))",
        RejectReason::WorkMissing,
        1,
        |view, out| {
            edit_pieces(out, view.plan.subject, |p| if p.atom == 1 { vec![] } else { vec![*p] });
        },
    );
    // The second part of an order before the first.
    refused(
        "order(atom(1c/1GiB, 1, 1, 5s, 5s), atom(1c/1GiB, 1, 1, 5s, 5s))",
        RejectReason::OrderBroken,
        1,
        |view, out| {
            edit_pieces(out, view.plan.subject, |p| {
                let (s, e) = if p.atom == 0 { (15_000, 20_000) } else { (10_000, 15_000) };
                vec![GantryAllocation { start_ms: s, end_ms: e, ..*p }]
            });
        },
    );
    // On top of A, which holds the whole plan at 0-10 s.
    refused("atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::OverCapacity, 1, |view, out| {
        edit_pieces(out, view.plan.subject, |p| {
            vec![GantryAllocation { start_ms: 5_000, end_ms: 15_000, ..*p }]
        });
    });
}

#[test]
fn what_a_reservation_held_before_now_cannot_change_and_optimize_cannot_reject() {
    let (mut e, planner) = engine();
    let (a, _, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 1s, 80s)", 100));
    assert_eq!(allocation, vec![piece(0, 0, 10, 8)]);
    handle(&mut e, 5_000, Event::Tick);
    let before = book(&e);
    // OPTIMIZE at 5 s: A's first second moves (its past), and another answer rejects it.
    planner.tamper(|view, out| {
        out.plan_reservation(
            0,
            [GantryAllocation { reservation: 0, atom: 0, start_ms: 1_000, end_ms: 11_000, bundles: 8 }],
        );
        let _ = view;
    });
    assert!(handle(&mut e, 5_000, Event::OptimizeReservations).is_empty());
    assert_eq!(e.stats().rejected.get(RejectReason::PastChanged), 1);
    planner.tamper(|_, out| out.reject_reservation(0, 1));
    assert!(handle(&mut e, 5_000, Event::OptimizeReservations).is_empty());
    assert_eq!(e.stats().rejected.get(RejectReason::WrongState), 1);
    assert_eq!(book(&e), before, "nothing changed");
    // Cutting the run at now and finishing the work later keeps the past: accepted.
    planner.tamper(|_, out| {
        out.plan_reservation(
            0,
            [
                GantryAllocation { reservation: 0, atom: 0, start_ms: 0, end_ms: 5_000, bundles: 8 },
                GantryAllocation { reservation: 0, atom: 0, start_ms: 20_000, end_ms: 25_000, bundles: 8 },
            ],
        );
    });
    let cmds = handle(&mut e, 5_000, Event::OptimizeReservations);
    assert_eq!(
        cmds,
        vec![Command::ReservationReplanned {
            reservation: a,
            allocation: vec![piece(0, 0, 5, 8), piece(0, 20, 25, 8)]
        }]
    );
    assert_eq!(e.policy_status()[0].failures, 2);
    assert_eq!(e.policy_status()[0].consecutive_failures, 0, "a good answer clears the streak");
}

#[test]
fn a_planner_that_fails_panics_or_says_nothing_leaves_the_subject_rejected() {
    let (mut e, planner) = engine();
    planner.set(Mode::Fail);
    let why = rejected(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert!(why.contains("failed") && why.contains("told to fail"), "{why}");
    planner.set(Mode::Panic);
    let why = rejected(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert!(why.contains("panicked"), "{why}");
    planner.set(Mode::Silent);
    let why = rejected(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert!(why.contains("gave no answer"), "{why}");
    assert_eq!(e.stats().policy_failures, 2, "no answer is a rejection, not a failure");
    assert!(e.state().reservations().is_empty());
}

#[test]
fn repeated_bad_answers_quarantine_the_planner_and_the_built_in_stands_in() {
    let (mut e, planner) = engine();
    let (a, _, _) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    // Over-allocating: 100 bundles of at most 4.
    planner.tamper(|view, out| {
        edit_pieces(out, view.plan.subject, |p| vec![GantryAllocation { bundles: 100, ..*p }]);
    });
    for _ in 0..3 {
        let why = rejected(&mut e, 1_000, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
        assert!(why.contains("gang_size"), "{why}");
    }
    assert_eq!(e.stats().quarantines, 1);
    let calls = planner.calls().len();
    // Quarantined: not asked; the built-in rejects.
    let why = rejected(&mut e, 2_000, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert!(why.contains("quarantined"), "{why}");
    assert_eq!(planner.calls().len(), calls);
    assert!(e.reservation_book().expect("book").get(a).is_some(), "what was accepted stays");
    // After the quarantine it is asked again, and a good answer is taken.
    planner.set(Mode::Plan);
    admit(&mut e, 62_000, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert_eq!(planner.calls().len(), calls + 1);
}

/// An admission plugin that accepts every reservation it could name.
struct AcceptsReservations;

impl Plugin for AcceptsReservations {
    const NAME: &'static std::ffi::CStr = c"accepts-reservations";
    const VERSION: &'static std::ffi::CStr = c"0";
    const HOOKS: Hooks = Hooks { admit: true, order: false, place: false, rebalance: false, reserve: false };
    fn create(_: &str) -> Result<Self, PluginError> {
        Ok(AcceptsReservations)
    }
    fn admit(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        for i in 0..view.reservations.len().max(1) {
            out.accept_reservation(i as u32);
        }
        Ok(())
    }
}

#[test]
fn admit_never_sees_a_new_reservation_and_may_not_decide_one() {
    let (mut e, _) = engine_with(
        config(),
        vec![Box::new(StaticPolicy::new(AcceptsReservations))],
        gantry_engine::Profile { admit: Some(1), ..gantry_engine::Profile::default() },
    );
    admit(&mut e, 0, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    handle(&mut e, 0, Event::AppSubmitted(app("root.adhoc")));
    handle(&mut e, 1_000, Event::Tick);
    assert_eq!(e.stats().rejected.get(RejectReason::WrongState), 1);
    let _: &Engine = &e;
}
