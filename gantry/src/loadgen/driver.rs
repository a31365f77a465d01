//! The run itself: the child scheduler (or a running one), the simulated agents spread over the
//! first second, the open-loop submissions, the process figures at the window's edges, the
//! drain, and the count of what was lost.

use super::agent::{SimAgent, tick_or_never};
use super::child::ChildScheduler;
use super::report::*;
use super::{CONNECT_SPREAD, LoadArgs, LoadError, MAX_SUBMISSIONS_IN_FLIGHT, REST_TIMEOUT, STOP_GRACE, io};
use gantry_proto::v1;
use gantry_scheduler::api::AppFilter;
use gantry_scheduler::api::client::{Client, ClientError};
use gantry_scheduler::api::types::{AppState, ContainerRequest, ResourceRequest, SubmitApp};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

/// When the phases of a run begin, all from one origin.
#[derive(Debug, Clone, Copy)]
pub(super) struct Schedule {
    /// Agents have opened their connections; statuses and submissions start.
    pub(super) load_from: Instant,
    /// The measured window.
    pub(super) measure_from: Instant,
    pub(super) measure_until: Instant,
}

impl Schedule {
    pub(super) fn measured(&self, at: Instant) -> bool {
        at >= self.measure_from && at < self.measure_until
    }
}

pub(super) async fn drive(args: &LoadArgs) -> Result<LoadReport, LoadError> {
    let period = Duration::from_secs_f64(1.0 / args.status_hz);
    // A node is lost after this long without a status: several periods, never below the
    // daemon's default.
    let node_timeout_ms = (period.as_millis() as u64).saturating_mul(5).max(10_000);
    let (mut child, api, agent_url, scheduler) = match (&args.scheduler, &args.agent_endpoint) {
        (Some(api), Some(agents)) => (None, api.clone(), agents.clone(), api.clone()),
        (None, None) => {
            let bin = match &args.scheduler_bin {
                Some(b) => b.clone(),
                None => default_scheduler_bin()?,
            };
            let child = ChildScheduler::start(&bin, node_timeout_ms).await?;
            let (api, agents) = (format!("http://{}", child.api), format!("http://{}", child.agents));
            (Some(child), api, agents, format!("child {}", bin.display()))
        }
        _ => return Err(LoadError::Args("--scheduler and --agent-endpoint go together".into())),
    };
    let join_token = match &args.join_token_file {
        Some(p) => Some(
            std::fs::read_to_string(p).map_err(io(format!("reading {}", p.display())))?.trim().to_owned(),
        ),
        None => None,
    };
    let client = Client::new(&api)?.with_token(args.token.clone()).with_timeout(REST_TIMEOUT);
    client.info().await?; // a wrong address fails here, with the client's words
    let endpoint = agent_endpoint(&agent_url)?;

    let origin = Instant::now();
    let load_from = origin + CONNECT_SPREAD;
    let measure_from = load_from + Duration::from_millis(args.warmup);
    let schedule = Schedule {
        load_from,
        measure_from,
        measure_until: measure_from + Duration::from_millis(args.duration),
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut agents = JoinSet::new();
    for i in 0..args.agents {
        let frac = f64::from(i) / f64::from(args.agents);
        let sim = SimAgent {
            name: format!("load-{i:05}"),
            rack: format!("load-rack-{:03}", i / 40),
            endpoint: endpoint.clone(),
            join_token: join_token.clone(),
            resources: v1::Resources {
                cpu_millis: args.node_cpu_millis,
                memory_bytes: args.node_memory,
                gpus: 0,
            },
            connect_at: origin + CONNECT_SPREAD.mul_f64(frac),
            first_status: load_from + period.mul_f64(frac),
            period,
            run_time: Duration::from_millis(args.run_time),
            schedule,
        };
        agents.spawn(sim.run(stop_rx.clone()));
    }

    let scheduler_pid = child.as_ref().map(|c| c.pid());
    let self_pid = std::process::id();
    let mut submit = submit_load(&client, args, schedule, scheduler_pid, self_pid).await;

    // Drain: every acknowledged app should end; the agents keep reporting meanwhile.
    let drain_started = Instant::now();
    let deadline = drain_started + Duration::from_millis(args.drain_timeout);
    let states = loop {
        let listing = client.apps(&AppFilter::default()).await;
        let states: Option<HashMap<u64, AppState>> = match listing {
            Ok(apps) => Some(apps.into_iter().map(|a| (a.id, a.state)).collect()),
            Err(e) => {
                submit.figures.first_error.get_or_insert_with(|| format!("listing apps: {e}"));
                None
            }
        };
        // A live app is always listed; one that is not has ended and aged out of the
        // scheduler's history of ended apps (`history_len`).
        let done = states
            .as_ref()
            .is_some_and(|s| submit.acked_ids.iter().all(|id| s.get(id).is_none_or(|st| st.is_terminal())));
        if done || Instant::now() >= deadline {
            break states.unwrap_or_default();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let drain_s = drain_started.elapsed().as_secs_f64();
    let nodes_lost = client.metrics().await.map(|m| m.lost_nodes).unwrap_or_default();

    let _ = stop_tx.send(true);
    let mut outcomes = Vec::with_capacity(args.agents as usize);
    let mut hung = 0u64;
    let joined = tokio::time::timeout(STOP_GRACE * 2, async {
        while let Some(r) = agents.join_next().await {
            match r {
                Ok(o) => outcomes.push(o),
                Err(_) => hung += 1, // panicked: counted with the hung, it did not end cleanly
            }
        }
    })
    .await;
    if joined.is_err() {
        hung += agents.len() as u64;
        agents.abort_all();
    }

    let mut lost = LostFigures { nodes_lost, agents_hung: hung, ..LostFigures::default() };
    // The verdict on each acknowledged app: from the child's store once it has stopped (the
    // durable truth, and it holds every app, however many); from the API otherwise.
    let verdicts: HashMap<u64, AppVerdict> = match child.as_mut() {
        Some(c) => {
            c.stop().await;
            lost.verified_in = "store".into();
            c.stored_apps()?
        }
        None => {
            lost.verified_in = "api".into();
            states.iter().map(|(id, st)| (*id, AppVerdict::from_api(*st))).collect()
        }
    };
    for id in &submit.acked_ids {
        match verdicts.get(id) {
            Some(AppVerdict::Finished) => lost.apps_finished += 1,
            Some(AppVerdict::Failed) => lost.apps_failed += 1,
            Some(AppVerdict::Live) => lost.apps_unfinished += 1,
            None => lost.apps_missing += 1,
        }
    }
    let mut status = StatusFigures::default();
    let mut latencies = Vec::new();
    let mut launched = Vec::new();
    for o in outcomes {
        lost.agents_registered += u64::from(o.registered);
        lost.agents_not_registered += u64::from(!o.registered);
        lost.streams_dropped += u64::from(o.stream_dropped);
        lost.exits_unacked += o.exits_unacked;
        status.sent += o.statuses_sent;
        status.acked += o.statuses_acked;
        latencies.extend(o.latencies);
        launched.extend(o.launches);
    }
    launched.sort_unstable();
    lost.launches = launched.len() as u64;
    launched.dedup();
    lost.containers = launched.len() as u64;
    lost.duplicate_launches = lost.launches - lost.containers;
    status.unacked = status.sent - status.acked;
    lost.statuses_unacked = status.unacked;
    let window = Duration::from_millis(args.duration).as_secs_f64();
    status.acked_per_s = latencies.len() as f64 / window;
    status.latency = Latency::of(latencies);
    submit.figures.acked_per_s = submit.figures.latency.samples as f64 / window;
    Ok(LoadReport {
        settings: LoadSettings {
            agents: args.agents,
            status_hz: args.status_hz,
            submit_rate: args.submit_rate,
            warmup_s: args.warmup as f64 / 1e3,
            duration_s: window,
            run_time_s: args.run_time as f64 / 1e3,
            containers_per_app: args.containers_per_app,
            scheduler,
            node_timeout_ms: if child.is_some() { node_timeout_ms } else { 0 },
        },
        status,
        submissions: submit.figures,
        scheduler: submit.scheduler,
        generator: submit.generator,
        drain_s,
        nothing_lost: lost.nothing_lost(),
        lost,
    })
}

pub(super) fn default_scheduler_bin() -> Result<PathBuf, LoadError> {
    let exe = std::env::current_exe().map_err(io("finding this executable"))?;
    let bin = exe.with_file_name("gantry-scheduler");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(LoadError::Args(format!("no {} next to this executable; give --scheduler-bin", bin.display())))
    }
}

pub(super) fn agent_endpoint(url: &str) -> Result<tonic::transport::Endpoint, LoadError> {
    let endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())
        .map_err(|e| LoadError::Args(format!("--agent-endpoint {url}: {e}")))?;
    if endpoint.uri().scheme_str() != Some("http") {
        return Err(LoadError::Args(format!("--agent-endpoint {url}: must start with http://")));
    }
    Ok(endpoint.connect_timeout(Duration::from_secs(5)).tcp_nodelay(true))
}

/// What the submission phase leaves behind.
pub(super) struct SubmitOutcome {
    pub(super) figures: SubmitFigures,
    pub(super) acked_ids: Vec<u64>,
    pub(super) scheduler: Option<ProcessFigures>,
    pub(super) generator: ProcessFigures,
}

pub(super) type SubmitResult = (Instant, Duration, Result<u64, ClientError>);

/// Submits at the configured rate from `load_from` to `measure_until`, takes the process
/// figures at the window's edges, and waits for the submissions still in flight.
pub(super) async fn submit_load(
    client: &Client,
    args: &LoadArgs,
    schedule: Schedule,
    scheduler_pid: Option<u32>,
    self_pid: u32,
) -> SubmitOutcome {
    let app = SubmitApp {
        application_id: None,
        name: String::new(),
        queue: None,
        // The scheduler's default user, or the token's: naming another would be refused.
        user: None,
        reservation_id: None,
        priority: 0,
        max_app_attempts: 0,
        containers: vec![ContainerRequest {
            disk_bytes: None,
            resource: ResourceRequest {
                cpu_millis: args.container_cpu_millis,
                memory_bytes: args.container_memory,
                gpus: 0,
            },
            count: args.containers_per_app,
            gang: false,
            priority: 0,
            labels: Default::default(),
            preferred_labels: Default::default(),
            rack_affinity: Default::default(),
            master: false,
            expected_ms: args.run_time,
            slow_ms: 0,
            command: vec!["true".into()],
            env: Default::default(),
            max_pids: None,
        }],
    };
    let mut figures = SubmitFigures::default();
    let mut acked_ids = Vec::new();
    let mut latencies = Vec::new();
    let mut in_flight: JoinSet<SubmitResult> = JoinSet::new();
    let mut absorb = |r: SubmitResult, figures: &mut SubmitFigures| {
        let (sent, took, result) = r;
        match result {
            Ok(id) => {
                figures.acknowledged += 1;
                acked_ids.push(id);
                if schedule.measured(sent) {
                    latencies.push(took);
                }
            }
            Err(e) => {
                if e.status().is_some() {
                    figures.refused += 1;
                } else {
                    figures.failed += 1;
                }
                figures.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    };
    let mut ticker = (args.submit_rate > 0.0).then(|| {
        let mut t =
            tokio::time::interval_at(schedule.load_from, Duration::from_secs_f64(1.0 / args.submit_rate));
        t.set_missed_tick_behavior(MissedTickBehavior::Burst);
        t
    });
    let window_start = tokio::time::sleep_until(schedule.measure_from);
    let window_end = tokio::time::sleep_until(schedule.measure_until);
    tokio::pin!(window_start, window_end);
    let mut start_marks: Option<(Instant, Option<u64>, Option<u64>)> = None;
    let mut started_window = false;
    let mut n = 0u64;
    loop {
        tokio::select! {
            () = tick_or_never(&mut ticker) => {
                figures.attempted += 1;
                if in_flight.len() >= MAX_SUBMISSIONS_IN_FLIGHT {
                    figures.skipped += 1;
                    continue;
                }
                n += 1;
                let mut body = app.clone();
                body.name = format!("load-{n}");
                let client = client.clone();
                in_flight.spawn(async move {
                    let sent = Instant::now();
                    let r = client.submit(&body).await;
                    (sent, sent.elapsed(), r)
                });
            }
            Some(Ok(r)) = in_flight.join_next(), if !in_flight.is_empty() => absorb(r, &mut figures),
            () = &mut window_start, if !started_window => {
                started_window = true;
                start_marks = Some((Instant::now(), scheduler_pid.and_then(cpu_ticks), cpu_ticks(self_pid)));
            }
            () = &mut window_end => break,
        }
    }
    let end = Instant::now();
    let process = |pid: u32, ticks_then: Option<u64>| {
        let (peak_rss_bytes, rss_bytes) = memory(pid);
        let cpu_cores = match (start_marks, ticks_then, cpu_ticks(pid)) {
            (Some((then, ..)), Some(a), Some(b)) => {
                let secs = b.saturating_sub(a) as f64 / gantry_agent::procfs::clock_ticks_per_second() as f64;
                secs / (end - then).as_secs_f64().max(1e-9)
            }
            _ => 0.0,
        };
        ProcessFigures { pid, cpu_cores, peak_rss_bytes, rss_bytes }
    };
    let scheduler = scheduler_pid.map(|pid| process(pid, start_marks.and_then(|m| m.1)));
    let generator = process(self_pid, start_marks.and_then(|m| m.2));
    while let Some(r) = in_flight.join_next().await {
        if let Ok(r) = r {
            absorb(r, &mut figures);
        }
    }
    figures.latency = Latency::of(latencies);
    SubmitOutcome { figures, acked_ids, scheduler, generator }
}

/// A process's CPU time so far, clock ticks (user + system, all threads).
pub(super) fn cpu_ticks(pid: u32) -> Option<u64> {
    gantry_agent::procfs::ProcStat::read(pid).map(|s| s.utime + s.stime)
}

/// A process's peak and current resident set, bytes (`VmHWM`, `VmRSS`; 0 when unreadable).
pub(super) fn memory(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmHWM:"), field("VmRSS:"))
}
