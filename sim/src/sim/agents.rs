//! The simulated agents: one per node, speaking the agent protocol to the controller as the real
//! agent does. An agent registers with the containers it runs and the exits not acknowledged
//! yet; a `Launch` starts its container at the end of the instant (with the others of its
//! request, whose speed depends on where all of them landed) and schedules its end after the
//! stage's (fast or slow) duration; a `Kill` stops it, at once or after its grace; every exit is
//! reported and kept until acknowledged; status reports go out at most every `status_ms`, when
//! the controller is about to be polled ([`Sim::status_round`]). An agent that hears nothing
//! from the scheduler for `fence_ms` kills its containers and reports them lost when it is heard
//! again (fencing), so that no work runs twice once the scheduler has lost the node.
//!
//! The containers running, as the agents see them, live here, with what the simulation counts of
//! them (the allocation, preemptions, work to run again); the engine's decision to stop a
//! container is counted when it is taken ([`Sim::kill_decided`]), its end when the agent reports
//! it.

use super::Sim;
use super::events::Due;
use super::scheduler::Asked;
use crate::trace::Stage;
use gantry_controller::{Input, StreamId};
use gantry_engine::{KillReason, RackAffinity, Resources};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as FromAgent;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;

/// A simulated agent.
pub(super) struct SimAgent {
    /// Its stream now; 0 while it has none.
    pub(super) stream: StreamId,
    /// Its machine runs (false: not started yet, failed, or removed by the autoscaler).
    pub(super) up: bool,
    /// Cut off from the scheduler by a partition.
    pub(super) cut: bool,
    /// When it last heard from the scheduler.
    heard_ms: u64,
    /// Exits the scheduler has not acknowledged, reported again at every registration.
    unacked: Vec<v1::ContainerExited>,
    /// Its instance id (the same across reconnects: one agent process per machine).
    instance: String,
}

impl SimAgent {
    pub(super) fn new(node: usize) -> Self {
        SimAgent {
            stream: 0,
            up: false,
            cut: false,
            heard_ms: 0,
            unacked: Vec::new(),
            instance: format!("{:032x}", node as u128 + 1),
        }
    }

    /// Its machine runs and the network lets it reach the scheduler.
    pub(super) fn reachable(&self) -> bool {
        self.up && !self.cut
    }

    /// It and the scheduler hear each other now.
    fn in_contact(&self) -> bool {
        self.reachable() && self.stream != 0
    }
}

/// A container running on an agent.
pub(super) struct Running {
    pub(super) job: usize,
    /// Index into the nodes.
    pub(super) node: usize,
    app: u64,
    /// The cluster id it was launched under.
    cluster: String,
    started_ms: u64,
    pub(super) resources: Resources,
    /// The engine has asked it to stop (or its agent was told to): its work is already counted
    /// to run again.
    pub(super) stopping: bool,
}

/// A launch an agent received: (container, app, node, resources, cluster id).
pub(super) type AgentLaunch = (u64, u64, usize, Resources, String);

/// Whether a stop takes the container's whole grace: a rebalancing victim's process uses it (a
/// later KILL cuts it short); any other process ends at once on SIGTERM.
fn uses_grace(reason: KillReason) -> bool {
    matches!(reason, KillReason::Preempted | KillReason::PolicyKill)
}

impl Sim<'_> {
    /// Node `i`'s agent opens a stream and registers with what it runs and the exits not
    /// acknowledged yet (unless it cannot reach the scheduler).
    pub(super) fn connect(&mut self, i: usize) {
        if !self.agents[i].reachable() {
            return;
        }
        let stream = self.sched.new_stream();
        let spec = &self.nodes[i];
        let containers = self
            .running
            .iter()
            .filter(|(_, r)| r.node == i)
            .map(|(&id, r)| v1::LiveContainer {
                container_id: id,
                app_id: r.app,
                state: v1::ContainerState::Running as i32,
                started_at_ms: r.started_ms,
                cluster_id: r.cluster.clone(),
            })
            .collect();
        let resources = v1::Resources {
            cpu_millis: spec.capacity.cpu_millis,
            memory_bytes: spec.capacity.memory_bytes,
            gpus: spec.capacity.gpus,
        };
        let agent = &mut self.agents[i];
        agent.stream = stream;
        agent.heard_ms = self.now;
        let register = v1::Register {
            node_name: spec.name.clone(),
            rack: spec.rack.clone(),
            labels: spec.labels.iter().cloned().collect(),
            capacity: Some(resources),
            allocatable: Some(resources),
            gpus: spec
                .gpu_list
                .iter()
                .map(|g| v1::Gpu {
                    index: g.index,
                    model: g.model.clone(),
                    memory_total_bytes: g.memory_bytes,
                    ..Default::default()
                })
                .collect(),
            containers,
            unacked_exits: agent.unacked.clone(),
            reports_cluster_ids: true,
            instance_id: agent.instance.clone(),
            ..Default::default()
        };
        let reply = self.sched.ask(Asked::Register(i));
        self.send(Input::AgentConnected { reply, stream, register });
    }

    /// A message from the controller reaches `node`'s agent on `stream` — or does not: a
    /// stream the agent no longer has is closed (the controller hears so), and a machine that
    /// is down or cut off never hears it.
    pub(super) fn deliver(&mut self, node: &str, stream: StreamId, msg: ToAgent) {
        let Some(&i) = self.node_index.get(node) else { return };
        if self.agents[i].stream != stream {
            self.send(Input::Undelivered { node: node.to_owned(), msg });
            return;
        }
        if !self.agents[i].reachable() {
            return;
        }
        self.agents[i].heard_ms = self.now;
        match msg {
            ToAgent::Launch(l) if !self.running.contains_key(&l.container_id) => {
                let resources = Resources::new(
                    u64::try_from(l.cpu_millis).unwrap_or(0),
                    u64::try_from(l.memory_bytes).unwrap_or(0),
                    l.gpus.len() as u32,
                );
                self.launching.push((l.container_id, l.app_id, i, resources, l.cluster_id));
            }
            ToAgent::Kill(k) => self.kill_received(k.container_id, k.grace_ms.unwrap_or(0)),
            ToAgent::AckExit(a) => self.agents[i]
                .unacked
                .retain(|e| !(e.container_id == a.container_id && e.cluster_id == a.cluster_id)),
            ToAgent::Ping(p) => {
                let pong = FromAgent::Pong(v1::Pong { ping_sent_at_ms: p.sent_at_ms });
                self.send(Input::AgentMessage { node: node.to_owned(), stream, msg: pong });
            }
            _ => {}
        }
    }

    /// The controller closed `stream`: its agent registers again after its delay.
    pub(super) fn stream_closed(&mut self, stream: StreamId) {
        let Some(i) = self.agents.iter().position(|a| a.stream == stream) else { return };
        self.agents[i].stream = 0;
        if self.agents[i].reachable() {
            self.push(self.now.saturating_add(self.options.daemon.reconnect_ms), Due::Reconnect(i));
            self.out_of_contact(i);
        }
    }

    /// The engine asked `container` to stop (the kill is on its way to the agent): its work
    /// runs again, and a rebalancing victim counts as preempted.
    pub(super) fn kill_decided(&mut self, container: u64, reason: KillReason) {
        // A container whose launch is still held never starts: the controller drops it.
        let Some(r) = self.running.get_mut(&container) else { return };
        if r.stopping {
            return;
        }
        r.stopping = true;
        let job = r.job;
        if uses_grace(reason) {
            self.preemptions += 1;
            self.state[job].preempted += 1;
            self.sched.kill_reasons.insert(container, reason);
        }
        self.rerun(job);
    }

    /// An agent was told to stop `container`: it exits after its grace (a rebalancing victim)
    /// or at once.
    fn kill_received(&mut self, container: u64, grace_ms: u64) {
        let Some(r) = self.running.get_mut(&container) else { return };
        if !r.stopping {
            // A kill the engine did not decide (reconciliation after a restart): its work
            // runs again too.
            r.stopping = true;
            let job = r.job;
            self.rerun(job);
        }
        let graceful = self.sched.kill_reasons.remove(&container).is_some_and(uses_grace);
        let at = if graceful { self.now.saturating_add(grace_ms) } else { self.now };
        self.push(at, Due::Killed(container));
    }

    /// Starts the launches the agents received this instant, a request's together.
    pub(super) fn start_launches(&mut self) {
        let mut launches = std::mem::take(&mut self.launching);
        // Group by application (one request each: one stage), keeping the controller's order
        // within a group.
        launches.sort_by_key(|l| l.1);
        let mut at = 0;
        while at < launches.len() {
            let app = launches[at].1;
            let end = launches[at..].iter().position(|l| l.1 != app).map_or(launches.len(), |p| at + p);
            self.start_group(&launches[at..end]);
            at = end;
        }
    }

    /// Starts the containers of one request launched together and schedules their ends.
    fn start_group(&mut self, group: &[AgentLaunch]) {
        let Some((_, app, _, _, _)) = group.first() else { return };
        let Some(&job) = self.app_job.get(app) else { return };
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
        for (container, app, node, resources, cluster) in group {
            self.launches += 1;
            self.running.insert(
                *container,
                Running {
                    job,
                    node: *node,
                    app: *app,
                    cluster: cluster.clone(),
                    started_ms: self.now,
                    resources: *resources,
                    stopping: false,
                },
            );
            self.allocated[0] += resources.cpu_millis;
            self.allocated[1] += resources.memory_bytes;
            self.allocated[2] += u64::from(resources.gpus);
            let started = v1::ContainerStarted {
                container_id: *container,
                started_at_ms: self.now,
                cluster_id: cluster.clone(),
            };
            let stream = self.agents[*node].stream;
            let node_name = self.nodes[*node].name.clone();
            self.send(Input::AgentMessage {
                node: node_name,
                stream,
                msg: FromAgent::ContainerStarted(started),
            });
            self.push(self.now.saturating_add(duration), Due::End(*container));
        }
    }

    /// Whether the stage runs fast where `group` landed: every node has the preferred labels,
    /// and a stage that prefers one rack got one rack.
    fn preferences_hold(&self, stage: &Stage, group: &[AgentLaunch]) -> bool {
        let labels_hold = group.iter().all(|&(_, _, node, _, _)| {
            let spec = &self.nodes[node];
            stage
                .preferred
                .iter()
                .all(|(k, v)| spec.labels.iter().any(|(lk, lv)| lk == k && value_matches(v, lv)))
        });
        let rack_holds = stage.rack_affinity != RackAffinity::Preferred || {
            let racks: Vec<&str> =
                group.iter().map(|&(_, _, node, _, _)| self.nodes[node].rack.as_str()).collect();
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

    /// A container ended: on its own (`killed` false, exit 0) or stopped on request. Its agent
    /// reports the exit (now, or when it is heard again).
    pub(super) fn container_ended(&mut self, container: u64, killed: bool) {
        let Some(r) = self.release(container) else {
            return; // ended, killed or lost earlier
        };
        let (reason, exit_code) =
            if killed { (v1::ExitReason::KilledByRequest, 137) } else { (v1::ExitReason::Exited, 0) };
        let exit = v1::ContainerExited {
            container_id: container,
            reason: reason as i32,
            exit_code,
            finished_at_ms: self.now,
            cluster_id: r.cluster,
            ..Default::default()
        };
        self.report_exit(r.node, exit);
    }

    /// Node `i`'s agent keeps `exit` until it is acknowledged, and sends it now if it can.
    fn report_exit(&mut self, i: usize, exit: v1::ContainerExited) {
        let agent = &mut self.agents[i];
        agent.unacked.push(exit.clone());
        if agent.in_contact() {
            let (node, stream) = (self.nodes[i].name.clone(), agent.stream);
            self.send(Input::AgentMessage { node, stream, msg: FromAgent::ContainerExited(exit) });
        }
    }

    /// The agents in contact report their status, if a round is due. Rounds are taken only
    /// when the controller is about to be polled (its liveness check reads them): between two
    /// visits of the loop an agent in contact would have reported all along, so one round
    /// dated now stands for them, and a quiet stretch of the trace costs nothing.
    pub(super) fn status_round(&mut self) {
        if self.now < self.next_status_ms || !self.ctl.counts_silence_at(self.now) {
            // Not due, or the loop jumped over more than a node timeout of quiet time: the
            // controller then counts the agents' silence from this poll on, as it does for a
            // daemon that did not run, and a round would tell it nothing.
            return;
        }
        self.next_status_ms = self.now.saturating_add(self.options.daemon.status_ms);
        for i in 0..self.agents.len() {
            // One at a time: a round is one report per node, and a queue of them all would
            // only cost memory.
            self.report_status(i);
            self.settle();
        }
    }

    /// Node `i`'s agent reports its status now, if it is in contact.
    fn report_status(&mut self, i: usize) {
        let agent = &self.agents[i];
        if agent.in_contact() {
            let status = v1::Status { seq: self.now, sent_at_ms: self.now, ..Default::default() };
            let (node, stream) = (self.nodes[i].name.clone(), agent.stream);
            self.send(Input::AgentMessage { node, stream, msg: FromAgent::Status(status) });
        }
    }

    /// Node `i`'s agent falls silent now (its machine fails or stops, or the network cuts it
    /// off): it reported until now; it fences once its fencing timeout has passed without word
    /// (`Due::Fence`), and the scheduler's liveness check is visited when the node timeout has
    /// passed (`Due::Poll`).
    pub(super) fn falls_silent(&mut self, i: usize) {
        self.report_status(i);
        self.settle();
        self.out_of_contact(i);
        let timeout = self.options.daemon.node_timeout_ms;
        // The controller checks liveness at most this often (its own interval).
        let check = (timeout / 4).clamp(1, 500);
        let lost_at = self.now.saturating_add(timeout + 1);
        // A visit half-way, so that the controller counts the silence (it does not across a
        // stretch longer than the timeout in which it was not polled).
        self.push(self.now.saturating_add(timeout / 2), Due::Poll);
        self.push(lost_at, Due::Poll);
        self.push(lost_at + check, Due::Poll);
    }

    /// Node `i`'s agent stops hearing from the scheduler now: if that lasts past its fencing
    /// timeout, it fences.
    pub(super) fn out_of_contact(&mut self, i: usize) {
        let fence_ms = self.options.daemon.fence_ms;
        if fence_ms > 0 && self.running.values().any(|r| r.node == i) {
            let at = self.agents[i].heard_ms.max(self.now).saturating_add(fence_ms + 1);
            self.push(at, Due::Fence(i));
        }
    }

    /// Node `i`'s fencing timeout may have passed: if its agent still has not heard from the
    /// scheduler for that long, it fences.
    pub(super) fn fence_if_cut_off(&mut self, i: usize) {
        let agent = &self.agents[i];
        let silent = self.now.saturating_sub(agent.heard_ms) > self.options.daemon.fence_ms;
        if agent.up && !agent.in_contact() && silent {
            self.fence(i);
        }
    }

    /// Node `i`'s agent, cut off, kills what it runs: the scheduler may have placed it
    /// elsewhere. The exits go out, as LOST, when it is heard again.
    fn fence(&mut self, i: usize) {
        let fenced: Vec<u64> = self.running.iter().filter(|(_, r)| r.node == i).map(|(&c, _)| c).collect();
        for c in fenced {
            let Some(r) = self.release(c) else { continue };
            self.sched.figures.fenced += 1;
            if !r.stopping {
                self.rerun(r.job);
            }
            self.agents[i].unacked.push(v1::ContainerExited {
                container_id: c,
                reason: v1::ExitReason::Lost as i32,
                finished_at_ms: self.now,
                cluster_id: r.cluster,
                ..Default::default()
            });
        }
    }

    /// Node `i`'s machine stops (it failed, or the autoscaler removed it) with every container
    /// on it: their resources come back, and the work of those not already stopping runs
    /// again. The scheduler is not told: it loses the node when its agent has been silent for
    /// the node timeout.
    pub(super) fn machine_down(&mut self, i: usize) {
        let lost: Vec<u64> = self.running.iter().filter(|(_, r)| r.node == i).map(|(&c, _)| c).collect();
        for c in lost {
            if let Some(r) = self.release(c).filter(|r| !r.stopping) {
                self.rerun(r.job);
            }
        }
        let agent = &mut self.agents[i];
        agent.up = false;
        agent.unacked.clear();
    }
}

/// Whether a node label value satisfies a wanted value (`A|B` accepts either).
pub(crate) fn value_matches(wanted: &str, have: &str) -> bool {
    wanted.split('|').any(|w| w == have)
}
