//! `GET /ws/v1/cluster/apps`: applications, their container groups and containers; the bodies
//! of the app and node `state` resources; removable nodes.

use super::resources::{ResourceInfo, percent};
use super::states::{AppState, ContainerState, FinalStatus, NodeState, RackAffinity};
use super::submission::ContainerRequest;
use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `GET /ws/v1/cluster/apps`: `{"apps": {"app": [...]}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppsResponse {
    /// The list.
    pub apps: AppList,
}

/// YARN's wrapper around the app array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppList {
    /// The apps.
    #[serde(default)]
    pub app: Vec<AppInfo>,
}

/// `GET /ws/v1/cluster/apps/{id}`: `{"app": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppResponse {
    /// The app.
    pub app: AppInfo,
}

/// An application. Build it with [`AppInfo::new`], then fill in what is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppInfo {
    /// Its id.
    pub id: u64,
    /// The submitting user.
    pub user: String,
    /// Its name.
    pub name: String,
    /// Its leaf queue's full path.
    pub queue: String,
    /// Its state.
    pub state: AppState,
    /// Its outcome, `UNDEFINED` until it is over.
    pub final_status: FinalStatus,
    /// Percent of the containers it needs (all its groups' counts) that completed
    /// successfully, 0..=100; 100 once it is over (as YARN).
    pub progress: f64,
    /// Why it is in its state (e.g. why it failed or was rejected).
    pub diagnostics: String,
    /// Its priority (higher first).
    pub priority: i32,
    /// Submission time, Unix ms.
    pub started_time: u64,
    /// When it ended, Unix ms; 0 while it runs (as YARN).
    pub finished_time: u64,
    /// Milliseconds from submission to its end, or to now.
    pub elapsed_time: u64,
    /// Allocated memory, MiB.
    #[serde(rename = "allocatedMB")]
    pub allocated_mb: u64,
    /// Allocated whole cores.
    #[serde(rename = "allocatedVCores")]
    pub allocated_v_cores: u64,
    /// Containers running.
    pub running_containers: u32,
    /// Allocated resources, exact (gantry).
    pub allocated_resources: ResourceInfo,
    /// Attempts a container may use, counting the first run (YARN's `maxAppAttempts`).
    pub max_app_attempts: u32,
    /// Container failures so far (gantry; node losses and preemptions do not count).
    pub failures: u32,
    /// Its container groups, in submission order (gantry).
    #[serde(default)]
    pub requests: Vec<RequestInfo>,
    /// Its containers that the scheduler still knows, oldest first (gantry).
    #[serde(default)]
    pub containers: Vec<ContainerInfo>,
}

impl AppInfo {
    /// An app in a state; resources zero, no requests or containers.
    pub fn new(
        id: u64,
        name: impl Into<String>,
        user: impl Into<String>,
        queue: impl Into<String>,
        state: AppState,
    ) -> AppInfo {
        let mut app = AppInfo {
            id,
            user: user.into(),
            name: name.into(),
            queue: queue.into(),
            state,
            final_status: FinalStatus::Undefined,
            progress: 0.0,
            diagnostics: String::new(),
            priority: 0,
            started_time: 0,
            finished_time: 0,
            elapsed_time: 0,
            allocated_mb: 0,
            allocated_v_cores: 0,
            running_containers: 0,
            allocated_resources: ResourceInfo::default(),
            max_app_attempts: 0,
            failures: 0,
            requests: Vec::new(),
            containers: Vec::new(),
        };
        app.set_state(state);
        app
    }

    /// Sets the state, and the final status and progress that follow from it.
    pub fn set_state(&mut self, state: AppState) {
        self.state = state;
        self.final_status = FinalStatus::of(state);
        if state.is_terminal() {
            self.progress = 100.0;
        }
    }

    /// Sets the allocated resources, YARN's figures and gantry's.
    pub fn set_allocated(&mut self, allocated: GantryResources) {
        self.allocated_resources = allocated.into();
        self.allocated_mb = self.allocated_resources.memory;
        self.allocated_v_cores = self.allocated_resources.v_cores;
    }

    /// Sets `progress` from the containers completed and those the app needs (no-op once
    /// terminal, where it is 100).
    pub fn set_progress(&mut self, completed: u64, wanted: u64) {
        if !self.state.is_terminal() && wanted > 0 {
            self.progress = percent(completed.min(wanted) as f64 / wanted as f64);
        }
    }
}

/// A container group of an application, as submitted, with its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestInfo {
    /// Resources of each container.
    pub resource: ResourceInfo,
    /// Containers wanted.
    pub count: u32,
    /// Containers placed (allocated, running, or completed).
    pub placed: u32,
    /// Containers that completed successfully (gantry; what `progress` counts).
    #[serde(default)]
    pub completed: u32,
    /// All start together or none.
    pub gang: bool,
    /// Priority within the app.
    pub priority: i32,
    /// Node selector: labels a node must have.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Labels a node should have when possible (gantry).
    #[serde(default)]
    pub preferred_labels: BTreeMap<String, String>,
    /// Rack affinity.
    pub rack_affinity: RackAffinity,
    /// The program and its arguments. (The environment is not echoed back: it often carries
    /// secrets.)
    pub command: Vec<String>,
}

impl RequestInfo {
    /// The submitted group, nothing placed yet.
    pub fn from_request(r: &ContainerRequest) -> RequestInfo {
        RequestInfo {
            resource: r.resource.to_gantry().into(),
            count: r.count,
            placed: 0,
            completed: 0,
            gang: r.gang,
            priority: r.priority,
            labels: r.labels.clone(),
            preferred_labels: r.preferred_labels.clone(),
            rack_affinity: r.rack_affinity,
            command: r.command.clone(),
        }
    }
}

/// A container of an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerInfo {
    /// Its id (what `…/containers/{id}/logs/…` takes).
    pub id: u64,
    /// Its state.
    pub state: ContainerState,
    /// The node it was placed on.
    pub node_id: String,
    /// Index of its group in the app's `requests`.
    pub request: u32,
    /// Its resources.
    pub resource: ResourceInfo,
    /// Indexes of the node's GPUs it holds.
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// Its exit status once it ended (128 + signal when signalled, -1 when lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// When it was placed, Unix ms.
    pub started_time: u64,
    /// When it ended, Unix ms; 0 while it lives.
    pub finished_time: u64,
    /// Why it ended as it did, when there is more to say than the state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostics: String,
    /// Since when it has been a candidate for preemption, Unix ms: a rebalance policy chose it
    /// and will stop it if it is still chosen after its wait (YARN's preemption warning to the
    /// application master). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_candidate_since: Option<u64>,
}

/// `GET|PUT /ws/v1/cluster/apps/{id}/state`: `{"state": "RUNNING"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppStateInfo {
    /// The app's state.
    pub state: AppState,
}

/// The body of `PUT /ws/v1/cluster/apps/{id}/state`. Only `KILLED` may be asked for; the state
/// is kept a string so that any other value gets a 400 that says so rather than a parse error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppStateRequest {
    /// The wanted state.
    pub state: String,
}

impl AppStateRequest {
    /// `Ok` when the request asks for `KILLED` (any case, blanks around), else why it is refused.
    pub fn kills(&self) -> Result<(), String> {
        if self.state.trim().eq_ignore_ascii_case("KILLED") {
            Ok(())
        } else {
            Err(format!(
                "only KILLED may be requested (got `{}`); every other state is the scheduler's to set",
                self.state
            ))
        }
    }
}

/// `GET /ws/v1/cluster/nodes/{id}/state`, and the answer to a `PUT` there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStateInfo {
    /// The node's state.
    pub state: NodeState,
}

/// The body of `PUT /ws/v1/cluster/nodes/{id}/state`: `DECOMMISSIONING` (or gantry's `DRAINING`)
/// drains the node — it keeps its containers and takes no new ones — and `RUNNING` puts it back
/// in service. A string, so that any other value gets a 400 that lists the allowed ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStateRequest {
    /// The wanted state.
    pub state: String,
}

impl NodeStateRequest {
    /// Whether the request drains (`true`) or undrains (`false`) the node, or why it is refused.
    pub fn drains(&self) -> Result<bool, String> {
        match self.state.trim().to_ascii_uppercase().as_str() {
            "DECOMMISSIONING" | "DRAINING" => Ok(true),
            "RUNNING" => Ok(false),
            _ => Err(format!(
                "node state `{}` cannot be asked for: use DECOMMISSIONING (or DRAINING) to drain, RUNNING to undrain",
                self.state
            )),
        }
    }
}

/// `GET /ws/v1/cluster/removable-nodes`: the nodes an autoscaler may remove.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemovableNodesResponse {
    /// YARN-style wrapper.
    pub removable_nodes: RemovableNodeList,
}

/// The list inside [`RemovableNodesResponse`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RemovableNodeList {
    /// Longest idle first.
    pub node: Vec<RemovableNode>,
}

/// A node that holds no container and is not lost, idle for at least the asked time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemovableNode {
    /// Its name.
    pub id: String,
    /// Its rack.
    pub rack: String,
    /// `RUNNING` (still takes work: drain it before removing it) or `DECOMMISSIONING`.
    pub state: NodeState,
    /// Since when it has been empty, Unix ms.
    pub idle_since: u64,
    /// For how long, seconds, at the time of the answer.
    pub idle_seconds: f64,
    /// Its allocatable resources: what removing it takes away.
    pub total_resource: ResourceInfo,
}
