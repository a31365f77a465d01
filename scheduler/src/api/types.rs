//! The JSON bodies of the REST API, shaped after Hadoop YARN's ResourceManager REST API
//! (`ws/v1/cluster`: `clusterInfo`, `clusterMetrics`, `nodes`/`node`, `apps`/`app`,
//! `new-application`, submit, app `state`, `scheduler`).
//!
//! Conventions, chosen so that YARN tooling keeps working and gantry loses no precision:
//!
//! - **Field names are YARN's** wherever YARN has the field (`appsSubmitted`, `totalMB`,
//!   `usedMemoryMB`, `finalStatus`, `application-name`, `max-app-attempts`, …), including YARN's
//!   mix of camelCase in responses and kebab-case in the submission.
//! - **Resources** in responses are YARN's `{"memory": MiB, "vCores": cores}` *plus* gantry's
//!   exact `cpuMillis`, `memoryBytes` and `gpus` ([`ResourceInfo`]). The YARN figures are
//!   rounded down (a 1.5-core container shows `vCores: 1`); the exact ones are authoritative.
//!   Submissions use only the exact fields ([`ResourceRequest`]): YARN's integral cores cannot
//!   express half a core, and accepting both spellings would make one of them ambiguous.
//! - **Ids are numbers.** gantry's ids are `u64`s, not YARN's `application_<ts>_<seq>` strings;
//!   scripts can compare and sort them.
//! - **App states** are YARN's: `NEW`, `ACCEPTED`, `RUNNING`, `FINISHED`, `FAILED`, `KILLED`.
//!   gantry's `REJECTED` (refused at admission) is reported as `FAILED` with the reason in
//!   `diagnostics` — exactly what YARN does for an app its scheduler refuses — so clients that
//!   know YARN's closed set of states need no new case ([`AppState::from_abi`]).
//! - **Node states** are YARN's: gantry's `DRAINING` (keeps its containers, takes no new ones)
//!   is YARN's graceful `DECOMMISSIONING`.
//! - **Empty lists** are `{"app": []}`, not YARN's `null`, so clients need no special case.
//! - Requests reject unknown fields (`deny_unknown_fields`): a misspelt field is an error, not a
//!   silently ignored wish. Responses accept unknown fields, so an older CLI reads a newer
//!   scheduler.

use crate::api::AppFilter;
use gantry_engine::{
    AppSpec, MAX_ATTEMPTS, MAX_CONTAINERS_PER_REQUEST, MAX_LABELS, MAX_NAME_LEN, MAX_REQUESTS_PER_APP,
    RackAffinity as EngineRackAffinity, RequestSpec,
};
use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Smallest CPU a container may ask for, millicores: the kernel's smallest CFS quota (1 ms per
/// 100 ms period), which the agent also enforces.
pub const MIN_CPU_MILLIS: u64 = 10;
/// Largest CPU a container may ask for, millicores (10 000 cores): anything above is a typo.
pub const MAX_CPU_MILLIS: u64 = 10_000_000;
/// Smallest memory a container may ask for, bytes: below 1 MiB not even a shell starts (the
/// agent's own minimum).
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;
/// Largest memory a container may ask for, bytes (1 PiB): anything above is a typo.
pub const MAX_MEMORY_BYTES: u64 = 1 << 50;
/// Most GPUs one container may ask for (MIG instances count one each).
pub const MAX_GPUS: u32 = 256;
/// Largest argv plus environment of one container, bytes — the agent's limit, checked here so
/// that a submission the agent would refuse at launch is refused at once instead.
pub const MAX_ARGS_BYTES: usize = 1 << 20;
/// Longest program name (`argv[0]`), bytes: the kernel's `PATH_MAX`.
pub const MAX_PROGRAM_LEN: usize = 4096;
/// Smallest disk allowance a container may ask for, bytes: its logs alone need some.
pub const MIN_DISK_BYTES: u64 = 1 << 20;
/// Largest disk allowance a container may ask for, bytes (1 PiB): anything above is a typo.
pub const MAX_DISK_BYTES: u64 = 1 << 50;
/// Largest `expectedMs` / `slowMs`: one year. Run-time estimates beyond it are mistakes.
pub const MAX_EXPECTED_MS: u64 = 366 * 24 * 3600 * 1000;

const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------------------------

/// An amount of resources in a response: YARN's rounded `memory` (MiB) and `vCores` next to
/// gantry's exact figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// Memory in MiB, rounded down (YARN's `memory`).
    pub memory: u64,
    /// Whole cores, rounded down (YARN's `vCores`).
    #[serde(rename = "vCores")]
    pub v_cores: u64,
    /// CPU in millicores (1000 = one core), exact.
    pub cpu_millis: u64,
    /// Memory in bytes, exact.
    pub memory_bytes: u64,
    /// Whole GPUs (MIG instances count one each).
    pub gpus: u32,
}

impl From<GantryResources> for ResourceInfo {
    fn from(r: GantryResources) -> Self {
        ResourceInfo {
            memory: r.memory_bytes / MIB,
            v_cores: r.cpu_millis / 1000,
            cpu_millis: r.cpu_millis,
            memory_bytes: r.memory_bytes,
            gpus: r.gpus,
        }
    }
}

impl ResourceInfo {
    /// Back to the engine's record.
    pub fn to_gantry(self) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis,
            memory_bytes: self.memory_bytes,
            gpus: self.gpus,
            reserved: 0,
        }
    }
}

/// The resources of each container of a submitted group, in gantry's exact units only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceRequest {
    /// CPU in millicores (1000 = one core), [`MIN_CPU_MILLIS`]..=[`MAX_CPU_MILLIS`].
    pub cpu_millis: u64,
    /// Memory in bytes, [`MIN_MEMORY_BYTES`]..=[`MAX_MEMORY_BYTES`].
    pub memory_bytes: u64,
    /// Whole GPUs, 0..=[`MAX_GPUS`].
    #[serde(default)]
    pub gpus: u32,
}

impl ResourceRequest {
    /// As the engine's record.
    pub fn to_gantry(self) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis,
            memory_bytes: self.memory_bytes,
            gpus: self.gpus,
            reserved: 0,
        }
    }
}

/// The larger of `num / den` over CPU, memory and GPUs (the dominant share), ignoring
/// dimensions the denominator does not have. 0 when it has none.
fn dominant_share(num: &GantryResources, den: &GantryResources) -> f64 {
    let mut share: f64 = 0.0;
    for (n, d) in [
        (num.cpu_millis as f64, den.cpu_millis as f64),
        (num.memory_bytes as f64, den.memory_bytes as f64),
        (num.gpus as f64, den.gpus as f64),
    ] {
        if d > 0.0 {
            share = share.max(n / d);
        }
    }
    share
}

fn minus(a: &GantryResources, b: &GantryResources) -> GantryResources {
    GantryResources {
        cpu_millis: a.cpu_millis.saturating_sub(b.cpu_millis),
        memory_bytes: a.memory_bytes.saturating_sub(b.memory_bytes),
        gpus: a.gpus.saturating_sub(b.gpus),
        reserved: 0,
    }
}

/// Rounds a percentage to two decimals so that responses do not show float noise.
fn percent(fraction: f64) -> f64 {
    if fraction.is_finite() { (fraction * 10_000.0).round() / 100.0 } else { 0.0 }
}

// ---------------------------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------------------------

/// An application's state, by YARN's names (see the module docs for `REJECTED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AppState {
    /// Submitted, waiting for admission.
    New,
    /// Admitted; containers pending or starting.
    Accepted,
    /// At least one container running.
    Running,
    /// Finished successfully.
    Finished,
    /// Failed: out of attempts, or refused at admission.
    Failed,
    /// Killed by a user or the scheduler.
    Killed,
}

impl AppState {
    /// All states, in lifecycle order.
    pub const ALL: [AppState; 6] = [
        AppState::New,
        AppState::Accepted,
        AppState::Running,
        AppState::Finished,
        AppState::Failed,
        AppState::Killed,
    ];

    /// Maps gantry's `GANTRY_APP_*`; `REJECTED` becomes `FAILED`. `None` for an unknown value.
    pub fn from_abi(state: u32) -> Option<AppState> {
        Some(match state {
            GANTRY_APP_NEW => AppState::New,
            GANTRY_APP_ACCEPTED => AppState::Accepted,
            GANTRY_APP_RUNNING => AppState::Running,
            GANTRY_APP_FINISHED => AppState::Finished,
            GANTRY_APP_FAILED | GANTRY_APP_REJECTED => AppState::Failed,
            GANTRY_APP_KILLED => AppState::Killed,
            _ => return None,
        })
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AppState::New => "NEW",
            AppState::Accepted => "ACCEPTED",
            AppState::Running => "RUNNING",
            AppState::Finished => "FINISHED",
            AppState::Failed => "FAILED",
            AppState::Killed => "KILLED",
        }
    }

    /// Whether the app is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, AppState::Finished | AppState::Failed | AppState::Killed)
    }
}

impl fmt::Display for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a state name was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown application state `{0}`; it is one of NEW, ACCEPTED, RUNNING, FINISHED, FAILED, KILLED")]
pub struct UnknownState(pub String);

impl FromStr for AppState {
    type Err = UnknownState;

    /// Parses a state name, ignoring case (`running` = `RUNNING`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AppState::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// YARN's `finalStatus`: the outcome, `UNDEFINED` until the app is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FinalStatus {
    /// Not over yet.
    Undefined,
    /// Finished successfully.
    Succeeded,
    /// Failed or rejected.
    Failed,
    /// Killed.
    Killed,
}

impl FinalStatus {
    /// The outcome an app state implies.
    pub fn of(state: AppState) -> FinalStatus {
        match state {
            AppState::New | AppState::Accepted | AppState::Running => FinalStatus::Undefined,
            AppState::Finished => FinalStatus::Succeeded,
            AppState::Failed => FinalStatus::Failed,
            AppState::Killed => FinalStatus::Killed,
        }
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            FinalStatus::Undefined => "UNDEFINED",
            FinalStatus::Succeeded => "SUCCEEDED",
            FinalStatus::Failed => "FAILED",
            FinalStatus::Killed => "KILLED",
        }
    }
}

/// A node's state, by YARN's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    /// Accepts containers.
    Running,
    /// gantry's `DRAINING`: keeps its containers, accepts no new ones.
    Decommissioning,
    /// Missed its status deadline; its containers are lost.
    Lost,
    /// Reports itself unhealthy; no new containers.
    Unhealthy,
}

impl NodeState {
    /// Maps gantry's `GANTRY_NODE_*`; `None` for an unknown value.
    pub fn from_abi(state: u32) -> Option<NodeState> {
        Some(match state {
            GANTRY_NODE_RUNNING => NodeState::Running,
            GANTRY_NODE_DRAINING => NodeState::Decommissioning,
            GANTRY_NODE_LOST => NodeState::Lost,
            GANTRY_NODE_UNHEALTHY => NodeState::Unhealthy,
            _ => return None,
        })
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Running => "RUNNING",
            NodeState::Decommissioning => "DECOMMISSIONING",
            NodeState::Lost => "LOST",
            NodeState::Unhealthy => "UNHEALTHY",
        }
    }

    /// Reads one name of a `GET /nodes?states=` list, ignoring case: gantry's states by YARN's
    /// names (and `DRAINING`, gantry's own word for DECOMMISSIONING); `None` for the states of
    /// YARN's list that no gantry node is ever in (NEW, DECOMMISSIONED, REBOOTED, SHUTDOWN),
    /// which match no node — YARN's tools name every state when they want all nodes.
    pub fn from_filter_name(name: &str) -> Result<Option<NodeState>, UnknownNodeState> {
        let upper = name.trim().to_ascii_uppercase();
        Ok(Some(match upper.as_str() {
            "RUNNING" => NodeState::Running,
            "DECOMMISSIONING" | "DRAINING" => NodeState::Decommissioning,
            "LOST" => NodeState::Lost,
            "UNHEALTHY" => NodeState::Unhealthy,
            "NEW" | "DECOMMISSIONED" | "REBOOTED" | "SHUTDOWN" => return Ok(None),
            _ => return Err(UnknownNodeState(name.to_owned())),
        }))
    }
}

/// Why a node state name in a filter was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown node state `{0}`; it is one of RUNNING, UNHEALTHY, DECOMMISSIONING (or DRAINING), LOST, \
     or YARN's NEW, DECOMMISSIONED, REBOOTED, SHUTDOWN (which no gantry node is in)"
)]
pub struct UnknownNodeState(pub String);

/// A container's state, by gantry's names (YARN's REST API does not list containers of the RM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContainerState {
    /// Placed; the launch is on its way to the agent.
    Allocated,
    /// Running on its node.
    Running,
    /// Being killed (grace period).
    Stopping,
    /// Exited with status 0.
    Completed,
    /// Exited with a non-zero status.
    Failed,
    /// Killed (by a user, its app's end, or preemption).
    Killed,
    /// Its node was lost, or its agent no longer knew it.
    Lost,
}

impl ContainerState {
    /// Maps gantry's `GANTRY_CONTAINER_*`; `None` for an unknown value.
    pub fn from_abi(state: u32) -> Option<ContainerState> {
        Some(match state {
            GANTRY_CONTAINER_ALLOCATED => ContainerState::Allocated,
            GANTRY_CONTAINER_RUNNING => ContainerState::Running,
            GANTRY_CONTAINER_STOPPING => ContainerState::Stopping,
            GANTRY_CONTAINER_COMPLETED => ContainerState::Completed,
            GANTRY_CONTAINER_FAILED => ContainerState::Failed,
            GANTRY_CONTAINER_KILLED => ContainerState::Killed,
            GANTRY_CONTAINER_LOST => ContainerState::Lost,
            _ => return None,
        })
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Allocated => "ALLOCATED",
            ContainerState::Running => "RUNNING",
            ContainerState::Stopping => "STOPPING",
            ContainerState::Completed => "COMPLETED",
            ContainerState::Failed => "FAILED",
            ContainerState::Killed => "KILLED",
            ContainerState::Lost => "LOST",
        }
    }
}

/// Whether a group's containers must or should share a rack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RackAffinity {
    /// No constraint.
    #[default]
    None,
    /// One rack when possible.
    Preferred,
    /// One rack or not at all.
    Required,
}

impl From<EngineRackAffinity> for RackAffinity {
    fn from(r: EngineRackAffinity) -> Self {
        match r {
            EngineRackAffinity::None => RackAffinity::None,
            EngineRackAffinity::Preferred => RackAffinity::Preferred,
            EngineRackAffinity::Required => RackAffinity::Required,
        }
    }
}

impl From<RackAffinity> for EngineRackAffinity {
    fn from(r: RackAffinity) -> Self {
        match r {
            RackAffinity::None => EngineRackAffinity::None,
            RackAffinity::Preferred => EngineRackAffinity::Preferred,
            RackAffinity::Required => EngineRackAffinity::Required,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster info and metrics
// ---------------------------------------------------------------------------------------------

/// `GET /ws/v1/cluster/info`: `{"clusterInfo": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfoResponse {
    /// The info.
    #[serde(rename = "clusterInfo")]
    pub cluster_info: ClusterInfo,
}

/// The cluster's identity and the daemon's version and health.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    /// The cluster id: when its state store was created, Unix ms (YARN uses the RM's start).
    pub id: u64,
    /// When this scheduler process started, Unix ms.
    pub started_on: u64,
    /// `STARTED` while serving (YARN's service states).
    pub state: String,
    /// `ACTIVE` (a standby scheduler would say `STANDBY`).
    pub ha_state: String,
    /// Where the state is kept, e.g. `sqlite:/var/lib/gantry/state.db`.
    pub rm_state_store_name: String,
    /// gantry's version.
    pub resource_manager_version: String,
    /// Loaded policy plugins and their health (gantry).
    #[serde(default)]
    pub plugins: Vec<PluginInfo>,
}

impl ClusterInfo {
    /// The info of a serving scheduler of this build.
    pub fn new(id: u64, started_on: u64, store: impl Into<String>) -> ClusterInfo {
        ClusterInfo {
            id,
            started_on,
            state: "STARTED".into(),
            ha_state: "ACTIVE".into(),
            rm_state_store_name: store.into(),
            resource_manager_version: env!("CARGO_PKG_VERSION").into(),
            plugins: Vec::new(),
        }
    }
}

/// A loaded policy plugin and its health.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginInfo {
    /// Its name.
    pub name: String,
    /// The hooks the profile gives it (`admit`, `order`, `place`, `rebalance`).
    #[serde(default)]
    pub hooks: Vec<String>,
    /// Failed calls in a row.
    pub consecutive_failures: u32,
    /// Until when (engine ms) it is quarantined, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_until: Option<u64>,
}

impl From<&gantry_engine::PolicyStatus> for PluginInfo {
    fn from(p: &gantry_engine::PolicyStatus) -> Self {
        PluginInfo {
            name: p.name.clone(),
            hooks: Vec::new(),
            consecutive_failures: p.consecutive_failures,
            quarantined_until: p.quarantined_until,
        }
    }
}

/// `GET /ws/v1/cluster/metrics`: `{"clusterMetrics": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterMetricsResponse {
    /// The metrics.
    #[serde(rename = "clusterMetrics")]
    pub cluster_metrics: ClusterMetrics,
}

/// Counts of applications, containers, resources and nodes, under YARN's names, plus gantry's
/// exact resources. Fill the counts directly and the resources with [`Self::set_resources`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMetrics {
    /// Applications ever submitted (that the scheduler remembers).
    pub apps_submitted: u64,
    /// Applications `FINISHED`.
    pub apps_completed: u64,
    /// Applications `NEW` or `ACCEPTED` with nothing running.
    pub apps_pending: u64,
    /// Applications `RUNNING`.
    pub apps_running: u64,
    /// Applications `FAILED` (including rejected ones).
    pub apps_failed: u64,
    /// Applications `KILLED`.
    pub apps_killed: u64,
    /// Reserved memory, MiB (gantry does not reserve: 0).
    #[serde(rename = "reservedMB")]
    pub reserved_mb: u64,
    /// Unallocated memory of schedulable nodes, MiB.
    #[serde(rename = "availableMB")]
    pub available_mb: u64,
    /// Allocated memory, MiB.
    #[serde(rename = "allocatedMB")]
    pub allocated_mb: u64,
    /// Memory of schedulable nodes, MiB.
    #[serde(rename = "totalMB")]
    pub total_mb: u64,
    /// Reserved cores (0).
    pub reserved_virtual_cores: u64,
    /// Unallocated whole cores.
    pub available_virtual_cores: u64,
    /// Allocated whole cores.
    pub allocated_virtual_cores: u64,
    /// Whole cores of schedulable nodes.
    pub total_virtual_cores: u64,
    /// Containers holding resources (allocated, running or stopping).
    pub containers_allocated: u64,
    /// Reserved containers (0).
    pub containers_reserved: u64,
    /// Containers asked for and not yet placed.
    pub containers_pending: u64,
    /// Containers confirmed running by their agents (gantry).
    pub containers_running: u64,
    /// Nodes in any state.
    pub total_nodes: u64,
    /// Nodes `RUNNING`.
    pub active_nodes: u64,
    /// Nodes `LOST`.
    pub lost_nodes: u64,
    /// Nodes `UNHEALTHY`.
    pub unhealthy_nodes: u64,
    /// Nodes `DECOMMISSIONING` (draining).
    pub decommissioning_nodes: u64,
    /// Nodes decommissioned (gantry keeps none: 0).
    pub decommissioned_nodes: u64,
    /// Nodes rebooted (0).
    pub rebooted_nodes: u64,
    /// Nodes shut down (0).
    pub shutdown_nodes: u64,
    /// Resources of schedulable nodes, exact (gantry).
    pub total_resources: ResourceInfo,
    /// Allocated resources, exact (gantry).
    pub allocated_resources: ResourceInfo,
    /// Unallocated resources, exact (gantry).
    pub available_resources: ResourceInfo,
}

impl ClusterMetrics {
    /// Sets every resource figure, YARN's and gantry's, from the cluster's total and allocated
    /// resources.
    pub fn set_resources(&mut self, total: GantryResources, allocated: GantryResources) {
        let available = minus(&total, &allocated);
        self.total_resources = total.into();
        self.allocated_resources = allocated.into();
        self.available_resources = available.into();
        self.total_mb = self.total_resources.memory;
        self.allocated_mb = self.allocated_resources.memory;
        self.available_mb = self.available_resources.memory;
        self.total_virtual_cores = self.total_resources.v_cores;
        self.allocated_virtual_cores = self.allocated_resources.v_cores;
        self.available_virtual_cores = self.available_resources.v_cores;
    }

    /// Counts one node in `totalNodes` and its state's counter.
    pub fn count_node(&mut self, state: NodeState) {
        self.total_nodes += 1;
        match state {
            NodeState::Running => self.active_nodes += 1,
            NodeState::Decommissioning => self.decommissioning_nodes += 1,
            NodeState::Lost => self.lost_nodes += 1,
            NodeState::Unhealthy => self.unhealthy_nodes += 1,
        }
    }

    /// Counts one application in `appsSubmitted` and its state's counter.
    pub fn count_app(&mut self, state: AppState) {
        self.apps_submitted += 1;
        match state {
            AppState::New | AppState::Accepted => self.apps_pending += 1,
            AppState::Running => self.apps_running += 1,
            AppState::Finished => self.apps_completed += 1,
            AppState::Failed => self.apps_failed += 1,
            AppState::Killed => self.apps_killed += 1,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------

/// `GET /ws/v1/cluster/nodes`: `{"nodes": {"node": [...]}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodesResponse {
    /// The list.
    pub nodes: NodeList,
}

/// YARN's wrapper around the node array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    /// The nodes.
    #[serde(default)]
    pub node: Vec<NodeInfo>,
}

/// `GET /ws/v1/cluster/nodes/{id}`: `{"node": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResponse {
    /// The node.
    pub node: NodeInfo,
}

/// A node. Build it with [`NodeInfo::new`] (which fills YARN's derived memory and core
/// figures), then set what the agent reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// The node's name (YARN: `host:port`; gantry names nodes, usually by host name).
    pub id: String,
    /// Its rack (empty when unknown).
    pub rack: String,
    /// Its state.
    pub state: NodeState,
    /// Its host name.
    pub node_host_name: String,
    /// Where its agent serves HTTP (`/metrics`), empty when unknown.
    #[serde(rename = "nodeHTTPAddress")]
    pub node_http_address: String,
    /// Last status received from its agent, Unix ms (0 = none yet).
    pub last_health_update: u64,
    /// The agent's version.
    pub version: String,
    /// Why it is unhealthy or lost, empty otherwise.
    pub health_report: String,
    /// Containers holding resources on it.
    pub num_containers: u32,
    /// Allocated memory, MiB.
    #[serde(rename = "usedMemoryMB")]
    pub used_memory_mb: u64,
    /// Unallocated memory, MiB.
    #[serde(rename = "availMemoryMB")]
    pub avail_memory_mb: u64,
    /// Allocated whole cores.
    pub used_virtual_cores: u64,
    /// Unallocated whole cores.
    pub available_virtual_cores: u64,
    /// Allocatable resources (capacity less the agent's reserve).
    pub total_resource: ResourceInfo,
    /// Allocated resources.
    pub used_resource: ResourceInfo,
    /// Unallocated resources.
    pub available_resource: ResourceInfo,
    /// Its labels, `key: value` (gantry; what selectors match).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its GPUs (gantry).
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
    /// Measured usage from the agent's last status, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_utilization: Option<NodeUtilization>,
    /// Since when it has held no container, Unix ms; absent while it holds some (gantry: the
    /// downscale signal, see `removable-nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<u64>,
    /// The conditions its agent reports (gantry, as kubelet's node conditions): while any
    /// holds, the node is UNHEALTHY and takes no new work; `healthReport` says the same in
    /// words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<NodeConditionInfo>,
}

/// A condition of a node that keeps new work off it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeConditionInfo {
    /// `DiskPressure` (its work filesystem is short of space or inodes) or `LaunchFailures`
    /// (launches keep failing there).
    #[serde(rename = "type")]
    pub kind: String,
    /// Why, as its agent says it.
    pub reason: String,
    /// Since when, Unix ms (its agent's clock).
    pub since: u64,
}

impl NodeInfo {
    /// A node with its resources; the other fields empty.
    pub fn new(
        id: impl Into<String>,
        rack: impl Into<String>,
        state: NodeState,
        total: GantryResources,
        used: GantryResources,
    ) -> NodeInfo {
        let id = id.into();
        let available = minus(&total, &used);
        let (total, used, available) =
            (ResourceInfo::from(total), ResourceInfo::from(used), ResourceInfo::from(available));
        NodeInfo {
            node_host_name: id.clone(),
            id,
            rack: rack.into(),
            state,
            node_http_address: String::new(),
            last_health_update: 0,
            version: String::new(),
            health_report: String::new(),
            num_containers: 0,
            used_memory_mb: used.memory,
            avail_memory_mb: available.memory,
            used_virtual_cores: used.v_cores,
            available_virtual_cores: available.v_cores,
            total_resource: total,
            used_resource: used,
            available_resource: available,
            labels: BTreeMap::new(),
            gpus: Vec::new(),
            resource_utilization: None,
            idle_since: None,
            conditions: Vec::new(),
        }
    }
}

/// One GPU of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// Device index on the node.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// The container holding it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<u64>,
}

/// A node's measured usage (YARN's `resourceUtilization`, with gantry's exact figures).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeUtilization {
    /// Memory in use, MiB.
    #[serde(rename = "nodePhysicalMemoryMB")]
    pub node_physical_memory_mb: u64,
    /// CPU busy fraction of the whole node, 0..=1.
    #[serde(rename = "nodeCPUUsage")]
    pub node_cpu_usage: f64,
    /// Memory in use, bytes.
    pub memory_used_bytes: u64,
    /// Memory of the machine, bytes.
    pub memory_total_bytes: u64,
    /// Logical CPUs of the machine.
    pub cpu_cores: u32,
}

// ---------------------------------------------------------------------------------------------
// Applications
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// New application and submission
// ---------------------------------------------------------------------------------------------

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
/// ceiling).
pub const MAX_PIDS_PER_CONTAINER: u64 = 1 << 22;

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
        if !(MIN_CPU_MILLIS..=MAX_CPU_MILLIS).contains(&self.cpu_millis) {
            return Err(invalid(
                format!("{field}.cpuMillis"),
                format!(
                    "{} millicores is outside {MIN_CPU_MILLIS}..={MAX_CPU_MILLIS} (1000 = one core)",
                    self.cpu_millis
                ),
            ));
        }
        if !(MIN_MEMORY_BYTES..=MAX_MEMORY_BYTES).contains(&self.memory_bytes) {
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
            if !(1..=MAX_PIDS_PER_CONTAINER).contains(&n) {
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
        if let Some(disk) = self.disk_bytes.filter(|d| !(MIN_DISK_BYTES..=MAX_DISK_BYTES).contains(d)) {
            return Err(invalid(
                format!("{field}.diskBytes"),
                format!(
                    "{disk} bytes is outside {MIN_DISK_BYTES}..={MAX_DISK_BYTES} (1 MiB to 1 PiB); leave it out for the node's default"
                ),
            ));
        }
        let bytes = self.command.iter().map(|a| a.len() + 1).sum::<usize>()
            + self.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
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

// ---------------------------------------------------------------------------------------------
// Scheduler (queues)
// ---------------------------------------------------------------------------------------------

/// `GET /ws/v1/cluster/scheduler`: `{"scheduler": {"schedulerInfo": {...}}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerResponse {
    /// YARN's wrapper.
    pub scheduler: SchedulerWrapper,
}

/// YARN's wrapper around the scheduler info.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerWrapper {
    /// The info.
    #[serde(rename = "schedulerInfo")]
    pub scheduler_info: SchedulerInfo,
}

/// The queue hierarchy, shaped as YARN's capacity scheduler reports it: the root's figures,
/// then its children, each with theirs. Percentages are 0..=100 (`usedCapacity` may exceed 100
/// when a queue uses idle capacity beyond its guarantee).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerInfo {
    /// `capacityScheduler`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The root's capacity: 100.
    pub capacity: f64,
    /// What the cluster uses, percent of its resources (dominant resource).
    pub used_capacity: f64,
    /// 100.
    pub max_capacity: f64,
    /// `root`.
    pub queue_name: String,
    /// Resources of schedulable nodes (gantry).
    pub total_resources: ResourceInfo,
    /// Resources in use (gantry).
    pub resources_used: ResourceInfo,
    /// The root's children.
    pub queues: QueueList,
}

/// YARN's wrapper around a queue array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueList {
    /// The queues.
    #[serde(default)]
    pub queue: Vec<QueueInfo>,
}

/// One queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    /// `capacitySchedulerLeafQueueInfo` for a leaf (as YARN marks leaves); absent for a parent.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its own name (`etl`).
    pub queue_name: String,
    /// Its full path (`root.prod.etl`).
    pub queue_path: String,
    /// `RUNNING`.
    pub state: String,
    /// Whether applications may be submitted to it (gantry).
    pub leaf: bool,
    /// Guaranteed capacity, percent of its parent's.
    pub capacity: f64,
    /// Maximum capacity, percent of its parent's.
    pub max_capacity: f64,
    /// What it uses, percent of its guaranteed capacity (dominant resource; above 100 when it
    /// borrows idle capacity).
    pub used_capacity: f64,
    /// Guaranteed capacity, percent of the cluster.
    pub absolute_capacity: f64,
    /// Maximum capacity, percent of the cluster.
    pub absolute_max_capacity: f64,
    /// What it uses, percent of the cluster (dominant resource).
    pub absolute_used_capacity: f64,
    /// Live applications in it (and its children).
    pub num_applications: u32,
    /// Of which running.
    pub num_active_applications: u32,
    /// Of which waiting.
    pub num_pending_applications: u32,
    /// Resources its live containers hold (YARN's `resourcesUsed`).
    pub resources_used: ResourceInfo,
    /// Its guarantee in resources for the current cluster (gantry).
    pub guaranteed_resources: ResourceInfo,
    /// Its maximum in resources for the current cluster (gantry).
    pub maximum_resources: ResourceInfo,
    /// What its pending requests ask for (gantry).
    pub pending_resources: ResourceInfo,
    /// Its children; absent for a leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<QueueList>,
}

/// Live applications of one leaf queue, for [`SchedulerInfo::from_queues`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueApps {
    /// Apps with a running container.
    pub active: u32,
    /// Apps waiting (`NEW`, `ACCEPTED`).
    pub pending: u32,
}

impl SchedulerInfo {
    /// Builds the tree from the engine's queue records (`ClusterState::queues()`): `name`
    /// resolves their names (`ClusterState::str`), `cluster` is the schedulable total
    /// (`ClusterState::cluster()`), `apps` counts the live apps of a leaf by its index.
    pub fn from_queues(
        queues: &[GantryQueue],
        name: impl Fn(GantryStrRef) -> String,
        cluster: GantryResources,
        apps: impl Fn(u32) -> QueueApps,
    ) -> SchedulerInfo {
        let root = queues.iter().position(|q| q.parent == GANTRY_NONE);
        let used = root.map(|r| queues[r].used).unwrap_or_default();
        let mut info = SchedulerInfo {
            kind: "capacityScheduler".into(),
            capacity: 100.0,
            used_capacity: percent(dominant_share(&used, &cluster)),
            max_capacity: 100.0,
            queue_name: "root".into(),
            total_resources: cluster.into(),
            resources_used: used.into(),
            queues: QueueList::default(),
        };
        if let Some(root) = root {
            let ctx = TreeContext { queues, name: &name, cluster, apps: &apps };
            info.queues.queue = ctx.children(root as u32, 1.0, 1.0);
        }
        info
    }
}

/// What building the queue tree needs at every level.
struct TreeContext<'a, N, A> {
    queues: &'a [GantryQueue],
    name: &'a N,
    cluster: GantryResources,
    apps: &'a A,
}

impl<N: Fn(GantryStrRef) -> String, A: Fn(u32) -> QueueApps> TreeContext<'_, N, A> {
    /// The children of `parent`, whose absolute guaranteed and maximum fractions of the cluster
    /// are `abs_guaranteed` and `abs_maximum`. Indexes only grow from parent to child in the
    /// engine's table, but the depth is bounded by the queue count anyway.
    fn children(&self, parent: u32, abs_guaranteed: f64, abs_maximum: f64) -> Vec<QueueInfo> {
        let mut out = Vec::new();
        for (i, q) in self.queues.iter().enumerate() {
            if q.parent != parent || i as u32 == parent {
                continue;
            }
            let path = (self.name)(q.name);
            let leaf = q.flags & GANTRY_QUEUE_LEAF != 0;
            let (abs_g, abs_m) = (abs_guaranteed * q.guaranteed, abs_maximum * q.maximum);
            let children = if leaf { Vec::new() } else { self.children(i as u32, abs_g, abs_m) };
            let counts = if leaf {
                (self.apps)(i as u32)
            } else {
                children.iter().fold(QueueApps::default(), |acc, c| QueueApps {
                    active: acc.active + c.num_active_applications,
                    pending: acc.pending + c.num_pending_applications,
                })
            };
            out.push(QueueInfo {
                kind: leaf.then(|| "capacitySchedulerLeafQueueInfo".to_owned()),
                queue_name: path.rsplit('.').next().unwrap_or(&path).to_owned(),
                queue_path: path.clone(),
                state: "RUNNING".into(),
                leaf,
                capacity: percent(q.guaranteed),
                max_capacity: percent(q.maximum),
                used_capacity: percent(dominant_share(&q.used, &q.absolute_guaranteed)),
                absolute_capacity: percent(abs_g),
                absolute_max_capacity: percent(abs_m),
                absolute_used_capacity: percent(dominant_share(&q.used, &self.cluster)),
                num_applications: counts.active + counts.pending,
                num_active_applications: counts.active,
                num_pending_applications: counts.pending,
                resources_used: q.used.into(),
                guaranteed_resources: q.absolute_guaranteed.into(),
                maximum_resources: q.absolute_maximum.into(),
                pending_resources: q.pending.into(),
                queues: (!leaf).then_some(QueueList { queue: children }),
            });
        }
        out
    }
}

impl QueueInfo {
    /// This queue and all below it, depth first (for tables).
    pub fn flatten(&self) -> Vec<&QueueInfo> {
        let mut out = vec![self];
        if let Some(children) = &self.queues {
            for c in &children.queue {
                out.extend(c.flatten());
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// An error body: `{"RemoteException": {...}}`, as YARN's web services send them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteExceptionBody {
    /// The error.
    #[serde(rename = "RemoteException")]
    pub remote_exception: RemoteException,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteException {
    /// The exception's short name (`NotFoundException`), one per HTTP status.
    pub exception: String,
    /// What went wrong, for a person.
    pub message: String,
    /// YARN's Java class name for the exception, for clients written against YARN.
    #[serde(rename = "javaClassName", default)]
    pub java_class_name: String,
}

// ---------------------------------------------------------------------------------------------
// Query strings
// ---------------------------------------------------------------------------------------------

impl AppFilter {
    /// The query string (`?states=RUNNING&queue=…`) that asks the API for this filter, empty
    /// when it filters nothing.
    pub fn to_query(&self) -> String {
        let mut parts = Vec::new();
        if !self.states.is_empty() {
            let states: Vec<&str> = self.states.iter().map(|s| s.as_str()).collect();
            parts.push(format!("states={}", states.join(",")));
        }
        if let Some(q) = &self.queue {
            parts.push(format!("queue={}", percent_encode(q)));
        }
        if let Some(u) = &self.user {
            parts.push(format!("user={}", percent_encode(u)));
        }
        if let Some(l) = self.limit {
            parts.push(format!("limit={l}"));
        }
        if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so any queue or user name
/// survives a query string. (Four lines do not justify another dependency.)
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
