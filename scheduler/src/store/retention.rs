//! Retention of ended applications: the store keeps the most recently ended ones, by count and
//! by age, as YARN's state store keeps `max-completed-applications`, and forgets the rest.
//!
//! Without it every application ever submitted stays in SQLite (at 100 apps/s, 8.6 million a
//! day), and every restart reads a file that only grows.
//!
//! # How a round runs
//! [`Store::prune_ended`] is one round, called by the daemon every `[store] prune_interval` on a
//! blocking thread, never on the submit path:
//!
//! 1. On a read-only connection of its own (WAL: beside the writer, without blocking it) it finds
//!    the **boundary**, the newest ended app that is beyond the retention: the
//!    `max_completed_apps`-th most recently ended one by count, or the last one ended before
//!    `now − max_age` by age, whichever lies later. Both walk the partial index
//!    `apps_ended_by_time` (ended apps only, by `(state_ms, id)`), so a store of millions costs a
//!    walk of `max_completed_apps` index entries, not a scan.
//! 2. It then selects, oldest first, up to `chunk_apps` ended apps at or before the boundary
//!    that have no live container, and hands their ids to the **same single writer** as one job
//!    ([`Write::PruneApps`]), so ordering with the daemon's other writes stays what it is. A
//!    submission that arrives meanwhile waits for at most one chunk's deletes, then its own
//!    commit: the chunk size bounds the stall (BENCHMARKS.md, "Store retention").
//! 3. It waits for that chunk to commit, then leaves the writer idle for as long again (a round
//!    takes at most half of the writer's time), and goes on after the last selected one (keyset
//!    pagination), until nothing is left before the boundary or the daemon stops.
//!
//! Live apps (NEW, ACCEPTED, RUNNING) are never selected, nor is an ended app whose container
//! is still live (killed, its exit not yet reported): its exit must still find its record, or
//! the agent would never get the acknowledgement. The delete re-checks both inside the writer's
//! transaction. Ended states and ended containers are final, so what was selected stays
//! prunable until the delete.
//!
//! Ids are never reused: the `counters` table holds the next ids and is not touched; a deleted
//! row only leaves a gap. Freed pages stay in the file and are reused by later rows, so a store
//! in its steady state stops growing; `VACUUM` gives them back to the file system.

use super::{Store, StoreError, Write, classify};
use gantry_engine::AppId;
use gantry_sdk::abi::{
    GANTRY_APP_ACCEPTED, GANTRY_APP_NEW, GANTRY_APP_RUNNING, GANTRY_CONTAINER_ALLOCATED,
    GANTRY_CONTAINER_RUNNING, GANTRY_CONTAINER_STOPPING,
};
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// The SQL below spells the live states as literals (a partial index is used only when the
// query repeats its condition word for word, so no bound parameters); these keep them true.
const _: () = assert!(GANTRY_APP_NEW == 1 && GANTRY_APP_ACCEPTED == 2 && GANTRY_APP_RUNNING == 3);
const _: () = assert!(
    GANTRY_CONTAINER_ALLOCATED == 1 && GANTRY_CONTAINER_RUNNING == 2 && GANTRY_CONTAINER_STOPPING == 3
);

/// The migration that makes the selection cheap: ended apps by the time they ended. Partial, so
/// live apps (the ones that change) never touch it.
pub const MIGRATION_SQL: &str = "
    CREATE INDEX apps_ended_by_time ON apps(state_ms, id) WHERE state NOT IN (1, 2, 3);
";

/// The `n`-th most recently ended app (0: the newest), as `(state_ms, id)`.
const NTH_NEWEST_ENDED: &str = "
    SELECT state_ms, id FROM apps WHERE state NOT IN (1, 2, 3)
    ORDER BY state_ms DESC, id DESC LIMIT 1 OFFSET ?1";

/// The next chunk: ended apps after `(?1, ?2)` and at or before `(?3, ?4)`, oldest first, whose
/// containers have all ended.
const NEXT_CHUNK: &str = "
    SELECT state_ms, id FROM apps
    WHERE state NOT IN (1, 2, 3) AND (state_ms, id) > (?1, ?2) AND (state_ms, id) <= (?3, ?4)
      AND NOT EXISTS (SELECT 1 FROM containers WHERE containers.app = apps.id
                                                 AND containers.state IN (1, 2, 3))
    ORDER BY state_ms, id LIMIT ?5";

/// The delete, with the same conditions checked again inside the writer's transaction.
const DELETE_ENDED: &str = "
    DELETE FROM apps WHERE id = ?1 AND state NOT IN (1, 2, 3)
      AND NOT EXISTS (SELECT 1 FROM containers WHERE containers.app = apps.id
                                                 AND containers.state IN (1, 2, 3))";

/// The most recently ended apps, newest first (for a bounded load).
pub(super) const NEWEST_ENDED_IDS: &str = "
    SELECT id FROM apps WHERE state NOT IN (1, 2, 3)
    ORDER BY state_ms DESC, id DESC LIMIT ?1";

/// How long ended applications stay in the store. Live ones always stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Ended applications kept, the most recently ended first (YARN's
    /// `yarn.resourcemanager.state-store.max-completed-applications`); `i64::MAX` or more: no
    /// bound by count.
    pub max_completed_apps: u64,
    /// Ended applications that ended longer ago than this are removed, whatever their number;
    /// `None`: no age bound.
    pub max_age: Option<Duration>,
    /// Applications removed per transaction: bounds how long one chunk holds up the writes
    /// queued behind it.
    pub chunk_apps: usize,
}

impl Default for Retention {
    /// YARN's default: 10,000 ended applications, no age bound; chunks of 100.
    fn default() -> Self {
        Retention { max_completed_apps: 10_000, max_age: None, chunk_apps: 100 }
    }
}

/// What one pruning round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneReport {
    /// Ended applications removed (their containers went with them).
    pub pruned_apps: u64,
    /// Transactions used.
    pub chunks: u64,
    /// Wall time of the round.
    pub took: Duration,
    /// Whether the round stopped because it was asked to, with more left to remove.
    pub interrupted: bool,
}

impl Store {
    /// One pruning round (see the module documentation): removes, oldest first, the ended
    /// applications beyond `retention` at `now_ms` (ms since the Unix epoch), in chunks
    /// committed through the writer. Blocking: call it from a thread that may wait, never from
    /// inside an async runtime's worker. Between chunks it checks `stop` and returns early when
    /// set. An error leaves what committed before it removed, and the rest for the next round.
    pub fn prune_ended(
        &self,
        retention: &Retention,
        now_ms: u64,
        stop: &AtomicBool,
    ) -> Result<PruneReport, StoreError> {
        let started = Instant::now();
        let mut report = PruneReport::default();
        let conn = self.reader()?;
        let Some(boundary) = prune_boundary(&conn, retention, now_ms)? else {
            report.took = started.elapsed();
            return Ok(report);
        };
        let chunk = retention.chunk_apps.max(1);
        let mut after: (i64, i64) = (i64::MIN, i64::MIN);
        let mut select = conn.prepare(NEXT_CHUNK).map_err(classify)?;
        loop {
            if stop.load(Ordering::Relaxed) {
                report.interrupted = true;
                break;
            }
            let rows: Vec<(i64, i64)> = select
                .query_map(params![after.0, after.1, boundary.0, boundary.1, chunk as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .map_err(classify)?
                .collect::<Result<_, _>>()
                .map_err(classify)?;
            let Some(&last) = rows.last() else { break };
            let ids: Vec<AppId> = rows.iter().map(|&(_, id)| AppId(id as u64)).collect();
            let n = ids.len() as u64;
            let chunk_started = Instant::now();
            self.write_blocking(vec![Write::PruneApps { ids }])?;
            report.pruned_apps += n;
            report.chunks += 1;
            if rows.len() < chunk {
                break;
            }
            after = last;
            // Leave the writer idle as long as the chunk kept it busy: a round takes at most
            // half of the writer's time, so a submission more often than not finds it free.
            std::thread::sleep(chunk_started.elapsed());
        }
        report.took = started.elapsed();
        Ok(report)
    }
}

/// The newest ended app, as `(state_ms, id)`, that the retention no longer keeps; `None` when
/// it keeps every ended app.
fn prune_boundary(
    conn: &Connection,
    retention: &Retention,
    now_ms: u64,
) -> Result<Option<(i64, i64)>, StoreError> {
    // A count no store can reach (SQLite's row ids stop at i64::MAX) bounds nothing: no walk.
    let keep = i64::try_from(retention.max_completed_apps).unwrap_or(i64::MAX);
    let by_count: Option<(i64, i64)> = if keep == i64::MAX {
        None
    } else {
        conn.query_row(NTH_NEWEST_ENDED, [keep], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(classify)?
    };
    // Ended before the cut-off: `state_ms < cutoff`, as the last `(state_ms, id)` before it.
    let by_age = retention
        .max_age
        .map(|age| now_ms.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)))
        .filter(|&cutoff| cutoff > 0)
        .map(|cutoff| (i64::try_from(cutoff - 1).unwrap_or(i64::MAX), i64::MAX));
    Ok(by_count.max(by_age))
}

/// Applies [`Write::PruneApps`]: deletes each listed app that has ended and has no live
/// container (its containers go with it, by the foreign key); others are kept.
pub(super) fn delete_ended(conn: &Connection, ids: &[AppId]) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(DELETE_ENDED).map_err(classify)?;
    for id in ids {
        stmt.execute([id.0]).map_err(classify)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan SQLite chooses for `sql`, one line per step.
    fn plan(conn: &Connection, sql: &str, args: impl rusqlite::Params) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let lines: Vec<String> =
            stmt.query_map(args, |r| r.get::<_, String>(3)).unwrap().collect::<Result<_, _>>().unwrap();
        lines.join("\n")
    }

    /// The selections walk the partial index instead of scanning or sorting the apps: what
    /// keeps a round cheap on a store of millions.
    #[test]
    fn selections_use_the_index_of_ended_apps() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let conn = store.reader().unwrap();
        for (sql, args) in [
            (NTH_NEWEST_ENDED, vec![10_000i64]),
            (NEWEST_ENDED_IDS, vec![10_000]),
            (NEXT_CHUNK, vec![0, 0, 5, 5, 500]),
        ] {
            let p = plan(&conn, sql, rusqlite::params_from_iter(args));
            assert!(
                p.contains("USING INDEX apps_ended_by_time")
                    || p.contains("USING COVERING INDEX apps_ended_by_time"),
                "{sql}\n{p}"
            );
            assert!(!p.contains("TEMP B-TREE"), "no sort: {sql}\n{p}");
            assert!(!p.contains("SCAN containers"), "containers by index: {sql}\n{p}");
        }
    }
}
