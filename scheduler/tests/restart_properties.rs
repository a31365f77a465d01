//! Scheduler restarts at random points of a random workload (issue 18): the real core and a real
//! SQLite store, with the test as the agent at the other end of a node's stream. Each seed runs
//! submissions (plain and under handed-out ids), kills, exits (successful and failed) and
//! restarts in a seeded random order, and checks after every step and every restart:
//! - no application or container id is ever given twice, across any number of restarts;
//! - every acknowledged application is stored, and every acknowledged kill stays a kill;
//! - a request never runs more containers than it still needs (completed work never runs
//!   again, nothing runs twice);
//! - after a restart the store and the engine agree on which applications are live.
//!
//! `GANTRY_RESTART_SEEDS=N` runs more seeds than the default. Timeouts are failure guards only.

use gantry_engine::{AppId, AppSpec, Engine, EngineConfig, Profile, RequestSpec, Resources};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use gantry_scheduler::server::core::{self, Core, CoreHandle, IdKind, LaunchTemplate, Request};
use gantry_scheduler::store::Store;
use gantry_sdk::abi::*;
use gantry_sdk::rng::SplitMix64;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

type Downstream = mpsc::Receiver<Result<v1::SchedulerMessage, tonic::Status>>;

const NODE: &str = "n1";

fn engine() -> Engine {
    Engine::new(EngineConfig::default(), Vec::new(), Profile::default()).expect("engine")
}

/// A container the fake agent runs.
#[derive(Debug, Clone)]
struct Running {
    app: u64,
    request: usize,
    cluster: String,
}

/// What the test knows, across restarts.
#[derive(Default)]
struct World {
    /// Acknowledged apps: their request counts.
    apps: BTreeMap<u64, Vec<u32>>,
    /// Apps whose kill was acknowledged.
    killed: BTreeSet<u64>,
    /// Every container id ever launched.
    launched: BTreeSet<u64>,
    /// Containers running on the agent, by id.
    running: BTreeMap<u64, Running>,
    /// Completed containers per (app, request).
    completed: HashMap<(u64, usize), u32>,
    /// Exits reported and not acknowledged yet: reported again at every Register.
    unacked: Vec<v1::ContainerExited>,
}

struct Life {
    core: CoreHandle,
    task: tokio::task::JoinHandle<Core>,
    stop: oneshot::Sender<()>,
    rx: Downstream,
    stream: u64,
}

async fn start(store: Store, stream: u64, world: &World) -> Life {
    let core = Core::recover(engine(), Arc::new(store), Duration::from_secs(5)).expect("recover");
    let (stop, stopped) = oneshot::channel::<()>();
    let (core, task) = core::spawn(core, Duration::from_millis(10), Duration::from_secs(3600), async {
        let _ = stopped.await;
    });
    let (tx, rx) = mpsc::channel(4096);
    let (reply, accepted) = oneshot::channel();
    let register = v1::Register {
        node_name: NODE.into(),
        allocatable: Some(v1::Resources { cpu_millis: 64_000, memory_bytes: 256 << 30, gpus: 0 }),
        reports_cluster_ids: true,
        containers: world
            .running
            .iter()
            .map(|(&id, r)| v1::LiveContainer {
                container_id: id,
                app_id: r.app,
                state: v1::ContainerState::Running as i32,
                started_at_ms: 1,
                cluster_id: r.cluster.clone(),
            })
            .collect(),
        unacked_exits: world.unacked.clone(),
        ..Default::default()
    };
    core.send(Request::AgentConnected { register, tx, stream, reply }).await.expect("core");
    accepted.await.expect("core").expect("registered");
    Life { core, task, stop, rx, stream }
}

async fn stop(life: Life) {
    let _ = life.stop.send(());
    drop(life.task.await.expect("core task"));
}

fn spec(counts: &[u32]) -> AppSpec {
    AppSpec {
        name: "p".into(),
        queue: "root.default".into(),
        user: "u".into(),
        max_attempts: 100,
        requests: counts
            .iter()
            .map(|&count| RequestSpec {
                resources: Resources::new(10, 1 << 20, 0),
                count,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn template() -> LaunchTemplate {
    LaunchTemplate { argv: vec!["true".into()], ..LaunchTemplate::default() }
}

/// Lets the core work, then plays the agent: starts what it launches (checking nothing runs
/// beyond what is needed and no id comes twice) and stops what it kills.
async fn settle(life: &mut Life, world: &mut World) {
    for _ in 0..3 {
        let _ = life.core.read(|_| ()).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        while let Ok(m) = life.rx.try_recv() {
            match m.expect("not an error").msg.expect("a message") {
                Down::Launch(l) => {
                    let id = l.container_id;
                    assert!(world.launched.insert(id), "container id {id} launched twice");
                    let app = l.app_id;
                    let counts =
                        world.apps.get(&app).unwrap_or_else(|| panic!("launch for unacknowledged app {app}"));
                    assert!(!world.killed.contains(&app), "a killed app's container {id} was launched");
                    let request = request_of(life, id).await;
                    let running =
                        world.running.values().filter(|r| r.app == app && r.request == request).count();
                    let done = world.completed.get(&(app, request)).copied().unwrap_or(0);
                    assert!(
                        (running as u32) + done < counts[request],
                        "app {app} request {request} runs more than it needs: {running} running, {done} done, \
                         {} wanted",
                        counts[request]
                    );
                    world.running.insert(id, Running { app, request, cluster: l.cluster_id.clone() });
                    let started =
                        v1::ContainerStarted { container_id: id, started_at_ms: 2, cluster_id: l.cluster_id };
                    tell(life, Up::ContainerStarted(started)).await;
                }
                Down::Kill(k) => {
                    if let Some(r) = world.running.remove(&k.container_id) {
                        let exit = v1::ContainerExited {
                            container_id: k.container_id,
                            reason: v1::ExitReason::KilledByRequest as i32,
                            exit_code: 137,
                            cluster_id: r.cluster,
                            ..Default::default()
                        };
                        world.unacked.push(exit.clone());
                        tell(life, Up::ContainerExited(exit)).await;
                    }
                }
                Down::AckExit(a) => {
                    world
                        .unacked
                        .retain(|e| (e.container_id, &e.cluster_id) != (a.container_id, &a.cluster_id));
                }
                _ => {}
            }
        }
    }
}

async fn request_of(life: &Life, container: u64) -> usize {
    life.core
        .read(move |c| {
            c.launched(c.app_of_container(container).unwrap_or(0))
                .iter()
                .find(|l| l.id == container)
                .map(|l| l.request)
        })
        .await
        .expect("core")
        .expect("the core remembers what it launched") as usize
}

async fn tell(life: &Life, msg: Up) {
    life.core
        .send(Request::AgentMessage { node: NODE.into(), stream: life.stream, msg })
        .await
        .expect("core");
}

/// The store and what the test was told agree.
fn check_store(path: &Path, world: &World) -> Store {
    let store = Store::open(path).expect("store reopens");
    store.check_integrity().expect("integrity");
    let r = store.load().expect("load");
    let stored: BTreeMap<u64, u32> = r.apps.iter().map(|a| (a.id.0, a.state)).collect();
    for id in world.apps.keys() {
        assert!(stored.contains_key(id), "acknowledged app {id} is not stored");
    }
    for id in &world.killed {
        assert_eq!(stored[id], GANTRY_APP_KILLED, "acknowledged kill of app {id} did not stay");
    }
    store
}

async fn run_seed(seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gantry.db");
    let mut rng = SplitMix64::new(seed);
    let mut world = World::default();
    let mut stream = 1;
    let mut life = start(Store::open(&path).expect("store"), stream, &world).await;
    let mut last_app = 0;
    for _ in 0..40 {
        match rng.below(100) {
            0..=29 => {
                let counts: Vec<u32> = (0..=rng.below(2)).map(|_| 1 + rng.below(3) as u32).collect();
                let templates = vec![template(); counts.len()];
                let id = if rng.below(3) == 0 {
                    let handed = life.core.new_id(IdKind::App, None).await.expect("core").expect("new id");
                    life.core.submit_with_id(spec(&counts), templates, Some(AppId(handed)), None).await
                } else {
                    life.core.submit(spec(&counts), templates).await
                };
                let id = id.expect("core").expect("accepted").0;
                assert!(id > last_app, "app id {id} after {last_app}: an id came twice or went back");
                last_app = id;
                world.apps.insert(id, counts);
            }
            30..=39 => {
                let live: Vec<u64> = world
                    .apps
                    .keys()
                    .copied()
                    .filter(|a| world.running.values().any(|r| r.app == *a))
                    .collect();
                if let Some(&app) = live.get(rng.below(live.len().max(1) as u64) as usize) {
                    if life.core.kill(AppId(app)).await.expect("core").is_ok() {
                        world.killed.insert(app);
                    }
                }
            }
            40..=84 => {
                let ids: Vec<u64> = world.running.keys().copied().collect();
                if let Some(&id) = ids.get(rng.below(ids.len().max(1) as u64) as usize) {
                    let r = world.running.remove(&id).expect("running");
                    let code = if rng.below(5) == 0 { 1 } else { 0 };
                    if code == 0 {
                        *world.completed.entry((r.app, r.request)).or_default() += 1;
                    }
                    let exit = v1::ContainerExited {
                        container_id: id,
                        reason: v1::ExitReason::Exited as i32,
                        exit_code: code,
                        finished_at_ms: 3,
                        cluster_id: r.cluster,
                        ..Default::default()
                    };
                    // Like a real agent, it reports the exit again on every Register until the
                    // scheduler acknowledges it (a restart may lose a message in flight).
                    world.unacked.push(exit.clone());
                    if rng.below(4) == 0 {
                        // It ends while the scheduler restarts: reported on the next Register.
                        stop(life).await;
                        let store = check_store(&path, &world);
                        stream += 1;
                        life = start(store, stream, &world).await;
                    } else {
                        tell(&life, Up::ContainerExited(exit)).await;
                    }
                }
            }
            _ => {
                stop(life).await;
                let store = check_store(&path, &world);
                stream += 1;
                life = start(store, stream, &world).await;
            }
        }
        settle(&mut life, &mut world).await;
    }
    // The store and the engine agree on which apps are live.
    stop(life).await;
    let store = check_store(&path, &world);
    let stored_live: BTreeSet<u64> = store
        .load()
        .expect("load")
        .apps
        .iter()
        .filter(|a| matches!(a.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING))
        .map(|a| a.id.0)
        .collect();
    let life = start(store, stream + 1, &world).await;
    let engine_live: BTreeSet<u64> = life
        .core
        .read(|c| {
            c.engine()
                .state()
                .apps()
                .iter()
                .filter(|a| !gantry_engine::state::app_is_terminal(a.state))
                .map(|a| a.id)
                .collect()
        })
        .await
        .expect("core");
    assert_eq!(stored_live, engine_live, "seed {seed}: store and engine disagree on live apps");
    stop(life).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_restarts_lose_nothing_acknowledged_and_reuse_no_id() {
    let seeds: u64 = std::env::var("GANTRY_RESTART_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    for seed in 0..seeds {
        run_seed(0x5eed_0000 + seed).await;
    }
}
