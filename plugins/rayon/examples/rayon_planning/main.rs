//! Rayon planning experiments on the SWIM Facebook 2009 day (seed 001, issue 9): GREE against
//! GREE-L on admission, the MILP on a one-hour subset, and replanning after a capacity loss.
//!
//! ```text
//! cargo run --release -p gantry-rayon --example rayon_planning -- \
//!     --trace ../shared/traces/swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv [--out DIR] [--json FILE]
//! ```
//!
//! The planner is driven the way the scheduler drives `libgantry_rayon.so`: through its ABI 1.3
//! `reserve` hook, called by the harness host of `gantry_rayon::harness` (views laid out as the
//! engine lays them out, calls through the SDK's C glue; admission is ADMIT calls, the capacity
//! loss a REPLAN call). Only the MILP on a subset runs the library directly (OPTIMIZE would
//! optimise every reservation that has not started, not a chosen subset).
//!
//! # Reservations from SWIM jobs (the rule)
//!
//! The trace is read with the simulator's SWIM reader and its default model
//! (`gantry_sim::trace::swim::SwimModel`: a map stage, then a reduce stage when the job
//! shuffles; containers of 1 core / 2 GiB; task durations from the data sizes). Jobs are taken in
//! submission order; for **every** job two numbers are drawn from `gantry_sdk::rng::SplitMix64`
//! seeded with `--seed` (default 1): `u` in `[0, 1)` and the slack `s = lo + (hi − lo) · u'`
//! (`--slack lo..hi`, default `2..3`), so a job's slack does not depend on which other jobs were
//! picked. The job becomes a **deadline job** when `u < --deadline-share` (default 0.3); the
//! others are best-effort work the plan does not hold (they are not simulated here).
//!
//! A deadline job's stages become atoms: bundle = the stage's container, `g = 1`, `h` = its task
//! count capped at `--max-parallel` (default 200 containers, a quarter of the default cluster),
//! `l` = the task duration (`--lease none`: one plan step, i.e. no lease), `w` = tasks × task duration. The job's **ideal runtime** is
//! `Σ_stages ⌈tasks / h⌉ · duration` and its reservation is
//! `window(arrival, arrival + s · ideal, atom)` for a map-only job and
//! `window(arrival, arrival + s · ideal, order(map atom, reduce atom))` otherwise.
//!
//! # Cluster and plan
//!
//! `--nodes` (100) nodes of `--node-cpu` (8) cores and `--node-mem` (16GiB), the SWIM pool of
//! `experiments/packing-elastic`; the plan holds `--plan-share` (0.7) of it, like YARN's
//! reservable queue. One plan step is `--step-ms` (1000) and the horizon runs to the latest
//! deadline.
//!
//! # Admission
//!
//! Reservations are admitted in arrival order, each into the plan as the earlier ones left it,
//! all submitted at time 0 (a day ahead). Each window opens at the job's arrival, so the
//! submission can be at the arrival or any fixed lead time before it: the order, and so every
//! decision, is the same. Per agent: share accepted (count and requested work), admission latency
//! (the `reserve` call through the glue, after a first call that built the plugin's plan; mean,
//! p99, µs), height changes (per reservation,
//! the sum over steps of `|bundles(t) − bundles(t−1)|`, counting its start and its end: a proxy
//! for preemptions), change points (steps where the reservation's demand changes, as
//! `gantry_rayon::milp::changes` counts them) and allocated bundle-hours. Bundles are counted in
//! map containers' CPU (the map and reduce containers are equal in the default model).
//!
//! # MILP on a subset
//!
//! The first `--milp-n` (25) deadline reservations arriving in hour `--milp-hour` (default: the
//! hour whose deadline reservations request the most work). For each agent's full-day plan, those of them it
//! accepted are re-laid out by `gantry_rayon::milp::optimize` (time limit `--milp-time-limit`,
//! default 20 s; cell bound `--milp-cells`, default 1,500) around everything else the agent
//! placed; reported against the agent's own layout of the same reservations. The optimiser's
//! slots are at least the longest lease of the subset (so leases hold); `--milp-slot STEPS`
//! fixes them instead, finer than long leases, which the answer then need not respect.
//!
//! # Capacity loss
//!
//! `--loss-share` (0.05) of the plan's capacity is lost from `--loss-at` (12h) to the end of the
//! horizon, on each agent's full-day plan (as if the whole day's reservations were in the plan
//! when the loss happens, i.e. submitted at least a day ahead): a REPLAN call at the loss, with
//! the plan's capacity lowered, to a new plugin instance per replanner (it builds its plan from
//! the view, as after a restart). A reservation whose allocation started before the loss keeps
//! its past and is re-placed for the work left (the plugin's rule: `plugins/rayon/README.md`);
//! one that has not started may move within its window cut to start at the loss. Gantry's
//! replanner (`replanner = "rayon"`: move / reshape within windows, reject fewest, lowest
//! priority then newest; every reservation here has priority 0 and submission order = arrival
//! order) against `replanner = "yarn-simple"` (YARN: delete the newest at each overcommitted
//! step).
//!
//! # Outputs
//!
//! Markdown tables on stdout; with `--out DIR`, `skyline.csv` (per minute: capacity and cores
//! held, mean and peak, for each plan) and `skyline.svg`; with `--json FILE`, every figure as
//! JSON. Progress on stderr when it is a terminal.

use std::error::Error;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use gantry_rayon::agents::Agent;
use gantry_rayon::harness::{Host, Mode, Record};
use gantry_rayon::milp::{self, Options, Request};
use gantry_rayon::plan::{self as plan_mod, Piece, Plan};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::{
    GANTRY_DECISION_PLAN_RESERVATION, GANTRY_DECISION_REJECT_RESERVATION, GANTRY_NONE, GANTRY_RESERVE_REPLAN,
    GantryResources,
};
use gantry_sdk::rng::SplitMix64;
use gantry_sim::trace::{self, swim};
use serde_json::{Value, json};

mod args;
mod skyline;

use args::{Args, parse_args};

type Res<T> = Result<T, Box<dyn Error>>;

const HOUR_MS: u64 = 3_600_000;
const GIB: u64 = 1 << 30;
const AGENTS: [Agent; 2] = [Agent::Gree, Agent::GreeL];

/// Prints progress when stderr is a terminal.
fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("{msg}");
    }
}

/// One deadline job's reservation.
struct Reservation {
    /// Its id in the plans: its index in the derived list (arrival order).
    id: u64,
    arrival_ms: u64,
    deadline_ms: u64,
    expr: Expr,
    /// Σ w over its atoms, bundle-ms.
    work_bundle_ms: u128,
}

/// The rule of the module documentation.
fn derive(jobs: &[trace::Job], a: &Args) -> Res<Vec<Reservation>> {
    let mut rng = SplitMix64::new(a.seed);
    let mut out = Vec::new();
    for job in jobs {
        let pick = rng.unit();
        let slack = a.slack.0 + (a.slack.1 - a.slack.0) * rng.unit();
        if pick >= a.deadline_share {
            continue;
        }
        let mut atoms = Vec::new();
        let mut ideal_ms = 0u64;
        let mut work = 0u128;
        for st in job.stages.iter().filter(|s| s.count > 0) {
            let h = st.count.min(a.max_parallel);
            let dur = st.duration_ms.max(1);
            ideal_ms += u64::from(st.count.div_ceil(h)) * dur;
            let w = u64::from(st.count) * dur;
            work += u128::from(w);
            atoms.push(Expr::Atom(Atom {
                bundle: st.resources,
                min_parallel: 1,
                max_parallel: h,
                min_lease_ms: if a.lease { dur } else { a.step_ms },
                work: w,
            }));
        }
        let inner = match atoms.len() {
            0 => continue,
            1 => atoms.remove(0),
            _ => Expr::Order(atoms),
        };
        let deadline_ms = job.submit_ms + (slack * ideal_ms as f64).ceil() as u64;
        let expr =
            Expr::Window(Window { start_ms: job.submit_ms, end_ms: deadline_ms, inner: Box::new(inner) });
        expr.validate().map_err(|e| format!("job {}: invalid reservation: {e}", job.name))?;
        out.push(Reservation {
            id: out.len() as u64,
            arrival_ms: job.submit_ms,
            deadline_ms,
            expr,
            work_bundle_ms: work,
        });
    }
    Ok(out)
}

/// Resources times a share, per dimension, rounded down.
fn share_of(r: &GantryResources, f: f64) -> GantryResources {
    GantryResources {
        cpu_millis: (r.cpu_millis as f64 * f) as u64,
        memory_bytes: (r.memory_bytes as f64 * f) as u64,
        gpus: (f64::from(r.gpus) * f) as u32,
        reserved: 0,
    }
}

/// Counts bundles in one dimension of a unit container.
#[derive(Clone, Copy)]
struct Unit {
    dim: usize,
    per: i64,
}

impl Unit {
    fn of(r: &GantryResources) -> Unit {
        if r.cpu_millis > 0 {
            Unit { dim: 0, per: r.cpu_millis as i64 }
        } else {
            Unit { dim: 1, per: r.memory_bytes.max(1) as i64 }
        }
    }
    fn bundles(self, p: &Piece) -> i64 {
        p.demand[self.dim] / self.per
    }
}

/// Σ |bundles(t) − bundles(t−1)| over the reservation's steps, its start and end included.
fn height_changes(pieces: &[Piece], unit: Unit) -> u64 {
    let mut ev: Vec<(usize, i64)> = Vec::with_capacity(2 * pieces.len());
    for p in pieces {
        let b = unit.bundles(p);
        ev.push((p.start, b));
        ev.push((p.end, -b));
    }
    ev.sort_unstable();
    let (mut level, mut total, mut i) = (0i64, 0u64, 0);
    while i < ev.len() {
        let (at, before) = (ev[i].0, level);
        while i < ev.len() && ev[i].0 == at {
            level += ev[i].1;
            i += 1;
        }
        total += level.abs_diff(before);
    }
    total
}

fn bundle_ms(pieces: &[Piece], unit: Unit, step_ms: u64) -> u128 {
    pieces
        .iter()
        .map(|p| (p.end - p.start) as u128 * u128::from(step_ms) * unit.bundles(p).max(0) as u128)
        .sum()
}

/// Figures of a set of reservations in a plan (those it holds).
#[derive(Default, Clone, Copy)]
struct Shape {
    held: usize,
    changes: u64,
    change_points: usize,
    bundle_ms: u128,
}

fn shape(plan: &Plan, ids: impl IntoIterator<Item = u64>, unit: Unit) -> Shape {
    let mut s = Shape::default();
    for id in ids {
        if let Some(p) = plan.pieces(id) {
            s.held += 1;
            s.changes += height_changes(p, unit);
            s.change_points += milp::changes(p, plan.steps());
            s.bundle_ms += bundle_ms(p, unit, plan.step_ms());
        }
    }
    s
}

fn hours(bundle_ms: u128) -> f64 {
    bundle_ms as f64 / HOUR_MS as f64
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

/// One agent's admission of the whole day.
struct AgentRun {
    agent: Agent,
    /// The host after the day's admissions (its records are the accepted reservations).
    host: Host,
    /// The accepted allocations as a plan (the figures are computed on it).
    plan: Plan,
    accepted: Vec<bool>,
    latency: Vec<Duration>,
}

fn agent_name(agent: Agent) -> &'static str {
    match agent {
        Agent::Gree => "gree",
        Agent::GreeL => "gree-l",
    }
}

/// The records' allocations as a plan like `empty` (for the figures); `capacity_from` lowers
/// the capacity from a step on.
fn plan_of(records: &[Record], empty: &Plan, capacity_from: Option<(usize, &GantryResources)>) -> Res<Plan> {
    let mut plan = empty.clone();
    if let Some((step, cap)) = capacity_from {
        plan.set_capacity(step, plan.steps(), cap).map_err(|e| format!("capacity loss: {e}"))?;
    }
    let step_ms = plan.step_ms();
    for r in records {
        let atoms = r.definition.atoms();
        let pieces: Vec<Piece> = r
            .allocation
            .iter()
            .map(|p| Piece {
                start: (p.start_ms / step_ms) as usize,
                end: (p.end_ms.div_ceil(step_ms) as usize).min(plan.steps()),
                demand: plan_mod::scale(
                    &plan_mod::vector(&atoms[p.atom as usize].bundle),
                    i64::try_from(p.bundles).unwrap_or(i64::MAX),
                ),
            })
            .filter(|p| p.start < p.end)
            .collect();
        plan.restore(r.id, pieces).map_err(|e| format!("reservation {}: {e}", r.id))?;
    }
    Ok(plan)
}

/// Submits the day's reservations at time 0, one ADMIT call each through the C glue.
fn admit_all(
    agent: Agent,
    empty: &Plan,
    capacity: &GantryResources,
    res: &[Reservation],
    a: &Args,
) -> Res<AgentRun> {
    let config = format!(r#"{{"agent": "{}"}}"#, agent_name(agent));
    let mut host = Host::new(Mode::Glue, &config, *capacity, a.step_ms, empty.horizon_ms())?;
    // The plugin builds its plan (two horizons of steps) in its first call: make that call (an
    // OPTIMIZE, which answers nothing with the optimiser off) before timing admissions.
    host.optimize()?;
    let mut accepted = Vec::with_capacity(res.len());
    let mut latency = Vec::with_capacity(res.len());
    for r in res {
        let answer = host.submit(r.id, r.expr.clone(), r.arrival_ms, r.deadline_ms, 0)?;
        latency.push(answer.elapsed);
        accepted.push(answer.decisions.iter().any(|d| d.kind == GANTRY_DECISION_PLAN_RESERVATION));
    }
    let plan = plan_of(host.records(), empty, None)?;
    Ok(AgentRun { agent, host, plan, accepted, latency })
}

/// A markdown table.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

fn pct(a: f64, b: f64) -> String {
    if b > 0.0 { format!("{:.1} %", 100.0 * a / b) } else { "-".into() }
}

fn main() -> Res<()> {
    let a = parse_args()?;
    let wall = Instant::now();
    let model = swim::SwimModel::default();
    let mut jobs = swim::read(&a.trace, &model).map_err(|e| format!("reading {}: {e}", a.trace.display()))?;
    trace::sort_by_submit(&mut jobs);
    let res = derive(&jobs, &a)?;
    if res.is_empty() {
        return Err("no deadline jobs: raise --deadline-share".into());
    }
    let unit = Unit::of(&model.map_container);
    let cluster = GantryResources {
        cpu_millis: a.nodes * a.node_cores * 1000,
        memory_bytes: a.nodes * a.node_mem,
        gpus: 0,
        reserved: 0,
    };
    let capacity = share_of(&cluster, a.plan_share);
    let horizon_ms = res.iter().map(|r| r.deadline_ms).max().unwrap_or(0).max(a.loss_at_ms + a.step_ms);
    let empty = Plan::with_horizon(a.step_ms, horizon_ms, &capacity)
        .map_err(|e| format!("cannot build the plan: {e}"))?;
    let requested: u128 = res.iter().map(|r| r.work_bundle_ms).sum();
    let plan_bundle_ms = (capacity.cpu_millis / model.map_container.cpu_millis.max(1)) as u128
        * u128::from(empty.steps() as u64 * a.step_ms);
    let mut out = String::new();
    let mut js = serde_json::Map::new();
    let _ = writeln!(
        out,
        "{} SWIM jobs, {} deadline reservations (seed {}, share {}, slack {}..{}, h <= {}); cluster {} nodes x {} cores / {:.0} GiB, \
         plan {} of it ({} cores, {:.0} GiB), {} steps of {} ms; requested work {:.0} bundle-hours = {:.1} % of the plan's capacity over the horizon\n",
        jobs.len(),
        res.len(),
        a.seed,
        a.deadline_share,
        a.slack.0,
        a.slack.1,
        a.max_parallel,
        a.nodes,
        a.node_cores,
        a.node_mem as f64 / GIB as f64,
        a.plan_share,
        capacity.cpu_millis / 1000,
        capacity.memory_bytes as f64 / GIB as f64,
        empty.steps(),
        a.step_ms,
        hours(requested),
        100.0 * requested as f64 / plan_bundle_ms.max(1) as f64,
    );
    js.insert(
        "setup".into(),
        json!({
            "jobs": jobs.len(), "reservations": res.len(), "seed": a.seed, "deadline_share": a.deadline_share,
            "slack": [a.slack.0, a.slack.1], "max_parallel": a.max_parallel, "nodes": a.nodes,
            "node_cores": a.node_cores, "node_mem_bytes": a.node_mem, "plan_share": a.plan_share,
            "step_ms": a.step_ms, "steps": empty.steps(), "requested_bundle_hours": hours(requested),
        }),
    );

    // 1. Admission of the whole day.
    let mut runs = Vec::new();
    for agent in AGENTS {
        progress(&format!("admitting {} reservations with {}", res.len(), agent.name()));
        runs.push(admit_all(agent, &empty, &capacity, &res, &a)?);
    }
    let mut rows = Vec::new();
    let mut jrows = Vec::new();
    for run in &runs {
        let ids: Vec<u64> = res.iter().filter(|r| run.accepted[r.id as usize]).map(|r| r.id).collect();
        let work: u128 = res.iter().filter(|r| run.accepted[r.id as usize]).map(|r| r.work_bundle_ms).sum();
        let s = shape(&run.plan, ids.iter().copied(), unit);
        let rejected_orders = res
            .iter()
            .filter(|r| {
                !run.accepted[r.id as usize]
                    && matches!(&r.expr, Expr::Window(w) if matches!(*w.inner, Expr::Order(_)))
            })
            .count();
        let mut lat = run.latency.clone();
        lat.sort_unstable();
        let total: Duration = lat.iter().sum();
        let mean = total / lat.len().max(1) as u32;
        rows.push(vec![
            run.agent.name().to_string(),
            format!("{} / {} ({})", ids.len(), res.len(), pct(ids.len() as f64, res.len() as f64)),
            pct(work as f64, requested as f64),
            format!("{} ({rejected_orders})", res.len() - ids.len()),
            format!("{:.1}", us(mean)),
            format!("{:.1}", us(percentile(&lat, 0.99))),
            format!("{:.1}", us(percentile(&lat, 1.0))),
            s.changes.to_string(),
            s.change_points.to_string(),
            format!("{:.1}", s.changes as f64 / ids.len().max(1) as f64),
            format!("{:.0}", hours(s.bundle_ms)),
        ]);
        jrows.push(json!({
            "agent": run.agent.name(), "accepted": ids.len(), "reservations": res.len(),
            "rejected_map_reduce": rejected_orders,
            "accepted_work_share": work as f64 / requested.max(1) as f64,
            "latency_mean_us": us(mean), "latency_p99_us": us(percentile(&lat, 0.99)),
            "latency_max_us": us(percentile(&lat, 1.0)), "height_changes": s.changes,
            "change_points": s.change_points, "bundle_hours": hours(s.bundle_ms),
            "requested_bundle_hours_accepted": hours(work),
        }));
    }
    let _ = writeln!(out, "## Admission of the day, in arrival order\n");
    out.push_str(&table(
        &[
            "agent",
            "accepted",
            "accepted work",
            "rejected (map+reduce)",
            "latency mean (us)",
            "p99 (us)",
            "max (us)",
            "height changes (bundles)",
            "change points",
            "height changes per accepted",
            "allocated bundle-hours",
        ],
        &rows,
    ));
    let both = res.iter().filter(|r| runs.iter().all(|x| x.accepted[r.id as usize])).count();
    let _ = writeln!(out, "\naccepted by both agents: {both}\n");
    js.insert("admission".into(), Value::Array(jrows));

    // 2. MILP on a one-hour subset.
    let hour = a.milp_hour.unwrap_or_else(|| {
        let mut per_hour = std::collections::BTreeMap::<u64, u128>::new();
        for r in &res {
            *per_hour.entry(r.arrival_ms / HOUR_MS).or_default() += r.work_bundle_ms;
        }
        per_hour.iter().max_by_key(|(h, w)| (**w, std::cmp::Reverse(**h))).map_or(0, |(h, _)| *h)
    });
    let subset: Vec<&Reservation> =
        res.iter().filter(|r| r.arrival_ms / HOUR_MS == hour).take(a.milp_n).collect();
    let opts = Options {
        time_limit: a.milp_time_limit,
        max_cells: a.milp_cells,
        slot_steps: a.milp_slot,
        ..Options::default()
    };
    let mut rows = Vec::new();
    let mut jrows = Vec::new();
    for run in &runs {
        let ids: Vec<u64> = subset.iter().filter(|r| run.accepted[r.id as usize]).map(|r| r.id).collect();
        let time: Duration = subset.iter().map(|r| run.latency[r.id as usize]).sum();
        let before = shape(&run.plan, ids.iter().copied(), unit);
        let requests: Vec<Request> = subset
            .iter()
            .filter(|r| run.accepted[r.id as usize])
            .map(|r| Request { id: r.id, expr: r.expr.clone() })
            .collect();
        progress(&format!(
            "MILP over {} reservations of hour {hour} from {}'s plan",
            requests.len(),
            run.agent.name()
        ));
        let t = Instant::now();
        let o = milp::optimize(&run.plan, &requests, &opts).map_err(|e| format!("milp: {e}"))?;
        let milp_time = t.elapsed();
        let mut after_plan = run.plan.clone();
        o.apply(&mut after_plan).map_err(|e| format!("applying the MILP's answer: {e}"))?;
        let after = shape(&after_plan, ids.iter().copied(), unit);
        let objective =
            if o.stats.kept_input.is_some() { o.stats.input_objective } else { o.stats.objective };
        let moved = o.pieces.iter().filter(|(id, p)| run.plan.pieces(*id) != Some(p.as_slice())).count();
        rows.push(vec![
            run.agent.name().to_string(),
            format!("{} / {}", ids.len(), subset.len()),
            format!("{:.4}", o.stats.input_objective),
            before.changes.to_string(),
            before.change_points.to_string(),
            format!("{:.1}", hours(before.bundle_ms)),
            format!("{:.0} us", us(time)),
            "-".into(),
        ]);
        rows.push(vec![
            format!("MILP from {}", run.agent.name()),
            format!("{} / {} ({} moved, {} rejected)", after.held, subset.len(), moved, o.rejected.len()),
            format!("{objective:.4}"),
            after.changes.to_string(),
            after.change_points.to_string(),
            format!("{:.1}", hours(after.bundle_ms)),
            format!("{:.2} s", milp_time.as_secs_f64()),
            format!(
                "slot {} steps, {} cells, {}{}",
                o.stats.slot_steps,
                o.stats.cells,
                if o.stats.optimal { "optimal" } else { "not proved optimal" },
                o.stats.kept_input.as_ref().map_or(String::new(), |w| format!("; input kept: {w}"))
            ),
        ]);
        jrows.push(json!({
            "agent": run.agent.name(), "hour": hour, "subset": subset.len(), "accepted": ids.len(),
            "agent_objective": o.stats.input_objective, "agent_height_changes": before.changes,
            "agent_change_points": before.change_points, "agent_bundle_hours": hours(before.bundle_ms),
            "agent_time_us": us(time), "milp_objective": objective, "milp_height_changes": after.changes,
            "milp_change_points": after.change_points, "milp_bundle_hours": hours(after.bundle_ms),
            "milp_time_s": milp_time.as_secs_f64(), "milp_solve_time_s": o.stats.solve_time.as_secs_f64(),
            "milp_moved": moved, "milp_rejected": o.rejected.len(), "slot_steps": o.stats.slot_steps,
            "cells": o.stats.cells, "optimal": o.stats.optimal, "kept_input": o.stats.kept_input,
        }));
    }
    let _ = writeln!(
        out,
        "## MILP on a subset: the first {} deadline reservations arriving in hour {hour} ({} in all), time limit {:?}, at most {} cells\n",
        subset.len(),
        res.iter().filter(|r| r.arrival_ms / HOUR_MS == hour).count(),
        a.milp_time_limit,
        a.milp_cells
    );
    out.push_str(&table(
        &[
            "layout",
            "held",
            "objective (MILP cost)",
            "height changes",
            "change points",
            "bundle-hours",
            "planning time",
            "model",
        ],
        &rows,
    ));
    out.push('\n');
    js.insert("milp".into(), Value::Array(jrows));

    // 3. Capacity loss: a REPLAN call at the loss to a new plugin instance per replanner.
    let loss_step = empty.step_at_or_after(a.loss_at_ms);
    let loss_ms = empty.ms_of(loss_step);
    let reduced = share_of(&capacity, 1.0 - a.loss_share);
    let mut rows = Vec::new();
    let mut jrows = Vec::new();
    let mut after_plans: Vec<(String, Plan)> = Vec::new();
    for run in &runs {
        let running = run
            .host
            .records()
            .iter()
            .filter(|r| {
                r.allocation.iter().any(|p| p.start_ms < loss_ms)
                    && r.allocation.iter().any(|p| p.end_ms > loss_ms)
            })
            .count();
        let held_before = shape(&run.plan, run.plan.reservation_ids().collect::<Vec<_>>(), unit);
        for (name, replanner) in [("gantry replan", "rayon"), ("YARN simple (delete newest)", "yarn-simple")]
        {
            progress(&format!("{name} on {}'s plan", run.agent.name()));
            let config = format!(r#"{{"agent": "{}", "replanner": "{replanner}"}}"#, agent_name(run.agent));
            let mut host = run.host.fork(Mode::Direct, &config)?;
            host.now_ms = loss_ms;
            host.capacity = reduced;
            let answer = host.call(GANTRY_RESERVE_REPLAN, GANTRY_NONE)?;
            let time = answer.elapsed;
            let id_of = |i: u32| host.records().get(i as usize).map(|r| r.id);
            let moved_ids: Vec<u64> = answer
                .decisions
                .iter()
                .filter(|d| d.kind == GANTRY_DECISION_PLAN_RESERVATION)
                .filter_map(|d| id_of(d.subject))
                .collect();
            let rejected: Vec<u64> = answer
                .decisions
                .iter()
                .filter(|d| d.kind == GANTRY_DECISION_REJECT_RESERVATION)
                .filter_map(|d| id_of(d.subject))
                .collect();
            let report = host.plugin().and_then(|p| p.last_replan().cloned()).unwrap_or_default();
            host.apply(&answer, GANTRY_RESERVE_REPLAN);
            let p = plan_of(host.records(), &empty, Some((loss_step, &reduced)))?;
            let rejected_bms: u128 = rejected
                .iter()
                .filter_map(|id| run.plan.pieces(*id))
                .map(|p| bundle_ms(p, unit, run.plan.step_ms()))
                .sum();
            let after = shape(&p, p.reservation_ids().collect::<Vec<_>>(), unit);
            let moved_before = shape(&run.plan, moved_ids.iter().copied(), unit);
            let moved_after = shape(&p, moved_ids.iter().copied(), unit);
            let stayed = report.affected.saturating_sub(moved_ids.len() + rejected.len());
            let fits = !report.overcommitted && p.overcommitted().is_none();
            rows.push(vec![
                run.agent.name().to_string(),
                name.to_string(),
                report.affected.to_string(),
                stayed.to_string(),
                moved_ids.len().to_string(),
                rejected.len().to_string(),
                format!("{:.1}", hours(rejected_bms)),
                format!("{:+}", moved_after.changes as i64 - moved_before.changes as i64),
                format!("{:.0}", hours(after.bundle_ms)),
                format!("{:.1} ms", time.as_secs_f64() * 1e3),
                if fits { "yes" } else { "no" }.to_string(),
            ]);
            jrows.push(json!({
                "agent": run.agent.name(), "replanner": name, "strategy": report.strategy,
                "affected": report.affected, "stayed": stayed, "moved": moved_ids.len(),
                "rejected": rejected.len(), "rejected_bundle_hours": hours(rejected_bms),
                "moved_height_changes_delta": moved_after.changes as i64 - moved_before.changes as i64,
                "bundle_hours_before": hours(held_before.bundle_ms), "bundle_hours_after": hours(after.bundle_ms),
                "time_ms": time.as_secs_f64() * 1e3, "fits": fits,
                "running_at_loss": running,
            }));
            if replanner == "rayon" {
                out_strategy(&mut rows, report.strategy);
            }
            after_plans.push((format!("{} + {name}", run.agent.name()), p));
        }
    }
    let _ = writeln!(
        out,
        "## Capacity loss: {} % of the plan's capacity lost from {:.2} h to the end (a REPLAN call); reservations started before it keep their past\n",
        a.loss_share * 100.0,
        loss_ms as f64 / HOUR_MS as f64
    );
    out.push_str(&table(
        &[
            "plan",
            "replanner",
            "affected",
            "stayed",
            "moved",
            "rejected",
            "bundle-hours rejected",
            "height changes of moved (delta)",
            "bundle-hours after",
            "time",
            "fits",
        ],
        &rows,
    ));
    js.insert("capacity_loss".into(), Value::Array(jrows));

    // 4. Skyline.
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let mut series: Vec<(String, &Plan)> =
            runs.iter().map(|r| (r.agent.name().to_string(), &r.plan)).collect();
        series.extend(after_plans.iter().map(|(n, p)| (n.clone(), p)));
        let (csv, svg) = skyline::skyline(&empty, &series, loss_step, a.step_ms, a.loss_share);
        let csv_path = dir.join("skyline.csv");
        std::fs::write(&csv_path, csv).map_err(|e| format!("writing {}: {e}", csv_path.display()))?;
        let svg_path = dir.join("skyline.svg");
        std::fs::write(&svg_path, svg).map_err(|e| format!("writing {}: {e}", svg_path.display()))?;
    }
    let _ = writeln!(out, "\nwall time {:.1} s", wall.elapsed().as_secs_f64());
    print!("{out}");
    if let Some(path) = &a.json {
        js.insert("wall_s".into(), json!(wall.elapsed().as_secs_f64()));
        let text = serde_json::to_string_pretty(&Value::Object(js))?;
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Appends the winning strategy to the last row's replanner name.
fn out_strategy(rows: &mut [Vec<String>], strategy: &str) {
    if let Some(row) = rows.last_mut() {
        row[1] = format!("{} ({strategy})", row[1]);
    }
}
