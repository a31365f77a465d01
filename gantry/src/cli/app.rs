//! `gantry app ID`: one application's page — its fields, container groups and containers.

use super::format::{dash, fmt_bytes, fmt_cores, fmt_duration, fmt_labels, fmt_time, table};
use super::{CliError, Connection, print_json};
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::{AppInfo, AppResponse};
use std::fmt::Write as _;
use std::io::Write;

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

pub(super) async fn app(a: AppArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
