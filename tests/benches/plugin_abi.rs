//! What the C ABI costs: one hook call through a loaded `.so` versus the same Rust code linked
//! statically, and a `place` call on 10,000 nodes × 1,000 pending requests both ways.
//!
//! Run with `cargo bench -p gantry-tests --bench plugin_abi`; figures in BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use gantry_engine::{Policy, StaticPolicy};
use gantry_minimal::MinimalFirstFit;
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::Decisions;
use gantry_tests::{SyntheticCluster, c_plugin, release_rust_plugin};
use std::hint::black_box;

fn load_dynamic() -> DynamicPlugin {
    let path = release_rust_plugin("gantry-example-minimal", "gantry_minimal").expect("build the plugin");
    DynamicPlugin::load(&path, "{}").expect("load the plugin")
}

fn bench_call_overhead(c: &mut Criterion) {
    // An empty cluster: the hook has nothing to do, so the time is the cost of getting there.
    let cluster = SyntheticCluster::new(0, 0);
    let view = cluster.view();
    let mut out = Decisions::new();
    let mut g = c.benchmark_group("hook_call_empty_view");
    let mut stat = StaticPolicy::new(MinimalFirstFit::default());
    g.bench_function("static_rust", |b| {
        b.iter(|| {
            out.clear();
            stat.call(black_box(&view), &mut out).expect("call");
        })
    });
    let mut dynamic = load_dynamic();
    g.bench_function("dynamic_rust_so", |b| {
        b.iter(|| {
            out.clear();
            dynamic.call(black_box(&view), &mut out).expect("call");
        })
    });
    let mut c_so =
        DynamicPlugin::load(&c_plugin("plugins/examples/c/first_fit.c").expect("cc"), "{}").expect("load C");
    g.bench_function("dynamic_c_so", |b| {
        b.iter(|| {
            out.clear();
            c_so.call(black_box(&view), &mut out).expect("call");
        })
    });
    g.finish();
}

fn bench_place(c: &mut Criterion) {
    let cluster = SyntheticCluster::new(10_000, 1_000);
    let view = cluster.view();
    let mut out = Decisions::new();
    let mut g = c.benchmark_group("place_10k_nodes_1k_pending");
    g.sample_size(50);
    let mut stat = StaticPolicy::new(MinimalFirstFit::default());
    g.bench_function("static_rust", |b| {
        b.iter(|| {
            out.clear();
            stat.call(black_box(&view), &mut out).expect("call");
        })
    });
    let expected = out.len();
    let mut dynamic = load_dynamic();
    g.bench_function("dynamic_rust_so", |b| {
        b.iter(|| {
            out.clear();
            dynamic.call(black_box(&view), &mut out).expect("call");
        })
    });
    assert_eq!(out.len(), expected, "both paths make the same decisions");
    g.finish();
}

criterion_group!(benches, bench_call_overhead, bench_place);
criterion_main!(benches);
