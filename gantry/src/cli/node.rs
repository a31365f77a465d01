//! `gantry node drain|undrain|removable`: an operator's drain of one node, and the nodes an
//! autoscaler may remove.

use super::format::{dash, fmt_bytes, fmt_cores, table};
use super::parse::parse_duration_ms;
use super::{CliError, Connection, print_json};
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::{NodeStateInfo, NodeStateRequest, RemovableNodesResponse};
use hyper::Method;
use std::io::Write;

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

pub(super) async fn set_node_drain(a: NodeArgs, drain: bool, out: &mut dyn Write) -> Result<(), CliError> {
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

pub(super) async fn removable(a: RemovableArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
