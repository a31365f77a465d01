//! The REST API's view of the running daemon: every call becomes a read or a request on the
//! core (see [`super::core`]), and submissions are acknowledged only once the store has
//! committed them.

use super::core::{Core, CoreGone, CoreHandle, LaunchTemplate};
use crate::api::types::*;
use crate::api::{ApiError, AppFilter, Backend, LogFile};
use gantry_engine::state::{AppSummary, container_is_live};
use gantry_engine::{AppId, EngineError};
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The daemon as the REST API sees it.
#[derive(Debug, Clone)]
pub struct DaemonBackend {
    core: CoreHandle,
    started_on_ms: u64,
    /// Where containers' directories are when the only agent runs on this machine (`gantry
    /// dev`), so logs can be read without a round trip.
    local_work_root: Option<PathBuf>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn gone(_: CoreGone) -> ApiError {
    ApiError::unavailable("the scheduler is stopping")
}

fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::UnknownApp(id) => ApiError::not_found(format!("application {id} not found")),
        EngineError::Conflict(m) => ApiError::conflict(m),
        other => ApiError::unprocessable(other.to_string()),
    }
}

impl DaemonBackend {
    /// A backend over `core`.
    pub fn new(core: CoreHandle, local_work_root: Option<PathBuf>) -> Self {
        DaemonBackend { core, started_on_ms: now_ms(), local_work_root }
    }
}

fn summary_info(core: &Core, s: &AppSummary) -> AppInfo {
    let state = AppState::from_abi(s.state).unwrap_or(AppState::Failed);
    let mut a = AppInfo::new(s.id.0, s.name.clone(), s.user.clone(), s.queue.clone(), state);
    a.diagnostics.clone_from(&s.diagnostics);
    for c in core.launched(s.id.0) {
        let Some(state) = ContainerState::from_abi(c.state) else { continue };
        a.containers.push(ContainerInfo {
            id: c.id,
            state,
            node_id: c.node.clone(),
            request: c.request,
            resource: ResourceInfo::default(),
            gpus: Vec::new(),
            exit_code: c.exit_code,
            started_time: 0,
            finished_time: 0,
            diagnostics: String::new(),
        });
    }
    a
}

/// Everything the API shows of a live application.
fn live_info(core: &Core, index: u32) -> Option<AppInfo> {
    let st = core.engine().state();
    let a = *st.apps().get(index as usize)?;
    let meta = st.app_meta(index)?;
    let state = AppState::from_abi(a.state).unwrap_or(AppState::Failed);
    let mut info =
        AppInfo::new(a.id, meta.name.clone(), st.str(a.user), st.queue_path(a.queue).to_owned(), state);
    info.diagnostics.clone_from(&meta.diagnostics);
    info.priority = a.priority;
    info.started_time = a.submit_ms;
    info.elapsed_time = now_ms().saturating_sub(a.submit_ms);
    info.max_app_attempts = meta.max_attempts;
    info.failures = meta.failures;
    info.set_allocated(a.used);
    let (mut placed, mut wanted) = (0u64, 0u64);
    for (k, r) in View::range(st.requests(), a.requests).iter().enumerate() {
        placed += u64::from(r.placed);
        wanted += u64::from(r.count);
        info.requests.push(RequestInfo {
            resource: r.resources.into(),
            count: r.count,
            placed: r.placed,
            gang: r.flags & GANTRY_REQUEST_GANG != 0,
            priority: r.priority,
            labels: Default::default(),
            rack_affinity: if r.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0 {
                RackAffinity::Required
            } else if r.flags & GANTRY_REQUEST_SAME_RACK_PREFERRED != 0 {
                RackAffinity::Preferred
            } else {
                RackAffinity::None
            },
            command: core.template(a.id, k).map(|t| t.argv.clone()).unwrap_or_default(),
        });
    }
    info.set_progress(placed, wanted);
    for c in st.containers().iter().filter(|c| c.app == index && container_is_live(c.state)) {
        let Some(state) = ContainerState::from_abi(c.state) else { continue };
        if c.state == GANTRY_CONTAINER_RUNNING {
            info.running_containers += 1;
        }
        let node = st.nodes().get(c.node as usize).map(|n| st.str(n.name).to_owned()).unwrap_or_default();
        let gpus = View::range(st.gpus(), st.nodes()[c.node as usize].gpus)
            .iter()
            .filter(|g| st.container_index(gantry_engine::ContainerId(c.id)) == Some(g.container))
            .map(|g| g.index)
            .collect();
        info.containers.push(ContainerInfo {
            id: c.id,
            state,
            node_id: node,
            request: c.request - a.requests.start,
            resource: c.resources.into(),
            gpus,
            exit_code: None,
            started_time: c.start_ms,
            finished_time: 0,
            diagnostics: String::new(),
        });
    }
    Some(info)
}

fn node_info(core: &Core, n: &GantryNode) -> NodeInfo {
    let st = core.engine().state();
    let name = st.str(n.name).to_owned();
    let state = NodeState::from_abi(n.state).unwrap_or(NodeState::Unhealthy);
    let mut info = NodeInfo::new(name.clone(), st.str(n.rack), state, n.capacity, n.allocated);
    info.labels = View::range(st_labels(core), n.labels)
        .iter()
        .map(|l| (st.str(l.key).to_owned(), st.str(l.value).to_owned()))
        .collect();
    let idx = st.node_by_name(&name).map(|i| i.0);
    info.num_containers =
        st.containers().iter().filter(|c| Some(c.node) == idx && container_is_live(c.state)).count() as u32;
    info.gpus = View::range(st.gpus(), n.gpus)
        .iter()
        .map(|g| GpuInfo {
            index: g.index,
            model: st.str(g.model).to_owned(),
            memory_bytes: g.memory_bytes,
            container_id: st.containers().get(g.container as usize).map(|c| c.id),
        })
        .collect();
    if let Some(link) = core.agents().get(&name) {
        if let Some(status) = &link.last_status {
            if let Some(host) = &status.host {
                info.resource_utilization = Some(NodeUtilization {
                    node_physical_memory_mb: host.memory_used_bytes >> 20,
                    cpu_cores: host.cpu_cores,
                    node_cpu_usage: host.cpu_usage,
                    memory_used_bytes: host.memory_used_bytes,
                    memory_total_bytes: host.memory_total_bytes,
                });
            }
        }
    }
    info
}

/// The engine's label records (node labels live there).
fn st_labels(core: &Core) -> &[GantryLabel] {
    core.engine().state().labels()
}

impl Backend for DaemonBackend {
    async fn info(&self) -> ClusterInfo {
        let started = self.started_on_ms;
        self.core
            .read(move |c| {
                let mut info = ClusterInfo::new(started, started, "sqlite");
                info.plugins = c.engine().policy_status().iter().map(PluginInfo::from).collect();
                info
            })
            .await
            .unwrap_or_else(|_| ClusterInfo::new(started, started, "sqlite"))
    }

    async fn metrics(&self) -> ClusterMetrics {
        self.core
            .read(|c| {
                let st = c.engine().state();
                let mut m = ClusterMetrics::default();
                let allocated =
                    st.nodes().iter().fold(GantryResources::default(), |acc, n| acc.plus(&n.allocated));
                m.set_resources(st.cluster(), allocated);
                for n in st.nodes() {
                    if let Some(s) = NodeState::from_abi(n.state) {
                        m.count_node(s);
                    }
                }
                for a in st.apps() {
                    if let Some(s) = AppState::from_abi(a.state) {
                        m.count_app(s);
                    }
                }
                for h in c.engine().history() {
                    if let Some(s) = AppState::from_abi(h.state) {
                        m.count_app(s);
                    }
                }
                for ct in st.containers() {
                    if ct.state == GANTRY_CONTAINER_RUNNING {
                        m.containers_running += 1;
                    }
                    if container_is_live(ct.state) {
                        m.containers_allocated += 1;
                    }
                }
                m.containers_pending =
                    st.requests().iter().map(|r| u64::from(r.count.saturating_sub(r.placed))).sum();
                m
            })
            .await
            .unwrap_or_default()
    }

    async fn nodes(&self) -> Vec<NodeInfo> {
        self.core
            .read(|c| c.engine().state().nodes().iter().map(|n| node_info(c, n)).collect())
            .await
            .unwrap_or_default()
    }

    async fn apps(&self, _filter: AppFilter) -> Vec<AppInfo> {
        self.core
            .read(|c| {
                let mut out: Vec<AppInfo> =
                    c.past().iter().chain(c.engine().history()).map(|h| summary_info(c, h)).collect();
                out.extend((0..c.engine().state().apps().len() as u32).filter_map(|i| live_info(c, i)));
                out.sort_by_key(|a| a.id);
                out
            })
            .await
            .unwrap_or_default()
    }

    async fn app(&self, id: u64) -> Option<AppInfo> {
        self.core
            .read(move |c| match c.engine().state().app_index(AppId(id)) {
                Some(i) => live_info(c, i),
                None => c
                    .engine()
                    .history()
                    .chain(c.past().iter())
                    .find(|h| h.id.0 == id)
                    .map(|h| summary_info(c, h)),
            })
            .await
            .ok()
            .flatten()
    }

    async fn new_application(&self) -> Result<NewApplication, ApiError> {
        let (id, max) = self
            .core
            .read(|c| {
                let st = c.engine().state();
                let max = st
                    .nodes()
                    .iter()
                    .filter(|n| n.state == GANTRY_NODE_RUNNING)
                    .map(|n| n.capacity)
                    .max_by_key(|r| (r.cpu_millis, r.memory_bytes))
                    .unwrap_or_default();
                (c.reserve_app_id(), max)
            })
            .await
            .map_err(gone)?;
        Ok(NewApplication { application_id: id, maximum_resource_capability: max.into() })
    }

    async fn submit(&self, req: SubmitApp) -> Result<u64, ApiError> {
        let spec = req.to_app_spec("root.default", "gantry");
        let templates = req
            .containers
            .iter()
            .map(|c| LaunchTemplate {
                argv: c.command.clone(),
                env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            })
            .collect();
        let id = self
            .core
            .submit_with_id(spec, templates, req.application_id.map(AppId))
            .await
            .map_err(gone)?
            .map_err(|e| match e {
                super::core::SubmitError::Engine(e) => engine_error(e),
                super::core::SubmitError::Store(e) => {
                    ApiError::unavailable(format!("the submission could not be stored: {e}"))
                }
            })?;
        Ok(id.0)
    }

    async fn kill(&self, id: u64) -> Result<(), ApiError> {
        self.core.kill(AppId(id)).await.map_err(gone)?.map_err(engine_error)
    }

    async fn scheduler(&self) -> SchedulerInfo {
        self.core
            .read(|c| {
                let st = c.engine().state();
                SchedulerInfo::from_queues(
                    st.queues(),
                    |r| st.str(r).to_owned(),
                    st.cluster(),
                    |leaf| {
                        let mut q = QueueApps::default();
                        for a in st.apps().iter().filter(|a| a.queue == leaf) {
                            if a.state == GANTRY_APP_RUNNING {
                                q.active += 1;
                            } else if matches!(a.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED) {
                                q.pending += 1;
                            }
                        }
                        q
                    },
                )
            })
            .await
            .unwrap_or_else(|_| {
                SchedulerInfo::from_queues(
                    &[],
                    |_| String::new(),
                    GantryResources::default(),
                    |_| QueueApps::default(),
                )
            })
    }

    async fn logs(&self, container: u64, file: LogFile, tail: Option<u64>) -> Result<Vec<u8>, ApiError> {
        let Some(root) = &self.local_work_root else {
            return Err(ApiError::unavailable(
                "reading logs through remote agents is not implemented yet; read them on the node under \
                 <work_root>/containers/<id>/work/",
            ));
        };
        let path = root.join("containers").join(container.to_string()).join("work").join(file.as_str());
        let bytes = std::fs::read(&path)
            .map_err(|_| ApiError::not_found(format!("no {} for container {container}", file.as_str())))?;
        let start = tail.map_or(0, |t| bytes.len().saturating_sub(usize::try_from(t).unwrap_or(usize::MAX)));
        Ok(bytes[start..].to_vec())
    }
}
