//! `gantry logs ID`: an application's container logs, each under a header when there are
//! several; a container that never ran says why instead.

use super::format::dash;
use super::parse::parse_bytes;
use super::{CliError, Connection};
use gantry_scheduler::api::LogFile;
use gantry_scheduler::api::types::{ContainerInfo, ContainerState};
use std::io::Write;

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

pub(super) async fn logs(a: LogsArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
