//! Hand-built views for plugin tests (cargo feature `testkit`, for `[dev-dependencies]`).
//!
//! A [`View`] only borrows: something must own the records and the string arena. A
//! [`ViewBuilder`] owns them, adds records the way the engine lays them out (strings interned, a
//! node's GPU records after it, an application's requests side by side, a container's GPUs
//! taken from its node), and lends them out with [`ViewBuilder::view`]. The record arrays are
//! public, so a test can set any field the helpers do not, or push a record that breaks the rules
//! on purpose; [`ViewBuilder::settle`] then derives what the engine derives (allocations, usage,
//! pending demand, queue capacities). Nothing here checks a plugin's decisions: the engine does
//! that, and a test that wants its checks runs the plugin inside it.
//!
//! ```
//! use gantry_sdk::abi::*;
//! use gantry_sdk::testkit::ViewBuilder;
//!
//! let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
//! let root = b.queue("root", GANTRY_NONE, 1.0, 1.0);
//! let prod = b.queue("root.prod", root, 1.0, 1.0);
//! let n = b.node("n1", GantryResources::new(8000, 32 << 30, 0)).rack("r1").labels(&[("zone", "a")]).index();
//! let app = b.app(prod).index();
//! let web = b.request(app, GantryResources::new(1000, 1 << 30, 0), 3).pending().index();
//! b.container(web, n);
//! let zone_a = b.labels(&[("zone", "a")]);
//! b.settle();
//! let view = b.view();
//! assert_eq!(view.nodes[0].allocated, GantryResources::new(1000, 1 << 30, 0));
//! assert_eq!(view.queues[prod as usize].pending, GantryResources::new(2000, 2 << 30, 0));
//! assert!(view.node_matches(&view.nodes[0], zone_a));
//! ```

use crate::abi::*;
use crate::capacity::scale;
use crate::{PlanView, View};
use std::collections::BTreeMap;

/// Owned records of a test cluster that lend themselves out as a [`View`]. See the
/// [module documentation](self).
#[derive(Debug, Clone)]
pub struct ViewBuilder {
    /// The hook the view is for (`GANTRY_HOOK_*`).
    pub hook: u32,
    /// The clock the view shows.
    pub now_ms: u64,
    /// The cycle the view shows.
    pub cycle: u64,
    /// The seed the view shows.
    pub seed: u64,
    /// Total allocatable resources of RUNNING nodes (set by [`ViewBuilder::settle`]).
    pub cluster: GantryResources,
    strings: Vec<u8>,
    interned: BTreeMap<String, GantryStrRef>,
    /// Label records (node labels, selectors, preferences).
    pub labels: Vec<GantryLabel>,
    /// Nodes.
    pub nodes: Vec<GantryNode>,
    /// GPUs, each node's side by side.
    pub gpus: Vec<GantryGpu>,
    /// Queues, parents before children.
    pub queues: Vec<GantryQueue>,
    /// Applications.
    pub apps: Vec<GantryApp>,
    /// Requests, each application's side by side.
    pub requests: Vec<GantryRequest>,
    /// Containers.
    pub containers: Vec<GantryContainer>,
    /// Reservations, parallel to `plan.details`.
    pub reservations: Vec<GantryReservation>,
    /// Pending request indexes, in scheduling order.
    pub pending: Vec<u32>,
    /// Measured usage, parallel to `nodes` (or empty: none measured).
    pub node_usage: Vec<GantryNodeUsage>,
    /// The reservation plan's side of the view.
    pub plan: PlanParts,
}

/// The reservation side of a [`ViewBuilder`]: what a [`PlanView`] borrows, owned.
#[derive(Debug, Clone)]
pub struct PlanParts {
    /// `GANTRY_RESERVE_*` in a `reserve` call, 0 otherwise.
    pub cause: u32,
    /// The reservation a `reserve` call is about, else `GANTRY_NONE`.
    pub subject: u32,
    /// Index of the plan queue, or `GANTRY_NONE`.
    pub queue: u32,
    /// What all allocations together must fit within.
    pub capacity: GantryResources,
    /// The host's follower step, ms.
    pub step_ms: u64,
    /// How far after its submission a deadline may lie, ms.
    pub horizon_ms: u64,
    /// Per reservation, parallel to `ViewBuilder::reservations`.
    pub details: Vec<GantryReservationDetail>,
    /// Every reservation's definition nodes (e.g. `gantry_rdl::abi::push_nodes(&expr, &mut
    /// b.plan.rdl_nodes)`, which returns the root's index for [`ViewBuilder::reservation`]).
    pub rdl_nodes: Vec<GantryRdlNode>,
    /// Every reservation's accepted allocation.
    pub allocations: Vec<GantryAllocation>,
}

impl Default for PlanParts {
    /// No plan (as [`PlanView::EMPTY`]).
    fn default() -> Self {
        PlanParts {
            cause: 0,
            subject: GANTRY_NONE,
            queue: GANTRY_NONE,
            capacity: GantryResources::default(),
            step_ms: 0,
            horizon_ms: 0,
            details: Vec::new(),
            rdl_nodes: Vec::new(),
            allocations: Vec::new(),
        }
    }
}

impl PlanParts {
    /// The plan as a view borrows it.
    pub fn view(&self) -> PlanView<'_> {
        PlanView {
            cause: self.cause,
            subject: self.subject,
            queue: self.queue,
            capacity: self.capacity,
            step_ms: self.step_ms,
            horizon_ms: self.horizon_ms,
            details: &self.details,
            rdl_nodes: &self.rdl_nodes,
            allocations: &self.allocations,
        }
    }
}

/// Whether a container state holds resources (allocated, running or stopping), as the engine
/// counts it.
fn is_live(state: u32) -> bool {
    matches!(state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING | GANTRY_CONTAINER_STOPPING)
}

impl ViewBuilder {
    /// Nothing yet, for `hook`: as [`View::empty`], clock, cycle and seed at 0.
    pub fn new(hook: u32) -> Self {
        ViewBuilder {
            hook,
            now_ms: 0,
            cycle: 0,
            seed: 0,
            cluster: GantryResources::default(),
            strings: Vec::new(),
            interned: BTreeMap::new(),
            labels: Vec::new(),
            nodes: Vec::new(),
            gpus: Vec::new(),
            queues: Vec::new(),
            apps: Vec::new(),
            requests: Vec::new(),
            containers: Vec::new(),
            reservations: Vec::new(),
            pending: Vec::new(),
            node_usage: Vec::new(),
            plan: PlanParts::default(),
        }
    }

    /// The view of everything added: the builder's arrays, borrowed.
    pub fn view(&self) -> View<'_> {
        View {
            hook: self.hook,
            now_ms: self.now_ms,
            cycle: self.cycle,
            seed: self.seed,
            cluster: self.cluster,
            strings: &self.strings,
            labels: &self.labels,
            nodes: &self.nodes,
            gpus: &self.gpus,
            queues: &self.queues,
            apps: &self.apps,
            requests: &self.requests,
            containers: &self.containers,
            reservations: &self.reservations,
            pending: &self.pending,
            node_usage: &self.node_usage,
            plan: self.plan.view(),
        }
    }

    /// The reference of `text` in the arena, added if new: equal strings get equal references,
    /// as from the engine. The empty string is `{0, 0}`.
    pub fn intern(&mut self, text: &str) -> GantryStrRef {
        if text.is_empty() {
            return GantryStrRef::default();
        }
        if let Some(&r) = self.interned.get(text) {
            return r;
        }
        let r = GantryStrRef { offset: self.strings.len() as u32, len: text.len() as u32 };
        self.strings.extend_from_slice(text.as_bytes());
        self.interned.insert(text.to_owned(), r);
        r
    }

    /// Appends label records (`key = value` each) and returns their range: a node's labels, a
    /// request's selector or preferences.
    pub fn labels(&mut self, pairs: &[(&str, &str)]) -> GantryRange {
        let start = self.labels.len() as u32;
        for (k, v) in pairs {
            let label = GantryLabel { key: self.intern(k), value: self.intern(v) };
            self.labels.push(label);
        }
        GantryRange { start, len: pairs.len() as u32 }
    }

    /// A RUNNING node named `name` with `capacity` and, as the engine registers a node without a
    /// GPU list, `capacity.gpus` free GPU records (indexes 0, 1, …) after the others.
    pub fn node(&mut self, name: &str, capacity: GantryResources) -> NodeMut<'_> {
        let index = self.nodes.len() as u32;
        let name = self.intern(name);
        let start = self.gpus.len() as u32;
        for g in 0..capacity.gpus {
            self.gpus.push(GantryGpu { node: index, index: g, container: GANTRY_NONE, ..Default::default() });
        }
        self.nodes.push(GantryNode {
            name,
            gpus: GantryRange { start, len: capacity.gpus },
            capacity,
            state: GANTRY_NODE_RUNNING,
            ..Default::default()
        });
        NodeMut { b: self, index }
    }

    /// Sets what node `node`'s agent measured (`node_usage` grows to parallel the nodes).
    pub fn usage(&mut self, node: u32, usage: GantryNodeUsage) {
        if self.node_usage.len() < self.nodes.len() {
            self.node_usage.resize(self.nodes.len(), GantryNodeUsage::default());
        }
        self.node_usage[node as usize] = usage;
    }

    /// A queue `path` below `parent` with `guaranteed` and `maximum` shares of it; the root when
    /// `parent` is `GANTRY_NONE`. A queue below another is a leaf, and its parent no longer is.
    /// Returns its index. Absolute capacities come from [`ViewBuilder::settle`].
    pub fn queue(&mut self, path: &str, parent: u32, guaranteed: f64, maximum: f64) -> u32 {
        let name = self.intern(path);
        let flags = match self.queues.get_mut(parent as usize) {
            Some(p) => {
                p.flags &= !GANTRY_QUEUE_LEAF;
                GANTRY_QUEUE_LEAF
            }
            None => 0,
        };
        self.queues.push(GantryQueue { name, parent, flags, guaranteed, maximum, ..Default::default() });
        self.queues.len() as u32 - 1
    }

    /// An ACCEPTED application of `queue` (first attempt, submitted at 0, id its index + 1).
    pub fn app(&mut self, queue: u32) -> AppMut<'_> {
        let index = self.apps.len() as u32;
        let requests = GantryRange { start: self.requests.len() as u32, len: 0 };
        self.apps.push(GantryApp {
            id: u64::from(index) + 1,
            queue,
            state: GANTRY_APP_ACCEPTED,
            attempt: 1,
            requests,
            ..Default::default()
        });
        AppMut { b: self, index }
    }

    /// A request of application `app` for `count` containers of `resources` each (none placed,
    /// id its index + 1), added to the application's requests, which must be added one after
    /// the other. An `app` that is not an application of the builder (`GANTRY_NONE`, or any
    /// index for a plugin that does not read applications) leaves the request on its own.
    ///
    /// # Panics
    /// When another application's request came after `app`'s last one.
    pub fn request(&mut self, app: u32, resources: GantryResources, count: u32) -> RequestMut<'_> {
        let index = self.requests.len() as u32;
        if let Some(a) = self.apps.get_mut(app as usize) {
            assert_eq!(
                a.requests.start + a.requests.len,
                index,
                "the requests of application {app} must be added one after the other"
            );
            a.requests.len += 1;
        }
        self.requests.push(GantryRequest {
            id: u64::from(index) + 1,
            app,
            resources,
            count,
            ..Default::default()
        });
        RequestMut { b: self, index }
    }

    /// A RUNNING container of request `request` on node `node` (of the request's application,
    /// with its resources, started at 0, id its index + 1); the request counts one more placed,
    /// and the container holds the node's first free GPUs, as the engine gives them.
    pub fn container(&mut self, request: u32, node: u32) -> ContainerMut<'_> {
        let index = self.containers.len() as u32;
        let req = &mut self.requests[request as usize];
        req.placed += 1;
        let (app, resources) = (req.app, req.resources);
        if let Some(n) = self.nodes.get(node as usize) {
            let range = n.gpus;
            let gpus = self.gpus.get_mut(range.start as usize..(range.start + range.len) as usize);
            let free = gpus.into_iter().flatten().filter(|g| g.container == GANTRY_NONE);
            for g in free.take(resources.gpus as usize) {
                g.container = index;
            }
        }
        self.containers.push(GantryContainer {
            id: u64::from(index) + 1,
            app,
            request,
            node,
            state: GANTRY_CONTAINER_RUNNING,
            resources,
            ..Default::default()
        });
        ContainerMut { b: self, index }
    }

    /// A NEW reservation `id` whose definition's root is `definition` in `plan.rdl_nodes` with
    /// `atoms` atoms, in queue 0, over `[0, 0)` until [`ReservationMut::window`] says otherwise.
    pub fn reservation(&mut self, id: u64, definition: u32, atoms: u32) -> ReservationMut<'_> {
        let index = self.reservations.len() as u32;
        self.reservations.push(GantryReservation { id, state: GANTRY_RESERVATION_NEW, ..Default::default() });
        let allocation = GantryRange { start: self.plan.allocations.len() as u32, len: 0 };
        self.plan.details.push(GantryReservationDetail {
            definition,
            atoms,
            allocation,
            ..Default::default()
        });
        ReservationMut { b: self, index }
    }

    /// Derives what the engine keeps up to date from the records: each node's `allocated`, each
    /// application's and queue's `used` (a queue's includes its descendants') from the live
    /// containers; each queue's `pending` from the pending requests' unplaced containers; the
    /// `cluster` total of RUNNING nodes; and each queue's absolute guarantee and maximum, its
    /// shares of its parent's (the root's of RUNNING nodes' capacity plus what draining and
    /// unhealthy nodes hold), rounded down.
    pub fn settle(&mut self) {
        for n in &mut self.nodes {
            n.allocated = GantryResources::default();
        }
        for q in &mut self.queues {
            q.used = GantryResources::default();
            q.pending = GantryResources::default();
        }
        for a in &mut self.apps {
            a.used = GantryResources::default();
        }
        for c in self.containers.iter().filter(|c| is_live(c.state)) {
            if let Some(n) = self.nodes.get_mut(c.node as usize) {
                n.allocated = n.allocated.plus(&c.resources);
            }
            if let Some(a) = self.apps.get_mut(c.app as usize) {
                a.used = a.used.plus(&c.resources);
                Self::charge(&mut self.queues, a.queue, &c.resources, |q| &mut q.used);
            }
        }
        for &r in &self.pending {
            let Some(req) = self.requests.get(r as usize) else { continue };
            let Some(app) = self.apps.get(req.app as usize) else { continue };
            let want = req.resources.times(req.count.saturating_sub(req.placed));
            Self::charge(&mut self.queues, app.queue, &want, |q| &mut q.pending);
        }
        let crate::capacity::Capacity { cluster, base } = crate::capacity::capacity(&self.nodes);
        self.cluster = cluster;
        for i in 0..self.queues.len() {
            let q = self.queues[i];
            let (guaranteed, maximum) = match self.queues.get(q.parent as usize) {
                Some(p) => (p.absolute_guaranteed, p.absolute_maximum),
                None => (base, base),
            };
            self.queues[i].absolute_guaranteed = scale(&guaranteed, q.guaranteed);
            self.queues[i].absolute_maximum = scale(&maximum, q.maximum);
        }
    }

    /// Adds `delta` to a figure of `queue` and of each of its ancestors.
    fn charge(
        queues: &mut [GantryQueue],
        queue: u32,
        delta: &GantryResources,
        figure: fn(&mut GantryQueue) -> &mut GantryResources,
    ) {
        let mut q = queue;
        // A well-formed hierarchy has fewer hops than queues; the bound stops a broken one.
        for _ in 0..queues.len() {
            let Some(rec) = queues.get_mut(q as usize) else { break };
            let f = figure(rec);
            *f = f.plus(delta);
            q = rec.parent;
        }
    }
}

/// A node just added to a [`ViewBuilder`], to set more of it.
#[derive(Debug)]
pub struct NodeMut<'b> {
    b: &'b mut ViewBuilder,
    index: u32,
}

impl NodeMut<'_> {
    /// Its index in the node array.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Puts it on rack `rack`.
    pub fn rack(self, rack: &str) -> Self {
        let rack = self.b.intern(rack);
        self.b.nodes[self.index as usize].rack = rack;
        self
    }

    /// Gives it labels (`key = value` each).
    pub fn labels(self, pairs: &[(&str, &str)]) -> Self {
        let labels = self.b.labels(pairs);
        self.b.nodes[self.index as usize].labels = labels;
        self
    }

    /// Sets its state (`GANTRY_NODE_*`).
    pub fn state(self, state: u32) -> Self {
        self.b.nodes[self.index as usize].state = state;
        self
    }

    /// Names its GPU model, on the node and each of its GPU records, with each GPU's memory.
    pub fn gpu_model(self, model: &str, memory_bytes: u64) -> Self {
        let model = self.b.intern(model);
        let n = &mut self.b.nodes[self.index as usize];
        n.gpu_model = model;
        let range = n.gpus;
        for g in &mut self.b.gpus[range.start as usize..(range.start + range.len) as usize] {
            g.model = model;
            g.memory_bytes = memory_bytes;
        }
        self
    }
}

/// An application just added to a [`ViewBuilder`], to set more of it.
#[derive(Debug)]
pub struct AppMut<'b> {
    b: &'b mut ViewBuilder,
    index: u32,
}

impl AppMut<'_> {
    /// Its index in the application array.
    pub fn index(&self) -> u32 {
        self.index
    }

    fn record(&mut self) -> &mut GantryApp {
        &mut self.b.apps[self.index as usize]
    }

    /// Sets its id.
    pub fn id(mut self, id: u64) -> Self {
        self.record().id = id;
        self
    }

    /// Sets its state (`GANTRY_APP_*`).
    pub fn state(mut self, state: u32) -> Self {
        self.record().state = state;
        self
    }

    /// Sets when it was submitted, engine ms.
    pub fn submit_ms(mut self, submit_ms: u64) -> Self {
        self.record().submit_ms = submit_ms;
        self
    }

    /// Sets its priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.record().priority = priority;
        self
    }

    /// Sets its user.
    pub fn user(mut self, user: &str) -> Self {
        let user = self.b.intern(user);
        self.record().user = user;
        self
    }
}

/// A request just added to a [`ViewBuilder`], to set more of it.
#[derive(Debug)]
pub struct RequestMut<'b> {
    b: &'b mut ViewBuilder,
    index: u32,
}

impl RequestMut<'_> {
    /// Its index in the request array.
    pub fn index(&self) -> u32 {
        self.index
    }

    fn record(&mut self) -> &mut GantryRequest {
        &mut self.b.requests[self.index as usize]
    }

    /// Appends it to the pending requests (scheduling order is the order of these calls).
    pub fn pending(self) -> Self {
        self.b.pending.push(self.index);
        self
    }

    /// Sets its id.
    pub fn id(mut self, id: u64) -> Self {
        self.record().id = id;
        self
    }

    /// Adds `GANTRY_REQUEST_*` flags (a gang, a master, rack affinity).
    pub fn flags(mut self, flags: u32) -> Self {
        self.record().flags |= flags;
        self
    }

    /// Sets the labels a node must carry (`key = value` each; `A|B` values allow either).
    pub fn selector(mut self, pairs: &[(&str, &str)]) -> Self {
        let selector = self.b.labels(pairs);
        self.record().selector = selector;
        self
    }

    /// Sets the labels a node had better carry.
    pub fn preferred(mut self, pairs: &[(&str, &str)]) -> Self {
        let preferred = self.b.labels(pairs);
        self.record().preferred = preferred;
        self
    }

    /// Sets how many of its containers count as placed already.
    pub fn placed(mut self, placed: u32) -> Self {
        self.record().placed = placed;
        self
    }

    /// Sets its priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.record().priority = priority;
        self
    }

    /// Sets the run time expected of each container on a fast and on a slow node, ms.
    pub fn expected_ms(mut self, expected_ms: u64, slow_ms: u64) -> Self {
        let r = self.record();
        (r.expected_ms, r.slow_ms) = (expected_ms, slow_ms);
        self
    }

    /// Sets its deadline, engine ms.
    pub fn deadline_ms(mut self, deadline_ms: u64) -> Self {
        self.record().deadline_ms = deadline_ms;
        self
    }
}

/// A container just added to a [`ViewBuilder`], to set more of it.
#[derive(Debug)]
pub struct ContainerMut<'b> {
    b: &'b mut ViewBuilder,
    index: u32,
}

impl ContainerMut<'_> {
    /// Its index in the container array.
    pub fn index(&self) -> u32 {
        self.index
    }

    fn record(&mut self) -> &mut GantryContainer {
        &mut self.b.containers[self.index as usize]
    }

    /// Sets its id.
    pub fn id(mut self, id: u64) -> Self {
        self.record().id = id;
        self
    }

    /// Sets its state (`GANTRY_CONTAINER_*`).
    pub fn state(mut self, state: u32) -> Self {
        self.record().state = state;
        self
    }

    /// Sets when it started, engine ms.
    pub fn start_ms(mut self, start_ms: u64) -> Self {
        self.record().start_ms = start_ms;
        self
    }

    /// Adds `GANTRY_CONTAINER_*` flags (a master, a preemption candidate).
    pub fn flags(mut self, flags: u32) -> Self {
        self.record().flags |= flags;
        self
    }
}

/// A reservation just added to a [`ViewBuilder`], to set more of it.
#[derive(Debug)]
pub struct ReservationMut<'b> {
    b: &'b mut ViewBuilder,
    index: u32,
}

impl ReservationMut<'_> {
    /// Its index in the reservation array (and the plan's details).
    pub fn index(&self) -> u32 {
        self.index
    }

    fn detail(&mut self) -> &mut GantryReservationDetail {
        &mut self.b.plan.details[self.index as usize]
    }

    /// Sets its window: the earliest start and the deadline, engine ms.
    pub fn window(mut self, arrival_ms: u64, deadline_ms: u64) -> Self {
        let r = &mut self.b.reservations[self.index as usize];
        (r.start_ms, r.end_ms) = (arrival_ms, deadline_ms);
        let d = self.detail();
        (d.arrival_ms, d.deadline_ms) = (arrival_ms, deadline_ms);
        self
    }

    /// Sets its state (`GANTRY_RESERVATION_*`).
    pub fn state(self, state: u32) -> Self {
        self.b.reservations[self.index as usize].state = state;
        self
    }

    /// Sets its queue index.
    pub fn queue(self, queue: u32) -> Self {
        self.b.reservations[self.index as usize].queue = queue;
        self
    }

    /// Sets when it was accepted, engine ms.
    pub fn accepted_ms(mut self, accepted_ms: u64) -> Self {
        self.detail().accepted_ms = accepted_ms;
        self
    }

    /// Sets its priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.detail().priority = priority;
        self
    }

    /// Gives it an accepted allocation: `pieces` (their `reservation` set to this one) at the end
    /// of the plan's allocations.
    pub fn allocation(mut self, pieces: &[GantryAllocation]) -> Self {
        let index = self.index;
        let allocations = &mut self.b.plan.allocations;
        let start = allocations.len() as u32;
        allocations.extend(pieces.iter().map(|p| GantryAllocation { reservation: index, ..*p }));
        self.detail().allocation = GantryRange { start, len: pieces.len() as u32 };
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn strings_are_interned_and_empty_is_zero() {
        let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
        let a = b.intern("rack-1");
        assert_eq!(b.intern("rack-1"), a);
        assert_ne!(b.intern("gpu"), a);
        assert_eq!(b.intern(""), GantryStrRef::default());
        let view = b.view();
        assert_eq!((view.str(a), view.hook), ("rack-1", GANTRY_HOOK_PLACE));
    }

    #[test]
    fn containers_take_their_nodes_first_free_gpus_and_count_as_placed() {
        let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
        let n0 = b.node("n0", GantryResources::new(8000, 8 * GIB, 2)).index();
        let n1 = b.node("n1", GantryResources::new(8000, 8 * GIB, 4)).gpu_model("a100", 40 * GIB).index();
        let r = b.request(GANTRY_NONE, GantryResources::new(1000, GIB, 2), 3).index();
        let c0 = b.container(r, n1).index();
        let c1 = b.container(r, n1).index();
        let view = b.view();
        assert_eq!(view.node_gpus(&view.nodes[n0 as usize]).len(), 2);
        let held: Vec<u32> = view.node_gpus(&view.nodes[n1 as usize]).iter().map(|g| g.container).collect();
        assert_eq!(held, [c0, c0, c1, c1]);
        assert_eq!(view.str(view.gpus[2].model), "a100");
        assert_eq!(view.requests[r as usize].placed, 2);
        assert_eq!((view.containers[1].id, view.containers[1].node), (2, n1));
    }

    #[test]
    fn an_apps_requests_are_its_range() {
        let mut b = ViewBuilder::new(GANTRY_HOOK_ORDER);
        let root = b.queue("root", GANTRY_NONE, 1.0, 1.0);
        let q = b.queue("root.q", root, 1.0, 1.0);
        let a = b.app(q).id(70).index();
        let first = b.request(a, GantryResources::new(1, 1, 0), 1).index();
        b.request(a, GantryResources::new(1, 1, 0), 1);
        let other = b.app(q).index();
        b.request(other, GantryResources::new(1, 1, 0), 1);
        assert_eq!(b.apps[a as usize].requests, GantryRange { start: first, len: 2 });
        assert_eq!((b.apps[a as usize].id, b.apps[other as usize].id), (70, 2));
        assert_eq!((b.queues[root as usize].flags, b.queues[q as usize].flags), (0, GANTRY_QUEUE_LEAF));
        let late = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            b.request(a, GantryResources::new(1, 1, 0), 1);
        }));
        assert!(late.is_err(), "a request after another application's is refused");
    }

    #[test]
    fn settle_derives_allocations_usage_pending_and_capacities() {
        let mut b = ViewBuilder::new(GANTRY_HOOK_REBALANCE);
        let root = b.queue("root", GANTRY_NONE, 1.0, 1.0);
        let x = b.queue("root.x", root, 0.3, 0.5);
        let n0 = b.node("n0", GantryResources::new(10_000, 10 * GIB, 0)).index();
        let n1 = b.node("n1", GantryResources::new(10_000, 10 * GIB, 0)).state(GANTRY_NODE_DRAINING).index();
        b.node("n2", GantryResources::new(10_000, 10 * GIB, 0)).state(GANTRY_NODE_LOST);
        let app = b.app(x).index();
        let held = b.request(app, GantryResources::new(1000, GIB, 0), 2).index();
        b.container(held, n0);
        b.container(held, n1);
        b.container(held, n0).state(GANTRY_CONTAINER_KILLED);
        let want = b.request(app, GantryResources::new(2000, GIB, 0), 3).placed(1).pending().index();
        b.settle();
        let v = b.view();
        assert_eq!(
            v.nodes[n0 as usize].allocated,
            GantryResources::new(1000, GIB, 0),
            "a killed one holds nothing"
        );
        assert_eq!(v.apps[app as usize].used, GantryResources::new(2000, 2 * GIB, 0));
        assert_eq!(v.queues[root as usize].used, v.queues[x as usize].used);
        assert_eq!(v.queues[x as usize].pending, GantryResources::new(4000, 2 * GIB, 0), "request {want}");
        assert_eq!(v.cluster, GantryResources::new(10_000, 10 * GIB, 0));
        // The base is the running node plus what the draining one holds; shares round down.
        let base = GantryResources::new(11_000, 11 * GIB, 0);
        assert_eq!(v.queues[root as usize].absolute_guaranteed, base);
        assert_eq!(v.queues[x as usize].absolute_guaranteed, scale(&base, 0.3));
        assert_eq!(v.queues[x as usize].absolute_maximum, GantryResources::new(5500, 11 * GIB / 2, 0));
    }

    #[test]
    fn reservations_lay_out_their_details_and_allocations() {
        let mut b = ViewBuilder::new(GANTRY_HOOK_RESERVE);
        b.plan.rdl_nodes.push(GantryRdlNode { kind: GANTRY_RDL_ATOM, ..Default::default() });
        let piece = GantryAllocation { atom: 0, start_ms: 10, end_ms: 20, bundles: 2, reservation: 99 };
        let r0 = b
            .reservation(5, 0, 1)
            .window(0, 100)
            .state(GANTRY_RESERVATION_ACCEPTED)
            .allocation(&[piece, piece]);
        let r0 = r0.accepted_ms(3).index();
        let r1 = b.reservation(6, 0, 1).window(50, 200).allocation(&[piece]).index();
        let plan = b.view().plan;
        assert_eq!(plan.allocation(r0 as usize).len(), 2);
        assert_eq!(plan.allocation(r1 as usize)[0].reservation, r1);
        assert_eq!((plan.details[1].arrival_ms, plan.details[1].deadline_ms), (50, 200));
        assert_eq!((b.reservations[1].start_ms, b.reservations[1].end_ms), (50, 200));
        assert_eq!((plan.details[0].accepted_ms, b.reservations[0].state), (3, GANTRY_RESERVATION_ACCEPTED));
        assert_eq!((plan.subject, plan.queue), (GANTRY_NONE, GANTRY_NONE));
    }

    #[test]
    fn usage_grows_to_parallel_the_nodes() {
        let mut b = ViewBuilder::new(GANTRY_HOOK_PLACE);
        b.node("a", GantryResources::new(1000, GIB, 0));
        let n = b.node("b", GantryResources::new(1000, GIB, 0)).index();
        b.usage(n, GantryNodeUsage { cpu_millis: 500, sampled_ms: 7, ..Default::default() });
        assert_eq!(b.view().node_usage.len(), 2);
        assert_eq!((b.node_usage[0].sampled_ms, b.node_usage[1].cpu_millis), (0, 500));
    }
}
