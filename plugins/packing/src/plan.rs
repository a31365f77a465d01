//! One `place` call: the per-call picture of the nodes, the request loop, gangs, racks,
//! preferences and queue maximums. Which node is best is asked of a [`Finder`]: the [`Index`]
//! in production, a brute-force scan in the tests, which must agree on every answer.

use crate::config::{Basis, Mode, PackingConfig, Ties};
use crate::tree::Tree;
use crate::usage::{Keyer, NO_KEY, category, rank};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, View};
use std::collections::HashMap;

/// A node as this call sees it (its capacity is the view's).
#[derive(Debug, Clone, Copy, Default)]
pub struct Room {
    /// What still fits: capacity less allocated less this call's placements (GPUs: no more than
    /// the node's free GPU records).
    pub free: GantryResources,
    /// What usage counts as used: allocated, or measured plus placed since; plus this call's
    /// placements.
    pub used: GantryResources,
    /// Its key, or [`NO_KEY`] when it may not be chosen (not running, or too full for the
    /// smallest pending request).
    pub key: u64,
    /// Its rank among equals.
    pub rank: u32,
    /// Whether anything is allocated on it (containers, or this call's placements).
    pub occupied: bool,
    /// Whether the node accepts containers.
    pub running: bool,
    /// When its containers are expected to end, ms on the engine's clock: the latest start
    /// plus expected run time of its containers and this call's placements; `u64::MAX` when
    /// one of them has no expected run time; 0 when it holds nothing. Read by `lifetime`.
    pub ends_ms: u64,
}

/// A set of nodes given by labels: a request's selector, or its selector and preferred labels.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The labels a member has (sorted, without repeats).
    #[cfg_attr(not(test), expect(dead_code, reason = "the brute-force reference reads it"))]
    pub labels: Vec<GantryLabel>,
    /// Running nodes that have them, in index order.
    pub members: Vec<u32>,
    /// Membership by node index.
    pub is_member: Vec<bool>,
}

/// The racks of this call (built when a request first needs them).
#[derive(Debug, Clone, Default)]
pub struct Racks {
    /// Whether the fields describe this call.
    pub built: bool,
    /// Rack name of each rack id.
    pub names: Vec<GantryStrRef>,
    /// Running nodes of each rack, in index order.
    pub members: Vec<Vec<u32>>,
    /// Rack id of each node.
    pub of: Vec<u32>,
    ids: HashMap<GantryStrRef, u32>,
    /// Rack id of each request's placed containers (the first one's, as the engine reads it).
    pub existing: HashMap<u32, u32>,
}

/// Which nodes a query is about: those matching a filter (all running nodes if none), on one
/// rack (any if none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// Filter id.
    pub filter: Option<u32>,
    /// Rack id.
    pub rack: Option<u32>,
}

/// What a finder may read.
pub struct Call<'a, 'v> {
    /// The view.
    #[cfg_attr(not(test), expect(dead_code, reason = "the brute-force reference reads it"))]
    pub view: &'a View<'v>,
    /// Every node, by index.
    pub rooms: &'a [Room],
    /// This call's filters, by id.
    pub filters: &'a [Filter],
    /// This call's racks.
    pub racks: &'a Racks,
    /// The key function.
    #[cfg_attr(not(test), expect(dead_code, reason = "the brute-force reference reads it"))]
    pub keyer: Keyer,
}

/// Answers "which node of this set, fitting this shape, has the smallest key".
pub trait Finder {
    /// A call starts: `rooms` are built.
    fn start(&mut self, c: &Call<'_, '_>);
    /// Filter `f` was created.
    fn filter_added(&mut self, c: &Call<'_, '_>, f: u32);
    /// Node `node`'s room changed.
    fn update(&mut self, c: &Call<'_, '_>, node: u32);
    /// The node of `q` with the smallest key whose free room holds `shape`, and its key.
    fn best(&mut self, c: &Call<'_, '_>, q: Query, shape: &GantryResources) -> Option<(u32, u64)>;
}

/// Filters with fewer members than this are scanned rather than indexed.
const TREE_MIN_MEMBERS: usize = 128;
/// Most filters indexed per call; further ones are scanned.
const MAX_FILTER_TREES: usize = 16;
/// Most shapes remembered as fitting nowhere.
const MAX_MISSES: usize = 16;

/// The production finder: a [`Tree`] over all running nodes, one per large filter, scans of
/// small filters and racks, and the shapes known to fit nowhere this call.
#[derive(Debug)]
pub struct Index {
    main: Tree,
    /// Trees of this call's filters (`None`: scanned); the pool keeps their allocations.
    filter_trees: Vec<Option<Tree>>,
    pool: Vec<Tree>,
    /// Shapes that fit no running node. Room only shrinks while placing, so a shape at least as
    /// large in every dimension fits nowhere either; cleared when some node's room grows (a gang
    /// given back).
    misses: Vec<GantryResources>,
    tree_min_members: usize,
    max_filter_trees: usize,
}

impl Default for Index {
    fn default() -> Self {
        Index::with_limits(TREE_MIN_MEMBERS, MAX_FILTER_TREES)
    }
}

impl Index {
    /// An index that builds a tree for filters of at least `tree_min_members` nodes, at most
    /// `max_filter_trees` of them per call.
    pub fn with_limits(tree_min_members: usize, max_filter_trees: usize) -> Index {
        Index {
            main: Tree::default(),
            filter_trees: Vec::new(),
            pool: Vec::new(),
            misses: Vec::new(),
            tree_min_members,
            max_filter_trees,
        }
    }

    fn scan(
        c: &Call<'_, '_>,
        nodes: &[u32],
        filter: Option<&Filter>,
        shape: &GantryResources,
    ) -> Option<(u32, u64)> {
        let mut best: Option<(u32, u64)> = None;
        for &v in nodes {
            let Some(room) = c.rooms.get(v as usize) else { continue };
            if room.key == NO_KEY || best.is_some_and(|b| b.1 <= room.key) || !shape.fits_in(&room.free) {
                continue;
            }
            if filter.is_some_and(|f| !f.is_member.get(v as usize).copied().unwrap_or(false)) {
                continue;
            }
            best = Some((v, room.key));
        }
        best
    }
}

impl Finder for Index {
    fn start(&mut self, c: &Call<'_, '_>) {
        let rooms = c.rooms;
        let running = (0..rooms.len() as u32).filter(|&v| rooms[v as usize].running);
        self.main.build(rooms.len(), running, |v| (rooms[v as usize].key, rooms[v as usize].free));
        for tree in self.filter_trees.drain(..).flatten() {
            self.pool.push(tree);
        }
        self.misses.clear();
    }

    fn filter_added(&mut self, c: &Call<'_, '_>, f: u32) {
        let Some(filter) = c.filters.get(f as usize) else { return };
        let indexed = self.filter_trees.iter().filter(|t| t.is_some()).count();
        let tree =
            (filter.members.len() >= self.tree_min_members && indexed < self.max_filter_trees).then(|| {
                let mut t = self.pool.pop().unwrap_or_default();
                let rooms = c.rooms;
                t.build(rooms.len(), filter.members.iter().copied(), |v| {
                    (rooms[v as usize].key, rooms[v as usize].free)
                });
                t
            });
        self.filter_trees.resize_with(self.filter_trees.len().max(f as usize + 1), || None);
        self.filter_trees[f as usize] = tree;
    }

    fn update(&mut self, c: &Call<'_, '_>, node: u32) {
        let Some(room) = c.rooms.get(node as usize) else { return };
        if self.main.update(node, room.key, &room.free) {
            self.misses.clear();
        }
        for t in self.filter_trees.iter_mut().flatten() {
            t.update(node, room.key, &room.free);
        }
    }

    fn best(&mut self, c: &Call<'_, '_>, q: Query, shape: &GantryResources) -> Option<(u32, u64)> {
        let filter = q.filter.and_then(|f| c.filters.get(f as usize));
        if let Some(r) = q.rack {
            let members = c.racks.members.get(r as usize).map_or(&[][..], |m| &m[..]);
            return Self::scan(c, members, filter, shape);
        }
        match (q.filter, filter) {
            (Some(f), Some(filter)) => match self.filter_trees.get(f as usize) {
                Some(Some(tree)) => tree.best(shape),
                _ => Self::scan(c, &filter.members, None, shape),
            },
            (Some(_), None) => None,
            (None, _) => {
                if self.misses.iter().any(|m| m.fits_in(shape)) {
                    return None;
                }
                let found = self.main.best(shape);
                if found.is_none() {
                    if self.misses.len() >= MAX_MISSES {
                        self.misses.remove(0);
                    }
                    self.misses.push(*shape);
                }
                found
            }
        }
    }
}

/// Reusable buffers of the planner.
#[derive(Debug, Default)]
pub struct Scratch {
    rooms: Vec<Room>,
    filters: Vec<Filter>,
    filter_ids: HashMap<Vec<GantryLabel>, u32>,
    racks: Racks,
    queue_used: Vec<GantryResources>,
    /// Placements of the request being placed, with each node's room before it.
    trial: Vec<(u32, Room)>,
    labels: Vec<GantryLabel>,
}

/// What one request needs, as the request loop carries it.
#[derive(Debug, Clone, Copy)]
struct Want {
    res: GantryResources,
    /// When a container placed now is expected to end (see [`Room::ends_ms`]).
    ends_ms: u64,
    /// Selector filter.
    sel: Option<u32>,
    /// Selector-and-preferred-labels filter.
    pref: Option<u32>,
    /// `SAME_RACK_REQUIRED`: the rack once known.
    rack_required: bool,
    hard_rack: Option<u32>,
    /// `SAME_RACK_PREFERRED`: the rack once known.
    rack_preferred: bool,
    pref_rack: Option<u32>,
}

/// The request and its app if `r` may be placed now: its app is admitted, it has containers
/// left, and (a gang) none placed.
fn placeable<'v>(view: &View<'v>, r: u32) -> Option<&'v GantryRequest> {
    let req = view.requests.get(r as usize)?;
    let app = view.apps.get(req.app as usize)?;
    let gang = req.flags & GANTRY_REQUEST_GANG != 0;
    (matches!(app.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING)
        && req.placed < req.count
        && !(gang && req.placed != 0))
        .then_some(req)
}

/// Places `view.pending` in order, writing PLACE decisions to `out`.
pub fn place<F: Finder>(
    config: &PackingConfig,
    view: &View<'_>,
    scratch: &mut Scratch,
    finder: &mut F,
    out: &mut Decisions,
) {
    let mut min_shape: Option<GantryResources> = None;
    for &r in view.pending {
        if let Some(req) = placeable(view, r) {
            min_shape = Some(min_shape.map_or(req.resources, |m| m.min_each(&req.resources)));
        }
    }
    let Some(min_shape) = min_shape else { return };
    let running = view.nodes.iter().filter(|n| n.state == GANTRY_NODE_RUNNING).count();
    let packing_off = (running as u64) < u64::from(config.min_nodes);
    let keyer = Keyer {
        mode: if packing_off && config.mode.packs() { Mode::Spread } else { config.mode },
        usage: config.usage,
        threshold: config.high_threshold,
        now_ms: view.now_ms,
        end_resolution_ms: config.end_resolution_ms,
    };
    build_rooms(config, view, &mut scratch.rooms, keyer, &min_shape);
    scratch.filters.clear();
    scratch.filter_ids.clear();
    scratch.racks.built = false;
    scratch.queue_used.clear();
    scratch.queue_used.extend(view.queues.iter().map(|q| q.used));
    let mut p = Planner { view, s: scratch, finder, keyer, min_shape, out };
    p.finder.start(&p.s.call(view, keyer));
    for &r in view.pending {
        p.request(r);
    }
}

/// Fills `rooms` from the view: free room, usage and key of every node.
fn build_rooms(
    config: &PackingConfig,
    view: &View<'_>,
    rooms: &mut Vec<Room>,
    keyer: Keyer,
    min_shape: &GantryResources,
) {
    rooms.clear();
    rooms.extend(view.nodes.iter().enumerate().map(|(i, n)| {
        let mut free = n.capacity.minus(&n.allocated);
        let gpus = view.node_gpus(n);
        if !gpus.is_empty() {
            let idle = gpus.iter().filter(|g| g.container == GANTRY_NONE).count();
            free.gpus = free.gpus.min(u32::try_from(idle).unwrap_or(u32::MAX));
        }
        let mut used = n.allocated;
        if config.basis == Basis::Measured {
            if let Some(m) = view.node_usage.get(i).filter(|m| m.sampled_ms > 0) {
                used = GantryResources::new(m.cpu_millis, m.memory_bytes, m.gpus_busy);
            }
        }
        Room {
            free,
            used,
            key: NO_KEY,
            rank: match config.ties {
                Ties::Random => rank(view.seed, i as u32),
                Ties::NodeOrder => i as u32,
            },
            occupied: !n.allocated.is_zero(),
            running: n.state == GANTRY_NODE_RUNNING,
            ends_ms: 0,
        }
    }));
    if keyer.mode == Mode::Lifetime {
        for c in view.containers {
            let run_ms = view.requests.get(c.request as usize).map_or(0, GantryRequest::expected_run_ms);
            if let Some(room) = rooms.get_mut(c.node as usize) {
                room.ends_ms = room.ends_ms.max(end_of(c.start_ms, run_ms));
            }
        }
    }
    if config.basis == Basis::Measured && !view.node_usage.is_empty() {
        // Containers allocated since their node's sample are not in it yet.
        for c in view.containers {
            let sampled = view.node_usage.get(c.node as usize).map_or(0, |m| m.sampled_ms);
            if sampled > 0 && c.start_ms >= sampled {
                if let Some(room) = rooms.get_mut(c.node as usize) {
                    room.used = room.used.plus(&c.resources);
                }
            }
        }
    }
    for (room, node) in rooms.iter_mut().zip(view.nodes) {
        room.key = key_of(keyer, room, &node.capacity, min_shape);
    }
}

/// When a container started at `start_ms` is expected to end; `u64::MAX` when its run time is
/// unknown (0). One past its expected end counts as ending now (the key measures from now).
fn end_of(start_ms: u64, run_ms: u64) -> u64 {
    if run_ms == 0 { u64::MAX } else { start_ms.saturating_add(run_ms) }
}

#[inline]
fn key_of(keyer: Keyer, room: &Room, capacity: &GantryResources, min_shape: &GantryResources) -> u64 {
    if room.running && min_shape.fits_in(&room.free) {
        keyer.key(capacity, &room.used, room.occupied, room.ends_ms, room.rank)
    } else {
        NO_KEY
    }
}

impl Scratch {
    fn call<'a, 'v>(&'a self, view: &'a View<'v>, keyer: Keyer) -> Call<'a, 'v> {
        Call { view, rooms: &self.rooms, filters: &self.filters, racks: &self.racks, keyer }
    }
}

struct Planner<'a, 'v, F> {
    view: &'a View<'v>,
    s: &'a mut Scratch,
    finder: &'a mut F,
    keyer: Keyer,
    min_shape: GantryResources,
    out: &'a mut Decisions,
}

impl<F: Finder> Planner<'_, '_, F> {
    fn best(&mut self, q: Query, shape: &GantryResources) -> Option<(u32, u64)> {
        let call = self.s.call(self.view, self.keyer);
        self.finder.best(&call, q, shape)
    }

    /// The id of the filter for `labels` (sorted and deduplicated here), created on first use.
    fn filter(&mut self, labels: &mut Vec<GantryLabel>) -> u32 {
        labels.sort_unstable_by_key(|l| (l.key.offset, l.key.len, l.value.offset, l.value.len));
        labels.dedup();
        if let Some(&f) = self.s.filter_ids.get(labels.as_slice()) {
            return f;
        }
        let f = self.s.filters.len() as u32;
        let view = self.view;
        let mut is_member = vec![false; view.nodes.len()];
        let mut members = Vec::new();
        for (v, node) in view.nodes.iter().enumerate() {
            if node.state == GANTRY_NODE_RUNNING
                && View::labels_satisfy(view.strings, view.node_labels(node), labels)
            {
                is_member[v] = true;
                members.push(v as u32);
            }
        }
        self.s.filters.push(Filter { labels: labels.clone(), members, is_member });
        self.s.filter_ids.insert(labels.clone(), f);
        let call = self.s.call(self.view, self.keyer);
        self.finder.filter_added(&call, f);
        f
    }

    fn racks(&mut self) {
        if self.s.racks.built {
            return;
        }
        let view = self.view;
        let racks = &mut self.s.racks;
        racks.names.clear();
        racks.members.iter_mut().for_each(Vec::clear);
        racks.of.clear();
        racks.ids.clear();
        racks.existing.clear();
        for (v, node) in view.nodes.iter().enumerate() {
            let next = racks.names.len() as u32;
            let id = *racks.ids.entry(node.rack).or_insert(next);
            if id == next {
                racks.names.push(node.rack);
                if racks.members.len() <= id as usize {
                    racks.members.push(Vec::new());
                }
            }
            racks.of.push(id);
            if node.state == GANTRY_NODE_RUNNING {
                racks.members[id as usize].push(v as u32);
            }
        }
        racks.members.truncate(racks.names.len());
        // The engine holds a same-rack request to the rack of its first live container.
        for c in view.containers {
            if matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING) {
                if let Some(&rack) = racks.of.get(c.node as usize) {
                    racks.existing.entry(c.request).or_insert(rack);
                }
            }
        }
        racks.built = true;
    }

    /// How many containers of `res` the queue and its ancestors still take (at most `want`).
    fn queue_allows(&self, queue: u32, res: &GantryResources, want: u32) -> u32 {
        let mut k = u64::from(want);
        let mut q = queue;
        for _ in 0..=self.view.queues.len() {
            let (Some(rec), Some(used)) =
                (self.view.queues.get(q as usize), self.s.queue_used.get(q as usize))
            else {
                break;
            };
            let max = &rec.absolute_maximum;
            for (u, m, r) in [
                (used.cpu_millis, max.cpu_millis, res.cpu_millis),
                (used.memory_bytes, max.memory_bytes, res.memory_bytes),
                (u64::from(used.gpus), u64::from(max.gpus), u64::from(res.gpus)),
            ] {
                if u > m {
                    return 0;
                }
                if let Some(fit) = (m - u).checked_div(r) {
                    k = k.min(fit);
                }
            }
            q = rec.parent;
        }
        k as u32
    }

    fn charge_queues(&mut self, queue: u32, res: &GantryResources, n: u32) {
        let total = res.times(n);
        let mut q = queue;
        for _ in 0..=self.view.queues.len() {
            let (Some(rec), Some(used)) =
                (self.view.queues.get(q as usize), self.s.queue_used.get_mut(q as usize))
            else {
                break;
            };
            *used = used.plus(&total);
            q = rec.parent;
        }
    }

    fn request(&mut self, r: u32) {
        let view = self.view;
        let Some(req) = placeable(view, r) else { return };
        let gang = req.flags & GANTRY_REQUEST_GANG != 0;
        let remaining = req.count - req.placed;
        let queue = view.apps.get(req.app as usize).map_or(GANTRY_NONE, |a| a.queue);
        let allowed = self.queue_allows(queue, &req.resources, remaining);
        if allowed == 0 || (gang && allowed < remaining) {
            return;
        }
        let mut labels = std::mem::take(&mut self.s.labels);
        labels.clear();
        labels.extend_from_slice(View::range(view.labels, req.selector));
        let sel = (!labels.is_empty()).then(|| self.filter(&mut labels));
        let preferred = View::range(view.labels, req.preferred);
        let pref = (!preferred.is_empty()).then(|| {
            labels.extend_from_slice(preferred);
            self.filter(&mut labels)
        });
        self.s.labels = labels;
        let rack_required = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
        let rack_preferred = req.flags & GANTRY_REQUEST_SAME_RACK_PREFERRED != 0;
        let mut existing = None;
        if rack_required || rack_preferred {
            self.racks();
            existing = self.s.racks.existing.get(&r).copied();
        }
        let want = Want {
            res: req.resources,
            ends_ms: end_of(view.now_ms, req.expected_run_ms()),
            sel,
            pref,
            rack_required,
            hard_rack: existing.filter(|_| rack_required),
            rack_preferred,
            pref_rack: existing.filter(|_| rack_preferred),
        };
        if !gang {
            let placed = self.fill(want, allowed);
            for &(v, _) in &self.s.trial {
                self.out.place(r, v);
            }
            self.charge_queues(queue, &req.resources, placed);
            return;
        }
        self.s.trial.clear();
        if rack_required {
            self.gang_on_one_rack(want, remaining);
        } else if self.fill(want, remaining) < remaining {
            self.give_back();
        }
        if !self.s.trial.is_empty() {
            for &(v, _) in &self.s.trial {
                self.out.place(r, v);
            }
            self.charge_queues(queue, &req.resources, remaining);
        }
    }

    /// A gang that must share a rack: the racks are tried in the order of their best node for
    /// one container, until one takes the whole gang.
    fn gang_on_one_rack(&mut self, want: Want, count: u32) {
        let mut order: Vec<(u64, u32)> = Vec::new();
        for rack in 0..self.s.racks.names.len() as u32 {
            if let Some((_, key)) = self.best(Query { filter: want.sel, rack: Some(rack) }, &want.res) {
                order.push((key, rack));
            }
        }
        order.sort_unstable();
        for (_, rack) in order {
            if self.fill(Want { hard_rack: Some(rack), ..want }, count) == count {
                return;
            }
            self.give_back();
        }
    }

    /// Places up to `count` containers of `want`, one at a time, recording them in `trial`;
    /// returns how many were placed.
    fn fill(&mut self, mut want: Want, count: u32) -> u32 {
        self.s.trial.clear();
        for placed in 0..count {
            let Some(v) = self.choose(&want) else { return placed };
            self.take(v, &want);
            if want.rack_required && want.hard_rack.is_none() {
                want.hard_rack = self.s.racks.of.get(v as usize).copied();
            }
            if want.rack_preferred && want.pref_rack.is_none() {
                want.pref_rack = self.s.racks.of.get(v as usize).copied();
            }
        }
        count
    }

    /// The node for the next container of `want`: the best fitting node of its selector (and
    /// required rack), unless a node that also meets its preferences is in the same category.
    fn choose(&mut self, want: &Want) -> Option<u32> {
        let general = self.best(Query { filter: want.sel, rack: want.hard_rack }, &want.res)?;
        let pref_rack = if want.hard_rack.is_some() { None } else { want.pref_rack };
        if want.pref.is_none() && pref_rack.is_none() {
            return Some(general.0);
        }
        let q = Query { filter: want.pref.or(want.sel), rack: want.hard_rack.or(pref_rack) };
        match self.best(q, &want.res) {
            Some((node, key)) if category(key) <= category(general.1) => Some(node),
            _ => Some(general.0),
        }
    }

    /// Charges one container of `want` to node `v`.
    fn take(&mut self, v: u32, want: &Want) {
        let res = &want.res;
        let (Some(room), Some(node)) = (self.s.rooms.get_mut(v as usize), self.view.nodes.get(v as usize))
        else {
            return;
        };
        self.s.trial.push((v, *room));
        room.free = room.free.minus(res);
        room.used = room.used.plus(res);
        room.occupied |= !res.is_zero();
        room.ends_ms = room.ends_ms.max(want.ends_ms);
        room.key = key_of(self.keyer, room, &node.capacity, &self.min_shape);
        let call = self.s.call(self.view, self.keyer);
        self.finder.update(&call, v);
    }

    /// Undoes the placements in `trial` (a gang that did not fit whole).
    fn give_back(&mut self) {
        while let Some((v, before)) = self.s.trial.pop() {
            if let Some(room) = self.s.rooms.get_mut(v as usize) {
                *room = before;
            }
            let call = self.s.call(self.view, self.keyer);
            self.finder.update(&call, v);
        }
    }
}
