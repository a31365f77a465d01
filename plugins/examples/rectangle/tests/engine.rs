//! The guide's planner inside the real engine: admissions one after another, a rejection when
//! the window is full, a definition it does not plan, and the follower giving the reservation's
//! queue what its rectangle holds.

use gantry_engine::{
    AtomInterval, Command, Engine, EngineConfig, Event, NodeSpec, PlanConfig, Profile, QueueSpec,
    ReservationRequest, Resources, StaticPolicy,
};
use gantry_rectangle::Rectangle;

const GIB: u64 = 1 << 30;
const HOUR: u64 = 3_600_000;

/// Two 4-core / 8 GiB nodes; `root.prod` (reservable) takes the whole cluster.
fn engine() -> Engine {
    let config = EngineConfig {
        queues: vec![QueueSpec { path: "root.prod".into(), guaranteed: 1.0, maximum: 1.0 }],
        reservations: Some(PlanConfig::new("root.prod")),
        ..EngineConfig::default()
    };
    let profile = Profile { reserve: Some(0), ..Profile::default() };
    let mut e = Engine::new(config, vec![Box::new(StaticPolicy::new(Rectangle))], profile).expect("engine");
    for name in ["n1", "n2"] {
        let node = NodeSpec {
            name: name.into(),
            rack: String::new(),
            labels: Vec::new(),
            capacity: Resources::new(4000, 8 * GIB, 0),
            gpu_list: Vec::new(),
        };
        e.handle(0, Event::NodeRegistered(node)).expect("node");
    }
    e
}

/// A reservation of `rdl` due two hours from now.
fn submit(e: &mut Engine, rdl: &str) -> Command {
    let request = ReservationRequest {
        queue: "root.prod".into(),
        name: "nightly".into(),
        user: "alice".into(),
        priority: 0,
        arrival_ms: None,
        deadline_ms: Some(2 * HOUR),
        definition: gantry_rdl::parse_text(rdl).expect("rdl"),
    };
    let mut commands = e.handle(0, Event::ReservationSubmitted { id: None, request }).expect("submitted");
    assert_eq!(commands.len(), 1, "{commands:?}");
    commands.remove(0)
}

#[test]
fn rectangles_go_where_they_fit_and_the_queue_follows_them() {
    let mut e = engine();
    // Eight 1-core bundles for 8 bundle-hours: the whole plan for an hour.
    let job = "atom(1c/1GiB, 2, 8, 1m, 8h)";
    let Command::ReservationAdmitted { queue, allocation, .. } = submit(&mut e, job) else { panic!("first") };
    assert_eq!(allocation, vec![AtomInterval { atom: 0, start_ms: 0, end_ms: HOUR, bundles: 8 }]);
    let Command::ReservationAdmitted { allocation, .. } = submit(&mut e, job) else { panic!("second") };
    assert_eq!(allocation, vec![AtomInterval { atom: 0, start_ms: HOUR, end_ms: 2 * HOUR, bundles: 8 }]);
    let Command::ReservationRejected { reason, .. } = submit(&mut e, job) else { panic!("third") };
    assert!(reason.contains("reason 2"), "{reason}");
    let Command::ReservationRejected { reason, .. } =
        submit(&mut e, "order(atom(1c, 1, 1, 1m, 1m), atom(1c, 1, 1, 1m, 1m))")
    else {
        panic!("an order")
    };
    assert!(reason.contains("reason 1"), "{reason}");

    // The follower: the first reservation's queue is guaranteed its eight cores now.
    e.handle(1, Event::Tick).expect("tick");
    let state = e.state();
    let index = (0..state.queues().len() as u32).find(|&i| state.queue_path(i) == queue).expect("its queue");
    assert_eq!(state.queues()[index as usize].absolute_guaranteed.cpu_millis, 8000);
}
