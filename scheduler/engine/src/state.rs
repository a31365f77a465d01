//! The cluster as the engine keeps it: arrays of the ABI's `repr(C)` records, so a plugin's view
//! is a set of borrowed slices of these very arrays (zero-copy), plus a few side tables that
//! plugins do not need (names of apps, kill reasons, indexes by id).
//!
//! Cross references are `u32` positions. Nodes and queues are never removed, so their positions
//! are stable; apps, requests and containers that are finished are dropped by [`ClusterState::compact`]
//! before the next view is built, which renumbers them — hence ids for anything kept across calls.

use crate::error::EngineError;
use crate::event::KillReason;
use crate::model::*;
use crate::strings::StringArena;
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::collections::{HashMap, VecDeque};

/// A map keyed by the engine's own ids (apps, containers): sequential numbers the engine hands
/// out, never chosen by a client, so they need no DoS-resistant hash. One multiplication
/// (Fibonacci hashing) spreads them over the table; SipHash cost a tenth of a placement.
pub(crate) type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The hasher of [`IdMap`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; this keeps any other use correct, if slower.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

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
    pub(crate) node_index: HashMap<String, u32>,
    /// Parallel to `nodes`: live-container counts and idle times.
    pub(crate) node_meta: Vec<NodeMeta>,
    /// Parallel to `nodes`: what each agent last measured (ABI 1.1's `node_usage`).
    pub(crate) node_usage: Vec<GantryNodeUsage>,
    pub(crate) gpus: Vec<GantryGpu>,
    pub(crate) queues: Vec<GantryQueue>,
    pub(crate) queue_index: HashMap<String, u32>,
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

/// How a queue's absolute guarantee follows from its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum GuaranteeRule {
    /// Its configured fraction of the parent's (every configured queue).
    #[default]
    Share,
    /// Exactly these resources (at most the parent's): a reservation's planned allocation now.
    Fixed(GantryResources),
    /// What the parent's guarantee leaves after its other children's: a plan's default queue.
    Rest,
}

/// The largest share `part` is of `whole` in any dimension `whole` has (0 when it has none).
fn dominant_share(part: &GantryResources, whole: &GantryResources) -> f64 {
    let dims = [
        (part.cpu_millis as f64, whole.cpu_millis as f64),
        (part.memory_bytes as f64, whole.memory_bytes as f64),
        (f64::from(part.gpus), f64::from(whole.gpus)),
    ];
    dims.iter().filter(|(_, w)| *w > 0.0).map(|(p, w)| p / w).fold(0.0, f64::max).min(1.0)
}

fn min_each(a: &GantryResources, b: &GantryResources) -> GantryResources {
    GantryResources {
        cpu_millis: a.cpu_millis.min(b.cpu_millis),
        memory_bytes: a.memory_bytes.min(b.memory_bytes),
        gpus: a.gpus.min(b.gpus),
        reserved: 0,
    }
}

fn scale(r: &GantryResources, f: f64) -> GantryResources {
    GantryResources {
        cpu_millis: (r.cpu_millis as f64 * f).floor() as u64,
        memory_bytes: (r.memory_bytes as f64 * f).floor() as u64,
        gpus: (r.gpus as f64 * f).floor() as u32,
        reserved: 0,
    }
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

    fn build_queues(&mut self, specs: &[QueueSpec]) -> Result<(), EngineError> {
        let default = [QueueSpec { path: "root.default".into(), guaranteed: 1.0, maximum: 1.0 }];
        let specs = if specs.is_empty() { &default[..] } else { specs };
        let root = self.strings.intern("root");
        self.queues.push(GantryQueue {
            name: root,
            parent: GANTRY_NONE,
            flags: 0,
            guaranteed: 1.0,
            maximum: 1.0,
            ..Default::default()
        });
        self.queue_index.insert("root".into(), 0);
        let mut sorted: Vec<&QueueSpec> = specs.iter().collect();
        sorted.sort_by_key(|q| q.path.matches('.').count());
        for q in sorted {
            let bad = |m: String| EngineError::QueueConfig(format!("queue `{}`: {m}", q.path));
            crate::model::check_name("queue path", &q.path, false)?;
            let Some((parent_path, leaf)) = q.path.rsplit_once('.') else {
                return Err(bad("must be a path below `root`, e.g. `root.prod`".into()));
            };
            if leaf.is_empty() || !q.path.starts_with("root.") {
                return Err(bad("must be a path below `root`, e.g. `root.prod`".into()));
            }
            if self.queue_index.contains_key(&q.path) {
                return Err(bad("is defined twice".into()));
            }
            let Some(&parent) = self.queue_index.get(parent_path) else {
                return Err(bad(format!("parent `{parent_path}` is not defined")));
            };
            if !(0.0..=1.0).contains(&q.guaranteed) || q.guaranteed.is_nan() {
                return Err(bad(format!("guaranteed {} is not in 0..=1", q.guaranteed)));
            }
            if !(q.guaranteed..=1.0).contains(&q.maximum) || q.maximum.is_nan() {
                return Err(bad(format!("maximum {} is not in guaranteed..=1", q.maximum)));
            }
            let name = self.strings.intern(&q.path);
            let idx = self.queues.len() as u32;
            self.queues.push(GantryQueue {
                name,
                parent,
                flags: GANTRY_QUEUE_LEAF,
                guaranteed: q.guaranteed,
                maximum: q.maximum,
                ..Default::default()
            });
            self.queues[parent as usize].flags &= !GANTRY_QUEUE_LEAF;
            self.queue_index.insert(q.path.clone(), idx);
        }
        for (p, _) in self.queues.iter().enumerate() {
            let sum: f64 = self.queues.iter().filter(|c| c.parent == p as u32).map(|c| c.guaranteed).sum();
            if sum > 1.0 + 1e-9 {
                return Err(EngineError::QueueConfig(format!(
                    "children of `{}` are guaranteed {:.3} of it, more than 1",
                    self.strings.get(self.queues[p].name),
                    sum
                )));
            }
        }
        Ok(())
    }

    /// Recomputes the cluster total and each queue's absolute capacities. Parents come before
    /// children in the queue array, so one pass suffices.
    ///
    /// Queue capacities are shares of the schedulable capacity *plus* what draining and unhealthy
    /// nodes still hold: their containers still count against their queues, so leaving them out
    /// of the base would let a drained node's work block idle capacity elsewhere.
    pub(crate) fn recompute_capacity(&mut self) {
        let mut base = GantryResources::default();
        self.cluster = GantryResources::default();
        for n in &self.nodes {
            match n.state {
                GANTRY_NODE_RUNNING => {
                    self.cluster = self.cluster.plus(&n.capacity);
                    base = base.plus(&n.capacity);
                }
                GANTRY_NODE_LOST => {}
                _ => base = base.plus(&n.allocated),
            }
        }
        for i in 0..self.queues.len() {
            let q = self.queues[i];
            let (pg, pm) = match self.queues.get(q.parent as usize) {
                Some(p) => (p.absolute_guaranteed, p.absolute_maximum),
                None => (base, base),
            };
            self.queues[i].absolute_maximum = scale(&pm, q.maximum);
            match self.queue_rules.get(i).copied().unwrap_or_default() {
                GuaranteeRule::Share | GuaranteeRule::Rest => {
                    self.queues[i].absolute_guaranteed = scale(&pg, q.guaranteed);
                }
                GuaranteeRule::Fixed(r) => {
                    let g = min_each(&r, &pg);
                    self.queues[i].absolute_guaranteed = g;
                    self.queues[i].guaranteed = dominant_share(&g, &pg);
                }
            }
        }
        // A `Rest` queue takes what its siblings leave; its own children (none in practice)
        // were scaled from its share above.
        for i in 0..self.queues.len() {
            if self.queue_rules.get(i).copied() != Some(GuaranteeRule::Rest) {
                continue;
            }
            let parent = self.queues[i].parent;
            let Some(p) = self.queues.get(parent as usize).map(|p| p.absolute_guaranteed) else { continue };
            let taken = self
                .queues
                .iter()
                .enumerate()
                .filter(|&(j, c)| j != i && c.parent == parent && c.maximum > 0.0)
                .fold(GantryResources::default(), |acc, (_, c)| acc.plus(&c.absolute_guaranteed));
            let rest = p.minus(&min_each(&taken, &p));
            self.queues[i].absolute_guaranteed = rest;
            self.queues[i].guaranteed = dominant_share(&rest, &p);
        }
    }

    /// Appends a leaf queue `path` under `parent` (nodes and queues are never removed; a
    /// reservation plan reuses its ended reservations' queues with [`ClusterState::rename_queue`]).
    pub(crate) fn add_queue(&mut self, path: &str, parent: u32, maximum: f64, rule: GuaranteeRule) -> u32 {
        let name = self.strings.intern(path);
        let idx = self.queues.len() as u32;
        self.queues.push(GantryQueue {
            name,
            parent,
            flags: GANTRY_QUEUE_LEAF,
            guaranteed: 0.0,
            maximum,
            ..Default::default()
        });
        if let Some(p) = self.queues.get_mut(parent as usize) {
            p.flags &= !GANTRY_QUEUE_LEAF;
        }
        self.queue_index.insert(path.to_owned(), idx);
        self.set_queue_rule(idx, rule);
        idx
    }

    /// Gives queue `queue` a new path (the old one no longer resolves) and maximum share.
    pub(crate) fn rename_queue(&mut self, queue: u32, path: &str, maximum: f64) {
        let old = self.queue_path(queue).to_owned();
        self.queue_index.remove(&old);
        let name = self.strings.intern(path);
        if let Some(q) = self.queues.get_mut(queue as usize) {
            q.name = name;
            q.maximum = maximum;
        }
        self.queue_index.insert(path.to_owned(), queue);
    }

    /// Takes a queue's path out of the index: submissions naming it are refused from now on.
    pub(crate) fn retire_queue(&mut self, queue: u32) {
        let old = self.queue_path(queue).to_owned();
        self.queue_index.remove(&old);
        if let Some(q) = self.queues.get_mut(queue as usize) {
            q.maximum = 0.0;
            q.guaranteed = 0.0;
        }
        self.set_queue_rule(queue, GuaranteeRule::Fixed(GantryResources::default()));
    }

    pub(crate) fn set_queue_rule(&mut self, queue: u32, rule: GuaranteeRule) {
        let i = queue as usize;
        if self.queue_rules.len() <= i {
            self.queue_rules.resize(i + 1, GuaranteeRule::Share);
        }
        self.queue_rules[i] = rule;
    }

    /// Moves application `app` (an index) and what its live containers hold to `queue`.
    pub(crate) fn move_app(&mut self, app: u32, queue: u32) {
        let Some(from) = self.apps.get(app as usize).map(|a| a.queue) else { return };
        if from == queue {
            return;
        }
        let held: Vec<GantryResources> = self
            .containers
            .iter()
            .filter(|c| c.app == app && container_is_live(c.state))
            .map(|c| c.resources)
            .collect();
        for r in &held {
            self.charge_queue(from, r, false);
            self.charge_queue(queue, r, true);
        }
        self.apps[app as usize].queue = queue;
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

    /// Adds `delta` to (or, with `add == false`, removes it from) a queue and all its ancestors.
    pub(crate) fn charge_queue(&mut self, queue: u32, delta: &GantryResources, add: bool) {
        let mut q = queue;
        while let Some(rec) = self.queues.get_mut(q as usize) {
            rec.used = if add { rec.used.plus(delta) } else { rec.used.minus(delta) };
            q = rec.parent;
        }
    }

    /// The queue path of a queue index.
    pub fn queue_path(&self, queue: u32) -> &str {
        self.queues.get(queue as usize).map(|q| self.strings.get(q.name)).unwrap_or("")
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

    /// Drops finished apps, their requests and finished containers, renumbering what is left and
    /// every reference to it; rebuilds the label pool and GPU array without orphans.
    /// Returns whether it renumbered anything (so indexes held elsewhere are stale).
    pub(crate) fn compact(&mut self) -> bool {
        if !self.dirty {
            return false;
        }
        self.dirty = false;
        self.ended_words.clear();
        let mut live_per_app = vec![0u32; self.apps.len()];
        for c in &self.containers {
            if container_is_live(c.state) {
                live_per_app[c.app as usize] += 1;
            }
        }
        // Apps.
        let mut app_map = vec![GANTRY_NONE; self.apps.len()];
        let mut kept_apps = Vec::with_capacity(self.apps.len());
        let mut kept_meta = Vec::with_capacity(self.apps.len());
        for (i, (a, m)) in self.apps.iter().zip(self.app_meta.iter()).enumerate() {
            if app_is_terminal(a.state) && live_per_app[i] == 0 {
                self.history.push_back(AppSummary {
                    id: AppId(a.id),
                    name: m.name.clone(),
                    queue: self.queue_path(a.queue).to_owned(),
                    user: self.strings.get(a.user).to_owned(),
                    state: a.state,
                    diagnostics: m.diagnostics.clone(),
                });
                continue;
            }
            app_map[i] = kept_apps.len() as u32;
            kept_apps.push(*a);
            kept_meta.push(m.clone());
        }
        while self.history.len() > self.history_len {
            self.history.pop_front();
        }
        // Requests (contiguous per app, so ranges stay contiguous).
        let mut req_map = vec![GANTRY_NONE; self.requests.len()];
        let mut kept_reqs = Vec::with_capacity(self.requests.len());
        let mut new_labels: Vec<GantryLabel> = Vec::with_capacity(self.labels.len());
        let mut copy_range = |r: GantryRange, labels: &[GantryLabel]| -> GantryRange {
            let start = new_labels.len() as u32;
            new_labels.extend_from_slice(View::range(labels, r));
            GantryRange { start, len: new_labels.len() as u32 - start }
        };
        for n in &mut self.nodes {
            n.labels = copy_range(n.labels, &self.labels);
        }
        for (i, r) in self.requests.iter().enumerate() {
            let new_app = app_map[r.app as usize];
            if new_app == GANTRY_NONE {
                continue;
            }
            req_map[i] = kept_reqs.len() as u32;
            let mut r = *r;
            r.app = new_app;
            r.selector = copy_range(r.selector, &self.labels);
            r.preferred = copy_range(r.preferred, &self.labels);
            kept_reqs.push(r);
        }
        for a in &mut kept_apps {
            a.requests.start = req_map[a.requests.start as usize];
        }
        // Containers.
        let mut cont_map = vec![GANTRY_NONE; self.containers.len()];
        let mut kept_conts = Vec::with_capacity(self.containers.len());
        let mut kept_cmeta = Vec::with_capacity(self.containers.len());
        for (i, (c, m)) in self.containers.iter().zip(self.container_meta.iter()).enumerate() {
            if !container_is_live(c.state) {
                continue;
            }
            cont_map[i] = kept_conts.len() as u32;
            let mut c = *c;
            c.app = app_map[c.app as usize];
            c.request = req_map[c.request as usize];
            kept_conts.push(c);
            kept_cmeta.push(*m);
        }
        // GPUs: drop orphans, renumber node ranges and holders.
        let mut new_gpus = Vec::with_capacity(self.gpus.len());
        for (ni, n) in self.nodes.iter_mut().enumerate() {
            let start = new_gpus.len() as u32;
            for g in View::range(&self.gpus, n.gpus) {
                let mut g = *g;
                g.node = ni as u32;
                g.container = cont_map.get(g.container as usize).copied().unwrap_or(GANTRY_NONE);
                new_gpus.push(g);
            }
            n.gpus = GantryRange { start, len: new_gpus.len() as u32 - start };
        }
        self.apps = kept_apps;
        self.app_meta = kept_meta;
        self.requests = kept_reqs;
        self.containers = kept_conts;
        self.container_meta = kept_cmeta;
        self.labels = new_labels;
        self.gpus = new_gpus;
        self.app_index = self.apps.iter().enumerate().map(|(i, a)| (a.id, i as u32)).collect();
        self.container_index = self.containers.iter().enumerate().map(|(i, c)| (c.id, i as u32)).collect();
        true
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
        self.nodes.iter().filter(|n| n.state != GANTRY_NODE_LOST).map(|n| n.capacity).reduce(|a, b| {
            GantryResources {
                cpu_millis: a.cpu_millis.max(b.cpu_millis),
                memory_bytes: a.memory_bytes.max(b.memory_bytes),
                gpus: a.gpus.max(b.gpus),
                reserved: 0,
            }
        })
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

    /// Checks the bookkeeping against the records: every node's and queue's allocation equals the
    /// sum of its live containers, nothing is over-allocated beyond what was allowed at placement,
    /// GPU holders are live containers on the same node, and indexes are consistent. Used by tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut node_alloc = vec![GantryResources::default(); self.nodes.len()];
        let mut queue_used = vec![GantryResources::default(); self.queues.len()];
        let mut app_used = vec![GantryResources::default(); self.apps.len()];
        for (i, c) in self.containers.iter().enumerate() {
            if !container_is_live(c.state) {
                continue;
            }
            let n = c.node as usize;
            let a = self.apps.get(c.app as usize).ok_or(format!("container {i} has bad app"))?;
            self.requests.get(c.request as usize).ok_or(format!("container {i} has bad request"))?;
            *node_alloc.get_mut(n).ok_or(format!("container {i} has bad node"))? =
                node_alloc[n].plus(&c.resources);
            app_used[c.app as usize] = app_used[c.app as usize].plus(&c.resources);
            let mut q = a.queue;
            while let Some(rec) = self.queues.get(q as usize) {
                queue_used[q as usize] = queue_used[q as usize].plus(&c.resources);
                q = rec.parent;
            }
            let held = self.gpus.iter().filter(|g| g.container == i as u32).count() as u32;
            if held != c.resources.gpus {
                return Err(format!("container {} holds {held} GPUs, wants {}", c.id, c.resources.gpus));
            }
        }
        let mut node_live = vec![0u32; self.nodes.len()];
        for c in self.containers.iter().filter(|c| container_is_live(c.state)) {
            node_live[c.node as usize] += 1;
        }
        if self.node_meta.len() != self.nodes.len() || self.node_usage.len() != self.nodes.len() {
            return Err("node side tables are not parallel to the nodes".into());
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let meta = self.node_meta[i];
            if meta.live_containers != node_live[i] {
                return Err(format!(
                    "node {i} counts {} live containers, has {}",
                    meta.live_containers, node_live[i]
                ));
            }
            if meta.idle_since_ms.is_some() != (node_live[i] == 0) && n.state != GANTRY_NODE_LOST {
                return Err(format!(
                    "node {i} idle since {:?} with {} live containers",
                    meta.idle_since_ms, node_live[i]
                ));
            }
            if n.allocated != node_alloc[i] {
                return Err(format!(
                    "node {i} allocated {:?} but containers sum to {:?}",
                    n.allocated, node_alloc[i]
                ));
            }
            if !n.allocated.fits_in(&n.capacity) {
                return Err(format!("node {i} over-allocated: {:?} > {:?}", n.allocated, n.capacity));
            }
        }
        for (i, q) in self.queues.iter().enumerate() {
            if q.used != queue_used[i] {
                return Err(format!("queue {i} used {:?} but containers sum to {:?}", q.used, queue_used[i]));
            }
        }
        for (i, a) in self.apps.iter().enumerate() {
            let live =
                self.containers.iter().filter(|c| c.app == i as u32 && container_is_live(c.state)).count();
            if self.app_meta[i].live_containers as usize != live {
                return Err(format!(
                    "app {} counts {} live containers, has {live}",
                    a.id, self.app_meta[i].live_containers
                ));
            }
            if a.used != app_used[i] {
                return Err(format!(
                    "app {} used {:?} but containers sum to {:?}",
                    a.id, a.used, app_used[i]
                ));
            }
            let completed = &self.app_meta[i].completed;
            if completed.len() != a.requests.len as usize {
                return Err(format!("app {} counts completions of {} requests", a.id, completed.len()));
            }
            for (r, &done) in View::range(&self.requests, a.requests).iter().zip(completed) {
                if done > r.placed {
                    return Err(format!("request {} completed {done} > placed {}", r.id, r.placed));
                }
                if r.app != i as u32 {
                    return Err(format!("request {} points at app {} not {i}", r.id, r.app));
                }
                if r.placed > r.count {
                    return Err(format!("request {} placed {} > count {}", r.id, r.placed, r.count));
                }
            }
        }
        for g in &self.gpus {
            if g.container != GANTRY_NONE {
                let c = self.containers.get(g.container as usize).ok_or("GPU held by bad container")?;
                if c.node != g.node || !container_is_live(c.state) {
                    return Err(format!(
                        "GPU on node {} held by container {} on node {}",
                        g.node, c.id, c.node
                    ));
                }
            }
        }
        self.check_plan_arrays()?;
        Ok(())
    }
}
