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
//!
//! Split by concern: the run (`driver.rs`), one simulated agent (`agent.rs`), the child
//! scheduler (`child.rs`) and the report (`report.rs`); this file holds the flags, the errors
//! and the entry point.

mod agent;
mod child;
mod driver;
mod report;
#[cfg(test)]
mod tests;

pub use report::{
    Latency, LoadReport, LoadSettings, LostFigures, ProcessFigures, StatusFigures, SubmitFigures,
};

use crate::bench::quantile_ms;
use crate::cli::{parse_duration_ms, parse_duration_or_zero_ms, parse_memory};
use gantry_scheduler::api::client::ClientError;
use std::path::PathBuf;
use std::time::Duration;

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

/// Runs the load and returns what it measured. Writes `--out` if given.
pub fn run(args: &LoadArgs) -> Result<LoadReport, LoadError> {
    check_args(args)?;
    raise_fd_limit(args.agents)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime"))?;
    let report = rt.block_on(driver::drive(args))?;
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
