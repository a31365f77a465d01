//! The daemon's core: one task owns the engine and everything that must change with it (the
//! agents' streams, the applications' launch templates, node liveness). Every other task —
//! agent streams, REST handlers — talks to it through [`CoreHandle`], so the engine stays
//! single-threaded and deterministic, as DESIGN.md asks.
//!
//! A cycle runs right after anything that can make work placeable (a submission, an exit, a node
//! registering), with the requests that arrived meanwhile coalesced into one cycle, and at the
//! latest every `cycle_interval`.
//!
//! Every run has a cluster id of its own (random, made at start) that its launches carry, as
//! YARN's container ids carry the ResourceManager's start time: an agent names containers by
//! (cluster id, container id), so a scheduler on a fresh data directory, a restored backup or
//! another cluster's state never mistakes an agent's older containers for its own, whatever
//! their numbers. The core applies only what agents report about its own containers — those it
//! launched, under its cluster id or (on an agent older than cluster ids) the legacy one, and
//! the live ones restored from the store under the cluster ids they were launched with
//! ([`Core::cluster_of`]) — and kills the others when their agent registers.
//!
//! Container logs stay on the node that ran the container (as YARN's NodeManager keeps them):
//! [`CoreHandle::read_log`] sends a `ReadLog` down that node's stream and hands back the agent's
//! `LogChunk`. A read in flight fails as soon as its stream ends, is replaced or its node is
//! lost; one whose caller gave up is dropped at the next liveness tick.

pub use super::app_history::LaunchedContainer;
mod conditions;

use super::app_history::{AppHistory, EndedApp};
use super::exit_words;
use super::handed_out::{Caller, HandedOut};
use gantry_engine::{
    AppId, AppSpec, Command, ContainerId, Engine, EngineError, Event, GpuSpec, NodeCondition, NodeSpec,
    Resources,
};
use gantry_proto::ClusterId;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use gantry_sdk::abi::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Log reads one node serves at a time; more wait for a slot ([`Core::log_target`]). An answer
/// is up to 4 MiB that the agent holds until it is sent, and agents have a small memory budget.
pub const LOG_READS_PER_NODE: usize = 2;

/// What runs in a container: the program and its environment (per request of an application).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaunchTemplate {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The Unix account the containers run as (`[security] accounts`); `None` = the agent's
    /// `container_user`. Absent in templates stored before accounts existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The submitting user (the app's), for whom an agent without an account to use runs the
    /// containers under a uid of their own. Absent in templates stored before isolation: such
    /// launches carry the app's user from the engine instead.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub submitter: String,
    /// Most processes per container; `None`: the node's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u64>,
    /// The containers' disk allowance, bytes (`Launch.disk_bytes`); `None` = the node's
    /// default. Absent in templates stored before disk allowances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// Messages to the core.
pub enum Request {
    /// Submit an application; the reply is its id.
    Submit {
        /// The engine's view of it.
        spec: AppSpec,
        /// An id handed out earlier by `new-application`, if the client uses one: it must have
        /// been handed to `caller` and not used (see [`super::handed_out`]).
        id: Option<AppId>,
        /// Who submits (the authenticated user; `None` without tokens).
        caller: Caller,
        /// One template per request, in order.
        templates: Vec<LaunchTemplate>,
        /// Where the id goes, with the store's acknowledgement to await before telling the
        /// client (none without a store).
        reply: oneshot::Sender<Result<(AppId, Option<crate::store::Ack>), EngineError>>,
    },
    /// A submission the engine took could not be stored: end it (nothing unacknowledged runs).
    Withdraw {
        /// The app.
        app: AppId,
        /// Why.
        reason: String,
    },
    /// Hand out an id for a later submission (`new-application`, `new-reservation`): the engine
    /// never gives it to anyone else, and the store records that before the id is answered.
    NewId {
        /// Which kind of id.
        kind: IdKind,
        /// Who may use it.
        caller: Caller,
        /// The id and the acknowledgement to await before answering (none without a store).
        reply: oneshot::Sender<Result<(u64, Option<crate::store::Ack>), SubmitError>>,
    },
    /// First step of killing an application: check it is live and queue its KILLED state to the
    /// store; nothing changes in the engine until [`Request::ApplyKill`] follows the commit, so
    /// a kill that cannot be stored is answered 503 and changes nothing.
    StoreKill {
        /// The app.
        app: AppId,
        /// The acknowledgement to await (none without a store), or why not.
        reply: oneshot::Sender<Result<Option<crate::store::Ack>, SubmitError>>,
    },
    /// Second step: the kill is stored; stop the application's containers.
    ApplyKill {
        /// The app.
        app: AppId,
        /// Done (an app that ended by itself meanwhile is fine: its own end is stored after).
        reply: oneshot::Sender<()>,
    },
    /// First step of draining (`drained`) or undraining a node: check the node and queue the
    /// change to the store; the reply carries the store's acknowledgement. Nothing changes in
    /// the engine until [`Request::ApplyNodeDrain`] follows the commit.
    StoreNodeDrain {
        /// Node name.
        node: String,
        /// Drain (true) or undrain.
        drained: bool,
        /// The change's sequence number and the acknowledgement to await (none without a
        /// store), or why not.
        reply: oneshot::Sender<Result<(u64, Option<crate::store::Ack>), SubmitError>>,
    },
    /// Second step: the change is stored; apply it and answer the node's state.
    ApplyNodeDrain {
        /// Node name.
        node: String,
        /// Drain (true) or undrain.
        drained: bool,
        /// Its sequence number from the first step: a change stored later for the same node and
        /// already applied wins (the store commits in sequence order).
        seq: u64,
        /// The node's state afterwards (`GANTRY_NODE_*`).
        reply: oneshot::Sender<Result<u32, EngineError>>,
    },
    /// A reservation submitted, updated, deleted or re-organised: the engine decides at once;
    /// the reply carries the outcome and the store's acknowledgement to await before answering.
    Reservation {
        /// What to do.
        op: ReservationOp,
        /// The outcome, or why not.
        reply: oneshot::Sender<Result<(ReservationOutcome, Option<crate::store::Ack>), SubmitError>>,
    },
    /// Run a read-only function on the core (for queries).
    Read(Box<dyn FnOnce(&Core) + Send>),
    /// An agent opened a stream and registered.
    AgentConnected {
        /// Its registration.
        register: v1::Register,
        /// Its outgoing stream.
        tx: mpsc::Sender<Result<v1::SchedulerMessage, tonic::Status>>,
        /// Identifies this stream (a reconnect gets a new one).
        stream: u64,
        /// Accepted, or why not.
        reply: oneshot::Sender<Result<(), super::node_claim::Refused>>,
    },
    /// A message on an agent's stream.
    AgentMessage {
        /// Node name.
        node: String,
        /// Stream id.
        stream: u64,
        /// The message.
        msg: Up,
    },
    /// An agent's stream ended.
    AgentDisconnected {
        /// Node name.
        node: String,
        /// Stream id.
        stream: u64,
    },
    /// Read the end of a container's log through the agent of the node that ran it.
    ReadLog {
        /// Container id.
        container: u64,
        /// Which file.
        stream: v1::LogStream,
        /// Only the last this many bytes; `None` = the whole file (the agent caps both at 4 MiB).
        tail: Option<u64>,
        /// The agent's answer, or why there is none.
        reply: oneshot::Sender<Result<LogChunk, LogError>>,
    },
}

/// A piece of a container's log, as its agent read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogChunk {
    /// The last bytes of the file (at most 4 MiB).
    pub data: Vec<u8>,
    /// The file's size when the agent read it.
    pub file_size_bytes: u64,
}

/// Why a container's log could not be had. Each says what a person can do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The scheduler knows no container of this id (never launched, or forgotten long ago).
    #[error("container {0} not found")]
    UnknownContainer(u64),
    /// The node that ran the container has no stream to the scheduler now.
    #[error(
        "node {node}, which ran container {container}, is not connected; its logs can be read once its agent is back"
    )]
    NodeNotConnected {
        /// The node.
        node: String,
        /// The container.
        container: u64,
    },
    /// The node's stream ended (or was replaced) before the agent answered.
    #[error("node {node} disconnected before it sent container {container}'s log; try again")]
    Disconnected {
        /// The node.
        node: String,
        /// The container.
        container: u64,
    },
    /// The agent could not read the file; its reason (e.g. "no stdout for container 12").
    #[error("{0}")]
    Agent(String),
}

/// A log read sent to an agent and not answered yet.
struct PendingLog {
    node: String,
    container: u64,
    stream: u64,
    reply: oneshot::Sender<Result<LogChunk, LogError>>,
}

/// A cheap, cloneable way to talk to the core.
#[derive(Debug, Clone)]
pub struct CoreHandle {
    tx: mpsc::Sender<Request>,
    metrics: Option<Arc<crate::metrics::SchedulerMetrics>>,
}

/// Why a submission was not acknowledged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    /// The engine refused it.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// It could not be made durable.
    #[error("not stored: {0}")]
    Store(crate::store::StoreError),
}

/// Which kind of id [`Request::NewId`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// An application id (`new-application`).
    App,
    /// A reservation id (`new-reservation`).
    Reservation,
}

/// A change to the reservation plan (see [`Request::Reservation`]).
#[derive(Debug)]
pub enum ReservationOp {
    /// Admit a new reservation.
    Submit {
        /// An id from `new-reservation`, or none.
        id: Option<gantry_engine::ReservationId>,
        /// Who submits (the authenticated user; `None` without tokens): an `id` must have been
        /// handed to them.
        caller: Caller,
        /// What it asks for.
        request: gantry_engine::ReservationRequest,
    },
    /// Replace a reservation's definition.
    Update {
        /// The reservation.
        id: gantry_engine::ReservationId,
        /// Its new request.
        request: gantry_engine::ReservationRequest,
    },
    /// Delete a reservation.
    Delete {
        /// The reservation.
        id: gantry_engine::ReservationId,
    },
    /// Ask the planner to re-organise the plan now (OPTIMIZE).
    Optimize,
}

/// What a [`ReservationOp`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReservationOutcome {
    /// Accepted (or updated, or deleted, or re-organised): the reservation's id and, unless it
    /// was deleted, its record; `moved` reservations were re-placed to make room.
    Accepted {
        /// The reservation (0 for an optimisation).
        id: gantry_engine::ReservationId,
        /// How many other reservations moved.
        moved: usize,
    },
    /// The plan has no room; nothing changed.
    Rejected {
        /// The id it was submitted under.
        id: gantry_engine::ReservationId,
        /// Why.
        reason: String,
    },
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

    /// Runs `f` on the core and returns its result.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Core) -> T + Send + 'static,
    ) -> Result<T, CoreGone> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Read(Box::new(move |core| {
            let _ = tx.send(f(core));
        })))
        .await?;
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

    /// Hands out an id for a later submission by `caller`; answers once the store has recorded
    /// that the id is taken.
    pub async fn new_id(&self, kind: IdKind, caller: Caller) -> Result<Result<u64, SubmitError>, CoreGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::NewId { kind, caller, reply }).await?;
        Ok(match rx.await.map_err(|_| CoreGone)? {
            Err(e) => Err(e),
            Ok((id, Some(ack))) => ack.await.map(|()| id).map_err(SubmitError::Store),
            Ok((id, None)) => Ok(id),
        })
    }

    /// Submits an application under an id handed to `caller` by [`CoreHandle::new_id`], or
    /// under a new one.
    pub async fn submit_with_id(
        &self,
        spec: AppSpec,
        templates: Vec<LaunchTemplate>,
        id: Option<AppId>,
        caller: Caller,
    ) -> Result<Result<AppId, SubmitError>, CoreGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Submit { spec, id, caller, templates, reply }).await?;
        match rx.await.map_err(|_| CoreGone)? {
            Err(e) => Ok(Err(SubmitError::Engine(e))),
            // Acknowledged once committed (at once without a store).
            Ok((id, ack)) => {
                let committed = match ack {
                    Some(ack) => ack.await.map(|()| id).map_err(SubmitError::Store),
                    None => Ok(id),
                };
                if let Err(e) = &committed {
                    // The engine took it but the store did not: the client is told 503, so the
                    // application must not run. (It stays visible as KILLED until it ages out.)
                    let reason = format!("withdrawn: the submission could not be stored ({e})");
                    self.send(Request::Withdraw { app: id, reason }).await?;
                }
                if let (Ok(_), Some(m)) = (&committed, &self.metrics) {
                    m.record_submissions(1);
                }
                Ok(committed)
            }
        }
    }

    /// Submits, updates, deletes or re-organises reservations; answers once what it changed is
    /// committed.
    pub async fn reservation(
        &self,
        op: ReservationOp,
    ) -> Result<Result<ReservationOutcome, SubmitError>, CoreGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Reservation { op, reply }).await?;
        match rx.await.map_err(|_| CoreGone)? {
            Err(e) => Ok(Err(e)),
            Ok((outcome, Some(ack))) => Ok(ack.await.map(|()| outcome).map_err(SubmitError::Store)),
            Ok((outcome, None)) => Ok(Ok(outcome)),
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
        let (reply, rx) = oneshot::channel();
        self.send(Request::StoreNodeDrain { node: node.clone(), drained, reply }).await?;
        let seq = match rx.await.map_err(|_| CoreGone)? {
            Err(e) => return Ok(Err(e)),
            Ok((seq, Some(ack))) => {
                if let Err(e) = ack.await {
                    return Ok(Err(SubmitError::Store(e)));
                }
                seq
            }
            Ok((seq, None)) => seq,
        };
        let (reply, rx) = oneshot::channel();
        self.send(Request::ApplyNodeDrain { node, drained, seq, reply }).await?;
        Ok(rx.await.map_err(|_| CoreGone)?.map_err(SubmitError::Engine))
    }

    /// Kills an application. Answers once the kill is durable; a kill the store cannot record
    /// fails with [`SubmitError::Store`] and changes nothing.
    pub async fn kill(&self, app: AppId) -> Result<Result<(), SubmitError>, CoreGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::StoreKill { app, reply }).await?;
        match rx.await.map_err(|_| CoreGone)? {
            Err(e) => return Ok(Err(e)),
            Ok(Some(ack)) => {
                if let Err(e) = ack.await {
                    return Ok(Err(SubmitError::Store(e)));
                }
            }
            Ok(None) => {}
        }
        let (reply, rx) = oneshot::channel();
        self.send(Request::ApplyKill { app, reply }).await?;
        rx.await.map_err(|_| CoreGone)?;
        Ok(Ok(()))
    }

    /// Reads the end of a container's log through its node's agent and waits for the answer.
    /// It does not time out by itself (an agent older than this scheduler never answers): the
    /// caller bounds the wait, and dropping the future abandons the read. Take a slot of
    /// [`Core::log_target`] first, so a node serves few reads at once.
    pub async fn read_log(
        &self,
        container: u64,
        stream: v1::LogStream,
        tail: Option<u64>,
    ) -> Result<Result<LogChunk, LogError>, CoreGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::ReadLog { container, stream, tail, reply }).await?;
        rx.await.map_err(|_| CoreGone)
    }
}

/// What the core keeps of a connected agent.
#[derive(Debug)]
pub struct AgentLink {
    tx: mpsc::Sender<Result<v1::SchedulerMessage, tonic::Status>>,
    stream: u64,
    last_seen: Instant,
    /// The agent's last usage report.
    pub last_status: Option<v1::Status>,
    /// It names containers by cluster id too (`Register.reports_cluster_ids`); an older agent
    /// reports none, and means the containers this scheduler addressed.
    reports_cluster_ids: bool,
    /// Its instance id (`Register.instance_id`; empty from an older agent): who holds the name
    /// ([`super::node_claim`]).
    instance: String,
    /// The conditions it reports now (`DiskPressure`, …): the node takes no new work while
    /// there are any (see `conditions.rs`).
    pub conditions: Vec<v1::NodeCondition>,
}

impl AgentLink {
    /// Identifies the agent's current stream (a reconnect gets a new one; 0 once it ended).
    pub fn stream(&self) -> u64 {
        self.stream
    }
}

/// Counters of the core's own work.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CoreStats {
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

/// The engine and its surroundings, owned by the core task.
pub struct Core {
    engine: Engine,
    /// This run's cluster id, carried by every launch (see the module's documentation).
    cluster: ClusterId,
    /// Live containers their agents know by another cluster id than this run's: those restored
    /// from the store that earlier runs launched, and those launched on an agent older than
    /// cluster ids (which names every container legacy). Ended ones are dropped at the liveness
    /// check (the launch history, which forgets old applications, still names them).
    known_as: HashMap<u64, ClusterId>,
    agents: HashMap<String, AgentLink>,
    /// Messages to agents held back until a store write commits, in batches: a launch must not
    /// reach an agent before its container's record is durable, or a crash in between lets the
    /// restarted scheduler run the work a second time. A launch opens a batch with its record's
    /// acknowledgement; later messages to a node with a held launch join the newest batch, so
    /// each node still gets its messages in order (a kill never overtakes its launch), while
    /// other nodes' messages (status acks, pings) go at once. The run loop awaits the oldest
    /// batch's commit alongside its other work and releases it ([`Core::release_batch`]).
    held: std::collections::VecDeque<HeldBatch>,
    /// Nodes with messages in `held`.
    held_nodes: HashSet<String>,
    /// Live applications' submissions, by id.
    submissions: HashMap<u64, Submission>,
    /// Launches sent, by container: to answer "which app/request" when the agent reports.
    dirty: bool,
    stats: CoreStats,
    started: Instant,
    /// Application ids handed out by `new-application` and not used yet, with their callers.
    handed_out_apps: HandedOut,
    /// Reservation ids handed out by `new-reservation` and not used yet, with their callers.
    handed_out_reservations: HandedOut,
    /// Submissions the engine took whose record the store refused, withdrawn: their end is not
    /// written (there is no record, and the id is never another app's).
    unstored_apps: HashSet<u64>,
    /// Containers launched, and ended applications' records.
    history: AppHistory,
    /// The durable store, if the daemon has one.
    store: Option<std::sync::Arc<crate::store::Store>>,
    /// After a restart: containers the store says were running, by node, restored when their
    /// agent re-registers; scheduling waits until `recovering_until` so they are not placed twice.
    awaiting: HashMap<String, Vec<crate::store::ContainerRecord>>,
    recovering_until: Option<Instant>,
    /// Submissions larger than the largest node are refused only from then on: after a
    /// (re)start the agents have a node timeout to come back, and a cluster half registered
    /// is no measure of what fits (`None`: from the start).
    sizes_checked_from: Option<Instant>,
    /// Applications that had ended before the last restart (the engine's history starts empty).
    past: Vec<gantry_engine::state::AppSummary>,
    /// Log reads sent to agents and not answered yet, by request id.
    log_reads: HashMap<u64, PendingLog>,
    /// The last log request id used. Starts from the clock, so an answer to a read of a
    /// previous scheduler run that arrives late cannot match a new read's id.
    last_log_request: u64,
    /// Per node, the slots of [`LOG_READS_PER_NODE`] concurrent log reads.
    log_slots: HashMap<String, Arc<Semaphore>>,
    /// Where cycle durations and acknowledged submissions are counted, if anywhere.
    metrics: Option<Arc<crate::metrics::SchedulerMetrics>>,
    /// How long a node's agent may be silent before the node is lost; until then it holds its
    /// name against other agent instances ([`super::node_claim`]). Set by [`spawn`].
    node_timeout: Duration,
    /// Nodes an operator drained (stored): applied again whenever such a node (re-)registers,
    /// since a lost node comes back RUNNING in the engine.
    drained: HashSet<String>,
    /// The last drain change's sequence number, and per node the latest one applied: two
    /// changes of one node in flight at once end as the store ends, whatever order their
    /// commits are answered in.
    drain_seq: u64,
    drain_applied: HashMap<String, u64>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("engine", &self.engine).field("agents", &self.agents.len()).finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
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

/// Per request of a live app, the stored containers that completed and must not run again
/// after a restart. A gang restarts whole when a member ends otherwise (its completed members run
/// again), so for a gang only completions after its last other end count.
fn completed_per_request(spec: &AppSpec, stored: &[&crate::store::ContainerRecord]) -> Vec<u32> {
    spec.requests
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let mine = || stored.iter().filter(|c| c.request as usize == k);
            let restarted_after = if r.gang {
                mine()
                    .filter(|c| {
                        matches!(
                            c.state,
                            GANTRY_CONTAINER_FAILED | GANTRY_CONTAINER_LOST | GANTRY_CONTAINER_KILLED
                        )
                    })
                    .map(|c| c.id.0)
                    .max()
                    .unwrap_or(0)
            } else {
                0
            };
            let done =
                mine().filter(|c| c.state == GANTRY_CONTAINER_COMPLETED && c.id.0 > restarted_after).count();
            (done as u32).min(r.count)
        })
        .collect()
}

/// A live application's submission: its launch templates (the engine carries neither commands
/// nor environments) and its spec, kept for its record once it ends.
#[derive(Debug, Default)]
struct Submission {
    spec: AppSpec,
    templates: Vec<LaunchTemplate>,
}

fn down(msg: Down) -> Result<v1::SchedulerMessage, tonic::Status> {
    Ok(v1::SchedulerMessage { msg: Some(msg) })
}

impl Core {
    /// A core around `engine`.
    pub fn new(engine: Engine) -> Self {
        Core {
            history: AppHistory::new(engine.history_len()),
            engine,
            // Random, never the legacy cluster's 0: unique across scheduler states.
            cluster: ClusterId::from_bits(rand::random::<u128>().max(1)),
            known_as: HashMap::new(),
            agents: HashMap::new(),
            submissions: HashMap::new(),
            dirty: false,
            stats: CoreStats::default(),
            started: Instant::now(),
            handed_out_apps: HandedOut::new("application", "new-application"),
            handed_out_reservations: HandedOut::new("reservation", "new-reservation"),
            unstored_apps: HashSet::new(),
            held: std::collections::VecDeque::new(),
            held_nodes: HashSet::new(),
            store: None,
            awaiting: HashMap::new(),
            recovering_until: None,
            sizes_checked_from: None,
            past: Vec::new(),
            log_reads: HashMap::new(),
            // Milliseconds · 2^16: ids of one run stay below the next run's first for as long as
            // a run makes fewer than 65 536 reads per millisecond of its life.
            last_log_request: now_ms() << 16,
            log_slots: HashMap::new(),
            metrics: None,
            // The configuration's default; `spawn` sets the configured one.
            node_timeout: Duration::from_secs(10),
            drained: HashSet::new(),
            drain_seq: 0,
            drain_applied: HashMap::new(),
        }
    }

    /// Counts cycle durations and acknowledged submissions in `metrics` from now on.
    pub fn set_metrics(&mut self, metrics: Arc<crate::metrics::SchedulerMetrics>) {
        self.metrics = Some(metrics);
    }

    /// Nodes an operator has drained (they stay drained across restarts and absences).
    pub fn drained_nodes(&self) -> &HashSet<String> {
        &self.drained
    }

    fn store_node_drain(
        &mut self,
        node: String,
        drained: bool,
    ) -> Result<(u64, Option<crate::store::Ack>), SubmitError> {
        if self.engine.state().node_by_name(&node).is_none() {
            return Err(SubmitError::Engine(EngineError::UnknownNode(node)));
        }
        self.drain_seq += 1;
        let seq = self.drain_seq;
        let Some(store) = &self.store else { return Ok((seq, None)) };
        store
            .submit(vec![crate::store::Write::NodeDrain { node, drained, at_ms: now_ms() }])
            .map(|ack| (seq, Some(ack)))
            .map_err(SubmitError::Store)
    }

    /// Applies a stored drain or undrain. A lost node only remembers it (it is applied when the
    /// node registers again); undraining a node that is not draining changes nothing.
    fn apply_node_drain(&mut self, node: &str, drained: bool, seq: u64) -> Result<u32, EngineError> {
        let idx = self
            .engine
            .state()
            .node_by_name(node)
            .ok_or_else(|| EngineError::UnknownNode(node.to_owned()))?;
        let applied = self.drain_applied.entry(node.to_owned()).or_default();
        if seq <= *applied {
            // A change stored after this one is already in force.
            return Ok(self.engine.state().nodes()[idx.0 as usize].state);
        }
        *applied = seq;
        if drained {
            self.drained.insert(node.to_owned());
        } else {
            self.drained.remove(node);
        }
        let state = self.engine.state().nodes()[idx.0 as usize].state;
        let wanted = match (drained, state) {
            (true, GANTRY_NODE_RUNNING | GANTRY_NODE_UNHEALTHY) => Some(NodeCondition::Draining),
            // Back to what its agent's conditions say (RUNNING, or UNHEALTHY under pressure).
            (false, GANTRY_NODE_DRAINING) => Some(self.undrained_state(node)),
            _ => None,
        };
        if let Some(condition) = wanted {
            self.event(Event::NodeStateChanged { node: node.to_owned(), state: condition })?;
            // An undrained node has room for pending work.
            self.dirty = true;
        }
        tracing::info!(%node, drained, "node drain changed");
        Ok(self.engine.state().nodes()[idx.0 as usize].state)
    }

    /// Applications that had ended before the last restart, oldest first.
    pub fn past(&self) -> &[gantry_engine::state::AppSummary] {
        &self.past
    }

    /// The durable store, if any (for reads of what memory no longer keeps).
    pub fn store(&self) -> Option<std::sync::Arc<crate::store::Store>> {
        self.store.clone()
    }

    /// A core that records everything in `store`, rebuilt from what it holds: live applications
    /// are restored at once; their containers when their agents re-register. Scheduling waits
    /// `grace` (the node timeout) for the agents to come back.
    pub fn recover(
        engine: Engine,
        store: std::sync::Arc<crate::store::Store>,
        grace: Duration,
    ) -> Result<Self, crate::store::StoreError> {
        // Live apps whole; of the ended ones only as many as memory keeps (max_completed_apps),
        // so a restart does not read the whole history. Older ones are read by id when asked.
        let recovered = store.load_recent(engine.history_len())?;
        let mut core = Core::new(engine);
        // Every id the store has seen (ended and deleted apps included) or handed out is taken:
        // without this a restarted engine counts from 1 again and overwrites what is stored.
        let taken = Event::IdsTaken {
            app_below: recovered.next_app_id,
            container_below: recovered.next_container_id,
            reservation_below: recovered.next_reservation_id,
        };
        if let Err(e) = core.engine.handle(now_ms(), taken) {
            tracing::error!(error = %e, "cannot restore the id counters");
        }
        // Reservations first: their queues must exist before their applications come back.
        for r in recovered.plan_reservations {
            let event = Event::ReservationRestored {
                id: r.id,
                request: r.request,
                submit_ms: r.submit_ms,
                allocation: r.allocation,
            };
            match core.engine.handle(now_ms(), event) {
                Ok(commands) => {
                    if commands.iter().any(|c| matches!(c, Command::ReservationEnded { .. })) {
                        // Its deadline passed while the scheduler was down.
                        if let Err(e) =
                            store.submit(vec![crate::store::Write::DeletePlanReservation { id: r.id }])
                        {
                            tracing::warn!(reservation = r.id.0, error = %e, "cannot forget an ended reservation");
                        }
                    }
                }
                Err(e) => tracing::error!(reservation = r.id.0, error = %e, "cannot restore reservation"),
            }
        }
        let mut live_apps = std::collections::HashSet::new();
        let mut by_app: HashMap<u64, Vec<&crate::store::ContainerRecord>> = HashMap::new();
        for c in &recovered.containers {
            by_app.entry(c.app.0).or_default().push(c);
        }
        for a in recovered.apps {
            if !matches!(a.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                let stored = by_app.get(&a.id.0).map(Vec::as_slice).unwrap_or_default();
                let ended = EndedApp::from_record(&a, stored, core.engine.default_max_attempts());
                core.history.remember_end(a.id.0, ended);
                core.past.push(gantry_engine::state::AppSummary {
                    id: a.id,
                    name: a.spec.name.clone(),
                    queue: a.spec.queue.clone(),
                    user: a.spec.user.clone(),
                    state: a.state,
                    diagnostics: a.diagnostics.clone(),
                });
                continue;
            }
            let templates: Vec<LaunchTemplate> = serde_json::from_value(a.launch.clone()).unwrap_or_default();
            let submission = Submission { spec: a.spec.clone(), templates };
            let stored = by_app.get(&a.id.0).map(Vec::as_slice).unwrap_or_default();
            let event = Event::AppRestored {
                app: a.id,
                completed: completed_per_request(&a.spec, stored),
                spec: a.spec,
                state: a.state,
                failures: stored.iter().filter(|c| c.state == GANTRY_CONTAINER_FAILED).count() as u32,
                submit_ms: a.submit_ms,
            };
            match core.engine.handle(now_ms(), event) {
                Ok(_) => {
                    core.submissions.insert(a.id.0, submission);
                    live_apps.insert(a.id.0);
                }
                Err(e) => tracing::error!(app = a.id.0, error = %e, "cannot restore application"),
            }
        }
        for c in recovered.containers {
            // Every stored container is remembered with its node, so `gantry app` lists it and
            // its logs can be read from that node after the restart too.
            core.history.remember_launch(c.app.0, LaunchedContainer::from(&c));
            if live_apps.contains(&c.app.0) && gantry_engine::state::container_is_live(c.state) {
                core.known_as.insert(c.id.0, c.cluster);
                core.awaiting.entry(c.node.clone()).or_default().push(c);
            }
        }
        // As many as the engine keeps of its own (max_completed_apps); older ones are read from
        // the store when asked for by id.
        let keep = core.past.len().saturating_sub(core.engine.history_len());
        core.past.drain(..keep);
        tracing::info!(
            ended = core.past.len(),
            apps = live_apps.len(),
            containers = core.awaiting.values().map(Vec::len).sum::<usize>(),
            "restored from the store"
        );
        core.drained = recovered.drained_nodes.into_iter().collect();
        core.store = Some(store);
        core.recovering_until = Some(Instant::now() + grace);
        core.sizes_checked_from = Some(Instant::now() + grace);
        Ok(core)
    }

    /// Queues writes to the store without waiting (container and state records: a crash before
    /// they commit costs a rerun, never an acknowledged submission).
    /// Queues `writes` without waiting; the returned acknowledgement resolves once they commit
    /// (`None` without a store, or when the store refused them).
    fn persist(&self, writes: Vec<crate::store::Write>) -> Option<crate::store::Ack> {
        let store = self.store.as_ref()?;
        store.submit(writes).map_err(|e| tracing::error!(error = %e, "store refused a write")).ok()
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

    /// A launched container, as remembered.
    fn launched_container(&self, container: u64) -> Option<&LaunchedContainer> {
        self.history.container(container)
    }

    /// The node that ran (or runs) a container, as remembered.
    pub fn container_node(&self, container: u64) -> Option<&str> {
        self.history.container(container).map(|c| c.node.as_str())
    }

    /// This run's cluster id.
    pub fn cluster(&self) -> ClusterId {
        self.cluster
    }

    /// The cluster id agents know a container by, as recorded when it was launched: an earlier
    /// run's for one restored from the store, the legacy one for one launched on an agent older
    /// than cluster ids, this run's otherwise (and for a container it does not remember).
    pub fn cluster_of(&self, container: u64) -> ClusterId {
        self.known_as
            .get(&container)
            .copied()
            .or_else(|| self.launched_container(container).map(|c| c.cluster))
            .unwrap_or(self.cluster)
    }

    /// How many live containers agents know by a cluster id other than this run's (the
    /// containers [`Core::cluster_of`] must remember for as long as they live, and no longer).
    pub fn renamed_containers(&self) -> usize {
        self.known_as.len()
    }

    /// The cluster id a container launched on `node` now gets: this run's, unless the node's
    /// agent is older than cluster ids (it names its containers legacy, and keeps doing so for
    /// them after an upgrade).
    fn launch_cluster(&self, node: &str) -> ClusterId {
        match self.agents.get(node) {
            Some(link) if !link.reports_cluster_ids => ClusterId::LEGACY,
            _ => self.cluster,
        }
    }

    /// Whether a container `node`'s agent reports under `cluster` is this scheduler's (see
    /// [`Core::cluster_of`]); an agent older than cluster ids means the one this scheduler
    /// addressed.
    fn ours(&self, node: &str, cluster: &str, container: u64) -> bool {
        let aware = self.agents.get(node).is_some_and(|l| l.reports_cluster_ids);
        !aware || ClusterId::parse(cluster).is_ok_and(|c| c == self.cluster_of(container))
    }

    /// Where a container's log is: its node, and that node's log-read slots (wait for one,
    /// then [`CoreHandle::read_log`]). Fails at once for an unknown container or a node without
    /// a stream, so callers do not wait for a slot in vain.
    pub fn log_target(&self, container: u64) -> Result<(String, Arc<Semaphore>), LogError> {
        let node = self.container_node(container).ok_or(LogError::UnknownContainer(container))?;
        let not_connected = || LogError::NodeNotConnected { node: node.to_owned(), container };
        match (self.agents.get(node), self.log_slots.get(node)) {
            (Some(link), Some(slots)) if link.stream != 0 => Ok((node.to_owned(), slots.clone())),
            _ => Err(not_connected()),
        }
    }

    /// Log reads waiting for their agent's answer.
    pub fn log_reads_in_flight(&self) -> usize {
        self.log_reads.len()
    }

    /// Sends a `ReadLog` to the container's node and keeps the reply slot for its `LogChunk`.
    fn read_log(
        &mut self,
        container: u64,
        stream: v1::LogStream,
        tail: Option<u64>,
        reply: oneshot::Sender<Result<LogChunk, LogError>>,
    ) {
        let Some((node, cluster)) = self.launched_container(container).map(|c| (c.node.clone(), c.cluster))
        else {
            let _ = reply.send(Err(LogError::UnknownContainer(container)));
            return;
        };
        let link_stream = self.agents.get(&node).map_or(0, |l| l.stream);
        if link_stream == 0 {
            let _ = reply.send(Err(LogError::NodeNotConnected { node, container }));
            return;
        }
        self.last_log_request += 1;
        let request_id = self.last_log_request;
        let read = v1::ReadLog {
            request_id,
            container_id: container,
            stream: stream as i32,
            tail_bytes: tail,
            cluster_id: cluster.to_wire(),
        };
        if !self.send_to(&node, Down::ReadLog(read)) {
            // The stream is closed or its queue full: either way the agent will not hear it.
            let _ = reply.send(Err(LogError::NodeNotConnected { node, container }));
            return;
        }
        self.log_reads.insert(request_id, PendingLog { node, container, stream: link_stream, reply });
    }

    /// Hands an agent's `LogChunk` to the read waiting for it. An answer to a read this core
    /// did not send to this very stream is ignored.
    fn log_chunk(&mut self, node: &str, stream: u64, chunk: v1::LogChunk) {
        let ours =
            self.log_reads.get(&chunk.request_id).is_some_and(|p| p.node == node && p.stream == stream);
        let Some(pending) = ours.then(|| self.log_reads.remove(&chunk.request_id)).flatten() else {
            tracing::debug!(%node, request = chunk.request_id, "log answer for no read in flight");
            return;
        };
        let outcome = if chunk.error.is_empty() {
            Ok(LogChunk { data: chunk.data, file_size_bytes: chunk.file_size_bytes })
        } else {
            Err(LogError::Agent(chunk.error))
        };
        let _ = pending.reply.send(outcome);
    }

    /// Fails the log reads sent to `node` on the streams `gone` picks: those streams have
    /// ended (or been replaced), and their answers will never come.
    fn fail_log_reads(&mut self, node: &str, gone: impl Fn(u64) -> bool) {
        let gone: Vec<u64> = self
            .log_reads
            .iter()
            .filter(|(_, p)| p.node == node && gone(p.stream))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            if let Some(p) = self.log_reads.remove(&id) {
                let _ = p
                    .reply
                    .send(Err(LogError::Disconnected { node: node.to_owned(), container: p.container }));
            }
        }
    }

    /// Checks that `app` is live and queues its KILLED state to the store; the engine is not told
    /// until the write commits ([`Request::ApplyKill`]).
    fn store_kill(&mut self, app: AppId) -> Result<Option<crate::store::Ack>, SubmitError> {
        match self.engine.app_state(app) {
            None => return Err(SubmitError::Engine(EngineError::UnknownApp(app.0))),
            Some(state) if gantry_engine::state::app_is_terminal(state) => {
                return Err(SubmitError::Engine(EngineError::Conflict(format!(
                    "application {} has already ended",
                    app.0
                ))));
            }
            Some(_) => {}
        }
        let Some(store) = &self.store else { return Ok(None) };
        let write = crate::store::Write::AppState {
            id: app,
            state: GANTRY_APP_KILLED,
            diagnostics: gantry_engine::KILLED_BY_REQUEST.to_owned(),
            at_ms: now_ms(),
        };
        store.submit(vec![write]).map(Some).map_err(SubmitError::Store)
    }

    /// Hands out an id of `kind` for a later submission by `caller`: the engine's counter moves
    /// past it (so no other submission gets it) and the store records the move, so it is never
    /// given again after a restart either.
    fn new_id(
        &mut self,
        kind: IdKind,
        caller: Caller,
    ) -> Result<(u64, Option<crate::store::Ack>), SubmitError> {
        let (id, taken) = match kind {
            IdKind::App => {
                let id = self.engine.state().next_app_id();
                (id, Event::IdsTaken { app_below: id + 1, container_below: 0, reservation_below: 0 })
            }
            IdKind::Reservation => {
                let id = self.engine.next_reservation_id();
                (id, Event::IdsTaken { app_below: 0, container_below: 0, reservation_below: id + 1 })
            }
        };
        let next = crate::store::NextIds {
            app: if kind == IdKind::App { id + 1 } else { 0 },
            container: 0,
            reservation: if kind == IdKind::Reservation { id + 1 } else { 0 },
        };
        let ack = match &self.store {
            None => None,
            Some(store) => {
                Some(store.submit(vec![crate::store::Write::NextIds(next)]).map_err(SubmitError::Store)?)
            }
        };
        self.event(taken)?;
        match kind {
            IdKind::App => self.handed_out_apps.hand_out(id, caller),
            IdKind::Reservation => self.handed_out_reservations.hand_out(id, caller),
        }
        Ok((id, ack))
    }

    /// The engine (read-only).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Connected agents by node name.
    pub fn agents(&self) -> &HashMap<String, AgentLink> {
        &self.agents
    }

    /// The core's counters.
    pub fn stats(&self) -> &CoreStats {
        &self.stats
    }

    /// When the core started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The launch template of an application's request.
    pub fn template(&self, app: u64, request: usize) -> Option<&LaunchTemplate> {
        self.submissions.get(&app).and_then(|s| s.templates.get(request))
    }

    /// Feeds an event to the engine and carries out its commands.
    /// The store record of a reservation in the plan.
    fn plan_record(&self, id: gantry_engine::ReservationId) -> Option<crate::store::Write> {
        let r = self.engine.reservation_book()?.get(id)?;
        Some(crate::store::Write::PutPlanReservation(crate::store::PlanReservationRecord {
            id,
            request: r.request.clone(),
            submit_ms: r.submit_ms,
            allocation: r.allocation.clone(),
        }))
    }

    /// Applies a reservation change and queues what it changed to the store. A submission the
    /// store refuses at once is taken back, so nothing unacknowledged stays in the plan.
    fn reservation(
        &mut self,
        op: ReservationOp,
    ) -> Result<(ReservationOutcome, Option<crate::store::Ack>), SubmitError> {
        let (event, id, is_submit) = match op {
            ReservationOp::Submit { id: Some(id), caller, .. }
                if let Err(e) = self.handed_out_reservations.check(id.0, &caller) =>
            {
                return Err(SubmitError::Engine(EngineError::Invalid {
                    what: "reservation-id",
                    reason: e.to_string(),
                }));
            }
            ReservationOp::Submit { id, request, .. } => {
                (Event::ReservationSubmitted { id, request }, id, true)
            }
            ReservationOp::Update { id, request } => {
                (Event::ReservationUpdated { id, request }, Some(id), false)
            }
            ReservationOp::Delete { id } => (Event::ReservationDeleted { id }, Some(id), false),
            ReservationOp::Optimize => (Event::OptimizeReservations, None, false),
        };
        let commands = self.engine.handle(now_ms(), event)?;
        let mut outcome =
            ReservationOutcome::Accepted { id: id.unwrap_or(gantry_engine::ReservationId(0)), moved: 0 };
        let mut writes = Vec::new();
        let mut moved = 0;
        for c in &commands {
            match c {
                Command::ReservationAdmitted { reservation, .. } => {
                    outcome = ReservationOutcome::Accepted { id: *reservation, moved: 0 };
                    writes.extend(self.plan_record(*reservation));
                }
                Command::ReservationRejected { reservation, reason } => {
                    outcome = ReservationOutcome::Rejected { id: *reservation, reason: reason.clone() };
                }
                Command::ReservationReplanned { .. } => moved += 1,
                _ => {}
            }
        }
        if let ReservationOutcome::Accepted { moved: m, id: accepted } = &mut outcome {
            *m = moved;
            if is_submit {
                // Used: it cannot be submitted again (a rejected one may be retried).
                self.handed_out_reservations.use_id(accepted.0);
            }
        }
        // Replans and ends are written by `apply` (in order, in their own jobs).
        let ack = match (&self.store, writes.is_empty()) {
            (Some(store), false) => match store.submit(writes) {
                Ok(ack) => Some(ack),
                Err(e) => {
                    if let (true, ReservationOutcome::Accepted { id, .. }) = (is_submit, &outcome) {
                        let _ = self.engine.handle(now_ms(), Event::ReservationDeleted { id: *id });
                    }
                    return Err(SubmitError::Store(e));
                }
            },
            _ => None,
        };
        self.apply(commands);
        Ok((outcome, ack))
    }

    fn event(&mut self, event: Event) -> Result<(), EngineError> {
        let commands = self.engine.handle(now_ms(), event)?;
        self.apply(commands);
        Ok(())
    }

    /// Runs one scheduling cycle.
    pub fn cycle(&mut self) {
        if let Some(until) = self.recovering_until {
            if Instant::now() < until && !self.awaiting.is_empty() {
                return; // agents are still coming back; placing now could start work twice
            }
            self.recovering_until = None;
            if !self.awaiting.is_empty() {
                let nodes: Vec<&String> = self.awaiting.keys().collect();
                tracing::warn!(
                    ?nodes,
                    "nodes did not come back after the restart; their containers run again elsewhere"
                );
                self.awaiting.clear();
            }
        }
        self.dirty = false;
        let started = Instant::now();
        if let Err(e) = self.event(Event::Tick) {
            tracing::error!(error = %e, "scheduling cycle refused");
        }
        if let Some(m) = &self.metrics {
            m.observe_cycle(started.elapsed());
        }
    }

    fn send_to(&mut self, node: &str, msg: Down) -> bool {
        if self.held_nodes.contains(node) {
            if let Some(batch) = self.held.back_mut() {
                batch.messages.push((node.to_owned(), msg));
                return true;
            }
        }
        match self.agents.get(node) {
            Some(link) => link.tx.try_send(down(msg)).is_ok(),
            None => false,
        }
    }

    /// Sends a launch: at once without a store, else once its record has committed.
    fn send_launch(&mut self, node: &str, launch: v1::Launch, record: Option<crate::store::Ack>) {
        let container = launch.container_id;
        if self.store.is_none() {
            if self.send_to(node, Down::Launch(launch)) {
                self.stats.launches_sent += 1;
            } else {
                // The node's liveness deadline decides; the engine keeps it allocated.
                self.stats.launches_undeliverable += 1;
                tracing::warn!(container, %node, "no stream to the node for a launch");
            }
            return;
        }
        let commit = record.unwrap_or_else(|| {
            // The store refused the record outright: nothing of it may run. The engine gets it
            // back as lost (rerun without counting a failure) when the batch is released.
            tracing::error!(container, "the container's record was refused; not launching it");
            crate::store::Ack::failed()
        });
        self.held_nodes.insert(node.to_owned());
        self.held.push_back(HeldBatch {
            commit: Some(commit),
            messages: vec![(node.to_owned(), Down::Launch(launch))],
        });
    }

    /// The commit the oldest held batch waits for, for the run loop to await (taken out of the
    /// core so the loop can go on handling requests meanwhile).
    pub fn next_commit(&mut self) -> Option<crate::store::Ack> {
        self.held.front_mut().and_then(|b| b.commit.take())
    }

    /// Sends the oldest held batch now that its commit has an outcome. If the commit failed, its
    /// launches are not sent and their containers go back to the engine as lost, so the work is
    /// placed again later instead of running without a record.
    pub fn release_batch(&mut self, committed: Result<(), crate::store::StoreError>) {
        let Some(batch) = self.held.pop_front() else { return };
        if self.held.is_empty() {
            self.held_nodes.clear();
        }
        let mut unlaunched = Vec::new();
        for (node, msg) in batch.messages {
            let launch = match &msg {
                Down::Launch(l) => Some(l.container_id),
                _ => None,
            };
            if let (Some(c), Err(_)) = (launch, &committed) {
                unlaunched.push(c);
                continue;
            }
            let sent = self.agents.get(&node).is_some_and(|link| link.tx.try_send(down(msg)).is_ok());
            match (launch, sent) {
                (Some(_), true) => self.stats.launches_sent += 1,
                (Some(container), false) => {
                    self.stats.launches_undeliverable += 1;
                    tracing::warn!(container, %node, "no stream to the node for a launch");
                }
                _ => {}
            }
        }
        if let Err(e) = committed {
            tracing::error!(error = %e, containers = unlaunched.len(), "launch records not stored; rerunning later");
            for c in unlaunched {
                if let Err(e) = self.event(Event::ContainerLost { container: ContainerId(c) }) {
                    tracing::warn!(container = c, error = %e, "cannot hand back an unlaunched container");
                }
            }
        }
    }

    /// Waits for and releases every held batch (at shutdown).
    async fn release_all(&mut self) {
        while let Some(commit) = self.next_commit() {
            let committed = commit.await;
            self.release_batch(committed);
        }
    }

    /// Keeps an application that just ended for the API: its submission, times and counters
    /// (the engine still holds it until its next compaction).
    fn record_end(&mut self, app: AppId, finished_ms: u64) {
        let Submission { spec, templates } = self.submissions.remove(&app.0).unwrap_or_default();
        let st = self.engine.state();
        let Some(i) = st.app_index(app) else { return };
        let (Some(a), Some(meta)) = (st.apps().get(i as usize), st.app_meta(i)) else { return };
        let ended = EndedApp {
            submit_ms: a.submit_ms,
            finished_ms,
            priority: a.priority,
            max_attempts: meta.max_attempts,
            failures: meta.failures,
            requests: spec.requests,
            commands: templates.into_iter().map(|t| t.argv).collect(),
        };
        self.history.remember_end(app.0, ended);
    }

    /// The user an app was submitted by, as the engine has it.
    fn app_user(&self, app: AppId) -> String {
        self.submissions.get(&app.0).map(|s| s.spec.user.clone()).unwrap_or_default()
    }

    fn node_name(&self, node: u32) -> String {
        let st = self.engine.state();
        st.nodes().get(node as usize).map(|n| st.str(n.name).to_owned()).unwrap_or_default()
    }

    fn apply(&mut self, commands: Vec<Command>) {
        for c in commands {
            match c {
                Command::Launch { container, app, request, node, resources, gpus } => {
                    let name = self.node_name(node.0);
                    let cluster = self.launch_cluster(&name);
                    if cluster != self.cluster {
                        self.known_as.insert(container.0, cluster);
                    }
                    let Some(t) = self.template(app.0, request as usize).cloned() else {
                        tracing::error!(app = app.0, request, "no launch template; cannot start container");
                        continue;
                    };
                    let launch = v1::Launch {
                        container_id: container.0,
                        app_id: app.0,
                        argv: t.argv,
                        env: t.env.into_iter().collect(),
                        user: t.account.unwrap_or_default(),
                        submitter: if t.submitter.is_empty() { self.app_user(app) } else { t.submitter },
                        max_pids: t.max_pids.unwrap_or(0),
                        cpu_millis: i64::try_from(resources.cpu_millis).unwrap_or(i64::MAX),
                        memory_bytes: i64::try_from(resources.memory_bytes).unwrap_or(i64::MAX),
                        gpus,
                        cluster_id: cluster.to_wire(),
                        disk_bytes: t.disk_bytes.unwrap_or(0),
                        ..Default::default()
                    };
                    let placed_ms = now_ms();
                    let record = self.persist(vec![crate::store::Write::UpsertContainer(
                        crate::store::ContainerRecord {
                            id: container,
                            app,
                            request,
                            node: name.clone(),
                            resources,
                            gpus: launch.gpus.clone(),
                            state: GANTRY_CONTAINER_ALLOCATED,
                            started_ms: Some(placed_ms),
                            exit_code: None,
                            reason: None,
                            finished_ms: None,
                            cluster,
                        },
                    )]);
                    self.history.remember_launch(
                        app.0,
                        LaunchedContainer {
                            id: container.0,
                            node: name.clone(),
                            request,
                            state: GANTRY_CONTAINER_ALLOCATED,
                            exit_code: None,
                            resources,
                            gpus: launch.gpus.clone(),
                            started_ms: Some(placed_ms),
                            finished_ms: None,
                            diagnostics: String::new(),
                            cluster,
                        },
                    );
                    self.send_launch(&name, launch, record);
                }
                Command::Kill { container, node, grace_ms, reason } => {
                    let name = self.node_name(node.0);
                    let kill = v1::Kill {
                        container_id: container.0,
                        grace_ms: Some(grace_ms),
                        reason: format!("{reason:?}"),
                        cluster_id: self.cluster_of(container.0).to_wire(),
                    };
                    if !self.send_to(&name, Down::Kill(kill)) {
                        tracing::warn!(container = container.0, node = %name, "no stream to the node for a kill");
                    }
                }
                Command::AppStateChanged { app, state, diagnostics } => {
                    tracing::info!(app = app.0, state, %diagnostics, "application state");
                    let ended = matches!(
                        state,
                        GANTRY_APP_FINISHED | GANTRY_APP_FAILED | GANTRY_APP_KILLED | GANTRY_APP_REJECTED
                    );
                    let at_ms = now_ms();
                    if !self.unstored_apps.contains(&app.0) {
                        self.persist(vec![crate::store::Write::AppState {
                            id: app,
                            state,
                            diagnostics: diagnostics.clone(),
                            at_ms,
                        }]);
                    } else if ended {
                        self.unstored_apps.remove(&app.0);
                    }
                    if ended {
                        self.record_end(app, at_ms);
                    }
                }
                Command::ReservationReplanned { reservation, .. } => {
                    tracing::info!(reservation = reservation.0, "reservation re-planned");
                    if let Some(w) = self.plan_record(reservation) {
                        self.persist(vec![w]);
                    }
                }
                Command::ReservationEnded { reservation, why } => {
                    tracing::info!(reservation = reservation.0, ?why, "reservation ended");
                    self.persist(vec![crate::store::Write::DeletePlanReservation { id: reservation }]);
                }
                Command::AppAccepted { .. }
                | Command::ReservationAdmitted { .. }
                | Command::ReservationRejected { .. } => {}
            }
        }
    }

    fn handle(&mut self, r: Request) {
        match r {
            Request::Submit { spec, id, caller, templates, reply } => {
                let spec_copy = spec.clone();
                let result = (|| {
                    if templates.len() != spec.requests.len() {
                        return Err(EngineError::Invalid {
                            what: "submission",
                            reason: "one command per container request is needed".into(),
                        });
                    }
                    if let Some(app) = id {
                        // Checked before the engine sees it: a refused id changes nothing.
                        self.handed_out_apps.check(app.0, &caller).map_err(|e| EngineError::Invalid {
                            what: "application-id",
                            reason: e.to_string(),
                        })?;
                    }
                    if self.sizes_checked_from.is_none_or(|from| Instant::now() >= from) {
                        self.engine.check_fits(&spec)?;
                    }
                    let event = match id {
                        Some(app) => Event::AppSubmittedWithId { app, spec },
                        None => Event::AppSubmitted(spec),
                    };
                    let commands = self.engine.handle(now_ms(), event)?;
                    let id = Command::accepted_app(&commands)
                        .ok_or_else(|| EngineError::Conflict("the engine gave no id".into()))?;
                    self.handed_out_apps.use_id(id.0);
                    let ack = match &self.store {
                        None => None,
                        Some(store) => {
                            let st = self.engine.state();
                            let app = st.app_index(id).and_then(|i| st.apps().get(i as usize).copied());
                            let record = crate::store::AppRecord {
                                id,
                                spec: spec_copy.clone(),
                                launch: serde_json::to_value(&templates).unwrap_or(serde_json::Value::Null),
                                submit_ms: app.map_or_else(now_ms, |a| a.submit_ms),
                                state: GANTRY_APP_NEW,
                                state_ms: now_ms(),
                                diagnostics: String::new(),
                            };
                            match store.submit(vec![crate::store::Write::InsertApp(record)]) {
                                Ok(ack) => Some(ack),
                                Err(e) => {
                                    // Not durable: take it back so nothing unacknowledged runs.
                                    let _ = self.engine.handle(now_ms(), Event::AppKillRequested { app: id });
                                    return Err(EngineError::Conflict(format!(
                                        "cannot store the submission: {e}"
                                    )));
                                }
                            }
                        }
                    };
                    self.submissions.insert(id.0, Submission { spec: spec_copy, templates });
                    self.apply(commands);
                    Ok((id, ack))
                })();
                self.dirty |= result.is_ok();
                let _ = reply.send(result);
            }
            Request::Withdraw { app, reason } => {
                // Its record was never stored: its end must not be written either.
                self.unstored_apps.insert(app.0);
                if let Err(e) = self.event(Event::AppWithdrawn { app, reason }) {
                    tracing::error!(app = app.0, error = %e, "cannot withdraw an unstored submission");
                }
                self.dirty = true;
            }
            Request::NewId { kind, caller, reply } => {
                let _ = reply.send(self.new_id(kind, caller));
            }
            Request::StoreKill { app, reply } => {
                let _ = reply.send(self.store_kill(app));
            }
            Request::ApplyKill { app, reply } => {
                match self.event(Event::AppKillRequested { app }) {
                    Ok(()) => self.dirty = true,
                    // It ended by itself after the kill was stored; its own end is stored after
                    // the kill, so the store ends as the engine does.
                    Err(e) => tracing::info!(app = app.0, error = %e, "stored kill found the app ended"),
                }
                let _ = reply.send(());
            }
            Request::StoreNodeDrain { node, drained, reply } => {
                let _ = reply.send(self.store_node_drain(node, drained));
            }
            Request::ApplyNodeDrain { node, drained, seq, reply } => {
                let _ = reply.send(self.apply_node_drain(&node, drained, seq));
            }
            Request::Reservation { op, reply } => {
                let result = self.reservation(op);
                self.dirty |= result.is_ok();
                let _ = reply.send(result);
            }
            Request::Read(f) => f(self),
            Request::AgentConnected { register, tx, stream, reply } => {
                let result = self.agent_connected(register, tx, stream);
                let _ = reply.send(result);
            }
            Request::AgentMessage { node, stream, msg } => self.agent_message(&node, stream, msg),
            Request::ReadLog { container, stream, tail, reply } => {
                self.read_log(container, stream, tail, reply)
            }
            Request::AgentDisconnected { node, stream } => {
                self.fail_log_reads(&node, |s| s == stream);
                if self.agents.get(&node).is_some_and(|l| l.stream == stream) {
                    tracing::warn!(%node, "agent stream ended; the node is lost if it does not come back in time");
                    // Keep last_seen: liveness decides.
                    if let Some(link) = self.agents.get_mut(&node) {
                        link.stream = 0;
                    }
                }
            }
        }
    }

    fn agent_connected(
        &mut self,
        r: v1::Register,
        tx: mpsc::Sender<Result<v1::SchedulerMessage, tonic::Status>>,
        stream: u64,
    ) -> Result<(), super::node_claim::Refused> {
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
        self.event(Event::NodeRegistered(spec))
            .map_err(|e| super::node_claim::Refused::Invalid(e.to_string()))?;
        let node = r.node_name.clone();
        if self.drained.contains(&node) {
            let drain = Event::NodeStateChanged { node: node.clone(), state: NodeCondition::Draining };
            if let Err(e) = self.event(drain) {
                tracing::warn!(%node, error = %e, "cannot apply the stored drain");
            }
        }
        // After a scheduler restart: the containers the store says run here are wanted again
        // (if the agent still has them; reconciliation below loses the others).
        for c in self.awaiting.remove(&node).unwrap_or_default() {
            let event = Event::ContainerRestored {
                container: c.id,
                app: c.app,
                request: c.request,
                node: node.clone(),
                gpus: c.gpus.clone(),
                running: c.state == GANTRY_CONTAINER_RUNNING,
            };
            match self.engine.handle(now_ms(), event) {
                Ok(_) => self.history.remember_launch(c.app.0, LaunchedContainer::from(&c)),
                Err(e) => tracing::warn!(container = c.id.0, error = %e, "cannot restore container"),
            }
        }
        self.agents.insert(
            node.clone(),
            AgentLink {
                tx,
                stream,
                last_seen: Instant::now(),
                last_status: None,
                reports_cluster_ids: r.reports_cluster_ids,
                instance: r.instance_id.clone(),
                conditions: Vec::new(),
            },
        );
        // The registration made the node RUNNING again (unless drained): what it reports now
        // decides.
        self.conditions_reported(&node, r.conditions.clone());
        // Reads sent down an earlier stream of this node are answered on that stream or never.
        self.fail_log_reads(&node, |s| s != stream);
        self.log_slots.entry(node.clone()).or_insert_with(|| Arc::new(Semaphore::new(LOG_READS_PER_NODE)));
        let registered = v1::Registered { heartbeat_interval_ms: 0, cluster_id: self.cluster.to_wire() };
        let _ = self.send_to(&node, Down::Registered(registered));
        // Reconcile: exits first, then what runs there against what the engine wants there.
        for exit in &r.unacked_exits {
            self.exited(&node, exit, exit_words::exit_phrase(exit));
        }
        // Containers of another scheduler state (a fresh data directory, a restored backup,
        // another cluster) are not ours, whatever their numbers: they are killed, addressed by
        // their own cluster id, as YARN's NodeManager kills its containers when it resyncs
        // with a ResourceManager that does not know them.
        let (ours, foreign): (Vec<&v1::LiveContainer>, Vec<&v1::LiveContainer>) =
            r.containers.iter().partition(|c| self.ours(&node, &c.cluster_id, c.container_id));
        for c in foreign {
            tracing::warn!(%node, container = c.container_id, cluster = %c.cluster_id, "agent runs a container of another scheduler state; killing it");
            self.stats.reconcile_kills += 1;
            let kill = v1::Kill {
                container_id: c.container_id,
                grace_ms: Some(0),
                reason: "another scheduler state's".into(),
                cluster_id: c.cluster_id.clone(),
            };
            let _ = self.send_to(&node, Down::Kill(kill));
        }
        let reported: HashSet<u64> = ours.iter().map(|c| c.container_id).collect();
        let wanted: HashSet<u64> = {
            let st = self.engine.state();
            let idx = st.node_by_name(&node).map(|n| n.0);
            st.containers()
                .iter()
                .filter(|c| Some(c.node) == idx && gantry_engine::state::container_is_live(c.state))
                .map(|c| c.id)
                .collect()
        };
        for c in ours {
            if !wanted.contains(&c.container_id) {
                tracing::warn!(%node, container = c.container_id, "agent runs a container the scheduler does not want; killing it");
                self.stats.reconcile_kills += 1;
                let kill = v1::Kill {
                    container_id: c.container_id,
                    grace_ms: Some(0),
                    reason: "not wanted".into(),
                    cluster_id: c.cluster_id.clone(),
                };
                let _ = self.send_to(&node, Down::Kill(kill));
            } else if c.state == v1::ContainerState::Running as i32 {
                let _ = self
                    .engine
                    .handle(now_ms(), Event::ContainerStarted { container: ContainerId(c.container_id) });
            }
        }
        let exited: HashSet<u64> = r
            .unacked_exits
            .iter()
            .filter(|e| self.ours(&node, &e.cluster_id, e.container_id))
            .map(|e| e.container_id)
            .collect();
        for id in wanted.difference(&reported) {
            if exited.contains(id) {
                continue;
            }
            tracing::warn!(%node, container = id, "container missing on its node; lost");
            self.stats.reconcile_lost += 1;
            if let Err(e) = self.event(Event::ContainerLost { container: ContainerId(*id) }) {
                tracing::debug!(error = %e, "lost container");
            }
        }
        self.dirty = true;
        Ok(())
    }

    /// Whether this registration may take its node name ([`super::node_claim`]); a refusal is
    /// logged and counted, and changes nothing.
    fn claim_node(&self, r: &v1::Register) -> Result<(), super::node_claim::Refused> {
        use super::node_claim::{Holder, Refused, check, check_instance_id};
        check_instance_id(&r.instance_id)?;
        let holder = self
            .agents
            .get(&r.node_name)
            .map(|l| Holder { instance: &l.instance, silent_for: l.last_seen.elapsed() });
        let claimed = check(&r.node_name, holder, &r.instance_id, self.node_timeout);
        if let Err(Refused::Claimed { conflict, .. }) = &claimed {
            // A short prefix: enough to tell instances apart in the log, not enough to pose as one.
            let prefix = |id: &str| id.chars().take(8).collect::<String>();
            let held_by = holder.map(|h| prefix(h.instance)).unwrap_or_default();
            tracing::warn!(node = %r.node_name, held_by, refused = prefix(&r.instance_id), reason = conflict.as_str(), "registration refused: another live agent holds the node name");
            if let Some(m) = &self.metrics {
                m.count_registration_refused(conflict.as_str());
            }
        }
        claimed
    }

    /// A container ended; `words` says how (after "container N "), for its diagnostics.
    fn exited(&mut self, node: &str, e: &v1::ContainerExited, words: String) {
        self.record_exit(node, e, words, false);
    }

    /// [`Core::exited`]; `never_ran` for a launch its agent refused or could not start: a
    /// failed attempt with no exit status (users saw "exit 127" and empty logs before).
    fn record_exit(&mut self, node: &str, e: &v1::ContainerExited, words: String, never_ran: bool) {
        let ack =
            Down::AckExit(v1::AckExit { container_id: e.container_id, cluster_id: e.cluster_id.clone() });
        if !self.ours(node, &e.cluster_id, e.container_id) {
            // Another scheduler state's container: nothing of this one's may change. The agent
            // may forget it.
            tracing::info!(%node, container = e.container_id, cluster = %e.cluster_id, "exit of another scheduler state's container acknowledged, not applied");
            let _ = self.send_to(node, ack);
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
        let now = now_ms();
        let started = self.history.container(e.container_id).and_then(|c| c.started_ms).unwrap_or(0);
        let finished_ms = if e.finished_at_ms > 0 { e.finished_at_ms.min(now) } else { now }.max(started);
        self.history.update(e.container_id, |c| {
            c.state = state;
            c.exit_code = code;
            c.finished_ms = Some(finished_ms);
            c.diagnostics.clone_from(&diagnostics);
        });
        let committed = self.persist(vec![crate::store::Write::ContainerState {
            id,
            state,
            started_ms: None,
            exit_code: code,
            reason: Some(diagnostics),
            finished_ms: Some(finished_ms),
        }]);
        match result {
            Ok(()) => self.dirty = true,
            // An exit the engine no longer tracks (already recorded, or from a previous life).
            Err(EngineError::UnknownContainer(_)) => {}
            Err(err) => tracing::warn!(container = e.container_id, error = %err, "exit refused"),
        }
        // Recorded (or known to be moot): the agent may forget it — once the record has
        // committed. The agent drops an acknowledged exit for good, so an acknowledgement ahead of
        // the commit would let a crash lose a container's end, and the restarted scheduler would
        // declare it lost and run it again (the kill-under-load test found it). An exit whose
        // write failed is not acknowledged: the agent reports it again on its next Register.
        match (self.store.is_some(), committed, self.agents.get(node)) {
            (false, _, _) => {
                let _ = self.send_to(node, ack);
            }
            (true, Some(commit), Some(link)) => {
                let tx = link.tx.clone();
                tokio::spawn(async move {
                    if commit.await.is_ok() {
                        let _ = tx.send(down(ack)).await;
                    }
                });
            }
            (true, _, _) => {}
        }
    }

    fn agent_message(&mut self, node: &str, stream: u64, msg: Up) {
        match self.agents.get_mut(node) {
            Some(link) if link.stream == stream => link.last_seen = Instant::now(),
            _ => return, // a stale stream: its node has reconnected (or been declared lost)
        }
        match msg {
            Up::Status(s) => {
                let seq = s.seq;
                self.conditions_reported(node, s.conditions.clone());
                if let Some(used) = measured_usage(&s) {
                    // Refused only for a node that is lost meanwhile: nothing to do then.
                    let _ = self
                        .engine
                        .handle(now_ms(), Event::NodeUsageReported { node: node.to_owned(), used });
                }
                if let Some(link) = self.agents.get_mut(node) {
                    link.last_status = Some(s);
                }
                let _ = self.send_to(node, Down::StatusAck(v1::StatusAck { seq }));
            }
            Up::ContainerStarted(c) if !self.ours(node, &c.cluster_id, c.container_id) => {
                tracing::debug!(%node, container = c.container_id, cluster = %c.cluster_id, "start of another scheduler state's container ignored");
            }
            Up::ContainerStarted(c) => {
                self.history.update(c.container_id, |l| {
                    l.state = GANTRY_CONTAINER_RUNNING;
                    l.started_ms = Some(c.started_at_ms);
                });
                self.persist(vec![crate::store::Write::ContainerState {
                    id: ContainerId(c.container_id),
                    state: GANTRY_CONTAINER_RUNNING,
                    started_ms: Some(c.started_at_ms),
                    exit_code: None,
                    reason: None,
                    finished_ms: None,
                }]);
                let _ = self.event(Event::ContainerStarted { container: ContainerId(c.container_id) });
            }
            Up::ContainerExited(e) => self.exited(node, &e, exit_words::exit_phrase(&e)),
            Up::LaunchFailed(f) => {
                tracing::warn!(%node, container = f.container_id, message = %f.message, "launch failed on the agent");
                let exit = v1::ContainerExited {
                    container_id: f.container_id,
                    reason: v1::ExitReason::Exited as i32,
                    exit_code: 127,
                    cluster_id: f.cluster_id,
                    ..Default::default()
                };
                self.record_exit(node, &exit, exit_words::launch_failed_phrase(node, &f.message), true);
            }
            Up::LogChunk(chunk) => self.log_chunk(node, stream, chunk),
            Up::Pong(_) | Up::Register(_) => {}
        }
    }

    /// Declares lost every node whose agent has not been heard from within `timeout`, drops
    /// log reads whose callers gave up waiting, and forgets the names of ended containers.
    fn check_liveness(&mut self, timeout: Duration) {
        self.log_reads.retain(|_, p| !p.reply.is_closed());
        if self.recovering_until.is_none() {
            // Restored containers reach the engine only as their agents come back.
            let st = self.engine.state();
            self.known_as.retain(|&id, _| st.container_index(ContainerId(id)).is_some());
        }
        let late: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, l)| l.last_seen.elapsed() > timeout)
            .map(|(n, _)| n.clone())
            .collect();
        for node in late {
            tracing::warn!(%node, timeout_ms = timeout.as_millis() as u64, "no status from the node; lost");
            self.agents.remove(&node);
            self.fail_log_reads(&node, |_| true);
            self.stats.nodes_lost += 1;
            if let Err(e) = self.event(Event::NodeLost { node: node.clone() }) {
                tracing::warn!(%node, error = %e, "node lost refused");
            }
            self.dirty = true;
        }
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
    let metrics = core.metrics.clone();
    core.node_timeout = node_timeout;
    let task = tokio::spawn(run(core, rx, cycle_interval, node_timeout, shutdown));
    (CoreHandle { tx, metrics }, task)
}

async fn run(
    mut core: Core,
    mut rx: mpsc::Receiver<Request>,
    cycle_interval: Duration,
    node_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) -> Core {
    tokio::pin!(shutdown);
    let mut next_cycle = tokio::time::Instant::now() + cycle_interval;
    let mut liveness = tokio::time::interval(Duration::from_millis(500).min(node_timeout / 4));
    // The commit the oldest held batch of agent messages waits for.
    let mut commit: Option<crate::store::Ack> = None;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            r = rx.recv() => {
                let Some(r) = r else { break };
                core.handle(r);
                // Coalesce what is already queued into this cycle.
                while let Ok(r) = rx.try_recv() {
                    core.handle(r);
                }
                if core.dirty {
                    core.cycle();
                    next_cycle = tokio::time::Instant::now() + cycle_interval;
                }
            }
            () = tokio::time::sleep_until(next_cycle) => {
                core.cycle();
                next_cycle = tokio::time::Instant::now() + cycle_interval;
            }
            _ = liveness.tick() => core.check_liveness(node_timeout),
            committed = async {
                match commit.as_mut() {
                    Some(c) => c.await,
                    None => std::future::pending().await,
                }
            }, if commit.is_some() => {
                commit = None;
                core.release_batch(committed);
            }
        }
        if commit.is_none() {
            commit = core.next_commit();
        }
    }
    if let Some(c) = commit {
        let committed = c.await;
        core.release_batch(committed);
    }
    core.release_all().await;
    core
}

/// Messages to agents waiting for a store commit (see `Core::held`).
struct HeldBatch {
    /// The commit they wait for; taken by the run loop while it awaits it.
    commit: Option<crate::store::Ack>,
    /// The messages, in the order they were sent, by node.
    messages: Vec<(String, Down)>,
}
