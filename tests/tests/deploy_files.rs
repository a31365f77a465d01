//! The operator material in `deploy/` is checked with the programs that will read it, so that
//! what operators copy onto their racks works as shipped:
//!
//! - the Prometheus scrape config and alerting rules pass `promtool check config` and
//!   `promtool check rules`, the rules pass their unit tests (`promtool test rules`), and every
//!   metric they use is one the daemons really expose;
//! - the example configs are accepted by the daemons' own parsers (which refuse unknown keys),
//!   mention every option there is, and agree with the units and the scrape config on paths and
//!   ports;
//! - the systemd units pass `systemd-analyze verify` where it is installed, and in any case
//!   parse as INI with the keys that matter (the agent's `KillMode=process` above all).

use gantry_agent::config::AgentConfig;
use gantry_agent::metrics::AgentMetrics;
use gantry_scheduler::config::SchedulerConfig;
use gantry_scheduler::metrics::{Amount, QueueSample, SchedulerMetrics};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// `deploy/` at the repository root.
fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("deploy")
}

fn read(relative: &str) -> String {
    let path = deploy().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Where `program` is on `PATH`, if it is.
fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file()))
}

/// `promtool`, or a failure that says how to get it: these checks must not pass silently.
fn promtool() -> PathBuf {
    which("promtool").unwrap_or_else(|| {
        panic!(
            "promtool is not on PATH; it checks deploy/prometheus. Install it (Debian/Ubuntu: \
             `apt-get install prometheus`, or the promtool binary from a Prometheus release)"
        )
    })
}

/// Runs `program` in `deploy/prometheus` (rule files are relative to the config).
fn run(program: &Path, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

fn printed(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn prometheus_config_passes_promtool() {
    // promtool checks that the scheduler's token file exists: check a copy beside a made-up one.
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["prometheus.yml", "alerts.yml"] {
        std::fs::copy(deploy().join("prometheus").join(file), dir.path().join(file)).expect("copy");
    }
    std::fs::write(dir.path().join("gantry-token"), "a-token-for-prometheus-0123\n").expect("token");
    // And that the CA file for the scheduler's HTTPS exists: a real one, made by gantry's code.
    let (ca, _) = gantry::ca::create_ca(&dir.path().join("ca"), "test", 1).expect("ca");
    std::fs::copy(ca, dir.path().join("gantry-ca.pem")).expect("copy the CA");
    let out = run(&promtool(), &["check", "config", "prometheus.yml"], dir.path());
    let text = printed(&out);
    assert!(out.status.success(), "promtool check config prometheus.yml:\n{text}");
    assert!(
        text.contains("Checking alerts.yml") && text.contains("rules found"),
        "the config loads alerts.yml:\n{text}"
    );
}

#[test]
fn alerting_rules_pass_promtool_and_their_unit_tests() {
    let dir = deploy().join("prometheus");
    let out = run(&promtool(), &["check", "rules", "alerts.yml"], &dir);
    assert!(out.status.success(), "promtool check rules alerts.yml:\n{}", printed(&out));
    let out = run(&promtool(), &["test", "rules", "alerts_test.yml"], &dir);
    assert!(out.status.success(), "promtool test rules alerts_test.yml:\n{}", printed(&out));
}

/// Names of the form `gantry_…` in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("gantry_") {
        let start = &rest[i..];
        let len = start.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(start.len());
        names.insert(start[..len].to_owned());
        rest = &start[len..];
    }
    names
}

/// The sample names of a classic text exposition.
fn sample_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn alerts_cover_the_brief_and_use_only_metrics_the_daemons_expose() {
    let alerts = read("prometheus/alerts.yml");
    for alert in [
        "GantryNodeLost",
        "GantryAgentStreamDown",
        "GantryPluginRejectingDecisions",
        "GantryQueueStarved",
        "GantrySchedulerDown",
        "GantryDrainedNodesIdle",
        "GantryPluginCallTimedOut",
        "GantryContainersFenced",
        "GantryNodeCondition",
    ] {
        assert!(alerts.contains(&format!("- alert: {alert}\n")), "alerts.yml has no {alert}");
    }
    // Labelled families have no series until something is labelled: give each one.
    let scheduler = SchedulerMetrics::new();
    let amount = Amount { cpu_millis: 1000, memory_bytes: 1, gpus: 1 };
    scheduler.set_queues(&[QueueSample {
        path: "root",
        guaranteed: amount,
        maximum: amount,
        used: amount,
        pending: amount,
    }]);
    scheduler.set_plugin_quarantined("packing", false);
    // The reservation families get theirs from an engine with a plan, a planner (the engine's
    // test planner) and one reservation.
    let planned = gantry_engine::EngineConfig {
        queues: vec![gantry_engine::QueueSpec { path: "root.prod".into(), guaranteed: 1.0, maximum: 1.0 }],
        reservations: Some(gantry_engine::PlanConfig::new("root.prod")),
        ..gantry_engine::EngineConfig::default()
    };
    let (planner, _) = gantry_engine::test_planner::TestPlanner::earliest();
    let mut with_plan = gantry_engine::Engine::new(
        planned,
        vec![Box::new(gantry_engine::StaticPolicy::new(planner))],
        gantry_engine::Profile { reserve: Some(0), ..gantry_engine::Profile::default() },
    )
    .expect("engine");
    let request = gantry_engine::ReservationRequest {
        queue: "root.prod".into(),
        name: String::new(),
        user: "u".into(),
        priority: 0,
        arrival_ms: None,
        deadline_ms: Some(60_000),
        definition: gantry_rdl::parse_text("atom(1c/1GiB, 1, 1, 1s, 1s)").expect("rdl"),
    };
    with_plan
        .handle(0, gantry_engine::Event::ReservationSubmitted { id: None, request })
        .expect("a reservation is answered");
    scheduler.update_from_engine(&with_plan);
    // The idle-node families get their series from a real engine with one (empty) node.
    let mut engine = gantry_engine::Engine::builtin(gantry_engine::EngineConfig::default()).expect("engine");
    let node = gantry_engine::NodeSpec {
        name: "n1".into(),
        rack: String::new(),
        labels: Vec::new(),
        capacity: gantry_engine::Resources::new(1000, 1 << 30, 0),
        gpu_list: Vec::new(),
    };
    engine.handle(0, gantry_engine::Event::NodeRegistered(node)).expect("node");
    scheduler.update_from_engine(&engine);
    scheduler.observe_hook("packing", "place", Duration::from_micros(20));
    scheduler.count_plugin_call_timeout("packing", "place");
    scheduler.set_node_conditions(&[("n1".into(), "DiskPressure".into())]);
    let mut exposed = sample_names(&scheduler.encode());
    exposed.extend(sample_names(&AgentMetrics::new().encode()));
    for (file, text) in [("alerts.yml", alerts), ("alerts_test.yml", read("prometheus/alerts_test.yml"))] {
        let used = metric_names(&text);
        assert!(!used.is_empty(), "{file} uses no gantry metric?");
        let unknown: Vec<_> = used.difference(&exposed).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics no daemon exposes: {unknown:?}\nexposed: {exposed:#?}"
        );
    }
}

/// The fields a section of a config file may have, as the daemon's parser lists them when it
/// refuses an unknown one (serde's "unknown field …, expected one of `a`, `b`").
fn fields(refusal: &str) -> Vec<String> {
    let list = refusal
        .split_once("expected one of ")
        .or_else(|| refusal.split_once("expected "))
        .unwrap_or_else(|| panic!("the parser did not list the fields: {refusal}"))
        .1;
    list.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Whether an example config shows `key` — set, or commented out with a value, or as a table
/// header — so that an operator reading it sees every option there is.
fn shows(example: &str, key: &str) -> bool {
    example.lines().any(|line| {
        let line = line.trim_start_matches(|c: char| c == '#' || c.is_whitespace());
        let value = line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='));
        let table = line.starts_with('[')
            && (line.ends_with(&format!("[{key}]")) || line.ends_with(&format!(".{key}]")));
        value || table || line == format!("[[{key}]]")
    })
}

#[test]
fn scheduler_example_config_is_accepted_and_shows_every_option() {
    let path = deploy().join("config/scheduler.toml");
    let config =
        SchedulerConfig::from_file(&path).unwrap_or_else(|e| panic!("the scheduler refuses it: {e}"));
    let example = read("config/scheduler.toml");

    let probe = |header: &str| {
        let text = format!("{header}\n__probe__ = 1\n");
        let err = SchedulerConfig::from_str_at(&text, Path::new("<probe>"), PathBuf::from("/"))
            .expect_err("an unknown key is refused");
        fields(&err.to_string())
    };
    let mut missing = Vec::new();
    for (header, section) in [
        ("", "top level"),
        ("[server]", "[server]"),
        ("[engine]", "[engine]"),
        ("[store]", "[store]"),
        ("[[queues]]", "[[queues]]"),
        ("[[plugins]]", "[[plugins]]"),
        ("[profile]", "[profile]"),
        ("[security]", "[security]"),
    ] {
        let keys = probe(header);
        assert!(!keys.is_empty(), "{section}: no fields listed");
        missing.extend(keys.into_iter().filter(|k| !shows(&example, k)).map(|k| format!("{section} {k}")));
    }
    assert!(missing.is_empty(), "scheduler.toml does not show: {missing:?}");

    // The unit's StateDirectory is the data directory; the scrape config scrapes the REST port.
    assert_eq!(config.data_dir(), Path::new("/var/lib/gantry-scheduler"));
    let unit = read("systemd/gantry-scheduler.service");
    assert!(unit.contains("\nStateDirectory=gantry-scheduler\n"), "the unit creates the data directory");
    let port = config.server.listen.rsplit(':').next().expect("listen has a port");
    let prometheus = read("prometheus/prometheus.yml");
    assert!(
        prometheus.contains(&format!("\"gantry-scheduler:{port}\"")),
        "prometheus.yml scrapes port {port}"
    );
}

#[test]
fn agent_example_config_is_accepted_and_shows_every_option() {
    let path = deploy().join("config/agent.toml");
    let config = AgentConfig::from_file(&path).unwrap_or_else(|e| panic!("the agent refuses it: {e}"));
    let example = read("config/agent.toml");

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("deploy-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let probe = |header: &str| {
        let file = dir.join("probe.toml");
        std::fs::write(&file, format!("{header}\n__probe__ = 1\n")).expect("write probe");
        let err = AgentConfig::from_file(&file).expect_err("an unknown key is refused");
        fields(&err.to_string())
    };
    let mut missing = Vec::new();
    for (header, section) in [("", "top level"), ("[reserve]", "[reserve]")] {
        let keys = probe(header);
        assert!(!keys.is_empty(), "{section}: no fields listed");
        missing.extend(keys.into_iter().filter(|k| !shows(&example, k)).map(|k| format!("{section} {k}")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(missing.is_empty(), "agent.toml does not show: {missing:?}");

    // The agent reaches the scheduler's agent port, and Prometheus the agent's metrics port.
    let scheduler =
        SchedulerConfig::from_file(&deploy().join("config/scheduler.toml")).expect("scheduler config");
    let agent_port = scheduler.server.agent_listen.rsplit(':').next().expect("agent_listen has a port");
    assert!(
        config.scheduler.ends_with(&format!(":{agent_port}")),
        "{} is not port {agent_port}",
        config.scheduler
    );
    let metrics_port = config.metrics_listen.rsplit(':').next().expect("metrics_listen has a port");
    let prometheus = read("prometheus/prometheus.yml");
    assert!(
        prometheus.contains(&format!(":{metrics_port}\"")),
        "prometheus.yml scrapes agents on {metrics_port}"
    );
}

/// A unit file as sections of key → values (a key may repeat).
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Parses a systemd unit as INI, refusing what systemd would not read as intended: keys outside
/// a section, lines that are neither comments, headers nor `Key=Value`, and line continuations
/// (which these files do not use).
fn parse_unit(name: &str, text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(!line.ends_with('\\'), "{name}:{}: line continuation", n + 1);
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(header.to_owned());
            unit.entry(header.to_owned()).or_default();
            continue;
        }
        let (key, value) =
            line.split_once('=').unwrap_or_else(|| panic!("{name}:{}: not Key=Value: {line}", n + 1));
        let section = section.as_ref().unwrap_or_else(|| panic!("{name}:{}: key outside a section", n + 1));
        let key = key.trim();
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()),
            "{name}:{}: bad key {key:?}",
            n + 1
        );
        unit.entry(section.clone())
            .or_default()
            .entry(key.to_owned())
            .or_default()
            .push(value.trim().to_owned());
    }
    unit
}

/// The single value of `section.key`.
fn one<'a>(unit: &'a Unit, name: &str, section: &str, key: &str) -> &'a str {
    match unit.get(section).and_then(|s| s.get(key)).map(Vec::as_slice) {
        Some([value]) => value,
        other => panic!("{name}: [{section}] {key} should be set once, is {other:?}"),
    }
}

#[test]
fn systemd_units_are_valid() {
    let units = [
        ("gantry-scheduler.service", "gantry-scheduler", "scheduler.toml"),
        ("gantry-agent.service", "gantry-agent", "agent.toml"),
    ];
    for (name, binary, config) in units {
        let text = read(&format!("systemd/{name}"));
        let unit = parse_unit(name, &text);
        assert_eq!(
            unit.keys().map(String::as_str).collect::<Vec<_>>(),
            ["Install", "Service", "Unit"],
            "{name}"
        );
        assert!(!one(&unit, name, "Unit", "Description").is_empty());
        let exec = one(&unit, name, "Service", "ExecStart");
        let mut argv = exec.split_whitespace();
        assert_eq!(
            argv.next(),
            Some(format!("/usr/local/bin/{binary}").as_str()),
            "{name}: ExecStart runs {exec}"
        );
        assert!(
            exec.contains(&format!("--config /etc/gantry/{config}")),
            "{name}: ExecStart reads {config}: {exec}"
        );
        assert!(deploy().join("config").join(config).is_file());
        assert!(
            ["always", "on-failure"].contains(&one(&unit, name, "Service", "Restart")),
            "{name}: restarts"
        );
        assert_eq!(one(&unit, name, "Install", "WantedBy"), "multi-user.target", "{name}");
    }
    let agent = parse_unit("gantry-agent.service", &read("systemd/gantry-agent.service"));
    assert_eq!(
        one(&agent, "agent", "Service", "KillMode"),
        "process",
        "containers' shims live in the agent's cgroup: an agent restart must not kill them"
    );
    assert_eq!(
        one(&agent, "agent", "Service", "User"),
        "root",
        "the agent switches containers to their users"
    );
    let scheduler = parse_unit("gantry-scheduler.service", &read("systemd/gantry-scheduler.service"));
    assert_eq!(
        one(&scheduler, "scheduler", "Service", "User"),
        "gantry",
        "the scheduler needs no privileges"
    );

    let Some(analyze) = which("systemd-analyze") else {
        eprintln!("systemd-analyze is not installed: the units were checked as INI only");
        return;
    };
    // `verify` insists that ExecStart's binary exists; CI has not installed it, so the units are
    // verified as copies whose /usr/local/bin/ is a directory of stand-in executables. Nothing
    // else in them changes.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("deploy-units-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("temporary directory");
    for (name, binary, _) in units {
        let stand_in = bin.join(binary);
        std::fs::write(&stand_in, "#!/bin/sh\nexit 0\n").expect("stand-in");
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let copy = dir.join(name);
        let text =
            read(&format!("systemd/{name}")).replace("/usr/local/bin/", &format!("{}/", bin.display()));
        std::fs::write(&copy, text).expect("unit copy");
        let out = run(&analyze, &["verify", &copy.to_string_lossy()], &dir);
        let said = printed(&out);
        assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify {name}:\n{said}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("systemd-analyze verify passed on both units (and the INI checks)");
}

#[test]
fn the_operations_guide_covers_every_deploy_file() {
    let guide = read("OPERATIONS.md");
    for file in [
        "systemd/gantry-scheduler.service",
        "systemd/gantry-agent.service",
        "config/scheduler.toml",
        "config/agent.toml",
        "prometheus/prometheus.yml",
        "prometheus/alerts.yml",
        "prometheus/alerts_test.yml",
    ] {
        assert!(deploy().join(file).is_file(), "deploy/{file} is missing");
        assert!(guide.contains(&format!("deploy/{file}")), "OPERATIONS.md does not mention deploy/{file}");
    }
    for topic in ["KillMode=process", "gantry nodes", "/metrics", "Upgrad"] {
        assert!(guide.contains(topic), "OPERATIONS.md says nothing about {topic}");
    }
}
