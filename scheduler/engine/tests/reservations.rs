//! The Rayon reservation system inside the engine: admission at submission, the plan follower
//! (reservation queues whose guarantee is their planned allocation), expiry to the default
//! queue, updates, deletes, restores and replanning after a node is lost. Every accepted event
//! is followed by `check_invariants()`.

use gantry_engine::{
    AppId, AppSpec, Command, Engine, EngineConfig, EngineError, Event, NodeSpec, PlanConfig, PlannedPiece,
    QueueSpec, Replanner, RequestSpec, ReservationEnd, ReservationId, ReservationRequest, Resources,
};
use gantry_rayon::rdl::parse_text;

const GIB: u64 = 1 << 30;
const PLAN: &str = "root.prod";

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

/// Four 4-core / 8 GiB nodes; `root.prod` (half, reservable) and `root.adhoc` (half).
fn engine(replanner: Replanner) -> Engine {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: PLAN.into(), guaranteed: 0.5, maximum: 1.0 },
            QueueSpec { path: "root.adhoc".into(), guaranteed: 0.5, maximum: 1.0 },
        ],
        reservations: Some(PlanConfig { replanner, ..PlanConfig::new(PLAN) }),
        ..EngineConfig::default()
    };
    let mut e = Engine::builtin(config).expect("engine");
    for i in 0..4 {
        e.handle(0, Event::NodeRegistered(node(&format!("n{i}")))).expect("node");
    }
    e
}

fn request(rdl: &str, deadline_s: u64) -> ReservationRequest {
    ReservationRequest {
        queue: PLAN.into(),
        name: "nightly".into(),
        user: "alice".into(),
        priority: 0,
        arrival_ms: None,
        deadline_ms: Some(deadline_s * 1000),
        definition: parse_text(rdl).expect("rdl"),
    }
}

fn handle(e: &mut Engine, now: u64, ev: Event) -> Vec<Command> {
    let cmds = e.handle(now, ev).expect("event accepted");
    e.state().check_invariants().expect("invariants");
    cmds
}

/// Submits and returns `(id, queue, pieces)` of the admission, panicking on a rejection.
fn admit(e: &mut Engine, now: u64, req: ReservationRequest) -> (ReservationId, String, Vec<PlannedPiece>) {
    let cmds = handle(e, now, Event::ReservationSubmitted { id: None, request: req });
    match cmds.as_slice() {
        [Command::ReservationAdmitted { reservation, queue, pieces }] => {
            (*reservation, queue.clone(), pieces.clone())
        }
        other => panic!("expected one admission, got {other:?}"),
    }
}

fn work_ms(pieces: &[PlannedPiece], bundle: &Resources) -> u64 {
    pieces.iter().map(|p| (p.end_ms - p.start_ms) * (p.resources.cpu_millis / bundle.cpu_millis)).sum()
}

fn queue(e: &Engine, path: &str) -> gantry_sdk::abi::GantryQueue {
    *e.state()
        .queues()
        .iter()
        .find(|q| e.state().str(q.name) == path)
        .unwrap_or_else(|| panic!("queue {path}"))
}

fn app(queue: &str) -> AppSpec {
    AppSpec {
        name: "job".into(),
        queue: queue.into(),
        user: "alice".into(),
        requests: vec![RequestSpec { resources: res(1000, 2), count: 2, ..Default::default() }],
        ..Default::default()
    }
}

#[test]
fn gree_places_late_and_the_follower_guarantees_the_allocation_then_expiry_moves_apps() {
    let mut e = engine(Replanner::Rayon);
    // 4 bundles of 1 core / 2 GiB for 10 s (40 bundle-seconds) between 0 and 100 s.
    let (id, q, pieces) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert_eq!(q, "root.prod.reservation_1");
    let bundle = res(1000, 2);
    assert_eq!(work_ms(&pieces, &bundle), 40_000, "{pieces:?}");
    // GREE procrastinates: everything in the last 10 s, 4 wide.
    assert_eq!(pieces, vec![PlannedPiece { start_ms: 90_000, end_ms: 100_000, resources: res(4000, 8) }]);

    // Before its allocation the reservation queue is guaranteed nothing; default gets the plan.
    handle(&mut e, 1_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, Resources::default());
    assert_eq!(queue(&e, "root.prod.default").absolute_guaranteed, res(8000, 16));
    // An app in the reservation runs (it may borrow idle plan capacity).
    let cmds = handle(&mut e, 1_000, Event::AppSubmitted(app(&q)));
    let app_id = Command::accepted_app(&cmds).expect("accepted");
    let cmds = handle(&mut e, 2_000, Event::Tick);
    assert_eq!(cmds.iter().filter(|c| matches!(c, Command::Launch { .. })).count(), 2);

    // During the allocation the queue is guaranteed exactly it; default the rest.
    handle(&mut e, 95_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, res(4000, 8));
    assert_eq!(queue(&e, "root.prod.default").absolute_guaranteed, res(4000, 8));
    assert_eq!(queue(&e, &q).used, res(2000, 4));

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
    // The reservation's queue no longer takes submissions.
    let err = e.handle(100_000, Event::AppSubmitted(app(&q))).expect_err("retired queue");
    assert!(matches!(err, EngineError::UnknownQueue(_)), "{err}");
}

#[test]
fn gree_l_is_flat_and_apps_sent_to_the_plan_queue_run_in_default() {
    let config = EngineConfig {
        queues: vec![QueueSpec { path: PLAN.into(), guaranteed: 1.0, maximum: 1.0 }],
        reservations: Some(PlanConfig { agent: gantry_rayon::agents::Agent::GreeL, ..PlanConfig::new(PLAN) }),
        ..EngineConfig::default()
    };
    let mut e = Engine::builtin(config).expect("engine");
    handle(&mut e, 0, Event::NodeRegistered(node("n0")));
    let (_, _, pieces) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    // As flat as possible: one bundle over 40 s.
    assert_eq!(work_ms(&pieces, &res(1000, 2)), 40_000);
    assert!(pieces.iter().all(|p| p.resources == res(1000, 2)), "{pieces:?}");
    let cmds = handle(&mut e, 0, Event::AppSubmitted(app(PLAN)));
    let id = Command::accepted_app(&cmds).expect("accepted");
    let i = e.state().app_index(id).expect("app");
    assert_eq!(e.state().queue_path(e.state().apps()[i as usize].queue), "root.prod.default");
}

#[test]
fn a_reservation_that_cannot_fit_is_rejected_and_changes_nothing() {
    let mut e = engine(Replanner::Rayon);
    admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 10));
    let generation = e.reservation_book().expect("book").generation();
    // The plan (8 cores) is full for the first 10 s.
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationSubmitted { id: None, request: request("atom(1c/2GiB, 1, 1, 5s, 5s)", 10) },
    );
    assert!(
        matches!(cmds.as_slice(), [Command::ReservationRejected { reason, .. }] if reason.contains("no room")),
        "{cmds:?}"
    );
    assert_eq!(e.reservation_book().expect("book").generation(), generation);
    assert_eq!(e.reservation_book().expect("book").reservations().count(), 1);
    // Bad requests are errors: a deadline before the work can finish, another queue, beyond the horizon.
    assert!(
        e.handle(
            0,
            Event::ReservationSubmitted { id: None, request: request("atom(1c/2GiB, 1, 1, 50s, 50s)", 10) }
        )
        .is_err()
    );
    let mut other = request("atom(1c/2GiB, 1, 1, 5s, 5s)", 10);
    other.queue = "root.adhoc".into();
    assert!(matches!(
        e.handle(0, Event::ReservationSubmitted { id: None, request: other }),
        Err(EngineError::UnknownQueue(_))
    ));
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationSubmitted { id: None, request: request("atom(1c/2GiB, 1, 1, 5s, 5s)", 3 * 86_400) },
    );
    assert!(
        matches!(cmds.as_slice(), [Command::ReservationRejected { reason, .. }] if reason.contains("horizon")),
        "{cmds:?}"
    );
}

#[test]
fn an_update_that_does_not_fit_moves_reservations_that_have_not_started() {
    let mut e = engine(Replanner::Rayon);
    // A: 8 bundles (the whole plan) for 10 s somewhere in [0, 100 s): GREE puts it at 90-100 s.
    let (a, _, a_pieces) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    assert_eq!(a_pieces[0].start_ms, 90_000);
    // B: 4 bundles for 10 s before 100 s: at 80-90 s.
    let (b, _, _) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    // B turns out larger: 8 bundles for 20 s, not before 80 s, so only 80-100 s will do and A
    // must move earlier.
    let mut larger = request("atom(1c/2GiB, 8, 8, 20s, 160s)", 100);
    larger.arrival_ms = Some(80_000);
    let cmds = handle(&mut e, 0, Event::ReservationUpdated { id: b, request: larger });
    let moved: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::ReservationReplanned { reservation, pieces } => Some((*reservation, pieces.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(moved.len(), 1, "{cmds:?}");
    assert_eq!(moved[0].0, a);
    assert!(moved[0].1.iter().all(|p| p.end_ms <= 80_000), "{moved:?}");
    assert!(cmds.iter().any(|c| matches!(c, Command::ReservationAdmitted { reservation, pieces, .. }
        if *reservation == b && pieces[..] == [PlannedPiece { start_ms: 80_000, end_ms: 100_000, resources: res(8000, 16) }])), "{cmds:?}");
    // An update nothing can make room for is rejected and B keeps its allocation.
    let before = e.reservation_book().expect("book").get(b).expect("b").pieces.clone();
    let cmds = handle(
        &mut e,
        0,
        Event::ReservationUpdated { id: b, request: request("atom(1c/2GiB, 1, 8, 10s, 800s)", 100) },
    );
    assert!(matches!(cmds.as_slice(), [Command::ReservationRejected { .. }]), "{cmds:?}");
    assert_eq!(e.reservation_book().expect("book").get(b).expect("b").pieces, before);
}

#[test]
fn delete_moves_apps_to_default_and_frees_the_queue_for_the_next_reservation() {
    let mut e = engine(Replanner::Rayon);
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
    let mut e = engine(Replanner::Rayon);
    let (id, q, pieces) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    let req = e.reservation_book().expect("book").get(id).expect("r").request.clone();

    let mut fresh = engine(Replanner::Rayon);
    handle(
        &mut fresh,
        5_000,
        Event::ReservationRestored { id, request: req, submit_ms: 0, pieces: pieces.clone() },
    );
    let r = fresh.reservation_book().expect("book").get(id).expect("restored");
    assert_eq!(r.pieces, pieces);
    // Its queue exists again, and a restored app of an ended reservation lands in default.
    handle(&mut fresh, 5_000, Event::AppSubmitted(app(&q)));
    let gone = Event::AppRestored {
        app: AppId(77),
        spec: app("root.prod.reservation_9"),
        state: gantry_sdk::abi::GANTRY_APP_ACCEPTED,
        failures: 0,
        submit_ms: 0,
        completed: Vec::new(),
    };
    handle(&mut fresh, 5_000, gone);
    // The plan holds it: a second reservation wanting the whole plan at 90-100 s must go earlier.
    let (_, _, p2) = admit(&mut fresh, 5_000, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    assert!(p2.iter().all(|p| p.end_ms <= 90_000 || p.resources.cpu_millis <= 4000), "{p2:?}");
    // Next ids move past the restored one.
    assert!(fresh.next_reservation_id() > id.0);
}

/// Fills the plan with reservations, loses a node, and checks the plan fits the new capacity.
fn lose_a_node(replanner: Replanner) -> (usize, usize, usize, bool) {
    let mut e = engine(replanner);
    // Eight 1-core reservations, each 1 bundle for 40 s somewhere in [0, 200 s): they fit side
    // by side (8 cores) or one after another.
    let mut ids = Vec::new();
    for k in 0..8 {
        let mut r = request("atom(1c/2GiB, 1, 1, 40s, 40s)", 200);
        r.priority = if k == 7 { 10 } else { 0 };
        ids.push(admit(&mut e, 0, r).0);
    }
    handle(&mut e, 1_000, Event::Tick);
    // A node lost: the cluster is 12 cores, the plan 6.
    let cmds = handle(&mut e, 10_000, Event::NodeLost { node: "n3".into() });
    let moved = cmds.iter().filter(|c| matches!(c, Command::ReservationReplanned { .. })).count();
    let ended: Vec<ReservationId> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::ReservationEnded { reservation, why: ReservationEnd::Replanned } => Some(*reservation),
            _ => None,
        })
        .collect();
    let book = e.reservation_book().expect("book");
    assert_eq!(book.capacity(), res(6000, 12));
    for (t, cap, used) in book.skyline(10_000, 200_000, 1_000) {
        assert!(used.fits_in(&cap), "over capacity at {t}: {used:?} > {cap:?}");
    }
    let high_priority_rejected = ended.contains(&ids[7]);
    (moved, ended.len(), book.reservations().count(), high_priority_rejected)
}

#[test]
fn rayon_replanning_moves_reservations_where_yarn_deletes_them() {
    let (moved, rejected, kept, _) = lose_a_node(Replanner::Rayon);
    // 8 × 40 core-seconds = 320 fit in 6 cores × 190 s: nothing needs rejecting.
    assert_eq!(rejected, 0);
    assert!(moved >= 2, "moved {moved}");
    assert_eq!(kept, 8);
    let (_, rejected_yarn, kept_yarn, high_priority_rejected) = lose_a_node(Replanner::YarnSimple);
    assert_eq!(rejected_yarn, 2, "YARN deletes the newest until the plan fits");
    assert_eq!(kept_yarn, 6);
    assert!(high_priority_rejected, "YARN's replanner ignores priority");
}

mod properties {
    use super::*;
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
            2 => (1u64..=60).prop_map(|s| Op::Tick { s }),
        ]
    }

    fn rdl(cores: u64, g: u32, h: u32, lease_s: u64, leases: u64) -> String {
        format!("atom({cores}c/{cores}GiB, {g}, {h}, {lease_s}s, {}s)", u64::from(g) * lease_s * leases)
    }

    /// Checks what every history must keep: allocations inside their windows and made of whole
    /// gangs, the plan within its capacity from now on, reservation queues guaranteed exactly
    /// their allocation now, the engine's own invariants.
    fn check(e: &Engine, now: u64) -> Result<(), TestCaseError> {
        e.state().check_invariants().map_err(TestCaseError::fail)?;
        let book = e.reservation_book().expect("book");
        for r in book.reservations() {
            for p in &r.pieces {
                prop_assert!(
                    r.arrival_ms <= p.start_ms && p.end_ms <= r.deadline_ms,
                    "{:?} outside [{}, {})",
                    p,
                    r.arrival_ms,
                    r.deadline_ms
                );
                prop_assert!(p.start_ms < p.end_ms);
            }
            let atoms = r.absolute_definition().atoms();
            let a = atoms[0];
            let gang = a.bundle.cpu_millis * u64::from(a.min_parallel);
            for p in r.pieces.iter().filter(|p| p.end_ms > now) {
                prop_assert!(p.resources.cpu_millis % gang == 0, "{:?} is not whole gangs of {}", p, gang);
                prop_assert!(p.resources.cpu_millis <= a.bundle.cpu_millis * u64::from(a.max_parallel));
            }
        }
        for (t, cap, used) in book.skyline(now, now + 400_000, 1_000) {
            prop_assert!(used.fits_in(&cap), "at {}: reserved {:?} over capacity {:?}", t, used, cap);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn random_histories_keep_the_plan_sound(ops in proptest::collection::vec(op(), 1..40)) {
            for replanner in [Replanner::Rayon, Replanner::YarnSimple] {
                let mut e = engine(replanner);
                let mut now = 0u64;
                let mut live: Vec<(ReservationId, ReservationRequest)> = Vec::new();
                for op in &ops {
                    let cmds = match op {
                        Op::Submit { cores, g, h, lease_s, leases, start_s, len_s, priority } => {
                            let request = ReservationRequest {
                                arrival_ms: Some(now + start_s * 1000),
                                deadline_ms: Some(now + (start_s + len_s) * 1000),
                                priority: *priority,
                                definition: parse_text(&rdl(*cores, *g, *h, *lease_s, *leases)).expect("rdl"),
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
                            let request = ReservationRequest { definition: parse_text(&text).expect("rdl"), ..old };
                            e.handle(now, Event::ReservationUpdated { id, request }).unwrap_or_default()
                        }
                        Op::Delete { k } if !live.is_empty() => {
                            let (id, _) = live.remove(k % live.len());
                            e.handle(now, Event::ReservationDeleted { id }).unwrap_or_default()
                        }
                        Op::Lose { k } => e.handle(now, Event::NodeLost { node: format!("n{k}") }).unwrap_or_default(),
                        Op::Register { k } => e.handle(now, Event::NodeRegistered(node(&format!("n{k}")))).unwrap_or_default(),
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
                    // After a cycle, each reservation queue is guaranteed its allocation now.
                    if matches!(op, Op::Tick { .. }) {
                        let book = e.reservation_book().expect("book");
                        let plan_queue = queue(&e, PLAN).absolute_guaranteed;
                        for r in book.reservations() {
                            let q = e.state().queues()[r.queue as usize];
                            let want = r.allocated_at(now);
                            prop_assert!(want.fits_in(&plan_queue) == (q.absolute_guaranteed == want),
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
}
