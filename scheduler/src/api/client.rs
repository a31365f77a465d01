//! A small client of the REST API, for the `gantry` CLI, end-to-end tests and scripts in Rust.
//!
//! It is built on hyper-util's client, which is already in the dependency tree through axum
//! and tonic: `reqwest` would add a second HTTP stack for no gain, and `ureq` a second,
//! blocking one. `https://` goes through hyper-rustls with the same rustls the scheduler uses,
//! trusting only the cluster CA given ([`Client::with_ca`]; the CLI's `--ca-cert`).
//!
//! Every call has a deadline ([`DEFAULT_TIMEOUT`]) and every answer a size limit
//! ([`MAX_RESPONSE_BYTES`]): a CLI must not hang on a dead scheduler nor fill memory from a
//! confused one. Errors from the API come back as [`ClientError::Api`] with the server's
//! message.

use crate::api::types::*;
use crate::api::{AppFilter, LogFile};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;
use thiserror::Error;

/// How long one call may take, connection included, unless [`Client::with_timeout`] says
/// otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take: on a LAN a scheduler answers in milliseconds or is down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read, bytes (a log tail is at most 64 MiB; listings are far smaller).
pub const MAX_RESPONSE_BYTES: usize = 128 << 20;

/// Why a call failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The scheduler address cannot be used.
    #[error("invalid scheduler address `{url}`: {reason}")]
    BadUrl {
        /// The address as given.
        url: String,
        /// Why.
        reason: String,
    },
    /// The request did not get an answer (connection refused, reset, …).
    #[error("cannot reach the scheduler at {url}: {message}")]
    Transport {
        /// The scheduler's base address.
        url: String,
        /// The transport's error chain.
        message: String,
    },
    /// No answer within the deadline.
    #[error("the scheduler at {url} did not answer within {} s", timeout.as_secs_f64())]
    Timeout {
        /// The scheduler's base address.
        url: String,
        /// The deadline.
        timeout: Duration,
    },
    /// The API answered with an error.
    #[error("{message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The exception name (`NotFoundException`), empty if the body had none.
        exception: String,
        /// The server's message.
        message: String,
    },
    /// The answer could not be read or is not what the API sends.
    #[error("unexpected answer from the scheduler at {url}: {message}")]
    Decode {
        /// The scheduler's base address.
        url: String,
        /// What is wrong.
        message: String,
    },
}

impl ClientError {
    /// The HTTP status of an API error, if this is one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// What a kill request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillOutcome {
    /// The app's state in the answer.
    pub state: AppState,
    /// `true` when the kill was started now (202); `false` when the app was already killed.
    pub accepted: bool,
}

/// A client of one scheduler's REST API. Cheap to clone; connections are pooled.
#[derive(Debug, Clone)]
pub struct Client {
    /// `http(s)://host:port` plus any path prefix, without a trailing slash.
    base: String,
    http: HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    /// Sent as `Authorization: Bearer …` when set.
    token: Option<String>,
}

impl Client {
    /// A client of the scheduler at `url` (`http://host:port`, optionally with a path prefix
    /// when behind a proxy; a bare `host:port` means `http://host:port`). Needs a Tokio runtime
    /// only for the calls, not to be built.
    pub fn new(url: &str) -> Result<Client, ClientError> {
        Client::with_ca(url, None)
    }

    /// A client of the scheduler at `url`, `http://` or `https://`; an `https://` scheduler's
    /// certificate must chain to the CA certificate in `ca` (PEM, `gantry cert ca`'s `ca.pem`).
    pub fn with_ca(url: &str, ca: Option<&std::path::Path>) -> Result<Client, ClientError> {
        let bad = |reason: &str| ClientError::BadUrl { url: url.to_owned(), reason: reason.to_owned() };
        let trimmed = url.trim();
        let full = if trimmed.contains("://") { trimmed.to_owned() } else { format!("http://{trimmed}") };
        let uri: Uri = full.parse().map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_owned(),
            _ => return Err(bad("the address must start with http:// or https://")),
        };
        let tls = match (scheme.as_str(), ca) {
            (_, Some(ca)) => crate::tls::client_config(ca).map_err(|e| bad(&e.to_string()))?,
            ("https", None) => {
                return Err(bad("https needs the cluster CA certificate (--ca-cert or GANTRY_CA_CERT)"));
            }
            // Plain http: the TLS side is never used; it trusts nothing.
            _ => crate::tls::client_config_trusting_nothing().map_err(|e| bad(&e.to_string()))?,
        };
        let authority = uri.authority().ok_or_else(|| bad("it names no host"))?;
        if uri.query().is_some() {
            return Err(bad("it must not have a query string"));
        }
        let base = format!("{scheme}://{authority}{}", uri.path().trim_end_matches('/'));
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = HttpClient::builder(TokioExecutor::new()).build(https);
        Ok(Client { base, http, timeout: DEFAULT_TIMEOUT, token: None })
    }

    /// The same client with another per-call deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The same client sending `token` as a bearer token with every request.
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// The scheduler's base address.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends one request to `path` (below the base, starting with `/`) and returns the status
    /// and body of a 2xx answer; any other status becomes [`ClientError::Api`].
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        json_body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let url = format!("{}{path}", self.base);
        let uri: Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| ClientError::BadUrl {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ClientError::BadUrl { url: url.clone(), reason: "the token is not a valid header".into() }
            })?;
            builder = builder.header(hyper::header::AUTHORIZATION, value);
        }
        if json_body.is_some() {
            builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = builder
            .body(Full::new(Bytes::from(json_body.unwrap_or_default())))
            .map_err(|e| ClientError::BadUrl { url: url.clone(), reason: e.to_string() })?;
        let call = async {
            let response = self.http.request(request).await.map_err(|e| self.transport(&e))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| self.decode(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, ClientError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| ClientError::Timeout { url: self.base.clone(), timeout: self.timeout })??;
        if status.is_success() {
            return Ok((status, body));
        }
        Err(match serde_json::from_slice::<RemoteExceptionBody>(&body) {
            Ok(e) => ClientError::Api {
                status: status.as_u16(),
                exception: e.remote_exception.exception,
                message: e.remote_exception.message,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(&body);
                let snippet: String = text.chars().take(200).collect();
                ClientError::Api {
                    status: status.as_u16(),
                    exception: String::new(),
                    message: format!("HTTP {status} from {}: {}", self.base, snippet.trim()),
                }
            }
        })
    }

    fn transport(&self, e: &(dyn std::error::Error + 'static)) -> ClientError {
        // hyper's own message is generic ("client error (Connect)"); the cause is in the chain
        // ("tcp connect error: Connection refused"), so that is what is shown when there is one.
        let mut parts = Vec::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = next {
            parts.push(err.to_string());
            next = err.source();
        }
        if parts.len() > 1 {
            parts.remove(0);
        }
        let message = parts.join(": ");
        ClientError::Transport { url: self.base.clone(), message }
    }

    fn decode(&self, message: String) -> ClientError {
        ClientError::Decode { url: self.base.clone(), message }
    }

    fn parse_value(&self, body: &[u8]) -> Result<Value, ClientError> {
        serde_json::from_slice(body).map_err(|e| self.decode(format!("not JSON: {e}")))
    }

    /// Decodes an API value into its type.
    pub fn typed<T: DeserializeOwned>(&self, value: &Value) -> Result<T, ClientError> {
        T::deserialize(value).map_err(|e| self.decode(e.to_string()))
    }

    /// `GET path` and its JSON.
    pub async fn get_value(&self, path: &str) -> Result<Value, ClientError> {
        let (_, body) = self.send(Method::GET, path, None).await?;
        self.parse_value(&body)
    }

    /// `method path` with a JSON body; the status and JSON of the answer.
    pub async fn send_value(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<(StatusCode, Value), ClientError> {
        let bytes =
            serde_json::to_vec(body).map_err(|e| self.decode(format!("encoding the request: {e}")))?;
        let (status, body) = self.send(method, path, Some(bytes)).await?;
        Ok((status, self.parse_value(&body)?))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let v = self.get_value(path).await?;
        self.typed(&v)
    }

    /// `GET /ws/v1/cluster/info`.
    pub async fn info(&self) -> Result<ClusterInfo, ClientError> {
        Ok(self.get::<ClusterInfoResponse>(&paths::info()).await?.cluster_info)
    }

    /// `GET /ws/v1/cluster/metrics`.
    pub async fn metrics(&self) -> Result<ClusterMetrics, ClientError> {
        Ok(self.get::<ClusterMetricsResponse>(&paths::metrics()).await?.cluster_metrics)
    }

    /// `GET /ws/v1/cluster/nodes`.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, ClientError> {
        Ok(self.get::<NodesResponse>(&paths::nodes()).await?.nodes.node)
    }

    /// `GET /ws/v1/cluster/nodes/{id}`.
    pub async fn node(&self, id: &str) -> Result<NodeInfo, ClientError> {
        Ok(self.get::<NodeResponse>(&paths::node(id)).await?.node)
    }

    /// `PUT /ws/v1/cluster/nodes/{id}/state`: drains (`DECOMMISSIONING`) or undrains
    /// (`RUNNING`) a node; answers its state once the change is stored.
    pub async fn set_node_drain(&self, id: &str, drain: bool) -> Result<NodeState, ClientError> {
        let body = NodeStateRequest { state: if drain { "DECOMMISSIONING" } else { "RUNNING" }.into() };
        let (_, v) = self.send_value(Method::PUT, &paths::node_state(id), &body).await?;
        Ok(self.typed::<NodeStateInfo>(&v)?.state)
    }

    /// `GET /ws/v1/cluster/removable-nodes?idle=…`: empty nodes idle at least `min_idle_ms`.
    pub async fn removable_nodes(&self, min_idle_ms: u64) -> Result<Vec<RemovableNode>, ClientError> {
        Ok(self
            .get::<RemovableNodesResponse>(&paths::removable_nodes(min_idle_ms))
            .await?
            .removable_nodes
            .node)
    }

    /// `GET /ws/v1/cluster/apps` with a filter.
    pub async fn apps(&self, filter: &AppFilter) -> Result<Vec<AppInfo>, ClientError> {
        Ok(self.get::<AppsResponse>(&paths::apps(filter)).await?.apps.app)
    }

    /// `GET /ws/v1/cluster/apps/{id}`.
    pub async fn app(&self, id: u64) -> Result<AppInfo, ClientError> {
        Ok(self.get::<AppResponse>(&paths::app(id)).await?.app)
    }

    /// `GET /ws/v1/cluster/apps/{id}/state`.
    pub async fn app_state(&self, id: u64) -> Result<AppState, ClientError> {
        Ok(self.get::<AppStateInfo>(&paths::app_state(id)).await?.state)
    }

    /// `POST /ws/v1/cluster/apps/new-application`.
    pub async fn new_application(&self) -> Result<NewApplication, ClientError> {
        let (_, body) = self.send(Method::POST, &paths::new_application(), None).await?;
        let v = self.parse_value(&body)?;
        self.typed(&v)
    }

    /// `POST /ws/v1/cluster/apps`: returns the id once the scheduler has made it durable.
    pub async fn submit(&self, app: &SubmitApp) -> Result<u64, ClientError> {
        let (_, v) = self.send_value(Method::POST, &paths::submit(), app).await?;
        Ok(self.typed::<SubmitResponse>(&v)?.application_id)
    }

    /// `PUT /ws/v1/cluster/apps/{id}/state {"state": "KILLED"}`.
    pub async fn kill(&self, id: u64) -> Result<KillOutcome, ClientError> {
        let body = AppStateRequest { state: "KILLED".into() };
        let (status, v) = self.send_value(Method::PUT, &paths::app_state(id), &body).await?;
        let state = self.typed::<AppStateInfo>(&v)?.state;
        Ok(KillOutcome { state, accepted: status == StatusCode::ACCEPTED })
    }

    /// `POST /ws/v1/cluster/reservation/new-reservation`.
    pub async fn new_reservation(&self) -> Result<crate::api::reservations::NewReservation, ClientError> {
        let (_, body) = self.send(Method::POST, "/ws/v1/cluster/reservation/new-reservation", None).await?;
        let v = self.parse_value(&body)?;
        self.typed(&v)
    }

    /// `POST /ws/v1/cluster/reservation/submit` (or `update` when `update`): the accepted
    /// reservation with its allocation; a rejection is [`ClientError::Api`] with status 409.
    pub async fn submit_reservation(
        &self,
        body: &crate::api::reservations::ReservationSubmit,
        update: bool,
    ) -> Result<crate::api::reservations::ReservationInfo, ClientError> {
        let path =
            if update { "/ws/v1/cluster/reservation/update" } else { "/ws/v1/cluster/reservation/submit" };
        let (_, v) = self.send_value(Method::POST, path, body).await?;
        self.typed(&v)
    }

    /// `POST /ws/v1/cluster/reservation/delete`.
    pub async fn delete_reservation(&self, id: &str) -> Result<(), ClientError> {
        let body = crate::api::reservations::ReservationDelete { reservation_id: id.to_owned() };
        self.send_value(Method::POST, "/ws/v1/cluster/reservation/delete", &body).await.map(|_| ())
    }

    /// `GET /ws/v1/cluster/reservation/list` with allocations.
    pub async fn reservations(
        &self,
        queue: Option<&str>,
    ) -> Result<Vec<crate::api::reservations::ReservationInfo>, ClientError> {
        let mut path = "/ws/v1/cluster/reservation/list?include-resource-allocations=true".to_owned();
        if let Some(q) = queue {
            path.push_str("&queue=");
            path.push_str(&crate::api::types::percent_encode(q));
        }
        Ok(self.get::<crate::api::reservations::ReservationList>(&path).await?.reservations)
    }

    /// `POST /ws/v1/cluster/reservation/optimize`.
    pub async fn optimize_reservations(&self) -> Result<crate::api::reservations::OptimizeInfo, ClientError> {
        let (_, body) = self.send(Method::POST, "/ws/v1/cluster/reservation/optimize", None).await?;
        let v = self.parse_value(&body)?;
        self.typed(&v)
    }

    /// `GET /ws/v1/cluster/scheduler`.
    pub async fn scheduler(&self) -> Result<SchedulerInfo, ClientError> {
        Ok(self.get::<SchedulerResponse>(&paths::scheduler()).await?.scheduler.scheduler_info)
    }

    /// A container's log (the last `tail` bytes, or all of it).
    pub async fn logs(&self, container: u64, file: LogFile, tail: Option<u64>) -> Result<Bytes, ClientError> {
        Ok(self.send(Method::GET, &paths::logs(container, file, tail), None).await?.1)
    }
}

/// The API's paths, relative to the scheduler's base address.
pub mod paths {
    use crate::api::PREFIX;
    use crate::api::{AppFilter, LogFile};

    /// Cluster info.
    pub fn info() -> String {
        format!("{PREFIX}/info")
    }
    /// Cluster metrics.
    pub fn metrics() -> String {
        format!("{PREFIX}/metrics")
    }
    /// All nodes.
    pub fn nodes() -> String {
        format!("{PREFIX}/nodes")
    }
    /// One node.
    pub fn node(id: &str) -> String {
        format!("{PREFIX}/nodes/{}", crate::api::types::percent_encode(id))
    }
    /// One node's state (GET; PUT drains or undrains).
    pub fn node_state(id: &str) -> String {
        format!("{PREFIX}/nodes/{}/state", crate::api::types::percent_encode(id))
    }
    /// Nodes an autoscaler may remove, idle at least `min_idle_ms`.
    pub fn removable_nodes(min_idle_ms: u64) -> String {
        match min_idle_ms {
            0 => format!("{PREFIX}/removable-nodes"),
            ms => format!("{PREFIX}/removable-nodes?idle={ms}ms"),
        }
    }
    /// Apps, filtered.
    pub fn apps(filter: &AppFilter) -> String {
        format!("{PREFIX}/apps{}", filter.to_query())
    }
    /// One app.
    pub fn app(id: u64) -> String {
        format!("{PREFIX}/apps/{id}")
    }
    /// One app's state.
    pub fn app_state(id: u64) -> String {
        format!("{PREFIX}/apps/{id}/state")
    }
    /// Reserve an app id.
    pub fn new_application() -> String {
        format!("{PREFIX}/apps/new-application")
    }
    /// Submit.
    pub fn submit() -> String {
        format!("{PREFIX}/apps")
    }
    /// The queues.
    pub fn scheduler() -> String {
        format!("{PREFIX}/scheduler")
    }
    /// A container's log.
    pub fn logs(container: u64, file: LogFile, tail: Option<u64>) -> String {
        let query = tail.map(|t| format!("?tail={t}")).unwrap_or_default();
        format!("{PREFIX}/containers/{container}/logs/{}{query}", file.as_str())
    }
}
