//! `gantry sim`'s flags as clap reads them: the trace, the cluster, elastic clusters, deadline
//! jobs, reservations and node losses, with their value parsers.

use std::path::PathBuf;

/// A trace format `gantry sim` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// gantry's own JSON lines (sim/TRACES.md).
    Gantry,
    /// Alibaba GPU 2023 pod list CSV.
    Alibaba,
    /// SWIM Facebook 2009 TSV.
    Swim,
    /// Standard Workload Format of the Parallel Workloads Archive.
    Swf,
    /// CMU 15-719 heterogeneity traces (`traceGPU…`, `traceMPI…` CSV files).
    Cmu,
}

/// What `--alibaba-gpu-spec` makes of a pod's `gpu_spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuSpecMode {
    /// A hard node selector: the pod runs only on the GPU models it lists.
    Hard,
    /// A soft preference: the pod may run anywhere, `--alibaba-slowdown` times as long off its
    /// models.
    Soft,
}

/// The Rayon admission agent of `--reservations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentArg {
    /// GREE: each stage as late as possible, tallest rightmost.
    Gree,
    /// GREE-L: as flat as possible (fewer preemptions).
    GreeL,
}

/// The replanner of `--replanner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplannerArg {
    /// Rayon's: move and reshape reservations within their windows, reject as few as possible.
    Rayon,
    /// YARN's `SimpleCapacityReplanner`: delete the newest reservations until the plan fits.
    Yarn,
}

/// `gantry sim` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// The cluster: gantry's TOML, or Alibaba's node list (`.csv`).
    #[arg(long)]
    pub cluster: PathBuf,
    /// A trace file (repeat for several, e.g. one CMU file per job type).
    #[arg(long, required = true)]
    pub trace: Vec<PathBuf>,
    /// The traces' format.
    #[arg(long, value_enum)]
    pub format: TraceFormat,
    /// The scheduler's configuration (queues, plugins, profile) [default: built-in policies].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where to write summary.json, jobs.csv, timeseries.csv, queues.csv and the plots.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the engine's randomness (overrides the configuration's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop at this virtual time, seconds.
    #[arg(long)]
    pub until: Option<f64>,
    /// Scheduling cycle interval while work is pending, ms.
    #[arg(long, default_value_t = 1000)]
    pub tick_ms: u64,
    /// Time-series sample interval, s [default: 60 s, or longer so that the trace's span makes
    /// at most about 2,000 samples].
    #[arg(long)]
    pub sample: Option<f64>,
    /// Utility horizon U (s): a job completing after T seconds earns U − T.
    #[arg(long, default_value_t = 1200.0)]
    pub utility_horizon: f64,
    /// Fail a node: `NAME@SECONDS` (for good) or `NAME@SECONDS:BACK_SECONDS` (it registers
    /// again then). Its containers are lost and run again elsewhere. Repeatable.
    #[arg(long = "fail", value_parser = parse_failure)]
    pub failures: Vec<gantry_sim::sim::NodeFailure>,
    /// Alibaba only: a pod's `gpu_spec` (the GPU models it may run on) as a hard selector or a
    /// soft preference [default: hard].
    #[arg(long, value_enum)]
    pub alibaba_gpu_spec: Option<GpuSpecMode>,
    /// Alibaba with `--alibaba-gpu-spec soft` only: a pod runs this many times as long on a GPU
    /// model outside its `gpu_spec` (a finite number ≥ 1.0) [default: 1.0, just as long; the
    /// trace does not say].
    #[arg(long, allow_negative_numbers = true)]
    pub alibaba_slowdown: Option<f64>,
    /// Elastic cluster: the cluster file becomes a pool of machines; the run starts with this
    /// many of them (the first in the file) and never goes below (sim/TRACES.md, "Elastic
    /// clusters").
    #[arg(long)]
    pub elastic_min: Option<usize>,
    /// Elastic cluster: never more nodes than this, booting ones included [default: the pool's
    /// size].
    #[arg(long)]
    pub elastic_max: Option<usize>,
    /// Elastic cluster: containers that have waited this long make the autoscaler add nodes
    /// (90s, 3m, 1.5h; a bare number is seconds) [default: 3m].
    #[arg(long, value_parser = duration_ms)]
    pub scale_up_after: Option<u64>,
    /// Elastic cluster: size a scale-up by work — enough nodes for the waiting containers to
    /// run within this long, one after another on each slot, by their expected run times
    /// (3m) [default: a slot for every waiting container].
    #[arg(long, value_parser = duration_ms)]
    pub scale_up_for: Option<u64>,
    /// Elastic cluster: a node the engine reports empty for this long is drained and removed
    /// [default: 10m].
    #[arg(long, value_parser = duration_ms)]
    pub scale_down_after: Option<u64>,
    /// Elastic cluster: from starting a node (billed from then) to its registration [default: 2m].
    #[arg(long, value_parser = duration_ms)]
    pub boot: Option<u64>,
    /// Elastic cluster: interval between the autoscaler's checks [default: 10s].
    #[arg(long, value_parser = duration_ms)]
    pub scale_check: Option<u64>,
    /// Deadline jobs, reservations and node losses.
    #[command(flatten)]
    pub deadlines: Box<DeadlineArgs>,
    /// Faults of the scheduler itself: restarts, partitions, slow or failing commits.
    #[command(flatten)]
    pub daemon: Box<DaemonArgs>,
}

/// `gantry sim`'s flags for the scheduler around the engine (the controller the daemon runs):
/// its timings and the faults injected into it (sim/TRACES.md, "The scheduler's faults").
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DaemonArgs {
    /// Restart the scheduler at this virtual time (90s, 3m; a bare number is seconds): the
    /// process dies with what its store had not committed, a new one recovers from the store,
    /// and the agents register again. Repeatable.
    #[arg(long = "restart-scheduler-at", value_parser = duration_ms)]
    pub restarts: Vec<u64>,
    /// Cut a node off from the scheduler: `NODE@TIME:DURATION` (node-3@10m:30s). Its agent
    /// fences its containers after 8 s without word; the scheduler loses the node after its
    /// node timeout; then the agent registers again. Repeatable.
    #[arg(long = "partition", value_parser = parse_partition)]
    pub partitions: Vec<gantry_sim::sim::Partition>,
    /// An agent silent this long loses its node (`[server] node_timeout_ms`) [default: 10s].
    #[arg(long, value_parser = duration_ms)]
    pub node_timeout: Option<u64>,
    /// How long the store takes to commit each job [default: 0, at once].
    #[arg(long, value_parser = duration_ms)]
    pub commit_latency: Option<u64>,
    /// The share of store jobs that fail, as with a full disk (0 ≤ rate < 1) [default: 0].
    #[arg(long)]
    pub commit_failure_rate: Option<f64>,
}

/// `gantry sim`'s deadline-job, reservation and node-loss flags (boxed in [`SimArgs`]: they
/// would make it the largest command by far).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DeadlineArgs {
    /// Deadline jobs (sim/TRACES.md, "Deadline jobs and reservations"): this share of the jobs,
    /// drawn with a seeded rule (`--deadline-seed`), must finish by arrival + slack × their
    /// ideal run time; they go to `--deadline-queue`, the others to `--best-effort-queue`.
    /// Writes deadlines.json and deadlines.csv.
    #[arg(long)]
    pub deadline_share: Option<f64>,
    /// Deadline jobs: deadline = arrival + this × the job's ideal run time (its critical path on
    /// the empty cluster) [default: 3].
    #[arg(long)]
    pub deadline_slack: Option<f64>,
    /// Seed of the choice of deadline jobs and of `--lose-nodes` [default: 1].
    #[arg(long)]
    pub deadline_seed: Option<u64>,
    /// Deadline jobs' queue; with `--reservations`, the reservable plan queue (a leaf of the
    /// configuration) [default: root.prod].
    #[arg(long)]
    pub deadline_queue: Option<String>,
    /// The other jobs' queue [default: root.adhoc].
    #[arg(long)]
    pub best_effort_queue: Option<String>,
    /// Deadline jobs reserve capacity first: Rayon's plan on `--deadline-queue`, admitting with
    /// this agent. Without it they are plain jobs of that queue (the capacity-queue baseline).
    #[arg(long, value_enum)]
    pub reservations: Option<AgentArg>,
    /// With `--reservations`: how the plan is repaired when nodes are lost [default: rayon].
    #[arg(long, value_enum)]
    pub replanner: Option<ReplannerArg>,
    /// With `--reservations`: the Rayon planner plugin to load [default: libgantry_rayon.so
    /// beside this executable, where `cargo build -p gantry-rayon` puts it].
    #[arg(long)]
    pub planner: Option<PathBuf>,
    /// With `--reservations`: the plan's step (1s, 500ms) [default: 1s].
    #[arg(long, value_parser = duration_ms)]
    pub plan_step: Option<u64>,
    /// With `--reservations`: how far ahead a deadline may lie [default: 24h].
    #[arg(long, value_parser = duration_ms)]
    pub plan_horizon: Option<u64>,
    /// With `--reservations`: how long before a piece of an allocation its guarantee is
    /// enforced, and how soon after admission an allocation may start [default: 0, the plan
    /// exactly].
    #[arg(long, value_parser = duration_ms)]
    pub plan_enforce_ahead: Option<u64>,
    /// With `--reservations`: submit each reservation this long before its job arrives
    /// [default: 0, at the arrival, just before the job].
    #[arg(long, value_parser = duration_ms)]
    pub reservation_lead: Option<u64>,
    /// With `--reservations`: end each reservation's window this long before the job's
    /// deadline (room for the time it takes to get reserved capacity back) [default: 0].
    #[arg(long, value_parser = duration_ms)]
    pub reservation_margin: Option<u64>,
    /// Lose this share of the nodes for good at `--lose-at`: round(share × nodes), at least one,
    /// chosen by a shuffle seeded with `--deadline-seed`.
    #[arg(long)]
    pub lose_nodes: Option<f64>,
    /// When `--lose-nodes` strikes, seconds.
    #[arg(long)]
    pub lose_at: Option<f64>,
}

/// A duration flag in ms (zero allowed: no boot delay, scale at once).
fn duration_ms(s: &str) -> Result<u64, String> {
    crate::cli::parse_duration_or_zero_ms(s)
}

/// Parses `NODE@TIME:DURATION`.
fn parse_partition(s: &str) -> Result<gantry_sim::sim::Partition, String> {
    let expected = || format!("{s:?}: expected NODE@TIME:DURATION (node-3@10m:30s)");
    let (node, when) = s.rsplit_once('@').ok_or_else(expected)?;
    let (at, duration) = when.split_once(':').ok_or_else(expected)?;
    if node.is_empty() {
        return Err(expected());
    }
    let at_ms = duration_ms(at).map_err(|e| format!("{s:?}: {e}"))?;
    let duration_ms = crate::cli::parse_duration_ms(duration).map_err(|e| format!("{s:?}: {e}"))?;
    Ok(gantry_sim::sim::Partition { node: node.to_owned(), at_ms, duration_ms })
}

/// Parses `NAME@SECONDS[:BACK_SECONDS]`.
fn parse_failure(s: &str) -> Result<gantry_sim::sim::NodeFailure, String> {
    let (node, when) =
        s.rsplit_once('@').ok_or_else(|| format!("{s:?}: expected NAME@SECONDS[:BACK_SECONDS]"))?;
    let secs = |t: &str| -> Result<u64, String> {
        t.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| (v * 1000.0) as u64)
            .ok_or_else(|| format!("{s:?}: {t:?} is not a number of seconds"))
    };
    let (at, back) = match when.split_once(':') {
        Some((a, b)) => (secs(a)?, Some(secs(b)?)),
        None => (secs(when)?, None),
    };
    if node.is_empty() || back.is_some_and(|b| b <= at) {
        return Err(format!("{s:?}: expected a node name, and a return after the failure"));
    }
    Ok(gantry_sim::sim::NodeFailure { node: node.to_owned(), at_ms: at, back_at_ms: back })
}
