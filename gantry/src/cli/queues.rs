//! `gantry queues`: the queue hierarchy with capacities, usage and applications.

use super::format::{fmt_bytes, fmt_cores, table};
use super::{CliError, ListArgs, print_json};
use gantry_scheduler::api::client::paths;
use gantry_scheduler::api::types::{ResourceInfo, SchedulerResponse};
use std::io::Write;

pub(super) async fn queues(a: ListArgs, out: &mut dyn Write) -> Result<(), CliError> {
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
