//! The scheduler's own faults in a simulation: a restart from the store, a network partition
//! (the agent fences, the scheduler loses the node), slow and failing commits. The simulator
//! drives the daemon's controller, so these runs exercise the code that recovers, reconciles and
//! fences in the daemon.

mod common;

use common::{job_at_ms, pool};
use gantry_engine::{Engine, EngineConfig, NodeSpec};
use gantry_sim::sim::{DaemonOptions, JobOutcome, Partition, SimError, SimOptions, SimResult, run};
use gantry_sim::trace::Job;

const S: u64 = 1_000;

fn nodes(n: usize) -> Vec<NodeSpec> {
    pool(n)
}

/// A job of `count` one-core containers of `secs` seconds, arriving at `at_ms`.
fn job(name: &str, at_ms: u64, count: u32, secs: u64) -> Job {
    job_at_ms(name, at_ms, count, 1, secs)
}

fn simulate(nodes: &[NodeSpec], jobs: &[Job], daemon: DaemonOptions) -> SimResult {
    let options = SimOptions { daemon, ..SimOptions::default() };
    run(&mut || Engine::builtin(EngineConfig::default()).map_err(|e| e.to_string()), nodes, jobs, &options)
        .expect("run")
}

fn containers(jobs: &[Job]) -> u64 {
    jobs.iter().flat_map(|j| &j.stages).map(|s| u64::from(s.count)).sum()
}

#[test]
fn a_scheduler_restart_loses_nothing_and_runs_nothing_twice() {
    // Four jobs of two 60 s containers fill four 2-core nodes at 0; the scheduler restarts at
    // 30 s; `late` arrives while the restarted scheduler waits for its agents.
    let mut jobs: Vec<Job> = (0..4).map(|k| job(&format!("j{k}"), 0, 2, 60)).collect();
    jobs.push(job("late", 30 * S + 500, 1, 10));
    let r = simulate(&nodes(4), &jobs, DaemonOptions { restarts_at_ms: vec![30 * S], ..Default::default() });
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Completed), "{:?}", r.jobs);
    // The agents kept their containers through the restart and registered them again.
    assert!(r.jobs[..4].iter().all(|j| j.end_ms == Some(60 * S)), "{:?}", r.jobs);
    assert_eq!(r.launches, containers(&jobs), "no container ran twice");
    // `late` waits for room: the first containers end at 60 s.
    assert_eq!(r.jobs[4].start_ms, Some(60 * S));
    assert_eq!((r.daemon.restarts, r.daemon.reconcile_kills, r.daemon.reconcile_lost), (1, 0, 0));
}

#[test]
fn a_submission_the_dead_scheduler_had_not_stored_is_sent_again() {
    // Commits take 2 s: `j1`'s submission at 29 s is still on its way to the disk when the
    // scheduler dies at 30 s. Its client was never answered and submits again; it runs once.
    let jobs = [job("j0", 0, 1, 60), job("j1", 29 * S, 1, 10)];
    let daemon = DaemonOptions { commit_ms: 2 * S, restarts_at_ms: vec![30 * S], ..Default::default() };
    let r = simulate(&nodes(2), &jobs, daemon);
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Completed), "{:?}", r.jobs);
    assert_eq!(r.launches, 2);
    // `j0` was stored and launched at 2 s (its record's commit), and kept running.
    assert_eq!((r.jobs[0].start_ms, r.jobs[0].end_ms), (Some(2 * S), Some(62 * S)));
    let j1 = r.jobs[1].start_ms.expect("j1 started");
    assert!(j1 > 30 * S, "j1 started at {j1} ms, before the restart: its first submission counted");
}

#[test]
fn a_partition_shorter_than_the_fencing_timeout_changes_nothing() {
    let jobs = [job("j0", 0, 2, 60)];
    let partitions = vec![Partition { node: "n0".into(), at_ms: 10 * S, duration_ms: 5 * S }];
    let r = simulate(&nodes(2), &jobs, DaemonOptions { partitions, ..Default::default() });
    assert_eq!((r.jobs[0].outcome, r.jobs[0].end_ms), (JobOutcome::Completed, Some(60 * S)));
    assert_eq!((r.launches, r.daemon.fenced, r.daemon.nodes_lost), (2, 0, 0));
}

#[test]
fn a_long_partition_fences_the_containers_before_the_scheduler_places_them_again() {
    // `j0` fills n0 at 0. n0 is cut off from 10 s to 40 s: its agent fences at 18 s (8 s
    // without word), the scheduler loses n0 after 10 s of silence and places `j0` again on n1.
    let jobs = [job("j0", 0, 2, 60)];
    let partitions = vec![Partition { node: "n0".into(), at_ms: 10 * S, duration_ms: 30 * S }];
    let r = simulate(&nodes(2), &jobs, DaemonOptions { partitions, ..Default::default() });
    assert_eq!(r.jobs[0].outcome, JobOutcome::Completed);
    assert_eq!((r.launches, r.daemon.fenced, r.daemon.nodes_lost), (4, 2, 1));
    // Lost 10 s after its last word (at the cut), within one liveness interval; then a full
    // 60 s run from the start.
    let end = r.jobs[0].end_ms.expect("ended");
    assert!((80 * S + 1..=80 * S + 501).contains(&end), "{end}");
}

#[test]
fn failing_commits_are_answered_as_such_and_sent_again() {
    let jobs: Vec<Job> = (0..20).map(|k| job(&format!("j{k}"), k * S, 1, 5)).collect();
    let daemon = DaemonOptions { commit_failure_rate: 0.2, seed: 7, ..Default::default() };
    let r = simulate(&nodes(4), &jobs, daemon);
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Completed), "{:?}", r.jobs);
    assert!(r.daemon.failed_commits > 0, "{:?}", r.daemon);
    // A launch whose record failed never left: each job's container ran once.
    assert_eq!(r.launches, 20, "{:?}", r.daemon);
}

#[test]
fn a_store_that_fails_every_commit_ends_the_run_with_the_jobs_given_up() {
    // Every submission is refused as not stored; each client sends it again a cycle later, and
    // gives up after its retries, so the run ends instead of retrying for ever.
    let jobs = [job("j0", 0, 1, 5), job("j1", S, 1, 5)];
    let daemon = DaemonOptions { commit_failure_rate: 0.999_999, seed: 1, ..Default::default() };
    let r = simulate(&nodes(2), &jobs, daemon);
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Rejected), "{:?}", r.jobs);
    assert_eq!(r.launches, 0);
    assert!(r.daemon.failed_commits >= 2 * 101, "{:?}", r.daemon);
}

#[test]
fn fault_runs_are_reproducible() {
    let jobs: Vec<Job> = (0..30).map(|k| job(&format!("j{k}"), k * 2 * S, 2, 7 + k % 5)).collect();
    let daemon = DaemonOptions {
        commit_ms: 300,
        commit_failure_rate: 0.1,
        restarts_at_ms: vec![20 * S, 45 * S],
        partitions: vec![Partition { node: "n1".into(), at_ms: 15 * S, duration_ms: 25 * S }],
        seed: 3,
        ..Default::default()
    };
    let a = simulate(&nodes(3), &jobs, daemon.clone());
    let b = simulate(&nodes(3), &jobs, daemon);
    assert_eq!(a, b);
    assert!(a.jobs.iter().all(|j| j.outcome == JobOutcome::Completed), "{:?}", a.jobs);
}

#[test]
fn timings_that_would_lose_healthy_agents_are_refused() {
    let refused = |daemon: DaemonOptions| {
        let options = SimOptions { daemon, ..SimOptions::default() };
        let make = &mut || Engine::builtin(EngineConfig::default()).map_err(|e| e.to_string());
        match run(make, &nodes(1), &[job("j", 0, 1, 1)], &options) {
            Err(SimError::Input(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let slow_reports = refused(DaemonOptions { status_ms: 9 * S, ..Default::default() });
    assert!(slow_reports.contains("between reports"), "{slow_reports}");
    let rate = refused(DaemonOptions { commit_failure_rate: 1.0, ..Default::default() });
    assert!(rate.contains("not in [0, 1)"), "{rate}");
    let partition = Partition { node: "nowhere".into(), at_ms: 0, duration_ms: S };
    let unknown = refused(DaemonOptions { partitions: vec![partition], ..Default::default() });
    assert!(unknown.contains("no node \"nowhere\""), "{unknown}");
}
