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

use crate::elastic::ElasticStats;
use crate::queues::LeafRecord;
use crate::sim::{JobOutcome, JobRecord, SimResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
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
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn secs(ms: u64) -> f64 {
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
        utility_horizon_s: horizon,
        utility: utility_of(&all, horizon),
        sla_met: if all.is_empty() { 0.0 } else { round3(within as f64 / all.len() as f64) },
        classes,
        queues: result.queues.leaves.iter().map(|q| (q.path.clone(), QueueSummary::of(q))).collect(),
        elastic: result.elastic.as_ref().map(|e| ElasticSummary::of(e, result)),
        plugins: result.plugins.iter().map(|p| (p.name.clone(), PluginSummary::from(p))).collect(),
    }
}

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

const W: f64 = 720.0;
const H: f64 = 360.0;
const PAD: f64 = 50.0;

/// One line of a plot: its name, its colour, its points (x, y).
pub type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One panel of [`stacked_plots`]: title, x label, y label, y maximum, lines.
pub type Panel<'a> = (&'a str, &'a str, &'a str, f64, Vec<Series<'a>>);

/// Line plots one above the other in one SVG document (the simulator's plot style, for
/// programs that plot their own figures, such as the Rayon planning example).
pub fn stacked_plots(panels: &[Panel<'_>]) -> String {
    let mut svg = svg_start(H * panels.len().max(1) as f64);
    for (k, (title, x_label, y_label, y_max, series)) in panels.iter().enumerate() {
        panel(&mut svg, H * k as f64, title, x_label, y_label, *y_max, series);
    }
    svg.push_str("</svg>\n");
    svg
}

/// A line plot of `series` with y in 0..=`y_max`.
pub(crate) fn line_plot(
    title: &str,
    x_label: &str,
    y_label: &str,
    y_max: f64,
    series: &[Series<'_>],
) -> String {
    let mut svg = svg_start(H);
    panel(&mut svg, 0.0, title, x_label, y_label, y_max, series);
    svg.push_str("</svg>\n");
    svg
}

/// The opening of an SVG document `height` high (width `W`), white background.
fn svg_start(height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// One plot (`W` × `H`: title, axes, ticks at quarters, legend, lines) whose top is `y0` pixels
/// down the document.
fn panel(
    svg: &mut String,
    y0: f64,
    title: &str,
    x_label: &str,
    y_label: &str,
    y_max: f64,
    series: &[Series<'_>],
) {
    let x_max = series.iter().flat_map(|s| s.2.iter().map(|p| p.0)).fold(0.0_f64, f64::max).max(1e-9);
    let sx = |x: f64| PAD + x / x_max * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - y / y_max.max(1e-9) * (H - 2.0 * PAD);
    let _ = writeln!(svg, "<g transform=\"translate(0 {y0})\">");
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>",
        W / 2.0,
        xml(title)
    );
    // Axes, ticks at quarters.
    let _ = writeln!(
        svg,
        "<path d=\"M{PAD},{} V{} H{}\" stroke=\"black\" fill=\"none\"/>",
        PAD,
        H - PAD,
        W - PAD
    );
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            sx(f * x_max),
            H - PAD + 16.0,
            short(f * x_max),
            PAD - 6.0,
            sy(f * y_max) + 4.0,
            short(f * y_max)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
        W / 2.0,
        H - 12.0,
        xml(x_label),
        H / 2.0,
        H / 2.0,
        xml(y_label)
    );
    for (i, (name, colour, points)) in series.iter().enumerate() {
        // Pixels to a tenth; a point inside a flat run (the same height as both neighbours)
        // adds nothing to the line and is left out, which keeps step-like series small.
        let pixels: Vec<(String, String)> =
            points.iter().map(|(x, y)| (format!("{:.1}", sx(*x)), format!("{:.1}", sy(*y)))).collect();
        let mut d = String::new();
        for (k, (x, y)) in pixels.iter().enumerate() {
            let flat = k > 0 && k + 1 < pixels.len() && pixels[k - 1].1 == *y && pixels[k + 1].1 == *y;
            if !flat {
                let _ = write!(d, "{}{x},{y}", if d.is_empty() { "M" } else { " L" });
            }
        }
        let _ = writeln!(svg, "<path d=\"{d}\" stroke=\"{colour}\" fill=\"none\" stroke-width=\"1.5\"/>");
        let ly = PAD + 14.0 * i as f64;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{ly:.1}\" fill=\"{colour}\">{}</text>",
            W - PAD - 100.0,
            xml(name)
        );
    }
    svg.push_str("</g>\n");
}

fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `utilisation.svg`: allocated share of each resource over time.
pub fn utilisation_svg(result: &SimResult) -> String {
    let pick = |f: fn(&crate::sim::Sample) -> f64| -> Vec<(f64, f64)> {
        result.samples.iter().map(|s| (secs(s.t_ms), f(s))).collect()
    };
    let mut series = vec![("CPU", "#1f77b4", pick(|s| s.cpu)), ("memory", "#2ca02c", pick(|s| s.memory))];
    if result.samples.iter().any(|s| s.gpus > 0.0) {
        series.push(("GPUs", "#d62728", pick(|s| s.gpus)));
    }
    line_plot("Allocated share over time", "time (s)", "allocated share", 1.0, &series)
}

/// `completion_cdf.svg`: the share of completed jobs that completed within each time.
pub fn completion_cdf_svg(result: &SimResult) -> String {
    let mut times: Vec<f64> = result
        .jobs
        .iter()
        .filter(|j| j.outcome == JobOutcome::Completed)
        .filter_map(|j| j.completion_ms())
        .map(secs)
        .collect();
    times.sort_by(f64::total_cmp);
    let n = times.len().max(1) as f64;
    let points: Vec<(f64, f64)> = times.iter().enumerate().map(|(i, t)| (*t, (i + 1) as f64 / n)).collect();
    line_plot(
        "Completion time CDF",
        "completion time (s)",
        "share of completed jobs",
        1.0,
        &[("jobs", "#1f77b4", points)],
    )
}

/// `nodes.svg`: above, nodes registered and billed (registered or booting) over time; below, the
/// allocated share of the registered nodes' CPU and memory (GPUs if any) and of the pool's CPU.
pub fn nodes_svg(result: &SimResult) -> String {
    let pick = |f: fn(&crate::sim::Sample) -> f64| -> Vec<(f64, f64)> {
        result.samples.iter().map(|s| (secs(s.t_ms), f(s))).collect()
    };
    let y_max = result
        .elastic
        .as_ref()
        .map(|e| e.max_nodes as f64)
        .unwrap_or_else(|| result.samples.iter().map(|s| f64::from(s.nodes)).fold(1.0, f64::max));
    let counts = [
        ("billed", "#ff7f0e", pick(|s| f64::from(s.nodes + s.booting))),
        ("registered", "#1f77b4", pick(|s| f64::from(s.nodes))),
    ];
    let mut shares = vec![
        ("CPU", "#1f77b4", pick(|s| s.cpu_registered)),
        ("memory", "#2ca02c", pick(|s| s.memory_registered)),
    ];
    if result.samples.iter().any(|s| s.gpus_registered > 0.0) {
        shares.push(("GPUs", "#d62728", pick(|s| s.gpus_registered)));
    }
    shares.push(("CPU of the pool", "#7f7f7f", pick(|s| s.cpu)));
    let mut svg = svg_start(2.0 * H);
    panel(&mut svg, 0.0, "Nodes over time", "time (s)", "nodes", y_max, &counts);
    panel(
        &mut svg,
        H,
        "Allocated share of the registered nodes",
        "time (s)",
        "allocated share",
        1.0,
        &shares,
    );
    svg.push_str("</svg>\n");
    svg
}

/// Leaf queues with a panel of their own in `queues.svg`; the overview shows them all.
pub const QUEUE_PANELS: usize = 8;

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf",
];

/// `queues.svg`: above, the memory each leaf queue holds; then, for the first [`QUEUE_PANELS`]
/// leaves, one panel each: memory held, ideal, guaranteed and pending (cut at 1), and CPU held.
pub fn queues_svg(result: &SimResult) -> String {
    let q = &result.queues;
    let pick = |leaf: usize, f: fn(&crate::queues::QueueSample) -> f64| -> Vec<(f64, f64)> {
        q.samples.iter().filter(|s| s.leaf == leaf).map(|s| (secs(s.t_ms), f(s))).collect()
    };
    let overview: Vec<Series<'_>> = q
        .leaves
        .iter()
        .enumerate()
        .map(|(k, l)| (l.path.as_str(), PALETTE[k % PALETTE.len()], pick(k, |s| s.used.memory)))
        .collect();
    let panels = q.leaves.len().min(QUEUE_PANELS);
    let mut svg = svg_start(H * (1 + panels) as f64);
    panel(
        &mut svg,
        0.0,
        "Memory held by each leaf queue",
        "time (s)",
        "share of the cluster",
        1.0,
        &overview,
    );
    for (k, l) in q.leaves.iter().enumerate().take(panels) {
        let series = [
            ("memory held", "#1f77b4", pick(k, |s| s.used.memory)),
            ("ideal", "#2ca02c", pick(k, |s| s.ideal.memory)),
            ("guaranteed", "#7f7f7f", pick(k, |s| s.guaranteed.memory)),
            ("pending (cut at 1)", "#ff7f0e", pick(k, |s| s.pending.memory.min(1.0))),
            ("CPU held", "#9467bd", pick(k, |s| s.used.cpu)),
        ];
        let title = format!("{}: memory (guaranteed {:.0} %)", l.path, l.guaranteed * 100.0);
        panel(&mut svg, H * (1 + k) as f64, &title, "time (s)", "share of the cluster", 1.0, &series);
    }
    svg.push_str("</svg>\n");
    svg
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{JobRecord, Sample};

    fn record(
        name: &str,
        class: &str,
        submit: u64,
        start: Option<u64>,
        end: Option<u64>,
        outcome: JobOutcome,
    ) -> JobRecord {
        JobRecord {
            name: name.into(),
            class: class.into(),
            containers: 1,
            submit_ms: submit,
            start_ms: start,
            end_ms: end,
            outcome,
            ran_slow: false,
            preempted: 0,
        }
    }

    fn sample(t_ms: u64, cpu: f64, memory: f64, running: u64, waiting_jobs: u64) -> Sample {
        Sample {
            t_ms,
            cpu,
            memory,
            gpus: 0.0,
            running,
            waiting_jobs,
            nodes: 2,
            booting: 0,
            cpu_registered: cpu,
            memory_registered: memory,
            gpus_registered: 0.0,
        }
    }

    fn result() -> SimResult {
        SimResult {
            jobs: vec![
                record("a", "GPU", 0, Some(0), Some(100_000), JobOutcome::Completed),
                record("b", "GPU", 10_000, Some(60_000), Some(1_310_000), JobOutcome::Completed),
                record("c", "MPI", 20_000, Some(30_000), Some(1_220_000), JobOutcome::Killed),
                record("d,\"x\"", "MPI", 30_000, None, None, JobOutcome::Unfinished),
            ],
            samples: vec![sample(0, 0.5, 0.25, 1, 0), sample(60_000, 1.0, 0.5, 2, 1)],
            end_ms: 1_310_000,
            utilisation: [0.75, 0.375, 0.0],
            node_hours: 2.5,
            stalled_at_ms: None,
            elastic: None,
            preemptions: 0,
            cycles: 9,
            launches: 3,
            job_reservations: Vec::new(),
            replans: (0, 0),
            queues: Default::default(),
            plan: Vec::new(),
            plugins: Vec::new(),
        }
    }

    #[test]
    fn the_summary_counts_outcomes_and_computes_utility_and_percentiles() {
        let s = summarise(&result(), &ReportOptions::default());
        assert_eq!((s.jobs, s.completed, s.killed, s.unfinished), (4, 2, 1, 1));
        // Completed: a in 100 s, b in 1300 s (past the horizon: no utility, SLA missed).
        assert_eq!(s.utility, 1100.0);
        assert_eq!(s.sla_met, 0.25);
        assert_eq!(s.completion_s.n, 2);
        assert_eq!((s.completion_s.p50, s.completion_s.max), (1300.0, 1300.0));
        assert_eq!(s.completion_s.mean, 700.0);
        // Waits of the three that started: 0, 50, 10 s.
        assert_eq!((s.wait_s.n, s.wait_s.p50, s.wait_s.max), (3, 10.0, 50.0));
        assert_eq!(s.classes["GPU"].utility, 1100.0);
        assert_eq!(s.classes["MPI"].completed, 0);
        assert_eq!(s.makespan_s, 1310.0);
    }

    #[test]
    fn a_line_leaves_out_the_inside_of_flat_runs() {
        let points = vec![(0.0, 0.5), (1.0, 0.5), (2.0, 0.5), (3.0, 1.0), (4.0, 1.0)];
        let svg = line_plot("t", "x", "y", 1.0, &[("s", "#000000", points)]);
        let path = svg.lines().find(|l| l.starts_with("<path d=\"M") && l.contains("#000000")).expect("line");
        // (1, 0.5) is inside the first run; both ends of each run stay.
        assert_eq!(path.matches(" L").count(), 3, "{path}");
        assert!(path.starts_with("<path d=\"M50.0,180.0 L360.0,180.0 L515.0,50.0 L670.0,50.0\""), "{path}");
    }

    #[test]
    fn the_files_are_written_and_identical_twice() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = result();
        write_all(&dir.path().join("one"), &r, &ReportOptions::default()).expect("write");
        write_all(&dir.path().join("two"), &r, &ReportOptions::default()).expect("write");
        for f in ["summary.json", "jobs.csv", "timeseries.csv", "utilisation.svg", "completion_cdf.svg"] {
            let a = std::fs::read(dir.path().join("one").join(f)).expect("read");
            let b = std::fs::read(dir.path().join("two").join(f)).expect("read");
            assert!(!a.is_empty() && a == b, "{f}");
        }
        let csv = std::fs::read_to_string(dir.path().join("one/jobs.csv")).expect("read");
        assert!(
            csv.lines().nth(4).is_some_and(|l| l.starts_with("\"d,\"\"x\"\"\",MPI,1,30.000,,,,,unfinished")),
            "{csv}"
        );
        let svg = std::fs::read_to_string(dir.path().join("one/utilisation.svg")).expect("read");
        assert!(svg.starts_with("<svg") && svg.contains("CPU") && !svg.contains("GPUs"));
    }
}
