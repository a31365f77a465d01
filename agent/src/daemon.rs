//! The agent's main loop: re-adopts the containers of a previous run, then ties together the
//! executor (launch, kill), the monitor (sampling, enforcement), the metrics endpoint and the
//! scheduler stream. Containers are not stopped when the agent stops: a restarted agent adopts
//! them again, and their supervisors record exits that happen meanwhile.

use crate::client::{
    AgentEvent, Client, ClientOptions, LiveContainer, LiveState, RegistrationReport, SchedulerCommand,
};
use crate::conditions::{Conditions, Thresholds};
use crate::config::AgentConfig;
use crate::executor::{AgentKillReason, ExecError, Executor, ExecutorSettings, ExitNotice, LogStream};
use crate::fencing::{ContactClock, Fence};
use crate::metrics::{self, AgentMetrics};
use crate::model::{ContainerExit, ContainerKey, ExitReason, LaunchSpec, NodeReport};
use crate::monitor::Monitor;
use crate::probe::{GpuProbe, ProbeError};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::{Semaphore, mpsc, watch};

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
    /// The join token could not be read.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    /// The agent's instance id could not be read or made.
    #[error("instance id: {0}")]
    Instance(#[from] crate::instance::InstanceError),
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
    // Who this agent is to the scheduler, across restarts: read before anything is adopted, so a
    // damaged file stops the agent before it touches a container.
    let instance_id = crate::instance::load_or_create(&config.work_root)?;
    // NVML is initialised once; its devices decide how many GPU indexes a launch may name.
    let mut gpus = GpuProbe::new();
    let gpu_count = gpus.sample(|_| None).gpus.len() as u32;
    let executor = Arc::new(Executor::new(ExecutorSettings::from_config(&config, gpu_count, shim_program))?);
    finish_interrupted_kills(&executor, &config.cgroup_name);
    let lease = crate::lease::start_lease(&config).map(Arc::new);
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

    let (events, events_rx) = mpsc::channel::<AgentEvent>(1024);
    let (commands_tx, mut commands) = mpsc::channel::<SchedulerCommand>(256);
    // Node conditions, and the disk round that measures allowances, pressure and cleans up.
    let conditions = Arc::new(Conditions::new(Thresholds::from_config(&config)));
    let disk_wake = Arc::new(tokio::sync::Notify::new());
    let housekeeping =
        Arc::new(crate::housekeeping::Housekeeping::new(&config, executor.clone(), conditions.clone()));
    let housekeeping_task = tokio::spawn(crate::housekeeping::run(
        housekeeping,
        Duration::from_millis(config.disk_check_interval_ms),
        disk_wake.clone(),
        |_| {},
        stopped(stop_rx.clone()),
    ));
    let launcher = Launcher::new(executor.clone(), events.clone(), metrics.clone(), config.launch_slots())
        .with_conditions(conditions.clone(), disk_wake.clone());

    // Every (re)connect registers a full snapshot: the node and the live containers (the client
    // adds the exits the scheduler has not acknowledged). A container the Register leaves out is
    // declared lost and rerun, so launches still in progress are listed too (Starting): a
    // reconnect in the middle of a launch would otherwise run the work twice (the
    // kill-under-load test found it). Launches are read first: a launch is tracked by the
    // executor before it leaves the in-flight set, so none falls between the two reads. What
    // remains is the instant between the executor collecting an exit and the exit reaching the
    // client's channel.
    let registration = {
        let report = report.clone();
        let executor = executor.clone();
        let launcher = launcher.clone();
        let conditions = conditions.clone();
        move || {
            let mut containers: BTreeMap<ContainerKey, LiveContainer> = launcher
                .in_flight()
                .iter()
                .map(|(&key, launch)| {
                    let state = LiveState::Starting;
                    (key, LiveContainer { key, app_id: launch.app_id, state, started_at_ms: 0 })
                })
                .collect();
            for c in executor.list().into_iter().filter(|c| c.running) {
                let (key, app_id, started_at_ms) = (c.key, c.app_id, c.started_at_ms);
                let state = LiveState::Running;
                containers.insert(key, LiveContainer { key, app_id, state, started_at_ms });
            }
            RegistrationReport {
                node: report.lock().map(|r| r.clone()).unwrap_or_else(|p| p.into_inner().clone()),
                containers: containers.into_values().collect(),
                conditions: conditions.current(now_ms()),
            }
        }
    };
    let latency_metrics = metrics.clone();
    let mut client_options = ClientOptions::from_config(&config);
    client_options.join_token = config.join_token()?;
    client_options.tls = config.client_tls()?;
    client_options.instance_id = instance_id;
    let mut fence = Fence::new(config.fencing_timeout_ms);
    if let Some(timeout) = fence.timeout() {
        // Reconnect often enough that a scheduler back from a short restart hears from this
        // agent before it fences: the default 10 s backoff ceiling alone could outlast it.
        client_options.backoff.cap = client_options.backoff.cap.min(timeout / 4);
    }
    let contact = ContactClock::new();
    let client = Client::new(client_options, registration)
        .on_heartbeat_latency(move |d| latency_metrics.observe_heartbeat(d))
        .on_scheduler_message({
            let contact = contact.clone();
            let lease = lease.clone();
            move || {
                contact.touch();
                if let Some(lease) = &lease {
                    lease.contact();
                }
            }
        });
    let client_task = tokio::spawn(client.run(events_rx, commands_tx, stopped(stop_rx.clone())));

    // One log read at a time: each holds up to 4 MiB until it is sent, and the agent has a
    // small memory budget. Reads queue here, off the main loop.
    let log_reads = Arc::new(Semaphore::new(1));
    let mut interval = Duration::from_millis(config.sample_interval_ms);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let default_grace = Duration::from_millis(config.kill_grace_ms);
    // The fencing lease is written here, in the main loop, so that a stuck loop stops renewing it.
    let mut lease_tick =
        tokio::time::interval(lease.as_ref().map_or(Duration::from_secs(3600), |l| l.period()));
    lease_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = lease_tick.tick(), if lease.is_some() => crate::lease::renew(lease.as_deref()),
            _ = tick.tick() => {
                match monitor.sample() {
                    Ok(sample) => {
                        let status = crate::client::StatusReport {
                            host: sample.report.usage,
                            containers: sample.report.containers.clone(),
                            gpus: sample.report.gpus.clone(),
                            conditions: conditions.current(now_ms()),
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
                fence_if_due(&mut fence, &contact, &executor, &launcher, default_grace);
            }
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { break };
                match cmd {
                    SchedulerCommand::Launch(spec) => {
                        // The launch came with a contact: its container starts under a live lease.
                        crate::lease::renew(lease.as_deref());
                        launcher.launch(spec);
                    }
                    SchedulerCommand::Kill { key, grace, reason } => {
                        let grace = grace.unwrap_or(default_grace);
                        if launcher.kill_when_launched(key, grace, AgentKillReason::Request) {
                            tracing::info!(container = %key, %reason, "kill requested during its launch");
                        } else if executor.list().iter().any(|c| c.key == key) {
                            tracing::info!(container = %key, %reason, "kill requested");
                            spawn_kill(executor.clone(), key, grace, AgentKillReason::Request);
                        } else {
                            // Nothing of it runs here: say so, so the scheduler stops waiting.
                            let exit = ContainerExit::new(key, ExitReason::Lost, now_ms());
                            report_exit(&events, &metrics, exit).await;
                        }
                    }
                    SchedulerCommand::ReadLog { request_id, key, stream, tail } => {
                        spawn_log_read(executor.clone(), log_reads.clone(), events.clone(), LogReadRequest { request_id, key, stream, tail });
                    }
                    SchedulerCommand::AckExit { key } => {
                        if let Err(e) = executor.forget(key) {
                            tracing::debug!(container = %key, error = %e, "forget");
                        }
                    }
                    SchedulerCommand::Registered { heartbeat_interval } => {
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
    let _ = housekeeping_task.await;
    // Exits from here on are found by scanning (the watchers stop with the runtime).
    executor.unwatch_all();
    if options.kill_containers_on_exit {
        for key in executor.running() {
            if let Err(e) = executor.force_kill(key) {
                tracing::warn!(container = %key, error = %e, "kill at exit");
            }
        }
        // Reap what was killed, then drop the records.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !executor.running().is_empty() && std::time::Instant::now() < deadline {
            let _ = executor.collect_exits();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for exit in executor.collect_exits() {
            let _ = executor.forget(exit.key());
        }
        for c in executor.list() {
            let _ = executor.forget(c.key);
        }
    }
    // Nothing left behind: the parent cgroup goes when no container keeps it (containers that
    // run on keep it, and a restarted agent adopts them under it).
    match executor.layout().remove_parent_if_empty(&config.cgroup_name) {
        Ok(true) => tracing::info!(cgroup = %config.cgroup_name, "removed the empty parent cgroup"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "cannot remove the parent cgroup"),
    }
    Ok(())
}

/// Finishes the kills a previous agent run left half done (cgroups left frozen), before
/// adoption looks at its containers: see [`crate::cgroup::Layout::finish_interrupted_kills`].
fn finish_interrupted_kills(executor: &Executor, parent: &str) {
    let (finished, errors) = executor.layout().finish_interrupted_kills(parent);
    if !finished.is_empty() {
        tracing::warn!(cgroups = ?finished, "finished kills interrupted by the previous agent run (cgroups left frozen)");
    }
    for e in errors {
        tracing::warn!(error = %e, "cannot finish an interrupted kill");
    }
}

/// Kills every container, running or being launched, once the scheduler has been silent for the
/// fencing timeout (see [`crate::fencing`]); their exits are reported as `fenced`.
fn fence_if_due(
    fence: &mut Fence,
    contact: &ContactClock,
    executor: &Arc<Executor>,
    launcher: &Launcher,
    kill_grace: Duration,
) {
    let silent_for = contact.silent_for();
    let mut live = executor.running();
    live.extend(launcher.in_flight().keys());
    let due = fence.due(silent_for, &live);
    if due.is_empty() {
        return;
    }
    tracing::warn!(
        silent_ms = u64::try_from(silent_for.as_millis()).unwrap_or(u64::MAX),
        containers = ?due.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "no word from the scheduler for the fencing timeout: it reruns this node's work elsewhere, so this node's copies are killed"
    );
    let grace = crate::fencing::grace(kill_grace);
    for id in due {
        if !launcher.kill_when_launched(id, grace, AgentKillReason::Fenced) {
            spawn_kill(executor.clone(), id, grace, AgentKillReason::Fenced);
        }
    }
}

fn spawn_kill(executor: Arc<Executor>, key: ContainerKey, grace: Duration, reason: AgentKillReason) {
    tokio::spawn(async move {
        if let Err(e) = executor.kill_as(key, grace, reason).await {
            tracing::warn!(container = %key, error = %e, "kill failed");
        }
    });
}

/// One `ReadLog` from the scheduler.
struct LogReadRequest {
    request_id: u64,
    key: ContainerKey,
    stream: LogStream,
    tail: Option<u64>,
}

/// Reads a container's log on a blocking thread (file I/O must not stall the main loop, which
/// also carries launches, kills and heartbeats) and sends the answer up the stream.
fn spawn_log_read(
    executor: Arc<Executor>,
    slots: Arc<Semaphore>,
    events: mpsc::Sender<AgentEvent>,
    read: LogReadRequest,
) {
    tokio::spawn(async move {
        let LogReadRequest { request_id, key, stream, tail } = read;
        let outcome = match slots.acquire_owned().await {
            Ok(permit) => tokio::task::spawn_blocking(move || {
                let _permit = permit;
                executor.read_log(key, stream, tail).map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(format!("the log read failed: {e}"))),
            Err(_) => Err("the agent is stopping".to_owned()),
        };
        if let Err(e) = &outcome {
            tracing::debug!(container = %key, %stream, error = %e, "log read refused");
        }
        let _ = events.send(AgentEvent::Log { request_id, outcome }).await;
    });
}

/// A launch in progress.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    app_id: u64,
    /// A kill that arrived meanwhile.
    kill: Option<PendingKill>,
}

/// A kill that arrived while its container was being launched, carried out once it runs.
#[derive(Debug, Clone, Copy)]
struct PendingKill {
    grace: Duration,
    reason: AgentKillReason,
}

/// Runs launches off the main loop, a few at a time, so one slow launch does not hold up the
/// next or the scheduler's other commands, and watches each launched container so that its
/// exit is reported the moment its supervisor ends (not at the next sampling tick).
#[derive(Clone)]
struct Launcher {
    executor: Arc<Executor>,
    events: mpsc::Sender<AgentEvent>,
    metrics: Arc<AgentMetrics>,
    /// Launches running at once: each mostly waits for a fork and two execs.
    slots: Arc<Semaphore>,
    /// Launches accepted and not finished, by container.
    in_flight: Arc<Mutex<HashMap<ContainerKey, InFlight>>>,
    /// Where launch outcomes count towards `LaunchFailures`, and the disk round to wake when
    /// one fails for the node's reasons.
    conditions: Option<(Arc<Conditions>, Arc<tokio::sync::Notify>)>,
}

impl Launcher {
    fn new(
        executor: Arc<Executor>,
        events: mpsc::Sender<AgentEvent>,
        metrics: Arc<AgentMetrics>,
        slots: usize,
    ) -> Self {
        Launcher {
            executor,
            events,
            metrics,
            slots: Arc::new(Semaphore::new(slots.max(1))),
            in_flight: Arc::default(),
            conditions: None,
        }
    }

    fn with_conditions(mut self, conditions: Arc<Conditions>, disk_wake: Arc<tokio::sync::Notify>) -> Self {
        self.conditions = Some((conditions, disk_wake));
        self
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<ContainerKey, InFlight>> {
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a launch; `Started` (or `LaunchFailed`) and later `Exited` go up the stream in
    /// that order.
    fn launch(&self, spec: LaunchSpec) {
        let id = spec.key();
        if self.in_flight().insert(id, InFlight { app_id: spec.app_id, kill: None }).is_some() {
            // The executor refuses a second launch of the same container anyway; say so once.
            tracing::warn!(container = %id, "launch of a container already being launched ignored");
            return;
        }
        let this = self.clone();
        tokio::spawn(async move { this.run(id, spec).await });
    }

    /// Records a kill for a container whose launch is in flight; it is carried out once the
    /// launch completes. False if no launch of it is in flight.
    fn kill_when_launched(&self, id: ContainerKey, grace: Duration, reason: AgentKillReason) -> bool {
        match self.in_flight().get_mut(&id) {
            Some(launch) => {
                launch.kill = Some(PendingKill { grace, reason });
                true
            }
            None => false,
        }
    }

    async fn run(self, id: ContainerKey, spec: LaunchSpec) {
        let launched = match self.slots.clone().acquire_owned().await {
            Ok(permit) => {
                let executor = self.executor.clone();
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    executor.launch_watched(&spec)
                })
                .await
                .unwrap_or_else(|e| Err(ExecError::Start { id, message: format!("launch task failed: {e}") }))
            }
            Err(_) => Err(ExecError::Start { id, message: "the agent is stopping".into() }),
        };
        // The executor tracks it now (or it failed), so a later kill finds it there.
        let kill = self.in_flight().remove(&id).and_then(|launch| launch.kill);
        if let Some((conditions, disk_wake)) = &self.conditions {
            match &launched {
                Ok(_) => conditions.launch_succeeded(),
                // A request's own mistake (unknown user, bad path) says nothing of the node.
                Err(ExecError::Spec(e)) if !e.blames_the_node() => {}
                Err(e) => {
                    conditions.launch_failed(&e.to_string(), now_ms());
                    disk_wake.notify_one();
                }
            }
        }
        let notice = match launched {
            Ok((_, notice)) => notice,
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "launch refused");
                let _ = self.events.send(AgentEvent::LaunchFailed { key: id, message: e.to_string() }).await;
                return;
            }
        };
        let _ = self.events.send(AgentEvent::Started { key: id, started_at_ms: now_ms() }).await;
        if let Some(PendingKill { grace, reason }) = kill {
            spawn_kill(self.executor.clone(), id, grace, reason);
        }
        if let Err(e) = wait_for_end(notice).await {
            tracing::warn!(container = %id, error = %e, "cannot watch the container; its exit is found by scanning");
            self.executor.unwatch(id);
            return;
        }
        // The supervisor closes the pipe as it exits, just after writing the exit record; if it
        // died without one, it takes a moment to become reapable.
        for _ in 0..50 {
            if let Some(exit) = self.executor.collect_exit(id) {
                report_exit(&self.events, &self.metrics, exit).await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.executor.unwatch(id);
    }
}

/// Completes when the supervisor behind `notice` has exited (its end of the pipe is closed).
async fn wait_for_end(notice: ExitNotice) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    // Checks that it is a pipe and makes it non-blocking.
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(notice.into_fd())?;
    let mut buf = [0u8; 16];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

async fn report_exit(events: &mpsc::Sender<AgentEvent>, metrics: &AgentMetrics, exit: ContainerExit) {
    tracing::info!(
        container = %exit.key(),
        reason = exit.reason.name(),
        code = exit.reason.exit_code(),
        "container ended"
    );
    if matches!(
        exit.reason,
        ExitReason::KilledByRequest | ExitReason::MemoryLimit | ExitReason::Fenced | ExitReason::DiskLimit
    ) {
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
