//! Rayon reservations live: the real `gantry-scheduler` with a reservable queue, a real agent on
//! loopback, and the real `gantry` CLI. A reservation is accepted at once with its allocation, a
//! too large one is rejected with the reason and changes nothing, an application runs in the
//! reservation's queue, the plan survives `kill -9` of the scheduler with the same allocation,
//! and a delete is stored too. Timeouts are failure guards, never timing assertions.

use gantry_tests::{TestAgent, gantry_cli, start_scheduler, wait_until};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

fn run(api: &str, args: &[&str]) -> std::process::Output {
    gantry_cli(api, args)
}

fn json(api: &str, args: &[&str]) -> serde_json::Value {
    let out = run(api, args);
    assert!(out.status.success(), "gantry {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON answer")
}

/// The reservations the scheduler lists, or `None` while it is not answering.
fn list(api: &str) -> Option<Vec<serde_json::Value>> {
    let out = run(api, &["reserve", "list", "--json"]);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).ok()
}

#[test]
fn reservations_are_admitted_at_once_run_apps_and_survive_a_scheduler_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = gantry_tests::scheduler_config(
        dir.path(),
        "node_timeout_ms = 5000\ncycle_interval_ms = 50",
        "[[queues]]\npath = \"root.prod\"\nguaranteed = 0.5\n\
         [[queues]]\npath = \"root.adhoc\"\nguaranteed = 0.5\n\
         [reservations]\nqueue = \"root.prod\"\nagent = \"gree\"\nhorizon_ms = 3600000\n",
    );
    let (api, config) = (files.api.clone(), files.config.clone());
    let mut scheduler = start_scheduler(&config);
    let agent_addr: std::net::SocketAddr = files.agents.parse().expect("address");
    let _agent = TestAgent::start(dir.path(), "n1", "r1", &[], agent_addr);
    wait_until("the node to register", GUARD, || {
        let out = run(&api, &["nodes", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (v["nodes"]["node"].as_array().map_or(0, Vec::len) == 1).then_some(())
    });

    // Two 100-millicore bundles for 10 s each, within 10 minutes: accepted with an allocation.
    let accepted = json(
        &api,
        &[
            "reserve",
            "submit",
            "--json",
            "--queue",
            "root.prod",
            "--deadline",
            "10m",
            "--name",
            "nightly",
            "atom(100mc/32MiB, 1, 2, 10s, 20s)",
        ],
    );
    assert_eq!(accepted["state"], "ACCEPTED", "{accepted}");
    let id = accepted["reservation-id"].as_str().expect("id").to_owned();
    let queue = accepted["reservation-queue"].as_str().expect("queue").to_owned();
    assert_eq!(queue, format!("root.prod.{id}"));
    let allocation = accepted["resource-allocations"].clone();
    let pieces = allocation.as_array().expect("allocations");
    assert!(!pieces.is_empty());
    let (arrival, deadline) =
        (accepted["arrival"].as_u64().expect("arrival"), accepted["deadline"].as_u64().expect("deadline"));
    let mut work_ms = 0;
    for p in pieces {
        let (s, e) = (p["startTime"].as_u64().expect("start"), p["endTime"].as_u64().expect("end"));
        assert!(arrival <= s && s < e && e <= deadline, "allocation {p} outside its window");
        work_ms += (e - s) * p["resource"]["cpuMillis"].as_u64().expect("cpu") / 100;
    }
    assert_eq!(work_ms, 20_000, "the allocation holds exactly the work: {allocation}");

    // Far too large: rejected with the reason, and the plan is unchanged.
    let out = run(
        &api,
        &[
            "reserve",
            "submit",
            "--queue",
            "root.prod",
            "--deadline",
            "10m",
            "atom(5000c/1GiB, 1, 1, 10s, 10s)",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rejected") && err.contains("no room"), "{err}");
    // Bad input: a clear error naming the place.
    let out = run(&api, &["reserve", "submit", "--queue", "root.prod", "atom(1c/1GiB, 2, 1, 1m, 2m)"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An id not handed out by new-reservation (nor one already used) is refused.
    for taken in ["reservation_999", id.as_str()] {
        let out = run(
            &api,
            &["reserve", "submit", "--id", taken, "--queue", "root.prod", "atom(100mc/32MiB, 1, 1, 1s, 1s)"],
        );
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("new-reservation"),
            "{taken}"
        );
    }
    assert_eq!(list(&api).expect("list").len(), 1);

    // An application submitted to the reservation's queue runs there.
    let v = json(
        &api,
        &["submit", "--json", "--queue", &queue, "--cpu", "100m", "--mem", "32M", "--", "sleep", "600"],
    );
    let app = v["application-id"].as_u64().expect("app id");
    wait_until("the reserved app to run", GUARD, || {
        let v = json(&api, &["app", &app.to_string(), "--json"]);
        (v["app"]["state"] == "RUNNING").then_some(())
    });
    assert_eq!(json(&api, &["app", &app.to_string(), "--json"])["app"]["queue"], queue.as_str());
    // YARN's way: name the reservation, not its queue.
    let v = json(
        &api,
        &["submit", "--json", "--reservation", &id, "--cpu", "100m", "--mem", "32M", "--", "true"],
    );
    let by_id = v["application-id"].as_u64().expect("app id");
    assert_eq!(json(&api, &["app", &by_id.to_string(), "--json"])["app"]["queue"], queue.as_str());
    let out = run(&api, &["submit", "--reservation", "reservation_999", "--", "true"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not in the plan"));

    // kill -9: the plan comes back with the same allocation, and the app is still in it.
    scheduler.kill9();
    let mut scheduler = start_scheduler(&config);
    let back = wait_until("the plan after the restart", GUARD, || list(&api).filter(|l| l.len() == 1));
    assert_eq!(back[0]["reservation-id"], id.as_str());
    assert_eq!(back[0]["resource-allocations"], allocation);
    assert_eq!(json(&api, &["app", &app.to_string(), "--json"])["app"]["queue"], queue.as_str());

    // Delete: stored too; the app moves to the plan's default queue.
    let out = run(&api, &["reserve", "delete", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(list(&api).expect("list").len(), 0);
    assert_eq!(json(&api, &["app", &app.to_string(), "--json"])["app"]["queue"], "root.prod.default");
    scheduler.kill9();
    let _scheduler = start_scheduler(&config);
    let after = wait_until("the plan after the second restart", GUARD, || list(&api));
    assert!(after.is_empty(), "a deleted reservation stays deleted: {after:?}");
}
