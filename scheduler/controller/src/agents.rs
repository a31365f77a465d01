//! Agents: registration (one agent per node name, `node_claim.rs`), what they report on their
//! stream (usage, starts, exits, failed launches, log answers), disconnection, and liveness — an
//! agent silent for the node timeout makes its node LOST.

use crate::Controller;
use crate::commits::AfterCommit;
use crate::exit_words;
use crate::messages::StreamId;
use crate::node_claim::{self, Holder, Refused};
use crate::records::Write;
use gantry_engine::{ContainerId, EngineError, Event, GpuSpec, NodeSpec, Resources};
use gantry_proto::ClusterId;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as FromAgent;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;
use gantry_sdk::abi::*;
use std::time::Duration;

/// What the controller keeps of a connected agent.
#[derive(Debug, Clone)]
pub struct AgentLink {
    /// Its current stream; 0 once that ended (the node stays until liveness decides).
    pub(crate) stream: StreamId,
    /// When it was last heard from (the driver's clock, ms).
    pub(crate) last_seen_ms: u64,
    /// The agent's last usage report.
    pub last_status: Option<v1::Status>,
    /// It names containers by cluster id too (`Register.reports_cluster_ids`); an older agent
    /// reports none, and means the containers this scheduler addressed.
    pub(crate) reports_cluster_ids: bool,
    /// Its instance id (`Register.instance_id`; empty from an older agent): who holds the name
    /// ([`node_claim`]).
    pub(crate) instance: String,
    /// The conditions it reports now (`DiskPressure`, …): the node takes no new work while
    /// there are any (see `conditions.rs`).
    pub conditions: Vec<v1::NodeCondition>,
}

impl AgentLink {
    /// Identifies the agent's current stream (a reconnect gets a new one; 0 once it ended).
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Keeps a status report, and says what else it calls for. Every agent sends one every
    /// second, so the common case (no conditions before or now) is settled here, on the one
    /// lookup of the node that the message needed anyway.
    fn keep_status(&mut self, s: v1::Status) -> KeptStatus {
        let kept = KeptStatus {
            seq: s.seq,
            used: measured_usage(&s),
            conditions: (!s.conditions.is_empty() || !self.conditions.is_empty())
                .then(|| s.conditions.clone()),
        };
        self.last_status = Some(s);
        kept
    }
}

/// What a status report calls for once its link has kept it.
struct KeptStatus {
    /// Its sequence number, to acknowledge.
    seq: u64,
    /// What the node uses, for the engine.
    used: Option<Resources>,
    /// The conditions it reports, when they or the previous ones are not empty.
    conditions: Option<Vec<v1::NodeCondition>>,
}

/// What an agent's status says its node really uses, for plugins (`GantryView::node_usage`):
/// host CPU busy fraction × cores, memory in use, and GPUs that run something.
fn measured_usage(s: &v1::Status) -> Option<Resources> {
    let host = s.host.as_ref()?;
    let busy = if host.cpu_usage.is_finite() { host.cpu_usage.clamp(0.0, 1.0) } else { 0.0 };
    let cpu_millis = (busy * f64::from(host.cpu_cores) * 1000.0).round() as u64;
    let gpus =
        s.gpus.iter().filter(|g| !g.container_ids.is_empty() || g.utilization_percent > 0).count() as u32;
    Some(Resources::new(cpu_millis, host.memory_used_bytes, gpus))
}

impl Controller {
    /// An agent registered on `stream`: it takes its node name (or is refused, changing
    /// nothing), the node (re)joins the engine, and what it runs is reconciled with what the
    /// engine wants there.
    pub(crate) fn agent_connected(&mut self, r: v1::Register, stream: StreamId) -> Result<(), Refused> {
        self.claim_node(&r)?;
        let res = r.allocatable.unwrap_or_default();
        let spec = NodeSpec {
            name: r.node_name.clone(),
            rack: r.rack.clone(),
            labels: r.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            capacity: Resources::new(res.cpu_millis, res.memory_bytes, res.gpus),
            gpu_list: if r.gpus.len() == res.gpus as usize {
                r.gpus
                    .iter()
                    .map(|g| GpuSpec {
                        index: g.index,
                        model: g.model.clone(),
                        memory_bytes: g.memory_total_bytes,
                    })
                    .collect()
            } else {
                Vec::new()
            },
        };
        self.event(Event::NodeRegistered(spec)).map_err(|e| Refused::Invalid(e.to_string()))?;
        let node = r.node_name.clone();
        if self.drained.contains(&node) {
            let drain =
                Event::NodeStateChanged { node: node.clone(), state: gantry_engine::NodeCondition::Draining };
            if let Err(e) = self.event(drain) {
                tracing::warn!(%node, error = %e, "cannot apply the stored drain");
            }
        }
        self.restore_awaited(&node);
        let replaced = self.agents.insert(
            node.clone(),
            AgentLink {
                stream,
                last_seen_ms: self.now_ms,
                last_status: None,
                reports_cluster_ids: r.reports_cluster_ids,
                instance: r.instance_id.clone(),
                conditions: Vec::new(),
            },
        );
        if let Some(old) = replaced.filter(|old| old.stream != 0 && old.stream != stream) {
            self.outbox.push(crate::Output::CloseStream { stream: old.stream });
        }
        // The registration made the node RUNNING again (unless drained): what it reports now
        // decides.
        self.conditions_reported(&node, r.conditions.clone());
        // Reads sent down an earlier stream of this node are answered on that stream or never.
        self.fail_log_reads(&node, |s| s != stream);
        let registered =
            v1::Registered { heartbeat_interval_ms: 0, cluster_id: self.config.cluster.to_wire() };
        self.send_to(&node, ToAgent::Registered(registered));
        self.reconcile(&node, &r);
        self.dirty = true;
        Ok(())
    }

    /// Whether this registration may take its node name ([`node_claim`]); a refusal is logged
    /// and changes nothing.
    fn claim_node(&self, r: &v1::Register) -> Result<(), Refused> {
        node_claim::check_instance_id(&r.instance_id)?;
        let holder = self.agents.get(&r.node_name).map(|l| Holder {
            instance: &l.instance,
            silent_for: Duration::from_millis(self.silent_for_ms(l)),
        });
        let timeout = Duration::from_millis(self.config.node_timeout_ms);
        let claimed = node_claim::check(&r.node_name, holder, &r.instance_id, timeout);
        if let Err(Refused::Claimed { conflict, .. }) = &claimed {
            // A short prefix: enough to tell instances apart in the log, not enough to pose as one.
            let prefix = |id: &str| id.chars().take(8).collect::<String>();
            let held_by = holder.map(|h| prefix(h.instance)).unwrap_or_default();
            tracing::warn!(node = %r.node_name, held_by, refused = prefix(&r.instance_id), reason = conflict.as_str(), "registration refused: another live agent holds the node name");
        }
        claimed
    }

    /// Whether a container `node`'s agent reports under `cluster` is this scheduler's (see
    /// [`Controller::cluster_of`]); an agent older than cluster ids means the one this scheduler
    /// addressed.
    pub(crate) fn ours(&self, node: &str, cluster: &str, container: u64) -> bool {
        let aware = self.agents.get(node).is_some_and(|l| l.reports_cluster_ids);
        !aware || ClusterId::parse(cluster).is_ok_and(|c| c == self.cluster_of(container))
    }

    pub(crate) fn agent_message(&mut self, node: &str, stream: StreamId, msg: FromAgent) {
        let msg = match self.agents.get_mut(node) {
            Some(link) if link.stream == stream => {
                link.last_seen_ms = self.now_ms;
                match msg {
                    FromAgent::Status(s) => {
                        let kept = link.keep_status(s);
                        return self.status_kept(node, stream, kept);
                    }
                    other => other,
                }
            }
            _ => return, // a stale stream: its node has reconnected (or been declared lost)
        };
        match msg {
            FromAgent::Status(_) => {}
            FromAgent::ContainerStarted(c) if !self.ours(node, &c.cluster_id, c.container_id) => {
                tracing::debug!(%node, container = c.container_id, cluster = %c.cluster_id, "start of another scheduler state's container ignored");
            }
            FromAgent::ContainerStarted(c) => self.started(c.container_id, c.started_at_ms),
            FromAgent::ContainerExited(e) => self.exited(node, &e, exit_words::exit_phrase(&e), false),
            FromAgent::LaunchFailed(f) => {
                tracing::warn!(%node, container = f.container_id, message = %f.message, "launch failed on the agent");
                let exit = v1::ContainerExited {
                    container_id: f.container_id,
                    reason: v1::ExitReason::Exited as i32,
                    exit_code: 127,
                    cluster_id: f.cluster_id,
                    ..Default::default()
                };
                self.exited(node, &exit, exit_words::launch_failed_phrase(node, &f.message), true);
            }
            FromAgent::LogChunk(chunk) => self.log_chunk(node, stream, chunk),
            FromAgent::Pong(_) | FromAgent::Register(_) => {}
        }
    }

    /// What follows a status report `node`'s link has kept ([`AgentLink::keep_status`]): new
    /// conditions settle the node, usage goes to the engine, and the report is acknowledged.
    fn status_kept(&mut self, node: &str, stream: StreamId, kept: KeptStatus) {
        if let Some(conditions) = kept.conditions {
            self.conditions_reported(node, conditions);
        }
        if let Some(used) = kept.used {
            // Refused only for a node that is lost meanwhile: nothing to do then.
            let _ = self.event(Event::NodeUsageReported { node: node.to_owned(), used });
        }
        // Never held behind launches (see `send_to`), so it goes on the stream it came on.
        let ack = ToAgent::StatusAck(v1::StatusAck { seq: kept.seq });
        self.outbox.push(crate::Output::ToAgent { node: node.to_owned(), stream, msg: ack });
    }

    /// One of this scheduler's containers runs (reported on its own, or found running when its
    /// agent registers).
    pub(crate) fn started(&mut self, container: u64, started_at_ms: u64) {
        self.history.update(container, |l| {
            l.state = GANTRY_CONTAINER_RUNNING;
            l.started_ms = Some(started_at_ms);
        });
        self.persist(vec![Write::ContainerState {
            id: ContainerId(container),
            state: GANTRY_CONTAINER_RUNNING,
            started_ms: Some(started_at_ms),
            exit_code: None,
            reason: None,
            finished_ms: None,
        }]);
        if let Err(e) = self.event(Event::ContainerStarted { container: ContainerId(container) }) {
            tracing::debug!(container, error = %e, "start refused");
        }
    }

    /// A container ended; `words` says how (after "container N "), for its diagnostics.
    /// `never_ran` for a launch its agent refused or could not start: a failed attempt with no
    /// exit status (users saw "exit 127" and empty logs before).
    pub(crate) fn exited(&mut self, node: &str, e: &v1::ContainerExited, words: String, never_ran: bool) {
        let ack =
            ToAgent::AckExit(v1::AckExit { container_id: e.container_id, cluster_id: e.cluster_id.clone() });
        if !self.ours(node, &e.cluster_id, e.container_id) {
            // Another scheduler state's container: nothing of this one's may change. The agent
            // may forget it.
            tracing::info!(%node, container = e.container_id, cluster = %e.cluster_id, "exit of another scheduler state's container acknowledged, not applied");
            self.send_to(node, ack);
            return;
        }
        let id = ContainerId(e.container_id);
        let reason = v1::ExitReason::try_from(e.reason).unwrap_or(v1::ExitReason::Unspecified);
        let (state, code) = match reason {
            v1::ExitReason::Exited if e.exit_code == 0 => (GANTRY_CONTAINER_COMPLETED, Some(0)),
            v1::ExitReason::Exited => (GANTRY_CONTAINER_FAILED, Some(e.exit_code)),
            v1::ExitReason::Signaled => (GANTRY_CONTAINER_FAILED, Some(128 + e.signal)),
            v1::ExitReason::MemoryLimit | v1::ExitReason::DiskLimit => (GANTRY_CONTAINER_FAILED, Some(137)),
            v1::ExitReason::KilledByRequest => (GANTRY_CONTAINER_KILLED, Some(137)),
            v1::ExitReason::Lost | v1::ExitReason::Unspecified => (GANTRY_CONTAINER_LOST, None),
        };
        let code = code.filter(|_| !never_ran);
        let exit =
            |exit_code| Event::ContainerExited { container: id, exit_code, diagnostics: words.clone() };
        let event = match reason {
            v1::ExitReason::Lost | v1::ExitReason::Unspecified => Event::ContainerLost { container: id },
            v1::ExitReason::Exited => exit(e.exit_code),
            v1::ExitReason::Signaled => exit(128 + e.signal),
            v1::ExitReason::KilledByRequest | v1::ExitReason::MemoryLimit | v1::ExitReason::DiskLimit => {
                exit(137)
            }
        };
        let result = self.event(event);
        // The engine's words add why it had asked the container to stop; the agent's stand
        // where the engine no longer knows the container.
        let diagnostics = self
            .engine
            .container_diagnostics(id)
            .map_or_else(|| format!("container {} {words}", e.container_id), str::to_owned);
        // The agent's clock says when it ended (also for exits during an outage); kept within
        // the scheduler's own view of the container's life in case the clocks disagree.
        let now = self.now_ms;
        let started = self.history.container(e.container_id).and_then(|c| c.started_ms).unwrap_or(0);
        let finished_ms = if e.finished_at_ms > 0 { e.finished_at_ms.min(now) } else { now }.max(started);
        self.history.update(e.container_id, |c| {
            c.state = state;
            c.exit_code = code;
            c.finished_ms = Some(finished_ms);
            c.diagnostics.clone_from(&diagnostics);
        });
        let write = self.persist(vec![Write::ContainerState {
            id,
            state,
            started_ms: None,
            exit_code: code,
            reason: Some(diagnostics),
            finished_ms: Some(finished_ms),
        }]);
        match result {
            Ok(_) => self.dirty = true,
            // An exit the engine no longer tracks (already recorded, or from a previous life).
            Err(EngineError::UnknownContainer(_)) => {}
            Err(err) => tracing::warn!(container = e.container_id, error = %err, "exit refused"),
        }
        // Recorded (or known to be moot): the agent may forget it — once the record has
        // committed. The agent drops an acknowledged exit for good, so an acknowledgement ahead of
        // the commit would let a crash lose a container's end, and the restarted scheduler would
        // declare it lost and run it again (the kill-under-load test found it).
        match write {
            None => {
                self.send_to(node, ack);
            }
            Some(_) => {
                let stream = self.agents.get(node).map_or(0, |l| l.stream);
                if stream != 0 {
                    self.after_commit(
                        write,
                        AfterCommit::AckExit { node: node.to_owned(), stream, msg: Box::new(ack) },
                    );
                }
            }
        }
    }

    /// How long an agent has been silent, as far as the scheduler can tell: time the scheduler
    /// itself did not run (paused longer than the node timeout) does not count against it.
    fn silent_for_ms(&self, link: &AgentLink) -> u64 {
        self.now_ms.saturating_sub(link.last_seen_ms.max(self.silence_counted_from_ms))
    }

    pub(crate) fn agent_disconnected(&mut self, node: &str, stream: StreamId) {
        self.fail_log_reads(node, |s| s == stream);
        if let Some(link) = self.agents.get_mut(node).filter(|l| l.stream == stream) {
            tracing::warn!(%node, "agent stream ended; the node is lost if it does not come back in time");
            // Keep last_seen: liveness decides.
            link.stream = 0;
        }
    }

    /// Declares lost every node whose agent has not been heard from within the node timeout,
    /// and forgets the names of ended containers.
    pub(crate) fn check_liveness(&mut self) {
        if self.recovering_until_ms.is_none() {
            // Restored containers reach the engine only as their agents come back.
            let st = self.engine.state();
            self.known_as.retain(|&id, _| st.container_index(ContainerId(id)).is_some());
        }
        let timeout = self.config.node_timeout_ms;
        let late: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, l)| self.silent_for_ms(l) > timeout)
            .map(|(n, _)| n.clone())
            .collect();
        for node in late {
            tracing::warn!(%node, timeout_ms = timeout, "no status from the node; lost");
            if let Some(link) = self.agents.remove(&node).filter(|l| l.stream != 0) {
                self.outbox.push(crate::Output::CloseStream { stream: link.stream });
            }
            self.fail_log_reads(&node, |_| true);
            self.stats.nodes_lost += 1;
            if let Err(e) = self.event(Event::NodeLost { node: node.clone() }) {
                tracing::warn!(%node, error = %e, "node lost refused");
            }
            self.dirty = true;
        }
    }
}
