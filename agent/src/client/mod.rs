//! The agent's side of the scheduler stream (protocol: `gantry-proto`, `agent.proto`).
//!
//! [`Client::run`] keeps one bidirectional gRPC stream to the scheduler open for as long as the
//! agent lives. Every stream starts with a `Register` built from a fresh [`RegistrationReport`]
//! plus every exit the scheduler has not acknowledged, so a reconnect is always a full resync and
//! the scheduler never has to remember what an earlier stream said. After that the client forwards
//! the agent core's [`AgentEvent`]s up and delivers the scheduler's commands to the core as
//! [`SchedulerCommand`]s; pings are answered here. Any stream error or end leads to a reconnect
//! after an exponential backoff with full jitter ([`Backoff`]), until the shutdown future completes
//! or the core drops its end of a channel. A registration the scheduler refuses because another
//! live agent holds this node's name (`ALREADY_EXISTS`; every `Register` carries this agent's
//! instance id, [`crate::instance`]) is retried only after the backoff ceiling, and said once a
//! minute.
//!
//! Nothing here blocks on the core or on the network in a way that stops the rest: outgoing
//! messages wait in a queue while the stream is busy, the event channel is drained even while
//! disconnected, and commands wait in a queue while the core is busy. Guarantees:
//! - **Exits are never lost.** An exit stays in the unacknowledged set from the moment the core
//!   reports it until the scheduler's `AckExit`, and the set is part of every `Register`.
//! - **Bad launches run nothing.** A `Launch` with invalid wire values (negative limits, empty
//!   argv, a path leaving the container directory, …) is answered with `LaunchFailed` and never
//!   reaches the core ([`crate::launch_spec::from_wire`], the check the executor runs too).
//! - **Status is best effort.** A status that cannot be sent (disconnected, or a backlog) is
//!   dropped: the next one is a full picture again.
//! - **Containers are named by cluster and id.** Every container message carries the cluster id
//!   of the scheduler run that launched the container ([`ContainerKey`]), so the containers of a
//!   scheduler on fresh state never answer for (or to) older ones of the same number; an
//!   invalid cluster id from the wire is refused here.
//! - **Log reads belong to their stream.** A `ReadLog` goes to the core as
//!   [`SchedulerCommand::ReadLog`] and its answer comes back as [`AgentEvent::Log`]; an answer that
//!   finds no stream is dropped, because the scheduler fails every read of a stream that ends.
//!   A read the core could not act on (container id 0, an unknown stream) is answered here.
//!
//! Heartbeat latency ([`Client::on_heartbeat_latency`]) is the round trip from handing a `Status`
//! to the stream until the scheduler's `StatusAck` for it arrives, measured on the agent's
//! monotonic clock: one clock, so no clock skew, and it includes the scheduler's time to read
//! the status, which is what a slow heartbeat is made of. `Ping`/`Pong` is the scheduler's own
//! round trip measurement, on its clock.
//!
//! This file holds the client's interface: its options, what the core hands it and what it
//! hands the core. `session.rs` is the connection loop, `wire.rs` the translation to and from
//! the protocol's messages, and `backoff.rs` the reconnect delays.

mod backoff;
mod session;
mod wire;

pub use backoff::Backoff;
pub use wire::exit_to_wire;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use thiserror::Error;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::config::AgentConfig;
use crate::executor::{LogRead, LogStream};
use crate::model::{ContainerExit, ContainerKey, ContainerUsage, GpuInfo, HostUsage, LaunchSpec, NodeReport};

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

/// What the core knows at the moment of a (re)connect, for the `Register` that opens every
/// stream; the client adds the unacknowledged exits.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationReport {
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
    /// The answer to a [`SchedulerCommand::ReadLog`] (dropped while disconnected: the scheduler has
    /// failed the read already).
    Log {
        /// The read's `request_id`.
        request_id: u64,
        /// The bytes, or why they could not be read (for a person).
        outcome: Result<LogRead, String>,
    },
}

/// What the scheduler asks of the core, as the client delivers it.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulerCommand {
    /// The scheduler accepted the registration of a new stream (a good moment for a fresh
    /// status).
    Registered {
        /// The status interval it asks for; `None` = the agent's own sampling interval.
        heartbeat_interval: Option<Duration>,
    },
    /// Start a container (already checked by [`crate::launch_spec::from_wire`]).
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

type RegistrationFn = Box<dyn Fn() -> RegistrationReport + Send + Sync>;
type LatencyFn = Box<dyn Fn(Duration) + Send + Sync>;
type ContactFn = Box<dyn Fn() + Send + Sync>;

/// The agent's connection to the scheduler. Build it, then [`run`](Client::run) it in a task.
pub struct Client {
    options: ClientOptions,
    registration: RegistrationFn,
    on_latency: Option<LatencyFn>,
    on_contact: Option<ContactFn>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Client {
    /// A client that registers with what `registration` returns at each (re)connect.
    /// `registration` is called on the client's task, so it should be cheap (copy the core's
    /// current state).
    pub fn new(
        options: ClientOptions,
        registration: impl Fn() -> RegistrationReport + Send + Sync + 'static,
    ) -> Self {
        Client { options, registration: Box::new(registration), on_latency: None, on_contact: None }
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
        commands: mpsc::Sender<SchedulerCommand>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ClientError> {
        let endpoint = self.endpoint()?;
        session::run(&self, endpoint, events, commands, shutdown).await;
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
}

/// Unix time in ms (0 if the clock is before 1970).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

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
