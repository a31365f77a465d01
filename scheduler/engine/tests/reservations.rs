//! Reservations in the engine with a planner plugin (the test planner, earliest fit, through
//! `StaticPolicy`): admission at submission, the plan follower (reservation queues whose
//! guarantee is their allocation now), the plan in every hook's view, expiry to the default
//! queue, updates, deletes, restores, replanning after a node is lost (by the planner, and by the
//! built-in when the planner fails), periodic optimisation. Every accepted event is followed by
//! `check_invariants()`, which checks the view's reservation arrays too.

mod planning;

use std::sync::{Arc, Mutex};

use gantry_engine::test_planner::Seen;
use gantry_engine::{
    AppId, Command, Engine, EngineConfig, EngineError, Event, PlanConfig, Profile, ReservationEnd,
    ReservationId, Resources, StaticPolicy,
};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use planning::*;

#[test]
fn the_planner_admits_at_once_and_the_follower_guarantees_the_allocation_then_expiry_moves_apps() {
    let (mut e, planner) = engine();
    // 4 bundles of 1 core / 2 GiB for 10 s (40 bundle-seconds) before 100 s: earliest fit takes
    // the first 10 s, 4 wide.
    let (id, q, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert_eq!(q, "root.prod.reservation_1");
    assert_eq!(allocation, vec![piece(0, 0, 10, 4)]);
    assert_eq!(
        planner.calls(),
        vec![Seen { cause: GANTRY_RESERVE_ADMIT, subject: Some(id.0), reservations: 1 }],
        "asked once, at once, about the new reservation"
    );
    let r = e.reservation_book().expect("book").get(id).expect("accepted");
    assert_eq!(r.pieces()[0].resources, res(4000, 8));

    // During the allocation its queue is guaranteed exactly it; default the rest of the plan.
    handle(&mut e, 1_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, res(4000, 8));
    assert_eq!(queue(&e, "root.prod.default").absolute_guaranteed, res(4000, 8));
    // An app in the reservation runs there.
    let cmds = handle(&mut e, 1_000, Event::AppSubmitted(app(&q)));
    let app_id = Command::accepted_app(&cmds).expect("accepted");
    let cmds = handle(&mut e, 2_000, Event::Tick);
    assert_eq!(cmds.iter().filter(|c| matches!(c, Command::Launch { .. })).count(), 2);
    assert_eq!(queue(&e, &q).used, res(2000, 4));

    // After it the queue is guaranteed nothing (its app may still borrow idle plan capacity).
    handle(&mut e, 20_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, Resources::default());
    assert_eq!(queue(&e, "root.prod.default").absolute_guaranteed, res(8000, 16));

    // At the deadline the reservation ends; its app (and what it holds) moves to default.
    let cmds = handle(&mut e, 100_000, Event::Tick);
    assert!(
        cmds.contains(&Command::ReservationEnded { reservation: id, why: ReservationEnd::Expired }),
        "{cmds:?}"
    );
    let i = e.state().app_index(app_id).expect("app");
    assert_eq!(e.state().queue_path(e.state().apps()[i as usize].queue), "root.prod.default");
    assert_eq!(queue(&e, "root.prod.default").used, res(2000, 4));
    assert!(e.reservation_book().expect("book").get(id).is_none());
    assert!(e.state().reservations().is_empty(), "the view no longer shows it");
    let err = e.handle(100_000, Event::AppSubmitted(app(&q))).expect_err("retired queue");
    assert!(matches!(err, EngineError::UnknownQueue(_)), "{err}");
    assert_eq!(e.stats().reservations.admitted, 1);
    assert_eq!(e.stats().reservations.expired, 1);
}

/// What a place call saw of the plan: cause, plan queue, reservations, definition nodes, pieces,
/// capacity.
type PlanSeen = (u32, u32, usize, usize, usize, GantryResources);

/// A place plugin that writes down what the plan looks like in its view.
struct PlanWatcher(Arc<Mutex<Vec<PlanSeen>>>);

impl Plugin for PlanWatcher {
    const NAME: &'static std::ffi::CStr = c"plan-watcher";
    const VERSION: &'static std::ffi::CStr = c"0";
    const HOOKS: Hooks = Hooks { admit: false, order: false, place: true, rebalance: false, reserve: false };
    fn create(_: &str) -> Result<Self, PluginError> {
        Err(PluginError::new("made by the test"))
    }
    fn place(&mut self, view: &View<'_>, _out: &mut Decisions) -> Result<(), PluginError> {
        let p = &view.plan;
        let seen = (p.cause, p.queue, p.details.len(), p.rdl_nodes.len(), p.allocations.len(), p.capacity);
        self.0.lock().map_err(|_| "poisoned")?.push(seen);
        Ok(())
    }
}

#[test]
fn every_hook_sees_the_plan_with_definitions_and_allocations() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watcher = Box::new(StaticPolicy::new(PlanWatcher(seen.clone())));
    let (mut e, _) = engine_with(config(), vec![watcher], Profile { place: Some(1), ..Profile::default() });
    admit(&mut e, 0, request("order(atom(1c/2GiB, 1, 2, 5s, 10s), atom(2c/2GiB, 1, 1, 5s, 5s))", 100));
    handle(&mut e, 0, Event::AppSubmitted(app("root.adhoc")));
    handle(&mut e, 1_000, Event::Tick);
    let seen = seen.lock().expect("lock").clone();
    let plan_queue =
        e.state().queues().iter().position(|q| e.state().str(q.name) == PLAN).expect("plan") as u32;
    // No cause outside reserve; the plan queue; one reservation, its definition
    // (window, order, two atoms) and its two pieces; the plan's capacity.
    assert_eq!(seen, vec![(0, plan_queue, 1, 4, 2, res(8000, 16))]);
    let r = &e.state().reservations()[0];
    assert_eq!((r.state, r.start_ms, r.end_ms), (GANTRY_RESERVATION_ACCEPTED, 0, 100_000));
    assert_eq!(r.resources, res(2000, 4), "the most it holds at once");
}

#[test]
fn a_reservation_that_cannot_fit_is_rejected_and_bad_requests_are_errors() {
    let (mut e, _) = engine();
    admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 10));
    let before = book(&e);
    // The plan (8 cores) is full for the first 10 s.
    let reason = rejected(&mut e, 0, request("atom(1c/2GiB, 1, 1, 5s, 5s)", 10));
    assert!(reason.contains("no room") && reason.contains("test-planner"), "{reason}");
    assert_eq!(book(&e), before, "a rejection changes nothing");
    assert_eq!(e.state().reservations().len(), 1, "the rejected one left the view");
    // Bad requests are errors: a deadline before the work can finish, another queue.
    let err = e.handle(
        0,
        Event::ReservationSubmitted { id: None, request: request("atom(1c/2GiB, 1, 1, 50s, 50s)", 10) },
    );
    assert!(matches!(err, Err(EngineError::Invalid { .. })), "{err:?}");
    let mut other = request("atom(1c/2GiB, 1, 1, 5s, 5s)", 10);
    other.queue = "root.adhoc".into();
    // Named as it is, with the queue that is reservable (the message once read "queue
    // `root.adhoc (reservations are made in `root.prod`)` does not exist").
    match e.handle(0, Event::ReservationSubmitted { id: None, request: other }) {
        Err(err @ EngineError::Invalid { .. }) => assert_eq!(
            err.to_string().split_once(": ").map(|(_, why)| why.to_owned()),
            Some("queue `root.adhoc` is not reservable: reservations are made in `root.prod`".to_owned()),
            "{err}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Beyond the horizon: rejected without asking the planner.
    let reason = rejected(&mut e, 0, request("atom(1c/2GiB, 1, 1, 5s, 5s)", 3 * 86_400));
    assert!(reason.contains("horizon"), "{reason}");
    // An id taken is refused.
    let err = e.handle(
        0,
        Event::ReservationSubmitted {
            id: Some(ReservationId(1)),
            request: request("atom(1c/1GiB, 1, 1, 1s, 1s)", 50),
        },
    );
    assert!(matches!(err, Err(EngineError::Conflict(_))), "{err:?}");
    assert_eq!(book(&e), before);
}

#[test]
fn an_update_is_planned_anew_or_refused_and_a_started_reservation_cannot_change() {
    let (mut e, planner) = engine();
    // A: the whole plan for the first 10 s. B: 4 bundles after it, 10-20 s.
    let (a, _, a_alloc) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    let (b, qb, b_alloc) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert_eq!(b_alloc, vec![piece(0, 10, 20, 4)]);
    // B turns out larger: whole gangs of 4 for 20 s.
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationUpdated { id: b, request: request("atom(1c/2GiB, 4, 4, 20s, 80s)", 100) },
    );
    assert_eq!(
        cmds,
        vec![Command::ReservationAdmitted {
            reservation: b,
            queue: qb.clone(),
            allocation: vec![piece(0, 10, 30, 4)]
        }]
    );
    assert_eq!(
        planner.calls().last().map(|c| (c.cause, c.subject)),
        Some((GANTRY_RESERVE_UPDATE, Some(b.0)))
    );
    let r = e.reservation_book().expect("book").get(b).expect("b");
    assert_eq!(r.atoms()[0].min_parallel, 4, "the new definition is kept");
    assert_eq!(e.state().queue_path(r.queue), qb, "same queue");
    // An update nothing can make room for is refused; B keeps its allocation and definition.
    let before = book(&e);
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationUpdated { id: b, request: request("atom(1c/2GiB, 1, 8, 10s, 800s)", 100) },
    );
    assert!(
        matches!(cmds.as_slice(), [Command::ReservationRejected { reason, .. }] if reason.contains("refused the update")),
        "{cmds:?}"
    );
    assert_eq!(book(&e), before);
    assert_eq!(e.reservation_book().expect("book").get(a).expect("a").allocation, a_alloc);
    // Once it has started it cannot change.
    handle(&mut e, 15_000, Event::Tick);
    let err = e.handle(
        15_000,
        Event::ReservationUpdated { id: b, request: request("atom(1c/2GiB, 1, 1, 1s, 1s)", 100) },
    );
    assert!(matches!(&err, Err(EngineError::Conflict(m)) if m.contains("started")), "{err:?}");
    let err = e.handle(
        15_000,
        Event::ReservationUpdated {
            id: ReservationId(9),
            request: request("atom(1c/2GiB, 1, 1, 1s, 1s)", 100),
        },
    );
    assert!(matches!(err, Err(EngineError::Conflict(_))), "{err:?}");
}

#[test]
fn an_update_to_smaller_bundles_frees_what_the_old_ones_held() {
    let (mut e, _) = engine();
    admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100)); // 0-10 s, the whole plan
    let (b, _, b_alloc) = admit(&mut e, 0, request("atom(4c/8GiB, 1, 1, 10s, 10s)", 100));
    let (_, _, c_alloc) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert_eq!((b_alloc, c_alloc), (vec![piece(0, 10, 20, 1)], vec![piece(0, 10, 20, 4)]), "10-20 s full");
    // B becomes four 1-core bundles where its one 4-core bundle was: it fits only if the host
    // takes back what the old definition's bundle held, not what the new one's would.
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationUpdated { id: b, request: request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100) },
    );
    assert!(
        matches!(cmds.as_slice(), [Command::ReservationAdmitted { allocation, .. }] if allocation[..] == [piece(0, 10, 20, 4)]),
        "{cmds:?}"
    );
    plan_fits(&e, 0).expect("fits");
}

#[test]
fn delete_moves_apps_to_default_and_frees_the_queue_for_the_next_reservation() {
    let (mut e, _) = engine();
    let (id, q, _) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    let cmds = handle(&mut e, 0, Event::AppSubmitted(app(&q)));
    let app_id = Command::accepted_app(&cmds).expect("app");
    handle(&mut e, 1_000, Event::Tick);
    let cmds = handle(&mut e, 2_000, Event::ReservationDeleted { id });
    assert_eq!(cmds, vec![Command::ReservationEnded { reservation: id, why: ReservationEnd::Deleted }]);
    let i = e.state().app_index(app_id).expect("app");
    assert_eq!(e.state().queue_path(e.state().apps()[i as usize].queue), "root.prod.default");
    let queues = e.state().queues().len();
    let (_, q2, _) = admit(&mut e, 2_000, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    assert_eq!(q2, "root.prod.reservation_2");
    assert_eq!(e.state().queues().len(), queues, "the retired queue is reused");
    assert!(e.handle(2_000, Event::ReservationDeleted { id }).is_err(), "deleted twice");
}

#[test]
fn a_restored_reservation_keeps_its_allocation_and_its_apps() {
    let (mut e, _) = engine();
    let (id, q, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    let req = e.reservation_book().expect("book").get(id).expect("r").request.clone();

    let (mut fresh, planner) = engine();
    let restore =
        |allocation| Event::ReservationRestored { id, request: req.clone(), submit_ms: 0, allocation };
    // A piece of an atom the definition lacks: refused, nothing changed.
    let err = fresh.handle(5_000, restore(vec![piece(3, 0, 10, 1)])).expect_err("bad atom");
    assert!(matches!(err, EngineError::Invalid { .. }), "{err}");
    assert!(fresh.state().reservations().is_empty());
    handle(&mut fresh, 5_000, restore(allocation.clone()));
    let r = fresh.reservation_book().expect("book").get(id).expect("restored");
    assert_eq!(r.allocation, allocation);
    assert!(planner.calls().is_empty(), "a restore is not planned again");
    // Its queue exists again, and a restored app of an ended reservation lands in default.
    handle(&mut fresh, 5_000, Event::AppSubmitted(app(&q)));
    let gone = Event::AppRestored {
        app: AppId(77),
        spec: app("root.prod.reservation_9"),
        state: GANTRY_APP_ACCEPTED,
        failures: 0,
        submit_ms: 0,
        completed: Vec::new(),
    };
    handle(&mut fresh, 5_000, gone);
    // The plan holds it: another reservation wanting the whole plan goes after it.
    let (_, _, p2) = admit(&mut fresh, 5_000, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    assert_eq!(p2, vec![piece(0, 10, 20, 8)]);
    assert!(fresh.next_reservation_id() > id.0);
    // One whose deadline passed meanwhile ends at once.
    let (mut late, _) = engine();
    let cmds =
        handle(&mut late, 200_000, Event::ReservationRestored { id, request: req, submit_ms: 0, allocation });
    assert_eq!(cmds, vec![Command::ReservationEnded { reservation: id, why: ReservationEnd::Expired }]);
}

/// Eight 1-core reservations of 40 s in `[20 s, 200 s)`, side by side at 20-60 s; then a node
/// is lost at 10 s, so the plan has 6 cores. Returns the engine, the ids and the loss's commands.
fn lose_a_node(e: &mut Engine) -> (Vec<ReservationId>, Vec<Command>) {
    let mut ids = Vec::new();
    for k in 0..8 {
        let mut r = request("atom(1c/2GiB, 1, 1, 40s, 40s)", 200);
        r.arrival_ms = Some(20_000);
        r.priority = if k == 7 { 10 } else { 0 };
        let (id, _, allocation) = admit(e, k, r);
        assert_eq!(allocation, vec![piece(0, 20, 60, 1)]);
        ids.push(id);
    }
    handle(e, 1_000, Event::Tick);
    let cmds = handle(e, 10_000, Event::NodeLost { node: "n3".into() });
    assert_eq!(e.reservation_book().expect("book").capacity(), res(6000, 12));
    plan_fits(e, 10_000).expect("the plan fits after the replan");
    (ids, cmds)
}

fn ended(cmds: &[Command]) -> Vec<ReservationId> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::ReservationEnded { reservation, why: ReservationEnd::Replanned } => Some(*reservation),
            _ => None,
        })
        .collect()
}

#[test]
fn after_a_capacity_loss_the_planner_moves_what_no_longer_fits() {
    let (mut e, planner) = engine();
    let (ids, cmds) = lose_a_node(&mut e);
    assert_eq!(planner.calls().last().map(|c| c.cause), Some(GANTRY_RESERVE_REPLAN));
    let moved: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::ReservationReplanned { reservation, allocation } => {
                Some((*reservation, allocation.clone()))
            }
            _ => None,
        })
        .collect();
    // Oldest first keep their place; the two newest move after them.
    assert_eq!(moved, vec![(ids[6], vec![piece(0, 60, 100, 1)]), (ids[7], vec![piece(0, 60, 100, 1)])]);
    assert!(ended(&cmds).is_empty());
    assert_eq!(e.stats().reservations.moved, 2);
    assert_eq!(e.stats().reservations.builtin, 0);
}

#[test]
fn when_the_planner_fails_to_replan_yarns_simple_replanner_gives_up_the_newest() {
    use gantry_engine::test_planner::Mode;
    // The planner fails: the built-in gives up the newest until the plan fits, priority or not.
    let (mut e, planner) = engine();
    let mut ids = Vec::new();
    for k in 0..8 {
        let mut r = request("atom(1c/2GiB, 1, 1, 40s, 40s)", 200);
        r.arrival_ms = Some(20_000);
        r.priority = if k == 7 { 10 } else { 0 };
        ids.push(admit(&mut e, k, r).0);
    }
    planner.set(Mode::Fail);
    let cmds = handle(&mut e, 10_000, Event::NodeLost { node: "n3".into() });
    assert_eq!(ended(&cmds), vec![ids[7], ids[6]], "newest first, priority ignored");
    plan_fits(&e, 10_000).expect("fits");
    assert_eq!(e.reservation_book().expect("book").len(), 6);
    assert_eq!((e.stats().reservations.builtin, e.stats().policy_failures), (1, 1));
    assert_eq!(e.stats().reservations.replan_rejected, 2);

    // An answer that leaves the plan over capacity (here: none at all) is refused the same way.
    let (mut e, planner) = engine();
    for k in 0..8 {
        let mut r = request("atom(1c/2GiB, 1, 1, 40s, 40s)", 200);
        r.arrival_ms = Some(20_000);
        admit(&mut e, k, r);
    }
    planner.set(Mode::Silent);
    let cmds = handle(&mut e, 10_000, Event::NodeLost { node: "n3".into() });
    assert_eq!(ended(&cmds).len(), 2);
    assert_eq!(e.stats().rejected.get(gantry_engine::RejectReason::OverCapacity), 1);
    plan_fits(&e, 10_000).expect("fits");
}

#[test]
fn capacity_that_comes_back_is_not_a_loss_and_replans_nothing() {
    let (mut e, planner) = engine();
    let (_, cmds) = lose_a_node(&mut e);
    assert!(!cmds.is_empty());
    let calls = planner.calls().len();
    handle(&mut e, 11_000, Event::NodeRegistered(node("n3")));
    assert_eq!(e.reservation_book().expect("book").capacity(), res(8000, 16));
    // A loss that leaves the plan fitting asks nothing either.
    handle(&mut e, 12_000, Event::NodeLost { node: "n3".into() });
    assert_eq!(planner.calls().len(), calls);
}

#[test]
fn the_planner_optimises_periodically_and_when_asked() {
    let config = EngineConfig {
        reservations: Some(PlanConfig { optimize_interval_ms: 10_000, ..PlanConfig::new(PLAN) }),
        ..config()
    };
    let (mut e, planner) = engine_with(config, Vec::new(), Profile::default());
    handle(&mut e, 0, Event::Tick);
    assert!(planner.calls().is_empty(), "nothing to optimise in an empty plan");
    let mut later = request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100);
    later.arrival_ms = Some(50_000);
    let (id, _, _) = admit(&mut e, 0, later);
    // On OPTIMIZE this planner moves every reservation 1 s later.
    planner.tamper(|view, out| {
        if view.plan.cause != GANTRY_RESERVE_OPTIMIZE {
            return;
        }
        for i in 0..view.reservations.len() {
            let moved = view.plan.allocation(i).iter().map(|p| GantryAllocation {
                start_ms: p.start_ms + 1_000,
                end_ms: p.end_ms + 1_000,
                ..*p
            });
            out.plan_reservation(i as u32, moved);
        }
    });
    // Not due again before the interval; a client may ask at any time.
    assert!(handle(&mut e, 500, Event::Tick).is_empty());
    let cmds = handle(&mut e, 900, Event::OptimizeReservations);
    assert_eq!(
        cmds,
        vec![Command::ReservationReplanned { reservation: id, allocation: vec![piece(0, 51, 61, 4)] }]
    );
    let cmds = handle(&mut e, 10_000, Event::Tick);
    assert_eq!(
        cmds,
        vec![Command::ReservationReplanned { reservation: id, allocation: vec![piece(0, 52, 62, 4)] }]
    );
    let optimize = planner.calls().iter().filter(|c| c.cause == GANTRY_RESERVE_OPTIMIZE).count();
    assert_eq!(optimize, 2);
}

#[test]
fn without_a_planner_reservations_are_a_clear_error() {
    // A plan but no planner, or neither: the same error, nothing changed.
    let with_plan = Engine::builtin(config()).expect("engine");
    let without = Engine::builtin(EngineConfig::default()).expect("engine");
    for mut e in [with_plan, without] {
        for ev in [
            Event::ReservationSubmitted { id: None, request: request("atom(1c/1GiB, 1, 1, 1s, 1s)", 10) },
            Event::ReservationUpdated {
                id: ReservationId(1),
                request: request("atom(1c/1GiB, 1, 1, 1s, 1s)", 10),
            },
            Event::OptimizeReservations,
        ] {
            let err = e.handle(0, ev).expect_err("no planner");
            assert_eq!(err, EngineError::NoReservationPlanner);
            assert!(err.to_string().contains("no reservation planner is configured"), "{err}");
        }
    }
    // A planner without a plan, or a `reserve` policy that does not plan: refused at construction.
    let (planner, _) = gantry_engine::test_planner::TestPlanner::earliest();
    let err = Engine::new(
        EngineConfig::default(),
        vec![Box::new(StaticPolicy::new(planner))],
        Profile { reserve: Some(0), ..Profile::default() },
    )
    .expect_err("no reservable queue");
    assert!(err.to_string().contains("[reservations]"), "{err}");
    let err = Engine::new(
        config(),
        vec![Box::new(StaticPolicy::new(PlanWatcher(Arc::default())))],
        Profile { reserve: Some(0), ..Profile::default() },
    )
    .expect_err("no reserve hook");
    assert!(err.to_string().contains("does not implement"), "{err}");
}

#[test]
fn a_planner_may_move_others_to_make_room_and_every_move_is_reported() {
    let (mut e, planner) = engine();
    let (a, _, _) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    // On ADMIT this planner moves A 10 s later and puts the newcomer first.
    planner.tamper(move |view, out| {
        if view.plan.cause != GANTRY_RESERVE_ADMIT {
            return;
        }
        out.clear();
        let s = view.plan.subject;
        let other = if s == 0 { 1 } else { 0 };
        out.plan_reservation(
            other,
            [GantryAllocation { reservation: 0, atom: 0, start_ms: 10_000, end_ms: 20_000, bundles: 8 }],
        );
        out.plan_reservation(
            s,
            [GantryAllocation { reservation: 0, atom: 0, start_ms: 0, end_ms: 10_000, bundles: 8 }],
        );
    });
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationSubmitted { id: None, request: request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100) },
    );
    let b = ReservationId(2);
    assert_eq!(
        cmds,
        vec![
            Command::ReservationAdmitted {
                reservation: b,
                queue: "root.prod.reservation_2".into(),
                allocation: vec![piece(0, 0, 10, 8)]
            },
            Command::ReservationReplanned { reservation: a, allocation: vec![piece(0, 10, 20, 8)] },
        ]
    );
    plan_fits(&e, 0).expect("fits");
}

mod properties {
    use super::*;
    use gantry_engine::ReservationRequest;
    use gantry_engine::test_planner::{Fit, Mode};
    use proptest::prelude::*;

    /// One step of a random history.
    #[derive(Debug, Clone)]
    enum Op {
        /// A reservation: bundle cores, g, h, lease s, work in gang-leases, window start and
        /// length in s (from now), priority.
        Submit {
            cores: u64,
            g: u32,
            h: u32,
            lease_s: u64,
            leases: u64,
            start_s: u64,
            len_s: u64,
            priority: i32,
        },
        /// Update the k-th live reservation with a bigger or smaller copy of itself.
        Update {
            k: usize,
            leases: u64,
        },
        /// Delete the k-th live reservation.
        Delete {
            k: usize,
        },
        /// Lose node k (of four), or bring it back.
        Lose {
            k: usize,
        },
        Register {
            k: usize,
        },
        /// The planner misbehaves (0 good, 1 fails, 2 silent, 3 over-allocates, 4 moves into the past).
        Planner {
            mode: u8,
        },
        /// Time passes.
        Tick {
            s: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..=3, 1u32..=2, 1u32..=4, 1u64..=20, 1u64..=6, 0u64..=100, 10u64..=300, 0i32..=2)
                .prop_map(|(cores, g, h, lease_s, leases, start_s, len_s, priority)| Op::Submit {
                    cores, g, h: h.max(g), lease_s, leases, start_s, len_s, priority
                }),
            1 => (0usize..8, 1u64..=6).prop_map(|(k, leases)| Op::Update { k, leases }),
            1 => (0usize..8).prop_map(|k| Op::Delete { k }),
            1 => (0usize..4).prop_map(|k| Op::Lose { k }),
            1 => (0usize..4).prop_map(|k| Op::Register { k }),
            1 => (0u8..5).prop_map(|mode| Op::Planner { mode }),
            2 => (1u64..=60).prop_map(|s| Op::Tick { s }),
        ]
    }

    fn rdl(cores: u64, g: u32, h: u32, lease_s: u64, leases: u64) -> String {
        format!("atom({cores}c/{cores}GiB, {g}, {h}, {lease_s}s, {}s)", u64::from(g) * lease_s * leases)
    }

    fn mode(m: u8) -> Mode {
        match m {
            1 => Mode::Fail,
            2 => Mode::Silent,
            3 => Mode::Tamper(Box::new(|_, out| {
                let pieces: Vec<GantryAllocation> = out
                    .allocations()
                    .iter()
                    .map(|p| GantryAllocation { bundles: p.bundles * 8, ..*p })
                    .collect();
                let decisions = out.as_slice().to_vec();
                out.clear();
                out.extend_from_slice(&decisions);
                out.extend_allocations(&pieces);
            })),
            4 => Mode::Tamper(Box::new(|view, out| {
                for i in 0..view.reservations.len() {
                    let back = view.plan.allocation(i).iter().map(|p| GantryAllocation {
                        start_ms: p.start_ms.saturating_sub(5_000),
                        end_ms: p.end_ms.saturating_sub(5_000).max(p.start_ms.saturating_sub(5_000) + 1),
                        ..*p
                    });
                    out.plan_reservation(i as u32, back);
                }
            })),
            _ => Mode::Plan,
        }
    }

    /// What every history must keep: allocations inside their windows and made of whole gangs
    /// from now on, the plan within its capacity from now on, the engine's own invariants.
    fn check(e: &Engine, now: u64) -> Result<(), TestCaseError> {
        e.state().check_invariants().map_err(TestCaseError::fail)?;
        let book = e.reservation_book().expect("book");
        book.check().map_err(TestCaseError::fail)?;
        for r in book.reservations() {
            let a = r.atoms()[0];
            for p in &r.allocation {
                prop_assert!(
                    r.arrival_ms <= p.start_ms && p.end_ms <= r.deadline_ms,
                    "{:?} outside its window",
                    p
                );
                prop_assert!(p.start_ms < p.end_ms && p.bundles > 0);
                if p.end_ms > now {
                    prop_assert!(
                        p.bundles % u64::from(a.min_parallel) == 0 && p.bundles <= u64::from(a.max_parallel)
                    );
                }
            }
        }
        plan_fits(e, now).map_err(TestCaseError::fail)?;
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn random_histories_keep_the_plan_sound(ops in proptest::collection::vec(op(), 1..40), late in any::<bool>()) {
            let fit = if late { Fit::Latest } else { Fit::Earliest };
            let (mut e, planner) = engine_fit(fit, config(), Vec::new(), Profile::default());
            let mut now = 0u64;
            let mut live: Vec<(ReservationId, ReservationRequest)> = Vec::new();
            for op in &ops {
                let cmds = match op {
                    Op::Submit { cores, g, h, lease_s, leases, start_s, len_s, priority } => {
                        let request = ReservationRequest {
                            arrival_ms: Some(now + start_s * 1000),
                            deadline_ms: Some(now + (start_s + len_s) * 1000),
                            priority: *priority,
                            definition: gantry_rdl::parse_text(&rdl(*cores, *g, *h, *lease_s, *leases)).expect("rdl"),
                            ..request("atom(1c/1GiB, 1, 1, 1s, 1s)", 1)
                        };
                        match e.handle(now, Event::ReservationSubmitted { id: None, request: request.clone() }) {
                            Ok(cmds) => {
                                if let Some(Command::ReservationAdmitted { reservation, .. }) = cmds.first() {
                                    live.push((*reservation, request));
                                }
                                cmds
                            }
                            // A window too short for the work: refused, nothing changed.
                            Err(_) => Vec::new(),
                        }
                    }
                    Op::Update { k, leases } if !live.is_empty() => {
                        let (id, old) = live[k % live.len()].clone();
                        let a = old.definition.atoms()[0];
                        let text = rdl(a.bundle.cpu_millis / 1000, a.min_parallel, a.max_parallel, a.min_lease_ms / 1000, *leases);
                        let request = ReservationRequest { definition: gantry_rdl::parse_text(&text).expect("rdl"), ..old };
                        let cmds = e.handle(now, Event::ReservationUpdated { id, request: request.clone() }).unwrap_or_default();
                        if cmds.iter().any(|c| matches!(c, Command::ReservationAdmitted { reservation, .. } if *reservation == id)) {
                            live.iter_mut().filter(|(x, _)| *x == id).for_each(|(_, r)| *r = request.clone());
                        }
                        cmds
                    }
                    Op::Delete { k } if !live.is_empty() => {
                        let (id, _) = live.remove(k % live.len());
                        e.handle(now, Event::ReservationDeleted { id }).unwrap_or_default()
                    }
                    Op::Lose { k } => e.handle(now, Event::NodeLost { node: format!("n{k}") }).unwrap_or_default(),
                    Op::Register { k } => e.handle(now, Event::NodeRegistered(node(&format!("n{k}")))).unwrap_or_default(),
                    Op::Planner { mode: m } => {
                        planner.set(mode(*m));
                        Vec::new()
                    }
                    Op::Tick { s } => {
                        now += s * 1000;
                        e.handle(now, Event::Tick).unwrap_or_default()
                    }
                    _ => Vec::new(),
                };
                for c in &cmds {
                    if let Command::ReservationEnded { reservation, .. } = c {
                        live.retain(|(id, _)| id != reservation);
                    }
                }
                check(&e, now)?;
                // After a cycle, each reservation queue is guaranteed its allocation now (as
                // much of it as the plan queue has).
                if matches!(op, Op::Tick { .. }) {
                    let book = e.reservation_book().expect("book");
                    let plan_queue = queue(&e, PLAN).absolute_guaranteed;
                    for r in book.reservations() {
                        let q = e.state().queues()[r.queue as usize];
                        let want = r.allocated_at(now);
                        prop_assert!(!want.fits_in(&plan_queue) || q.absolute_guaranteed == want,
                            "queue of {:?} guaranteed {:?}, allocation {:?}", r.id, q.absolute_guaranteed, want);
                    }
                }
            }
            let ids: Vec<_> = e.reservation_book().expect("book").reservations().map(|r| r.id).collect();
            let mut expected: Vec<_> = live.iter().map(|(id, _)| *id).collect();
            expected.sort();
            prop_assert_eq!(ids, expected, "the book holds exactly the reservations not ended");
        }
    }
}
