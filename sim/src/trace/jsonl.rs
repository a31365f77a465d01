//! gantry's own trace format: JSON lines, one [`Job`] per line.
//!
//! Every field of [`Job`] and [`Stage`] can be written, so this is the format the trace
//! generator writes ([`write()`]) and the one to use for hand-made scenarios. The other readers
//! turn foreign formats into the same jobs; a foreign trace can be converted to this format to be
//! inspected or edited.
//!
//! # Format
//!
//! - UTF-8 text, one JSON object per line. Blank lines and lines whose first non-blank character
//!   is `#` are ignored (comments), so a scenario can explain itself.
//! - Unknown fields are refused (`"gnag": true` is a typo, not an extension), as are values of the
//!   wrong type, negative or fractional numbers where counts or times are expected, and numbers
//!   beyond their type (`u64` for times and sizes, `u32` for counts and GPUs, `i32` for priority).
//! - A label map (`selector`, `preferred`) is a JSON object of string values; its order is kept
//!   (it is the order the engine sees), so it round-trips exactly.
//!
//! Job fields:
//!
//! | field | type | default | meaning |
//! |---|---|---|---|
//! | `name` | string | required | the trace's identifier, kept in the per-job output |
//! | `submit_ms` | integer | required | submission time, ms from the start of the trace |
//! | `queue` | string | `"root.default"` | leaf queue path |
//! | `user` | string | `"default"` | submitting user |
//! | `class` | string | `"job"` | class for per-class figures |
//! | `priority` | integer | `0` | priority, higher first |
//! | `time_limit_ms` | integer or null | none | killed if not finished this long after submission |
//! | `stages` | array | required, non-empty | stages, run one after another |
//!
//! Stage fields:
//!
//! | field | type | default | meaning |
//! |---|---|---|---|
//! | `cpu_millis` | integer | `0` | CPU of each container, millicores |
//! | `memory_bytes` | integer | `0` | memory of each container, bytes |
//! | `gpus` | integer | `0` | whole GPUs of each container |
//! | `count` | integer | `1` | number of containers, 1..=100000 |
//! | `gang` | bool | `false` | all containers start together or none does |
//! | `selector` | object | `{}` | hard constraints: label key → value; `"A\|B"` = either |
//! | `preferred` | object | `{}` | soft preferences: where they hold, `duration_ms` applies |
//! | `rack_affinity` | string | `"none"` | `"none"`, `"preferred"` (one rack → fast) or `"required"` |
//! | `duration_ms` | integer | required | run time where the preferences hold (or anywhere) |
//! | `slow_duration_ms` | integer | `duration_ms` | run time elsewhere; at least `duration_ms` |
//!
//! At least one of `cpu_millis`, `memory_bytes`, `gpus` must be non-zero (the engine refuses an
//! empty request). Names, queues, users, classes and label keys must be non-empty, at most 253
//! bytes and free of control characters (the engine's rules), checked here so that the error
//! names the line.
//!
//! # Example
//!
//! ```text
//! # a two-stage job and a GPU gang that prefers A100s
//! {"name":"etl-1","submit_ms":0,"queue":"root.batch","user":"ann","class":"mapreduce","stages":[{"cpu_millis":1000,"memory_bytes":2147483648,"count":40,"duration_ms":30000},{"cpu_millis":1000,"memory_bytes":4294967296,"count":4,"duration_ms":60000}]}
//! {"name":"train-7","submit_ms":1500,"priority":10,"time_limit_ms":1200000,"stages":[{"cpu_millis":8000,"memory_bytes":68719476736,"gpus":1,"count":4,"gang":true,"selector":{"gpu_model":"A100|H100"},"preferred":{"gpu_model":"A100"},"rack_affinity":"preferred","duration_ms":600000,"slow_duration_ms":900000}]}
//! ```
//!
//! Jobs come back sorted by `submit_ms`, lines with equal times in file order.

use super::{DEFAULT_QUEUE, Job, Stage, TraceError, check_line_len, read_text, sort_by_submit, validate_job};
use gantry_engine::{RackAffinity, Resources};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::Path;

/// The user of a job whose line does not say.
pub const DEFAULT_USER: &str = "default";
/// The class of a job whose line does not say.
pub const DEFAULT_CLASS: &str = "job";

/// Reads a JSON-lines trace file.
pub fn read(path: &Path) -> Result<Vec<Job>, TraceError> {
    let text = read_text(path)?;
    parse(&text, &path.display().to_string())
}

/// Parses JSON-lines text; `file_name` is only used in errors.
pub fn parse(text: &str, file_name: &str) -> Result<Vec<Job>, TraceError> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        check_line_len(file_name, lineno, line)?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let record: JobRecord = serde_json::from_str(trimmed).map_err(|e| {
            TraceError::new(file_name, lineno, format!("expected a gantry job object: {}", describe(&e)))
        })?;
        let job = record.into_job();
        validate_job(&job).map_err(|m| TraceError::new(file_name, lineno, m))?;
        jobs.push(job);
    }
    sort_by_submit(&mut jobs);
    Ok(jobs)
}

/// Writes jobs as JSON lines, one per line, each ending in `\n`, in the order given. Fields at
/// their default are left out, so generated traces stay short; [`parse`] reads back jobs equal
/// to the ones written (provided they pass [`validate_job`]).
pub fn write(jobs: &[Job]) -> String {
    let mut out = String::new();
    for job in jobs {
        let record = JobOut::from(job);
        // Serializing strings, integers and booleans with string map keys cannot fail; were it
        // ever to, the line written is one `parse` refuses, never a job silently dropped.
        match serde_json::to_string(&record) {
            Ok(line) => out.push_str(&line),
            Err(e) => out.push_str(&format!("!cannot write job {:?}: {e}", job.name)),
        }
        out.push('\n');
    }
    out
}

/// serde_json's message without its "at line 1 column N" (every line is parsed on its own, so
/// the line is always 1), with the column said plainly instead.
fn describe(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let msg = match full.rfind(" at line ") {
        Some(at) => &full[..at],
        None => &full,
    };
    format!("{msg} (column {})", e.column())
}

fn default_queue() -> String {
    DEFAULT_QUEUE.to_owned()
}
fn default_user() -> String {
    DEFAULT_USER.to_owned()
}
fn default_class() -> String {
    DEFAULT_CLASS.to_owned()
}
fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobRecord {
    name: String,
    submit_ms: u64,
    #[serde(default = "default_queue")]
    queue: String,
    #[serde(default = "default_user")]
    user: String,
    #[serde(default = "default_class")]
    class: String,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    time_limit_ms: Option<u64>,
    stages: Vec<StageRecord>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StageRecord {
    #[serde(default)]
    cpu_millis: u64,
    #[serde(default)]
    memory_bytes: u64,
    #[serde(default)]
    gpus: u32,
    #[serde(default = "one")]
    count: u32,
    #[serde(default)]
    gang: bool,
    #[serde(default)]
    selector: Labels,
    #[serde(default)]
    preferred: Labels,
    #[serde(default)]
    rack_affinity: Affinity,
    duration_ms: u64,
    #[serde(default)]
    slow_duration_ms: Option<u64>,
}

impl JobRecord {
    fn into_job(self) -> Job {
        Job {
            name: self.name,
            submit_ms: self.submit_ms,
            queue: self.queue,
            user: self.user,
            class: self.class,
            priority: self.priority,
            stages: self
                .stages
                .into_iter()
                .map(|s| Stage {
                    resources: Resources {
                        cpu_millis: s.cpu_millis,
                        memory_bytes: s.memory_bytes,
                        gpus: s.gpus,
                        reserved: 0,
                    },
                    count: s.count,
                    gang: s.gang,
                    selector: s.selector.0,
                    preferred: s.preferred.0,
                    rack_affinity: s.rack_affinity.into(),
                    duration_ms: s.duration_ms,
                    slow_duration_ms: s.slow_duration_ms.unwrap_or(s.duration_ms),
                })
                .collect(),
            time_limit_ms: self.time_limit_ms,
        }
    }
}

/// Rack affinity as written in the file.
#[derive(Deserialize, Serialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Affinity {
    #[default]
    None,
    Preferred,
    Required,
}

impl From<Affinity> for RackAffinity {
    fn from(a: Affinity) -> Self {
        match a {
            Affinity::None => RackAffinity::None,
            Affinity::Preferred => RackAffinity::Preferred,
            Affinity::Required => RackAffinity::Required,
        }
    }
}

impl From<RackAffinity> for Affinity {
    fn from(a: RackAffinity) -> Self {
        match a {
            RackAffinity::None => Affinity::None,
            RackAffinity::Preferred => Affinity::Preferred,
            RackAffinity::Required => Affinity::Required,
        }
    }
}

/// A label map read in document order (serde's maps would sort or deduplicate it).
#[derive(Default)]
struct Labels(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of label key → string value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Labels, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(Labels(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A label list written as an object, in order.
struct LabelsOut<'a>(&'a [(String, String)]);

impl Serialize for LabelsOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct JobOut<'a> {
    name: &'a str,
    submit_ms: u64,
    #[serde(skip_serializing_if = "is_default_queue")]
    queue: &'a str,
    #[serde(skip_serializing_if = "is_default_user")]
    user: &'a str,
    #[serde(skip_serializing_if = "is_default_class")]
    class: &'a str,
    #[serde(skip_serializing_if = "is_zero_i32")]
    priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_limit_ms: Option<u64>,
    stages: Vec<StageOut<'a>>,
}

#[derive(Serialize)]
struct StageOut<'a> {
    #[serde(skip_serializing_if = "is_zero_u64")]
    cpu_millis: u64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    memory_bytes: u64,
    #[serde(skip_serializing_if = "is_zero_u32")]
    gpus: u32,
    #[serde(skip_serializing_if = "is_one")]
    count: u32,
    #[serde(skip_serializing_if = "is_false")]
    gang: bool,
    #[serde(skip_serializing_if = "is_empty_labels")]
    selector: LabelsOut<'a>,
    #[serde(skip_serializing_if = "is_empty_labels")]
    preferred: LabelsOut<'a>,
    #[serde(skip_serializing_if = "is_no_affinity")]
    rack_affinity: Affinity,
    duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_duration_ms: Option<u64>,
}

impl<'a> From<&'a Job> for JobOut<'a> {
    fn from(j: &'a Job) -> Self {
        JobOut {
            name: &j.name,
            submit_ms: j.submit_ms,
            queue: &j.queue,
            user: &j.user,
            class: &j.class,
            priority: j.priority,
            time_limit_ms: j.time_limit_ms,
            stages: j
                .stages
                .iter()
                .map(|s| StageOut {
                    cpu_millis: s.resources.cpu_millis,
                    memory_bytes: s.resources.memory_bytes,
                    gpus: s.resources.gpus,
                    count: s.count,
                    gang: s.gang,
                    selector: LabelsOut(&s.selector),
                    preferred: LabelsOut(&s.preferred),
                    rack_affinity: s.rack_affinity.into(),
                    duration_ms: s.duration_ms,
                    slow_duration_ms: (s.slow_duration_ms != s.duration_ms).then_some(s.slow_duration_ms),
                })
                .collect(),
        }
    }
}

fn is_default_queue(q: &&str) -> bool {
    *q == DEFAULT_QUEUE
}
fn is_default_user(u: &&str) -> bool {
    *u == DEFAULT_USER
}
fn is_default_class(c: &&str) -> bool {
    *c == DEFAULT_CLASS
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}
fn is_one(v: &u32) -> bool {
    *v == 1
}
fn is_false(v: &bool) -> bool {
    !*v
}
fn is_empty_labels(l: &LabelsOut<'_>) -> bool {
    l.0.is_empty()
}
fn is_no_affinity(a: &Affinity) -> bool {
    *a == Affinity::None
}
