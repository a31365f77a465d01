//! The REST API's in-memory fake backend, served over real HTTP on 127.0.0.1: the routes' tests
//! here (`api.rs`) and the `gantry` CLI's tests (`gantry/tests/cli.rs`, which includes this file)
//! run against the same fake, so the CLI is tested against exactly the routes the daemon serves.

use gantry_engine::{Engine, EngineConfig, Event, GpuSpec, NodeSpec, QueueSpec};
use gantry_scheduler::api::types::*;
use gantry_scheduler::api::{self, ApiError, AppFilter, Backend, LogFile};
use gantry_sdk::abi::{GANTRY_APP_ACCEPTED, GANTRY_APP_NEW, GANTRY_APP_RUNNING, GantryResources};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

pub const GIB: u64 = 1 << 30;

pub fn res(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> GantryResources {
    GantryResources { cpu_millis, memory_bytes, gpus, reserved: 0 }
}

// ----- the fake backend ------------------------------------------------------------------------

#[derive(Clone, Default)]
pub struct Fake {
    pub s: Arc<Mutex<FakeState>>,
}

#[derive(Default)]
pub struct FakeState {
    pub apps: Vec<AppInfo>,
    pub nodes: Vec<NodeInfo>,
    pub submitted: Vec<SubmitApp>,
    pub killed: Vec<u64>,
    pub reserved_ids: Vec<u64>,
    pub next_id: u64,
    pub persist_fails: bool,
    pub logs: Vec<(u64, LogFile, Vec<u8>)>,
    pub scheduler: Option<SchedulerInfo>,
}

pub fn container(id: u64, node: &str, state: ContainerState, exit_code: Option<i32>) -> ContainerInfo {
    ContainerInfo {
        id,
        state,
        node_id: node.into(),
        request: 0,
        resource: res(1500, 2 * GIB, 0).into(),
        gpus: Vec::new(),
        exit_code,
        started_time: 1_700_000_000_000,
        finished_time: 0,
        preemption_candidate_since: None,
        diagnostics: String::new(),
    }
}

impl Fake {
    /// Two nodes, three apps (one running with a container on node-a, one finished, one
    /// waiting), logs for two containers.
    pub fn populated() -> Fake {
        let fake = Fake::default();
        {
            let mut s = fake.s.lock().unwrap();
            s.next_id = 10;
            let mut a = NodeInfo::new(
                "node-a",
                "r1",
                NodeState::Running,
                res(4000, 8 * GIB, 1),
                res(1500, 2 * GIB, 0),
            );
            a.labels.insert("zone".into(), "a".into());
            a.num_containers = 1;
            a.gpus.push(GpuInfo {
                index: 0,
                model: "A100".into(),
                memory_bytes: 80 * GIB,
                container_id: None,
            });
            let b = NodeInfo::new("node-b", "r2", NodeState::Lost, res(2000, 4 * GIB, 0), res(0, 0, 0));
            s.nodes = vec![a, b];

            let mut app1 = AppInfo::new(1, "train", "alice", "root.prod", AppState::Running);
            app1.set_allocated(res(1500, 2 * GIB, 0));
            app1.running_containers = 1;
            app1.started_time = 1_700_000_000_000;
            app1.elapsed_time = 125_000;
            app1.max_app_attempts = 3;
            app1.requests.push(RequestInfo {
                resource: res(1500, 2 * GIB, 0).into(),
                count: 1,
                placed: 1,
                completed: 0,
                gang: false,
                priority: 0,
                labels: BTreeMap::from([("zone".to_owned(), "a".to_owned())]),
                preferred_labels: BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]),
                rack_affinity: RackAffinity::None,
                command: vec!["python".into(), "train.py".into()],
            });
            app1.containers.push(container(100, "node-a", ContainerState::Running, None));
            let mut app2 = AppInfo::new(2, "etl", "bob", "root.default", AppState::Finished);
            app2.containers.push(container(200, "node-a", ContainerState::Completed, Some(0)));
            app2.containers.push(container(201, "node-b", ContainerState::Lost, Some(-1)));
            let app3 = AppInfo::new(3, "", "alice", "root.default", AppState::Accepted);
            let mut app4 = AppInfo::new(4, "old", "carol", "root.dev", AppState::Killed);
            app4.diagnostics = "killed by request".into();
            s.apps = vec![app1, app2, app3, app4];
            s.logs = vec![
                (100, LogFile::Stdout, b"hello from 100\nsecond line\n".to_vec()),
                (100, LogFile::Stderr, b"warning: 100\n".to_vec()),
                (200, LogFile::Stdout, b"done 200\n".to_vec()),
                (201, LogFile::Stdout, b"lost 201\n".to_vec()),
            ];
            s.scheduler = Some(engine_scheduler_info().0);
        }
        fake
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.s.lock().unwrap()
    }
}

impl Backend for Fake {
    async fn info(&self) -> ClusterInfo {
        let mut info = ClusterInfo::new(1_600_000_000_000, 1_700_000_000_000, "sqlite:/tmp/fake.db");
        info.plugins.push(PluginInfo {
            name: "packing".into(),
            hooks: vec!["place".into()],
            consecutive_failures: 0,
            quarantined_until: None,
        });
        info
    }

    async fn metrics(&self) -> ClusterMetrics {
        let s = self.state();
        let mut m = ClusterMetrics::default();
        for a in &s.apps {
            m.count_app(a.state);
        }
        for n in &s.nodes {
            m.count_node(n.state);
        }
        m.containers_allocated = 1;
        m.containers_running = 1;
        m.set_resources(res(4000, 8 * GIB, 1), res(1500, 2 * GIB, 0));
        m
    }

    async fn nodes(&self) -> Vec<NodeInfo> {
        self.state().nodes.clone()
    }

    async fn set_node_drain(&self, node: String, drain: bool) -> Result<NodeState, ApiError> {
        let mut s = self.state();
        if s.persist_fails {
            return Err(ApiError::unavailable(
                "the drain could not be stored, nothing changed: disk I/O error",
            ));
        }
        let n = s
            .nodes
            .iter_mut()
            .find(|n| n.id == node)
            .ok_or_else(|| ApiError::not_found(format!("node `{node}` is not known to the scheduler")))?;
        n.state = match (drain, n.state) {
            (true, NodeState::Running) => NodeState::Decommissioning,
            (false, NodeState::Decommissioning) => NodeState::Running,
            (_, other) => other,
        };
        Ok(n.state)
    }

    async fn removable_nodes(&self, min_idle_ms: u64) -> Vec<RemovableNode> {
        // node-b is lost and node-a busy: one made-up idle node, idle 20 minutes.
        let idle = RemovableNode {
            id: "node-c".into(),
            rack: "r2".into(),
            state: NodeState::Running,
            idle_since: 1_700_000_000_000,
            idle_seconds: 1200.0,
            total_resource: res(2000, 4 * GIB, 0).into(),
        };
        if min_idle_ms <= 1_200_000 { vec![idle] } else { Vec::new() }
    }

    async fn apps(&self, _filter: AppFilter) -> Vec<AppInfo> {
        // Deliberately ignores the filter: the router must apply it.
        self.state().apps.clone()
    }

    async fn app(&self, id: u64) -> Option<AppInfo> {
        self.state().apps.iter().find(|a| a.id == id).cloned()
    }

    async fn new_application(&self, _caller: Option<String>) -> Result<NewApplication, ApiError> {
        let mut s = self.state();
        let id = s.next_id;
        s.next_id += 1;
        s.reserved_ids.push(id);
        Ok(NewApplication { application_id: id, maximum_resource_capability: res(4000, 8 * GIB, 1).into() })
    }

    async fn submit(
        &self,
        req: SubmitApp,
        _account: Option<String>,
        _caller: Option<String>,
    ) -> Result<u64, ApiError> {
        let mut s = self.state();
        if s.persist_fails {
            return Err(ApiError::unavailable("cannot persist the submission: disk I/O error"));
        }
        let queue = req.queue.clone().unwrap_or_else(|| "root.default".into());
        if !["root.default", "root.prod", "root.dev"].contains(&queue.as_str()) {
            return Err(ApiError::unprocessable(format!("unknown queue `{queue}`")));
        }
        let id = match req.application_id {
            Some(id) if s.apps.iter().any(|a| a.id == id) => {
                return Err(ApiError::conflict(format!("application id {id} is already used")));
            }
            Some(id) if !s.reserved_ids.contains(&id) => {
                return Err(ApiError::unprocessable(format!("application id {id} was not reserved")));
            }
            Some(id) => id,
            None => {
                let id = s.next_id;
                s.next_id += 1;
                id
            }
        };
        let mut app = AppInfo::new(
            id,
            req.name.clone(),
            req.user.clone().unwrap_or("nobody".into()),
            queue,
            AppState::Accepted,
        );
        app.requests = req.containers.iter().map(RequestInfo::from_request).collect();
        s.apps.push(app);
        s.submitted.push(req);
        Ok(id)
    }

    async fn kill(&self, id: u64) -> Result<(), ApiError> {
        let mut s = self.state();
        s.killed.push(id);
        let app = s.apps.iter_mut().find(|a| a.id == id).ok_or_else(|| ApiError::not_found("gone"))?;
        // A running app stays RUNNING until its containers have stopped.
        if app.running_containers == 0 {
            app.set_state(AppState::Killed);
        }
        Ok(())
    }

    async fn scheduler(&self) -> SchedulerInfo {
        self.state().scheduler.clone().unwrap_or_else(|| engine_scheduler_info().0)
    }

    async fn container_owner(&self, _: u64) -> Option<(String, String)> {
        None
    }

    // The fake has no reservation planner; the daemon's reservation API is tested live
    // (tests/tests/reservations_live.rs).
    async fn new_reservation(
        &self,
        _caller: Option<String>,
    ) -> Result<api::reservations::NewReservation, ApiError> {
        Err(ApiError::bad_request(gantry_engine::EngineError::NoReservationPlanner.to_string()))
    }

    async fn submit_reservation(
        &self,
        _: Option<gantry_engine::ReservationId>,
        _: gantry_engine::ReservationRequest,
        _: Option<String>,
    ) -> Result<api::reservations::ReservationInfo, ApiError> {
        Err(ApiError::bad_request(gantry_engine::EngineError::NoReservationPlanner.to_string()))
    }

    async fn update_reservation(
        &self,
        _: gantry_engine::ReservationId,
        _: gantry_engine::ReservationRequest,
    ) -> Result<api::reservations::ReservationInfo, ApiError> {
        Err(ApiError::bad_request(gantry_engine::EngineError::NoReservationPlanner.to_string()))
    }

    async fn delete_reservation(&self, _: gantry_engine::ReservationId) -> Result<(), ApiError> {
        Err(ApiError::bad_request(gantry_engine::EngineError::NoReservationPlanner.to_string()))
    }

    async fn reservations(&self) -> Result<Vec<api::reservations::ReservationInfo>, ApiError> {
        Err(ApiError::bad_request(gantry_engine::EngineError::NoReservationPlanner.to_string()))
    }

    async fn optimize_reservations(&self) -> Result<api::reservations::OptimizeInfo, ApiError> {
        Err(ApiError::bad_request(gantry_engine::EngineError::NoReservationPlanner.to_string()))
    }

    async fn logs(&self, container: u64, file: LogFile, tail: Option<u64>) -> Result<Vec<u8>, ApiError> {
        let s = self.state();
        let (_, _, bytes) =
            s.logs.iter().find(|(c, f, _)| *c == container && *f == file).ok_or_else(|| {
                ApiError::not_found(format!("container {container} has no {} here", file.as_str()))
            })?;
        let start = tail.map_or(0, |t| bytes.len().saturating_sub(t as usize));
        Ok(bytes[start..].to_vec())
    }
}

/// Queue info built from a real engine: queues `root.prod` (70 %, max 100 %) and `root.dev`
/// (30 %, max 50 %), one node of 4 cores and 8 GiB, one app of 1 core and 1 GiB running in
/// prod, submitted through [`SubmitApp::to_app_spec`].
pub fn engine_scheduler_info() -> (SchedulerInfo, Engine) {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: "root.prod".into(), guaranteed: 0.7, maximum: 1.0 },
            QueueSpec { path: "root.dev".into(), guaranteed: 0.3, maximum: 0.5 },
        ],
        ..EngineConfig::default()
    };
    let mut engine = Engine::builtin(config).unwrap();
    engine
        .handle(
            1,
            Event::NodeRegistered(NodeSpec {
                name: "node-a".into(),
                rack: "r1".into(),
                labels: vec![("zone".into(), "a".into())],
                capacity: res(4000, 8 * GIB, 1),
                gpu_list: vec![GpuSpec { index: 0, model: "A100".into(), memory_bytes: 80 * GIB }],
            }),
        )
        .unwrap();
    let mut submit: SubmitApp = serde_json::from_value(json!({
        "application-name": "train",
        "queue": "prod",
        "containers": [{
            "resource": {"cpuMillis": 1000, "memoryBytes": GIB},
            "labels": {"zone": "a"},
            "command": ["sleep", "60"]
        }]
    }))
    .unwrap();
    submit.validate().unwrap();
    submit.normalize();
    let commands =
        engine.handle(2, Event::AppSubmitted(submit.to_app_spec("root.default", "alice"))).unwrap();
    assert!(!commands.is_empty(), "the engine answers a submission");
    let launched = engine.handle(3, Event::Tick).unwrap();
    let container = launched
        .iter()
        .find_map(|c| match c {
            gantry_engine::Command::Launch { container, .. } => Some(*container),
            _ => None,
        })
        .expect("the app's container is placed");
    engine.handle(4, Event::ContainerStarted { container }).unwrap();
    let st = engine.state();
    let info = SchedulerInfo::from_queues(
        st.queues(),
        |r| st.str(r).to_owned(),
        st.cluster(),
        |q| {
            let apps = st.apps().iter().filter(|a| a.queue == q);
            QueueApps {
                active: apps.clone().filter(|a| a.state == GANTRY_APP_RUNNING).count() as u32,
                pending: apps.filter(|a| matches!(a.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED)).count()
                    as u32,
            }
        },
    );
    (info, engine)
}

// ----- a real server -----------------------------------------------------------------------------

pub async fn serve(fake: Fake) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, api::router(fake)).await.unwrap() });
    addr
}
