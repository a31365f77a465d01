//! Elastic clusters: an autoscaler inside the simulation loop.
//!
//! The cluster file is the **pool**: every machine the cluster may ever run. The run starts with
//! the first `min_nodes` of them registered; the others are off. Every `check_ms` the
//! autoscaler looks at the engine, as an operator's autoscaler would look at the scheduler:
//!
//! - **Scale up.** If some containers have waited at least `scale_up_after_ms` since their
//!   request was submitted (Qubole upscales on "container requests waiting for more than 3
//!   minutes"), it sizes the shortfall: the waiting containers, largest first, go first-fit
//!   into the free room of the registered nodes and of the nodes already booting, and whatever
//!   does not fit opens pool nodes that are off, in file order (the first one whose labels
//!   satisfy the request's selector and that can hold one of its containers). It never goes
//!   above `max_nodes`. A node started this way is billed from that moment and registers with
//!   the engine `boot_ms` later. With `scale_up_for_ms` the shortfall is sized by work instead
//!   of by count: a slot runs the waiting containers of a request one after another for that
//!   long (each for its request's expected run time), so a burst of many short containers
//!   starts the nodes that finish it in that time, not a node for every eighth container.
//! - **Scale down.** The engine's own idle tracker (`Engine::idle_nodes`: nodes that hold no
//!   live container, with the engine time since when) names the candidates, the same signal the
//!   REST API and the metrics show. A running node idle for at least `scale_down_after_ms` (the
//!   cool-down) is drained (`NodeStateChanged { Draining }`) and then removed (`NodeLost`), the
//!   longest idle first, never leaving fewer than `min_nodes` (booting nodes count). A removed
//!   node is off again and may be started later; it re-registers under its own name.
//!
//! A gang is sized whole or not at all (in one rack if it requires one): no node is started for
//! a gang that could not run even at the maximum size. The sizing ignores queue limits: if the
//! free room already holds the waiting containers and they still wait — a queue at its maximum,
//! a policy that chooses to wait — no node is added.

use crate::sim::value_matches;
use gantry_engine::state::ClusterState;
use gantry_engine::{IdleNode, NodeSpec, Resources};
use gantry_sdk::View;
use gantry_sdk::abi::{
    GANTRY_APP_ACCEPTED, GANTRY_APP_RUNNING, GANTRY_NODE_RUNNING, GANTRY_REQUEST_GANG,
    GANTRY_REQUEST_SAME_RACK_REQUIRED, GantryRange,
};
use std::collections::HashMap;

/// Qubole's upscaling trigger: requests waiting for more than 3 minutes.
pub const DEFAULT_SCALE_UP_AFTER_MS: u64 = 3 * 60_000;
/// Cool-down before an empty node is removed.
pub const DEFAULT_SCALE_DOWN_AFTER_MS: u64 = 10 * 60_000;
/// From a node's request to its registration.
pub const DEFAULT_BOOT_MS: u64 = 2 * 60_000;
/// How often the autoscaler looks.
pub const DEFAULT_CHECK_MS: u64 = 10_000;

/// How the autoscaler behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElasticOptions {
    /// Never fewer nodes (registered or booting); the run starts with this many.
    pub min_nodes: usize,
    /// Never more; at most the pool's size.
    pub max_nodes: usize,
    /// Containers waiting at least this long (ms since their request) trigger a scale-up.
    pub scale_up_after_ms: u64,
    /// Size a scale-up by work: enough slots for the waiting containers to run within this
    /// long, one after another, by their expected run times (ms). `None`: a slot per container.
    pub scale_up_for_ms: Option<u64>,
    /// A node empty at least this long (ms, by the engine's idle tracker) is removed.
    pub scale_down_after_ms: u64,
    /// From starting a node (billed) to its registration with the engine, ms.
    pub boot_ms: u64,
    /// Interval between the autoscaler's checks, ms.
    pub check_ms: u64,
}

impl ElasticOptions {
    /// `min_nodes`..=`max_nodes` with the default delays (3 min, 10 min, 2 min boot, 10 s checks).
    pub fn new(min_nodes: usize, max_nodes: usize) -> Self {
        ElasticOptions {
            min_nodes,
            max_nodes,
            scale_up_after_ms: DEFAULT_SCALE_UP_AFTER_MS,
            scale_up_for_ms: None,
            scale_down_after_ms: DEFAULT_SCALE_DOWN_AFTER_MS,
            boot_ms: DEFAULT_BOOT_MS,
            check_ms: DEFAULT_CHECK_MS,
        }
    }

    /// Refuses bounds that a pool of `pool` nodes cannot honour and a zero check interval.
    pub fn validate(&self, pool: usize) -> Result<(), ElasticError> {
        if self.max_nodes == 0 {
            return Err(ElasticError::MaxZero);
        }
        if self.min_nodes > self.max_nodes {
            return Err(ElasticError::MinAboveMax { min: self.min_nodes, max: self.max_nodes });
        }
        if self.max_nodes > pool {
            return Err(ElasticError::MaxAbovePool { max: self.max_nodes, pool });
        }
        if self.check_ms == 0 {
            return Err(ElasticError::ZeroCheck);
        }
        if self.scale_up_for_ms == Some(0) {
            return Err(ElasticError::ZeroScaleUpFor);
        }
        Ok(())
    }
}

/// Why an elastic cluster cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElasticError {
    /// `max_nodes` is 0.
    #[error("the elastic cluster's maximum size must be at least 1 node")]
    MaxZero,
    /// `min_nodes > max_nodes`.
    #[error("the elastic cluster's minimum size ({min} nodes) is above its maximum ({max} nodes)")]
    MinAboveMax {
        /// The minimum asked for.
        min: usize,
        /// The maximum asked for.
        max: usize,
    },
    /// More nodes than the cluster file has.
    #[error(
        "the elastic cluster's maximum size ({max} nodes) is larger than its pool: the cluster file has {pool} nodes"
    )]
    MaxAbovePool {
        /// The maximum asked for.
        max: usize,
        /// Nodes in the cluster file.
        pool: usize,
    },
    /// `check_ms` is 0.
    #[error("the autoscaler's check interval must be positive")]
    ZeroCheck,
    /// `scale_up_for_ms` is `Some(0)`.
    #[error("the time a scale-up is sized for must be positive")]
    ZeroScaleUpFor,
    /// Node failures were asked for too.
    #[error(
        "node failures cannot be simulated on an elastic cluster (the autoscaler owns the nodes' lifecycle)"
    )]
    WithFailures,
}

/// What the autoscaler did, and what the cluster cost.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ElasticStats {
    /// The bounds and the pool's size.
    pub min_nodes: usize,
    /// Maximum size.
    pub max_nodes: usize,
    /// Nodes in the cluster file.
    pub pool_nodes: usize,
    /// Checks that started at least one node.
    pub scale_ups: u64,
    /// Nodes started by scale-ups.
    pub nodes_started: u64,
    /// Nodes removed by scale-downs.
    pub nodes_removed: u64,
    /// Nodes that ran at some point: the initial ones plus those started.
    pub provisioned: u64,
    /// Most nodes billed at once (registered or booting).
    pub peak_nodes: usize,
    /// Most nodes registered at once.
    pub peak_registered: usize,
    /// Billed node time (from each start to its removal or the end of the run), ms.
    pub billed_node_ms: u64,
    /// Of which booting, ms.
    pub booting_node_ms: u64,
    /// Allocated share of the registered nodes' capacity, time-weighted: ∫allocated / ∫capacity
    /// (CPU, memory, GPUs).
    pub utilisation_registered: [f64; 3],
    /// Allocated share of the billed nodes' capacity (booting nodes count), time-weighted.
    pub utilisation_billed: [f64; 3],
}

/// Where a pool node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not running, not billed.
    Off,
    /// Started (billed) at `since`, not registered yet.
    Booting { since: u64 },
    /// Registered; billed since `since`.
    Up { since: u64 },
}

/// Room on a node for the scale-up plan: running, booting or opened by the plan.
#[derive(Debug, Clone)]
struct Bin {
    /// Pool index.
    node: usize,
    /// Room left (CPU, memory, GPUs).
    free: [u64; 3],
    /// When it serves from: now for a running node, when it registers for the others.
    from_ms: u64,
}

/// Containers of one size waiting for room.
struct Want {
    resources: Resources,
    selector: Vec<(String, String)>,
    count: u64,
    /// All of them at once or none.
    gang: bool,
    /// A gang that must share one rack.
    one_rack: bool,
    /// Expected run time of one container, ms (0 = unknown).
    expected_ms: u64,
}

/// The autoscaler's state over the pool (indexes are the pool's, i.e. the cluster file's order).
pub(crate) struct Autoscaler<'a> {
    pub(crate) options: ElasticOptions,
    pool: &'a [NodeSpec],
    by_name: HashMap<&'a str, usize>,
    phase: Vec<Phase>,
    up: usize,
    booting: usize,
    /// Capacity of the nodes registered or booting.
    billed: [u64; 3],
    pub(crate) stats: ElasticStats,
}

impl<'a> Autoscaler<'a> {
    /// An autoscaler over `pool` (options already validated), every node off.
    pub(crate) fn new(options: ElasticOptions, pool: &'a [NodeSpec]) -> Self {
        let stats = ElasticStats {
            min_nodes: options.min_nodes,
            max_nodes: options.max_nodes,
            pool_nodes: pool.len(),
            ..ElasticStats::default()
        };
        Autoscaler {
            options,
            pool,
            by_name: pool.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect(),
            phase: vec![Phase::Off; pool.len()],
            up: 0,
            booting: 0,
            billed: [0; 3],
            stats,
        }
    }

    /// Nodes registered or booting.
    pub(crate) fn active(&self) -> usize {
        self.up + self.booting
    }

    /// Nodes registered.
    pub(crate) fn registered(&self) -> usize {
        self.up
    }

    /// Nodes booting.
    pub(crate) fn booting(&self) -> usize {
        self.booting
    }

    /// The pool index of a node name.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The nodes the run starts with (the first `min_nodes`), marked registered at `now`.
    pub(crate) fn initial(&mut self, now: u64) -> Vec<usize> {
        let first: Vec<usize> = (0..self.options.min_nodes.min(self.pool.len())).collect();
        for &i in &first {
            self.phase[i] = Phase::Up { since: now };
            self.up += 1;
            self.bill(i, true);
        }
        self.stats.provisioned += first.len() as u64;
        self.note_peaks();
        first
    }

    fn bill(&mut self, i: usize, add: bool) {
        let cap = room_of(&self.pool[i].capacity);
        for (b, c) in self.billed.iter_mut().zip(cap) {
            *b = if add { *b + c } else { b.saturating_sub(c) };
        }
    }

    fn note_peaks(&mut self) {
        self.stats.peak_nodes = self.stats.peak_nodes.max(self.active());
        self.stats.peak_registered = self.stats.peak_registered.max(self.up);
    }

    /// Starts (bills) pool node `i` at `now`; it boots for `boot_ms`.
    pub(crate) fn start(&mut self, i: usize, now: u64) {
        if self.phase[i] == Phase::Off {
            self.phase[i] = Phase::Booting { since: now };
            self.booting += 1;
            self.bill(i, true);
            self.stats.nodes_started += 1;
            self.stats.provisioned += 1;
            self.note_peaks();
        }
    }

    /// Pool node `i` finished booting at `now`; true if it should register.
    pub(crate) fn booted(&mut self, i: usize, now: u64) -> bool {
        let Phase::Booting { since } = self.phase[i] else { return false };
        self.stats.booting_node_ms += now.saturating_sub(since);
        self.phase[i] = Phase::Up { since };
        self.booting -= 1;
        self.up += 1;
        self.note_peaks();
        true
    }

    /// Pool node `i` was removed at `now`: no longer billed.
    pub(crate) fn removed(&mut self, i: usize, now: u64) {
        if let Phase::Up { since } = self.phase[i] {
            self.stats.billed_node_ms += now.saturating_sub(since);
            self.phase[i] = Phase::Off;
            self.up -= 1;
            self.bill(i, false);
            self.stats.nodes_removed += 1;
        }
    }

    /// Closes the billing of every node still running (or booting) at `end`.
    pub(crate) fn finish(&mut self, end: u64) {
        for p in &self.phase {
            match *p {
                Phase::Up { since } => self.stats.billed_node_ms += end.saturating_sub(since),
                Phase::Booting { since } => {
                    self.stats.billed_node_ms += end.saturating_sub(since);
                    self.stats.booting_node_ms += end.saturating_sub(since);
                }
                Phase::Off => {}
            }
        }
    }

    /// Capacity of the billed nodes (registered or booting): CPU, memory, GPUs.
    pub(crate) fn billed_capacity(&self) -> [u64; 3] {
        self.billed
    }

    /// The pool nodes to start now: enough to hold the containers that have waited at least
    /// `scale_up_after_ms`, beyond the free room of the registered and booting nodes, within
    /// `max_nodes`. Empty when nothing has waited that long or the room is there already.
    pub(crate) fn plan_scale_up(&self, now: u64, st: &ClusterState) -> Vec<usize> {
        let mut wants = self.waiting(now, st);
        if wants.is_empty() || self.active() >= self.options.max_nodes {
            return Vec::new();
        }
        // Largest first: GPUs, then memory, then CPU.
        wants.sort_by(|a, b| {
            let key = |w: &Want| (w.resources.gpus, w.resources.memory_bytes, w.resources.cpu_millis);
            key(b).cmp(&key(a))
        });
        // Sized by work, the room of containers expected to end within the horizon counts too:
        // their slots take waiting containers for the rest of it.
        let freeing = self.options.scale_up_for_ms.map(|h| ending_within(st, now.saturating_add(h)));
        // Free room of what runs or boots now, then of what this plan opens, with how long each
        // serves within the horizon (sizing by work).
        let mut bins: Vec<Bin> = Vec::new();
        for (i, p) in self.phase.iter().enumerate() {
            match p {
                Phase::Off => {}
                Phase::Booting { since } => {
                    let booted_at = since.saturating_add(self.options.boot_ms);
                    bins.push(Bin { node: i, free: room_of(&self.pool[i].capacity), from_ms: booted_at });
                }
                Phase::Up { .. } => {
                    let Some(index) = st.node_by_name(&self.pool[i].name).map(|id| id.0 as usize) else {
                        continue;
                    };
                    let Some(node) = st.nodes().get(index) else { continue };
                    if node.state != GANTRY_NODE_RUNNING {
                        continue;
                    }
                    let c = &node.capacity;
                    let a = &node.allocated;
                    let mut room = [
                        c.cpu_millis.saturating_sub(a.cpu_millis),
                        c.memory_bytes.saturating_sub(a.memory_bytes),
                        u64::from(c.gpus.saturating_sub(a.gpus)),
                    ];
                    if let Some(ending) = freeing.as_ref().and_then(|f| f.get(index)) {
                        for (r, e) in room.iter_mut().zip(ending) {
                            *r = r.saturating_add(*e);
                        }
                    }
                    bins.push(Bin { node: i, free: room, from_ms: now });
                }
            }
        }
        let mut opened: Vec<usize> = Vec::new();
        for want in &wants {
            if !want.gang {
                // What fits is worth starting nodes for, even if not all of it does.
                self.fill(want, None, now, &mut bins, &mut opened);
                continue;
            }
            // A gang starts whole or not at all (within one rack if it requires one): size it
            // on a copy and keep the plan only if all of it fits, so that nodes are never
            // started for a gang that could not run on them.
            let racks: Vec<Option<&str>> = if want.one_rack {
                let mut racks: Vec<Option<&str>> = Vec::new();
                for n in self.pool {
                    if !racks.contains(&Some(n.rack.as_str())) {
                        racks.push(Some(n.rack.as_str()));
                    }
                }
                racks
            } else {
                vec![None]
            };
            for rack in racks {
                let (mut b, mut o) = (bins.clone(), opened.clone());
                if self.fill(want, rack, now, &mut b, &mut o) == 0 {
                    (bins, opened) = (b, o);
                    break;
                }
            }
        }
        opened
    }

    /// First fit of `want`'s containers into `bins` (free room of nodes running, booting or
    /// opened by this plan), then into pool nodes that are off, opened in file order while the
    /// maximum allows; only nodes of `rack` if given. Returns the containers left over.
    fn fill(
        &self,
        want: &Want,
        rack: Option<&str>,
        now: u64,
        bins: &mut Vec<Bin>,
        opened: &mut Vec<usize>,
    ) -> u64 {
        let usable =
            |i: usize| rack.is_none_or(|r| self.pool[i].rack == r) && self.matches(i, &want.selector);
        let mut left = want.count;
        // Takes room from `bin` for as many of the containers left as it holds, each slot taking
        // as many as it runs one after another from the bin's start to the horizon.
        let place = |bin: &mut Bin, left: &mut u64| {
            let per_slot = self.per_slot(want, now, bin.from_ms);
            let slots = fits(&bin.free, &want.resources).min(left.div_ceil(per_slot));
            take(&mut bin.free, &want.resources, slots);
            *left = left.saturating_sub(slots.saturating_mul(per_slot));
        };
        for bin in bins.iter_mut() {
            if left == 0 {
                break;
            }
            if usable(bin.node) {
                place(bin, &mut left);
            }
        }
        while left > 0 && self.active() + opened.len() < self.options.max_nodes {
            let next = (0..self.pool.len()).find(|&i| {
                self.phase[i] == Phase::Off
                    && !opened.contains(&i)
                    && usable(i)
                    && fits(&room_of(&self.pool[i].capacity), &want.resources) > 0
            });
            let Some(i) = next else { break };
            let mut bin = Bin {
                node: i,
                free: room_of(&self.pool[i].capacity),
                from_ms: now.saturating_add(self.options.boot_ms),
            };
            place(&mut bin, &mut left);
            opened.push(i);
            bins.push(bin);
        }
        left
    }

    /// How many of `want`'s containers one slot of a node serving from `from_ms` runs, one
    /// after another, by the horizon `now + scale_up_for_ms`: at least 1; exactly 1 when sizing
    /// by count, for a gang (its members run together) and for containers of unknown run time.
    fn per_slot(&self, want: &Want, now: u64, from_ms: u64) -> u64 {
        match self.options.scale_up_for_ms {
            Some(horizon) if !want.gang && want.expected_ms > 0 => {
                let serves = now.saturating_add(horizon).saturating_sub(from_ms);
                (serves / want.expected_ms).max(1)
            }
            _ => 1,
        }
    }

    /// Containers of admitted applications that have waited at least `scale_up_after_ms`.
    fn waiting(&self, now: u64, st: &ClusterState) -> Vec<Want> {
        let apps = st.apps();
        st.requests()
            .iter()
            .filter(|r| r.placed < r.count)
            .filter(|r| now.saturating_sub(r.submit_ms) >= self.options.scale_up_after_ms)
            .filter(|r| {
                apps.get(r.app as usize)
                    .is_some_and(|a| matches!(a.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING))
            })
            .map(|r| Want {
                resources: Resources::new(r.resources.cpu_millis, r.resources.memory_bytes, r.resources.gpus),
                selector: labels_of(st, r.selector),
                count: u64::from(r.count - r.placed),
                gang: r.flags & GANTRY_REQUEST_GANG != 0,
                one_rack: r.flags & GANTRY_REQUEST_GANG != 0
                    && r.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0,
                expected_ms: r.expected_run_ms(),
            })
            .collect()
    }

    /// Whether pool node `i` has the labels `selector` asks for.
    fn matches(&self, i: usize, selector: &[(String, String)]) -> bool {
        let labels = &self.pool[i].labels;
        selector.iter().all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && value_matches(v, lv)))
    }

    /// Pool nodes to remove now: running ones the engine reports idle for at least the
    /// cool-down, longest idle first, keeping at least `min_nodes` registered or booting.
    pub(crate) fn plan_scale_down(&self, now: u64, idle: &[IdleNode], st: &ClusterState) -> Vec<usize> {
        let mut active = self.active();
        let mut out = Vec::new();
        for n in idle {
            if active <= self.options.min_nodes {
                break;
            }
            if n.state != GANTRY_NODE_RUNNING
                || now.saturating_sub(n.since_ms) < self.options.scale_down_after_ms
            {
                continue;
            }
            let Some(node) = st.nodes().get(n.index as usize) else { continue };
            let Some(i) = self.index_of(st.str(node.name)) else { continue };
            if matches!(self.phase[i], Phase::Up { .. }) {
                out.push(i);
                active -= 1;
            }
        }
        out
    }
}

/// Resources of the containers expected to end by `by` (their start plus their request's
/// expected run time), summed per node, by the engine's node index. Containers of unknown run
/// time are not counted.
fn ending_within(st: &ClusterState, by: u64) -> Vec<[u64; 3]> {
    let mut out = vec![[0u64; 3]; st.nodes().len()];
    for c in st.containers() {
        let run_ms = st.requests().get(c.request as usize).map_or(0, |r| r.expected_run_ms());
        if run_ms == 0 || c.start_ms.saturating_add(run_ms) > by {
            continue;
        }
        let Some(e) = out.get_mut(c.node as usize) else { continue };
        e[0] += c.resources.cpu_millis;
        e[1] += c.resources.memory_bytes;
        e[2] += u64::from(c.resources.gpus);
    }
    out
}

pub(crate) fn room_of(r: &Resources) -> [u64; 3] {
    [r.cpu_millis, r.memory_bytes, u64::from(r.gpus)]
}

/// How many containers of size `r` fit in `free`.
pub(crate) fn fits(free: &[u64; 3], r: &Resources) -> u64 {
    let need = room_of(r);
    (0..3).filter(|&k| need[k] > 0).map(|k| free[k] / need[k]).min().unwrap_or(u64::MAX)
}

fn take(free: &mut [u64; 3], r: &Resources, k: u64) {
    let need = room_of(r);
    for d in 0..3 {
        free[d] = free[d].saturating_sub(need[d].saturating_mul(k));
    }
}

/// A selector's (key, value) pairs.
fn labels_of(st: &ClusterState, range: GantryRange) -> Vec<(String, String)> {
    View::range(st.labels(), range)
        .iter()
        .map(|l| (st.str(l.key).to_owned(), st.str(l.value).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_against_the_pool() {
        assert_eq!(ElasticOptions::new(2, 5).validate(5), Ok(()));
        assert_eq!(ElasticOptions::new(0, 1).validate(1), Ok(()));
        assert_eq!(ElasticOptions::new(6, 5).validate(9), Err(ElasticError::MinAboveMax { min: 6, max: 5 }));
        assert_eq!(
            ElasticOptions::new(2, 10).validate(9),
            Err(ElasticError::MaxAbovePool { max: 10, pool: 9 })
        );
        assert_eq!(ElasticOptions::new(0, 0).validate(9), Err(ElasticError::MaxZero));
        let o = ElasticOptions { check_ms: 0, ..ElasticOptions::new(1, 2) };
        assert_eq!(o.validate(9), Err(ElasticError::ZeroCheck));
        let o = ElasticOptions { scale_up_for_ms: Some(0), ..ElasticOptions::new(1, 2) };
        assert_eq!(o.validate(9), Err(ElasticError::ZeroScaleUpFor));
    }

    #[test]
    fn containers_are_counted_into_free_room() {
        let free = [4000, 8 << 30, 0];
        assert_eq!(fits(&free, &Resources::new(1000, 2 << 30, 0)), 4);
        assert_eq!(fits(&free, &Resources::new(1000, 3 << 30, 0)), 2);
        assert_eq!(fits(&free, &Resources::new(1000, 0, 1)), 0);
        let mut f = free;
        take(&mut f, &Resources::new(1000, 2 << 30, 0), 3);
        assert_eq!(f, [1000, 2 << 30, 0]);
    }
}
