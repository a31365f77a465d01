//! The `gantry` CLI's cluster commands — `submit`, `apps`, `app`, `kill`, `nodes`, `queues`,
//! `logs`, `node`, `reserve` — as library code over the REST API's typed client
//! ([`gantry_scheduler::api::client`]), so they can be tested against a real HTTP server and
//! embedded by the binary as one clap subcommand enum ([`ClientCommand`]).
//!
//! Output is a human table by default and the API's own JSON with `--json` (for scripts: the
//! JSON is what the scheduler sent, pretty-printed, not a re-encoding). The scheduler's address
//! comes from `--scheduler URL`, else `GANTRY_SCHEDULER`, else [`DEFAULT_SCHEDULER`].
//!
//! Sizes on the command line: `--cpu` takes cores (`0.5`, `2`) or millicores (`500m`);
//! `--mem` takes `512M`, `2G`, `1.5GiB` — binary units as Slurm and YARN use them — and a bare
//! number means MiB, as Slurm's `--mem` does.
//!
//! One file per command (youki's layout): its clap arguments and what it does. Shared here:
//! [`ClientCommand`] and the dispatch ([`run`], [`execute`]); beside it the connection
//! ([`Connection`]), the errors ([`CliError`]), argument parsers (`parse.rs`) and the tables'
//! formatting (`format.rs`).

mod app;
mod apps;
mod connection;
mod error;
mod format;
mod kill;
mod logs;
mod node;
mod nodes;
mod parse;
mod queues;
mod reserve;
mod submit;

pub use app::AppArgs;
pub use apps::AppsArgs;
pub use connection::Connection;
pub use error::CliError;
pub use format::{fmt_bytes, fmt_cores, fmt_duration, fmt_time, table};
pub use kill::KillArgs;
pub use logs::LogsArgs;
pub use node::{NodeArgs, NodeCommand, RemovableArgs};
pub use parse::{
    parse_bytes, parse_cpu, parse_duration_ms, parse_duration_or_zero_ms, parse_key_value, parse_memory,
    parse_rack_affinity, parse_size, parse_state,
};
pub use reserve::{OptimizeArgs, ReserveArgs, ReserveCommand, ReserveIdArgs, ReserveListArgs};
pub use submit::SubmitArgs;

use serde_json::Value;
use std::io::Write;

/// Where the CLI looks for the scheduler without `--scheduler` or `GANTRY_SCHEDULER`: YARN's
/// ResourceManager web port on this machine, where `gantry dev` listens by default.
pub const DEFAULT_SCHEDULER: &str = "http://127.0.0.1:8088";

/// The cluster commands. The `gantry` binary embeds them with
/// `#[command(flatten)] Cluster(gantry::cli::ClientCommand)` and runs them with
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
        command: ReserveCommand,
    },
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
        ClientCommand::Submit(a) => submit::submit(a, out).await,
        ClientCommand::Apps(a) => apps::apps(a, out).await,
        ClientCommand::App(a) => app::app(a, out).await,
        ClientCommand::Kill(a) => kill::kill(a, out).await,
        ClientCommand::Nodes(a) => nodes::nodes(a, out).await,
        ClientCommand::Queues(a) => queues::queues(a, out).await,
        ClientCommand::Logs(a) => logs::logs(a, out).await,
        ClientCommand::Node { command: NodeCommand::Drain(a) } => node::set_node_drain(a, true, out).await,
        ClientCommand::Node { command: NodeCommand::Undrain(a) } => node::set_node_drain(a, false, out).await,
        ClientCommand::Node { command: NodeCommand::Removable(a) } => node::removable(a, out).await,
        ClientCommand::Reserve { command } => reserve::execute(command, out).await,
    }
}

/// Prints the API's JSON answer as it came, pretty-printed (`--json`).
fn print_json(out: &mut dyn Write, v: &Value) -> Result<(), CliError> {
    let text =
        serde_json::to_string_pretty(v).map_err(|e| CliError::Invalid(format!("encoding JSON: {e}")))?;
    writeln!(out, "{text}")?;
    Ok(())
}
