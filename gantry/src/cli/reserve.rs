//! `gantry reserve …`: the reservation commands of the CLI, over `ws/v1/cluster/reservation/*`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use super::parse::{parse_duration_ms, parse_duration_or_zero_ms};
use super::{CliError, Connection};
use gantry_scheduler::api::reservations::{ReservationDefinition, ReservationInfo, ReservationSubmit};

/// `gantry reserve …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ReserveCommand {
    /// Ask the plan for capacity ahead of a deadline: accepted at once with its allocation over
    /// time, or rejected with the reason.
    Submit(ReserveArgs),
    /// Replace an accepted reservation's definition (e.g. the job turned out larger); other
    /// reservations that have not started may move to make room. Rejected: the old one stays.
    Update(ReserveArgs),
    /// Delete a reservation; its applications go on in the plan's default queue.
    Delete(ReserveIdArgs),
    /// List the reservations in the plan with their allocations.
    List(ReserveListArgs),
    /// Ask the reservation planner to re-organise the plan now (its OPTIMIZE call, e.g. the
    /// Rayon planner's offline MILP); its answer is checked and applied at once.
    Optimize(OptimizeArgs),
}

/// `gantry reserve submit|update`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReserveArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// The reservation to update (`reservation_17` or 17); for submit, an id from
    /// new-reservation (default: a new one).
    #[arg(long = "id")]
    pub id: Option<String>,
    /// The plan queue (required to submit).
    #[arg(long)]
    pub queue: Option<String>,
    /// The definition in RDL (text or JSON form), times from the arrival, e.g.
    /// `atom(2c/4GiB, 1, 10, 5m, 50m)`; `@FILE` reads it from a file.
    pub rdl: String,
    /// When the window opens, from now (`10m`; default now).
    #[arg(long, value_parser = parse_duration_or_zero_ms, value_name = "DURATION")]
    pub arrival: Option<u64>,
    /// The deadline, from now (`2h`; default one plan horizon after the arrival).
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
    pub deadline: Option<u64>,
    /// A name for people.
    #[arg(long, default_value = "")]
    pub name: String,
    /// Kept longer when a replan must reject something.
    #[arg(long, default_value_t = 0)]
    pub priority: i32,
    /// Print the API's JSON answer.
    #[arg(long)]
    pub json: bool,
}

/// `gantry reserve delete ID`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReserveIdArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// The reservation (`reservation_17` or 17).
    pub id: String,
}

/// `gantry reserve list`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReserveListArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// Only this plan (or reservation) queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gantry reserve optimize`.
#[derive(Debug, Clone, clap::Args)]
pub struct OptimizeArgs {
    /// Which scheduler.
    #[command(flatten)]
    pub conn: Connection,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn print<T: serde::Serialize>(out: &mut dyn Write, v: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| CliError::Invalid(e.to_string()))?;
    writeln!(out, "{text}")?;
    Ok(())
}

fn describe(out: &mut dyn Write, r: &ReservationInfo) -> Result<(), CliError> {
    writeln!(
        out,
        "{} {} in {} (apps go to {}), window {}..{} ms",
        r.reservation_id, r.state, r.queue, r.reservation_queue, r.arrival, r.deadline
    )?;
    for a in &r.resource_allocations {
        writeln!(
            out,
            "  {:>+10.1}s .. {:>+10.1}s  {} cores, {} MiB, {} GPUs",
            (a.start_time as f64 - r.arrival as f64) / 1000.0,
            (a.end_time as f64 - r.arrival as f64) / 1000.0,
            a.resource.cpu_millis as f64 / 1000.0,
            a.resource.memory,
            a.resource.gpus
        )?;
    }
    Ok(())
}

/// Runs `gantry reserve …`.
pub async fn execute(cmd: ReserveCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match cmd {
        ReserveCommand::Submit(a) => submit(a, false, out).await,
        ReserveCommand::Update(a) => submit(a, true, out).await,
        ReserveCommand::Delete(a) => {
            a.conn.client()?.delete_reservation(&a.id).await?;
            writeln!(out, "{} deleted", a.id)?;
            Ok(())
        }
        ReserveCommand::List(a) => {
            let list = a.conn.client()?.reservations(a.queue.as_deref()).await?;
            if a.json {
                return print(out, &list);
            }
            if list.is_empty() {
                writeln!(out, "no reservations")?;
            }
            for r in &list {
                describe(out, r)?;
            }
            Ok(())
        }
        ReserveCommand::Optimize(a) => {
            let info = a.conn.client()?.optimize_reservations().await?;
            if a.json {
                return print(out, &info);
            }
            writeln!(
                out,
                "considered {} reservations, moved {}; {} ms{}",
                info.considered,
                info.moved,
                info.solve_ms,
                if info.kept_because.is_empty() {
                    String::new()
                } else {
                    format!("; kept: {}", info.kept_because)
                }
            )?;
            Ok(())
        }
    }
}

async fn submit(a: ReserveArgs, update: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let rdl = match a.rdl.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Invalid(format!("cannot read {path}: {e}")))?,
        None => a.rdl.clone(),
    };
    if !update && a.queue.is_none() {
        return Err(CliError::Invalid("--queue is required to submit a reservation".into()));
    }
    if update && a.id.is_none() {
        return Err(CliError::Invalid("--id is required to update a reservation".into()));
    }
    let now = now_ms();
    let arrival = now + a.arrival.unwrap_or(0);
    let body = ReservationSubmit {
        queue: a.queue.clone(),
        reservation_id: a.id.clone(),
        definition: ReservationDefinition {
            arrival: Some(arrival),
            deadline: a.deadline.map(|d| now + d),
            name: a.name.clone(),
            priority: a.priority,
            requests: None,
            rdl: Some(serde_json::Value::String(rdl)),
        },
    };
    let info = a.conn.client()?.submit_reservation(&body, update).await?;
    if a.json {
        return print(out, &info);
    }
    describe(out, &info)
}
