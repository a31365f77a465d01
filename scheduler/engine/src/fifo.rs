//! The built-in placement policy: first-fit in FIFO order. It answers `place` when no plugin is
//! configured for it, and whenever the configured one is quarantined, so the cluster keeps
//! running whatever a plugin does. It respects everything the validator checks (selectors, rack
//! constraints, gangs, node capacity, queue maximums), so its decisions are never rejected.

use crate::det_hash::DetHashMap;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

/// First-fit FIFO placement.
#[derive(Debug, Default)]
pub struct FirstFitFifo {
    node_alloc: Vec<GantryResources>,
    queue_used: Vec<GantryResources>,
    gang_nodes: Vec<u32>,
    /// Per request shape (size and selector), the first node that might still fit it in this
    /// cycle. Allocations only grow within a cycle, so a node that did not fit a shape never
    /// will: first fit stays O(nodes + containers) per cycle instead of O(nodes × containers).
    cursors: DetHashMap<(u64, u64, u32, u32, u32), usize>,
}

impl FirstFitFifo {
    /// Whether `queue` and all its ancestors have room for `res` more.
    fn queue_has_room(&self, view: &View<'_>, mut queue: u32, res: &GantryResources) -> bool {
        let mut hops = 0;
        while let Some(q) = view.queues.get(queue as usize) {
            let used = self.queue_used[queue as usize].plus(res);
            if !used.fits_in(&q.absolute_maximum) {
                return false;
            }
            queue = q.parent;
            hops += 1;
            if hops > view.queues.len() {
                return false; // a cycle: refuse rather than loop
            }
        }
        true
    }

    fn charge_queue(&mut self, view: &View<'_>, mut queue: u32, res: &GantryResources) {
        let mut hops = 0;
        while let Some(q) = view.queues.get(queue as usize) {
            self.queue_used[queue as usize] = self.queue_used[queue as usize].plus(res);
            queue = q.parent;
            hops += 1;
            if hops > view.queues.len() {
                return;
            }
        }
    }

    fn node_ok(&self, view: &View<'_>, i: usize, req: &GantryRequest, rack: Option<GantryStrRef>) -> bool {
        let n = &view.nodes[i];
        n.state == GANTRY_NODE_RUNNING
            && rack.is_none_or(|r| r == n.rack)
            && view.node_matches(n, req.selector)
            && self.node_alloc[i].plus(&req.resources).fits_in(&n.capacity)
    }

    /// Finds `count` slots for a gang, all in one rack if `rack` is given; charges nothing.
    fn find_gang(&mut self, view: &View<'_>, req: &GantryRequest, rack: Option<GantryStrRef>) -> bool {
        self.gang_nodes.clear();
        let mut extra: Vec<(usize, GantryResources)> = Vec::new();
        for i in 0..view.nodes.len() {
            loop {
                if self.gang_nodes.len() == req.count as usize {
                    break;
                }
                if !self.node_ok(view, i, req, rack) {
                    break;
                }
                // Tentatively take the slot so the next member sees it.
                self.node_alloc[i] = self.node_alloc[i].plus(&req.resources);
                extra.push((i, req.resources));
                self.gang_nodes.push(i as u32);
            }
            if self.gang_nodes.len() == req.count as usize {
                break;
            }
        }
        for (i, r) in extra {
            self.node_alloc[i] = self.node_alloc[i].minus(&r);
        }
        self.gang_nodes.len() == req.count as usize
    }
}

impl Plugin for FirstFitFifo {
    const NAME: &'static core::ffi::CStr = c"builtin-first-fit-fifo";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Ok(FirstFitFifo::default())
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.node_alloc.clear();
        self.node_alloc.extend(view.nodes.iter().map(|n| n.allocated));
        self.queue_used.clear();
        self.queue_used.extend(view.queues.iter().map(|q| q.used));
        self.cursors.clear();
        for &r in view.pending {
            let Some(req) = view.requests.get(r as usize) else { continue };
            let Some(app) = view.apps.get(req.app as usize) else { continue };
            let remaining = req.count.saturating_sub(req.placed);
            if req.flags & GANTRY_REQUEST_GANG != 0 {
                if req.placed != 0 || !self.queue_has_room(view, app.queue, &req.resources.times(req.count)) {
                    continue;
                }
                let found = if req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0 {
                    let mut racks: Vec<GantryStrRef> = view.nodes.iter().map(|n| n.rack).collect();
                    racks.sort_by_key(|s| (s.offset, s.len));
                    racks.dedup();
                    racks.into_iter().any(|rack| self.find_gang(view, req, Some(rack)))
                } else {
                    self.find_gang(view, req, None)
                };
                if found {
                    for k in 0..self.gang_nodes.len() {
                        let node = self.gang_nodes[k];
                        self.node_alloc[node as usize] = self.node_alloc[node as usize].plus(&req.resources);
                        out.place(r, node);
                    }
                    self.charge_queue(view, app.queue, &req.resources.times(req.count));
                }
                continue;
            }
            // A same-rack request stays on the rack of its placed containers (or of its first
            // placement now).
            let same_rack = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
            let mut rack =
                if same_rack { crate::state::placed_rack(view.containers, view.nodes, r) } else { None };
            let shape = (
                req.resources.cpu_millis,
                req.resources.memory_bytes,
                req.resources.gpus,
                req.selector.start,
                req.selector.len,
            );
            let mut placed = 0;
            // A same-rack request's rack changes what fits; it scans from the start.
            let mut i = if same_rack { 0 } else { self.cursors.get(&shape).copied().unwrap_or(0) };
            while placed < remaining && i < view.nodes.len() {
                if !self.queue_has_room(view, app.queue, &req.resources) {
                    break;
                }
                if self.node_ok(view, i, req, rack) {
                    self.node_alloc[i] = self.node_alloc[i].plus(&req.resources);
                    self.charge_queue(view, app.queue, &req.resources);
                    out.place(r, i as u32);
                    if same_rack {
                        rack = Some(view.nodes[i].rack);
                    }
                    placed += 1;
                } else {
                    i += 1;
                }
            }
            if !same_rack {
                self.cursors.insert(shape, i);
            }
        }
        Ok(())
    }
}
