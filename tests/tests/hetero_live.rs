//! The hetero plugin live: the daemon (in this process) loads `libgantry_hetero.so`, six real
//! agents on loopback play the seed's cluster in miniature — rack `r0` of two GPU machines
//! (labelled `gpu=true`), racks `r1` and `r2` of two plain machines each — and gangs are
//! submitted with the real `gantry` CLI, preferences and run-time estimates included. Every
//! container asks for a whole node's CPU, so one runs per machine. Timeouts are failure guards.

use gantry_engine::AppId;
use gantry_scheduler::server::core::CoreHandle;
use gantry_tests::{TestAgent, gantry_cli, rust_plugin};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

/// (node name, rack) of an app's live containers, sorted.
fn placement(rt: &tokio::runtime::Runtime, core: &CoreHandle, app: u64) -> Vec<(String, String)> {
    let mut v = rt
        .block_on(core.read(move |c| {
            let st = c.engine().state();
            let Some(ai) = st.app_index(AppId(app)) else { return Vec::new() };
            st.containers()
                .iter()
                .filter(|x| x.app == ai && gantry_engine::state::container_is_live(x.state))
                .map(|x| {
                    let n = &st.nodes()[x.node as usize];
                    (st.str(n.name).to_owned(), st.str(n.rack).to_owned())
                })
                .collect::<Vec<_>>()
        }))
        .expect("core");
    v.sort();
    v
}

fn submit(api: &str, args: &[&str]) -> u64 {
    let mut all = vec!["submit", "--json", "--mem", "64M", "--gang"];
    all.extend_from_slice(args);
    let out = gantry_cli(api, &all);
    assert!(out.status.success(), "gantry submit failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("submit answer is JSON");
    v["application-id"].as_u64().expect("application-id")
}

/// Waits until the app has `n` live containers; returns their placement.
fn placed(rt: &tokio::runtime::Runtime, core: &CoreHandle, app: u64, n: usize) -> Vec<(String, String)> {
    let start = Instant::now();
    loop {
        let p = placement(rt, core, app);
        assert!(p.len() <= n, "app {app} has more containers than asked: {p:?}");
        if p.len() == n {
            return p;
        }
        assert!(start.elapsed() < GUARD, "guard: app {app} never got {n} containers (has {p:?})");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn gangs_land_on_their_preferred_machines_and_racks_through_the_daemon() {
    let so = rust_plugin("gantry_hetero").expect("hetero plugin");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\ndata_dir = {:?}\n\
         [[plugins]]\nname = \"hetero\"\npath = {:?}\n[plugins.config]\npolicy = \"sjf-hetero\"\nplacement = \"soft\"\n\
         [profile]\nplace = \"hetero\"\n",
        dir.path().join("data").display().to_string(),
        so.display().to_string(),
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &config);
    let api = bound.api_addr.to_string();
    let _agents: Vec<TestAgent> = [
        ("gpu-0", "r0", true),
        ("gpu-1", "r0", true),
        ("plain-1a", "r1", false),
        ("plain-1b", "r1", false),
        ("plain-2a", "r2", false),
        ("plain-2b", "r2", false),
    ]
    .into_iter()
    .map(|(name, rack, gpu)| {
        let labels: &[(&str, &str)] = if gpu { &[("gpu", "true")] } else { &[("kind", "plain")] };
        TestAgent::start(dir.path(), name, rack, labels, bound.agent_addr)
    })
    .collect();
    let start = Instant::now();
    let cpu = loop {
        let nodes = rt
            .block_on(bound.core.read(|c| {
                let st = c.engine().state();
                st.nodes().iter().map(|n| n.capacity.cpu_millis).collect::<Vec<_>>()
            }))
            .expect("core");
        if nodes.len() == 6 {
            break nodes.into_iter().min().unwrap_or(0);
        }
        assert!(start.elapsed() < GUARD, "guard: only {} of 6 agents registered", nodes.len());
        std::thread::sleep(Duration::from_millis(50));
    };
    let whole_node = format!("{cpu}m");
    let common = ["--cpu", whole_node.as_str(), "--count", "2"];

    // A GPU gang goes to the GPU machines.
    let gpu_a = submit(
        &api,
        &[
            &common[..],
            &["--prefer", "gpu=true", "--expected", "60s", "--slow", "120s", "--", "sleep", "300"],
        ]
        .concat(),
    );
    let p = placed(&rt, &bound.core, gpu_a, 2);
    assert_eq!(p, [("gpu-0".into(), "r0".into()), ("gpu-1".into(), "r0".into())]);

    // A gang that prefers one rack gets one plain rack.
    let mpi = submit(
        &api,
        &[
            &common[..],
            &["--rack-affinity", "preferred", "--expected", "60s", "--slow", "70s", "--", "sleep", "300"],
        ]
        .concat(),
    );
    let p = placed(&rt, &bound.core, mpi, 2);
    assert!(p[0].1 == p[1].1 && p[0].1 != "r0", "one plain rack: {p:?}");
    let mpi_rack = p[0].1.clone();

    // A GPU gang that runs 20 s on GPUs and 1000 s elsewhere waits for the GPU machines (free
    // in about a minute) rather than start slow on the free plain rack...
    let gpu_b = submit(
        &api,
        &[
            &common[..],
            &["--prefer", "gpu=true", "--expected", "20s", "--slow", "1000s", "--", "sleep", "300"],
        ]
        .concat(),
    );
    // ...while one that runs almost as fast elsewhere starts there at once, on the other rack.
    let gpu_c = submit(
        &api,
        &[&common[..], &["--prefer", "gpu=true", "--expected", "20s", "--slow", "25s", "--", "sleep", "300"]]
            .concat(),
    );
    let p = placed(&rt, &bound.core, gpu_c, 2);
    assert!(
        p.iter().all(|(_, rack)| rack != "r0" && *rack != mpi_rack),
        "gpu_c on the free plain rack: {p:?}"
    );
    assert!(placement(&rt, &bound.core, gpu_b).is_empty(), "gpu_b started slow instead of waiting");

    // When the GPU machines free, the waiting gang gets both.
    let out = gantry_cli(&api, &["kill", &gpu_a.to_string()]);
    assert!(out.status.success(), "kill: {}", String::from_utf8_lossy(&out.stderr));
    let p = placed(&rt, &bound.core, gpu_b, 2);
    assert_eq!(p, [("gpu-0".into(), "r0".into()), ("gpu-1".into(), "r0".into())]);

    let failures = rt.block_on(bound.core.read(|c| c.engine().stats().clone())).expect("core");
    assert_eq!(
        failures.rejected.total(),
        0,
        "the plugin's decisions were all valid: {:?}",
        failures.rejected
    );
    assert_eq!(failures.policy_failures, 0);
    for app in [mpi, gpu_b, gpu_c] {
        let _ = gantry_cli(&api, &["kill", &app.to_string()]);
    }
}
