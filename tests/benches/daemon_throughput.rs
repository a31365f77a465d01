//! The scheduler daemon end to end on loopback: submit → container running latency (p50, p99),
//! and trivial containers (`true`) submitted and completed per second, with one real agent.
//! The daemon runs in this process (REST API on 127.0.0.1, SQLite store in a temp dir, fsync'd);
//! the agent is the release `gantry-agent` binary (with `gantry-shim` beside it), launching real containers (shim, cgroup,
//! `nobody`). Submissions go through the REST API with the project's HTTP client.
//!
//! Run (as root): `cargo bench -p gantry-tests --bench daemon_throughput`
//! Optional: `LATENCY_SAMPLES` (default 200), `THROUGHPUT_APPS` (default 1000),
//! `THROUGHPUT_CLIENTS` (default 16), `AGENT_LAUNCH_SLOTS` (the agent's
//! `max_concurrent_launches`, default 0 = its default), `AGENT_ISOLATION=off` (containers as
//! `nobody` on the host's `/tmp`, no process limit, privileges kept: the agent before issue 19,
//! to measure what isolation costs; `no-private-tmp`: all of it but the mount namespace),
//! `AGENT_WORK_BASE` (where the agent's
//! work root goes, default the temp dir).

use gantry_scheduler::api::client::Client;
use gantry_scheduler::api::types::SubmitApp;
use gantry_scheduler::server::core::CoreHandle;
use gantry_sdk::abi::*;
use gantry_tests::{kill_leftover_containers, workspace_root};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn release_agent() -> PathBuf {
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(workspace_root())
        .args(["build", "--quiet", "--release", "-p", "gantry-agent", "--bins"])
        .status()
        .expect("cargo");
    assert!(status.success(), "building the release agent");
    gantry_tests::target_dir().join("release/gantry-agent")
}

fn submit_body(argv: &[&str]) -> SubmitApp {
    let json = serde_json::json!({
        "application-name": "bench",
        "containers": [{
            "resource": {"cpuMillis": 10, "memoryBytes": 8 << 20, "gpus": 0},
            "command": argv,
        }]
    });
    let app: SubmitApp = serde_json::from_value(json).expect("submission");
    app
}

/// Whether the app's first container has been reported started (or already ended).
async fn started(core: &CoreHandle, app: u64) -> bool {
    core.read(move |c| c.launched(app).first().is_some_and(|l| l.state != GANTRY_CONTAINER_ALLOCATED))
        .await
        .unwrap_or(false)
}

async fn finished(core: &CoreHandle, apps: u64) -> u64 {
    core.read(move |c| {
        (1..=apps)
            .filter(|id| c.engine().app_state(gantry_engine::AppId(*id)) == Some(GANTRY_APP_FINISHED))
            .count() as u64
    })
    .await
    .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Killed(Child, PathBuf, String);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        kill_leftover_containers(&self.1, &self.2);
    }
}

fn main() {
    let samples = env_or("LATENCY_SAMPLES", 200);
    let total = env_or("THROUGHPUT_APPS", 1000);
    let clients = env_or("THROUGHPUT_CLIENTS", 16);
    let agent_bin = release_agent();
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nagent_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        dir.path().join("data").display().to_string()
    );
    let (bound, stop) = gantry_tests::start_daemon(&rt, &text);
    // The agent's work root: `AGENT_WORK_BASE` (e.g. a tmpfs) or the temp dir.
    let agent_base = std::env::var_os("AGENT_WORK_BASE").map(PathBuf::from);
    let agent_dir = tempfile::tempdir_in(agent_base.unwrap_or_else(std::env::temp_dir)).expect("agent dir");
    let work = agent_dir.path().join("agent");
    std::fs::create_dir_all(&work).expect("work root");
    std::fs::set_permissions(agent_dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711))
        .expect("chmod");
    let cgroup = format!("gantry-bench-daemon-{}", std::process::id());
    let agent_cfg = dir.path().join("agent.toml");
    std::fs::write(
        &agent_cfg,
        format!(
            "cgroup_name = \"{cgroup}\"\nsample_interval_ms = 1000\nmax_concurrent_launches = {}\n{}\
             [reserve]\ncpu_millis = 0\nmemory_bytes = 0\n",
            env_or("AGENT_LAUNCH_SLOTS", 0),
            gantry_tests::agent_isolation_from_env()
        ),
    )
    .expect("agent config");
    let _agent = Killed(
        Command::new(&agent_bin)
            .args(["run", "--config"])
            .arg(&agent_cfg)
            .args(["--node-name", "bench", "--metrics-listen", "127.0.0.1:0", "--work-root"])
            .arg(&work)
            .args(["--scheduler", &format!("http://{}", bound.agent_addr)])
            .env("RUST_LOG", std::env::var("AGENT_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start agent"),
        work.clone(),
        cgroup,
    );
    let core = bound.core.clone();
    let api = format!("http://{}", bound.api_addr);
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while core.read(|c| c.engine().state().nodes().len()).await.unwrap_or(0) == 0 {
            assert!(Instant::now() < deadline, "the agent never registered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let client = Client::new(&api).expect("client");

        // Latency: one submission at a time, from the request to the container reported running.
        let body = submit_body(&["true"]);
        let mut lat = Vec::with_capacity(samples);
        let mut acks = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t0 = Instant::now();
            let id = client.submit(&body).await.expect("submit");
            acks.push(t0.elapsed());
            while !started(&core, id).await {
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
            lat.push(t0.elapsed());
        }
        lat.sort();
        acks.sort();
        println!(
            "submit -> acknowledged (durable), {samples} sequential submissions: p50 {:.2} ms, p99 {:.2} ms",
            percentile(&acks, 0.5).as_secs_f64() * 1e3,
            percentile(&acks, 0.99).as_secs_f64() * 1e3,
        );
        println!(
            "submit -> running, {samples} sequential submissions: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            percentile(&lat, 0.5).as_secs_f64() * 1e3,
            percentile(&lat, 0.99).as_secs_f64() * 1e3,
            lat.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
        );

        // Throughput: `total` apps of `true` from `clients` concurrent submitters, until all have
        // finished (ran and exited, as reported by the agent).
        let first = samples as u64 + 1;
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for k in 0..clients {
            let client = Client::new(&api).expect("client");
            let body = body.clone();
            let n = total / clients + usize::from(k < total % clients);
            tasks.push(tokio::spawn(async move {
                for _ in 0..n {
                    client.submit(&body).await.expect("submit");
                }
            }));
        }
        for t in tasks {
            t.await.expect("submitter");
        }
        let submitted = t0.elapsed();
        let last = first + total as u64 - 1;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let done = finished(&core, last).await.saturating_sub(samples as u64);
            if done >= total as u64 {
                break;
            }
            assert!(Instant::now() < deadline, "only {done} of {total} finished in 600 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let all = t0.elapsed();
        let (launched, finished_total) = core
            .read(move |c| {
                let done = (1..=last)
                    .filter(|id| c.engine().app_state(gantry_engine::AppId(*id)) == Some(GANTRY_APP_FINISHED))
                    .count();
                (c.stats().launches_sent, done)
            })
            .await
            .unwrap_or((0, 0));
        assert_eq!(finished_total as u64, last, "every app finished");
        assert!(launched >= last, "every app launched a container ({launched} launches)");
        println!(
            "{total} `true` apps, {clients} concurrent submitters: submitted in {:.2} s ({:.0}/s), all completed in {:.2} s ({:.0} containers/s)",
            submitted.as_secs_f64(),
            total as f64 / submitted.as_secs_f64(),
            all.as_secs_f64(),
            total as f64 / all.as_secs_f64()
        );
    });
    let _ = stop.send(());
}
