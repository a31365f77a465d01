//! `POST /ws/v1/cluster/apps/new-application` and `POST /ws/v1/cluster/apps`: the submission,
//! and its validation field by field (the server's rules, which the CLI checks before sending).

use super::resources::{ResourceInfo, ResourceRequest};
use super::states::RackAffinity;
use gantry_engine::{
    AppSpec, MAX_ATTEMPTS, MAX_CONTAINERS_PER_REQUEST, MAX_LABELS, MAX_NAME_LEN, MAX_REQUESTS_PER_APP,
    RequestSpec,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// Per-container bounds the agent enforces too: one definition for both (`gantry_sdk::limits`),
// so a submission the agent would refuse at launch is refused here at once.
pub use gantry_sdk::limits::{
    Limit, MAX_ARGS_BYTES, MAX_CPU_MILLIS, MAX_DISK_BYTES, MAX_MEMORY_BYTES, MIN_CPU_MILLIS, MIN_DISK_BYTES,
    MIN_MEMORY_BYTES,
};
/// Most GPUs one container may ask for (MIG instances count one each).
pub const MAX_GPUS: u32 = 256;
/// Longest program name (`argv[0]`), bytes: the kernel's `PATH_MAX`.
pub const MAX_PROGRAM_LEN: usize = 4096;
/// Largest `expectedMs` / `slowMs`: one year. Run-time estimates beyond it are mistakes.
pub const MAX_EXPECTED_MS: u64 = 366 * 24 * 3600 * 1000;

/// `POST /ws/v1/cluster/apps/new-application`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewApplication {
    /// The reserved id.
    #[serde(rename = "application-id")]
    pub application_id: u64,
    /// The largest container the cluster could place now: the largest node's allocatable
    /// resources.
    #[serde(rename = "maximum-resource-capability")]
    pub maximum_resource_capability: ResourceInfo,
}

/// The answer to a submission (202 Accepted; `Location` names the app).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// The app's id.
    #[serde(rename = "application-id")]
    pub application_id: u64,
}

/// `POST /ws/v1/cluster/apps`: an application of one or more container groups, each with its
/// own size, count and command. Top-level names follow YARN's submission (`application-name`,
/// `max-app-attempts`); `containers` replaces YARN's single `am-container-spec`, since gantry
/// runs any program rather than an application master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitApp {
    /// An id from `new-application`; absent = the scheduler picks one.
    #[serde(rename = "application-id", default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<u64>,
    /// A name for people (may be empty).
    #[serde(rename = "application-name", default)]
    pub name: String,
    /// Leaf queue: a full path (`root.prod`) or a path below root (`prod`); absent = the
    /// scheduler's default queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The submitting user, for accounting and filters (the account a container runs as is
    /// the agent's configuration); absent = the scheduler's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A reservation to run in (`reservation_17`, YARN's `reservation-id`): the app goes to
    /// the reservation's queue, whose guarantee is the reservation's planned allocation.
    #[serde(rename = "reservation-id", default, skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
    /// Priority among the queue's apps (higher first).
    #[serde(default)]
    pub priority: i32,
    /// Attempts a container may use, counting the first run, 1..=100; 0 or absent = the
    /// scheduler's default.
    #[serde(rename = "max-app-attempts", default)]
    pub max_app_attempts: u32,
    /// The container groups, 1..=1000.
    pub containers: Vec<ContainerRequest>,
}

/// One group of identical containers: its size, how many, where, and what they run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContainerRequest {
    /// Resources of each container.
    pub resource: ResourceRequest,
    /// How many containers, 1..=100000 (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// All `count` start together or none does.
    #[serde(default)]
    pub gang: bool,
    /// Priority among the app's groups (higher first).
    #[serde(default)]
    pub priority: i32,
    /// Node selector: labels a node must have (`{"gpu": "a100"}`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Labels a node should have when possible.
    #[serde(default)]
    pub preferred_labels: BTreeMap<String, String>,
    /// Whether the containers must (`required`) or should (`preferred`) share a rack.
    #[serde(default)]
    pub rack_affinity: RackAffinity,
    /// The app's master container: preempted last.
    #[serde(default)]
    pub master: bool,
    /// Expected run time on preferred resources, ms (0 = unknown); for scheduling policies.
    #[serde(default)]
    pub expected_ms: u64,
    /// Expected run time elsewhere, ms (0 = same as `expectedMs`).
    #[serde(default)]
    pub slow_ms: u64,
    /// Program and arguments; `command[0]` is looked up in the agent's `PATH` if it has no
    /// slash.
    pub command: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Most processes and threads each container may have at once (default: the node's
    /// `[isolation] max_pids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u64>,
    /// Disk allowance of each container, bytes: what its files (its directory, logs included)
    /// may hold before its agent kills it (`disk-limit`), [`MIN_DISK_BYTES`]..=[`MAX_DISK_BYTES`];
    /// absent = the node's `container_disk_bytes`. Not a scheduled resource: nodes do not
    /// advertise disk, as YARN's do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// The largest per-container process limit a submission may ask for (the kernel's `pid_max`
/// ceiling; the agent's bound too).
pub use gantry_sdk::limits::MAX_PIDS as MAX_PIDS_PER_CONTAINER;

fn one() -> u32 {
    1
}

/// A refused field of a submission: where (`containers[0].resource.cpuMillis`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// JSON path of the field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ValidationError {
    ValidationError { field: field.into(), message: message.into() }
}

/// Checks a name-like string: length, no control, bidirectional or invisible characters, and
/// optionally not empty — the engine's own rule ([`gantry_sdk::names::check_name`]), checked here
/// so the error names the field.
fn check_text(field: &str, s: &str, allow_empty: bool) -> Result<(), ValidationError> {
    gantry_sdk::names::check_name(s, allow_empty).map_err(|problem| invalid(field, problem.to_string()))
}

fn check_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), ValidationError> {
    if labels.len() > MAX_LABELS {
        return Err(invalid(field, format!("has {} labels; the limit is {MAX_LABELS}", labels.len())));
    }
    for (k, v) in labels {
        check_text(&format!("{field}.{k:?} (key)"), k, false)?;
        check_text(&format!("{field}.{k:?}"), v, true)?;
    }
    Ok(())
}

fn check_queue(q: &str) -> Result<(), ValidationError> {
    check_text("queue", q, false)?;
    // The engine sees the full path (`normalize`), which must fit its name limit too.
    let full = full_queue_path(q);
    if full.len() > MAX_NAME_LEN {
        return Err(invalid(
            "queue",
            format!("its full path `{full}` is {} bytes long; the limit is {MAX_NAME_LEN}", full.len()),
        ));
    }
    if q.chars().any(char::is_whitespace) {
        return Err(invalid("queue", "must not contain spaces"));
    }
    if q.split('.').any(str::is_empty) {
        return Err(invalid("queue", format!("`{q}` has an empty component; write e.g. `root.prod`")));
    }
    Ok(())
}

impl ResourceRequest {
    /// Checks the sizes against the limits above.
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        if !Limit::CpuMillis.contains(self.cpu_millis) {
            return Err(invalid(
                format!("{field}.cpuMillis"),
                format!(
                    "{} millicores is outside {MIN_CPU_MILLIS}..={MAX_CPU_MILLIS} (1000 = one core)",
                    self.cpu_millis
                ),
            ));
        }
        if !Limit::MemoryBytes.contains(self.memory_bytes) {
            return Err(invalid(
                format!("{field}.memoryBytes"),
                format!(
                    "{} bytes is outside {MIN_MEMORY_BYTES}..={MAX_MEMORY_BYTES} (1 MiB to 1 PiB)",
                    self.memory_bytes
                ),
            ));
        }
        if self.gpus > MAX_GPUS {
            return Err(invalid(
                format!("{field}.gpus"),
                format!("{} GPUs is more than {MAX_GPUS}", self.gpus),
            ));
        }
        Ok(())
    }
}

impl ContainerRequest {
    /// Checks every field; `field` is the group's JSON path (`containers[0]`).
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        self.resource.validate(&format!("{field}.resource"))?;
        if !(1..=MAX_CONTAINERS_PER_REQUEST).contains(&self.count) {
            return Err(invalid(
                format!("{field}.count"),
                format!("{} is outside 1..={MAX_CONTAINERS_PER_REQUEST}", self.count),
            ));
        }
        check_labels(&format!("{field}.labels"), &self.labels)?;
        check_labels(&format!("{field}.preferredLabels"), &self.preferred_labels)?;
        for (name, v) in [("expectedMs", self.expected_ms), ("slowMs", self.slow_ms)] {
            if v > MAX_EXPECTED_MS {
                return Err(invalid(
                    format!("{field}.{name}"),
                    format!("{v} ms is more than a year ({MAX_EXPECTED_MS} ms)"),
                ));
            }
        }
        if let Some(n) = self.max_pids {
            if !Limit::MaxPids.contains(n) {
                return Err(invalid(
                    format!("{field}.maxPids"),
                    format!("{n} is outside 1..={MAX_PIDS_PER_CONTAINER}"),
                ));
            }
        }
        let Some(program) = self.command.first() else {
            return Err(invalid(format!("{field}.command"), "must name a program: it is empty"));
        };
        if program.is_empty() {
            return Err(invalid(format!("{field}.command[0]"), "the program name is empty"));
        }
        if program.len() > MAX_PROGRAM_LEN {
            return Err(invalid(
                format!("{field}.command[0]"),
                format!("the program name is {} bytes; the limit is {MAX_PROGRAM_LEN}", program.len()),
            ));
        }
        for (i, a) in self.command.iter().enumerate() {
            if a.contains('\0') {
                return Err(invalid(format!("{field}.command[{i}]"), "contains a NUL byte"));
            }
        }
        for (k, v) in &self.env {
            let f = format!("{field}.env.{k:?}");
            if k.is_empty() {
                return Err(invalid(f, "the variable name is empty"));
            }
            if k.contains('=') || k.contains('\0') {
                return Err(invalid(f, "the variable name contains `=` or a NUL byte"));
            }
            if v.contains('\0') {
                return Err(invalid(f, "the value contains a NUL byte"));
            }
        }
        if let Some(disk) = self.disk_bytes.filter(|&d| !Limit::DiskBytes.contains(d)) {
            return Err(invalid(
                format!("{field}.diskBytes"),
                format!(
                    "{disk} bytes is outside {MIN_DISK_BYTES}..={MAX_DISK_BYTES} (1 MiB to 1 PiB); leave it out for the node's default"
                ),
            ));
        }
        let bytes = gantry_sdk::limits::args_bytes(
            self.command.iter().map(String::as_str),
            self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        if bytes > MAX_ARGS_BYTES {
            return Err(invalid(
                field,
                format!("command and env are {bytes} bytes; the limit is {MAX_ARGS_BYTES}"),
            ));
        }
        Ok(())
    }

    /// As the engine's request.
    pub fn to_request_spec(&self) -> RequestSpec {
        let pairs = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        RequestSpec {
            resources: self.resource.to_gantry(),
            count: self.count,
            gang: self.gang,
            priority: self.priority,
            selector: pairs(&self.labels),
            preferred: pairs(&self.preferred_labels),
            rack_affinity: self.rack_affinity.into(),
            master: self.master,
            expected_ms: self.expected_ms,
            slow_ms: self.slow_ms,
            deadline_ms: 0,
        }
    }
}

impl SubmitApp {
    /// Checks every field against the limits of the API, the engine and the agent, and names
    /// the first bad one. A submission that passes is one the engine accepts, unless its queue
    /// does not exist.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.application_id == Some(0) {
            return Err(invalid("application-id", "0 is not an application id"));
        }
        check_text("application-name", &self.name, true)?;
        if let Some(q) = &self.queue {
            check_queue(q)?;
        }
        if let Some(u) = &self.user {
            check_text("user", u, false)?;
        }
        if self.max_app_attempts > MAX_ATTEMPTS {
            return Err(invalid(
                "max-app-attempts",
                format!("{} is more than {MAX_ATTEMPTS}", self.max_app_attempts),
            ));
        }
        if self.containers.is_empty() {
            return Err(invalid("containers", "at least one container group is needed"));
        }
        if self.containers.len() > MAX_REQUESTS_PER_APP {
            return Err(invalid(
                "containers",
                format!("{} groups; the limit is {MAX_REQUESTS_PER_APP}", self.containers.len()),
            ));
        }
        self.containers.iter().enumerate().try_for_each(|(i, c)| c.validate(&format!("containers[{i}]")))
    }

    /// Writes the queue as a full path: `default` → `root.default`, `root.prod` unchanged.
    pub fn normalize(&mut self) {
        if let Some(q) = &mut self.queue {
            *q = full_queue_path(q);
        }
    }

    /// As the engine's application spec, with the daemon's defaults for what the submission
    /// leaves out. Commands and environments are not part of it: the daemon keeps them with
    /// the app (by group index) for the launches.
    pub fn to_app_spec(&self, default_queue: &str, default_user: &str) -> AppSpec {
        AppSpec {
            name: self.name.clone(),
            queue: self.queue.clone().unwrap_or_else(|| default_queue.to_owned()),
            user: self.user.clone().unwrap_or_else(|| default_user.to_owned()),
            priority: self.priority,
            max_attempts: self.max_app_attempts,
            requests: self.containers.iter().map(ContainerRequest::to_request_spec).collect(),
        }
    }
}

/// A queue path as users may write it (`prod`) made full (`root.prod`); full paths unchanged.
pub fn full_queue_path(queue: &str) -> String {
    if queue == "root" || queue.starts_with("root.") { queue.to_owned() } else { format!("root.{queue}") }
}
