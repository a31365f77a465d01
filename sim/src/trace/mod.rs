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

pub mod alibaba;
pub mod cmu;
pub mod jsonl;
pub mod swf;
pub mod swim;

use gantry_engine::{MAX_CONTAINERS_PER_REQUEST, MAX_LABELS};
use std::path::Path;

/// The queue every reader uses when its format has none (the engine's default leaf queue).
pub const DEFAULT_QUEUE: &str = "root.default";

impl TraceError {
    /// An error at `line` (1-based; 0 for the file as a whole) of `file`.
    pub fn new(file: &str, line: usize, message: impl Into<String>) -> Self {
        TraceError { file: file.to_owned(), line, message: message.into() }
    }
}

/// The largest trace file read: 1 GiB, ten times the largest log of the Parallel Workloads
/// Archive. A trace is read whole into memory, so a bigger file (or a device that never ends)
/// is refused rather than exhausting it.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// The longest line of a trace: 1 MiB, far beyond any record of the formats read here.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Reads a whole trace file as UTF-8, at most [`MAX_TRACE_BYTES`]. An unreadable or oversized
/// file is an error at line 0.
pub(crate) fn read_text(path: &Path) -> Result<String, TraceError> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let fail = |e: std::io::Error| TraceError::new(&name, 0, format!("cannot read the file: {e}"));
    let too_large = || {
        TraceError::new(
            &name,
            0,
            format!("the file is larger than the {MAX_TRACE_BYTES}-byte limit for a trace"),
        )
    };
    let file = std::fs::File::open(path).map_err(fail)?;
    if file.metadata().map_err(fail)?.len() > MAX_TRACE_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    // `take` as well as the length: a FIFO or a device has none.
    file.take(MAX_TRACE_BYTES + 1).read_to_end(&mut bytes).map_err(fail)?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        TraceError::new(&name, line, "the file is not UTF-8 text")
    })
}

/// Refuses a line longer than [`MAX_LINE_BYTES`] before it is parsed.
pub(crate) fn check_line_len(file: &str, lineno: usize, line: &str) -> Result<(), TraceError> {
    if line.len() > MAX_LINE_BYTES {
        return Err(TraceError::new(
            file,
            lineno,
            format!("the line is {} bytes long; expected at most {MAX_LINE_BYTES}", line.len()),
        ));
    }
    Ok(())
}

/// Sorts jobs by submission time, keeping the trace's order among equal times (a stable sort),
/// so that two jobs submitted at the same instant reach the engine in the order the trace lists
/// them, whatever the reader.
pub fn sort_by_submit(jobs: &mut [Job]) {
    jobs.sort_by_key(|j| j.submit_ms);
}

/// Checks a job against what the engine would refuse at submission (names, label counts,
/// container counts, empty requests) and against the model's own rules (at least one stage,
/// `slow_duration_ms >= duration_ms`), so that a bad trace line is reported with its line number
/// by the reader instead of as an engine rejection in the middle of a run.
pub fn validate_job(job: &Job) -> Result<(), String> {
    check_name("name", &job.name, false)?;
    check_name("queue", &job.queue, false)?;
    check_name("user", &job.user, false)?;
    check_name("class", &job.class, false)?;
    if job.stages.is_empty() {
        return Err("a job needs at least one stage".into());
    }
    for (i, s) in job.stages.iter().enumerate() {
        let at = |m: String| format!("stage {i}: {m}");
        if s.count == 0 || s.count > MAX_CONTAINERS_PER_REQUEST {
            return Err(at(format!("count {} is not in 1..={MAX_CONTAINERS_PER_REQUEST}", s.count)));
        }
        if s.resources.cpu_millis == 0 && s.resources.memory_bytes == 0 && s.resources.gpus == 0 {
            return Err(at("asks for no resources (CPU, memory and GPUs are all 0)".into()));
        }
        if s.resources.reserved != 0 {
            return Err(at("the reserved resource field must be 0".into()));
        }
        check_labels("selector", &s.selector).map_err(at)?;
        check_labels("preferred", &s.preferred).map_err(at)?;
        if s.slow_duration_ms < s.duration_ms {
            return Err(at(format!(
                "slow_duration_ms {} is shorter than duration_ms {}; expected the slow duration to be at least the fast one",
                s.slow_duration_ms, s.duration_ms
            )));
        }
    }
    Ok(())
}

/// The engine's rule for names ([`gantry_sdk::names::check_name`]): at most
/// [`gantry_sdk::names::MAX_NAME_LEN`] bytes, no control, bidirectional or invisible characters.
/// The cluster files' reader checks its names here too.
pub(crate) fn check_name(what: &str, s: &str, allow_empty: bool) -> Result<(), String> {
    use gantry_sdk::names::NameProblem;
    match gantry_sdk::names::check_name(s, allow_empty) {
        Ok(()) => Ok(()),
        // `{:?}` escapes the refused character, so the message shows where it is.
        Err(problem @ NameProblem::Forbidden(_)) => Err(format!("{what} {s:?} {problem}")),
        Err(problem) => Err(format!("{what} {problem}")),
    }
}

pub(crate) fn check_labels(what: &str, labels: &[(String, String)]) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!("{what} has {} terms; expected at most {MAX_LABELS}", labels.len()));
    }
    for (k, v) in labels {
        check_name(&format!("{what} key"), k, false)?;
        check_name(&format!("{what} value of `{k}`"), v, true)?;
    }
    Ok(())
}

/// Parses a non-negative decimal integer (digits only: no sign, no fraction, no exponent),
/// naming the field and saying what was expected when it is not one.
pub(crate) fn parse_u64(what: &str, s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("{what}: expected a non-negative integer, found an empty field"));
    }
    let negative =
        t.strip_prefix('-').is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
    if negative {
        return Err(format!("{what}: expected a non-negative integer, found the negative number `{t}`"));
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what}: expected a non-negative integer, found `{t}`"));
    }
    t.parse::<u64>().map_err(|_| format!("{what}: `{t}` is too large; expected at most {}", u64::MAX))
}

/// [`parse_u64`], narrowed to `u32`.
pub(crate) fn parse_u32(what: &str, s: &str) -> Result<u32, String> {
    let v = parse_u64(what, s)?;
    u32::try_from(v)
        .map_err(|_| format!("{what}: `{}` is too large; expected at most {}", s.trim(), u32::MAX))
}

/// Parses a decimal integer that may be negative (`-1` is "unknown" in several formats).
pub(crate) fn parse_i64(what: &str, s: &str) -> Result<i64, String> {
    let t = s.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what}: expected an integer, found `{t}`"));
    }
    t.parse::<i64>()
        .map_err(|_| format!("{what}: `{t}` is out of range; expected {}..={}", i64::MIN, i64::MAX))
}

/// Parses a finite decimal number (integer or with a fraction or exponent; `nan` and `inf` are
/// refused).
pub(crate) fn parse_f64(what: &str, s: &str) -> Result<f64, String> {
    let t = s.trim();
    let ok_chars = !t.is_empty()
        && t.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'));
    match t.parse::<f64>() {
        Ok(v) if ok_chars && v.is_finite() => Ok(v),
        _ => Err(format!("{what}: expected a number, found `{t}`")),
    }
}

/// Seconds (possibly fractional, non-negative) to milliseconds, rounded to the nearest ms.
pub(crate) fn secs_f64_to_ms(what: &str, secs: f64) -> Result<u64, String> {
    if secs < 0.0 {
        return Err(format!("{what}: expected a non-negative number of seconds, found {secs}"));
    }
    let ms = (secs * 1000.0).round();
    // 2^63 ms is 292 million years; anything beyond is a corrupt field, not a trace.
    if ms >= 9.2e18 {
        return Err(format!("{what}: {secs} s is too large"));
    }
    Ok(ms as u64)
}

/// Whole seconds to milliseconds, refusing an overflow.
pub(crate) fn secs_to_ms(what: &str, secs: u64) -> Result<u64, String> {
    secs.checked_mul(1000).ok_or_else(|| format!("{what}: {secs} s is too large to count in milliseconds"))
}

/// Splits one line of a simple CSV file (no quoting: none of the formats read here quotes
/// fields, and a quote is refused rather than silently mis-split).
pub(crate) fn split_csv(line: &str) -> Result<Vec<&str>, String> {
    if line.contains('"') {
        return Err("quoted CSV fields are not supported; expected plain comma-separated values".into());
    }
    Ok(line.split(',').map(str::trim).collect())
}
