//! A dead or stopped agent's containers are fenced by their supervisors (issue 19, item 6): the
//! real `gantry-scheduler`, two real `gantry-agent`s and the `gantry` CLI on loopback, with the
//! defaults that matter here — the scheduler's 10 s node timeout and the agents' 8 s fencing
//! timeout. An app runs on agent A; agent A is `kill -9`ed and not restarted (or `SIGSTOP`ped);
//! the scheduler declares A lost and reruns the app on agent B. The old copy must end before the
//! new copy starts: without the agent, only the shim's lease can stop it. Both copies append
//! `CONTAINER UNIX_MS` to one file every 100 ms; the figures printed (the gap between the old
//! copy's last line and the new copy's first) are in RELIABILITY.md; only their order is
//! asserted. Timeouts are failure guards only.

use gantry_tests::{TestAgent, gantry_cli, scheduler_config, start_scheduler, wait_until};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const GUARD: Duration = Duration::from_secs(90);
const NODE_TIMEOUT_MS: u64 = 10_000;
const FENCING_TIMEOUT_MS: u64 = 8_000;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn json(api: &str, args: &[&str]) -> Option<Value> {
    let out = gantry_cli(api, args);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("the CLI's JSON"))
}

fn node_state(api: &str, node: &str) -> Option<String> {
    let v = json(api, &["nodes", "--json"])?;
    let n = v["nodes"]["node"].as_array()?.iter().find(|n| n["id"] == node)?.clone();
    n["state"].as_str().map(str::to_owned)
}

/// The containers of an app: (id, state, node).
fn containers(api: &str, app: u64) -> Vec<(u64, String, String)> {
    let Some(v) = json(api, &["app", &app.to_string(), "--json"]) else { return Vec::new() };
    let cs = v["app"]["containers"].as_array().cloned().unwrap_or_default();
    cs.iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (c["id"].as_u64().unwrap_or_default(), s("state"), s("nodeId"))
        })
        .collect()
}

fn command_pid(work: &Path, container: u64) -> Option<u64> {
    let dir = gantry_tests::container_control_dir(work, container)?;
    let text = std::fs::read_to_string(dir.join("pid")).ok()?;
    serde_json::from_str::<Value>(&text).ok()?["pid"].as_u64()
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn signal(pid: u32, sig: &str) {
    let out = Command::new("kill").args([sig, &pid.to_string()]).output().expect("kill");
    assert!(out.status.success(), "kill {sig} {pid}: {}", String::from_utf8_lossy(&out.stderr));
}

/// How agent A goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Death {
    /// `kill -9`, never restarted.
    Killed,
    /// `SIGSTOP`, continued at the end.
    Stopped,
}

fn the_old_copy_ends_before_the_rerun_starts(death: Death) {
    let dir = tempfile::tempdir().expect("tempdir");
    // Containers run as nobody, who must reach their directories under the agents' work roots.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let shared = gantry_tests::container_writable_dir(dir.path(), "out");
    let out_file = shared.join("copies");
    let files = scheduler_config(
        dir.path(),
        &format!("node_timeout_ms = {NODE_TIMEOUT_MS}\ncycle_interval_ms = 100"),
        "",
    );
    let api = files.api.clone();
    let scheduler_addr = files.agents.parse().expect("agent endpoint");
    let _scheduler = start_scheduler(&files.config);
    let extra = format!("fencing_timeout_ms = {FENCING_TIMEOUT_MS}");
    let mut a = TestAgent::start_with(dir.path(), "a", "r1", &[], scheduler_addr, &extra);
    wait_until("agent A to register", GUARD, || {
        (node_state(&api, "a").as_deref() == Some("RUNNING")).then_some(())
    });

    let script = format!(
        "while :; do echo \"$GANTRY_CONTAINER_ID $(date +%s%3N)\" >> {}; sleep 0.1; done",
        out_file.display()
    );
    let out = gantry_cli(&api, &["submit", "--cpu", "100m", "--mem", "16M", "--", "sh", "-c", &script]);
    assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let app: u64 = text.split_whitespace().nth(1).and_then(|w| w.parse().ok()).expect("the app's id");
    let first = wait_until("the app to run on agent A", GUARD, || {
        containers(&api, app).first().filter(|c| c.1 == "RUNNING" && c.2 == "a").map(|c| c.0)
    });
    wait_until("the first copy's output", GUARD, || {
        gantry_tests::container_timestamps(&out_file).iter().any(|l| l.0 == first).then_some(())
    });
    let first_pid = wait_until("the first copy's pid", GUARD, || command_pid(&a.work, first));
    let _b = TestAgent::start_with(dir.path(), "b", "r1", &[], scheduler_addr, &extra);
    wait_until("agent B to register", GUARD, || {
        (node_state(&api, "b").as_deref() == Some("RUNNING")).then_some(())
    });

    let death_ms = now_ms();
    match death {
        Death::Killed => a.kill9(),
        Death::Stopped => signal(a.pid(), "-STOP"),
    }
    let second = wait_until("the app to rerun on agent B", GUARD, || {
        let cs = containers(&api, app);
        cs.iter().find(|c| c.0 != first && c.1 == "RUNNING" && c.2 == "b").map(|c| c.0)
    });
    let lost_ms = now_ms();
    wait_until("the first copy to end", GUARD, || (!alive(first_pid)).then_some(()));
    wait_until("the second copy's output", GUARD, || {
        gantry_tests::container_timestamps(&out_file).iter().any(|l| l.0 == second).then_some(())
    });

    let control = gantry_tests::container_control_dir(&a.work, first).expect("the first copy's directory");
    let reason =
        std::fs::read_to_string(control.join("kill-reason")).expect("a kill reason for the first copy");
    assert_eq!(reason.trim(), "fenced", "its supervisor fenced it");
    assert!(control.join("exit.json").exists(), "its supervisor recorded its end");
    let lines = gantry_tests::container_timestamps(&out_file);
    let first_last = lines.iter().filter(|l| l.0 == first).map(|l| l.1).max().expect("first copy's lines");
    let second_first =
        lines.iter().filter(|l| l.0 == second).map(|l| l.1).min().expect("second copy's lines");
    eprintln!(
        "agent death figures ({death:?}; ms after the agent went): first copy's last line {}, rerun seen RUNNING {}, \
         second copy's first line {}, gap between the copies {} (negative: overlap)",
        first_last as i64 - death_ms as i64,
        lost_ms - death_ms,
        second_first - death_ms,
        second_first as i64 - first_last as i64,
    );
    assert!(
        first_last < second_first,
        "the old copy ended before the rerun started: {first_last} vs {second_first}"
    );

    if death == Death::Stopped {
        // Continued, the agent finds its container ended (fenced), reports it, and the
        // scheduler takes it as the lost copy it already replaced: nothing more is started.
        signal(a.pid(), "-CONT");
        wait_until("agent A to be RUNNING again", GUARD, || {
            (node_state(&api, "a").as_deref() == Some("RUNNING")).then_some(())
        });
        let reported = control.join("reported");
        wait_until("the fenced exit to be acknowledged", GUARD, || reported.exists().then_some(()));
        let cs = containers(&api, app);
        assert!(cs.iter().all(|c| c.0 == first || c.0 == second), "one rerun and no more: {cs:?}");
        assert!(cs.contains(&(second, "RUNNING".to_owned(), "b".to_owned())), "the rerun left alone: {cs:?}");
    }
    let lines = gantry_tests::container_timestamps(&out_file);
    assert_eq!(
        lines.iter().filter(|l| l.0 == first).map(|l| l.1).max(),
        Some(first_last),
        "the first copy wrote nothing after it was fenced"
    );
    let out = gantry_cli(&api, &["kill", &app.to_string()]);
    assert!(out.status.success(), "kill: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_killed_agents_container_is_fenced_by_its_supervisor_before_the_rerun() {
    the_old_copy_ends_before_the_rerun_starts(Death::Killed);
}

#[test]
fn a_stopped_agents_container_is_fenced_by_its_supervisor_before_the_rerun() {
    the_old_copy_ends_before_the_rerun_starts(Death::Stopped);
}
