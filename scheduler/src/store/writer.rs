//! The writer thread and everything it runs: group commit (one transaction per batch of
//! queued jobs), a savepoint per job so a refused job fails alone, the SQL of each [`Write`],
//! and [`classify`], which turns SQLite's errors into the [`StoreError`]s callers act on. It owns
//! the only writing connection, so transactions never contend inside the process.

use super::json::{QueueJson, SpecJson, plan_to_json, to_json};
use super::{CommitObserver, StoreError, Write, retention};
use gantry_engine::AppId;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;
use tokio::sync::oneshot;

/// Maps an SQLite error to what a caller can act on: space, I/O, a refused write, or other.
pub(super) fn classify(e: rusqlite::Error) -> StoreError {
    let message = e.to_string();
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => StoreError::Full(message),
        Some(
            ErrorCode::SystemIoFailure
            | ErrorCode::CannotOpen
            | ErrorCode::ReadOnly
            | ErrorCode::DatabaseCorrupt
            | ErrorCode::NotADatabase
            | ErrorCode::FileLockingProtocolFailed,
        ) => StoreError::Io(message),
        Some(ErrorCode::ConstraintViolation | ErrorCode::TooBig | ErrorCode::TypeMismatch) => {
            StoreError::Refused(message)
        }
        Some(_) => StoreError::Database(message),
        None => match e {
            rusqlite::Error::ToSqlConversionFailure(_)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidParameterCount(..) => StoreError::Refused(message),
            _ => StoreError::Database(message),
        },
    }
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) submitted_jobs: AtomicU64,
    pub(super) committed_writes: AtomicU64,
    pub(super) failed_jobs: AtomicU64,
    pub(super) transactions: AtomicU64,
    pub(super) failed_transactions: AtomicU64,
    pub(super) largest_batch: AtomicU64,
    pub(super) commit_nanos: AtomicU64,
    /// Told every commit's duration and batch size (the daemon's histogram), once set.
    pub(super) on_commit: std::sync::OnceLock<CommitObserver>,
}

pub(super) struct Job {
    pub(super) writes: Vec<Write>,
    pub(super) done: oneshot::Sender<Result<(), StoreError>>,
}

/// The writer thread: one batch per loop, until every [`Store`](super::Store) sender is gone and
/// the queue is empty. Owns the only writing connection, so transactions never contend inside the
/// process.
pub(super) fn writer_loop(conn: Connection, rx: mpsc::Receiver<Job>, counters: &Counters, max_batch: usize) {
    while let Ok(first) = rx.recv() {
        let mut writes = first.writes.len();
        let mut batch = vec![first];
        while writes < max_batch {
            match rx.try_recv() {
                Ok(job) => {
                    writes += job.writes.len();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        counters.largest_batch.fetch_max(batch.len() as u64, Ordering::Relaxed);
        run_batch(&conn, batch, counters);
    }
}

/// Applies a batch in one transaction and answers every job in it.
fn run_batch(conn: &Connection, batch: Vec<Job>, counters: &Counters) {
    let mut outcomes: Vec<Result<(), StoreError>> = Vec::with_capacity(batch.len());
    let fatal = apply_batch(conn, &batch, &mut outcomes, counters);
    let (ok_jobs, failed) = match fatal {
        Ok(()) => {
            let ok = outcomes.iter().filter(|o| o.is_ok()).count();
            (ok, batch.len() - ok)
        }
        Err(e) => {
            if !conn.is_autocommit() {
                // Best effort: if even ROLLBACK fails, SQLite rolls the transaction back on
                // its own when the connection next reads, and the WAL has no commit frame
                // for it, so it can never be seen.
                let _ = conn.execute_batch("ROLLBACK");
            }
            tracing::warn!(error = %e, jobs = batch.len(), "store batch failed");
            counters.failed_transactions.fetch_add(1, Ordering::Relaxed);
            outcomes.clear();
            outcomes.resize(batch.len(), Err(e));
            (0, batch.len())
        }
    };
    if ok_jobs > 0 {
        let committed: usize =
            batch.iter().zip(&outcomes).filter(|(_, o)| o.is_ok()).map(|(j, _)| j.writes.len()).sum();
        counters.committed_writes.fetch_add(committed as u64, Ordering::Relaxed);
    }
    counters.failed_jobs.fetch_add(failed as u64, Ordering::Relaxed);
    for (job, outcome) in batch.into_iter().zip(outcomes) {
        // The submitter may have stopped waiting; the write stands either way.
        let _ = job.done.send(outcome);
    }
}

/// Runs the transaction. `Err` means the whole batch failed (nothing of it committed);
/// `Ok` with per-job outcomes in `outcomes` means it committed.
fn apply_batch(
    conn: &Connection,
    batch: &[Job],
    outcomes: &mut Vec<Result<(), StoreError>>,
    counters: &Counters,
) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE").map_err(classify)?;
    for job in batch {
        conn.execute_batch("SAVEPOINT job").map_err(classify)?;
        match job.writes.iter().try_for_each(|w| apply(conn, w)) {
            Ok(()) => {
                conn.execute_batch("RELEASE job").map_err(classify)?;
                outcomes.push(Ok(()));
            }
            Err(e) => {
                // On I/O errors SQLite may have rolled back the whole transaction by itself;
                // then the jobs before this one are gone too, and the batch has failed.
                if conn.is_autocommit() {
                    return Err(e);
                }
                conn.execute_batch("ROLLBACK TO job; RELEASE job").map_err(classify)?;
                outcomes.push(Err(e));
            }
        }
    }
    let started = Instant::now();
    conn.execute_batch("COMMIT").map_err(classify)?;
    let elapsed = started.elapsed();
    let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    counters.commit_nanos.fetch_add(nanos, Ordering::Relaxed);
    counters.transactions.fetch_add(1, Ordering::Relaxed);
    if let Some(observe) = counters.on_commit.get() {
        observe(elapsed, batch.len());
    }
    Ok(())
}

fn bump_counter(conn: &Connection, name: &str, next: u64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO counters (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = MAX(value, excluded.value)",
    )
    .and_then(|mut s| s.execute(params![name, next]))
    .map_err(classify)?;
    Ok(())
}

fn app_exists(conn: &Connection, id: AppId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM apps WHERE id = ?1")
        .and_then(|mut s| s.exists(params![id.0]))
        .map_err(classify)
}

fn expect_one(changed: usize, what: &str, id: u64) -> Result<(), StoreError> {
    if changed == 0 { Err(StoreError::Refused(format!("{what} {id} is not in the store"))) } else { Ok(()) }
}

/// Applies one write inside the current savepoint.
fn apply(conn: &Connection, write: &Write) -> Result<(), StoreError> {
    match write {
        Write::InsertApp(a) => {
            let spec = to_json("app spec", &SpecJson::from(&a.spec))?;
            let launch = to_json("launch spec", &a.launch)?;
            conn.prepare_cached(
                "INSERT INTO apps (id, name, queue, user, priority, max_attempts, submit_ms, state,
                                   state_ms, diagnostics, spec, launch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    a.id.0,
                    a.spec.name,
                    a.spec.queue,
                    a.spec.user,
                    a.spec.priority,
                    a.spec.max_attempts,
                    a.submit_ms,
                    a.state,
                    a.state_ms,
                    a.diagnostics,
                    spec,
                    launch
                ])
            })
            .map_err(classify)?;
            bump_counter(conn, "app", a.id.0.saturating_add(1))
        }
        Write::AppState { id, state, diagnostics, at_ms } => {
            use gantry_sdk::abi::{GANTRY_APP_ACCEPTED, GANTRY_APP_NEW, GANTRY_APP_RUNNING};
            let live = [GANTRY_APP_NEW, GANTRY_APP_ACCEPTED, GANTRY_APP_RUNNING];
            let n = conn
                .prepare_cached(
                    "UPDATE apps SET state = ?2, diagnostics = ?3, state_ms = ?4
                     WHERE id = ?1 AND (state IN (?5, ?6, ?7) OR ?2 NOT IN (?5, ?6, ?7))",
                )
                .and_then(|mut s| {
                    s.execute(params![id.0, state, diagnostics, at_ms, live[0], live[1], live[2]])
                })
                .map_err(classify)?;
            if n == 0 && app_exists(conn, *id)? {
                return Err(StoreError::Refused(format!(
                    "app {} has ended; it cannot become live again",
                    id.0
                )));
            }
            expect_one(n, "app", id.0)
        }
        Write::DeleteApp { id } => {
            conn.prepare_cached("DELETE FROM apps WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id.0]))
                .map_err(classify)?;
            Ok(())
        }
        Write::PruneApps { ids } => retention::delete_ended(conn, ids),
        Write::UpsertContainer(c) => {
            let gpus = to_json("GPU list", &c.gpus)?;
            conn.prepare_cached(
                "INSERT INTO containers (id, app, request, node, cpu_millis, memory_bytes, gpus,
                                         gpu_indexes, state, started_ms, exit_code, reason,
                                         finished_ms, cluster)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                 ON CONFLICT (id) DO UPDATE SET
                    request = excluded.request, node = excluded.node,
                    cpu_millis = excluded.cpu_millis, memory_bytes = excluded.memory_bytes,
                    gpus = excluded.gpus, gpu_indexes = excluded.gpu_indexes,
                    state = excluded.state, started_ms = excluded.started_ms,
                    exit_code = excluded.exit_code, reason = excluded.reason,
                    finished_ms = excluded.finished_ms, cluster = excluded.cluster
                 WHERE containers.app = excluded.app",
            )
            .and_then(|mut s| {
                s.execute(params![
                    c.id.0,
                    c.app.0,
                    c.request,
                    c.node,
                    c.resources.cpu_millis,
                    c.resources.memory_bytes,
                    c.resources.gpus,
                    gpus,
                    c.state,
                    c.started_ms,
                    c.exit_code,
                    c.reason,
                    c.finished_ms,
                    c.cluster.to_wire()
                ])
            })
            .map_err(classify)
            .and_then(|n| {
                if n == 0 {
                    Err(StoreError::Refused(format!("container {} is stored for another app", c.id.0)))
                } else {
                    Ok(())
                }
            })?;
            bump_counter(conn, "container", c.id.0.saturating_add(1))
        }
        Write::ContainerState { id, state, started_ms, exit_code, reason, finished_ms } => {
            let n = conn
                .prepare_cached(
                    "UPDATE containers SET state = ?2, started_ms = COALESCE(?3, started_ms),
                        exit_code = COALESCE(?4, exit_code), reason = COALESCE(?5, reason),
                        finished_ms = COALESCE(?6, finished_ms)
                     WHERE id = ?1",
                )
                .and_then(|mut s| s.execute(params![id.0, state, started_ms, exit_code, reason, finished_ms]))
                .map_err(classify)?;
            expect_one(n, "container", id.0)
        }
        Write::NextIds(ids) => {
            bump_counter(conn, "app", ids.app)?;
            bump_counter(conn, "container", ids.container)?;
            bump_counter(conn, "reservation", ids.reservation)
        }
        Write::InsertReservation(r) => {
            conn.prepare_cached(
                "INSERT INTO reservations (id, queue, start_ms, end_ms, cpu_millis, memory_bytes,
                                           gpus, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    r.id.0,
                    r.queue,
                    r.start_ms,
                    r.end_ms,
                    r.resources.cpu_millis,
                    r.resources.memory_bytes,
                    r.resources.gpus,
                    r.state
                ])
            })
            .map_err(classify)?;
            bump_counter(conn, "reservation", r.id.0.saturating_add(1))
        }
        Write::PutPlanReservation(r) => {
            conn.prepare_cached(
                "INSERT INTO plan_reservations (id, record) VALUES (?1, ?2)
                 ON CONFLICT(id) DO UPDATE SET record = excluded.record",
            )
            .and_then(|mut s| s.execute(params![r.id.0, plan_to_json(r)]))
            .map_err(classify)?;
            bump_counter(conn, "reservation", r.id.0.saturating_add(1))
        }
        Write::DeletePlanReservation { id } => {
            conn.execute("DELETE FROM plan_reservations WHERE id = ?1", params![id.0]).map_err(classify)?;
            Ok(())
        }
        Write::ReservationState { id, state } => {
            let n = conn
                .prepare_cached("UPDATE reservations SET state = ?2 WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id.0, state]))
                .map_err(classify)?;
            expect_one(n, "reservation", id.0)
        }
        Write::NodeDrain { node, drained: true, at_ms } => {
            conn.execute(
                "INSERT INTO node_drains (node, drained_ms) VALUES (?1, ?2)
                 ON CONFLICT (node) DO NOTHING",
                params![node, at_ms],
            )
            .map_err(classify)?;
            Ok(())
        }
        Write::NodeDrain { node, drained: false, .. } => {
            conn.execute("DELETE FROM node_drains WHERE node = ?1", params![node]).map_err(classify)?;
            Ok(())
        }
        Write::QueueConfig { at_ms, queues } => {
            let json =
                to_json("queue configuration", &queues.iter().map(QueueJson::from).collect::<Vec<_>>())?;
            let last: Option<String> = conn
                .query_row("SELECT queues FROM queue_configs ORDER BY id DESC LIMIT 1", [], |r| r.get(0))
                .optional()
                .map_err(classify)?;
            if last.as_deref() != Some(json.as_str()) {
                conn.execute(
                    "INSERT INTO queue_configs (recorded_ms, queues) VALUES (?1, ?2)",
                    params![at_ms, json],
                )
                .map_err(classify)?;
            }
            Ok(())
        }
    }
}
