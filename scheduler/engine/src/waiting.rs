//! Why a pending application waits, in words: the engine's pending reasons, as Slurm's job
//! `Reason` and Kubernetes' FailedScheduling events tell them. After each cycle's placement,
//! every application with containers left to place gets a [`Waiting`]: what no node can ever
//! give it (more than the largest node has, a label no node carries, a gang larger than the
//! cluster), else what held it back this cycle (the placement plugin's WAIT or a refused
//! decision, its queue's maximum), else a full cluster.
//!
//! Cheap by construction: the [`WaitingBook`] keeps only the applications left waiting, by id,
//! so a cycle that places everything pays one comparison per pending request; a waiting
//! application's first unplaced request costs a map lookup, a few comparisons and a walk up
//! its queue. What depends on the nodes is computed once per change of the node set
//! (`ClusterState::node_generation`): a [`NodeSummary`] (the largest node per dimension,
//! overall and per label) and, per application, what the nodes can never give it. Only a
//! gang's check looks at the nodes one by one, and it stops as soon as the gang fits.

use crate::det_hash::DetHashMap;
use crate::state::ClusterState;
use crate::validate::{PlaceNote, RejectReason};
use gantry_sdk::View;
use gantry_sdk::abi::*;
use gantry_sdk::units::{format_bytes, format_cores};

/// A resource dimension a request can ask too much of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    /// CPU, millicores.
    Cpu,
    /// Memory, bytes.
    Memory,
    /// Whole GPUs.
    Gpus,
}

impl Dimension {
    const ALL: [Dimension; 3] = [Dimension::Cpu, Dimension::Memory, Dimension::Gpus];

    fn of(self, r: &GantryResources) -> u64 {
        match self {
            Dimension::Cpu => r.cpu_millis,
            Dimension::Memory => r.memory_bytes,
            Dimension::Gpus => u64::from(r.gpus),
        }
    }

    /// An amount of this dimension in words: `64 CPU`, `100Gi of memory`, `4 GPUs`.
    pub fn amount(self, amount: u64) -> String {
        match self {
            Dimension::Cpu => format!("{} CPU", format_cores(amount)),
            Dimension::Memory => format!("{} of memory", format_bytes(amount)),
            Dimension::Gpus if amount == 1 => "1 GPU".to_owned(),
            Dimension::Gpus => format!("{amount} GPUs"),
        }
    }
}

/// The first dimension in which `need` exceeds `have`: (dimension, need, have).
pub fn exceeds(need: &GantryResources, have: &GantryResources) -> Option<(Dimension, u64, u64)> {
    Dimension::ALL.into_iter().find(|d| d.of(need) > d.of(have)).map(|d| (d, d.of(need), d.of(have)))
}

/// Why an application's containers are not placed. Kept per application
/// (`AppMeta::waiting`) and put into words by [`Waiting::describe`] when someone asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// No node is registered (or every one is lost).
    NoNodes,
    /// Nodes are registered, but none accepts containers (all draining or unhealthy).
    NoRunningNodes {
        /// Registered nodes that are not lost.
        registered: u32,
    },
    /// A container needs more of a resource than any node has.
    TooLarge {
        /// Which resource.
        dimension: Dimension,
        /// What one container needs.
        need: u64,
        /// The most any node has.
        largest: u64,
    },
    /// A container needs more of a resource than any node carrying one of its labels has.
    TooLargeForLabel {
        /// Which resource.
        dimension: Dimension,
        /// What one container needs.
        need: u64,
        /// The most any node with the label has.
        largest: u64,
        /// The label.
        label: GantryLabel,
    },
    /// No node carries a label of the request's selector.
    NoLabel {
        /// The label (its value may list alternatives, `a|b`).
        label: GantryLabel,
    },
    /// A gang is larger than the nodes it may use could hold even when empty.
    GangTooLarge {
        /// Its members.
        count: u32,
        /// How many the nodes (one rack, for a same-rack gang) could hold at most.
        fits: u32,
        /// The nodes it may use (not lost, with its labels).
        nodes: u32,
        /// Whether it must stay on one rack.
        same_rack: bool,
    },
    /// Its queue, or an ancestor, would go over its maximum.
    QueueMaximum {
        /// The queue's index.
        queue: u32,
    },
    /// The placement plugin left it waiting on purpose (a WAIT decision).
    PluginWait {
        /// The plugin's index among the engine's policies.
        policy: u32,
        /// The plugin's own reason code.
        code: u32,
    },
    /// The host refused the placement plugin's decision for it.
    Refused {
        /// The plugin's index among the engine's policies.
        policy: u32,
        /// Why.
        reason: RejectReason,
    },
    /// The placement plugin did not place it, and said nothing about it.
    NotPlaced {
        /// The plugin's index among the engine's policies.
        policy: u32,
    },
    /// No node had room for it this cycle.
    Full,
}

impl Waiting {
    /// The reason in words, e.g. "waiting: no node has label gpu=a100". `policy_name` names
    /// a plugin by its index among the engine's policies.
    pub fn describe(&self, state: &ClusterState, policy_name: impl Fn(u32) -> String) -> String {
        let label = |l: &GantryLabel| format!("{}={}", state.str(l.key), state.str(l.value));
        match *self {
            Waiting::NoNodes => "waiting: no node is registered".into(),
            Waiting::NoRunningNodes { registered } => format!(
                "waiting: no node accepts containers (all {registered} registered are draining or unhealthy)"
            ),
            Waiting::TooLarge { dimension, need, largest } => format!(
                "waiting: needs {} per container; the largest node has {}",
                dimension.amount(need),
                dimension.amount(largest)
            ),
            Waiting::TooLargeForLabel { dimension, need, largest, label: l } => format!(
                "waiting: needs {} per container; the largest node with label {} has {}",
                dimension.amount(need),
                label(&l),
                dimension.amount(largest)
            ),
            Waiting::NoLabel { label: l } => format!("waiting: no node has label {}", label(&l)),
            Waiting::GangTooLarge { count, fits, nodes, same_rack } => {
                let nodes = if nodes == 1 { "the 1 node".to_owned() } else { format!("the {nodes} nodes") };
                let hold = if same_rack { "one rack of them holds" } else { "they hold" };
                format!(
                    "waiting: gang of {count} needs room for all {count} at once; {nodes} it may use \
                     are registered and {hold} at most {fits} even when empty"
                )
            }
            Waiting::QueueMaximum { queue } => {
                let q = state.queues().get(queue as usize).copied().unwrap_or_default();
                format!(
                    "waiting: queue {} is at its maximum ({}% of {})",
                    state.queue_path(queue),
                    percent(q.maximum),
                    state.queue_path(q.parent)
                )
            }
            Waiting::PluginWait { policy, code } => {
                format!("waiting: plugin {} holds it back (its reason code {code})", policy_name(policy))
            }
            Waiting::Refused { policy, reason } => format!(
                "waiting: the placement plugin {}'s decision was refused: {} ({})",
                policy_name(policy),
                reason.describe(),
                reason.as_str()
            ),
            Waiting::NotPlaced { policy } => {
                format!(
                    "waiting for resources: the placement plugin {} did not place it",
                    policy_name(policy)
                )
            }
            Waiting::Full => "waiting for resources: the cluster is full".into(),
        }
    }
}

/// A share as a percentage, without a needless fraction: `50`, `33.3`.
fn percent(share: f64) -> String {
    let s = format!("{:.1}", share * 100.0);
    s.trim_end_matches(".0").to_owned()
}

/// Why each waiting application waits: one entry per application that had something left to
/// place after the last cycle, found from the application through `AppMeta::waiting` (no
/// hashing, and entries sit in the order applications first waited, roughly the order the
/// cycle walks them).
#[derive(Debug, Default)]
pub(crate) struct WaitingBook {
    entries: Vec<AppWaiting>,
    nodes: NodeSummary,
}

/// What one waiting application is told.
#[derive(Debug, Clone, Copy)]
struct AppWaiting {
    /// The application's id.
    app: u64,
    /// Why it waits, as of `cycle`.
    reason: Waiting,
    /// Whether `reason` is what the nodes of generation `checked_nodes` can never give it
    /// (kept until the node set changes); otherwise every cycle says anew.
    impossible: bool,
    checked_nodes: u64,
    cycle: u64,
}

impl WaitingBook {
    /// After cycle `cycle`'s placement: gives every application with a request of `pending`
    /// left unplaced the reason of its first such request (in scheduling order) — what the
    /// nodes can never give it, else [`this_cycle`] — and forgets every other application.
    /// `notes` is what the placement plugin said (sorted here); `place_policy` the plugin that
    /// placed (`None`: the built-in first fit).
    pub(crate) fn note(
        &mut self,
        state: &mut ClusterState,
        pending: &[u32],
        notes: &mut [(u32, PlaceNote)],
        place_policy: Option<u32>,
        cycle: u64,
    ) {
        notes.sort_unstable_by_key(|(r, _)| *r);
        for &ri in pending {
            let Some(&GantryRequest { app: ai, placed, count, .. }) = state.requests.get(ri as usize) else {
                continue;
            };
            if placed >= count {
                continue;
            }
            let (Some(app), Some(meta)) = (state.apps.get(ai as usize), state.app_meta.get_mut(ai as usize))
            else {
                continue;
            };
            if self.entries.get(meta.waiting as usize).is_none_or(|w| w.app != app.id) {
                meta.waiting = self.entries.len() as u32;
                self.entries.push(AppWaiting {
                    app: app.id,
                    reason: Waiting::Full,
                    impossible: false,
                    checked_nodes: 0,
                    cycle: 0,
                });
            }
            let w = &mut self.entries[meta.waiting as usize];
            if w.cycle == cycle {
                continue; // an earlier request of the application decided
            }
            w.cycle = cycle;
            let state = &*state;
            if w.checked_nodes != state.node_generation {
                self.nodes.refresh(state);
                let never = impossible(state, &self.nodes, ai);
                (w.impossible, w.checked_nodes) = (never.is_some(), state.node_generation);
                w.reason = never.unwrap_or(w.reason);
            }
            if !w.impossible {
                w.reason = this_cycle(state, ri, notes, place_policy);
            }
        }
        let mut k = 0;
        while k < self.entries.len() {
            if self.entries[k].cycle == cycle {
                k += 1;
            } else {
                self.remove(state, k);
            }
        }
    }

    /// Removes entry `k`, keeping the moved last entry's application pointing at it.
    fn remove(&mut self, state: &mut ClusterState, k: usize) {
        let gone = self.entries.swap_remove(k);
        for (id, slot) in [(gone.app, GANTRY_NONE), (self.entries.get(k).map_or(0, |w| w.app), k as u32)] {
            if let Some(&i) = state.app_index.get(&id) {
                state.app_meta[i as usize].waiting = slot;
            }
        }
    }

    /// Why application `app` waits, as of the last cycle; `None` if it does not.
    pub(crate) fn get(&self, state: &ClusterState, app: crate::model::AppId) -> Option<Waiting> {
        let meta = state.app_meta(state.app_index(app)?)?;
        self.entries.get(meta.waiting as usize).filter(|w| w.app == app.0).map(|w| w.reason)
    }

    /// Forgets application `app` (an index), which ended.
    pub(crate) fn forget(&mut self, state: &mut ClusterState, app: u32) {
        let Some(k) = state.app_meta.get(app as usize).map(|m| m.waiting as usize) else { return };
        if k < self.entries.len() {
            self.remove(state, k);
        }
    }
}

/// What the nodes that are not lost offer, as of one node generation.
#[derive(Debug, Default)]
pub(crate) struct NodeSummary {
    /// The generation this describes (0 = none yet).
    generation: u64,
    /// Nodes that are not lost.
    registered: u32,
    /// Nodes that accept containers.
    running: u32,
    /// The largest capacity per dimension over the nodes that are not lost.
    largest: GantryResources,
    /// For each label some node carries: the largest capacity per dimension among those nodes.
    by_label: DetHashMap<GantryLabel, GantryResources>,
}

impl NodeSummary {
    /// Brings the summary up to the state's node generation (O(nodes × labels), only when the
    /// node set changed).
    pub(crate) fn refresh(&mut self, state: &ClusterState) {
        if self.generation == state.node_generation {
            return;
        }
        self.generation = state.node_generation;
        self.registered = 0;
        self.running = 0;
        self.largest = GantryResources::default();
        self.by_label.clear();
        for n in state.nodes.iter().filter(|n| n.state != GANTRY_NODE_LOST) {
            self.registered += 1;
            self.running += u32::from(n.state == GANTRY_NODE_RUNNING);
            self.largest = self.largest.max_each(&n.capacity);
            for l in View::range(&state.labels, n.labels) {
                let e = self.by_label.entry(*l).or_default();
                *e = e.max_each(&n.capacity);
            }
        }
    }

    /// The largest capacity per dimension among the nodes carrying `want` (a value listing
    /// alternatives, `a|b`, is carried by a node with any of them); `None` if no node does.
    fn largest_with(&self, state: &ClusterState, want: &GantryLabel) -> Option<GantryResources> {
        if let Some(r) = self.by_label.get(want) {
            return Some(*r);
        }
        let value = state.str(want.value);
        if !value.contains('|') {
            return None;
        }
        value
            .split('|')
            .filter_map(|alt| state.strings.lookup(alt))
            .filter_map(|v| self.by_label.get(&GantryLabel { key: want.key, value: v }))
            .copied()
            .reduce(|a, b| a.max_each(&b))
    }
}

/// What the nodes can never give application `app` (an index), whatever frees up: the first
/// request that asks for more than the largest node, a label no node carries, or a gang the
/// nodes could not hold even when empty. `None` when every request could be placed on an
/// empty cluster.
pub(crate) fn impossible(state: &ClusterState, nodes: &NodeSummary, app: u32) -> Option<Waiting> {
    if nodes.registered == 0 {
        return Some(Waiting::NoNodes);
    }
    if nodes.running == 0 {
        return Some(Waiting::NoRunningNodes { registered: nodes.registered });
    }
    let a = state.apps.get(app as usize)?;
    for r in View::range(&state.requests, a.requests) {
        if let Some((dimension, need, largest)) = exceeds(&r.resources, &nodes.largest) {
            return Some(Waiting::TooLarge { dimension, need, largest });
        }
        for want in View::range(&state.labels, r.selector) {
            let Some(have) = nodes.largest_with(state, want) else {
                return Some(Waiting::NoLabel { label: *want });
            };
            if let Some((dimension, need, largest)) = exceeds(&r.resources, &have) {
                return Some(Waiting::TooLargeForLabel { dimension, need, largest, label: *want });
            }
        }
        if r.flags & GANTRY_REQUEST_GANG != 0 && r.count > 1 {
            if let Some(w) = gang_room(state, r) {
                return Some(w);
            }
        }
    }
    None
}

/// Whether the nodes a gang may use could hold all its members at once when empty; if not,
/// why. Stops at the first node (or rack) that completes it.
fn gang_room(state: &ClusterState, r: &GantryRequest) -> Option<Waiting> {
    let same_rack = r.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
    let want = u64::from(r.count);
    let selector = View::range(&state.labels, r.selector);
    let (mut total, mut nodes) = (0u64, 0u32);
    let mut by_rack: DetHashMap<GantryStrRef, u64> = DetHashMap::default();
    for n in state.nodes.iter().filter(|n| n.state != GANTRY_NODE_LOST) {
        if !View::labels_satisfy(state.strings.bytes(), View::range(&state.labels, n.labels), selector) {
            continue;
        }
        nodes += 1;
        let holds = Dimension::ALL
            .into_iter()
            .filter(|d| d.of(&r.resources) > 0)
            .map(|d| d.of(&n.capacity) / d.of(&r.resources))
            .min()
            .unwrap_or(u64::MAX);
        let sum = if same_rack { by_rack.entry(n.rack).or_default() } else { &mut total };
        *sum = sum.saturating_add(holds);
        if *sum >= want {
            return None;
        }
    }
    let fits = if same_rack { by_rack.values().copied().max().unwrap_or(0) } else { total };
    Some(Waiting::GangTooLarge {
        count: r.count,
        fits: u32::try_from(fits).unwrap_or(u32::MAX),
        nodes,
        same_rack,
    })
}

/// The first queue from the request's own up whose configured maximum (below 100% of its
/// parent) one more container — a whole gang, for an unplaced gang — would exceed. A queue
/// allowed all of its parent is not named: at the top that is the cluster being full.
pub(crate) fn queue_at_maximum(state: &ClusterState, r: &GantryRequest) -> Option<u32> {
    let app = state.apps.get(r.app as usize)?;
    let n = if r.flags & GANTRY_REQUEST_GANG != 0 && r.placed == 0 { r.count } else { 1 };
    let need = r.resources.times(n);
    let mut q = app.queue;
    while let Some(rec) = state.queues.get(q as usize) {
        if rec.maximum < 1.0 && !rec.used.plus(&need).fits_in(&rec.absolute_maximum) {
            return Some(q);
        }
        q = rec.parent;
    }
    None
}

/// Why request `request` (an index) is still pending after this cycle's placement, given what
/// the placement plugin said about it (`notes`, sorted by request) and which plugin placed
/// (`None`: the built-in first fit).
pub(crate) fn this_cycle(
    state: &ClusterState,
    request: u32,
    notes: &[(u32, PlaceNote)],
    place_policy: Option<u32>,
) -> Waiting {
    let start = notes.partition_point(|(r, _)| *r < request);
    let said = notes[start..].iter().take_while(|(r, _)| *r == request).map(|(_, n)| *n);
    // A refusal says more than a WAIT next to it.
    let said = said.min_by_key(|n| matches!(n, PlaceNote::Wait(_)));
    if let (Some(note), Some(policy)) = (said, place_policy) {
        return match note {
            PlaceNote::Refused(reason) => Waiting::Refused { policy, reason },
            PlaceNote::Wait(code) => Waiting::PluginWait { policy, code },
        };
    }
    if let Some(queue) = state.requests.get(request as usize).and_then(|r| queue_at_maximum(state, r)) {
        return Waiting::QueueMaximum { queue };
    }
    match place_policy {
        Some(policy) => Waiting::NotPlaced { policy },
        None => Waiting::Full,
    }
}
