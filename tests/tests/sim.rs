//! `gantry sim` as a user runs it: the real binary, real cluster and trace files, outputs in a
//! directory. Same inputs and seed ⇒ byte-identical outputs; a malformed trace ⇒ a clear error
//! naming the file and line, and no output directory.

use gantry_tests::{gantry_bin, workspace_root};
use std::path::Path;
use std::process::Command;

fn sim(out: &Path, extra: &[&str]) -> std::process::Output {
    let root = workspace_root();
    Command::new(gantry_bin().expect("build"))
        .arg("sim")
        .arg("--cluster")
        .arg(root.join("sim/examples/clusters/hetero-seed002.toml"))
        .arg("--trace")
        .arg(root.join("sim/tests/data/traceGPU-small.csv"))
        .arg("--trace")
        .arg(root.join("sim/tests/data/traceMPI-small.csv"))
        .args(["--format", "cmu", "--seed", "7", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("run gantry sim")
}

#[test]
fn the_same_run_twice_writes_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for out in [&a, &b] {
        let o = sim(out, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Not a terminal: no progress output.
        assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&o.stdout).expect("summary on stdout");
        assert_eq!(summary["jobs"], 8, "5 GPU + 3 MPI jobs");
        assert_eq!(summary["completed"], 8);
    }
    for f in ["summary.json", "jobs.csv", "timeseries.csv", "utilisation.svg", "completion_cdf.svg"] {
        let x = std::fs::read(a.join(f)).expect("read");
        assert!(!x.is_empty(), "{f}");
        assert_eq!(x, std::fs::read(b.join(f)).expect("read"), "{f} differs between identical runs");
    }
    let jobs = std::fs::read_to_string(a.join("jobs.csv")).expect("jobs.csv");
    assert_eq!(jobs.lines().count(), 9);
    assert!(jobs.lines().skip(1).all(|l| l.contains(",completed,")), "{jobs}");
}

#[test]
fn a_malformed_trace_is_refused_with_its_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("traceGPU-bad.csv");
    std::fs::write(&bad, "0,0,39,2,0\n5,5,forty,2,0\n").expect("write");
    let out = dir.path().join("out");
    let o = Command::new(gantry_bin().expect("build"))
        .arg("sim")
        .arg("--cluster")
        .arg(workspace_root().join("sim/examples/clusters/hetero-seed002.toml"))
        .arg("--trace")
        .arg(&bad)
        .args(["--format", "cmu", "--out"])
        .arg(&out)
        .output()
        .expect("run");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("traceGPU-bad.csv:2:"), "{err}");
    assert!(!out.exists(), "nothing written for a refused trace");
}

#[test]
fn a_failed_node_stops_counting_and_its_work_reruns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let whole = sim(&dir.path().join("whole"), &[]);
    let failed = sim(&dir.path().join("failed"), &["--fail", "rack0-n0@5", "--fail", "rack1-n0@5:60"]);
    assert!(failed.status.success(), "{}", String::from_utf8_lossy(&failed.stderr));
    let summary =
        |o: &std::process::Output| -> serde_json::Value { serde_json::from_slice(&o.stdout).expect("json") };
    let (w, f) = (summary(&whole), summary(&failed));
    assert_eq!(f["completed"], 8, "the lost work ran again: {f}");
    let hours = |v: &serde_json::Value| v["node_hours"].as_f64().expect("node_hours");
    assert!(hours(&f) < hours(&w), "failed nodes stop counting: {} vs {}", hours(&f), hours(&w));
    let bad = sim(&dir.path().join("bad"), &["--fail", "no-such-node@5"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-node"));
}

#[test]
fn the_simulator_runs_the_scheduler_configuration_and_its_plugin_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = gantry_tests::rust_plugin("gantry_minimal").expect("build the plugin");
    let config = dir.path().join("scheduler.toml");
    std::fs::write(
        &config,
        format!(
            "[engine]\nseed = 3\n[[queues]]\npath = \"root.default\"\nguaranteed = 1.0\n\
             [[plugins]]\nname = \"ff\"\npath = {:?}\n[profile]\nplace = \"ff\"\n",
            plugin.display().to_string()
        ),
    )
    .expect("config");
    let out = dir.path().join("out");
    let o = sim(&out, &["--config", config.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(summary["completed"], 8, "{summary}");
    // A library that is not a plugin stops the run before anything is written.
    std::fs::write(
        dir.path().join("bad.toml"),
        "[[plugins]]\nname = \"x\"\npath = \"/etc/hostname\"\n[profile]\nplace = \"x\"\n",
    )
    .expect("config");
    let bad =
        sim(&dir.path().join("bad-out"), &["--config", dir.path().join("bad.toml").to_str().expect("path")]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("plugin `x`"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(!dir.path().join("bad-out").exists());
}

#[test]
fn an_elastic_cluster_writes_its_node_series_and_refuses_bounds_the_pool_cannot_honour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let elastic = [
        "--elastic-min",
        "5",
        "--elastic-max",
        "22",
        "--scale-up-after",
        "30s",
        "--boot",
        "20s",
        "--scale-down-after",
        "1m",
    ];
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for out in [&a, &b] {
        let o = sim(out, &elastic);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(summary["completed"], 8, "{summary}");
        let e = &summary["elastic"];
        assert_eq!(e["nodes"]["min"], 5, "{summary}");
        let peak = e["nodes"]["peak"].as_u64().expect("peak");
        assert!((5..=22).contains(&peak), "{summary}");
        assert_eq!(summary["node_hours"], e["node_hours"], "node-hours are the billed ones");
    }
    for f in ["summary.json", "nodes.csv", "nodes.svg", "timeseries.csv"] {
        let x = std::fs::read(a.join(f)).expect("read");
        assert!(!x.is_empty(), "{f}");
        assert_eq!(x, std::fs::read(b.join(f)).expect("read"), "{f} differs between identical runs");
    }
    let out = dir.path().join("too-big");
    let o = sim(&out, &["--elastic-min", "5", "--elastic-max", "30"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--elastic-max 30") && err.contains("lists 22"), "{err}");
    assert!(!out.exists(), "nothing written for refused flags");
}
