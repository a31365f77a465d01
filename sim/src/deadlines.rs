//! Deadline jobs with Rayon reservations (issue 9's SWIM experiment; seed 001).
//!
//! A run may turn a share of its jobs into **deadline jobs**: production jobs that must finish
//! by a deadline and, with reservations on, ask the Rayon planner for capacity first. The rest
//! are **best-effort** jobs. The rules, all here and all seeded:
//!
//! - **Which jobs** ([`pick`]): a SplitMix64 generator ([`gantry_sdk::rng`]) seeded with
//!   [`DeadlineOptions::seed`] draws one number in `[0, 1)` per job, in trace order (sorted by
//!   submission); a job is a deadline job when its number is below [`DeadlineOptions::share`]
//!   and it can run on the cluster at all. One draw per job, picked or not, so the same seed
//!   picks the same jobs whatever the other options.
//! - **Ideal run time** ([`ideal_ms`]): the job's critical path on the whole cluster, empty:
//!   its stages one after another, each in `ceil(count / slots)` waves of its task duration,
//!   `slots` being how many of the stage's containers the cluster's nodes hold at once.
//! - **Deadline** = arrival + `slack` × ideal, rounded up to the ms.
//! - **Reservation** ([`definition`]): one RDL atom per stage — bundle = the stage's container,
//!   `g = 1` (`g = count` for a gang stage), `h` = task count, `l` = task duration,
//!   `w` = count × duration — chained by `order` (stages run one after another) inside
//!   `window(0, deadline − arrival − margin)`, times relative to the arrival. It is submitted to
//!   the plan queue ([`DeadlineOptions::queue`]) `lead_ms` before the job's arrival (default 0:
//!   at the arrival, just before the job's first stage), with priority 0.
//! - **Queues** ([`assign`]): deadline jobs are submitted to the plan queue; if their
//!   reservation was admitted, the simulator submits each of their stages to the queue the
//!   engine answered (`<plan>.reservation_<id>`) while the reservation lasts, and to the plan
//!   queue (which the engine maps to `<plan>.default`) once it has ended. A rejected (or
//!   refused) reservation's job runs best-effort in the plan queue, as a YARN client would
//!   submit it without a reservation. Best-effort jobs go to [`DeadlineOptions::best_effort_queue`].
//!   Without reservations (the baseline), deadline jobs are plain jobs of the plan queue,
//!   which is then an ordinary capacity queue.
//! - **Node losses** ([`lose_nodes`]): `round(share × nodes)` nodes (at least one for a positive
//!   share), chosen by a seeded shuffle, fail for good at one instant.
//!
//! [`summarise`] turns a run's result into the figures of the experiment; [`write`] writes
//! them (`deadlines.json`, and `deadlines.csv` with one line per deadline job).

use crate::sim::{JobOutcome, NodeFailure, SimResult};
use crate::trace::Job;
use gantry_engine::{NodeSpec, ReservationEnd, ReservationRequest, Resources};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::rng::SplitMix64;
use std::fmt::Write as _;
use std::path::Path;

/// How deadline jobs are chosen and served.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadlineOptions {
    /// Share of the jobs that become deadline jobs, in `[0, 1]`.
    pub share: f64,
    /// Deadline = arrival + `slack` × ideal run time; at least 1.
    pub slack: f64,
    /// Seed of the choice.
    pub seed: u64,
    /// The queue deadline jobs go to: the plan queue with reservations, a capacity queue
    /// without.
    pub queue: String,
    /// The queue best-effort jobs go to.
    pub best_effort_queue: String,
    /// Submit a reservation for each deadline job (needs the engine's plan on `queue`).
    pub reserve: bool,
    /// The reservation is submitted this long before the job arrives (0: at its arrival), ms.
    pub lead_ms: u64,
    /// The reservation's window ends this long before the deadline, ms (0: at the deadline).
    pub margin_ms: u64,
}

impl DeadlineOptions {
    /// `share` of the jobs with deadlines at `slack` × their ideal run time, in `queue`, the
    /// others in `best_effort_queue`; reservations on, submitted at arrival, no margin, seed 1.
    pub fn new(share: f64, slack: f64, queue: &str, best_effort_queue: &str) -> Self {
        DeadlineOptions {
            share,
            slack,
            seed: 1,
            queue: queue.to_owned(),
            best_effort_queue: best_effort_queue.to_owned(),
            reserve: true,
            lead_ms: 0,
            margin_ms: 0,
        }
    }

    /// Refuses a share outside `[0, 1]`, a slack below 1 or not finite, empty queue names.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.share) {
            return Err(format!("the deadline share {} is not in [0, 1]", self.share));
        }
        if !self.slack.is_finite() || self.slack < 1.0 {
            return Err(format!(
                "the deadline slack {} must be a finite number of at least 1 (a deadline before the ideal run time cannot be met)",
                self.slack
            ));
        }
        if self.queue.is_empty() || self.best_effort_queue.is_empty() {
            return Err("the deadline and best-effort queues must be named".into());
        }
        Ok(())
    }
}

/// A job chosen to have a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineJob {
    /// Index into the jobs.
    pub job: usize,
    /// Its ideal run time, ms.
    pub ideal_ms: u64,
    /// Its deadline, ms.
    pub deadline_ms: u64,
}

/// A reservation the simulator submits for a deadline job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReservation {
    /// Index into the jobs.
    pub job: usize,
    /// When it is submitted, ms.
    pub at_ms: u64,
    /// What is submitted.
    pub request: ReservationRequest,
}

/// How the planner answered a job's reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservationAnswer {
    /// Not submitted yet (the run ended first).
    NotSubmitted,
    /// Admitted; the job's stages go to `queue` while it lasts.
    Admitted {
        /// Its id.
        id: u64,
        /// Its queue.
        queue: String,
    },
    /// No room in the plan.
    Rejected(String),
    /// The engine refused the request (e.g. its window is shorter than the work).
    Refused(String),
}

/// What happened to a job's reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReservationRecord {
    /// Index into the jobs.
    pub job: usize,
    /// The answer.
    pub answer: ReservationAnswer,
    /// Times it was moved by a replan (or an optimiser).
    pub replanned: u32,
    /// When and why it left the plan.
    pub ended: Option<(u64, ReservationEnd)>,
}

/// The most containers of `r` that `capacity` holds at once (`u64::MAX` for an empty `r`).
fn fits(capacity: &Resources, r: &Resources) -> u64 {
    let dims = [
        (capacity.cpu_millis, r.cpu_millis),
        (capacity.memory_bytes, r.memory_bytes),
        (u64::from(capacity.gpus), u64::from(r.gpus)),
    ];
    dims.iter().filter(|(_, need)| *need > 0).map(|(have, need)| have / need).min().unwrap_or(u64::MAX)
}

/// The job's ideal run time on `nodes`, empty: its stages one after another, each in
/// `ceil(count / slots)` waves of its (fast) duration; a gang stage in one wave. `None` if a
/// stage fits nowhere (or a gang is larger than the cluster).
pub fn ideal_ms(job: &Job, nodes: &[NodeSpec]) -> Option<u64> {
    let mut total = 0u64;
    for s in &job.stages {
        let slots: u64 = nodes.iter().map(|n| fits(&n.capacity, &s.resources).min(u64::from(u32::MAX))).sum();
        let count = u64::from(s.count);
        if slots == 0 || (s.gang && count > slots) {
            return None;
        }
        let waves = if s.gang { 1 } else { count.div_ceil(slots) };
        total = total.saturating_add(waves.saturating_mul(s.duration_ms));
    }
    Some(total)
}

/// Chooses the deadline jobs (see the module documentation).
pub fn pick(jobs: &[Job], nodes: &[NodeSpec], options: &DeadlineOptions) -> Vec<DeadlineJob> {
    let mut rng = SplitMix64::new(options.seed);
    let mut out = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let draw = rng.unit();
        if draw >= options.share {
            continue;
        }
        let Some(ideal) = ideal_ms(job, nodes) else { continue };
        let window = (ideal as f64 * options.slack).ceil();
        let window = if window >= u64::MAX as f64 { u64::MAX } else { window as u64 };
        out.push(DeadlineJob { job: i, ideal_ms: ideal, deadline_ms: job.submit_ms.saturating_add(window) });
    }
    out
}

/// The RDL expression of `job` within `window(0, window_ms)`: one atom per stage, in `order`.
pub fn definition(job: &Job, window_ms: u64) -> Expr {
    let atoms: Vec<Expr> = job
        .stages
        .iter()
        .map(|s| {
            let g = if s.gang { s.count.max(1) } else { 1 };
            Expr::Atom(Atom {
                bundle: s.resources,
                min_parallel: g,
                max_parallel: s.count.max(1),
                min_lease_ms: s.duration_ms.max(1),
                work: u64::from(s.count.max(1)).saturating_mul(s.duration_ms.max(1)),
            })
        })
        .collect();
    let inner = if atoms.len() == 1 {
        atoms.into_iter().next().unwrap_or(Expr::Order(Vec::new()))
    } else {
        Expr::Order(atoms)
    };
    Expr::Window(Window { start_ms: 0, end_ms: window_ms, inner: Box::new(inner) })
}

/// Sets every job's queue (deadline jobs to the plan queue, the others to the best-effort
/// queue) and returns the reservations to submit (none without [`DeadlineOptions::reserve`]).
pub fn assign(jobs: &mut [Job], picks: &[DeadlineJob], options: &DeadlineOptions) -> Vec<JobReservation> {
    for job in jobs.iter_mut() {
        job.queue.clone_from(&options.best_effort_queue);
    }
    let mut out = Vec::new();
    for p in picks {
        let job = &mut jobs[p.job];
        job.queue.clone_from(&options.queue);
        if !options.reserve {
            continue;
        }
        let window = p.deadline_ms.saturating_sub(job.submit_ms).saturating_sub(options.margin_ms);
        out.push(JobReservation {
            job: p.job,
            at_ms: job.submit_ms.saturating_sub(options.lead_ms),
            request: ReservationRequest {
                queue: options.queue.clone(),
                name: job.name.clone(),
                user: job.user.clone(),
                priority: 0,
                arrival_ms: Some(job.submit_ms),
                deadline_ms: Some(job.submit_ms.saturating_add(window.max(1))),
                definition: definition(job, window.max(1)),
            },
        });
    }
    out
}

/// Nodes that fail for good at `at_ms`: `round(share × nodes)` of them (at least one for a
/// positive share), chosen by a Fisher–Yates shuffle seeded with `seed`.
pub fn lose_nodes(nodes: &[NodeSpec], share: f64, at_ms: u64, seed: u64) -> Result<Vec<NodeFailure>, String> {
    if !(0.0..=1.0).contains(&share) {
        return Err(format!("the share of nodes to lose {share} is not in [0, 1]"));
    }
    let n = nodes.len();
    let k = if share > 0.0 { ((share * n as f64).round() as usize).clamp(1, n) } else { 0 };
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut chosen: Vec<usize> = order.into_iter().take(k).collect();
    chosen.sort_unstable();
    Ok(chosen
        .into_iter()
        .map(|i| NodeFailure { node: nodes[i].name.clone(), at_ms, back_at_ms: None })
        .collect())
}

/// The experiment's figures for one run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeadlineSummary {
    /// Jobs in the run.
    pub jobs: usize,
    /// Deadline jobs.
    pub deadline_jobs: usize,
    /// Reservations submitted.
    pub reservations: usize,
    /// Admitted by the planner.
    pub admitted: usize,
    /// Rejected by the planner (no room).
    pub rejected: usize,
    /// Refused by the engine as invalid.
    pub refused: usize,
    /// `admitted / deadline_jobs` (with reservations).
    pub accepted_share: f64,
    /// Admitted reservations that a replan later removed.
    pub replan_rejected: usize,
    /// Admitted jobs that completed by their deadline.
    pub admitted_met: usize,
    /// `admitted_met / admitted`.
    pub admitted_met_share: f64,
    /// Admitted jobs whose reservation was never removed by a replan.
    pub kept: usize,
    /// Of those, completed by their deadline.
    pub kept_met: usize,
    /// `kept_met / kept`.
    pub kept_met_share: f64,
    /// Deadline jobs without an admitted reservation (rejected, refused, or no reservations
    /// at all) that still met their deadline.
    pub unreserved_met: usize,
    /// All deadline jobs that met their deadline.
    pub deadline_met: usize,
    /// `deadline_met / deadline_jobs`.
    pub deadline_met_share: f64,
    /// Best-effort jobs (not deadline jobs) and those of them that completed.
    pub best_effort_jobs: usize,
    /// Best-effort jobs completed.
    pub best_effort_completed: usize,
    /// Mean completion time of the completed best-effort jobs, s.
    pub best_effort_mean_s: f64,
    /// 95th percentile (nearest rank), s.
    pub best_effort_p95_s: f64,
    /// Time-averaged allocated share of the cluster's CPU.
    pub cpu_utilisation: f64,
    /// Containers preempted.
    pub preemptions: u64,
    /// Replans: reservations moved (`ReservationReplanned` commands).
    pub replan_moved: u64,
    /// Reservations removed by replans (`ReservationEnded { Replanned }`).
    pub replan_removed: u64,
    /// Nodes lost.
    pub nodes_lost: usize,
    /// The plan (samples, runs with reservations): mean capacity, cores.
    pub plan_capacity_cores: f64,
    /// Mean share of the plan's capacity reserved.
    pub plan_reserved_mean: f64,
    /// Largest share of the plan's capacity reserved at a sample.
    pub plan_reserved_peak: f64,
    /// Share of the samples at which the next hour's peak reservation exceeded 95 % of the
    /// capacity: when losing 5 % of the plan would have forced a replan.
    pub plan_exposed_to_5pct_loss: f64,
    /// Mean share of the reserved capacity the reservations' queues used (their jobs ran
    /// early, or finished early).
    pub plan_reserved_used: f64,
    /// Virtual time at the end, s.
    pub end_s: f64,
}

fn share(n: usize, d: usize) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// Whether deadline job `p` completed by its deadline in `result`.
pub fn met(result: &SimResult, p: &DeadlineJob) -> bool {
    result
        .jobs
        .get(p.job)
        .is_some_and(|j| j.outcome == JobOutcome::Completed && j.end_ms.is_some_and(|e| e <= p.deadline_ms))
}

/// The figures of a run whose deadline jobs were `picks`.
pub fn summarise(result: &SimResult, picks: &[DeadlineJob], nodes_lost: usize) -> DeadlineSummary {
    let records: std::collections::HashMap<usize, &JobReservationRecord> =
        result.job_reservations.iter().map(|r| (r.job, r)).collect();
    let admitted_of = |p: &DeadlineJob| {
        records.get(&p.job).is_some_and(|r| matches!(r.answer, ReservationAnswer::Admitted { .. }))
    };
    let removed_of = |p: &DeadlineJob| {
        records.get(&p.job).is_some_and(|r| matches!(r.ended, Some((_, ReservationEnd::Replanned))))
    };
    let count = |f: &dyn Fn(&DeadlineJob) -> bool| picks.iter().filter(|p| f(p)).count();
    let admitted = count(&|p| admitted_of(p));
    let admitted_met = count(&|p| admitted_of(p) && met(result, p));
    let kept = count(&|p| admitted_of(p) && !removed_of(p));
    let kept_met = count(&|p| admitted_of(p) && !removed_of(p) && met(result, p));
    let deadline_met = count(&|p| met(result, p));
    let answers = |f: &dyn Fn(&ReservationAnswer) -> bool| {
        result.job_reservations.iter().filter(|r| f(&r.answer)).count()
    };
    let is_deadline: std::collections::HashSet<usize> = picks.iter().map(|p| p.job).collect();
    let mut be: Vec<u64> = Vec::new();
    let mut best_effort_jobs = 0;
    for (i, j) in result.jobs.iter().enumerate() {
        if is_deadline.contains(&i) {
            continue;
        }
        best_effort_jobs += 1;
        if j.outcome == JobOutcome::Completed {
            if let Some(c) = j.completion_ms() {
                be.push(c);
            }
        }
    }
    be.sort_unstable();
    let plan = &result.plan;
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mean_of = |f: &dyn Fn(&crate::sim::PlanSample) -> f64| {
        if plan.is_empty() { 0.0 } else { plan.iter().map(f).sum::<f64>() / plan.len() as f64 }
    };
    let mean = if be.is_empty() { 0.0 } else { be.iter().sum::<u64>() as f64 / be.len() as f64 / 1000.0 };
    let p95 = if be.is_empty() {
        0.0
    } else {
        let rank = ((0.95 * be.len() as f64).ceil() as usize).clamp(1, be.len());
        be[rank - 1] as f64 / 1000.0
    };
    DeadlineSummary {
        jobs: result.jobs.len(),
        deadline_jobs: picks.len(),
        reservations: answers(&|a| !matches!(a, ReservationAnswer::NotSubmitted)),
        admitted,
        rejected: answers(&|a| matches!(a, ReservationAnswer::Rejected(_))),
        refused: answers(&|a| matches!(a, ReservationAnswer::Refused(_))),
        accepted_share: share(admitted, picks.len()),
        replan_rejected: count(&|p| admitted_of(p) && removed_of(p)),
        admitted_met,
        admitted_met_share: share(admitted_met, admitted),
        kept,
        kept_met,
        kept_met_share: share(kept_met, kept),
        unreserved_met: count(&|p| !admitted_of(p) && met(result, p)),
        deadline_met,
        deadline_met_share: share(deadline_met, picks.len()),
        best_effort_jobs,
        best_effort_completed: be.len(),
        best_effort_mean_s: mean,
        best_effort_p95_s: p95,
        cpu_utilisation: result.utilisation[0],
        preemptions: result.preemptions,
        replan_moved: result.replans.0,
        replan_removed: result.replans.1,
        nodes_lost,
        plan_capacity_cores: if plan.is_empty() {
            0.0
        } else {
            plan.iter().map(|p| p.capacity_cpu as f64).sum::<f64>() / plan.len() as f64 / 1000.0
        },
        plan_reserved_mean: mean_of(&|p| ratio(p.reserved_cpu, p.capacity_cpu)),
        plan_reserved_peak: plan.iter().map(|p| ratio(p.reserved_cpu, p.capacity_cpu)).fold(0.0, f64::max),
        plan_exposed_to_5pct_loss: mean_of(&|p| {
            if p.reserved_next_hour_cpu as f64 > 0.95 * p.capacity_cpu as f64 { 1.0 } else { 0.0 }
        }),
        plan_reserved_used: {
            let reserved: u64 = plan.iter().map(|p| p.reserved_cpu).sum();
            let used: u64 = plan.iter().map(|p| p.used_cpu.min(p.reserved_cpu)).sum();
            ratio(used, reserved)
        },
        end_s: result.end_ms as f64 / 1000.0,
    }
}

/// Writes `deadlines.json` (the summary) and `deadlines.csv` (one line per deadline job) to
/// `dir`.
pub fn write(
    dir: &Path,
    jobs: &[Job],
    result: &SimResult,
    picks: &[DeadlineJob],
    summary: &DeadlineSummary,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(summary).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("deadlines.json"), json + "\n")?;
    let records: std::collections::HashMap<usize, &JobReservationRecord> =
        result.job_reservations.iter().map(|r| (r.job, r)).collect();
    let mut csv = String::from(
        "job,arrival_s,ideal_s,deadline_s,reservation,answer,replanned,ended,end_s,outcome,met\n",
    );
    let secs = |ms: u64| ms as f64 / 1000.0;
    for p in picks {
        let (Some(job), Some(rec)) = (jobs.get(p.job), result.jobs.get(p.job)) else { continue };
        let r = records.get(&p.job);
        let (id, answer) = match r.map(|r| &r.answer) {
            None => (String::new(), "none"),
            Some(ReservationAnswer::NotSubmitted) => (String::new(), "not_submitted"),
            Some(ReservationAnswer::Admitted { id, .. }) => (id.to_string(), "admitted"),
            Some(ReservationAnswer::Rejected(_)) => (String::new(), "rejected"),
            Some(ReservationAnswer::Refused(_)) => (String::new(), "refused"),
        };
        let ended = match r.and_then(|r| r.ended) {
            None => String::new(),
            Some((t, why)) => format!("{}@{}", format!("{why:?}").to_lowercase(), secs(t)),
        };
        let outcome = serde_json::to_value(rec.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{}",
            crate::report::csv_field(&job.name),
            secs(job.submit_ms),
            secs(p.ideal_ms),
            secs(p.deadline_ms),
            id,
            answer,
            r.map_or(0, |r| r.replanned),
            ended,
            rec.end_ms.map_or_else(String::new, |e| secs(e).to_string()),
            outcome,
            met(result, p)
        );
    }
    std::fs::write(dir.join("deadlines.csv"), csv)?;
    if !result.plan.is_empty() {
        std::fs::write(dir.join("plan.csv"), plan_csv(result))?;
        std::fs::write(dir.join("plan.svg"), plan_svg(result))?;
    }
    Ok(())
}

/// `plan.csv`: the Rayon plan at each sample (cores).
pub fn plan_csv(result: &SimResult) -> String {
    let mut out =
        String::from("t_s,capacity_cores,reserved_cores,reserved_next_hour_cores,used_cores,reservations\n");
    let cores = |m: u64| m as f64 / 1000.0;
    for p in &result.plan {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{}",
            p.t_ms as f64 / 1000.0,
            cores(p.capacity_cpu),
            cores(p.reserved_cpu),
            cores(p.reserved_next_hour_cpu),
            cores(p.used_cpu),
            p.reservations
        );
    }
    out
}

/// `plan.svg`: the plan's skyline as the run went — its capacity, what its reservations hold,
/// and what their queues used, in cores.
pub fn plan_svg(result: &SimResult) -> String {
    let pick = |f: fn(&crate::sim::PlanSample) -> u64| -> Vec<(f64, f64)> {
        result.plan.iter().map(|p| (p.t_ms as f64 / 1000.0, f(p) as f64 / 1000.0)).collect()
    };
    let top =
        result.plan.iter().map(|p| p.capacity_cpu.max(p.reserved_cpu).max(p.used_cpu)).max().unwrap_or(0);
    let series = [
        ("capacity", "#7f7f7f", pick(|p| p.capacity_cpu)),
        ("reserved", "#1f77b4", pick(|p| p.reserved_cpu)),
        ("used by reservations", "#d62728", pick(|p| p.used_cpu)),
    ];
    crate::report::line_plot(
        "Rayon plan: capacity, reserved and used",
        "time (s)",
        "cores",
        (top as f64 / 1000.0).max(1.0),
        &series,
    )
}
