//! The agent's own `/metrics`: node, container and GPU usage, container states, kills and the
//! heartbeat latency, on prometheus-client, served over a small hyper endpoint.
//!
//! prometheus-client encodes OpenMetrics text. Prometheus asks for that format and gets it; every
//! other client (curl, `promtool check metrics`, older scrapers) gets the classic Prometheus text
//! format 0.0.4, which [`AgentMetrics::encode`] derives from the OpenMetrics text (the two differ
//! only in how counters are named in `# HELP`/`# TYPE`, and in the `# UNIT`/`# EOF` lines).

use crate::model::{ContainerUsage, ExitReason, GpuInfo, HostUsage, NodeReport, Resources};
use gantry_exposition::StateLabels;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

pub use gantry_exposition::{
    ExpositionError as MetricsError, Format, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE,
};

/// Connections served at once; more are closed at accept. A scrape endpoint needs a handful.
pub const MAX_CONNECTIONS: usize = 64;
/// Largest request head (request line + headers) read, in bytes; larger ones get 431.
pub const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;
/// Time a client gets to send a request head, so idle or slow clients cannot hold a connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time open connections get to finish after shutdown is signalled.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Labels of per-container series: `container` is the container's name on the node (`<id>`, or
/// `<id>.<cluster id>` for a container of a scheduler run with a cluster id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ContainerLabels {
    container: String,
    app: String,
}

/// Labels of per-GPU series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GpuLabels {
    gpu: String,
    uuid: String,
    model: String,
}

/// Label of `gantry_container_kills_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type ByteGauge = Gauge<u64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

/// Which labelled series exist, so that series of containers and GPUs that are gone can be
/// removed, and so that a scrape never sees a half-applied update.
#[derive(Debug, Default)]
struct Series {
    containers: HashSet<ContainerLabels>,
    gpus: HashSet<GpuLabels>,
    states: HashSet<String>,
}

/// The agent's metrics. Share it behind an [`Arc`]: every method takes `&self`.
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    series: Mutex<Series>,

    node_cpu_cores: ByteGauge,
    node_cpu_usage: FloatGauge,
    node_cpu_seconds: FloatCounter,
    node_memory_total: ByteGauge,
    node_memory_available: ByteGauge,
    node_memory_used: ByteGauge,
    node_allocatable_cpu: FloatGauge,
    node_allocatable_memory: ByteGauge,
    node_allocatable_gpus: ByteGauge,

    container_cpu_seconds: Family<ContainerLabels, FloatCounter>,
    container_memory_working_set: Family<ContainerLabels, ByteGauge>,
    container_memory_limit: Family<ContainerLabels, ByteGauge>,

    gpu_utilization: Family<GpuLabels, FloatGauge>,
    gpu_memory_used: Family<GpuLabels, ByteGauge>,
    gpu_memory_total: Family<GpuLabels, ByteGauge>,

    containers: Family<StateLabels, ByteGauge>,
    kills: Family<ReasonLabels, Counter>,
    heartbeat_latency: Histogram,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A finite, non-negative value; NaN and infinities (a broken probe) become 0 rather than poison
/// a counter or a dashboard.
fn sane(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 { v } else { 0.0 }
}

/// Raises a counter to `value` if that is higher: counters follow a source that only grows, and
/// must not go down even if the source does (a re-read cgroup, a clock hiccup).
fn raise_to(counter: &FloatCounter, value: f64) {
    let delta = sane(value) - counter.get();
    if delta > 0.0 {
        counter.inc_by(delta);
    }
}

impl AgentMetrics {
    /// Registers every metric. Counters of kills are created at 0 for the reasons the agent
    /// enforces, so that `rate()` works from the first scrape.
    pub fn new() -> Self {
        let mut m = AgentMetrics {
            registry: Registry::default(),
            series: Mutex::new(Series::default()),
            node_cpu_cores: ByteGauge::default(),
            node_cpu_usage: FloatGauge::default(),
            node_cpu_seconds: FloatCounter::default(),
            node_memory_total: ByteGauge::default(),
            node_memory_available: ByteGauge::default(),
            node_memory_used: ByteGauge::default(),
            node_allocatable_cpu: FloatGauge::default(),
            node_allocatable_memory: ByteGauge::default(),
            node_allocatable_gpus: ByteGauge::default(),
            container_cpu_seconds: Family::default(),
            container_memory_working_set: Family::default(),
            container_memory_limit: Family::default(),
            gpu_utilization: Family::default(),
            gpu_memory_used: Family::default(),
            gpu_memory_total: Family::default(),
            containers: Family::default(),
            kills: Family::default(),
            heartbeat_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
        };
        let registry = &mut m.registry;

        registry.register("gantry_node_cpu_cores", "Logical CPUs of the node", m.node_cpu_cores.clone());
        registry.register_with_unit(
            "gantry_node_cpu_usage",
            "Busy fraction of all the node's CPUs over the last sampling interval, 0 to 1",
            Unit::Other("ratio".into()),
            m.node_cpu_usage.clone(),
        );
        registry.register_with_unit(
            "gantry_node_cpu",
            "CPU time used on the node since boot, all CPUs together",
            Unit::Seconds,
            m.node_cpu_seconds.clone(),
        );
        registry.register_with_unit(
            "gantry_node_memory_total",
            "Memory of the node (MemTotal)",
            Unit::Bytes,
            m.node_memory_total.clone(),
        );
        registry.register_with_unit(
            "gantry_node_memory_available",
            "Memory available for new work without swapping (MemAvailable)",
            Unit::Bytes,
            m.node_memory_available.clone(),
        );
        registry.register_with_unit(
            "gantry_node_memory_used",
            "Memory in use: total less available",
            Unit::Bytes,
            m.node_memory_used.clone(),
        );
        registry.register(
            "gantry_node_allocatable_cpu_cores",
            "CPU the scheduler may hand out: capacity less the configured reserve, in cores",
            m.node_allocatable_cpu.clone(),
        );
        registry.register_with_unit(
            "gantry_node_allocatable_memory",
            "Memory the scheduler may hand out: capacity less the configured reserve",
            Unit::Bytes,
            m.node_allocatable_memory.clone(),
        );
        registry.register(
            "gantry_node_allocatable_gpus",
            "GPUs the scheduler may hand out: capacity less the configured reserve",
            m.node_allocatable_gpus.clone(),
        );
        registry.register_with_unit(
            "gantry_container_cpu_usage",
            "CPU time used by a container, user and system",
            Unit::Seconds,
            m.container_cpu_seconds.clone(),
        );
        registry.register_with_unit(
            "gantry_container_memory_working_set",
            "Memory working set of a container: usage less inactive file cache",
            Unit::Bytes,
            m.container_memory_working_set.clone(),
        );
        registry.register_with_unit(
            "gantry_container_memory_limit",
            "Memory limit of a container, 0 when it has none",
            Unit::Bytes,
            m.container_memory_limit.clone(),
        );
        registry.register_with_unit(
            "gantry_gpu_utilization",
            "GPU busy fraction as NVML reports it, 0 to 1",
            Unit::Other("ratio".into()),
            m.gpu_utilization.clone(),
        );
        registry.register_with_unit(
            "gantry_gpu_memory_used",
            "GPU memory in use",
            Unit::Bytes,
            m.gpu_memory_used.clone(),
        );
        registry.register_with_unit(
            "gantry_gpu_memory_total",
            "GPU memory in all",
            Unit::Bytes,
            m.gpu_memory_total.clone(),
        );
        registry.register("gantry_containers", "Containers on this agent by state", m.containers.clone());
        registry.register(
            "gantry_container_kills",
            "Containers killed by the agent, by reason (killed-by-request, memory-limit, fenced: cut off from the scheduler for the fencing timeout)",
            m.kills.clone(),
        );
        registry.register_with_unit(
            "gantry_agent_heartbeat_latency",
            "Round trip of a status update to the scheduler and its acknowledgement",
            Unit::Seconds,
            m.heartbeat_latency.clone(),
        );
        gantry_exposition::register_build_info(
            registry,
            "gantry_agent_build_info",
            "The agent's version; always 1",
            env!("CARGO_PKG_VERSION"),
        );

        for reason in
            [ExitReason::KilledByRequest, ExitReason::MemoryLimit, ExitReason::Fenced, ExitReason::DiskLimit]
        {
            let _ = m.kills.get_or_create(&ReasonLabels { reason: reason.name().into() });
        }
        m.set_container_states(&[("running", 0)]);
        m
    }

    /// The series bookkeeping; a panic elsewhere while holding it leaves nothing half-written
    /// that matters, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Host CPU and memory from the probe.
    pub fn update_host(&self, host: &HostUsage) {
        let _series = self.lock();
        self.node_cpu_cores.set(u64::from(host.cpu_cores));
        self.node_cpu_usage.set(sane(host.cpu_usage).min(1.0));
        raise_to(&self.node_cpu_seconds, host.cpu_seconds_total);
        self.node_memory_total.set(host.memory_total_bytes);
        self.node_memory_available.set(host.memory_available_bytes);
        self.node_memory_used.set(host.memory_used_bytes);
    }

    /// What the scheduler may hand out (capacity less the configured reserve).
    pub fn set_allocatable(&self, allocatable: &Resources) {
        self.node_allocatable_cpu.set(allocatable.cpu_millis as f64 / 1000.0);
        self.node_allocatable_memory.set(allocatable.memory_bytes);
        self.node_allocatable_gpus.set(u64::from(allocatable.gpus));
    }

    /// Host usage, allocatable resources and GPUs of a whole report (containers come with their
    /// application through [`AgentMetrics::update_containers`]).
    pub fn update_report(&self, report: &NodeReport) {
        self.update_host(&report.usage);
        self.set_allocatable(&report.allocatable);
        self.update_gpus(&report.gpus);
    }

    /// Usage of every live container, each with its application id. Series of containers that
    /// are not in `containers` are removed: a finished container's series end with it.
    pub fn update_containers(&self, containers: &[(ContainerUsage, u64)]) {
        let mut series = self.lock();
        let mut live = HashSet::with_capacity(containers.len());
        for (usage, app_id) in containers {
            let key = crate::model::ContainerKey::new(usage.cluster, usage.container_id);
            let labels = ContainerLabels { container: key.to_string(), app: app_id.to_string() };
            raise_to(&self.container_cpu_seconds.get_or_create(&labels), usage.cpu_seconds);
            self.container_memory_working_set.get_or_create(&labels).set(usage.memory_working_set_bytes);
            self.container_memory_limit.get_or_create(&labels).set(usage.memory_limit_bytes);
            live.insert(labels);
        }
        for gone in series.containers.difference(&live) {
            self.container_cpu_seconds.remove(gone);
            self.container_memory_working_set.remove(gone);
            self.container_memory_limit.remove(gone);
        }
        series.containers = live;
    }

    /// Every GPU and MIG instance; series of devices no longer reported are removed.
    pub fn update_gpus(&self, gpus: &[GpuInfo]) {
        let mut series = self.lock();
        let mut live = HashSet::with_capacity(gpus.len());
        for gpu in gpus {
            let labels =
                GpuLabels { gpu: gpu.index.to_string(), uuid: gpu.uuid.clone(), model: gpu.model.clone() };
            self.gpu_utilization
                .get_or_create(&labels)
                .set(f64::from(gpu.utilization_percent.min(100)) / 100.0);
            self.gpu_memory_used.get_or_create(&labels).set(gpu.memory_used_bytes);
            self.gpu_memory_total.get_or_create(&labels).set(gpu.memory_total_bytes);
            live.insert(labels);
        }
        for gone in series.gpus.difference(&live) {
            self.gpu_utilization.remove(gone);
            self.gpu_memory_used.remove(gone);
            self.gpu_memory_total.remove(gone);
        }
        series.gpus = live;
    }

    /// How many containers are in each state (e.g. `("running", 3)`). A state reported before
    /// but missing now is set to 0, so sums over states stay continuous.
    pub fn set_container_states(&self, counts: &[(&str, u64)]) {
        let mut series = self.lock();
        let mut seen = HashSet::with_capacity(counts.len());
        for (state, count) in counts {
            self.containers.get_or_create(&StateLabels { state: (*state).to_owned() }).set(*count);
            seen.insert((*state).to_owned());
        }
        for state in series.states.difference(&seen) {
            self.containers.get_or_create(&StateLabels { state: state.clone() }).set(0);
        }
        series.states.extend(seen);
    }

    /// Counts one container killed by the agent, labelled with [`ExitReason::name`].
    pub fn record_kill(&self, reason: ExitReason) {
        self.kills.get_or_create(&ReasonLabels { reason: reason.name().into() }).inc();
    }

    /// Records one heartbeat round trip.
    pub fn observe_heartbeat(&self, latency: Duration) {
        self.heartbeat_latency.observe(latency.as_secs_f64());
    }

    /// The exposition in the Prometheus text format 0.0.4. Encoding into a string cannot fail
    /// with the metrics registered here; should it ever, the error is logged and the text is
    /// empty (use [`AgentMetrics::try_encode`] to see the error).
    pub fn encode(&self) -> String {
        self.try_encode(Format::PrometheusText).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot encode metrics");
            String::new()
        })
    }

    /// The exposition in the given format.
    pub fn try_encode(&self, format: Format) -> Result<String, MetricsError> {
        let _series = self.lock();
        gantry_exposition::encode(&self.registry, format)
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until `shutdown` completes, then gives open
/// connections [`SHUTDOWN_GRACE`] to finish. `GET /metrics` answers in the format the client's
/// `Accept` header prefers (see [`Format::negotiate`]); other paths get 404, other methods 405.
/// Accept errors (e.g. out of file descriptors) are logged and retried, never fatal.
pub async fn serve<F: Future>(listener: TcpListener, metrics: Arc<AgentMetrics>, shutdown: F) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match Arc::clone(&slots).try_acquire_owned() {
                    Ok(permit) => {
                        connections.spawn(serve_connection(stream, Arc::clone(&metrics), stop_rx.clone(), permit));
                    }
                    Err(_) => tracing::warn!(%peer, "metrics endpoint: too many connections, closing one"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    // Receivers see the change (or the sender's end) and finish their connections gracefully.
    let _ = stop_tx.send(true);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        tracing::warn!("metrics endpoint: connections still open after the grace period, closing them");
        connections.abort_all();
    }
}

/// One HTTP/1.1 connection, with bounded request heads and a header read timeout.
async fn serve_connection(
    stream: TcpStream,
    metrics: Arc<AgentMetrics>,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let service = service_fn(move |request: Request<Incoming>| {
        let metrics = Arc::clone(&metrics);
        async move { Ok::<_, Infallible>(respond(&metrics, &request)) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    // The guard `wait_for` returns is not `Send`; drop it before the arm runs.
    let stopped = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
            }
        }
        () = stopped => {
            connection.as_mut().graceful_shutdown();
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
            }
        }
    }
}

/// A response with a fixed body and content type.
fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Routes one request.
fn respond<B>(metrics: &AgentMetrics, request: &Request<B>) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let path = request.uri().path();
    if path != "/metrics" && path != "/healthz" {
        return reply(StatusCode::NOT_FOUND, TEXT, "not found\n");
    }
    if request.method() != Method::GET {
        let mut response = reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    if path == "/healthz" {
        return reply(StatusCode::OK, TEXT, "ok");
    }
    let accept = request.headers().get(hyper::header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match metrics.try_encode(format) {
        Ok(text) => reply(StatusCode::OK, format.content_type(), text),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            reply(StatusCode::INTERNAL_SERVER_ERROR, TEXT, "cannot encode metrics\n")
        }
    }
}
