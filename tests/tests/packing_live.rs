//! The packing plugin and drains live: the real `gantry-scheduler` binary loads
//! `libgantry_packing.so`, three real agents on loopback register, and everything is done with
//! the real `gantry` CLI. A second container lands on the node the first one uses (spread would
//! pick an empty one); a drained node gets nothing, also after the scheduler is killed with
//! SIGKILL and restarted; `gantry node removable` lists exactly the empty nodes. Timeouts are
//! failure guards, never timing assertions.

use gantry_tests::{TestAgent, gantry_cli, rust_plugin, start_scheduler, wait_until};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);

/// The CLI's JSON answer, or `None` while the scheduler is not answering (it is restarting).
fn try_json(api: &str, args: &[&str]) -> Option<serde_json::Value> {
    let out = gantry_cli(api, args);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
}

fn json(api: &str, args: &[&str]) -> serde_json::Value {
    let out = gantry_cli(api, args);
    assert!(out.status.success(), "gantry {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON answer")
}

/// Submits one small long-running container and returns the app id.
fn submit(api: &str) -> u64 {
    let v = json(api, &["submit", "--json", "--cpu", "100m", "--mem", "32M", "--", "sleep", "600"]);
    v["application-id"].as_u64().expect("application-id")
}

/// Waits until the app's one container is placed; returns its node.
fn node_of(api: &str, app: u64) -> String {
    wait_until(&format!("app {app} to be placed"), GUARD, || {
        let v = json(api, &["app", &app.to_string(), "--json"]);
        v["app"]["containers"][0]["nodeId"].as_str().map(str::to_owned)
    })
}

/// Node name → state, as `gantry nodes --json` says (none while the scheduler is down).
fn states(api: &str) -> Vec<(String, String)> {
    let Some(v) = try_json(api, &["nodes", "--json"]) else { return Vec::new() };
    let mut out: Vec<(String, String)> = v["nodes"]["node"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    (n["id"].as_str().unwrap_or("").to_owned(), n["state"].as_str().unwrap_or("").to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn removable(api: &str) -> Vec<String> {
    let v = json(api, &["node", "removable", "--json"]);
    let mut names: Vec<String> = v["removableNodes"]["node"]
        .as_array()
        .map(|a| a.iter().filter_map(|n| n["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn packing_reuses_the_busy_node_and_a_drain_outlives_a_scheduler_kill_9() {
    let so = rust_plugin("gantry_packing").expect("packing plugin");
    let dir = tempfile::tempdir().expect("tempdir");
    // min_nodes = 1: with the default 5, packing stands aside on a three-node cluster.
    let files = gantry_tests::scheduler_config(
        dir.path(),
        "node_timeout_ms = 5000\ncycle_interval_ms = 50",
        &format!(
            "[[plugins]]\nname = \"packing\"\npath = {:?}\n[plugins.config]\nmode = \"packed\"\nmin_nodes = 1\n\
             [profile]\nplace = \"packing\"\n",
            so.display().to_string()
        ),
    );
    let (api, config) = (files.api.clone(), files.config.clone());
    let mut scheduler = start_scheduler(&config);
    let agent_addr: std::net::SocketAddr = files.agents.parse().expect("address");
    let _agents: Vec<TestAgent> = ["n1", "n2", "n3"]
        .iter()
        .map(|name| TestAgent::start(dir.path(), name, "r1", &[], agent_addr))
        .collect();
    let all_running = || {
        let s = states(&api);
        (s.len() == 3 && s.iter().all(|(_, st)| st == "RUNNING")).then_some(())
    };
    wait_until("three nodes RUNNING", GUARD, all_running);
    assert_eq!(removable(&api), ["n1", "n2", "n3"], "every node starts empty");

    // The first container goes to an empty node; the second joins it (medium before low).
    let first = node_of(&api, submit(&api));
    let second = node_of(&api, submit(&api));
    assert_eq!(second, first, "packing puts the second container on the node already in use");
    let mut empty: Vec<String> =
        ["n1", "n2", "n3"].iter().map(|s| s.to_string()).filter(|n| *n != first).collect();
    empty.sort();
    assert_eq!(removable(&api), empty, "removable = the empty nodes");

    // Drain the busy node: it keeps its containers and gets no new one.
    let out = gantry_cli(&api, &["node", "drain", &first]);
    assert!(out.status.success(), "drain: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("DECOMMISSIONING"));
    let third = node_of(&api, submit(&api));
    assert_ne!(third, first, "a drained node gets nothing");
    let fourth = node_of(&api, submit(&api));
    assert_eq!(fourth, third, "and packing moves on to the next node");
    let last_empty: Vec<String> = empty.iter().filter(|n| **n != third).cloned().collect();
    assert_eq!(removable(&api), last_empty);

    // Unknown nodes and bad states are refused, and change nothing.
    let out = gantry_cli(&api, &["node", "drain", "ghost"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ghost"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // kill -9 and restart: the drain was stored before it was answered.
    scheduler.kill9();
    let mut scheduler = start_scheduler(&config);
    wait_until("the nodes to come back after the restart", GUARD, || {
        let s = states(&api);
        (s.len() == 3 && s.iter().any(|(n, st)| *n == first && st == "DECOMMISSIONING")).then_some(())
    });
    let fifth = node_of(&api, submit(&api));
    assert_ne!(fifth, first, "still drained after the restart");

    // Undrain: the node takes work again.
    let out = gantry_cli(&api, &["node", "undrain", &first]);
    assert!(out.status.success(), "undrain: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("RUNNING"));
    wait_until("all nodes RUNNING", GUARD, all_running);
    scheduler.kill9();
}
