//! Hand-built views for the unit tests: the SDK's test kit ([`ViewBuilder`]) with the shapes
//! these tests add — RUNNING applications (ids from 1000), each container with a placed request of
//! its own (ids from 100 and 5000), gangs — and the derived figures (allocations, usage, pending,
//! queue capacities) settled as the engine keeps them before each view.

use gantry_sdk::View;
use gantry_sdk::abi::*;
use gantry_sdk::testkit::ViewBuilder;

/// `n` GiB of memory with `n` cores.
pub fn gib(n: u64) -> GantryResources {
    GantryResources::new(n * 1000, n << 30, 0)
}

/// The records of a test cluster. Queue 0 is `root`.
#[derive(Debug)]
pub struct Cluster {
    b: ViewBuilder,
    /// The clock the view shows.
    pub now_ms: u64,
}

impl Cluster {
    /// An empty cluster with the root queue.
    pub fn new() -> Cluster {
        let mut b = ViewBuilder::new(GANTRY_HOOK_REBALANCE);
        b.cycle = 1;
        b.queue("root", GANTRY_NONE, 1.0, 1.0);
        Cluster { b, now_ms: 0 }
    }

    /// A cluster of `n` RUNNING nodes `n0`, `n1`, … of `capacity`, without labels.
    pub fn of_nodes(n: u32, capacity: GantryResources) -> Cluster {
        let mut c = Cluster::new();
        for i in 0..n {
            c.node(&format!("n{i}"), capacity, &[]);
        }
        c
    }

    /// A RUNNING node.
    pub fn node(&mut self, name: &str, capacity: GantryResources, labels: &[(&str, &str)]) -> u32 {
        self.b.node(name, capacity).labels(labels).index()
    }

    /// Changes a node's state.
    pub fn node_state(&mut self, node: u32, state: u32) {
        self.b.nodes[node as usize].state = state;
    }

    /// A queue below `parent` with guaranteed and maximum shares of it.
    pub fn queue(&mut self, path: &str, parent: u32, guaranteed: f64, maximum: f64) -> u32 {
        self.b.queue(path, parent, guaranteed, maximum)
    }

    /// A RUNNING application of a leaf queue.
    pub fn app(&mut self, queue: u32, submit_ms: u64) -> u32 {
        let id = 1000 + self.b.apps.len() as u64;
        self.b.app(queue).id(id).state(GANTRY_APP_RUNNING).submit_ms(submit_ms).index()
    }

    /// A RUNNING container of `app` on `node` (with a request of its own, placed).
    pub fn container(
        &mut self,
        app: u32,
        node: u32,
        resources: GantryResources,
        start_ms: u64,
        master: bool,
    ) -> u32 {
        let request = self.request(app, resources, 1, &[]);
        let flags = if master { GANTRY_CONTAINER_MASTER } else { 0 };
        self.placed(request, node, start_ms).flags(flags).index()
    }

    /// A gang of `app`: one request placed on `nodes` (one container each), all started at
    /// `start_ms`.
    pub fn gang(&mut self, app: u32, nodes: &[u32], resources: GantryResources, start_ms: u64) {
        let request = self.request(app, resources, nodes.len() as u32, &[]);
        self.b.requests[request as usize].flags |= GANTRY_REQUEST_GANG;
        for &node in nodes {
            self.placed(request, node, start_ms);
        }
    }

    /// Sets a container's state (e.g. `GANTRY_CONTAINER_STOPPING`).
    pub fn container_state(&mut self, container: u32, state: u32) {
        self.b.containers[container as usize].state = state;
    }

    /// Sets an app's state.
    pub fn app_state(&mut self, app: u32, state: u32) {
        self.b.apps[app as usize].state = state;
    }

    fn request(
        &mut self,
        app: u32,
        resources: GantryResources,
        count: u32,
        selector: &[(&str, &str)],
    ) -> u32 {
        let id = 100 + self.b.requests.len() as u64;
        // These tests add the containers of different applications in any order, so a request
        // names its application without joining its range (nothing here reads the ranges).
        let r = self.b.request(GANTRY_NONE, resources, count).id(id).selector(selector).index();
        self.b.requests[r as usize].app = app;
        r
    }

    /// A RUNNING container of `request` on `node`, started at `start_ms` (ids from 5000).
    fn placed(&mut self, request: u32, node: u32, start_ms: u64) -> gantry_sdk::testkit::ContainerMut<'_> {
        let id = 5000 + self.b.containers.len() as u64;
        self.b.container(request, node).id(id).start_ms(start_ms)
    }

    /// A pending request of `app` for `count` containers, appended to the pending list.
    pub fn pending(
        &mut self,
        app: u32,
        resources: GantryResources,
        count: u32,
        selector: &[(&str, &str)],
    ) -> u32 {
        let r = self.request(app, resources, count, selector);
        self.b.pending.push(r);
        r
    }

    /// The view a hook would get (derived figures brought up to date first).
    pub fn view(&mut self) -> View<'_> {
        self.b.now_ms = self.now_ms;
        self.b.settle();
        self.b.view()
    }
}
