//! `GET /ws/v1/cluster/info` and `/metrics`: the cluster's identity, the daemon's health and
//! plugins, and YARN's counts of apps, containers, resources and nodes.

use super::resources::{ResourceInfo, minus};
use super::states::{AppState, NodeState};
use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};

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
