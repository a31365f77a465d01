//! The agent's main loop: re-adopts the containers of a previous run, then ties together the
//! executor (launch, kill), the monitor (sampling, enforcement), the metrics endpoint and the
//! scheduler stream. Containers are not stopped when the agent stops: a restarted agent adopts
//! them again, and their supervisors record exits that happen meanwhile.

use crate::client::{AgentEvent, Client, ClientOptions, Command, LiveContainer, LiveState, Snapshot};
use crate::config::AgentConfig;
use crate::executor::{ExecError, Executor, ExecutorSettings};
use crate::metrics::{self, AgentMetrics};
use crate::model::{ContainerExit, ExitReason, NodeReport};
use crate::monitor::Monitor;
use crate::probe::{GpuProbe, ProbeError};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::{mpsc, watch};

/// Why the agent could not start.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// The work root could not be prepared.
    #[error("preparing {path}: {source}")]
    WorkRoot {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The executor could not start or re-adopt containers.
    #[error("executor: {0}")]
    Executor(#[from] ExecError),
    /// The host could not be measured.
    #[error("probe: {0}")]
    Probe(#[from] ProbeError),
    /// The metrics endpoint could not listen.
    #[error("metrics endpoint {addr}: {source}")]
    Metrics {
        /// The configured address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The scheduler endpoint is malformed.
    #[error("scheduler client: {0}")]
    Client(#[from] crate::client::ClientError),
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs the agent until `shutdown` completes. `shim_program` is the binary to run as each
/// container's supervisor (the agent's own executable).
pub async fn run(
    config: AgentConfig,
    shim_program: PathBuf,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    run_with(config, shim_program, RunOptions::default(), shutdown).await
}

/// How the agent behaves beyond its configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Kill every container when the agent stops (an all-in-one development cluster leaves
    /// nothing behind). A production agent leaves them running and re-adopts them.
    pub kill_containers_on_exit: bool,
}

/// [`run`] with options.
pub async fn run_with(
    config: AgentConfig,
    shim_program: PathBuf,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    // The containers' control directories are the agent's whole state across restarts.
    let dir = config.containers_dir();
    std::fs::create_dir_all(&dir).map_err(|source| DaemonError::WorkRoot { path: dir.clone(), source })?;
    // NVML is initialised once; its devices decide how many GPU indexes a launch may name.
    let mut gpus = GpuProbe::new();
    let gpu_count = gpus.sample(|_| None).gpus.len() as u32;
    let executor = Arc::new(Executor::new(ExecutorSettings::from_config(&config, gpu_count, shim_program))?);
    let adopted = executor.adopt()?;
    tracing::info!(
        running = adopted.running.len(),
        ended = adopted.ended.len(),
        "containers of the previous run"
    );

    let metrics = Arc::new(AgentMetrics::new());
    let listener = tokio::net::TcpListener::bind(&config.metrics_listen)
        .await
        .map_err(|source| DaemonError::Metrics { addr: config.metrics_listen.clone(), source })?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let metrics_task = tokio::spawn(metrics::serve(listener, metrics.clone(), stopped(stop_rx.clone())));

    let mut monitor = Monitor::new(config.clone(), executor.clone(), metrics.clone(), gpus)?;
    let first = monitor.sample()?;
    let report: Arc<Mutex<NodeReport>> = Arc::new(Mutex::new(first.report));

    // Every (re)connect registers a full snapshot: the node and the live containers (the client
    // adds the exits the scheduler has not acknowledged).
    let snapshot = {
        let report = report.clone();
        let executor = executor.clone();
        move || Snapshot {
            node: report.lock().map(|r| r.clone()).unwrap_or_else(|p| p.into_inner().clone()),
            containers: executor
                .list()
                .into_iter()
                .filter(|c| c.running)
                .map(|c| LiveContainer {
                    container_id: c.container_id,
                    app_id: c.app_id,
                    state: LiveState::Running,
                    started_at_ms: c.started_at_ms,
                })
                .collect(),
        }
    };
    let (events, events_rx) = mpsc::channel::<AgentEvent>(1024);
    let (commands_tx, mut commands) = mpsc::channel::<Command>(256);
    let latency_metrics = metrics.clone();
    let client = Client::new(ClientOptions::from_config(&config), snapshot)
        .on_heartbeat_latency(move |d| latency_metrics.observe_heartbeat(d));
    let client_task = tokio::spawn(client.run(events_rx, commands_tx, stopped(stop_rx.clone())));

    let mut interval = Duration::from_millis(config.sample_interval_ms);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let default_grace = Duration::from_millis(config.kill_grace_ms);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = tick.tick() => {
                match monitor.sample() {
                    Ok(sample) => {
                        let status = crate::client::StatusReport {
                            host: sample.report.usage,
                            containers: sample.report.containers.clone(),
                            gpus: sample.report.gpus.clone(),
                        };
                        if let Ok(mut r) = report.lock() {
                            *r = sample.report;
                        }
                        // Usage reports are superseded by the next one: drop when the queue is full.
                        let _ = events.try_send(AgentEvent::Status(status));
                    }
                    Err(e) => tracing::warn!(error = %e, "sampling failed"),
                }
                for exit in executor.collect_exits() {
                    report_exit(&events, &metrics, exit).await;
                }
            }
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { break };
                match cmd {
                    Command::Launch(spec) => {
                        let id = spec.container_id;
                        match executor.launch(&spec) {
                            Ok(_) => {
                                let _ = events.send(AgentEvent::Started { container_id: id, started_at_ms: now_ms() }).await;
                            }
                            Err(e) => {
                                tracing::warn!(container = id, error = %e, "launch refused");
                                let _ = events.send(AgentEvent::LaunchFailed { container_id: id, message: e.to_string() }).await;
                            }
                        }
                    }
                    Command::Kill { container_id, grace, reason } => {
                        if executor.list().iter().any(|c| c.container_id == container_id) {
                            tracing::info!(container = container_id, %reason, "kill requested");
                            let executor = executor.clone();
                            let grace = grace.unwrap_or(default_grace);
                            tokio::spawn(async move {
                                if let Err(e) = executor.kill(container_id, grace).await {
                                    tracing::warn!(container = container_id, error = %e, "kill failed");
                                }
                            });
                        } else {
                            // Nothing of it runs here: say so, so the scheduler stops waiting.
                            let exit = ContainerExit { container_id, reason: ExitReason::Lost, finished_at_ms: now_ms() };
                            report_exit(&events, &metrics, exit).await;
                        }
                    }
                    Command::AckExit { container_id } => {
                        if let Err(e) = executor.forget(container_id) {
                            tracing::debug!(container = container_id, error = %e, "forget");
                        }
                    }
                    Command::Registered { heartbeat_interval } => {
                        if let Some(h) = heartbeat_interval.filter(|h| *h >= Duration::from_millis(10) && *h != interval) {
                            interval = h;
                            tick = tokio::time::interval(interval);
                            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                        }
                    }
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    let _ = client_task.await;
    let _ = metrics_task.await;
    if options.kill_containers_on_exit {
        for id in executor.running() {
            if let Err(e) = executor.force_kill(id) {
                tracing::warn!(container = id, error = %e, "kill at exit");
            }
        }
        // Reap what was killed, then drop the records.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !executor.running().is_empty() && std::time::Instant::now() < deadline {
            let _ = executor.collect_exits();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for exit in executor.collect_exits() {
            let _ = executor.forget(exit.container_id);
        }
        for c in executor.list() {
            let _ = executor.forget(c.container_id);
        }
        let _ = executor.remove_parent_cgroup();
    }
    Ok(())
}

async fn report_exit(events: &mpsc::Sender<AgentEvent>, metrics: &AgentMetrics, exit: ContainerExit) {
    tracing::info!(
        container = exit.container_id,
        reason = exit.reason.name(),
        code = exit.reason.exit_code(),
        "container ended"
    );
    if matches!(exit.reason, ExitReason::KilledByRequest | ExitReason::MemoryLimit) {
        metrics.record_kill(exit.reason);
    }
    // Exits are never dropped: the client keeps them until the scheduler acknowledges them.
    let _ = events.send(AgentEvent::Exited(exit)).await;
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM: how every gantry daemon is asked to stop.
pub async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
