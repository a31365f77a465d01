//! The loop on small hand-built clusters: durations and stages, samples at the end of their
//! instant, preferences and speed, time limits and lost nodes, determinism.

use super::*;
use crate::trace::Stage;
use gantry_engine::{EngineConfig, RackAffinity, Resources};

const S: u64 = 1_000;

fn node(name: &str, rack: &str, cores: u64, labels: &[(&str, &str)]) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        rack: rack.into(),
        labels: labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
        capacity: Resources::new(cores * 1000, cores << 30, 0),
        gpu_list: Vec::new(),
    }
}

fn stage(count: u32, gang: bool, fast: u64, slow: u64) -> Stage {
    Stage {
        resources: Resources::new(1000, 1 << 30, 0),
        count,
        gang,
        selector: Vec::new(),
        preferred: Vec::new(),
        rack_affinity: RackAffinity::None,
        duration_ms: fast,
        slow_duration_ms: slow,
    }
}

fn job(name: &str, at: u64, stages: Vec<Stage>) -> Job {
    Job {
        name: name.into(),
        submit_ms: at,
        queue: String::new(),
        user: "u".into(),
        class: "test".into(),
        priority: 0,
        stages,
        time_limit_ms: None,
    }
}

fn engine() -> Engine {
    Engine::builtin(EngineConfig::default()).expect("engine")
}

#[test]
fn jobs_run_for_their_durations_and_stages_follow_each_other() {
    let nodes = [node("a", "r1", 2, &[]), node("b", "r1", 2, &[])];
    let jobs = [
        job("one", 0, vec![stage(2, false, 10 * S, 10 * S)]),
        job("two-stages", 5 * S, vec![stage(1, false, 3 * S, 3 * S), stage(2, true, 4 * S, 4 * S)]),
    ];
    let r = run(&mut || Ok(engine()), &nodes, &jobs, &SimOptions::default()).expect("run");
    let one = &r.jobs[0];
    assert_eq!((one.start_ms, one.end_ms, one.outcome), (Some(0), Some(10 * S), JobOutcome::Completed));
    let two = &r.jobs[1];
    assert_eq!(two.start_ms, Some(5 * S), "room for it on arrival");
    assert_eq!(two.end_ms, Some(12 * S), "3 s, then the second stage's 4 s");
    assert_eq!(r.launches, 5);
    assert_eq!(r.end_ms, 12 * S);
    // CPU: 2 of 4 cores for 10 s, 1 core 5..8, 2 cores 8..12 → (20 + 3 + 8) / (4 · 12).
    assert!((r.utilisation[0] - 31.0 / 48.0).abs() < 1e-9, "{:?}", r.utilisation);
}

#[test]
fn a_sample_shows_the_end_of_its_instant() {
    // At 10 s the first job's containers end and the waiting job's start: the sample then
    // sees the node full, not the gap between the two.
    let nodes = [node("a", "r1", 2, &[])];
    let jobs = [
        job("first", 0, vec![stage(2, false, 10 * S, 10 * S)]),
        job("next", 0, vec![stage(2, false, 5 * S, 5 * S)]),
    ];
    let options = SimOptions { sample_ms: 5 * S, ..SimOptions::default() };
    let r = run(&mut || Ok(engine()), &nodes, &jobs, &options).expect("run");
    let cpu: Vec<(u64, f64)> = r.samples.iter().map(|s| (s.t_ms / S, s.cpu)).collect();
    assert_eq!(&cpu[..3], &[(0, 1.0), (5, 1.0), (10, 1.0)], "{cpu:?}");
    assert_eq!(r.jobs[1].start_ms, Some(10 * S));
}

#[test]
fn a_job_that_waits_for_room_waits_and_preferences_decide_the_speed() {
    let nodes = [node("gpu", "r0", 2, &[("gpu", "true")]), node("plain", "r1", 2, &[])];
    let mut fast = stage(1, false, 10 * S, 30 * S);
    fast.preferred = vec![("gpu".into(), "true".into())];
    let mut rack = stage(2, true, 5 * S, 20 * S);
    rack.rack_affinity = RackAffinity::Preferred;
    rack.resources = Resources::new(2000, 1 << 30, 0);
    let jobs = [
        job("filler", 0, vec![stage(2, false, 50 * S, 50 * S)]),
        job("pref", S, vec![fast]),
        job("spread", 2 * S, vec![rack]),
    ];
    let r = run(&mut || Ok(engine()), &nodes, &jobs, &SimOptions::default()).expect("run");
    // The built-in first fit puts the filler's two containers on `gpu`; `pref` lands on
    // `plain` and runs slow.
    assert!(r.jobs[1].ran_slow);
    assert_eq!(r.jobs[1].completion_ms(), Some(30 * S));
    // The gang of two whole nodes waits for the filler, then spans both racks: slow.
    assert_eq!(r.jobs[2].start_ms, Some(50 * S));
    assert!(r.jobs[2].ran_slow);
    assert_eq!(r.jobs[2].end_ms, Some(70 * S));
}

#[test]
fn time_limits_kill_and_lost_nodes_rerun_their_work() {
    let nodes = [node("a", "r1", 1, &[]), node("b", "r1", 1, &[])];
    let mut limited = job("limited", 0, vec![stage(1, false, 100 * S, 100 * S)]);
    limited.time_limit_ms = Some(20 * S);
    let jobs = [limited, job("survivor", 0, vec![stage(1, false, 30 * S, 30 * S)])];
    let options = SimOptions {
        failures: vec![NodeFailure { node: "b".into(), at_ms: 10 * S, back_at_ms: None }],
        ..SimOptions::default()
    };
    let r = run(&mut || Ok(engine()), &nodes, &jobs, &options).expect("run");
    assert_eq!((r.jobs[0].end_ms, r.jobs[0].outcome), (Some(20 * S), JobOutcome::Killed));
    // `survivor` ran on b, which failed at 10 s; the scheduler loses b once its agent has been
    // silent for the node timeout (10 s, checked every 500 ms), and `survivor` reruns on a,
    // free since `limited` was killed at 20 s.
    assert_eq!(r.jobs[1].outcome, JobOutcome::Completed);
    let end = r.jobs[1].end_ms.expect("ended");
    assert!((50 * S + 1..=50 * S + 501).contains(&end), "{end}");
    assert_eq!(r.daemon.nodes_lost, 1);
    // a counts until the run ends, b until it failed.
    assert!((r.node_hours - (end as f64 / 1000.0 + 10.0) / 3600.0).abs() < 1e-9, "{}", r.node_hours);
}

#[test]
fn the_same_inputs_give_the_same_result() {
    let nodes: Vec<NodeSpec> =
        (0..6).map(|i| node(&format!("n{i}"), &format!("r{}", i % 2), 4, &[])).collect();
    let jobs: Vec<Job> = (0..200u64)
        .map(|i| {
            job(
                &format!("j{i}"),
                i * 300,
                vec![stage(1 + (i % 4) as u32, i % 3 == 0, (5 + i % 17) * S, (9 + i % 17) * S)],
            )
        })
        .collect();
    let a = run(&mut || Ok(engine()), &nodes, &jobs, &SimOptions::default()).expect("run");
    let b = run(&mut || Ok(engine()), &nodes, &jobs, &SimOptions::default()).expect("run");
    assert_eq!(a, b);
    assert!(a.jobs.iter().all(|j| j.outcome == JobOutcome::Completed));
}
