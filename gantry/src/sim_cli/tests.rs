//! `gantry sim`'s flags: what they build and what they refuse.

use super::*;
use clap::Parser;
use gantry_engine::PlanConfig;
use gantry_sim::cluster::ClusterSpec;
use gantry_sim::deadlines::DeadlineOptions;
use gantry_sim::elastic::ElasticOptions;
use gantry_sim::trace::alibaba::{AlibabaOptions, GpuSpecAs};

#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    sim: SimArgs,
}

/// `gantry sim` with the required flags, `--format FORMAT` and `extra`.
fn args(format: &str, extra: &[&str]) -> SimArgs {
    let base = ["sim", "--cluster", "c.toml", "--trace", "t.csv", "--out", "o", "--format", format];
    Cli::try_parse_from(base.iter().chain(extra)).unwrap().sim
}

fn refused(format: &str, extra: &[&str]) -> String {
    alibaba_options(&args(format, extra)).unwrap_err().to_string()
}

#[test]
fn sim_alibaba_gpu_spec_defaults_to_a_selector() {
    let none = alibaba_options(&args("alibaba", &[])).unwrap();
    assert_eq!(none, AlibabaOptions::default());
    assert_eq!(none.gpu_spec, GpuSpecAs::Selector);
    let hard = alibaba_options(&args("alibaba", &["--alibaba-gpu-spec", "hard"])).unwrap();
    assert_eq!(hard.gpu_spec, GpuSpecAs::Selector);
    // Other formats are read as before.
    assert_eq!(alibaba_options(&args("swim", &[])).unwrap(), AlibabaOptions::default());
}

#[test]
fn sim_alibaba_gpu_spec_soft_with_and_without_slowdown() {
    let soft = alibaba_options(&args("alibaba", &["--alibaba-gpu-spec", "soft"])).unwrap();
    assert_eq!(soft.gpu_spec, GpuSpecAs::Preference { slowdown: 1.0 });
    let slow =
        alibaba_options(&args("alibaba", &["--alibaba-gpu-spec", "soft", "--alibaba-slowdown", "1.5"]))
            .unwrap();
    assert_eq!(slow.gpu_spec, GpuSpecAs::Preference { slowdown: 1.5 });
}

#[test]
fn sim_alibaba_flags_are_refused_where_they_mean_nothing() {
    let e = refused("swim", &["--alibaba-gpu-spec", "soft"]);
    assert!(e.contains("--alibaba-gpu-spec applies only to Alibaba") && e.contains("--format swim"), "{e}");
    let e = refused("gantry", &["--alibaba-slowdown", "2"]);
    assert!(e.contains("--alibaba-slowdown applies only to Alibaba"), "{e}");
    for hard in
        [&["--alibaba-slowdown", "1.5"][..], &["--alibaba-gpu-spec", "hard", "--alibaba-slowdown", "1"]]
    {
        let e = refused("alibaba", hard);
        assert!(e.contains("--alibaba-slowdown needs --alibaba-gpu-spec soft"), "{e}");
    }
    for bad in ["0.5", "-1", "NaN", "inf"] {
        let e = refused("alibaba", &["--alibaba-gpu-spec", "soft", "--alibaba-slowdown", bad]);
        assert!(
            e.contains("--alibaba-slowdown") && e.contains("finite factor of at least 1.0"),
            "{bad}: {e}"
        );
    }
    assert!(Cli::try_parse_from(["sim", "--alibaba-gpu-spec", "medium"]).is_err());
}

fn deadline_refused(extra: &[&str]) -> String {
    deadline_options(&args("swim", extra)).unwrap_err().to_string()
}

#[test]
fn sim_deadline_flags_build_the_options_and_the_plan() {
    assert!(deadline_options(&args("swim", &[])).unwrap().is_none());
    let (baseline, plan) = deadline_options(&args("swim", &["--deadline-share", "0.2"])).unwrap().unwrap();
    assert_eq!(
        baseline,
        DeadlineOptions { reserve: false, ..DeadlineOptions::new(0.2, 3.0, "root.prod", "root.adhoc") }
    );
    assert_eq!(plan, None);
    let (options, plan) = deadline_options(&args(
        "swim",
        &[
            "--deadline-share",
            "0.3",
            "--deadline-slack",
            "2",
            "--deadline-seed",
            "7",
            "--deadline-queue",
            "root.p",
            "--reservations",
            "gree-l",
            "--replanner",
            "yarn",
            "--plan-step",
            "500ms",
            "--plan-horizon",
            "2h",
            "--reservation-lead",
            "1m",
            "--reservation-margin",
            "2s",
            "--plan-enforce-ahead",
            "3s",
        ],
    ))
    .unwrap()
    .unwrap();
    assert_eq!(
        options,
        DeadlineOptions {
            seed: 7,
            reserve: true,
            lead_ms: 60_000,
            margin_ms: 2_000,
            ..DeadlineOptions::new(0.3, 2.0, "root.p", "root.adhoc")
        }
    );
    let plan = plan.expect("a plan");
    assert_eq!(
        plan.plan,
        PlanConfig {
            step_ms: 500,
            horizon_ms: 7_200_000,
            enforce_ahead_ms: 3_000,
            ..PlanConfig::new("root.p")
        }
    );
    assert_eq!(plan.planner, default_planner());
    assert_eq!(plan.planner_config.get("agent").and_then(|v| v.as_str()), Some("gree-l"));
    assert_eq!(plan.planner_config.get("replanner").and_then(|v| v.as_str()), Some("yarn-simple"));
}

#[test]
fn sim_deadline_flags_are_refused_where_they_mean_nothing() {
    for flag in ["--deadline-slack", "--deadline-queue", "--best-effort-queue"] {
        let e = deadline_refused(&[flag, "3"]);
        assert!(e.contains(flag) && e.contains("give --deadline-share too"), "{flag}: {e}");
    }
    let e = deadline_refused(&["--reservations", "gree"]);
    assert!(e.contains("--reservations applies only to deadline jobs"), "{e}");
    let e = deadline_refused(&["--deadline-share", "0.2", "--replanner", "yarn"]);
    assert!(e.contains("--replanner applies only with --reservations"), "{e}");
    let e = deadline_refused(&["--deadline-share", "0.2", "--plan-enforce-ahead", "3s"]);
    assert!(e.contains("--plan-enforce-ahead applies only with --reservations"), "{e}");
    let e = deadline_refused(&[
        "--deadline-share",
        "0.2",
        "--reservations",
        "gree",
        "--plan-enforce-ahead",
        "2h",
    ]);
    assert!(e.contains("--plan-enforce-ahead must be at most 1h"), "{e}");
    let e = deadline_refused(&["--deadline-share", "1.5"]);
    assert!(e.contains("not in [0, 1]"), "{e}");
    let e = deadline_refused(&["--deadline-share", "0.2", "--deadline-slack", "0.5"]);
    assert!(e.contains("at least 1"), "{e}");
    let nodes = ClusterSpec::parse_toml(
        "[[racks]]\nname = \"r\"\n[[racks.nodes]]\ncount = 20\ncpu_cores = 4\nmemory_gib = 8\n",
        "c.toml",
    )
    .unwrap()
    .nodes;
    assert_eq!(
        lost_nodes(&args("swim", &["--lose-nodes", "0.05", "--lose-at", "60"]), &nodes).unwrap().len(),
        1
    );
    assert!(lost_nodes(&args("swim", &[]), &nodes).unwrap().is_empty());
    let e = lost_nodes(&args("swim", &["--lose-nodes", "0.05"]), &nodes).unwrap_err().to_string();
    assert!(e.contains("go together"), "{e}");
    let e =
        lost_nodes(&args("swim", &["--lose-nodes", "2", "--lose-at", "1"]), &nodes).unwrap_err().to_string();
    assert!(e.contains("not in [0, 1]"), "{e}");
}

fn elastic_refused(extra: &[&str], pool: usize) -> String {
    elastic_options(&args("swim", extra), pool).unwrap_err().to_string()
}

#[test]
fn sim_elastic_flags_build_the_autoscaler_options() {
    assert_eq!(elastic_options(&args("swim", &[]), 8).unwrap(), None);
    let defaults = elastic_options(&args("swim", &["--elastic-min", "2"]), 8).unwrap().unwrap();
    assert_eq!(defaults, ElasticOptions::new(2, 8), "max defaults to the pool");
    assert_eq!(
        (defaults.scale_up_after_ms, defaults.scale_down_after_ms, defaults.boot_ms, defaults.check_ms),
        (180_000, 600_000, 120_000, 10_000)
    );
    let set = elastic_options(
        &args(
            "swim",
            &[
                "--elastic-min",
                "1",
                "--elastic-max",
                "4",
                "--scale-up-after",
                "90s",
                "--scale-down-after",
                "0.5h",
                "--boot",
                "45",
                "--scale-check",
                "250ms",
                "--scale-up-for",
                "3m",
            ],
        ),
        8,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        set,
        ElasticOptions {
            min_nodes: 1,
            max_nodes: 4,
            scale_up_after_ms: 90_000,
            scale_up_for_ms: Some(180_000),
            scale_down_after_ms: 1_800_000,
            boot_ms: 45_000,
            check_ms: 250,
        }
    );
    assert_eq!(defaults.scale_up_for_ms, None, "sized by count unless asked");
}

#[test]
fn sim_elastic_flags_are_refused_when_invalid() {
    let e = elastic_refused(&["--elastic-min", "6", "--elastic-max", "5"], 8);
    assert!(e.contains("--elastic-min 6 is above --elastic-max 5"), "{e}");
    let e = elastic_refused(&["--elastic-min", "2", "--elastic-max", "9"], 8);
    assert!(e.contains("--elastic-max 9") && e.contains("lists 8"), "{e}");
    let e = elastic_refused(&["--elastic-min", "9"], 8);
    assert!(e.contains("--elastic-min 9 is above --elastic-max 8"), "{e}");
    let e = elastic_refused(&["--elastic-min", "0", "--elastic-max", "0"], 8);
    assert!(e.contains("--elastic-max must be at least 1"), "{e}");
    let e = elastic_refused(&["--elastic-min", "1", "--scale-check", "0s"], 8);
    assert!(e.contains("--scale-check must be positive"), "{e}");
    let e = elastic_refused(&["--elastic-min", "1", "--scale-up-for", "0"], 8);
    assert!(e.contains("--scale-up-for must be positive"), "{e}");
    for flag in [
        "--elastic-max",
        "--scale-up-after",
        "--scale-up-for",
        "--scale-down-after",
        "--boot",
        "--scale-check",
    ] {
        let e = elastic_refused(&[flag, "3"], 8);
        assert!(e.contains(flag) && e.contains("give --elastic-min too"), "{flag}: {e}");
    }
    let e = elastic_refused(&["--elastic-min", "1", "--fail", "n1@5"], 8);
    assert!(e.contains("--fail cannot be combined"), "{e}");
    for bad in ["-3m", "3 weeks", "m", "NaN"] {
        let boot = format!("--boot={bad}");
        let base = ["sim", "--cluster", "c", "--trace", "t", "--out", "o", "--format", "swim"];
        let e = Cli::try_parse_from(base.into_iter().chain([boot.as_str()])).unwrap_err().to_string();
        assert!(e.contains("invalid value") && e.contains("--boot"), "{bad}: {e}");
    }
    assert!(Cli::try_parse_from(["sim", "--elastic-min", "-1"]).is_err());
}

#[test]
fn sim_daemon_flags_build_the_faults() {
    let a = args(
        "swim",
        &[
            "--restart-scheduler-at",
            "10m",
            "--restart-scheduler-at",
            "90",
            "--partition",
            "rack-1/n3@2m:45s",
            "--node-timeout",
            "20s",
            "--commit-latency",
            "5ms",
            "--commit-failure-rate",
            "0.01",
            "--seed",
            "9",
        ],
    );
    let d = daemon_options(&a).unwrap();
    assert_eq!(d.restarts_at_ms, [600_000, 90_000]);
    assert_eq!(
        d.partitions,
        [gantry_sim::sim::Partition { node: "rack-1/n3".into(), at_ms: 120_000, duration_ms: 45_000 }]
    );
    assert_eq!((d.node_timeout_ms, d.commit_ms, d.commit_failure_rate, d.seed), (20_000, 5, 0.01, 9));
    // Without the flags: the daemon's and the agent's defaults, no faults.
    assert_eq!(daemon_options(&args("swim", &[])).unwrap(), gantry_sim::sim::DaemonOptions::default());
}

#[test]
fn sim_daemon_flags_are_refused_when_invalid() {
    let parse_error = |extra: &[&str]| {
        let base = ["sim", "--cluster", "c.toml", "--trace", "t.csv", "--out", "o", "--format", "swim"];
        Cli::try_parse_from(base.iter().chain(extra)).unwrap_err().to_string()
    };
    for bad in ["n1", "n1@5s", "@5s:10s", "n1@5s:0", "n1@x:10s"] {
        let e = parse_error(&["--partition", bad]);
        assert!(e.contains("--partition"), "{bad}: {e}");
    }
    let e = daemon_options(&args("swim", &["--node-timeout", "2s"])).unwrap_err().to_string();
    assert!(e.contains("between reports"), "{e}");
    let e = daemon_options(&args("swim", &["--commit-failure-rate", "1.5"])).unwrap_err().to_string();
    assert!(e.contains("not in [0, 1)"), "{e}");
}
