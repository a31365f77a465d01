//! The simulator's workload model and the trace readers.
//!
//! Every reader turns its native format into [`Job`]s; nothing downstream knows which format a
//! job came from. A job is one or more [`Stage`]s run one after another (a MapReduce job's maps,
//! then its reduces); each stage asks for `count` containers of one size, optionally as a gang,
//! with hard constraints (`selector`, a required rack) and soft preferences (`preferred`, a
//! preferred rack) under which it runs at `duration_ms`, and `slow_duration_ms` elsewhere.
//!
//! Times are milliseconds from the start of the trace; resources are in the engine's units
//! (CPU millicores, memory bytes, whole GPUs).

use gantry_engine::{RackAffinity, Resources};

/// One job of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The trace's own identifier, kept for the per-job output.
    pub name: String,
    /// When it is submitted, ms from the start of the trace.
    pub submit_ms: u64,
    /// Queue path (e.g. `root.default`).
    pub queue: String,
    /// Submitting user.
    pub user: String,
    /// Class for per-class figures (`GPU`, `MPI`, `pod`, `mapreduce`, …).
    pub class: String,
    /// Priority (higher first), as the engine understands it.
    pub priority: i32,
    /// Stages, run in order: a stage is submitted when the one before it has completed.
    pub stages: Vec<Stage>,
    /// The job is killed if it has not finished this long after submission (seed 002: 1200 s).
    pub time_limit_ms: Option<u64>,
}

/// One stage of a job: `count` containers of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// Resources of each container.
    pub resources: Resources,
    /// How many containers.
    pub count: u32,
    /// All `count` start together or none does.
    pub gang: bool,
    /// Hard node constraints: label `key` must equal `value`; a value `A|B` accepts either.
    pub selector: Vec<(String, String)>,
    /// Soft node preferences: running where they hold makes a container run at `duration_ms`.
    pub preferred: Vec<(String, String)>,
    /// Rack constraint or preference. `Preferred`: all containers in one rack run at
    /// `duration_ms`, spread over racks at `slow_duration_ms`.
    pub rack_affinity: RackAffinity,
    /// How long each container runs where its preferences hold (or anywhere, without any).
    pub duration_ms: u64,
    /// How long each container runs elsewhere; equal to `duration_ms` without preferences.
    pub slow_duration_ms: u64,
}

/// A malformed trace: where, and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct TraceError {
    /// The file.
    pub file: String,
    /// 1-based line number (0: the file as a whole, e.g. it cannot be read).
    pub line: usize,
    /// What was wrong, and what was expected.
    pub message: String,
}
