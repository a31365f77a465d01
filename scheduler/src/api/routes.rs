//! The axum router of the REST API: paths, status codes, error bodies, size limits.
//!
//! | method | path (under `/ws/v1/cluster`) | answer |
//! |---|---|---|
//! | GET | `` and `/info` | `{"clusterInfo"}` |
//! | GET | `/metrics` | `{"clusterMetrics"}` |
//! | GET | `/nodes?states=`, `/nodes/{id}` | `{"nodes": {"node": […]}}`, `{"node"}` |
//! | GET, PUT | `/nodes/{id}/state` | `{"state"}`; PUT `{"state": "DECOMMISSIONING"}` drains, `"RUNNING"` undrains (200 once stored) |
//! | GET | `/removable-nodes?idle=10m` | `{"removableNodes": {"node": […]}}`: empty, not lost, idle at least that long |
//! | GET | `/apps?states=&queue=&user=&limit=` | `{"apps": {"app": […]}}` |
//! | POST | `/apps/new-application` | `{"application-id", "maximum-resource-capability"}`: the largest node that is not lost, per dimension |
//! | POST | `/apps` | 202, `Location`, `{"application-id"}`; 422 for a container larger than that maximum (once a node is registered and the daemon has run a node timeout) |
//! | GET | `/apps/{id}` | `{"app"}`; `diagnostics` says why it waits while it does, then what happened to it last; ended containers carry how they ended |
//! | GET, PUT | `/apps/{id}/state` | `{"state"}`; PUT `{"state": "KILLED"}` kills (202) |
//! | GET | `/scheduler` | `{"scheduler": {"schedulerInfo"}}` |
//! | GET | `/containers/{id}/logs/{stdout,stderr}?tail=BYTES` | the log, `text/plain` |
//! | POST | `/reservation/new-reservation` | `{"reservation-id"}` |
//! | POST | `/reservation/submit`, `/reservation/update` | 200 `ReservationInfo` with `resource-allocations` once stored; 409 rejected (no room, nothing changed) |
//! | POST | `/reservation/delete` | 200 `{}` once stored |
//! | GET | `/reservation/list?queue=&reservation-id=&start-time=&end-time=&include-resource-allocations=` | `{"reservations": […]}` |
//! | POST | `/reservation/optimize` | `OptimizeInfo`: the planner re-organises the plan (its OPTIMIZE call) |
//!
//! Every error, including axum's own rejections, unknown paths (404) and wrong methods (405),
//! is answered with a JSON `RemoteException` body ([`ApiError`]), so clients need one error
//! path. Status codes: 400 unparseable request (bad JSON, id or query), 404 unknown resource,
//! 405 wrong method, 409 conflicting state, 413 body over [`MAX_BODY_BYTES`], 415 body not
//! JSON, 422 well-formed but refused content (unknown field, bad size, empty command, a container
//! larger than every node), 503 the
//! backend cannot do it now (e.g. cannot persist).

use crate::api::types::*;
use crate::api::{
    ApiError, AppFilter, Backend, DEFAULT_QUEUE, LogFile, MAX_BODY_BYTES, MAX_LOG_TAIL_BYTES, NodeFilter,
    PREFIX,
};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::header::{CONTENT_TYPE, LOCATION, X_CONTENT_TYPE_OPTIONS};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The REST API over `backend`. Other routes (the daemon's `/metrics`) can be added to the
/// returned router with `.route(…)`; it already has its fallbacks, so do not `merge` another
/// router that has one.
pub fn router<B: Backend>(backend: B) -> Router {
    Router::new()
        .route(PREFIX, get(info::<B>))
        .route("/ws/v1/cluster/info", get(info::<B>))
        .route("/ws/v1/cluster/metrics", get(metrics::<B>))
        .route("/ws/v1/cluster/nodes", get(nodes::<B>))
        .route("/ws/v1/cluster/nodes/{id}", get(node::<B>))
        .route("/ws/v1/cluster/nodes/{id}/state", get(node_state::<B>).put(set_node_state::<B>))
        .route("/ws/v1/cluster/removable-nodes", get(removable_nodes::<B>))
        .route("/ws/v1/cluster/apps", get(apps::<B>).post(submit::<B>))
        .route("/ws/v1/cluster/apps/new-application", post(new_application::<B>))
        .route("/ws/v1/cluster/apps/{id}", get(app::<B>))
        .route("/ws/v1/cluster/apps/{id}/state", get(app_state::<B>).put(set_app_state::<B>))
        .route("/ws/v1/cluster/scheduler", get(scheduler::<B>))
        .route("/ws/v1/cluster/containers/{id}/logs/{file}", get(logs::<B>))
        .route("/ws/v1/cluster/reservation/new-reservation", post(new_reservation::<B>))
        .route("/ws/v1/cluster/reservation/submit", post(submit_reservation::<B>))
        .route("/ws/v1/cluster/reservation/update", post(update_reservation::<B>))
        .route("/ws/v1/cluster/reservation/delete", post(delete_reservation::<B>))
        .route("/ws/v1/cluster/reservation/list", get(list_reservations::<B>))
        .route("/ws/v1/cluster/reservation/optimize", post(optimize_reservations::<B>))
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(backend)
}

// ----- extractors whose rejections are API errors ---------------------------------------------

/// A JSON body, or the API error that says what is wrong with it. axum's own `Json` rejection
/// is plain text; this one keeps every error in the `RemoteException` shape.
struct ApiJson<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(json_rejection(r)),
        }
    }
}

/// Strips axum's generic lead-in from a rejection's text, keeping serde's precise part (which
/// names the field, the line and the column).
fn detail(text: String, lead: &str) -> String {
    text.strip_prefix(lead).map(str::to_owned).unwrap_or(text)
}

fn json_rejection(r: JsonRejection) -> ApiError {
    match r {
        JsonRejection::JsonDataError(e) => ApiError::unprocessable(format!(
            "invalid request body: {}",
            detail(e.body_text(), "Failed to deserialize the JSON body into the target type: ")
        )),
        JsonRejection::JsonSyntaxError(e) => ApiError::bad_request(format!(
            "malformed JSON: {}",
            detail(e.body_text(), "Failed to parse the request body as JSON: ")
        )),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be JSON, sent with `Content-Type: application/json`",
        ),
        JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than the {MAX_BODY_BYTES}-byte limit"),
        ),
        other => ApiError::new(other.status(), other.body_text()),
    }
}

/// A query string, or a 400 that says which parameter is wrong.
struct ApiQuery<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => Err(ApiError::bad_request(format!(
                "invalid query string: {}",
                detail(e.body_text(), "Failed to deserialize query string: ")
            ))),
            Err(other) => Err(ApiError::new(other.status(), other.body_text())),
        }
    }
}

/// Path parameters, or a 400 (a segment that is not valid UTF-8 once percent-decoded).
struct ApiPath<T>(T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(ApiError::bad_request(format!("invalid path: {}", e.body_text()))),
        }
    }
}

fn parse_id(what: &str, s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>().map_err(|_| ApiError::bad_request(format!("{what} id `{s}` is not a number")))
}

// ----- handlers --------------------------------------------------------------------------------

async fn info<B: Backend>(State(b): State<B>) -> Json<ClusterInfoResponse> {
    Json(ClusterInfoResponse { cluster_info: b.info().await })
}

async fn metrics<B: Backend>(State(b): State<B>) -> Json<ClusterMetricsResponse> {
    Json(ClusterMetricsResponse { cluster_metrics: b.metrics().await })
}

/// `GET /nodes` parameters: YARN's `states`, a comma-separated list of node states (`state` is
/// YARN's older, single-valued spelling).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesQuery {
    states: Option<String>,
    state: Option<String>,
}

impl NodesQuery {
    /// Turns the parameters into a filter: 400 for a name that is no node state, as for apps.
    fn to_filter(&self) -> Result<NodeFilter, ApiError> {
        let mut filter = NodeFilter::default();
        for name in state_names([&self.states, &self.state]) {
            let wanted = filter.states.get_or_insert_with(Vec::new);
            if let Some(state) =
                NodeState::from_filter_name(name).map_err(|e| ApiError::bad_request(e.to_string()))?
            {
                if !wanted.contains(&state) {
                    wanted.push(state);
                }
            }
        }
        Ok(filter)
    }
}

async fn nodes<B: Backend>(
    State(b): State<B>,
    ApiQuery(q): ApiQuery<NodesQuery>,
) -> Result<Json<NodesResponse>, ApiError> {
    let filter = q.to_filter()?;
    Ok(Json(NodesResponse { nodes: NodeList { node: filter.apply(b.nodes().await) } }))
}

/// The names in YARN's comma-separated `states` parameters (`states=RUNNING,lost`), blanks and
/// empty items dropped: empty values filter nothing, as in YARN.
fn state_names<'a>(lists: impl IntoIterator<Item = &'a Option<String>>) -> impl Iterator<Item = &'a str> {
    lists.into_iter().flatten().flat_map(|list| list.split(',')).map(str::trim).filter(|s| !s.is_empty())
}

async fn node<B: Backend>(
    State(b): State<B>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<NodeResponse>, ApiError> {
    match b.nodes().await.into_iter().find(|n| n.id == id) {
        Some(node) => Ok(Json(NodeResponse { node })),
        None => Err(ApiError::not_found(format!("node `{id}` is not known to the scheduler"))),
    }
}

async fn node_state<B: Backend>(
    State(b): State<B>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<NodeStateInfo>, ApiError> {
    let Json(NodeResponse { node }) = node(State(b), ApiPath(id)).await?;
    Ok(Json(NodeStateInfo { state: node.state }))
}

/// Drains or undrains a node, as YARN's graceful decommissioning: 200 with the node's state once
/// the change is stored, 404 for an unknown node, 400 for a state that cannot be asked for.
async fn set_node_state<B: Backend>(
    State(b): State<B>,
    ApiPath(id): ApiPath<String>,
    access: MaybeAccess,
    ApiJson(body): ApiJson<NodeStateRequest>,
) -> Result<Json<NodeStateInfo>, ApiError> {
    let drain = body.drains().map_err(ApiError::bad_request)?;
    cluster_admin_only(&access, &format!("draining node {id}"))?;
    let state = b.set_node_drain(id, drain).await?;
    Ok(Json(NodeStateInfo { state }))
}

/// `GET /removable-nodes` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RemovableQuery {
    /// Least idle time, e.g. `10m`, `90s`, `500ms` or plain seconds; absent = any idle node.
    idle: Option<String>,
}

async fn removable_nodes<B: Backend>(
    State(b): State<B>,
    ApiQuery(q): ApiQuery<RemovableQuery>,
) -> Result<Json<RemovableNodesResponse>, ApiError> {
    let min_idle_ms = match q.idle.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => 0,
        Some(text) => crate::api::durations::parse_duration_ms(text)
            .map_err(|e| ApiError::bad_request(format!("idle: {e}")))?,
    };
    Ok(Json(RemovableNodesResponse {
        removable_nodes: RemovableNodeList { node: b.removable_nodes(min_idle_ms).await },
    }))
}

/// `GET /apps` parameters. `state` is YARN's older, single-valued spelling of `states`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppsQuery {
    states: Option<String>,
    state: Option<String>,
    queue: Option<String>,
    user: Option<String>,
    limit: Option<String>,
}

impl AppsQuery {
    /// Turns the parameters into a filter; empty values filter nothing, as in YARN.
    fn to_filter(&self) -> Result<AppFilter, ApiError> {
        let mut filter = AppFilter::default();
        for name in state_names([&self.states, &self.state]) {
            let state = name.parse::<AppState>().map_err(|e| ApiError::bad_request(e.to_string()))?;
            if !filter.states.contains(&state) {
                filter.states.push(state);
            }
        }
        let nonempty = |v: &Option<String>| v.as_ref().filter(|s| !s.is_empty()).cloned();
        filter.queue = nonempty(&self.queue);
        filter.user = nonempty(&self.user);
        if let Some(l) = nonempty(&self.limit) {
            match l.parse::<usize>() {
                Ok(n) if n > 0 => filter.limit = Some(n),
                _ => return Err(ApiError::bad_request(format!("limit `{l}` is not a positive number"))),
            }
        }
        Ok(filter)
    }
}

async fn apps<B: Backend>(
    State(b): State<B>,
    ApiQuery(q): ApiQuery<AppsQuery>,
) -> Result<Json<AppsResponse>, ApiError> {
    let filter = q.to_filter()?;
    let apps = filter.apply(b.apps(filter.clone()).await);
    Ok(Json(AppsResponse { apps: AppList { app: apps } }))
}

async fn app_of<B: Backend>(b: &B, id: &str) -> Result<AppInfo, ApiError> {
    let id = parse_id("application", id)?;
    b.app(id)
        .await
        .ok_or_else(|| ApiError::not_found(format!("application {id} is not known to the scheduler")))
}

async fn app<B: Backend>(
    State(b): State<B>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<AppResponse>, ApiError> {
    Ok(Json(AppResponse { app: app_of(&b, &id).await? }))
}

async fn app_state<B: Backend>(
    State(b): State<B>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<AppStateInfo>, ApiError> {
    Ok(Json(AppStateInfo { state: app_of(&b, &id).await?.state }))
}

/// Kills an app, as YARN's `PUT …/state {"state": "KILLED"}`: 202 with the state at the time of
/// the answer while the kill is under way, 200 when it was already killed, 409 when it already
/// ended otherwise.
async fn set_app_state<B: Backend>(
    State(b): State<B>,
    ApiPath(id): ApiPath<String>,
    access: MaybeAccess,
    ApiJson(body): ApiJson<AppStateRequest>,
) -> Result<Response, ApiError> {
    body.kills().map_err(ApiError::bad_request)?;
    let app = app_of(&b, &id).await?;
    may_act_on(&access, &app.user, &app.queue, &format!("application {}", app.id))?;
    match app.state {
        AppState::Killed => return Ok(Json(AppStateInfo { state: AppState::Killed }).into_response()),
        s if s.is_terminal() => {
            return Err(ApiError::conflict(format!("application {} has already ended: it is {s}", app.id)));
        }
        _ => {}
    }
    b.kill(app.id).await?;
    let state = b.app(app.id).await.map_or(app.state, |a| a.state);
    let location = format!("{PREFIX}/apps/{}/state", app.id);
    Ok((StatusCode::ACCEPTED, [(LOCATION, location)], Json(AppStateInfo { state })).into_response())
}

/// The REST API's authentication (installed by the daemon when it has tokens): a request needs
/// `Authorization: Bearer TOKEN` of a known token, else 401 with `WWW-Authenticate: Bearer`;
/// its [`Caller`](crate::auth::Caller) is handed to the routes as a request extension.
pub async fn require_token(
    State(auth): State<std::sync::Arc<crate::auth::RestAuth>>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    let (tokens, policy) = auth.current();
    let header = req.headers().get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match tokens.authorize(header).cloned() {
        Some(caller) => {
            req.extensions_mut().insert(crate::auth::Access { caller, policy });
            next.run(req).await
        }
        None => {
            let mut answer = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required (Authorization: Bearer TOKEN; the CLI reads --token, GANTRY_TOKEN, --token-file or GANTRY_TOKEN_FILE, and by itself the token of a `gantry dev` started in its directory, ./gantry-dev/cli-token)",
            )
            .into_response();
            answer
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            answer
        }
    }
}

/// The authenticated caller and the access rules, when the daemon has tokens.
type MaybeAccess = Option<axum::Extension<crate::auth::Access>>;

fn forbidden(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, message)
}

/// Refuses (403) a caller who is neither `owner` nor an administrator of `queue` (or of the
/// cluster); anyone when the daemon has no tokens.
fn may_act_on(access: &MaybeAccess, owner: &str, queue: &str, what: &str) -> Result<(), ApiError> {
    match access {
        Some(axum::Extension(a)) if !a.may_act_on(owner, queue) => Err(forbidden(format!(
            "{what} belongs to `{owner}`; `{}` does not administer {queue}",
            a.caller.user
        ))),
        _ => Ok(()),
    }
}

/// Refuses (403) a caller without `right` on `queue`; anyone when the daemon has no tokens.
fn may_use_queue(access: &MaybeAccess, queue: &str, right: crate::auth::QueueRight) -> Result<(), ApiError> {
    match access {
        Some(axum::Extension(a)) if !a.may(queue, right) => {
            let (verb, acl) = match right {
                crate::auth::QueueRight::Submit => ("submit to", "acl_submit_applications"),
                crate::auth::QueueRight::Administer => ("administer", "acl_administer_queue"),
            };
            Err(forbidden(format!(
                "`{}` may not {verb} {queue} (its {acl} does not list the user or a group of theirs)",
                a.caller.user
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses (403) a caller who is not a cluster administrator; anyone without tokens.
fn cluster_admin_only(access: &MaybeAccess, what: &str) -> Result<(), ApiError> {
    match access {
        Some(axum::Extension(a)) if !a.caller.admin => {
            Err(forbidden(format!("{what} needs a cluster administrator; `{}` is not one", a.caller.user)))
        }
        _ => Ok(()),
    }
}

async fn new_reservation<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
) -> Result<Json<crate::api::reservations::NewReservation>, ApiError> {
    Ok(Json(b.new_reservation(caller_of(&access)).await?))
}

/// The authenticated user, to whom ids handed out belong (`None` without tokens).
fn caller_of(access: &MaybeAccess) -> Option<String> {
    access.as_ref().map(|axum::Extension(a)| a.caller.user.clone())
}

/// The accepted reservation with this id, if the plan holds it.
async fn planned_reservation<B: Backend>(
    b: &B,
    id: gantry_engine::ReservationId,
) -> Result<Option<crate::api::reservations::ReservationInfo>, ApiError> {
    Ok(b.reservations()
        .await?
        .into_iter()
        .find(|r| crate::api::reservations::parse_reservation_id(&r.reservation_id) == Ok(id)))
}

/// The queue of the reservation a submission names (`reservation_17`), for its ACL check.
async fn reservation_queue<B: Backend>(b: &B, text: &str) -> Result<String, ApiError> {
    let id = crate::api::reservations::parse_reservation_id(text).map_err(ApiError::unprocessable)?;
    planned_reservation(b, id)
        .await?
        .map(|r| r.reservation_queue)
        .ok_or_else(|| ApiError::unprocessable(format!("reservation {text} is not in the plan")))
}

/// The user a reservation is made for when the daemon has no tokens (with tokens: the caller).
const RESERVATION_USER: &str = "gantry";

async fn submit_reservation<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
    ApiJson(body): ApiJson<crate::api::reservations::ReservationSubmit>,
) -> Result<Json<crate::api::reservations::ReservationInfo>, ApiError> {
    let queue = body.queue.clone().ok_or_else(|| ApiError::unprocessable("`queue` is required"))?;
    may_use_queue(&access, &full_queue_path(&queue), crate::auth::QueueRight::Submit)?;
    let caller = caller_of(&access);
    let user = caller.clone().unwrap_or_else(|| RESERVATION_USER.to_owned());
    let id = body
        .reservation_id
        .as_deref()
        .map(crate::api::reservations::parse_reservation_id)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let request = body.definition.to_request(queue, user).map_err(ApiError::unprocessable)?;
    Ok(Json(b.submit_reservation(id, request, caller).await?))
}

async fn update_reservation<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
    ApiJson(body): ApiJson<crate::api::reservations::ReservationSubmit>,
) -> Result<Json<crate::api::reservations::ReservationInfo>, ApiError> {
    let id = body
        .reservation_id
        .as_deref()
        .ok_or_else(|| ApiError::unprocessable("`reservation-id` is required"))
        .and_then(|s| crate::api::reservations::parse_reservation_id(s).map_err(ApiError::bad_request))?;
    let current = planned_reservation(&b, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("reservation {} is not in the plan", id.0)))?;
    may_act_on(&access, &current.user, &current.queue, &format!("reservation {}", current.reservation_id))?;
    let queue = body.queue.clone().unwrap_or(current.queue);
    may_use_queue(&access, &full_queue_path(&queue), crate::auth::QueueRight::Submit)?;
    let request = body.definition.to_request(queue, current.user).map_err(ApiError::unprocessable)?;
    Ok(Json(b.update_reservation(id, request).await?))
}

async fn delete_reservation<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
    ApiJson(body): ApiJson<crate::api::reservations::ReservationDelete>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id = crate::api::reservations::parse_reservation_id(&body.reservation_id)
        .map_err(ApiError::bad_request)?;
    if access.is_some() {
        let (owner, queue) = planned_reservation(&b, id)
            .await?
            .map(|r| (r.user, r.queue))
            .ok_or_else(|| ApiError::not_found(format!("reservation {} is not in the plan", id.0)))?;
        may_act_on(&access, &owner, &queue, &format!("reservation {}", body.reservation_id))?;
    }
    b.delete_reservation(id).await?;
    Ok(Json(serde_json::json!({})))
}

/// `GET /reservation/list` parameters (YARN's names).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReservationListQuery {
    queue: Option<String>,
    #[serde(rename = "reservation-id")]
    reservation_id: Option<String>,
    #[serde(rename = "start-time")]
    start_time: Option<u64>,
    #[serde(rename = "end-time")]
    end_time: Option<u64>,
    #[serde(rename = "include-resource-allocations")]
    include_resource_allocations: Option<bool>,
}

async fn list_reservations<B: Backend>(
    State(b): State<B>,
    ApiQuery(q): ApiQuery<ReservationListQuery>,
) -> Result<Json<crate::api::reservations::ReservationList>, ApiError> {
    let id = q
        .reservation_id
        .as_deref()
        .map(crate::api::reservations::parse_reservation_id)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let (start, end) = (q.start_time.unwrap_or(0), q.end_time.unwrap_or(u64::MAX));
    if start > end {
        return Err(ApiError::bad_request("start-time is after end-time"));
    }
    let mut reservations: Vec<_> = b
        .reservations()
        .await?
        .into_iter()
        .filter(|r| q.queue.as_ref().is_none_or(|queue| &r.queue == queue || &r.reservation_queue == queue))
        .filter(|r| {
            id.is_none_or(|id| crate::api::reservations::parse_reservation_id(&r.reservation_id) == Ok(id))
        })
        // Windows that overlap [start, end].
        .filter(|r| r.arrival <= end && r.deadline >= start)
        .collect();
    if !q.include_resource_allocations.unwrap_or(false) {
        for r in &mut reservations {
            r.resource_allocations.clear();
        }
    }
    Ok(Json(crate::api::reservations::ReservationList { reservations }))
}

/// `POST /reservation/optimize` parameters: none (the planner's own configuration bounds its
/// optimiser; its call budget bounds the call).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptimizeQuery {}

async fn optimize_reservations<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
    ApiQuery(_): ApiQuery<OptimizeQuery>,
) -> Result<Json<crate::api::reservations::OptimizeInfo>, ApiError> {
    // It may move anyone's reservations.
    cluster_admin_only(&access, "optimising the reservation plan")?;
    Ok(Json(b.optimize_reservations().await?))
}

async fn new_application<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
) -> Result<Json<NewApplication>, ApiError> {
    Ok(Json(b.new_application(caller_of(&access)).await?))
}

/// Validates, normalises and submits; 202 only once the backend says the app is durable.
async fn submit<B: Backend>(
    State(b): State<B>,
    access: MaybeAccess,
    ApiJson(mut req): ApiJson<SubmitApp>,
) -> Result<Response, ApiError> {
    let mut account = None;
    if let Some(axum::Extension(a)) = &access {
        let c = &a.caller;
        // The token says who submits; a body naming someone else is refused, not rewritten.
        if req.user.as_ref().is_some_and(|u| *u != c.user) && !c.admin {
            return Err(forbidden(format!(
                "`{}` may not submit as `{}`",
                c.user,
                req.user.as_deref().unwrap_or_default()
            )));
        }
        req.user.get_or_insert_with(|| c.user.clone());
    }
    req.validate().map_err(|e| ApiError::unprocessable(e.to_string()))?;
    req.normalize();
    if let Some(axum::Extension(a)) = &access {
        let queue = match (&req.queue, &req.reservation_id) {
            (Some(q), _) => q.clone(),
            // The reservation's queue (the backend checks the reservation exists).
            (None, Some(r)) => reservation_queue(&b, r).await?,
            (None, None) => DEFAULT_QUEUE.to_owned(),
        };
        may_use_queue(&access, &queue, crate::auth::QueueRight::Submit)?;
        let user = req.user.as_deref().unwrap_or(&a.caller.user);
        account = a.policy.accounts.account_for(user).map_err(forbidden)?;
    }
    let id = b.submit(req, account, caller_of(&access)).await?;
    let location = format!("{PREFIX}/apps/{id}");
    Ok((StatusCode::ACCEPTED, [(LOCATION, location)], Json(SubmitResponse { application_id: id }))
        .into_response())
}

async fn scheduler<B: Backend>(State(b): State<B>) -> Json<SchedulerResponse> {
    Json(SchedulerResponse { scheduler: SchedulerWrapper { scheduler_info: b.scheduler().await } })
}

/// `GET /containers/{id}/logs/{file}` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsQuery {
    tail: Option<String>,
}

async fn logs<B: Backend>(
    State(b): State<B>,
    ApiPath((id, file)): ApiPath<(String, String)>,
    access: MaybeAccess,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Response, ApiError> {
    let id = parse_id("container", &id)?;
    if access.as_ref().is_some_and(|axum::Extension(a)| !a.caller.admin) {
        let (owner, queue) = b
            .container_owner(id)
            .await
            .ok_or_else(|| ApiError::not_found(format!("container {id} is not known to the scheduler")))?;
        may_act_on(&access, &owner, &queue, &format!("container {id}"))?;
    }
    let file = LogFile::parse(&file).ok_or_else(|| {
        ApiError::not_found(format!("no log file `{file}`: a container has `stdout` and `stderr`"))
    })?;
    let tail = match q.tail.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => match t.parse::<u64>() {
            Ok(n) if n <= MAX_LOG_TAIL_BYTES => Some(n),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "tail `{t}` is not a byte count in 0..={MAX_LOG_TAIL_BYTES}"
                )));
            }
        },
    };
    let bytes = b.logs(id, file, tail).await?;
    // `nosniff`: a log is whatever a program printed; a browser must not run it as HTML.
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8")),
        (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
    ];
    Ok((headers, bytes).into_response())
}

async fn unknown_path(method: Method, uri: Uri) -> ApiError {
    let path = uri.path();
    let hint = if path.len() > 1 && path.ends_with('/') {
        " (paths take no trailing slash)"
    } else if !path.starts_with(PREFIX) {
        " (the API is under /ws/v1/cluster)"
    } else {
        ""
    };
    ApiError::not_found(format!("no such resource: {method} {path}{hint}"))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed on {}", uri.path()))
}
