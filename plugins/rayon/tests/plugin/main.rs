//! The plugin through its `reserve` hook: the harness host lays out ABI 1.3 views and calls the
//! hook through the SDK's C glue (or directly, to read the plugin's statistics), and every answer
//! is checked the way the engine validates it (`check.rs`).

mod check;

use std::time::{Duration, Instant};

use gantry_rayon::harness::{Answer, Host, Mode};
use gantry_rayon::{
    REASON_BAD_DEFINITION, REASON_DEADLINE_PASSED, REASON_GIVEN_UP, REASON_NO_ROOM, Rayon, RayonConfig,
};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::*;
use gantry_sdk::rng::SplitMix64;
use gantry_sdk::testkit::ViewBuilder;
use gantry_sdk::{Decisions, PlanView, Plugin, View};

use check::{check_allocation, check_host, check_past};

const SEC: u64 = 1_000;
const MIN: u64 = 60_000;
const HOUR: u64 = 3_600_000;

fn cores(n: u64) -> GantryResources {
    GantryResources { cpu_millis: n * 1000, ..Default::default() }
}

/// `atom(1 core, g, h, lease, work)`, work in bundle-ms.
fn atom(g: u32, h: u32, lease_ms: u64, work: u64) -> Expr {
    Expr::Atom(Atom { bundle: cores(1), min_parallel: g, max_parallel: h, min_lease_ms: lease_ms, work })
}

fn window(start_ms: u64, end_ms: u64, inner: Expr) -> Expr {
    Expr::Window(Window { start_ms, end_ms, inner: Box::new(inner) })
}

fn host(mode: Mode, config: &str, n: u64) -> Host {
    Host::new(mode, config, cores(n), SEC, 24 * HOUR).expect("host")
}

/// Submits `inner` in `[arrival, deadline)` as the engine would lay it out.
fn submit(h: &mut Host, id: u64, arrival: u64, deadline: u64, inner: Expr) -> Answer {
    h.submit(id, window(arrival, deadline, inner), arrival, deadline, 0).expect("call")
}

fn accepted(h: &Host, id: u64) -> bool {
    h.record(id).is_some_and(|r| r.state == GANTRY_RESERVATION_ACCEPTED)
}

fn stats(h: &Host) -> gantry_rayon::Stats {
    h.plugin().expect("direct mode").stats().clone()
}

/// A random reservation inside the first four hours: an atom (malleable or a gang), an
/// `order`, an `all` or an `any`.
fn random_reservation(rng: &mut SplitMix64) -> (u64, u64, Expr) {
    let mut range = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo);
    let len = range(20, 120) * MIN;
    let start = range(0, 4 * HOUR - len);
    let one = |rng: &mut SplitMix64| {
        let mut r = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo);
        if r(0, 3) == 0 {
            let g = r(2, 5) as u32;
            let run = r(5, 20) * MIN;
            atom(g, g, run, u64::from(g) * run)
        } else {
            let lease = [SEC, MIN, 5 * MIN][r(0, 3) as usize];
            let h = r(1, 9) as u32;
            atom(1, h, lease, r(10, 60) * MIN)
        }
    };
    let kind = rng.next_u64() % 4;
    let inner = match kind {
        0 => one(rng),
        1 => Expr::Order(vec![one(rng), one(rng)]),
        2 => Expr::All(vec![one(rng), one(rng)]),
        _ => Expr::Any(vec![one(rng), one(rng)]),
    };
    (start, start + len, inner)
}

#[test]
fn admissions_answer_valid_plans_through_the_glue() {
    for config in [r#"{"agent": "gree"}"#, r#"{"agent": "gree-l"}"#] {
        let mut h = host(Mode::Glue, config, 16);
        let mut rng = SplitMix64::new(7);
        let (mut yes, mut no) = (0, 0);
        for id in 0..60 {
            let (s, e, inner) = random_reservation(&mut rng);
            let i = h.records().len() as u32;
            let a = submit(&mut h, id, s, e, inner);
            assert_eq!(a.decisions.len(), 1, "{config}: one decision, about the subject: {a:?}");
            assert_eq!(a.decisions[0].subject, i);
            match a.planned(i) {
                Some(pieces) => {
                    yes += 1;
                    assert_eq!(h.record(id).expect("accepted").allocation, pieces);
                    assert!(
                        pieces
                            .iter()
                            .all(|p| p.atom < h.record(id).map_or(0, |r| r.definition.atoms().len() as u32))
                    );
                }
                None => {
                    no += 1;
                    assert_eq!(a.rejected(i), Some(REASON_NO_ROOM), "{config}: {a:?}");
                }
            }
            check_host(&h).unwrap_or_else(|e| panic!("{config}, after reservation {id}: {e}"));
        }
        assert!(
            yes > 10 && no > 0,
            "{config}: a contended plan accepts some and rejects some ({yes} / {no})"
        );
    }
}

#[test]
fn a_restarted_instance_rebuilds_its_mirror_and_does_not_double_book() {
    let rigid = || atom(10, 10, HOUR, 10 * HOUR);
    let mut h = host(Mode::Glue, "{}", 10);
    submit(&mut h, 1, 0, HOUR, rigid());
    assert!(accepted(&h, 1));
    // The scheduler restarts: the host restores its records; the plugin is a new instance.
    h.restart(Mode::Direct, "{}").expect("restart");
    h.now_ms = 5 * SEC;
    let a = submit(&mut h, 2, 5 * SEC, HOUR, atom(1, 10, SEC, 10 * MIN));
    assert_eq!(a.rejected(1), Some(REASON_NO_ROOM), "the plan is full until 1 h: {a:?}");
    let a = submit(&mut h, 3, 5 * SEC, 2 * HOUR, rigid());
    assert!(a.planned(1).is_some(), "after 1 h there is room: {a:?}");
    check_host(&h).expect("valid");
    let s = stats(&h);
    assert_eq!((s.rebuilds, s.syncs), (1, 0), "built once from the view, then in step: {s:?}");
}

#[test]
fn the_steady_state_never_resynchronises_even_as_reservations_expire() {
    let mut h = host(Mode::Direct, "{}", 20);
    let mut rng = SplitMix64::new(3);
    for id in 0..80u64 {
        h.now_ms = id * 5 * MIN;
        h.expire();
        let (s, e, inner) = random_reservation(&mut rng);
        let now = h.now_ms;
        submit(&mut h, id, now + s, now + e, inner);
        check_host(&h).unwrap_or_else(|e| panic!("reservation {id}: {e}"));
    }
    let s = stats(&h);
    assert!(s.planned > 40, "{s:?}");
    assert_eq!(s.rebuilds, 1, "{s:?}");
    assert_eq!(s.syncs, 0, "answers accepted as given leave nothing to re-synchronise: {s:?}");
    assert_eq!(s.calls[0], 80);
}

#[test]
fn a_reservation_the_host_dropped_frees_its_room() {
    // The host refused the answer for reservation 1 (or its own replanner gave it up): it is
    // gone from the next view, and the plugin must forget what it planned for it.
    let rigid = || atom(10, 10, HOUR, 10 * HOUR);
    let mut h = host(Mode::Direct, "{}", 10);
    submit(&mut h, 1, 0, HOUR, rigid());
    assert!(h.delete(1));
    let a = submit(&mut h, 2, 0, HOUR, rigid());
    assert!(a.planned(0).is_some(), "{a:?}");
    check_host(&h).expect("valid");
    let s = stats(&h);
    assert_eq!((s.syncs, s.synced), (1, 1), "{s:?}");
}

#[test]
fn an_allocation_the_host_changed_is_followed() {
    let mut h = host(Mode::Direct, "{}", 10);
    // GREE procrastinates: the latest hour of [0, 4 h).
    submit(&mut h, 1, 0, 4 * HOUR, atom(10, 10, HOUR, 10 * HOUR));
    let old = h.record(1).expect("accepted").allocation.clone();
    assert_eq!((old[0].start_ms, old[0].end_ms), (3 * HOUR, 4 * HOUR));
    // The host did not store the plan as answered: it has it in the first hour instead.
    let moved = vec![GantryAllocation { start_ms: 0, end_ms: HOUR, ..old[0] }];
    assert!(h.set_allocation(1, moved));
    let a = submit(&mut h, 2, 0, HOUR, atom(1, 1, SEC, MIN));
    assert_eq!(a.rejected(1), Some(REASON_NO_ROOM), "the first hour is taken now: {a:?}");
    let a = submit(&mut h, 3, 3 * HOUR, 4 * HOUR, atom(10, 10, HOUR, 10 * HOUR));
    assert!(a.planned(1).is_some(), "the last hour is free now: {a:?}");
    check_host(&h).expect("valid");
    assert_eq!(stats(&h).syncs, 1);
}

#[test]
fn replan_keeps_the_past_and_places_exactly_the_work_left() {
    for config in [r#"{"replanner": "rayon"}"#, r#"{"replanner": "yarn-simple"}"#] {
        let mut h = host(Mode::Glue, config, 10);
        let def = atom(1, 10, 30 * MIN, 20 * HOUR);
        submit(&mut h, 1, 0, 8 * HOUR, def.clone());
        // Running at 10 bundles over [3.5 h, 5.5 h) (the host's record after some other move).
        let running = vec![GantryAllocation {
            reservation: 0,
            atom: 0,
            start_ms: 210 * MIN,
            end_ms: 330 * MIN,
            bundles: 10,
        }];
        assert!(h.set_allocation(1, running.clone()));
        check_host(&h).expect("valid before");
        h.now_ms = 4 * HOUR;
        h.capacity = cores(6);
        let a = h.replan().expect("replan");
        if config.contains("yarn") {
            // YARN's replanner only gives up.
            assert_eq!(a.rejected(0), Some(REASON_GIVEN_UP), "{a:?}");
            assert!(h.record(1).is_none());
            continue;
        }
        let new = a.planned(0).unwrap_or_else(|| panic!("moved: {a:?}"));
        check_past(&running, &new, h.now_ms).expect("the past is unchanged");
        check_host(&h).expect("valid after");
        // Work left, credited exactly: 5 bundle-hours done before 4 h, 15 placed after it.
        let after: u64 =
            new.iter().filter(|p| p.start_ms >= h.now_ms).map(|p| (p.end_ms - p.start_ms) * p.bundles).sum();
        assert!(
            (15 * HOUR..15 * HOUR + 2 * 30 * MIN).contains(&after),
            "{after} bundle-ms after now: {new:?}"
        );
        assert!(new.iter().all(|p| p.end_ms <= h.now_ms || p.bundles <= 6));
    }
}

#[test]
fn replan_commits_a_run_younger_than_its_lease() {
    let mut h = host(Mode::Direct, "{}", 10);
    submit(&mut h, 1, 0, 8 * HOUR, atom(1, 4, 30 * MIN, 8 * HOUR));
    // 2 is more important: when the two no longer fit together, 1 moves.
    h.submit(2, window(0, 8 * HOUR, atom(1, 6, 30 * MIN, 12 * HOUR)), 0, 8 * HOUR, 1).expect("call");
    let a_run = vec![GantryAllocation {
        reservation: 0,
        atom: 0,
        start_ms: 210 * MIN,
        end_ms: 330 * MIN,
        bundles: 4,
    }];
    let b_run =
        vec![GantryAllocation { reservation: 0, atom: 0, start_ms: 5 * HOUR, end_ms: 7 * HOUR, bundles: 6 }];
    assert!(h.set_allocation(1, a_run.clone()) && h.set_allocation(2, b_run));
    check_host(&h).expect("valid before");
    // At 3 h 45 the capacity drops to 8: 1 and 2 overlap in [5 h, 5.5 h) with 10.
    h.now_ms = 225 * MIN;
    h.capacity = cores(8);
    let a = h.replan().expect("replan");
    assert_eq!(a.decisions.len(), 1, "1 moves, 2 stays: {a:?}");
    check_host(&h).expect("valid after: no run shorter than its lease, within capacity");
    let new = a.planned(0).unwrap_or_else(|| panic!("1 moves: {a:?}"));
    check_past(&a_run, &new, h.now_ms).expect("the past is unchanged");
    // Its run began at 3.5 h: it holds its 4 bundles until 4 h at least, then the work left.
    let held_until = new.iter().filter(|p| p.start_ms <= 210 * MIN && p.bundles == 4).map(|p| p.end_ms).max();
    assert_eq!(held_until, Some(4 * HOUR), "{new:?}");
    let r = h.plugin().and_then(Rayon::last_replan).cloned().expect("report");
    assert!(r.affected >= 1 && !r.overcommitted, "{r:?}");
}

#[test]
fn update_replans_or_keeps_the_old_allocation() {
    let mut h = host(Mode::Direct, "{}", 10);
    submit(&mut h, 1, 0, 4 * HOUR, atom(1, 10, MIN, 10 * HOUR));
    let before = h.record(1).expect("accepted").allocation.clone();
    // Twice the work, still fits: a new plan.
    let a = h.update(1, window(0, 4 * HOUR, atom(1, 10, MIN, 20 * HOUR)), 4 * HOUR).expect("update");
    let new = a.planned(0).expect("planned anew");
    assert_ne!(new, before);
    check_host(&h).expect("valid");
    // Far more than the window holds: refused, and the plugin keeps the allocation it had.
    let a = h.update(1, window(0, 4 * HOUR, atom(1, 10, MIN, 50 * HOUR)), 4 * HOUR).expect("update");
    assert_eq!(a.rejected(0), Some(REASON_NO_ROOM));
    assert_eq!(h.record(1).expect("kept").allocation, new);
    let a = submit(&mut h, 2, 0, 4 * HOUR, atom(1, 10, MIN, 20 * HOUR));
    assert!(a.planned(1).is_some(), "{a:?}");
    check_host(&h).expect("valid");
    assert_eq!(stats(&h).syncs, 0, "the refused update left the mirror as the view is");
}

#[test]
fn an_update_that_does_not_fit_moves_reservations_that_have_not_started() {
    let mut h = host(Mode::Glue, "{}", 10);
    // GREE puts each as late as it can: 1 at [3 h, 4 h), 2 at [1 h, 2 h), each the whole plan.
    submit(&mut h, 1, 0, 4 * HOUR, atom(1, 10, MIN, 10 * HOUR));
    submit(&mut h, 2, 0, 2 * HOUR, atom(1, 10, MIN, 10 * HOUR));
    let before = h.record(2).expect("accepted").allocation.clone();
    // 1 now needs exactly [1 h, 2 h), where 2 is: 2 must move to [0, 1 h).
    let a = h
        .update(1, window(0, 2 * HOUR, window(HOUR, 2 * HOUR, atom(1, 10, MIN, 10 * HOUR))), 2 * HOUR)
        .expect("update");
    let one = a.planned(0).expect("the update is planned");
    let two = a.planned(1).expect("the other one moves");
    assert_eq!(one.iter().map(|p| (p.start_ms, p.end_ms)).collect::<Vec<_>>(), vec![(HOUR, 2 * HOUR)]);
    assert_ne!(two, before);
    assert!(two.iter().all(|p| p.end_ms <= HOUR), "{two:?}");
    check_host(&h).expect("valid");
    // Nothing left to move: an update that still does not fit is refused and changes nothing.
    let kept: Vec<_> = h.records().iter().map(|r| r.allocation.clone()).collect();
    let a = h.update(1, window(0, HOUR, atom(1, 10, MIN, 11 * HOUR)), HOUR).expect("update");
    assert_eq!(a.rejected(0), Some(REASON_NO_ROOM));
    assert_eq!(h.records().iter().map(|r| r.allocation.clone()).collect::<Vec<_>>(), kept);
    let a = submit(&mut h, 3, 0, 4 * HOUR, atom(1, 10, MIN, 10 * HOUR));
    assert!(a.planned(2).is_some(), "the mirror is as the view: {a:?}");
    check_host(&h).expect("valid");
}

#[test]
fn a_passed_deadline_and_a_broken_definition_are_rejected_with_their_codes() {
    let mut h = host(Mode::Glue, "{}", 10);
    h.now_ms = 2 * HOUR;
    let a = h.submit(1, window(0, HOUR, atom(1, 1, SEC, MIN)), 0, HOUR, 0).expect("call");
    assert_eq!(a.rejected(0), Some(REASON_DEADLINE_PASSED));

    // A host that broke the node layout (an unknown kind): a hand-built view.
    let mut b = ViewBuilder::new(GANTRY_HOOK_RESERVE);
    b.plan.rdl_nodes = gantry_rdl::abi::to_nodes(&window(0, HOUR, atom(1, 1, SEC, MIN))).expect("nodes");
    b.plan.rdl_nodes[1].kind = 99;
    b.reservation(5, 0, 1).window(0, HOUR);
    b.cluster = cores(10);
    (b.plan.cause, b.plan.subject, b.plan.capacity) = (GANTRY_RESERVE_ADMIT, 0, cores(10));
    (b.plan.step_ms, b.plan.horizon_ms) = (SEC, HOUR);
    let view = b.view();
    let mut p = Rayon::create("{}").expect("create");
    let mut out = Decisions::new();
    p.reserve(&view, &mut out).expect("answers");
    assert_eq!(out.as_slice().len(), 1);
    assert_eq!(
        (out.as_slice()[0].kind, out.as_slice()[0].reason),
        (GANTRY_DECISION_REJECT_RESERVATION, REASON_BAD_DEFINITION)
    );
    // A subject out of range is a failed call, not a guess.
    let view = View { plan: PlanView { subject: 3, ..view.plan }, ..view };
    assert!(p.reserve(&view, &mut Decisions::new()).unwrap_err().message.contains("subject 3"));
}

#[test]
fn a_new_origin_after_a_horizon_keeps_what_is_accepted() {
    let mut h = Host::new(Mode::Direct, "{}", cores(10), SEC, HOUR).expect("host");
    submit(&mut h, 1, 0, HOUR, atom(1, 5, MIN, 2 * HOUR));
    h.now_ms = 50 * MIN;
    submit(&mut h, 2, 50 * MIN, 110 * MIN, atom(5, 5, 30 * MIN, 5 * 60 * MIN));
    assert!(accepted(&h, 2));
    h.now_ms = 70 * MIN;
    h.expire();
    // Ten bundles would do it in 15 minutes; with 2 holding five, it takes five for 30.
    let a = submit(&mut h, 3, 70 * MIN, 110 * MIN, atom(1, 10, MIN, 5 * 30 * MIN));
    let three = a.planned(1).unwrap_or_else(|| panic!("fits beside 2: {a:?}"));
    assert!(three.iter().all(|p| p.bundles <= 5), "{three:?}");
    check_host(&h).expect("valid");
    let s = stats(&h);
    assert_eq!(s.rebuilds, 2, "a new origin once the first horizon passed: {s:?}");
}

#[test]
fn optimize_off_inline_and_background() {
    // Alone on two bundles, a malleable atom of two bundle-seconds: GREE holds both bundles in
    // the last second; the MILP prefers one bundle over the last two (milp.rs's first test).
    let small = |config: &str| {
        let mut h = Host::new(Mode::Direct, config, cores(2), SEC, 4 * SEC).expect("host");
        submit(&mut h, 1, 0, 4 * SEC, atom(1, 2, SEC, 2 * SEC));
        let r = h.record(1).expect("accepted").allocation.clone();
        assert_eq!((r[0].start_ms, r[0].end_ms, r[0].bundles), (3 * SEC, 4 * SEC, 2));
        h
    };
    let flat =
        vec![GantryAllocation { reservation: 0, atom: 0, start_ms: 2 * SEC, end_ms: 4 * SEC, bundles: 1 }];

    let mut h = small("{}");
    assert!(h.optimize().expect("call").decisions.is_empty(), "off by default");

    let mut h = small(r#"{"optimizer": "inline", "optimizer_time_limit_ms": 20000}"#);
    let a = h.optimize().expect("call");
    assert_eq!(a.planned(0), Some(flat.clone()), "{a:?}");
    check_host(&h).expect("valid");

    let mut h = small(r#"{"optimizer": "background", "optimizer_time_limit_ms": 20000}"#);
    assert!(h.optimize().expect("call").decisions.is_empty(), "the first call only starts a run");
    let t0 = Instant::now();
    let a = loop {
        let a = h.optimize().expect("call");
        if !a.decisions.is_empty() {
            break a;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no answer from the background run");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(a.planned(0), Some(flat), "{a:?}");
    check_host(&h).expect("valid");

    // A result computed on a plan that has changed since is dropped.
    let mut h = small(r#"{"optimizer": "background", "optimizer_time_limit_ms": 20000}"#);
    h.optimize().expect("call");
    h.delete(1);
    submit(&mut h, 2, 0, 4 * SEC, atom(1, 2, SEC, 2 * SEC));
    let t0 = Instant::now();
    while stats(&h).optimizer_runs == 0 {
        assert!(h.optimize().expect("call").decisions.is_empty(), "a stale result is never answered");
        assert!(t0.elapsed() < Duration::from_secs(120), "no answer from the background run");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(stats(&h).optimizer_stale, 1);
}

#[test]
fn bad_settings_are_refused_at_create_naming_the_key() {
    for (config, want) in [
        (r#"{"agent": "greedy"}"#, "`agent` must be one of gree, gree-l"),
        (r#"{"replanner": "simple"}"#, "`replanner` must be one of rayon, yarn-simple"),
        (r#"{"optimizer": "always"}"#, "`optimizer` must be one of off, inline, background"),
        (r#"{"optimizer_time_limit_ms": 0}"#, "`optimizer_time_limit_ms` must be from 1"),
        (r#"{"queue": "root.prod"}"#, "unknown setting `queue`"),
    ] {
        let e = Host::new(Mode::Glue, config, cores(1), SEC, HOUR).expect_err(config);
        assert!(e.contains(want), "{config}: {e}");
    }
    assert_eq!(RayonConfig::parse("{}").expect("defaults"), RayonConfig::default());
}

#[test]
fn every_accepted_plan_is_the_agents_own_shape() {
    // The hook's answer is what `agents::admit` places on the mirror's plan: the same pieces,
    // in engine time.
    let mut h = host(Mode::Direct, "{}", 8);
    let def = Expr::Order(vec![atom(1, 4, MIN, 60 * MIN), atom(2, 4, 10 * MIN, 40 * MIN)]);
    let a = submit(&mut h, 1, 0, 2 * HOUR, def.clone());
    let pieces = a.planned(0).expect("planned");
    let mut plan = gantry_rayon::plan::Plan::with_horizon(SEC, 48 * HOUR, &cores(8)).expect("plan");
    let alloc = gantry_rayon::agents::admit(
        &mut plan,
        &window(0, 48 * HOUR, window(0, 2 * HOUR, def.clone())),
        gantry_rayon::agents::Agent::Gree,
        1,
    )
    .expect("fits");
    let want: Vec<GantryAllocation> = alloc
        .atoms
        .iter()
        .enumerate()
        .flat_map(|(i, ivs)| {
            ivs.iter().map(move |iv| GantryAllocation {
                reservation: 0,
                atom: i as u32,
                start_ms: iv.start_ms,
                end_ms: iv.end_ms,
                bundles: iv.bundles,
            })
        })
        .collect();
    assert_eq!(pieces, want);
    check_allocation(&window(0, 2 * HOUR, def), &pieces).expect("valid");
}

#[test]
fn a_refused_move_is_noticed_though_nothing_else_changed() {
    // The host refuses an OPTIMIZE answer (nothing changes, no reservation comes or goes): the
    // next call must see that the move it answered is not in the view.
    let mut h = Host::new(Mode::Direct, r#"{"optimizer": "inline"}"#, cores(2), SEC, 4 * SEC).expect("host");
    submit(&mut h, 1, 0, 4 * SEC, atom(1, 2, SEC, 2 * SEC));
    let held = h.record(1).expect("accepted").allocation.clone();
    let a = h.call(GANTRY_RESERVE_OPTIMIZE, GANTRY_NONE).expect("call");
    assert!(a.planned(0).is_some_and(|p| p != held), "a move: {a:?}");
    // Not applied. Another reservation that fits only where 1 really is not.
    let a = submit(&mut h, 2, 2 * SEC, 3 * SEC, atom(1, 2, SEC, 2 * SEC));
    assert!(a.planned(1).is_some(), "[2 s, 3 s) is free in the host's plan: {a:?}");
    check_host(&h).expect("valid");
    assert_eq!(stats(&h).syncs, 1);
}
