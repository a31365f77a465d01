//! Store jobs in flight and what waits for their commit.
//!
//! Nothing acknowledged may be lost, so several things wait for the store: a submission, a kill,
//! a drain, a reservation change and a handed-out id are answered only once their record has
//! committed; an agent's exit is acknowledged (and so forgotten by the agent) only once the
//! container's end is stored; and a launch reaches its agent only once the container's record is
//! durable, or a crash in between would let the restarted scheduler run the work a second time.
//!
//! Launches are held in batches: a launch opens a batch; later messages to a node with a held
//! launch join the newest batch, so each node still gets its messages in order (a kill never
//! overtakes its launch), while other nodes' messages go at once. Batches leave in order, each
//! once its job has an outcome; a failed job's launches are not sent and their containers go
//! back to the engine as lost, so the work is placed again instead of running without a record.

use crate::Controller;
use crate::messages::{Output, Reply, ReplyTo, ReservationOutcome, StreamId, SubmitError, WriteId};
use crate::records::{StoreError, Write};
use crate::rewrite::RecordKey;
use gantry_engine::{AppId, ContainerId, Event, ReservationId};
use gantry_proto::v1::scheduler_message::Msg as ToAgent;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The controller's book of store jobs.
#[derive(Debug, Default)]
pub(crate) struct Commits {
    /// The last job id used.
    last_write: WriteId,
    /// What each job in flight holds back.
    waiting: BTreeMap<WriteId, Vec<AfterCommit>>,
    /// Messages to agents held behind a launch's record, oldest first.
    held: VecDeque<HeldBatch>,
    /// Nodes with messages in `held`.
    held_nodes: BTreeSet<String>,
    /// Per job in flight, the records it writes that can be written again if it fails
    /// (`rewrite.rs`).
    keys: BTreeMap<WriteId, Vec<RecordKey>>,
    /// Records whose last write failed, to write again.
    pub(crate) rewrite: BTreeSet<RecordKey>,
}

/// Messages to agents waiting for a launch record's commit.
#[derive(Debug)]
struct HeldBatch {
    /// The job they wait for.
    write: WriteId,
    /// Its outcome, once known (a batch leaves only after every older one has).
    outcome: Option<Result<(), StoreError>>,
    /// The messages, in the order they were sent, by node.
    messages: Vec<(String, ToAgent)>,
}

/// What happens once a job has an outcome.
#[derive(Debug)]
pub(crate) enum AfterCommit {
    /// Answer a submission; a failed one is withdrawn from the engine, so nothing the client
    /// was told failed runs.
    Submitted { to: ReplyTo, app: AppId },
    /// Answer a handed-out id.
    NewId { to: ReplyTo, id: u64 },
    /// Stop a killed application's containers, then answer.
    Kill { to: ReplyTo, app: AppId },
    /// Apply a drain or undrain, then answer.
    Drain { to: ReplyTo, node: String, drained: bool, seq: u64 },
    /// Answer a reservation change; a submission whose record failed is taken out of the plan.
    Reservation { to: ReplyTo, outcome: ReservationOutcome, undo: Option<ReservationId> },
    /// Tell the agent it may forget an exit.
    AckExit { node: String, stream: StreamId, msg: Box<ToAgent> },
}

impl Controller {
    /// Queues `writes` as one store job. Returns its id, or `None` without a store (then nothing
    /// waits).
    pub(crate) fn persist(&mut self, writes: Vec<Write>) -> Option<WriteId> {
        if !self.config.durable || writes.is_empty() {
            return None;
        }
        self.commits.last_write += 1;
        let write = self.commits.last_write;
        let keys: Vec<RecordKey> = writes.iter().filter_map(RecordKey::of).collect();
        if !keys.is_empty() {
            self.commits.keys.insert(write, keys);
        }
        self.outbox.push(Output::Store { write, writes });
        Some(write)
    }

    /// Runs `action` once `write` has committed (at once when there is no job).
    pub(crate) fn after_commit(&mut self, write: Option<WriteId>, action: AfterCommit) {
        match write {
            None => self.run_after_commit(action, Ok(())),
            Some(w) => self.commits.waiting.entry(w).or_default().push(action),
        }
    }

    /// Sends `msg` to `node`'s agent, behind any launch held for that node. False if the node
    /// has no open stream (the message is dropped).
    pub(crate) fn send_to(&mut self, node: &str, msg: ToAgent) -> bool {
        // Acknowledgements of status and registration are not ordered with launches and go at
        // once: held behind a slow commit they would leave the agent without word from the
        // scheduler, and an agent that hears nothing for its fencing timeout kills its
        // containers (the fault property tests found it).
        let ordered = !matches!(msg, ToAgent::StatusAck(_) | ToAgent::Ping(_) | ToAgent::Registered(_));
        if ordered && self.commits.held_nodes.contains(node) {
            if let Some(batch) = self.commits.held.back_mut() {
                batch.messages.push((node.to_owned(), msg));
                return true;
            }
        }
        self.send_now(node, msg)
    }

    /// Sends `msg` on `node`'s current stream, if it has one.
    fn send_now(&mut self, node: &str, msg: ToAgent) -> bool {
        match self.agents.get(node) {
            Some(link) if link.stream != 0 => {
                self.outbox.push(Output::ToAgent { node: node.to_owned(), stream: link.stream, msg });
                true
            }
            _ => false,
        }
    }

    /// Sends a launch: at once without a store, else once its record (`write`) has committed.
    pub(crate) fn send_launch(
        &mut self,
        node: &str,
        launch: gantry_proto::v1::Launch,
        write: Option<WriteId>,
    ) {
        let Some(write) = write else {
            let container = launch.container_id;
            let sent = self.send_to(node, ToAgent::Launch(launch));
            self.count_launch(node, container, sent);
            return;
        };
        self.commits.held_nodes.insert(node.to_owned());
        self.commits.held.push_back(HeldBatch {
            write,
            outcome: None,
            messages: vec![(node.to_owned(), ToAgent::Launch(launch))],
        });
    }

    fn count_launch(&mut self, node: &str, container: u64, sent: bool) {
        if sent {
            self.stats.launches_sent += 1;
        } else {
            // The node's liveness deadline decides; the engine keeps it allocated.
            self.stats.launches_undeliverable += 1;
            tracing::warn!(container, %node, "no stream to the node for a launch");
        }
    }

    /// A message could not be handed to its stream after all.
    pub(crate) fn undelivered(&mut self, node: &str, msg: ToAgent) {
        match msg {
            ToAgent::Launch(l) => {
                self.stats.launches_sent = self.stats.launches_sent.saturating_sub(1);
                self.count_launch(node, l.container_id, false);
            }
            ToAgent::ReadLog(r) => self.log_read_undelivered(r.request_id),
            _ => tracing::debug!(%node, "a message to the agent was not delivered"),
        }
    }

    /// The store reports `write`'s outcome.
    pub(crate) fn committed(&mut self, write: WriteId, result: Result<(), StoreError>) {
        let keys = self.commits.keys.remove(&write).unwrap_or_default();
        if let Err(e) = &result {
            if crate::rewrite::passes(e) {
                self.commits.rewrite.extend(keys);
            }
        }
        if let Some(batch) = self.commits.held.iter_mut().find(|b| b.write == write) {
            batch.outcome = Some(result.clone());
        }
        while self.commits.held.front().is_some_and(|b| b.outcome.is_some()) {
            if let Some(batch) = self.commits.held.pop_front() {
                self.release(batch);
            }
        }
        let waiting = self.commits.waiting.remove(&write).unwrap_or_default();
        if waiting.is_empty() {
            if let Err(e) = &result {
                tracing::error!(write, error = %e, "store refused a write");
            }
        }
        for action in waiting {
            self.run_after_commit(action, result.clone());
        }
    }

    /// Sends a held batch whose job has an outcome.
    fn release(&mut self, batch: HeldBatch) {
        if self.commits.held.is_empty() {
            self.commits.held_nodes.clear();
        }
        let committed = batch.outcome.unwrap_or(Err(StoreError::Closed));
        let mut unlaunched = Vec::new();
        for (node, msg) in batch.messages {
            match (msg, &committed) {
                (ToAgent::Launch(l), Err(_)) => unlaunched.push(l.container_id),
                (ToAgent::Launch(l), Ok(())) if !self.still_wanted(l.container_id) => {
                    // Lost, killed or ended while its record was being stored (its node
                    // re-registered without it, or was lost): launching it now would run the
                    // work a second time beside its replacement.
                    tracing::info!(container = l.container_id, %node, "held launch dropped: the container is no longer wanted");
                    // Never launched, so no exit will come: the engine must not wait for one.
                    if self.engine.state().container_index(ContainerId(l.container_id)).is_some() {
                        unlaunched.push(l.container_id);
                    }
                }
                (ToAgent::Launch(l), Ok(())) => {
                    let container = l.container_id;
                    let sent = self.send_now(&node, ToAgent::Launch(l));
                    self.count_launch(&node, container, sent);
                }
                (msg, _) => {
                    self.send_now(&node, msg);
                }
            }
        }
        if let Err(e) = &committed {
            tracing::error!(error = %e, containers = unlaunched.len(), "launch records not stored; rerunning later");
        }
        if !unlaunched.is_empty() {
            for c in unlaunched {
                if let Err(e) = self.event(Event::ContainerLost { container: ContainerId(c) }) {
                    tracing::warn!(container = c, error = %e, "cannot hand back an unlaunched container");
                }
            }
            self.dirty = true;
        }
    }

    /// Whether a container whose launch was held is still to run: the engine still has it
    /// allocated and not started.
    fn still_wanted(&self, container: u64) -> bool {
        let st = self.engine.state();
        st.container_index(ContainerId(container)).and_then(|i| st.containers().get(i as usize)).is_some_and(
            |c| {
                c.state == gantry_sdk::abi::GANTRY_CONTAINER_ALLOCATED
                    && st
                        .apps()
                        .get(c.app as usize)
                        .is_some_and(|a| !gantry_engine::state::app_is_terminal(a.state))
            },
        )
    }

    fn run_after_commit(&mut self, action: AfterCommit, result: Result<(), StoreError>) {
        match (action, result) {
            (AfterCommit::Submitted { to, app }, Ok(())) => self.reply(to, Reply::Submitted(Ok(app))),
            (AfterCommit::Submitted { to, app }, Err(e)) => {
                // The engine took it but the store did not: the client is told 503, so the
                // application must not run. (It stays visible as KILLED until it ages out.)
                self.withdraw(app, format!("withdrawn: the submission could not be stored ({e})"));
                self.reply(to, Reply::Submitted(Err(SubmitError::Store(e))));
            }
            (AfterCommit::NewId { to, id }, r) => {
                self.reply(to, Reply::NewId(r.map(|()| id).map_err(SubmitError::Store)))
            }
            (AfterCommit::Kill { to, app }, Ok(())) => {
                self.apply_kill(app);
                self.reply(to, Reply::Killed(Ok(())));
            }
            (AfterCommit::Kill { to, .. }, Err(e)) => {
                self.reply(to, Reply::Killed(Err(SubmitError::Store(e))))
            }
            (AfterCommit::Drain { to, node, drained, seq }, Ok(())) => {
                let state = self.apply_node_drain(&node, drained, seq).map_err(SubmitError::Engine);
                self.reply(to, Reply::NodeDrain(state));
            }
            (AfterCommit::Drain { to, .. }, Err(e)) => {
                self.reply(to, Reply::NodeDrain(Err(SubmitError::Store(e))))
            }
            (AfterCommit::Reservation { to, outcome, .. }, Ok(())) => {
                self.reply(to, Reply::Reservation(Ok(outcome)))
            }
            (AfterCommit::Reservation { to, undo, .. }, Err(e)) => {
                if let Some(id) = undo {
                    // Not durable: nothing unacknowledged stays in the plan.
                    if let Err(err) = self.event(Event::ReservationDeleted { id }) {
                        tracing::warn!(reservation = id.0, error = %err, "cannot take back an unstored reservation");
                    }
                }
                self.reply(to, Reply::Reservation(Err(SubmitError::Store(e))));
            }
            (AfterCommit::AckExit { node, stream, msg }, Ok(())) => {
                self.outbox.push(Output::ToAgent { node, stream, msg: *msg });
            }
            // An exit whose write failed is not acknowledged: the agent reports it again on its
            // next Register.
            (AfterCommit::AckExit { .. }, Err(_)) => {}
        }
    }
}
