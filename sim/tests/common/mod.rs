//! What the simulator's test binaries share.

use std::path::{Path, PathBuf};

/// A file of the shared public traces: under `$GANTRY_TRACES` if set (as the experiments
/// allow), else `../shared/traces/` beside the repository.
pub fn shared(rel: &str) -> PathBuf {
    match std::env::var_os("GANTRY_TRACES") {
        Some(dir) => PathBuf::from(dir).join(rel),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces").join(rel),
    }
}
