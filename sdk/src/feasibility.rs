//! The host's own placement rules, for a plugin to check its placements against within one call
//! — the same code the engine validates every PLACE with (ABI.md §13), so a placement this
//! tracker accepts is one the host accepts.
//!
//! A `place` hook sees the cluster as it was before the call; every container it places takes
//! room that later decisions of the same call must not count on. [`Feasibility`] keeps those
//! tentative placements: nodes' room, queues' use up their ancestry, containers placed per
//! request, and the rack a same-rack request settled on. A plugin that only wants to rank nodes
//! is then a few lines:
//!
//! ```
//! use gantry_sdk::{Decisions, Feasibility, View};
//!
//! /// Each container on the node with the most free memory that the host would accept.
//! fn most_memory(view: &View<'_>, out: &mut Decisions) {
//!     let mut fit = Feasibility::new(view);
//!     for &r in view.pending {
//!         if fit.is_gang(r) {
//!             continue; // placed whole with `try_place_gang`; this example leaves them out
//!         }
//!         while fit.left(r) > 0 {
//!             let best = (0..view.nodes.len() as u32)
//!                 .filter(|&n| fit.check(r, n).is_ok())
//!                 .max_by_key(|&n| (fit.room(n).memory_bytes, std::cmp::Reverse(n)));
//!             let Some(n) = best else { break };
//!             if fit.try_place(r, n).is_ok() {
//!                 out.place(r, n);
//!             }
//!         }
//!     }
//! }
//! ```
//!
//! The rules, in the order the host applies them: the request exists, its application is
//! admitted and it has containers left ([`Infeasible::WrongState`], [`Infeasible::TooMany`]); the
//! node exists and is `RUNNING`, carries every label of the request's selector, and has room
//! after this call's earlier placements; the request's queue and every ancestor stay within
//! `absolute_maximum`; a same-rack request stays on one rack (that of its placed containers, or
//! else of its first placement in this call); a gang is placed whole, `count` containers in one
//! call, or not at all.

use crate::abi::*;
use crate::view::View;
use std::cell::RefCell;
use std::collections::HashMap;

/// Why a placement would be refused; [`Infeasible::as_str`] is the host's name for the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Infeasible {
    /// The request index is not in the view (`unknown_subject`).
    UnknownRequest,
    /// The node index is not in the view (`unknown_node`).
    UnknownNode,
    /// The request's application is not admitted, or the request had nothing left to place
    /// when the call began (`wrong_state`).
    WrongState,
    /// The node is not `RUNNING` (`node_not_schedulable`).
    NodeNotSchedulable,
    /// The node lacks a label of the request's selector (`selector_mismatch`).
    SelectorMismatch,
    /// The node has no room left for the container (`does_not_fit`).
    DoesNotFit,
    /// The container would take its queue or an ancestor above its maximum (`queue_maximum`).
    QueueMaximum,
    /// A gang must be placed whole with [`Feasibility::try_place_gang`]: `count` nodes, once,
    /// before any member is placed (`gang_incomplete`).
    GangIncomplete,
    /// The placement leaves the rack a same-rack request is bound to (`rack_constraint`).
    RackConstraint,
    /// The request has no containers left to place in this call (`too_many`).
    TooMany,
}

impl Infeasible {
    /// The host's name for this reason (its metric label, ABI.md §13).
    pub const fn as_str(self) -> &'static str {
        match self {
            Infeasible::UnknownRequest => "unknown_subject",
            Infeasible::UnknownNode => "unknown_node",
            Infeasible::WrongState => "wrong_state",
            Infeasible::NodeNotSchedulable => "node_not_schedulable",
            Infeasible::SelectorMismatch => "selector_mismatch",
            Infeasible::DoesNotFit => "does_not_fit",
            Infeasible::QueueMaximum => "queue_maximum",
            Infeasible::GangIncomplete => "gang_incomplete",
            Infeasible::RackConstraint => "rack_constraint",
            Infeasible::TooMany => "too_many",
        }
    }
}

impl core::fmt::Display for Infeasible {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What this call has placed for one request.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Containers placed in this call.
    placed: u32,
    /// The rack a same-rack request is bound to by this call's first placement.
    rack: Option<GantryStrRef>,
}

/// A map keyed by view indexes: small integers the host lays out, so one multiplication
/// (Fibonacci hashing) spreads them; SipHash would cost a good share of a placement.
type IndexMap<V> = HashMap<u32, V, std::hash::BuildHasherDefault<IndexHasher>>;

/// The hasher of [`IndexMap`].
#[derive(Debug, Default, Clone, Copy)]
struct IndexHasher(u64);

impl std::hash::Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u32 keys are hashed; this keeps any other use correct, if slower.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Tentative placements of one call over a [`View`]; see the [module](self) documentation.
#[derive(Debug, Clone)]
pub struct Feasibility<'a> {
    view: View<'a>,
    /// Per touched node: resources placed on it by this call.
    nodes: IndexMap<GantryResources>,
    /// Per queue: resources placed under it by this call.
    queues: Vec<GantryResources>,
    /// Per touched request.
    requests: IndexMap<Progress>,
    /// Per same-rack request looked up: the rack of its placed containers (a walk over the
    /// view's containers, made once per request).
    placed_racks: RefCell<IndexMap<Option<GantryStrRef>>>,
}

impl<'a> Feasibility<'a> {
    /// A tracker with nothing placed yet, over `view` (the view of this call).
    pub fn new(view: &View<'a>) -> Self {
        Feasibility {
            view: *view,
            nodes: IndexMap::default(),
            queues: vec![GantryResources::default(); view.queues.len()],
            requests: IndexMap::default(),
            placed_racks: RefCell::new(IndexMap::default()),
        }
    }

    /// The view it tracks.
    pub fn view(&self) -> &View<'a> {
        &self.view
    }

    /// Whether request `r` is a gang (placed whole with [`Feasibility::try_place_gang`]).
    pub fn is_gang(&self, r: u32) -> bool {
        self.view.requests.get(r as usize).is_some_and(|q| q.flags & GANTRY_REQUEST_GANG != 0)
    }

    /// Containers request `r` still needs after this call's placements (0 for an unknown index).
    pub fn left(&self, r: u32) -> u32 {
        let Some(req) = self.view.requests.get(r as usize) else { return 0 };
        let now = self.requests.get(&r).map_or(0, |p| p.placed);
        req.count.saturating_sub(req.placed).saturating_sub(now)
    }

    /// Containers placed for request `r` by this call.
    pub fn placed(&self, r: u32) -> u32 {
        self.requests.get(&r).map_or(0, |p| p.placed)
    }

    /// What node `n` has left: capacity less what is allocated and what this call placed (zero
    /// for an unknown index).
    pub fn room(&self, n: u32) -> GantryResources {
        let Some(node) = self.view.nodes.get(n as usize) else { return GantryResources::default() };
        node.capacity.minus(&self.allocated(n, node))
    }

    /// Allocated on node `n`, this call's placements included.
    fn allocated(&self, n: u32, node: &GantryNode) -> GantryResources {
        self.nodes.get(&n).map_or(node.allocated, |extra| node.allocated.plus(extra))
    }

    /// Whether one more container of request `r` may go on node `n` now. Changes nothing.
    pub fn check(&self, r: u32, n: u32) -> Result<(), Infeasible> {
        let (req, queue) = self.request(r)?;
        if req.flags & GANTRY_REQUEST_GANG != 0 {
            return Err(Infeasible::GangIncomplete);
        }
        if self.left(r) == 0 {
            return Err(Infeasible::TooMany);
        }
        self.node_ok(req, queue, n)?;
        if let Some(rack) = self.bound_rack(r, req) {
            if self.view.nodes.get(n as usize).map(|x| x.rack) != Some(rack) {
                return Err(Infeasible::RackConstraint);
            }
        }
        Ok(())
    }

    /// The rack request `r` must stay on: none unless it is same-rack; else that of its placed
    /// containers, or of its first placement in this call, once there is one.
    fn bound_rack(&self, r: u32, req: &GantryRequest) -> Option<GantryStrRef> {
        if req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED == 0 {
            return None;
        }
        let placed = *self.placed_racks.borrow_mut().entry(r).or_insert_with(|| self.placed_rack(r));
        placed.or_else(|| self.requests.get(&r).and_then(|p| p.rack))
    }

    /// Whether node `n` has a place for one container of request `r` as far as the node and the
    /// queues go — running, selector, room, queue maximums — leaving out the request's gang,
    /// rack and how many it has left: to rank candidate nodes for a gang's members.
    pub fn check_node(&self, r: u32, n: u32) -> Result<(), Infeasible> {
        let (req, queue) = self.request(r)?;
        self.node_ok(req, queue, n)
    }

    /// Places one more container of request `r` on node `n` if [`Feasibility::check`] allows it,
    /// and counts it for every later check of this call.
    pub fn try_place(&mut self, r: u32, n: u32) -> Result<(), Infeasible> {
        self.check(r, n)?;
        let (req, queue) = self.request(r)?;
        let same_rack = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
        let rack = self.view.nodes.get(n as usize).map(|x| x.rack);
        let resources = req.resources;
        self.charge(n, queue, &resources, true);
        let p = self.requests.entry(r).or_default();
        p.placed += 1;
        if same_rack && p.rack.is_none() {
            p.rack = rack;
        }
        Ok(())
    }

    /// Places gang request `r` whole: one member on each of `nodes` (exactly `count` of them, a
    /// node listed once per member), or nothing. On refusal, the reason and the node that broke
    /// the rule (the first node for a wrong count).
    pub fn try_place_gang(&mut self, r: u32, nodes: &[u32]) -> Result<(), (Infeasible, u32)> {
        let first = nodes.first().copied().unwrap_or(GANTRY_NONE);
        let (req, queue) = self.request(r).map_err(|e| (e, first))?;
        if req.flags & GANTRY_REQUEST_GANG == 0 {
            return Err((Infeasible::GangIncomplete, first));
        }
        if req.placed != 0 || self.placed(r) != 0 || nodes.len() != req.count as usize {
            return Err((Infeasible::GangIncomplete, first));
        }
        let same_rack = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
        let first_rack = self.view.nodes.get(first as usize).map(|x| x.rack);
        let resources = req.resources;
        let mut failure = None;
        let mut charged = 0;
        for &n in nodes {
            if let Err(e) = self.node_ok(req, queue, n) {
                failure = Some((e, n));
                break;
            }
            if same_rack && first_rack != self.view.nodes.get(n as usize).map(|x| x.rack) {
                failure = Some((Infeasible::RackConstraint, n));
                break;
            }
            self.charge(n, queue, &resources, true);
            charged += 1;
        }
        if let Some(f) = failure {
            for &n in &nodes[..charged] {
                self.charge(n, queue, &resources, false);
            }
            return Err(f);
        }
        let p = self.requests.entry(r).or_default();
        p.placed = req.count;
        p.rack = if same_rack { first_rack } else { None };
        Ok(())
    }

    /// Whether request `r` can take placements at all: it is in the view, its application is
    /// admitted, and it had containers left when the call began.
    pub fn check_request(&self, r: u32) -> Result<(), Infeasible> {
        self.request(r).map(|_| ())
    }

    /// The request and its application's queue, if it may be placed at all.
    fn request(&self, r: u32) -> Result<(&'a GantryRequest, u32), Infeasible> {
        let req = self.view.requests.get(r as usize).ok_or(Infeasible::UnknownRequest)?;
        let app = self.view.apps.get(req.app as usize).ok_or(Infeasible::UnknownRequest)?;
        if !matches!(app.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) || req.placed >= req.count {
            return Err(Infeasible::WrongState);
        }
        Ok((req, app.queue))
    }

    /// The node rules for one container of `req` (of `queue`) on node `n`.
    fn node_ok(&self, req: &GantryRequest, queue: u32, n: u32) -> Result<(), Infeasible> {
        let node = self.view.nodes.get(n as usize).ok_or(Infeasible::UnknownNode)?;
        if node.state != GANTRY_NODE_RUNNING {
            return Err(Infeasible::NodeNotSchedulable);
        }
        if !self.view.node_matches(node, req.selector) {
            return Err(Infeasible::SelectorMismatch);
        }
        if !self.allocated(n, node).plus(&req.resources).fits_in(&node.capacity) {
            return Err(Infeasible::DoesNotFit);
        }
        if !self.queue_room(queue, &req.resources) {
            return Err(Infeasible::QueueMaximum);
        }
        Ok(())
    }

    /// Whether `queue` and each ancestor can take `res` more (a broken parent chain is cut off
    /// after as many hops as there are queues).
    fn queue_room(&self, queue: u32, res: &GantryResources) -> bool {
        let queues = self.view.queues;
        let mut q = queue;
        for _ in 0..queues.len() {
            let Some(rec) = queues.get(q as usize) else { break };
            if !rec.used.plus(&self.queues[q as usize]).plus(res).fits_in(&rec.absolute_maximum) {
                return false;
            }
            q = rec.parent;
        }
        true
    }

    /// Adds (or takes back) `res` on node `n` and up `queue`'s ancestry.
    fn charge(&mut self, n: u32, queue: u32, res: &GantryResources, add: bool) {
        let e = self.nodes.entry(n).or_default();
        *e = if add { e.plus(res) } else { e.minus(res) };
        let queues = self.view.queues;
        let mut q = queue;
        for _ in 0..queues.len() {
            let Some(rec) = queues.get(q as usize) else { break };
            let t = &mut self.queues[q as usize];
            *t = if add { t.plus(res) } else { t.minus(res) };
            q = rec.parent;
        }
    }

    /// The rack of request `r`'s placed (allocated or running) containers, if it has any.
    fn placed_rack(&self, r: u32) -> Option<GantryStrRef> {
        self.view
            .containers
            .iter()
            .find(|c| {
                c.request == r && matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
            })
            .and_then(|c| self.view.nodes.get(c.node as usize))
            .map(|n| n.rack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ViewBuilder;

    const GIB: u64 = 1 << 30;

    /// A hand-built cluster (the test kit, whose arrays it lends: `c.nodes`, `c.queues`, …) with
    /// the shapes these tests add: nodes on racks, queues known by their maximum alone,
    /// one-request apps.
    struct Cluster(ViewBuilder);

    impl Default for Cluster {
        fn default() -> Self {
            let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
            (b.cycle, b.seed) = (1, 1);
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
        fn label(&mut self, key: &str, value: &str) -> GantryRange {
            self.0.labels(&[(key, value)])
        }

        /// A running node of `cores` and 8 GiB; returns its index.
        fn node(&mut self, rack: &str, cores: u64, labels: GantryRange) -> u32 {
            let n = self.0.node("", GantryResources::new(cores * 1000, 8 * GIB, 0)).rack(rack).index();
            self.nodes[n as usize].labels = labels;
            n
        }

        /// A queue under `parent` (GANTRY_NONE for root) with an absolute maximum of `cores`.
        fn queue(&mut self, parent: u32, cores: u64) -> u32 {
            let q = self.0.queue("", parent, 0.0, 0.0);
            self.queues[q as usize].absolute_maximum = GantryResources::new(cores * 1000, 1 << 50, 0);
            q
        }

        /// An admitted one-request app in `queue`: `count` containers of `millis` CPU.
        fn request(&mut self, queue: u32, millis: u64, count: u32, flags: u32, selector: GantryRange) -> u32 {
            let app = self.0.app(queue).index();
            let r = self.0.request(app, GantryResources::new(millis, GIB, 0), count).flags(flags).index();
            self.requests[r as usize].selector = selector;
            r
        }
    }

    const NO_LABELS: GantryRange = GantryRange { start: 0, len: 0 };

    fn cluster() -> (Cluster, u32) {
        let mut c = Cluster::default();
        let root = c.queue(GANTRY_NONE, 1000);
        (c, root)
    }

    #[test]
    fn room_is_tracked_across_the_call() {
        let (mut c, root) = cluster();
        let n = c.node("r1", 4, NO_LABELS);
        let a = c.request(root, 3000, 1, 0, NO_LABELS);
        let b = c.request(root, 2000, 1, 0, NO_LABELS);
        let view = c.view();
        let mut fit = Feasibility::new(&view);
        assert_eq!(fit.room(n).cpu_millis, 4000);
        assert_eq!(fit.check(b, n), Ok(()), "alone, b fits");
        assert_eq!(fit.try_place(a, n), Ok(()));
        assert_eq!(fit.room(n).cpu_millis, 1000);
        assert_eq!(fit.check(b, n), Err(Infeasible::DoesNotFit), "a took the room");
        assert_eq!((fit.placed(a), fit.left(a)), (1, 0));
        assert_eq!(fit.try_place(a, n), Err(Infeasible::TooMany));
    }

    #[test]
    fn node_state_selector_and_unknown_indexes() {
        let (mut c, root) = cluster();
        let ssd = c.label("disk", "ssd");
        let plain = c.node("r1", 4, NO_LABELS);
        let fast = c.node("r1", 4, ssd);
        let draining = c.node("r1", 4, ssd);
        c.nodes[draining as usize].state = GANTRY_NODE_DRAINING;
        let r = c.request(root, 1000, 2, 0, ssd);
        let view = c.view();
        let mut fit = Feasibility::new(&view);
        assert_eq!(fit.check(r, plain), Err(Infeasible::SelectorMismatch));
        assert_eq!(fit.check(r, draining), Err(Infeasible::NodeNotSchedulable));
        assert_eq!(fit.check(r, 99), Err(Infeasible::UnknownNode));
        assert_eq!(fit.check(99, fast), Err(Infeasible::UnknownRequest));
        assert_eq!(fit.try_place(r, fast), Ok(()));
        assert_eq!(Infeasible::SelectorMismatch.as_str(), "selector_mismatch");
    }

    #[test]
    fn queues_and_their_ancestors_stay_within_their_maximum() {
        let (mut c, root) = cluster();
        let parent = c.queue(root, 3);
        let a = c.queue(parent, 100);
        let b = c.queue(parent, 100);
        let n = c.node("r1", 16, NO_LABELS);
        let ra = c.request(a, 2000, 1, 0, NO_LABELS);
        let rb = c.request(b, 2000, 1, 0, NO_LABELS);
        let view = c.view();
        let mut fit = Feasibility::new(&view);
        assert_eq!(fit.try_place(ra, n), Ok(()));
        assert_eq!(fit.check(rb, n), Err(Infeasible::QueueMaximum), "the parent is at 2 of 3 cores");
        // A parent chain that loops ends instead of hanging.
        c.queues[parent as usize].parent = a;
        let view = c.view();
        let fit = Feasibility::new(&view);
        assert_eq!(fit.check(rb, n), Ok(()));
    }

    #[test]
    fn gangs_are_placed_whole_or_not_at_all() {
        let (mut c, root) = cluster();
        let n1 = c.node("r1", 4, NO_LABELS);
        let n2 = c.node("r2", 4, NO_LABELS);
        let gang = c.request(root, 3000, 3, GANTRY_REQUEST_GANG, NO_LABELS);
        let racked =
            c.request(root, 1000, 2, GANTRY_REQUEST_GANG | GANTRY_REQUEST_SAME_RACK_REQUIRED, NO_LABELS);
        let view = c.view();
        let mut fit = Feasibility::new(&view);
        assert_eq!(fit.try_place(gang, n1), Err(Infeasible::GangIncomplete), "members one by one");
        assert_eq!(fit.check_node(gang, n1), Ok(()), "but a member would fit on n1");
        assert_eq!(fit.try_place_gang(gang, &[n1, n2]), Err((Infeasible::GangIncomplete, n1)));
        assert_eq!(fit.try_place_gang(gang, &[n1, n2, n1]), Err((Infeasible::DoesNotFit, n1)));
        assert_eq!(fit.room(n1).cpu_millis, 4000, "a refused gang leaves no trace");
        assert_eq!(fit.try_place_gang(racked, &[n1, n2]), Err((Infeasible::RackConstraint, n2)));
        assert_eq!(fit.try_place_gang(racked, &[n2, n2]), Ok(()));
        assert_eq!(fit.room(n2).cpu_millis, 2000);
        assert_eq!(fit.try_place_gang(racked, &[n1, n1]), Err((Infeasible::GangIncomplete, n1)), "once");
        assert_eq!(fit.left(racked), 0);
    }

    #[test]
    fn a_same_rack_request_stays_on_its_rack() {
        let (mut c, root) = cluster();
        let a1 = c.node("ra", 4, NO_LABELS);
        let a2 = c.node("ra", 4, NO_LABELS);
        let b1 = c.node("rb", 4, NO_LABELS);
        let fresh = c.request(root, 1000, 3, GANTRY_REQUEST_SAME_RACK_REQUIRED, NO_LABELS);
        let started = c.request(root, 1000, 3, GANTRY_REQUEST_SAME_RACK_REQUIRED, NO_LABELS);
        // `started` already runs a container on rack b.
        c.requests[started as usize].placed = 1;
        c.containers.push(GantryContainer {
            request: started,
            node: b1,
            state: GANTRY_CONTAINER_RUNNING,
            ..Default::default()
        });
        let view = c.view();
        let mut fit = Feasibility::new(&view);
        assert_eq!(fit.check(fresh, b1), Ok(()), "no rack yet: any");
        assert_eq!(fit.try_place(fresh, a1), Ok(()));
        assert_eq!(fit.check(fresh, b1), Err(Infeasible::RackConstraint), "bound to rack a now");
        assert_eq!(fit.try_place(fresh, a2), Ok(()));
        assert_eq!(fit.check(started, a1), Err(Infeasible::RackConstraint), "bound to its containers' rack");
        assert_eq!(fit.try_place(started, b1), Ok(()));
    }

    #[test]
    fn requests_that_cannot_take_placements() {
        let (mut c, root) = cluster();
        let n = c.node("r1", 4, NO_LABELS);
        let new = c.request(root, 1000, 1, 0, NO_LABELS);
        c.apps[new as usize].state = GANTRY_APP_NEW;
        let done = c.request(root, 1000, 1, 0, NO_LABELS);
        c.requests[done as usize].placed = 1;
        let view = c.view();
        let fit = Feasibility::new(&view);
        assert_eq!(fit.check(new, n), Err(Infeasible::WrongState));
        assert_eq!(fit.check(done, n), Err(Infeasible::WrongState));
        assert_eq!(fit.check_request(done), Err(Infeasible::WrongState));
    }
}
