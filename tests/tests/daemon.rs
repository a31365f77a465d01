//! The scheduler daemon with real agents: the daemon runs in this test's process (so the test
//! can submit through its core), the agents are the real `gantry-agent` binary on loopback, each
//! with its own work root, cgroup parent, rack and labels. Timeouts are failure guards only.

use gantry_engine::{AppId, AppSpec, RequestSpec, Resources};
use gantry_scheduler::server::Bound;
use gantry_scheduler::server::core::{CoreHandle, LaunchTemplate};
use gantry_sdk::abi::*;
use gantry_tests::TestAgent;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

fn pid_alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// The command pids of the containers an agent started, from their pid records.
fn command_pids(work: &Path) -> Vec<u64> {
    std::fs::read_dir(work.join("containers"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("pid")).ok())
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter_map(|v| v["pid"].as_u64())
        .collect()
}

/// Starts the daemon on ephemeral ports in a background runtime thread; returns its core.
fn start_daemon(
    rt: &tokio::runtime::Runtime,
    node_timeout_ms: u64,
    data_dir: &Path,
) -> (Bound, tokio::sync::oneshot::Sender<()>) {
    let data = data_dir.display().to_string();
    let text = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\nnode_timeout_ms = {node_timeout_ms}\ncycle_interval_ms = 50\ndata_dir = {data:?}\n"
    );
    gantry_tests::start_daemon(rt, &text)
}

fn app(name: &str, argv: &[&str], count: u32, gang: bool, cpu_millis: u64) -> (AppSpec, Vec<LaunchTemplate>) {
    let spec = AppSpec {
        name: name.into(),
        queue: "root.default".into(),
        user: "tester".into(),
        requests: vec![RequestSpec {
            resources: Resources::new(cpu_millis, 64 << 20, 0),
            count,
            gang,
            ..Default::default()
        }],
        ..Default::default()
    };
    let t =
        LaunchTemplate { argv: argv.iter().map(|s| (*s).to_owned()).collect(), ..LaunchTemplate::default() };
    (spec, vec![t])
}

async fn wait_until<T>(
    core: &CoreHandle,
    what: &str,
    f: impl Fn(&gantry_controller::Controller) -> Option<T> + Send + Sync + Clone + 'static,
) -> T
where
    T: Send + 'static,
{
    let start = Instant::now();
    loop {
        if let Some(v) = core.read(f.clone()).await.expect("core") {
            return v;
        }
        assert!(start.elapsed() < GUARD, "guard: gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (container id, node name, state) of an app's live containers.
fn containers_of(core: &gantry_controller::Controller, app: AppId) -> Vec<(u64, String, u32)> {
    let st = core.engine().state();
    let Some(ai) = st.app_index(app) else { return Vec::new() };
    st.containers()
        .iter()
        .filter(|c| c.app == ai && gantry_engine::state::container_is_live(c.state))
        .map(|c| (c.id, st.str(st.nodes()[c.node as usize].name).to_owned(), c.state))
        .collect()
}

#[test]
fn apps_run_gangs_start_whole_and_a_lost_node_s_work_reruns_elsewhere() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (bound, stop) = start_daemon(&rt, 2_000, &dir.path().join("scheduler"));
    let core = bound.core.clone();
    // Three agents, each on its own port, rack and label (`role = <rack>`).
    let mut agents = vec![
        TestAgent::start(dir.path(), "node-a", "rack-1", &[("role", "rack-1")], bound.agent_addr),
        TestAgent::start(dir.path(), "node-b", "rack-2", &[("role", "rack-2")], bound.agent_addr),
        TestAgent::start(dir.path(), "node-c", "rack-3", &[("role", "rack-3")], bound.agent_addr),
    ];
    let works: Vec<PathBuf> = agents.iter().map(|a| a.work.clone()).collect();
    rt.block_on(async {
        wait_until(&core, "three nodes", |c| (c.engine().state().nodes().len() == 3).then_some(())).await;
        let racks = core
            .read(|c| {
                let st = c.engine().state();
                let mut r: Vec<(String, String)> = st
                    .nodes()
                    .iter()
                    .map(|n| (st.str(n.name).to_owned(), st.str(n.rack).to_owned()))
                    .collect();
                r.sort();
                r
            })
            .await
            .expect("core");
        assert_eq!(
            racks,
            [("node-a", "rack-1"), ("node-b", "rack-2"), ("node-c", "rack-3")]
                .map(|(n, r)| (n.to_owned(), r.to_owned()))
        );

        // An app runs and writes its output.
        let (spec, t) = app("hello", &["sh", "-c", "echo hello from gantry"], 1, false, 100);
        let hello = core.submit(spec, t).await.expect("core").expect("accepted");
        let state = wait_until(&core, "hello to finish", move |c| {
            c.engine().app_state(hello).filter(|s| *s >= GANTRY_APP_FINISHED)
        })
        .await;
        assert_eq!(state, GANTRY_APP_FINISHED);
        let outputs: Vec<String> = works
            .iter()
            .flat_map(|w| std::fs::read_dir(w.join("containers")).into_iter().flatten().flatten())
            .filter_map(|e| std::fs::read_to_string(e.path().join("work/stdout")).ok())
            .collect();
        assert!(outputs.iter().any(|o| o.contains("hello from gantry")), "{outputs:?}");

        // A node selector on the agents' labels: both containers land on the labelled node.
        let (mut spec, t) = app("labelled", &["sleep", "300"], 2, false, 100);
        spec.requests[0].selector = vec![("role".into(), "rack-3".into())];
        let labelled = core.submit(spec, t).await.expect("core").expect("accepted");
        let placed = wait_until(&core, "the labelled app to run", move |c| {
            let cs = containers_of(c, labelled);
            (cs.len() == 2 && cs.iter().all(|x| x.2 == GANTRY_CONTAINER_RUNNING)).then_some(cs)
        })
        .await;
        assert!(placed.iter().all(|x| x.1 == "node-c"), "selector role=rack-3 honoured: {placed:?}");
        core.kill(labelled).await.expect("core").expect("kill");

        // A gang of 3 starts together: all 3 running at once, never a part.
        let (spec, t) = app("gang", &["sleep", "300"], 3, true, 400);
        let gang = core.submit(spec, t).await.expect("core").expect("accepted");
        let running = wait_until(&core, "the gang to run", move |c| {
            let cs = containers_of(c, gang);
            assert!(cs.is_empty() || cs.len() == 3, "a gang is placed whole: {cs:?}");
            (cs.len() == 3 && cs.iter().all(|x| x.2 == GANTRY_CONTAINER_RUNNING)).then_some(cs)
        })
        .await;
        let before: Vec<u64> = running.iter().map(|x| x.0).collect();
        // kill -9 the agent of a node that runs part of the gang.
        let victim = running[0].1.clone();
        let victim_at = agents.iter().position(|a| a.work.ends_with(&victim)).expect("victim agent");
        agents[victim_at].kill9();
        let lost_at = Instant::now();
        // Its node is lost after the timeout and the whole gang reruns on the other nodes.
        let lost = victim.clone();
        let rerun = wait_until(&core, "the gang to rerun on the surviving nodes", move |c| {
            let cs = containers_of(c, gang);
            (cs.len() == 3 && cs.iter().all(|x| x.1 != lost && x.2 == GANTRY_CONTAINER_RUNNING)).then_some(cs)
        })
        .await;
        assert!(lost_at.elapsed() >= Duration::from_secs(1), "not before the node's timeout");
        assert!(rerun.iter().all(|x| !before.contains(&x.0)), "new containers, not the lost ones");
        let lost = victim.clone();
        let victim_state = core
            .read(move |c| {
                let st = c.engine().state();
                st.node_by_name(&lost).map(|n| st.nodes()[n.0 as usize].state)
            })
            .await
            .expect("core");
        assert_eq!(victim_state, Some(GANTRY_NODE_LOST));

        // The dead agent's containers outlived it. When it comes back, the scheduler no longer
        // wants them (their work runs elsewhere): reconciliation kills them, no duplicates stay.
        let orphans: Vec<u64> =
            command_pids(&agents[victim_at].work).into_iter().filter(|p| pid_alive(*p)).collect();
        assert!(!orphans.is_empty(), "the killed agent's containers kept running");
        agents[victim_at].restart(bound.agent_addr);
        let start = Instant::now();
        while orphans.iter().any(|p| pid_alive(*p)) {
            assert!(start.elapsed() < GUARD, "guard: orphans {orphans:?} were not killed at reconciliation");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let rerun_ids: Vec<u64> = rerun.iter().map(|x| x.0).collect();
        let still = core.read(move |c| containers_of(c, gang)).await.expect("core");
        assert_eq!(still.iter().map(|x| x.0).collect::<Vec<_>>(), rerun_ids, "the rerun is untouched");

        // Kill works: the app ends KILLED and its containers go away.
        core.kill(gang).await.expect("core").expect("kill");
        wait_until(&core, "the gang's containers to end", move |c| {
            containers_of(c, gang).is_empty().then_some(())
        })
        .await;
        assert_eq!(
            core.read(move |c| c.engine().app_state(gang)).await.expect("core"),
            Some(GANTRY_APP_KILLED)
        );
    });
    let _ = stop.send(());
    drop(agents);
}

#[test]
fn an_agent_restart_readopts_its_containers_without_relaunching_them() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    // A long node timeout: the restarted agent is back well before its node could be lost.
    let (bound, stop) = start_daemon(&rt, 15_000, &dir.path().join("scheduler"));
    let core = bound.core.clone();
    let mut a = TestAgent::start(dir.path(), "node-r", "rack-1", &[("role", "rack-1")], bound.agent_addr);
    rt.block_on(async {
        wait_until(&core, "the node", |c| (c.engine().state().nodes().len() == 1).then_some(())).await;
        let (spec, t) = app("long", &["sleep", "300"], 2, false, 100);
        let long = core.submit(spec, t).await.expect("core").expect("accepted");
        let running = wait_until(&core, "both containers to run", move |c| {
            let cs = containers_of(c, long);
            (cs.len() == 2 && cs.iter().all(|x| x.2 == GANTRY_CONTAINER_RUNNING)).then_some(cs)
        })
        .await;
        let pids_before: Vec<u64> = command_pids(&a.work);
        assert_eq!(pids_before.len(), 2);
        let launches = core.read(|c| c.stats().launches_sent).await.expect("core");
        let first_stream = core.read(|c| c.agents().get("node-r").map(|l| l.stream())).await.expect("core");

        a.kill9();
        a.restart(bound.agent_addr);
        // Back on a new stream, reporting: the same containers, running, with the same
        // processes; nothing launched again.
        wait_until(&core, "the agent to re-register and report", move |c| {
            c.agents()
                .get("node-r")
                .filter(|l| l.stream() != 0 && Some(l.stream()) != first_stream && l.last_status.is_some())
                .map(|_| ())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = core.read(move |c| containers_of(c, long)).await.expect("core");
        assert_eq!(after, running, "the same containers, still running");
        assert_eq!(
            core.read(|c| c.stats().launches_sent).await.expect("core"),
            launches,
            "nothing relaunched"
        );
        let pids_after = command_pids(&a.work);
        assert_eq!(pids_after, pids_before);
        assert!(pids_after.iter().all(|p| pid_alive(*p)), "the processes were never restarted");

        core.kill(long).await.expect("core").expect("kill");
        wait_until(&core, "the containers to end", move |c| containers_of(c, long).is_empty().then_some(()))
            .await;
    });
    let _ = stop.send(());
    drop(a);
}

/// A real agent's status reaches the engine as measured usage (what `basis = "measured"`
/// plugins read through the view's `node_usage`), and its node is listed idle while empty.
#[test]
fn real_agents_usage_reaches_the_engine_and_an_empty_node_is_idle() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (bound, _stop) = start_daemon(&rt, 10_000, &dir.path().join("data"));
    let _agent = TestAgent::start(dir.path(), "measured", "r1", &[], bound.agent_addr);
    let (usage, idle) = gantry_tests::wait_until("a usage sample from the agent", GUARD, || {
        rt.block_on(bound.core.read(|c| {
            let st = c.engine().state();
            let i = st.node_by_name("measured")?.0 as usize;
            let usage = st.node_usage()[i];
            (usage.sampled_ms > 0).then(|| (usage, c.engine().idle_nodes()))
        }))
        .expect("core")
    });
    // Host-wide figures of this very machine: something is always in use, never more than all.
    assert!(usage.memory_bytes > 0);
    let total_mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_owned())))
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("MemTotal")
        * 1024;
    assert!(usage.memory_bytes < total_mem, "{} ≥ MemTotal {total_mem}", usage.memory_bytes);
    let cores = std::fs::read_to_string("/proc/stat")
        .map(|t| t.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count() as u64)
        .expect("/proc/stat");
    assert!(usage.cpu_millis <= cores * 1000, "cpu {} m on {cores} cores", usage.cpu_millis);
    assert_eq!(idle.len(), 1, "the one empty node is idle: {idle:?}");
}
