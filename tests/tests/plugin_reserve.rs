//! The plugin host's `reserve` path (ABI 1.3), through real shared libraries called directly (no
//! engine): the allocation buffer offered in reserve calls only, grown once on request, the
//! protocol violations around it, the limit on pieces, the whole plan reaching a budgeted call,
//! and panics and hangs in `reserve`.

use gantry_engine::{Policy, PolicyError, hook_name};
use gantry_scheduler::plugin_host::{DynamicPlugin, inspect};
use gantry_sdk::Decisions;
use gantry_sdk::abi::*;
use gantry_tests::plan::PlanFixture;
use gantry_tests::{SyntheticCluster, c_plugin, rust_plugin};
use std::time::Duration;

/// The budget of budgeted calls: generous, since these calls must finish (except `hang`).
const BUDGET: Duration = Duration::from_secs(30);
/// Allocation slots the host offers on a first reserve call (instance.rs).
const INITIAL_ALLOCATIONS: usize = 1024;

fn lies(mode: &str, budget: Duration) -> DynamicPlugin {
    let path = c_plugin("tests/c/reserve_lies.c").expect("compile");
    DynamicPlugin::load_budgeted(&path, &format!(r#"{{"mode": "{mode}"}}"#), budget).expect("load")
}

fn test_plugin(mode: &str, budget: Duration) -> DynamicPlugin {
    let path = rust_plugin("gantry_testplugin").expect("build test plugin");
    DynamicPlugin::load_budgeted(&path, &format!(r#"{{"mode": "{mode}"}}"#), budget).expect("load")
}

/// A plan with one accepted reservation and a new one (the subject of an ADMIT).
fn small_plan() -> (PlanFixture, u32) {
    let mut plan = PlanFixture::new(10);
    plan.add("atom(1c, 1, 4, 1s, 8s)", 0, 60_000, 1, &[(0, 1000, 3000, 4)]);
    let subject = plan.add("order(atom(1c, 1, 2, 1s, 2s), atom(2c, 2, 2, 1s, 4s))", 0, 60_000, 0, &[]);
    (plan, subject)
}

#[test]
fn the_allocation_buffer_grows_once_when_a_plugin_asks() {
    let (plan, s) = small_plan();
    for budget in [Duration::ZERO, BUDGET] {
        let mut p = lies("grow", budget);
        let mut out = Decisions::new();
        p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out).expect("call");
        let want = INITIAL_ALLOCATIONS + 100;
        assert_eq!(out.allocations().len(), want, "budget {budget:?}");
        for (i, piece) in out.allocations().iter().enumerate() {
            let i = i as u64;
            assert_eq!(
                *piece,
                GantryAllocation { reservation: s, atom: 0, start_ms: i, end_ms: i + 1, bundles: 1 }
            );
        }
        assert_eq!(out.as_slice().len(), 1);
        assert_eq!(out.as_slice()[0].kind, GANTRY_DECISION_PLAN_RESERVATION);
        // The grown buffer is kept: the next call is offered 1124 slots, and the plugin, which
        // always asks for 100 more than it is offered, is served again.
        let mut again = Decisions::new();
        p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut again).expect("second call");
        assert_eq!(again.allocations().len(), want + 100);
    }
}

#[test]
fn the_decision_buffer_grows_in_a_reserve_call_too() {
    let (plan, s) = small_plan();
    let mut p = lies("grow-decisions", Duration::ZERO);
    let mut out = Decisions::new();
    p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out).expect("call");
    assert_eq!(out.as_slice().len(), 257, "one more than the 256 offered");
    assert!(out.allocations().is_empty());
}

#[test]
fn lies_about_the_allocation_buffer_are_protocol_violations() {
    let (plan, s) = small_plan();
    for (mode, says) in [
        ("same-size", "256 decision slots (offered 256, limit 4100) and 1024 allocation slots (offered 1024"),
        ("full-twice", "1026 allocation slots (offered 1025"),
        ("over-limit", "1099511627776 allocation slots (offered 1024"),
        ("len-over", "wrote 1025 allocation pieces into a buffer of 1024"),
    ] {
        for budget in [Duration::ZERO, BUDGET] {
            let mut p = lies(mode, budget);
            let mut out = Decisions::new();
            let err = p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out).expect_err(mode);
            let PolicyError::Protocol(msg) = &err else { panic!("{mode}: not a protocol error: {err:?}") };
            assert!(msg.contains(says), "{mode}: {msg}");
            assert!(out.is_empty() && out.allocations().is_empty(), "{mode}: nothing of it is kept");
        }
    }
}

#[test]
fn the_allocation_buffer_is_offered_in_reserve_calls_only() {
    let (plan, s) = small_plan();
    let mut p = lies("probe", Duration::ZERO);
    let message = |p: &mut DynamicPlugin, view| match p.call(&view, &mut Decisions::new()) {
        Err(PolicyError::Failed(msg)) => msg,
        other => panic!("not the probe's failure: {other:?}"),
    };
    let reserve = message(&mut p, plan.view(7, GANTRY_RESERVE_ADMIT, s));
    assert!(
        reserve.contains(&format!(
            "hook=5 out=96 allocations_capacity={INITIAL_ALLOCATIONS} allocations_null=0 cause=1 subject={s} \
             plan_queue=0 plan_cpu=10000 step=1000 horizon=86400000 details=2 nodes=6 pieces=1"
        )),
        "{reserve}"
    );
    let cluster = SyntheticCluster::new(4, 2);
    let place = message(&mut p, cluster.view());
    assert!(place.contains("hook=3 out=96 allocations_capacity=0 allocations_null=1 cause=0"), "{place}");
}

#[test]
fn an_answer_with_too_many_pieces_is_refused() {
    let (plan, s) = small_plan();
    for budget in [Duration::ZERO, BUDGET] {
        let mut p = test_plugin("reserve-flood", budget);
        let mut out = Decisions::new();
        let err = p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out).expect_err("flood");
        // 2 × (1 piece + 64 × 3 atoms) + 262,144.
        let limit = 2 * (1 + 64 * 3) + 262_144;
        let PolicyError::Protocol(msg) = &err else { panic!("not a protocol error: {err:?}") };
        assert!(msg.contains(&format!("allocation slots (offered 1024, limit {limit})")), "{msg}");
        assert!(out.is_empty() && out.allocations().is_empty());
    }
    // The same plugin's sane answer in a sane mode passes the host untouched.
    let mut p = test_plugin("ok", Duration::ZERO);
    let mut out = Decisions::new();
    p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out).expect("sane");
    assert_eq!(out.allocations().len(), 2);
}

/// What the `checksum` test plugin answers for `view` with `budget`: the checksum of what it saw.
fn checksum(view: &gantry_sdk::View<'_>, budget: Duration) -> String {
    match test_plugin("checksum", budget).call(view, &mut Decisions::new()) {
        Err(PolicyError::Failed(msg)) => msg,
        other => panic!("not a checksum: {other:?}"),
    }
}

#[test]
fn a_budgeted_reserve_call_sees_the_whole_plan() {
    let (plan, s) = small_plan();
    let view = plan.view(500, GANTRY_RESERVE_UPDATE, s);
    let direct = checksum(&view, Duration::ZERO);
    assert_eq!(checksum(&view, BUDGET), direct, "the copy shows what the engine's arrays show");
    // Each part of the plan is in the checksum, so the copy carries each.
    let mut changed = plan.clone();
    changed.allocations[0].bundles = 3;
    assert_ne!(checksum(&changed.view(500, GANTRY_RESERVE_UPDATE, s), BUDGET), direct, "allocations");
    let mut changed = plan.clone();
    changed.nodes[4].work += 1;
    assert_ne!(checksum(&changed.view(500, GANTRY_RESERVE_UPDATE, s), BUDGET), direct, "definitions");
    let mut changed = plan.clone();
    changed.details[0].priority = 9;
    assert_ne!(checksum(&changed.view(500, GANTRY_RESERVE_UPDATE, s), BUDGET), direct, "details");
    assert_ne!(checksum(&plan.view(500, GANTRY_RESERVE_ADMIT, s), BUDGET), direct, "the cause");
    let mut changed = plan.clone();
    changed.capacity.gpus = 1;
    assert_ne!(checksum(&changed.view(500, GANTRY_RESERVE_UPDATE, s), BUDGET), direct, "the capacity");

    // A planner's answer, which depends on the whole plan, is the same either way.
    let c = c_plugin("plugins/examples/c/earliest_fit.c").expect("compile");
    let answer = |budget| {
        let mut p = DynamicPlugin::load_budgeted(&c, "{}", budget).expect("load");
        let mut out = Decisions::new();
        p.call(&plan.view(500, GANTRY_RESERVE_ADMIT, s), &mut out).expect("plan");
        (out.as_slice().to_vec(), out.allocations().to_vec())
    };
    let direct = answer(Duration::ZERO);
    assert_eq!(direct.1.len(), 2, "{direct:?}");
    assert_eq!(answer(BUDGET), direct);
}

#[test]
fn a_panic_in_reserve_is_a_failed_call() {
    let (plan, s) = small_plan();
    for budget in [Duration::ZERO, BUDGET] {
        let mut p = test_plugin("reserve-panic", budget);
        let mut out = Decisions::new();
        let err = p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out).expect_err("panic");
        let PolicyError::Panicked(msg) = &err else { panic!("not a panic: {err:?}") };
        assert!(msg.contains("test plugin panic in reserve"), "{msg}");
        assert!(out.is_empty() && out.allocations().is_empty());
        // The plugin serves its other hooks afterwards.
        let cluster = SyntheticCluster::new(4, 2);
        p.call(&cluster.view(), &mut out).expect("place after the panic");
    }
}

#[test]
fn a_hanging_reserve_call_fails_after_its_budget() {
    let (plan, s) = small_plan();
    let budget = Duration::from_millis(200);
    let mut p = test_plugin("reserve-hang", budget);
    let mut out = Decisions::new();
    let hook = hook_name(GANTRY_HOOK_RESERVE);
    assert_eq!(
        p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out),
        Err(PolicyError::TimedOut { hook, budget_ms: 200 })
    );
    assert_eq!(
        p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, s), &mut out),
        Err(PolicyError::StillRunning { hook }),
        "no second call waits behind the stuck one"
    );
    assert!(out.is_empty() && out.allocations().is_empty());
}

#[test]
fn inspect_lists_the_reserve_hook() {
    let c = inspect(&c_plugin("plugins/examples/c/earliest_fit.c").expect("compile")).expect("inspect");
    assert_eq!((c.name.as_str(), c.abi_minor, c.struct_size), ("c-earliest-fit", 3, 88));
    assert_eq!(c.hook_names(), vec!["reserve"]);
    assert_eq!(c.capabilities, GANTRY_CAP_RESERVE);
    let t = inspect(&rust_plugin("gantry_testplugin").expect("build")).expect("inspect");
    assert_eq!(t.hook_names(), vec!["admit", "order", "place", "rebalance", "reserve"]);
}
