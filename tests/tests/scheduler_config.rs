//! The scheduler's configuration drives real plugin loading: `gantry-scheduler --check` loads the
//! Rust and C plugins named in a TOML file and maps them onto extension points; bad files and
//! bad profiles are refused with the local plugin name and a reason.

use gantry_scheduler::config::SchedulerConfig;
use gantry_scheduler::{BuildError, build_engine};
use gantry_tests::{c_plugin, rust_plugin, scheduler_bin};
use std::process::Command;

fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("scheduler.toml");
    std::fs::write(&p, text).expect("write config");
    p
}

#[test]
fn check_loads_rust_and_c_plugins_from_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Plugins next to the config, named relative to it.
    std::fs::copy(rust_plugin("gantry_minimal").expect("build"), dir.path().join("libgantry_minimal.so"))
        .expect("copy");
    std::fs::copy(c_plugin("plugins/examples/c/first_fit.c").expect("cc"), dir.path().join("libgantry_c.so"))
        .expect("copy");
    let cfg = write_config(
        dir.path(),
        r#"
        [[queues]]
        path = "root.prod"
        guaranteed = 0.7
        [[queues]]
        path = "root.dev"
        guaranteed = 0.3
        maximum = 0.5
        [[plugins]]
        name = "rusty"
        path = "libgantry_minimal.so"
        [[plugins]]
        name = "cee"
        path = "libgantry_c.so"
        [plugins.config]
        anything = "goes"
        [profile]
        place = "cee"
        "#,
    );
    let out = Command::new(scheduler_bin().expect("build"))
        .arg("--config")
        .arg(&cfg)
        .arg("--check")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("minimal-first-fit"), "{stdout}");
    assert!(stdout.contains("c-first-fit"), "{stdout}");
    assert!(stdout.contains("place     cee"), "{stdout}");
    assert!(stdout.contains("root.dev"), "{stdout}");
    // Run from the config's directory with a bare file name: plugin paths still resolve.
    let out = Command::new(scheduler_bin().expect("build"))
        .current_dir(dir.path())
        .args(["--config", "scheduler.toml", "--check"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn embedded_defaults_check_and_the_daemon_serves_until_sigterm() {
    let out = Command::new(scheduler_bin().expect("build")).arg("--check").output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("root.default"));
    // Without --check it serves the agents' endpoint until asked to stop.
    let dir = tempfile::tempdir().expect("tempdir");
    let port = gantry_tests::free_port();
    let cfg = write_config(dir.path(), &format!("[server]\nagent_listen = \"127.0.0.1:{port}\"\n"));
    let mut child =
        Command::new(scheduler_bin().expect("build")).arg("--config").arg(&cfg).spawn().expect("run");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "guard: the daemon never listened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = i32::try_from(child.id()).expect("pid");
    // SIGTERM through kill(1): this test crate does not depend on libc.
    let status = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "SIGTERM stops the daemon cleanly: {exit:?}");
}

#[test]
fn profile_naming_a_hook_the_plugin_lacks_is_refused_with_its_local_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lib = rust_plugin("gantry_minimal").expect("build");
    let text = format!(
        "[[plugins]]\nname = \"ff\"\npath = {:?}\n[profile]\norder = \"ff\"\n",
        lib.display().to_string()
    );
    let cfg = SchedulerConfig::from_file(&write_config(dir.path(), &text)).expect("parses");
    let err = build_engine(&cfg, None).expect_err("order is not implemented by the minimal plugin");
    assert!(matches!(err, BuildError::Profile { hook: "order", .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("`ff`") && msg.contains("it has: place"), "{msg}");
}

#[test]
fn bad_plugin_in_the_config_names_the_plugin_and_the_reason_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = c_plugin("tests/c/wrong_major.c").expect("cc");
    let text = format!("[[plugins]]\nname = \"future\"\npath = {:?}\n", bad.display().to_string());
    let cfg = write_config(dir.path(), &text);
    let out = Command::new(scheduler_bin().expect("build"))
        .arg("--config")
        .arg(&cfg)
        .arg("--check")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("plugin `future`"), "{stderr}");
    assert_eq!(stderr.matches("ABI v2 plugin").count(), 1, "the reason appears once: {stderr}");
    // A malformed file is refused before anything is loaded, with its line.
    let cfg = write_config(dir.path(), "[[plugins]]\nname = \"x\"\n");
    let out = Command::new(scheduler_bin().expect("build"))
        .arg("--config")
        .arg(&cfg)
        .arg("--check")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing field `path`"), "{stderr}");
}

/// The daemon's engine, built from a config with metrics: each plugin's latency, rejections,
/// failures and quarantine are exported under its configured name, one plugin's record never
/// another's.
#[test]
fn each_configured_plugin_gets_its_own_metrics_under_its_configured_name() {
    use gantry_engine::Event;
    use gantry_scheduler::metrics::SchedulerMetrics;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(rust_plugin("gantry_testplugin").expect("build"), dir.path().join("libtest.so"))
        .expect("copy");
    std::fs::copy(rust_plugin("gantry_minimal").expect("build"), dir.path().join("libminimal.so"))
        .expect("copy");
    let text = r#"
        [engine]
        quarantine_after = 2
        [[plugins]]
        name = "west"
        path = "libtest.so"
        [plugins.config]
        mode = "unknown-node"
        [[plugins]]
        name = "east"
        path = "libminimal.so"
        [profile]
        place = "west"
    "#;
    let cfg = SchedulerConfig::from_str_at(text, &dir.path().join("s.toml"), dir.path().to_path_buf())
        .expect("config");
    let metrics = std::sync::Arc::new(SchedulerMetrics::new());
    let mut engine = build_engine(&cfg, Some(&metrics)).expect("engine");
    gantry_tests::register_all(&mut engine, &gantry_tests::small_cluster()).expect("nodes");
    engine.handle(1, Event::AppSubmitted(gantry_tests::app("a", 1000, 1, 0, 2, false))).expect("submit");
    for t in 2..5 {
        engine.handle(t, Event::Tick).expect("tick");
    }
    metrics.update_from_engine(&engine);
    let text = metrics.encode();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert!(
        value("gantry_scheduler_rejected_decisions_total{plugin=\"west\",reason=\"unknown_node\"}") >= 2.0
    );
    assert_eq!(
        value("gantry_scheduler_rejected_decisions_total{plugin=\"east\",reason=\"unknown_node\"} "),
        0.0
    );
    assert_eq!(value("gantry_scheduler_plugin_quarantines_total{plugin=\"west\"} "), 1.0);
    assert_eq!(value("gantry_scheduler_plugin_quarantined{plugin=\"west\"} "), 1.0);
    assert_eq!(value("gantry_scheduler_plugin_quarantined{plugin=\"east\"} "), 0.0);
    assert_eq!(value("gantry_scheduler_plugin_failures_total{plugin=\"east\"} "), 0.0);
    assert!(
        value("gantry_scheduler_plugin_hook_duration_seconds_count{plugin=\"west\",hook=\"place\"} ") >= 2.0
    );
}
