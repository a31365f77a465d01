//! Deadline jobs with reservations in the simulator (`gantry_sim::deadlines`): the rules (ideal
//! run time, which jobs, the RDL, lost nodes) on hand-checkable inputs, and whole runs through
//! the real engine with its plan and a planner plugin — the engine's test planner, latest fit
//! (late, as GREE), linked statically; the Rayon planner itself is a plugin of its own
//! (`libgantry_rayon.so`, tested in plugins/rayon and by `gantry sim --reservations`). A
//! reserved job meets its deadline although best-effort work had borrowed the whole cluster
//! (thanks to the preemption plugin, linked statically), a rejected reservation's job runs
//! best-effort in the plan's default queue, and losing a node re-plans (the planner moves the
//! reservation; when the planner's answer is unusable, the engine's YARN replanner deletes it).

use gantry_engine::test_planner::{Handle, Mode, TestPlanner};
use gantry_engine::{
    Engine, EngineConfig, NodeSpec, PlanConfig, Policy, Profile, QueueSpec, RackAffinity, ReservationEnd,
    Resources, StaticPolicy,
};
use gantry_preemption::Preemption;
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GANTRY_RESERVE_REPLAN;
use gantry_sim::deadlines::{
    self, DeadlineJob, DeadlineOptions, ReservationAnswer, definition, ideal_ms, lose_nodes, pick,
};
use gantry_sim::sim::{DaemonOptions, JobOutcome, NodeFailure, SimOptions, SimResult, run};
use gantry_sim::trace::{Job, Stage};

const S: u64 = 1_000;
const GIB: u64 = 1 << 30;
const SLOT: Resources = Resources::new(1000, GIB, 0);
const PLAN: &str = "root.prod";
const ADHOC: &str = "root.adhoc";

fn nodes(n: usize, cores: u64) -> Vec<NodeSpec> {
    (0..n)
        .map(|i| NodeSpec {
            name: format!("n{i}"),
            rack: "r0".into(),
            labels: Vec::new(),
            capacity: Resources::new(cores * 1000, cores * GIB, 0),
            gpu_list: Vec::new(),
        })
        .collect()
}

fn stage(count: u32, duration_ms: u64) -> Stage {
    Stage {
        resources: SLOT,
        count,
        gang: false,
        selector: Vec::new(),
        preferred: Vec::new(),
        rack_affinity: RackAffinity::None,
        duration_ms,
        slow_duration_ms: duration_ms,
    }
}

fn job(name: &str, at_ms: u64, stages: Vec<Stage>) -> Job {
    Job {
        name: name.into(),
        submit_ms: at_ms,
        queue: "root.default".into(),
        user: "u".into(),
        class: "mapreduce".into(),
        priority: 0,
        stages,
        time_limit_ms: None,
    }
}

/// YARN-style preemption made fast: a round every second, the whole imbalance at once, no
/// dead zone, no wait before the kill (250 ms grace).
const FAST_PREEMPTION: &str = r#"{"monitoring_interval_ms": 1000, "max_wait_before_kill_ms": 0,
    "total_preemption_per_round": 1.0, "natural_termination_factor": 1.0,
    "max_ignored_over_capacity": 0.0, "kill_grace_ms": 250}"#;

/// How a capacity loss is re-planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replanner {
    /// The planner re-places what no longer fits.
    Planner,
    /// The planner answers nothing usable, so the engine's built-in, YARN's simple replanner,
    /// deletes the newest until the plan fits.
    YarnSimple,
}

/// `root.prod` and `root.adhoc`, half the cluster each, both allowed the whole cluster; the
/// plan on `root.prod` (1 s steps, the test planner, latest fit) unless `plan` is `None`; the
/// preemption plugin (`order` and `rebalance`) if `preemption`.
fn engine(plan: Option<Replanner>, preemption: bool) -> Engine {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: PLAN.into(), guaranteed: 0.5, maximum: 1.0 },
            QueueSpec { path: ADHOC.into(), guaranteed: 0.5, maximum: 1.0 },
        ],
        rebalance_interval_ms: 1_000,
        reservations: plan.map(|_| PlanConfig::new(PLAN)),
        ..EngineConfig::default()
    };
    let mut policies: Vec<Box<dyn Policy>> = Vec::new();
    let mut profile = Profile::default();
    if preemption {
        policies.push(Box::new(StaticPolicy::<Preemption>::create(FAST_PREEMPTION).expect("settings")));
        profile = Profile { order: Some(0), rebalance: Some(0), ..Profile::default() };
    }
    if let Some(replanner) = plan {
        let (planner, handle): (TestPlanner, Handle) = TestPlanner::latest();
        if replanner == Replanner::YarnSimple {
            handle.set(Mode::Tamper(Box::new(|view, out| {
                if view.plan.cause == GANTRY_RESERVE_REPLAN {
                    out.clear();
                }
            })));
        }
        profile.reserve = Some(policies.len());
        policies.push(Box::new(StaticPolicy::new(planner)));
    }
    Engine::new(config, policies, profile).expect("engine")
}

/// Deadline options: `slack` × ideal, reservations on, the window ending `margin_ms` early.
fn options(share: f64, slack: f64, reserve: bool, margin_ms: u64) -> DeadlineOptions {
    DeadlineOptions { reserve, margin_ms, ..DeadlineOptions::new(share, slack, PLAN, ADHOC) }
}

/// Runs `jobs` with the deadline jobs `which` (indexes) at `slack`.
fn simulate(
    engine: &mut dyn FnMut() -> Result<Engine, String>,
    cluster: &[NodeSpec],
    mut jobs: Vec<Job>,
    which: &[usize],
    opts: &DeadlineOptions,
    failures: Vec<NodeFailure>,
) -> (SimResult, Vec<DeadlineJob>) {
    let picks: Vec<DeadlineJob> = which
        .iter()
        .map(|&i| {
            let ideal = ideal_ms(&jobs[i], cluster).expect("fits");
            DeadlineJob {
                job: i,
                ideal_ms: ideal,
                deadline_ms: jobs[i].submit_ms + (ideal as f64 * opts.slack) as u64,
            }
        })
        .collect();
    let job_reservations = deadlines::assign(&mut jobs, &picks, opts);
    let sim_options = SimOptions { job_reservations, failures, ..SimOptions::default() };
    let result = run(engine, cluster, &jobs, &sim_options).expect("run");
    (result, picks)
}

#[test]
fn the_ideal_run_time_is_the_critical_path_on_the_empty_cluster() {
    // 4 slots of 1 core: 10 maps of 5 s take 3 waves (15 s), then 2 reduces of 3 s: 18 s.
    let cluster = nodes(2, 2);
    let j = job("mr", 0, vec![stage(10, 5 * S), stage(2, 3 * S)]);
    assert_eq!(ideal_ms(&j, &cluster), Some(18 * S));
    // A container no node holds: no ideal run time, never a deadline job.
    let mut big = stage(1, S);
    big.resources = Resources::new(3000, GIB, 0);
    assert_eq!(ideal_ms(&job("big", 0, vec![big]), &cluster), None);
    // A gang runs in one wave, or not at all.
    let mut gang = stage(4, 7 * S);
    gang.gang = true;
    assert_eq!(ideal_ms(&job("gang", 0, vec![gang.clone()]), &cluster), Some(7 * S));
    gang.count = 5;
    assert_eq!(ideal_ms(&job("gang5", 0, vec![gang]), &cluster), None);
}

#[test]
fn the_reservation_has_one_atom_per_stage_in_order_inside_the_window() {
    let j = job("mr", 0, vec![stage(10, 5 * S), stage(2, 3 * S)]);
    let atom = |h: u32, l: u64| {
        Expr::Atom(Atom {
            bundle: SLOT,
            min_parallel: 1,
            max_parallel: h,
            min_lease_ms: l,
            work: u64::from(h) * l,
        })
    };
    let want = Expr::Window(Window {
        start_ms: 0,
        end_ms: 54 * S,
        inner: Box::new(Expr::Order(vec![atom(10, 5 * S), atom(2, 3 * S)])),
    });
    assert_eq!(definition(&j, 54 * S), want);
    want.validate().expect("valid RDL");
    // One stage: the atom alone.
    let one = job("m", 0, vec![stage(3, 2 * S)]);
    assert_eq!(
        definition(&one, 9 * S),
        Expr::Window(Window { start_ms: 0, end_ms: 9 * S, inner: Box::new(atom(3, 2 * S)) })
    );
}

#[test]
fn the_choice_of_deadline_jobs_is_seeded_and_queues_follow_it() {
    let cluster = nodes(2, 2);
    let mut jobs: Vec<Job> = (0..1000).map(|i| job(&format!("j{i}"), i * S, vec![stage(2, 4 * S)])).collect();
    let none = pick(&jobs, &cluster, &options(0.0, 3.0, true, 0));
    assert!(none.is_empty());
    let all = pick(&jobs, &cluster, &options(1.0, 3.0, true, 0));
    assert_eq!(all.len(), 1000);
    // Ideal 4 s (two slots of the four): deadline 12 s after arrival.
    assert_eq!(all[7], DeadlineJob { job: 7, ideal_ms: 4 * S, deadline_ms: 7 * S + 12 * S });
    let a = pick(&jobs, &cluster, &options(0.25, 3.0, true, 0));
    let b = pick(&jobs, &cluster, &options(0.25, 2.0, false, 0));
    assert_eq!(
        a.iter().map(|p| p.job).collect::<Vec<_>>(),
        b.iter().map(|p| p.job).collect::<Vec<_>>(),
        "the same seed picks the same jobs whatever the slack"
    );
    assert!((200..300).contains(&a.len()), "{} of 1000 at 25 %", a.len());
    let other_seed = pick(&jobs, &cluster, &DeadlineOptions { seed: 2, ..options(0.25, 3.0, true, 0) });
    assert_ne!(a, other_seed);

    let reservations = deadlines::assign(&mut jobs, &a, &options(0.25, 3.0, true, 2 * S));
    assert_eq!(reservations.len(), a.len());
    let first = &reservations[0];
    let j = &jobs[first.job];
    assert_eq!((j.queue.as_str(), first.at_ms), (PLAN, j.submit_ms));
    assert_eq!(first.request.arrival_ms, Some(j.submit_ms));
    // The window ends the margin (2 s) before the deadline (12 s after the arrival).
    assert_eq!(first.request.deadline_ms, Some(j.submit_ms + 10 * S));
    assert_eq!(first.request.definition, definition(j, 10 * S));
    assert_eq!(jobs.iter().filter(|j| j.queue == PLAN).count(), a.len());
    assert_eq!(jobs.iter().filter(|j| j.queue == ADHOC).count(), 1000 - a.len());
}

#[test]
fn lost_nodes_are_a_seeded_share_of_the_cluster() {
    let cluster = nodes(20, 2);
    let one = lose_nodes(&cluster, 0.05, 30 * S, 1).expect("share");
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].at_ms, one[0].back_at_ms), (30 * S, None));
    let half = lose_nodes(&cluster, 0.5, 0, 7).expect("share");
    let mut names: Vec<&str> = half.iter().map(|f| f.node.as_str()).collect();
    names.dedup();
    assert_eq!(names.len(), 10);
    assert_eq!(half, lose_nodes(&cluster, 0.5, 0, 7).expect("share"), "same seed, same nodes");
    assert!(lose_nodes(&cluster, 0.0, 0, 1).expect("share").is_empty());
    assert_eq!(lose_nodes(&cluster, 0.001, 0, 1).expect("share").len(), 1, "at least one");
    assert!(lose_nodes(&cluster, 1.5, 0, 1).is_err());
}

/// Two 4-core nodes (8 slots); best-effort work fills all of them for 100 s from 0; at 10 s a
/// deadline job of 4 tasks of 20 s arrives: ideal 20 s, slack 3, deadline 70 s. Its
/// reservation's window ends 5 s early (65 s), so the planner (latest fit, as GREE) reserves 4
/// cores for 45-65 s.
fn borrowed_capacity(preemption: bool, reservations: bool) -> (SimResult, Vec<DeadlineJob>) {
    let cluster = nodes(2, 4);
    let jobs =
        vec![job("filler", 0, vec![stage(8, 100 * S)]), job("deadline", 10 * S, vec![stage(4, 20 * S)])];
    let plan = reservations.then_some(Replanner::Planner);
    let mut e = || Ok(engine(plan, preemption));
    simulate(&mut e, &cluster, jobs, &[1], &options(0.0, 3.0, reservations, 5 * S), Vec::new())
}

#[test]
fn a_reserved_job_meets_its_deadline_when_preemption_takes_back_the_borrowed_capacity() {
    let (r, picks) = borrowed_capacity(true, true);
    assert_eq!(picks[0].deadline_ms, 70 * S);
    let answer = &r.job_reservations[0].answer;
    assert!(
        matches!(answer, ReservationAnswer::Admitted { queue, .. } if queue == "root.prod.reservation_1"),
        "{answer:?}"
    );
    let d = &r.jobs[1];
    assert_eq!(d.outcome, JobOutcome::Completed);
    // It starts long before its allocation (45 s): it is the only work of root.prod, whose
    // guarantee the filler borrowed, so the preemption plugin takes root.prod's idle share back
    // for it at its first round (its `order` measures the zero-guarantee reservation queue
    // against that share; it used to rank it last and hand the room back to the filler, round
    // after round — see EXPERIMENTS.md, rayon-swim).
    let start = d.start_ms.expect("started");
    assert!((10 * S..12 * S).contains(&start), "started at {start}");
    let end = d.end_ms.expect("ended");
    assert!(end <= 70 * S, "ended at {end}, after its deadline");
    assert!(deadlines::met(&r, &picks[0]));
    // The filler gave back exactly the 4 containers the job needed, and ran them again.
    assert_eq!(r.jobs[0].preempted, 4);
    assert_eq!(r.preemptions, u64::from(r.jobs[0].preempted));
    assert_eq!(r.jobs[0].outcome, JobOutcome::Completed);
    assert!(
        matches!(r.job_reservations[0].ended, Some((t, ReservationEnd::Expired)) if t >= 65 * S),
        "{:?}",
        r.job_reservations[0].ended
    );
    // The plan at the 60 s sample: 4 cores, all reserved for the job, which no longer uses
    // them: it finished early on the room it got back.
    let at_60 = r.plan.iter().find(|p| p.t_ms == 60 * S).expect("a sample at 60 s");
    assert_eq!(
        (at_60.capacity_cpu, at_60.reserved_cpu, at_60.used_cpu, at_60.reservations),
        (4000, 4000, 0, 1)
    );
    let s = deadlines::summarise(&r, &picks, 0);
    assert_eq!((s.deadline_jobs, s.admitted, s.admitted_met, s.kept_met), (1, 1, 1, 1));
    assert_eq!(s.plan_capacity_cores, 4.0);
    assert_eq!((s.best_effort_jobs, s.best_effort_completed), (1, 1));
    assert_eq!(s.accepted_share, 1.0);
}

#[test]
fn without_preemption_the_reservation_is_only_a_guarantee_on_paper() {
    // The guarantee rises at 45 s but nothing takes the slots back: the job waits for the
    // filler to end at 100 s and ends at 120 s.
    let (r, picks) = borrowed_capacity(false, true);
    assert!(matches!(r.job_reservations[0].answer, ReservationAnswer::Admitted { .. }));
    assert_eq!((r.jobs[1].start_ms, r.jobs[1].end_ms), (Some(100 * S), Some(120 * S)));
    assert!(!deadlines::met(&r, &picks[0]));
    assert_eq!(r.preemptions, 0);
    // The baseline (a plain job of root.prod, below its guarantee) is served by preemption at
    // once, without a reservation.
    let (b, picks) = borrowed_capacity(true, false);
    assert!(b.job_reservations.is_empty());
    assert!(deadlines::met(&b, &picks[0]));
    assert!(b.jobs[1].start_ms.expect("started") < 15 * S);
}

#[test]
fn a_rejected_reservation_runs_best_effort_in_the_plans_default_queue() {
    // 4 nodes of 4 cores: the plan has 8. Two deadline jobs of 8 tasks of 60 s arrive together
    // with slack 1 (ideal 60 s on 16 slots): each needs the whole plan for the whole window.
    let cluster = nodes(4, 4);
    let jobs = vec![job("first", 0, vec![stage(8, 60 * S)]), job("second", 0, vec![stage(8, 60 * S)])];
    let mut e = || Ok(engine(Some(Replanner::Planner), true));
    let (r, picks) = simulate(&mut e, &cluster, jobs, &[0, 1], &options(0.0, 1.0, true, 0), Vec::new());
    assert!(matches!(r.job_reservations[0].answer, ReservationAnswer::Admitted { .. }));
    assert!(
        matches!(&r.job_reservations[1].answer, ReservationAnswer::Rejected(why) if why.contains("no room")),
        "{:?}",
        r.job_reservations[1].answer
    );
    // Both run at once on the empty cluster (the second in root.prod.default, borrowing).
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Completed && j.end_ms == Some(60 * S)));
    let s = deadlines::summarise(&r, &picks, 0);
    assert_eq!((s.admitted, s.rejected, s.admitted_met, s.unreserved_met, s.deadline_met), (1, 1, 1, 1, 2));
    assert_eq!(s.accepted_share, 0.5);
    let queues: Vec<&str> = r.queues.leaves.iter().map(|q| q.path.as_str()).collect();
    assert!(queues.contains(&"root.prod.default"), "{queues:?}");
}

/// 4 nodes of 4 cores (plan: 8 cores). A deadline job of 8 tasks of 40 s arrives at 0 with
/// slack 5 (ideal 40 s on 16 slots, deadline 200 s): the planner (latest fit) reserves the whole
/// plan for 160-200 s. At 10 s a node is lost: the plan has 6 cores from then on, and the
/// reservation no longer fits as placed.
fn lose_a_node(replanner: Replanner) -> (SimResult, Vec<DeadlineJob>) {
    let cluster = nodes(4, 4);
    let lost = lose_nodes(&cluster, 0.25, 10 * S, 1).expect("share");
    assert_eq!(lost.len(), 1);
    let jobs = vec![job("nightly", 0, vec![stage(8, 40 * S)])];
    let mut e = || Ok(engine(Some(replanner), true));
    simulate(&mut e, &cluster, jobs, &[0], &options(0.0, 5.0, true, 0), lost)
}

#[test]
fn losing_a_node_replans_the_planner_moves_the_reservation_yarn_deletes_it() {
    let (r, picks) = lose_a_node(Replanner::Planner);
    assert_eq!(picks[0].deadline_ms, 200 * S);
    assert_eq!(r.replans, (1, 0), "moved once, removed none");
    assert_eq!(r.job_reservations[0].replanned, 1);
    assert!(matches!(r.job_reservations[0].ended, Some((_, ReservationEnd::Expired)) | None));
    assert_eq!(r.jobs[0].outcome, JobOutcome::Completed);
    assert!(deadlines::met(&r, &picks[0]));
    let s = deadlines::summarise(&r, &picks, 1);
    assert_eq!((s.replan_moved, s.replan_removed, s.replan_rejected, s.kept_met), (1, 0, 0, 1));

    let (y, picks) = lose_a_node(Replanner::YarnSimple);
    assert_eq!(y.replans, (0, 1), "YARN's replanner deletes the reservation");
    // The scheduler loses the node once its agent has been silent for the node timeout: at the
    // first liveness check after that (the agents report every `status_ms`).
    let d = DaemonOptions::default();
    let lost_by = 10 * S + d.node_timeout_ms..=10 * S + d.node_timeout_ms + d.status_ms;
    assert!(
        matches!(y.job_reservations[0].ended, Some((t, ReservationEnd::Replanned)) if lost_by.contains(&t)),
        "{:?}",
        y.job_reservations[0].ended
    );
    // The job itself goes on in root.prod.default (the cluster is nearly empty).
    assert_eq!(y.jobs[0].outcome, JobOutcome::Completed);
    let s = deadlines::summarise(&y, &picks, 1);
    assert_eq!((s.admitted, s.replan_rejected, s.kept), (1, 1, 0));
}
