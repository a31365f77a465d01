//! Issue 18's integrity after an ordinary restart, on the real `gantry-scheduler`, `gantry-agent`
//! and the CLI's client on loopback:
//! - application, container and reservation ids are never reused across restarts (Ctrl-C and
//!   `kill -9`), and ended apps keep their stored records;
//! - a client-chosen `application-id` is accepted only when `new-application` handed it to this
//!   very caller and it was never used; anything else is a 4xx that changes nothing;
//! - a kill the store cannot record is answered 503 and changes nothing.

use gantry_scheduler::api::client::{Client, ClientError};
use gantry_scheduler::api::types::{AppState, NodeState, SubmitApp};
use gantry_tests::{KilledOnDrop, TestAgent, start_scheduler, wait_until};
use serde_json::{Value, json};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

fn submission(name: &str, queue: &str, command: &[&str]) -> Value {
    json!({
        "application-name": name,
        "queue": queue,
        "containers": [{"resource": {"cpuMillis": 10, "memoryBytes": 8 << 20, "gpus": 0}, "command": command}]
    })
}

fn submit(rt: &tokio::runtime::Runtime, client: &Client, body: &Value) -> Result<u64, ClientError> {
    let app: SubmitApp = serde_json::from_value(body.clone()).expect("submission");
    rt.block_on(client.submit(&app))
}

fn status<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Api { status, message, .. }) => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn wait_state(rt: &tokio::runtime::Runtime, client: &Client, id: u64, state: AppState) {
    wait_until(&format!("app {id} to be {state}"), GUARD, || {
        rt.block_on(client.app(id)).ok().filter(|a| a.state == state).map(|_| ())
    });
}

fn wait_up(rt: &tokio::runtime::Runtime, client: &Client, nodes: usize) {
    wait_until("the scheduler and its agents", GUARD, || {
        rt.block_on(client.nodes())
            .ok()
            .filter(|n| n.iter().filter(|n| n.state == NodeState::Running).count() >= nodes)
    });
}

/// Stops the scheduler as Ctrl-C does and waits for it to exit.
fn interrupt(mut scheduler: KilledOnDrop) {
    let pid = scheduler.0.id().to_string();
    let _ = std::process::Command::new("kill").args(["-INT", &pid]).status();
    let _ = scheduler.0.wait();
}

fn reserve(api: &str) -> u64 {
    let out = gantry_tests::gantry_cli(
        api,
        &[
            "reserve",
            "submit",
            "--json",
            "--queue",
            "root.prod",
            "--deadline",
            "10m",
            "atom(10mc/8MiB, 1, 1, 1s, 1s)",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let id = v["reservation-id"].as_str().expect("id");
    id.trim_start_matches("reservation_").parse().expect("reservation number")
}

/// Submits a reservation no plan can hold; the id its rejection names.
fn rejected_reservation(api: &str) -> u64 {
    let out = gantry_tests::gantry_cli(
        api,
        &["reserve", "submit", "--queue", "root.prod", "--deadline", "10m", "atom(5000c/1GiB, 1, 1, 1s, 1s)"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("rejected"), "{err}");
    let id = err.split("reservation_").nth(1).and_then(|rest| rest.split_whitespace().next());
    id.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no id in {err}"))
}

fn container_ids(rt: &tokio::runtime::Runtime, client: &Client, app: u64) -> Vec<u64> {
    rt.block_on(client.app(app)).expect("app").containers.iter().map(|c| c.id).collect()
}

#[test]
fn ids_are_never_reused_across_restarts_and_ended_apps_keep_their_records() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    // Reservations are planned by the Rayon planner plugin.
    let files = gantry_tests::scheduler_config(
        dir.path(),
        "node_timeout_ms = 3000\ncycle_interval_ms = 50",
        &format!(
            "[[queues]]\npath = \"root.prod\"\nguaranteed = 0.5\n[[queues]]\npath = \"root.default\"\nguaranteed = 0.5\n\
             [reservations]\nqueue = \"root.prod\"\nhorizon_ms = 3600000\n{}",
            gantry_tests::rayon_planner_toml("gree")
        ),
    );
    let client = Client::new(&files.api).expect("client").with_timeout(Duration::from_secs(20));
    let agents: std::net::SocketAddr = files.agents.parse().expect("address");
    let _agent = TestAgent::start(dir.path(), "ids-n1", "r1", &[], agents);

    let mut scheduler = start_scheduler(&files.config);
    wait_up(&rt, &client, 1);
    let mut apps = Vec::new();
    let mut containers = Vec::new();
    let mut reservations = vec![reserve(&files.api)];
    for round in 0..3 {
        // Three apps per life, each run to the end.
        let ids: Vec<u64> = (0..3)
            .map(|i| {
                let body = submission(&format!("r{round}-{i}"), "root.default", &["true"]);
                submit(&rt, &client, &body).unwrap_or_else(|e| panic!("round {round} app {i}: {e}"))
            })
            .collect();
        for &id in &ids {
            wait_state(&rt, &client, id, AppState::Finished);
            containers.extend(container_ids(&rt, &client, id));
        }
        apps.extend(&ids);
        let handed = rt.block_on(client.new_application()).expect("new-application").application_id;
        apps.push(handed);
        reservations.push(reserve(&files.api));
        // A rejected reservation's answer names an id too: it is not given again either.
        reservations.push(rejected_reservation(&files.api));
        // Restart: Ctrl-C after the first life, kill -9 after the second.
        match round {
            0 => interrupt(scheduler),
            _ => scheduler.kill9(),
        }
        scheduler = start_scheduler(&files.config);
        wait_up(&rt, &client, 1);
    }
    let mut sorted = apps.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), apps.len(), "every application id once: {apps:?}");
    assert!(apps.windows(2).all(|w| w[0] < w[1]), "ids only grow: {apps:?}");
    let mut unique = containers.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), containers.len(), "every container id once: {containers:?}");
    assert!(reservations.windows(2).all(|w| w[0] < w[1]), "reservation ids only grow: {reservations:?}");
    // An id handed out before a restart is not usable after it (the client asks again), and
    // nothing of it is stored.
    let stale = apps[3];
    let mut body = submission("stale", "root.default", &["true"]);
    body["application-id"] = json!(stale);
    assert_eq!(status(submit(&rt, &client, &body)).0, 422);
    // Every app ended before a restart is still FINISHED with its own name and containers.
    for (k, id) in apps.iter().enumerate().filter(|(k, _)| k % 4 != 3) {
        let a = rt.block_on(client.app(*id)).expect("app");
        assert_eq!(a.state, AppState::Finished, "app {id}: {}", a.diagnostics);
        assert_eq!(a.name, format!("r{}-{}", k / 4, k % 4));
    }
    interrupt(scheduler);

    let store =
        gantry_scheduler::store::Store::open(dir.path().join("data").join("gantry.db")).expect("store");
    store.check_integrity().expect("integrity");
    let stored = store.load().expect("load");
    for a in &stored.apps {
        assert_eq!(a.state, gantry_sdk::abi::GANTRY_APP_FINISHED, "app {} in the store", a.id.0);
    }
    assert_eq!(stored.apps.len(), 9);
    for c in &stored.containers {
        assert_eq!(c.state, gantry_sdk::abi::GANTRY_CONTAINER_COMPLETED, "container {} in the store", c.id.0);
    }
}

#[test]
fn an_application_id_is_usable_only_by_the_caller_it_was_handed_to_and_only_once() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (alice, bob) = ("alice-token-0123456789", "bob-token-0123456789ab");
    std::fs::write(dir.path().join("tokens"), format!("{alice} alice\n{bob} bob\n")).expect("tokens");
    let files = gantry_tests::scheduler_config(
        dir.path(),
        "node_timeout_ms = 3000\ncycle_interval_ms = 50",
        &format!(
            "[[queues]]\npath = \"root.prod\"\nguaranteed = 0.5\nacl_submit_applications = \"bob\"\n\
             [[queues]]\npath = \"root.dev\"\nguaranteed = 0.5\nacl_submit_applications = \"alice\"\n\
             [security]\ntokens_file = {:?}\nacl_submit_applications = \" \"\n",
            dir.path().join("tokens").display().to_string()
        ),
    );
    let agents: std::net::SocketAddr = files.agents.parse().expect("address");
    let _agent = TestAgent::start(dir.path(), "acl-ids", "r1", &[], agents);
    let _scheduler = start_scheduler(&files.config);
    let as_user = |token: &str| {
        Client::new(&files.api)
            .expect("client")
            .with_token(Some(token.into()))
            .with_timeout(Duration::from_secs(20))
    };
    let (alice, bob) = (as_user(alice), as_user(bob));
    wait_up(&rt, &bob, 1);

    let prod = submit(&rt, &bob, &submission("bobs-report", "root.prod", &["true"])).expect("bob submits");
    wait_state(&rt, &bob, prod, AppState::Finished);
    let submitted = || rt.block_on(bob.metrics()).expect("metrics").apps_submitted;
    let before = submitted();

    // Alice names Bob's finished app, ids never handed out, and absurd ids: 422, nothing changes.
    for id in [json!(prod), json!(prod + 50), json!(9_223_372_036_854_775_806u64), json!(u64::MAX)] {
        let mut body = submission("takeover", "root.dev", &["true"]);
        body["application-id"] = id.clone();
        let (code, message) = status(submit(&rt, &alice, &body));
        assert_eq!(code, 422, "application-id {id}: {message}");
        assert!(message.contains("new-application"), "{message}");
    }
    let bobs = rt.block_on(bob.app(prod)).expect("bob's app");
    assert_eq!(
        (bobs.state, bobs.user.as_str(), bobs.queue.as_str()),
        (AppState::Finished, "bob", "root.prod")
    );
    assert!(!bobs.diagnostics.contains("withdrawn"), "{}", bobs.diagnostics);
    assert_eq!(submitted(), before, "refused submissions are not counted");
    // Everyone can still submit: no counter was poisoned.
    let next = submit(&rt, &alice, &submission("after", "root.dev", &["true"])).expect("alice submits");
    assert_eq!(next, prod + 1);

    // new-application reserves: two calls, then a plain submission gets neither id.
    let first = rt.block_on(alice.new_application()).expect("new-application").application_id;
    let second = rt.block_on(alice.new_application()).expect("new-application").application_id;
    assert!(next < first && first < second);
    let plain = submit(&rt, &bob, &submission("plain", "root.prod", &["true"])).expect("plain");
    assert!(plain > second, "a plain submission takes no handed-out id: {plain}");
    // Only Alice may use hers, and only once.
    let mut body = submission("mine", "root.dev", &["true"]);
    body["application-id"] = json!(first);
    let (code, message) = status(submit(&rt, &bob, &{
        let mut b = body.clone();
        b["queue"] = json!("root.prod");
        b
    }));
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("another user"), "{message}");
    assert_eq!(submit(&rt, &alice, &body).expect("alice uses her id"), first);
    assert_eq!(status(submit(&rt, &alice, &body)).0, 422, "an id is used once");
    wait_state(&rt, &alice, first, AppState::Finished);
    let listed: Vec<u64> =
        rt.block_on(bob.apps(&Default::default())).expect("apps").iter().map(|a| a.id).collect();
    let mut unique = listed.clone();
    unique.dedup();
    assert_eq!(listed, unique, "no id listed twice");
}

#[test]
fn a_kill_the_store_cannot_record_is_503_and_changes_nothing() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let _fs = gantry_tests::Tmpfs::mount(&dir.path().join("data"), "8m");
    let files =
        gantry_tests::scheduler_config(dir.path(), "node_timeout_ms = 3000\ncycle_interval_ms = 50", "");
    let client = Client::new(&files.api).expect("client").with_timeout(Duration::from_secs(20));
    let agents: std::net::SocketAddr = files.agents.parse().expect("address");
    let out = gantry_tests::container_writable_dir(dir.path(), "out");
    let _agent = TestAgent::start(dir.path(), "kill-full", "r1", &[], agents);
    let mut scheduler = start_scheduler(&files.config);
    wait_up(&rt, &client, 1);

    // A long app that counts its starts.
    let marker = out.join("starts");
    let script = format!("echo start >> {}; exec sleep 600", marker.display());
    let id =
        submit(&rt, &client, &submission("long", "root.default", &["sh", "-c", &script])).expect("submit");
    wait_state(&rt, &client, id, AppState::Running);
    let starts = || std::fs::read_to_string(&marker).map_or(0, |t| t.lines().count());
    wait_until("the command to start", GUARD, || (starts() == 1).then_some(()));

    gantry_tests::fill_disk(&dir.path().join("data").join("filler"));
    // SQLite may still fit a page or two in space it holds: submit throw-away apps until the
    // store refuses one, so the disk is full for the kill as well.
    let full = (0..50).any(|i| {
        matches!(
            submit(&rt, &client, &submission(&format!("filler-{i}"), "root.default", &["true"])),
            Err(ClientError::Api { status: 503, .. })
        )
    });
    assert!(full, "the store refused a write on the full disk");
    let (code, message) = status(rt.block_on(client.kill(id)));
    assert_eq!(code, 503, "{message}");
    assert!(message.contains("could not be stored"), "{message}");
    // Refused: nothing changed — the app runs and its command was not stopped.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rt.block_on(client.app(id)).expect("app").state, AppState::Running);
    assert_eq!(starts(), 1);
    std::fs::remove_file(dir.path().join("data").join("filler")).expect("free the space");
    assert!(rt.block_on(client.kill(id)).expect("kill once space returns").accepted);
    wait_state(&rt, &client, id, AppState::Killed);
    // The answered kill is durable: after a kill -9 and a restart the app stays killed and its
    // command never starts again.
    scheduler.kill9();
    let _scheduler = start_scheduler(&files.config);
    wait_up(&rt, &client, 1);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rt.block_on(client.app(id)).expect("app").state, AppState::Killed);
    assert_eq!(starts(), 1, "the killed app's command never ran again");
}

#[test]
fn work_that_completed_before_a_restart_never_runs_again() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let files =
        gantry_tests::scheduler_config(dir.path(), "node_timeout_ms = 3000\ncycle_interval_ms = 50", "");
    let client = Client::new(&files.api).expect("client").with_timeout(Duration::from_secs(20));
    let agents: std::net::SocketAddr = files.agents.parse().expect("address");
    let out = gantry_tests::container_writable_dir(dir.path(), "out");
    let _agent = TestAgent::start(dir.path(), "done-once", "r1", &[], agents);
    let mut scheduler = start_scheduler(&files.config);
    wait_up(&rt, &client, 1);
    // Two groups: a quick one that records each run, and a long one that keeps the app live.
    let runs = out.join("quick-runs");
    let quick = format!("echo run >> {}", runs.display());
    let body = json!({
        "application-name": "half-done",
        "containers": [
            {"resource": {"cpuMillis": 10, "memoryBytes": 8 << 20, "gpus": 0}, "count": 2, "command": ["sh", "-c", quick]},
            {"resource": {"cpuMillis": 10, "memoryBytes": 8 << 20, "gpus": 0}, "command": ["sleep", "600"]}
        ]
    });
    let id = submit(&rt, &client, &body).expect("submit");
    let count = || std::fs::read_to_string(&runs).map_or(0, |t| t.lines().count());
    wait_until("both quick containers to complete", GUARD, || {
        let a = rt.block_on(client.app(id)).ok()?;
        (a.requests.first()?.completed == 2 && a.state == AppState::Running).then_some(())
    });
    assert_eq!(count(), 2);
    scheduler.kill9();
    let _scheduler = start_scheduler(&files.config);
    wait_up(&rt, &client, 1);
    wait_until("the long container to be restored", GUARD, || {
        let a = rt.block_on(client.app(id)).ok()?;
        (a.state == AppState::Running && a.running_containers == 1).then_some(())
    });
    // Several cycles later, the completed work has not run again.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(count(), 2, "completed containers ran again after the restart");
    let a = rt.block_on(client.app(id)).expect("app");
    assert_eq!(a.requests[0].completed, 2, "{a:?}");
    assert!((a.progress - 66.67).abs() < 0.01, "progress {}", a.progress);
}
