//! `GET /ws/v1/cluster/scheduler`: the queue tree as YARN's capacity scheduler reports it.

use super::resources::{ResourceInfo, dominant_share, percent};
use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};

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
