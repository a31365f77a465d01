//! The load generator (`gantry bench load`) at a small scale against the real `gantry-scheduler`
//! binary: 50 simulated agents over real gRPC streams and submissions through the REST API.
//! Nothing may be lost — every acknowledged app finishes, every container is launched exactly
//! once, no stream drops, every status and exit is acknowledged — and the report's counts must
//! agree with each other. No figure is asserted against a time: those go in RELIABILITY.md.

use gantry::loadgen::{LoadArgs, run};

#[test]
fn small_load_on_the_real_scheduler_loses_nothing_and_its_report_adds_up() {
    let bin = gantry_tests::scheduler_bin().expect("gantry-scheduler binary");
    let out = tempfile::tempdir().expect("tempdir");
    let json = out.path().join("load.json");
    let args = LoadArgs::from_flags([
        "--agents",
        "50",
        "--status-hz",
        "2",
        "--submit-rate",
        "10",
        "--warmup",
        "1s",
        "--duration",
        "5s",
        "--run-time",
        "1s",
        "--containers-per-app",
        "2",
        "--drain-timeout",
        "30s",
        "--scheduler-bin",
        bin.to_str().expect("UTF-8 path"),
        "--out",
        json.to_str().expect("UTF-8 path"),
    ])
    .expect("flags");
    let r = run(&args).expect("load run");
    let summary = r.summary();
    let l = &r.lost;

    // Nothing lost.
    assert!(r.nothing_lost, "{summary}");
    assert_eq!(l.agents_registered, 50, "{summary}");
    assert_eq!((l.agents_not_registered, l.streams_dropped, l.agents_hung, l.nodes_lost), (0, 0, 0, 0));
    assert_eq!((l.duplicate_launches, l.exits_unacked, l.statuses_unacked), (0, 0, 0), "{summary}");

    // Counts add up.
    let s = &r.submissions;
    assert!(s.acknowledged > 0, "{summary}");
    assert_eq!(s.attempted, s.acknowledged + s.refused + s.failed + s.skipped, "{summary}");
    assert_eq!(
        s.acknowledged,
        l.apps_finished + l.apps_failed + l.apps_unfinished + l.apps_missing,
        "every acknowledged app is accounted for: {summary}"
    );
    // Checked in the child's store after it stopped, not only through the API.
    assert_eq!(l.verified_in, "store");
    assert_eq!(l.apps_finished, s.acknowledged, "{summary}");
    // Two containers per app, each launched once, none retried.
    assert_eq!(l.containers, 2 * l.apps_finished, "{summary}");
    assert_eq!(l.launches, l.containers + l.duplicate_launches);
    assert_eq!(r.status.sent, r.status.acked + r.status.unacked);
    // 50 agents at 2 Hz for 5 s: the window holds samples from every agent.
    assert!(r.status.latency.samples >= 50, "{summary}");
    assert!(r.status.latency.samples <= r.status.acked);
    for lat in [&r.status.latency, &s.latency] {
        assert!(
            lat.p50_ms <= lat.p99_ms && lat.p99_ms <= lat.p999_ms && lat.p999_ms <= lat.max_ms,
            "{summary}"
        );
        assert!(lat.p50_ms > 0.0, "{summary}");
    }
    let sched = r.scheduler.as_ref().expect("a child scheduler is measured");
    assert!(sched.pid > 0 && sched.peak_rss_bytes >= sched.rss_bytes && sched.rss_bytes > 0, "{summary}");
    assert!(sched.cpu_cores > 0.0, "{summary}");
    assert!(r.generator.peak_rss_bytes > 0);

    // The JSON file is the same report.
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("report file")).expect("JSON");
    assert_eq!(written["lost"]["apps_finished"], l.apps_finished);
    assert_eq!(written["status"]["latency"]["samples"], r.status.latency.samples);
    assert_eq!(written["nothing_lost"], true);
}
