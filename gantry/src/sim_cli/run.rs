//! Runs `gantry sim`: reads the traces, builds the engine (with the planner of
//! `--reservations`), drives the simulation with a progress bar on a terminal, and writes the
//! outputs.

use super::{
    SimArgs, SimCliError, SimPlan, TraceFormat, alibaba_options, daemon_options, deadline_options,
    elastic_options, lost_nodes,
};
use gantry_engine::{Engine, EngineConfig};
use gantry_scheduler::config::SchedulerConfig;
use gantry_sim::cluster::ClusterSpec;
use gantry_sim::deadlines;
use gantry_sim::report::{ReportOptions, write_all};
use gantry_sim::sim::{SimOptions, run_with_progress};
use gantry_sim::trace::alibaba::AlibabaOptions;
use gantry_sim::trace::{self, Job};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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
        Some(path) => Ok(gantry_scheduler::build_engine(&sim_config(path, seed)?, None)?),
        None => Ok(Engine::builtin(EngineConfig { seed: seed.unwrap_or(0), ..EngineConfig::default() })?),
    }
}

/// The name the planner of `--reservations` is loaded under.
const SIM_PLANNER: &str = "sim-planner";

/// [`engine_for`], with a reservation plan when `plan` is given: the configuration's queues and
/// plugins ([`gantry_scheduler::build_engine_with`]), `plan`'s planner loaded beside them
/// (called directly, as every plugin of a simulation) as the `reserve` policy, and its plan as
/// the engine's reservations (the configuration's own `[reservations]` section, if any, is
/// replaced). A configuration that names a planner of its own cannot take another.
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
    cfg.plugins.push(gantry_scheduler::config::PluginSection {
        name: SIM_PLANNER.into(),
        path,
        call_budget_ms: 0,
        config: plan.planner_config,
    });
    cfg.profile.reserve = Some(SIM_PLANNER.into());
    let engine_config = EngineConfig { reservations: Some(plan.plan), ..cfg.engine_config() };
    Ok(gantry_scheduler::build_engine_with(&cfg, None, engine_config)?)
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
    if let Some(p) = args.daemon.partitions.iter().find(|p| !cluster.nodes.iter().any(|n| n.name == p.node)) {
        return Err(SimCliError::Args(format!(
            "--partition names {:?}, which the cluster does not have",
            p.node
        )));
    }
    let daemon = daemon_options(args)?;
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
    // Built again at each scheduler restart, as the daemon builds its engine from its
    // configuration before it reads the store; the first build's errors are the user's.
    let first = engine_with_plan(args.config.as_ref(), args.seed, plan.clone())?;
    let mut first = Some(first);
    let mut make_engine = || match first.take() {
        Some(engine) => Ok(engine),
        None => engine_with_plan(args.config.as_ref(), args.seed, plan.clone()).map_err(|e| e.to_string()),
    };
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
        daemon,
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
    let result = run_with_progress(&mut make_engine, &cluster.nodes, &jobs, &options, progress)?;
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
