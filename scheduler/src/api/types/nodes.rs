//! `GET /ws/v1/cluster/nodes`: a node with its resources, GPUs, conditions and measured usage.

use super::resources::{ResourceInfo, minus};
use super::states::NodeState;
use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
