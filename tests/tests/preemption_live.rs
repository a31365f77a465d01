//! Capacity preemption live: the daemon (in this process) loads `libgantry_preemption.so` for
//! `rebalance` and `order`, one real agent runs the containers, and the real `gantry` CLI submits.
//! Queue B (guaranteed 50 %, may use 100 %) fills the node; queue A (guaranteed 50 %) arrives.
//! B's newest containers are first *marked* (the API shows `preemptionCandidateSince` while they
//! still run), then stopped through the agent with SIGTERM and the plugin's grace honoured: each
//! victim's shell traps TERM, writes `term`, sleeps a second, writes `done` and exits. Memory is
//! what binds (YARN's default calculator): each container asks a quarter of the node. Timeouts
//! are failure guards only.

use gantry_engine::AppId;
use gantry_scheduler::server::core::CoreHandle;
use gantry_tests::{TestAgent, gantry_cli, rust_plugin, wait_until};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

fn submit(api: &str, queue: &str, mem: &str, count: &str, script: &str) -> u64 {
    let args = [
        "submit", "--json", "--queue", queue, "--cpu", "100m", "--mem", mem, "--count", count, "--", "sh",
        "-c", script,
    ];
    let out = gantry_cli(api, &args);
    assert!(out.status.success(), "gantry submit failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("submit answer is JSON");
    v["application-id"].as_u64().expect("application-id")
}

fn app_json(api: &str, app: u64) -> serde_json::Value {
    let out = gantry_cli(api, &["app", &app.to_string(), "--json"]);
    assert!(out.status.success(), "gantry app: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Container ids of the app in `state` (REST names).
fn containers_in(api: &str, app: u64, state: &str) -> Vec<u64> {
    app_json(api, app)["app"]["containers"]
        .as_array()
        .map(|a| a.iter().filter(|c| c["state"] == state).filter_map(|c| c["id"].as_u64()).collect())
        .unwrap_or_default()
}

fn live_containers(rt: &tokio::runtime::Runtime, core: &CoreHandle, app: u64) -> usize {
    rt.block_on(core.read(move |c| {
        let st = c.engine().state();
        let Some(ai) = st.app_index(AppId(app)) else { return 0 };
        st.containers()
            .iter()
            .filter(|x| x.app == ai && x.state == gantry_sdk::abi::GANTRY_CONTAINER_RUNNING)
            .count()
    }))
    .expect("core")
}

#[test]
fn a_queue_below_its_guarantee_preempts_another_queues_newest_containers_gracefully() {
    let so = rust_plugin("gantry_preemption").expect("preemption plugin");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    // Quick rounds for a test: every 200 ms, all of the excess at once, a 2 s wait before the
    // kill (long enough to see the marks), a 3 s grace (longer than the victims' 1 s trap).
    let config = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\ndata_dir = {:?}\n\
         [engine]\nrebalance_interval_ms = 100\n\
         [[queues]]\npath = \"root.a\"\nguaranteed = 0.5\nmaximum = 1.0\n\
         [[queues]]\npath = \"root.b\"\nguaranteed = 0.5\nmaximum = 1.0\n\
         [[plugins]]\nname = \"preemption\"\npath = {:?}\n[plugins.config]\nmonitoring_interval_ms = 200\n\
         max_wait_before_kill_ms = 2000\nkill_grace_ms = 3000\ntotal_preemption_per_round = 1.0\n\
         natural_termination_factor = 1.0\n\
         [profile]\nrebalance = \"preemption\"\norder = \"preemption\"\n",
        dir.path().join("data").display().to_string(),
        so.display().to_string(),
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &config);
    let api = bound.api_addr.to_string();
    let agent = TestAgent::start(dir.path(), "n1", "r1", &[], bound.agent_addr);
    let memory = wait_until("the agent to register", GUARD, || {
        rt.block_on(bound.core.read(|c| c.engine().state().nodes().first().map(|n| n.capacity.memory_bytes)))
            .expect("core")
    });
    let quarter = format!("{}M", (memory >> 20) / 4);

    // B fills the node: four containers that take their time to stop.
    let trap =
        "trap 'echo term > term; sleep 1; echo done > done; exit 0' TERM; while true; do sleep 0.1; done";
    let b = submit(&api, "b", &quarter, "4", trap);
    wait_until("B's four containers to run", GUARD, || {
        (live_containers(&rt, &bound.core, b) == 4).then_some(())
    });

    // A arrives, guaranteed half: two of B's containers are marked first, while they still run.
    let a = submit(&api, "a", &quarter, "2", "sleep 600");
    let marked = wait_until("two of B's containers to be marked", GUARD, || {
        let v = app_json(&api, b);
        let marked: Vec<u64> = v["app"]["containers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|c| c["state"] == "RUNNING" && c["preemptionCandidateSince"].as_u64().is_some())
                    .filter_map(|c| c["id"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        (marked.len() == 2).then_some(marked)
    });
    let all_b: Vec<u64> = {
        let mut v = containers_in(&api, b, "RUNNING");
        v.sort();
        v
    };
    let mut newest: Vec<u64> = all_b[2..].to_vec();
    let mut chosen = marked.clone();
    chosen.sort();
    newest.sort();
    assert_eq!(chosen, newest, "the newest containers are chosen");

    // Then they are stopped, A runs its two, and B keeps the other two.
    wait_until("A's two containers to run", GUARD, || {
        (live_containers(&rt, &bound.core, a) == 2).then_some(())
    });
    assert_eq!(live_containers(&rt, &bound.core, b), 2, "exactly two preempted");
    for id in &marked {
        let work = gantry_tests::container_control_dir(&agent.work, *id)
            .expect("the victim's directory")
            .join("work");
        let term =
            wait_until("the victim's TERM trap", GUARD, || std::fs::read_to_string(work.join("term")).ok());
        assert_eq!(term.trim(), "term");
        let done = wait_until("the victim's graceful end", GUARD, || {
            std::fs::read_to_string(work.join("done")).ok()
        });
        assert_eq!(done.trim(), "done", "the grace let the trap finish");
    }
    let stats = rt.block_on(bound.core.read(|c| c.engine().stats().clone())).expect("core");
    assert_eq!(stats.rejected.total(), 0, "every decision valid: {:?}", stats.rejected);
    assert_eq!(stats.policy_failures, 0);
    assert_eq!(
        stats.preempted_by_queue.iter().map(|r| r.containers).sum::<u64>(),
        2,
        "never more than needed"
    );
    for app in [a, b] {
        let _ = gantry_cli(&api, &["kill", &app.to_string()]);
    }
}
