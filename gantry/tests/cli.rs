//! The `gantry` CLI's cluster commands against the REST API's in-memory fake backend (the one
//! the routes' tests use, `scheduler/tests/fake_backend/`), over real HTTP on 127.0.0.1: the
//! CLI's parsing, its requests and its output.

// The routes' tests use more of the fake than the CLI's do.
#[allow(dead_code)]
#[path = "../../scheduler/tests/fake_backend/mod.rs"]
mod fake_backend;

use clap::Parser;
use fake_backend::*;
use gantry::cli::{self, CliError, ClientCommand};
use gantry_scheduler::api::types::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;

// ----- the CLI: parsing ------------------------------------------------------------------------

#[derive(Debug, Parser)]
struct TestCli {
    #[command(subcommand)]
    cmd: ClientCommand,
}

fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
    TestCli::try_parse_from(std::iter::once("gantry").chain(args.iter().copied())).map(|c| c.cmd)
}

#[test]
fn cpu_amounts_are_exact_millicores() {
    assert_eq!(cli::parse_cpu("1"), Ok(1000));
    assert_eq!(cli::parse_cpu("1.5"), Ok(1500));
    assert_eq!(cli::parse_cpu("0.25"), Ok(250));
    assert_eq!(cli::parse_cpu(".5"), Ok(500));
    assert_eq!(cli::parse_cpu("0.001"), Ok(1));
    assert_eq!(cli::parse_cpu("500m"), Ok(500));
    assert_eq!(cli::parse_cpu(" 2 "), Ok(2000));
    for bad in ["0", "0.0", "-1", "1.0005", "abc", "", "1e3", "m", "1.5m", "99999999999999999999"] {
        assert!(cli::parse_cpu(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn durations_take_units_and_bare_numbers_are_seconds() {
    assert_eq!(cli::parse_duration_ms("39"), Ok(39_000));
    assert_eq!(cli::parse_duration_ms("39s"), Ok(39_000));
    assert_eq!(cli::parse_duration_ms("500ms"), Ok(500));
    assert_eq!(cli::parse_duration_ms("1.5m"), Ok(90_000));
    assert_eq!(cli::parse_duration_ms("2h"), Ok(7_200_000));
    for bad in ["0", "0s", "-1s", "1d", "", "s", "1..2s", "9000h"] {
        assert!(cli::parse_duration_ms(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn submit_flags_carry_preferences_and_run_time_estimates() {
    let Ok(ClientCommand::Submit(a)) = parse(&[
        "submit",
        "--count",
        "4",
        "--gang",
        "--prefer",
        "gpu=true",
        "--rack-affinity",
        "preferred",
        "--expected",
        "39s",
        "--slow",
        "71s",
        "--",
        "train",
    ]) else {
        panic!("submit parses");
    };
    let c = &a.to_submit().containers[0];
    assert_eq!(c.preferred_labels.get("gpu").map(String::as_str), Some("true"));
    assert_eq!((c.expected_ms, c.slow_ms), (39_000, 71_000));
    assert!(parse(&["submit", "--slow", "71s", "--", "train"]).is_err(), "--slow without --expected");
}

#[test]
fn memory_sizes_use_binary_units_and_bare_numbers_are_mib() {
    assert_eq!(cli::parse_memory("512M"), Ok(512 << 20));
    assert_eq!(cli::parse_memory("512"), Ok(512 << 20));
    assert_eq!(cli::parse_memory("2G"), Ok(2 << 30));
    assert_eq!(cli::parse_memory("2g"), Ok(2 << 30));
    assert_eq!(cli::parse_memory("1.5G"), Ok(3 << 29));
    assert_eq!(cli::parse_memory("1.5GiB"), Ok(3 << 29));
    assert_eq!(cli::parse_memory("64Ki"), Ok(64 << 10));
    assert_eq!(cli::parse_memory("1T"), Ok(1 << 40));
    assert_eq!(cli::parse_memory("100B"), Ok(100));
    for bad in ["0", "0M", "-1G", "1X", "G", "", "1.2.3G", "99999999P", "1.5 potatoes"] {
        assert!(cli::parse_memory(bad).is_err(), "{bad:?} was accepted");
    }
    assert_eq!(cli::parse_bytes("4096"), Ok(4096));
    assert_eq!(cli::parse_bytes("64K"), Ok(65536));
    assert_eq!(cli::parse_bytes("0"), Ok(0));
    assert_eq!(cli::parse_key_value("zone=a"), Ok(("zone".into(), "a".into())));
    assert_eq!(cli::parse_key_value("OPTS=-Xmx=1g"), Ok(("OPTS".into(), "-Xmx=1g".into())));
    assert_eq!(cli::parse_key_value("EMPTY="), Ok(("EMPTY".into(), String::new())));
    assert!(cli::parse_key_value("=a").is_err());
    assert!(cli::parse_key_value("noequals").is_err());
}

#[test]
fn submit_arguments_become_one_container_group() {
    let cmd = parse(&[
        "submit",
        "--scheduler",
        "http://h:1",
        "--queue",
        "prod",
        "--cpu",
        "1.5",
        "--mem",
        "2G",
        "--gpus",
        "1",
        "--count",
        "4",
        "--gang",
        "--label",
        "zone=a",
        "--label",
        "gpu=a100",
        "--env",
        "K=V",
        "--priority",
        "-5",
        "--max-attempts",
        "2",
        "--name",
        "job",
        "--rack-affinity",
        "preferred",
        "--",
        "python",
        "-u",
        "train.py",
        "--epochs",
        "3",
    ])
    .unwrap();
    let ClientCommand::Submit(a) = cmd else { panic!("not a submit: {cmd:?}") };
    assert_eq!(a.conn.scheduler, "http://h:1");
    let sub = a.to_submit();
    assert_eq!(sub.queue.as_deref(), Some("prod"));
    assert_eq!(sub.name, "job");
    assert_eq!(sub.priority, -5);
    assert_eq!(sub.max_app_attempts, 2);
    let c = &sub.containers[0];
    assert_eq!(c.resource, ResourceRequest { cpu_millis: 1500, memory_bytes: 2 << 30, gpus: 1 });
    assert_eq!((c.count, c.gang, c.rack_affinity), (4, true, RackAffinity::Preferred));
    assert_eq!(c.labels, BTreeMap::from([("zone".into(), "a".into()), ("gpu".into(), "a100".into())]));
    assert_eq!(c.env["K"], "V");
    assert_eq!(c.command, ["python", "-u", "train.py", "--epochs", "3"]);
    sub.validate().unwrap();

    // Defaults: one container of 1 core and 512 MiB, named after the program.
    let ClientCommand::Submit(a) = parse(&["submit", "--", "/bin/echo", "hello"]).unwrap() else { panic!() };
    let sub = a.to_submit();
    assert_eq!(sub.name, "echo");
    assert_eq!(
        sub.containers[0].resource,
        ResourceRequest { cpu_millis: 1000, memory_bytes: 512 << 20, gpus: 0 }
    );
    assert_eq!((sub.containers[0].count, sub.queue.as_deref()), (1, None));
    if std::env::var_os("GANTRY_SCHEDULER").is_none() {
        assert_eq!(a.conn.scheduler, cli::DEFAULT_SCHEDULER);
    }

    assert!(parse(&["submit"]).is_err(), "a command is required");
    // Without `--`, everything from the program on is the program's, flags included.
    let ClientCommand::Submit(a) = parse(&["submit", "--count", "2", "echo", "-n", "--count", "3"]).unwrap()
    else {
        panic!()
    };
    assert_eq!(a.count, 2);
    assert_eq!(a.command, ["echo", "-n", "--count", "3"]);
    assert!(parse(&["submit", "--cpus", "2", "--", "true"]).is_err(), "a misspelt flag is not a program");
    assert!(parse(&["submit", "--cpu", "lots", "--", "true"]).is_err());
    assert!(parse(&["submit", "--mem", "-1G", "--", "true"]).is_err());
    assert!(parse(&["submit", "--label", "nokey", "--", "true"]).is_err());
    assert!(parse(&["submit", "--rack-affinity", "maybe", "--", "true"]).is_err());
    assert!(parse(&["apps", "--state", "SLEEPING"]).is_err());
    let ClientCommand::Apps(a) = parse(&["apps", "--state", "running,FINISHED", "--user", "bob"]).unwrap()
    else {
        panic!()
    };
    assert_eq!(a.states, [AppState::Running, AppState::Finished]);
    assert!(
        matches!(parse(&["logs", "7", "--stderr", "--tail", "4K"]), Ok(ClientCommand::Logs(l)) if l.tail == Some(4096) && l.stderr)
    );
}

// ----- the CLI against the fake server ---------------------------------------------------------

/// A server on its own runtime, so the blocking CLI entry point can be called from the test's
/// thread exactly as the binary calls it.
struct BlockingServer {
    addr: SocketAddr,
    fake: Fake,
    _rt: tokio::runtime::Runtime,
}

fn blocking_server() -> BlockingServer {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let fake = Fake::populated();
    let addr = rt.block_on(serve(fake.clone()));
    BlockingServer { addr, fake, _rt: rt }
}

impl BlockingServer {
    fn run(&self, args: &[&str]) -> Result<String, CliError> {
        let url = format!("http://{}", self.addr);
        let mut full: Vec<&str> = args.to_vec();
        let at = full.iter().position(|a| *a == "--").unwrap_or(full.len());
        full.splice(at..at, ["--scheduler", url.as_str()]);
        let cmd = parse(&full).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let mut out = Vec::new();
        cli::run_to(cmd, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }
}

/// Asserts that every line's cell under `column` starts at the header's offset.
fn assert_aligned(table: &str, column: &str) {
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let at = header.find(column).unwrap_or_else(|| panic!("no {column} in {header:?}"));
    for l in lines {
        let before = &l[..at];
        assert!(before.ends_with("  ") || before.is_empty(), "{column} misaligned in {l:?}\n{table}");
        assert_ne!(l.as_bytes()[at], b' ', "{column} misaligned in {l:?}\n{table}");
    }
}

#[test]
fn cli_submit_sends_the_flags_and_prints_the_id() {
    let s = blocking_server();
    let out = s
        .run(&[
            "submit", "--queue", "prod", "--cpu", "0.5", "--mem", "1G", "--count", "2", "--gang", "--label",
            "zone=a", "--", "echo", "hello",
        ])
        .unwrap();
    assert!(out.starts_with("application 10 accepted\n"), "{out}");
    assert!(out.contains("gantry logs 10"), "{out}");
    let state = s.fake.state();
    let sub = state.submitted.last().unwrap();
    assert_eq!(sub.queue.as_deref(), Some("root.prod"));
    assert_eq!(sub.name, "echo");
    assert_eq!(
        sub.containers[0].resource,
        ResourceRequest { cpu_millis: 500, memory_bytes: 1 << 30, gpus: 0 }
    );
    assert_eq!((sub.containers[0].count, sub.containers[0].gang), (2, true));
    assert_eq!(sub.containers[0].labels["zone"], "a");
    assert_eq!(sub.containers[0].command, ["echo", "hello"]);
    drop(state);

    let json: Value = serde_json::from_str(&s.run(&["submit", "--json", "--", "true"]).unwrap()).unwrap();
    assert_eq!(json, json!({"application-id": 11}));
}

#[test]
fn cli_submit_checks_sizes_before_sending() {
    let s = blocking_server();
    let e = s.run(&["submit", "--cpu", "0.001", "--", "true"]).unwrap_err();
    assert!(e.to_string().starts_with("--cpu: 1 millicores is outside"), "{e}");
    let e = s.run(&["submit", "--mem", "100B", "--", "true"]).unwrap_err();
    assert!(e.to_string().starts_with("--mem: "), "{e}");
    let e = s.run(&["submit", "--count", "0", "--", "true"]).unwrap_err();
    assert!(e.to_string().starts_with("--count: "), "{e}");
    let e = s.run(&["submit", "--", ""]).unwrap_err();
    assert!(e.to_string().contains("program name is empty"), "{e}");
    // The server's refusal comes back as its message.
    let e = s.run(&["submit", "--queue", "nowhere", "--", "true"]).unwrap_err();
    assert_eq!(e.to_string(), "unknown queue `root.nowhere`");
    assert!(s.fake.state().submitted.is_empty());
}

#[test]
fn cli_apps_prints_an_aligned_table_and_filters() {
    let s = blocking_server();
    let out = s.run(&["apps"]).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with("ID  NAME   USER   QUEUE         STATE     FINAL"), "{out}");
    assert!(
        lines[1].starts_with("1   train  alice  root.prod     RUNNING   UNDEFINED  1        1.5  2Gi"),
        "{out}"
    );
    assert!(lines[1].ends_with("2m05s"), "{out}");
    assert!(lines[3].starts_with("3   -      alice"), "an empty name is a dash: {out}");
    for col in ["NAME", "QUEUE", "STATE", "FINAL", "RUNNING", "CPU", "MEM", "GPUS", "ELAPSED"] {
        assert_aligned(&out, col);
    }
    assert!(out.lines().all(|l| !l.ends_with(' ')), "trailing spaces: {out:?}");

    let out = s.run(&["apps", "--state", "running,finished", "--user", "alice"]).unwrap();
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(s.run(&["apps", "--queue", "nowhere"]).unwrap(), "no applications\n");

    let json: Value = serde_json::from_str(&s.run(&["apps", "--json", "--queue", "prod"]).unwrap()).unwrap();
    assert_eq!(json["apps"]["app"][0]["id"], 1);
    assert_eq!(json["apps"]["app"].as_array().unwrap().len(), 1);
}

#[test]
fn cli_app_shows_fields_groups_and_containers() {
    let s = blocking_server();
    let out = s.run(&["app", "1"]).unwrap();
    assert!(out.contains("id:          1\n"), "{out}");
    assert!(out.contains("state:       RUNNING (final status UNDEFINED)\n"), "{out}");
    assert!(out.contains("submitted:   2023-11-14 22:13:20 UTC\n"), "{out}");
    assert!(out.contains("allocated:   cpu 1.5, mem 2Gi, gpus 0\n"), "{out}");
    assert!(out.contains("python train.py"), "{out}");
    // The group's selector and preferences, each in its column.
    let groups = &out[out.find("GROUP").unwrap()..out.find("CONTAINER").unwrap()];
    assert!(
        groups.starts_with("GROUP  PLACED  DONE  CPU  MEM  GPUS  GANG  LABELS  PREFERRED  COMMAND"),
        "{out}"
    );
    assert!(
        groups.lines().nth(1).unwrap().contains("1/1     0/1   1.5  2Gi  0     no    zone=a  disk=ssd"),
        "{out}"
    );
    let containers = &out[out.find("CONTAINER").unwrap()..];
    assert!(containers.lines().nth(1).unwrap().starts_with("100        0      node-a  RUNNING  -"), "{out}");
    assert_aligned(containers, "STATE");

    let json: Value = serde_json::from_str(&s.run(&["app", "2", "--json"]).unwrap()).unwrap();
    assert_eq!(json["app"]["containers"][0]["exitCode"], 0);

    let e = s.run(&["app", "999"]).unwrap_err();
    assert!(matches!(&e, CliError::Client(c) if c.status() == Some(404)), "{e:?}");
    assert_eq!(e.to_string(), "application 999 is not known to the scheduler");
}

#[test]
fn cli_kill_reports_what_happened() {
    let s = blocking_server();
    assert_eq!(
        s.run(&["kill", "1"]).unwrap(),
        "application 1: kill requested; it is RUNNING until its containers have stopped\n"
    );
    assert_eq!(s.run(&["kill", "3"]).unwrap(), "application 3 killed\n");
    assert_eq!(s.run(&["kill", "4"]).unwrap(), "application 4 was already KILLED\n");
    let e = s.run(&["kill", "2"]).unwrap_err();
    assert_eq!(e.to_string(), "application 2 has already ended: it is FINISHED");
    let json: Value = serde_json::from_str(&s.run(&["kill", "4", "--json"]).unwrap()).unwrap();
    assert_eq!(json, json!({"state": "KILLED"}));
}

#[test]
fn cli_nodes_and_queues_print_tables() {
    let s = blocking_server();
    let out = s.run(&["nodes"]).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NODE    RACK  STATE    CONTAINERS  CPU    MEM      GPUS  LABELS  WHY");
    assert_eq!(lines[1], "node-a  r1    RUNNING  1           1.5/4  2Gi/8Gi  0/1   zone=a  -");
    assert_eq!(lines[2], "node-b  r2    LOST     0           0/2    0B/4Gi   0/0   -       -");

    let out = s.run(&["queues"]).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("QUEUE      CAPACITY  MAX   USED    ABS-USED  RUNNING  PENDING  CPU  MEM"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("root       100%      100%  25%     25%       1        0        1    1Gi"),
        "{out}"
    );
    assert!(out.contains("root.prod  70%       100%  35.71%  25%       1        0        1    1Gi"), "{out}");
    assert!(out.contains("root.dev   30%       50%   0%"), "{out}");

    let json: Value = serde_json::from_str(&s.run(&["nodes", "--json"]).unwrap()).unwrap();
    assert_eq!(json["nodes"]["node"][1]["state"], "LOST");
    let json: Value = serde_json::from_str(&s.run(&["queues", "--json"]).unwrap()).unwrap();
    assert_eq!(json["scheduler"]["schedulerInfo"]["type"], "capacityScheduler");
}

#[test]
fn cli_logs_prints_one_container_raw_and_several_under_headers() {
    let s = blocking_server();
    assert_eq!(s.run(&["logs", "1"]).unwrap(), "hello from 100\nsecond line\n");
    assert_eq!(s.run(&["logs", "1", "--stderr"]).unwrap(), "warning: 100\n");
    assert_eq!(s.run(&["logs", "1", "--tail", "12"]).unwrap(), "second line\n");
    assert_eq!(
        s.run(&["logs", "2"]).unwrap(),
        "==> container 200 on node-a (COMPLETED, exit 0) <==\ndone 200\n\n==> container 201 on node-b (LOST, exit -1) <==\nlost 201\n"
    );
    assert_eq!(s.run(&["logs", "2", "--container", "201"]).unwrap(), "lost 201\n");
    let e = s.run(&["logs", "2", "--container", "100"]).unwrap_err();
    assert!(e.to_string().contains("container 100 is not one of application 2's"), "{e}");
    let e = s.run(&["logs", "3"]).unwrap_err();
    assert!(e.to_string().contains("has no containers yet"), "{e}");
    let e = s.run(&["logs", "1", "--stderr", "--container", "100", "--tail", "1M"]).map(|o| o.len());
    assert_eq!(e.unwrap(), "warning: 100\n".len());
}

#[test]
fn cli_without_a_scheduler_says_where_it_looked() {
    // A port that was free a moment ago: connecting is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let cmd = parse(&["nodes", "--scheduler", &url]).unwrap();
    let e = cli::run_to(cmd, &mut Vec::new()).unwrap_err();
    assert!(matches!(e, CliError::Unreachable(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&url) && msg.contains("GANTRY_SCHEDULER"), "{msg}");

    // https needs the cluster CA to trust; without it the CLI says how to give it.
    let cmd = parse(&["nodes", "--scheduler", "https://secure:8088"]).unwrap();
    let e = cli::run_to(cmd, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("--ca-cert"), "{e}");
}

#[test]
fn formatting_helpers() {
    assert_eq!(cli::fmt_cores(1500), "1.5");
    assert_eq!(cli::fmt_cores(2000), "2");
    assert_eq!(cli::fmt_cores(10), "0.01");
    assert_eq!(cli::fmt_bytes(512 << 20), "512Mi");
    assert_eq!(cli::fmt_bytes(3 << 29), "1.5Gi");
    assert_eq!(cli::fmt_bytes(0), "0B");
    assert_eq!(cli::fmt_duration(450), "450ms");
    assert_eq!(cli::fmt_duration(3_725_000), "1h02m");
    assert_eq!(cli::fmt_duration(90_000_000), "1d01h");
    assert_eq!(cli::fmt_time(0), "-");
    assert_eq!(cli::fmt_time(951_782_400_000), "2000-02-29 00:00:00 UTC");
    assert_eq!(cli::table(&["A", "BB"], &[vec!["xyz".into(), "1".into()]]), "A    BB\nxyz  1\n");
    assert_eq!(percent_encode("root.a b/ü"), "root.a%20b%2F%C3%BC");
}
