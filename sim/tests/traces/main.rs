//! The trace readers on real files: the shared public traces (read in place from
//! `../shared/traces/`), the hand-written files in `tests/data/` and `examples/traces/`, and
//! malformed inputs for every reader.

#[path = "../common/mod.rs"]
mod common;
pub use common::shared;

mod alibaba;
mod cmu;
mod jsonl;
mod swf;
mod swim;

use gantry_sim::trace::{Job, TraceError};
use std::path::{Path, PathBuf};

/// A file of this crate (`tests/data/…`, `examples/…`).
pub fn local(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Jobs are in (submit_ms) order.
pub fn assert_sorted(jobs: &[Job]) {
    assert!(jobs.windows(2).all(|w| w[0].submit_ms <= w[1].submit_ms), "jobs are not sorted by submit_ms");
}

/// The error is at `line` and its message contains every one of `needles`.
#[track_caller]
pub fn assert_err(r: Result<Vec<Job>, TraceError>, line: usize, needles: &[&str]) {
    let e = r.expect_err("expected the input to be refused");
    assert_eq!(e.line, line, "wrong line in: {e}");
    for n in needles {
        assert!(e.message.contains(n), "message {:?} lacks {n:?}", e.message);
    }
}
