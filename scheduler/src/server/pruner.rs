//! The daemon's side of the store's retention: a task that runs a pruning round
//! ([`Store::prune_ended`]) at start-up and then every `[store] prune_interval`, on a blocking
//! thread, off the core task and the submit path, and counts what it removed in `/metrics`.

use crate::metrics::SchedulerMetrics;
use crate::store::{Retention, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Runs until `stop` turns true (or its sender is gone). A round in progress when it does stops
/// after its current chunk, so shutting down never waits for a whole backlog.
pub(crate) async fn run(
    store: Arc<Store>,
    retention: Retention,
    interval: Duration,
    metrics: Arc<SchedulerMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    let stopping = Arc::new(AtomicBool::new(false));
    let mut ticks = tokio::time::interval(interval);
    // A round longer than the interval is followed by a full interval, not by a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            _ = ticks.tick() => {}
        }
        let round = {
            let (store, stopping) = (Arc::clone(&store), Arc::clone(&stopping));
            tokio::task::spawn_blocking(move || store.prune_ended(&retention, wall_ms(), &stopping))
        };
        tokio::pin!(round);
        let outcome = tokio::select! {
            r = &mut round => r,
            () = stopped(&mut stop) => {
                stopping.store(true, Ordering::Relaxed);
                round.await
            }
        };
        match outcome {
            Ok(Ok(report)) => {
                metrics.observe_store_prune(report.took, report.pruned_apps);
                if report.pruned_apps > 0 {
                    tracing::info!(
                        pruned_apps = report.pruned_apps,
                        chunks = report.chunks,
                        took_ms = report.took.as_millis() as u64,
                        "ended applications beyond the store's retention removed"
                    );
                }
            }
            // The next round tries again; what committed before the error stays removed.
            Ok(Err(e)) => tracing::warn!(error = %e, "pruning the store failed"),
            Err(e) => tracing::error!(error = %e, "the store's pruning round panicked"),
        }
        if stopping.load(Ordering::Relaxed) {
            break;
        }
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
