//! The `gantry` CLI's cluster commands — `submit`, `apps`, `app`, `kill`, `nodes`, `queues`,
//! `logs` — as library code over the REST API ([`crate::api::client`]), so they can be tested
//! against a real HTTP server and embedded by the binary as one clap subcommand enum
//! ([`ClientCommand`]).
//!
//! Output is a human table by default and the API's own JSON with `--json` (for scripts: the
//! JSON is what the scheduler sent, pretty-printed, not a re-encoding). The scheduler's address
//! comes from `--scheduler URL`, else `GANTRY_SCHEDULER`, else [`DEFAULT_SCHEDULER`].
//!
//! Sizes on the command line: `--cpu` takes cores (`0.5`, `2`) or millicores (`500m`);
//! `--mem` takes `512M`, `2G`, `1.5GiB` — binary units as Slurm and YARN use them — and a bare
//! number means MiB, as Slurm's `--mem` does.

use crate::api::client::{Client, ClientError, paths};
use crate::api::types::*;
use crate::api::{AppFilter, LogFile};
use hyper::Method;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use thiserror::Error;

/// Where the CLI looks for the scheduler without `--scheduler` or `GANTRY_SCHEDULER`: YARN's
/// ResourceManager web port on this machine, where `gantry dev` listens by default.
pub const DEFAULT_SCHEDULER: &str = "http://127.0.0.1:8088";

/// Why a command failed. The binary prints it as `gantry: <message>` and exits non-zero.
#[derive(Debug, Error)]
pub enum CliError {
    /// The API refused the request or answered strangely; the message is the scheduler's.
    #[error(transparent)]
    Client(ClientError),
    /// The scheduler could not be reached.
    #[error(
        "{0}; is the scheduler running there? (point the CLI at it with --scheduler URL or GANTRY_SCHEDULER)"
    )]
    Unreachable(ClientError),
    /// An argument is wrong in a way clap cannot see.
    #[error("{0}")]
    Invalid(String),
    /// Writing to standard output failed.
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// The I/O runtime could not start.
    #[error("cannot start the I/O runtime: {0}")]
    Runtime(std::io::Error),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Transport { .. } | ClientError::Timeout { .. } => CliError::Unreachable(e),
            e => CliError::Client(e),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Output(e)
    }
}

/// Which scheduler to talk to.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The scheduler's REST address.
    #[arg(long = "scheduler", env = "GANTRY_SCHEDULER", default_value = DEFAULT_SCHEDULER, value_name = "URL")]
    pub scheduler: String,
    /// Bearer token for a scheduler with `[security] tokens_file` (visible in the process list:
    /// prefer --token-file).
    #[arg(long, env = "GANTRY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A file holding the bearer token (used when no --token or GANTRY_TOKEN is given). Without
    /// either, a loopback scheduler gets the token of `gantry dev` started in this directory
    /// (./gantry-dev/cli-token), if there is one.
    #[arg(long = "token-file", env = "GANTRY_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The cluster CA certificate (`gantry cert ca`'s `ca.pem`) for an `https://` scheduler.
    #[arg(long = "ca-cert", env = "GANTRY_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl Connection {
    /// A client of this scheduler, sending the token if there is one.
    pub fn client(&self) -> Result<Client, CliError> {
        Ok(Client::with_ca(&self.scheduler, self.ca_cert.as_deref())?.with_token(self.token()?))
    }

    /// The token to send: `--token`/`GANTRY_TOKEN`, else the token file's
    /// (`--token-file`/`GANTRY_TOKEN_FILE`; unreadable is an error), else the token of a
    /// `gantry dev` started in this directory for a loopback scheduler (skipped if unreadable),
    /// else none.
    pub fn token(&self) -> Result<Option<String>, CliError> {
        if let Some(token) = self.token.as_ref().filter(|t| !t.is_empty()) {
            return Ok(Some(token.clone()));
        }
        if let Some(path) = self.token_file.as_ref().filter(|p| !p.as_os_str().is_empty()) {
            return crate::token_file::read(path).map(Some).map_err(CliError::Invalid);
        }
        Ok(crate::token_file::dev_default(&self.scheduler).and_then(|p| crate::token_file::read(&p).ok()))
    }
}

/// The cluster commands. The `gantry` binary embeds them with
/// `#[command(flatten)] Cluster(gantry_scheduler::cli::ClientCommand)` and runs them with
/// [`run`].
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClientCommand {
    /// Submit an application: COUNT containers of one size running CMD.
    Submit(SubmitArgs),
    /// List applications.
    Apps(AppsArgs),
    /// Show one application, its container groups and its containers.
    App(AppArgs),
    /// Kill an application (its containers get SIGTERM, then SIGKILL after a grace period).
    Kill(KillArgs),
    /// List the nodes and what is allocated on them.
    Nodes(ListArgs),
    /// Show the queue hierarchy: capacities, usage and applications.
    Queues(ListArgs),
    /// Print an application's container logs.
    Logs(LogsArgs),
    /// Drain or undrain a node, or list the nodes an autoscaler may remove.
    Node {
        /// What to do.
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// Reserve capacity ahead of a deadline (Rayon), list, update, delete or optimise the plan.
    Reserve {
        /// What to do.
        #[command(subcommand)]
        command: crate::reserve_cli::ReserveCommand,
    },
}

/// `gantry node …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum NodeCommand {
    /// Stop placing containers on a node; those it runs go on (YARN's graceful decommission).
    /// Stored: it survives scheduler restarts and the node's own absences.
    Drain(NodeArgs),
    /// Put a drained node back in service.
    Undrain(NodeArgs),
    /// Nodes that hold no container and are not lost, longest idle first: what an autoscaler
    /// may drain and then remove (see deploy/OPERATIONS.md for the safe order).
    Removable(RemovableArgs),
}

/// `gantry node drain|undrain NAME`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// The node's name (as `gantry nodes` lists it).
    pub name: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    pub json: bool,
}

/// `gantry node removable`.
#[derive(Debug, Clone, clap::Args)]
pub struct RemovableArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// Only nodes empty for at least this long (`10m`, `90s`; a bare number is seconds).
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
    pub idle: Option<u64>,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gantry submit`.
#[derive(Debug, Clone, clap::Args)]
pub struct SubmitArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// Leaf queue (`prod` or `root.prod`) [default: the scheduler's default queue].
    #[arg(long)]
    pub queue: Option<String>,
    /// Run in a reservation (`reservation_17`, from `gantry reserve submit`): the app goes to
    /// its queue.
    #[arg(long, value_name = "ID")]
    pub reservation: Option<String>,
    /// Application name [default: the program's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Submitting user, for accounting [default: $USER].
    #[arg(long)]
    pub user: Option<String>,
    /// CPU per container: cores (`1`, `0.5`) or millicores (`500m`).
    #[arg(long, default_value = "1", value_parser = parse_cpu, value_name = "CORES")]
    pub cpu: u64,
    /// Memory per container: `512M`, `2G`, `1.5GiB` (binary units; a bare number is MiB).
    #[arg(long, default_value = "512M", value_parser = parse_memory, value_name = "SIZE")]
    pub mem: u64,
    /// Disk allowance per container: what its files may hold before its agent kills it
    /// (`10G`, `500M`; a bare number is MiB) [default: the node's].
    #[arg(long, value_parser = parse_memory, value_name = "SIZE")]
    pub disk: Option<u64>,
    /// GPUs per container.
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Number of containers.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Start all containers together or none (a gang).
    #[arg(long)]
    pub gang: bool,
    /// Only nodes with this label (`key=value`; repeatable, all must match).
    #[arg(long = "label", value_parser = parse_key_value, value_name = "KEY=VALUE")]
    pub labels: Vec<(String, String)>,
    /// Environment variable for the containers (`NAME=value`; repeatable).
    #[arg(long = "env", value_parser = parse_key_value, value_name = "NAME=VALUE")]
    pub env: Vec<(String, String)>,
    /// Nodes preferred when free (`key=value`; repeatable): a soft constraint for placement
    /// policies such as hetero, which may run the containers elsewhere at `--slow` speed.
    #[arg(long = "prefer", value_parser = parse_key_value, value_name = "KEY=VALUE")]
    pub prefer: Vec<(String, String)>,
    /// Whether the containers must (`required`) or should (`preferred`) share a rack.
    #[arg(long, default_value = "none", value_parser = parse_rack_affinity, value_name = "none|preferred|required")]
    pub rack_affinity: RackAffinity,
    /// Expected run time on the preferred resources (`90s`, `15m`, `2h`, `500ms`; a bare number
    /// is seconds), for policies that order or place by it (SJF, utility).
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
    pub expected: Option<u64>,
    /// Expected run time elsewhere [default: the same as `--expected`].
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION", requires = "expected")]
    pub slow: Option<u64>,
    /// Most processes and threads each container may have at once [default: the node's
    /// `[isolation] max_pids`].
    #[arg(long, value_name = "N")]
    pub max_pids: Option<u64>,
    /// Priority among the queue's applications (higher first).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Attempts a container may use, counting the first run [default: the scheduler's].
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Print the API's JSON answer.
    #[arg(long)]
    pub json: bool,
    /// The program and its arguments (after `--` when they start with `-`). Everything from
    /// the program on belongs to it, so `--cpu` after the program is the program's.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl SubmitArgs {
    /// The submission these arguments describe.
    pub fn to_submit(&self) -> SubmitApp {
        let program = self.command.first().map(String::as_str).unwrap_or_default();
        let default_name = program.rsplit('/').next().unwrap_or(program);
        SubmitApp {
            application_id: None,
            name: self.name.clone().unwrap_or_else(|| default_name.to_owned()),
            queue: self.queue.clone(),
            reservation_id: self.reservation.clone(),
            user: self.user.clone().or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty())),
            priority: self.priority,
            max_app_attempts: self.max_attempts.unwrap_or(0),
            containers: vec![ContainerRequest {
                resource: ResourceRequest { cpu_millis: self.cpu, memory_bytes: self.mem, gpus: self.gpus },
                count: self.count,
                gang: self.gang,
                priority: 0,
                labels: self.labels.iter().cloned().collect(),
                preferred_labels: self.prefer.iter().cloned().collect(),
                rack_affinity: self.rack_affinity,
                master: false,
                expected_ms: self.expected.unwrap_or(0),
                slow_ms: self.slow.unwrap_or(0),
                command: self.command.clone(),
                env: self.env.iter().cloned().collect(),
                max_pids: self.max_pids,
                disk_bytes: self.disk,
            }],
        }
    }
}

/// `gantry apps`.
#[derive(Debug, Clone, clap::Args)]
pub struct AppsArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// Only apps in these states (NEW, ACCEPTED, RUNNING, FINISHED, FAILED, KILLED; comma list).
    #[arg(long = "state", value_delimiter = ',', value_parser = parse_state, value_name = "STATE")]
    pub states: Vec<AppState>,
    /// Only apps of this queue (a full path, or a leaf's name).
    #[arg(long)]
    pub queue: Option<String>,
    /// Only apps of this user.
    #[arg(long)]
    pub user: Option<String>,
    /// At most this many.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gantry app ID`.
#[derive(Debug, Clone, clap::Args)]
pub struct AppArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// The application id.
    pub id: u64,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gantry kill ID`.
#[derive(Debug, Clone, clap::Args)]
pub struct KillArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// The application id.
    pub id: u64,
    /// Print the API's JSON answer.
    #[arg(long)]
    pub json: bool,
}

/// `gantry nodes`, `gantry queues`.
#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gantry logs ID`.
#[derive(Debug, Clone, clap::Args)]
pub struct LogsArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// The application id.
    pub id: u64,
    /// Only this container [default: all of the application's, each under a header].
    #[arg(long)]
    pub container: Option<u64>,
    /// Standard error instead of standard output.
    #[arg(long)]
    pub stderr: bool,
    /// Only the last SIZE bytes of each log (`4096`, `64K`, `1M`).
    #[arg(long, value_parser = parse_bytes, value_name = "SIZE")]
    pub tail: Option<u64>,
}

// ----- running ---------------------------------------------------------------------------------

/// Runs a command, printing to standard output. A closed pipe (`gantry apps | head`) is not
/// an error.
pub fn run(cmd: ClientCommand) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run_to(cmd, &mut out) {
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Runs a command on its own single-threaded runtime, printing to `out`. Must not be called
/// from inside a Tokio runtime (use [`execute`] there).
pub fn run_to(cmd: ClientCommand, out: &mut dyn Write) -> Result<(), CliError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CliError::Runtime)?;
    rt.block_on(execute(cmd, out))
}

/// Runs a command, printing to `out`.
pub async fn execute(cmd: ClientCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match cmd {
        ClientCommand::Submit(a) => submit(a, out).await,
        ClientCommand::Apps(a) => apps(a, out).await,
        ClientCommand::App(a) => app(a, out).await,
        ClientCommand::Kill(a) => kill(a, out).await,
        ClientCommand::Nodes(a) => nodes(a, out).await,
        ClientCommand::Queues(a) => queues(a, out).await,
        ClientCommand::Logs(a) => logs(a, out).await,
        ClientCommand::Node { command: NodeCommand::Drain(a) } => set_node_drain(a, true, out).await,
        ClientCommand::Node { command: NodeCommand::Undrain(a) } => set_node_drain(a, false, out).await,
        ClientCommand::Node { command: NodeCommand::Removable(a) } => removable(a, out).await,
        ClientCommand::Reserve { command } => crate::reserve_cli::execute(command, out).await,
    }
}

fn print_json(out: &mut dyn Write, v: &Value) -> Result<(), CliError> {
    let text =
        serde_json::to_string_pretty(v).map_err(|e| CliError::Invalid(format!("encoding JSON: {e}")))?;
    writeln!(out, "{text}")?;
    Ok(())
}

async fn submit(a: SubmitArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let req = a.to_submit();
    // Check here first: the same rules as the server, but the message arrives without a round
    // trip and before anything is sent.
    req.validate().map_err(|e| CliError::Invalid(flag_names(&e)))?;
    let (_, v) = client.send_value(Method::POST, &paths::submit(), &req).await?;
    if a.json {
        return print_json(out, &v);
    }
    let id = client.typed::<SubmitResponse>(&v)?.application_id;
    writeln!(out, "application {id} accepted")?;
    writeln!(out, "  gantry app {id}     # its state and containers")?;
    writeln!(out, "  gantry logs {id}    # its output")?;
    Ok(())
}

/// Names a validation error after the CLI's flags rather than the JSON fields.
fn flag_names(e: &ValidationError) -> String {
    let flag = match e.field.rsplit('.').next().unwrap_or(&e.field) {
        "cpuMillis" => "--cpu",
        "memoryBytes" => "--mem",
        "diskBytes" => "--disk",
        "gpus" => "--gpus",
        "count" => "--count",
        "max-app-attempts" => "--max-attempts",
        "queue" => "--queue",
        "user" => "--user",
        "application-name" => "--name",
        _ if e.field.contains(".labels") => "--label",
        _ if e.field.contains(".env") => "--env",
        _ if e.field.contains(".command") => "the command",
        _ => return e.to_string(),
    };
    format!("{flag}: {}", e.message)
}

async fn apps(a: AppsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let filter = AppFilter { states: a.states, queue: a.queue, user: a.user, limit: a.limit };
    let v = client.get_value(&paths::apps(&filter)).await?;
    if a.json {
        return print_json(out, &v);
    }
    let apps = client.typed::<AppsResponse>(&v)?.apps.app;
    if apps.is_empty() {
        writeln!(out, "no applications")?;
        return Ok(());
    }
    let rows = apps
        .iter()
        .map(|app| {
            vec![
                app.id.to_string(),
                dash(&app.name),
                dash(&app.user),
                app.queue.clone(),
                app.state.to_string(),
                app.final_status.as_str().to_owned(),
                app.running_containers.to_string(),
                fmt_cores(app.allocated_resources.cpu_millis),
                fmt_bytes(app.allocated_resources.memory_bytes),
                app.allocated_resources.gpus.to_string(),
                fmt_duration(app.elapsed_time),
            ]
        })
        .collect::<Vec<_>>();
    let header =
        ["ID", "NAME", "USER", "QUEUE", "STATE", "FINAL", "RUNNING", "CPU", "MEM", "GPUS", "ELAPSED"];
    out.write_all(table(&header, &rows).as_bytes())?;
    Ok(())
}

async fn app(a: AppArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let v = client.get_value(&paths::app(a.id)).await?;
    if a.json {
        return print_json(out, &v);
    }
    let app = client.typed::<AppResponse>(&v)?.app;
    out.write_all(describe_app(&app).as_bytes())?;
    Ok(())
}

/// The `gantry app` page: fields, then the groups, then the containers.
fn describe_app(app: &AppInfo) -> String {
    let mut s = String::new();
    let res = &app.allocated_resources;
    let attempts =
        if app.max_app_attempts == 0 { "default".to_owned() } else { app.max_app_attempts.to_string() };
    let fields = [
        ("id", app.id.to_string()),
        ("name", dash(&app.name)),
        ("user", dash(&app.user)),
        ("queue", app.queue.clone()),
        ("state", format!("{} (final status {})", app.state, app.final_status.as_str())),
        ("progress", format!("{}%", app.progress)),
        ("priority", app.priority.to_string()),
        ("submitted", fmt_time(app.started_time)),
        ("finished", fmt_time(app.finished_time)),
        ("elapsed", fmt_duration(app.elapsed_time)),
        ("failures", format!("{} (attempts allowed: {attempts})", app.failures)),
        (
            "allocated",
            format!(
                "cpu {}, mem {}, gpus {}",
                fmt_cores(res.cpu_millis),
                fmt_bytes(res.memory_bytes),
                res.gpus
            ),
        ),
        ("diagnostics", dash(&app.diagnostics)),
    ];
    for (k, v) in fields {
        let _ = writeln!(s, "{:<12} {v}", format!("{k}:"));
    }
    if !app.requests.is_empty() {
        s.push('\n');
        let rows = app
            .requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                vec![
                    i.to_string(),
                    format!("{}/{}", r.placed, r.count),
                    format!("{}/{}", r.completed, r.count),
                    fmt_cores(r.resource.cpu_millis),
                    fmt_bytes(r.resource.memory_bytes),
                    r.resource.gpus.to_string(),
                    if r.gang { "yes".into() } else { "no".into() },
                    fmt_labels(&r.labels),
                    fmt_labels(&r.preferred_labels),
                    r.command.join(" "),
                ]
            })
            .collect::<Vec<_>>();
        let header =
            ["GROUP", "PLACED", "DONE", "CPU", "MEM", "GPUS", "GANG", "LABELS", "PREFERRED", "COMMAND"];
        s.push_str(&table(&header, &rows));
    }
    s.push('\n');
    if app.containers.is_empty() {
        s.push_str("no containers\n");
    } else {
        let rows = app
            .containers
            .iter()
            .map(|c| {
                vec![
                    c.id.to_string(),
                    c.request.to_string(),
                    dash(&c.node_id),
                    c.state.as_str().to_owned(),
                    c.exit_code.map_or_else(|| "-".to_owned(), |e| e.to_string()),
                    fmt_cores(c.resource.cpu_millis),
                    fmt_bytes(c.resource.memory_bytes),
                    if c.gpus.is_empty() {
                        "-".to_owned()
                    } else {
                        c.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                    },
                    dash(&c.diagnostics),
                ]
            })
            .collect::<Vec<_>>();
        s.push_str(&table(
            &["CONTAINER", "GROUP", "NODE", "STATE", "EXIT", "CPU", "MEM", "GPUS", "DIAGNOSTICS"],
            &rows,
        ));
    }
    s
}

async fn kill(a: KillArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let body = AppStateRequest { state: "KILLED".into() };
    let (status, v) = client.send_value(Method::PUT, &paths::app_state(a.id), &body).await?;
    if a.json {
        return print_json(out, &v);
    }
    let state = client.typed::<AppStateInfo>(&v)?.state;
    if status.as_u16() != 202 {
        writeln!(out, "application {} was already {state}", a.id)?;
    } else if state == AppState::Killed {
        writeln!(out, "application {} killed", a.id)?;
    } else {
        writeln!(
            out,
            "application {}: kill requested; it is {state} until its containers have stopped",
            a.id
        )?;
    }
    Ok(())
}

async fn nodes(a: ListArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let v = client.get_value(&paths::nodes()).await?;
    if a.json {
        return print_json(out, &v);
    }
    let nodes = client.typed::<NodesResponse>(&v)?.nodes.node;
    if nodes.is_empty() {
        writeln!(out, "no nodes")?;
        return Ok(());
    }
    let rows = nodes
        .iter()
        .map(|n| {
            let (used, total) = (&n.used_resource, &n.total_resource);
            vec![
                n.id.clone(),
                dash(&n.rack),
                n.state.as_str().to_owned(),
                n.num_containers.to_string(),
                format!("{}/{}", fmt_cores(used.cpu_millis), fmt_cores(total.cpu_millis)),
                format!("{}/{}", fmt_bytes(used.memory_bytes), fmt_bytes(total.memory_bytes)),
                format!("{}/{}", used.gpus, total.gpus),
                fmt_labels(&n.labels),
                // Why it takes no new work: its agent's conditions (an operator's drain shows
                // in STATE).
                dash(&n.health_report),
            ]
        })
        .collect::<Vec<_>>();
    let header = ["NODE", "RACK", "STATE", "CONTAINERS", "CPU", "MEM", "GPUS", "LABELS", "WHY"];
    out.write_all(table(&header, &rows).as_bytes())?;
    Ok(())
}

async fn set_node_drain(a: NodeArgs, drain: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let body = NodeStateRequest { state: if drain { "DECOMMISSIONING" } else { "RUNNING" }.into() };
    let (_, v) = client.send_value(Method::PUT, &paths::node_state(&a.name), &body).await?;
    if a.json {
        return print_json(out, &v);
    }
    let state = client.typed::<NodeStateInfo>(&v)?.state;
    let what = if drain { "drained" } else { "undrained" };
    writeln!(out, "node {} {what}: {}", a.name, state.as_str())?;
    Ok(())
}

async fn removable(a: RemovableArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let v = client.get_value(&paths::removable_nodes(a.idle.unwrap_or(0))).await?;
    if a.json {
        return print_json(out, &v);
    }
    let nodes = client.typed::<RemovableNodesResponse>(&v)?.removable_nodes.node;
    if nodes.is_empty() {
        writeln!(out, "no removable nodes")?;
        return Ok(());
    }
    let rows = nodes
        .iter()
        .map(|n| {
            vec![
                n.id.clone(),
                dash(&n.rack),
                n.state.as_str().to_owned(),
                format!("{:.0}s", n.idle_seconds),
                fmt_cores(n.total_resource.cpu_millis),
                fmt_bytes(n.total_resource.memory_bytes),
                n.total_resource.gpus.to_string(),
            ]
        })
        .collect::<Vec<_>>();
    let header = ["NODE", "RACK", "STATE", "IDLE", "CPU", "MEM", "GPUS"];
    out.write_all(table(&header, &rows).as_bytes())?;
    Ok(())
}

async fn queues(a: ListArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let v = client.get_value(&paths::scheduler()).await?;
    if a.json {
        return print_json(out, &v);
    }
    let info = client.typed::<SchedulerResponse>(&v)?.scheduler.scheduler_info;
    let pct = |p: f64| format!("{p}%");
    let used =
        |r: &ResourceInfo| vec![fmt_cores(r.cpu_millis), fmt_bytes(r.memory_bytes), r.gpus.to_string()];
    let mut rows = Vec::new();
    let mut root = vec![
        "root".to_owned(),
        pct(info.capacity),
        pct(info.max_capacity),
        pct(info.used_capacity),
        pct(info.used_capacity),
    ];
    let (active, pending) = info
        .queues
        .queue
        .iter()
        .fold((0, 0), |(a, p), q| (a + q.num_active_applications, p + q.num_pending_applications));
    root.extend([active.to_string(), pending.to_string()]);
    root.extend(used(&info.resources_used));
    rows.push(root);
    for top in &info.queues.queue {
        for q in top.flatten() {
            let mut row = vec![
                q.queue_path.clone(),
                pct(q.capacity),
                pct(q.max_capacity),
                pct(q.used_capacity),
                pct(q.absolute_used_capacity),
                q.num_active_applications.to_string(),
                q.num_pending_applications.to_string(),
            ];
            row.extend(used(&q.resources_used));
            rows.push(row);
        }
    }
    let header = ["QUEUE", "CAPACITY", "MAX", "USED", "ABS-USED", "RUNNING", "PENDING", "CPU", "MEM", "GPUS"];
    out.write_all(table(&header, &rows).as_bytes())?;
    Ok(())
}

async fn logs(a: LogsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let client = a.conn.client()?;
    let file = if a.stderr { LogFile::Stderr } else { LogFile::Stdout };
    let app = client.app(a.id).await?;
    let chosen: Vec<&ContainerInfo> = match a.container {
        Some(c) => match app.containers.iter().find(|x| x.id == c) {
            Some(x) => vec![x],
            None => {
                return Err(CliError::Invalid(format!(
                    "container {c} is not one of application {}'s (see `gantry app {}`)",
                    a.id, a.id
                )));
            }
        },
        None => app.containers.iter().collect(),
    };
    if chosen.is_empty() {
        return Err(CliError::Invalid(format!(
            "application {} has no containers yet (it is {})",
            a.id, app.state
        )));
    }
    let headers = chosen.len() > 1;
    for (i, c) in chosen.iter().enumerate() {
        if headers {
            let exit = c.exit_code.map(|e| format!(", exit {e}")).unwrap_or_default();
            let gap = if i > 0 { "\n" } else { "" };
            writeln!(
                out,
                "{gap}==> container {} on {} ({}{exit}) <==",
                c.id,
                dash(&c.node_id),
                c.state.as_str()
            )?;
        }
        // A container whose launch failed never ran and has no logs: say why instead (it read
        // as an empty log with "exit 127" before).
        if c.state == ContainerState::Failed && c.exit_code.is_none() {
            if !headers {
                return Err(CliError::Invalid(format!("no logs: {}", c.diagnostics)));
            }
            writeln!(out, "(no logs: {})", c.diagnostics)?;
            continue;
        }
        let bytes = client.logs(c.id, file, a.tail).await?;
        out.write_all(&bytes)?;
    }
    out.flush()?;
    Ok(())
}

// ----- parsing ---------------------------------------------------------------------------------

/// Parses a CPU amount into millicores: cores with up to three decimals (`2`, `0.5`, `1.25`)
/// or millicores with an `m` (`500m`), as Kubernetes writes them. Exact: no floating point.
pub fn parse_cpu(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let millis = if let Some(m) = t.strip_suffix('m') {
        digits(m).ok_or_else(|| format!("`{s}` is not a CPU amount (e.g. 2, 0.5 or 500m)"))?
    } else {
        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
        if frac.len() > 3 {
            return Err(format!("`{s}`: a CPU amount is counted in millicores, at most three decimals"));
        }
        let int = if int.is_empty() && !frac.is_empty() { Some(0) } else { digits(int) };
        let frac_val = if frac.is_empty() { Some(0) } else { digits(frac) };
        match (int, frac_val) {
            (Some(i), Some(f)) => i
                .checked_mul(1000)
                .and_then(|v| v.checked_add(f * 10u64.pow(3 - frac.len() as u32)))
                .ok_or_else(|| format!("`{s}` is too large"))?,
            _ => return Err(format!("`{s}` is not a CPU amount (e.g. 2, 0.5 or 500m)")),
        }
    };
    if millis == 0 {
        return Err("the CPU amount must be more than 0".into());
    }
    Ok(millis)
}

/// Digits only, as a number (no sign, no spaces).
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses a size with an optional binary unit — `B`, `K`, `M`, `G`, `T`, `P`, also written
/// `KB`/`KiB` and so on, any case — into bytes; a bare number is in `bare_unit` bytes. A
/// decimal fraction is allowed (`1.5G`) and rounded down to a byte.
pub fn parse_size(s: &str, bare_unit: u64) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_bytes = match gantry_sdk::units::binary_unit_bytes(unit.trim()) {
        Some(b) => b,
        None if unit.trim().is_empty() => bare_unit,
        None => return Err(format!("`{s}`: unknown unit `{unit}` (use K, M, G, T or P)")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let bad = || format!("`{s}` is not a size (e.g. 512M, 2G, 1.5G)");
    let int = if int.is_empty() && !frac.is_empty() { 0 } else { digits(int).ok_or_else(bad)? };
    let frac_part: u128 = if frac.is_empty() {
        0
    } else {
        if frac.len() > 9 {
            return Err(format!("`{s}`: too many decimals"));
        }
        let f = digits(frac).ok_or_else(bad)? as u128;
        f * unit_bytes as u128 / 10u128.pow(frac.len() as u32)
    };
    let total = int as u128 * unit_bytes as u128 + frac_part;
    u64::try_from(total).map_err(|_| format!("`{s}` is too large"))
}

/// A memory size for `--mem`: see [`parse_size`]; a bare number is MiB; zero is refused.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    match parse_size(s, 1 << 20)? {
        0 => Err("the memory size must be more than 0".into()),
        n => Ok(n),
    }
}

/// A byte count for `--tail`: see [`parse_size`]; a bare number is bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s, 1)
}

/// `key=value` (the value may be empty and may contain `=`; the key may not be empty).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// A duration in ms: a number with `ms`, `s`, `m` or `h` (decimals allowed, `1.5h`); a bare
/// number is seconds. Zero is refused (it would mean "unknown").
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    match parse_duration_or_zero_ms(s)? {
        0 => Err(format!("`{s}` must be from 1 ms to one year")),
        ms => Ok(ms),
    }
}

/// As [`parse_duration_ms`], but zero is a duration too (a boot delay of `0s`).
pub fn parse_duration_or_zero_ms(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_ms: f64 = match unit.trim() {
        "ms" => 1.0,
        "" | "s" => 1_000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        other => return Err(format!("`{s}`: unknown unit `{other}` (use ms, s, m or h)")),
    };
    let value: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration (e.g. 90s, 15m, 2h)"))?;
    let ms = (value * unit_ms).round();
    if !(0.0..=crate::api::types::MAX_EXPECTED_MS as f64).contains(&ms) {
        return Err(format!("`{s}` must be from 0 to one year"));
    }
    Ok(ms as u64)
}

/// An application state name, any case.
pub fn parse_state(s: &str) -> Result<AppState, String> {
    s.parse::<AppState>().map_err(|e| e.to_string())
}

/// `none`, `preferred` or `required`.
pub fn parse_rack_affinity(s: &str) -> Result<RackAffinity, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" => Ok(RackAffinity::None),
        "preferred" => Ok(RackAffinity::Preferred),
        "required" => Ok(RackAffinity::Required),
        _ => Err(format!("`{s}` is not one of none, preferred, required")),
    }
}

// ----- formatting ------------------------------------------------------------------------------

/// Left-aligned columns separated by two spaces, one header line; no trailing spaces.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            l.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
            l.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".to_owned() } else { s.to_owned() }
}

fn fmt_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// Millicores as cores: `2`, `0.5`, `1.25` (the SDK's one formatter, also the engine's).
pub use gantry_sdk::units::format_cores as fmt_cores;

/// Bytes in binary units: `512Mi`, `1.5Gi`, `100B` (the SDK's one formatter).
pub use gantry_sdk::units::format_bytes as fmt_bytes;

/// A duration in ms, short: `450ms`, `12s`, `3m05s`, `1h02m`, `2d03h`.
pub fn fmt_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS UTC`; `-` for 0.
pub fn fmt_time(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "-".to_owned();
    }
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Howard Hinnant's civil_from_days: days since 1970-01-01 to a proleptic Gregorian date.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}
