//! The scheduler `kill -9`ed in the middle of a stream of submissions (issue 10's fault
//! injection): real `gantry-scheduler` and three real `gantry-agent`s on loopback, four clients
//! submitting 200 short apps between them, each app a real command that appends its app id and
//! container id to one shared file. The scheduler is SIGKILLed once a third of the submissions
//! are acknowledged and restarted at once on the same data directory while the clients keep
//! going. Every acknowledged app must exist after the restart and finish; no app may run twice;
//! a submission that failed on the connection may exist or not (the client cannot know), but
//! never twice. The figures it prints are recorded in RELIABILITY.md.

use gantry_scheduler::api::AppFilter;
use gantry_scheduler::api::client::{Client, ClientError};
use gantry_scheduler::api::types::{AppState, SubmitApp};
use gantry_tests::{TestAgent, start_scheduler, wait_until};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const APPS: usize = 200;
const CLIENTS: usize = 4;
/// The scheduler dies once this many submissions are acknowledged.
const KILL_AFTER: usize = APPS / 3;
/// A correctness bound on every wait, never a timing assertion.
const GUARD: Duration = Duration::from_secs(120);

/// What one submission got.
#[derive(Debug, Default)]
struct Outcomes {
    /// Acknowledged: name → id.
    acked: BTreeMap<String, u64>,
    /// Refused by the API (an HTTP error status): name → message.
    refused: BTreeMap<String, String>,
    /// No answer (the connection failed or was cut): the app may or may not exist.
    unknown: BTreeSet<String>,
}

fn submission(name: &str, out: &Path) -> SubmitApp {
    let script = format!("echo \"$GANTRY_APP_ID $GANTRY_CONTAINER_ID\" >> {}", out.display());
    serde_json::from_value(serde_json::json!({
        "application-name": name,
        "containers": [{
            "resource": {"cpuMillis": 10, "memoryBytes": 8 << 20, "gpus": 0},
            "command": ["sh", "-c", script],
        }]
    }))
    .expect("submission")
}

/// Submits the apps numbered by `next` until `APPS` have been tried, noting each outcome. After
/// a failed connection it pauses a little, so that the scheduler's restart does not use up the
/// submissions.
async fn submit_all(client: Client, next: Arc<AtomicUsize>, outcomes: Arc<Mutex<Outcomes>>, out: &Path) {
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= APPS {
            return;
        }
        let name = format!("load-{i:03}");
        let result = client.submit(&submission(&name, out)).await;
        let connection_failed = {
            let mut o = outcomes.lock().expect("outcomes");
            match result {
                Ok(id) => {
                    o.acked.insert(name, id);
                    false
                }
                Err(ClientError::Api { status, message, .. }) => {
                    o.refused.insert(name, format!("{status}: {message}"));
                    false
                }
                Err(_) => {
                    o.unknown.insert(name);
                    true
                }
            }
        };
        if connection_failed {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[test]
fn kill_9_of_the_scheduler_under_load_loses_no_acknowledged_app_and_runs_none_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = gantry_tests::container_writable_dir(dir.path(), "out");
    let out = shared.join("runs");

    let files =
        gantry_tests::scheduler_config(dir.path(), "node_timeout_ms = 5000\ncycle_interval_ms = 50", "");
    let mut scheduler = start_scheduler(&files.config);
    let agents_addr: std::net::SocketAddr = files.agents.parse().expect("agent address");
    let _agents: Vec<TestAgent> =
        ["n1", "n2", "n3"].iter().map(|n| TestAgent::start(dir.path(), n, "r1", &[], agents_addr)).collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = Client::new(&files.api).expect("client").with_timeout(Duration::from_secs(20));
    wait_until("three agents to register", GUARD, || {
        let nodes = rt.block_on(client.nodes()).ok()?;
        (nodes.iter().filter(|n| n.state == gantry_scheduler::api::types::NodeState::Running).count() == 3)
            .then_some(())
    });

    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let submitters: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, next, outcomes, out) = (client.clone(), next.clone(), outcomes.clone(), out.clone());
            rt.spawn(async move { submit_all(client, next, outcomes, &out).await })
        })
        .collect();
    wait_until("a third of the submissions to be acknowledged", GUARD, || {
        (outcomes.lock().expect("outcomes").acked.len() >= KILL_AFTER).then_some(())
    });
    scheduler.kill9();
    let tried_at_kill = next.load(Ordering::Relaxed).min(APPS);
    let _scheduler = start_scheduler(&files.config);
    for s in submitters {
        rt.block_on(s).expect("submitter");
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().expect("outcomes"));
    eprintln!(
        "kill under load: killed after {tried_at_kill} submissions tried; of {APPS}: {} acknowledged, {} refused, {} without an answer",
        outcomes.acked.len(),
        outcomes.refused.len(),
        outcomes.unknown.len()
    );
    assert_eq!(outcomes.acked.len() + outcomes.refused.len() + outcomes.unknown.len(), APPS);
    assert!(outcomes.acked.len() > KILL_AFTER, "submissions were acknowledged after the restart too");

    // Every acknowledged app is there and finishes.
    let apps = wait_until("every acknowledged app to finish", GUARD, || {
        let apps = rt.block_on(client.apps(&AppFilter::default())).ok()?;
        let finished: BTreeSet<u64> =
            apps.iter().filter(|a| a.state == AppState::Finished).map(|a| a.id).collect();
        outcomes.acked.values().all(|id| finished.contains(id)).then_some(apps)
    });
    let mut by_name: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for a in &apps {
        by_name.entry(a.name.as_str()).or_default().push(a.id);
    }
    for (name, id) in &outcomes.acked {
        assert_eq!(
            by_name.get(name.as_str()),
            Some(&vec![*id]),
            "{name}: acknowledged as {id}, exactly once"
        );
    }
    for name in &outcomes.unknown {
        assert!(by_name.get(name.as_str()).is_none_or(|ids| ids.len() == 1), "{name} exists at most once");
    }
    for (name, why) in &outcomes.refused {
        assert!(!by_name.contains_key(name.as_str()), "{name} was refused ({why}) but exists");
    }
    let unknown_present = outcomes.unknown.iter().filter(|n| by_name.contains_key(n.as_str())).count();

    // No app ran twice: each app's line appears once, from one container. An app that failed and
    // was retried would be allowed one run per attempt; none of these fail.
    let mut runs: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for line in std::fs::read_to_string(&out).expect("runs file").lines() {
        let mut w = line.split_whitespace().map(|x| x.parse::<u64>().expect("ids in the runs file"));
        let (app, container) = (w.next().expect("app id"), w.next().expect("container id"));
        runs.entry(app).or_default().push(container);
    }
    for a in &apps {
        let ran = runs.get(&a.id).map_or(0, Vec::len);
        let allowed = 1 + a.failures as usize;
        if a.state == AppState::Finished {
            assert!(
                (1..=allowed).contains(&ran),
                "app {} ({}) ran {ran} times: {:?}",
                a.id,
                a.name,
                runs.get(&a.id)
            );
        }
    }
    let containers: BTreeSet<u64> = runs.values().flatten().copied().collect();
    assert_eq!(containers.len(), runs.values().map(Vec::len).sum::<usize>(), "no container id ran twice");
    eprintln!(
        "kill under load: {} apps finished, each ran once; {unknown_present} of the {} unanswered submissions exist",
        apps.iter().filter(|a| a.state == AppState::Finished).count(),
        outcomes.unknown.len()
    );
}
