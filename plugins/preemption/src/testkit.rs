//! Hand-built views for the unit tests: a small owner of the record arrays a [`View`] borrows,
//! filled in the way the engine fills its own (queue capacities as shares of the RUNNING nodes,
//! node allocations and queue usage from the live containers).

use gantry_sdk::View;
use gantry_sdk::abi::*;

/// `n` GiB of memory with `n` cores.
pub fn gib(n: u64) -> GantryResources {
    GantryResources::new(n * 1000, n << 30, 0)
}

/// The records of a test cluster. Queue 0 is `root`.
#[derive(Debug, Default)]
pub struct Cluster {
    strings: Vec<u8>,
    interned: Vec<(String, GantryStrRef)>,
    labels: Vec<GantryLabel>,
    nodes: Vec<GantryNode>,
    queues: Vec<GantryQueue>,
    apps: Vec<GantryApp>,
    requests: Vec<GantryRequest>,
    containers: Vec<GantryContainer>,
    pending: Vec<u32>,
    cluster: GantryResources,
    /// The clock the view shows.
    pub now_ms: u64,
}

impl Cluster {
    /// An empty cluster with the root queue.
    pub fn new() -> Cluster {
        let mut c = Cluster::default();
        let name = c.intern("root");
        c.queues.push(GantryQueue {
            name,
            parent: GANTRY_NONE,
            guaranteed: 1.0,
            maximum: 1.0,
            ..Default::default()
        });
        c
    }

    fn intern(&mut self, s: &str) -> GantryStrRef {
        if let Some((_, r)) = self.interned.iter().find(|(k, _)| k == s) {
            return *r;
        }
        let r = GantryStrRef { offset: self.strings.len() as u32, len: s.len() as u32 };
        self.strings.extend_from_slice(s.as_bytes());
        self.interned.push((s.to_owned(), r));
        r
    }

    fn label_range(&mut self, labels: &[(&str, &str)]) -> GantryRange {
        let start = self.labels.len() as u32;
        for (k, v) in labels {
            let (key, value) = (self.intern(k), self.intern(v));
            self.labels.push(GantryLabel { key, value });
        }
        GantryRange { start, len: labels.len() as u32 }
    }

    /// A RUNNING node.
    pub fn node(&mut self, name: &str, capacity: GantryResources, labels: &[(&str, &str)]) -> u32 {
        let name = self.intern(name);
        let labels = self.label_range(labels);
        self.nodes.push(GantryNode {
            name,
            labels,
            capacity,
            state: GANTRY_NODE_RUNNING,
            ..Default::default()
        });
        self.nodes.len() as u32 - 1
    }

    /// Changes a node's state.
    pub fn node_state(&mut self, node: u32, state: u32) {
        self.nodes[node as usize].state = state;
    }

    /// A queue below `parent` with guaranteed and maximum shares of it.
    pub fn queue(&mut self, path: &str, parent: u32, guaranteed: f64, maximum: f64) -> u32 {
        let name = self.intern(path);
        self.queues[parent as usize].flags &= !GANTRY_QUEUE_LEAF;
        self.queues.push(GantryQueue {
            name,
            parent,
            flags: GANTRY_QUEUE_LEAF,
            guaranteed,
            maximum,
            ..Default::default()
        });
        self.queues.len() as u32 - 1
    }

    /// A RUNNING application of a leaf queue.
    pub fn app(&mut self, queue: u32, submit_ms: u64) -> u32 {
        let id = 1000 + self.apps.len() as u64;
        self.apps.push(GantryApp {
            id,
            queue,
            state: GANTRY_APP_RUNNING,
            attempt: 1,
            submit_ms,
            ..Default::default()
        });
        self.apps.len() as u32 - 1
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
        self.requests[request as usize].placed = 1;
        let id = 5000 + self.containers.len() as u64;
        self.containers.push(GantryContainer {
            id,
            app,
            request,
            node,
            state: GANTRY_CONTAINER_RUNNING,
            resources,
            start_ms,
            flags: if master { GANTRY_CONTAINER_MASTER } else { 0 },
            reserved: 0,
        });
        self.containers.len() as u32 - 1
    }

    /// A gang of `app`: one request placed on `nodes` (one container each), all started at
    /// `start_ms`.
    pub fn gang(&mut self, app: u32, nodes: &[u32], resources: GantryResources, start_ms: u64) {
        let request = self.request(app, resources, nodes.len() as u32, &[]);
        let r = &mut self.requests[request as usize];
        r.placed = r.count;
        r.flags |= GANTRY_REQUEST_GANG;
        for &node in nodes {
            let id = 5000 + self.containers.len() as u64;
            self.containers.push(GantryContainer {
                id,
                app,
                request,
                node,
                state: GANTRY_CONTAINER_RUNNING,
                resources,
                start_ms,
                flags: 0,
                reserved: 0,
            });
        }
    }

    /// Sets a container's state (e.g. `GANTRY_CONTAINER_STOPPING`).
    pub fn container_state(&mut self, container: u32, state: u32) {
        self.containers[container as usize].state = state;
    }

    /// Sets an app's state.
    pub fn app_state(&mut self, app: u32, state: u32) {
        self.apps[app as usize].state = state;
    }

    fn request(
        &mut self,
        app: u32,
        resources: GantryResources,
        count: u32,
        selector: &[(&str, &str)],
    ) -> u32 {
        let selector = self.label_range(selector);
        let id = 100 + self.requests.len() as u64;
        self.requests.push(GantryRequest { id, app, resources, count, selector, ..Default::default() });
        self.requests.len() as u32 - 1
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
        self.pending.push(r);
        r
    }

    /// Derived figures, as the engine keeps them: allocations, usage, pending, capacities.
    fn derive(&mut self) {
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
        let live = [GANTRY_CONTAINER_ALLOCATED, GANTRY_CONTAINER_RUNNING, GANTRY_CONTAINER_STOPPING];
        for c in &self.containers {
            if !live.contains(&c.state) {
                continue;
            }
            let n = &mut self.nodes[c.node as usize];
            n.allocated = n.allocated.plus(&c.resources);
            let a = &mut self.apps[c.app as usize];
            a.used = a.used.plus(&c.resources);
            let mut q = a.queue;
            while let Some(rec) = self.queues.get_mut(q as usize) {
                rec.used = rec.used.plus(&c.resources);
                q = rec.parent;
            }
        }
        for &ri in &self.pending {
            let r = self.requests[ri as usize];
            let mut q = self.apps[r.app as usize].queue;
            let want = r.resources.times(r.count - r.placed);
            while let Some(rec) = self.queues.get_mut(q as usize) {
                rec.pending = rec.pending.plus(&want);
                q = rec.parent;
            }
        }
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
        let scale = |r: &GantryResources, f: f64| GantryResources {
            cpu_millis: (r.cpu_millis as f64 * f).round() as u64,
            memory_bytes: (r.memory_bytes as f64 * f).round() as u64,
            gpus: (f64::from(r.gpus) * f).round() as u32,
            reserved: 0,
        };
        for i in 0..self.queues.len() {
            let q = self.queues[i];
            let (pg, pm) = match self.queues.get(q.parent as usize) {
                Some(p) => (p.absolute_guaranteed, p.absolute_maximum),
                None => (base, base),
            };
            self.queues[i].absolute_guaranteed = scale(&pg, q.guaranteed);
            self.queues[i].absolute_maximum = scale(&pm, q.maximum);
        }
    }

    /// The view a hook would get (derived figures brought up to date first).
    pub fn view(&mut self) -> View<'_> {
        self.derive();
        View {
            hook: GANTRY_HOOK_REBALANCE,
            now_ms: self.now_ms,
            cycle: 1,
            seed: 0,
            cluster: self.cluster,
            strings: &self.strings,
            labels: &self.labels,
            nodes: &self.nodes,
            gpus: &[],
            queues: &self.queues,
            apps: &self.apps,
            requests: &self.requests,
            containers: &self.containers,
            reservations: &[],
            pending: &self.pending,
            node_usage: &[],
            plan: gantry_sdk::PlanView::default(),
        }
    }
}
