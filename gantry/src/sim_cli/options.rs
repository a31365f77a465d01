//! What `gantry sim`'s flags ask for, checked together: the Alibaba reader's options, the
//! elastic cluster, deadline jobs with their reservation plan, node losses, and the scheduler's
//! timings and faults. Each refuses flags given where they mean nothing, naming the flag.

use super::{AgentArg, GpuSpecMode, ReplannerArg, SimArgs, SimCliError, TraceFormat};
use gantry_engine::PlanConfig;
use gantry_sim::deadlines::{self, DeadlineOptions};
use gantry_sim::elastic::{ElasticError, ElasticOptions};
use gantry_sim::sim::DaemonOptions;
use gantry_sim::trace::alibaba::{AlibabaOptions, GpuSpecAs};
use std::path::PathBuf;

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

/// The scheduler's timings and the faults injected into it (`--node-timeout`,
/// `--commit-latency`, `--commit-failure-rate`, `--restart-scheduler-at`, `--partition`), the
/// rest at the daemon's and the agent's defaults; `--seed` draws the failing commits.
pub fn daemon_options(args: &SimArgs) -> Result<DaemonOptions, SimCliError> {
    let d = &args.daemon;
    let defaults = DaemonOptions::default();
    let options = DaemonOptions {
        node_timeout_ms: d.node_timeout.unwrap_or(defaults.node_timeout_ms),
        commit_ms: d.commit_latency.unwrap_or(0),
        commit_failure_rate: d.commit_failure_rate.unwrap_or(0.0),
        restarts_at_ms: d.restarts.clone(),
        partitions: d.partitions.clone(),
        seed: args.seed.unwrap_or(0),
        ..defaults
    };
    options.validate().map_err(|e| {
        SimCliError::Args(format!("--node-timeout, --commit-failure-rate or --partition: {e}"))
    })?;
    Ok(options)
}

/// The elastic cluster `args` ask for over a pool of `pool` nodes: `None` without
/// `--elastic-min`. Refuses the other elastic flags without it, bounds the pool cannot honour,
/// a zero check interval, and node failures on an elastic cluster.
pub fn elastic_options(args: &SimArgs, pool: usize) -> Result<Option<ElasticOptions>, SimCliError> {
    let Some(min) = args.elastic_min else {
        let given = [
            args.elastic_max.map(|_| "--elastic-max"),
            args.scale_up_after.map(|_| "--scale-up-after"),
            args.scale_up_for.map(|_| "--scale-up-for"),
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
        scale_up_for_ms: args.scale_up_for,
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
        Err(ElasticError::ZeroScaleUpFor) => return refuse("--scale-up-for must be positive".into()),
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
        enforce_ahead_ms: args.deadlines.plan_enforce_ahead.unwrap_or(defaults.enforce_ahead_ms),
        ..defaults
    };
    if plan.step_ms == 0 {
        return refuse("--plan-step must be positive".into());
    }
    if plan.enforce_ahead_ms > gantry_engine::MAX_ENFORCE_AHEAD_MS {
        return refuse("--plan-enforce-ahead must be at most 1h".into());
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
        args.deadlines.plan_enforce_ahead.map(|_| "--plan-enforce-ahead"),
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
