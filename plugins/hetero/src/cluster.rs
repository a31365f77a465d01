//! The plugin's picture of the cluster during one `place` call: free room per node, racks, what
//! kind of node each is, rooms held for waiting jobs, and when running containers are expected
//! to end. Node choice (`find`) and look-ahead (`earliest`) work on it.

use crate::job::{Job, Shape};
use gantry_sdk::View;
use gantry_sdk::abi::{GANTRY_NODE_RUNNING, GANTRY_NONE, GantryRequest, GantryResources};
use gantry_sdk::rng::SplitMix64;
use std::collections::HashMap;

/// Resources, shorter.
pub type Res = GantryResources;

/// "No rack": the node's rack is unknown, so it never satisfies a one-rack constraint.
const NO_RACK: u32 = u32::MAX;

/// Most preference sets told apart; a set beyond these gives its nodes no kind of their own.
pub const MAX_PREFERENCE_SETS: usize = 64;

/// How nodes are picked among those that qualify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chooser {
    /// In the view's order (racks in order of their first node).
    FirstFit,
    /// Uniformly at random (seeded by the view).
    Random,
    /// Heterogeneity-aware: racks best-fit, jobs packed into the fullest racks, and (with the
    /// switches) nodes others prefer spared and kinds never mixed.
    Aware {
        /// Spare nodes other jobs prefer (`protect_preferred`).
        protect: bool,
        /// One kind of node per job (`no_mixing`).
        no_mixing: bool,
    },
}

/// Which placements a search accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only where the job runs fast: every node has its preferred labels and, if it prefers one
    /// rack, all in one rack.
    Fast,
    /// Anywhere the selector allows (the job may run slow).
    Any,
}

/// The distinct preferred-label sets seen so far, so that nodes can be told apart by which sets
/// they satisfy (their kind). Kept across calls: a node is a GPU machine whether or not a GPU job
/// is pending right now.
#[derive(Debug, Default)]
pub struct PreferenceSets {
    sets: Vec<Vec<(String, String)>>,
}

impl PreferenceSets {
    /// The canonical form of a request's preferences: (key, value) pairs sorted.
    fn canonical(view: &View<'_>, req: &GantryRequest) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = View::range(view.labels, req.preferred)
            .iter()
            .map(|l| (view.str(l.key).to_owned(), view.str(l.value).to_owned()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Learns the sets of every request in the view; returns each request's set bit (0 for
    /// requests without preferred labels, or beyond [`MAX_PREFERENCE_SETS`]).
    pub fn learn(&mut self, view: &View<'_>, bits: &mut Vec<u64>) {
        bits.clear();
        let mut by_range: HashMap<(u32, u32), u64> = HashMap::new();
        for req in view.requests {
            if req.preferred.len == 0 {
                bits.push(0);
                continue;
            }
            let key = (req.preferred.start, req.preferred.len);
            if let Some(&b) = by_range.get(&key) {
                bits.push(b);
                continue;
            }
            let set = Self::canonical(view, req);
            let i = match self.sets.iter().position(|s| *s == set) {
                Some(i) => Some(i),
                None if self.sets.len() < MAX_PREFERENCE_SETS => {
                    self.sets.push(set);
                    Some(self.sets.len() - 1)
                }
                None => None,
            };
            let b = i.map_or(0, |i| 1u64 << i);
            by_range.insert(key, b);
            bits.push(b);
        }
    }

    /// Which sets `node` satisfies, as a bit mask (the node's kind). The matching is
    /// `View::labels_satisfy`'s (`A|B` alternatives), on owned strings: the sets outlive any one
    /// view's label arena.
    fn kind_of(&self, view: &View<'_>, node: &gantry_sdk::abi::GantryNode) -> u64 {
        let have = view.node_labels(node);
        let mut mask = 0;
        for (i, set) in self.sets.iter().enumerate() {
            let ok = set.iter().all(|(k, v)| {
                have.iter().any(|l| view.str(l.key) == k && v.split('|').any(|alt| alt == view.str(l.value)))
            });
            if ok {
                mask |= 1 << i;
            }
        }
        mask
    }
}

/// A container expected to end: its room comes back then.
#[derive(Debug, Clone, Copy)]
struct Release {
    at_ms: u64,
    node: u32,
    res: Res,
}

/// One node that can take at least one container of a job, during a search.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    node: u32,
    slots: u32,
    rack: u32,
    kind: u64,
    /// Whether other jobs would rather have this node (see [`Chooser::Aware`]).
    foreign: bool,
}

/// The cluster during one call. See the module documentation.
pub struct Cluster {
    /// Free room of each node (zero for nodes that take no containers).
    free: Vec<Res>,
    up: Vec<bool>,
    /// Rack group of each node, `NO_RACK` without one; groups numbered by first appearance.
    rack: Vec<u32>,
    /// Number of rack groups.
    racks: usize,
    /// Kind of each node: the preference sets it satisfies.
    kind: Vec<u64>,
    /// Room held for waiting jobs, and the earliest time from which it is held.
    held: Vec<Res>,
    held_from: Vec<u64>,
    releases: Vec<Release>,
    releases_sorted: bool,
    /// Tentative use of each queue in this call (index = queue).
    queue_used: Vec<Res>,
    rng: SplitMix64,
}

/// How many containers of `res` fit in `room` (`u32::MAX` for an all-zero `res`).
fn slots(room: &Res, res: &Res) -> u32 {
    let per_dimension = [
        room.cpu_millis.checked_div(res.cpu_millis),
        room.memory_bytes.checked_div(res.memory_bytes),
        u64::from(room.gpus).checked_div(u64::from(res.gpus)),
    ];
    let n = per_dimension.into_iter().flatten().fold(u64::from(u32::MAX), u64::min);
    n as u32
}

impl Cluster {
    /// Builds the picture from a view; `request_bits` are the requests' preference-set bits
    /// from [`PreferenceSets::learn`].
    pub fn new(view: &View<'_>, prefs: &PreferenceSets, request_bits: &[u64]) -> Cluster {
        let n = view.nodes.len();
        let mut racks: HashMap<&str, u32> = HashMap::new();
        let mut c = Cluster {
            free: Vec::with_capacity(n),
            up: Vec::with_capacity(n),
            rack: Vec::with_capacity(n),
            racks: 0,
            kind: Vec::with_capacity(n),
            held: vec![Res::default(); n],
            held_from: vec![u64::MAX; n],
            releases: Vec::new(),
            releases_sorted: false,
            queue_used: view.queues.iter().map(|q| q.used).collect(),
            rng: SplitMix64::new(view.seed ^ view.cycle.rotate_left(32) ^ 0x6865_7465_726f),
        };
        for node in view.nodes {
            let up = node.state == GANTRY_NODE_RUNNING;
            c.up.push(up);
            c.free.push(if up { node.capacity.minus(&node.allocated) } else { Res::default() });
            let name = view.str(node.rack);
            let next = racks.len() as u32;
            c.rack.push(if name.is_empty() { NO_RACK } else { *racks.entry(name).or_insert(next) });
            c.kind.push(prefs.kind_of(view, node));
        }
        c.racks = racks.len();
        c.learn_releases(view, request_bits);
        c
    }

    /// Expected ends of the live containers: start + the run time their request expects where
    /// they landed (fast or slow). Containers of requests without an estimate never come back in
    /// a look-ahead, which only makes it cautious.
    fn learn_releases(&mut self, view: &View<'_>, request_bits: &[u64]) {
        let mut nodes_of: HashMap<u32, Vec<u32>> = HashMap::new();
        for c in view.containers {
            if (c.node as usize) < view.nodes.len() && (c.request as usize) < view.requests.len() {
                nodes_of.entry(c.request).or_default().push(c.node);
            }
        }
        let mut fast_of: HashMap<u32, bool> = HashMap::new();
        for (&r, nodes) in &nodes_of {
            let req = &view.requests[r as usize];
            let bit = request_bits.get(r as usize).copied().unwrap_or(0);
            let shape = Shape::of(req, bit);
            fast_of.insert(r, self.runs_fast(view, &shape, nodes));
        }
        for c in view.containers {
            let Some(&fast) = fast_of.get(&c.request) else { continue };
            let req = &view.requests[c.request as usize];
            let (fast_ms, slow_ms) = crate::job::durations(req);
            let run = if fast { fast_ms } else { slow_ms };
            if let Some(run) = run {
                let at_ms = c.start_ms.saturating_add(run).max(view.now_ms);
                self.releases.push(Release { at_ms, node: c.node, res: c.resources });
            }
        }
    }

    /// Whether a job of `shape` runs fast on `nodes`: each has its preferred labels and, if it
    /// prefers one rack, they share a named rack.
    pub fn runs_fast(&self, view: &View<'_>, shape: &Shape, nodes: &[u32]) -> bool {
        let labels_hold = shape.preferred.len == 0
            || nodes.iter().all(|&n| view.node_matches(&view.nodes[n as usize], shape.preferred));
        let rack_holds = !shape.rack_preferred || {
            let first = nodes.first().map(|&n| self.rack[n as usize]);
            first.is_some_and(|r| r != NO_RACK && nodes.iter().all(|&n| self.rack[n as usize] == r))
        };
        labels_hold && rack_holds
    }

    /// Charges a placement: the room is taken, the containers' ends are remembered (when known),
    /// and the queues are charged.
    pub fn take(&mut self, view: &View<'_>, job: &Job, nodes: &[u32], end_ms: Option<u64>) {
        for &n in nodes {
            let free = &mut self.free[n as usize];
            *free = free.minus(&job.res);
            if let Some(at_ms) = end_ms {
                self.releases.push(Release { at_ms, node: n, res: job.res });
                self.releases_sorted = false;
            }
        }
        let total = job.res.times(nodes.len() as u32);
        let mut q = job.queue;
        for _ in 0..view.queues.len() {
            let Some(used) = self.queue_used.get_mut(q as usize) else { break };
            *used = used.plus(&total);
            q = view.queues[q as usize].parent;
        }
    }

    /// Holds room on `nodes` for a job expected to start at `from_ms`.
    pub fn hold(&mut self, job: &Job, nodes: &[u32], from_ms: u64) {
        for &n in nodes {
            let i = n as usize;
            self.held[i] = self.held[i].plus(&job.res);
            self.held_from[i] = self.held_from[i].min(from_ms);
        }
    }

    /// Whether the job's queue and its ancestors have room for `count` more containers.
    pub fn queue_room(&self, view: &View<'_>, job: &Job, count: u32) -> bool {
        let total = job.res.times(count);
        let mut q = job.queue;
        for _ in 0..view.queues.len() {
            let (Some(rec), Some(used)) = (view.queues.get(q as usize), self.queue_used.get(q as usize))
            else {
                break;
            };
            if !used.plus(&total).fits_in(&rec.absolute_maximum) {
                return false;
            }
            if rec.parent == GANTRY_NONE {
                break;
            }
            q = rec.parent;
        }
        true
    }

    /// Room a job ending at `end_ms` may use on node `n`: all the free room if it ends before
    /// anything held there is needed, else the free room less what is held.
    fn room(&self, n: usize, end_ms: Option<u64>, free: &[Res]) -> Res {
        match end_ms {
            Some(e) if e <= self.held_from[n] => free[n],
            _ => free[n].minus(&self.held[n]),
        }
    }

    /// Finds nodes for `job` on the current free room, honouring holds for a job that would
    /// end at `end_ms`. Returns one node per container (a node may repeat), or `None`.
    pub fn find(
        &mut self,
        view: &View<'_>,
        job: &Job,
        kind: Kind,
        chooser: Chooser,
        end_ms: Option<u64>,
    ) -> Option<Vec<u32>> {
        let free = std::mem::take(&mut self.free);
        let found = self.find_on(view, job, kind, chooser, |c, n| c.room(n, end_ms, &free));
        self.free = free;
        found
    }

    /// Node choice on a given room function. See [`Chooser`] and [`Kind`].
    fn find_on(
        &mut self,
        view: &View<'_>,
        job: &Job,
        kind: Kind,
        chooser: Chooser,
        room: impl Fn(&Cluster, usize) -> Res,
    ) -> Option<Vec<u32>> {
        let fast = kind == Kind::Fast;
        let mut pool: Vec<Candidate> = Vec::new();
        for (i, node) in view.nodes.iter().enumerate() {
            if !self.up[i] {
                continue;
            }
            let s = slots(&room(self, i), &job.res).min(job.want);
            if s == 0 || !view.node_matches(node, job.shape.selector) {
                continue;
            }
            if fast && job.shape.preferred.len != 0 && !view.node_matches(node, job.shape.preferred) {
                continue;
            }
            let kind_bits = self.kind[i];
            let foreign = if fast { kind_bits & !job.shape.preference_bit != 0 } else { kind_bits != 0 };
            pool.push(Candidate { node: i as u32, slots: s, rack: self.rack[i], kind: kind_bits, foreign });
        }
        if job.shape.rack_required && job.placed_rack.is_some() {
            let r = job.placed_rack;
            pool.retain(|c| Some(c.rack) == r);
        }
        let one_rack = job.shape.rack_required || (fast && job.shape.rack_preferred);
        match chooser {
            Chooser::Aware { no_mixing: true, protect } => {
                // Kinds in order: with `protect`, the kinds fewest others prefer first.
                let mut kinds: Vec<u64> = Vec::new();
                for c in &pool {
                    if !kinds.contains(&c.kind) {
                        kinds.push(c.kind);
                    }
                }
                if protect {
                    let own = if fast { job.shape.preference_bit } else { 0 };
                    kinds.sort_by_key(|k| (k & !own).count_ones());
                }
                for k in kinds {
                    let group: Vec<Candidate> = pool.iter().copied().filter(|c| c.kind == k).collect();
                    if let Some(found) = self.select(job, group, one_rack, chooser) {
                        return Some(found);
                    }
                }
                None
            }
            _ => self.select(job, pool, one_rack, chooser),
        }
    }

    /// Picks the nodes from qualifying candidates (in view order).
    fn select(
        &mut self,
        job: &Job,
        mut pool: Vec<Candidate>,
        one_rack: bool,
        chooser: Chooser,
    ) -> Option<Vec<u32>> {
        let need = if job.gang { job.want } else { 1 };
        if one_rack {
            pool.retain(|c| c.rack != NO_RACK);
            // Racks that can take the job, with their slots and whether others prefer any of them.
            let mut racks: Vec<(u32, u64, bool)> = Vec::new();
            for c in &pool {
                match racks.iter_mut().find(|r| r.0 == c.rack) {
                    Some(r) => {
                        r.1 += u64::from(c.slots);
                        r.2 |= c.foreign;
                    }
                    None => racks.push((c.rack, u64::from(c.slots), c.foreign)),
                }
            }
            racks.retain(|r| r.1 >= u64::from(need));
            let rack = match chooser {
                _ if racks.is_empty() => return None,
                Chooser::FirstFit => racks[0].0,
                Chooser::Random => racks[(self.rng.next_u64() % racks.len() as u64) as usize].0,
                Chooser::Aware { protect, .. } => {
                    // Best fit: the rack with the fewest free slots that still fits keeps bigger
                    // holes for bigger jobs; with `protect`, racks others prefer come last.
                    racks.iter().min_by_key(|r| (protect && r.2, r.1)).map(|r| r.0)?
                }
            };
            pool.retain(|c| c.rack == rack);
        }
        let total: u64 = pool.iter().map(|c| u64::from(c.slots)).sum();
        if total < u64::from(need) {
            return None;
        }
        match chooser {
            Chooser::FirstFit => {}
            Chooser::Random => {
                for i in (1..pool.len()).rev() {
                    let j = (self.rng.next_u64() % (i as u64 + 1)) as usize;
                    pool.swap(i, j);
                }
            }
            Chooser::Aware { protect, .. } => {
                // Pack into the racks with the fewest qualifying slots, keeping emptier racks
                // whole for jobs that want one rack. Racks are numbered densely; the last
                // entry counts the nodes without one.
                let mut rack_slots = vec![0u64; self.racks + 1];
                let slot_of = |rack: u32| if rack == NO_RACK { self.racks } else { rack as usize };
                for c in &pool {
                    rack_slots[slot_of(c.rack)] += u64::from(c.slots);
                }
                let key = |c: &Candidate| {
                    (protect && c.foreign, rack_slots[slot_of(c.rack)], c.rack, c.slots, c.node)
                };
                // Only the best `want` nodes can be used (each has a slot): select them in
                // linear time, then order just those.
                let want = job.want as usize;
                if pool.len() > want && want > 0 {
                    pool.select_nth_unstable_by_key(want - 1, key);
                    pool.truncate(want);
                }
                pool.sort_by_key(key);
            }
        }
        let mut nodes = Vec::with_capacity(job.want as usize);
        for c in &pool {
            for _ in 0..c.slots {
                if nodes.len() as u32 == job.want {
                    return Some(nodes);
                }
                nodes.push(c.node);
            }
        }
        Some(nodes)
    }

    /// The earliest time (at or after now) a placement of `kind` for `job` is expected to exist,
    /// and its nodes: the free room grows by each expected end in time order, and the search is
    /// repeated at each distinct end time, up to `steps` of them. Holds and other waiting jobs
    /// are not counted.
    pub fn earliest(
        &mut self,
        view: &View<'_>,
        job: &Job,
        kind: Kind,
        chooser: Chooser,
        steps: usize,
    ) -> Option<(u64, Vec<u32>)> {
        if !self.releases_sorted {
            self.releases.sort_by_key(|r| r.at_ms);
            self.releases_sorted = true;
        }
        let mut room = self.free.clone();
        let releases = std::mem::take(&mut self.releases);
        let mut found = None;
        let mut i = 0;
        let mut step = 0;
        while i < releases.len() && step < steps {
            let at = releases[i].at_ms;
            while i < releases.len() && releases[i].at_ms == at {
                let r = &releases[i];
                if let Some(slot) = room.get_mut(r.node as usize) {
                    *slot = slot.plus(&r.res);
                }
                i += 1;
            }
            step += 1;
            if let Some(nodes) = self.find_on(view, job, kind, chooser, |_, n| room[n]) {
                found = Some((at, nodes));
                break;
            }
        }
        self.releases = releases;
        found
    }

    /// The rack group of a node (for jobs that must stay in one rack).
    pub fn rack_of(&self, node: u32) -> Option<u32> {
        self.rack.get(node as usize).copied().filter(|&r| r != NO_RACK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_the_tightest_dimension() {
        let room = Res::new(8000, 16 << 30, 2);
        assert_eq!(slots(&room, &Res::new(2000, 4 << 30, 0)), 4);
        assert_eq!(slots(&room, &Res::new(1000, 8 << 30, 0)), 2);
        assert_eq!(slots(&room, &Res::new(0, 0, 1)), 2);
        assert_eq!(slots(&room, &Res::new(9000, 0, 0)), 0);
    }
}
