//! One scheduling cycle, phase by phase: compaction and the reservation plan, **admit**, the
//! pending requests in default order, **order**, **place** (a plugin's decisions, validated, or
//! the built-in first fit), the commit of each placement, why the rest wait, and **rebalance**
//! when due.

use super::Engine;
use super::policy_health::CallResult;
use crate::det_hash::DetHashSet;
use crate::event::{Command, KillReason};
use crate::model::*;
use crate::policy::Policy;
use crate::state::ContainerMeta;
use crate::validate::{self, RebalanceAction, Rejections};
use gantry_sdk::View;
use gantry_sdk::abi::*;

impl Engine {
    pub(super) fn run_cycle(&mut self) {
        self.cycle += 1;
        self.stats.cycles += 1;
        // Last cycle's pending indexes are stale once compaction renumbers requests.
        self.pending.clear();
        self.rescan_pending |= self.state.compact();
        if let Some(book) = &mut self.book {
            book.follow(&mut self.state, self.now_ms, &mut self.commands);
        }
        self.optimize_when_due();
        self.admit_phase();
        self.rescan_pending |= self.state.compact();
        self.compute_pending();
        if !self.pending.is_empty() {
            self.order_phase();
            self.place_phase();
        }
        // Why the rest wait (and, with nothing pending, that nothing does).
        self.waiting.note(
            &mut self.state,
            &self.pending,
            &mut self.place_notes,
            self.place_policy,
            self.cycle,
        );
        self.place_notes.clear();
        if self.now_ms >= self.next_rebalance_ms {
            self.next_rebalance_ms = self.now_ms.saturating_add(self.config.rebalance_interval_ms);
            if self.profile.rebalance.is_some() {
                // Show rebalance what is still pending after this cycle's placements.
                self.compute_pending();
            }
            self.rebalance_phase();
        }
    }

    pub(super) fn admit_phase(&mut self) {
        let any_new = self.state.apps.iter().any(|a| a.state == GANTRY_APP_NEW);
        if !any_new {
            return;
        }
        let slot = self.profile.admit;
        let mut outcome = validate::AdmitOutcome::default();
        if let CallResult::Decisions = self.call(GANTRY_HOOK_ADMIT, slot) {
            let mut rej = Rejections::default();
            outcome = validate::admit(&self.state, self.buf.as_slice(), &mut rej);
            self.judge(slot, GANTRY_HOOK_ADMIT, &rej);
        }
        for (app, reason) in outcome.rejected_apps {
            self.state.apps[app as usize].state = GANTRY_APP_REJECTED;
            let msg = format!("rejected at admission (reason code {reason})");
            self.state.app_meta[app as usize].diagnostics.clone_from(&msg);
            self.state.dirty = true;
            self.app_changed(app, msg);
        }
        for i in 0..self.state.apps.len() as u32 {
            if self.state.apps[i as usize].state == GANTRY_APP_NEW {
                self.state.apps[i as usize].state = GANTRY_APP_ACCEPTED;
                self.app_changed(i, String::new());
            }
        }
    }

    /// Pending requests in the default order: app priority, request priority (both higher
    /// first), then submission time and id (FIFO). Also refreshes each queue's `pending`.
    pub(super) fn compute_pending(&mut self) {
        let st = &mut self.state;
        self.pending.clear();
        for q in &mut st.queues {
            q.pending = GantryResources::default();
        }
        let mut candidates = std::mem::take(&mut self.maybe_pending);
        if std::mem::take(&mut self.rescan_pending) {
            candidates.clear();
            candidates.extend(0..st.apps.len() as u32);
        } else {
            candidates.sort_unstable();
            candidates.dedup();
        }
        for ai in candidates {
            let Some(a) = st.apps.get(ai as usize) else { continue };
            if a.state == GANTRY_APP_NEW {
                // Not admitted yet: it may be next cycle.
                self.maybe_pending.push(ai);
                continue;
            }
            if !matches!(a.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                continue;
            }
            let mut any = false;
            let idle = st.app_meta[ai as usize].live_containers == 0;
            for ri in a.requests.start..a.requests.start + a.requests.len {
                let r = &mut st.requests[ri as usize];
                if idle && r.flags & GANTRY_REQUEST_GANG != 0 && r.placed > 0 && r.placed < r.count {
                    // Some members completed before a restart, the others are gone: a gang is
                    // placed whole, so it starts again whole (members alone would never fit).
                    r.placed = 0;
                    st.app_meta[ai as usize].completed[(ri - a.requests.start) as usize] = 0;
                }
                let r = &st.requests[ri as usize];
                debug_assert_eq!(r.app, ai);
                if r.placed < r.count {
                    any = true;
                    self.pending.push(ri);
                    let want = r.resources.times(r.count - r.placed);
                    let mut q = a.queue;
                    while let Some(rec) = st.queues.get_mut(q as usize) {
                        rec.pending = rec.pending.plus(&want);
                        q = rec.parent;
                    }
                }
            }
            if any {
                // Still pending after this cycle's placements? The next computation finds out.
                self.maybe_pending.push(ai);
            }
        }
        let (apps, requests) = (&st.apps, &st.requests);
        self.pending.sort_by_key(|&ri| {
            let r = &requests[ri as usize];
            let a = &apps[r.app as usize];
            (std::cmp::Reverse(a.priority), std::cmp::Reverse(r.priority), a.submit_ms, a.id, r.id)
        });
    }

    pub(super) fn order_phase(&mut self) {
        let slot = self.profile.order;
        if let CallResult::Decisions = self.call(GANTRY_HOOK_ORDER, slot) {
            let mut rej = Rejections::default();
            let ordered = validate::order(&self.state, &self.pending, self.buf.as_slice(), &mut rej);
            self.pending = ordered;
            self.judge(slot, GANTRY_HOOK_ORDER, &rej);
        }
    }

    pub(super) fn place_phase(&mut self) {
        let slot = self.profile.place;
        self.place_notes.clear();
        self.place_policy = None;
        let placements = match self.call(GANTRY_HOOK_PLACE, slot) {
            CallResult::Decisions => {
                let mut rej = Rejections::default();
                let p = validate::place(&self.state, self.buf.as_slice(), &mut rej, &mut self.place_notes);
                self.judge(slot, GANTRY_HOOK_PLACE, &rej);
                self.place_policy = slot.map(|i| i as u32);
                p
            }
            CallResult::Builtin => {
                if slot.is_some() {
                    self.stats.fallback_placements += 1;
                }
                let view = self.state.view(GANTRY_HOOK_PLACE, self.now_ms, self.cycle, 0, &self.pending);
                self.buf.clear();
                if let Err(e) = self.fallback.call(&view, &mut self.buf) {
                    tracing::error!(error = %e, "built-in placement failed");
                    self.buf.clear();
                }
                let mut rej = Rejections::default();
                let p = validate::place(&self.state, self.buf.as_slice(), &mut rej, &mut self.place_notes);
                self.place_notes.clear();
                debug_assert_eq!(rej.total(), 0, "built-in placement made invalid decisions");
                self.stats.rejected.merge(&rej);
                p
            }
        };
        for p in placements {
            self.commit_placement(p.request, p.node);
        }
    }

    pub(super) fn commit_placement(&mut self, request: u32, node: u32) {
        let id = self.state.next_container;
        self.state.next_container += 1;
        let idx = self.insert_container(request, node, id, None);
        let st = &self.state;
        let c = st.containers[idx as usize];
        let app = st.apps[c.app as usize];
        let gpus = View::range(&st.gpus, st.nodes[node as usize].gpus)
            .iter()
            .filter(|g| g.container == idx)
            .map(|g| g.index)
            .collect();
        self.stats.placements += 1;
        self.commands.push(Command::Launch {
            container: ContainerId(id),
            app: AppId(app.id),
            request: request - app.requests.start,
            node: NodeId(node),
            resources: c.resources,
            gpus,
        });
    }

    /// Adds a container record (ALLOCATED) for `request` on `node` and charges it everywhere;
    /// GPUs are the given indexes, or the node's first free ones. Returns its index.
    pub(super) fn insert_container(&mut self, request: u32, node: u32, id: u64, gpus: Option<&[u32]>) -> u32 {
        let st = &mut self.state;
        let req = st.requests[request as usize];
        let idx = st.containers.len() as u32;
        let meta = &mut st.node_meta[node as usize];
        meta.live_containers += 1;
        meta.idle_since_ms = None;
        let n = &mut st.nodes[node as usize];
        n.allocated = n.allocated.plus(&req.resources);
        let range = n.gpus;
        let mut taken = 0;
        for g in &mut st.gpus[range.start as usize..(range.start + range.len) as usize] {
            if taken == req.resources.gpus {
                break;
            }
            let wanted = gpus.is_none_or(|list| list.contains(&g.index));
            if g.container == GANTRY_NONE && wanted {
                g.container = idx;
                taken += 1;
            }
        }
        st.requests[request as usize].placed += 1;
        st.app_meta[req.app as usize].live_containers += 1;
        let app = &mut st.apps[req.app as usize];
        app.used = app.used.plus(&req.resources);
        let queue = app.queue;
        st.charge_queue(queue, &req.resources, true);
        let flags = if req.flags & GANTRY_REQUEST_MASTER != 0 { GANTRY_CONTAINER_MASTER } else { 0 };
        st.containers.push(GantryContainer {
            id,
            app: req.app,
            request,
            node,
            state: GANTRY_CONTAINER_ALLOCATED,
            resources: req.resources,
            start_ms: self.now_ms,
            flags,
            reserved: 0,
        });
        st.container_meta.push(ContainerMeta::default());
        st.container_index.insert(id, idx);
        idx
    }

    pub(super) fn rebalance_phase(&mut self) {
        let slot = self.profile.rebalance;
        if slot.is_none() {
            return;
        }
        if let CallResult::Decisions = self.call(GANTRY_HOOK_REBALANCE, slot) {
            let mut rej = Rejections::default();
            let actions = validate::rebalance(&self.state, self.buf.as_slice(), &mut rej);
            self.judge(slot, GANTRY_HOOK_REBALANCE, &rej);
            // The candidates are exactly this call's marks: clear the others first.
            let now = self.now_ms;
            let marked: DetHashSet<u32> = actions
                .iter()
                .filter_map(|a| match a {
                    RebalanceAction::Mark { container } => Some(*container),
                    _ => None,
                })
                .collect();
            for (i, (c, m)) in
                self.state.containers.iter_mut().zip(&mut self.state.container_meta).enumerate()
            {
                if marked.contains(&(i as u32)) {
                    c.flags |= GANTRY_CONTAINER_PREEMPT_CANDIDATE;
                    m.candidate_since_ms.get_or_insert(now);
                } else {
                    c.flags &= !GANTRY_CONTAINER_PREEMPT_CANDIDATE;
                    m.candidate_since_ms = None;
                }
            }
            for a in actions {
                match a {
                    RebalanceAction::Mark { .. } => {}
                    RebalanceAction::Preempt { container, grace_ms } => {
                        self.count_reclaimed(container);
                        self.stop_container(container, grace_ms, KillReason::Preempted);
                        self.repend(container);
                    }
                    RebalanceAction::Kill { container } => {
                        self.count_reclaimed(container);
                        self.stop_container(container, 0, KillReason::PolicyKill);
                        self.repend(container);
                    }
                    RebalanceAction::SetQueueCapacity { queue, guaranteed } => {
                        self.state.queues[queue as usize].guaranteed = guaranteed;
                        self.state.recompute_capacity();
                    }
                }
            }
        }
    }
}
