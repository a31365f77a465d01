//! The daemon's shell around the sans-IO [`Controller`]: one tokio task owns it and does only
//! what the controller cannot — it reads the clock, moves messages between the controller and
//! the agents' streams, hands store writes to the SQLite store and reports their commits back,
//! and holds the REST handlers' reply slots. Every decision (recovery, reconciliation,
//! liveness, what waits for a commit, log-read routing) is the controller's
//! (`gantry_controller`), which the simulator drives through the same inputs.
//!
//! Everything else talks to the task through a [`CoreHandle`]. Requests that arrive together are
//! handed to the controller before it runs its next cycle, so they share one.

use crate::store::{Store, StoreError};
pub use gantry_controller::{
    AgentLink, Caller, ControllerStats as CoreStats, IdKind, LOG_READS_PER_NODE, LaunchTemplate,
    LaunchedContainer, LogChunk, LogError, ReservationOp, ReservationOutcome, SubmitError,
};
use gantry_controller::{Controller, ControllerConfig, Input, Output, Reply, ReplyTo, StreamId, WriteId};
use gantry_engine::{AppId, AppSpec, Engine};
use gantry_proto::ClusterId;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};

pub use gantry_controller::node_claim::Refused;

/// An agent stream's outgoing half.
pub type AgentSender = mpsc::Sender<Result<v1::SchedulerMessage, tonic::Status>>;

/// Messages to the core task.
pub enum Request {
    /// An input for the controller that is answered: `make` builds it around the reply id the
    /// task picks, and the answer goes to `reply`.
    Call {
        /// Builds the input.
        make: Box<dyn FnOnce(ReplyTo) -> Input + Send>,
        /// Where the answer goes.
        reply: oneshot::Sender<Reply>,
    },
    /// Run a read-only function on the controller (for queries).
    Read(Box<dyn FnOnce(&Controller) + Send>),
    /// An agent opened a stream and registered.
    AgentConnected {
        /// Its registration.
        register: v1::Register,
        /// Its outgoing stream.
        tx: AgentSender,
        /// Identifies this stream (a reconnect gets a new one).
        stream: StreamId,
        /// Accepted, or why not.
        reply: oneshot::Sender<Result<(), Refused>>,
    },
    /// A message on an agent's stream.
    AgentMessage {
        /// Node name.
        node: String,
        /// Stream id.
        stream: StreamId,
        /// The message.
        msg: Up,
    },
    /// An agent's stream ended.
    AgentDisconnected {
        /// Node name.
        node: String,
        /// Stream id.
        stream: StreamId,
    },
}

/// A cheap, cloneable way to talk to the core task.
#[derive(Debug, Clone)]
pub struct CoreHandle {
    tx: mpsc::Sender<Request>,
    /// Weak: handles outlive the daemon (tests, `Bound`), and the store must close with it.
    store: Option<std::sync::Weak<Store>>,
}

/// The core is gone (the daemon is stopping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the scheduler core is not running")]
pub struct CoreGone;

impl CoreHandle {
    /// Sends a request.
    pub async fn send(&self, r: Request) -> Result<(), CoreGone> {
        self.tx.send(r).await.map_err(|_| CoreGone)
    }

    /// The durable store, if any (for reads of what memory no longer keeps).
    pub fn store(&self) -> Option<Arc<Store>> {
        self.store.as_ref().and_then(std::sync::Weak::upgrade)
    }

    /// Runs `f` on the controller and returns its result.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Controller) -> T + Send + 'static,
    ) -> Result<T, CoreGone> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Read(Box::new(move |c| {
            let _ = tx.send(f(c));
        })))
        .await?;
        rx.await.map_err(|_| CoreGone)
    }

    /// Hands the controller the input `make` builds and waits for its answer.
    pub async fn call(
        &self,
        make: impl FnOnce(ReplyTo) -> Input + Send + 'static,
    ) -> Result<Reply, CoreGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Call { make: Box::new(make), reply }).await?;
        rx.await.map_err(|_| CoreGone)
    }

    /// Submits an application.
    pub async fn submit(
        &self,
        spec: AppSpec,
        templates: Vec<LaunchTemplate>,
    ) -> Result<Result<AppId, SubmitError>, CoreGone> {
        self.submit_with_id(spec, templates, None, None).await
    }

    /// Submits an application under an id handed to `caller` by [`CoreHandle::new_id`], or
    /// under a new one. Answers once its record has committed; a submission the store refuses
    /// is withdrawn and never runs.
    pub async fn submit_with_id(
        &self,
        spec: AppSpec,
        templates: Vec<LaunchTemplate>,
        id: Option<AppId>,
        caller: Caller,
    ) -> Result<Result<AppId, SubmitError>, CoreGone> {
        match self.call(move |reply| Input::Submit { reply, spec, id, caller, templates }).await? {
            Reply::Submitted(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Hands out an id for a later submission by `caller`; answers once the store has recorded
    /// that the id is taken.
    pub async fn new_id(&self, kind: IdKind, caller: Caller) -> Result<Result<u64, SubmitError>, CoreGone> {
        match self.call(move |reply| Input::NewId { reply, kind, caller }).await? {
            Reply::NewId(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Submits, updates, deletes or re-organises reservations; answers once what it changed is
    /// committed.
    pub async fn reservation(
        &self,
        op: ReservationOp,
    ) -> Result<Result<ReservationOutcome, SubmitError>, CoreGone> {
        match self.call(move |reply| Input::Reservation { reply, op }).await? {
            Reply::Reservation(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Drains a node (it keeps its containers and takes no new ones) or puts it back in service.
    /// The change is stored before it is applied, so an answered drain survives a restart and a
    /// store failure changes nothing. Returns the node's state (`GANTRY_NODE_*`).
    pub async fn set_node_drain(
        &self,
        node: String,
        drained: bool,
    ) -> Result<Result<u32, SubmitError>, CoreGone> {
        match self.call(move |reply| Input::SetNodeDrain { reply, node, drained }).await? {
            Reply::NodeDrain(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Kills an application. Answers once the kill is durable; a kill the store cannot record
    /// fails with [`SubmitError::Store`] and changes nothing.
    pub async fn kill(&self, app: AppId) -> Result<Result<(), SubmitError>, CoreGone> {
        match self.call(move |reply| Input::Kill { reply, app }).await? {
            Reply::Killed(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Reads the end of a container's log through its node's agent and waits for the answer.
    /// It does not time out by itself (an agent older than this scheduler never answers): the
    /// caller bounds the wait, and dropping the future abandons the read (its node's turn is
    /// freed at the task's next housekeeping).
    pub async fn read_log(
        &self,
        container: u64,
        stream: v1::LogStream,
        tail: Option<u64>,
    ) -> Result<Result<LogChunk, LogError>, CoreGone> {
        match self.call(move |reply| Input::ReadLog { reply, container, stream, tail }).await? {
            Reply::Log(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }
}

/// An answer of the wrong kind: a bug in the controller, reported as the core being gone
/// rather than a panic in a request handler.
fn unexpected(reply: Reply) -> CoreGone {
    tracing::error!(?reply, "the controller answered with the wrong kind of reply");
    CoreGone
}

/// The controller with what the shell needs to run it: the store (if any) and the metrics.
pub struct Core {
    controller: Controller,
    store: Option<Arc<Store>>,
    metrics: Option<Arc<crate::metrics::SchedulerMetrics>>,
    clock: Clock,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("controller", &self.controller).finish()
    }
}

/// The shell's clock: wall-clock milliseconds at the start, advanced by a monotonic clock, so
/// the controller's time never goes back when the system clock is stepped.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall_ms: u64,
    start: Instant,
}

impl Clock {
    fn new() -> Self {
        let wall_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        Clock { wall_ms, start: Instant::now() }
    }

    fn now_ms(&self) -> u64 {
        self.wall_ms + self.start.elapsed().as_millis() as u64
    }

    /// The instant at which the clock reads `ms`.
    fn instant_at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms.saturating_sub(self.wall_ms))
    }
}

/// A random cluster id for this run (never the legacy cluster's 0).
fn new_cluster_id() -> ClusterId {
    ClusterId::from_bits(rand::random::<u128>().max(1))
}

/// The controller's settings for a run started at `clock` (defaults; [`spawn`] sets the
/// configured intervals).
fn controller_config(clock: &Clock, durable: bool) -> ControllerConfig {
    ControllerConfig {
        // Milliseconds · 2^16: log request ids of one run stay below the next run's first for
        // as long as a run makes fewer than 65 536 reads per millisecond of its life.
        log_requests_after: clock.now_ms() << 16,
        durable,
        ..ControllerConfig::new(new_cluster_id())
    }
}

impl Core {
    /// A core around `engine`, without a store.
    pub fn new(engine: Engine) -> Self {
        let clock = Clock::new();
        let controller = Controller::new(engine, controller_config(&clock, false), clock.now_ms());
        Core { controller, store: None, metrics: None, clock }
    }

    /// A core that records everything in `store`, rebuilt from what it holds: live applications
    /// are restored at once; their containers when their agents re-register. Scheduling waits
    /// `grace` (the node timeout) for the agents to come back.
    pub fn recover(engine: Engine, store: Arc<Store>, grace: Duration) -> Result<Self, StoreError> {
        // Live apps whole; of the ended ones only as many as memory keeps (max_completed_apps),
        // so a restart does not read the whole history. Older ones are read by id when asked.
        let recovered = store.load_recent(engine.history_len())?;
        let clock = Clock::new();
        let config =
            ControllerConfig { node_timeout_ms: grace.as_millis() as u64, ..controller_config(&clock, true) };
        let controller = Controller::recover(engine, config, recovered, clock.now_ms());
        Ok(Core { controller, store: Some(store), metrics: None, clock })
    }

    /// Counts cycle durations, acknowledged submissions and refused registrations in `metrics`
    /// from now on.
    pub fn set_metrics(&mut self, metrics: Arc<crate::metrics::SchedulerMetrics>) {
        self.metrics = Some(metrics);
    }

    /// The controller (read-only).
    pub fn controller(&self) -> &Controller {
        &self.controller
    }
}

/// Starts the core task; returns its handle and the task.
pub fn spawn(
    mut core: Core,
    cycle_interval: Duration,
    node_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (CoreHandle, tokio::task::JoinHandle<Core>) {
    let (tx, rx) = mpsc::channel(4096);
    let store = core.store.as_ref().map(Arc::downgrade);
    let now = core.clock.now_ms();
    core.controller.set_intervals(now, cycle_interval.as_millis() as u64, node_timeout.as_millis() as u64);
    let task = tokio::spawn(Shell::new(core).run(rx, shutdown));
    (CoreHandle { tx, store }, task)
}

/// Where a reply goes.
enum Slot {
    /// A caller waiting for a [`Reply`].
    Caller(oneshot::Sender<Reply>),
    /// An agent's registration, whose stream is kept only if it is accepted.
    Registration { reply: oneshot::Sender<Result<(), Refused>>, stream: StreamId },
}

impl Slot {
    fn abandoned(&self) -> bool {
        match self {
            Slot::Caller(tx) => tx.is_closed(),
            Slot::Registration { reply, .. } => reply.is_closed(),
        }
    }
}

type Commit = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

/// The run loop's state.
struct Shell {
    core: Core,
    /// Agents' outgoing streams, by stream id.
    streams: HashMap<StreamId, (String, AgentSender)>,
    /// Callers waiting for the controller's answer.
    replies: HashMap<ReplyTo, Slot>,
    last_reply: ReplyTo,
    /// Store jobs in submission order, each with its commit to await.
    commits: VecDeque<(WriteId, Commit)>,
}

impl Shell {
    fn new(core: Core) -> Self {
        Shell {
            core,
            streams: HashMap::new(),
            replies: HashMap::new(),
            last_reply: 0,
            commits: VecDeque::new(),
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Request>, shutdown: impl Future<Output = ()>) -> Core {
        tokio::pin!(shutdown);
        let mut housekeeping = tokio::time::interval(Duration::from_millis(500));
        self.dispatch();
        loop {
            let deadline = self.core.clock.instant_at(self.core.controller.next_deadline_ms());
            tokio::select! {
                () = &mut shutdown => break,
                r = rx.recv() => {
                    let Some(r) = r else { break };
                    self.request(r);
                    // Coalesce what is already queued into this cycle.
                    while let Ok(r) = rx.try_recv() {
                        self.request(r);
                    }
                }
                () = tokio::time::sleep_until(deadline.into()) => {}
                _ = housekeeping.tick() => self.drop_abandoned(),
                committed = async {
                    match self.commits.front_mut() {
                        Some((_, c)) => c.await,
                        None => std::future::pending().await,
                    }
                }, if !self.commits.is_empty() => {
                    if let Some((write, _)) = self.commits.pop_front() {
                        self.input(Input::Committed { write, result: committed });
                    }
                }
            }
            let started = Instant::now();
            if self.core.controller.poll(self.core.clock.now_ms()) {
                if let Some(m) = &self.core.metrics {
                    m.observe_cycle(started.elapsed());
                }
            }
            self.dispatch();
        }
        // What is stored in flight still gets its outcome: held launches go out or go back.
        while let Some((write, commit)) = self.commits.pop_front() {
            let result = commit.await;
            self.input(Input::Committed { write, result });
        }
        self.core
    }

    fn input(&mut self, input: Input) {
        let now = self.core.clock.now_ms();
        self.core.controller.handle(now, input);
        self.dispatch();
    }

    fn next_reply(&mut self, slot: Slot) -> ReplyTo {
        self.last_reply += 1;
        self.replies.insert(self.last_reply, slot);
        self.last_reply
    }

    fn request(&mut self, r: Request) {
        match r {
            Request::Call { make, reply } => {
                let to = self.next_reply(Slot::Caller(reply));
                self.input(make(to));
            }
            Request::Read(f) => f(&self.core.controller),
            Request::AgentConnected { register, tx, stream, reply } => {
                self.streams.insert(stream, (register.node_name.clone(), tx));
                let to = self.next_reply(Slot::Registration { reply, stream });
                self.input(Input::AgentConnected { reply: to, stream, register });
            }
            Request::AgentMessage { node, stream, msg } => {
                self.input(Input::AgentMessage { node, stream, msg })
            }
            Request::AgentDisconnected { node, stream } => {
                self.streams.remove(&stream);
                self.input(Input::AgentDisconnected { node, stream });
            }
        }
    }

    /// Carries out the controller's outputs, feeding back what could not be delivered.
    fn dispatch(&mut self) {
        loop {
            let outputs = self.core.controller.take_outputs();
            if outputs.is_empty() {
                return;
            }
            let mut undelivered = Vec::new();
            for output in outputs {
                match output {
                    Output::ToAgent { node, stream, msg } => match self.streams.get(&stream) {
                        Some((_, tx)) => {
                            if let Err(e) = tx.try_send(Ok(v1::SchedulerMessage { msg: Some(msg) })) {
                                if let Ok(v1::SchedulerMessage { msg: Some(msg) }) = e.into_inner() {
                                    undelivered.push(Input::Undelivered { node, msg });
                                }
                            }
                        }
                        None => undelivered.push(Input::Undelivered { node, msg }),
                    },
                    Output::CloseStream { stream } => {
                        self.streams.remove(&stream);
                    }
                    Output::Store { write, writes } => self.store(write, writes),
                    Output::Reply { to, reply } => self.answer(to, reply),
                    // Not asked for (`report_engine_commands` is off in the daemon).
                    Output::EngineCommand(_) => {}
                }
            }
            let now = self.core.clock.now_ms();
            for input in undelivered {
                self.core.controller.handle(now, input);
            }
        }
    }

    /// Hands a job to the store; its outcome is awaited in order by the run loop.
    fn store(&mut self, write: WriteId, writes: Vec<gantry_controller::records::Write>) {
        let commit: Commit = match &self.core.store {
            Some(store) => match store.submit(writes) {
                Ok(ack) => Box::pin(ack),
                Err(e) => Box::pin(std::future::ready(Err(e))),
            },
            // A controller without a store makes no writes; should one come, it is not durable.
            None => Box::pin(std::future::ready(Err(StoreError::Closed))),
        };
        self.commits.push_back((write, commit));
    }

    fn answer(&mut self, to: ReplyTo, reply: Reply) {
        let Some(slot) = self.replies.remove(&to) else { return };
        let metrics = self.core.metrics.as_ref();
        match (slot, reply) {
            (Slot::Registration { reply, stream }, Reply::Registered(result)) => {
                if let (Err(Refused::Claimed { conflict, .. }), Some(m)) = (&result, metrics) {
                    m.count_registration_refused(conflict.as_str());
                }
                if result.is_err() {
                    self.streams.remove(&stream);
                }
                let _ = reply.send(result);
            }
            (Slot::Caller(tx), reply) => {
                if let (Reply::Submitted(Ok(_)), Some(m)) = (&reply, metrics) {
                    m.record_submissions(1);
                }
                let _ = tx.send(reply);
            }
            (Slot::Registration { stream, .. }, other) => {
                tracing::error!(stream, reply = ?other, "a registration got another kind of reply");
            }
        }
    }

    /// Tells the controller about callers that stopped waiting (a log read that timed out).
    fn drop_abandoned(&mut self) {
        let gone: Vec<ReplyTo> =
            self.replies.iter().filter(|(_, s)| s.abandoned()).map(|(id, _)| *id).collect();
        for reply in gone {
            self.replies.remove(&reply);
            self.input(Input::ReplyAbandoned { reply });
        }
    }
}
