//! `kill -9` of the scheduler during a stream of submissions: after a restart every acknowledged
//! application is present, and containers that were running were not restarted. Real
//! `gantry-scheduler`, `gantry-agent` and `gantry` binaries on loopback.

use gantry_tests::{KilledOnDrop as Proc, agent_bin, kill_leftover_containers, start_scheduler};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

fn gantry(api: &str, args: &[&str]) -> std::process::Output {
    gantry_tests::gantry_cli(api, args)
}

fn app(api: &str, id: u64) -> Option<serde_json::Value> {
    let out = gantry(api, &["app", &id.to_string(), "--json"]);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("JSON"))
}

fn wait<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    gantry_tests::wait_until(what, GUARD, f)
}

fn command_pid(work: &Path, container: u64) -> Option<u64> {
    let text =
        std::fs::read_to_string(gantry_tests::container_control_dir(work, container)?.join("pid")).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["pid"].as_u64()
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn kill_9_of_the_scheduler_loses_no_acknowledged_app_and_restarts_no_container() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = gantry_tests::scheduler_config(dir.path(), "node_timeout_ms = 5000", "");
    let (api, config) = (files.api.clone(), files.config.clone());
    let work: PathBuf = dir.path().join("agent");
    let cgroup = format!("gantry-restart-test-{}", std::process::id());
    let mut scheduler = start_scheduler(&config);
    let _agent = Proc(
        Command::new(agent_bin().expect("agent"))
            .args(["run", "--node-name", "n1", "--metrics-listen", "127.0.0.1:0", "--work-root"])
            .arg(&work)
            .args(["--scheduler", &format!("http://{}", files.agents)])
            .env("GANTRY_AGENT_CONFIG", {
                let p = dir.path().join("agent.toml");
                std::fs::write(&p, format!("cgroup_name = \"{cgroup}\"\nsample_interval_ms = 200\n[reserve]\ncpu_millis = 0\nmemory_bytes = 0\n")).expect("agent config");
                p
            })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start agent"),
    );
    wait("the agent to register", || {
        String::from_utf8_lossy(&gantry(&api, &["nodes"]).stdout).contains("RUNNING").then_some(())
    });

    // One long-running app whose container must survive the scheduler's death untouched.
    let out = gantry(&api, &["submit", "--cpu", "100m", "--mem", "16M", "--", "sleep", "4021"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let running = wait("app 1 to run", || {
        app(&api, 1).and_then(|v| {
            (v["app"]["state"] == "RUNNING").then(|| v["app"]["containers"][0]["id"].as_u64()).flatten()
        })
    });
    let pid = wait("its pid record", || command_pid(&work, running));

    // A stream of submissions, killed mid-way: remember every acknowledged id.
    let mut acked = vec![1u64];
    let submitter = std::thread::spawn({
        let api = api.clone();
        move || {
            let mut ids = Vec::new();
            for _ in 0..40 {
                let out = gantry(&api, &["submit", "--cpu", "10m", "--mem", "8M", "--", "true"]);
                if !out.status.success() {
                    break; // the scheduler is gone
                }
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                if let Some(id) = text.split_whitespace().nth(1).and_then(|w| w.parse::<u64>().ok()) {
                    ids.push(id);
                }
            }
            ids
        }
    });
    std::thread::sleep(Duration::from_millis(700));
    scheduler.kill9();
    acked.extend(submitter.join().expect("submitter"));
    assert!(acked.len() > 1, "some submissions were acknowledged before the kill");

    let _scheduler = start_scheduler(&config);
    wait("the scheduler to come back", || std::net::TcpStream::connect(&api).ok().map(|_| ()));
    for id in &acked {
        let v = wait(&format!("app {id} after the restart"), || app(&api, *id));
        assert_eq!(v["app"]["id"], *id);
    }
    // The running container was adopted, not restarted: same container, same process.
    let again = wait("app 1 running again with its container", || {
        app(&api, 1).and_then(|v| {
            let c = &v["app"]["containers"][0];
            (v["app"]["state"] == "RUNNING" && c["state"] == "RUNNING").then(|| c["id"].as_u64()).flatten()
        })
    });
    assert_eq!(again, running, "the same container");
    assert!(alive(pid), "its process was never restarted");
    assert_eq!(command_pid(&work, running), Some(pid));
    let out = gantry(&api, &["kill", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait("the container to be killed", || (!alive(pid)).then_some(()));
    drop(_agent);
    kill_leftover_containers(&work, &cgroup);
}
