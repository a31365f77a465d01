//! Cluster ids through the real core, with the test as the agent at the other end of a node's
//! stream: a scheduler applies what an agent reports only about its own containers (the ones
//! this run launched, and the live ones restored from its store under an earlier run's cluster
//! id), kills another scheduler state's containers addressed by their own cluster id, and takes
//! an agent older than cluster ids at its word. Timeouts are failure guards only.

use gantry_engine::{AppId, Engine, EngineConfig, Profile, RequestSpec, Resources};
use gantry_proto::ClusterId;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use gantry_scheduler::server::core::{self, Core, CoreHandle, LaunchTemplate, Request};
use gantry_scheduler::store::Store;
use gantry_sdk::abi::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

type Downstream = mpsc::Receiver<Result<v1::SchedulerMessage, tonic::Status>>;

/// Guard for every wait (never an assertion about speed).
const GUARD: Duration = Duration::from_secs(30);

/// Another scheduler state's cluster id (a fresh data directory's, a backup's, another
/// cluster's): never this core's, which is random.
fn other_than(ours: ClusterId) -> ClusterId {
    if ours == ClusterId::from_bits(7) { ClusterId::from_bits(8) } else { ClusterId::from_bits(7) }
}

fn engine() -> Engine {
    Engine::new(EngineConfig::default(), Vec::new(), Profile::default()).expect("engine")
}

/// The next message down the stream, pings and status acknowledgements skipped.
async fn next_down(rx: &mut Downstream) -> Down {
    loop {
        let m = tokio::time::timeout(GUARD, rx.recv()).await.expect("guard").expect("stream");
        match m.expect("not an error").msg.expect("a message") {
            Down::StatusAck(_) | Down::Ping(_) => {}
            other => return other,
        }
    }
}

async fn connect(core: &CoreHandle, stream: u64, register: v1::Register) -> Downstream {
    let (tx, rx) = mpsc::channel(64);
    let (reply, accepted) = oneshot::channel();
    let register = v1::Register {
        node_name: "n1".into(),
        allocatable: Some(v1::Resources { cpu_millis: 4000, memory_bytes: 8 << 30, gpus: 0 }),
        ..register
    };
    core.send(Request::AgentConnected { register, tx, stream, reply }).await.expect("core");
    accepted.await.expect("core").expect("registered");
    rx
}

async fn tell(core: &CoreHandle, stream: u64, msg: Up) {
    core.send(Request::AgentMessage { node: "n1".into(), stream, msg }).await.expect("core");
}

async fn submit(core: &CoreHandle) -> AppId {
    let spec = gantry_engine::AppSpec {
        name: "a".into(),
        queue: "root.default".into(),
        user: "u".into(),
        requests: vec![RequestSpec {
            resources: Resources::new(100, 1 << 20, 0),
            count: 1,
            ..Default::default()
        }],
        ..Default::default()
    };
    let template = LaunchTemplate { argv: vec!["true".into()], ..LaunchTemplate::default() };
    core.submit(spec, vec![template]).await.expect("core").expect("accepted")
}

async fn app_state(core: &CoreHandle, app: AppId) -> u32 {
    core.read(move |c| c.engine().app_state(app)).await.expect("core").expect("known app")
}

fn exited(container_id: u64, cluster: ClusterId) -> v1::ContainerExited {
    v1::ContainerExited {
        container_id,
        reason: v1::ExitReason::Exited as i32,
        cluster_id: cluster.to_wire(),
        ..Default::default()
    }
}

fn running(container_id: u64, cluster: ClusterId) -> v1::LiveContainer {
    v1::LiveContainer {
        container_id,
        app_id: 1,
        state: v1::ContainerState::Running as i32,
        started_at_ms: 1,
        cluster_id: cluster.to_wire(),
    }
}

#[tokio::test]
async fn only_its_own_containers_reports_are_applied_and_another_states_are_killed_by_their_own_name() {
    let (core, _task) = core::spawn(
        Core::new(engine()),
        Duration::from_millis(20),
        Duration::from_secs(3600),
        std::future::pending(),
    );
    let ours = core.read(|c| c.cluster()).await.expect("core");
    assert!(!ours.is_legacy(), "a core without a store has a cluster id of its own too");
    let other = other_than(ours);

    // An agent that kept another scheduler state's containers: 1 running, 2 ended unreported.
    let register = v1::Register {
        reports_cluster_ids: true,
        containers: vec![running(1, other)],
        unacked_exits: vec![exited(2, other)],
        ..Default::default()
    };
    let mut rx = connect(&core, 1, register).await;
    match next_down(&mut rx).await {
        Down::Registered(r) => assert_eq!(r.cluster_id, ours.to_wire(), "the agent learns this run's id"),
        other => panic!("expected Registered, got {other:?}"),
    }
    assert_eq!(
        next_down(&mut rx).await,
        Down::AckExit(v1::AckExit { container_id: 2, cluster_id: other.to_wire() }),
        "another state's exit is acknowledged, so the agent forgets it"
    );
    match next_down(&mut rx).await {
        Down::Kill(k) => {
            assert_eq!((k.container_id, k.cluster_id), (1, other.to_wire()), "killed by its own name")
        }
        other => panic!("expected the leftover's Kill, got {other:?}"),
    }

    // This run's container 1: launched under its own cluster id, beside the other state's 1.
    let app = submit(&core).await;
    let launch = match next_down(&mut rx).await {
        Down::Launch(l) => l,
        other => panic!("expected Launch, got {other:?}"),
    };
    assert_eq!((launch.container_id, launch.cluster_id.as_str()), (1, ours.to_wire().as_str()));
    tell(
        &core,
        1,
        Up::ContainerStarted(v1::ContainerStarted {
            container_id: 1,
            started_at_ms: 5,
            cluster_id: ours.to_wire(),
        }),
    )
    .await;
    assert_eq!(app_state(&core, app).await, GANTRY_APP_RUNNING);

    // The other state's container 1 ends (it was killed): acknowledged, and this run's
    // container 1 is untouched.
    tell(&core, 1, Up::ContainerExited(exited(1, other))).await;
    assert_eq!(
        next_down(&mut rx).await,
        Down::AckExit(v1::AckExit { container_id: 1, cluster_id: other.to_wire() })
    );
    assert_eq!(app_state(&core, app).await, GANTRY_APP_RUNNING, "an old container's exit ended a new one");
    let live = core
        .read(|c| {
            c.engine().state().containers().iter().filter(|c| c.state == GANTRY_CONTAINER_RUNNING).count()
        })
        .await
        .expect("core");
    assert_eq!(live, 1);

    // Its log is read under this run's cluster id, not the other container 1's.
    let reader = core.clone();
    let _answer = tokio::spawn(async move { reader.read_log(1, v1::LogStream::Stdout, None).await });
    match next_down(&mut rx).await {
        Down::ReadLog(r) => assert_eq!((r.container_id, r.cluster_id), (1, ours.to_wire())),
        other => panic!("expected ReadLog, got {other:?}"),
    }

    // Its own exit ends the app.
    tell(&core, 1, Up::ContainerExited(exited(1, ours))).await;
    assert_eq!(
        next_down(&mut rx).await,
        Down::AckExit(v1::AckExit { container_id: 1, cluster_id: ours.to_wire() })
    );
    assert_eq!(app_state(&core, app).await, GANTRY_APP_FINISHED);
}

#[tokio::test]
async fn an_agent_older_than_cluster_ids_is_taken_at_its_word() {
    let (core, _task) = core::spawn(
        Core::new(engine()),
        Duration::from_millis(20),
        Duration::from_secs(3600),
        std::future::pending(),
    );
    // No `reports_cluster_ids`: nothing it reports carries a cluster id.
    let mut rx = connect(&core, 1, v1::Register::default()).await;
    assert!(matches!(next_down(&mut rx).await, Down::Registered(_)));
    let app = submit(&core).await;
    assert!(matches!(next_down(&mut rx).await, Down::Launch(l) if l.container_id == 1));
    tell(&core, 1, Up::ContainerExited(exited(1, ClusterId::LEGACY))).await;
    assert_eq!(
        next_down(&mut rx).await,
        Down::AckExit(v1::AckExit { container_id: 1, cluster_id: String::new() })
    );
    assert_eq!(app_state(&core, app).await, GANTRY_APP_FINISHED);
}

#[tokio::test]
async fn containers_launched_on_an_agent_older_than_cluster_ids_stay_its_own_once_the_agent_is_upgraded() {
    let (core, _task) = core::spawn(
        Core::new(engine()),
        Duration::from_millis(20),
        Duration::from_secs(3600),
        std::future::pending(),
    );
    let mut rx = connect(&core, 1, v1::Register::default()).await;
    assert!(matches!(next_down(&mut rx).await, Down::Registered(_)));
    let app = submit(&core).await;
    match next_down(&mut rx).await {
        Down::Launch(l) => {
            assert_eq!((l.container_id, l.cluster_id.as_str()), (1, ""), "named as that agent will name it")
        }
        other => panic!("expected Launch, got {other:?}"),
    }
    tell(
        &core,
        1,
        Up::ContainerStarted(v1::ContainerStarted {
            container_id: 1,
            started_at_ms: 5,
            ..Default::default()
        }),
    )
    .await;

    // The agent is upgraded (the rollout's second half): it re-adopts the container from its
    // directory as the legacy cluster's, and says so. It is still this scheduler's.
    let register = v1::Register {
        reports_cluster_ids: true,
        containers: vec![running(1, ClusterId::LEGACY)],
        ..Default::default()
    };
    let mut rx = connect(&core, 2, register).await;
    core.read(|_| ()).await.expect("core"); // everything the registration sent is queued now
    let mut sent = Vec::new();
    while let Ok(m) = rx.try_recv() {
        sent.extend(m.expect("not an error").msg);
    }
    assert!(!sent.iter().any(|m| matches!(m, Down::Kill(_))), "its own container was killed: {sent:?}");
    assert_eq!(app_state(&core, app).await, GANTRY_APP_RUNNING);
    assert_eq!(core.read(|c| c.cluster_of(1)).await.expect("core"), ClusterId::LEGACY);
    tell(&core, 2, Up::ContainerExited(exited(1, ClusterId::LEGACY))).await;
    assert_eq!(app_state(&core, app).await, GANTRY_APP_FINISHED);
    // Ended, it leaves the core's map of other names (at a liveness check), which holds live
    // containers only; the launch history still names it.
    assert_eq!(core.read(|c| c.renamed_containers()).await.expect("core"), 1);
    tokio::time::timeout(GUARD, async {
        while core.read(|c| c.renamed_containers()).await.expect("core") != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("guard: the ended container's legacy name was never forgotten");
    assert_eq!(core.read(|c| c.cluster_of(1)).await.expect("core"), ClusterId::LEGACY);
}

#[tokio::test]
async fn after_a_restart_the_earlier_runs_containers_are_still_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("gantry.db");

    // First run: one container launched and running.
    let store = Arc::new(Store::open(&db).expect("store"));
    let first = Core::recover(engine(), store.clone(), Duration::from_secs(30)).expect("recover");
    let (stop, stopped) = oneshot::channel::<()>();
    let (core, task) = core::spawn(first, Duration::from_millis(20), Duration::from_secs(3600), async {
        let _ = stopped.await;
    });
    let first_cluster = core.read(|c| c.cluster()).await.expect("core");
    let register = v1::Register { reports_cluster_ids: true, ..Default::default() };
    let mut rx = connect(&core, 1, register).await;
    assert!(matches!(next_down(&mut rx).await, Down::Registered(_)));
    let app = submit(&core).await;
    assert!(matches!(next_down(&mut rx).await, Down::Launch(l) if l.container_id == 1));
    tell(
        &core,
        1,
        Up::ContainerStarted(v1::ContainerStarted {
            container_id: 1,
            started_at_ms: 5,
            cluster_id: first_cluster.to_wire(),
        }),
    )
    .await;
    assert_eq!(app_state(&core, app).await, GANTRY_APP_RUNNING);
    let _ = stop.send(());
    drop(task.await.expect("core task"));
    drop(core);
    drop(store);

    // Second run on the same store: a new cluster id, and the first run's container is wanted.
    let store = Arc::new(Store::open(&db).expect("store again"));
    let second = Core::recover(engine(), store, Duration::from_secs(30)).expect("recover");
    let (core, _task) =
        core::spawn(second, Duration::from_millis(20), Duration::from_secs(3600), std::future::pending());
    let ours = core.read(|c| c.cluster()).await.expect("core");
    assert_ne!(ours, first_cluster, "every run has a cluster id of its own");
    let stranger = other_than(first_cluster);
    let register = v1::Register {
        reports_cluster_ids: true,
        containers: vec![running(1, first_cluster), running(1, stranger)],
        ..Default::default()
    };
    let mut rx = connect(&core, 2, register).await;
    assert!(matches!(next_down(&mut rx).await, Down::Registered(_)));
    match next_down(&mut rx).await {
        Down::Kill(k) => {
            assert_eq!((k.container_id, k.cluster_id), (1, stranger.to_wire()), "only the stranger is killed")
        }
        other => panic!("expected the stranger's Kill, got {other:?}"),
    }
    assert_eq!(app_state(&core, app).await, GANTRY_APP_RUNNING, "the first run's container was restored");
    assert_eq!(core.read(|c| c.cluster_of(1)).await.expect("core"), first_cluster);
    // Engine kills go to it by the first run's cluster id, and its exit is applied.
    core.kill(app).await.expect("core").expect("kill");
    match next_down(&mut rx).await {
        Down::Kill(k) => assert_eq!((k.container_id, k.cluster_id), (1, first_cluster.to_wire())),
        other => panic!("expected the app's Kill, got {other:?}"),
    }
    let killed = v1::ContainerExited {
        reason: v1::ExitReason::KilledByRequest as i32,
        exit_code: 137,
        ..exited(1, first_cluster)
    };
    tell(&core, 2, Up::ContainerExited(killed)).await;
    assert!(matches!(next_down(&mut rx).await, Down::AckExit(a) if a.cluster_id == first_cluster.to_wire()));
    assert_eq!(app_state(&core, app).await, GANTRY_APP_KILLED);
}
