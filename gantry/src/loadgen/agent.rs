//! One simulated agent over the real protocol: `Register`, `Status` at its period with sequence
//! numbers, `Launch` answered with `ContainerStarted` and, its run time later,
//! `ContainerExited`; `Kill` ends a container at once; `Ping` gets `Pong`.

use super::driver::Schedule;
use super::{REGISTER_TIMEOUT, STOP_GRACE};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_client::AgentServiceClient;
use gantry_proto::v1::scheduler_message::Msg as Down;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// One simulated agent: its identity and when it acts.
pub(super) struct SimAgent {
    pub(super) name: String,
    pub(super) rack: String,
    pub(super) endpoint: tonic::transport::Endpoint,
    pub(super) join_token: Option<String>,
    pub(super) resources: v1::Resources,
    pub(super) connect_at: Instant,
    pub(super) first_status: Instant,
    pub(super) period: Duration,
    pub(super) run_time: Duration,
    pub(super) schedule: Schedule,
}

/// What one simulated agent saw.
#[derive(Debug, Default)]
pub(super) struct AgentOutcome {
    pub(super) registered: bool,
    /// The scheduler ended or broke the stream before the generator closed it.
    pub(super) stream_dropped: bool,
    pub(super) statuses_sent: u64,
    pub(super) statuses_acked: u64,
    /// Status round trips of reports sent within the measured window.
    pub(super) latencies: Vec<Duration>,
    /// Every container id a `Launch` named, once per `Launch`.
    pub(super) launches: Vec<u64>,
    pub(super) exits_unacked: u64,
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

pub(super) fn up(msg: Up) -> v1::AgentMessage {
    v1::AgentMessage { msg: Some(msg) }
}

impl SimAgent {
    pub(super) async fn run(self, mut stop: watch::Receiver<bool>) -> AgentOutcome {
        let mut out = AgentOutcome::default();
        tokio::time::sleep_until(self.connect_at).await;
        let (tx, rx) = mpsc::unbounded_channel();
        let register = v1::Register {
            node_name: self.name.clone(),
            rack: self.rack.clone(),
            capacity: Some(self.resources),
            allocatable: Some(self.resources),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            agent_started_at_ms: unix_ms(),
            ..Default::default()
        };
        let _ = tx.send(up(Up::Register(register)));
        let mut request = tonic::Request::new(UnboundedReceiverStream::new(rx));
        if let Some(value) = self.join_token.as_ref().and_then(|t| format!("Bearer {t}").parse().ok()) {
            request.metadata_mut().insert("authorization", value);
        }
        let mut grpc = AgentServiceClient::new(self.endpoint.connect_lazy());
        let opened = tokio::time::timeout(REGISTER_TIMEOUT, async {
            let mut inbound = grpc.connect(request).await.ok()?.into_inner();
            match inbound.message().await {
                Ok(Some(v1::SchedulerMessage { msg: Some(Down::Registered(_)) })) => Some(inbound),
                _ => None,
            }
        })
        .await;
        let Ok(Some(mut inbound)) = opened else { return out };
        out.registered = true;

        let mut ticker = tokio::time::interval_at(self.first_status, self.period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut seq = 0u64;
        let mut in_flight: VecDeque<(u64, Instant)> = VecDeque::new();
        // One run time for all, so the earliest exit is always at the front.
        let mut running: VecDeque<(Instant, u64)> = VecDeque::new();
        let mut unacked: HashSet<u64> = HashSet::new();
        let mut stopping: Option<Instant> = None;
        let send = |m: Up| tx.send(up(m)).is_ok();
        loop {
            let next_exit = running.front().map(|(at, _)| *at);
            tokio::select! {
                _ = ticker.tick(), if stopping.is_none() => {
                    seq += 1;
                    if send(Up::Status(self.status(seq, &running))) {
                        in_flight.push_back((seq, Instant::now()));
                        out.statuses_sent += 1;
                    }
                }
                message = inbound.message() => match message {
                    Ok(Some(v1::SchedulerMessage { msg: Some(m) })) => match m {
                        Down::StatusAck(a) => {
                            while let Some(&(s, sent)) = in_flight.front() {
                                if s > a.seq {
                                    break;
                                }
                                in_flight.pop_front();
                                if s == a.seq {
                                    out.statuses_acked += 1;
                                    if self.schedule.measured(sent) {
                                        out.latencies.push(sent.elapsed());
                                    }
                                }
                            }
                        }
                        Down::Launch(l) => {
                            out.launches.push(l.container_id);
                            // An agent older than cluster ids (no `reports_cluster_ids`): the
                            // scheduler takes what it reports as its own.
                            let started = v1::ContainerStarted {
                                container_id: l.container_id,
                                started_at_ms: unix_ms(),
                                ..Default::default()
                            };
                            send(Up::ContainerStarted(started));
                            running.push_back((Instant::now() + self.run_time, l.container_id));
                        }
                        Down::Kill(k) => {
                            if let Some(i) = running.iter().position(|(_, c)| *c == k.container_id) {
                                running.remove(i);
                                let exit = v1::ContainerExited {
                                    container_id: k.container_id,
                                    reason: v1::ExitReason::KilledByRequest as i32,
                                    exit_code: 137,
                                    signal: 0,
                                    finished_at_ms: unix_ms(),
                                    ..Default::default()
                                };
                                if send(Up::ContainerExited(exit)) {
                                    unacked.insert(k.container_id);
                                }
                            }
                        }
                        Down::AckExit(a) => {
                            unacked.remove(&a.container_id);
                        }
                        Down::Ping(p) => {
                            send(Up::Pong(v1::Pong { ping_sent_at_ms: p.sent_at_ms }));
                        }
                        Down::ReadLog(r) => {
                            let chunk = v1::LogChunk {
                                request_id: r.request_id,
                                error: "a simulated agent keeps no logs".into(),
                                ..Default::default()
                            };
                            send(Up::LogChunk(chunk));
                        }
                        Down::Registered(_) => {}
                    },
                    Ok(Some(v1::SchedulerMessage { msg: None })) => {}
                    Ok(None) | Err(_) => {
                        out.stream_dropped = true;
                        break;
                    }
                },
                () = sleep_until_or_never(next_exit) => {
                    if let Some((_, id)) = running.pop_front() {
                        let exit = v1::ContainerExited {
                            container_id: id,
                            reason: v1::ExitReason::Exited as i32,
                            exit_code: 0,
                            signal: 0,
                            finished_at_ms: unix_ms(),
                            ..Default::default()
                        };
                        if send(Up::ContainerExited(exit)) {
                            unacked.insert(id);
                        }
                    }
                }
                _ = stop.changed(), if stopping.is_none() => stopping = Some(Instant::now() + STOP_GRACE),
                () = sleep_until_or_never(stopping) => break,
            }
            if stopping.is_some() && in_flight.is_empty() && unacked.is_empty() && running.is_empty() {
                break;
            }
        }
        out.exits_unacked = unacked.len() as u64;
        out
    }

    /// A status as a real agent sends it: host figures from what runs, and one usage record
    /// per running container.
    pub(super) fn status(&self, seq: u64, running: &VecDeque<(Instant, u64)>) -> v1::Status {
        let cores = (self.resources.cpu_millis / 1000).max(1) as u32;
        v1::Status {
            seq,
            sent_at_ms: unix_ms(),
            host: Some(v1::HostUsage {
                cpu_cores: cores,
                cpu_usage: (running.len() as f64 / f64::from(cores)).min(1.0),
                cpu_seconds_total: 0.0,
                memory_total_bytes: self.resources.memory_bytes,
                memory_available_bytes: self.resources.memory_bytes,
                memory_used_bytes: 0,
            }),
            containers: running
                .iter()
                .map(|(_, id)| v1::ContainerUsage {
                    container_id: *id,
                    cpu_seconds: 0.0,
                    memory_working_set_bytes: 0,
                    memory_limit_bytes: 0,
                    processes: 1,
                })
                .collect(),
            gpus: Vec::new(),
            conditions: Vec::new(),
        }
    }
}

pub(super) async fn tick_or_never(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

pub(super) async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
