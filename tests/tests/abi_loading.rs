//! Loading real shared libraries through the ABI v1: good plugins in Rust and C load and report
//! themselves; every kind of bad library is refused with its own error, by the host API and by
//! `gantry plugin inspect` (one line, non-zero exit, never a crash).

use gantry_scheduler::plugin_host::{DynamicPlugin, LoadError, inspect};
use gantry_tests::{c_plugin, gantry_bin, rust_plugin};
use std::path::Path;
use std::process::Command;

fn run_inspect(path: &Path, json: bool) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(gantry_bin().expect("gantry binary"));
    cmd.args(["plugin", "inspect"]).arg(path);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("run gantry");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rust_example_loads_and_reports_itself() {
    let path = rust_plugin("gantry_minimal").expect("build");
    let info = inspect(&path).expect("loads");
    assert_eq!(info.name, "minimal-first-fit");
    assert_eq!(
        (info.abi_major, info.abi_minor),
        (gantry_sdk::abi::GANTRY_ABI_MAJOR, gantry_sdk::abi::GANTRY_ABI_MINOR)
    );
    assert_eq!(info.hook_names(), vec!["place"]);
    let (code, stdout, _) = run_inspect(&path, false);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("name:     minimal-first-fit"), "{stdout}");
    assert!(stdout.contains("hooks:    place"), "{stdout}");
    assert!(stdout.contains(&format!("abi:      1.{}", gantry_sdk::abi::GANTRY_ABI_MINOR)), "{stdout}");
}

#[test]
fn c_example_loads_and_reports_itself() {
    let path = c_plugin("plugins/examples/c/first_fit.c").expect("compile");
    let info = inspect(&path).expect("loads");
    assert_eq!(info.name, "c-first-fit");
    assert_eq!(info.version, "0.1.0");
    assert_eq!(info.hook_names(), vec!["place"]);
    let (code, stdout, _) = run_inspect(&path, true);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    assert_eq!(v["name"], "c-first-fit");
    assert_eq!(v["abi"], format!("1.{}", gantry_sdk::abi::GANTRY_ABI_MINOR));
    assert_eq!(v["hooks"], serde_json::json!(["place"]));
}

/// Each bad C library, the error the host must give, and a phrase of its message.
#[test]
fn bad_libraries_are_refused_each_with_its_own_error() {
    type Check = fn(&LoadError) -> bool;
    let cases: [(&str, Check, &str); 7] = [
        ("tests/c/wrong_major.c", |e| matches!(e, LoadError::OtherMajor { major: 2, .. }), "ABI v2 plugin"),
        ("tests/c/major_mismatch.c", |e| matches!(e, LoadError::MajorMismatch { got: 2, .. }), "major 2"),
        ("tests/c/no_symbol.c", |e| matches!(e, LoadError::MissingSymbol { .. }), "no `gantry_plugin_v1`"),
        (
            "tests/c/small_struct.c",
            |e| matches!(e, LoadError::StructTooSmall { got: 16, need: 80, .. }),
            "struct_size 16",
        ),
        (
            "tests/c/null_name.c",
            |e| matches!(e, LoadError::BadString { field: "name", problem: "null", .. }),
            "name is null",
        ),
        ("tests/c/caps_mismatch.c", |e| matches!(e, LoadError::Capabilities { .. }), "capabilities"),
        ("tests/c/returns_null.c", |e| matches!(e, LoadError::Refused { .. }), "refused this host"),
    ];
    for (source, check, phrase) in cases {
        let path = c_plugin(source).expect("compile");
        let err = inspect(&path).expect_err(source);
        assert!(check(&err), "{source}: unexpected error {err:?}");
        assert!(err.to_string().contains(phrase), "{source}: message {err}");
        let (code, stdout, stderr) = run_inspect(&path, false);
        assert_eq!(code, Some(1), "{source}: exit code (None = killed by a signal)");
        assert!(stdout.is_empty(), "{source}: stdout {stdout}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{source}: one line, got {stderr}");
        assert!(stderr.contains(phrase), "{source}: {stderr}");
        // Loading for use fails the same way.
        assert!(DynamicPlugin::load(&path, "{}").is_err());
    }
}

#[test]
fn files_that_are_not_plugins_are_refused_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = rust_plugin("gantry_minimal").expect("build");
    let bytes = std::fs::read(&good).expect("read plugin");
    // A plugin cut short at several points: the loader would map past the end of the file and
    // die of SIGBUS; the host must refuse it first.
    for cut in [16, 64, 1000, bytes.len() / 3, bytes.len() - 1] {
        let p = dir.path().join(format!("cut-{cut}.so"));
        std::fs::write(&p, &bytes[..cut]).expect("write");
        let err = inspect(&p).expect_err("truncated");
        assert!(matches!(err, LoadError::Open { .. }), "{cut}: {err:?}");
        let (code, _, stderr) = run_inspect(&p, false);
        assert_eq!(code, Some(1), "cut at {cut}: {stderr}");
        assert!(stderr.contains("truncated") || stderr.contains("ELF"), "{stderr}");
    }
    let text = dir.path().join("notes.so");
    std::fs::write(&text, "just text\n").expect("write");
    let (code, _, stderr) = run_inspect(&text, false);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not an ELF file"), "{stderr}");
    let (code, _, stderr) = run_inspect(&dir.path().join("missing.so"), false);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no such file"), "{stderr}");
    // A real shared library that is not a gantry plugin: the C runtime's math library.
    let libm = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
    if let Some(libm) = libm {
        let (code, _, stderr) = run_inspect(libm, false);
        assert_eq!(code, Some(1));
        assert!(stderr.contains("no `gantry_plugin_v1` symbol"), "{stderr}");
    }
}

#[test]
fn create_errors_and_panics_are_reported_not_fatal() {
    let path = rust_plugin("gantry_testplugin").expect("build");
    let err = DynamicPlugin::load(&path, r#"{"mode": "no-such-mode"}"#).expect_err("bad mode");
    assert!(matches!(err, LoadError::Create { code: -1, .. }), "{err:?}");
    let err = DynamicPlugin::load(&path, r#"{"mode": "panic-create"}"#).expect_err("panics");
    match err {
        LoadError::Create { code, message, .. } => {
            assert_eq!(code, gantry_sdk::abi::GANTRY_ERR_PANIC);
            assert!(message.contains("panicked"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    DynamicPlugin::load(&path, r#"{"mode": "ok"}"#).expect("a good config loads");
}

/// Issue 20, item 5: a plugin built for a newer minor than the host loads (minors only append),
/// but its calls may all fail on the host's shorter view; the host says so at load time, in
/// `gantry plugin inspect` and in the scheduler's log, instead of failing silently later.
#[test]
fn a_plugin_for_a_newer_minor_loads_with_a_warning() {
    use gantry_sdk::abi::{GANTRY_ABI_MINOR, GANTRY_HOOK_PLACE};
    let path = c_plugin("tests/c/newer_minor.c").expect("compile");
    let want = format!("built for ABI 1.{}; this host speaks 1.{GANTRY_ABI_MINOR}", GANTRY_ABI_MINOR + 1);
    let info = inspect(&path).expect("loads");
    assert!(info.newer_minor_warning().is_some_and(|w| w.contains(&want)), "{info:?}");
    let (code, stdout, _) = run_inspect(&path, false);
    assert_eq!(code, Some(0));
    assert!(stdout.lines().any(|l| l.starts_with("warning:") && l.contains(&want)), "{stdout}");
    let (_, stdout, _) = run_inspect(&path, true);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert!(v["warning"].as_str().is_some_and(|w| w.contains(&want)), "{v}");
    // A plugin of this host's minor gets no warning.
    let (_, stdout, _) = run_inspect(&rust_plugin("gantry_minimal").expect("build"), false);
    assert!(!stdout.contains("warning"), "{stdout}");

    // The scheduler logs the warning when it loads the plugin.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("scheduler.toml");
    std::fs::write(
        &config,
        format!(
            "[[plugins]]\nname = \"new\"\npath = {:?}\n[profile]\nplace = \"new\"\n",
            path.display().to_string()
        ),
    )
    .expect("config");
    let out = Command::new(gantry_tests::scheduler_bin().expect("scheduler"))
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .output()
        .expect("run gantry-scheduler");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.lines().any(|l| l.contains("WARN") && l.contains(&want)), "{stderr}");

    // What the warning is about: its calls fail on this host's view.
    use gantry_engine::Policy;
    let mut plugin = DynamicPlugin::load(&path, "{}").expect("loads");
    let (nodes, pending) = (Vec::new(), Vec::new());
    let view = gantry_sdk::View {
        hook: GANTRY_HOOK_PLACE,
        now_ms: 0,
        cycle: 1,
        seed: 0,
        cluster: Default::default(),
        strings: &[],
        labels: &[],
        nodes: &nodes,
        gpus: &[],
        queues: &[],
        apps: &[],
        requests: &[],
        containers: &[],
        reservations: &[],
        pending: &pending,
        node_usage: &[],
        plan: gantry_sdk::PlanView::default(),
    };
    assert!(plugin.call(&view, &mut gantry_sdk::Decisions::new()).is_err());
}
