//! The replanner on small hand-made plans (1 s steps): moving saves what YARN's replanner
//! deletes, the least important is rejected when something must go, unaffected reservations
//! keep their exact pieces, and what cannot be cleared is reported.

use gantry_rayon::agents::{Agent, admit};
use gantry_rayon::plan::{Piece, Plan};
use gantry_rayon::replan::{ReservationInfo, affected, replan, replan_yarn_simple};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;

fn res(cpu_millis: u64, memory_bytes: u64) -> GantryResources {
    GantryResources { cpu_millis, memory_bytes, ..Default::default() }
}

/// `window(s, e, atom(b, g, h, 0, work))`, times in seconds, work in bundle-seconds.
fn job(b: GantryResources, g: u32, h: u32, s: u64, e: u64, work_s: u64) -> Expr {
    Expr::Window(Window {
        start_ms: s * 1000,
        end_ms: e * 1000,
        inner: Box::new(Expr::Atom(Atom {
            bundle: b,
            min_parallel: g,
            max_parallel: h,
            min_lease_ms: 0,
            work: work_s * 1000,
        })),
    })
}

fn used_cpu(plan: &Plan) -> Vec<i64> {
    (0..plan.steps()).map(|i| plan.used_at(i).expect("step")[0]).collect()
}

/// Admits every info in order with GREE; panics if one is rejected.
fn admit_all(plan: &mut Plan, infos: &[ReservationInfo]) {
    for i in infos {
        if let Err(e) = admit(plan, &i.expr, Agent::Gree, i.id) {
            panic!("reservation {} rejected: {e}", i.id);
        }
    }
}

fn pieces(plan: &Plan, id: u64) -> Vec<Piece> {
    plan.pieces(id).expect("in the plan").to_vec()
}

#[test]
fn moving_saves_what_yarn_deletes() {
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    let infos = vec![
        ReservationInfo::new(1, job(res(1, 0), 1, 5, 0, 10, 10), 0, 1),
        ReservationInfo::new(2, job(res(1, 0), 1, 5, 0, 10, 10), 0, 2),
    ];
    admit_all(&mut plan, &infos);
    assert_eq!(used_cpu(&plan), vec![0, 0, 0, 0, 0, 0, 0, 0, 10, 10]);
    // Half the cluster lost for the last two seconds.
    plan.set_capacity(8, 10, &res(5, 0)).expect("range");
    assert_eq!(plan.overcommitted(), Some(8));
    assert_eq!(affected(&plan), vec![1, 2]);
    let a_before = pieces(&plan, 1);

    let mut yarn = plan.clone();
    let y = replan_yarn_simple(&mut yarn, &infos);
    assert_eq!(y.rejected, vec![2], "YARN deletes the newest");
    assert_eq!(yarn.overcommitted(), None);

    let r = replan(&mut plan, &infos, Agent::Gree);
    assert!(r.rejected.is_empty(), "{r:?}");
    assert_eq!(plan.overcommitted(), None);
    assert_eq!(r.kept, vec![1], "the older one stays where it was");
    assert_eq!(pieces(&plan, 1), a_before);
    assert_eq!(r.moved.len(), 1);
    assert_eq!(r.moved[0].id, 2);
    // The newer one moved before the loss, still inside its window with all its work.
    assert_eq!(r.moved[0].allocation.work_ms(0), 10_000);
    assert_eq!(used_cpu(&plan), vec![0, 0, 0, 0, 0, 0, 5, 5, 5, 5]);
}

#[test]
fn must_reject_the_least_important_where_yarn_deletes_two() {
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    // Both within [5 s, 10 s): together they fill it. The older one is less important.
    let infos = vec![
        ReservationInfo::new(1, job(res(1, 0), 1, 10, 5, 10, 25), 1, 1),
        ReservationInfo::new(2, job(res(1, 0), 1, 10, 5, 10, 25), 5, 2),
    ];
    admit_all(&mut plan, &infos);
    assert_eq!(used_cpu(&plan), vec![0, 0, 0, 0, 0, 10, 10, 10, 10, 10]);
    plan.set_capacity(5, 10, &res(8, 0)).expect("range");

    let mut yarn = plan.clone();
    let y = replan_yarn_simple(&mut yarn, &infos);
    assert_eq!(y.rejected, vec![1, 2], "YARN deletes one per overcommitted place");
    assert_eq!(yarn.overcommitted(), None);

    let r = replan(&mut plan, &infos, Agent::Gree);
    assert_eq!(r.rejected, vec![1], "the lower priority goes: {r:?}");
    assert_eq!(plan.overcommitted(), None);
    assert!(plan.pieces(1).is_none());
    assert_eq!(r.moved.iter().map(|m| m.id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(r.moved[0].allocation.work_ms(0), 25_000);
    assert!(used_cpu(&plan)[..5].iter().all(|&c| c == 0), "nothing before the window");
}

#[test]
fn equal_priority_rejects_the_newest() {
    let mut plan = Plan::new(1000, 4, &res(4, 0)).expect("plan");
    let infos = vec![
        ReservationInfo::new(7, job(res(1, 0), 2, 2, 0, 4, 8), 3, 10),
        ReservationInfo::new(3, job(res(1, 0), 2, 2, 0, 4, 8), 3, 11),
    ];
    admit_all(&mut plan, &infos);
    plan.set_capacity(0, 4, &res(2, 0)).expect("range");
    let r = replan(&mut plan, &infos, Agent::GreeL);
    assert_eq!(r.rejected, vec![3]);
    assert_eq!(plan.overcommitted(), None);
}

#[test]
fn unaffected_reservations_never_change() {
    let mut plan = Plan::new(1000, 10, &res(10, 100)).expect("plan");
    let infos = vec![
        // Early, untouched by the loss.
        ReservationInfo::new(1, job(res(2, 0), 1, 2, 0, 3, 6), 0, 1),
        // Memory only at the steps where CPU is lost: not affected.
        ReservationInfo::new(2, job(res(0, 10), 1, 1, 8, 10, 2), 0, 2),
        // CPU at the lost steps.
        ReservationInfo::new(3, job(res(1, 0), 1, 10, 4, 10, 20), 0, 3),
    ];
    admit_all(&mut plan, &infos);
    let before1 = pieces(&plan, 1);
    let before2 = pieces(&plan, 2);
    plan.set_capacity(8, 10, &res(4, 100)).expect("range");
    assert_eq!(affected(&plan), vec![3]);

    let r = replan(&mut plan, &infos, Agent::Gree);
    assert_eq!(plan.overcommitted(), None);
    assert!(r.rejected.is_empty());
    assert_eq!(r.kept, vec![1, 2]);
    assert_eq!(pieces(&plan, 1), before1);
    assert_eq!(pieces(&plan, 2), before2);
    assert_eq!(r.moved[0].allocation.work_ms(0), 20_000);

    // YARN deletes the active reservations newest first, whatever they hold: with the
    // memory-only one the newest, it goes too (and does not help).
    let mut plan = Plan::new(1000, 10, &res(10, 100)).expect("plan");
    admit_all(&mut plan, &infos);
    plan.set_capacity(8, 10, &res(4, 100)).expect("range");
    let mut yarn_infos = infos.clone();
    yarn_infos[1].submitted = 9;
    let y = replan_yarn_simple(&mut plan, &yarn_infos);
    assert_eq!(y.rejected, vec![2, 3]);
    assert_eq!(plan.overcommitted(), None);
}

#[test]
fn nothing_to_do_when_nothing_is_overcommitted() {
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    let infos = vec![ReservationInfo::new(1, job(res(1, 0), 1, 5, 0, 10, 10), 0, 1)];
    admit_all(&mut plan, &infos);
    let before = plan.clone();
    let r = replan(&mut plan, &infos, Agent::Gree);
    assert_eq!(r.strategy, "none");
    assert_eq!(r.kept, vec![1]);
    assert_eq!(r.changed(), 0);
    assert_eq!(pieces(&plan, 1), pieces(&before, 1));
}

#[test]
fn pinned_reservations_are_reported_not_touched() {
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    // Reservation 9 has no info (pinned): 6 CPU over [0, 10).
    plan.add(9, vec![Piece { start: 0, end: 10, demand: [6, 0, 0] }]).expect("room");
    let infos = vec![ReservationInfo::new(1, job(res(1, 0), 1, 4, 0, 10, 8), 0, 1)];
    admit_all(&mut plan, &infos);
    plan.set_capacity(0, 10, &res(5, 0)).expect("range");
    let r = replan(&mut plan, &infos, Agent::Gree);
    // The known reservation cannot help: the pinned one alone overcommits.
    assert_eq!(pieces(&plan, 9), vec![Piece { start: 0, end: 10, demand: [6, 0, 0] }]);
    assert!(r.overcommitted.is_some());
    assert_eq!(r.rejected, vec![1]);
    assert_eq!(r.overcommitted, plan.overcommitted());
}

#[test]
fn an_unmovable_reservation_stays_or_goes() {
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    let mut running = ReservationInfo::new(1, job(res(1, 0), 1, 5, 0, 10, 10), 9, 1);
    running.movable = false;
    let infos = vec![running, ReservationInfo::new(2, job(res(1, 0), 1, 5, 0, 10, 10), 0, 2)];
    admit_all(&mut plan, &infos);
    let before = pieces(&plan, 1);
    plan.set_capacity(8, 10, &res(5, 0)).expect("range");
    let r = replan(&mut plan, &infos, Agent::Gree);
    assert!(r.rejected.is_empty());
    assert_eq!(pieces(&plan, 1), before);
    assert_eq!(r.moved.iter().map(|m| m.id).collect::<Vec<_>>(), vec![2]);

    // Lose everything: the unmovable one cannot stay and cannot move.
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    admit_all(&mut plan, &infos);
    plan.set_capacity(8, 10, &res(0, 0)).expect("range");
    let r = replan(&mut plan, &infos, Agent::Gree);
    assert_eq!(r.rejected, vec![1]);
    assert_eq!(plan.overcommitted(), None);
}

#[test]
fn unmovable_ones_go_back_first() {
    let mut plan = Plan::new(1000, 10, &res(10, 0)).expect("plan");
    // The important one is older; the unmovable one newer and less important: both at the end.
    let mut running = ReservationInfo::new(2, job(res(1, 0), 1, 5, 0, 10, 10), 0, 2);
    running.movable = false;
    let infos = vec![ReservationInfo::new(1, job(res(1, 0), 1, 5, 0, 10, 10), 5, 1), running];
    admit_all(&mut plan, &infos);
    let before = pieces(&plan, 2);
    plan.set_capacity(8, 10, &res(5, 0)).expect("range");

    // YARN deletes the newest, the unmovable one.
    let mut yarn = plan.clone();
    assert_eq!(replan_yarn_simple(&mut yarn, &infos).rejected, vec![2]);

    // The unmovable one stays; the important one moves earlier in its window.
    let r = replan(&mut plan, &infos, Agent::Gree);
    assert!(r.rejected.is_empty(), "{r:?}");
    assert_eq!(r.strategy, "unmovable first, then move");
    assert_eq!(pieces(&plan, 2), before);
    assert_eq!(r.moved.iter().map(|m| m.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(used_cpu(&plan), vec![0, 0, 0, 0, 0, 0, 5, 5, 5, 5]);
}
