//! `gantry submit`: one group of identical containers, checked here by the server's own rules
//! before anything is sent, so the message names the CLI's flags.

use super::parse::{parse_cpu, parse_duration_ms, parse_key_value, parse_memory, parse_rack_affinity};
use super::{CliError, Connection, print_json};
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::{
    ContainerRequest, RackAffinity, ResourceRequest, SubmitApp, SubmitResponse, ValidationError,
};
use hyper::Method;
use std::io::Write;

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

pub(super) async fn submit(a: SubmitArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
