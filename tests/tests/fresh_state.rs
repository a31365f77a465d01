//! A scheduler started on fresh state against an agent that kept its work folder and a running
//! container: real `gantry-scheduler`, `gantry-agent` and `gantry` binaries on loopback. The new
//! scheduler numbers its containers from 1 again, as the old one did; its apps must still run
//! (no "container 1 already exists on this node"), the old scheduler's leftover container must
//! be killed, and `gantry logs` of the new container 1 must show the new container's output,
//! never the old one's. Timeouts are failure guards only.

use gantry_tests::{TestAgent, gantry_cli, scheduler_config, start_scheduler, wait_until};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

fn wait<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_until(what, GUARD, f)
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(out.status.success(), "gantry failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn app(api: &str, id: u64) -> Option<serde_json::Value> {
    let out = gantry_cli(api, &["app", &id.to_string(), "--json"]);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("JSON"))
}

/// Waits for app `id` to end; returns its state, diagnostics and first container's id.
fn wait_end(api: &str, id: u64) -> (String, String, u64) {
    wait(&format!("app {id} to end"), || {
        let v = app(api, id)?;
        let state = v["app"]["state"].as_str()?.to_owned();
        matches!(state.as_str(), "FINISHED" | "FAILED" | "KILLED").then(|| {
            let diagnostics = v["app"]["diagnostics"].as_str().unwrap_or_default().to_owned();
            (state, diagnostics, v["app"]["containers"][0]["id"].as_u64().unwrap_or(0))
        })
    })
}

fn submit(api: &str, script: &str) {
    stdout_of(&gantry_cli(api, &["submit", "--cpu", "100m", "--mem", "16M", "--", "sh", "-c", script]));
}

fn command_pid(work: &Path, container: u64) -> Option<u64> {
    let dir = gantry_tests::container_control_dir(work, container)?;
    let text = std::fs::read_to_string(dir.join("pid")).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["pid"].as_u64()
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn a_scheduler_on_a_fresh_data_dir_never_mistakes_an_agents_older_containers_for_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Containers run as nobody, who must reach their directories under the agent's work root.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let (old_dir, new_dir) = (dir.path().join("old"), dir.path().join("new"));
    std::fs::create_dir_all(&old_dir).expect("old scheduler's directory");
    std::fs::create_dir_all(&new_dir).expect("new scheduler's directory");
    let files = scheduler_config(&old_dir, "node_timeout_ms = 120000\ncycle_interval_ms = 50", "");
    // The new scheduler: the same addresses, its own (empty) data directory.
    let new_config = new_dir.join("scheduler.toml");
    std::fs::copy(&files.config, &new_config).expect("new scheduler's configuration");
    let api = files.api.clone();

    let mut old = start_scheduler(&files.config);
    // No fencing: the old scheduler's container must outlive it, to meet the new one.
    let agent = TestAgent::start_with(
        dir.path(),
        "n1",
        "r1",
        &[],
        files.agents.parse().expect("agent address"),
        "fencing_timeout_ms = 0",
    );
    wait("the agent to register with the old scheduler", || {
        String::from_utf8_lossy(&gantry_cli(&api, &["nodes"]).stdout).contains("RUNNING").then_some(())
    });
    submit(&api, "echo from the old container 1");
    let (state, diagnostics, first) = wait_end(&api, 1);
    assert_eq!((state.as_str(), first), ("FINISHED", 1), "{diagnostics}");
    assert_eq!(stdout_of(&gantry_cli(&api, &["logs", "1"])), "from the old container 1\n");
    submit(&api, "echo from the old container 2; exec sleep 4000");
    wait("the old container 2 to run", || {
        app(&api, 2).filter(|v| v["app"]["state"] == "RUNNING").map(|_| ())
    });
    let leftover = wait("the old container 2's pid", || command_pid(&agent.work, 2));

    // The old scheduler goes; a new one on fresh state takes its addresses. The agent keeps its
    // work folder and the running container.
    old.kill9();
    assert!(alive(leftover), "the old container outlives its scheduler");
    let _new = start_scheduler(&new_config);
    wait("the agent to register with the new scheduler", || {
        String::from_utf8_lossy(&gantry_cli(&api, &["nodes"]).stdout).contains("RUNNING").then_some(())
    });
    wait("the old scheduler's leftover container to be killed", || (!alive(leftover)).then_some(()));

    // The new scheduler's containers 1 and 2 run beside the old ones' directories.
    submit(&api, "echo from the new container 1");
    submit(&api, "echo from the new container 2");
    for id in [1, 2] {
        let (state, diagnostics, container) = wait_end(&api, id);
        assert_eq!((state.as_str(), container), ("FINISHED", id), "new app {id}: {diagnostics}");
        assert!(!diagnostics.contains("already exists"), "{diagnostics}");
    }
    assert_eq!(
        stdout_of(&gantry_cli(&api, &["logs", "1"])),
        "from the new container 1\n",
        "the new container 1's log, not the old one's"
    );
    assert_eq!(stdout_of(&gantry_cli(&api, &["logs", "2"])), "from the new container 2\n");
    // The old containers' directories are still there, each under its own name.
    let names: Vec<String> = std::fs::read_dir(agent.work.join("containers"))
        .expect("containers")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    for id in ["1", "2"] {
        let of_id = names.iter().filter(|n| n.split('.').next() == Some(id)).count();
        assert_eq!(of_id, 2, "a directory per scheduler state for container {id}: {names:?}");
    }
}
