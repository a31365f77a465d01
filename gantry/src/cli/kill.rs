//! `gantry kill ID`: asks the scheduler to kill an application and says what became of it.

use super::{CliError, Connection, print_json};
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::{AppState, AppStateInfo, AppStateRequest};
use hyper::Method;
use std::io::Write;

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

pub(super) async fn kill(a: KillArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
