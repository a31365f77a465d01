//! The configuration's parsing and checks: defaults, paths, refusals with reasons.

use super::*;
use gantry_engine::PlanConfig;

fn parse(text: &str) -> Result<SchedulerConfig, ConfigError> {
    SchedulerConfig::from_str_at(text, Path::new("<test>"), PathBuf::from("/etc/gantry"))
}

#[test]
fn empty_config_is_all_defaults() {
    let c = parse("").expect("empty config");
    assert_eq!(c.engine_config(), EngineConfig::default());
}

#[test]
fn full_config_parses_and_resolves_paths() {
    let c = parse(
        r#"
            [engine]
            seed = 9
            [[queues]]
            path = "root.prod"
            guaranteed = 0.6
            [[queues]]
            path = "root.dev"
            guaranteed = 0.4
            maximum = 0.5
            [[plugins]]
            name = "ff"
            path = "plugins/libgantry_minimal.so"
            [plugins.config]
            threshold = 0.6
            [profile]
            place = "ff"
            "#,
    )
    .expect("valid config");
    assert_eq!(c.engine_config().seed, 9);
    assert_eq!(c.engine_config().queues.len(), 2);
    assert_eq!(c.plugin_path(&c.plugins[0]), PathBuf::from("/etc/gantry/plugins/libgantry_minimal.so"));
    let here = SchedulerConfig { base_dir: PathBuf::from("."), ..c.clone() };
    let mut p = here.plugins[0].clone();
    for (written, resolved) in
        [("./lib.so", "./lib.so"), ("lib.so", "./lib.so"), ("../lib.so", "./../lib.so")]
    {
        p.path = PathBuf::from(written);
        // As text: Path equality would not see `././`.
        assert_eq!(here.plugin_path(&p).display().to_string(), resolved, "{written}");
    }
    assert_eq!(c.plugins[0].config.get("threshold").and_then(|v| v.as_float()), Some(0.6));
    assert_eq!(c.plugins[0].call_budget_ms, DEFAULT_CALL_BUDGET_MS, "a hang is bounded by default");
}

#[test]
fn bad_configs_are_refused_with_reasons() {
    let cases = [
        ("[engine]\nsede = 1\n", "unknown field"),
        ("[profile]\nplace = \"nope\"\n", "not in [[plugins]]"),
        (
            "[profile]\nreserve = \"nope\"\n",
            "profile.reserve names plugin `nope`, which is not in [[plugins]]",
        ),
        (
            "[[queues]]\npath = \"root.a\"\nguaranteed = 0.7\n[[queues]]\npath = \"root.b\"\nguaranteed = 0.7\n",
            "more than 1",
        ),
        ("[[queues]]\npath = \"root.a.b\"\nguaranteed = 0.5\n", "parent `root.a` is not defined"),
        ("[[queues]]\npath = \"root.a\"\nguaranteed = 0.5\nmaximum = 0.2\n", "maximum"),
        ("[engine]\nquarantine_after = 0\n", "at least 1"),
        (
            "[[plugins]]\nname = \"a\"\npath = \"x.so\"\n[[plugins]]\nname = \"a\"\npath = \"y.so\"\n",
            "defined twice",
        ),
        ("[[plugins]]\nname = \"a\"\npath = \"x.so\"\ncall_budget_ms = 600001\n", "call_budget_ms 600001"),
        ("[[plugins]]\nname = \"a\"\npath = \"x.so\"\ncall_budget_ms = -1\n", "TOML"),
        ("[engine\n", "TOML"),
        (
            "[[queues]]\npath = \"root.pr\\u202Eod\"\nguaranteed = 0.5\n",
            "contains U+202E (RIGHT-TO-LEFT OVERRIDE)",
        ),
        (
            "[security]\ntokens_file = \"t\"\nacl_submit_applications = \"al\\u200Bice\"\n",
            "contains U+200B (ZERO WIDTH SPACE)",
        ),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err(text).to_string();
        assert!(err.contains(want) || (want == "TOML" && err.contains("<test>")), "{text:?}: {err}");
    }
}

#[test]
fn store_retention_follows_the_engine_by_default_and_bad_values_are_refused() {
    use crate::store::Retention;
    use std::time::Duration;
    let c = parse("").expect("defaults");
    assert_eq!(c.retention(), Retention { max_completed_apps: 10_000, max_age: None, chunk_apps: 100 });
    assert_eq!(c.prune_interval(), Duration::from_secs(60));
    let c = parse("[engine]\nmax_completed_apps = 50\n").expect("memory only");
    assert_eq!(
        c.retention().max_completed_apps,
        50,
        "YARN: the state store follows max-completed-applications"
    );
    let c = parse(
        "[store]\nmax_completed_apps = 1000000\nretain_completed_for = \"7d\"\n\
             prune_interval = \"90s\"\nprune_chunk_apps = 200\n",
    )
    .expect("full section");
    assert_eq!(
        c.retention(),
        Retention {
            max_completed_apps: 1_000_000,
            max_age: Some(Duration::from_secs(7 * 86_400)),
            chunk_apps: 200
        }
    );
    assert_eq!(c.prune_interval(), Duration::from_secs(90));
    let c = parse("[store]\nretain_completed_for = \"0\"\nprune_interval = \"250ms\"\n").expect("no age");
    assert_eq!((c.retention().max_age, c.prune_interval()), (None, Duration::from_millis(250)));
    let cases = [
        (
            "[engine]\nmax_completed_apps = 100\n[store]\nmax_completed_apps = 99\n",
            "below engine.max_completed_apps 100",
        ),
        ("[store]\nretain_completed_for = \"7x\"\n", "not a duration"),
        ("[store]\nretain_completed_for = \"1.5d\"\n", "not a duration"),
        ("[store]\nretain_completed_for = \"d\"\n", "not a duration"),
        ("[store]\nretain_completed_for = 7\n", "invalid type"),
        ("[store]\nretain_completed_for = \"500ms\"\n", "below 1s"),
        ("[store]\nretain_completed_for = \"99999999999999999d\"\n", "too long"),
        ("[store]\nprune_interval = \"50ms\"\n", "prune_interval"),
        ("[store]\nprune_interval = \"2d\"\n", "prune_interval"),
        ("[store]\nprune_chunk_apps = 0\n", "prune_chunk_apps 0"),
        ("[store]\nmax_completed = 5\n", "unknown field"),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err(text).to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
}

#[test]
fn reservations_need_a_planner_plugin_and_old_planner_keys_say_where_they_went() {
    let planner = "[[plugins]]\nname = \"rayon\"\npath = \"libgantry_rayon.so\"\n[plugins.config]\nagent = \"gree-l\"\n";
    let queues = "[[queues]]\npath = \"root.prod\"\nguaranteed = 1.0\n";
    let c = parse(&format!(
            "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\noptimize_interval_ms = 60000\nenforce_ahead_ms = 3000\n"
        ))
        .expect("valid");
    assert_eq!(
        c.engine_config().reservations,
        Some(PlanConfig {
            optimize_interval_ms: 60_000,
            enforce_ahead_ms: 3_000,
            ..PlanConfig::new("root.prod")
        })
    );
    assert_eq!(c.profile.reserve.as_deref(), Some("rayon"));
    let cases = [
        (format!("{queues}[reservations]\nqueue = \"root.prod\"\n"), "needs a planner"),
        (format!("{queues}{planner}[profile]\nreserve = \"rayon\"\n"), "no queue is reservable"),
        (
            format!(
                "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\nagent = \"gree\"\n"
            ),
            "reservations.agent moved to the reservation planner's own configuration",
        ),
        (
            format!(
                "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\nreplanner = \"yarn\"\n"
            ),
            "replanner = \"yarn\" in its [plugins.config]",
        ),
        (
            format!(
                "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\noptimize_interval_ms = 10\n"
            ),
            "optimize_interval_ms 10",
        ),
        (
            format!(
                "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\nenforce_ahead_ms = 3600001\n"
            ),
            "reservations.enforce_ahead_ms 3600001 is not in 0..=3600000",
        ),
    ];
    for (text, want) in cases {
        let err = parse(&text).expect_err(&text).to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
}

#[test]
fn oversized_text_is_refused_as_an_oversized_file_is() {
    let huge = format!("# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
    assert!(matches!(parse(&huge), Err(ConfigError::TooLarge { .. })));
}
