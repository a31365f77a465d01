//! What happens to containers and applications after placement: exits, losses (of a
//! container or a whole node), stops and kills, gang restarts, and an application's end.

use super::{Engine, Reclaimed};
use crate::event::{Command, KillReason};
use crate::model::*;
use crate::state::{app_is_terminal, container_is_live};
use gantry_sdk::View;
use gantry_sdk::abi::*;

/// The diagnostics of an application killed by its user (the driver stores the same words
/// before it asks the engine, so the store and the engine agree).
pub const KILLED_BY_REQUEST: &str = "killed by request";

/// Grace period given to containers of a killed application, ms.
pub const APP_KILL_GRACE_MS: u64 = 10_000;

impl Engine {
    pub(super) fn app_changed(&mut self, app: u32, diagnostics: String) {
        let a = &self.state.apps[app as usize];
        self.commands.push(Command::AppStateChanged { app: AppId(a.id), state: a.state, diagnostics });
    }

    /// Releases a container's resources from its node, app, queues and GPUs.
    pub(super) fn release(&mut self, i: u32) {
        let now = self.now_ms;
        let st = &mut self.state;
        let c = st.containers[i as usize];
        let meta = &mut st.node_meta[c.node as usize];
        meta.live_containers = meta.live_containers.saturating_sub(1);
        if meta.live_containers == 0 {
            meta.idle_since_ms = Some(now);
        }
        let node = &mut st.nodes[c.node as usize];
        node.allocated = node.allocated.minus(&c.resources);
        let gpus = node.gpus;
        for g in &mut st.gpus[gpus.start as usize..(gpus.start + gpus.len) as usize] {
            if g.container == i {
                g.container = GANTRY_NONE;
            }
        }
        let node_state = node.state;
        let app = &mut st.apps[c.app as usize];
        app.used = app.used.minus(&c.resources);
        let queue = app.queue;
        st.charge_queue(queue, &c.resources, false);
        st.dirty = true;
        if !matches!(node_state, GANTRY_NODE_RUNNING | GANTRY_NODE_LOST) {
            // What a draining node holds is part of the queues' base (see recompute_capacity).
            st.recompute_capacity();
        }
    }

    /// Counts a container a rebalance policy stops against its leaf queue, once: one already
    /// stopping (preempted earlier and killed in its grace, or ending with its app) is not.
    pub(super) fn count_reclaimed(&mut self, container: u32) {
        let c = self.state.containers[container as usize];
        if c.state == GANTRY_CONTAINER_STOPPING {
            return;
        }
        let queue = self.state.apps[c.app as usize].queue as usize;
        let by_queue = &mut self.stats.preempted_by_queue;
        if by_queue.len() <= queue {
            by_queue.resize(queue + 1, Reclaimed::default());
        }
        by_queue[queue].containers += 1;
        by_queue[queue].resources = by_queue[queue].resources.plus(&c.resources);
    }

    /// Asks a live container to stop; it stays live (and holds resources) until its exit. A
    /// stopping container is no longer a preemption candidate.
    pub(super) fn stop_container(&mut self, i: u32, grace_ms: u64, reason: KillReason) {
        self.state.container_meta[i as usize].candidate_since_ms = None;
        let c = &mut self.state.containers[i as usize];
        c.flags &= !GANTRY_CONTAINER_PREEMPT_CANDIDATE;
        if c.state == GANTRY_CONTAINER_STOPPING && grace_ms > 0 {
            return;
        }
        if c.state != GANTRY_CONTAINER_STOPPING {
            // It no longer counts as placed for its request (a gang restart resets the whole gang).
            let r = &mut self.state.requests[c.request as usize];
            r.placed = r.placed.saturating_sub(1);
            self.maybe_pending.push(c.app);
        }
        c.state = GANTRY_CONTAINER_STOPPING;
        if reason == KillReason::Preempted {
            c.flags |= GANTRY_CONTAINER_PREEMPTING;
        }
        let meta = &mut self.state.container_meta[i as usize];
        meta.kill_reason.get_or_insert(reason);
        self.commands.push(Command::Kill {
            container: ContainerId(c.id),
            node: NodeId(c.node),
            grace_ms,
            reason,
        });
    }

    /// Ends an app: records the state and stops all its live containers.
    pub(super) fn end_app(&mut self, app: u32, state: u32, diagnostics: String, reason: KillReason) {
        self.state.apps[app as usize].state = state;
        self.state.app_meta[app as usize].diagnostics.clone_from(&diagnostics);
        self.waiting.forget(&mut self.state, app);
        self.state.dirty = true;
        self.app_changed(app, diagnostics);
        for i in 0..self.state.containers.len() as u32 {
            let c = self.state.containers[i as usize];
            if c.app == app && matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING) {
                self.stop_container(i, APP_KILL_GRACE_MS, reason);
            }
        }
    }

    /// After a restore: every gang request with some members placed (completed or restored) but
    /// not all restarts whole — its live members are stopped and its completions forgotten.
    pub(super) fn restart_partial_gangs(&mut self) {
        for ri in 0..self.state.requests.len() as u32 {
            let r = self.state.requests[ri as usize];
            if r.flags & GANTRY_REQUEST_GANG == 0 || r.placed == 0 || r.placed >= r.count {
                continue;
            }
            if !matches!(self.state.apps[r.app as usize].state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                continue;
            }
            for j in 0..self.state.containers.len() as u32 {
                let s = self.state.containers[j as usize];
                if s.request == ri && matches!(s.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
                {
                    self.stop_container(j, 0, KillReason::GangRestart);
                }
            }
            self.state.requests[ri as usize].placed = 0;
            let k = ri - self.state.apps[r.app as usize].requests.start;
            self.state.app_meta[r.app as usize].completed[k as usize] = 0;
            self.maybe_pending.push(r.app);
        }
    }

    /// Puts a container's request back to pending after the container was lost, failed or
    /// preempted. A gang restarts as a whole: its live siblings are stopped.
    pub(super) fn repend(&mut self, i: u32) {
        let c = self.state.containers[i as usize];
        let req = self.state.requests[c.request as usize];
        if req.flags & GANTRY_REQUEST_GANG != 0 {
            for j in 0..self.state.containers.len() as u32 {
                let s = self.state.containers[j as usize];
                if j != i
                    && s.request == c.request
                    && matches!(s.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
                {
                    self.stop_container(j, 0, KillReason::GangRestart);
                }
            }
            self.state.requests[c.request as usize].placed = 0;
            let k = c.request - self.state.apps[c.app as usize].requests.start;
            self.state.app_meta[c.app as usize].completed[k as usize] = 0;
            self.maybe_pending.push(c.app);
        }
    }

    /// A container ended: `words` is how, as its driver tells it (empty: its exit status).
    pub(super) fn container_exited(&mut self, i: u32, exit_code: i32, lost: bool, words: &str) {
        let c = self.state.containers[i as usize];
        let was_stopping = c.state == GANTRY_CONTAINER_STOPPING;
        let told = self.exit_words(i, exit_code, words);
        self.state.ended_words.insert(c.id, told.clone());
        self.release(i);
        let meta = &mut self.state.app_meta[c.app as usize];
        meta.live_containers = meta.live_containers.saturating_sub(1);
        let new_state = if lost {
            GANTRY_CONTAINER_LOST
        } else if was_stopping {
            GANTRY_CONTAINER_KILLED
        } else if exit_code == 0 {
            GANTRY_CONTAINER_COMPLETED
        } else {
            GANTRY_CONTAINER_FAILED
        };
        self.state.containers[i as usize].state = new_state;
        self.state.container_meta[i as usize].exit_code = Some(exit_code);
        let app = c.app;
        if app_is_terminal(self.state.apps[app as usize].state) {
            return;
        }
        if was_stopping {
            if self.state.container_meta[i as usize].kill_reason == Some(KillReason::Preempted) {
                self.state.app_meta[app as usize].diagnostics = format!("{told}; it runs again");
            }
            // Its request was put back (a gang restarted) when it was asked to stop; it may have
            // been the app's last live container.
            self.finish_if_done(app);
        } else if new_state == GANTRY_CONTAINER_COMPLETED {
            let k = c.request - self.state.apps[app as usize].requests.start;
            self.state.app_meta[app as usize].completed[k as usize] += 1;
            self.finish_if_done(app);
        } else {
            let r = &mut self.state.requests[c.request as usize];
            r.placed = r.placed.saturating_sub(1);
            self.maybe_pending.push(app);
            let meta = &mut self.state.app_meta[app as usize];
            if new_state == GANTRY_CONTAINER_FAILED {
                meta.failures += 1;
                if meta.failures >= meta.max_attempts {
                    let msg = format!("{told}; {} of {} attempts used", meta.failures, meta.max_attempts);
                    self.end_app(app, GANTRY_APP_FAILED, msg, KillReason::AppFailed);
                    return;
                }
                meta.diagnostics = format!(
                    "attempt {} of {} failed: {told}; it runs again",
                    meta.failures, meta.max_attempts
                );
                self.state.apps[app as usize].attempt = meta.failures + 1;
            } else {
                meta.diagnostics = format!("{told}; it runs again (a loss uses no attempt)");
            }
            self.repend(i);
        }
    }

    /// How container `i` ended, in words: "container 7 " and `words` (the driver's account, or
    /// else its exit status), and why the engine had asked it to stop, if it had.
    pub(super) fn exit_words(&self, i: u32, exit_code: i32, words: &str) -> String {
        let id = self.state.containers[i as usize].id;
        let how = if words.is_empty() { format!("exited with status {exit_code}") } else { words.to_owned() };
        match self.state.container_meta[i as usize].kill_reason {
            Some(reason) => format!("container {id} {how}; it had been asked to stop: {}", reason.describe()),
            None => format!("container {id} {how}"),
        }
    }

    pub(super) fn finish_if_done(&mut self, app: u32) {
        let a = self.state.apps[app as usize];
        let all_placed = View::range(&self.state.requests, a.requests).iter().all(|r| r.placed == r.count);
        if all_placed && self.state.app_meta[app as usize].live_containers == 0 {
            let msg = "all containers completed".to_owned();
            self.state.apps[app as usize].state = GANTRY_APP_FINISHED;
            self.state.app_meta[app as usize].diagnostics.clone_from(&msg);
            self.state.dirty = true;
            self.app_changed(app, msg);
        }
    }

    pub(super) fn lose_node(&mut self, node: u32) {
        self.state.nodes[node as usize].state = GANTRY_NODE_LOST;
        self.state.node_generation += 1;
        // A lost node's last measurement says nothing about the machine that comes back.
        self.state.node_usage[node as usize] = GantryNodeUsage::default();
        let words = format!(
            "was lost with its node {} (no word from its agent)",
            self.state.str(self.state.nodes[node as usize].name)
        );
        for i in 0..self.state.containers.len() as u32 {
            let c = self.state.containers[i as usize];
            if c.node == node && container_is_live(c.state) {
                self.container_exited(i, -1, true, &words);
            }
        }
        self.state.recompute_capacity();
    }
}
