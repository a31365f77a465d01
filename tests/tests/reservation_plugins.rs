//! Reservation planners loaded from their shared libraries through the real plugin host into an
//! engine (ABI 1.3, the `reserve` hook). The same tests run against both planners — the C one,
//! `plugins/examples/c/earliest_fit.c`, and the Rust Rayon one, `libgantry_rayon.so` — so each
//! proves the host accepts what a correct planner answers: a one-atom reservation, an `order`
//! chain, a gang, a rejection when nothing fits, an update, a replan after a node is lost, and the
//! follower guaranteeing each reservation's queue its allocation. Then the misbehaving test
//! plugin's answers: each refused whole and counted by reason, the planner quarantined after
//! `quarantine_after` failed calls, and nothing accepted before lost.

use gantry_engine::{
    AtomInterval, Command, Engine, EngineConfig, Event, NodeSpec, PlanConfig, Policy, Profile, QueueSpec,
    RejectReason, ReservationEnd, ReservationId, ReservationRequest, Resources,
};
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_tests::{GIB, c_plugin, rust_plugin};
use std::time::Duration;

/// The reservable queue: half of the cluster, so four 4-core / 8 GiB nodes give a plan of
/// 8 cores / 16 GiB.
const PLAN: &str = "root.prod";

/// The planners under test.
#[derive(Debug, Clone, Copy)]
enum Planner {
    /// `plugins/examples/c/earliest_fit.c`, compiled here.
    C,
    /// `libgantry_rayon.so`, built by cargo with the other plugins.
    Rayon,
}

impl Planner {
    fn load(self) -> DynamicPlugin {
        let path = match self {
            Planner::C => c_plugin("plugins/examples/c/earliest_fit.c"),
            Planner::Rayon => rust_plugin("gantry_rayon"),
        }
        .unwrap_or_else(|e| panic!("{self:?}: {e:#}"));
        DynamicPlugin::load(&path, "{}").unwrap_or_else(|e| panic!("{self:?}: {e}"))
    }
}

/// The test plugin in `mode`, answering its first `good_calls` reserve calls sanely.
fn misbehaving(mode: &str, good_calls: u32, budget: Duration) -> DynamicPlugin {
    let path = rust_plugin("gantry_testplugin").expect("build the test plugin");
    let config = format!(r#"{{"mode": "{mode}", "good_calls": {good_calls}}}"#);
    DynamicPlugin::load_budgeted(&path, &config, budget).expect("load the test plugin")
}

fn res(cpu_millis: u64, mem_gib: u64) -> Resources {
    Resources::new(cpu_millis, mem_gib * GIB, 0)
}

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        rack: "r1".into(),
        labels: Vec::new(),
        capacity: res(4000, 8),
        gpu_list: Vec::new(),
    }
}

/// An engine whose planner (`Profile::reserve`) is `planner`, quarantined after
/// `quarantine_after` failed calls in a row, with four nodes.
fn engine(planner: DynamicPlugin, quarantine_after: u32) -> Engine {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: PLAN.into(), guaranteed: 0.5, maximum: 1.0 },
            QueueSpec { path: "root.adhoc".into(), guaranteed: 0.5, maximum: 1.0 },
        ],
        reservations: Some(PlanConfig::new(PLAN)),
        quarantine_after,
        quarantine_ms: 600_000,
        ..EngineConfig::default()
    };
    let planner: Box<dyn Policy> = Box::new(planner);
    let mut e = Engine::new(config, vec![planner], Profile { reserve: Some(0), ..Profile::default() })
        .expect("engine");
    for i in 0..4 {
        handle(&mut e, 0, Event::NodeRegistered(node(&format!("n{i}"))));
    }
    e
}

/// Applies an event that must be accepted, then checks the engine's invariants.
fn handle(e: &mut Engine, now: u64, ev: Event) -> Vec<Command> {
    let cmds = e.handle(now, ev).expect("event accepted");
    e.state().check_invariants().expect("invariants");
    cmds
}

/// `rdl` (the text form) from now (or `arrival_s`) to `deadline_s`.
fn request(rdl: &str, arrival_s: Option<u64>, deadline_s: u64) -> ReservationRequest {
    ReservationRequest {
        queue: PLAN.into(),
        name: "nightly".into(),
        user: "alice".into(),
        priority: 0,
        arrival_ms: arrival_s.map(|s| s * 1000),
        deadline_ms: Some(deadline_s * 1000),
        definition: gantry_rdl::parse_text(rdl).expect("rdl"),
    }
}

/// What a submission came to: `Ok((id, queue, allocation))` or `Err(reason)`.
fn submit(
    e: &mut Engine,
    now: u64,
    req: ReservationRequest,
) -> Result<(ReservationId, String, Vec<AtomInterval>), String> {
    let cmds = handle(e, now, Event::ReservationSubmitted { id: None, request: req });
    match cmds.as_slice() {
        [Command::ReservationAdmitted { reservation, queue, allocation }] => {
            Ok((*reservation, queue.clone(), allocation.clone()))
        }
        [Command::ReservationRejected { reason, .. }] => Err(reason.clone()),
        other => panic!("expected an admission or a rejection, got {other:?}"),
    }
}

fn admit(e: &mut Engine, now: u64, req: ReservationRequest) -> (ReservationId, String, Vec<AtomInterval>) {
    submit(e, now, req).unwrap_or_else(|why| panic!("rejected: {why}"))
}

/// The host refused nothing of the planner's and never stood in for it.
fn all_answers_accepted(e: &Engine, planner: Planner) {
    assert_eq!(e.stats().rejected.total(), 0, "{planner:?}: refusals {:?}", e.stats().rejected);
    assert_eq!(e.stats().policy_failures, 0, "{planner:?}: failed calls");
    assert_eq!(e.stats().reservations.builtin, 0, "{planner:?}: the built-in stood in");
}

/// Bundle-ms of `atom` in `allocation`.
fn work(allocation: &[AtomInterval], atom: u32) -> u64 {
    allocation.iter().filter(|p| p.atom == atom).map(|p| p.bundles * (p.end_ms - p.start_ms)).sum()
}

/// Every accepted allocation together fits the plan at every instant from `now` on where one
/// of them starts.
fn plan_fits(e: &Engine, now: u64) -> Result<(), String> {
    let b = e.reservation_book().expect("book");
    let cap = b.capacity();
    let mut instants = vec![now];
    for r in b.reservations() {
        instants.extend(r.allocation.iter().map(|p| p.start_ms).filter(|&t| t > now));
    }
    for t in instants {
        let used = b.reservations().fold(Resources::default(), |acc, r| acc.plus(&r.allocated_at(t)));
        if !used.fits_in(&cap) {
            return Err(format!("at {t}: reserved {used:?} over capacity {cap:?}"));
        }
    }
    Ok(())
}

/// The guaranteed capacity of queue `path`.
fn guaranteed(e: &Engine, path: &str) -> Resources {
    let q = e.state().queues().iter().find(|q| e.state().str(q.name) == path);
    q.unwrap_or_else(|| panic!("no queue {path}")).absolute_guaranteed
}

/// Each accepted reservation and its allocation, and the plan's generation: what a refused
/// answer must leave as it was.
fn book(e: &Engine) -> (Vec<(ReservationId, Vec<AtomInterval>)>, u64) {
    let b = e.reservation_book().expect("book");
    (b.reservations().map(|r| (r.id, r.allocation.clone())).collect(), b.generation())
}

// ---- Both planners. ---------------------------------------------------------------------

fn one_atom_is_admitted_and_followed(planner: Planner) {
    let mut e = engine(planner.load(), 3);
    let (id, queue, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", None, 100));
    assert_eq!(queue, format!("{PLAN}.reservation_{}", id.0));
    assert!(!allocation.is_empty());
    assert!(allocation.iter().all(|p| p.atom == 0 && p.end_ms <= 100_000 && (1..=4).contains(&p.bundles)));
    assert!(work(&allocation, 0) >= 40_000, "{planner:?}: {allocation:?}");
    all_answers_accepted(&e, planner);
    // The follower: at each piece's start (a cycle there), the reservation's queue is guaranteed
    // exactly what its allocation holds then; after its end, nothing.
    let r = e.reservation_book().expect("book").get(id).expect("accepted").clone();
    for p in &allocation {
        handle(&mut e, p.start_ms, Event::Tick);
        assert_eq!(guaranteed(&e, &queue), r.allocated_at(p.start_ms), "{planner:?} at {}", p.start_ms);
        assert_eq!(r.allocated_at(p.start_ms), res(1000 * p.bundles, 2 * p.bundles));
    }
    let end = allocation.iter().map(|p| p.end_ms).max().unwrap_or(0);
    handle(&mut e, end + 1000, Event::Tick);
    assert_eq!(guaranteed(&e, &queue), Resources::default(), "{planner:?}: after its allocation");
}

fn an_order_chain_runs_its_parts_in_order(planner: Planner) {
    let mut e = engine(planner.load(), 3);
    let rdl =
        "order(atom(1c/2GiB, 1, 2, 5s, 10s), atom(2c/4GiB, 1, 2, 5s, 10s), atom(1c/2GiB, 1, 1, 5s, 5s))";
    let (_, _, allocation) = admit(&mut e, 0, request(rdl, None, 120));
    for atom in 0..3 {
        assert!(
            work(&allocation, atom) >= [10_000, 10_000, 5_000][atom as usize],
            "{planner:?}: {allocation:?}"
        );
    }
    let span = |atom| {
        let mine = allocation.iter().filter(move |p| p.atom == atom);
        (mine.clone().map(|p| p.start_ms).min().unwrap_or(0), mine.map(|p| p.end_ms).max().unwrap_or(0))
    };
    assert!(span(0).1 <= span(1).0 && span(1).1 <= span(2).0, "{planner:?}: {allocation:?}");
    all_answers_accepted(&e, planner);
}

fn a_gang_runs_in_whole_gangs(planner: Planner) {
    let mut e = engine(planner.load(), 3);
    let (_, _, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 4, 8, 10s, 80s)", None, 100));
    assert!(allocation.iter().all(|p| p.bundles % 4 == 0 && p.bundles <= 8), "{planner:?}: {allocation:?}");
    assert!(work(&allocation, 0) >= 80_000);
    all_answers_accepted(&e, planner);
}

fn what_cannot_fit_is_rejected(planner: Planner) {
    let mut e = engine(planner.load(), 3);
    // One bundle larger than the whole plan.
    let why = submit(&mut e, 0, request("atom(9c/2GiB, 1, 1, 1s, 1s)", None, 100)).expect_err("too big");
    assert!(why.contains("rejected it"), "{planner:?}: {why}");
    // A gang of 8 over the whole window fills the plan; then nothing more fits before 100 s.
    admit(&mut e, 0, request("atom(1c/2GiB, 8, 8, 100s, 800s)", None, 100));
    submit(&mut e, 0, request("atom(1c/2GiB, 1, 1, 1s, 1s)", None, 100)).expect_err("no room");
    assert_eq!(e.stats().reservations.rejected, 2);
    assert_eq!(e.reservation_book().expect("book").len(), 1);
    all_answers_accepted(&e, planner);
}

fn an_update_is_planned_anew(planner: Planner) {
    let mut e = engine(planner.load(), 3);
    let (id, _, _) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 1, 10s, 10s)", Some(20), 200));
    let cmds = handle(
        &mut e,
        1000,
        Event::ReservationUpdated { id, request: request("atom(1c/2GiB, 1, 2, 10s, 40s)", Some(20), 200) },
    );
    let [Command::ReservationAdmitted { reservation, allocation, .. }] = cmds.as_slice() else {
        panic!("{planner:?}: not admitted: {cmds:?}");
    };
    assert_eq!(*reservation, id);
    assert!(
        work(allocation, 0) >= 40_000 && allocation.iter().all(|p| p.start_ms >= 20_000),
        "{allocation:?}"
    );
    assert_eq!(e.reservation_book().expect("book").get(id).expect("kept").allocation, *allocation);
    all_answers_accepted(&e, planner);
}

fn a_capacity_loss_is_replanned_by_the_planner(planner: Planner) {
    let mut e = engine(planner.load(), 3);
    let mut ids = Vec::new();
    for k in 0..8 {
        ids.push(admit(&mut e, k, request("atom(1c/2GiB, 1, 1, 40s, 40s)", Some(20), 200)).0);
    }
    plan_fits(&e, 0).expect("fits");
    // Losing a node leaves 6 cores; whatever overlaps more than that is moved or given up.
    let cmds = handle(&mut e, 10_000, Event::NodeLost { node: "n3".into() });
    assert_eq!(e.reservation_book().expect("book").capacity(), res(6000, 12));
    plan_fits(&e, 10_000).unwrap_or_else(|why| panic!("{planner:?}: {why}"));
    all_answers_accepted(&e, planner);
    let ended =
        cmds.iter().filter(|c| matches!(c, Command::ReservationEnded { why: ReservationEnd::Replanned, .. }));
    assert_eq!(ended.count() + e.reservation_book().expect("book").len(), 8, "{planner:?}: {cmds:?}");
    // Each of the eight fits in [20 s, 200 s) with room to spare: a planner moves, not drops.
    assert_eq!(e.reservation_book().expect("book").len(), 8, "{planner:?}: {cmds:?}");
}

macro_rules! for_both_planners {
    ($($test:ident),* $(,)?) => {
        mod c_earliest_fit {
            $( #[test] fn $test() { super::$test(super::Planner::C) } )*
        }
        mod rayon {
            $( #[test] fn $test() { super::$test(super::Planner::Rayon) } )*
        }
    };
}

for_both_planners!(
    one_atom_is_admitted_and_followed,
    an_order_chain_runs_its_parts_in_order,
    a_gang_runs_in_whole_gangs,
    what_cannot_fit_is_rejected,
    an_update_is_planned_anew,
    a_capacity_loss_is_replanned_by_the_planner,
);

// ---- Misbehaving planners. ----------------------------------------------------------------

/// An engine whose planner is the test plugin in `mode` (sane for its first reserve call), with
/// A — the whole plan for its first 10 s — accepted at 0.
fn with_a_accepted(mode: &str, quarantine_after: u32, budget: Duration) -> (Engine, ReservationId) {
    let mut e = engine(misbehaving(mode, 1, budget), quarantine_after);
    let (id, _, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", None, 100));
    assert_eq!(allocation, vec![AtomInterval { atom: 0, start_ms: 0, end_ms: 10_000, bundles: 8 }]);
    (e, id)
}

/// A is as it was accepted, and its queue is guaranteed its allocation at 5 s.
fn a_is_intact(e: &mut Engine, a: ReservationId, before: &(Vec<(ReservationId, Vec<AtomInterval>)>, u64)) {
    assert_eq!(book(e), *before, "nothing accepted changed");
    handle(e, 5000, Event::Tick);
    assert_eq!(guaranteed(e, &format!("{PLAN}.reservation_{}", a.0)), res(8000, 16));
}

#[test]
fn each_spoilt_answer_is_refused_whole_and_counted_by_reason() {
    for (mode, rdl, reason) in [
        ("reserve-over-capacity", "atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::OverCapacity),
        ("reserve-outside-window", "atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::OutsideWindow),
        (
            "reserve-broken-order",
            "order(atom(1c/2GiB, 1, 2, 5s, 10s), atom(1c/2GiB, 1, 2, 5s, 10s))",
            RejectReason::OrderBroken,
        ),
        ("reserve-gang-size", "atom(1c/2GiB, 2, 4, 10s, 40s)", RejectReason::GangSize),
        ("reserve-bad-allocation", "atom(1c/2GiB, 1, 4, 10s, 40s)", RejectReason::BadAllocation),
    ] {
        let (mut e, a) = with_a_accepted(mode, 3, Duration::ZERO);
        let before = book(&e);
        let why = submit(&mut e, 0, request(rdl, None, 100)).expect_err(mode);
        assert!(why.contains("was refused") && why.contains(reason.as_str()), "{mode}: {why}");
        assert_eq!(e.stats().rejected.get(reason), 1, "{mode}: counted by its reason");
        assert_eq!(e.stats().rejected.total(), 1, "{mode}: and only by it {:?}", e.stats().rejected);
        assert_eq!(e.policy_status()[0].rejected.get(reason), 1, "{mode}: in the planner's record");
        assert_eq!((e.policy_status()[0].failures, e.stats().reservations.builtin), (1, 1), "{mode}");
        a_is_intact(&mut e, a, &before);
    }
}

#[test]
fn a_changed_past_is_refused() {
    // At 5 s A has run half its allocation; the spoilt OPTIMIZE answer restates A from now on.
    let (mut e, a) = with_a_accepted("reserve-past-changed", 3, Duration::ZERO);
    let before = book(&e);
    let cmds = handle(&mut e, 5000, Event::OptimizeReservations);
    assert!(cmds.is_empty(), "nothing moved: {cmds:?}");
    assert_eq!(e.stats().rejected.get(RejectReason::PastChanged), 1);
    assert_eq!(e.policy_status()[0].failures, 1);
    a_is_intact(&mut e, a, &before);
}

#[test]
fn panics_hangs_and_floods_are_failed_calls() {
    for (mode, says, budget) in [
        ("reserve-panic", "panic", Duration::ZERO),
        ("reserve-flood", "allocation slots", Duration::ZERO),
        ("reserve-hang", "budget", Duration::from_millis(200)),
    ] {
        let (mut e, a) = with_a_accepted(mode, 3, budget);
        let before = book(&e);
        let why = submit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", None, 100)).expect_err(mode);
        assert!(why.contains("failed") && why.contains(says), "{mode}: {why}");
        assert_eq!(e.policy_status()[0].failures, 1, "{mode}");
        assert_eq!(e.stats().rejected.total(), 0, "{mode}: no answer to count refusals of");
        a_is_intact(&mut e, a, &before);
    }
}

#[test]
fn a_planner_that_keeps_failing_is_quarantined_and_nothing_accepted_is_lost() {
    let (mut e, a) = with_a_accepted("reserve-over-capacity", 3, Duration::ZERO);
    let before = book(&e);
    for k in 1..=3u64 {
        submit(&mut e, k, request("atom(1c/2GiB, 1, 4, 10s, 40s)", None, 100)).expect_err("refused");
        assert_eq!(e.policy_status()[0].failures, k);
    }
    let status = &e.policy_status()[0];
    assert!(status.quarantined_until.is_some(), "quarantined after 3 failures: {status:?}");
    assert_eq!(e.stats().quarantines, 1);
    assert_eq!(e.stats().rejected.get(RejectReason::OverCapacity), 3);
    // Quarantined: the built-in answers without calling the planner.
    let why = submit(&mut e, 4, request("atom(1c/2GiB, 1, 4, 10s, 40s)", None, 100)).expect_err("built-in");
    assert!(why.contains("quarantined"), "{why}");
    assert_eq!(e.policy_status()[0].failures, 3, "not called while quarantined");
    assert_eq!(e.stats().reservations.builtin, 4);
    a_is_intact(&mut e, a, &before);
}
