//! The connection loop ([`Client::run`]): one stream at a time — settle, register, relay both
//! ways until it ends — then a jittered pause and the next. Across streams it keeps what must
//! survive a reconnect: the unacknowledged exits, launch failures not yet sent, and commands
//! waiting for the core.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_client::AgentServiceClient;
use gantry_proto::v1::scheduler_message::Msg as Down;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tracing::{debug, info, warn};

use super::wire::{self, exit_to_wire, key_from_wire, log_chunk, read_log_from_wire, status_to_wire, up};
use super::{AgentEvent, Client, SchedulerCommand, now_ms};
use crate::launch_spec;
use crate::model::{ContainerExit, ContainerKey};

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

/// Runs the client until `shutdown` completes or the core closes a channel.
pub(super) async fn run(
    client: &Client,
    endpoint: Endpoint,
    events: mpsc::Receiver<AgentEvent>,
    commands: mpsc::Sender<SchedulerCommand>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let rng = StdRng::try_from_os_rng().unwrap_or_else(|_| StdRng::seed_from_u64(fallback_seed()));
    let mut runner = Runner {
        client,
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
    commands: mpsc::Sender<SchedulerCommand>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    rng: StdRng,
    /// Exits reported and not yet acknowledged, by container.
    unacked: BTreeMap<ContainerKey, ContainerExit>,
    /// `LaunchFailed` messages that could not be sent yet.
    failures: VecDeque<v1::LaunchFailed>,
    /// Commands waiting for room in the core's channel.
    to_core: VecDeque<SchedulerCommand>,
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
        outbox.push_back(wire::register((self.client.registration)(), &self.unacked, &self.client.options));
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
        self.to_core.retain(|c| matches!(c, SchedulerCommand::AckExit { .. }));
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
    fn deliver(&mut self, permit: mpsc::Permit<'_, SchedulerCommand>) {
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
                self.to_core.push_back(SchedulerCommand::Registered { heartbeat_interval });
            }
            Some(Down::Launch(launch)) => {
                let (container_id, cluster_id) = (launch.container_id, launch.cluster_id.clone());
                match launch_spec::from_wire(launch) {
                    Ok(spec) => self.to_core.push_back(SchedulerCommand::Launch(spec)),
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
                self.to_core.push_back(SchedulerCommand::Kill {
                    key,
                    grace: kill.grace_ms.map(Duration::from_millis),
                    reason: kill.reason,
                });
            }
            Some(Down::AckExit(ack)) => {
                let key = key_from_wire(ack.container_id, &ack.cluster_id);
                if let Some(key) = key.filter(|key| self.unacked.remove(key).is_some()) {
                    self.to_core.push_back(SchedulerCommand::AckExit { key });
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

/// A seed for the jitter when the OS random source is unavailable: jitter needs spread between
/// agents, not secrecy.
fn fallback_seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    (u64::from(std::process::id()) << 32) ^ u64::from(nanos) ^ now_ms()
}
