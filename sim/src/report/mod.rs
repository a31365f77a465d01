//! What a run writes into its output directory: `summary.json`, `jobs.csv` (one line per job),
//! `timeseries.csv`, and two plots, `utilisation.svg` (allocated share of each resource over
//! time) and `completion_cdf.svg` (distribution of completion times). Per leaf queue,
//! `queues.csv` (CPU and memory held, pending, guaranteed and ideal, as shares of the cluster,
//! per sample), `queues.svg` (the same, memory) and the summary's `queues` section (guarantee
//! reached, what preemption took; see [`crate::queues`]). An elastic cluster adds `nodes.csv`
//! and `nodes.svg` (nodes registered and billed, allocated share of the registered nodes and of
//! the pool, over time) and an `elastic` section in the summary.
//!
//! Every number is formatted with a fixed number of decimals and every collection is written in
//! a fixed order, so that the same run writes byte-identical files.
//!
//! The summary is built here; the CSV files in `csv.rs`, the plots in `svg.rs`.

mod csv;
mod svg;
#[cfg(test)]
mod tests;

pub(crate) use csv::csv_field;
pub use csv::{jobs_csv, nodes_csv, queues_csv, timeseries_csv};
pub(crate) use svg::line_plot;
pub use svg::{
    Panel, QUEUE_PANELS, Series, completion_cdf_svg, nodes_svg, queues_svg, stacked_plots, utilisation_svg,
};

use crate::elastic::ElasticStats;
use crate::queues::LeafRecord;
use crate::sim::{JobOutcome, JobRecord, SimResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Policy-specific figures the summary computes.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// The utility horizon U of seed 002: a job completing after T seconds earns U − T (a job
    /// killed or unfinished earns nothing); also the SLA: completed within U.
    pub utility_horizon_s: f64,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions { utility_horizon_s: 1200.0 }
    }
}

/// Mean and percentiles of a set of durations, seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    /// How many values.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Spread {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let pct = |p: f64| if n == 0 { 0.0 } else { values[((n as f64 - 1.0) * p).round() as usize] };
        let mean = if n == 0 { 0.0 } else { values.iter().sum::<f64>() / n as f64 };
        Spread { n, mean: round3(mean), p50: pct(0.5), p95: pct(0.95), p99: pct(0.99), max: pct(1.0) }
    }
}

/// Allocated shares, 0..=1.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Utilisation {
    /// CPU.
    pub cpu: f64,
    /// Memory.
    pub memory: f64,
    /// GPUs.
    pub gpus: f64,
}

impl Utilisation {
    fn of(shares: &[f64; 3]) -> Self {
        Utilisation { cpu: round3(shares[0]), memory: round3(shares[1]), gpus: round3(shares[2]) }
    }
}

/// Node counts of an elastic cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeCounts {
    /// The configured minimum.
    pub min: usize,
    /// The configured maximum.
    pub max: usize,
    /// Nodes in the pool (the cluster file).
    pub pool: usize,
    /// Most nodes billed at once (registered or booting).
    pub peak: usize,
    /// Most nodes registered at once.
    pub peak_registered: usize,
    /// Time-averaged nodes billed: billed node-hours / makespan.
    pub mean: f64,
    /// Nodes that ran at some point: the initial ones and every start (a node started twice
    /// counts twice).
    pub provisioned: u64,
}

/// What the autoscaler did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoscalerCounts {
    /// Checks that started nodes.
    pub scale_ups: u64,
    /// Nodes started.
    pub nodes_started: u64,
    /// Nodes drained and removed.
    pub nodes_removed: u64,
}

/// The `elastic` section of `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ElasticSummary {
    /// Billed node-hours: each node from its start (boot included) to its removal or the end.
    pub node_hours: f64,
    /// Of which spent booting.
    pub booting_node_hours: f64,
    /// Node counts.
    pub nodes: NodeCounts,
    /// Autoscaler actions.
    pub autoscaler: AutoscalerCounts,
    /// Allocated share of the registered nodes' capacity, time-weighted (∫allocated / ∫capacity).
    pub utilisation_registered: Utilisation,
    /// Allocated share of the billed nodes' capacity (booting nodes included), time-weighted.
    pub utilisation_billed: Utilisation,
    /// Allocated share of the whole pool's capacity, time-averaged.
    pub utilisation_pool: Utilisation,
}

impl ElasticSummary {
    fn of(e: &ElasticStats, result: &SimResult) -> Self {
        let hours = |ms: u64| round3(ms as f64 / 3_600_000.0);
        ElasticSummary {
            node_hours: hours(e.billed_node_ms),
            booting_node_hours: hours(e.booting_node_ms),
            nodes: NodeCounts {
                min: e.min_nodes,
                max: e.max_nodes,
                pool: e.pool_nodes,
                peak: e.peak_nodes,
                peak_registered: e.peak_registered,
                mean: if result.end_ms == 0 {
                    e.min_nodes as f64
                } else {
                    round3(e.billed_node_ms as f64 / result.end_ms as f64)
                },
                provisioned: e.provisioned,
            },
            autoscaler: AutoscalerCounts {
                scale_ups: e.scale_ups,
                nodes_started: e.nodes_started,
                nodes_removed: e.nodes_removed,
            },
            utilisation_registered: Utilisation::of(&e.utilisation_registered),
            utilisation_billed: Utilisation::of(&e.utilisation_billed),
            utilisation_pool: Utilisation::of(&result.utilisation),
        }
    }
}

/// When a queue first held 50 %, 90 % and 100 % of its guarantee of one resource, s (null:
/// never, or nothing guaranteed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reached {
    /// Half of it.
    #[serde(rename = "50")]
    pub p50: Option<f64>,
    /// 90 % of it.
    #[serde(rename = "90")]
    pub p90: Option<f64>,
    /// All of it.
    #[serde(rename = "100")]
    pub p100: Option<f64>,
}

/// Guarantee reached, per resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReachedGuarantee {
    /// CPU.
    pub cpu: Reached,
    /// Memory.
    pub memory: Reached,
}

/// Resources, summed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResourceTotals {
    /// CPU, millicores.
    pub cpu_millis: u64,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// Whole GPUs.
    pub gpus: u64,
}

/// Figures of one leaf queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueSummary {
    /// Configured guaranteed share of the cluster (the guaranteed fractions from the root down,
    /// multiplied).
    pub guaranteed: f64,
    /// Configured maximum share of the cluster, likewise.
    pub maximum: f64,
    /// First submission to the queue, s (null: none).
    pub first_submit_s: Option<f64>,
    /// When the queue first held each share of its guarantee, s from the start of the run.
    pub reached_guarantee_s: ReachedGuarantee,
    /// Containers that rebalancing stopped (each PREEMPT and KILL decision the engine applied).
    pub preempted_containers: u64,
    /// Their resources.
    pub preempted: ResourceTotals,
}

impl QueueSummary {
    fn of(q: &LeafRecord) -> Self {
        let reached = |r: usize| {
            let at = q.reached_ms[r].map(|t| t.map(secs));
            Reached { p50: at[0], p90: at[1], p100: at[2] }
        };
        QueueSummary {
            guaranteed: round6(q.guaranteed),
            maximum: round6(q.maximum),
            first_submit_s: q.first_submit_ms.map(secs),
            reached_guarantee_s: ReachedGuarantee { cpu: reached(0), memory: reached(1) },
            preempted_containers: q.preempted_containers,
            preempted: ResourceTotals {
                cpu_millis: q.preempted.cpu_millis,
                memory_bytes: q.preempted.memory_bytes,
                gpus: u64::from(q.preempted.gpus),
            },
        }
    }
}

/// Figures of one class of jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSummary {
    /// Jobs.
    pub jobs: usize,
    /// Completed.
    pub completed: usize,
    /// Completion time of completed jobs, s.
    pub completion_s: Spread,
    /// Wait before the first container, s (jobs that started).
    pub wait_s: Spread,
    /// Σ(U − T) over completed jobs.
    pub utility: f64,
    /// Jobs that ran (in part) on resources they did not prefer.
    pub ran_slow: usize,
}

/// One plugin's record in `summary.json`: what went wrong with it during the run (all zero for a
/// plugin that behaved). The same counts the daemon exports per plugin on `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PluginSummary {
    /// Calls that failed: error, panic, broken protocol, past the budget, malformed decisions.
    pub failed_calls: u64,
    /// Of those, panics caught at the boundary.
    pub panics: u64,
    /// Of those, calls past the plugin's budget.
    pub timeouts: u64,
    /// Times it was quarantined (the built-in stood in).
    pub quarantines: u64,
    /// Decisions refused, by reason (ABI.md §13's names); only reasons that occurred.
    pub rejected: BTreeMap<&'static str, u64>,
}

impl From<&gantry_engine::PolicyStatus> for PluginSummary {
    fn from(p: &gantry_engine::PolicyStatus) -> Self {
        PluginSummary {
            failed_calls: p.failures,
            panics: p.panics,
            timeouts: p.timeouts,
            quarantines: p.quarantines,
            rejected: p.rejected.iter().map(|(r, n)| (r.as_str(), n)).collect(),
        }
    }
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs that completed.
    pub completed: usize,
    /// Killed at their time limit.
    pub killed: usize,
    /// Refused at submission or admission.
    pub rejected: usize,
    /// Failed (out of attempts, or killed by the scheduler).
    pub failed: usize,
    /// Not finished when the run stopped.
    pub unfinished: usize,
    /// From time 0 to the end of the run, s.
    pub makespan_s: f64,
    /// Completion time (submission to end) of completed jobs, s.
    pub completion_s: Spread,
    /// Wait (submission to first container) of jobs that started, s.
    pub wait_s: Spread,
    /// Time-averaged allocated share of each resource.
    pub utilisation: Utilisation,
    /// Node-hours (on an elastic cluster: billed, boot included).
    pub node_hours: f64,
    /// When the run stalled — nothing due any more while work was still pending (work no node
    /// can hold, or that a strict policy keeps behind such work) — s; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled_at_s: Option<f64>,
    /// Containers preempted by a policy.
    pub preemptions: u64,
    /// Containers launched.
    pub launches: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// The utility horizon U, s.
    pub utility_horizon_s: f64,
    /// Σ max(0, U − T) over completed jobs (seed 002's objective).
    pub utility: f64,
    /// Completed within U, as a share of all jobs.
    pub sla_met: f64,
    /// Per class, by name.
    pub classes: BTreeMap<String, ClassSummary>,
    /// Per leaf queue, by path.
    pub queues: BTreeMap<String, QueueSummary>,
    /// The elastic cluster's figures (absent on a fixed cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticSummary>,
    /// Per loaded plugin, by the name the configuration gives it (empty with built-ins only).
    pub plugins: BTreeMap<String, PluginSummary>,
    /// What the scheduler around the engine did: restarts, store jobs, nodes lost, fencing.
    pub daemon: crate::sim::DaemonFigures,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Milliseconds as seconds.
pub(super) fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn utility_of(jobs: &[&JobRecord], horizon: f64) -> f64 {
    round3(
        jobs.iter()
            .filter(|j| j.outcome == JobOutcome::Completed)
            .filter_map(|j| j.completion_ms())
            .map(|t| (horizon - secs(t)).max(0.0))
            .sum(),
    )
}

/// The summary of a run.
pub fn summarise(result: &SimResult, options: &ReportOptions) -> Summary {
    let all: Vec<&JobRecord> = result.jobs.iter().collect();
    let count = |o: JobOutcome| all.iter().filter(|j| j.outcome == o).count();
    let completion = |js: &[&JobRecord]| {
        Spread::of(
            js.iter()
                .filter(|j| j.outcome == JobOutcome::Completed)
                .filter_map(|j| j.completion_ms())
                .map(secs)
                .collect(),
        )
    };
    let wait = |js: &[&JobRecord]| Spread::of(js.iter().filter_map(|j| j.wait_ms()).map(secs).collect());
    let mut by_class: BTreeMap<String, Vec<&JobRecord>> = BTreeMap::new();
    for j in &all {
        by_class.entry(j.class.clone()).or_default().push(j);
    }
    let horizon = options.utility_horizon_s;
    let classes = by_class
        .into_iter()
        .map(|(class, js)| {
            let s = ClassSummary {
                jobs: js.len(),
                completed: js.iter().filter(|j| j.outcome == JobOutcome::Completed).count(),
                completion_s: completion(&js),
                wait_s: wait(&js),
                utility: utility_of(&js, horizon),
                ran_slow: js.iter().filter(|j| j.ran_slow).count(),
            };
            (class, s)
        })
        .collect();
    let within = all
        .iter()
        .filter(|j| {
            j.outcome == JobOutcome::Completed && j.completion_ms().is_some_and(|t| secs(t) <= horizon)
        })
        .count();
    Summary {
        jobs: all.len(),
        completed: count(JobOutcome::Completed),
        killed: count(JobOutcome::Killed),
        rejected: count(JobOutcome::Rejected),
        failed: count(JobOutcome::Failed),
        unfinished: count(JobOutcome::Unfinished),
        makespan_s: secs(result.end_ms),
        completion_s: completion(&all),
        wait_s: wait(&all),
        utilisation: Utilisation::of(&result.utilisation),
        node_hours: round3(result.node_hours),
        stalled_at_s: result.stalled_at_ms.map(secs),
        preemptions: result.preemptions,
        launches: result.launches,
        cycles: result.cycles,
        daemon: result.daemon.clone(),
        utility_horizon_s: horizon,
        utility: utility_of(&all, horizon),
        sla_met: if all.is_empty() { 0.0 } else { round3(within as f64 / all.len() as f64) },
        classes,
        queues: result.queues.leaves.iter().map(|q| (q.path.clone(), QueueSummary::of(q))).collect(),
        elastic: result.elastic.as_ref().map(|e| ElasticSummary::of(e, result)),
        plugins: result.plugins.iter().map(|p| (p.name.clone(), PluginSummary::from(p))).collect(),
    }
}

/// Writes every output file of a run into `dir` (created if missing).
pub fn write_all(dir: &Path, result: &SimResult, options: &ReportOptions) -> std::io::Result<Summary> {
    std::fs::create_dir_all(dir)?;
    let summary = summarise(result, options);
    let json = serde_json::to_string_pretty(&summary).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    std::fs::write(dir.join("jobs.csv"), jobs_csv(result))?;
    std::fs::write(dir.join("timeseries.csv"), timeseries_csv(result))?;
    std::fs::write(dir.join("utilisation.svg"), utilisation_svg(result))?;
    std::fs::write(dir.join("completion_cdf.svg"), completion_cdf_svg(result))?;
    std::fs::write(dir.join("queues.csv"), queues_csv(result))?;
    std::fs::write(dir.join("queues.svg"), queues_svg(result))?;
    if result.elastic.is_some() {
        std::fs::write(dir.join("nodes.csv"), nodes_csv(result))?;
        std::fs::write(dir.join("nodes.svg"), nodes_svg(result))?;
    }
    Ok(summary)
}
