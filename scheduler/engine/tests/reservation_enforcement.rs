//! How the plan follower turns an allocation into guarantees beyond the plan's exact steps
//! (issue 22, `experiments/rayon-swim`): a run that started inside its reservation's allocation
//! may finish after its piece ends, out of plan capacity no other reservation holds; and with
//! `enforce_ahead_ms`, guarantees rise before a piece starts and no allocation starts sooner
//! than that after admission.

mod planning;

use gantry_engine::{Command, EngineConfig, Event, PlanConfig, Profile, RequestSpec, Resources};
use planning::*;

/// An app in `queue` of `count` one-core containers, each expected to run `expected_ms` (0:
/// unknown).
fn job(queue: &str, count: u32, expected_ms: u64) -> gantry_engine::AppSpec {
    let request = RequestSpec { resources: res(1000, 2), count, expected_ms, ..Default::default() };
    gantry_engine::AppSpec { requests: vec![request], ..app(queue) }
}

/// Submits `spec` at `now`, runs a cycle at `now` and starts what it launched; returns how many.
fn start(e: &mut gantry_engine::Engine, now: u64, spec: gantry_engine::AppSpec) -> usize {
    handle(e, now, Event::AppSubmitted(spec));
    let cmds = handle(e, now, Event::Tick);
    let launched: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Launch { container, .. } => Some(*container),
            _ => None,
        })
        .collect();
    for &container in &launched {
        handle(e, now, Event::ContainerStarted { container });
    }
    launched.len()
}

#[test]
fn a_run_started_inside_the_allocation_may_finish_after_its_piece_ends() {
    // 2 bundles for 10 s before 100 s: earliest fit takes [0, 10).
    let (mut e, _) = engine();
    let (_, q, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    assert_eq!(allocation, vec![piece(0, 0, 10, 2)]);
    // At 5 s a task expected to run 8 s starts, and one whose run time is unknown.
    assert_eq!(start(&mut e, 5_000, job(&q, 1, 8_000)), 1);
    assert_eq!(start(&mut e, 5_000, job(&q, 1, 0)), 1);
    // The piece ends at 10 s; the known run goes on to 13 s under the guarantee (cutting it would
    // throw its work away), the unknown one is not covered.
    handle(&mut e, 10_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, res(1000, 2));
    handle(&mut e, 12_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, res(1000, 2));
    // Past its expected end it is on its own.
    handle(&mut e, 13_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, Resources::default());
}

#[test]
fn a_carried_run_never_takes_what_another_reservation_holds() {
    let (mut e, _) = engine();
    let (_, first, _) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    // The whole plan (8 cores) from 10 s: the first reservation holds [0, 10), so [10, 20).
    let (_, second, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 8, 10s, 80s)", 100));
    assert_eq!(allocation, vec![piece(0, 10, 20, 8)]);
    assert_eq!(start(&mut e, 5_000, job(&first, 2, 8_000)), 2);
    handle(&mut e, 10_000, Event::Tick);
    assert_eq!(queue(&e, &first).absolute_guaranteed, Resources::default(), "no spare plan capacity");
    assert_eq!(queue(&e, &second).absolute_guaranteed, res(8000, 16));
}

#[test]
fn a_run_that_started_before_the_allocation_is_borrowing_and_not_carried() {
    // The latest fit puts 2 bundles at [90, 100); a task started at 5 s borrows idle capacity.
    let (mut e, _) =
        engine_fit(gantry_engine::test_planner::Fit::Latest, config(), Vec::new(), Profile::default());
    let (_, q, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 2, 10s, 20s)", 100));
    assert_eq!(allocation, vec![piece(0, 90, 100, 2)]);
    assert_eq!(start(&mut e, 5_000, job(&q, 1, 200_000)), 1);
    handle(&mut e, 6_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, Resources::default());
}

#[test]
fn guarantees_rise_ahead_of_each_piece_and_no_allocation_starts_sooner_after_admission() {
    let ahead = EngineConfig {
        reservations: Some(PlanConfig { enforce_ahead_ms: 2_000, ..PlanConfig::new(PLAN) }),
        ..config()
    };
    let (mut e, _) = engine_with(ahead, Vec::new(), Profile::default());
    // Admitted at 0: room cannot be made before then, so the earliest fit starts at 2 s.
    let (_, q, allocation) = admit(&mut e, 0, request("atom(1c/2GiB, 1, 4, 10s, 40s)", 100));
    assert_eq!(allocation, vec![piece(0, 2, 12, 4)]);
    // Guaranteed from 0 already (the piece starts within 2 s), until it ends at 12 s.
    handle(&mut e, 0, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, res(4000, 8));
    handle(&mut e, 12_000, Event::Tick);
    assert_eq!(queue(&e, &q).absolute_guaranteed, Resources::default());
    // A deadline closer than the lead cannot be kept: rejected, not accepted and missed.
    let reason = rejected(&mut e, 20_000, request("atom(1c/2GiB, 1, 1, 1s, 1s)", 21));
    assert!(reason.contains("no time to make room for it"), "{reason}");
    assert!(reason.contains("its deadline is 1000 ms after its admission, within the 2000 ms"), "{reason}");
    // A deadline just past the lead, but too close for the work: the window's own reason.
    let reason = rejected(&mut e, 30_000, request("atom(1c/2GiB, 1, 1, 5s, 5s)", 36));
    assert!(
        reason.contains("no time to make room for it: allocations start 2000 ms after admission"),
        "{reason}"
    );
}
