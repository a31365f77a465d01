//! Compaction: drops ended applications (into the history), their requests and ended
//! containers, renumbering what is left and every reference to it, so the arrays a view borrows
//! hold only what is live.

use super::{AppSummary, ClusterState, app_is_terminal, container_is_live};
use crate::model::*;
use gantry_sdk::View;
use gantry_sdk::abi::*;

impl ClusterState {
    /// Drops finished apps, their requests and finished containers, renumbering what is left and
    /// every reference to it; rebuilds the label pool and GPU array without orphans.
    /// Returns whether it renumbered anything (so indexes held elsewhere are stale).
    pub(crate) fn compact(&mut self) -> bool {
        if !self.dirty {
            return false;
        }
        self.dirty = false;
        self.ended_words.clear();
        let mut live_per_app = vec![0u32; self.apps.len()];
        for c in &self.containers {
            if container_is_live(c.state) {
                live_per_app[c.app as usize] += 1;
            }
        }
        // Apps.
        let mut app_map = vec![GANTRY_NONE; self.apps.len()];
        let mut kept_apps = Vec::with_capacity(self.apps.len());
        let mut kept_meta = Vec::with_capacity(self.apps.len());
        for (i, (a, m)) in self.apps.iter().zip(self.app_meta.iter()).enumerate() {
            if app_is_terminal(a.state) && live_per_app[i] == 0 {
                self.history.push_back(AppSummary {
                    id: AppId(a.id),
                    name: m.name.clone(),
                    queue: self.queue_path(a.queue).to_owned(),
                    user: self.strings.get(a.user).to_owned(),
                    state: a.state,
                    diagnostics: m.diagnostics.clone(),
                });
                continue;
            }
            app_map[i] = kept_apps.len() as u32;
            kept_apps.push(*a);
            kept_meta.push(m.clone());
        }
        while self.history.len() > self.history_len {
            self.history.pop_front();
        }
        // Requests (contiguous per app, so ranges stay contiguous).
        let mut req_map = vec![GANTRY_NONE; self.requests.len()];
        let mut kept_reqs = Vec::with_capacity(self.requests.len());
        let mut new_labels: Vec<GantryLabel> = Vec::with_capacity(self.labels.len());
        let mut copy_range = |r: GantryRange, labels: &[GantryLabel]| -> GantryRange {
            let start = new_labels.len() as u32;
            new_labels.extend_from_slice(View::range(labels, r));
            GantryRange { start, len: new_labels.len() as u32 - start }
        };
        for n in &mut self.nodes {
            n.labels = copy_range(n.labels, &self.labels);
        }
        for (i, r) in self.requests.iter().enumerate() {
            let new_app = app_map[r.app as usize];
            if new_app == GANTRY_NONE {
                continue;
            }
            req_map[i] = kept_reqs.len() as u32;
            let mut r = *r;
            r.app = new_app;
            r.selector = copy_range(r.selector, &self.labels);
            r.preferred = copy_range(r.preferred, &self.labels);
            kept_reqs.push(r);
        }
        for a in &mut kept_apps {
            a.requests.start = req_map[a.requests.start as usize];
        }
        // Containers.
        let mut cont_map = vec![GANTRY_NONE; self.containers.len()];
        let mut kept_conts = Vec::with_capacity(self.containers.len());
        let mut kept_cmeta = Vec::with_capacity(self.containers.len());
        for (i, (c, m)) in self.containers.iter().zip(self.container_meta.iter()).enumerate() {
            if !container_is_live(c.state) {
                continue;
            }
            cont_map[i] = kept_conts.len() as u32;
            let mut c = *c;
            c.app = app_map[c.app as usize];
            c.request = req_map[c.request as usize];
            kept_conts.push(c);
            kept_cmeta.push(*m);
        }
        // GPUs: drop orphans, renumber node ranges and holders.
        let mut new_gpus = Vec::with_capacity(self.gpus.len());
        for (ni, n) in self.nodes.iter_mut().enumerate() {
            let start = new_gpus.len() as u32;
            for g in View::range(&self.gpus, n.gpus) {
                let mut g = *g;
                g.node = ni as u32;
                g.container = cont_map.get(g.container as usize).copied().unwrap_or(GANTRY_NONE);
                new_gpus.push(g);
            }
            n.gpus = GantryRange { start, len: new_gpus.len() as u32 - start };
        }
        self.apps = kept_apps;
        self.app_meta = kept_meta;
        self.requests = kept_reqs;
        self.containers = kept_conts;
        self.container_meta = kept_cmeta;
        self.labels = new_labels;
        self.gpus = new_gpus;
        self.app_index = self.apps.iter().enumerate().map(|(i, a)| (a.id, i as u32)).collect();
        self.container_index = self.containers.iter().enumerate().map(|(i, c)| (c.id, i as u32)).collect();
        true
    }
}
