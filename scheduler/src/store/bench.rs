//! Helpers of the store's benchmarks (`gantry bench store`, BENCHMARKS.md): group commit
//! measured on a fresh store, and the small application record the benchmarks write.

use super::{AppRecord, Store, StoreError, Write, resources};
use gantry_engine::{AppId, AppSpec, RequestSpec};
use std::path::Path;
use std::time::Instant;

/// Measures group commit: `writers` threads each submit `writes_each` app insertions one after
/// another, waiting for each acknowledgement, against a new store at `path` (which must not
/// exist). Returns (acknowledged writes per second, transactions used). With one writer this is
/// the disk's sync rate; with many it shows how far batching lifts it. For `gantry bench` and
/// BENCHMARKS.md — timing belongs there, never in tests.
pub fn bench_group_commit(path: &Path, writers: usize, writes_each: usize) -> Result<(f64, u64), StoreError> {
    let store = Store::open(path)?;
    let before = store.stats().transactions;
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let store = &store;
                s.spawn(move || -> Result<(), StoreError> {
                    for i in 0..writes_each {
                        let id = (w * writes_each + i + 1) as u64;
                        store.write_blocking(vec![Write::InsertApp(bench_app(id))])?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or(Err(StoreError::Closed)))
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let transactions = store.stats().transactions - before;
    store.close()?;
    let total = (writers * writes_each) as f64;
    Ok((if seconds > 0.0 { total / seconds } else { f64::INFINITY }, transactions))
}

/// A small NEW application as the benchmarks write it (`gantry bench store` too). Public so that
/// the benchmarks can live in a crate of their own.
pub fn bench_app(id: u64) -> AppRecord {
    AppRecord {
        id: AppId(id),
        spec: AppSpec {
            name: format!("bench-{id}"),
            queue: "root.default".into(),
            user: "bench".into(),
            priority: 0,
            max_attempts: 3,
            requests: vec![RequestSpec {
                resources: resources(100, 64 << 20, 0),
                count: 1,
                ..RequestSpec::default()
            }],
        },
        launch: serde_json::json!({ "command": ["true"] }),
        submit_ms: id,
        state: gantry_sdk::abi::GANTRY_APP_NEW,
        state_ms: id,
        diagnostics: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_reports_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let (rate, transactions) = bench_group_commit(&dir.path().join("b.db"), 4, 5).unwrap();
        assert!(rate > 0.0);
        assert!((1..=20).contains(&transactions));
    }
}
