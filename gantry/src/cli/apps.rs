//! `gantry apps`: the applications, filtered, as a table.

use super::format::{dash, fmt_bytes, fmt_cores, fmt_duration, table};
use super::parse::parse_state;
use super::{CliError, Connection, print_json};
use gantry_scheduler::api::AppFilter;
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::{AppState, AppsResponse};
use std::io::Write;

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

pub(super) async fn apps(a: AppsArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
