//! The plugin inside the real engine, in-process: first linked in (no C ABI), then as the real
//! shared library loaded through the C ABI, the way the scheduler loads it.

use gantry_engine::{
    AppSpec, Command, Engine, EngineConfig, Event, NodeSpec, Policy, Profile, RequestSpec, Resources,
    StaticPolicy,
};
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_spread::Spread;
use std::path::PathBuf;

const GIB: u64 = 1 << 30;

/// An engine whose `place` is served by `policy`, with two 8-core nodes.
fn engine_with(policy: Box<dyn Policy>) -> Engine {
    let profile = Profile { place: Some(0), ..Profile::default() };
    let mut engine = Engine::new(EngineConfig::default(), vec![policy], profile).expect("engine");
    for name in ["n1", "n2"] {
        let node = NodeSpec {
            name: name.into(),
            rack: "r1".into(),
            labels: vec![],
            capacity: Resources::new(8_000, 32 * GIB, 0),
            gpu_list: vec![],
        };
        engine.handle(0, Event::NodeRegistered(node)).expect("node");
    }
    engine
}

/// Submits a 4-container app, runs one cycle, and returns the nodes of the launches.
fn launches_after_one_cycle(engine: &mut Engine) -> Vec<u32> {
    let app = AppSpec {
        name: "web".into(),
        queue: "root.default".into(),
        user: "alice".into(),
        requests: vec![RequestSpec {
            resources: Resources::new(1_000, GIB, 0),
            count: 4,
            ..Default::default()
        }],
        ..Default::default()
    };
    engine.handle(10, Event::AppSubmitted(app)).expect("submit");
    let commands = engine.handle(20, Event::Tick).expect("tick");
    engine.state().check_invariants().expect("engine state is consistent");
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Launch { node, .. } => Some(node.0),
            _ => None,
        })
        .collect()
}

#[test]
fn places_through_the_engine() {
    let policy = StaticPolicy::<Spread>::create("{}").expect("config");
    let mut engine = engine_with(Box::new(policy));
    assert_eq!(launches_after_one_cycle(&mut engine), [0, 1, 0, 1]);
    assert_eq!(engine.stats().rejected.total(), 0, "no decision was rejected");
    assert_eq!(engine.stats().policy_failures, 0);
    assert_eq!(engine.stats().fallback_placements, 0, "the built-in did not stand in");
}

/// The cdylib of this crate. `cargo test` builds it next to the test binary, in
/// target/debug/deps; `cargo build` also copies it to target/debug.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    [deps, deps.parent().expect("profile dir")]
        .iter()
        .map(|dir| dir.join("libgantry_spread.so"))
        .find(|p| p.exists())
        .expect("libgantry_spread.so was not built")
}

#[test]
fn the_shared_library_loads_and_places() {
    let plugin = DynamicPlugin::load(&library(), r#"{"max_per_node": 2}"#).expect("load");
    assert_eq!(plugin.info().name, "spread");
    assert_eq!(plugin.info().hook_names(), ["place"]);
    let mut engine = engine_with(Box::new(plugin));
    assert_eq!(launches_after_one_cycle(&mut engine), [0, 1, 0, 1]);
    assert_eq!(engine.stats().rejected.total(), 0);
}

#[test]
fn a_bad_config_is_refused_at_load() {
    let err = DynamicPlugin::load(&library(), r#"{"max_per_node": -1}"#).expect_err("bad config");
    assert!(err.to_string().contains("max_per_node"), "{err}");
}
