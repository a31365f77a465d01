//! What the readers produce runs: the jobs of every format, on the clusters the cluster readers
//! build, go through the real engine (built-in first fit) in the simulation loop without a
//! single refusal.

mod common;
use common::shared;
use gantry_engine::{Engine, EngineConfig};
use gantry_sim::cluster::ClusterSpec;
use gantry_sim::sim::{JobOutcome, SimOptions, run};
use gantry_sim::trace::{Job, alibaba, cmu, jsonl, swf, swim};
use std::path::{Path, PathBuf};

fn local(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Runs the jobs to the end and returns the outcomes, asserting none was refused or failed.
#[track_caller]
fn run_all(cluster: &ClusterSpec, jobs: &[Job]) -> Vec<JobOutcome> {
    let mut engine = || Engine::builtin(EngineConfig::default()).map_err(|e| e.to_string());
    let r = run(&mut engine, &cluster.nodes, jobs, &SimOptions::default()).unwrap();
    for (rec, job) in r.jobs.iter().zip(jobs) {
        assert!(
            !matches!(rec.outcome, JobOutcome::Rejected | JobOutcome::Failed),
            "{} ended {:?}: {job:?}",
            rec.name,
            rec.outcome
        );
    }
    r.jobs.iter().map(|j| j.outcome).collect()
}

#[test]
fn cmu_job_set_on_the_seed_cluster() {
    let cluster = ClusterSpec::read(&local("examples/clusters/hetero-seed002.toml")).unwrap();
    let jobs = cmu::read_many(
        &[local("tests/data/traceGPU-small.csv"), local("tests/data/traceMPI-small.csv")],
        &cmu::CmuConfig::default(),
    )
    .unwrap();
    let outcomes = run_all(&cluster, &jobs);
    assert!(outcomes.iter().all(|o| *o == JobOutcome::Completed), "{outcomes:?}");
}

#[test]
fn alibaba_pods_on_the_alibaba_gpu_nodes() {
    let cluster = ClusterSpec::read(&shared("alibaba-gpu-2023/openb_node_list_gpu_node.csv")).unwrap();
    let jobs =
        alibaba::read(&shared("alibaba-gpu-2023/openb_pod_list_default.csv"), &Default::default()).unwrap();
    let outcomes = run_all(&cluster, &jobs[..300]);
    assert!(outcomes.iter().all(|o| *o == JobOutcome::Completed), "{outcomes:?}");
}

#[test]
fn swim_swf_and_jsonl_jobs_on_the_small_cluster() {
    let cluster = ClusterSpec::read(&local("examples/clusters/small.toml")).unwrap();
    let swim =
        swim::read(&shared("swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv"), &Default::default()).unwrap();
    let outcomes = run_all(&cluster, &swim[..200]);
    assert!(outcomes.iter().all(|o| *o == JobOutcome::Completed), "{outcomes:?}");

    let swf = swf::read(&local("tests/data/sample.swf"), &Default::default()).unwrap();
    let outcomes = run_all(&cluster, &swf);
    assert!(outcomes.iter().all(|o| *o == JobOutcome::Completed), "{outcomes:?}");

    // The example's GPU job selects `A100|H100` (either model): the engine reads alternatives.
    let mixed = jsonl::read(&local("examples/traces/mixed.jsonl")).unwrap();
    let outcomes = run_all(&cluster, &mixed);
    for (o, j) in outcomes.iter().zip(&mixed) {
        assert_eq!(*o, JobOutcome::Completed, "{}", j.name);
    }
}
