//! Real `.so` plugins that panic, fail or return garbage, driven through the real engine: the
//! engine stays consistent and keeps scheduling, rejected decisions are counted by reason, a
//! plugin that keeps failing is quarantined and the built-in first-fit FIFO stands in.

use gantry_engine::{
    AppSpec, Command, Engine, EngineConfig, Event, Policy, Profile, RejectReason, RequestSpec, Resources,
};
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::abi::*;
use gantry_tests::{GIB, app, c_plugin, launches, register_all, rust_plugin, small_cluster, tick};

fn engine_with(plugin: DynamicPlugin, profile: Profile) -> Engine {
    let config = EngineConfig { quarantine_after: 3, quarantine_ms: 10_000, ..Default::default() };
    let mut e = Engine::new(config, vec![Box::new(plugin) as Box<dyn Policy>], profile).expect("engine");
    register_all(&mut e, &small_cluster()).expect("nodes");
    e
}

fn test_plugin(mode: &str) -> DynamicPlugin {
    let path = rust_plugin("gantry_testplugin").expect("build test plugin");
    DynamicPlugin::load(&path, &format!(r#"{{"mode": "{mode}"}}"#)).expect("load")
}

fn place_only() -> Profile {
    Profile { place: Some(0), ..Default::default() }
}

fn submit_mix(e: &mut Engine, t: u64) {
    for k in 0..3 {
        e.handle(t, Event::AppSubmitted(app(&format!("single-{k}"), 1000, 2, 0, 2, false))).expect("submit");
    }
    e.handle(t, Event::AppSubmitted(app("gang", 2000, 4, 0, 3, true))).expect("submit gang");
    // More than one node holds, so a plugin that piles everything on node 0 over-allocates it.
    e.handle(t, Event::AppSubmitted(app("wide", 2000, 2, 0, 10, false))).expect("submit wide");
}

/// All 3×2 + 3 + 10 containers of `submit_mix`.
const MIX_CONTAINERS: usize = 19;

#[test]
fn sane_plugin_places_everything() {
    let mut e = engine_with(test_plugin("ok"), place_only());
    let mut total = 0;
    for k in 0..3 {
        e.handle(0, Event::AppSubmitted(app(&format!("a{k}"), 1000, 2, 0, 2, false))).expect("submit");
    }
    total += launches(&tick(&mut e, 1));
    assert_eq!(total, 6);
    assert_eq!(e.stats().rejected.total(), 0);
    assert_eq!(e.stats().policy_failures, 0);
}

#[test]
fn panic_is_caught_counted_and_the_fallback_schedules() {
    let mut e = engine_with(test_plugin("panic"), place_only());
    submit_mix(&mut e, 0);
    let cmds = tick(&mut e, 1);
    assert_eq!(launches(&cmds), MIX_CONTAINERS, "the built-in FIFO placed the work this very cycle");
    assert_eq!(e.stats().policy_failures, 1);
    assert_eq!(e.stats().fallback_placements, 1);
    for t in 2..=3 {
        e.handle(t, Event::AppSubmitted(app("more", 500, 1, 0, 1, false))).expect("submit");
        tick(&mut e, t);
    }
    assert_eq!(e.stats().quarantines, 1, "three failures in a row quarantine the plugin");
    let status = &e.policy_status()[0];
    assert_eq!(status.name, "test-misbehave");
    assert!(status.quarantined_until.is_some());
}

#[test]
fn error_returns_quarantine_then_the_plugin_is_left_alone() {
    let mut e = engine_with(test_plugin("error"), place_only());
    for t in 1..=3 {
        e.handle(t, Event::AppSubmitted(app("x", 500, 1, 0, 1, false))).expect("submit");
        tick(&mut e, t);
    }
    assert_eq!(e.stats().policy_failures, 3);
    assert_eq!(e.stats().quarantines, 1);
    e.handle(4, Event::AppSubmitted(app("y", 500, 1, 0, 1, false))).expect("submit");
    let cmds = tick(&mut e, 4);
    assert_eq!(launches(&cmds), 1);
    assert_eq!(e.stats().policy_failures, 3, "a quarantined plugin is not called");
}

#[test]
fn fail_then_ok_comes_back_after_its_quarantine() {
    let mut e = engine_with(test_plugin("fail-then-ok"), place_only());
    for t in 1..=3 {
        e.handle(t, Event::AppSubmitted(app("x", 500, 1, 0, 1, false))).expect("submit");
        tick(&mut e, t);
    }
    assert_eq!(e.stats().quarantines, 1);
    // Quarantine is 10 s; at 20 s the plugin is tried again and now works.
    e.handle(20_000, Event::AppSubmitted(app("later", 500, 1, 0, 1, false))).expect("submit");
    let cmds = tick(&mut e, 20_000);
    assert_eq!(launches(&cmds), 1);
    assert_eq!(e.stats().policy_failures, 3);
    assert_eq!(e.stats().fallback_placements, 3, "the 20 s cycle was placed by the plugin itself");
    assert_eq!(e.policy_status()[0].quarantined_until, None);
}

/// Garbage decisions: rejected and counted by reason; malformed ones count toward quarantine;
/// after quarantine the fallback gets the work done.
#[test]
fn garbage_decisions_are_rejected_and_counted_by_reason() {
    let cases: [(&str, RejectReason, bool); 5] = [
        ("unknown-node", RejectReason::UnknownNode, true),
        ("unknown-request", RejectReason::UnknownSubject, true),
        ("bad-kind", RejectReason::BadKind, true),
        ("partial-gang", RejectReason::GangIncomplete, false),
        ("double-alloc", RejectReason::DoesNotFit, false),
    ];
    for (mode, reason, malformed) in cases {
        let mut e = engine_with(test_plugin(mode), place_only());
        submit_mix(&mut e, 0);
        let mut placed = launches(&tick(&mut e, 1));
        assert!(e.stats().rejected.get(reason) > 0, "{mode}: {:?}", e.stats().rejected);
        assert_eq!(e.stats().policy_failures, u64::from(malformed), "{mode}");
        for t in 2..=5 {
            placed += launches(&tick(&mut e, t));
        }
        for n in e.state().nodes() {
            assert!(n.allocated.fits_in(&n.capacity), "{mode}: node over-allocated");
        }
        if malformed {
            assert_eq!(e.stats().quarantines, 1, "{mode}");
            assert_eq!(placed, MIX_CONTAINERS, "{mode}: the fallback placed everything after quarantine");
        }
        if mode == "double-alloc" {
            assert!(placed > 0, "the placements that fit were accepted");
        }
        if mode == "partial-gang" {
            let gang =
                e.state().requests().iter().find(|r| r.flags & GANTRY_REQUEST_GANG != 0).expect("gang");
            assert_eq!(gang.placed, 0, "a partial gang places nothing");
        }
    }
}

#[test]
fn many_decisions_grow_the_buffer_and_retry() {
    let mut e = engine_with(test_plugin("flood"), place_only());
    // 120 requests ⇒ the plugin wants 3 × 121 WAITs plus placements: more than the 256 slots
    // offered first, so the host must grow its buffer and call again.
    for k in 0..120 {
        e.handle(0, Event::AppSubmitted(app(&format!("f{k}"), 100, 1, 0, 1, false))).expect("submit");
    }
    let cmds = tick(&mut e, 1);
    assert_eq!(launches(&cmds), 120);
    assert_eq!(e.stats().policy_failures, 0);
    assert_eq!(e.stats().rejected.total(), 0);
}

#[test]
fn garbage_order_is_filtered_and_scheduling_goes_on() {
    let profile = Profile { order: Some(0), place: Some(0), ..Default::default() };
    let mut e = engine_with(test_plugin("order-garbage"), profile);
    submit_mix(&mut e, 0);
    let cmds = tick(&mut e, 1);
    assert_eq!(launches(&cmds), MIX_CONTAINERS - 3, "the plugin's sane place skips gangs");
    assert!(e.stats().rejected.get(RejectReason::Duplicate) > 0);
    assert!(e.stats().rejected.get(RejectReason::UnknownSubject) > 0);
}

#[test]
fn rebalance_kills_are_applied_and_bad_ones_rejected() {
    let profile = Profile { place: Some(0), rebalance: Some(0), ..Default::default() };
    let mut e = engine_with(test_plugin("rebalance-kill-all"), profile);
    // The first cycle (t = 0) is a rebalance round on an empty cluster; the next is due at 3 s.
    tick(&mut e, 0);
    for k in 0..2 {
        e.handle(1, Event::AppSubmitted(app(&format!("a{k}"), 1000, 2, 0, 1, false))).expect("submit");
    }
    assert_eq!(launches(&tick(&mut e, 1)), 2);
    let cmds = tick(&mut e, 3_000);
    let kills: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Kill { container, grace_ms: 0, .. } => Some(*container),
            _ => None,
        })
        .collect();
    assert_eq!(kills.len(), 2);
    assert!(e.stats().rejected.get(RejectReason::UnknownSubject) > 0);
    // The agent confirms the kills; the requests are pending again and get placed again.
    for c in kills {
        e.handle(3_001, Event::container_exited(c, 137)).expect("exit");
    }
    assert_eq!(launches(&tick(&mut e, 3_002)), 2);
}

#[test]
fn c_plugin_garbage_and_errors_are_handled() {
    let path = c_plugin("tests/c/c_garbage.c").expect("compile");
    let plugin = DynamicPlugin::load(&path, "{}").expect("load");
    let profile = Profile { order: Some(0), place: Some(0), ..Default::default() };
    let mut e = engine_with(plugin, profile);
    submit_mix(&mut e, 0);
    tick(&mut e, 1);
    let rej = &e.stats().rejected;
    assert!(rej.get(RejectReason::BadKind) > 0, "{rej:?}");
    assert!(rej.get(RejectReason::UnknownNode) > 0, "{rej:?}");
    assert!(rej.get(RejectReason::UnknownSubject) > 0, "{rej:?}");
    // order failed with its error code, place returned garbage: two failures in one cycle.
    assert_eq!(e.stats().policy_failures, 2);
    tick(&mut e, 2);
    assert_eq!(e.stats().quarantines, 1);
    let placed: u32 = e.state().requests().iter().map(|r| r.placed).sum();
    assert_eq!(placed as usize, MIX_CONTAINERS, "the fallback placed the work");
}

/// The C example plugin schedules through the engine just like the Rust one: gangs whole,
/// same-rack gangs in one rack, GPU selectors honoured, nothing over-allocated.
#[test]
fn rust_and_c_examples_schedule_gangs_racks_and_gpus() {
    let plugins = [
        DynamicPlugin::load(&rust_plugin("gantry_minimal").expect("build"), "{}").expect("rust"),
        DynamicPlugin::load(&c_plugin("plugins/examples/c/first_fit.c").expect("cc"), "{}").expect("c"),
    ];
    for plugin in plugins {
        let name = plugin.info().name.clone();
        let mut e = engine_with(plugin, place_only());
        let gpu_job = AppSpec {
            name: "train".into(),
            queue: "root.default".into(),
            user: "bob".into(),
            requests: vec![RequestSpec {
                resources: Resources::new(4000, 16 * GIB, 2),
                count: 4,
                gang: true,
                selector: vec![("gpu".into(), "A100".into())],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mpi_job = AppSpec {
            name: "mpi".into(),
            queue: "root.default".into(),
            user: "carol".into(),
            requests: vec![gantry_tests::same_rack_gang(4000, 8, 5)],
            ..Default::default()
        };
        let too_big = app("too-big", 64_000, 1, 0, 1, false);
        for spec in [gpu_job, mpi_job, too_big] {
            e.handle(0, Event::AppSubmitted(spec)).expect("submit");
        }
        let cmds = tick(&mut e, 1);
        assert_eq!(e.stats().rejected.total(), 0, "{name}: {:?}", e.stats().rejected);
        assert_eq!(e.stats().policy_failures, 0, "{name}");
        let st = e.state();
        let mut gpu_nodes = Vec::new();
        let mut mpi_racks = Vec::new();
        for c in &cmds {
            if let Command::Launch { node, resources, gpus, .. } = c {
                let n = &st.nodes()[node.0 as usize];
                if resources.gpus > 0 {
                    assert_eq!(st.str(n.gpu_model), "A100", "{name}");
                    assert_eq!(gpus.len(), 2, "{name}: two GPU indexes handed over");
                    gpu_nodes.push(node.0);
                } else {
                    mpi_racks.push(st.str(n.rack).to_owned());
                }
            }
        }
        assert_eq!(gpu_nodes.len(), 4, "{name}: the GPU gang started whole");
        assert_eq!(mpi_racks.len(), 5, "{name}: the MPI gang started whole");
        mpi_racks.dedup();
        assert_eq!(mpi_racks.len(), 1, "{name}: in one rack");
        assert_eq!(launches(&cmds), 9, "{name}: the job too big for any node waits");
    }
}
