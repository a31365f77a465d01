//! The Standard Workload Format (SWF, version 2.2) of the Parallel Workloads Archive: logs of
//! parallel supercomputers' batch schedulers, one job per line.
//!
//! # Format
//!
//! Lines starting with `;` are header comments (ignored; blank lines too). Every other line has
//! exactly 18 whitespace-separated numeric fields; `-1` means unknown:
//!
//! | # | field | used |
//! |---|---|---|
//! | 1 | job number | the job's name |
//! | 2 | submit time, s | submit |
//! | 3 | wait time, s | no (it is the old scheduler's outcome) |
//! | 4 | run time, s | duration |
//! | 5 | allocated processors | container count |
//! | 6 | average CPU time used, s | no |
//! | 7 | used memory, KB per processor | memory |
//! | 8 | requested processors | count when 5 is unknown |
//! | 9 | requested time, s | no (see below) |
//! | 10 | requested memory, KB per processor | memory when 7 is unknown |
//! | 11 | status | which lines are jobs |
//! | 12 | user id | user `u<N>` |
//! | 13–14 | group, executable | no |
//! | 15 | queue number | queue `root.q<N>`, if asked for |
//! | 16–18 | partition, preceding job, think time | no |
//!
//! Time fields (2, 3, 4, 6, 9, 18) may be fractional, as the standard allows; the others must be
//! integers. A line with another field count or a non-numeric field is refused.
//!
//! # Model
//!
//! - One job, one **gang** stage of N containers, N = allocated processors (field 5), or the
//!   requested processors (field 8) when 5 is `-1`. A rigid parallel job starts all its
//!   processes at once, hence the gang. Each container is **one core** (`cpu_millis_per_proc`,
//!   1000 by default): one container per processor.
//! - **memory** per container = used memory per processor (field 7) if known (> 0), else the
//!   requested memory per processor (field 10) if known, else `default_memory_bytes` (1 GiB by
//!   default, an assumption: most archive logs record no memory). KB are taken as KiB (1024).
//! - **duration** = run time (field 4), s → ms, rounded; no slow duration (no preferences).
//! - **skipped** (counted in [`SwfStats`]): lines with run time ≤ 0 (unknown, or jobs cancelled
//!   before they started — the standard also writes 0 for jobs under half a second), lines whose
//!   processor count is ≤ 0 in both fields, and status 2, 3, 4 lines: those are the partial
//!   executions of a checkpointed or swapped job, whose whole is the job's summary line (status
//!   0, 1 or 5) — replaying both would run it twice.
//! - **status** (field 11): 1 completed, 0 failed, 5 cancelled, −1 unknown — all kept with their
//!   run time (a failed or cancelled job held its processors that long); 2 partial execution to be
//!   continued, 3 last partial execution (completed), 4 last partial execution (failed) — skipped.
//!   Other values are refused.
//! - **queue**: `root.default`, unless [`SwfOptions::queues_from_trace`] is set, when queue
//!   number N ≥ 0 becomes `root.q<N>` (the engine must then be configured with those queues) and
//!   `-1` stays `root.default`.
//! - **user** `u<N>` from field 12, `unknown` when it is `-1`; **class** `swf`; priority 0.
//! - **no time limit**: the requested time (field 9) is a wall-clock limit counted from the job's
//!   start, while [`Job::time_limit_ms`] counts from submission, so mapping one onto the other
//!   would kill jobs for having waited.
//! - No rack affinity: the logs say nothing about the network.

use super::{
    DEFAULT_QUEUE, Job, Stage, TraceError, check_line_len, parse_f64, parse_i64, read_text, secs_f64_to_ms,
    sort_by_submit, validate_job,
};
use gantry_engine::{RackAffinity, Resources};
use std::path::Path;

/// The class of every SWF job.
pub const CLASS: &str = "swf";

/// How SWF logs are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwfOptions {
    /// CPU of each container (one per processor), millicores.
    pub cpu_millis_per_proc: u64,
    /// Memory of each container when the log records none, bytes.
    pub default_memory_bytes: u64,
    /// Map queue numbers to `root.q<N>` instead of putting everything in `root.default`.
    pub queues_from_trace: bool,
}

impl Default for SwfOptions {
    fn default() -> Self {
        SwfOptions { cpu_millis_per_proc: 1000, default_memory_bytes: 1 << 30, queues_from_trace: false }
    }
}

/// What a read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwfStats {
    /// Job lines read (comments and blank lines not counted).
    pub lines: usize,
    /// Jobs returned.
    pub jobs: usize,
    /// Skipped: run time ≤ 0.
    pub skipped_no_run_time: usize,
    /// Skipped: no processors.
    pub skipped_no_processors: usize,
    /// Skipped: partial executions (status 2, 3, 4).
    pub skipped_partial: usize,
}

/// Reads an SWF file.
pub fn read(path: &Path, opts: &SwfOptions) -> Result<Vec<Job>, TraceError> {
    let text = read_text(path)?;
    let (jobs, stats) = parse_with_stats(&text, &path.display().to_string(), opts)?;
    tracing::info!(
        file = %path.display(),
        lines = stats.lines,
        jobs = stats.jobs,
        skipped_no_run_time = stats.skipped_no_run_time,
        skipped_no_processors = stats.skipped_no_processors,
        skipped_partial = stats.skipped_partial,
        "read SWF log"
    );
    Ok(jobs)
}

/// Parses SWF text; `file_name` is only used in errors.
pub fn parse(text: &str, file_name: &str, opts: &SwfOptions) -> Result<Vec<Job>, TraceError> {
    parse_with_stats(text, file_name, opts).map(|(jobs, _)| jobs)
}

/// Field names, for messages (1-based numbering in the standard).
const FIELDS: [&str; 18] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable number",
    "queue number",
    "partition number",
    "preceding job",
    "think time",
];

/// Fields that may be fractional (times); the rest must be integers.
const TIME_FIELDS: [usize; 6] = [1, 2, 3, 5, 8, 17];

/// [`parse`], also saying what was skipped.
pub fn parse_with_stats(
    text: &str,
    file_name: &str,
    opts: &SwfOptions,
) -> Result<(Vec<Job>, SwfStats), TraceError> {
    if opts.cpu_millis_per_proc == 0 && opts.default_memory_bytes == 0 {
        return Err(TraceError::new(
            file_name,
            0,
            "invalid SWF options: containers would ask for no resources",
        ));
    }
    let mut stats = SwfStats::default();
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        check_line_len(file_name, lineno, line)?;
        let at = |m: String| TraceError::new(file_name, lineno, m);
        let t = line.trim();
        if t.is_empty() || t.starts_with(';') {
            continue;
        }
        let raw: Vec<&str> = t.split_whitespace().collect();
        if raw.len() != 18 {
            return Err(at(format!("expected 18 whitespace-separated SWF fields, found {}", raw.len())));
        }
        stats.lines += 1;
        // Check every field, used or not, so that a corrupt line is caught wherever it is bad.
        let mut ints = [0i64; 18];
        let mut times = [0f64; 18];
        for (k, s) in raw.iter().enumerate() {
            let what = format!("field {} ({})", k + 1, FIELDS[k]);
            if TIME_FIELDS.contains(&k) {
                times[k] = parse_f64(&what, s).map_err(at)?;
            } else {
                ints[k] = parse_i64(&what, s).map_err(at)?;
            }
        }
        let number = ints[0];
        if number < 0 {
            return Err(at(format!("field 1 (job number): expected a positive job number, found {number}")));
        }
        let status = ints[10];
        match status {
            -1 | 0 | 1 | 5 => {}
            2..=4 => {
                stats.skipped_partial += 1;
                continue;
            }
            other => {
                return Err(at(format!(
                    "field 11 (status): expected -1, 0 (failed), 1 (completed), 2, 3, 4 (partial executions) or 5 (cancelled), found {other}"
                )));
            }
        }
        let submit = times[1];
        if submit < 0.0 {
            return Err(at(format!("field 2 (submit time): expected a non-negative time, found {submit}")));
        }
        let run = times[3];
        if run <= 0.0 {
            stats.skipped_no_run_time += 1;
            continue;
        }
        let procs = if ints[4] > 0 { ints[4] } else { ints[7] };
        if procs <= 0 {
            stats.skipped_no_processors += 1;
            continue;
        }
        let count = u32::try_from(procs).map_err(|_| {
            at(format!("processor count {procs} is too large; expected at most {}", u32::MAX))
        })?;
        let memory_kb = [ints[6], ints[9]].into_iter().find(|&m| m > 0);
        let memory_bytes = match memory_kb {
            Some(kb) => (kb as u64)
                .checked_mul(1024)
                .ok_or_else(|| at(format!("memory {kb} KB per processor is too large to count in bytes")))?,
            None => opts.default_memory_bytes,
        };
        let duration_ms = secs_f64_to_ms("field 4 (run time)", run).map_err(at)?;
        let queue = match ints[14] {
            q if opts.queues_from_trace && q >= 0 => format!("root.q{q}"),
            _ => DEFAULT_QUEUE.to_owned(),
        };
        let user = match ints[11] {
            u if u >= 0 => format!("u{u}"),
            _ => "unknown".to_owned(),
        };
        let job = Job {
            name: number.to_string(),
            submit_ms: secs_f64_to_ms("field 2 (submit time)", submit).map_err(at)?,
            queue,
            user,
            class: CLASS.to_owned(),
            priority: 0,
            stages: vec![Stage {
                resources: Resources {
                    cpu_millis: opts.cpu_millis_per_proc,
                    memory_bytes,
                    gpus: 0,
                    reserved: 0,
                },
                count,
                gang: true,
                selector: Vec::new(),
                preferred: Vec::new(),
                rack_affinity: RackAffinity::None,
                duration_ms,
                slow_duration_ms: duration_ms,
            }],
            time_limit_ms: None,
        };
        validate_job(&job).map_err(at)?;
        jobs.push(job);
    }
    stats.jobs = jobs.len();
    sort_by_submit(&mut jobs);
    Ok((jobs, stats))
}
