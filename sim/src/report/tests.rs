//! The outputs of a run: the summary's figures, the plots' lines, byte-identical files.

use super::*;
use crate::sim::{JobRecord, Sample};

fn record(
    name: &str,
    class: &str,
    submit: u64,
    start: Option<u64>,
    end: Option<u64>,
    outcome: JobOutcome,
) -> JobRecord {
    JobRecord {
        name: name.into(),
        class: class.into(),
        containers: 1,
        submit_ms: submit,
        start_ms: start,
        end_ms: end,
        outcome,
        ran_slow: false,
        preempted: 0,
    }
}

fn sample(t_ms: u64, cpu: f64, memory: f64, running: u64, waiting_jobs: u64) -> Sample {
    Sample {
        t_ms,
        cpu,
        memory,
        gpus: 0.0,
        running,
        waiting_jobs,
        nodes: 2,
        booting: 0,
        cpu_registered: cpu,
        memory_registered: memory,
        gpus_registered: 0.0,
    }
}

fn result() -> SimResult {
    SimResult {
        jobs: vec![
            record("a", "GPU", 0, Some(0), Some(100_000), JobOutcome::Completed),
            record("b", "GPU", 10_000, Some(60_000), Some(1_310_000), JobOutcome::Completed),
            record("c", "MPI", 20_000, Some(30_000), Some(1_220_000), JobOutcome::Killed),
            record("d,\"x\"", "MPI", 30_000, None, None, JobOutcome::Unfinished),
        ],
        samples: vec![sample(0, 0.5, 0.25, 1, 0), sample(60_000, 1.0, 0.5, 2, 1)],
        end_ms: 1_310_000,
        utilisation: [0.75, 0.375, 0.0],
        node_hours: 2.5,
        stalled_at_ms: None,
        elastic: None,
        preemptions: 0,
        cycles: 9,
        launches: 3,
        job_reservations: Vec::new(),
        replans: (0, 0),
        queues: Default::default(),
        plan: Vec::new(),
        plugins: Vec::new(),
        daemon: Default::default(),
    }
}

#[test]
fn the_summary_counts_outcomes_and_computes_utility_and_percentiles() {
    let s = summarise(&result(), &ReportOptions::default());
    assert_eq!((s.jobs, s.completed, s.killed, s.unfinished), (4, 2, 1, 1));
    // Completed: a in 100 s, b in 1300 s (past the horizon: no utility, SLA missed).
    assert_eq!(s.utility, 1100.0);
    assert_eq!(s.sla_met, 0.25);
    assert_eq!(s.completion_s.n, 2);
    assert_eq!((s.completion_s.p50, s.completion_s.max), (1300.0, 1300.0));
    assert_eq!(s.completion_s.mean, 700.0);
    // Waits of the three that started: 0, 50, 10 s.
    assert_eq!((s.wait_s.n, s.wait_s.p50, s.wait_s.max), (3, 10.0, 50.0));
    assert_eq!(s.classes["GPU"].utility, 1100.0);
    assert_eq!(s.classes["MPI"].completed, 0);
    assert_eq!(s.makespan_s, 1310.0);
}

#[test]
fn a_line_leaves_out_the_inside_of_flat_runs() {
    let points = vec![(0.0, 0.5), (1.0, 0.5), (2.0, 0.5), (3.0, 1.0), (4.0, 1.0)];
    let svg = line_plot("t", "x", "y", 1.0, &[("s", "#000000", points)]);
    let path = svg.lines().find(|l| l.starts_with("<path d=\"M") && l.contains("#000000")).expect("line");
    // (1, 0.5) is inside the first run; both ends of each run stay.
    assert_eq!(path.matches(" L").count(), 3, "{path}");
    assert!(path.starts_with("<path d=\"M50.0,180.0 L360.0,180.0 L515.0,50.0 L670.0,50.0\""), "{path}");
}

#[test]
fn the_files_are_written_and_identical_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = result();
    write_all(&dir.path().join("one"), &r, &ReportOptions::default()).expect("write");
    write_all(&dir.path().join("two"), &r, &ReportOptions::default()).expect("write");
    for f in ["summary.json", "jobs.csv", "timeseries.csv", "utilisation.svg", "completion_cdf.svg"] {
        let a = std::fs::read(dir.path().join("one").join(f)).expect("read");
        let b = std::fs::read(dir.path().join("two").join(f)).expect("read");
        assert!(!a.is_empty() && a == b, "{f}");
    }
    let csv = std::fs::read_to_string(dir.path().join("one/jobs.csv")).expect("read");
    assert!(
        csv.lines().nth(4).is_some_and(|l| l.starts_with("\"d,\"\"x\"\"\",MPI,1,30.000,,,,,unfinished")),
        "{csv}"
    );
    let svg = std::fs::read_to_string(dir.path().join("one/utilisation.svg")).expect("read");
    assert!(svg.starts_with("<svg") && svg.contains("CPU") && !svg.contains("GPUs"));
}
