//! `gantry bench load`: many simulated agents and a steady stream of submissions against a real
//! scheduler, to see what the daemon's hot paths cost at cluster scale and whether anything is
//! lost on the way.
//!
//! The generator starts a `gantry-scheduler` child on ephemeral loopback ports with a fresh data
//! directory (or uses one given with `--scheduler` and `--agent-endpoint`), then:
//!
//! - connects `--agents` simulated agents, each over its own TCP connection and the real
//!   protocol (`gantry-proto`): `Register`, then `Status` every `1 / --status-hz` seconds with a
//!   sequence number; `Launch` is answered with `ContainerStarted` and, `--run-time` later,
//!   `ContainerExited`; `Kill` ends a container at once; `Ping` gets `Pong`. Connections are
//!   spread over the first second and first statuses over the first status period, so the
//!   agents do not fire in lockstep;
//! - submits single-request applications through the REST API at `--submit-rate` per second,
//!   open loop (a slow answer does not slow the offered rate);
//! - measures, over `--duration` after `--warmup`: the status round trip (sent → `StatusAck`),
//!   the submission round trip, and the scheduler's CPU (utime + stime from `/proc`) and memory
//!   (`VmHWM`, `VmRSS`), and its own CPU, since it shares the machine with the scheduler;
//! - then stops submitting, waits (at most `--drain-timeout`) for every acknowledged
//!   application to end, and counts what was lost: acknowledged apps that did not finish,
//!   containers launched more than once, agent streams the scheduler dropped, status reports
//!   never acknowledged, exits never acknowledged, nodes the scheduler declared lost.
//!
//! Everything runs on one current-thread Tokio runtime: the generator then takes at most one
//! core, and its messages are cheap (no logging, no per-message allocation beyond the protobuf
//! encoding).

use crate::api::AppFilter;
use crate::api::client::{Client, ClientError};
use crate::api::types::{AppState, ContainerRequest, ResourceRequest, SubmitApp};
use crate::bench::quantile_ms;
use crate::cli::{parse_duration_ms, parse_duration_or_zero_ms, parse_memory};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_client::AgentServiceClient;
use gantry_proto::v1::scheduler_message::Msg as Down;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// Over how long the agents open their connections.
const CONNECT_SPREAD: Duration = Duration::from_secs(1);
/// How long an agent may take to be registered (connect, `Register`, `Registered`).
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// After the stop signal, how long an agent waits for acknowledgements still due.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Submissions in flight at once; a tick beyond this is skipped and counted.
const MAX_SUBMISSIONS_IN_FLIGHT: usize = 1024;
/// Deadline of one REST call.
const REST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the child scheduler may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// File descriptors the generator (and the child, which inherits the limit) need beyond one per
/// agent connection.
const SPARE_FDS: u64 = 512;

/// `gantry bench load` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Simulated agents (one node and one gRPC connection each).
    #[arg(long, default_value_t = 1000)]
    pub agents: u32,
    /// Status reports per second per agent.
    #[arg(long, default_value_t = 1.0)]
    pub status_hz: f64,
    /// Applications submitted per second (0: status load only).
    #[arg(long, default_value_t = 20.0)]
    pub submit_rate: f64,
    /// How long to measure (e.g. 60s, 5m).
    #[arg(long, default_value = "60s", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub duration: u64,
    /// Load before measuring starts (after the agents' connections are spread over 1 s).
    #[arg(long, default_value = "5s", value_parser = parse_duration_or_zero_ms, value_name = "DURATION")]
    pub warmup: u64,
    /// How long each simulated container runs before it exits with 0.
    #[arg(long, default_value = "5s", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub run_time: u64,
    /// Containers per application (one request of this many).
    #[arg(long, default_value_t = 1)]
    pub containers_per_app: u32,
    /// CPU of each container, millicores.
    #[arg(long, default_value_t = 100)]
    pub container_cpu_millis: u64,
    /// Memory of each container (a bare number is MiB).
    #[arg(long, default_value = "256M", value_parser = parse_memory)]
    pub container_memory: u64,
    /// CPU each simulated node offers, millicores.
    #[arg(long, default_value_t = 16_000)]
    pub node_cpu_millis: u64,
    /// Memory each simulated node offers (a bare number is MiB).
    #[arg(long, default_value = "64G", value_parser = parse_memory)]
    pub node_memory: u64,
    /// After measuring, how long to wait for the acknowledged applications to end.
    #[arg(long, default_value = "60s", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub drain_timeout: u64,
    /// The daemon to start; default: `gantry-scheduler` next to this executable.
    #[arg(long, value_name = "PATH")]
    pub scheduler_bin: Option<PathBuf>,
    /// Use a running scheduler's REST API instead of starting one (with --agent-endpoint).
    #[arg(long, value_name = "URL", requires = "agent_endpoint")]
    pub scheduler: Option<String>,
    /// The running scheduler's agent endpoint (`http://host:port`).
    #[arg(long, value_name = "URL", requires = "scheduler")]
    pub agent_endpoint: Option<String>,
    /// Bearer token for a running scheduler's REST API.
    #[arg(long, env = "GANTRY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// File holding the running scheduler's agent join token.
    #[arg(long, value_name = "PATH")]
    pub join_token_file: Option<PathBuf>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl LoadArgs {
    /// Arguments from flags as on the command line (`["--agents", "50"]`), the rest at their
    /// defaults: for tests and scripts, with the same defaults and checks as `gantry bench load`.
    pub fn from_flags<I: IntoIterator<Item = S>, S: Into<std::ffi::OsString> + Clone>(
        flags: I,
    ) -> Result<LoadArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: LoadArgs,
        }
        let all = std::iter::once(std::ffi::OsString::from("load")).chain(flags.into_iter().map(Into::into));
        <Wrapper as clap::Parser>::try_parse_from(all).map(|w| w.args)
    }
}

/// Why the load could not be run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Bad arguments.
    #[error("{0}")]
    Args(String),
    /// Too few file descriptors for the connections.
    #[error(
        "{agents} agents need about {want} open files, but the hard limit is {hard}: raise it (ulimit -Hn) or use fewer agents"
    )]
    FdLimit {
        /// Agents asked for.
        agents: u32,
        /// Descriptors needed.
        want: u64,
        /// The hard limit.
        hard: u64,
    },
    /// A local operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The child scheduler did not come up.
    #[error("the scheduler did not start: {reason}\n--- its log ---\n{log}")]
    SchedulerStart {
        /// Why.
        reason: String,
        /// The end of its log.
        log: String,
    },
    /// The child scheduler's store could not be read back.
    #[error("reading the scheduler's store {path}: {message}")]
    Store {
        /// The database.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The REST API could not be used.
    #[error(transparent)]
    Client(#[from] ClientError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LoadError {
    let what = what.into();
    move |source| LoadError::Io { what, source }
}

/// Latency figures of one kind of round trip, ms.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Samples measured (sent within the measured window and answered).
    pub samples: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort_unstable();
        Latency {
            samples: samples.len() as u64,
            p50_ms: quantile_ms(&samples, 0.5),
            p99_ms: quantile_ms(&samples, 0.99),
            p999_ms: quantile_ms(&samples, 0.999),
            max_ms: quantile_ms(&samples, 1.0),
        }
    }
}

/// The run's settings, as used.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadSettings {
    /// Simulated agents.
    pub agents: u32,
    /// Status reports per second per agent.
    pub status_hz: f64,
    /// Applications submitted per second.
    pub submit_rate: f64,
    /// Warm-up, s.
    pub warmup_s: f64,
    /// Measured window, s.
    pub duration_s: f64,
    /// Each container's run time, s.
    pub run_time_s: f64,
    /// Containers per application.
    pub containers_per_app: u32,
    /// `child <binary>` or the REST address of a running scheduler.
    pub scheduler: String,
    /// The child's `node_timeout_ms` (0 for a running scheduler: its own).
    pub node_timeout_ms: u64,
}

/// Where an acknowledged application ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppVerdict {
    Finished,
    /// FAILED, KILLED or REJECTED.
    Failed,
    /// Not over yet.
    Live,
}

impl AppVerdict {
    fn from_api(state: AppState) -> AppVerdict {
        match state {
            AppState::Finished => AppVerdict::Finished,
            AppState::Failed | AppState::Killed => AppVerdict::Failed,
            AppState::New | AppState::Accepted | AppState::Running => AppVerdict::Live,
        }
    }

    fn from_engine(state: u32) -> AppVerdict {
        use gantry_sdk::abi::{
            GANTRY_APP_FAILED, GANTRY_APP_FINISHED, GANTRY_APP_KILLED, GANTRY_APP_REJECTED,
        };
        match state {
            GANTRY_APP_FINISHED => AppVerdict::Finished,
            GANTRY_APP_FAILED | GANTRY_APP_KILLED | GANTRY_APP_REJECTED => AppVerdict::Failed,
            _ => AppVerdict::Live,
        }
    }
}

/// Status reports.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StatusFigures {
    /// Sent over the whole run.
    pub sent: u64,
    /// Acknowledged over the whole run.
    pub acked: u64,
    /// Never acknowledged (`sent - acked`).
    pub unacked: u64,
    /// Acknowledged per second within the measured window.
    pub acked_per_s: f64,
    /// Round trip, sent → `StatusAck`, of those sent within the measured window.
    pub latency: Latency,
}

/// Submissions through the REST API.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SubmitFigures {
    /// Attempted over the whole run.
    pub attempted: u64,
    /// Answered with an id (durable in the scheduler's store).
    pub acknowledged: u64,
    /// Answered with an error status.
    pub refused: u64,
    /// No answer (transport error or timeout).
    pub failed: u64,
    /// Ticks skipped because too many submissions were in flight.
    pub skipped: u64,
    /// Acknowledged per second within the measured window.
    pub acked_per_s: f64,
    /// Round trip of those sent within the measured window.
    pub latency: Latency,
    /// The first error seen, if any.
    pub first_error: Option<String>,
}

/// A process's use of the machine over the measured window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ProcessFigures {
    /// Its pid.
    pub pid: u32,
    /// CPU time (user + system) over wall time: cores kept busy on average.
    pub cpu_cores: f64,
    /// Peak resident set (`VmHWM`) at the end of the window, bytes.
    pub peak_rss_bytes: u64,
    /// Resident set (`VmRSS`) at the end of the window, bytes.
    pub rss_bytes: u64,
}

/// What was lost. Every count but the first four should be zero.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LostFigures {
    /// Where the apps' ends were checked: `store` (the child's SQLite store after it stopped,
    /// integrity-checked) or `api` (the REST listing, which forgets ended apps beyond the
    /// scheduler's `history_len` until it restarts: those count as missing).
    pub verified_in: String,
    /// Agents that registered.
    pub agents_registered: u64,
    /// Acknowledged applications that reached FINISHED.
    pub apps_finished: u64,
    /// Container launches received over all agents.
    pub launches: u64,
    /// Distinct containers launched.
    pub containers: u64,
    /// Agents that could not register.
    pub agents_not_registered: u64,
    /// Agent streams that ended or failed before the generator closed them.
    pub streams_dropped: u64,
    /// Acknowledged applications that ended FAILED or KILLED.
    pub apps_failed: u64,
    /// Acknowledged applications still not over when the drain timed out.
    pub apps_unfinished: u64,
    /// Acknowledged applications the scheduler does not know (see `verified_in`).
    pub apps_missing: u64,
    /// Launches beyond the first of a container (`launches - containers`).
    pub duplicate_launches: u64,
    /// Exits sent and never acknowledged.
    pub exits_unacked: u64,
    /// Status reports never acknowledged.
    pub statuses_unacked: u64,
    /// Nodes the scheduler reported LOST at the end.
    pub nodes_lost: u64,
    /// Agents that did not end within the stop grace.
    pub agents_hung: u64,
}

impl LostFigures {
    /// Whether nothing was lost.
    pub fn nothing_lost(&self) -> bool {
        self.agents_not_registered == 0
            && self.streams_dropped == 0
            && self.apps_failed == 0
            && self.apps_unfinished == 0
            && self.apps_missing == 0
            && self.duplicate_launches == 0
            && self.exits_unacked == 0
            && self.statuses_unacked == 0
            && self.nodes_lost == 0
            && self.agents_hung == 0
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadReport {
    /// The settings.
    pub settings: LoadSettings,
    /// Status reports.
    pub status: StatusFigures,
    /// Submissions.
    pub submissions: SubmitFigures,
    /// The child scheduler (absent for a running scheduler: it may be on another machine).
    pub scheduler: Option<ProcessFigures>,
    /// The generator itself.
    pub generator: ProcessFigures,
    /// How long the drain took, s.
    pub drain_s: f64,
    /// What was lost.
    pub lost: LostFigures,
    /// `lost.nothing_lost()`.
    pub nothing_lost: bool,
}

impl LoadReport {
    /// The report for people.
    pub fn summary(&self) -> String {
        let s = &self.settings;
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let mut out = format!(
            "{} agents at {} Hz, {} apps/s, {:.0} s measured after {:.0} s warm-up, scheduler: {}\n",
            s.agents, s.status_hz, s.submit_rate, s.duration_s, s.warmup_s, s.scheduler
        );
        let l = &self.status.latency;
        out += &format!(
            "  status round trip   p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms  ({} samples, {:.0}/s)\n",
            l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms, l.samples, self.status.acked_per_s
        );
        let l = &self.submissions.latency;
        out += &format!(
            "  submission          p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} samples, {:.1}/s)\n",
            l.p50_ms, l.p99_ms, l.max_ms, l.samples, self.submissions.acked_per_s
        );
        if let Some(p) = &self.scheduler {
            out += &format!(
                "  scheduler           {:.3} cores, peak RSS {:.1} MiB, RSS {:.1} MiB\n",
                p.cpu_cores,
                mib(p.peak_rss_bytes),
                mib(p.rss_bytes)
            );
        }
        out += &format!(
            "  generator           {:.3} cores, peak RSS {:.1} MiB\n",
            self.generator.cpu_cores,
            mib(self.generator.peak_rss_bytes)
        );
        let x = &self.lost;
        let sub = &self.submissions;
        out += &format!(
            "  submissions         {} attempted: {} acknowledged, {} refused, {} failed, {} skipped\n",
            sub.attempted, sub.acknowledged, sub.refused, sub.failed, sub.skipped
        );
        if let Some(e) = &sub.first_error {
            out += &format!("                      first error: {e}\n");
        }
        out += &format!(
            "  apps                {} finished, {} failed or killed, {} unfinished, {} missing (drain {:.1} s, checked in the {})\n",
            x.apps_finished, x.apps_failed, x.apps_unfinished, x.apps_missing, self.drain_s, x.verified_in
        );
        out += &format!(
            "  containers          {} launched, {} duplicate launches, {} exits unacknowledged\n",
            x.containers, x.duplicate_launches, x.exits_unacked
        );
        out += &format!(
            "  agents              {} registered, {} not, {} streams dropped, {} hung, {} nodes lost, {} statuses unacknowledged\n",
            x.agents_registered,
            x.agents_not_registered,
            x.streams_dropped,
            x.agents_hung,
            x.nodes_lost,
            x.statuses_unacked
        );
        out += if self.nothing_lost { "  nothing lost\n" } else { "  SOMETHING WAS LOST (see above)\n" };
        out
    }
}

/// Runs the load and returns what it measured. Writes `--out` if given.
pub fn run(args: &LoadArgs) -> Result<LoadReport, LoadError> {
    check_args(args)?;
    raise_fd_limit(args.agents)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime"))?;
    let report = rt.block_on(drive(args))?;
    if let Some(path) = &args.out {
        let json = serde_json::to_vec_pretty(&report)
            .map_err(|e| io("encoding the report")(std::io::Error::other(e)))?;
        std::fs::write(path, json).map_err(io(format!("writing {}", path.display())))?;
    }
    Ok(report)
}

fn check_args(a: &LoadArgs) -> Result<(), LoadError> {
    let bad = |m: &str| Err(LoadError::Args(m.to_owned()));
    if a.agents == 0 || a.agents > 100_000 {
        return bad("--agents must be 1..=100000");
    }
    if !(a.status_hz.is_finite() && a.status_hz >= 0.01 && a.status_hz <= 100.0) {
        return bad("--status-hz must be 0.01..=100");
    }
    if !(a.submit_rate.is_finite() && (0.0..=100_000.0).contains(&a.submit_rate)) {
        return bad("--submit-rate must be 0..=100000");
    }
    if a.containers_per_app == 0 || a.container_cpu_millis == 0 || a.node_cpu_millis == 0 {
        return bad("--containers-per-app, --container-cpu-millis and --node-cpu-millis must be positive");
    }
    if a.container_cpu_millis > a.node_cpu_millis || a.container_memory > a.node_memory {
        return bad("a container must fit on a node (--container-* against --node-*)");
    }
    Ok(())
}

/// Raises the soft limit on open files to what `agents` connections need (the child scheduler
/// inherits it). The usual soft limit of 1024 is too few for 1,000 agents.
fn raise_fd_limit(agents: u32) -> Result<(), LoadError> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = u64::from(agents) + SPARE_FDS;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| io("reading RLIMIT_NOFILE")(std::io::Error::from(e)))?;
    if soft >= want {
        return Ok(());
    }
    if hard < want {
        return Err(LoadError::FdLimit { agents, want, hard });
    }
    setrlimit(Resource::RLIMIT_NOFILE, want, hard)
        .map_err(|e| io("raising RLIMIT_NOFILE")(std::io::Error::from(e)))
}

/// When the phases of a run begin, all from one origin.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// Agents have opened their connections; statuses and submissions start.
    load_from: Instant,
    /// The measured window.
    measure_from: Instant,
    measure_until: Instant,
}

impl Schedule {
    fn measured(&self, at: Instant) -> bool {
        at >= self.measure_from && at < self.measure_until
    }
}

async fn drive(args: &LoadArgs) -> Result<LoadReport, LoadError> {
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

fn default_scheduler_bin() -> Result<PathBuf, LoadError> {
    let exe = std::env::current_exe().map_err(io("finding this executable"))?;
    let bin = exe.with_file_name("gantry-scheduler");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(LoadError::Args(format!("no {} next to this executable; give --scheduler-bin", bin.display())))
    }
}

fn agent_endpoint(url: &str) -> Result<tonic::transport::Endpoint, LoadError> {
    let endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())
        .map_err(|e| LoadError::Args(format!("--agent-endpoint {url}: {e}")))?;
    if endpoint.uri().scheme_str() != Some("http") {
        return Err(LoadError::Args(format!("--agent-endpoint {url}: must start with http://")));
    }
    Ok(endpoint.connect_timeout(Duration::from_secs(5)).tcp_nodelay(true))
}

/// What the submission phase leaves behind.
struct SubmitOutcome {
    figures: SubmitFigures,
    acked_ids: Vec<u64>,
    scheduler: Option<ProcessFigures>,
    generator: ProcessFigures,
}

type SubmitResult = (Instant, Duration, Result<u64, ClientError>);

/// Submits at the configured rate from `load_from` to `measure_until`, takes the process
/// figures at the window's edges, and waits for the submissions still in flight.
async fn submit_load(
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
fn cpu_ticks(pid: u32) -> Option<u64> {
    gantry_agent::procfs::ProcStat::read(pid).map(|s| s.utime + s.stime)
}

/// A process's peak and current resident set, bytes (`VmHWM`, `VmRSS`; 0 when unreadable).
fn memory(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// One simulated agent: its identity and when it acts.
struct SimAgent {
    name: String,
    rack: String,
    endpoint: tonic::transport::Endpoint,
    join_token: Option<String>,
    resources: v1::Resources,
    connect_at: Instant,
    first_status: Instant,
    period: Duration,
    run_time: Duration,
    schedule: Schedule,
}

/// What one simulated agent saw.
#[derive(Debug, Default)]
struct AgentOutcome {
    registered: bool,
    /// The scheduler ended or broke the stream before the generator closed it.
    stream_dropped: bool,
    statuses_sent: u64,
    statuses_acked: u64,
    /// Status round trips of reports sent within the measured window.
    latencies: Vec<Duration>,
    /// Every container id a `Launch` named, once per `Launch`.
    launches: Vec<u64>,
    exits_unacked: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn up(msg: Up) -> v1::AgentMessage {
    v1::AgentMessage { msg: Some(msg) }
}

impl SimAgent {
    async fn run(self, mut stop: watch::Receiver<bool>) -> AgentOutcome {
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
    fn status(&self, seq: u64, running: &VecDeque<(Instant, u64)>) -> v1::Status {
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

async fn tick_or_never(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A `gantry-scheduler` child on ephemeral loopback ports with its own data directory; killed
/// and its directory removed when dropped, whatever happened.
struct ChildScheduler {
    child: std::process::Child,
    dir: PathBuf,
    api: std::net::SocketAddr,
    agents: std::net::SocketAddr,
}

impl ChildScheduler {
    async fn start(bin: &Path, node_timeout_ms: u64) -> Result<ChildScheduler, LoadError> {
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("gantry-load-{}-{stamp}", std::process::id()));
        std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?;
        // From here on the guard owns the directory, also when starting fails.
        let mut guard = DirGuard(Some(dir.clone()));
        let data = toml::Value::String(dir.join("data").display().to_string());
        // The store keeps every ended app (no retention by count), so the verdict read from it
        // after the run finds each acknowledged one.
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nagent_listen = \"127.0.0.1:0\"\ndata_dir = {data}\nnode_timeout_ms = {node_timeout_ms}\n\
             [store]\nmax_completed_apps = {}\n",
            i64::MAX
        );
        let config_path = dir.join("scheduler.toml");
        std::fs::write(&config_path, config).map_err(io("writing the scheduler's configuration"))?;
        let log_path = dir.join("scheduler.log");
        let log = std::fs::File::create(&log_path).map_err(io("creating the scheduler's log"))?;
        let child = std::process::Command::new(bin)
            .arg("--config")
            .arg(&config_path)
            // Its default level, whatever the caller's; the listening line is at info.
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!("starting {}", bin.display())))?;
        let mut this = ChildScheduler {
            child,
            dir: guard.0.take().unwrap_or_default(),
            api: ([127, 0, 0, 1], 0).into(),
            agents: ([127, 0, 0, 1], 0).into(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some((api, agents)) = listening_addresses(&text) {
                (this.api, this.agents) = (api, agents);
                return Ok(this);
            }
            let failed = |reason: String| LoadError::SchedulerStart { reason, log: tail(&text, 30) };
            match this.child.try_wait() {
                Ok(Some(status)) => return Err(failed(format!("it exited with {status}"))),
                Ok(None) if Instant::now() >= deadline => {
                    return Err(failed(format!("not listening after {} s", START_TIMEOUT.as_secs())));
                }
                Ok(None) => {}
                Err(e) => return Err(failed(format!("cannot wait for it: {e}"))),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL if it has not stopped within 10 s; returns once it is gone.
    async fn stop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Every application in the stopped child's store, after an integrity check.
    fn stored_apps(&self) -> Result<HashMap<u64, AppVerdict>, LoadError> {
        let path = self.dir.join("data").join("gantry.db");
        let failed =
            |e: crate::store::StoreError| LoadError::Store { path: path.clone(), message: e.to_string() };
        let store = crate::store::Store::open(&path).map_err(failed)?;
        store.check_integrity().map_err(failed)?;
        let recovered = store.load().map_err(failed)?;
        store.close().map_err(failed)?;
        Ok(recovered.apps.iter().map(|a| (a.id.0, AppVerdict::from_engine(a.state))).collect())
    }
}

impl Drop for ChildScheduler {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes a directory when dropped, unless it was taken.
struct DirGuard(Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The addresses in the daemon's `gantry-scheduler listening api=… agents=…` log line.
fn listening_addresses(log: &str) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    let line = log.lines().find(|l| l.contains("gantry-scheduler listening"))?;
    let field =
        |name: &str| line.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse().ok());
    Some((field("api=")?, field("agents=")?))
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_both_addresses() {
        let log = "2025-01-01T00:00:00Z  INFO gantry_scheduler: gantry-scheduler listening api=127.0.0.1:4000 agents=127.0.0.1:4001\n";
        let (api, agents) = listening_addresses(log).expect("found");
        assert_eq!((api.port(), agents.port()), (4000, 4001));
        assert!(listening_addresses("INFO something else api=1").is_none());
    }

    #[test]
    fn defaults_parse_and_bad_arguments_are_refused() {
        let a = LoadArgs::from_flags(["--duration", "90s"]).expect("parses");
        assert_eq!((a.agents, a.duration, a.run_time, a.container_memory), (1000, 90_000, 5_000, 256 << 20));
        check_args(&a).expect("defaults are valid");
        for flags in [
            &["--agents", "0"][..],
            &["--status-hz", "0"],
            &["--submit-rate=-1"],
            &["--container-cpu-millis", "20000"],
        ] {
            let a = LoadArgs::from_flags(flags.iter().copied()).expect("parses");
            assert!(matches!(check_args(&a), Err(LoadError::Args(_))), "{flags:?} accepted");
        }
        assert!(
            LoadArgs::from_flags(["--scheduler", "http://127.0.0.1:1"]).is_err(),
            "needs --agent-endpoint"
        );
        assert!(LoadArgs::from_flags(["--duration", "soon"]).is_err());
    }
}
