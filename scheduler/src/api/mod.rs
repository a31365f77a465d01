//! The scheduler's REST/JSON API, shaped after Hadoop YARN's ResourceManager `ws/v1/cluster`
//! resources so that people and tools that know YARN feel at home (DESIGN.md, "Users'
//! interfaces").
//!
//! - [`types`]: the JSON bodies. YARN's field names are kept where YARN has the field; gantry's
//!   precise units (`cpuMillis`, `memoryBytes`, `gpus`) are added next to YARN's rounded ones.
//! - [`routes`]: the axum router ([`router`]) over a [`Backend`].
//! - [`client`]: a small HTTP client for the same API, used by the `gantry` CLI and by tests.
//!
//! The API does not know the engine or the store: it talks to a [`Backend`], which the daemon
//! implements (and tests fake). That keeps HTTP concerns — parsing, validation, status codes,
//! error bodies, size limits — in one place that can be tested without a cluster, and keeps
//! the daemon's core free of HTTP.
//!
//! Every request body is limited to [`MAX_BODY_BYTES`] and validated field by field before the
//! backend sees it, so a refused request changes nothing.

pub mod client;
pub mod durations;
pub mod reservations;
pub mod routes;
pub mod types;

pub use routes::router;
pub use types::{AppFilter, LogFile, NodeFilter};

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::future::Future;
use types::{
    AppInfo, ClusterInfo, ClusterMetrics, NewApplication, NodeInfo, NodeState, RemoteException,
    RemoteExceptionBody, RemovableNode, SchedulerInfo, SubmitApp,
};

/// The API's path prefix, as YARN's: the routes serve under it, the client's paths start with it.
pub const PREFIX: &str = "/ws/v1/cluster";

/// Largest request body accepted, in bytes. A submission of a thousand container groups with
/// long command lines stays far below it; anything larger is a mistake or an attack, and gets
/// 413 before it is buffered.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// The queue of a submission that names none.
pub const DEFAULT_QUEUE: &str = "root.default";

/// Largest `tail` a log request may ask for, in bytes. Logs are read through the agent into
/// memory, so one request must not be able to pull an unbounded file.
pub const MAX_LOG_TAIL_BYTES: u64 = 64 << 20;

/// What the REST API needs from the daemon. Implemented by the scheduler's server on top of the
/// engine and the store; faked in tests.
///
/// Queries are infallible: they read the daemon's in-memory state. Mutations return an
/// [`ApiError`] that carries the HTTP status to answer with (see its constructors).
pub trait Backend: Clone + Send + Sync + 'static {
    /// The cluster's identity and the daemon's version (`GET /ws/v1/cluster/info`).
    fn info(&self) -> impl Future<Output = ClusterInfo> + Send;

    /// Counts of apps, containers, resources and nodes (`GET /ws/v1/cluster/metrics`).
    fn metrics(&self) -> impl Future<Output = ClusterMetrics> + Send;

    /// Every known node, in any state (`GET /ws/v1/cluster/nodes`, `/nodes/{id}`).
    fn nodes(&self) -> impl Future<Output = Vec<NodeInfo>> + Send;

    /// Drains a node (`drain`: it keeps its containers and takes no new ones) or puts it back in
    /// service, and returns its state. Must return only once the change is durable (a drain
    /// outlives scheduler restarts). Errors: [`ApiError::not_found`] for an unknown node,
    /// [`ApiError::unavailable`] when the store cannot commit (nothing changed).
    fn set_node_drain(
        &self,
        node: String,
        drain: bool,
    ) -> impl Future<Output = Result<NodeState, ApiError>> + Send;

    /// Nodes that hold no container, are not lost, and have been empty for at least
    /// `min_idle_ms`, longest idle first: what an autoscaler may drain and remove.
    fn removable_nodes(&self, min_idle_ms: u64) -> impl Future<Output = Vec<RemovableNode>> + Send;

    /// Applications, live and remembered. The backend may use `filter` to skip work, but need
    /// not: the router applies [`AppFilter::apply`] to whatever comes back, so a backend that
    /// ignores the filter is still correct.
    fn apps(&self, filter: AppFilter) -> impl Future<Output = Vec<AppInfo>> + Send;

    /// One application, live or remembered, or `None` when the id is unknown.
    fn app(&self, id: u64) -> impl Future<Output = Option<AppInfo>> + Send;

    /// Hands out a new application id (`POST /ws/v1/cluster/apps/new-application`) that a later
    /// submission by the same `caller` (the authenticated user; `None` without tokens) may carry
    /// as `application-id`. Must return only once the id is durably taken: it is never given to
    /// anyone else, across restarts too. [`ApiError::unavailable`] when the store cannot commit.
    fn new_application(
        &self,
        caller: Option<String>,
    ) -> impl Future<Output = Result<NewApplication, ApiError>> + Send;

    /// Records a submission, already validated and normalised by the router
    /// ([`SubmitApp::validate`], [`SubmitApp::normalize`]), and returns its id. Must return
    /// only once the submission is durable: the client is told 202 Accepted on `Ok`.
    /// Typical errors: [`ApiError::unavailable`] when the store cannot commit,
    /// [`ApiError::unprocessable`] when the engine refuses the spec (unknown queue, …),
    /// [`ApiError::unprocessable`] for an `application-id` that `new-application` did not hand
    /// to `caller`, or that was used (nothing changes). `account` is the Unix account its
    /// containers run as (`None`: the agent's `container_user`), decided by the router from
    /// `[security] accounts`; `caller` is the authenticated user (`None` without tokens).
    fn submit(
        &self,
        req: SubmitApp,
        account: Option<String>,
        caller: Option<String>,
    ) -> impl Future<Output = Result<u64, ApiError>> + Send;

    /// Asks to kill a live application; returns once the kill is durable
    /// ([`ApiError::unavailable`] when the store cannot commit: then nothing changed). The
    /// router has already answered unknown and terminal applications itself, so this is called
    /// only for apps that looked live a moment ago.
    fn kill(&self, id: u64) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// The queue hierarchy with capacities and usage (`GET /ws/v1/cluster/scheduler`).
    fn scheduler(&self) -> impl Future<Output = SchedulerInfo> + Send;

    /// Hands out a reservation id (`POST /reservation/new-reservation`) for `caller`, durably,
    /// as [`Backend::new_application`] does.
    fn new_reservation(
        &self,
        caller: Option<String>,
    ) -> impl Future<Output = Result<reservations::NewReservation, ApiError>> + Send;

    /// Admits a reservation at once: `Ok` with its allocation once it is durable;
    /// [`ApiError::conflict`] when the plan has no room (nothing changed), 422 for an invalid
    /// request or an `id` not handed to `caller`, 400 when no reservation planner is configured
    /// (every reservation call answers so).
    fn submit_reservation(
        &self,
        id: Option<gantry_engine::ReservationId>,
        request: gantry_engine::ReservationRequest,
        caller: Option<String>,
    ) -> impl Future<Output = Result<reservations::ReservationInfo, ApiError>> + Send;

    /// Replaces a reservation's definition; on a conflict the old allocation stays.
    fn update_reservation(
        &self,
        id: gantry_engine::ReservationId,
        request: gantry_engine::ReservationRequest,
    ) -> impl Future<Output = Result<reservations::ReservationInfo, ApiError>> + Send;

    /// Deletes a reservation; its applications move to the plan's default queue.
    fn delete_reservation(
        &self,
        id: gantry_engine::ReservationId,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// The reservations in the plan, with their allocations (the router filters them).
    fn reservations(
        &self,
    ) -> impl Future<Output = Result<Vec<reservations::ReservationInfo>, ApiError>> + Send;

    /// Asks the reservation planner to re-organise the plan now (OPTIMIZE) and applies what the
    /// host accepts of its answer.
    fn optimize_reservations(
        &self,
    ) -> impl Future<Output = Result<reservations::OptimizeInfo, ApiError>> + Send;

    /// The user who submitted the application a container belongs to and the app's queue, or
    /// `None` for a container the scheduler does not know (used to refuse other users' logs).
    fn container_owner(&self, container: u64) -> impl Future<Output = Option<(String, String)>> + Send;

    /// A container's log file, fetched through its node's agent: the last `tail` bytes, or the
    /// whole file (the backend may cap it) when `tail` is `None`. Bytes, not text: programs
    /// write what they like.
    fn logs(
        &self,
        container: u64,
        file: LogFile,
        tail: Option<u64>,
    ) -> impl Future<Output = Result<Vec<u8>, ApiError>> + Send;
}

/// An error answered to an API client: an HTTP status and a message, sent as YARN's
/// `{"RemoteException": {"exception", "message", "javaClassName"}}` body (see
/// [`RemoteException`]). The exception name follows from the status, so one status always
/// reads the same to clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    /// 400: the request cannot be parsed (malformed JSON, a bad id or query parameter).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: no such application, node, container or resource.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// 409: the request contradicts the current state (killing a finished app, reusing an id).
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    /// 422: well-formed JSON whose content is refused (unknown field, bad size, unknown queue).
    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    /// 503: the scheduler cannot do it now (the store cannot commit, an agent is unreachable);
    /// nothing was changed and the client may retry.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 504: something the scheduler relays for did not answer in time (an agent asked for a
    /// container's log); nothing was changed and the client may retry.
    pub fn gateway_timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::GATEWAY_TIMEOUT, message)
    }

    /// 500: a bug.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The exception name for this status, as YARN's web services name them where YARN has
    /// one (`BadRequestException`, `NotFoundException`), and in the same style otherwise.
    pub fn exception(&self) -> &'static str {
        exception_name(self.status)
    }

    /// The body sent to the client.
    pub fn body(&self) -> RemoteExceptionBody {
        let exception = self.exception();
        let java_class_name = match exception {
            "BadRequestException" | "NotFoundException" | "ForbiddenException" => {
                format!("org.apache.hadoop.yarn.webapp.{exception}")
            }
            _ => "javax.ws.rs.WebApplicationException".to_owned(),
        };
        RemoteExceptionBody {
            remote_exception: RemoteException {
                exception: exception.to_owned(),
                message: self.message.clone(),
                java_class_name,
            },
        }
    }
}

/// The exception name clients see for a status.
pub fn exception_name(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "BadRequestException",
        StatusCode::UNAUTHORIZED => "AuthenticationException",
        StatusCode::FORBIDDEN => "ForbiddenException",
        StatusCode::NOT_FOUND => "NotFoundException",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowedException",
        StatusCode::CONFLICT => "ConflictException",
        StatusCode::PAYLOAD_TOO_LARGE => "PayloadTooLargeException",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaTypeException",
        StatusCode::UNPROCESSABLE_ENTITY => "UnprocessableEntityException",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableException",
        StatusCode::GATEWAY_TIMEOUT => "GatewayTimeoutException",
        s if s.is_client_error() => "ClientErrorException",
        _ => "InternalServerErrorException",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), message = %self.message, "API request failed");
        }
        (self.status, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_timeout_reads_as_yarn_style_remote_exception() {
        let e = ApiError::gateway_timeout("node n1 did not answer");
        assert_eq!(e.status, StatusCode::GATEWAY_TIMEOUT);
        let body = e.body().remote_exception;
        assert_eq!(body.exception, "GatewayTimeoutException");
        assert_eq!(body.message, "node n1 did not answer");
        assert_eq!(body.java_class_name, "javax.ws.rs.WebApplicationException");
    }
}
