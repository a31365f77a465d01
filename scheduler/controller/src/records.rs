//! What the controller keeps durable, as data: the records of applications, containers and
//! reservations, the id counters, and one [`Write`] per change. The controller decides which
//! writes to make and what waits for their commit; the daemon's SQLite store
//! (`gantry_scheduler::store`) and the simulator's store carry them out and report each commit's
//! outcome back. Nothing here does I/O.

use gantry_engine::{AppId, AppSpec, ContainerId, QueueSpec, ReservationId, Resources};
use std::path::PathBuf;
use thiserror::Error;

/// Why the store could not do what was asked. It is `Clone` because one failed commit has to be
/// reported to every writer of its batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    /// The file could not be opened or set up (permissions, not a database, no WAL support).
    #[error("cannot open the store {path}: {message}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Another process (a second scheduler on the same data directory) holds the store.
    #[error("the store {path} is in use by another process (it holds {lock})")]
    Locked {
        /// The database file.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// The file is an SQLite database of some other program.
    #[error("{path} is not a gantry store (its application id is {found:#x})")]
    NotAStore {
        /// The database file.
        path: PathBuf,
        /// Its `application_id`.
        found: i64,
    },
    /// The file was written by a newer gantry; reading it could lose what that version stored.
    #[error("the store {path} has schema version {found}, but this gantry knows versions up to {supported}")]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Newest version this binary knows.
        supported: u32,
    },
    /// The disk (or the file system's quota) is full; the batch was rolled back.
    #[error("the store's disk is full: {0}")]
    Full(String),
    /// Reading or writing the file failed; the batch was rolled back.
    #[error("I/O error on the store: {0}")]
    Io(String),
    /// The write contradicts the stored state (unknown or duplicate id, a value out of range);
    /// only this job was rolled back.
    #[error("write refused: {0}")]
    Refused(String),
    /// A stored record cannot be read back into its type.
    #[error("stored {what} {id} is unreadable: {reason}")]
    Corrupt {
        /// Kind of record.
        what: &'static str,
        /// Its id.
        id: i64,
        /// Why.
        reason: String,
    },
    /// Any other SQLite error.
    #[error("store database error: {0}")]
    Database(String),
    /// The writer thread is gone (the store was closed, or the thread panicked).
    #[error("the store's writer has stopped")]
    Closed,
}

impl StoreError {
    /// Whether the whole batch failed for lack of space (worth an alert, and worth retrying
    /// once space is freed).
    pub fn is_full(&self) -> bool {
        matches!(self, StoreError::Full(_))
    }
}

/// An application as stored: the engine's spec plus what the daemon needs to rebuild it.
#[derive(Debug, Clone, PartialEq)]
pub struct AppRecord {
    /// Its id (never reused).
    pub id: AppId,
    /// The submission as the engine took it.
    pub spec: AppSpec,
    /// What the daemon needs to start the app's containers (command, environment, …), as JSON.
    /// The engine does not know it and the store does not look inside; `Null` when none.
    pub launch: serde_json::Value,
    /// Submission time, ms since the Unix epoch.
    pub submit_ms: u64,
    /// `GANTRY_APP_*`.
    pub state: u32,
    /// When it entered `state`, ms since the Unix epoch.
    pub state_ms: u64,
    /// Why it is in its state.
    pub diagnostics: String,
}

/// A container as stored: enough to tell a re-registering agent which containers are wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRecord {
    /// Its id (never reused).
    pub id: ContainerId,
    /// Its application (which must be stored).
    pub app: AppId,
    /// Index of the app's request it serves.
    pub request: u32,
    /// Node name. Names, not the engine's node indexes, because nodes may re-register in any
    /// order after a restart.
    pub node: String,
    /// Its resources.
    pub resources: Resources,
    /// Indexes, on the node, of its GPUs.
    pub gpus: Vec<u32>,
    /// `GANTRY_CONTAINER_*`.
    pub state: u32,
    /// When it was placed, then when its agent confirmed the start, ms since the Unix epoch.
    pub started_ms: Option<u64>,
    /// Exit status, once it exited.
    pub exit_code: Option<i32>,
    /// Why it ended (`exited`, `memory-limit`, `killed-by-request`, `lost`, …).
    pub reason: Option<String>,
    /// When it ended, ms since the Unix epoch (absent in records written before schema 4).
    pub finished_ms: Option<u64>,
    /// The cluster id of the scheduler run that launched it: its agent knows it by this and
    /// its id ([`gantry_proto::ClusterId::LEGACY`] for containers stored before cluster ids).
    pub cluster: gantry_proto::ClusterId,
}

/// A reservation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationRecord {
    /// Its id (never reused).
    pub id: ReservationId,
    /// Queue path.
    pub queue: String,
    /// Earliest start, ms.
    pub start_ms: u64,
    /// Deadline, ms.
    pub end_ms: u64,
    /// Peak resources.
    pub resources: Resources,
    /// `GANTRY_RESERVATION_*`.
    pub state: u32,
}

/// A reservation accepted into the plan, with its allocation (restored exactly, so a restart
/// does not plan it again).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanReservationRecord {
    /// Its id.
    pub id: ReservationId,
    /// What was asked for.
    pub request: gantry_engine::ReservationRequest,
    /// When it was accepted, ms since the Unix epoch.
    pub submit_ms: u64,
    /// Its allocation, per atom.
    pub allocation: Vec<gantry_engine::AtomInterval>,
}

/// The next ids to hand out. Stored as a running maximum, so a counter never goes back even if
/// an older value is written after a newer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextIds {
    /// Next application id.
    pub app: u64,
    /// Next container id.
    pub container: u64,
    /// Next reservation id.
    pub reservation: u64,
}

/// One change to the store. A job is a list of these, applied all or nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Record a new application. Refused if the id exists. Raises the app id counter past it.
    InsertApp(AppRecord),
    /// An application changed state. Refused if the app is unknown, or if it has ended and the
    /// new state is a live one (an ended app never runs again).
    AppState {
        /// The application.
        id: AppId,
        /// `GANTRY_APP_*`.
        state: u32,
        /// Why.
        diagnostics: String,
        /// When, ms since the Unix epoch.
        at_ms: u64,
    },
    /// Forget an application and its containers (history trimming). Unknown ids are fine. The
    /// id is not reused: the counter stays.
    DeleteApp {
        /// The application.
        id: AppId,
    },
    /// Retention ([`Store::prune_ended`]): forget each listed application that has ended and
    /// has no live container, with its containers; live ones and unknown ids are left alone.
    /// The ids are not reused: the counters stay.
    PruneApps {
        /// The applications.
        ids: Vec<AppId>,
    },
    /// Record a container, or overwrite it whole. Refused if its app is not stored, or if the id
    /// is stored for another app (ids are never reused). Raises the container id counter past it.
    UpsertContainer(ContainerRecord),
    /// A container changed state. Fields that are `None` keep their stored value. Refused if
    /// the container is unknown.
    ContainerState {
        /// The container.
        id: ContainerId,
        /// `GANTRY_CONTAINER_*`.
        state: u32,
        /// Start time, when it is now known.
        started_ms: Option<u64>,
        /// Exit status, when it is now known.
        exit_code: Option<i32>,
        /// Why it ended, when it is now known.
        reason: Option<String>,
        /// When it ended, when it is now known.
        finished_ms: Option<u64>,
    },
    /// Raise the id counters (each to the larger of its stored and given value).
    NextIds(NextIds),
    /// Record a new reservation. Refused if the id exists. Raises the reservation id counter.
    InsertReservation(ReservationRecord),
    /// A reservation changed state. Refused if unknown.
    ReservationState {
        /// The reservation.
        id: ReservationId,
        /// `GANTRY_RESERVATION_*`.
        state: u32,
    },
    /// An operator drained a node (`drained`), or undrained it. Drains outlive scheduler
    /// restarts and the node's own absences; undraining an undrained node is fine.
    NodeDrain {
        /// The node's name.
        node: String,
        /// Drained (true) or back in service (false).
        drained: bool,
        /// When, ms since the Unix epoch.
        at_ms: u64,
    },
    /// Record a plan reservation, or overwrite it whole (an update, a replan). Raises the
    /// reservation id counter past it.
    PutPlanReservation(PlanReservationRecord),
    /// Forget a plan reservation (it ended). Unknown ids are fine.
    DeletePlanReservation {
        /// The reservation.
        id: ReservationId,
    },
    /// The queue configuration the daemon runs with; recorded only when it differs from the
    /// last one, so restarts with the same file add nothing.
    QueueConfig {
        /// When, ms since the Unix epoch.
        at_ms: u64,
        /// The queues.
        queues: Vec<QueueSpec>,
    },
}

/// Everything the daemon needs to rebuild its engine, read in one snapshot.
///
/// [`Store::load`] fills `apps` and `containers` with every stored record;
/// [`Store::load_recent`] with every live application (NEW, ACCEPTED, RUNNING), only the most
/// recently ended ones it was asked for, and the containers of exactly those applications. The
/// id counters, reservations, queues and drains are always whole.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recovered {
    /// The stored applications read (see above), by id.
    pub apps: Vec<AppRecord>,
    /// The containers of the applications in `apps`, by id.
    pub containers: Vec<ContainerRecord>,
    /// Every stored reservation, by id.
    pub reservations: Vec<ReservationRecord>,
    /// Next application id: above every id ever stored (deleted and pruned ones included, and
    /// those a bounded load did not read), at least 1.
    pub next_app_id: u64,
    /// Next container id, likewise.
    pub next_container_id: u64,
    /// Next reservation id, likewise.
    pub next_reservation_id: u64,
    /// The latest recorded queue configuration, if any was recorded.
    pub queues: Option<Vec<QueueSpec>>,
    /// Nodes an operator drained, by name.
    pub drained_nodes: Vec<String>,
    /// Plan reservations, by id.
    pub plan_reservations: Vec<PlanReservationRecord>,
}
