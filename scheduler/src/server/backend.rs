//! The REST API's view of the running daemon: every call becomes a read or a request on the
//! core (see [`super::core`]), and submissions are acknowledged only once the store has
//! committed them.

use super::core::{
    CoreGone, CoreHandle, IdKind, LaunchTemplate, LogError, ReservationOp, ReservationOutcome, SubmitError,
};
use crate::api::reservations::{NewReservation, OptimizeInfo, ReservationInfo, format_reservation_id};
use crate::api::types::*;
use crate::api::{ApiError, AppFilter, Backend, LogFile};
use gantry_controller::{Controller, EndedApp, LaunchedContainer};
use gantry_engine::state::{AppSummary, ClusterState, container_is_live};
use gantry_engine::{AppId, EngineError};
use gantry_proto::v1;
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a log request waits for the agent's answer, a free read slot on its node
/// included. Past it the client gets 504: the node is slow, or its agent predates log reads
/// and never answers.
pub const LOG_TIMEOUT: Duration = Duration::from_secs(10);

/// The daemon as the REST API sees it.
#[derive(Debug, Clone)]
pub struct DaemonBackend {
    core: CoreHandle,
    started_on_ms: u64,
    /// How long a log request waits for its agent ([`LOG_TIMEOUT`] unless changed).
    log_timeout: Duration,
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
        EngineError::UnknownNode(name) => {
            ApiError::not_found(format!("node `{name}` is not known to the scheduler"))
        }
        EngineError::Conflict(m) => ApiError::conflict(m),
        // YARN answers a reservation call without a reservation system with a BadRequest.
        EngineError::NoReservationPlanner => {
            ApiError::bad_request(EngineError::NoReservationPlanner.to_string())
        }
        other => ApiError::unprocessable(other.to_string()),
    }
}

impl DaemonBackend {
    /// A backend over `core`.
    ///
    /// Logs are always read through the agent that ran the container, also when it runs on
    /// this machine (`gantry dev`). Reading its files directly would follow a symbolic link a
    /// container planted as its log (the container's user owns the directory) and would miss
    /// logs a launch redirected; the agent checks both.
    pub fn new(core: CoreHandle) -> Self {
        DaemonBackend { core, started_on_ms: now_ms(), log_timeout: LOG_TIMEOUT }
    }

    /// Waits `timeout` rather than [`LOG_TIMEOUT`] for an agent's log answer.
    pub fn with_log_timeout(mut self, timeout: Duration) -> Self {
        self.log_timeout = timeout;
        self
    }
}

/// The REST answer for a log that could not be had.
fn log_error(e: LogError) -> ApiError {
    match e {
        LogError::UnknownContainer(_) | LogError::Agent(_) => ApiError::not_found(e.to_string()),
        LogError::NodeNotConnected { .. } | LogError::Disconnected { .. } => {
            ApiError::unavailable(e.to_string())
        }
    }
}

/// What the API shows of an ended application: the engine's summary (state, diagnostics), the
/// core's record of it (submission, times, counters; `None` when it was forgotten) and the
/// containers it ran — the same before and after a restart, and for apps read from the store.
fn ended_info(s: &AppSummary, ended: Option<&EndedApp>, containers: &[LaunchedContainer]) -> AppInfo {
    let state = AppState::from_abi(s.state).unwrap_or(AppState::Failed);
    let mut a = AppInfo::new(s.id.0, s.name.clone(), s.user.clone(), s.queue.clone(), state);
    a.diagnostics.clone_from(&s.diagnostics);
    if let Some(e) = ended {
        a.priority = e.priority;
        a.started_time = e.submit_ms;
        a.finished_time = e.finished_ms;
        a.elapsed_time = e.finished_ms.saturating_sub(e.submit_ms);
        a.max_app_attempts = e.max_attempts;
        a.failures = e.failures;
        a.requests = e
            .requests
            .iter()
            .enumerate()
            .map(|(k, r)| RequestInfo {
                resource: r.resources.into(),
                count: r.count,
                placed: 0,
                completed: containers
                    .iter()
                    .filter(|c| c.request as usize == k && c.state == GANTRY_CONTAINER_COMPLETED)
                    .count() as u32,
                gang: r.gang,
                priority: r.priority,
                labels: r.selector.iter().cloned().collect(),
                preferred_labels: r.preferred.iter().cloned().collect(),
                rack_affinity: r.rack_affinity.into(),
                command: e.commands.get(k).cloned().unwrap_or_default(),
            })
            .collect();
    }
    a.containers.extend(containers.iter().filter_map(remembered_container));
    a
}

/// What the API shows of a container the core remembers: an ended one carries how it ended.
fn remembered_container(c: &LaunchedContainer) -> Option<ContainerInfo> {
    Some(ContainerInfo {
        id: c.id,
        state: ContainerState::from_abi(c.state)?,
        node_id: c.node.clone(),
        request: c.request,
        resource: c.resources.into(),
        gpus: c.gpus.clone(),
        exit_code: c.exit_code,
        started_time: c.started_ms.unwrap_or_default(),
        finished_time: c.finished_ms.unwrap_or_default(),
        diagnostics: c.diagnostics.clone(),
        preemption_candidate_since: None,
    })
}

fn summary_info(core: &Controller, s: &AppSummary) -> AppInfo {
    ended_info(s, core.ended_app(s.id.0), core.launched(s.id.0))
}

/// Everything the API shows of a live application.
fn live_info(core: &Controller, index: u32) -> Option<AppInfo> {
    let st = core.engine().state();
    let a = *st.apps().get(index as usize)?;
    let meta = st.app_meta(index)?;
    let state = AppState::from_abi(a.state).unwrap_or(AppState::Failed);
    let mut info =
        AppInfo::new(a.id, meta.name.clone(), st.str(a.user), st.queue_path(a.queue).to_owned(), state);
    // Why it waits, if it does, before what happened to it last.
    info.diagnostics = core.engine().app_diagnostics(AppId(a.id)).unwrap_or_default();
    info.priority = a.priority;
    info.started_time = a.submit_ms;
    info.elapsed_time = now_ms().saturating_sub(a.submit_ms);
    info.max_app_attempts = meta.max_attempts;
    info.failures = meta.failures;
    if let Some(e) = core.ended_app(a.id) {
        // Ended, and not compacted away yet (until the next cycle).
        info.finished_time = e.finished_ms;
        info.elapsed_time = e.finished_ms.saturating_sub(a.submit_ms);
    }
    info.set_allocated(a.used);
    let mut wanted = 0u64;
    for (k, r) in View::range(st.requests(), a.requests).iter().enumerate() {
        wanted += u64::from(r.count);
        info.requests.push(RequestInfo {
            resource: r.resources.into(),
            count: r.count,
            placed: r.placed,
            completed: meta.completed.get(k).copied().unwrap_or(0),
            gang: r.flags & GANTRY_REQUEST_GANG != 0,
            priority: r.priority,
            labels: label_map(st, r.selector),
            preferred_labels: label_map(st, r.preferred),
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
    info.set_progress(meta.completed_total(), wanted);
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
            preemption_candidate_since: st
                .container_index(gantry_engine::ContainerId(c.id))
                .and_then(|i| st.container_meta(i))
                .and_then(|m| m.candidate_since_ms),
        });
    }
    // Its ended containers too (a failed attempt, a lost one), with how they ended.
    let ended = core.launched(a.id).iter().filter(|c| !container_is_live(c.state));
    info.containers.extend(ended.filter_map(remembered_container));
    info.containers.sort_by_key(|c| c.id);
    Some(info)
}

/// A node's labels or a request's selector, from the engine's label records, as `key: value`.
fn label_map(st: &ClusterState, range: GantryRange) -> BTreeMap<String, String> {
    View::range(st.labels(), range)
        .iter()
        .map(|l| (st.str(l.key).to_owned(), st.str(l.value).to_owned()))
        .collect()
}

fn node_info(core: &Controller, n: &GantryNode) -> NodeInfo {
    let st = core.engine().state();
    let name = st.str(n.name).to_owned();
    let state = NodeState::from_abi(n.state).unwrap_or(NodeState::Unhealthy);
    let mut info = NodeInfo::new(name.clone(), st.str(n.rack), state, n.capacity, n.allocated);
    info.labels = label_map(st, n.labels);
    let meta = st.node_by_name(&name).and_then(|i| st.node_meta(i.0));
    info.num_containers = meta.map_or(0, |m| m.live_containers);
    info.idle_since = meta.and_then(|m| m.idle_since_ms).filter(|_| n.state != GANTRY_NODE_LOST);
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
        info.conditions = link
            .conditions
            .iter()
            .map(|c| NodeConditionInfo {
                kind: c.r#type.clone(),
                reason: c.reason.clone(),
                since: c.since_ms,
            })
            .collect();
        // YARN's health report: why the node takes no work, in words.
        info.health_report = info
            .conditions
            .iter()
            .map(|c| format!("{}: {}", c.kind, c.reason))
            .collect::<Vec<_>>()
            .join("; ");
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

/// The answer to a change the core refused (the engine's reason) or could not store (503:
/// nothing changed, try again); `what` names the change for the latter.
fn submit_error(e: SubmitError, what: &str) -> ApiError {
    match e {
        SubmitError::Engine(e) => engine_error(e),
        SubmitError::Store(e) => ApiError::unavailable(format!("{what} could not be stored: {e}")),
    }
}

impl DaemonBackend {
    /// Runs a reservation change and answers the reservation's record.
    async fn reservation_change(&self, op: ReservationOp) -> Result<ReservationOutcome, ApiError> {
        self.core.reservation(op).await.map_err(gone)?.map_err(|e| submit_error(e, "the reservation"))
    }

    async fn reservation_info(&self, outcome: ReservationOutcome) -> Result<ReservationInfo, ApiError> {
        let id = match outcome {
            ReservationOutcome::Rejected { id, reason } => {
                return Err(ApiError::conflict(format!(
                    "reservation {} rejected: {reason}",
                    format_reservation_id(id)
                )));
            }
            ReservationOutcome::Accepted { id, .. } => id,
        };
        self.core
            .read(move |c| {
                let book = c.engine().reservation_book()?;
                let r = book.get(id)?;
                Some(ReservationInfo::accepted(r, c.engine().state().queue_path(r.queue)))
            })
            .await
            .map_err(gone)?
            .ok_or_else(|| ApiError::conflict(format!("reservation {} ended meanwhile", id.0)))
    }
}

impl Backend for DaemonBackend {
    async fn new_reservation(&self, caller: Option<String>) -> Result<NewReservation, ApiError> {
        if !self.core.read(|c| c.engine().plans_reservations()).await.map_err(gone)? {
            return Err(engine_error(EngineError::NoReservationPlanner));
        }
        let id = self
            .core
            .new_id(IdKind::Reservation, caller)
            .await
            .map_err(gone)?
            .map_err(|e| submit_error(e, "the new reservation id"))?;
        Ok(NewReservation { reservation_id: format_reservation_id(gantry_engine::ReservationId(id)) })
    }

    async fn submit_reservation(
        &self,
        id: Option<gantry_engine::ReservationId>,
        request: gantry_engine::ReservationRequest,
        caller: Option<String>,
    ) -> Result<ReservationInfo, ApiError> {
        let outcome = self.reservation_change(ReservationOp::Submit { id, request, caller }).await?;
        self.reservation_info(outcome).await
    }

    async fn update_reservation(
        &self,
        id: gantry_engine::ReservationId,
        request: gantry_engine::ReservationRequest,
    ) -> Result<ReservationInfo, ApiError> {
        let outcome = self.reservation_change(ReservationOp::Update { id, request }).await?;
        self.reservation_info(outcome).await
    }

    async fn delete_reservation(&self, id: gantry_engine::ReservationId) -> Result<(), ApiError> {
        self.reservation_change(ReservationOp::Delete { id }).await.map(|_| ())
    }

    async fn reservations(&self) -> Result<Vec<ReservationInfo>, ApiError> {
        self.core
            .read(|c| {
                let book = c.engine().reservation_book()?;
                let st = c.engine().state();
                Some(
                    book.reservations()
                        .map(|r| ReservationInfo::accepted(r, st.queue_path(r.queue)))
                        .collect(),
                )
            })
            .await
            .map_err(gone)?
            .ok_or_else(|| ApiError::bad_request(EngineError::NoReservationPlanner.to_string()))
    }

    async fn optimize_reservations(&self) -> Result<OptimizeInfo, ApiError> {
        let before = self
            .core
            .read(|c| {
                let e = c.engine();
                let now = now_ms();
                let considered =
                    e.reservation_book().map_or(0, |b| b.reservations().filter(|r| !r.started(now)).count());
                (considered, e.stats().reservations.builtin)
            })
            .await
            .map_err(gone)?;
        let started = std::time::Instant::now();
        let done = self.reservation_change(ReservationOp::Optimize).await?;
        let solve_ms = started.elapsed().as_millis() as u64;
        let builtin = self.core.read(|c| c.engine().stats().reservations.builtin).await.map_err(gone)?;
        let moved = match done {
            ReservationOutcome::Accepted { moved, .. } => moved,
            ReservationOutcome::Rejected { .. } => 0,
        };
        let kept_because = if builtin > before.1 {
            "the planner failed or its answer was refused (see the scheduler's log and gantry_scheduler_rejected_decisions_total)".into()
        } else if moved == 0 {
            "the planner moved nothing".into()
        } else {
            String::new()
        };
        Ok(OptimizeInfo { considered: before.0, moved, solve_ms, kept_because })
    }

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

    async fn set_node_drain(&self, node: String, drain: bool) -> Result<NodeState, ApiError> {
        let state = self.core.set_node_drain(node, drain).await.map_err(gone)?.map_err(|e| match e {
            super::core::SubmitError::Engine(e) => engine_error(e),
            super::core::SubmitError::Store(e) => {
                ApiError::unavailable(format!("the drain could not be stored, nothing changed: {e}"))
            }
        })?;
        Ok(NodeState::from_abi(state).unwrap_or(NodeState::Unhealthy))
    }

    async fn removable_nodes(&self, min_idle_ms: u64) -> Vec<RemovableNode> {
        self.core
            .read(move |c| {
                let st = c.engine().state();
                let now = now_ms();
                c.engine()
                    .idle_nodes()
                    .into_iter()
                    .filter(|idle| now.saturating_sub(idle.since_ms) >= min_idle_ms)
                    .filter_map(|idle| {
                        let n = st.nodes().get(idle.index as usize)?;
                        Some(RemovableNode {
                            id: st.str(n.name).to_owned(),
                            rack: st.str(n.rack).to_owned(),
                            state: NodeState::from_abi(n.state)?,
                            idle_since: idle.since_ms,
                            idle_seconds: now.saturating_sub(idle.since_ms) as f64 / 1000.0,
                            total_resource: ResourceInfo::from(n.capacity),
                        })
                    })
                    .collect()
            })
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

    async fn container_owner(&self, container: u64) -> Option<(String, String)> {
        let app = self.core.read(move |c| c.app_of_container(container)).await.ok()??;
        self.app(app).await.map(|a| (a.user, a.queue))
    }

    async fn app(&self, id: u64) -> Option<AppInfo> {
        let store = self.core.store();
        let (info, store) = self
            .core
            .read(move |c| {
                let info = match c.engine().state().app_index(AppId(id)) {
                    Some(i) => live_info(c, i),
                    None => c
                        .engine()
                        .history()
                        .chain(c.past().iter())
                        .find(|h| h.id.0 == id)
                        .map(|h| summary_info(c, h)),
                };
                let store =
                    if info.is_none() { store.map(|s| (s, c.engine().default_max_attempts())) } else { None };
                (info, store)
            })
            .await
            .ok()?;
        if info.is_some() {
            return info;
        }
        // Ended longer ago than memory keeps (max_completed_apps): the store still has it, with
        // its containers.
        let (store, default_attempts) = store?;
        let (record, containers) =
            tokio::task::spawn_blocking(move || store.app_record(AppId(id)).ok().flatten()).await.ok()??;
        let summary = AppSummary {
            id: record.id,
            name: record.spec.name.clone(),
            queue: record.spec.queue.clone(),
            user: record.spec.user.clone(),
            state: record.state,
            diagnostics: record.diagnostics.clone(),
        };
        let ended = EndedApp::from_record(&record, &containers.iter().collect::<Vec<_>>(), default_attempts);
        let launched: Vec<LaunchedContainer> = containers.iter().map(LaunchedContainer::from).collect();
        Some(ended_info(&summary, Some(&ended), &launched))
    }

    async fn new_application(&self, caller: Option<String>) -> Result<NewApplication, ApiError> {
        let max = self
            .core
            .read(|c| {
                // What submissions are checked against (Engine::check_fits).
                c.engine().state().largest_node().unwrap_or_default()
            })
            .await
            .map_err(gone)?;
        let id = self
            .core
            .new_id(IdKind::App, caller)
            .await
            .map_err(gone)?
            .map_err(|e| submit_error(e, "the new application id"))?;
        Ok(NewApplication { application_id: id, maximum_resource_capability: max.into() })
    }

    async fn submit(
        &self,
        req: SubmitApp,
        account: Option<String>,
        caller: Option<String>,
    ) -> Result<u64, ApiError> {
        let mut spec = req.to_app_spec(crate::api::DEFAULT_QUEUE, "gantry");
        if let Some(text) = &req.reservation_id {
            let id = crate::api::reservations::parse_reservation_id(text).map_err(ApiError::unprocessable)?;
            let (plan, queue) = self
                .core
                .read(move |c| {
                    let r = c.engine().reservation_book()?.get(id)?;
                    Some((r.request.queue.clone(), c.engine().state().queue_path(r.queue).to_owned()))
                })
                .await
                .map_err(gone)?
                .ok_or_else(|| ApiError::unprocessable(format!("reservation {text} is not in the plan")))?;
            if req.queue.as_ref().is_some_and(|q| *q != plan && *q != queue) {
                return Err(ApiError::unprocessable(format!(
                    "reservation {text} is in queue {plan}, not {}",
                    req.queue.as_deref().unwrap_or_default()
                )));
            }
            spec.queue = queue;
        }
        let templates = req
            .containers
            .iter()
            .map(|c| LaunchTemplate {
                argv: c.command.clone(),
                env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                account: account.clone(),
                submitter: spec.user.clone(),
                max_pids: c.max_pids,
                disk_bytes: c.disk_bytes,
            })
            .collect();
        let id = self
            .core
            .submit_with_id(spec, templates, req.application_id.map(AppId), caller)
            .await
            .map_err(gone)?
            .map_err(|e| submit_error(e, "the submission"))?;
        Ok(id.0)
    }

    async fn kill(&self, id: u64) -> Result<(), ApiError> {
        self.core.kill(AppId(id)).await.map_err(gone)?.map_err(|e| submit_error(e, "the kill"))
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

    /// Asks the agent of the container's node, as YARN's NodeManager serves container logs: the
    /// last `tail` bytes, or the whole file; the agent caps either at its last 4 MiB.
    async fn logs(&self, container: u64, file: LogFile, tail: Option<u64>) -> Result<Vec<u8>, ApiError> {
        let node = self
            .core
            .read(move |c| c.container_node(container).map(str::to_owned))
            .await
            .map_err(gone)?
            .ok_or_else(|| log_error(LogError::UnknownContainer(container)))?;
        let stream = match file {
            LogFile::Stdout => v1::LogStream::Stdout,
            LogFile::Stderr => v1::LogStream::Stderr,
        };
        // The controller queues it behind the node's other reads; dropping it at the timeout
        // frees its turn.
        let fetch = self.core.read_log(container, stream, tail);
        match tokio::time::timeout(self.log_timeout, fetch).await {
            Ok(Ok(Ok(chunk))) => Ok(chunk.data),
            Ok(Ok(Err(e))) => Err(log_error(e)),
            Ok(Err(e)) => Err(gone(e)),
            Err(_) => Err(ApiError::gateway_timeout(format!(
                "node {node} did not send the {} of container {container} within {} s (it may be \
                 overloaded, or run an agent older than this scheduler, which cannot serve logs)",
                file.as_str(),
                self.log_timeout.as_secs_f64()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The log path through the real core, with the test as the agent at the other end of the
    //! node's stream: requests go down as `ReadLog`, answers come back as `LogChunk`, and every
    //! other outcome maps to its status.

    use super::*;
    use crate::server::core::{self, Core, Request};
    use gantry_engine::{Engine, EngineConfig, Profile, RequestSpec, Resources};
    use gantry_proto::v1::agent_message::Msg as Up;
    use gantry_proto::v1::scheduler_message::Msg as Down;
    use tokio::sync::{mpsc, oneshot};

    type Downstream = mpsc::Receiver<Result<v1::SchedulerMessage, tonic::Status>>;

    /// Guard for every wait (never an assertion about speed).
    const GUARD: Duration = Duration::from_secs(30);

    async fn next_down(rx: &mut Downstream) -> Down {
        loop {
            let m = tokio::time::timeout(GUARD, rx.recv()).await.expect("guard").expect("stream");
            match m.expect("not an error").msg.expect("a message") {
                Down::Registered(_) | Down::StatusAck(_) | Down::Ping(_) => {}
                other => return other,
            }
        }
    }

    /// The next `ReadLog` (launches and kills of the reconciling core are skipped).
    async fn next_read(rx: &mut Downstream) -> v1::ReadLog {
        loop {
            if let Down::ReadLog(r) = next_down(rx).await {
                return r;
            }
        }
    }

    async fn connect(core: &CoreHandle, stream: u64) -> Downstream {
        let (tx, rx) = mpsc::channel(64);
        let (reply, accepted) = oneshot::channel();
        let register = v1::Register {
            node_name: "n1".into(),
            allocatable: Some(v1::Resources { cpu_millis: 4000, memory_bytes: 8 << 30, gpus: 0 }),
            ..Default::default()
        };
        core.send(Request::AgentConnected { register, tx, stream, reply }).await.expect("core");
        accepted.await.expect("core").expect("registered");
        rx
    }

    async fn answer(core: &CoreHandle, stream: u64, chunk: v1::LogChunk) {
        core.send(Request::AgentMessage { node: "n1".into(), stream, msg: Up::LogChunk(chunk) })
            .await
            .expect("core");
    }

    /// A core with node `n1` on stream 1 running one container; the container's id.
    async fn cluster() -> (DaemonBackend, CoreHandle, Downstream, u64) {
        let engine = Engine::new(EngineConfig::default(), Vec::new(), Profile::default()).expect("engine");
        let (handle, _task) = core::spawn(
            Core::new(engine),
            Duration::from_millis(20),
            Duration::from_secs(3600),
            std::future::pending(),
        );
        let mut rx = connect(&handle, 1).await;
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
        handle.submit(spec, vec![template]).await.expect("core").expect("accepted");
        let container = match next_down(&mut rx).await {
            Down::Launch(l) => l.container_id,
            other => panic!("expected Launch, got {other:?}"),
        };
        let backend = DaemonBackend::new(handle.clone()).with_log_timeout(Duration::from_millis(300));
        (backend, handle, rx, container)
    }

    fn chunk(request_id: u64, data: &[u8], error: &str) -> v1::LogChunk {
        v1::LogChunk { request_id, data: data.to_vec(), file_size_bytes: 100, error: error.into() }
    }

    #[tokio::test]
    async fn a_log_is_asked_of_the_node_and_its_answer_relayed() {
        let (backend, core, mut rx, id) = cluster().await;
        let b = backend.clone();
        let call = tokio::spawn(async move { b.logs(id, LogFile::Stderr, Some(5)).await });
        let read = next_read(&mut rx).await;
        assert_eq!(
            (read.container_id, read.stream, read.tail_bytes),
            (id, v1::LogStream::Stderr as i32, Some(5))
        );
        // An answer to another read, or from another stream of the node, is not this one's.
        answer(&core, 1, chunk(read.request_id + 1000, b"wrong", "")).await;
        answer(&core, 7, chunk(read.request_id, b"stale", "")).await;
        answer(&core, 1, chunk(read.request_id, b"hello", "")).await;
        assert_eq!(call.await.expect("task"), Ok(b"hello".to_vec()));

        // The agent's refusal is a 404 with its words.
        let b = backend.clone();
        let call = tokio::spawn(async move { b.logs(id, LogFile::Stdout, None).await });
        let read = next_read(&mut rx).await;
        assert_eq!(read.tail_bytes, None, "no tail: the whole file");
        answer(&core, 1, chunk(read.request_id, b"", &format!("no stdout for container {id}"))).await;
        let e = call.await.expect("task").expect_err("refused");
        assert_eq!((e.status.as_u16(), e.message), (404, format!("no stdout for container {id}")));

        // An unknown container never reaches an agent.
        let e = backend.logs(999_999, LogFile::Stdout, None).await.expect_err("unknown");
        assert_eq!((e.status.as_u16(), e.message.as_str()), (404, "container 999999 not found"));
    }

    /// A launch its agent refused ends as a failed attempt that says why, in the application's
    /// diagnostics and in its container's (before, a bare "exit 127" with empty logs).
    #[tokio::test]
    async fn a_launch_its_agent_refused_says_why() {
        let (backend, core, _rx, id) = cluster().await;
        let failed = v1::LaunchFailed {
            container_id: id,
            message: "unknown user \"bob\"".into(),
            ..Default::default()
        };
        core.send(Request::AgentMessage { node: "n1".into(), stream: 1, msg: Up::LaunchFailed(failed) })
            .await
            .expect("core");
        let app = backend.apps(AppFilter::default()).await.pop().expect("the app");
        let said = format!("container {id} could not be launched on node n1: unknown user \"bob\"");
        assert!(app.diagnostics.contains(&said), "{}", app.diagnostics);
        let c = app.containers.iter().find(|c| c.id == id).expect("the failed container is listed");
        assert_eq!((c.state, c.diagnostics.as_str()), (ContainerState::Failed, said.as_str()));
        assert_eq!(c.exit_code, None, "it never ran: no exit status (it read 127, \"not found\")");
    }

    #[tokio::test]
    async fn silence_is_a_504_and_the_abandoned_read_is_dropped() {
        let (backend, core, mut rx, id) = cluster().await;
        let b = backend.clone();
        let call = tokio::spawn(async move { b.logs(id, LogFile::Stdout, None).await });
        let read = next_read(&mut rx).await;
        let e = call.await.expect("task").expect_err("no answer");
        assert_eq!(e.status.as_u16(), 504);
        assert_eq!(e.exception(), "GatewayTimeoutException");
        assert!(
            e.message.contains("node n1") && e.message.contains(&format!("container {id}")),
            "{}",
            e.message
        );
        let start = std::time::Instant::now();
        while core.read(|c| c.log_reads_in_flight()).await.expect("core") != 0 {
            assert!(start.elapsed() < GUARD, "guard: the abandoned read was never dropped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A late answer changes nothing.
        answer(&core, 1, chunk(read.request_id, b"late", "")).await;
        assert_eq!(core.read(|c| c.log_reads_in_flight()).await.expect("core"), 0);
    }

    #[tokio::test]
    async fn a_node_serves_two_reads_at_once_and_a_gone_stream_fails_its_reads_with_503() {
        let (backend, core, mut rx, id) = cluster().await;
        let backend = backend.with_log_timeout(GUARD);
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let b = backend.clone();
                tokio::spawn(async move { b.logs(id, LogFile::Stdout, None).await })
            })
            .collect();
        let first = next_read(&mut rx).await;
        let second = next_read(&mut rx).await;
        // The third waits for a slot (only absence can be checked, not how long it lasts).
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(rx.try_recv().is_err(), "a third read went out while two were in flight");
        answer(&core, 1, chunk(first.request_id, b"one", "")).await;
        let third = next_read(&mut rx).await;
        assert_ne!(third.request_id, second.request_id);

        // The stream ends: both reads still in flight fail at once, as unavailable.
        core.send(Request::AgentDisconnected { node: "n1".into(), stream: 1 }).await.expect("core");
        let mut outcomes = Vec::new();
        for call in calls {
            outcomes.push(tokio::time::timeout(GUARD, call).await.expect("guard").expect("task"));
        }
        assert_eq!(outcomes.iter().filter(|o| o.as_deref() == Ok(&b"one"[..])).count(), 1);
        for e in outcomes.into_iter().filter_map(Result::err) {
            assert_eq!(
                (e.status.as_u16(), e.message.as_str()),
                (503, "node n1 disconnected before it sent container 1's log; try again")
            );
        }
        // With no stream, a read is refused at once, naming the node.
        let e = backend.logs(id, LogFile::Stdout, None).await.expect_err("not connected");
        assert_eq!(e.status.as_u16(), 503);
        assert!(e.message.contains("node n1") && e.message.contains("not connected"), "{}", e.message);

        // Back on a new stream: reads work again, and one sent down the old stream before a
        // reconnect fails rather than waiting for an answer that cannot come.
        let mut rx = connect(&core, 2).await;
        let b = backend.clone();
        let call = tokio::spawn(async move { b.logs(id, LogFile::Stdout, None).await });
        let read = next_read(&mut rx).await;
        let _rx3 = connect(&core, 3).await;
        let e = call.await.expect("task").expect_err("its stream was replaced");
        assert_eq!(e.status.as_u16(), 503);
        answer(&core, 2, chunk(read.request_id, b"too late", "")).await;
        assert_eq!(core.read(|c| c.log_reads_in_flight()).await.expect("core"), 0);
    }
}
