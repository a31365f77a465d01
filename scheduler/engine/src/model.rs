//! What the outside world tells the engine: specifications of nodes, queues, applications and
//! their container requests, plus the engine's configuration. These are owned Rust values; the
//! engine turns them into the `repr(C)` records it keeps (see [`crate::state`]).

use crate::error::EngineError;
pub use gantry_sdk::abi::GantryResources as Resources;

/// Most requests one application may carry.
pub const MAX_REQUESTS_PER_APP: usize = 1_000;
/// Most containers one request may ask for.
pub const MAX_CONTAINERS_PER_REQUEST: u32 = 100_000;
/// Most labels on a node, or terms in a selector.
pub const MAX_LABELS: usize = 64;
/// Longest name, label key or value, in bytes (the SDK's one rule for names).
pub use gantry_sdk::names::MAX_NAME_LEN;
/// Largest attempt count an application may ask for.
pub const MAX_ATTEMPTS: u32 = 100;

/// A stable application id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppId(pub u64);

/// A stable container id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerId(pub u64);

/// A stable reservation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReservationId(pub u64);

/// A node's position in the engine's node table. Nodes are never removed, so it is stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// One GPU as an agent reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSpec {
    /// Index on the node.
    pub index: u32,
    /// Model name, e.g. `A100-SXM4-80GB`.
    pub model: String,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// A node as its agent registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Unique name.
    pub name: String,
    /// Rack (may be empty).
    pub rack: String,
    /// `key=value` labels.
    pub labels: Vec<(String, String)>,
    /// Allocatable resources. `gpus` must equal `gpu_list.len()` when a list is given.
    pub capacity: Resources,
    /// GPUs; may be empty even when `capacity.gpus > 0` (then anonymous GPUs are assumed).
    pub gpu_list: Vec<GpuSpec>,
}

/// A queue of the hierarchy, named by its full dotted path (`root.prod.etl`).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    /// Full path; its parent is the path without the last component. `root` is implicit.
    pub path: String,
    /// Guaranteed share of the parent, 0..=1.
    pub guaranteed: f64,
    /// Maximum share of the parent, `guaranteed..=1`.
    pub maximum: f64,
}

/// Whether a request's containers must or should share a rack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RackAffinity {
    /// No constraint.
    #[default]
    None,
    /// One rack if possible.
    Preferred,
    /// One rack or not at all.
    Required,
}

/// A request for `count` containers of one size.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestSpec {
    /// Resources of each container.
    pub resources: Resources,
    /// How many containers.
    pub count: u32,
    /// All `count` start together or none does.
    pub gang: bool,
    /// Priority within the app (higher first).
    pub priority: i32,
    /// Labels a node must have.
    pub selector: Vec<(String, String)>,
    /// Labels a node should have.
    pub preferred: Vec<(String, String)>,
    /// Rack affinity of the containers.
    pub rack_affinity: RackAffinity,
    /// The app's master container (preempted last).
    pub master: bool,
    /// Expected run time on preferred resources, ms (0 = unknown).
    pub expected_ms: u64,
    /// Expected run time elsewhere, ms (0 = same).
    pub slow_ms: u64,
    /// Deadline, ms on the engine's clock (0 = none).
    pub deadline_ms: u64,
}

/// An application submission.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppSpec {
    /// Human name.
    pub name: String,
    /// Leaf queue path.
    pub queue: String,
    /// Submitting user.
    pub user: String,
    /// Priority (higher first).
    pub priority: i32,
    /// How many times a failed container may be retried in total, counting the first run
    /// (0 = the engine's default).
    pub max_attempts: u32,
    /// Its container requests.
    pub requests: Vec<RequestSpec>,
}

/// The engine's configuration. Every field has a default.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Seed of the engine's random numbers (passed to plugins as per-call seeds).
    pub seed: u64,
    /// Queues below `root`; none means everything goes to `root.default`.
    pub queues: Vec<QueueSpec>,
    /// Attempts an application gets when it does not say.
    pub default_max_attempts: u32,
    /// Consecutive failed calls after which a plugin is quarantined.
    pub quarantine_after: u32,
    /// How long a quarantine lasts before the plugin is tried again, ms.
    pub quarantine_ms: u64,
    /// Time between `rebalance` calls, ms.
    pub rebalance_interval_ms: u64,
    /// Terminal applications remembered for queries.
    pub history_len: usize,
    /// The reservation plan, if one queue is reservable (its planner is `Profile::reserve`).
    pub reservations: Option<crate::reservations::PlanConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            seed: 0,
            queues: Vec::new(),
            default_max_attempts: 3,
            quarantine_after: 3,
            quarantine_ms: 60_000,
            rebalance_interval_ms: 3_000,
            history_len: 10_000,
            reservations: None,
        }
    }
}

/// Checks a name, label key or value: length, and no control, bidirectional or invisible
/// characters ([`gantry_sdk::names::check_name`], the rule the API and the agent check too).
pub(crate) fn check_name(what: &'static str, s: &str, allow_empty: bool) -> Result<(), EngineError> {
    gantry_sdk::names::check_name(s, allow_empty)
        .map_err(|problem| EngineError::Invalid { what, reason: problem.to_string() })
}

pub(crate) fn check_labels(what: &'static str, labels: &[(String, String)]) -> Result<(), EngineError> {
    if labels.len() > MAX_LABELS {
        return Err(EngineError::Invalid {
            what,
            reason: format!("has {} labels, more than {MAX_LABELS}", labels.len()),
        });
    }
    for (k, v) in labels {
        // `{:?}` escapes what the check refuses, so the message itself shows it safely.
        let invalid = |reason| EngineError::Invalid { what, reason };
        gantry_sdk::names::check_name(k, false).map_err(|p| invalid(format!("key {k:?} {p}")))?;
        gantry_sdk::names::check_name(v, true).map_err(|p| invalid(format!("the value of {k:?} {p}")))?;
    }
    Ok(())
}

impl NodeSpec {
    pub(crate) fn validate(&self) -> Result<(), EngineError> {
        check_name("node name", &self.name, false)?;
        check_name("node rack", &self.rack, true)?;
        check_labels("node labels", &self.labels)?;
        if !self.gpu_list.is_empty() && self.gpu_list.len() != self.capacity.gpus as usize {
            return Err(EngineError::Invalid {
                what: "node GPUs",
                reason: format!(
                    "capacity says {} GPUs but {} are listed",
                    self.capacity.gpus,
                    self.gpu_list.len()
                ),
            });
        }
        for g in &self.gpu_list {
            check_name("GPU model", &g.model, true)?;
        }
        Ok(())
    }
}

impl RequestSpec {
    pub(crate) fn validate(&self) -> Result<(), EngineError> {
        let what = "request";
        if self.count == 0 || self.count > MAX_CONTAINERS_PER_REQUEST {
            return Err(EngineError::Invalid {
                what,
                reason: format!("count {} is not in 1..={MAX_CONTAINERS_PER_REQUEST}", self.count),
            });
        }
        if self.resources.is_zero() {
            return Err(EngineError::Invalid { what, reason: "asks for no resources".into() });
        }
        if self.resources.reserved != 0 {
            return Err(EngineError::Invalid { what, reason: "reserved resource field is not zero".into() });
        }
        check_labels("request selector", &self.selector)?;
        check_labels("request preferences", &self.preferred)?;
        Ok(())
    }
}

impl AppSpec {
    pub(crate) fn validate(&self) -> Result<(), EngineError> {
        check_name("app name", &self.name, true)?;
        check_name("app user", &self.user, false)?;
        check_name("app queue", &self.queue, false)?;
        if self.requests.is_empty() || self.requests.len() > MAX_REQUESTS_PER_APP {
            return Err(EngineError::Invalid {
                what: "app",
                reason: format!("has {} requests; it needs 1..={MAX_REQUESTS_PER_APP}", self.requests.len()),
            });
        }
        if self.max_attempts > MAX_ATTEMPTS {
            return Err(EngineError::Invalid {
                what: "app",
                reason: format!("max_attempts {} exceeds {MAX_ATTEMPTS}", self.max_attempts),
            });
        }
        self.requests.iter().try_for_each(RequestSpec::validate)
    }
}
