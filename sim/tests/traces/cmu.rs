use super::{assert_err, assert_sorted, local};
use gantry_engine::{RackAffinity, Resources};
use gantry_sim::trace::cmu::{self, CmuConfig, CmuJobType, UnknownDuration};
use gantry_sim::trace::{Job, TraceError};

fn gpu() -> Vec<Job> {
    cmu::read(&local("tests/data/traceGPU-small.csv"), &CmuConfig::default()).unwrap()
}

#[test]
fn gpu_trace() {
    let jobs = gpu();
    assert_eq!(jobs.len(), 5);
    assert_sorted(&jobs);
    let summary: Vec<(&str, u64, u32, u64, u64, i32)> = jobs
        .iter()
        .map(|j| {
            let s = &j.stages[0];
            (j.name.as_str(), j.submit_ms, s.count, s.duration_ms, s.slow_duration_ms, j.priority)
        })
        .collect();
    assert_eq!(
        summary,
        [
            // 0,0,39,2,0
            ("traceGPU-small.csv:1", 0, 2, 39_000, 71_000, 0),
            // 12.512345678,12.512345678,184.512345678,3,0 → 172 s
            ("traceGPU-small.csv:2", 12_512, 3, 172_000, 335_000, 0),
            // 30.25,45.0,340.0,4,1 → 295 s; start ≠ arrival, only the difference counts
            ("traceGPU-small.csv:3", 30_250, 4, 295_000, 558_000, 1),
            // 30.25,30.25,100.4,2,0 → 70.15 s rounds to 70; same arrival, file order kept
            ("traceGPU-small.csv:4", 30_250, 2, 70_000, 120_000, 0),
            // 95.7,120.0,316.3,2,0 → 196.3 s → 196
            ("traceGPU-small.csv:5", 95_700, 2, 196_000, 318_000, 0),
        ]
    );
    for j in &jobs {
        let s = &j.stages[0];
        assert_eq!((j.class.as_str(), j.time_limit_ms, j.user.as_str()), ("GPU", Some(1_200_000), "cmu"));
        assert!(s.gang);
        assert_eq!(s.preferred, [("gpu".to_owned(), "true".to_owned())]);
        assert!(s.selector.is_empty());
        assert_eq!(s.rack_affinity, RackAffinity::None);
        assert_eq!(s.resources, Resources { cpu_millis: 2000, memory_bytes: 7 << 30, gpus: 0, reserved: 0 });
    }
}

#[test]
fn mpi_trace_and_job_sets() {
    let mpi = cmu::read(&local("tests/data/traceMPI-small.csv"), &CmuConfig::default()).unwrap();
    assert_eq!(mpi.len(), 3);
    for j in &mpi {
        let s = &j.stages[0];
        assert_eq!(j.class, "MPI");
        assert!(s.gang && s.preferred.is_empty());
        assert_eq!((s.rack_affinity, s.count), (RackAffinity::Preferred, 4));
    }
    let durations: Vec<(u64, u64)> =
        mpi.iter().map(|j| (j.stages[0].duration_ms, j.stages[0].slow_duration_ms)).collect();
    assert_eq!(durations, [(67_000, 78_000), (139_000, 165_000), (198_000, 229_000)]);
    assert_eq!(mpi[2].priority, 2);

    let set = cmu::read_many(
        &[local("tests/data/traceGPU-small.csv"), local("tests/data/traceMPI-small.csv")],
        &CmuConfig::default(),
    )
    .unwrap();
    let names: Vec<&str> = set.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "traceGPU-small.csv:1",
            "traceMPI-small.csv:1",
            "traceGPU-small.csv:2",
            // three jobs at 30.25 s: the GPU file's two first (files in the order given), then MPI
            "traceGPU-small.csv:3",
            "traceGPU-small.csv:4",
            "traceMPI-small.csv:2",
            "traceMPI-small.csv:3",
            "traceGPU-small.csv:5",
        ]
    );
    assert_sorted(&set);
}

#[test]
fn configuration_is_honoured() {
    let mut cfg = CmuConfig {
        gpu_label: ("accel".to_owned(), "yes".to_owned()),
        time_limit_ms: None,
        container: Resources { cpu_millis: 1000, memory_bytes: 1 << 30, gpus: 0, reserved: 0 },
        ..CmuConfig::default()
    };
    cfg.gpu_slow_s.insert(50, 100);
    let jobs = cmu::parse("1,1,51,2,0\n", "traceGPU-x", &cfg).unwrap();
    let j = &jobs[0];
    assert_eq!(j.time_limit_ms, None);
    assert_eq!(j.stages[0].preferred, [("accel".to_owned(), "yes".to_owned())]);
    assert_eq!((j.stages[0].duration_ms, j.stages[0].slow_duration_ms), (50_000, 100_000));
    assert_eq!(j.stages[0].resources.cpu_millis, 1000);

    // The ratio fallback is opt-in: 100 s × the mean GPU ratio.
    let strict = cmu::parse("0,0,100,2,0\n", "traceGPU-x", &CmuConfig::default());
    assert_err(
        strict,
        1,
        &["100 s is not a known GPU duration", "expected one of 39, 70, 172, 196, 243, 295 s"],
    );
    let lenient = CmuConfig { unknown_duration: UnknownDuration::TypeRatio, ..CmuConfig::default() };
    let d = &cmu::parse("0,0,100,2,0\n", "traceGPU-x", &lenient).unwrap()[0].stages[0];
    let t = &CmuConfig::default().gpu_slow_s;
    let mean = t.iter().map(|(&f, &s)| s as f64 / f as f64).sum::<f64>() / t.len() as f64;
    assert_eq!((d.duration_ms, d.slow_duration_ms), (100_000, (100.0 * mean).round() as u64 * 1000));

    assert_eq!(CmuJobType::from_file_name("dir/traceMPI-c2x4-rho0.80"), Some(CmuJobType::Mpi));
    assert_eq!(CmuJobType::from_file_name("traces/traceGPU-c2x6-rho0.70"), Some(CmuJobType::Gpu));
    assert_eq!(CmuJobType::from_file_name("mytraceGPU"), None);
}

fn parse_with(bad: &str) -> Result<Vec<Job>, TraceError> {
    cmu::parse(&format!("0,0,39,2,0\n{bad}\n"), "traces/traceGPU-c2x4-rho0.80", &CmuConfig::default())
}

#[test]
fn malformed_lines_are_refused() {
    assert_err(
        parse_with("1,1,40,2"),
        2,
        &["expected 5 comma-separated fields (arrival,start,finish,k,prio), found 4"],
    );
    assert_err(parse_with("1,1,40,2,0,9"), 2, &["found 6"]);
    assert_err(parse_with("soon,1,40,2,0"), 2, &["arrival", "expected a number", "`soon`"]);
    assert_err(parse_with("-1,1,40,2,0"), 2, &["arrival", "non-negative"]);
    assert_err(parse_with("1,1,40,two,0"), 2, &["k", "non-negative integer", "`two`"]);
    assert_err(parse_with("1,1,40,-2,0"), 2, &["k", "negative number `-2`"]);
    assert_err(parse_with("1,1,40,4294967296,0"), 2, &["k", "too large"]);
    assert_err(parse_with("1,1,40,0,0"), 2, &["k", "at least 1"]);
    assert_err(parse_with("1,1,40,2,high"), 2, &["prio", "expected an integer"]);
    assert_err(parse_with("1,1,40,2,99999999999"), 2, &["prio", "out of range"]);
    assert_err(parse_with("1,50,40,2,0"), 2, &["finish 40 is before start 50"]);
    // 41 s is not a GPU duration of the seed's table.
    assert_err(parse_with("1,1,42,2,0"), 2, &["41 s is not a known GPU duration", "expected one of"]);
    // An MPI duration in a GPU file is not a GPU duration either.
    assert_err(parse_with("1,1,68,2,0"), 2, &["67 s is not a known GPU duration"]);
    let e = cmu::parse("0,0,39,2,0\n", "jobs.csv", &CmuConfig::default()).unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.message.contains("`traceGPU` or `traceMPI`"), "{e}");
    let e = cmu::read_many(
        &[local("tests/data/traceGPU-small.csv"), local("tests/data/traceGPU-missing.csv")],
        &CmuConfig::default(),
    )
    .unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.file.ends_with("traceGPU-missing.csv") && e.message.contains("cannot read"), "{e}");
}
