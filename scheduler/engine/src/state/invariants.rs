//! The bookkeeping checks: every derived figure (allocations, usage, live counts, GPU holders)
//! recomputed from the records and compared. What tests and property tests run after each step.

use super::{ClusterState, container_is_live};
use gantry_sdk::View;
use gantry_sdk::abi::*;

impl ClusterState {
    /// Checks the bookkeeping against the records: every node's and queue's allocation equals the
    /// sum of its live containers, nothing is over-allocated beyond what was allowed at placement,
    /// GPU holders are live containers on the same node, and indexes are consistent. Used by tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut node_alloc = vec![GantryResources::default(); self.nodes.len()];
        let mut queue_used = vec![GantryResources::default(); self.queues.len()];
        let mut app_used = vec![GantryResources::default(); self.apps.len()];
        for (i, c) in self.containers.iter().enumerate() {
            if !container_is_live(c.state) {
                continue;
            }
            let n = c.node as usize;
            let a = self.apps.get(c.app as usize).ok_or(format!("container {i} has bad app"))?;
            self.requests.get(c.request as usize).ok_or(format!("container {i} has bad request"))?;
            *node_alloc.get_mut(n).ok_or(format!("container {i} has bad node"))? =
                node_alloc[n].plus(&c.resources);
            app_used[c.app as usize] = app_used[c.app as usize].plus(&c.resources);
            let mut q = a.queue;
            while let Some(rec) = self.queues.get(q as usize) {
                queue_used[q as usize] = queue_used[q as usize].plus(&c.resources);
                q = rec.parent;
            }
            let held = self.gpus.iter().filter(|g| g.container == i as u32).count() as u32;
            if held != c.resources.gpus {
                return Err(format!("container {} holds {held} GPUs, wants {}", c.id, c.resources.gpus));
            }
        }
        let mut node_live = vec![0u32; self.nodes.len()];
        for c in self.containers.iter().filter(|c| container_is_live(c.state)) {
            node_live[c.node as usize] += 1;
        }
        if self.node_meta.len() != self.nodes.len() || self.node_usage.len() != self.nodes.len() {
            return Err("node side tables are not parallel to the nodes".into());
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let meta = self.node_meta[i];
            if meta.live_containers != node_live[i] {
                return Err(format!(
                    "node {i} counts {} live containers, has {}",
                    meta.live_containers, node_live[i]
                ));
            }
            if meta.idle_since_ms.is_some() != (node_live[i] == 0) && n.state != GANTRY_NODE_LOST {
                return Err(format!(
                    "node {i} idle since {:?} with {} live containers",
                    meta.idle_since_ms, node_live[i]
                ));
            }
            if n.allocated != node_alloc[i] {
                return Err(format!(
                    "node {i} allocated {:?} but containers sum to {:?}",
                    n.allocated, node_alloc[i]
                ));
            }
            if !n.allocated.fits_in(&n.capacity) {
                return Err(format!("node {i} over-allocated: {:?} > {:?}", n.allocated, n.capacity));
            }
        }
        for (i, q) in self.queues.iter().enumerate() {
            if q.used != queue_used[i] {
                return Err(format!("queue {i} used {:?} but containers sum to {:?}", q.used, queue_used[i]));
            }
        }
        for (i, a) in self.apps.iter().enumerate() {
            let live =
                self.containers.iter().filter(|c| c.app == i as u32 && container_is_live(c.state)).count();
            if self.app_meta[i].live_containers as usize != live {
                return Err(format!(
                    "app {} counts {} live containers, has {live}",
                    a.id, self.app_meta[i].live_containers
                ));
            }
            if a.used != app_used[i] {
                return Err(format!(
                    "app {} used {:?} but containers sum to {:?}",
                    a.id, a.used, app_used[i]
                ));
            }
            let completed = &self.app_meta[i].completed;
            if completed.len() != a.requests.len as usize {
                return Err(format!("app {} counts completions of {} requests", a.id, completed.len()));
            }
            for (r, &done) in View::range(&self.requests, a.requests).iter().zip(completed) {
                if done > r.placed {
                    return Err(format!("request {} completed {done} > placed {}", r.id, r.placed));
                }
                if r.app != i as u32 {
                    return Err(format!("request {} points at app {} not {i}", r.id, r.app));
                }
                if r.placed > r.count {
                    return Err(format!("request {} placed {} > count {}", r.id, r.placed, r.count));
                }
            }
        }
        for g in &self.gpus {
            if g.container != GANTRY_NONE {
                let c = self.containers.get(g.container as usize).ok_or("GPU held by bad container")?;
                if c.node != g.node || !container_is_live(c.state) {
                    return Err(format!(
                        "GPU on node {} held by container {} on node {}",
                        g.node, c.id, c.node
                    ));
                }
            }
        }
        self.check_plan_arrays()?;
        Ok(())
    }
}
