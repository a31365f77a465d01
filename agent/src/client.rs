//! The agent's side of the scheduler stream (protocol: `gantry-proto`, `agent.proto`).
//!
//! [`Client::run`] keeps one bidirectional gRPC stream to the scheduler open for as long as the
//! agent lives. Every stream starts with a `Register` built from a fresh [`Snapshot`] plus every
//! exit the scheduler has not acknowledged, so a reconnect is always a full resync and the
//! scheduler never has to remember what an earlier stream said. After that the client forwards
//! the agent core's [`AgentEvent`]s up and delivers the scheduler's commands to the core as
//! [`Command`]s; pings are answered here. Any stream error or end leads to a reconnect after an
//! exponential backoff with full jitter ([`Backoff`]), until the shutdown future completes or the
//! core drops its end of a channel. A registration the scheduler refuses because another live
//! agent holds this node's name (`ALREADY_EXISTS`; every `Register` carries this agent's instance
//! id, [`crate::instance`]) is retried only after the backoff ceiling, and said once a minute.
//!
//! Nothing here blocks on the core or on the network in a way that stops the rest: outgoing
//! messages wait in a queue while the stream is busy, the event channel is drained even while
//! disconnected, and commands wait in a queue while the core is busy. Guarantees:
//! - **Exits are never lost.** An exit stays in the unacknowledged set from the moment the core
//!   reports it until the scheduler's `AckExit`, and the set is part of every `Register`.
//! - **Bad launches run nothing.** A `Launch` with invalid wire values (negative limits, empty
//!   argv, a path leaving the container directory, …) is answered with `LaunchFailed` and never
//!   reaches the core ([`launch_from_wire`]).
//! - **Status is best effort.** A status that cannot be sent (disconnected, or a backlog) is
//!   dropped: the next one is a full picture again.
//! - **Containers are named by cluster and id.** Every container message carries the cluster id
//!   of the scheduler run that launched the container ([`ContainerKey`]), so the containers of a
//!   scheduler on fresh state never answer for (or to) older ones of the same number; an
//!   invalid cluster id from the wire is refused here.
//! - **Log reads belong to their stream.** A `ReadLog` goes to the core as
//!   [`Command::ReadLog`] and its answer comes back as [`AgentEvent::Log`]; an answer that
//!   finds no stream is dropped, because the scheduler fails every read of a stream that ends.
//!   A read the core could not act on (container id 0, an unknown stream) is answered here.
//!
//! Heartbeat latency ([`Client::on_heartbeat_latency`]) is the round trip from handing a `Status`
//! to the stream until the scheduler's `StatusAck` for it arrives, measured on the agent's
//! monotonic clock: one clock, so no clock skew, and it includes the scheduler's time to read
//! the status, which is what a slow heartbeat is made of. `Ping`/`Pong` is the scheduler's own
//! round trip measurement, on its clock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::path::{Component, Path};
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_client::AgentServiceClient;
use gantry_proto::v1::scheduler_message::Msg as Down;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use thiserror::Error;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tracing::{debug, info, warn};

use crate::config::AgentConfig;
use crate::executor::{LogRead, LogStream};
use crate::model::{
    ClusterId, ContainerExit, ContainerKey, ContainerUsage, ExitReason, GpuInfo, HostUsage, LaunchSpec,
    NodeReport,
};

/// Most `argv` or `env` entries a launch may have.
pub const MAX_LAUNCH_ENTRIES: usize = 4096;

/// Capacity of the channel feeding the gRPC request stream (messages).
const OUT_CHANNEL: usize = 16;
/// Outgoing messages queued beyond which a new `Status` is dropped rather than queued.
const MAX_OUTBOX: usize = 256;
/// Commands queued for the core beyond which the client stops reading from the scheduler.
const MAX_TO_CORE: usize = 64;
/// Launch failures remembered while disconnected (oldest dropped first).
const MAX_PENDING_FAILURES: usize = 1024;
/// Statuses remembered while waiting for their `StatusAck`.
const MAX_IN_FLIGHT: usize = 64;

/// Why the client cannot run at all (everything else is retried).
#[derive(Debug, Error)]
pub enum ClientError {
    /// The scheduler endpoint is not a usable `http://host:port` URI.
    #[error("invalid scheduler endpoint `{endpoint}`: {message}")]
    Endpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Why a `Launch` from the wire was refused. Its text goes back to the scheduler in
/// `LaunchFailed`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LaunchError {
    /// Container ids start at 1; 0 is what a missing field reads as.
    #[error("container id 0 is not a valid id")]
    ZeroContainerId,
    /// Nothing to run.
    #[error("argv is empty or its program name is empty: nothing to run")]
    EmptyArgv,
    /// A limit below zero.
    #[error("negative {field}: {value}")]
    Negative {
        /// The field (`cpu_millis` or `memory_bytes`).
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// Too many `argv` or `env` entries.
    #[error("{field} has {count} entries, more than {max}")]
    TooMany {
        /// The field.
        field: &'static str,
        /// How many it has.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A string that cannot be passed to the kernel (a C string).
    #[error("{field} contains a NUL byte")]
    Nul {
        /// The field.
        field: &'static str,
    },
    /// An environment variable name that is empty or contains `=`.
    #[error("environment variable name {name:?} is empty or contains `=`")]
    BadEnvName {
        /// The name.
        name: String,
    },
    /// A path that would leave the container's directory.
    #[error("{field} {path:?} escapes the container directory: {why}")]
    PathEscape {
        /// The field (`workdir`, `stdout`, `stderr`).
        field: &'static str,
        /// The path.
        path: String,
        /// Why it escapes.
        why: &'static str,
    },
    /// The same GPU twice.
    #[error("GPU {index} is listed more than once")]
    DuplicateGpu {
        /// The GPU index.
        index: u32,
    },
    /// A cluster id that is neither empty nor 32 lowercase hex digits.
    #[error("{0}")]
    BadCluster(gantry_proto::ClusterIdError),
}

/// Reconnect delays: exponential backoff with full jitter, i.e. a uniformly random delay in
/// `0..=min(cap, base·2^attempt)`. Jitter spreads a rack's agents out when a scheduler restarts,
/// instead of having them all reconnect in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's delay.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(10) }
    }
}

impl Backoff {
    /// Upper bound of the delay before retry `attempt` (0-based): `min(cap, base·2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A random delay in `0..=ceiling(attempt)`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=ceiling))
    }
}

/// How to reach the scheduler and how hard to keep trying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// The scheduler's agent endpoint, `http://host:port`.
    pub endpoint: String,
    /// Reconnect delays.
    pub backoff: Backoff,
    /// Limit on establishing the TCP connection.
    pub connect_timeout: Duration,
    /// Limit from opening a stream to the scheduler's `Registered`; a scheduler that accepts the
    /// stream but never registers the agent is treated as a failed attempt.
    pub register_timeout: Duration,
    /// Interval of HTTP/2 keepalive pings, which detect a dead peer on a quiet connection.
    pub keepalive_interval: Duration,
    /// How long a keepalive ping may go unanswered before the connection counts as dead.
    pub keepalive_timeout: Duration,
    /// When this agent process started, Unix ms (sent in `Register`).
    pub agent_started_at_ms: u64,
    /// Sent as `authorization: Bearer …` when the stream opens (the scheduler's join token).
    pub join_token: Option<String>,
    /// TLS to the scheduler (an `https://` endpoint); `None` for plain `http://`.
    pub tls: Option<ClientTls>,
    /// This agent's instance id, sent in every `Register` ([`crate::instance`]); empty sends
    /// none, as agents before instance ids did.
    pub instance_id: String,
}

/// The agent's TLS material, as PEM: the cluster CA and, for mutual TLS, this node's
/// certificate and key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA the scheduler's certificate must chain to.
    pub ca_pem: Vec<u8>,
    /// This node's certificate and private key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("ClientTls").field("client_certificate", &self.identity.is_some()).finish()
    }
}

impl ClientOptions {
    /// Defaults for `endpoint`: backoff 100 ms … 10 s, connect timeout 5 s, register timeout
    /// 30 s, keepalive every 10 s with a 20 s timeout, started now.
    pub fn new(endpoint: impl Into<String>) -> Self {
        ClientOptions {
            endpoint: endpoint.into(),
            backoff: Backoff::default(),
            connect_timeout: Duration::from_secs(5),
            register_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(20),
            agent_started_at_ms: now_ms(),
            join_token: None,
            tls: None,
            instance_id: String::new(),
        }
    }

    /// Defaults for the configured scheduler endpoint.
    pub fn from_config(config: &AgentConfig) -> Self {
        Self::new(config.scheduler.clone())
    }
}

/// Lifecycle state of a live container, as registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveState {
    /// Launch accepted, process tree being set up.
    Starting,
    /// Running.
    Running,
    /// Being killed.
    Killing,
}

/// A container alive on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveContainer {
    /// The container.
    pub key: ContainerKey,
    /// Application id.
    pub app_id: u64,
    /// Lifecycle state.
    pub state: LiveState,
    /// When it started, Unix ms (0 while starting).
    pub started_at_ms: u64,
}

/// What the core knows at the moment of a (re)connect; the client adds the unacknowledged exits.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Identity, capacity, allocatable and GPUs (usage fields are not registered).
    pub node: NodeReport,
    /// Containers alive now, re-adopted ones included.
    pub containers: Vec<LiveContainer>,
    /// The node's conditions now ([`crate::conditions`]).
    pub conditions: Vec<crate::conditions::NodeCondition>,
}

/// One usage report, as the core measured it; the client numbers and timestamps it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusReport {
    /// Host usage.
    pub host: HostUsage,
    /// Every running container's usage.
    pub containers: Vec<ContainerUsage>,
    /// Every GPU's usage.
    pub gpus: Vec<GpuInfo>,
    /// The node's conditions now ([`crate::conditions`]).
    pub conditions: Vec<crate::conditions::NodeCondition>,
}

/// What the core tells the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// Usage report (dropped when it cannot be sent; the next one replaces it).
    Status(StatusReport),
    /// A container is running (dropped while disconnected: the next `Register` lists it).
    Started {
        /// The container.
        key: ContainerKey,
        /// When its process started, Unix ms.
        started_at_ms: u64,
    },
    /// A container ended (kept until the scheduler acknowledges it).
    Exited(ContainerExit),
    /// A launch the core refused or could not start; nothing of it runs.
    LaunchFailed {
        /// The container.
        key: ContainerKey,
        /// Why.
        message: String,
    },
    /// The answer to a [`Command::ReadLog`] (dropped while disconnected: the scheduler has
    /// failed the read already).
    Log {
        /// The read's `request_id`.
        request_id: u64,
        /// The bytes, or why they could not be read (for a person).
        outcome: Result<LogRead, String>,
    },
}

/// What the scheduler asks of the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The scheduler accepted the registration of a new stream (a good moment for a fresh
    /// status).
    Registered {
        /// The status interval it asks for; `None` = the agent's own sampling interval.
        heartbeat_interval: Option<Duration>,
    },
    /// Start a container (already checked by [`launch_from_wire`]).
    Launch(LaunchSpec),
    /// Stop a container.
    Kill {
        /// The container.
        key: ContainerKey,
        /// SIGTERM → SIGKILL grace; `None` = the configured default.
        grace: Option<Duration>,
        /// Why, for logs.
        reason: String,
    },
    /// The scheduler recorded this exit: the core may forget it (e.g. in its state directory).
    AckExit {
        /// The container.
        key: ContainerKey,
    },
    /// Read the end of a container's log; answer with [`AgentEvent::Log`].
    ReadLog {
        /// Echoed in the answer.
        request_id: u64,
        /// The container (id not 0).
        key: ContainerKey,
        /// Which file.
        stream: LogStream,
        /// Only the last this many bytes; `None` = the whole file (both capped at 4 MiB).
        tail: Option<u64>,
    },
}

type SnapshotFn = Box<dyn Fn() -> Snapshot + Send + Sync>;
type LatencyFn = Box<dyn Fn(Duration) + Send + Sync>;
type ContactFn = Box<dyn Fn() + Send + Sync>;

/// The agent's connection to the scheduler. Build it, then [`run`](Client::run) it in a task.
pub struct Client {
    options: ClientOptions,
    snapshot: SnapshotFn,
    on_latency: Option<LatencyFn>,
    on_contact: Option<ContactFn>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Client {
    /// A client that registers with what `snapshot` returns at each (re)connect. `snapshot` is
    /// called on the client's task, so it should be cheap (copy the core's current state).
    pub fn new(options: ClientOptions, snapshot: impl Fn() -> Snapshot + Send + Sync + 'static) -> Self {
        Client { options, snapshot: Box::new(snapshot), on_latency: None, on_contact: None }
    }

    /// Calls `f` with each measured heartbeat round trip (`Status` → `StatusAck`), e.g. to feed
    /// `gantry_agent_heartbeat_latency_seconds`.
    pub fn on_heartbeat_latency(mut self, f: impl Fn(Duration) + Send + Sync + 'static) -> Self {
        self.on_latency = Some(Box::new(f));
        self
    }

    /// Calls `f` on every message received from the scheduler: the proof of a live session
    /// that the agent's fencing (`crate::fencing`) waits for.
    pub fn on_scheduler_message(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_contact = Some(Box::new(f));
        self
    }

    /// Runs until `shutdown` completes, or the core closes `events` or drops the receiver of
    /// `commands`. Connection failures are never returned: they are retried with backoff.
    pub async fn run(
        self,
        events: mpsc::Receiver<AgentEvent>,
        commands: mpsc::Sender<Command>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ClientError> {
        let endpoint = self.endpoint()?;
        let rng = StdRng::try_from_os_rng().unwrap_or_else(|_| StdRng::seed_from_u64(fallback_seed()));
        let mut runner = Runner {
            client: &self,
            endpoint,
            events,
            commands,
            shutdown: Box::pin(shutdown),
            rng,
            unacked: BTreeMap::new(),
            failures: VecDeque::new(),
            to_core: VecDeque::new(),
            in_flight: VecDeque::new(),
            seq: 0,
            attempt: 0,
            refusals: crate::instance::Refusals::default(),
        };
        runner.run().await;
        Ok(())
    }

    fn endpoint(&self) -> Result<Endpoint, ClientError> {
        let bad =
            |message: String| ClientError::Endpoint { endpoint: self.options.endpoint.clone(), message };
        let endpoint =
            Endpoint::from_shared(self.options.endpoint.clone()).map_err(|e| bad(e.to_string()))?;
        let uri = endpoint.uri().clone();
        let endpoint = match (uri.scheme_str(), &self.options.tls) {
            (Some("http"), None) => endpoint,
            (Some("https"), Some(tls)) => {
                let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
                if let Some((cert, key)) = &tls.identity {
                    config = config.identity(Identity::from_pem(cert, key));
                }
                endpoint.tls_config(config).map_err(|e| bad(format!("TLS: {e}")))?
            }
            (Some("https"), None) => return Err(bad("https:// needs tls_ca_file".into())),
            (Some("http"), Some(_)) => {
                return Err(bad("TLS is configured (tls_ca_file): the scheme must be https://".into()));
            }
            _ => return Err(bad("the scheme must be http:// or https://".into())),
        };
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("no host".into()));
        }
        let o = &self.options;
        Ok(endpoint
            .connect_timeout(o.connect_timeout)
            .http2_keep_alive_interval(o.keepalive_interval)
            .keep_alive_timeout(o.keepalive_timeout)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true))
    }

    fn register(&self, unacked: &BTreeMap<ContainerKey, ContainerExit>) -> v1::AgentMessage {
        let Snapshot { node, containers, conditions } = (self.snapshot)();
        let register = v1::Register {
            node_name: node.name,
            rack: node.rack,
            labels: node.labels.into_iter().collect(),
            capacity: Some(resources_to_wire(node.capacity)),
            allocatable: Some(resources_to_wire(node.allocatable)),
            gpus: node
                .gpus
                .iter()
                .map(|g| v1::Gpu {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    model: g.model.clone(),
                    memory_total_bytes: g.memory_total_bytes,
                    mig: g.mig,
                })
                .collect(),
            gpu_note: node.gpu_note.unwrap_or_default(),
            // An exit the scheduler has not acknowledged wins over a stale "live" entry.
            containers: containers
                .iter()
                .filter(|c| !unacked.contains_key(&c.key))
                .map(|c| v1::LiveContainer {
                    container_id: c.key.id,
                    cluster_id: c.key.cluster.to_wire(),
                    app_id: c.app_id,
                    state: match c.state {
                        LiveState::Starting => v1::ContainerState::Starting,
                        LiveState::Running => v1::ContainerState::Running,
                        LiveState::Killing => v1::ContainerState::Killing,
                    } as i32,
                    started_at_ms: c.started_at_ms,
                })
                .collect(),
            unacked_exits: unacked.values().map(exit_to_wire).collect(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            agent_started_at_ms: self.options.agent_started_at_ms,
            reports_cluster_ids: true,
            instance_id: self.options.instance_id.clone(),
            conditions: conditions.iter().map(condition_to_wire).collect(),
        };
        up(Up::Register(register))
    }
}

/// How a session or a pause ended.
enum Flow {
    Reconnect,
    /// The scheduler refused the registration: another live agent holds the node name.
    Refused(String),
    Stop,
}

/// The client's state across streams.
struct Runner<'a> {
    client: &'a Client,
    endpoint: Endpoint,
    events: mpsc::Receiver<AgentEvent>,
    commands: mpsc::Sender<Command>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    rng: StdRng,
    /// Exits reported and not yet acknowledged, by container.
    unacked: BTreeMap<ContainerKey, ContainerExit>,
    /// `LaunchFailed` messages that could not be sent yet.
    failures: VecDeque<v1::LaunchFailed>,
    /// Commands waiting for room in the core's channel.
    to_core: VecDeque<Command>,
    /// Statuses sent and not yet acknowledged: (seq, when handed to the stream).
    in_flight: VecDeque<(u64, Instant)>,
    /// Last status sequence number used.
    seq: u64,
    /// Failed attempts since the last successful registration.
    attempt: u32,
    /// Registrations refused since the last accepted one.
    refusals: crate::instance::Refusals,
}

impl Runner<'_> {
    async fn run(&mut self) {
        loop {
            let delay = match self.session().await {
                Flow::Stop => return,
                // Another agent holds the name, maybe for good: no quick retries.
                Flow::Refused(message) => {
                    self.refusals.refused(&message, self.client.options.backoff.cap, &mut self.rng)
                }
                Flow::Reconnect => self.client.options.backoff.delay(self.attempt, &mut self.rng),
            };
            self.attempt = self.attempt.saturating_add(1);
            debug!(attempt = self.attempt, ?delay, "reconnecting to the scheduler after a pause");
            if let Flow::Stop = self.pause(delay).await {
                return;
            }
        }
    }

    /// One stream: register, then relay both ways until it ends.
    async fn session(&mut self) -> Flow {
        if let Flow::Stop = self.settle().await {
            return Flow::Stop;
        }
        // Exits already queued belong in this Register rather than after it.
        loop {
            match self.events.try_recv() {
                Ok(event) => self.absorb_offline(event),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Flow::Stop,
            }
        }
        let mut outbox = VecDeque::new();
        outbox.push_back(self.client.register(&self.unacked));
        outbox.extend(self.failures.drain(..).map(|f| up(Up::LaunchFailed(f))));

        let (out_tx, out_rx) = mpsc::channel(OUT_CHANNEL);
        // The channel handle lives as long as the session, so the connection does too.
        let channel = self.endpoint.connect_lazy();
        let mut grpc = AgentServiceClient::new(channel.clone());
        let mut request = tonic::Request::new(ReceiverStream::new(out_rx));
        if let Some(token) = &self.client.options.join_token {
            match format!("Bearer {token}").parse() {
                Ok(value) => {
                    request.metadata_mut().insert("authorization", value);
                }
                Err(_) => tracing::error!("the join token cannot be sent as gRPC metadata"),
            }
        }
        let mut opening = Box::pin(async move { grpc.connect(request).await });
        let mut inbound: Option<tonic::Streaming<v1::SchedulerMessage>> = None;
        let register_deadline = tokio::time::sleep(self.client.options.register_timeout);
        tokio::pin!(register_deadline);
        let mut registered = false;
        let mut register_sent = false;
        // A local handle: a permit borrowed from `self` would pin `self` for the whole select.
        let commands = self.commands.clone();

        let flow = loop {
            // Until the stream is open only the Register goes out (a scheduler may read it before
            // answering); the rest waits in the outbox, where a failed attempt cannot lose it.
            let may_send = !outbox.is_empty() && (inbound.is_some() || !register_sent);
            let may_read = inbound.is_some() && self.to_core.len() < MAX_TO_CORE;
            tokio::select! {
                biased;
                () = &mut self.shutdown => break Flow::Stop,
                () = &mut register_deadline, if !registered => {
                    warn!(
                        endpoint = %self.client.options.endpoint,
                        "the scheduler did not register this agent in time"
                    );
                    break Flow::Reconnect;
                }
                opened = &mut opening, if inbound.is_none() => match opened {
                    Ok(response) => inbound = Some(response.into_inner()),
                    Err(status) if status.code() == tonic::Code::AlreadyExists => {
                        break Flow::Refused(status.message().to_owned());
                    }
                    Err(status) => {
                        warn!(
                            endpoint = %self.client.options.endpoint,
                            attempt = self.attempt,
                            error = %status,
                            "cannot open the scheduler stream"
                        );
                        break Flow::Reconnect;
                    }
                },
                permit = out_tx.reserve(), if may_send => match permit {
                    Ok(permit) => {
                        register_sent = true;
                        self.hand_off(permit, &mut outbox);
                    }
                    // The request stream was dropped: the call is over.
                    Err(_) => break Flow::Reconnect,
                },
                permit = commands.reserve(), if !self.to_core.is_empty() => match permit {
                    Ok(permit) => self.deliver(permit),
                    Err(_) => break Flow::Stop,
                },
                event = self.events.recv() => match event {
                    Some(event) => self.absorb_online(event, &mut outbox),
                    None => break Flow::Stop,
                },
                message = next_message(&mut inbound), if may_read => match message {
                    Ok(Some(message)) => {
                        if let Some(f) = &self.client.on_contact {
                            f();
                        }
                        registered |= matches!(message.msg, Some(Down::Registered(_)));
                        self.handle(message, &mut outbox);
                    }
                    Ok(None) => {
                        info!("the scheduler ended the stream");
                        break Flow::Reconnect;
                    }
                    Err(status) => {
                        warn!(error = %status, "the scheduler stream failed");
                        break Flow::Reconnect;
                    }
                },
            }
        };
        // What was not sent: launch failures wait for the next stream; exits are in `unacked`;
        // statuses, starts and pongs are superseded by the next Register.
        for message in outbox {
            if let Some(Up::LaunchFailed(f)) = message.msg {
                self.remember_failure(f);
            }
        }
        // Commands from a stream that is gone are the old stream's business, except that the
        // core may still forget acknowledged exits.
        self.to_core.retain(|c| matches!(c, Command::AckExit { .. }));
        drop(channel);
        flow
    }

    /// Waits until the core has taken every command already handed to it, taking events
    /// meanwhile (the core may be waiting to send one). A Register is the whole truth: the
    /// scheduler declares lost whatever it does not list, so a launch still queued for the core
    /// when the snapshot is taken would run beside its replacement (the kill-under-load test
    /// found it). The core takes a launch and records it as in flight in one step.
    async fn settle(&mut self) -> Flow {
        while self.commands.capacity() < self.commands.max_capacity() {
            tokio::select! {
                biased;
                () = &mut self.shutdown => return Flow::Stop,
                event = self.events.recv() => match event {
                    Some(event) => self.absorb_offline(event),
                    None => return Flow::Stop,
                },
                () = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
        }
        Flow::Reconnect
    }

    /// Waits `delay` before the next attempt, still taking events and delivering commands.
    async fn pause(&mut self, delay: Duration) -> Flow {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        let commands = self.commands.clone();
        loop {
            tokio::select! {
                biased;
                () = &mut self.shutdown => return Flow::Stop,
                () = &mut sleep => return Flow::Reconnect,
                permit = commands.reserve(), if !self.to_core.is_empty() => match permit {
                    Ok(permit) => self.deliver(permit),
                    Err(_) => return Flow::Stop,
                },
                event = self.events.recv() => match event {
                    Some(event) => self.absorb_offline(event),
                    None => return Flow::Stop,
                },
            }
        }
    }

    /// Moves the next outgoing message into the stream, noting when each status left.
    fn hand_off(
        &mut self,
        permit: mpsc::Permit<'_, v1::AgentMessage>,
        outbox: &mut VecDeque<v1::AgentMessage>,
    ) {
        let Some(message) = outbox.pop_front() else { return };
        if let Some(Up::Status(status)) = &message.msg {
            if self.in_flight.len() >= MAX_IN_FLIGHT {
                self.in_flight.pop_front();
            }
            self.in_flight.push_back((status.seq, Instant::now()));
        }
        permit.send(message);
    }

    /// Hands the oldest waiting command to the core.
    fn deliver(&mut self, permit: mpsc::Permit<'_, Command>) {
        if let Some(command) = self.to_core.pop_front() {
            permit.send(command);
        }
    }

    /// An event while there is no stream to send it on.
    fn absorb_offline(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::Status(_) | AgentEvent::Started { .. } => {}
            AgentEvent::Log { request_id, .. } => {
                debug!(request_id, "log answer dropped: its stream is gone");
            }
            AgentEvent::Exited(exit) => {
                self.unacked.insert(exit.key(), exit);
            }
            AgentEvent::LaunchFailed { key, message } => {
                self.remember_failure(v1::LaunchFailed {
                    container_id: key.id,
                    message,
                    cluster_id: key.cluster.to_wire(),
                });
            }
        }
    }

    /// An event while a stream is open (or opening: it goes out after the Register).
    fn absorb_online(&mut self, event: AgentEvent, outbox: &mut VecDeque<v1::AgentMessage>) {
        let message = match event {
            AgentEvent::Status(report) => {
                if outbox.len() >= MAX_OUTBOX {
                    debug!("status dropped: the scheduler stream is backlogged");
                    return;
                }
                self.seq += 1;
                Up::Status(status_to_wire(self.seq, now_ms(), report))
            }
            AgentEvent::Started { key, started_at_ms } => Up::ContainerStarted(v1::ContainerStarted {
                container_id: key.id,
                started_at_ms,
                cluster_id: key.cluster.to_wire(),
            }),
            AgentEvent::Exited(exit) => {
                self.unacked.insert(exit.key(), exit);
                Up::ContainerExited(exit_to_wire(&exit))
            }
            AgentEvent::LaunchFailed { key, message } => Up::LaunchFailed(v1::LaunchFailed {
                container_id: key.id,
                message,
                cluster_id: key.cluster.to_wire(),
            }),
            AgentEvent::Log { request_id, outcome } => Up::LogChunk(log_chunk(request_id, outcome)),
        };
        outbox.push_back(up(message));
    }

    fn remember_failure(&mut self, failure: v1::LaunchFailed) {
        if self.failures.len() >= MAX_PENDING_FAILURES {
            if let Some(old) = self.failures.pop_front() {
                warn!(container_id = old.container_id, cluster = %old.cluster_id, "launch failure forgotten: too many pending");
            }
        }
        self.failures.push_back(failure);
    }

    /// One message from the scheduler.
    fn handle(&mut self, message: v1::SchedulerMessage, outbox: &mut VecDeque<v1::AgentMessage>) {
        match message.msg {
            Some(Down::Registered(r)) => {
                info!(
                    endpoint = %self.client.options.endpoint,
                    cluster = %r.cluster_id,
                    "registered with the scheduler"
                );
                self.attempt = 0;
                self.refusals.accepted();
                let heartbeat_interval =
                    (r.heartbeat_interval_ms > 0).then(|| Duration::from_millis(r.heartbeat_interval_ms));
                self.to_core.push_back(Command::Registered { heartbeat_interval });
            }
            Some(Down::Launch(launch)) => {
                let (container_id, cluster_id) = (launch.container_id, launch.cluster_id.clone());
                match launch_from_wire(launch) {
                    Ok(spec) => self.to_core.push_back(Command::Launch(spec)),
                    Err(e) => {
                        warn!(container_id, cluster = %cluster_id, error = %e, "launch refused");
                        let message = format!("launch refused: {e}");
                        outbox.push_back(up(Up::LaunchFailed(v1::LaunchFailed {
                            container_id,
                            message,
                            cluster_id,
                        })));
                    }
                }
            }
            Some(Down::Kill(kill)) => {
                let Some(key) = key_from_wire(kill.container_id, &kill.cluster_id) else {
                    warn!(container_id = kill.container_id, cluster = %kill.cluster_id, "kill of an invalid container ignored");
                    return;
                };
                self.to_core.push_back(Command::Kill {
                    key,
                    grace: kill.grace_ms.map(Duration::from_millis),
                    reason: kill.reason,
                });
            }
            Some(Down::AckExit(ack)) => {
                let key = key_from_wire(ack.container_id, &ack.cluster_id);
                if let Some(key) = key.filter(|key| self.unacked.remove(key).is_some()) {
                    self.to_core.push_back(Command::AckExit { key });
                } else {
                    debug!(container_id = ack.container_id, cluster = %ack.cluster_id, "ack for an exit not pending");
                }
            }
            Some(Down::ReadLog(read)) => match read_log_from_wire(&read) {
                Ok(command) => self.to_core.push_back(command),
                Err(error) => {
                    debug!(request_id = read.request_id, %error, "log read refused");
                    outbox.push_back(up(Up::LogChunk(log_chunk(read.request_id, Err(error)))));
                }
            },
            Some(Down::Ping(ping)) => {
                outbox.push_back(up(Up::Pong(v1::Pong { ping_sent_at_ms: ping.sent_at_ms })));
            }
            Some(Down::StatusAck(ack)) => {
                while let Some(&(seq, sent)) = self.in_flight.front() {
                    if seq > ack.seq {
                        break;
                    }
                    self.in_flight.pop_front();
                    if seq == ack.seq {
                        if let Some(f) = &self.client.on_latency {
                            f(sent.elapsed());
                        }
                    }
                }
            }
            // A newer scheduler's message this agent does not know: evolvability says skip it.
            None => debug!("unknown scheduler message skipped"),
        }
    }
}

/// The next message, or never when there is no stream yet.
async fn next_message(
    inbound: &mut Option<tonic::Streaming<v1::SchedulerMessage>>,
) -> Result<Option<v1::SchedulerMessage>, tonic::Status> {
    match inbound {
        Some(stream) => stream.message().await,
        None => std::future::pending().await,
    }
}

fn up(msg: Up) -> v1::AgentMessage {
    v1::AgentMessage { msg: Some(msg) }
}

/// A container named on the wire: an id that is not 0 and a valid cluster id.
fn key_from_wire(container_id: u64, cluster_id: &str) -> Option<ContainerKey> {
    let cluster = ClusterId::parse(cluster_id).ok()?;
    (container_id != 0).then_some(ContainerKey::new(cluster, container_id))
}

/// Checks a `ReadLog` from the wire: a container id, a cluster id and a stream this agent knows.
fn read_log_from_wire(read: &v1::ReadLog) -> Result<Command, String> {
    if read.container_id == 0 {
        return Err("container id 0 is not a valid id".into());
    }
    let cluster = ClusterId::parse(&read.cluster_id).map_err(|e| e.to_string())?;
    let stream = match v1::LogStream::try_from(read.stream) {
        Ok(v1::LogStream::Stdout) => LogStream::Stdout,
        Ok(v1::LogStream::Stderr) => LogStream::Stderr,
        Ok(v1::LogStream::Unspecified) | Err(_) => {
            return Err(format!("unknown log stream {}: this agent serves stdout and stderr", read.stream));
        }
    };
    Ok(Command::ReadLog {
        request_id: read.request_id,
        key: ContainerKey::new(cluster, read.container_id),
        stream,
        tail: read.tail_bytes,
    })
}

/// A log read's answer in wire form. An error that is empty would read as success, so it is
/// given a text.
fn log_chunk(request_id: u64, outcome: Result<LogRead, String>) -> v1::LogChunk {
    match outcome {
        Ok(LogRead { data, file_size_bytes }) => {
            v1::LogChunk { request_id, data, file_size_bytes, error: String::new() }
        }
        Err(error) => v1::LogChunk {
            request_id,
            error: if error.is_empty() { "the log could not be read".into() } else { error },
            ..Default::default()
        },
    }
}

/// Checks a `Launch` from the wire and turns it into a [`LaunchSpec`]. Refuses what could run
/// something other than asked (negative limits, a path leaving the container directory, NUL
/// bytes, an empty program); account names and GPU indexes are checked by the executor, which
/// knows the machine.
pub fn launch_from_wire(launch: v1::Launch) -> Result<LaunchSpec, LaunchError> {
    if launch.container_id == 0 {
        return Err(LaunchError::ZeroContainerId);
    }
    let cluster = ClusterId::parse(&launch.cluster_id).map_err(LaunchError::BadCluster)?;
    if launch.argv.first().is_none_or(String::is_empty) {
        return Err(LaunchError::EmptyArgv);
    }
    for (field, count) in [("argv", launch.argv.len()), ("env", launch.env.len())] {
        if count > MAX_LAUNCH_ENTRIES {
            return Err(LaunchError::TooMany { field, count, max: MAX_LAUNCH_ENTRIES });
        }
    }
    let cpu_millis = non_negative("cpu_millis", launch.cpu_millis)?;
    let memory_bytes = non_negative("memory_bytes", launch.memory_bytes)?;
    if launch.argv.iter().any(|a| a.contains('\0')) {
        return Err(LaunchError::Nul { field: "argv" });
    }
    for (name, value) in &launch.env {
        if name.is_empty() || name.contains('=') {
            return Err(LaunchError::BadEnvName { name: name.escape_debug().to_string() });
        }
        if name.contains('\0') || value.contains('\0') {
            return Err(LaunchError::Nul { field: "env" });
        }
    }
    if launch.user.contains('\0') {
        return Err(LaunchError::Nul { field: "user" });
    }
    if launch.submitter.contains('\0') {
        return Err(LaunchError::Nul { field: "submitter" });
    }
    let mut seen = BTreeSet::new();
    if let Some(&index) = launch.gpus.iter().find(|&&g| !seen.insert(g)) {
        return Err(LaunchError::DuplicateGpu { index });
    }
    Ok(LaunchSpec {
        container_id: launch.container_id,
        cluster,
        app_id: launch.app_id,
        workdir: contained_path("workdir", launch.workdir)?,
        stdout: contained_path("stdout", launch.stdout)?,
        stderr: contained_path("stderr", launch.stderr)?,
        argv: launch.argv,
        env: launch.env.into_iter().collect(),
        user: (!launch.user.is_empty()).then_some(launch.user),
        submitter: launch.submitter,
        max_pids: (launch.max_pids != 0).then_some(launch.max_pids),
        cpu_millis,
        memory_bytes,
        gpus: launch.gpus,
        disk_bytes: launch.disk_bytes,
    })
}

fn non_negative(field: &'static str, value: i64) -> Result<u64, LaunchError> {
    u64::try_from(value).map_err(|_| LaunchError::Negative { field, value })
}

/// An optional path that must stay inside the container directory: empty = default.
fn contained_path(field: &'static str, path: String) -> Result<Option<String>, LaunchError> {
    if path.is_empty() {
        return Ok(None);
    }
    let escape = |why| LaunchError::PathEscape { field, path: path.clone(), why };
    if path.contains('\0') {
        return Err(LaunchError::Nul { field });
    }
    for component in Path::new(&path).components() {
        match component {
            Component::RootDir | Component::Prefix(_) => return Err(escape("it is absolute")),
            Component::ParentDir => return Err(escape("it has a `..` component")),
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(Some(path))
}

/// A container exit in wire form.
pub fn exit_to_wire(exit: &ContainerExit) -> v1::ContainerExited {
    let (reason, signal) = match exit.reason {
        ExitReason::Exited { .. } => (v1::ExitReason::Exited, 0),
        ExitReason::Signaled { signal } => (v1::ExitReason::Signaled, signal),
        ExitReason::KilledByRequest => (v1::ExitReason::KilledByRequest, 0),
        ExitReason::MemoryLimit => (v1::ExitReason::MemoryLimit, 0),
        ExitReason::DiskLimit => (v1::ExitReason::DiskLimit, 0),
        // The wire has no fenced reason: LOST is the scheduler's word for a container that
        // ended through no fault of its own and is rerun without counting a failure, which is
        // what a fenced one is (and the scheduler has usually declared it lost already).
        ExitReason::Lost | ExitReason::Fenced => (v1::ExitReason::Lost, 0),
    };
    let memory = exit.memory.unwrap_or_default();
    v1::ContainerExited {
        container_id: exit.container_id,
        reason: reason as i32,
        exit_code: exit.reason.exit_code(),
        signal,
        finished_at_ms: exit.finished_at_ms,
        cluster_id: exit.cluster.to_wire(),
        memory_used_bytes: memory.used_bytes,
        memory_limit_bytes: memory.limit_bytes,
        disk_used_bytes: exit.disk.map_or(0, |d| d.used_bytes),
        disk_limit_bytes: exit.disk.map_or(0, |d| d.limit_bytes),
    }
}

/// A node condition in wire form.
fn condition_to_wire(c: &crate::conditions::NodeCondition) -> v1::NodeCondition {
    v1::NodeCondition { r#type: c.kind.to_owned(), reason: c.reason.clone(), since_ms: c.since_ms }
}

fn resources_to_wire(r: crate::model::Resources) -> v1::Resources {
    v1::Resources { cpu_millis: r.cpu_millis, memory_bytes: r.memory_bytes, gpus: r.gpus }
}

/// A usage report in wire form.
fn status_to_wire(seq: u64, sent_at_ms: u64, report: StatusReport) -> v1::Status {
    let h = report.host;
    v1::Status {
        seq,
        sent_at_ms,
        host: Some(v1::HostUsage {
            cpu_cores: h.cpu_cores,
            cpu_usage: h.cpu_usage,
            cpu_seconds_total: h.cpu_seconds_total,
            memory_total_bytes: h.memory_total_bytes,
            memory_available_bytes: h.memory_available_bytes,
            memory_used_bytes: h.memory_used_bytes,
        }),
        containers: report
            .containers
            .iter()
            .map(|c| v1::ContainerUsage {
                container_id: c.container_id,
                cpu_seconds: c.cpu_seconds,
                memory_working_set_bytes: c.memory_working_set_bytes,
                memory_limit_bytes: c.memory_limit_bytes,
                processes: c.processes,
            })
            .collect(),
        gpus: report
            .gpus
            .into_iter()
            .map(|g| v1::GpuUsage {
                index: g.index,
                memory_used_bytes: g.memory_used_bytes,
                utilization_percent: g.utilization_percent,
                container_ids: g.containers,
            })
            .collect(),
        conditions: report.conditions.iter().map(condition_to_wire).collect(),
    }
}

/// Unix time in ms (0 if the clock is before 1970).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A seed for the jitter when the OS random source is unavailable: jitter needs spread between
/// agents, not secrecy.
fn fallback_seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    (u64::from(std::process::id()) << 32) ^ u64::from(nanos) ^ now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemorySeen;

    #[test]
    fn backoff_ceiling_doubles_up_to_the_cap_and_delays_stay_below_it() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(1), Duration::from_millis(200));
        assert_eq!(b.ceiling(6), Duration::from_millis(6400));
        assert_eq!(b.ceiling(7), Duration::from_secs(10), "12.8 s is capped");
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(10), "no overflow");
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..200).map(|_| b.delay(3, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(800)));
        // Full jitter: the delays spread over the range rather than sitting at the ceiling.
        assert!(delays.iter().any(|d| *d < Duration::from_millis(400)));
        assert!(delays.iter().any(|d| *d > Duration::from_millis(400)));
    }

    #[test]
    fn exits_map_to_wire_reasons_and_codes() {
        let w = exit_to_wire(&ContainerExit::new(
            ContainerKey::new(ClusterId::LEGACY, 3),
            ExitReason::Signaled { signal: 11 },
            5,
        ));
        assert_eq!((w.reason, w.exit_code, w.signal), (v1::ExitReason::Signaled as i32, 139, 11));
        assert_eq!((w.memory_used_bytes, w.memory_limit_bytes), (0, 0), "nothing known: zero");
        let w = exit_to_wire(&ContainerExit {
            memory: Some(MemorySeen { used_bytes: 1100 << 20, limit_bytes: 1 << 30 }),
            ..ContainerExit::new(ContainerKey::new(ClusterId::LEGACY, 3), ExitReason::MemoryLimit, 5)
        });
        assert_eq!((w.reason, w.exit_code, w.signal), (v1::ExitReason::MemoryLimit as i32, 137, 0));
        assert_eq!((w.memory_used_bytes, w.memory_limit_bytes), (1100 << 20, 1 << 30));
        let w = exit_to_wire(&ContainerExit::new(
            ContainerKey::new(ClusterId::from_bits(9), 3),
            ExitReason::Fenced,
            5,
        ));
        assert_eq!((w.reason, w.exit_code), (v1::ExitReason::Lost as i32, 137), "fenced reads as lost");
        assert_eq!(w.cluster_id, "00000000000000000000000000000009", "the exit names its cluster");
    }

    #[test]
    fn endpoints_are_http_or_https_with_tls_configured() {
        for bad in ["", "not a uri", "https://127.0.0.1:1", "127.0.0.1:7070", "ftp://127.0.0.1:1"] {
            let c = Client::new(ClientOptions::new(bad), || unreachable!());
            assert!(matches!(c.endpoint(), Err(ClientError::Endpoint { .. })), "{bad}");
        }
        let c = Client::new(ClientOptions::new("http://127.0.0.1:7070"), || unreachable!());
        assert!(c.endpoint().is_ok());
        let with_tls = |url: &str| {
            let mut o = ClientOptions::new(url);
            o.tls = Some(ClientTls { ca_pem: b"-----BEGIN CERTIFICATE-----".to_vec(), identity: None });
            Client::new(o, || unreachable!())
        };
        assert!(with_tls("http://127.0.0.1:7070").endpoint().is_err(), "TLS configured: https only");
        // A CA that is no certificate is refused when the endpoint is built, not at the first
        // handshake (the happy path runs against a real scheduler in tests/tests/tls_acl.rs).
        match with_tls("https://127.0.0.1:7070").endpoint() {
            Err(ClientError::Endpoint { message, .. }) => assert!(message.contains("TLS"), "{message}"),
            other => panic!("a broken CA was accepted: {other:?}"),
        }
    }
}
