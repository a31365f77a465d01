//! The cluster as the engine keeps it: arrays of the ABI's `repr(C)` records, so a plugin's view
//! is a set of borrowed slices of these very arrays (zero-copy), plus a few side tables that
//! plugins do not need (names of apps, kill reasons, indexes by id).
//!
//! Cross references are `u32` positions. Nodes and queues are never removed, so their positions
//! are stable; apps, requests and containers that are finished are dropped by [`ClusterState::compact`]
//! before the next view is built, which renumbers them — hence ids for anything kept across calls.
//!
//! This file holds the records, the side tables, node registration and the view; beside it:
//! `queues.rs` (the queue hierarchy and its capacities), `compact.rs` (dropping what ended) and
//! `invariants.rs` (the bookkeeping checks tests run).

mod compact;
mod invariants;
mod queues;

pub(crate) use queues::GuaranteeRule;

use crate::det_hash::{DetHashMap, IdMap};
use crate::error::EngineError;
use crate::event::KillReason;
use crate::model::*;
use crate::strings::StringArena;
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::collections::VecDeque;

/// What the engine remembers of an application that is not in the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppMeta {
    /// Human name.
    pub name: String,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Failed containers so far (node losses and preemptions do not count).
    pub failures: u32,
    /// Containers holding resources (allocated, running or stopping).
    pub live_containers: u32,
    /// Why it is in its state, and the last thing that happened to it worth telling (a failed
    /// attempt, a lost container). Stored with each state change.
    pub diagnostics: String,
    /// Containers that completed (exited 0), per request in submission order: the app's
    /// progress. Kept here, not in the frozen ABI records; a gang that restarts starts again
    /// from 0, since its completed members run again.
    pub completed: Vec<u32>,
    /// Its entry in the engine's book of waiting applications (`crate::waiting`), or
    /// `GANTRY_NONE` while nothing of it waits; travels with it through compactions.
    pub(crate) waiting: u32,
}

impl AppMeta {
    /// Containers completed, all requests together.
    pub fn completed_total(&self) -> u64 {
        self.completed.iter().map(|&n| u64::from(n)).sum()
    }
}

/// What the engine remembers of a container that is not in the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContainerMeta {
    /// Why it was asked to stop, if it was.
    pub kill_reason: Option<KillReason>,
    /// Exit status once it exited.
    pub exit_code: Option<i32>,
    /// Since when (engine ms) it has been a preemption candidate, while it is one: marked by
    /// every rebalance call since (`GANTRY_DECISION_MARK_PREEMPT`), not stopped yet.
    pub candidate_since_ms: Option<u64>,
}

/// What the engine remembers of a node that is not in its record: the downscale signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeMeta {
    /// Containers holding resources on it (allocated, running or stopping).
    pub live_containers: u32,
    /// Since when (engine ms) it has held no container; `None` while it holds some. An empty
    /// node that stays so for a cool-down is what an autoscaler may remove.
    pub idle_since_ms: Option<u64>,
}

/// A node that holds no container and is not lost: a candidate for scale-down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleNode {
    /// Its index in the node array (stable: nodes are never removed).
    pub index: u32,
    /// Since when it has been empty, ms on the engine's clock.
    pub since_ms: u64,
    /// Its state (`GANTRY_NODE_RUNNING`, `_DRAINING` or `_UNHEALTHY`).
    pub state: u32,
}

/// A terminal application, kept for queries after its records are dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppSummary {
    /// Id.
    pub id: AppId,
    /// Name.
    pub name: String,
    /// Queue path.
    pub queue: String,
    /// User.
    pub user: String,
    /// Final state (`GANTRY_APP_*`).
    pub state: u32,
    /// Why.
    pub diagnostics: String,
}

/// Every record of the cluster.
#[derive(Debug, Default)]
pub struct ClusterState {
    pub(crate) strings: StringArena,
    pub(crate) labels: Vec<GantryLabel>,
    pub(crate) nodes: Vec<GantryNode>,
    pub(crate) node_index: DetHashMap<String, u32>,
    /// Parallel to `nodes`: live-container counts and idle times.
    pub(crate) node_meta: Vec<NodeMeta>,
    /// Parallel to `nodes`: what each agent last measured (ABI 1.1's `node_usage`).
    pub(crate) node_usage: Vec<GantryNodeUsage>,
    pub(crate) gpus: Vec<GantryGpu>,
    pub(crate) queues: Vec<GantryQueue>,
    pub(crate) queue_index: DetHashMap<String, u32>,
    /// How each queue's absolute guarantee is set, by position; queues past its end take their
    /// configured share. Only a reservation plan (`reservations.rs`) sets other rules.
    pub(crate) queue_rules: Vec<GuaranteeRule>,
    pub(crate) apps: Vec<GantryApp>,
    pub(crate) app_meta: Vec<AppMeta>,
    pub(crate) app_index: IdMap<u32>,
    pub(crate) requests: Vec<GantryRequest>,
    pub(crate) containers: Vec<GantryContainer>,
    pub(crate) container_meta: Vec<ContainerMeta>,
    pub(crate) container_index: IdMap<u32>,
    /// The reservations' records (see `crate::reservations::view`), parallel to `plan.details`.
    pub(crate) reservations: Vec<GantryReservation>,
    /// The rest of the reservation side of the view.
    pub(crate) plan: crate::reservations::view::PlanArrays,
    pub(crate) cluster: GantryResources,
    pub(crate) history: VecDeque<AppSummary>,
    pub(crate) history_len: usize,
    pub(crate) next_app: u64,
    pub(crate) next_request: u64,
    pub(crate) next_container: u64,
    pub(crate) next_reservation: u64,
    /// Something finished since the last compaction.
    pub(crate) dirty: bool,
    /// Bumped whenever the node set changes (a registration, a loss, a state change): what
    /// depends only on the nodes is recomputed when it moves (see [`crate::waiting`]).
    pub(crate) node_generation: u64,
    /// How each container that ended since the last compaction ended, in words, by id: for
    /// drivers to keep (the container itself leaves at the next compaction, and so does this).
    pub(crate) ended_words: IdMap<String>,
}

/// Whether a container state holds resources.
pub fn container_is_live(state: u32) -> bool {
    matches!(state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING | GANTRY_CONTAINER_STOPPING)
}

/// Whether an application state is final.
pub fn app_is_terminal(state: u32) -> bool {
    matches!(state, GANTRY_APP_FINISHED | GANTRY_APP_FAILED | GANTRY_APP_KILLED | GANTRY_APP_REJECTED)
}

/// The rack of request `request`'s placed (allocated or running) containers, if it has any.
/// Works on the engine's arrays and on a plugin view's alike.
pub fn placed_rack(
    containers: &[GantryContainer],
    nodes: &[GantryNode],
    request: u32,
) -> Option<GantryStrRef> {
    containers
        .iter()
        .find(|c| {
            c.request == request && matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
        })
        .and_then(|c| nodes.get(c.node as usize))
        .map(|n| n.rack)
}

impl ClusterState {
    /// A state with the queue hierarchy of `config` and no nodes.
    pub fn new(config: &EngineConfig) -> Result<Self, EngineError> {
        let mut s = ClusterState {
            history_len: config.history_len,
            next_app: 1,
            next_request: 1,
            next_container: 1,
            next_reservation: 1,
            // 0 is an application's "never checked".
            node_generation: 1,
            ..Default::default()
        };
        s.build_queues(&config.queues)?;
        Ok(s)
    }

    pub(crate) fn intern_labels(&mut self, labels: &[(String, String)]) -> GantryRange {
        let start = self.labels.len() as u32;
        for (k, v) in labels {
            let key = self.strings.intern(k);
            let value = self.strings.intern(v);
            self.labels.push(GantryLabel { key, value });
        }
        GantryRange { start, len: labels.len() as u32 }
    }

    /// Registers a node, or updates a known one (keeping its live containers).
    pub(crate) fn register_node(&mut self, spec: &NodeSpec) -> Result<NodeId, EngineError> {
        spec.validate()?;
        let mut gpu_specs: Vec<GpuSpec> = spec.gpu_list.clone();
        if gpu_specs.is_empty() {
            gpu_specs = (0..spec.capacity.gpus)
                .map(|index| GpuSpec { index, model: String::new(), memory_bytes: 0 })
                .collect();
        }
        let model_name = gpu_specs.first().map(|g| g.model.clone()).unwrap_or_default();
        if let Some(&idx) = self.node_index.get(&spec.name) {
            let node = self.nodes[idx as usize];
            let old_gpus = View::range(&self.gpus, node.gpus);
            if old_gpus.len() != gpu_specs.len() && old_gpus.iter().any(|g| g.container != GANTRY_NONE) {
                return Err(EngineError::Conflict(format!(
                    "node `{}` re-registered with {} GPUs while containers hold some of its {}",
                    spec.name,
                    gpu_specs.len(),
                    old_gpus.len()
                )));
            }
            if !node.allocated.fits_in(&spec.capacity) {
                return Err(EngineError::Conflict(format!(
                    "node `{}` re-registered with less capacity than its containers hold; drain it first",
                    spec.name
                )));
            }
            // Checks passed: only now touch the arena and the records.
            let rack = self.strings.intern(&spec.rack);
            let gpu_model = self.strings.intern(&model_name);
            let labels = self.intern_labels(&spec.labels);
            let gpus = self.place_gpus(idx, node.gpus, &gpu_specs);
            let n = &mut self.nodes[idx as usize];
            n.rack = rack;
            n.gpu_model = gpu_model;
            n.labels = labels;
            n.gpus = gpus;
            n.capacity = spec.capacity;
            // An agent that comes back (lost, unhealthy) is schedulable again; an operator's
            // drain outlives agent restarts.
            if n.state != GANTRY_NODE_DRAINING {
                n.state = GANTRY_NODE_RUNNING;
            }
            self.recompute_capacity();
            self.node_generation += 1;
            return Ok(NodeId(idx));
        }
        let idx = self.nodes.len() as u32;
        let name = self.strings.intern(&spec.name);
        let rack = self.strings.intern(&spec.rack);
        let gpu_model = self.strings.intern(&model_name);
        let labels = self.intern_labels(&spec.labels);
        let gpus = self.place_gpus(idx, GantryRange { start: self.gpus.len() as u32, len: 0 }, &gpu_specs);
        self.nodes.push(GantryNode {
            name,
            rack,
            gpu_model,
            labels,
            gpus,
            capacity: spec.capacity,
            allocated: GantryResources::default(),
            state: GANTRY_NODE_RUNNING,
            flags: 0,
        });
        self.node_meta.push(NodeMeta::default());
        self.node_usage.push(GantryNodeUsage::default());
        self.node_index.insert(spec.name.clone(), idx);
        self.recompute_capacity();
        self.node_generation += 1;
        Ok(NodeId(idx))
    }

    /// Writes a node's GPU records: in place when the count is unchanged (keeping holders), else
    /// at the end of the array (the old range is left unowned and dropped at compaction).
    fn place_gpus(&mut self, node: u32, old: GantryRange, specs: &[GpuSpec]) -> GantryRange {
        let in_place = old.len as usize == specs.len();
        let start = if in_place { old.start } else { self.gpus.len() as u32 };
        if !in_place {
            for g in &mut self.gpus[old.start as usize..(old.start + old.len) as usize] {
                g.node = GANTRY_NONE;
            }
        }
        for (k, g) in specs.iter().enumerate() {
            let model = self.strings.intern(&g.model);
            let rec = GantryGpu {
                node,
                index: g.index,
                model,
                memory_bytes: g.memory_bytes,
                container: GANTRY_NONE,
                reserved: 0,
            };
            if in_place {
                let slot = &mut self.gpus[start as usize + k];
                *slot = GantryGpu { container: slot.container, ..rec };
            } else {
                self.gpus.push(rec);
            }
        }
        GantryRange { start, len: specs.len() as u32 }
    }

    /// Builds a hook's view of the records: the engine's own arrays, borrowed.
    pub(crate) fn view<'a>(
        &'a self,
        hook: u32,
        now_ms: u64,
        cycle: u64,
        seed: u64,
        pending: &'a [u32],
    ) -> View<'a> {
        View {
            hook,
            now_ms,
            cycle,
            seed,
            cluster: self.cluster,
            strings: self.strings.bytes(),
            labels: &self.labels,
            nodes: &self.nodes,
            gpus: &self.gpus,
            queues: &self.queues,
            apps: &self.apps,
            requests: &self.requests,
            containers: &self.containers,
            reservations: &self.reservations,
            pending,
            node_usage: &self.node_usage,
            plan: gantry_sdk::PlanView {
                cause: 0,
                subject: GANTRY_NONE,
                queue: self.plan.queue,
                capacity: self.plan.capacity,
                step_ms: self.plan.step_ms,
                horizon_ms: self.plan.horizon_ms,
                details: &self.plan.details,
                rdl_nodes: &self.plan.nodes,
                allocations: &self.plan.allocations,
            },
        }
    }

    /// The largest capacity in each dimension over the nodes that are not lost (each dimension
    /// on its own: the most CPU may be on one node, the most memory on another), or `None`
    /// while no node is registered. YARN's maximum allocation: what no request may exceed.
    pub fn largest_node(&self) -> Option<GantryResources> {
        self.nodes
            .iter()
            .filter(|n| n.state != GANTRY_NODE_LOST)
            .map(|n| n.capacity)
            .reduce(|a, b| a.max_each(&b))
    }

    /// The nodes that hold no container and are not lost, longest idle first (ties by index).
    pub fn idle_nodes(&self) -> Vec<IdleNode> {
        let mut idle: Vec<IdleNode> = self
            .nodes
            .iter()
            .zip(&self.node_meta)
            .enumerate()
            .filter(|(_, (n, m))| n.state != GANTRY_NODE_LOST && m.live_containers == 0)
            .map(|(i, (n, m))| IdleNode {
                index: i as u32,
                since_ms: m.idle_since_ms.unwrap_or(0),
                state: n.state,
            })
            .collect();
        idle.sort_by_key(|n| (n.since_ms, n.index));
        idle
    }

    /// A node's side record (live containers, idle since), if the index exists.
    pub fn node_meta(&self, node: u32) -> Option<&NodeMeta> {
        self.node_meta.get(node as usize)
    }

    /// What each node's agent last measured, parallel to the node array.
    pub fn node_usage(&self) -> &[GantryNodeUsage] {
        &self.node_usage
    }
}

impl ClusterState {
    /// Nodes.
    pub fn nodes(&self) -> &[GantryNode] {
        &self.nodes
    }
    /// Queues.
    pub fn queues(&self) -> &[GantryQueue] {
        &self.queues
    }
    /// Live applications.
    pub fn apps(&self) -> &[GantryApp] {
        &self.apps
    }
    /// Requests of live applications.
    pub fn requests(&self) -> &[GantryRequest] {
        &self.requests
    }
    /// Live containers (and, until the next cycle, those that just ended).
    pub fn containers(&self) -> &[GantryContainer] {
        &self.containers
    }
    /// GPUs.
    pub fn gpus(&self) -> &[GantryGpu] {
        &self.gpus
    }
    /// Label records (node labels, selectors, preferences).
    pub fn labels(&self) -> &[GantryLabel] {
        &self.labels
    }
    /// The id the next new application will get.
    pub fn next_app_id(&self) -> u64 {
        self.next_app
    }
    /// Reservations.
    pub fn reservations(&self) -> &[GantryReservation] {
        &self.reservations
    }
    /// Total allocatable resources of schedulable nodes.
    pub fn cluster(&self) -> GantryResources {
        self.cluster
    }
    /// The text of a string reference.
    pub fn str(&self, r: GantryStrRef) -> &str {
        self.strings.get(r)
    }
    /// A node's index by name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.node_index.get(name).map(|&i| NodeId(i))
    }
    /// A live app's index by id.
    pub fn app_index(&self, id: AppId) -> Option<u32> {
        self.app_index.get(&id.0).copied()
    }
    /// Side data of a live app, by index.
    pub fn app_meta(&self, i: u32) -> Option<&AppMeta> {
        self.app_meta.get(i as usize)
    }
    /// A live container's index by id.
    pub fn container_index(&self, id: ContainerId) -> Option<u32> {
        self.container_index.get(&id.0).copied()
    }
    /// Side data of a container, by index.
    pub fn container_meta(&self, i: u32) -> Option<&ContainerMeta> {
        self.container_meta.get(i as usize)
    }
}
