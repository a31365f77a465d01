//! # gantry-controller
//!
//! The scheduler's decisions, sans I/O. The [`Controller`] owns the [`Engine`] and everything the
//! daemon decides beside it: recovery from the store after a restart (`recover.rs`),
//! reconciliation when an agent (re)registers (`reconcile.rs`), node liveness and node names
//! (`agents.rs`, `node_claim.rs`), node conditions and drains (`conditions.rs`, `requests.rs`),
//! the launch templates (`launch.rs`), launches held until their record commits and every other
//! wait for the store (`commits.rs`), and the routing of log reads (`logs.rs`). Every engine
//! command goes through one `apply` (`apply.rs`), so none is dropped.
//!
//! It takes [`Input`]s — agent messages, REST requests, store commit outcomes — each with the
//! time, and answers with [`Output`]s: messages to agents, store writes, replies. It never reads a
//! clock, spawns, touches a file or a socket, or draws unseeded randomness (`clippy.toml` in this
//! crate forbids them), so the tokio daemon is a shell that moves bytes and runs the store, and
//! the simulator drives this very code with simulated agents, a simulated store and injected
//! faults.
//!
//! Every run has a cluster id of its own (random, made by the driver) that its launches carry, as
//! YARN's container ids carry the ResourceManager's start time: an agent names containers by
//! (cluster id, container id), so a scheduler on a fresh data directory, a restored backup or
//! another cluster's state never mistakes an agent's older containers for its own, whatever
//! their numbers. The controller applies only what agents report about its own containers — those
//! it launched, under its cluster id or (on an agent older than cluster ids) the legacy one, and
//! the live ones restored from the store under the cluster ids they were launched with
//! ([`Controller::cluster_of`]) — and kills the others when their agent registers.

pub mod agents;
pub mod app_history;
mod apply;
mod commits;
mod conditions;
pub mod exit_words;
pub mod handed_out;
mod launch;
mod logs;
pub mod memstore;
pub mod messages;
pub mod node_claim;
mod reconcile;
pub mod records;
mod recover;
mod requests;
mod rewrite;

pub use agents::AgentLink;
pub use app_history::{EndedApp, LaunchedContainer};
pub use messages::{
    Caller, IdKind, Input, LaunchTemplate, LogChunk, LogError, Output, Reply, ReplyTo, ReservationOp,
    ReservationOutcome, StreamId, SubmitError, WriteId,
};

use app_history::AppHistory;
use commits::Commits;
use gantry_engine::{AppSpec, Engine, EngineError, Event};
use gantry_proto::ClusterId;
use handed_out::HandedOut;
use std::collections::{BTreeMap, BTreeSet};

/// Log reads one node serves at a time; more wait their turn. An answer is up to 4 MiB that the
/// agent holds until it is sent, and agents have a small memory budget.
pub const LOG_READS_PER_NODE: usize = 2;

/// How a controller is set up; the driver supplies what needs a clock or randomness.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// This run's cluster id: random, never the legacy cluster's 0.
    pub cluster: ClusterId,
    /// How long a node's agent may be silent before the node is lost; until then it holds its
    /// name against other agent instances ([`node_claim`]). After a restart, scheduling waits
    /// this long for the agents to come back.
    pub node_timeout_ms: u64,
    /// A scheduling cycle runs at the latest this long after the previous one (and at once
    /// after anything that can make work placeable).
    pub cycle_interval_ms: u64,
    /// Whether there is a store: without one nothing waits for a commit (`gantry dev` without
    /// a data directory, tests).
    pub durable: bool,
    /// The first log request id is the one after this. The daemon starts it from the clock, so
    /// an answer to a read of a previous run that arrives late cannot match a new read's id.
    pub log_requests_after: u64,
    /// Also hand out every engine command as [`Output::EngineCommand`], in order, beside what
    /// it leads to: the simulator accounts from them (preemptions, application ends, replans);
    /// the daemon leaves it off.
    pub report_engine_commands: bool,
    /// The most a container may ask for; `None`: what the largest registered node has. An
    /// autoscaled cluster's driver sets its largest machine's, which may not be running.
    pub max_allocation: Option<gantry_engine::Resources>,
}

impl ControllerConfig {
    /// A configuration with the daemon's defaults (10 s node timeout, 1 s cycles, no store).
    pub fn new(cluster: ClusterId) -> Self {
        ControllerConfig {
            cluster,
            node_timeout_ms: 10_000,
            cycle_interval_ms: 1_000,
            durable: false,
            log_requests_after: 0,
            report_engine_commands: false,
            max_allocation: None,
        }
    }
}

/// Counters of the controller's own work.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ControllerStats {
    /// Launches sent to agents.
    pub launches_sent: u64,
    /// Launches that had no agent stream to go to (the node's liveness will catch it).
    pub launches_undeliverable: u64,
    /// Kills sent for containers an agent had but the scheduler did not want.
    pub reconcile_kills: u64,
    /// Containers found missing at reconciliation.
    pub reconcile_lost: u64,
    /// Nodes declared lost for missing their status deadline.
    pub nodes_lost: u64,
}

/// A live application's submission: its launch templates (the engine carries neither commands
/// nor environments) and its spec, kept for its record once it ends.
#[derive(Debug, Default)]
struct Submission {
    spec: AppSpec,
    templates: Vec<LaunchTemplate>,
}

/// The engine and every decision around it. See the crate's documentation.
pub struct Controller {
    engine: Engine,
    config: ControllerConfig,
    /// The latest time an input carried (never goes back).
    now_ms: u64,
    /// Live containers their agents know by another cluster id than this run's: those restored
    /// from the store that earlier runs launched, and those launched on an agent older than
    /// cluster ids (which names every container legacy). Ended ones are dropped at the liveness
    /// check (the launch history, which forgets old applications, still names them).
    known_as: BTreeMap<u64, ClusterId>,
    agents: BTreeMap<String, AgentLink>,
    /// Store jobs in flight and what waits for each (held launches, replies, exit
    /// acknowledgements).
    commits: Commits,
    /// Live applications' submissions, by id.
    submissions: BTreeMap<u64, Submission>,
    /// Something happened that can make work placeable: cycle at once.
    dirty: bool,
    /// When the next cycle is due at the latest.
    next_cycle_ms: u64,
    /// When the next liveness check is due.
    next_liveness_ms: u64,
    /// When [`Controller::poll`] last ran.
    last_poll_ms: u64,
    /// When a cycle last ran (or was held back by a recovery): the engine's rebalance time
    /// counts only if it lies after it, so a time the engine could not move on (a held-back or
    /// refused cycle) never makes the driver wake again and again.
    last_cycle_ms: Option<u64>,
    /// Agents' silence counts from here at the earliest: the end of the last stretch longer
    /// than the node timeout in which the scheduler itself did not run (a stalled or suspended
    /// process has not read what the agents sent meanwhile; a simulation jumps over quiet
    /// time).
    silence_counted_from_ms: u64,
    stats: ControllerStats,
    /// When the controller started (the driver's clock).
    started_ms: u64,
    /// Application ids handed out by `new-application` and not used yet, with their callers.
    handed_out_apps: HandedOut,
    /// Reservation ids handed out by `new-reservation` and not used yet, with their callers.
    handed_out_reservations: HandedOut,
    /// Submissions the engine took whose record the store refused, withdrawn: their end is not
    /// written (there is no record, and the id is never another app's).
    unstored_apps: BTreeSet<u64>,
    /// Containers launched, and ended applications' records.
    history: AppHistory,
    /// After a restart: containers the store says were running, by node, restored when their
    /// agent re-registers; scheduling waits until `recovering_until_ms` so they are not placed
    /// twice.
    awaiting: BTreeMap<String, Vec<records::ContainerRecord>>,
    recovering_until_ms: Option<u64>,
    /// Submissions larger than the largest node are refused only from then on: after a
    /// (re)start the agents have a node timeout to come back, and a cluster half registered
    /// is no measure of what fits (`None`: from the start).
    sizes_checked_from_ms: Option<u64>,
    /// Applications that had ended before the last restart (the engine's history starts empty).
    past: Vec<gantry_engine::state::AppSummary>,
    /// Log reads in flight and waiting for a turn.
    logs: logs::LogReads,
    /// Nodes an operator drained (stored): applied again whenever such a node (re-)registers,
    /// since a lost node comes back RUNNING in the engine.
    drained: BTreeSet<String>,
    /// The last drain change's sequence number, and per node the latest one applied: two
    /// changes of one node in flight at once end as the store ends, whatever order their
    /// commits are answered in.
    drain_seq: u64,
    drain_applied: BTreeMap<String, u64>,
    /// What the driver is to carry out, in order.
    outbox: Vec<Output>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("engine", &self.engine)
            .field("agents", &self.agents.len())
            .finish()
    }
}

impl Controller {
    /// A controller around `engine`, starting at `now_ms`.
    pub fn new(engine: Engine, config: ControllerConfig, now_ms: u64) -> Self {
        Controller {
            history: AppHistory::new(engine.history_len()),
            engine,
            now_ms,
            known_as: BTreeMap::new(),
            agents: BTreeMap::new(),
            commits: Commits::default(),
            submissions: BTreeMap::new(),
            dirty: false,
            next_cycle_ms: now_ms + config.cycle_interval_ms,
            next_liveness_ms: now_ms + liveness_interval_ms(config.node_timeout_ms),
            last_poll_ms: now_ms,
            last_cycle_ms: None,
            silence_counted_from_ms: 0,
            stats: ControllerStats::default(),
            started_ms: now_ms,
            handed_out_apps: HandedOut::new("application", "new-application"),
            handed_out_reservations: HandedOut::new("reservation", "new-reservation"),
            unstored_apps: BTreeSet::new(),
            awaiting: BTreeMap::new(),
            recovering_until_ms: None,
            sizes_checked_from_ms: None,
            past: Vec::new(),
            logs: logs::LogReads::new(config.log_requests_after),
            drained: BTreeSet::new(),
            drain_seq: 0,
            drain_applied: BTreeMap::new(),
            outbox: Vec::new(),
            config,
        }
    }

    /// Takes in one input at `now_ms`; what it leads to is in [`Controller::take_outputs`].
    pub fn handle(&mut self, now_ms: u64, input: Input) {
        self.advance(now_ms);
        match input {
            Input::Submit { reply, spec, id, caller, templates } => {
                self.submit(reply, spec, id, caller, templates)
            }
            Input::NewId { reply, kind, caller } => self.new_id(reply, kind, caller),
            Input::Kill { reply, app } => self.kill(reply, app),
            Input::SetNodeDrain { reply, node, drained } => self.store_node_drain(reply, node, drained),
            Input::Reservation { reply, op } => self.reservation(reply, op),
            Input::ReadLog { reply, container, stream, tail } => {
                self.read_log(reply, container, stream, tail)
            }
            Input::ReplyAbandoned { reply } => self.abandon_log_read(reply),
            Input::AgentConnected { reply, stream, register } => {
                let result = self.agent_connected(register, stream);
                self.reply(reply, Reply::Registered(result));
            }
            Input::AgentMessage { node, stream, msg } => self.agent_message(&node, stream, msg),
            Input::AgentDisconnected { node, stream } => self.agent_disconnected(&node, stream),
            Input::Undelivered { node, msg } => self.undelivered(&node, msg),
            Input::Committed { write, result } => self.committed(write, result),
        }
    }

    /// Runs what is due at `now_ms`: a scheduling cycle if something made work placeable or the
    /// cycle interval has passed, and the liveness check. Returns whether a cycle ran (the
    /// daemon times those for its metrics).
    pub fn poll(&mut self, now_ms: u64) -> bool {
        self.advance(now_ms);
        let absent_ms = self.now_ms.saturating_sub(self.last_poll_ms);
        if absent_ms > self.config.node_timeout_ms {
            // The scheduler did not run for longer than the node timeout: the agents' silence
            // is its own, not theirs. Declaring them all lost now would run everything again;
            // they get a full timeout from now instead, as after a restart.
            tracing::info!(
                absent_ms,
                "the scheduler was not polled for longer than the node timeout; agents' silence counts from now"
            );
            self.silence_counted_from_ms = self.now_ms;
        }
        self.last_poll_ms = self.now_ms;
        if self.now_ms >= self.next_liveness_ms {
            self.next_liveness_ms = self.now_ms + liveness_interval_ms(self.config.node_timeout_ms);
            self.check_liveness();
            self.rewrite_failed();
        }
        // The engine runs `rebalance` in the first cycle at or after its interval: a cycle runs
        // then, or one made due in between would push it up to a cycle interval late.
        let rebalance_due = self.now_ms >= self.next_rebalance_ms();
        if !self.dirty && self.now_ms < self.next_cycle_ms && !rebalance_due {
            return false;
        }
        self.cycle();
        true
    }

    /// When [`Controller::poll`] next has something to do, at the latest.
    pub fn next_deadline_ms(&self) -> u64 {
        if self.dirty {
            return self.now_ms;
        }
        let recovered = self.recovering_until_ms.filter(|_| !self.awaiting.is_empty()).unwrap_or(u64::MAX);
        self.next_cycle_ms.min(self.next_liveness_ms).min(recovered).min(self.next_rebalance_ms())
    }

    /// When the engine's `rebalance` policy is next due (`u64::MAX` without one, or while that
    /// time is not after the last cycle): a cycle runs then, not at its next interval.
    pub fn next_rebalance_ms(&self) -> u64 {
        match self.engine.next_rebalance_ms() {
            Some(at) if self.last_cycle_ms.is_none_or(|last| at > last) => at,
            _ => u64::MAX,
        }
    }

    /// When the next scheduling cycle is due by the interval (one runs sooner when something
    /// makes work placeable): the daemon's shell wakes then, and so does the simulator while
    /// work is pending.
    pub fn next_cycle_ms(&self) -> u64 {
        self.next_cycle_ms
    }

    /// Sets the cycle interval and the node timeout (the daemon's configuration), from `now_ms`.
    pub fn set_intervals(&mut self, now_ms: u64, cycle_interval_ms: u64, node_timeout_ms: u64) {
        self.advance(now_ms);
        self.config.cycle_interval_ms = cycle_interval_ms;
        self.config.node_timeout_ms = node_timeout_ms;
        self.next_cycle_ms = self.now_ms + cycle_interval_ms;
        self.next_liveness_ms = self.now_ms + liveness_interval_ms(node_timeout_ms);
    }

    /// Whether a poll at `now_ms` would count agents' silence since their last report: false
    /// when the scheduler will not have been polled for longer than the node timeout (then the
    /// silence counts from that poll; see [`Controller::poll`]).
    pub fn counts_silence_at(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_poll_ms) <= self.config.node_timeout_ms
    }

    /// What the driver is to carry out, in order.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outbox)
    }

    /// [`Controller::take_outputs`] into the driver's buffer (appended), so that neither side
    /// allocates anew for every input: the simulator hands over millions.
    pub fn move_outputs_into(&mut self, buffer: &mut Vec<Output>) {
        buffer.append(&mut self.outbox);
    }

    /// Runs one scheduling cycle now (unless restored containers are still awaited).
    fn cycle(&mut self) {
        self.next_cycle_ms = self.now_ms + self.config.cycle_interval_ms;
        self.last_cycle_ms = Some(self.now_ms);
        if let Some(until) = self.recovering_until_ms {
            if self.now_ms < until && !self.awaiting.is_empty() {
                // Agents are still coming back; placing now could start work twice. The next
                // registration, or the interval, tries again.
                self.dirty = false;
                return;
            }
            self.recovering_until_ms = None;
            if !self.awaiting.is_empty() {
                let nodes: Vec<&String> = self.awaiting.keys().collect();
                tracing::warn!(
                    ?nodes,
                    "nodes did not come back after the restart; their containers run again elsewhere"
                );
                self.awaiting.clear();
            }
            if let Err(e) = self.event(Event::RestoreEnded) {
                tracing::error!(error = %e, "cannot end the restore");
            }
        }
        self.dirty = false;
        if let Err(e) = self.event(Event::Tick) {
            tracing::error!(error = %e, "scheduling cycle refused");
        }
    }

    fn advance(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// Feeds an event to the engine and carries out its commands (the one way in, so no
    /// command is dropped); returns them for callers that read their outcome.
    fn event(&mut self, event: Event) -> Result<Vec<gantry_engine::Command>, EngineError> {
        let commands = self.engine.handle(self.now_ms, event)?;
        self.apply(&commands);
        Ok(commands)
    }

    fn reply(&mut self, to: ReplyTo, reply: Reply) {
        self.outbox.push(Output::Reply { to, reply });
    }

    /// The engine (read-only).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// How it was set up.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// Connected agents by node name.
    pub fn agents(&self) -> &BTreeMap<String, AgentLink> {
        &self.agents
    }

    /// The controller's counters.
    pub fn stats(&self) -> &ControllerStats {
        &self.stats
    }

    /// When the controller started (the driver's clock, ms).
    pub fn started_ms(&self) -> u64 {
        self.started_ms
    }

    /// This run's cluster id.
    pub fn cluster(&self) -> ClusterId {
        self.config.cluster
    }

    /// Nodes an operator has drained (they stay drained across restarts and absences).
    pub fn drained_nodes(&self) -> &BTreeSet<String> {
        &self.drained
    }

    /// Applications that had ended before the last restart, oldest first.
    pub fn past(&self) -> &[gantry_engine::state::AppSummary] {
        &self.past
    }

    /// The containers launched for an application, including ended ones.
    pub fn launched(&self, app: u64) -> &[LaunchedContainer] {
        self.history.launched(app)
    }

    /// The application a launched container belongs to (ended ones included, as remembered).
    pub fn app_of_container(&self, container: u64) -> Option<u64> {
        self.history.app_of_container(container)
    }

    /// What is remembered of an ended application beyond the engine's summary.
    pub fn ended_app(&self, app: u64) -> Option<&EndedApp> {
        self.history.ended(app)
    }

    /// The node that ran (or runs) a container, as remembered.
    pub fn container_node(&self, container: u64) -> Option<&str> {
        self.history.container(container).map(|c| c.node.as_str())
    }

    /// The launch template of an application's request.
    pub fn template(&self, app: u64, request: usize) -> Option<&LaunchTemplate> {
        self.submissions.get(&app).and_then(|s| s.templates.get(request))
    }

    /// The cluster id agents know a container by, as recorded when it was launched: an earlier
    /// run's for one restored from the store, the legacy one for one launched on an agent older
    /// than cluster ids, this run's otherwise (and for a container it does not remember).
    pub fn cluster_of(&self, container: u64) -> ClusterId {
        self.known_as
            .get(&container)
            .copied()
            .or_else(|| self.history.container(container).map(|c| c.cluster))
            .unwrap_or(self.config.cluster)
    }

    /// How many live containers agents know by a cluster id other than this run's (the
    /// containers [`Controller::cluster_of`] must remember for as long as they live, and no
    /// longer).
    pub fn renamed_containers(&self) -> usize {
        self.known_as.len()
    }

    /// Whether scheduling still waits for restored containers' agents after a restart.
    pub fn recovering(&self) -> bool {
        self.recovering_until_ms.is_some()
    }
}

/// How often nodes' liveness is checked: often enough that a node is lost within a quarter of
/// the timeout of its deadline, at most every half second.
fn liveness_interval_ms(node_timeout_ms: u64) -> u64 {
    (node_timeout_ms / 4).clamp(1, 500)
}
