//! Unit tests: the plugin type called directly with a hand-built view.

use gantry_sdk::abi::*;
use gantry_sdk::testkit::ViewBuilder;
use gantry_sdk::{Decisions, Plugin};
use gantry_spread::{Spread, WAIT_GANG};

const GIB: u64 = 1 << 30;

/// An application asking for `count` containers of `cpu_millis` and `mem_gib` each, pending;
/// returns its request's index.
fn request(c: &mut ViewBuilder, cpu_millis: u64, mem_gib: u64, count: u32, flags: u32) -> u32 {
    let app = c.app(0).index();
    c.request(app, GantryResources::new(cpu_millis, mem_gib * GIB, 0), count).flags(flags).pending().index()
}

#[test]
fn spreads_and_keeps_gangs_whole() {
    // The test kit owns the records a view borrows (gantry-sdk's `testkit` feature).
    let mut c = ViewBuilder::new(GANTRY_HOOK_PLACE);
    let a = c.node("a", GantryResources::new(8000, 32 * GIB, 0)).index();
    let b = c.node("b", GantryResources::new(8000, 32 * GIB, 0)).index();
    let web = request(&mut c, 1000, 1, 3, 0);
    let gang = request(&mut c, 4000, 8, 3, GANTRY_REQUEST_GANG); // 3 x 4 cores: only two such slots are left
    let mut plugin = Spread::create("{}").expect("config");
    let mut out = Decisions::new();
    plugin.place(&c.view(), &mut out).expect("place");
    let decided: Vec<(u32, u32, u32)> =
        out.as_slice().iter().map(|d| (d.kind, d.subject, d.target)).collect();
    let place = GANTRY_DECISION_PLACE;
    assert_eq!(decided[..3], [(place, web, a), (place, web, b), (place, web, a)]);
    assert_eq!(decided[3], (GANTRY_DECISION_WAIT, gang, GANTRY_NONE), "the gang waits whole");
    assert_eq!(out.as_slice()[3].reason, WAIT_GANG);
}

#[test]
fn bad_config_is_refused() {
    assert!(Spread::create(r#"{"max_per_node": 0}"#).is_err());
    assert!(Spread::create("not json").is_err());
}
