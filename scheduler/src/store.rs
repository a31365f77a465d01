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

pub use gantry_controller::records::{
    AppRecord, ContainerRecord, NextIds, PlanReservationRecord, Recovered, ReservationRecord, StoreError,
    Write,
};
use gantry_engine::{
    AppId, AppSpec, ContainerId, QueueSpec, RackAffinity, RequestSpec, ReservationId, Resources,
};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

pub mod retention;
pub use retention::{PruneReport, Retention};

/// `PRAGMA application_id` of a gantry store ("GNTR"), so that `open` refuses another program's
/// SQLite file instead of adding tables to it.
pub const APPLICATION_ID: i64 = 0x474e_5452;

/// The schema version this binary writes; [`Store::open`] migrates older files up to it.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// One forward step of the schema. Steps are applied in order and never edited once released:
/// a change is a new step.
struct Migration {
    version: u32,
    description: &'static str,
    sql: &'static str,
}

/// Every schema step since version 1. Tables are `STRICT` so a wrong type is an error, not a
/// silently coerced value; unsigned values are stored as SQLite's signed 64-bit integers, and
/// rusqlite refuses anything above `i64::MAX` rather than wrapping it.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "apps, containers, reservations, id counters, queue configurations",
        sql: "
        CREATE TABLE apps (
            id           INTEGER PRIMARY KEY,
            name         TEXT    NOT NULL,
            queue        TEXT    NOT NULL,
            user         TEXT    NOT NULL,
            priority     INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            submit_ms    INTEGER NOT NULL,
            state        INTEGER NOT NULL,
            state_ms     INTEGER NOT NULL,
            diagnostics  TEXT    NOT NULL,
            spec         TEXT    NOT NULL,
            launch       TEXT    NOT NULL
        ) STRICT;
        CREATE INDEX apps_by_state ON apps(state);

        CREATE TABLE containers (
            id           INTEGER PRIMARY KEY,
            app          INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
            request      INTEGER NOT NULL,
            node         TEXT    NOT NULL,
            cpu_millis   INTEGER NOT NULL,
            memory_bytes INTEGER NOT NULL,
            gpus         INTEGER NOT NULL,
            gpu_indexes  TEXT    NOT NULL,
            state        INTEGER NOT NULL,
            started_ms   INTEGER,
            exit_code    INTEGER,
            reason       TEXT
        ) STRICT;
        CREATE INDEX containers_by_app ON containers(app);

        CREATE TABLE reservations (
            id           INTEGER PRIMARY KEY,
            queue        TEXT    NOT NULL,
            start_ms     INTEGER NOT NULL,
            end_ms       INTEGER NOT NULL,
            cpu_millis   INTEGER NOT NULL,
            memory_bytes INTEGER NOT NULL,
            gpus         INTEGER NOT NULL,
            state        INTEGER NOT NULL
        ) STRICT;

        CREATE TABLE counters (
            name  TEXT    PRIMARY KEY,
            value INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID;

        CREATE TABLE queue_configs (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            recorded_ms INTEGER NOT NULL,
            queues      TEXT    NOT NULL
        ) STRICT;
    ",
    },
    Migration {
        version: 2,
        description: "operators' node drains",
        sql: "
        CREATE TABLE node_drains (
            node        TEXT    PRIMARY KEY,
            drained_ms  INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID;
    ",
    },
    Migration {
        version: 3,
        description: "Rayon reservations in the plan, with their allocations",
        sql: "
        CREATE TABLE plan_reservations (
            id          INTEGER PRIMARY KEY,
            record      TEXT    NOT NULL
        ) STRICT;
    ",
    },
    Migration {
        version: 4,
        description: "when each container ended, for ended apps' history",
        sql: "
        ALTER TABLE containers ADD COLUMN finished_ms INTEGER;
    ",
    },
    Migration {
        version: 5,
        description: "the cluster id each container was launched under",
        // Containers stored before cluster ids were launched under the legacy cluster ('').
        sql: "
        ALTER TABLE containers ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
    ",
    },
    Migration {
        version: 6,
        description: "ended applications by the time they ended, for retention",
        sql: retention::MIGRATION_SQL,
    },
];

/// Maps an SQLite error to what a caller can act on: space, I/O, a refused write, or other.
fn classify(e: rusqlite::Error) -> StoreError {
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

/// The stored form of a [`PlanReservationRecord`]: the definition in RDL's text form.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PlanReservationJson {
    queue: String,
    name: String,
    user: String,
    priority: i32,
    arrival_ms: Option<u64>,
    deadline_ms: Option<u64>,
    rdl: String,
    submit_ms: u64,
    /// `[atom, start_ms, end_ms, bundles]` per piece (issue 20 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allocation: Option<Vec<[u64; 4]>>,
    /// Before issue 20, when the planner was linked in: `[start_ms, end_ms, cpu_millis,
    /// memory_bytes, gpus]` per piece, without the atom. Read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pieces: Option<Vec<[u64; 5]>>,
}

/// The stored JSON form of a plan reservation.
fn plan_to_json(record: &PlanReservationRecord) -> String {
    let r = &record.request;
    let j = PlanReservationJson {
        queue: r.queue.clone(),
        name: r.name.clone(),
        user: r.user.clone(),
        priority: r.priority,
        arrival_ms: r.arrival_ms,
        deadline_ms: r.deadline_ms,
        rdl: gantry_rdl::to_text(&r.definition),
        submit_ms: record.submit_ms,
        allocation: Some(
            record.allocation.iter().map(|p| [u64::from(p.atom), p.start_ms, p.end_ms, p.bundles]).collect(),
        ),
        pieces: None,
    };
    serde_json::to_string(&j).unwrap_or_default()
}

/// Reads a plan reservation's stored JSON form back.
fn plan_from_json(id: u64, text: &str) -> Result<PlanReservationRecord, String> {
    let j: PlanReservationJson = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let definition = gantry_rdl::parse_text(&j.rdl).map_err(|e| e.to_string())?;
    let allocation = match (&j.allocation, &j.pieces) {
        (Some(a), _) => a
            .iter()
            .map(|&[atom, start_ms, end_ms, bundles]| {
                let atom = u32::try_from(atom).map_err(|_| format!("atom {atom} is out of range"))?;
                Ok(gantry_engine::AtomInterval { atom, start_ms, end_ms, bundles })
            })
            .collect::<Result<Vec<_>, String>>()?,
        // A record of the previous version: its pieces are resources over time, each one
        // atom's (the linked-in planner kept them so). They are attributed to atoms by
        // their bundle and window, exactly for one atom, a best effort for several atoms of
        // the same bundle (`gantry_engine::legacy_allocation`).
        (None, Some(pieces)) => {
            let pieces: Vec<gantry_engine::PlannedPiece> = pieces
                .iter()
                .map(|&[start_ms, end_ms, cpu, mem, gpus]| gantry_engine::PlannedPiece {
                    start_ms,
                    end_ms,
                    resources: resources(cpu, mem, u32::try_from(gpus).unwrap_or(u32::MAX)),
                })
                .collect();
            let arrival = j.arrival_ms.unwrap_or(j.submit_ms);
            gantry_engine::legacy_allocation(&definition, arrival, &pieces)
        }
        (None, None) => Vec::new(),
    };
    Ok(PlanReservationRecord {
        id: ReservationId(id),
        request: gantry_engine::ReservationRequest {
            queue: j.queue,
            name: j.name,
            user: j.user,
            priority: j.priority,
            arrival_ms: j.arrival_ms,
            deadline_ms: j.deadline_ms,
            definition,
        },
        submit_ms: j.submit_ms,
        allocation,
    })
}

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

#[derive(Default)]
struct Counters {
    submitted_jobs: AtomicU64,
    committed_writes: AtomicU64,
    failed_jobs: AtomicU64,
    transactions: AtomicU64,
    failed_transactions: AtomicU64,
    largest_batch: AtomicU64,
    commit_nanos: AtomicU64,
    /// Told every commit's duration and batch size (the daemon's histogram), once set.
    on_commit: std::sync::OnceLock<CommitObserver>,
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

struct Job {
    writes: Vec<Write>,
    done: oneshot::Sender<Result<(), StoreError>>,
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
        let lock = take_lock(&path)?;
        let conn = open_connection(&path, &options)?;
        migrate(&conn, &path)?;
        let counters = Arc::new(Counters::default());
        let (jobs, rx) = mpsc::channel::<Job>();
        let writer = {
            let counters = Arc::clone(&counters);
            let max_batch = options.max_batch_writes.max(1);
            std::thread::Builder::new()
                .name("gantry-store".into())
                .spawn(move || writer_loop(conn, rx, &counters, max_batch))
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
        let recovered = read_all(&tx, ended_apps)?;
        tx.finish().map_err(classify)?;
        Ok(recovered)
    }

    /// One application as stored, with its containers, or `None` if it is not stored. Blocking
    /// (a read-only connection of its own, beside the writer); for ended apps the scheduler no
    /// longer keeps in memory.
    pub fn app_record(&self, id: AppId) -> Result<Option<(AppRecord, Vec<ContainerRecord>)>, StoreError> {
        let conn = self.reader()?;
        // Ids above i64::MAX are never stored.
        let Ok(raw) = i64::try_from(id.0) else { return Ok(None) };
        let mut stmt =
            conn.prepare(&format!("SELECT {APP_COLUMNS} FROM apps WHERE id = ?1")).map_err(classify)?;
        let mut rows = stmt.query([raw]).map_err(classify)?;
        let Some(row) = rows.next().map_err(classify)? else { return Ok(None) };
        let app = app_row(row)?;
        let mut stmt = conn
            .prepare(&format!("SELECT {CONTAINER_COLUMNS} FROM containers WHERE app = ?1 ORDER BY id"))
            .map_err(classify)?;
        let mut rows = stmt.query([raw]).map_err(classify)?;
        let mut containers = Vec::new();
        while let Some(row) = rows.next().map_err(classify)? {
            containers.push(container_row(row)?);
        }
        Ok(Some((app, containers)))
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

fn take_lock(path: &Path) -> Result<Flock<File>, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(|e| {
        StoreError::Open { path: path.to_path_buf(), message: format!("{}: {e}", lock_path.display()) }
    })?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, Errno::EWOULDBLOCK)) => Err(StoreError::Locked { path: path.to_path_buf(), lock: lock_path }),
        Err((_, e)) => Err(StoreError::Open {
            path: path.to_path_buf(),
            message: format!("cannot lock {}: {e}", lock_path.display()),
        }),
    }
}

fn open_connection(path: &Path, options: &StoreOptions) -> Result<Connection, StoreError> {
    let fail = |message: String| StoreError::Open { path: path.to_path_buf(), message };
    let conn = Connection::open(path).map_err(|e| fail(e.to_string()))?;
    conn.busy_timeout(options.busy_timeout).map_err(|e| fail(e.to_string()))?;
    // The first statement reads the header: a file that is not a database fails here.
    let app_id: i64 =
        conn.pragma_query_value(None, "application_id", |r| r.get(0)).map_err(|e| fail(e.to_string()))?;
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(StoreError::NotAStore { path: path.to_path_buf(), found: app_id });
    }
    if app_id == 0 {
        // No id yet: either a new file, or one of another program that never set one; only
        // the first may be given our tables.
        let others: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'", [], |r| r.get(0))
            .map_err(|e| fail(e.to_string()))?;
        if others > 0 {
            return Err(StoreError::NotAStore { path: path.to_path_buf(), found: 0 });
        }
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| fail(e.to_string()))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(fail(format!("the file system does not support WAL (journal mode is {mode})")));
    }
    conn.pragma_update(None, "synchronous", "FULL").map_err(|e| fail(e.to_string()))?;
    conn.pragma_update(None, "foreign_keys", true).map_err(|e| fail(e.to_string()))?;
    // A giant batch may grow the WAL; give the space back after the next checkpoint.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024).map_err(|e| fail(e.to_string()))?;
    let sync: i64 =
        conn.pragma_query_value(None, "synchronous", |r| r.get(0)).map_err(|e| fail(e.to_string()))?;
    let fk: i64 =
        conn.pragma_query_value(None, "foreign_keys", |r| r.get(0)).map_err(|e| fail(e.to_string()))?;
    if sync != 2 || fk != 1 {
        return Err(fail(format!("SQLite refused synchronous=FULL or foreign_keys (got {sync}, {fk})")));
    }
    Ok(conn)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction.
fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let fail = |e: rusqlite::Error| StoreError::Open { path: path.to_path_buf(), message: e.to_string() };
    conn.execute_batch("BEGIN IMMEDIATE").map_err(fail)?;
    let result = (|| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version     INTEGER PRIMARY KEY,
                applied_ms  INTEGER NOT NULL,
                description TEXT    NOT NULL
            ) STRICT",
        )
        .map_err(fail)?;
        let current: u32 = conn
            .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_version", [], |r| r.get(0))
            .map_err(fail)?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_path_buf(),
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        for m in MIGRATIONS.iter().filter(|m| m.version > current) {
            conn.execute_batch(m.sql).map_err(fail)?;
            conn.execute(
                "INSERT INTO schema_version (version, applied_ms, description) VALUES (?1, ?2, ?3)",
                params![m.version, wall_ms(), m.description],
            )
            .map_err(fail)?;
            tracing::info!(path = %path.display(), version = m.version, "store schema migrated");
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID).map_err(fail)?;
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(fail),
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
    }
}

/// Milliseconds since the Unix epoch, for the migration log only.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The writer thread: one batch per loop, until every [`Store`] sender is gone and the queue is
/// empty. Owns the only writing connection, so transactions never contend inside the process.
fn writer_loop(conn: Connection, rx: mpsc::Receiver<Job>, counters: &Counters, max_batch: usize) {
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

fn to_json<T: Serialize>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Refused(format!("{what} cannot be encoded: {e}")))
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

/// The columns [`app_row`] reads, in its order.
const APP_COLUMNS: &str =
    "id, name, queue, user, priority, max_attempts, submit_ms, state, state_ms, diagnostics, spec, launch";

fn app_row(row: &rusqlite::Row<'_>) -> Result<AppRecord, StoreError> {
    let raw: i64 = row.get(0).map_err(classify)?;
    let w = "app";
    let spec_json: String = col(row, 10, w, raw)?;
    let spec: SpecJson = serde_json::from_str(&spec_json).map_err(|e| corrupt(w, raw)(e.to_string()))?;
    let launch_json: String = col(row, 11, w, raw)?;
    let launch = serde_json::from_str(&launch_json).map_err(|e| corrupt(w, raw)(e.to_string()))?;
    Ok(AppRecord {
        id: AppId(col(row, 0, w, raw)?),
        spec: AppSpec {
            name: col(row, 1, w, raw)?,
            queue: col(row, 2, w, raw)?,
            user: col(row, 3, w, raw)?,
            priority: col(row, 4, w, raw)?,
            max_attempts: col(row, 5, w, raw)?,
            requests: spec.requests.into_iter().map(RequestSpec::from).collect(),
        },
        launch,
        submit_ms: col(row, 6, w, raw)?,
        state: col(row, 7, w, raw)?,
        state_ms: col(row, 8, w, raw)?,
        diagnostics: col(row, 9, w, raw)?,
    })
}

/// The columns [`container_row`] reads, in its order.
const CONTAINER_COLUMNS: &str = "id, app, request, node, cpu_millis, memory_bytes, gpus, gpu_indexes, state,
     started_ms, exit_code, reason, finished_ms, cluster";

fn container_row(row: &rusqlite::Row<'_>) -> Result<ContainerRecord, StoreError> {
    let raw: i64 = row.get(0).map_err(classify)?;
    let w = "container";
    let gpus_json: String = col(row, 7, w, raw)?;
    let cluster: String = col(row, 13, w, raw)?;
    Ok(ContainerRecord {
        id: ContainerId(col(row, 0, w, raw)?),
        app: AppId(col(row, 1, w, raw)?),
        request: col(row, 2, w, raw)?,
        node: col(row, 3, w, raw)?,
        resources: resources(col(row, 4, w, raw)?, col(row, 5, w, raw)?, col(row, 6, w, raw)?),
        gpus: serde_json::from_str(&gpus_json).map_err(|e| corrupt(w, raw)(e.to_string()))?,
        state: col(row, 8, w, raw)?,
        started_ms: col(row, 9, w, raw)?,
        exit_code: col(row, 10, w, raw)?,
        reason: col(row, 11, w, raw)?,
        finished_ms: col(row, 12, w, raw)?,
        cluster: gantry_proto::ClusterId::parse(&cluster).map_err(|e| corrupt(w, raw)(e.to_string()))?,
    })
}

fn corrupt(what: &'static str, id: i64) -> impl Fn(String) -> StoreError {
    move |reason| StoreError::Corrupt { what, id, reason }
}

/// A column read that names the record on failure, so a bad row is reported, not guessed at.
fn col<T: rusqlite::types::FromSql>(
    row: &rusqlite::Row<'_>,
    i: usize,
    what: &'static str,
    id: i64,
) -> Result<T, StoreError> {
    row.get(i).map_err(|e| corrupt(what, id)(format!("column {i}: {e}")))
}

/// Runs `sql` with `args` and turns each row into a record with `from_row`.
fn query_records<T>(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
    from_row: fn(&rusqlite::Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(classify)?;
    let mut rows = stmt.query(args).map_err(classify)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(classify)? {
        out.push(from_row(row)?);
    }
    Ok(out)
}

/// The live applications' ids.
const LIVE_APP_IDS: &str = "SELECT id FROM apps WHERE state IN (1, 2, 3)";

/// The queries of the applications whose ids `ids` selects, and of their containers.
fn records_of(ids: &str) -> [String; 2] {
    [
        format!("SELECT {APP_COLUMNS} FROM apps WHERE id IN ({ids})"),
        format!("SELECT {CONTAINER_COLUMNS} FROM containers WHERE app IN ({ids})"),
    ]
}

/// Reads the stored state; `ended_apps` bounds the ended applications read (see
/// [`Store::load_recent`]), `None` reads every one.
fn read_all(conn: &Connection, ended_apps: Option<usize>) -> Result<Recovered, StoreError> {
    let mut out = Recovered::default();

    match ended_apps {
        None => {
            out.apps =
                query_records(conn, &format!("SELECT {APP_COLUMNS} FROM apps ORDER BY id"), [], app_row)?;
            out.containers = query_records(
                conn,
                &format!("SELECT {CONTAINER_COLUMNS} FROM containers ORDER BY id"),
                [],
                container_row,
            )?;
        }
        Some(n) => {
            // Live apps by the state index, the newest ended by the retention index, and the
            // containers of exactly those by the containers' app index: nothing here scans a
            // table. Both reads of a set run in the same snapshot, so they agree.
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            for (ids, args) in [(LIVE_APP_IDS, None), (retention::NEWEST_ENDED_IDS, Some(n))] {
                let params = rusqlite::params_from_iter(args);
                let [apps, containers] = records_of(ids);
                out.apps.extend(query_records(conn, &apps, params.clone(), app_row)?);
                out.containers.extend(query_records(conn, &containers, params, container_row)?);
            }
            out.apps.sort_by_key(|a| a.id.0);
            out.containers.sort_by_key(|c| c.id.0);
        }
    }

    let mut stmt = conn
        .prepare(
            "SELECT id, queue, start_ms, end_ms, cpu_millis, memory_bytes, gpus, state
             FROM reservations ORDER BY id",
        )
        .map_err(classify)?;
    let mut rows = stmt.query([]).map_err(classify)?;
    while let Some(row) = rows.next().map_err(classify)? {
        let raw: i64 = row.get(0).map_err(classify)?;
        let w = "reservation";
        out.reservations.push(ReservationRecord {
            id: ReservationId(col(row, 0, w, raw)?),
            queue: col(row, 1, w, raw)?,
            start_ms: col(row, 2, w, raw)?,
            end_ms: col(row, 3, w, raw)?,
            resources: resources(col(row, 4, w, raw)?, col(row, 5, w, raw)?, col(row, 6, w, raw)?),
            state: col(row, 7, w, raw)?,
        });
    }

    let counter = |name: &str| -> Result<u64, StoreError> {
        conn.query_row("SELECT value FROM counters WHERE name = ?1", [name], |r| r.get::<_, u64>(0))
            .optional()
            .map_err(classify)
            .map(|v| v.unwrap_or(1))
    };
    let max_id = |table: &str| -> Result<u64, StoreError> {
        conn.query_row(&format!("SELECT COALESCE(MAX(id), 0) FROM {table}"), [], |r| r.get::<_, u64>(0))
            .map_err(classify)
    };
    out.next_app_id = counter("app")?.max(max_id("apps")?.saturating_add(1)).max(1);
    out.next_container_id = counter("container")?.max(max_id("containers")?.saturating_add(1)).max(1);
    out.next_reservation_id = counter("reservation")?.max(max_id("reservations")?.saturating_add(1)).max(1);

    let queues: Option<(i64, String)> = conn
        .query_row("SELECT id, queues FROM queue_configs ORDER BY id DESC LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .map_err(classify)?;
    if let Some((id, json)) = queues {
        let parsed: Vec<QueueJson> =
            serde_json::from_str(&json).map_err(|e| corrupt("queue configuration", id)(e.to_string()))?;
        out.queues = Some(parsed.into_iter().map(QueueSpec::from).collect());
    }

    let mut stmt = conn.prepare("SELECT node FROM node_drains ORDER BY node").map_err(classify)?;
    out.drained_nodes = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(classify)?
        .collect::<Result<_, _>>()
        .map_err(classify)?;

    let mut stmt = conn.prepare("SELECT id, record FROM plan_reservations ORDER BY id").map_err(classify)?;
    let rows: Vec<(i64, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(classify)?
        .collect::<Result<_, _>>()
        .map_err(classify)?;
    for (id, text) in rows {
        let record = plan_from_json(id as u64, &text).map_err(corrupt("plan reservation", id))?;
        out.next_reservation_id = out.next_reservation_id.max(record.id.0.saturating_add(1));
        out.plan_reservations.push(record);
    }
    Ok(out)
}

fn resources(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> Resources {
    Resources { cpu_millis, memory_bytes, gpus, reserved: 0 }
}

// ---- serde mirrors of the engine's types -------------------------------------------------
//
// The engine has no serde (it depends on nothing it does not need), so the store keeps its own
// copies of the shapes it writes. Every field added later must be `#[serde(default)]`, so rows
// written before it still read.

/// What of an [`AppSpec`] is not in the `apps` columns.
#[derive(Serialize, Deserialize)]
struct SpecJson {
    requests: Vec<RequestJson>,
}

#[derive(Serialize, Deserialize)]
struct ResourcesJson {
    cpu_millis: u64,
    memory_bytes: u64,
    gpus: u32,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
enum RackJson {
    #[default]
    None,
    Preferred,
    Required,
}

#[derive(Serialize, Deserialize)]
struct RequestJson {
    resources: ResourcesJson,
    count: u32,
    #[serde(default)]
    gang: bool,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    selector: Vec<(String, String)>,
    #[serde(default)]
    preferred: Vec<(String, String)>,
    #[serde(default)]
    rack_affinity: RackJson,
    #[serde(default)]
    master: bool,
    #[serde(default)]
    expected_ms: u64,
    #[serde(default)]
    slow_ms: u64,
    #[serde(default)]
    deadline_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct QueueJson {
    path: String,
    guaranteed: f64,
    maximum: f64,
}

impl From<&AppSpec> for SpecJson {
    fn from(s: &AppSpec) -> Self {
        SpecJson { requests: s.requests.iter().map(RequestJson::from).collect() }
    }
}

impl From<&RequestSpec> for RequestJson {
    fn from(r: &RequestSpec) -> Self {
        RequestJson {
            resources: ResourcesJson {
                cpu_millis: r.resources.cpu_millis,
                memory_bytes: r.resources.memory_bytes,
                gpus: r.resources.gpus,
            },
            count: r.count,
            gang: r.gang,
            priority: r.priority,
            selector: r.selector.clone(),
            preferred: r.preferred.clone(),
            rack_affinity: match r.rack_affinity {
                RackAffinity::None => RackJson::None,
                RackAffinity::Preferred => RackJson::Preferred,
                RackAffinity::Required => RackJson::Required,
            },
            master: r.master,
            expected_ms: r.expected_ms,
            slow_ms: r.slow_ms,
            deadline_ms: r.deadline_ms,
        }
    }
}

impl From<RequestJson> for RequestSpec {
    fn from(r: RequestJson) -> Self {
        RequestSpec {
            resources: resources(r.resources.cpu_millis, r.resources.memory_bytes, r.resources.gpus),
            count: r.count,
            gang: r.gang,
            priority: r.priority,
            selector: r.selector,
            preferred: r.preferred,
            rack_affinity: match r.rack_affinity {
                RackJson::None => RackAffinity::None,
                RackJson::Preferred => RackAffinity::Preferred,
                RackJson::Required => RackAffinity::Required,
            },
            master: r.master,
            expected_ms: r.expected_ms,
            slow_ms: r.slow_ms,
            deadline_ms: r.deadline_ms,
        }
    }
}

impl From<&QueueSpec> for QueueJson {
    fn from(q: &QueueSpec) -> Self {
        QueueJson { path: q.path.clone(), guaranteed: q.guaranteed, maximum: q.maximum }
    }
}

impl From<QueueJson> for QueueSpec {
    fn from(q: QueueJson) -> Self {
        QueueSpec { path: q.path, guaranteed: q.guaranteed, maximum: q.maximum }
    }
}

// ---- benchmark ---------------------------------------------------------------------------

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

/// A small NEW application as the benchmarks write it (`gantry bench store` too).
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
    use gantry_sdk::abi::{
        GANTRY_APP_ACCEPTED, GANTRY_APP_FINISHED, GANTRY_APP_NEW, GANTRY_CONTAINER_ALLOCATED,
        GANTRY_CONTAINER_COMPLETED, GANTRY_CONTAINER_RUNNING, GANTRY_RESERVATION_ACCEPTED,
        GANTRY_RESERVATION_NEW,
    };

    fn app(id: u64) -> AppRecord {
        AppRecord {
            id: AppId(id),
            spec: AppSpec {
                name: format!("app-{id}"),
                queue: "root.prod.etl".into(),
                user: "alice".into(),
                priority: -3,
                max_attempts: 5,
                requests: vec![
                    RequestSpec {
                        resources: resources(1500, 2 << 30, 2),
                        count: 3,
                        gang: true,
                        priority: 7,
                        selector: vec![("zone".into(), "a".into()), ("ssd".into(), String::new())],
                        preferred: vec![("gpu".into(), "a100".into())],
                        rack_affinity: RackAffinity::Required,
                        master: true,
                        expected_ms: 60_000,
                        slow_ms: 90_000,
                        deadline_ms: 1_700_000_000_000,
                    },
                    RequestSpec {
                        resources: resources(250, 1 << 20, 0),
                        count: 1,
                        rack_affinity: RackAffinity::Preferred,
                        ..RequestSpec::default()
                    },
                ],
            },
            launch: serde_json::json!({ "command": ["echo", "héllo"], "env": { "A": "1" } }),
            submit_ms: 1_000 + id,
            state: GANTRY_APP_NEW,
            state_ms: 1_000 + id,
            diagnostics: String::new(),
        }
    }

    fn container(id: u64, app: u64) -> ContainerRecord {
        ContainerRecord {
            id: ContainerId(id),
            app: AppId(app),
            request: 0,
            node: "node-1".into(),
            resources: resources(1500, 2 << 30, 2),
            gpus: vec![0, 3],
            state: GANTRY_CONTAINER_ALLOCATED,
            started_ms: None,
            exit_code: None,
            reason: None,
            finished_ms: None,
            cluster: gantry_proto::ClusterId::from_bits(0xfeed_0000_0000_0000_0000_0000_0000_beef),
        }
    }

    fn reservation(id: u64) -> ReservationRecord {
        ReservationRecord {
            id: ReservationId(id),
            queue: "root.prod".into(),
            start_ms: 10,
            end_ms: 20,
            resources: resources(8000, 16 << 30, 4),
            state: GANTRY_RESERVATION_NEW,
        }
    }

    fn queues() -> Vec<QueueSpec> {
        vec![
            QueueSpec { path: "root.prod".into(), guaranteed: 0.7, maximum: 1.0 },
            QueueSpec { path: "root.dev".into(), guaranteed: 0.3, maximum: 0.1 + 0.2 },
        ]
    }

    #[test]
    fn every_record_type_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        store
            .write_blocking(vec![
                Write::InsertApp(app(1)),
                Write::InsertApp(app(2)),
                Write::UpsertContainer(container(10, 1)),
                Write::UpsertContainer(container(11, 2)),
                Write::InsertReservation(reservation(5)),
                Write::QueueConfig { at_ms: 1, queues: queues() },
            ])
            .unwrap();
        store
            .write_blocking(vec![
                Write::AppState {
                    id: AppId(1),
                    state: GANTRY_APP_FINISHED,
                    diagnostics: "done".into(),
                    at_ms: 99,
                },
                Write::ContainerState {
                    id: ContainerId(10),
                    state: GANTRY_CONTAINER_RUNNING,
                    started_ms: Some(50),
                    exit_code: None,
                    reason: None,
                    finished_ms: None,
                },
                Write::ReservationState { id: ReservationId(5), state: GANTRY_RESERVATION_ACCEPTED },
            ])
            .unwrap();
        // A later state change with only some fields keeps the others.
        store
            .write_blocking(vec![Write::ContainerState {
                id: ContainerId(10),
                state: GANTRY_CONTAINER_COMPLETED,
                started_ms: None,
                exit_code: Some(-9),
                reason: Some("exited".into()),
                finished_ms: Some(60),
            }])
            .unwrap();
        drop(store);

        let store = Store::open(&path).unwrap();
        let r = store.load().unwrap();
        let mut a1 = app(1);
        a1.state = GANTRY_APP_FINISHED;
        a1.diagnostics = "done".into();
        a1.state_ms = 99;
        assert_eq!(r.apps, vec![a1, app(2)]);
        let mut c10 = container(10, 1);
        c10.state = GANTRY_CONTAINER_COMPLETED;
        c10.started_ms = Some(50);
        c10.exit_code = Some(-9);
        c10.reason = Some("exited".into());
        c10.finished_ms = Some(60);
        assert_eq!(r.containers, vec![c10, container(11, 2)]);
        let mut r5 = reservation(5);
        r5.state = GANTRY_RESERVATION_ACCEPTED;
        assert_eq!(r.reservations, vec![r5]);
        assert_eq!(r.queues, Some(queues()));
        assert_eq!((r.next_app_id, r.next_container_id, r.next_reservation_id), (3, 12, 6));
        store.check_integrity().unwrap();
    }

    #[test]
    fn plan_reservations_round_trip_and_records_of_the_previous_version_restore_with_atoms() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let request = gantry_engine::ReservationRequest {
            queue: "root.prod".into(),
            name: "nightly".into(),
            user: "alice".into(),
            priority: 2,
            arrival_ms: None,
            deadline_ms: Some(100_000),
            definition: gantry_rdl::parse_text(
                "order(atom(1c/2GiB, 1, 4, 10s, 40s), atom(2c/1GiB, 1, 1, 5s, 5s))",
            )
            .unwrap(),
        };
        let piece =
            |atom, start_ms, end_ms, bundles| gantry_engine::AtomInterval { atom, start_ms, end_ms, bundles };
        let record = PlanReservationRecord {
            id: ReservationId(3),
            request: request.clone(),
            submit_ms: 1_000,
            allocation: vec![piece(0, 10_000, 20_000, 4), piece(1, 20_000, 25_000, 1)],
        };
        store.write_blocking(vec![Write::PutPlanReservation(record.clone())]).unwrap();
        drop(store);
        // A record the previous version wrote: pieces of resources, no atoms.
        let conn = rusqlite::Connection::open(&path).unwrap();
        let old = r#"{"queue":"root.prod","name":"old","user":"bob","priority":0,"arrival_ms":null,
            "deadline_ms":100000,"rdl":"order(atom(1c/2GiB, 1, 4, 10s, 40s), atom(2c/1GiB, 1, 1, 5s, 5s))",
            "submit_ms":0,"pieces":[[80000,90000,4000,8589934592,0],[90000,95000,2000,1073741824,0]]}"#;
        conn.execute("INSERT INTO plan_reservations (id, record) VALUES (7, ?1)", params![old]).unwrap();
        drop(conn);
        let store = Store::open(&path).unwrap();
        let r = store.load().unwrap();
        assert_eq!(r.plan_reservations.len(), 2);
        assert_eq!(r.plan_reservations[0], record);
        let legacy = &r.plan_reservations[1];
        assert_eq!((legacy.id, legacy.request.name.as_str()), (ReservationId(7), "old"));
        // Each old piece went to the atom whose bundle divides it.
        assert_eq!(legacy.allocation, vec![piece(0, 80_000, 90_000, 4), piece(1, 90_000, 95_000, 1)]);
    }

    #[test]
    fn an_empty_store_starts_ids_at_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let r = store.load().unwrap();
        assert_eq!(
            r,
            Recovered { next_app_id: 1, next_container_id: 1, next_reservation_id: 1, ..Default::default() }
        );
    }

    #[test]
    fn counters_only_go_up_and_survive_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        store
            .write_blocking(vec![
                Write::InsertApp(app(7)),
                Write::UpsertContainer(container(40, 7)),
                Write::NextIds(NextIds { app: 100, container: 3, reservation: 9 }),
            ])
            .unwrap();
        store
            .write_blocking(vec![Write::NextIds(NextIds { app: 50, container: 2, reservation: 2 })])
            .unwrap();
        store.write_blocking(vec![Write::DeleteApp { id: AppId(7) }]).unwrap();
        let r = store.load().unwrap();
        assert!(r.apps.is_empty());
        assert!(r.containers.is_empty(), "containers go with their app");
        assert_eq!((r.next_app_id, r.next_container_id, r.next_reservation_id), (100, 41, 9));
    }

    #[test]
    fn a_refused_job_fails_alone_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        store.write_blocking(vec![Write::InsertApp(app(1))]).unwrap();
        // Queued back to back, so they usually share a batch; the outcome must not depend on it.
        let good = store.submit(vec![Write::InsertApp(app(2))]).unwrap();
        let dup = store.submit(vec![Write::InsertApp(app(3)), Write::InsertApp(app(1))]).unwrap();
        let orphan = store.submit(vec![Write::UpsertContainer(container(5, 42))]).unwrap();
        let unknown = store
            .submit(vec![Write::AppState {
                id: AppId(77),
                state: GANTRY_APP_ACCEPTED,
                diagnostics: String::new(),
                at_ms: 0,
            }])
            .unwrap();
        let mut too_big = app(4);
        too_big.submit_ms = u64::MAX;
        let too_big = store.submit(vec![Write::InsertApp(too_big)]).unwrap();
        let good2 = store.submit(vec![Write::InsertApp(app(5))]).unwrap();
        good.wait().unwrap();
        good2.wait().unwrap();
        for ack in [dup, orphan, unknown, too_big] {
            assert!(matches!(ack.wait(), Err(StoreError::Refused(_))));
        }
        let r = store.load().unwrap();
        let ids: Vec<u64> = r.apps.iter().map(|a| a.id.0).collect();
        assert_eq!(ids, vec![1, 2, 5], "app 3 went with its job's duplicate");
        assert!(r.containers.is_empty());
        assert_eq!(r.next_app_id, 6);
        assert_eq!(store.stats().failed_jobs, 4);
    }

    #[test]
    fn a_batch_that_cannot_begin_fails_its_writers_and_the_next_one_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let options = StoreOptions { busy_timeout: Duration::ZERO, ..StoreOptions::default() };
        let store = Store::open_with(&path, options).unwrap();
        let blocker = Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let err = store.write_blocking(vec![Write::InsertApp(app(1))]).unwrap_err();
        assert!(matches!(err, StoreError::Database(ref m) if m.contains("locked")), "{err}");
        assert_eq!(store.stats().failed_transactions, 1);
        blocker.execute_batch("ROLLBACK").unwrap();
        store.write_blocking(vec![Write::InsertApp(app(2))]).unwrap();
        let ids: Vec<u64> = store.load().unwrap().apps.iter().map(|a| a.id.0).collect();
        assert_eq!(ids, vec![2]);
    }

    #[test]
    fn the_same_queue_configuration_is_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let mut other = queues();
        other[0].maximum = 0.9;
        for (at, q) in [(1, queues()), (2, queues()), (3, other.clone()), (4, other.clone())] {
            store.write_blocking(vec![Write::QueueConfig { at_ms: at, queues: q }]).unwrap();
        }
        let conn = store.reader().unwrap();
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM queue_configs", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2);
        assert_eq!(store.load().unwrap().queues, Some(other));
    }

    #[test]
    fn drains_are_stored_until_undrained_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        let drain = |node: &str, drained| Write::NodeDrain { node: node.into(), drained, at_ms: 5 };
        store.write_blocking(vec![drain("n2", true), drain("n1", true), drain("n1", true)]).unwrap();
        assert_eq!(store.load().unwrap().drained_nodes, ["n1", "n2"], "a repeated drain is one drain");
        // Undraining a node that is not drained is fine.
        store.write_blocking(vec![drain("n2", false), drain("n3", false)]).unwrap();
        store.close().unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.load().unwrap().drained_nodes, ["n1"]);
    }

    #[test]
    fn a_second_opener_is_locked_out_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let first = Store::open(&path).unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::Locked { .. })));
        first.close().unwrap();
        Store::open(&path).unwrap();
    }

    #[test]
    fn schema_is_versioned_and_migrations_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(Store::open(&path).unwrap());
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let rows: Vec<u32> = conn
            .prepare("SELECT version FROM schema_version ORDER BY version")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn containers_stored_before_cluster_ids_read_as_the_legacy_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        // A store as version 3 left it, holding one running container.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL,
                                          description TEXT NOT NULL) STRICT",
        )
        .unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version <= 3) {
            conn.execute_batch(m.sql).unwrap();
            conn.execute("INSERT INTO schema_version VALUES (?1, 0, ?2)", params![m.version, m.description])
                .unwrap();
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        conn.execute_batch(
            "INSERT INTO apps VALUES (1, 'a', 'root.default', 'u', 0, 1, 1, 2, 1, '', '{\"requests\":[]}', '[]');
             INSERT INTO containers VALUES (7, 1, 0, 'n1', 100, 1048576, 0, '[]', 3, 5, NULL, NULL);",
        )
        .unwrap();
        drop(conn);
        let store = Store::open(&path).unwrap();
        let recovered = store.load().unwrap();
        assert_eq!(recovered.containers.len(), 1);
        assert_eq!(recovered.containers[0].cluster, gantry_proto::ClusterId::LEGACY);
        // Written again with a cluster id, it reads back with it.
        let mut c = recovered.containers[0].clone();
        c.cluster = gantry_proto::ClusterId::from_bits(42);
        store.write_blocking(vec![Write::UpsertContainer(c.clone())]).unwrap();
        assert_eq!(store.load().unwrap().containers, vec![c]);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("INSERT INTO schema_version VALUES (?1, 0, 'from the future')", [SCHEMA_VERSION + 1])
            .unwrap();
        drop(conn);
        let err = Store::open(&path).unwrap_err();
        assert_eq!(
            err,
            StoreError::TooNew { path: path.clone(), found: SCHEMA_VERSION + 1, supported: SCHEMA_VERSION }
        );
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other.db");
        let conn = Connection::open(&other).unwrap();
        conn.execute_batch("PRAGMA application_id = 1234; CREATE TABLE t (x)").unwrap();
        drop(conn);
        assert!(matches!(Store::open(&other), Err(StoreError::NotAStore { found: 1234, .. })));
        let anonymous = dir.path().join("anonymous.db");
        Connection::open(&anonymous).unwrap().execute_batch("CREATE TABLE t (x)").unwrap();
        assert!(matches!(Store::open(&anonymous), Err(StoreError::NotAStore { found: 0, .. })));
        let tables: i64 = Connection::open(&anonymous)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing was added to the other program's file");
        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
        assert!(matches!(Store::open(&garbage), Err(StoreError::Open { .. })));
        assert!(matches!(Store::open(dir.path().join("no/such/dir/s.db")), Err(StoreError::Open { .. })));
    }

    #[test]
    fn a_corrupt_row_is_reported_not_guessed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        store.write_blocking(vec![Write::InsertApp(app(1))]).unwrap();
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE apps SET spec = '{\"requests\": 3}' WHERE id = 1", []).unwrap();
        assert!(matches!(store.load(), Err(StoreError::Corrupt { what: "app", id: 1, .. })));
    }

    #[test]
    fn old_rows_without_newer_optional_fields_still_read() {
        let json = r#"{"requests":[{"resources":{"cpu_millis":1,"memory_bytes":2,"gpus":0},"count":4}]}"#;
        let spec: SpecJson = serde_json::from_str(json).unwrap();
        let r = RequestSpec::from(spec.requests.into_iter().next().unwrap());
        assert_eq!(r, RequestSpec { resources: resources(1, 2, 0), count: 4, ..RequestSpec::default() });
    }

    #[test]
    fn closing_finishes_queued_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        let acks: Vec<Ack> =
            (1..=50).map(|i| store.submit(vec![Write::InsertApp(app(i))]).unwrap()).collect();
        store.close().unwrap();
        for a in acks {
            a.wait().unwrap();
        }
        assert_eq!(Store::open(&path).unwrap().load().unwrap().apps.len(), 50);
    }

    /// A start-up read walks indexes only, so its cost follows what it reads, not the history.
    #[test]
    fn a_start_up_read_scans_no_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let conn = store.reader().unwrap();
        for (ids, args) in [(LIVE_APP_IDS, None), (retention::NEWEST_ENDED_IDS, Some(10_000i64))] {
            for sql in records_of(ids) {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
                let plan: Vec<String> = stmt
                    .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                let scans: Vec<&String> =
                    plan.iter().filter(|l| l.starts_with("SCAN") && !l.contains("USING")).collect();
                assert!(scans.is_empty(), "{sql}: {plan:?}");
            }
        }
    }

    #[test]
    fn bench_reports_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let (rate, transactions) = bench_group_commit(&dir.path().join("b.db"), 4, 5).unwrap();
        assert!(rate > 0.0);
        assert!((1..=20).contains(&transactions));
    }
}
