use super::{assert_err, assert_sorted, local};
use gantry_engine::{RackAffinity, Resources};
use gantry_sim::trace::swf::{self, SwfOptions, SwfStats};
use gantry_sim::trace::{Job, TraceError};

fn sample(opts: &SwfOptions) -> (Vec<Job>, SwfStats) {
    let text = std::fs::read_to_string(local("tests/data/sample.swf")).unwrap();
    swf::parse_with_stats(&text, "sample.swf", opts).unwrap()
}

#[test]
fn sample_log_counts_and_order() {
    let (jobs, stats) = sample(&SwfOptions::default());
    assert_eq!(
        stats,
        SwfStats { lines: 14, jobs: 8, skipped_no_run_time: 3, skipped_no_processors: 1, skipped_partial: 2 }
    );
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    // Job 10 was submitted at 100 s like job 6 but listed later: it stays after it.
    assert_eq!(names, ["1", "2", "4", "6", "10", "8", "9", "12"]);
    assert_sorted(&jobs);
    assert_eq!(swf::read(&local("tests/data/sample.swf"), &SwfOptions::default()).unwrap(), jobs);
}

#[test]
fn sample_log_spot_checks() {
    let (jobs, _) = sample(&SwfOptions::default());
    let find = |n: &str| jobs.iter().find(|j| j.name == n).unwrap();
    const GIB: u64 = 1 << 30;
    // 1  0  12  3600  32  3512.4  262144  32  7200  524288  1  3 ...: used memory wins.
    let j = find("1");
    let s = &j.stages[0];
    assert_eq!((j.submit_ms, s.count, s.gang, s.duration_ms), (0, 32, true, 3_600_000));
    assert_eq!(
        s.resources,
        Resources { cpu_millis: 1000, memory_bytes: 262_144 * 1024, gpus: 0, reserved: 0 }
    );
    assert_eq!(
        (j.queue.as_str(), j.user.as_str(), j.class.as_str(), j.time_limit_ms),
        ("root.default", "u3", "swf", None)
    );
    assert_eq!((s.rack_affinity, s.slow_duration_ms), (RackAffinity::None, s.duration_ms));
    // 2: no memory recorded → the default, 1 GiB.
    assert_eq!(find("2").stages[0].resources.memory_bytes, GIB);
    // 4  61.5  5  900.6  8 ... 1048576  0 (failed): fractional times; requested memory used.
    let j = find("4");
    assert_eq!((j.submit_ms, j.stages[0].duration_ms, j.stages[0].count), (61_500, 900_600, 8));
    assert_eq!(j.stages[0].resources.memory_bytes, GIB);
    // 6: allocated processors unknown (-1) → the 64 requested.
    assert_eq!(find("6").stages[0].count, 64);
    // 9: the summary line only (5400 s), not its two partial executions.
    assert_eq!(find("9").stages[0].duration_ms, 5_400_000);
    // 12: unknown status (-1) is kept.
    assert_eq!(find("12").stages[0].count, 2);
}

#[test]
fn queues_and_sizes_are_options() {
    let opts =
        SwfOptions { cpu_millis_per_proc: 2000, default_memory_bytes: 512 << 20, queues_from_trace: true };
    let (jobs, _) = sample(&opts);
    let find = |n: &str| jobs.iter().find(|j| j.name == n).unwrap();
    assert_eq!(find("1").queue, "root.q1");
    assert_eq!(find("8").queue, "root.q3");
    assert_eq!(find("12").queue, "root.default", "queue -1 stays in the default queue");
    assert_eq!(
        find("2").stages[0].resources,
        Resources { cpu_millis: 2000, memory_bytes: 512 << 20, gpus: 0, reserved: 0 }
    );
}

fn parse_with(bad: &str) -> Result<Vec<Job>, TraceError> {
    let good = "1 0 1 10 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1";
    swf::parse(&format!("; header\n{good}\n{bad}\n"), "bad.swf", &SwfOptions::default())
}

#[test]
fn malformed_lines_are_refused() {
    assert_err(
        parse_with("2 5 1 10 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1"),
        3,
        &["expected 18 whitespace-separated SWF fields, found 17"],
    );
    assert_err(parse_with("2 5 1 10 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1 0"), 3, &["found 19"]);
    assert_err(
        parse_with("2 5 1 10 four -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["field 5 (allocated processors)", "expected an integer", "`four`"],
    );
    assert_err(parse_with("2 5 1 10 4.5 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"), 3, &["field 5", "`4.5`"]);
    assert_err(
        parse_with("2 5 1 ten 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["field 4 (run time)", "expected a number"],
    );
    assert_err(
        parse_with("2 5 1 nan 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["field 4 (run time)", "expected a number"],
    );
    assert_err(
        parse_with("2 -5 1 10 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["field 2 (submit time)", "non-negative"],
    );
    assert_err(
        parse_with("2 5 1 10 4 -1 -1 4 60 -1 7 1 1 1 1 1 -1 -1"),
        3,
        &["field 11 (status)", "found 7"],
    );
    assert_err(
        parse_with("2 5 1 10 99999999999 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["processor count 99999999999 is too large"],
    );
    assert_err(
        parse_with("2 5 1 10 200000 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["count 200000", "1..=100000"],
    );
    assert_err(
        parse_with("2 5 1 10 4 -1 99999999999999999999 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["field 7 (used memory)", "out of range"],
    );
    assert_err(
        parse_with("2 5 1 10 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 1e999"),
        3,
        &["field 18 (think time)", "expected a number"],
    );
    assert_err(
        parse_with("-2 5 1 10 4 -1 -1 4 60 -1 1 1 1 1 1 1 -1 -1"),
        3,
        &["field 1 (job number)", "positive"],
    );
}
