//! `gantry sim`: a workload trace through the real engine — the scheduler's configuration, its
//! queues and its plugin `.so` files — on a virtual clock ([`gantry_sim`]), with the results
//! written to a directory.

use crate::config::SchedulerConfig;
use gantry_engine::{Engine, EngineConfig, PlanConfig};
use gantry_sim::cluster::ClusterSpec;
use gantry_sim::deadlines::{self, DeadlineOptions};
use gantry_sim::elastic::{ElasticError, ElasticOptions};
use gantry_sim::report::{ReportOptions, write_all};
use gantry_sim::sim::{SimOptions, run_with_progress};
use gantry_sim::trace::alibaba::{AlibabaOptions, GpuSpecAs};
use gantry_sim::trace::{self, Job};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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

/// Why a simulation did not run.
#[derive(Debug, thiserror::Error)]
pub enum SimCliError {
    /// The cluster file.
    #[error(transparent)]
    Cluster(#[from] gantry_sim::cluster::ClusterError),
    /// A trace.
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// The scheduler configuration.
    #[error("{0}")]
    Config(String),
    /// The engine or its plugins.
    #[error(transparent)]
    Build(#[from] crate::BuildError),
    /// The engine refused the setup.
    #[error(transparent)]
    Engine(#[from] gantry_engine::EngineError),
    /// The run.
    #[error(transparent)]
    Sim(#[from] gantry_sim::sim::SimError),
    /// Writing the results.
    #[error("writing {path}: {source}")]
    Write {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Bad arguments.
    #[error("{0}")]
    Args(String),
}

/// The Alibaba reader's options from `--alibaba-gpu-spec` and `--alibaba-slowdown`, refusing
/// them with another format, and a slowdown with a hard `gpu_spec` or outside [1, ∞).
pub fn alibaba_options(args: &SimArgs) -> Result<AlibabaOptions, SimCliError> {
    if args.format != TraceFormat::Alibaba {
        if let Some(flag) = [
            args.alibaba_gpu_spec.map(|_| "--alibaba-gpu-spec"),
            args.alibaba_slowdown.map(|_| "--alibaba-slowdown"),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(SimCliError::Args(format!(
                "{flag} applies only to Alibaba pod lists (--format alibaba), not to --format {}",
                clap::ValueEnum::to_possible_value(&args.format)
                    .map_or_else(String::new, |v| v.get_name().to_owned())
            )));
        }
        return Ok(AlibabaOptions::default());
    }
    let gpu_spec = match (args.alibaba_gpu_spec.unwrap_or(GpuSpecMode::Hard), args.alibaba_slowdown) {
        (GpuSpecMode::Hard, None) => GpuSpecAs::Selector,
        (GpuSpecMode::Hard, Some(_)) => {
            return Err(SimCliError::Args(
                "--alibaba-slowdown needs --alibaba-gpu-spec soft: with a hard gpu_spec a pod never runs \
                 on another GPU model, so there is nothing to slow down"
                    .into(),
            ));
        }
        (GpuSpecMode::Soft, slowdown) => GpuSpecAs::preference(slowdown.unwrap_or(1.0))
            .map_err(|m| SimCliError::Args(format!("--alibaba-slowdown {}: {m}", slowdown.unwrap_or(1.0))))?,
    };
    Ok(AlibabaOptions { gpu_spec, ..AlibabaOptions::default() })
}

/// The elastic cluster `args` ask for over a pool of `pool` nodes: `None` without
/// `--elastic-min`. Refuses the other elastic flags without it, bounds the pool cannot honour,
/// a zero check interval, and node failures on an elastic cluster.
pub fn elastic_options(args: &SimArgs, pool: usize) -> Result<Option<ElasticOptions>, SimCliError> {
    let Some(min) = args.elastic_min else {
        let given = [
            args.elastic_max.map(|_| "--elastic-max"),
            args.scale_up_after.map(|_| "--scale-up-after"),
            args.scale_down_after.map(|_| "--scale-down-after"),
            args.boot.map(|_| "--boot"),
            args.scale_check.map(|_| "--scale-check"),
        ];
        if let Some(flag) = given.into_iter().flatten().next() {
            return Err(SimCliError::Args(format!(
                "{flag} applies only to an elastic cluster: give --elastic-min too"
            )));
        }
        return Ok(None);
    };
    let defaults = ElasticOptions::new(min, args.elastic_max.unwrap_or(pool));
    let options = ElasticOptions {
        scale_up_after_ms: args.scale_up_after.unwrap_or(defaults.scale_up_after_ms),
        scale_down_after_ms: args.scale_down_after.unwrap_or(defaults.scale_down_after_ms),
        boot_ms: args.boot.unwrap_or(defaults.boot_ms),
        check_ms: args.scale_check.unwrap_or(defaults.check_ms),
        ..defaults
    };
    let refuse = |m: String| Err(SimCliError::Args(m));
    match options.validate(pool) {
        Ok(()) => {}
        Err(ElasticError::MinAboveMax { min, max }) => {
            return refuse(format!("--elastic-min {min} is above --elastic-max {max}"));
        }
        Err(ElasticError::MaxAbovePool { max, pool }) => {
            return refuse(format!(
                "--elastic-max {max} is more nodes than the pool has: the cluster file lists {pool}"
            ));
        }
        Err(ElasticError::MaxZero) if args.elastic_max.is_some() => {
            return refuse("--elastic-max must be at least 1".into());
        }
        Err(ElasticError::ZeroCheck) => return refuse("--scale-check must be positive".into()),
        Err(e) => return refuse(e.to_string()),
    }
    if !args.failures.is_empty() {
        return refuse("--fail cannot be combined with an elastic cluster (--elastic-min): the autoscaler starts and removes the nodes".into());
    }
    Ok(Some(options))
}

/// The reservation plan of `--reservations`: the engine's plan, and the planner plugin that
/// answers it (the Rayon planner, `libgantry_rayon.so`, with the agent and replanner in its
/// configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct SimPlan {
    /// The engine's plan.
    pub plan: PlanConfig,
    /// The planner's library.
    pub planner: PathBuf,
    /// Its `[plugins.config]`: `agent` (`gree`, `gree-l`) and `replanner` (`rayon`, `yarn-simple`).
    pub planner_config: toml::Table,
}

/// Where `libgantry_rayon.so` is when `--planner` does not say: beside this executable.
pub fn default_planner() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("libgantry_rayon.so")))
        .unwrap_or_else(|| PathBuf::from("libgantry_rayon.so"))
}

/// The deadline-job options `args` ask for: `None` without `--deadline-share`. Refuses the
/// other deadline and reservation flags without it, reservation flags without
/// `--reservations`, and values out of range.
pub fn deadline_options(args: &SimArgs) -> Result<Option<(DeadlineOptions, Option<SimPlan>)>, SimCliError> {
    let refuse = |m: String| Err(SimCliError::Args(m));
    let Some(share) = args.deadlines.deadline_share else {
        let given = [
            args.deadlines.deadline_slack.map(|_| "--deadline-slack"),
            args.deadlines.deadline_queue.as_ref().map(|_| "--deadline-queue"),
            args.deadlines.best_effort_queue.as_ref().map(|_| "--best-effort-queue"),
            args.deadlines.reservations.map(|_| "--reservations"),
        ];
        if let Some(flag) = given.into_iter().flatten().next() {
            return refuse(format!("{flag} applies only to deadline jobs: give --deadline-share too"));
        }
        if args.deadlines.lose_nodes.is_none() && args.deadlines.deadline_seed.is_some() {
            return refuse("--deadline-seed applies only with --deadline-share or --lose-nodes".into());
        }
        return reservation_flags_without_plan(args).map(|()| None);
    };
    let mut options = DeadlineOptions::new(
        share,
        args.deadlines.deadline_slack.unwrap_or(3.0),
        args.deadlines.deadline_queue.as_deref().unwrap_or("root.prod"),
        args.deadlines.best_effort_queue.as_deref().unwrap_or("root.adhoc"),
    );
    options.seed = args.deadlines.deadline_seed.unwrap_or(1);
    options.reserve = args.deadlines.reservations.is_some();
    options.lead_ms = args.deadlines.reservation_lead.unwrap_or(0);
    options.margin_ms = args.deadlines.reservation_margin.unwrap_or(0);
    if let Err(m) = options.validate() {
        return refuse(format!("--deadline-share / --deadline-slack: {m}"));
    }
    let Some(agent) = args.deadlines.reservations else {
        return reservation_flags_without_plan(args).map(|()| Some((options, None)));
    };
    let defaults = PlanConfig::new(options.queue.clone());
    let plan = PlanConfig {
        step_ms: args.deadlines.plan_step.unwrap_or(defaults.step_ms),
        horizon_ms: args.deadlines.plan_horizon.unwrap_or(defaults.horizon_ms),
        ..defaults
    };
    if plan.step_ms == 0 {
        return refuse("--plan-step must be positive".into());
    }
    let mut planner_config = toml::Table::new();
    let agent = match agent {
        AgentArg::Gree => "gree",
        AgentArg::GreeL => "gree-l",
    };
    let replanner = match args.deadlines.replanner.unwrap_or(ReplannerArg::Rayon) {
        ReplannerArg::Rayon => "rayon",
        ReplannerArg::Yarn => "yarn-simple",
    };
    planner_config.insert("agent".into(), agent.into());
    planner_config.insert("replanner".into(), replanner.into());
    let planner = args.deadlines.planner.clone().unwrap_or_else(default_planner);
    Ok(Some((options, Some(SimPlan { plan, planner, planner_config }))))
}

/// Refuses the flags that need `--reservations` when it is absent.
fn reservation_flags_without_plan(args: &SimArgs) -> Result<(), SimCliError> {
    let given = [
        args.deadlines.replanner.map(|_| "--replanner"),
        args.deadlines.planner.as_ref().map(|_| "--planner"),
        args.deadlines.plan_step.map(|_| "--plan-step"),
        args.deadlines.plan_horizon.map(|_| "--plan-horizon"),
        args.deadlines.reservation_lead.map(|_| "--reservation-lead"),
        args.deadlines.reservation_margin.map(|_| "--reservation-margin"),
    ];
    match given.into_iter().flatten().next() {
        Some(flag) => Err(SimCliError::Args(format!("{flag} applies only with --reservations"))),
        None => Ok(()),
    }
}

/// The node losses of `--lose-nodes SHARE --lose-at SECONDS` on `nodes`.
pub fn lost_nodes(
    args: &SimArgs,
    nodes: &[gantry_engine::NodeSpec],
) -> Result<Vec<gantry_sim::sim::NodeFailure>, SimCliError> {
    match (args.deadlines.lose_nodes, args.deadlines.lose_at) {
        (None, None) => Ok(Vec::new()),
        (Some(share), Some(at)) => {
            if !at.is_finite() || at < 0.0 {
                return Err(SimCliError::Args(format!(
                    "--lose-at {at}: expected a non-negative number of seconds"
                )));
            }
            if args.elastic_min.is_some() {
                return Err(SimCliError::Args(
                    "--lose-nodes cannot be combined with an elastic cluster (--elastic-min)".into(),
                ));
            }
            deadlines::lose_nodes(
                nodes,
                share,
                (at * 1000.0) as u64,
                args.deadlines.deadline_seed.unwrap_or(1),
            )
            .map_err(|m| SimCliError::Args(format!("--lose-nodes: {m}")))
        }
        _ => Err(SimCliError::Args("--lose-nodes and --lose-at go together".into())),
    }
}

/// Reads the traces of `args` in their format; `alibaba` is used for Alibaba pod lists.
pub fn read_traces(
    format: TraceFormat,
    paths: &[PathBuf],
    alibaba: &AlibabaOptions,
) -> Result<Vec<Job>, trace::TraceError> {
    let mut jobs = Vec::new();
    match format {
        TraceFormat::Cmu => jobs = trace::cmu::read_many(paths, &trace::cmu::CmuConfig::default())?,
        _ => {
            for p in paths {
                jobs.extend(match format {
                    TraceFormat::Gantry => trace::jsonl::read(p)?,
                    TraceFormat::Alibaba => trace::alibaba::read(p, alibaba)?,
                    TraceFormat::Swim => trace::swim::read(p, &Default::default())?,
                    TraceFormat::Swf => trace::swf::read(p, &Default::default())?,
                    TraceFormat::Cmu => unreachable!("handled above"),
                });
            }
            trace::sort_by_submit(&mut jobs);
        }
    }
    Ok(jobs)
}

/// A scheduler configuration as a simulation uses it: `seed` replaces the file's, and plugins are
/// called directly, without a time budget — the simulator's clock is virtual, so a wall-clock
/// budget would make a run's results depend on the machine it runs on.
fn sim_config(path: &Path, seed: Option<u64>) -> Result<SchedulerConfig, SimCliError> {
    let mut cfg = SchedulerConfig::from_file(path).map_err(|e| SimCliError::Config(e.to_string()))?;
    if seed.is_some() {
        cfg.engine.seed = seed;
    }
    for plugin in &mut cfg.plugins {
        plugin.call_budget_ms = 0;
    }
    Ok(cfg)
}

/// Builds the engine a simulation runs: the configuration's queues and plugins, or the
/// built-in policies.
pub fn engine_for(config: Option<&PathBuf>, seed: Option<u64>) -> Result<Engine, SimCliError> {
    match config {
        Some(path) => Ok(crate::build_engine(&sim_config(path, seed)?, None)?),
        None => Ok(Engine::builtin(EngineConfig { seed: seed.unwrap_or(0), ..EngineConfig::default() })?),
    }
}

/// The name the planner of `--reservations` is loaded under.
const SIM_PLANNER: &str = "sim-planner";

/// [`engine_for`], with a reservation plan when `plan` is given: the configuration's queues and
/// plugins ([`crate::build_engine_with`]), `plan`'s planner loaded beside them (called directly,
/// as every plugin of a simulation) as the `reserve` policy, and its plan as the engine's
/// reservations (the configuration's own `[reservations]` section, if any, is replaced). A
/// configuration that names a planner of its own cannot take another.
pub fn engine_with_plan(
    config: Option<&PathBuf>,
    seed: Option<u64>,
    plan: Option<SimPlan>,
) -> Result<Engine, SimCliError> {
    let Some(plan) = plan else { return engine_for(config, seed) };
    let mut cfg = match config {
        Some(path) => sim_config(path, seed)?,
        None => {
            let mut cfg = SchedulerConfig::default();
            cfg.engine.seed = seed;
            cfg
        }
    };
    if let Some(other) = &cfg.profile.reserve {
        return Err(SimCliError::Args(format!(
            "--reservations loads the reservation planner, but the configuration names one already \
             ([profile] reserve = \"{other}\"): give one or the other"
        )));
    }
    if !plan.planner.is_file() {
        return Err(SimCliError::Args(format!(
            "the reservation planner {} does not exist: build it (cargo build --release -p gantry-rayon) or give --planner",
            plan.planner.display()
        )));
    }
    let path = std::path::absolute(&plan.planner).unwrap_or_else(|_| plan.planner.clone());
    cfg.plugins.push(crate::config::PluginSection {
        name: SIM_PLANNER.into(),
        path,
        call_budget_ms: 0,
        config: plan.planner_config,
    });
    cfg.profile.reserve = Some(SIM_PLANNER.into());
    let engine_config = EngineConfig { reservations: Some(plan.plan), ..cfg.engine_config() };
    Ok(crate::build_engine_with(&cfg, None, engine_config)?)
}

/// A sample interval giving about 2,000 samples over the trace's arrivals: whole minutes, at
/// least one.
fn auto_sample_ms(jobs: &[Job]) -> u64 {
    let span = jobs.iter().map(|j| j.submit_ms).max().unwrap_or(0);
    span.div_ceil(2_000).div_ceil(60_000).max(1) * 60_000
}

/// Runs `gantry sim`; returns the summary as written to `summary.json`.
pub fn run_sim(args: &SimArgs) -> Result<gantry_sim::report::Summary, SimCliError> {
    if args.tick_ms == 0 || args.sample.is_some_and(|s| s <= 0.0) || args.until.is_some_and(|u| u < 0.0) {
        return Err(SimCliError::Args(
            "--tick-ms and --sample must be positive, --until not negative".into(),
        ));
    }
    let alibaba = alibaba_options(args)?;
    let cluster = ClusterSpec::read(&args.cluster)?;
    if let Some(f) = args.failures.iter().find(|f| !cluster.nodes.iter().any(|n| n.name == f.node)) {
        return Err(SimCliError::Args(format!("--fail names {:?}, which the cluster does not have", f.node)));
    }
    let elastic = elastic_options(args, cluster.nodes.len())?;
    let deadline = deadline_options(args)?;
    let lost = lost_nodes(args, &cluster.nodes)?;
    let mut jobs = read_traces(args.format, &args.trace, &alibaba)?;
    let (picks, job_reservations, plan) = match deadline.as_ref() {
        Some((options, plan)) => {
            let picks = deadlines::pick(&jobs, &cluster.nodes, options);
            let reservations = deadlines::assign(&mut jobs, &picks, options);
            (picks, reservations, plan.clone())
        }
        None => (Vec::new(), Vec::new(), None),
    };
    let mut failures = args.failures.clone();
    failures.extend(lost.iter().cloned());
    let mut engine = engine_with_plan(args.config.as_ref(), args.seed, plan)?;
    let options = SimOptions {
        tick_ms: args.tick_ms,
        until_ms: args.until.map(|s| (s * 1000.0) as u64),
        sample_ms: match args.sample {
            Some(s) => ((s * 1000.0) as u64).max(1),
            None => auto_sample_ms(&jobs),
        },
        failures,
        // No trace format carries reservations; deadline jobs' reservations come from
        // `--deadline-share` with `--reservations`.
        job_reservations,
        elastic,
    };
    // A progress bar on a terminal, nothing in a pipe or a file.
    let terminal = std::io::stderr().is_terminal();
    let mut last_drawn = usize::MAX;
    let mut bar = |now_ms: u64, done: usize, total: usize| {
        let percent = done * 100 / total.max(1);
        if percent != last_drawn {
            last_drawn = percent;
            let filled = percent * 30 / 100;
            eprint!(
                "\r[{}{}] {percent:>3}%  {done}/{total} jobs  t = {:.0} s ",
                "=".repeat(filled),
                " ".repeat(30 - filled),
                now_ms as f64 / 1000.0
            );
        }
    };
    let progress: Option<&mut dyn FnMut(u64, usize, usize)> = if terminal { Some(&mut bar) } else { None };
    let result = run_with_progress(&mut engine, &cluster.nodes, &jobs, &options, progress)?;
    if terminal {
        eprintln!();
    }
    let report = ReportOptions { utility_horizon_s: args.utility_horizon };
    let summary = write_all(&args.out, &result, &report)
        .map_err(|source| SimCliError::Write { path: args.out.clone(), source })?;
    if deadline.is_some() {
        let figures = deadlines::summarise(&result, &picks, lost.len());
        deadlines::write(&args.out, &jobs, &result, &picks, &figures)
            .map_err(|source| SimCliError::Write { path: args.out.clone(), source })?;
    }
    if terminal {
        eprintln!(
            "{} of {} jobs completed; results in {}",
            summary.completed,
            summary.jobs,
            args.out.display()
        );
    }
    Ok(summary)
}

/// The formats `gantry trace gen` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GenFormat {
    /// gantry's JSON lines, one file.
    Gantry,
    /// CMU 15-719 CSV, one `trace<CLASS>-….csv` file per class in the output directory.
    Cmu,
}

/// `gantry trace gen` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceGenArgs {
    /// The job classes (TOML; see `gantry_sim::workload`).
    #[arg(long)]
    pub classes: PathBuf,
    /// The cluster the load is relative to.
    #[arg(long)]
    pub cluster: PathBuf,
    /// Target load ρ: offered work / capacity, in the jobs' dominant resource.
    #[arg(long)]
    pub load: f64,
    /// Arrivals over this many seconds.
    #[arg(long)]
    pub span: f64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "gantry")]
    pub format: GenFormat,
    /// Output file (gantry) or directory (cmu).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `gantry trace gen`; returns the files written and the number of jobs.
pub fn run_trace_gen(args: &TraceGenArgs) -> Result<(Vec<PathBuf>, usize), SimCliError> {
    use gantry_sim::workload;
    let text = std::fs::read_to_string(&args.classes)
        .map_err(|e| SimCliError::Args(format!("reading {}: {e}", args.classes.display())))?;
    let classes = workload::parse_classes(&text, &args.classes.display().to_string())
        .map_err(|e| SimCliError::Args(e.to_string()))?;
    let cluster = ClusterSpec::read(&args.cluster)?;
    if args.span.is_nan() || args.span <= 0.0 {
        return Err(SimCliError::Args("--span must be positive".into()));
    }
    let spec = workload::GenSpec {
        classes: classes.clone(),
        load: args.load,
        span_ms: (args.span * 1000.0) as u64,
        seed: args.seed,
    };
    let jobs =
        workload::generate(&spec, &cluster.total_capacity()).map_err(|e| SimCliError::Args(e.to_string()))?;
    let write = |path: &PathBuf, text: String| {
        std::fs::write(path, text).map_err(|source| SimCliError::Write { path: path.clone(), source })
    };
    let mut written = Vec::new();
    match args.format {
        GenFormat::Gantry => {
            write(&args.out, trace::jsonl::write(&jobs))?;
            written.push(args.out.clone());
        }
        GenFormat::Cmu => {
            std::fs::create_dir_all(&args.out)
                .map_err(|source| SimCliError::Write { path: args.out.clone(), source })?;
            for c in &classes {
                let path = args.out.join(format!("trace{}-rho{}-seed{}.csv", c.name, args.load, args.seed));
                write(&path, workload::to_cmu(&jobs, &c.name))?;
                written.push(path);
            }
        }
    }
    Ok((written, jobs.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    /// `gantry sim` with the required flags, `--format FORMAT` and `extra`.
    fn args(format: &str, extra: &[&str]) -> SimArgs {
        let base = ["sim", "--cluster", "c.toml", "--trace", "t.csv", "--out", "o", "--format", format];
        Cli::try_parse_from(base.iter().chain(extra)).unwrap().sim
    }

    fn refused(format: &str, extra: &[&str]) -> String {
        alibaba_options(&args(format, extra)).unwrap_err().to_string()
    }

    #[test]
    fn sim_alibaba_gpu_spec_defaults_to_a_selector() {
        let none = alibaba_options(&args("alibaba", &[])).unwrap();
        assert_eq!(none, AlibabaOptions::default());
        assert_eq!(none.gpu_spec, GpuSpecAs::Selector);
        let hard = alibaba_options(&args("alibaba", &["--alibaba-gpu-spec", "hard"])).unwrap();
        assert_eq!(hard.gpu_spec, GpuSpecAs::Selector);
        // Other formats are read as before.
        assert_eq!(alibaba_options(&args("swim", &[])).unwrap(), AlibabaOptions::default());
    }

    #[test]
    fn sim_alibaba_gpu_spec_soft_with_and_without_slowdown() {
        let soft = alibaba_options(&args("alibaba", &["--alibaba-gpu-spec", "soft"])).unwrap();
        assert_eq!(soft.gpu_spec, GpuSpecAs::Preference { slowdown: 1.0 });
        let slow =
            alibaba_options(&args("alibaba", &["--alibaba-gpu-spec", "soft", "--alibaba-slowdown", "1.5"]))
                .unwrap();
        assert_eq!(slow.gpu_spec, GpuSpecAs::Preference { slowdown: 1.5 });
    }

    #[test]
    fn sim_alibaba_flags_are_refused_where_they_mean_nothing() {
        let e = refused("swim", &["--alibaba-gpu-spec", "soft"]);
        assert!(
            e.contains("--alibaba-gpu-spec applies only to Alibaba") && e.contains("--format swim"),
            "{e}"
        );
        let e = refused("gantry", &["--alibaba-slowdown", "2"]);
        assert!(e.contains("--alibaba-slowdown applies only to Alibaba"), "{e}");
        for hard in
            [&["--alibaba-slowdown", "1.5"][..], &["--alibaba-gpu-spec", "hard", "--alibaba-slowdown", "1"]]
        {
            let e = refused("alibaba", hard);
            assert!(e.contains("--alibaba-slowdown needs --alibaba-gpu-spec soft"), "{e}");
        }
        for bad in ["0.5", "-1", "NaN", "inf"] {
            let e = refused("alibaba", &["--alibaba-gpu-spec", "soft", "--alibaba-slowdown", bad]);
            assert!(
                e.contains("--alibaba-slowdown") && e.contains("finite factor of at least 1.0"),
                "{bad}: {e}"
            );
        }
        assert!(Cli::try_parse_from(["sim", "--alibaba-gpu-spec", "medium"]).is_err());
    }

    fn deadline_refused(extra: &[&str]) -> String {
        deadline_options(&args("swim", extra)).unwrap_err().to_string()
    }

    #[test]
    fn sim_deadline_flags_build_the_options_and_the_plan() {
        assert!(deadline_options(&args("swim", &[])).unwrap().is_none());
        let (baseline, plan) =
            deadline_options(&args("swim", &["--deadline-share", "0.2"])).unwrap().unwrap();
        assert_eq!(
            baseline,
            DeadlineOptions { reserve: false, ..DeadlineOptions::new(0.2, 3.0, "root.prod", "root.adhoc") }
        );
        assert_eq!(plan, None);
        let (options, plan) = deadline_options(&args(
            "swim",
            &[
                "--deadline-share",
                "0.3",
                "--deadline-slack",
                "2",
                "--deadline-seed",
                "7",
                "--deadline-queue",
                "root.p",
                "--reservations",
                "gree-l",
                "--replanner",
                "yarn",
                "--plan-step",
                "500ms",
                "--plan-horizon",
                "2h",
                "--reservation-lead",
                "1m",
                "--reservation-margin",
                "2s",
            ],
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            options,
            DeadlineOptions {
                seed: 7,
                reserve: true,
                lead_ms: 60_000,
                margin_ms: 2_000,
                ..DeadlineOptions::new(0.3, 2.0, "root.p", "root.adhoc")
            }
        );
        let plan = plan.expect("a plan");
        assert_eq!(
            plan.plan,
            PlanConfig { step_ms: 500, horizon_ms: 7_200_000, ..PlanConfig::new("root.p") }
        );
        assert_eq!(plan.planner, default_planner());
        assert_eq!(plan.planner_config.get("agent").and_then(|v| v.as_str()), Some("gree-l"));
        assert_eq!(plan.planner_config.get("replanner").and_then(|v| v.as_str()), Some("yarn-simple"));
    }

    #[test]
    fn sim_deadline_flags_are_refused_where_they_mean_nothing() {
        for flag in ["--deadline-slack", "--deadline-queue", "--best-effort-queue"] {
            let e = deadline_refused(&[flag, "3"]);
            assert!(e.contains(flag) && e.contains("give --deadline-share too"), "{flag}: {e}");
        }
        let e = deadline_refused(&["--reservations", "gree"]);
        assert!(e.contains("--reservations applies only to deadline jobs"), "{e}");
        let e = deadline_refused(&["--deadline-share", "0.2", "--replanner", "yarn"]);
        assert!(e.contains("--replanner applies only with --reservations"), "{e}");
        let e = deadline_refused(&["--deadline-share", "1.5"]);
        assert!(e.contains("not in [0, 1]"), "{e}");
        let e = deadline_refused(&["--deadline-share", "0.2", "--deadline-slack", "0.5"]);
        assert!(e.contains("at least 1"), "{e}");
        let nodes = ClusterSpec::parse_toml(
            "[[racks]]\nname = \"r\"\n[[racks.nodes]]\ncount = 20\ncpu_cores = 4\nmemory_gib = 8\n",
            "c.toml",
        )
        .unwrap()
        .nodes;
        assert_eq!(
            lost_nodes(&args("swim", &["--lose-nodes", "0.05", "--lose-at", "60"]), &nodes).unwrap().len(),
            1
        );
        assert!(lost_nodes(&args("swim", &[]), &nodes).unwrap().is_empty());
        let e = lost_nodes(&args("swim", &["--lose-nodes", "0.05"]), &nodes).unwrap_err().to_string();
        assert!(e.contains("go together"), "{e}");
        let e = lost_nodes(&args("swim", &["--lose-nodes", "2", "--lose-at", "1"]), &nodes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not in [0, 1]"), "{e}");
    }

    fn elastic_refused(extra: &[&str], pool: usize) -> String {
        elastic_options(&args("swim", extra), pool).unwrap_err().to_string()
    }

    #[test]
    fn sim_elastic_flags_build_the_autoscaler_options() {
        assert_eq!(elastic_options(&args("swim", &[]), 8).unwrap(), None);
        let defaults = elastic_options(&args("swim", &["--elastic-min", "2"]), 8).unwrap().unwrap();
        assert_eq!(defaults, ElasticOptions::new(2, 8), "max defaults to the pool");
        assert_eq!(
            (defaults.scale_up_after_ms, defaults.scale_down_after_ms, defaults.boot_ms, defaults.check_ms),
            (180_000, 600_000, 120_000, 10_000)
        );
        let set = elastic_options(
            &args(
                "swim",
                &[
                    "--elastic-min",
                    "1",
                    "--elastic-max",
                    "4",
                    "--scale-up-after",
                    "90s",
                    "--scale-down-after",
                    "0.5h",
                    "--boot",
                    "45",
                    "--scale-check",
                    "250ms",
                ],
            ),
            8,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            set,
            ElasticOptions {
                min_nodes: 1,
                max_nodes: 4,
                scale_up_after_ms: 90_000,
                scale_down_after_ms: 1_800_000,
                boot_ms: 45_000,
                check_ms: 250,
            }
        );
    }

    #[test]
    fn sim_elastic_flags_are_refused_when_invalid() {
        let e = elastic_refused(&["--elastic-min", "6", "--elastic-max", "5"], 8);
        assert!(e.contains("--elastic-min 6 is above --elastic-max 5"), "{e}");
        let e = elastic_refused(&["--elastic-min", "2", "--elastic-max", "9"], 8);
        assert!(e.contains("--elastic-max 9") && e.contains("lists 8"), "{e}");
        let e = elastic_refused(&["--elastic-min", "9"], 8);
        assert!(e.contains("--elastic-min 9 is above --elastic-max 8"), "{e}");
        let e = elastic_refused(&["--elastic-min", "0", "--elastic-max", "0"], 8);
        assert!(e.contains("--elastic-max must be at least 1"), "{e}");
        let e = elastic_refused(&["--elastic-min", "1", "--scale-check", "0s"], 8);
        assert!(e.contains("--scale-check must be positive"), "{e}");
        for flag in ["--elastic-max", "--scale-up-after", "--scale-down-after", "--boot", "--scale-check"] {
            let e = elastic_refused(&[flag, "3"], 8);
            assert!(e.contains(flag) && e.contains("give --elastic-min too"), "{flag}: {e}");
        }
        let e = elastic_refused(&["--elastic-min", "1", "--fail", "n1@5"], 8);
        assert!(e.contains("--fail cannot be combined"), "{e}");
        for bad in ["-3m", "3 weeks", "m", "NaN"] {
            let boot = format!("--boot={bad}");
            let base = ["sim", "--cluster", "c", "--trace", "t", "--out", "o", "--format", "swim"];
            let e = Cli::try_parse_from(base.into_iter().chain([boot.as_str()])).unwrap_err().to_string();
            assert!(e.contains("invalid value") && e.contains("--boot"), "{bad}: {e}");
        }
        assert!(Cli::try_parse_from(["sim", "--elastic-min", "-1"]).is_err());
    }
}
