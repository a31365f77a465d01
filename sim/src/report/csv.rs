//! The CSV outputs: `jobs.csv`, `timeseries.csv`, `nodes.csv` and `queues.csv`, every number with
//! a fixed number of decimals.

use super::secs;
use crate::sim::SimResult;
use std::fmt::Write as _;

/// `jobs.csv`.
pub fn jobs_csv(result: &SimResult) -> String {
    let mut out = String::from(
        "name,class,containers,submit_s,start_s,end_s,wait_s,completion_s,outcome,ran_slow,preempted\n",
    );
    let opt = |v: Option<u64>| v.map_or(String::new(), |ms| format!("{:.3}", secs(ms)));
    for j in &result.jobs {
        let outcome = serde_json::to_value(j.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{},{},{:.3},{},{},{},{},{},{},{}",
            csv_field(&j.name),
            csv_field(&j.class),
            j.containers,
            secs(j.submit_ms),
            opt(j.start_ms),
            opt(j.end_ms),
            opt(j.wait_ms()),
            opt(j.completion_ms()),
            outcome,
            j.ran_slow,
            j.preempted
        );
    }
    out
}

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

/// `timeseries.csv`.
pub fn timeseries_csv(result: &SimResult) -> String {
    let mut out = String::from("t_s,cpu,memory,gpus,running,waiting_jobs\n");
    for s in &result.samples {
        let _ = writeln!(
            out,
            "{:.3},{:.4},{:.4},{:.4},{},{}",
            secs(s.t_ms),
            s.cpu,
            s.memory,
            s.gpus,
            s.running,
            s.waiting_jobs
        );
    }
    out
}

/// `nodes.csv`: nodes registered and booting, and allocated shares of the registered nodes and
/// of the pool, per sample.
pub fn nodes_csv(result: &SimResult) -> String {
    let mut out = String::from(
        "t_s,nodes,booting,cpu_registered,memory_registered,gpus_registered,cpu_pool,memory_pool,gpus_pool\n",
    );
    for s in &result.samples {
        let _ = writeln!(
            out,
            "{:.3},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
            secs(s.t_ms),
            s.nodes,
            s.booting,
            s.cpu_registered,
            s.memory_registered,
            s.gpus_registered,
            s.cpu,
            s.memory,
            s.gpus
        );
    }
    out
}

/// `queues.csv`: per sample and leaf queue, CPU and memory held, pending, guaranteed and ideal,
/// as shares of the cluster.
pub fn queues_csv(result: &SimResult) -> String {
    let mut out = String::from(
        "t_s,queue,cpu_used,memory_used,cpu_pending,memory_pending,cpu_guaranteed,memory_guaranteed,cpu_ideal,memory_ideal\n",
    );
    let q = &result.queues;
    for s in &q.samples {
        let name = q.leaves.get(s.leaf).map_or("", |l| l.path.as_str());
        let _ = writeln!(
            out,
            "{:.3},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
            secs(s.t_ms),
            csv_field(name),
            s.used.cpu,
            s.used.memory,
            s.pending.cpu,
            s.pending.memory,
            s.guaranteed.cpu,
            s.guaranteed.memory,
            s.ideal.cpu,
            s.ideal.memory
        );
    }
    out
}
