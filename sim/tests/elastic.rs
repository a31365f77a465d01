//! Elastic clusters, hand-checked: the autoscaler adds nodes only for work that has waited past
//! the threshold, they register after the boot delay, empty nodes go after the cool-down (by
//! the engine's idle tracker), the bounds hold, and node-hours are billed from each start.

mod common;

use common::{job_at_ms, pool};
use gantry_engine::{Engine, EngineConfig, NodeSpec, RackAffinity, Resources};
use gantry_sim::elastic::{ElasticError, ElasticOptions};
use gantry_sim::report::{ReportOptions, summarise, write_all};
use gantry_sim::sim::{JobOutcome, NodeFailure, STALL_AFTER_MS, SimError, SimOptions, SimResult, run};
use gantry_sim::trace::Job;

const S: u64 = 1_000;

/// `n` identical nodes of 2 cores and 4 GiB, named n0, n1, …
fn job(name: &str, at_s: u64, count: u32, cores: u64, secs: u64) -> Job {
    job_at_ms(name, at_s * S, count, cores, secs)
}

fn elastic(min: usize, max: usize) -> SimOptions {
    SimOptions {
        elastic: Some(ElasticOptions {
            min_nodes: min,
            max_nodes: max,
            scale_up_after_ms: 60 * S,
            scale_up_for_ms: None,
            scale_down_after_ms: 600 * S,
            boot_ms: 30 * S,
            check_ms: 10 * S,
        }),
        ..SimOptions::default()
    }
}

fn simulate(nodes: &[NodeSpec], jobs: &[Job], options: &SimOptions) -> SimResult {
    run(&mut || Engine::builtin(EngineConfig::default()).map_err(|e| e.to_string()), nodes, jobs, options)
        .expect("run")
}

/// The first sample at or after `t_s` seconds.
fn nodes_at(r: &SimResult, t_s: u64) -> (u32, u32) {
    let s = r.samples.iter().find(|s| s.t_ms >= t_s * S).expect("a sample then");
    (s.nodes, s.booting)
}

#[test]
fn waiting_work_starts_just_enough_nodes_which_serve_after_booting_and_go_after_the_cool_down() {
    // n0 is full with `long` from 0 s; `burst` (3 × 1 core) arrives at 5 s and waits. It has
    // waited 60 s at 65 s; the next check is at 70 s: it needs two more nodes (2 + 1 cores),
    // billed from 70 s, registered at 100 s, when `burst` starts. It ends at 200 s; n1 and n2
    // are then empty, and removed at the first check 600 s later (800 s). `long` ends at 1000 s.
    let jobs = [job("long", 0, 2, 1, 1000), job("burst", 5, 3, 1, 100)];
    let options = SimOptions { sample_ms: 10 * S, ..elastic(1, 5) };
    let r = simulate(&pool(5), &jobs, &options);
    assert_eq!(r.jobs[1].start_ms, Some(100 * S), "70 s (first check past 60 s of waiting) + 30 s boot");
    assert_eq!(r.jobs[1].end_ms, Some(200 * S));
    assert_eq!((r.jobs[0].outcome, r.end_ms), (JobOutcome::Completed, 1000 * S));
    let e = r.elastic.as_ref().expect("elastic figures");
    // Checks at 80 and 90 s see the booting nodes' room and start nothing more.
    assert_eq!((e.scale_ups, e.nodes_started, e.nodes_removed, e.provisioned), (1, 2, 2, 3));
    assert_eq!((e.peak_nodes, e.peak_registered), (3, 3));
    // Billed: n0 0..1000, n1 and n2 70..800 (30 s of it booting each).
    assert_eq!(e.billed_node_ms, (1000 + 730 + 730) * S);
    assert_eq!(e.booting_node_ms, 60 * S);
    assert!((r.node_hours - 2460.0 / 3600.0).abs() < 1e-9, "{}", r.node_hours);
    // The time series: one node, then two booting, three registered, back to one.
    assert_eq!(nodes_at(&r, 60), (1, 0));
    assert_eq!(nodes_at(&r, 80), (1, 2));
    assert_eq!(nodes_at(&r, 100), (3, 0));
    assert_eq!(nodes_at(&r, 790), (3, 0));
    assert_eq!(nodes_at(&r, 800), (1, 0));
    // Utilisation of the registered nodes: 2 cores busy all along, 3 more 100..200 s, over
    // 2 cores × 1000 s + 4 cores × 700 s (n1, n2 registered 100..800).
    let want = (2.0 * 1000.0 + 3.0 * 100.0) / (2.0 * 1000.0 + 4.0 * 700.0);
    assert!((e.utilisation_registered[0] - want).abs() < 1e-9, "{:?}", e.utilisation_registered);
    let billed = (2.0 * 1000.0 + 3.0 * 100.0) / (2.0 * 1000.0 + 4.0 * 730.0);
    assert!((e.utilisation_billed[0] - billed).abs() < 1e-9, "{:?}", e.utilisation_billed);
    let s = summarise(&r, &ReportOptions::default());
    let es = s.elastic.expect("summary section");
    assert_eq!((es.nodes.peak, es.nodes.provisioned, es.autoscaler.nodes_removed), (3, 3, 2));
    assert_eq!(es.nodes.mean, 2.46, "2460 node-seconds over 1000 s");
    assert_eq!(s.node_hours, 0.683);
}

/// Issue 22: SWIM's big jobs are thousands of containers of a few seconds each. Sized by count,
/// a scale-up starts a node for every two of them (here all nine the maximum allows); sized by
/// work, the nodes that run them within the horizon, one after another on each slot.
#[test]
fn a_scale_up_sized_by_work_starts_the_nodes_that_finish_it_in_time() {
    // n0 is full with `long`; `many` asks for 400 one-core containers of 6 s at 5 s.
    let jobs = [job("long", 0, 2, 1, 1000), job("many", 5, 400, 1, 6)];
    let by_count = simulate(&pool(10), &jobs, &elastic(1, 10));
    let e = by_count.elastic.as_ref().expect("elastic figures");
    assert_eq!((e.scale_ups, e.nodes_started), (1, 9), "400 slots wanted, the maximum allows 9 more nodes");
    // Sized for 300 s, a slot of a new node (registered 30 s later) runs 45 of them one after
    // another: 9 slots, 5 nodes of 2 cores.
    let mut options = elastic(1, 10);
    if let Some(o) = options.elastic.as_mut() {
        o.scale_up_for_ms = Some(300 * S);
    }
    let by_work = simulate(&pool(10), &jobs, &options);
    let e = by_work.elastic.as_ref().expect("elastic figures");
    assert_eq!((e.scale_ups, e.nodes_started), (1, 5));
    // Both finish `many`; by work it takes longer on fewer nodes, and bills fewer node-hours.
    assert!(by_work.jobs.iter().all(|j| j.outcome == JobOutcome::Completed));
    assert!(by_work.node_hours < by_count.node_hours, "{} vs {}", by_work.node_hours, by_count.node_hours);
    // A gang's members run together: sized by count whatever the horizon.
    let mut members = job("gang", 5, 6, 1, 6);
    members.stages[0].gang = true;
    let gang = [job("long", 0, 2, 1, 1000), members];
    let r = simulate(&pool(10), &gang, &options);
    assert_eq!(r.elastic.as_ref().map(|e| e.nodes_started), Some(3));
}

#[test]
fn work_that_waits_less_than_the_threshold_starts_nothing() {
    // `short` waits from 5 s to 40 s (35 s < 60 s) for n0.
    let jobs = [job("filler", 0, 2, 1, 40), job("short", 5, 1, 1, 10)];
    let r = simulate(&pool(3), &jobs, &elastic(1, 3));
    assert_eq!(r.jobs[1].start_ms, Some(40 * S));
    let e = r.elastic.expect("elastic figures");
    assert_eq!((e.scale_ups, e.nodes_started, e.nodes_removed), (0, 0, 0));
    assert_eq!(e.billed_node_ms, 50 * S, "one node, 0..50 s");
}

#[test]
fn the_cluster_stays_within_its_bounds() {
    // min 2, max 3: a burst that would need three more nodes gets one; afterwards the idle
    // nodes go down to two, never fewer, however long they stay empty.
    let jobs = [job("long", 0, 4, 1, 3000), job("burst", 0, 6, 1, 100)];
    let r = simulate(&pool(6), &jobs, &elastic(2, 3));
    let e = r.elastic.as_ref().expect("elastic figures");
    assert_eq!((e.nodes_started, e.peak_nodes), (1, 3), "max 3");
    assert!(r.samples.iter().all(|s| s.nodes + s.booting >= 2 && s.nodes + s.booting <= 3));
    // The burst runs 2 containers at a time on the third node, registered at 90 s (check at
    // 60 s, 30 s of boot): three rounds of 100 s.
    assert_eq!(r.jobs[1].end_ms, Some(390 * S));
    assert_eq!(e.nodes_removed, 1, "back to the minimum of 2");
    assert_eq!(nodes_at(&r, 2000), (2, 0));
    assert_eq!(r.jobs[0].end_ms, Some(3000 * S));
}

#[test]
fn a_node_that_gets_work_again_restarts_its_cool_down() {
    // n1 and n2 serve `burst` until 200 s; `again` (1 container, first fit: n1) runs on n1
    // 700..750 s. n2 goes at 800 s, n1 only at 1350 s (600 s after 750 s).
    let jobs = [job("long", 0, 2, 1, 2000), job("burst", 5, 3, 1, 100), job("again", 700, 1, 1, 50)];
    let options = SimOptions { sample_ms: 10 * S, ..elastic(1, 5) };
    let r = simulate(&pool(5), &jobs, &options);
    assert_eq!(r.jobs[2].start_ms, Some(700 * S));
    assert_eq!(nodes_at(&r, 800), (2, 0));
    assert_eq!(nodes_at(&r, 1340), (2, 0));
    assert_eq!(nodes_at(&r, 1350), (1, 0));
    let e = r.elastic.expect("elastic figures");
    // n0 0..2000, n2 70..800, n1 70..1350.
    assert_eq!(e.billed_node_ms, (2000 + 730 + 1280) * S);
}

#[test]
fn a_removed_node_can_be_started_again() {
    // Two bursts 2,000 s apart: the second finds n1 removed and starts it again.
    let jobs = [job("long", 0, 2, 1, 3000), job("one", 5, 2, 1, 100), job("two", 2000, 2, 1, 100)];
    let r = simulate(&pool(2), &jobs, &elastic(1, 2));
    assert_eq!(r.jobs[1].start_ms, Some(100 * S));
    // Submitted at 2000 s, waited 60 s at 2060 s (a check), registered at 2090 s.
    assert_eq!(r.jobs[2].start_ms, Some(2090 * S));
    let e = r.elastic.expect("elastic figures");
    assert_eq!((e.scale_ups, e.nodes_started, e.nodes_removed, e.provisioned), (2, 2, 2, 3));
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Completed));
}

#[test]
fn scale_up_follows_selectors_and_sizes() {
    // The pool: two plain nodes, then a big GPU node. A GPU container waiting on a plain
    // cluster starts the GPU node, skipping the plain one that is off.
    let mut nodes = pool(2);
    nodes.push(NodeSpec {
        name: "gpu".into(),
        rack: "r1".into(),
        labels: vec![("gpu".into(), "true".into())],
        capacity: Resources::new(8000, 32 << 30, 1),
        gpu_list: Vec::new(),
    });
    let mut gpu_job = job("gpu", 0, 1, 1, 100);
    gpu_job.stages[0].resources.gpus = 1;
    gpu_job.stages[0].selector = vec![("gpu".into(), "true".into())];
    let r = simulate(&nodes, &[gpu_job, job("plain", 0, 1, 1, 100)], &elastic(1, 3));
    assert_eq!(r.jobs[0].start_ms, Some(90 * S), "waited 60 s at the check at 60 s, then 30 s of boot");
    let e = r.elastic.expect("elastic figures");
    assert_eq!((e.nodes_started, e.peak_nodes), (1, 2));
}

#[test]
fn work_no_node_can_ever_hold_stalls_the_run_instead_of_ticking_for_ever() {
    // `nowhere` asks for a label no node has (a container larger than every node would be
    // refused at submission); `fine` ends at 10 s. From then on nothing is due (nothing runs,
    // nothing arrives), and the run stops an hour later with `nowhere` still pending, as the
    // daemon would keep it.
    let mut nowhere = job("nowhere", 0, 1, 1, 10);
    nowhere.stages[0].selector = vec![("gpu".into(), "true".into())];
    let jobs = [nowhere, job("fine", 0, 1, 1, 10)];
    let r = simulate(&pool(2), &jobs, &SimOptions::default());
    let outcomes: Vec<JobOutcome> = r.jobs.iter().map(|j| j.outcome).collect();
    assert_eq!(outcomes, [JobOutcome::Unfinished, JobOutcome::Completed]);
    assert_eq!(r.stalled_at_ms, Some(10 * S));
    assert_eq!(r.end_ms, 10 * S + STALL_AFTER_MS);
    assert_eq!(summarise(&r, &ReportOptions::default()).stalled_at_s, Some(10.0));
    // A run that ends normally has no stall.
    let fine = simulate(&pool(2), &jobs[1..], &SimOptions::default());
    assert_eq!((fine.stalled_at_ms, fine.end_ms), (None, 10 * S));
}

#[test]
fn gangs_start_nodes_only_when_the_whole_gang_fits_in_one_rack_if_required() {
    // Racks of two 2-core nodes: r0 = n0, n1; r1 = n2, n3; r2 = n4, n5. `long` fills n0.
    // `wide` (gang of 7 × 1 core) needs four nodes: above max 3, so none is ever started for
    // it. `racked` (gang of 4 × 1 core, one rack required) cannot use r0 (n1 alone holds
    // 2), so the check at 60 s starts n2 and n3; it runs 90..190 s.
    let mut nodes = pool(6);
    for (i, n) in nodes.iter_mut().enumerate() {
        n.rack = format!("r{}", i / 2);
    }
    let mut wide = job("wide", 0, 7, 1, 10);
    wide.stages[0].gang = true;
    let mut racked = job("racked", 0, 4, 1, 100);
    racked.stages[0].gang = true;
    racked.stages[0].rack_affinity = RackAffinity::Required;
    let r = simulate(&nodes, &[job("long", 0, 2, 1, 1000), wide, racked], &elastic(1, 3));
    assert_eq!(r.jobs[2].start_ms, Some(90 * S));
    assert_eq!(r.jobs[2].outcome, JobOutcome::Completed);
    assert_eq!(r.jobs[1].outcome, JobOutcome::Unfinished);
    let e = r.elastic.as_ref().expect("elastic figures");
    assert_eq!((e.scale_ups, e.nodes_started, e.nodes_removed), (1, 2, 2));
    // n2 and n3 idle from 190 s, removed at 790 s; `long` ends at 1000 s, and with `wide`
    // pending and nothing due the run stops an hour later.
    assert_eq!(r.stalled_at_ms, Some(1000 * S));
    assert_eq!(e.billed_node_ms, (1000 * S + STALL_AFTER_MS) + 2 * 730 * S);
}

#[test]
fn invalid_settings_are_refused_before_the_run() {
    let refused = |options: SimOptions, pool_size: usize| {
        let mut engine = || Engine::builtin(EngineConfig::default()).map_err(|e| e.to_string());
        match run(&mut engine, &pool(pool_size), &[job("j", 0, 1, 1, 1)], &options) {
            Err(SimError::Elastic(e)) => e,
            other => panic!("expected an elastic error, got {other:?}"),
        }
    };
    assert_eq!(refused(elastic(3, 2), 4), ElasticError::MinAboveMax { min: 3, max: 2 });
    assert_eq!(refused(elastic(1, 5), 4), ElasticError::MaxAbovePool { max: 5, pool: 4 });
    assert_eq!(refused(elastic(0, 0), 4), ElasticError::MaxZero);
    let mut zero_check = elastic(1, 2);
    if let Some(e) = zero_check.elastic.as_mut() {
        e.check_ms = 0;
    }
    assert_eq!(refused(zero_check, 4), ElasticError::ZeroCheck);
    let with_failure = SimOptions {
        failures: vec![NodeFailure { node: "n0".into(), at_ms: 5, back_at_ms: None }],
        ..elastic(1, 2)
    };
    assert_eq!(refused(with_failure, 4), ElasticError::WithFailures);
    let msg = ElasticError::MaxAbovePool { max: 5, pool: 4 }.to_string();
    assert!(msg.contains("5 nodes") && msg.contains("4 nodes"), "{msg}");
}

#[test]
fn the_outputs_include_the_node_series_and_are_reproducible() {
    let jobs: Vec<Job> =
        (0..60u64).map(|i| job(&format!("j{i}"), i * 20, 1 + (i % 3) as u32, 1, 200 + i % 7 * 50)).collect();
    let a = simulate(&pool(6), &jobs, &elastic(1, 6));
    let b = simulate(&pool(6), &jobs, &elastic(1, 6));
    assert_eq!(a, b);
    let dir = tempfile::tempdir().expect("tempdir");
    let summary = write_all(dir.path(), &a, &ReportOptions::default()).expect("write");
    let es = summary.elastic.expect("elastic summary");
    assert!(es.nodes.peak > 1 && es.autoscaler.nodes_started > 0, "{es:?}");
    let csv = std::fs::read_to_string(dir.path().join("nodes.csv")).expect("nodes.csv");
    assert!(csv.starts_with("t_s,nodes,booting,cpu_registered"), "{csv}");
    let svg = std::fs::read_to_string(dir.path().join("nodes.svg")).expect("nodes.svg");
    assert!(svg.starts_with("<svg") && svg.contains("Nodes over time") && svg.contains("registered"));
    let json = std::fs::read_to_string(dir.path().join("summary.json")).expect("summary.json");
    assert!(json.contains("\"elastic\"") && json.contains("\"nodes_removed\""), "{json}");
    // A fixed cluster writes neither the section nor the node files.
    let fixed_dir = tempfile::tempdir().expect("tempdir");
    let fixed = simulate(&pool(6), &jobs, &SimOptions::default());
    write_all(fixed_dir.path(), &fixed, &ReportOptions::default()).expect("write");
    assert!(!fixed_dir.path().join("nodes.svg").exists());
    let json = std::fs::read_to_string(fixed_dir.path().join("summary.json")).expect("summary.json");
    assert!(!json.contains("\"elastic\""));
}
