//! Rayon reservations live: the real `gantry-scheduler` with a reservable queue and the Rayon
//! planner loaded as a plugin (`libgantry_rayon.so`, `[profile] reserve`), a real agent on
//! loopback, and the real `gantry` CLI. A reservation is accepted at once with its allocation, a
//! too large one is rejected with the reason and changes nothing, an application runs in the
//! reservation's queue, the plan survives `kill -9` of the scheduler with the same allocation,
//! and a delete is stored too. Without a planner every reservation endpoint answers a clear 400.
//! Timeouts are failure guards, never timing assertions.

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

/// Submits `rdl` to `root.prod` due in ten minutes (`extra` flags before it), expecting it to
/// be accepted; the JSON answer.
fn accepted(api: &str, extra: &[&str], rdl: &str) -> serde_json::Value {
    let mut args = vec!["reserve", "submit", "--json", "--queue", "root.prod", "--deadline", "10m"];
    args.extend_from_slice(extra);
    args.push(rdl);
    json(api, &args)
}

/// Submits `rdl` to `root.prod` due `deadline` from now, expecting a refusal; its message.
fn refusal(api: &str, deadline: &str, rdl: &str) -> String {
    let out = run(api, &["reserve", "submit", "--queue", "root.prod", "--deadline", deadline, rdl]);
    assert!(!out.status.success(), "{rdl} due in {deadline} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A live scheduler whose `root.prod` is reservable (`queues` before it, `extra` lines in its
/// `[reservations]`), planned by the Rayon plugin's `agent`, and an agent `node` registered with
/// it: the scheduler (killed on drop), its files, and the agent.
fn live_plan(
    dir: &std::path::Path,
    queues: &str,
    extra: &str,
    agent: &str,
    node: &str,
) -> (gantry_tests::KilledOnDrop, gantry_tests::SchedulerFiles, TestAgent) {
    let files = gantry_tests::scheduler_config(
        dir,
        "node_timeout_ms = 5000\ncycle_interval_ms = 50",
        &format!(
            "{queues}[reservations]\nqueue = \"root.prod\"\nhorizon_ms = 3600000\n{extra}{}",
            gantry_tests::rayon_planner_toml(agent)
        ),
    );
    let scheduler = start_scheduler(&files.config);
    let agent_addr: std::net::SocketAddr = files.agents.parse().expect("address");
    let agent = TestAgent::start(dir, node, "r1", &[], agent_addr);
    wait_until("the node to register", GUARD, || {
        let out = run(&files.api, &["nodes", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (v["nodes"]["node"].as_array().map_or(0, Vec::len) == 1).then_some(())
    });
    (scheduler, files, agent)
}

#[test]
fn reservations_are_admitted_at_once_run_apps_and_survive_a_scheduler_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let queues = "[[queues]]\npath = \"root.prod\"\nguaranteed = 0.5\n\
                  [[queues]]\npath = \"root.adhoc\"\nguaranteed = 0.5\n";
    let (mut scheduler, files, _agent) = live_plan(dir.path(), queues, "", "gree", "n1");
    let (api, config) = (files.api.clone(), files.config.clone());

    // Two 100-millicore bundles for 10 s each, within 10 minutes: accepted with an allocation.
    let accepted = accepted(&api, &["--name", "nightly"], "atom(100mc/32MiB, 1, 2, 10s, 20s)");
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
    let err = refusal(&api, "10m", "atom(5000c/1GiB, 1, 1, 10s, 10s)");
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

/// The REST API as YARN clients use it, on the daemon in-process with a real store: an id from
/// `new-reservation`, a YARN `reservation-definition`, the list's filters, an update that does
/// not fit (the old allocation stays), and the optimiser's endpoint.
#[test]
fn the_yarn_shaped_rest_api_round_trip() {
    use gantry_scheduler::api::client::{Client, ClientError};
    use gantry_scheduler::api::reservations::{ReservationDefinition, ReservationSubmit};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\ndata_dir = {:?}\n\
         [[queues]]\npath = \"root.prod\"\nguaranteed = 1.0\n[reservations]\nqueue = \"root.prod\"\nhorizon_ms = 3600000\n{}",
        dir.path().join("data").display().to_string(),
        gantry_tests::rayon_planner_toml("gree")
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &text);
    let _agent = TestAgent::start(dir.path(), "rest-n1", "r1", &[], bound.agent_addr);
    let client = Client::new(&bound.api_addr.to_string()).expect("client");
    wait_until("the node to register", GUARD, || {
        rt.block_on(client.nodes()).ok().filter(|n| n.len() == 1).map(|_| ())
    });
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
    let yarn: ReservationDefinition = serde_json::from_value(serde_json::json!({
        "arrival": now, "deadline": now + 600_000, "reservation-name": "yarn-style",
        "reservation-requests": {"reservation-request-interpreter": 2, "reservation-request": [
            {"capability": {"memory": 32, "vCores": 0}, "num-containers": 2, "concurrency": 1, "duration": 30000}
        ]}
    }))
    .expect("definition");
    // vCores 0 and 32 MiB: what a loopback test machine surely has.
    let id = rt.block_on(client.new_reservation()).expect("new-reservation").reservation_id;
    let body = ReservationSubmit {
        queue: Some("root.prod".into()),
        reservation_id: Some(id.clone()),
        definition: yarn.clone(),
    };
    let accepted = rt.block_on(client.submit_reservation(&body, false)).expect("accepted");
    assert_eq!((accepted.reservation_id.as_str(), accepted.state.as_str()), (id.as_str(), "ACCEPTED"));
    let work: u64 = accepted
        .resource_allocations
        .iter()
        .map(|a| (a.end_time - a.start_time) * (a.resource.memory_bytes / (32 << 20)))
        .sum();
    assert_eq!(work, 60_000, "2 containers × 30 s");
    // The same id twice: refused, and the plan keeps one.
    let again = rt.block_on(client.submit_reservation(&body, false));
    assert!(matches!(again, Err(ClientError::Api { status: 422, .. })), "{again:?}");

    // Filters: by queue, by window overlap.
    let all = rt.block_on(client.get_value("/ws/v1/cluster/reservation/list?queue=root.prod")).expect("list");
    assert_eq!(all["reservations"].as_array().map(Vec::len), Some(1));
    assert!(
        all["reservations"][0]["resource-allocations"].as_array().is_some_and(Vec::is_empty),
        "allocations only when asked"
    );
    let later = format!("/ws/v1/cluster/reservation/list?start-time={}", now + 3_600_000);
    let none = rt.block_on(client.get_value(&later)).expect("list");
    assert_eq!(none["reservations"].as_array().map(Vec::len), Some(0));
    let bad = rt.block_on(client.get_value("/ws/v1/cluster/reservation/list?start-time=5&end-time=1"));
    assert!(matches!(bad, Err(ClientError::Api { status: 400, .. })), "{bad:?}");

    // An update far beyond the plan is rejected; the old allocation stays.
    let mut huge = yarn.clone();
    if let Some(r) = &mut huge.requests {
        r.requests[0].capability.v_cores = 100_000;
    }
    let update = ReservationSubmit { queue: None, reservation_id: Some(id.clone()), definition: huge };
    let refused = rt.block_on(client.submit_reservation(&update, true));
    assert!(matches!(&refused, Err(ClientError::Api { status: 409, .. })), "{refused:?}");
    let listed = rt.block_on(client.reservations(None)).expect("list");
    assert_eq!(listed[0].resource_allocations, accepted.resource_allocations);

    // The planner is asked to optimise; it may move the reservations that have not started.
    let info = rt.block_on(client.optimize_reservations()).expect("optimize");
    assert!(info.considered <= 1 && info.moved <= info.considered, "{info:?}");
    rt.block_on(client.delete_reservation(&id)).expect("delete");
    assert!(rt.block_on(client.reservations(None)).expect("list").is_empty());
}

/// Without a planner (no `[reservations]`, no `[profile] reserve`) every reservation endpoint
/// answers 400 with a YARN-style `RemoteException` that says what to configure.
#[test]
fn without_a_planner_every_reservation_endpoint_answers_a_clear_400() {
    use gantry_scheduler::api::client::{Client, ClientError};
    use gantry_scheduler::api::reservations::{ReservationDefinition, ReservationSubmit};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        dir.path().join("data").display().to_string()
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &text);
    let client = Client::new(&bound.api_addr.to_string()).expect("client");
    let definition: ReservationDefinition =
        serde_json::from_value(serde_json::json!({"rdl": "atom(1c/1GiB, 1, 1, 1s, 1s)"}))
            .expect("definition");
    let submit = ReservationSubmit {
        queue: Some("root.default".into()),
        reservation_id: None,
        definition: definition.clone(),
    };
    let update = ReservationSubmit { queue: None, reservation_id: Some("reservation_1".into()), definition };
    let answers: Vec<(&str, Result<(), ClientError>)> = vec![
        ("new-reservation", rt.block_on(client.new_reservation()).map(drop)),
        ("submit", rt.block_on(client.submit_reservation(&submit, false)).map(drop)),
        ("update", rt.block_on(client.submit_reservation(&update, true)).map(drop)),
        ("delete", rt.block_on(client.delete_reservation("reservation_1"))),
        ("optimize", rt.block_on(client.optimize_reservations()).map(drop)),
        ("list", rt.block_on(client.reservations(None)).map(drop)),
    ];
    for (call, answer) in answers {
        match answer {
            Err(ClientError::Api { status: 400, exception, message }) => {
                assert_eq!(exception, "BadRequestException", "{call}");
                assert!(message.contains("no reservation planner is configured"), "{call}: {message}");
            }
            other => panic!("{call}: {other:?}"),
        }
    }
    // The CLI says so too.
    let out = run(&bound.api_addr.to_string(), &["reserve", "list"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no reservation planner is configured"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `[reservations] enforce_ahead_ms` end to end (issue 22): the daemon reads it, a reservation's
/// allocation starts no sooner than that after its admission, and one whose deadline leaves no
/// time to make room is rejected with the reason (not accepted, to be missed).
#[test]
fn enforcement_ahead_starts_allocations_later_and_rejects_what_leaves_no_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let queues = "[[queues]]\npath = \"root.prod\"\nguaranteed = 1.0\n";
    let (_scheduler, files, _agent) =
        live_plan(dir.path(), queues, "enforce_ahead_ms = 20000\n", "gree-l", "ahead-n1");
    let api = files.api.clone();
    let accepted = accepted(&api, &[], "atom(100mc/32MiB, 1, 1, 5s, 5s)");
    assert_eq!(accepted["state"], "ACCEPTED", "{accepted}");
    let arrival = accepted["arrival"].as_u64().expect("arrival");
    for p in accepted["resource-allocations"].as_array().expect("allocations") {
        let start = p["startTime"].as_u64().expect("start");
        assert!(
            start >= arrival + 20_000,
            "a piece at {start} starts within 20 s of the admission at {arrival}"
        );
    }
    // Ten seconds to its deadline, but room takes twenty to make: rejected, with the reason.
    let err = refusal(&api, "10s", "atom(100mc/32MiB, 1, 1, 1s, 1s)");
    assert!(err.contains("rejected") && err.contains("no time to make room"), "{err}");
    assert_eq!(list(&api).map(|l| l.len()), Some(1), "the rejection changed nothing");
}
