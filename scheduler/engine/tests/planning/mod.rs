//! Support for the reservation tests: an engine with a reservable queue and the test planner
//! (`gantry_engine::test_planner`, earliest fit) as its `reserve` policy.
#![allow(dead_code)] // each test binary uses a different subset

use gantry_engine::test_planner::{Fit, Handle, TestPlanner};
use gantry_engine::{
    AppSpec, AtomInterval, Command, Engine, EngineConfig, Event, NodeSpec, PlanConfig, Policy, Profile,
    QueueSpec, RequestSpec, ReservationId, ReservationRequest, Resources, StaticPolicy,
};
use gantry_rdl::parse_text;
use gantry_sdk::abi::GantryQueue;

pub const GIB: u64 = 1 << 30;
pub const PLAN: &str = "root.prod";

pub fn res(cpu_millis: u64, mem_gib: u64) -> Resources {
    Resources::new(cpu_millis, mem_gib * GIB, 0)
}

pub fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        rack: "r1".into(),
        labels: Vec::new(),
        capacity: res(4000, 8),
        gpu_list: Vec::new(),
    }
}

/// `root.prod` (half, reservable) and `root.adhoc` (half).
pub fn config() -> EngineConfig {
    EngineConfig {
        queues: vec![
            QueueSpec { path: PLAN.into(), guaranteed: 0.5, maximum: 1.0 },
            QueueSpec { path: "root.adhoc".into(), guaranteed: 0.5, maximum: 1.0 },
        ],
        reservations: Some(PlanConfig::new(PLAN)),
        ..EngineConfig::default()
    }
}

/// An engine of `config` with the test planner as `reserve` (policy 0) and `more` policies after
/// it, `profile` otherwise; four 4-core / 8 GiB nodes, so the plan holds 8 cores / 16 GiB.
pub fn engine_with(config: EngineConfig, more: Vec<Box<dyn Policy>>, profile: Profile) -> (Engine, Handle) {
    engine_fit(Fit::Earliest, config, more, profile)
}

/// [`engine_with`] a planner that fits as `fit` says.
pub fn engine_fit(
    fit: Fit,
    config: EngineConfig,
    more: Vec<Box<dyn Policy>>,
    profile: Profile,
) -> (Engine, Handle) {
    let (planner, handle) = match fit {
        Fit::Earliest => TestPlanner::earliest(),
        Fit::Latest => TestPlanner::latest(),
    };
    let mut policies: Vec<Box<dyn Policy>> = vec![Box::new(StaticPolicy::new(planner))];
    policies.extend(more);
    let mut e = Engine::new(config, policies, Profile { reserve: Some(0), ..profile }).expect("engine");
    for i in 0..4 {
        e.handle(0, Event::NodeRegistered(node(&format!("n{i}")))).expect("node");
    }
    (e, handle)
}

/// [`engine_with`] the default [`config`] and nothing else.
pub fn engine() -> (Engine, Handle) {
    engine_with(config(), Vec::new(), Profile::default())
}

pub fn request(rdl: &str, deadline_s: u64) -> ReservationRequest {
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

/// Applies an event that must be accepted, then checks the engine's invariants.
pub fn handle(e: &mut Engine, now: u64, ev: Event) -> Vec<Command> {
    let cmds = e.handle(now, ev).expect("event accepted");
    e.state().check_invariants().expect("invariants");
    if let Some(book) = e.reservation_book() {
        book.check().expect("the book");
    }
    cmds
}

/// Submits and returns `(id, queue, allocation)` of the admission, panicking on a rejection.
pub fn admit(
    e: &mut Engine,
    now: u64,
    req: ReservationRequest,
) -> (ReservationId, String, Vec<AtomInterval>) {
    let cmds = handle(e, now, Event::ReservationSubmitted { id: None, request: req });
    match cmds.as_slice() {
        [Command::ReservationAdmitted { reservation, queue, allocation }] => {
            (*reservation, queue.clone(), allocation.clone())
        }
        other => panic!("expected one admission, got {other:?}"),
    }
}

/// Submits and returns the rejection's reason, panicking on anything else.
pub fn rejected(e: &mut Engine, now: u64, req: ReservationRequest) -> String {
    let cmds = handle(e, now, Event::ReservationSubmitted { id: None, request: req });
    match cmds.as_slice() {
        [Command::ReservationRejected { reason, .. }] => reason.clone(),
        other => panic!("expected one rejection, got {other:?}"),
    }
}

pub fn piece(atom: u32, start_s: u64, end_s: u64, bundles: u64) -> AtomInterval {
    AtomInterval { atom, start_ms: start_s * 1000, end_ms: end_s * 1000, bundles }
}

pub fn queue(e: &Engine, path: &str) -> GantryQueue {
    *e.state()
        .queues()
        .iter()
        .find(|q| e.state().str(q.name) == path)
        .unwrap_or_else(|| panic!("queue {path}"))
}

pub fn app(queue: &str) -> AppSpec {
    AppSpec {
        name: "job".into(),
        queue: queue.into(),
        user: "alice".into(),
        requests: vec![RequestSpec { resources: res(1000, 2), count: 2, ..Default::default() }],
        ..Default::default()
    }
}

/// Every accepted reservation's id, allocation and definition, and the plan's generation: what
/// a refused answer must leave as it was.
pub fn book(e: &Engine) -> (Vec<(ReservationId, Vec<AtomInterval>, String)>, u64) {
    let b = e.reservation_book().expect("book");
    (
        b.reservations()
            .map(|r| (r.id, r.allocation.clone(), gantry_rdl::to_text(r.absolute_definition())))
            .collect(),
        b.generation(),
    )
}

/// Checks that the accepted allocations, summed from the records, fit the plan's capacity at
/// every instant from `now` on where one of them changes.
pub fn plan_fits(e: &Engine, now: u64) -> Result<(), String> {
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
