//! What a plugin's call budget costs: the same hook call made directly (zero-copy) and through
//! the plugin's worker thread over an owned copy of the view (`call_budget_ms` > 0), on views of
//! 1,000 nodes × 10,000 pending requests and 10,000 nodes × 100,000. The hook is the test
//! plugin's `admit`, which returns at once, so the difference is the copy and the hand-over.
//!
//! Run with `cargo bench -p gantry-tests --bench plugin_budget`; figures in BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use gantry_engine::Policy;
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::abi::GANTRY_HOOK_ADMIT;
use gantry_sdk::{Decisions, View};
use gantry_tests::{SyntheticCluster, release_rust_plugin};
use std::hint::black_box;
use std::time::Duration;

fn bench_budget(c: &mut Criterion) {
    let path = release_rust_plugin("gantry-test-plugin", "gantry_testplugin").expect("build the plugin");
    let config = r#"{"mode": "ok"}"#;
    let mut direct = DynamicPlugin::load(&path, config).expect("load");
    let mut budgeted = DynamicPlugin::load_budgeted(&path, config, Duration::from_secs(60)).expect("load");
    for (nodes, pending) in [(1_000, 10_000), (10_000, 100_000)] {
        let cluster = SyntheticCluster::new(nodes, pending);
        let view = View { hook: GANTRY_HOOK_ADMIT, ..cluster.view() };
        let mut out = Decisions::new();
        let mut g = c.benchmark_group(format!("admit_{nodes}_nodes_{pending}_pending"));
        g.sample_size(30);
        g.bench_function("direct", |b| {
            b.iter(|| {
                out.clear();
                direct.call(black_box(&view), &mut out).expect("call");
            })
        });
        g.bench_function("budgeted", |b| {
            b.iter(|| {
                out.clear();
                budgeted.call(black_box(&view), &mut out).expect("call");
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_budget);
criterion_main!(benches);
