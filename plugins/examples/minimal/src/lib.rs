//! # gantry-example-minimal
//!
//! A minimal but complete gantry placement policy: **first fit**. Each pending request, in the
//! order the scheduler gives, goes to the first running nodes (in view order) that have room and
//! carry every label of its node selector.
//!
//! - Plain requests place as many of their remaining containers as fit.
//! - Gangs (`GANTRY_REQUEST_GANG`) place all `count` containers in one call or none: placements
//!   are tentative until the whole gang fits and are rolled back otherwise.
//! - `GANTRY_REQUEST_SAME_RACK_REQUIRED` keeps every container in one rack. A gang tries each rack
//!   in turn (racks in the order their first node appears); a plain request stays in the rack of
//!   its already placed containers, or else in the rack of the first node that fits. Nodes without
//!   a rack (empty rack name) never take such requests: their rack is unknown.
//!
//! Speed: free room is kept densely for running nodes only, so drained or lost nodes cost nothing,
//! and a small cache remembers, per container size, how many leading nodes are known to be too
//! full for it. Room only shrinks during a call (a failed gang restores exactly what it took), so
//! a node too full for size `s` is too full for every size at least `s`, and a later scan starts
//! past that prefix instead of at node 0. All buffers live in the plugin and are reused between
//! calls.
//!
//! The configuration must be a JSON object; this plugin has no settings, so `{}` is typical.

use core::ffi::CStr;
use gantry_sdk::abi::{
    GANTRY_NODE_RUNNING, GANTRY_REQUEST_GANG, GANTRY_REQUEST_SAME_RACK_REQUIRED, GantryRequest,
    GantryResources, GantryStrRef,
};
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

/// The crate version as a NUL-terminated string, checked at compile time.
const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
};

/// How many container sizes the cursor cache remembers per call.
const CURSOR_CACHE: usize = 32;

/// "No rack group" in [`MinimalFirstFit::rack_of`].
const NO_RACK: u32 = u32::MAX;

/// What the cache knows about one container size: no running node before position `prefix` (in
/// [`MinimalFirstFit::up`]) has room for `shape`.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    shape: GantryResources,
    prefix: usize,
}

/// The running nodes of one rack: `by_rack[start..end]`.
#[derive(Debug, Clone, Copy)]
struct RackGroup {
    rack: GantryStrRef,
    start: usize,
    end: usize,
}

/// First-fit placement with gangs and same-rack constraints. See the crate documentation.
///
/// The fields are scratch space for one `place` call, kept between calls so that a call in steady
/// state allocates nothing.
#[derive(Debug, Default)]
pub struct MinimalFirstFit {
    /// Node indexes of the running nodes, in view order. Scans walk positions in this list.
    up: Vec<u32>,
    /// Free room of `up[pos]`: capacity less allocated less this call's tentative placements.
    free: Vec<GantryResources>,
    /// Known-full prefixes per container size.
    cursors: Vec<Cursor>,
    /// Next cache slot to overwrite when the cache is full.
    evict: usize,
    /// Positions of running nodes with a rack, grouped by rack, each group in view order.
    by_rack: Vec<u32>,
    /// The groups of `by_rack`, ordered by their first node.
    racks: Vec<RackGroup>,
    /// Group index of each position, or `NO_RACK`.
    rack_of: Vec<u32>,
    /// Whether `by_rack`, `racks` and `rack_of` describe this call's view.
    racks_built: bool,
    /// Positions taken by the gang being tried, for rollback.
    tentative: Vec<u32>,
    /// Requests already handled this call (guards against a request listed twice).
    seen: Vec<bool>,
}

impl MinimalFirstFit {
    /// A plugin with empty buffers (what `create("{}")` returns).
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads this call's nodes and forgets everything learned in the previous call.
    fn reset(&mut self, view: &View<'_>) {
        self.up.clear();
        self.free.clear();
        for (i, node) in view.nodes.iter().enumerate() {
            let Ok(i) = u32::try_from(i) else { break };
            if node.state == GANTRY_NODE_RUNNING {
                self.up.push(i);
                self.free.push(node.capacity.minus(&node.allocated));
            }
        }
        self.cursors.clear();
        self.evict = 0;
        self.racks_built = false;
        self.seen.clear();
        self.seen.resize(view.requests.len(), false);
    }

    /// Groups running nodes by rack, once per call and only when a request needs it.
    fn build_racks(&mut self, view: &View<'_>) {
        if self.racks_built {
            return;
        }
        self.racks_built = true;
        self.by_rack.clear();
        self.racks.clear();
        self.rack_of.clear();
        self.rack_of.resize(self.up.len(), NO_RACK);
        let rack_at = |pos: u32| {
            self.up
                .get(pos as usize)
                .and_then(|&n| view.nodes.get(n as usize))
                .map_or(GantryStrRef::default(), |n| n.rack)
        };
        for pos in 0..self.up.len() {
            let Ok(pos) = u32::try_from(pos) else { break };
            if rack_at(pos).len != 0 {
                self.by_rack.push(pos);
            }
        }
        // Strings are interned, so a rack's name is identified by its reference. The sort is
        // stable, so each group keeps view order.
        let mut by_rack = core::mem::take(&mut self.by_rack);
        by_rack.sort_by_key(|&pos| {
            let r = rack_at(pos);
            (r.offset, r.len)
        });
        let mut start = 0;
        while start < by_rack.len() {
            let rack = rack_at(by_rack[start]);
            let mut end = start + 1;
            while end < by_rack.len() && rack_at(by_rack[end]) == rack {
                end += 1;
            }
            self.racks.push(RackGroup { rack, start, end });
            start = end;
        }
        // Racks in the order of their first node, for a first-fit choice of rack.
        self.racks.sort_by_key(|g| by_rack.get(g.start).copied().unwrap_or(u32::MAX));
        for (gi, g) in self.racks.iter().enumerate() {
            for &pos in by_rack.get(g.start..g.end).unwrap_or(&[]) {
                if let Some(slot) = self.rack_of.get_mut(pos as usize) {
                    *slot = gi as u32;
                }
            }
        }
        self.by_rack = by_rack;
    }

    /// Where a scan for `shape` may start: past the longest prefix known too full for it.
    fn cursor_for(&self, shape: &GantryResources) -> usize {
        self.cursors.iter().filter(|c| c.shape.fits_in(shape)).map(|c| c.prefix).max().unwrap_or(0)
    }

    /// Records that no position before `prefix` has room for `shape`.
    fn remember(&mut self, shape: GantryResources, prefix: usize) {
        if let Some(c) = self.cursors.iter_mut().find(|c| c.shape == shape) {
            c.prefix = c.prefix.max(prefix);
        } else if self.cursors.len() < CURSOR_CACHE {
            self.cursors.push(Cursor { shape, prefix });
        } else {
            if let Some(c) = self.cursors.get_mut(self.evict) {
                *c = Cursor { shape, prefix };
            }
            self.evict = (self.evict + 1) % CURSOR_CACHE;
        }
    }

    /// Whether position `pos` has room for one container of `req` and matches its selector.
    fn fits(&self, view: &View<'_>, pos: usize, req: &GantryRequest) -> bool {
        self.free.get(pos).is_some_and(|free| req.resources.fits_in(free))
            && (req.selector.len == 0 || self.matches(view, pos, req))
    }

    /// Whether the node at position `pos` carries every label of `req`'s selector.
    fn matches(&self, view: &View<'_>, pos: usize, req: &GantryRequest) -> bool {
        self.up
            .get(pos)
            .and_then(|&n| view.nodes.get(n as usize))
            .is_some_and(|node| view.node_matches(node, req.selector))
    }

    /// The first position at or after `from` that takes one container of `req`. Advances
    /// `prefix` over positions without room that directly follow it.
    fn scan(&self, view: &View<'_>, from: usize, req: &GantryRequest, prefix: &mut usize) -> Option<usize> {
        let free = self.free.get(from..)?;
        let has_selector = req.selector.len != 0;
        for (pos, room) in (from..).zip(free) {
            if !req.resources.fits_in(room) {
                if pos == *prefix {
                    *prefix = pos + 1;
                }
                continue;
            }
            if has_selector && !self.matches(view, pos, req) {
                continue;
            }
            return Some(pos);
        }
        None
    }

    /// Takes one container of `res` from position `pos`.
    fn take(&mut self, pos: usize, res: &GantryResources) {
        if let Some(free) = self.free.get_mut(pos) {
            *free = free.minus(res);
        }
    }

    /// Gives back one container of `res` to position `pos`.
    fn give(&mut self, pos: usize, res: &GantryResources) {
        if let Some(free) = self.free.get_mut(pos) {
            *free = free.plus(res);
        }
    }

    /// The node index at position `pos`.
    fn node_at(&self, pos: usize) -> u32 {
        self.up.get(pos).copied().unwrap_or(u32::MAX)
    }

    /// Emits the tentative placements of request `r` as PLACE decisions.
    fn commit(&self, r: u32, out: &mut Decisions) {
        for &pos in &self.tentative {
            out.place(r, self.node_at(pos as usize));
        }
    }

    /// Undoes the tentative placements of `req`.
    fn rollback(&mut self, req: &GantryRequest) {
        let tentative = core::mem::take(&mut self.tentative);
        for &pos in &tentative {
            self.give(pos as usize, &req.resources);
        }
        self.tentative = tentative;
        self.tentative.clear();
    }

    /// Plain request, any node: up to `want` containers, first fit.
    fn place_some(&mut self, view: &View<'_>, r: u32, req: &GantryRequest, want: u32, out: &mut Decisions) {
        let start = self.cursor_for(&req.resources);
        let mut prefix = start;
        let mut pos = start;
        for _ in 0..want {
            let Some(p) = self.scan(view, pos, req, &mut prefix) else {
                break;
            };
            self.take(p, &req.resources);
            out.place(r, self.node_at(p));
            pos = p;
        }
        self.remember(req.resources, prefix);
    }

    /// Gang, any node: all `count` containers, first fit, or none.
    fn place_gang(&mut self, view: &View<'_>, r: u32, req: &GantryRequest, out: &mut Decisions) {
        let start = self.cursor_for(&req.resources);
        let mut prefix = start;
        let mut pos = start;
        self.tentative.clear();
        while self.tentative.len() < req.count as usize {
            let Some(p) = self.scan(view, pos, req, &mut prefix) else {
                break;
            };
            self.take(p, &req.resources);
            self.tentative.push(p as u32);
            pos = p;
        }
        if self.tentative.len() == req.count as usize {
            self.commit(r, out);
            self.tentative.clear();
        } else {
            // Positions are taken in increasing order, so the first is the lowest given back.
            if let Some(&first) = self.tentative.first() {
                prefix = prefix.min(first as usize);
            }
            self.rollback(req);
        }
        self.remember(req.resources, prefix);
    }

    /// Tentatively places up to `want` containers of `req` on rack group `g`, first fit.
    fn fill_group(&mut self, view: &View<'_>, g: usize, req: &GantryRequest, want: usize) {
        let Some(group) = self.racks.get(g).copied() else {
            return;
        };
        for i in group.start..group.end {
            let Some(pos) = self.by_rack.get(i).map(|&p| p as usize) else {
                break;
            };
            if self.tentative.len() >= want {
                break;
            }
            if !self.fits(view, pos, req) {
                continue;
            }
            // The selector matched; keep filling this node while it has room.
            while self.tentative.len() < want
                && self.free.get(pos).is_some_and(|free| req.resources.fits_in(free))
            {
                self.take(pos, &req.resources);
                self.tentative.push(pos as u32);
            }
        }
    }

    /// Gang in one rack: each rack in turn until one takes all `count` containers.
    fn place_gang_same_rack(&mut self, view: &View<'_>, r: u32, req: &GantryRequest, out: &mut Decisions) {
        self.build_racks(view);
        let want = req.count as usize;
        self.tentative.clear();
        for g in 0..self.racks.len() {
            self.fill_group(view, g, req, want);
            if self.tentative.len() == want {
                self.commit(r, out);
                self.tentative.clear();
                return;
            }
            self.rollback(req);
        }
    }

    /// Plain request in one rack: the rack of its placed containers, or else that of the first
    /// node with a rack that takes one container.
    fn place_some_same_rack(
        &mut self,
        view: &View<'_>,
        r: u32,
        req: &GantryRequest,
        want: u32,
        out: &mut Decisions,
    ) {
        self.build_racks(view);
        let group = if req.placed > 0 {
            let rack = view
                .containers
                .iter()
                .find(|c| c.request == r)
                .and_then(|c| view.nodes.get(c.node as usize))
                .map(|n| n.rack);
            // Without a known rack for the placed containers, one rack cannot be promised.
            let Some(rack) = rack.filter(|rack| rack.len != 0) else {
                return;
            };
            self.racks.iter().position(|g| g.rack == rack)
        } else {
            (0..self.free.len())
                .find(|&pos| {
                    self.rack_of.get(pos).is_some_and(|&g| g != NO_RACK) && self.fits(view, pos, req)
                })
                .and_then(|pos| self.rack_of.get(pos))
                .map(|&g| g as usize)
        };
        let Some(g) = group else { return };
        self.tentative.clear();
        self.fill_group(view, g, req, want as usize);
        self.commit(r, out);
        self.tentative.clear();
    }
}

/// Whether `config` looks like a JSON object. This plugin has no settings, so it only checks the
/// outer braces; it needs no JSON parser.
fn check_config(config: &str) -> Result<(), PluginError> {
    let t = config.trim();
    if t.starts_with('{') && t.ends_with('}') {
        Ok(())
    } else {
        Err(PluginError::new(format!(
            "minimal-first-fit: configuration must be a JSON object such as {{}}, got {:?}",
            t.chars().take(64).collect::<String>()
        )))
    }
}

impl Plugin for MinimalFirstFit {
    const NAME: &'static CStr = c"minimal-first-fit";
    const VERSION: &'static CStr = VERSION;
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(config: &str) -> Result<Self, PluginError> {
        check_config(config)?;
        Ok(Self::new())
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.reset(view);
        for &r in view.pending {
            let Some(req) = view.requests.get(r as usize) else {
                continue;
            };
            match self.seen.get_mut(r as usize) {
                Some(seen) if !*seen => *seen = true,
                _ => continue,
            }
            let want = req.count.saturating_sub(req.placed);
            if want == 0 {
                continue;
            }
            let gang = req.flags & GANTRY_REQUEST_GANG != 0;
            let same_rack = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
            match (gang, same_rack) {
                // A gang is all or nothing; one that is partly placed is not ours to finish.
                (true, _) if req.placed != 0 => {}
                (true, false) => self.place_gang(view, r, req, out),
                (true, true) => self.place_gang_same_rack(view, r, req, out),
                (false, false) => self.place_some(view, r, req, want, out),
                (false, true) => self.place_some_same_rack(view, r, req, want, out),
            }
        }
        Ok(())
    }
}

gantry_sdk::export_plugin!(MinimalFirstFit);

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_sdk::abi::{
        GANTRY_CONTAINER_RUNNING, GANTRY_DECISION_PLACE, GANTRY_HOOK_PLACE, GANTRY_NODE_DRAINING,
        GANTRY_NODE_LOST, GantryContainer, GantryDecision,
    };
    use gantry_sdk::rng::SplitMix64;
    use gantry_sdk::testkit::ViewBuilder;

    const GIB: u64 = 1 << 30;

    fn res(cpu: u64, mem_gib: u64) -> GantryResources {
        GantryResources::new(cpu * 1000, mem_gib * GIB, 0)
    }

    /// A hand-built cluster (the SDK's test kit, whose arrays it lends: `c.nodes`, `c.requests`,
    /// …) with the two shapes these tests add: nodes named by position, requests with no
    /// application, each pending.
    struct Cluster(ViewBuilder);

    impl Default for Cluster {
        fn default() -> Self {
            let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
            (b.now_ms, b.cycle, b.seed) = (1_000, 1, 7);
            Cluster(b)
        }
    }

    impl std::ops::Deref for Cluster {
        type Target = ViewBuilder;
        fn deref(&self) -> &ViewBuilder {
            &self.0
        }
    }

    impl std::ops::DerefMut for Cluster {
        fn deref_mut(&mut self) -> &mut ViewBuilder {
            &mut self.0
        }
    }

    impl Cluster {
        fn node(&mut self, rack: &str, capacity: GantryResources, labels: &[(&str, &str)]) -> u32 {
            let name = format!("node-{}", self.nodes.len());
            self.0.node(&name, capacity).rack(rack).labels(labels).index()
        }

        fn request(
            &mut self,
            each: GantryResources,
            count: u32,
            flags: u32,
            selector: &[(&str, &str)],
        ) -> u32 {
            let id = self.requests.len() as u64 + 100;
            self.0.request(0, each, count).id(id).flags(flags).selector(selector).pending().index()
        }

        fn place(&self, plugin: &mut MinimalFirstFit) -> Vec<GantryDecision> {
            let mut out = Decisions::new();
            plugin.place(&self.view(), &mut out).unwrap();
            out.as_slice().to_vec()
        }
    }

    fn placements(decisions: &[GantryDecision]) -> Vec<(u32, u32)> {
        decisions
            .iter()
            .map(|d| {
                assert_eq!(d.kind, GANTRY_DECISION_PLACE);
                (d.subject, d.target)
            })
            .collect()
    }

    /// Checks every invariant a host would check, returning the number of placements.
    fn check_valid(c: &Cluster, decisions: &[GantryDecision]) -> usize {
        let view = c.view();
        let mut alloc: Vec<GantryResources> = c.nodes.iter().map(|n| n.allocated).collect();
        let mut per_request = vec![Vec::new(); c.requests.len()];
        for d in decisions {
            assert_eq!(d.kind, GANTRY_DECISION_PLACE);
            let req = &c.requests[d.subject as usize];
            let node = &c.nodes[d.target as usize];
            assert_eq!(node.state, GANTRY_NODE_RUNNING, "placed on a node that is not running");
            assert!(view.node_matches(node, req.selector), "selector violated");
            alloc[d.target as usize] = alloc[d.target as usize].plus(&req.resources);
            assert!(alloc[d.target as usize].fits_in(&node.capacity), "node {} over-allocated", d.target);
            per_request[d.subject as usize].push(d.target);
        }
        for (r, targets) in per_request.iter().enumerate() {
            let req = &c.requests[r];
            if targets.is_empty() {
                continue;
            }
            assert!(targets.len() as u32 <= req.count - req.placed, "request {r} over-placed");
            if req.flags & GANTRY_REQUEST_GANG != 0 {
                assert_eq!(targets.len() as u32, req.count, "gang {r} partly placed");
            }
            if req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0 {
                let rack = c.nodes[targets[0] as usize].rack;
                assert_ne!(rack.len, 0);
                assert!(targets.iter().all(|&t| c.nodes[t as usize].rack == rack), "request {r} spans racks");
            }
        }
        decisions.len()
    }

    /// The obvious quadratic first fit with the same rules, to check the fast one against.
    fn reference(c: &Cluster) -> Vec<(u32, u32)> {
        let view = c.view();
        let mut free: Vec<GantryResources> = c.nodes.iter().map(|n| n.capacity.minus(&n.allocated)).collect();
        let ok = |free: &[GantryResources], n: usize, req: &GantryRequest| {
            c.nodes[n].state == GANTRY_NODE_RUNNING
                && req.resources.fits_in(&free[n])
                && view.node_matches(&c.nodes[n], req.selector)
        };
        // Racks in order of first appearance among running nodes.
        let mut racks: Vec<GantryStrRef> = Vec::new();
        for n in &c.nodes {
            if n.state == GANTRY_NODE_RUNNING && n.rack.len != 0 && !racks.contains(&n.rack) {
                racks.push(n.rack);
            }
        }
        let mut out = Vec::new();
        for &r in &c.pending {
            let req = &c.requests[r as usize];
            let gang = req.flags & GANTRY_REQUEST_GANG != 0;
            let same_rack = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
            let want = (req.count - req.placed) as usize;
            let candidates: Vec<Vec<usize>> = if same_rack {
                let fixed = if req.placed > 0 {
                    c.containers.iter().find(|k| k.request == r).map(|k| c.nodes[k.node as usize].rack)
                } else if gang {
                    None
                } else {
                    (0..c.nodes.len())
                        .find(|&n| c.nodes[n].rack.len != 0 && ok(&free, n, req))
                        .map(|n| c.nodes[n].rack)
                };
                let rs: Vec<GantryStrRef> = match fixed {
                    Some(f) => vec![f],
                    None if gang => racks.clone(),
                    None => vec![],
                };
                rs.iter()
                    .map(|rack| (0..c.nodes.len()).filter(|&n| c.nodes[n].rack == *rack).collect())
                    .collect()
            } else {
                vec![(0..c.nodes.len()).collect()]
            };
            for nodes in candidates {
                let mut took = Vec::new();
                for &n in &nodes {
                    while took.len() < want && ok(&free, n, req) {
                        free[n] = free[n].minus(&req.resources);
                        took.push(n as u32);
                    }
                }
                if gang && took.len() < want {
                    for &n in &took {
                        free[n as usize] = free[n as usize].plus(&req.resources);
                    }
                    continue;
                }
                out.extend(took.iter().map(|&n| (r, n)));
                break;
            }
        }
        out
    }

    #[test]
    fn config_must_be_an_object() {
        assert!(MinimalFirstFit::create("{}").is_ok());
        assert!(MinimalFirstFit::create("  {\"anything\": [1, 2]}\n").is_ok());
        assert!(MinimalFirstFit::create("").is_err());
        assert!(MinimalFirstFit::create("[]").is_err());
        assert!(MinimalFirstFit::create("{").is_err());
        assert!(MinimalFirstFit::create("null").is_err());
    }

    #[test]
    fn metadata() {
        assert_eq!(MinimalFirstFit::NAME, c"minimal-first-fit");
        assert_eq!(MinimalFirstFit::VERSION.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        assert_eq!(MinimalFirstFit::HOOKS, Hooks { place: true, ..Hooks::NONE });
    }

    #[test]
    fn simple_placement_is_first_fit() {
        let mut c = Cluster::default();
        c.node("", res(4, 16), &[]);
        c.node("", res(4, 16), &[]);
        let a = c.request(res(2, 4), 3, 0, &[]);
        let b = c.request(res(1, 1), 2, 0, &[]);
        let mut p = MinimalFirstFit::new();
        let d = c.place(&mut p);
        assert_eq!(placements(&d), vec![(a, 0), (a, 0), (a, 1), (b, 1), (b, 1)]);
        check_valid(&c, &d);
    }

    #[test]
    fn skips_nodes_that_are_not_running_and_counts_existing_allocations() {
        let mut c = Cluster::default();
        c.node("", res(8, 32), &[]);
        c.node("", res(8, 32), &[]);
        c.node("", res(8, 32), &[]);
        c.node("", res(8, 32), &[]);
        c.nodes[0].state = GANTRY_NODE_DRAINING;
        c.nodes[1].state = GANTRY_NODE_LOST;
        c.nodes[2].allocated = res(7, 1);
        let r = c.request(res(2, 2), 2, 0, &[]);
        let mut p = MinimalFirstFit::new();
        let d = c.place(&mut p);
        assert_eq!(placements(&d), vec![(r, 3), (r, 3)]);
    }

    #[test]
    fn places_only_what_remains() {
        let mut c = Cluster::default();
        c.node("", res(8, 32), &[]);
        let r = c.request(res(1, 1), 5, 0, &[]);
        c.requests[r as usize].placed = 3;
        let d = c.place(&mut MinimalFirstFit::new());
        assert_eq!(placements(&d), vec![(r, 0), (r, 0)]);
    }

    #[test]
    fn partial_placement_of_plain_requests() {
        let mut c = Cluster::default();
        c.node("", res(4, 16), &[]);
        let r = c.request(res(3, 1), 5, 0, &[]);
        let d = c.place(&mut MinimalFirstFit::new());
        assert_eq!(placements(&d), vec![(r, 0)]);
    }

    #[test]
    fn gang_is_all_or_nothing() {
        let mut c = Cluster::default();
        c.node("", res(4, 16), &[]);
        c.node("", res(4, 16), &[]);
        let big = c.request(res(2, 1), 5, GANTRY_REQUEST_GANG, &[]);
        let fits = c.request(res(2, 1), 3, GANTRY_REQUEST_GANG, &[]);
        let after = c.request(res(2, 1), 2, 0, &[]);
        let d = c.place(&mut MinimalFirstFit::new());
        // The big gang takes nothing, and its rolled-back tentative placements are free again.
        assert!(d.iter().all(|d| d.subject != big));
        assert_eq!(placements(&d), vec![(fits, 0), (fits, 0), (fits, 1), (after, 1)]);
        check_valid(&c, &d);
    }

    #[test]
    fn failed_gang_rollback_frees_room_for_its_own_size() {
        let mut c = Cluster::default();
        c.node("", res(2, 16), &[]);
        c.node("", res(2, 16), &[]);
        let big = c.request(res(2, 1), 3, GANTRY_REQUEST_GANG, &[]);
        // Same size: the cursor for this size must not skip nodes the failed gang gave back.
        let same = c.request(res(2, 1), 2, GANTRY_REQUEST_GANG, &[]);
        let d = c.place(&mut MinimalFirstFit::new());
        assert!(d.iter().all(|d| d.subject != big));
        assert_eq!(placements(&d), vec![(same, 0), (same, 1)]);
    }

    #[test]
    fn same_rack_gang_stays_in_one_rack() {
        let mut c = Cluster::default();
        // Rack a: 2 nodes of 4 cores; rack b: 3 nodes of 4 cores; one node without a rack.
        c.node("", res(4, 16), &[]);
        c.node("a", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        c.node("a", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        let spread = c.request(res(2, 1), 5, GANTRY_REQUEST_GANG, &[]);
        let mut p = MinimalFirstFit::new();
        // Without the constraint, the gang spreads from the first node on.
        assert_eq!(
            placements(&c.place(&mut p)),
            vec![(spread, 0), (spread, 0), (spread, 1), (spread, 1), (spread, 2)]
        );
        // With it, rack a (4 slots) is too small, so all five go to rack b.
        c.requests[spread as usize].flags |= GANTRY_REQUEST_SAME_RACK_REQUIRED;
        let d = c.place(&mut p);
        assert_eq!(placements(&d), vec![(spread, 2), (spread, 2), (spread, 4), (spread, 4), (spread, 5)]);
        check_valid(&c, &d);
        // Seven fit in no rack: nothing at all.
        c.requests[spread as usize].count = 7;
        assert!(c.place(&mut p).is_empty());
    }

    #[test]
    fn same_rack_gangs_share_the_cluster() {
        let mut c = Cluster::default();
        c.node("a", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        c.node("a", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        let flags = GANTRY_REQUEST_GANG | GANTRY_REQUEST_SAME_RACK_REQUIRED;
        let g1 = c.request(res(2, 1), 3, flags, &[]);
        let g2 = c.request(res(2, 1), 3, flags, &[]);
        let g3 = c.request(res(2, 1), 3, flags, &[]);
        let d = c.place(&mut MinimalFirstFit::new());
        assert_eq!(placements(&d), vec![(g1, 0), (g1, 0), (g1, 2), (g2, 1), (g2, 1), (g2, 3)]);
        assert!(d.iter().all(|d| d.subject != g3));
        check_valid(&c, &d);
    }

    #[test]
    fn same_rack_plain_request_follows_its_placed_containers() {
        let mut c = Cluster::default();
        c.node("a", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        c.node("b", res(4, 16), &[]);
        let r = c.request(res(2, 1), 6, GANTRY_REQUEST_SAME_RACK_REQUIRED, &[]);
        let mut p = MinimalFirstFit::new();
        // Nothing placed yet: the first node that fits picks rack a, which holds two.
        assert_eq!(placements(&c.place(&mut p)), vec![(r, 0), (r, 0)]);
        // One already runs in rack b: the rest stay in rack b even though node 0 is empty.
        c.requests[r as usize].placed = 1;
        c.nodes[2].allocated = res(2, 1);
        c.containers.push(GantryContainer {
            id: 1,
            request: r,
            node: 2,
            state: GANTRY_CONTAINER_RUNNING,
            resources: res(2, 1),
            ..GantryContainer::default()
        });
        let d = c.place(&mut p);
        assert_eq!(placements(&d), vec![(r, 1), (r, 1), (r, 2)]);
        check_valid(&c, &d);
    }

    #[test]
    fn selectors_must_match() {
        let mut c = Cluster::default();
        c.node("", res(8, 32), &[("zone", "east")]);
        c.node("", res(8, 32), &[("zone", "west"), ("gpu", "a100")]);
        c.node("", res(8, 32), &[("gpu", "a100"), ("zone", "east")]);
        let a100 = c.request(res(1, 1), 1, 0, &[("gpu", "a100")]);
        let east_a100 = c.request(res(1, 1), 1, 0, &[("zone", "east"), ("gpu", "a100")]);
        let h100 = c.request(res(1, 1), 1, 0, &[("gpu", "h100")]);
        let none = c.request(res(1, 1), 1, GANTRY_REQUEST_GANG, &[("zone", "north")]);
        let d = c.place(&mut MinimalFirstFit::new());
        assert_eq!(placements(&d), vec![(a100, 1), (east_a100, 2)]);
        assert!(d.iter().all(|d| d.subject != h100 && d.subject != none));
        check_valid(&c, &d);
    }

    #[test]
    fn selector_mismatch_does_not_hide_nodes_from_later_requests() {
        let mut c = Cluster::default();
        c.node("", res(4, 16), &[]);
        c.node("", res(4, 16), &[("ssd", "yes")]);
        let ssd = c.request(res(1, 1), 1, 0, &[("ssd", "yes")]);
        let any = c.request(res(1, 1), 1, 0, &[]);
        let d = c.place(&mut MinimalFirstFit::new());
        assert_eq!(placements(&d), vec![(ssd, 1), (any, 0)]);
    }

    #[test]
    fn never_over_allocates() {
        let mut c = Cluster::default();
        for _ in 0..3 {
            c.node("", res(4, 8), &[]);
        }
        for _ in 0..20 {
            c.request(res(1, 3), 2, 0, &[]);
        }
        let d = c.place(&mut MinimalFirstFit::new());
        // Memory binds: two 3 GiB containers per 8 GiB node.
        assert_eq!(check_valid(&c, &d), 6);
    }

    #[test]
    fn duplicate_and_invalid_pending_entries_are_ignored() {
        let mut c = Cluster::default();
        c.node("", res(8, 32), &[]);
        let r = c.request(res(1, 1), 2, 0, &[]);
        c.pending.push(r);
        c.pending.push(999);
        let d = c.place(&mut MinimalFirstFit::new());
        assert_eq!(placements(&d), vec![(r, 0), (r, 0)]);
    }

    /// A deterministic mixed workload, checked against the reference first fit and the validity
    /// rules, over several calls with the same plugin (so reused buffers are exercised).
    #[test]
    fn matches_reference_on_mixed_workloads() {
        let mut rng = SplitMix64::new(0x2545_f491_4f6c_dd1d);
        let mut rand = move |n: u64| rng.below(n);
        let mut plugin = MinimalFirstFit::new();
        for round in 0..40 {
            let mut c = Cluster::default();
            let racks = ["", "r1", "r2", "r3", "r4"];
            let nodes = 5 + rand(60) as usize;
            for _ in 0..nodes {
                let rack = racks[rand(racks.len() as u64) as usize];
                let labels: &[(&str, &str)] = match rand(3) {
                    0 => &[],
                    1 => &[("gpu", "a100")],
                    _ => &[("disk", "ssd"), ("gpu", "h100")],
                };
                let n = c.node(
                    rack,
                    GantryResources::new(1000 * (2 + rand(14)), GIB * (4 + rand(60)), rand(3) as u32),
                    labels,
                ) as usize;
                match rand(8) {
                    0 => c.nodes[n].state = GANTRY_NODE_DRAINING,
                    1 => c.nodes[n].allocated = c.nodes[n].capacity.minus(&res(1, 2)),
                    _ => {}
                }
            }
            for _ in 0..(1 + rand(80)) {
                let flags = match rand(6) {
                    0 => GANTRY_REQUEST_GANG,
                    1 => GANTRY_REQUEST_GANG | GANTRY_REQUEST_SAME_RACK_REQUIRED,
                    2 => GANTRY_REQUEST_SAME_RACK_REQUIRED,
                    _ => 0,
                };
                let selector: &[(&str, &str)] = match rand(5) {
                    0 => &[("gpu", "a100")],
                    1 => &[("disk", "ssd")],
                    _ => &[],
                };
                let each = GantryResources::new(
                    250 * (1 + rand(16)),
                    GIB / 2 * (1 + rand(16)),
                    (rand(5) / 4) as u32,
                );
                c.request(each, 1 + rand(12) as u32, flags, selector);
            }
            let d = c.place(&mut plugin);
            check_valid(&c, &d);
            assert_eq!(placements(&d), reference(&c), "round {round}");
        }
    }

    /// A large mixed cluster, empty and then nearly full, checked against the reference first
    /// fit and the validity rules. (Speed is measured by `cargo bench`, not here.)
    #[test]
    fn large_cluster_matches_reference() {
        let mut c = Cluster::default();
        for i in 0..2_000 {
            let labels: &[(&str, &str)] = if i % 10 == 0 { &[("gpu", "a100")] } else { &[] };
            let rack = format!("rack-{}", i / 40);
            c.node(&rack, res(32, 128), labels);
        }
        for i in 0..200u64 {
            let flags = match i % 10 {
                0 => GANTRY_REQUEST_GANG,
                1 => GANTRY_REQUEST_GANG | GANTRY_REQUEST_SAME_RACK_REQUIRED,
                _ => 0,
            };
            let selector: &[(&str, &str)] = if i % 7 == 0 { &[("gpu", "a100")] } else { &[] };
            c.request(res(1 + i % 8, 1 + i % 16), 1 + (i % 50) as u32, flags, selector);
        }
        let mut plugin = MinimalFirstFit::new();
        let check = |c: &Cluster, plugin: &mut MinimalFirstFit| {
            let d = c.place(plugin);
            check_valid(c, &d);
            assert_eq!(placements(&d), reference(c));
        };
        check(&c, &mut plugin);
        // Nearly full: most nodes have 2 cores left, one in 97 has plenty.
        for (i, n) in c.nodes.iter_mut().enumerate() {
            n.allocated = if i % 97 == 0 { res(8, 32) } else { res(30, 100) };
        }
        check(&c, &mut plugin);
    }
}
