//! The disk round, every `disk_check_interval_ms` off the main loop: measures every running
//! container's files against its disk allowance and kills those over it (exit reason
//! `disk-limit`), checks the work filesystem's free space and inodes (the `DiskPressure`
//! condition), and cleans up after ended containers ([`crate::cleanup`]: by retention, and
//! earliest first while the pressure lasts).
//!
//! Walking directories is blocking I/O of unbounded length (a container of a million files), so
//! a round runs on the blocking pool and never holds up launches, kills or heartbeats; the next
//! round starts only after the last one ended. A launch that failed for the node's reasons wakes
//! it at once, since a full disk is the likeliest cause.

use crate::cleanup::{self, Cleaned, Retention};
use crate::conditions::Conditions;
use crate::config::AgentConfig;
use crate::disk::{self, FsUsage};
use crate::executor::Executor;
use crate::model::{ContainerKey, DiskSeen};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    /// Containers measured.
    pub measured: usize,
    /// Time spent measuring them.
    pub walk: Duration,
    /// Containers killed for disk, with what they held.
    pub killed: Vec<(ContainerKey, DiskSeen)>,
    /// The work filesystem is under pressure (after the cleanup).
    pub pressure: bool,
    /// What the cleanup removed.
    pub cleaned: Cleaned,
}

/// The disk round's parts.
#[derive(Debug)]
pub struct Housekeeping {
    executor: Arc<Executor>,
    conditions: Arc<Conditions>,
    work_root: PathBuf,
    containers_dir: PathBuf,
    retention: Retention,
}

impl Housekeeping {
    /// The round over `executor`'s containers, reporting pressure to `conditions`.
    pub fn new(cfg: &AgentConfig, executor: Arc<Executor>, conditions: Arc<Conditions>) -> Housekeeping {
        Housekeeping {
            executor,
            conditions,
            work_root: cfg.work_root.clone(),
            containers_dir: cfg.containers_dir(),
            retention: Retention { work_ms: cfg.work_retention_ms, logs_ms: cfg.log_retention_ms },
        }
    }

    /// One round (blocking).
    pub fn round(&self, now_ms: u64) -> Round {
        let mut round = Round::default();
        let start = Instant::now();
        for (key, control, uid, limit) in self.executor.disk_limited() {
            let used = match disk::measure(&control, Some(uid)) {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(container = %key, error = %e, "cannot measure its files");
                    continue;
                }
            };
            round.measured += 1;
            if used.truncated {
                tracing::warn!(container = %key, entries = used.entries, "too many files to count them all");
            }
            if used.bytes > limit {
                tracing::warn!(container = %key, used = used.bytes, limit, "container over its disk allowance; killing it");
                let seen = DiskSeen { used_bytes: used.bytes, limit_bytes: limit };
                match self.executor.kill_for_disk(key, seen) {
                    Ok(()) => round.killed.push((key, seen)),
                    Err(e) => tracing::warn!(container = %key, error = %e, "disk-limit kill failed"),
                }
            }
        }
        round.walk = start.elapsed();
        let mut under_pressure = || match FsUsage::of(&self.work_root) {
            Ok(fs) => self.conditions.observe_disk(&self.work_root, &fs, now_ms),
            Err(e) => {
                tracing::warn!(dir = %self.work_root.display(), error = %e, "cannot read the work filesystem's usage");
                false
            }
        };
        let executor = &self.executor;
        round.cleaned = cleanup::clean(
            &self.containers_dir,
            now_ms,
            self.retention,
            &|key| executor.is_live(key),
            &mut under_pressure,
        );
        round.pressure = under_pressure();
        round
    }
}

/// Runs a round every `interval`, or at once when `wake` is notified, until `stop` completes.
/// `on_round` sees each round's result (metrics, exits to look for).
pub async fn run(
    housekeeping: Arc<Housekeeping>,
    interval: Duration,
    wake: Arc<Notify>,
    on_round: impl Fn(&Round) + Send + 'static,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let h = housekeeping.clone();
        match tokio::task::spawn_blocking(move || h.round(crate::shim::now_ms())).await {
            Ok(round) => on_round(&round),
            Err(e) => tracing::warn!(error = %e, "the disk round failed"),
        }
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(interval) => {}
            () = wake.notified() => {}
        }
    }
}
