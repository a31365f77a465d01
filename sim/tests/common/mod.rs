//! What the simulator's test binaries share: the shared traces' location and small builders.

// Each test binary uses some of these.
#![allow(dead_code)]

use gantry_engine::{NodeSpec, RackAffinity, Resources};
use gantry_sim::trace::{Job, Stage};
use std::path::{Path, PathBuf};

/// A file of the shared public traces: under `$GANTRY_TRACES` if set (as the experiments
/// allow), else `../shared/traces/` beside the repository.
pub fn shared(rel: &str) -> PathBuf {
    match std::env::var_os("GANTRY_TRACES") {
        Some(dir) => PathBuf::from(dir).join(rel),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces").join(rel),
    }
}

/// `n` nodes `n0`, `n1`, … of 2 cores and 4 GiB in rack `r0`.
pub fn pool(n: usize) -> Vec<NodeSpec> {
    (0..n)
        .map(|i| NodeSpec {
            name: format!("n{i}"),
            rack: "r0".into(),
            labels: Vec::new(),
            capacity: Resources::new(2000, 4 << 30, 0),
            gpu_list: Vec::new(),
        })
        .collect()
}

/// A one-stage job of `count` containers of `cores` cores and 1 GiB running `secs` seconds,
/// submitted at `at_ms`.
pub fn job_at_ms(name: &str, at_ms: u64, count: u32, cores: u64, secs: u64) -> Job {
    Job {
        name: name.into(),
        submit_ms: at_ms,
        queue: String::new(),
        user: "u".into(),
        class: "test".into(),
        priority: 0,
        stages: vec![Stage {
            resources: Resources::new(cores * 1000, 1 << 30, 0),
            count,
            gang: false,
            selector: Vec::new(),
            preferred: Vec::new(),
            rack_affinity: RackAffinity::None,
            duration_ms: secs * 1000,
            slow_duration_ms: secs * 1000,
        }],
        time_limit_ms: None,
    }
}
