//! What the simulated agents do with the engine's commands: a `Launch` starts its container at
//! once and schedules its end after the stage's (fast or slow) duration; a `Kill` stops it, at
//! once or after its grace; a container's end or a node's loss gives its resources back and, if
//! its work did not finish, has it run again. The containers running, as the agents see them,
//! live here; application state changes go to the jobs (`jobs.rs`), reservation changes to
//! `reservations.rs`.

use super::Sim;
use super::events::Due;
use crate::trace::Stage;
use gantry_engine::{AppId, Command, ContainerId, Event, KillReason, NodeId, RackAffinity, Resources};

/// A running container as the simulated agent sees it.
pub(super) struct Running {
    pub(super) job: usize,
    pub(super) node: u32,
    pub(super) resources: Resources,
    /// Told to stop (its exit is due); its work is already counted to run again.
    pub(super) stopping: bool,
}

/// A launch as the agents carry it out: (container, application, request, node, resources).
type AgentLaunch = (ContainerId, AppId, u32, NodeId, Resources);

impl Sim<'_> {
    /// Applies the engine's commands as obedient agents would.
    pub(super) fn apply(&mut self, cmds: Vec<Command>) {
        // Launches of one request in one batch start together: their speed depends on where
        // all of them landed.
        let mut launches: Vec<AgentLaunch> = Vec::new();
        for c in cmds {
            match c {
                Command::Launch { container, app, request, node, resources, .. } => {
                    launches.push((container, app, request, node, resources));
                }
                Command::Kill { container, reason, grace_ms, .. } => self.kill(container, reason, grace_ms),
                Command::AppStateChanged { app, state, .. } => self.app_state(app, state),
                Command::ReservationReplanned { reservation, .. } => self.reservation_replanned(reservation),
                Command::ReservationEnded { reservation, why } => self.reservation_ended(reservation, why),
                Command::AppAccepted { .. }
                | Command::ReservationAdmitted { .. }
                | Command::ReservationRejected { .. } => {}
            }
        }
        self.start_launches(launches);
    }

    /// Stops a container: a rebalancing victim exits after its whole grace, any other at once.
    fn kill(&mut self, container: ContainerId, reason: KillReason, grace_ms: u64) {
        let Some(r) = self.running.get_mut(&container.0) else { return };
        let (job, first) = (r.job, !r.stopping);
        r.stopping = true;
        let rebalancing = matches!(reason, KillReason::Preempted | KillReason::PolicyKill);
        if first {
            if rebalancing {
                self.preemptions += 1;
                self.state[job].preempted += 1;
            }
            // The engine has put its request back: the work runs again.
            self.rerun(job);
        }
        // A rebalancing victim uses its whole grace (a later KILL cuts it short);
        // any other process ends at once on SIGTERM.
        let at = if rebalancing { self.now.saturating_add(grace_ms) } else { self.now };
        self.push(at, Due::Killed(container.0));
    }

    fn start_launches(&mut self, mut launches: Vec<AgentLaunch>) {
        // Group by (app, request), keeping the engine's order within a group.
        launches.sort_by_key(|l| (l.1.0, l.2));
        let mut at = 0;
        while at < launches.len() {
            let key = (launches[at].1, launches[at].2);
            let end =
                launches[at..].iter().position(|l| (l.1, l.2) != key).map_or(launches.len(), |p| at + p);
            self.start_group(&launches[at..end]);
            at = end;
        }
    }

    /// Starts the containers of one request launched together and schedules their ends.
    fn start_group(&mut self, group: &[AgentLaunch]) {
        let Some(&(_, app, _, _, _)) = group.first() else { return };
        let Some(&job) = self.app_job.get(&app.0) else { return };
        let stage = &self.jobs[job].stages[self.state[job].stage.min(self.jobs[job].stages.len() - 1)];
        let fast = self.preferences_hold(stage, group);
        let duration = if fast { stage.duration_ms } else { stage.slow_duration_ms };
        if !fast {
            self.state[job].ran_slow = true;
        }
        if self.state[job].started.is_none() {
            self.state[job].started = Some(self.now);
            self.not_started -= 1;
        }
        let unplaced = self.state[job].unplaced.saturating_sub(group.len() as u32);
        self.set_unplaced(job, unplaced);
        for &(container, _, _, node, resources) in group {
            self.launches += 1;
            self.running.insert(container.0, Running { job, node: node.0, resources, stopping: false });
            self.allocated[0] += resources.cpu_millis;
            self.allocated[1] += resources.memory_bytes;
            self.allocated[2] += u64::from(resources.gpus);
            self.event(Event::ContainerStarted { container });
            self.push(self.now.saturating_add(duration), Due::End(container.0));
        }
    }

    /// Whether the stage runs fast where `group` landed: every node has the preferred labels,
    /// and a stage that prefers one rack got one rack.
    fn preferences_hold(&self, stage: &Stage, group: &[AgentLaunch]) -> bool {
        let st = self.engine.state();
        let labels_hold = group.iter().all(|&(_, _, _, node, _)| {
            let Some(n) = st.nodes().get(node.0 as usize) else { return false };
            let name = st.str(n.name);
            let Some(spec) = self.nodes.iter().find(|s| s.name == name) else { return false };
            stage
                .preferred
                .iter()
                .all(|(k, v)| spec.labels.iter().any(|(lk, lv)| lk == k && value_matches(v, lv)))
        });
        let rack_holds = stage.rack_affinity != RackAffinity::Preferred || {
            let racks: Vec<&str> = group
                .iter()
                .map(|&(_, _, _, node, _)| {
                    self.rack_of.get(self.node_name(node.0)).map_or("", String::as_str)
                })
                .collect();
            racks.windows(2).all(|w| w[0] == w[1]) && racks.first().is_some_and(|r| !r.is_empty())
        };
        labels_hold && rack_holds
    }

    fn release(&mut self, container: u64) -> Option<Running> {
        let r = self.running.remove(&container)?;
        self.allocated[0] -= r.resources.cpu_millis;
        self.allocated[1] -= r.resources.memory_bytes;
        self.allocated[2] -= u64::from(r.resources.gpus);
        Some(r)
    }

    /// A container ended with `code`; true if a cycle should follow.
    pub(super) fn container_ended(&mut self, container: u64, code: i32) -> bool {
        let Some(r) = self.release(container) else {
            return false; // ended, killed or lost earlier
        };
        if code != 0 && !r.stopping {
            self.rerun(r.job);
        }
        self.event(Event::container_exited(ContainerId(container), code));
        true
    }

    /// Node `node` is gone with every container on it: their resources come back, and the work
    /// of those not already stopping runs again. The engine is not told here (the caller says
    /// the node is lost).
    pub(super) fn lose_containers(&mut self, node: &str) {
        let lost: Vec<u64> =
            self.running.iter().filter(|(_, r)| self.node_name(r.node) == node).map(|(&c, _)| c).collect();
        for c in lost {
            if let Some(r) = self.release(c).filter(|r| !r.stopping) {
                self.rerun(r.job);
            }
        }
    }

    /// The name of the engine's node `node` ("" if it has none).
    pub(super) fn node_name(&self, node: u32) -> &str {
        let st = self.engine.state();
        st.nodes().get(node as usize).map_or("", |n| st.str(n.name))
    }
}

/// Whether a node label value satisfies a wanted value (`A|B` accepts either).
pub(crate) fn value_matches(wanted: &str, have: &str) -> bool {
    wanted.split('|').any(|w| w == have)
}
