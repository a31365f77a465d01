//! Issue 20, item 5: what a plugin author sees when their plugin misbehaves, in `gantry sim` (the
//! real binary, the real test plugin library): a log line on stderr per plugin and reason —
//! naming the hook, the request and node a refused decision concerned, the kind value of a
//! `bad_kind`, the location of a panic — rate-limited, and the totals in summary.json's
//! `plugins` section. The engine writes the same lines in the daemon's log.

use gantry_tests::{gantry_bin, workspace_root};
use std::path::Path;
use std::process::Command;

/// Runs the small CMU trace on seed 002's cluster with `place` served by the test plugin in
/// `mode` (and `order` by a sane instance of it); returns (summary, stderr).
fn sim_with(dir: &Path, mode: &str, engine: &str) -> (serde_json::Value, String) {
    let root = workspace_root();
    let plugin = gantry_tests::rust_plugin("gantry_testplugin").expect("test plugin");
    let config = dir.join(format!("{mode}.toml"));
    std::fs::write(
        &config,
        format!(
            "[engine]\n{engine}\n[[plugins]]\nname = \"sane\"\npath = {p:?}\n[plugins.config]\nmode = \"ok\"\n\
             [[plugins]]\nname = \"broken\"\npath = {p:?}\n[plugins.config]\nmode = \"{mode}\"\n\
             [profile]\norder = \"sane\"\nplace = \"broken\"\n",
            p = plugin.display().to_string()
        ),
    )
    .expect("config");
    let out = Command::new(gantry_bin().expect("build"))
        .arg("sim")
        .arg("--cluster")
        .arg(root.join("sim/examples/clusters/hetero-seed002.toml"))
        .arg("--trace")
        .arg(root.join("sim/tests/data/traceGPU-small.csv"))
        .arg("--trace")
        .arg(root.join("sim/tests/data/traceMPI-small.csv"))
        .args(["--format", "cmu", "--seed", "7", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(dir.join(mode))
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run gantry sim");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(mode).join("summary.json")).expect("summary.json"))
            .expect("json");
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary on stdout");
    assert_eq!(file, printed);
    (file, stderr)
}

fn lines_with<'a>(stderr: &'a str, what: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(what)).collect()
}

#[test]
fn a_panicking_plugin_is_counted_and_logged_once_in_a_while_with_where_it_panicked() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Never quarantined: it fails in every cycle with something pending.
    let (summary, stderr) = sim_with(dir.path(), "panic", "quarantine_after = 1000000");
    let broken = &summary["plugins"]["broken"];
    let panics = broken["panics"].as_u64().expect("panics");
    assert!(panics >= 4, "{summary}");
    assert_eq!(broken["failed_calls"], panics, "{summary}");
    assert_eq!(broken["quarantines"], 0, "{summary}");
    assert_eq!(summary["plugins"]["sane"]["failed_calls"], 0, "{summary}");
    assert_eq!(summary["completed"], 8, "the built-in placed the work: {summary}");
    let failed = lines_with(&stderr, "plugin call failed");
    assert!(!failed.is_empty(), "{stderr}");
    // Rate-limited: the 1st, 2nd, 4th … failure, not every one.
    assert!((failed.len() as u64) < panics && failed.len() <= 1 + panics.ilog2() as usize, "{stderr}");
    for l in &failed {
        assert!(l.contains(r#"policy="broken""#) && l.contains(r#"hook="place""#), "{l}");
        assert!(l.contains("test plugin panic at tests/test-plugin/src/lib.rs:"), "where it panicked: {l}");
    }
    // The panic reached the host's log only: Rust's own hook printed nothing.
    assert!(!stderr.contains("stack backtrace") && !stderr.contains("panicked at"), "{stderr}");
}

#[test]
fn refused_decisions_name_the_request_and_node_and_a_bad_kind_its_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (summary, stderr) = sim_with(dir.path(), "double-alloc", "");
    let rejected = &summary["plugins"]["broken"]["rejected"];
    assert!(rejected["does_not_fit"].as_u64().is_some_and(|n| n > 0), "{summary}");
    assert_eq!(summary["plugins"]["broken"]["failed_calls"], 0, "infeasible is not broken: {summary}");
    let refused = lines_with(&stderr, "decisions rejected");
    let first = refused.first().unwrap_or_else(|| panic!("no refusal logged: {stderr}"));
    for want in
        [r#"policy="broken""#, r#"hook="place""#, r#"reason="does_not_fit""#, "PLACE app ", " request "]
    {
        assert!(first.contains(want), "{want}: {first}");
    }
    assert!(first.contains("on node `rack0-n0`"), "the node by name: {first}");

    let (summary, stderr) = sim_with(dir.path(), "bad-kind", "");
    let broken = &summary["plugins"]["broken"];
    assert!(broken["rejected"]["bad_kind"].as_u64().is_some_and(|n| n > 0), "{summary}");
    assert!(broken["quarantines"].as_u64().is_some_and(|n| n > 0), "malformed thrice in a row: {summary}");
    let refused = lines_with(&stderr, r#"reason="bad_kind""#);
    assert!(refused.first().is_some_and(|l| l.contains("kind 77")), "{stderr}");
    let failed = lines_with(&stderr, "plugin call failed");
    assert!(
        failed.first().is_some_and(|l| l.contains("malformed decisions: 1 bad_kind (kind 77)")),
        "{stderr}"
    );
    assert!(!lines_with(&stderr, "plugin quarantined").is_empty(), "{stderr}");
}

#[test]
fn a_sane_run_has_zeroes_and_a_quiet_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (summary, stderr) = sim_with(dir.path(), "ok", "");
    let zero =
        serde_json::json!({"failed_calls": 0, "panics": 0, "timeouts": 0, "quarantines": 0, "rejected": {}});
    assert_eq!(summary["plugins"]["broken"], zero, "{summary}");
    assert_eq!(summary["plugins"]["sane"], zero, "{summary}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// A configuration without the queue a trace's jobs go to used to refuse every job in silence:
/// stderr says so now (rate-limited), and summary.json counts them.
#[test]
fn jobs_refused_for_a_missing_queue_are_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = workspace_root();
    let config = dir.path().join("prod-only.toml");
    std::fs::write(&config, "[[queues]]\npath = \"root.prod\"\nguaranteed = 1.0\n").expect("config");
    let out = Command::new(gantry_bin().expect("build"))
        .arg("sim")
        .arg("--cluster")
        .arg(root.join("sim/examples/clusters/hetero-seed002.toml"))
        .arg("--trace")
        .arg(root.join("sim/tests/data/traceGPU-small.csv"))
        .arg("--trace")
        .arg(root.join("sim/tests/data/traceMPI-small.csv"))
        .args(["--format", "cmu", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(dir.path().join("out"))
        .env_remove("RUST_LOG")
        .output()
        .expect("run gantry sim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary");
    assert_eq!(summary["rejected"], 8, "{summary}");
    let refused = lines_with(&stderr, "submission refused");
    assert!(refused.first().is_some_and(|l| l.contains("root.default")), "{stderr}");
    assert_eq!(refused.len(), 4, "the 1st, 2nd, 4th and 8th of 8: {stderr}");
}
