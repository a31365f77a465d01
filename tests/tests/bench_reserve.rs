//! `gantry bench reserve`: the real binary loads the Rayon planner (`libgantry_rayon.so`, found
//! beside itself) through the plugin host and submits the seeded reservation mix through the
//! engine. Every submission is answered, the host refuses nothing of the planner's, and the
//! planner decides alike whether it is called directly over the engine's arrays or on its worker
//! thread over the budgeted path's copy of the view. Bad arguments get a clear error.

use gantry_tests::{gantry_bin, rust_plugin};
use serde_json::Value;
use std::process::Output;

fn bench(args: &[&str]) -> Output {
    std::process::Command::new(gantry_bin().expect("gantry binary"))
        .args(["bench", "reserve"])
        .args(args)
        .output()
        .expect("run gantry bench reserve")
}

fn report(args: &[&str]) -> Value {
    let out = bench(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
fn direct_and_budgeted_calls_decide_alike_and_nothing_is_refused() {
    let common = ["--reservations", "300", "--seed", "3", "--json"];
    let direct = report(&[&common[..], &["--budget-ms", "0"]].concat());
    let budgeted = report(&[&common[..], &["--budget-ms", "10000", "--agent", "gree"]].concat());
    for r in [&direct, &budgeted] {
        assert_eq!(num(r, "submitted"), 300);
        assert_eq!(num(r, "accepted") + num(r, "rejected"), 300, "{r}");
        assert!(num(r, "accepted") > 0 && num(r, "rejected") > 0, "some fit, some do not: {r}");
        assert_eq!(num(r, "in_plan"), num(r, "accepted"), "{r}");
        assert_eq!((num(r, "refused"), num(r, "failed_calls"), num(r, "builtin")), (0, 0, 0), "{r}");
        assert_eq!(num(&r["handle"], "count"), 300);
        assert!(r["handle"]["p99_us"].as_f64() >= r["handle"]["p50_us"].as_f64(), "{r}");
        assert!(r["planner"].as_str().is_some_and(|p| p.ends_with("libgantry_rayon.so")), "{r}");
    }
    assert_eq!(num(&budgeted, "budget_ms"), 10_000);
    for key in ["accepted", "rejected", "pieces"] {
        assert_eq!(num(&direct, key), num(&budgeted, key), "{key}: direct {direct}, budgeted {budgeted}");
    }
}

#[test]
fn a_missing_planner_a_planner_without_reserve_and_a_bad_agent_are_refused() {
    let out = bench(&["--reservations", "5", "--planner", "/nonexistent/libnothing.so"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/libnothing.so"));
    let minimal = rust_plugin("gantry_minimal").expect("the minimal plugin");
    let out = bench(&["--reservations", "5", "--planner", minimal.to_str().expect("utf-8 path")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no reserve hook"), "{out:?}");
    let out = bench(&["--reservations", "5", "--agent", "best"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gree-l"), "{out:?}");
}
