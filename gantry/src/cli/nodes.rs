//! `gantry nodes`: the nodes and what is allocated on them.

use super::format::{dash, fmt_bytes, fmt_cores, fmt_labels, table};
use super::{CliError, ListArgs, print_json};
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::NodesResponse;
use std::io::Write;

pub(super) async fn nodes(a: ListArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
