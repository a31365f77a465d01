//! The scheduler's durable state: apps, containers, reservations, id counters and the queue
//! configuration, in one SQLite file (WAL, `synchronous=FULL`, foreign keys on).
//!
//! The engine is in memory and sans-IO; this store is what lets the daemon rebuild it after a
//! `kill -9`. The rule it serves (DESIGN.md, "Durability") is that **nothing acknowledged is
//! lost**: a write's [`Ack`] resolves only after the transaction holding it has committed, and
//! with `synchronous=FULL` a WAL commit is an `fsync`.
//!
//! # Group commit
//! An `fsync` costs far more than the inserts it protects, so one per submission would cap the
//! scheduler's throughput at the disk's sync rate. All writes therefore go through **one writer
//! thread**: it takes the first queued job, drains whatever else is queued (up to
//! [`StoreOptions::max_batch_writes`]) and applies the lot in one transaction, so N concurrent
//! submitters cost about one `fsync`, not N. While that `fsync` runs the next batch gathers,
//! so batches grow by themselves exactly when the load is high, and a lone write is not delayed.
//!
//! Each job runs inside its own savepoint: a job that is refused (an unknown id, a duplicate, a
//! value out of range) fails alone and the rest of its batch commits. A failure of the
//! transaction itself (disk full, I/O error) fails every job of the batch — never a silent ack —
//! and SQLite's rollback leaves the file as it was before the batch; the next batch starts
//! afresh, so writing works again once space returns.
//!
//! Jobs are applied in the order they were [submitted](Store::submit): a write submitted after
//! another sees its effects, which lets the daemon enqueue an engine step's writes in order
//! without waiting for each acknowledgement.
//!
//! # Reading
//! [`Store::load`] reads everything back in one consistent snapshot, on a connection of its own
//! (WAL lets it run beside the writer); [`Store::load_recent`], what the daemon starts with,
//! reads the live applications and only as many ended ones as its memory keeps. They are meant
//! for start-up, not for serving queries: the engine answers those from memory.
//!
//! # Retention
//! Ended applications are kept by count and age and the rest removed in the background, in
//! small chunks through the same writer ([`Store::prune_ended`], module `retention`).
//!
//! # Schema
//! The schema is versioned in the table `schema_version` (one row per applied migration) and
//! migrated forward on [`Store::open`], in one transaction; a file written by a newer gantry is
//! refused rather than misread. Application specs are stored as JSON through serde mirrors of
//! the engine's types (the engine deliberately has no serde), so new optional fields can be added
//! without a migration.
//!
//! # Layout
//! This file is the handle ([`Store`], [`Ack`], [`StoreOptions`], [`StoreStats`]); `schema`
//! holds the migrations, the opening of the file and its lock; `writer` the writer thread, its
//! batches and the SQL of each [`Write`]; `read` the reads back; `json` the JSON inside rows;
//! `retention` the pruning of ended applications; `bench` the helpers of `gantry bench`.

pub use gantry_controller::records::{
    AppRecord, ContainerRecord, NextIds, PlanReservationRecord, Recovered, ReservationRecord, StoreError,
    Write,
};
use gantry_engine::{AppId, Resources};
use nix::fcntl::Flock;
use rusqlite::Connection;
use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;

mod bench;
mod json;
mod read;
pub mod retention;
mod schema;
#[cfg(test)]
mod tests;
mod writer;

pub use bench::{bench_app, bench_group_commit};
pub use retention::{PruneReport, Retention};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
use writer::{Counters, Job, classify};

/// Counters of the writer, for `/metrics` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Jobs handed to [`Store::submit`] (and the `write*` calls).
    pub submitted_jobs: u64,
    /// Writes committed.
    pub committed_writes: u64,
    /// Jobs failed (refused alone, or with their batch).
    pub failed_jobs: u64,
    /// Transactions committed (≈ `fsync`s of the WAL).
    pub transactions: u64,
    /// Batches whose transaction could not begin or commit.
    pub failed_transactions: u64,
    /// Most jobs in one batch so far.
    pub largest_batch: u64,
    /// Time spent in `COMMIT` (the `fsync`), in nanoseconds, summed.
    pub commit_nanos: u64,
}

/// Receives each committed transaction's `COMMIT` duration and its number of jobs.
pub type CommitObserver = Box<dyn Fn(Duration, usize) + Send + Sync>;

/// Tuning of a store. The defaults suit the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// How long a transaction waits for SQLite's write lock held by another connection (an
    /// operator's `sqlite3` session, a backup) before its batch fails.
    pub busy_timeout: Duration,
    /// Most writes the writer puts into one transaction (a single larger job still goes
    /// through whole). Bounds the time one commit holds up the acknowledgements in it.
    pub max_batch_writes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { busy_timeout: Duration::from_secs(10), max_batch_writes: 4096 }
    }
}

/// The durable store. Cheap to share (`Arc<Store>`); every method takes `&self`.
///
/// Dropping it lets the writer finish the jobs already submitted, then closes the database
/// (which checkpoints the WAL) and releases the lock file; the drop waits for that.
pub struct Store {
    path: PathBuf,
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    /// Held for the store's lifetime: an exclusive `flock` on `<db>.lock` so that a second
    /// scheduler on the same data directory fails at start-up instead of interleaving ids. A
    /// separate file, because closing any descriptor of the database file itself would drop
    /// SQLite's own POSIX locks. The kernel releases it when the process dies, `kill -9`
    /// included.
    _lock: Flock<File>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).field("stats", &self.stats()).finish()
    }
}

/// Resolves when a submitted job has committed (or failed). Dropping it does not cancel the
/// job: once submitted, a job is applied in its turn.
#[derive(Debug)]
pub struct Ack {
    rx: oneshot::Receiver<Result<(), StoreError>>,
}

impl Ack {
    /// An acknowledgement that has already failed (for a write the store refused outright).
    pub fn failed() -> Ack {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Err(StoreError::Closed));
        Ack { rx }
    }

    /// Waits for the outcome on the current thread. Must not be called from inside an async
    /// runtime (it would block a worker; await the `Ack` there instead).
    pub fn wait(self) -> Result<(), StoreError> {
        self.rx.blocking_recv().unwrap_or(Err(StoreError::Closed))
    }
}

impl Future for Ack {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or(Err(StoreError::Closed)))
    }
}

impl Store {
    /// Opens (creating if needed) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_with(path, StoreOptions::default())
    }

    /// Opens (creating if needed) the store at `path`: takes the lock file, sets WAL,
    /// `synchronous=FULL` and foreign keys, migrates the schema, and starts the writer thread.
    /// The parent directory must exist.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let lock = schema::take_lock(&path)?;
        let conn = schema::open_connection(&path, &options)?;
        schema::migrate(&conn, &path)?;
        let counters = Arc::new(Counters::default());
        let (jobs, rx) = mpsc::channel::<Job>();
        let writer = {
            let counters = Arc::clone(&counters);
            let max_batch = options.max_batch_writes.max(1);
            std::thread::Builder::new()
                .name("gantry-store".into())
                .spawn(move || writer::writer_loop(conn, rx, &counters, max_batch))
                .map_err(|e| StoreError::Open {
                    path: path.clone(),
                    message: format!("cannot start the writer thread: {e}"),
                })?
        };
        tracing::info!(path = %path.display(), schema = SCHEMA_VERSION, "store opened");
        Ok(Store { path, jobs: Some(jobs), writer: Some(writer), counters, _lock: lock })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `observe` after every committed transaction with its `COMMIT` duration and number
    /// of jobs (on the writer thread: keep it cheap). Only the first observer set is kept.
    pub fn observe_commits(&self, observe: CommitObserver) {
        let _ = self.counters.on_commit.set(observe);
    }

    /// Queues a job (applied all or nothing) and returns at once; the returned [`Ack`]
    /// resolves after its transaction commits. Jobs are applied in submission order.
    pub fn submit(&self, writes: Vec<Write>) -> Result<Ack, StoreError> {
        let (done, rx) = oneshot::channel();
        let sender = self.jobs.as_ref().ok_or(StoreError::Closed)?;
        sender.send(Job { writes, done }).map_err(|_| StoreError::Closed)?;
        self.counters.submitted_jobs.fetch_add(1, Ordering::Relaxed);
        Ok(Ack { rx })
    }

    /// Writes one change; returns after it has committed.
    pub async fn write(&self, write: Write) -> Result<(), StoreError> {
        self.submit(vec![write])?.await
    }

    /// Writes several changes, all or nothing; returns after they have committed.
    pub async fn write_many(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.submit(writes)?.await
    }

    /// [`Store::write_many`] for threads outside an async runtime.
    pub fn write_blocking(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.submit(writes)?.wait()
    }

    /// The writer's counters so far.
    pub fn stats(&self) -> StoreStats {
        let c = &self.counters;
        StoreStats {
            submitted_jobs: c.submitted_jobs.load(Ordering::Relaxed),
            committed_writes: c.committed_writes.load(Ordering::Relaxed),
            failed_jobs: c.failed_jobs.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
            failed_transactions: c.failed_transactions.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
            commit_nanos: c.commit_nanos.load(Ordering::Relaxed),
        }
    }

    /// Reads everything back, every ended application included, in one consistent snapshot of
    /// what has committed. Blocking; for tools and tests (the daemon starts with
    /// [`Store::load_recent`]).
    pub fn load(&self) -> Result<Recovered, StoreError> {
        self.load_snapshot(None)
    }

    /// What the daemon needs to start, in one consistent snapshot: every live application, the
    /// `ended_apps` most recently ended ones (what its memory keeps: `[engine]
    /// max_completed_apps`), the containers of those applications, and everything else as
    /// [`Store::load`] reads it. Older ended applications stay in the file, found by id through
    /// [`Store::app_record`]; reading them would make a restart's cost grow with the history.
    /// Blocking; for start-up.
    pub fn load_recent(&self, ended_apps: usize) -> Result<Recovered, StoreError> {
        self.load_snapshot(Some(ended_apps))
    }

    fn load_snapshot(&self, ended_apps: Option<usize>) -> Result<Recovered, StoreError> {
        let mut conn = self.reader()?;
        let tx = conn.transaction().map_err(classify)?;
        let recovered = read::read_all(&tx, ended_apps)?;
        tx.finish().map_err(classify)?;
        Ok(recovered)
    }

    /// One application as stored, with its containers, or `None` if it is not stored. Blocking
    /// (a read-only connection of its own, beside the writer); for ended apps the scheduler no
    /// longer keeps in memory.
    pub fn app_record(&self, id: AppId) -> Result<Option<(AppRecord, Vec<ContainerRecord>)>, StoreError> {
        read::app_record(&self.reader()?, id)
    }

    /// Runs SQLite's `integrity_check` and the foreign-key check; for operators and tests.
    pub fn check_integrity(&self) -> Result<(), StoreError> {
        let conn = self.reader()?;
        let mut stmt = conn.prepare("PRAGMA integrity_check").map_err(classify)?;
        let lines: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .map_err(classify)?
            .collect::<Result<_, _>>()
            .map_err(classify)?;
        if lines != ["ok"] {
            return Err(StoreError::Io(format!("integrity check failed: {}", lines.join("; "))));
        }
        let mut stmt = conn.prepare("PRAGMA foreign_key_check").map_err(classify)?;
        let broken = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(classify)?.count();
        if broken > 0 {
            return Err(StoreError::Io(format!("{broken} rows break foreign keys")));
        }
        Ok(())
    }

    /// Stops the writer after the jobs already submitted and closes the database, reporting a
    /// writer that died instead of finishing.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), StoreError> {
        drop(self.jobs.take());
        match self.writer.take() {
            Some(handle) => handle.join().map_err(|_| StoreError::Closed),
            None => Ok(()),
        }
    }

    /// A connection for reading only: the writer keeps its own.
    fn reader(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open(&self.path).map_err(classify)?;
        conn.pragma_update(None, "query_only", true).map_err(classify)?;
        conn.busy_timeout(StoreOptions::default().busy_timeout).map_err(classify)?;
        Ok(conn)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.shutdown().is_err() {
            tracing::error!(path = %self.path.display(), "the store's writer thread panicked");
        }
    }
}

fn resources(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> Resources {
    Resources { cpu_millis, memory_bytes, gpus, reserved: 0 }
}
