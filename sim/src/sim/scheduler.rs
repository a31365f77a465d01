//! The scheduler, run as the daemon's shell runs it: the [`Controller`] takes the simulation's
//! inputs one at a time at the virtual time, and its outputs are carried out — messages to the
//! simulated agents (`agents.rs`), jobs for the in-memory store (committed at once, or
//! `commit_ms` later, or failed at `commit_failure_rate`), replies to the simulated clients (the
//! jobs, the reservations), and the engine's commands, which the simulator only reads for its
//! accounting. A scheduler restart drops the process: what was on its way to it, the store jobs
//! in flight and the replies it owed are lost; a new controller recovers from what the store
//! committed, the agents register again, and the clients send again what was never answered.

use super::events::Due;
use super::{DaemonFigures, EngineFactory, Sim, SimError, SimOptions};
use gantry_controller::records::Recovered;
use gantry_controller::{
    Controller, ControllerConfig, Input, Output, Reply, ReplyTo, ReservationOutcome, StreamId,
};
use gantry_engine::{Command, Engine, KillReason, NodeSpec, Resources};
use gantry_proto::ClusterId;
use gantry_sdk::rng::SplitMix64;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Whom a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    /// A job's current stage was submitted (index into the jobs).
    Submit(usize),
    /// A job's application was to be killed.
    Kill(usize),
    /// A job reservation was submitted (index into the options' job reservations).
    Reserve(usize),
    /// A node's agent registered (index into the nodes).
    Register(usize),
    /// A node was to be drained (true) or undrained.
    Drain(usize, bool),
}

/// The driver's side of the controller: what the daemon's shell keeps.
pub(super) struct Scheduler<'a> {
    make_engine: &'a mut EngineFactory<'a>,
    rng: SplitMix64,
    seed: u64,
    tick_ms: u64,
    node_timeout_ms: u64,
    /// On an elastic cluster, the pool's largest machine (per resource): what a container may
    /// ask for, started or not.
    max_allocation: Option<Resources>,
    /// Scheduler processes started before this one (restarts so far).
    pub(super) generation: u32,
    last_reply: ReplyTo,
    /// Replies still owed, by reply id.
    asked: BTreeMap<ReplyTo, Asked>,
    last_stream: StreamId,
    /// Inputs on their way to the controller, in order.
    inbox: VecDeque<Input>,
    /// The controller's outputs being carried out (kept for its allocation).
    outputs: Vec<Output>,
    /// The queue of each reservation admitted and not answered yet.
    admitted_queue: HashMap<u64, String>,
    /// Why the engine asked a container to stop, until its agent hears the kill.
    pub(super) kill_reasons: HashMap<u64, KillReason>,
    /// A poll is due then (after a restart the controller waits for the agents until a time).
    poll_at: Option<u64>,
    pub(super) figures: DaemonFigures,
}

impl<'a> Scheduler<'a> {
    pub(super) fn new(
        make_engine: &'a mut EngineFactory<'a>,
        options: &SimOptions,
        nodes: &[NodeSpec],
    ) -> Self {
        let max_allocation = options.elastic.as_ref().map(|_| {
            nodes.iter().fold(Resources::new(0, 0, 0), |m, n| {
                Resources::new(
                    m.cpu_millis.max(n.capacity.cpu_millis),
                    m.memory_bytes.max(n.capacity.memory_bytes),
                    m.gpus.max(n.capacity.gpus),
                )
            })
        });
        Scheduler {
            max_allocation,
            make_engine,
            rng: SplitMix64::new(options.daemon.seed ^ 0x7363_6865_6475_6c65),
            seed: options.daemon.seed,
            tick_ms: options.tick_ms,
            node_timeout_ms: options.daemon.node_timeout_ms,
            generation: 0,
            last_reply: 0,
            asked: BTreeMap::new(),
            last_stream: 0,
            inbox: VecDeque::new(),
            outputs: Vec::new(),
            admitted_queue: HashMap::new(),
            kill_reasons: HashMap::new(),
            poll_at: None,
            figures: DaemonFigures::default(),
        }
    }

    /// A controller around `engine` for this process, restored from `recovered` after a restart.
    /// Each process has a cluster id of its own (never the legacy 0), as the daemon's has.
    pub(super) fn controller(
        &mut self,
        engine: Engine,
        recovered: Option<Recovered>,
        now: u64,
    ) -> Controller {
        let cluster = ClusterId::from_bits((u128::from(self.seed) << 64) | (u128::from(self.generation) + 1));
        let config = ControllerConfig {
            node_timeout_ms: self.node_timeout_ms,
            cycle_interval_ms: self.tick_ms,
            durable: true,
            report_engine_commands: true,
            max_allocation: self.max_allocation,
            ..ControllerConfig::new(cluster)
        };
        match recovered {
            Some(r) => Controller::recover(engine, config, r, now),
            None => Controller::new(engine, config, now),
        }
    }

    /// A reply id for a request whose answer goes to `asked`.
    pub(super) fn ask(&mut self, asked: Asked) -> ReplyTo {
        self.last_reply += 1;
        self.asked.insert(self.last_reply, asked);
        self.last_reply
    }

    /// A new agent stream id.
    pub(super) fn new_stream(&mut self) -> StreamId {
        self.last_stream += 1;
        self.last_stream
    }
}

impl Sim<'_> {
    /// Queues `input` for the controller, after those before it ([`Sim::settle`] hands it over).
    pub(super) fn send(&mut self, input: Input) {
        self.sched.inbox.push_back(input);
    }

    /// Hands the controller every queued input and carries out what follows — the agents'
    /// answers, commits, replies and the launches of this instant — until nothing moves.
    pub(super) fn settle(&mut self) {
        loop {
            let mut outputs = std::mem::take(&mut self.sched.outputs);
            self.ctl.move_outputs_into(&mut outputs);
            if !outputs.is_empty() {
                for o in outputs.drain(..) {
                    self.carry_out(o);
                }
                self.sched.outputs = outputs;
                continue;
            }
            self.sched.outputs = outputs;
            if let Some(input) = self.sched.inbox.pop_front() {
                self.ctl.handle(self.now, input);
                continue;
            }
            if !self.launching.is_empty() {
                self.start_launches();
                continue;
            }
            return;
        }
    }

    /// Runs what the controller has due now (a cycle, the liveness check), as the daemon's
    /// shell does after each input.
    pub(super) fn poll(&mut self) {
        self.status_round();
        self.settle();
        // A cycle's outcome can make the controller due again at once (an exit it acknowledged
        // frees room); a few rounds settle it, and the next visit catches the rest.
        for _ in 0..4 {
            if self.ctl.poll(self.now) {
                self.cycles += 1;
            }
            self.settle();
            if self.ctl.next_deadline_ms() > self.now {
                break;
            }
        }
        if self.ctl.recovering() {
            // The controller waits for the agents until a time of its own: visit it then.
            let at = self.ctl.next_deadline_ms().max(self.now + 1);
            if self.sched.poll_at.is_none_or(|p| p <= self.now || p > at) {
                self.sched.poll_at = Some(at);
                self.push(at, Due::Poll);
            }
        }
    }

    fn carry_out(&mut self, output: Output) {
        match output {
            Output::ToAgent { node, stream, msg } => self.deliver(&node, stream, msg),
            Output::CloseStream { stream } => self.stream_closed(stream),
            Output::Store { write, writes } => {
                self.sched.figures.store_jobs += 1;
                self.store.submit(write, writes);
                match self.options.daemon.commit_ms {
                    0 => self.commit(),
                    ms => {
                        let generation = self.sched.generation;
                        self.push(self.now.saturating_add(ms), Due::Commit(generation));
                    }
                }
            }
            Output::Reply { to, reply } => self.answered(to, reply),
            Output::EngineCommand(c) => self.engine_command(c),
        }
    }

    /// The store commits (or fails) its oldest job in flight.
    pub(super) fn commit(&mut self) {
        let rate = self.options.daemon.commit_failure_rate;
        let fail = rate > 0.0 && self.sched.rng.unit() < rate;
        if let Some((write, result)) = self.store.commit_next(fail) {
            if result.is_err() {
                self.sched.figures.failed_commits += 1;
            }
            self.send(Input::Committed { write, result });
        }
    }

    /// An answer reached its client.
    fn answered(&mut self, to: ReplyTo, reply: Reply) {
        let Some(asked) = self.sched.asked.remove(&to) else { return };
        let retry_at = self.now.saturating_add(self.options.tick_ms);
        match (asked, reply) {
            (Asked::Submit(job), Reply::Submitted(result)) => self.submitted(job, result),
            (Asked::Kill(job), Reply::Killed(Err(e))) => {
                tracing::debug!(job, error = %e, "kill not acknowledged");
                if matches!(e, gantry_controller::SubmitError::Store(_)) && self.retry_unstored(job) {
                    self.push(retry_at, Due::KillAgain(job));
                }
            }
            (Asked::Reserve(k), Reply::Reservation(result)) => {
                let queue = match &result {
                    Ok(ReservationOutcome::Accepted { id, .. }) => self.sched.admitted_queue.remove(&id.0),
                    _ => None,
                };
                self.reservation_answered(k, result, queue);
            }
            (Asked::Register(i), Reply::Registered(Err(e))) => {
                tracing::warn!(node = %self.nodes[i].name, error = %e, "registration refused; trying again");
                self.agents[i].stream = 0;
                self.push(self.now.saturating_add(self.options.daemon.reconnect_ms), Due::Reconnect(i));
                self.out_of_contact(i);
            }
            (Asked::Drain(i, drained), Reply::NodeDrain(Err(e))) => {
                tracing::warn!(node = %self.nodes[i].name, drained, error = %e, "drain change refused");
            }
            _ => {}
        }
    }

    /// An engine command, read for the simulation's accounting (the controller carries it out).
    fn engine_command(&mut self, command: Command) {
        match command {
            Command::Kill { container, reason, .. } => self.kill_decided(container.0, reason),
            Command::AppStateChanged { app, state, .. } => self.app_state(app, state),
            Command::ReservationAdmitted { reservation, queue, .. } => {
                self.sched.admitted_queue.insert(reservation.0, queue);
            }
            Command::ReservationReplanned { reservation, .. } => self.reservation_replanned(reservation),
            Command::ReservationEnded { reservation, why } => self.reservation_ended(reservation, why),
            Command::Launch { .. } | Command::AppAccepted { .. } | Command::ReservationRejected { .. } => {}
        }
    }

    /// The scheduler process dies and starts again from the store.
    pub(super) fn restart_scheduler(&mut self) -> Result<(), SimError> {
        self.settle();
        self.sched.figures.restarts += 1;
        self.sched.figures.add(self.ctl.stats());
        self.sched.generation += 1;
        // What was on its way to the process, and what its store had not committed, is gone.
        self.store.crash();
        self.sched.inbox.clear();
        self.sched.kill_reasons.clear();
        self.sched.admitted_queue.clear();
        let owed: Vec<Asked> = std::mem::take(&mut self.sched.asked).into_values().collect();
        let engine = (self.sched.make_engine)().map_err(SimError::Build)?;
        let recovered = self.store.recovered();
        self.ctl = self.sched.controller(engine, Some(recovered), self.now);
        // Every stream ended with the process: the agents register again after their delay.
        let reconnect_at = self.now.saturating_add(self.options.daemon.reconnect_ms);
        for i in 0..self.agents.len() {
            if std::mem::take(&mut self.agents[i].stream) != 0 && self.agents[i].reachable() {
                self.push(reconnect_at, Due::Reconnect(i));
                self.out_of_contact(i);
            }
        }
        // The clients send again what was never answered.
        for asked in owed {
            match asked {
                Asked::Submit(job) => self.submit_stage(job),
                Asked::Kill(job) => self.kill_app(job),
                Asked::Reserve(k) => self.reserve_job(k),
                Asked::Drain(i, drained) => self.set_drain(i, drained),
                Asked::Register(_) => {}
            }
        }
        self.settle();
        Ok(())
    }
}
