//! The agent's `/metrics`: the exposition passes `promtool check metrics`, series of finished
//! containers disappear, counters never go down, the HTTP endpoint routes and survives garbage,
//! and a real Prometheus server scrapes it and answers a query with the value set here.
//!
//! Needs Debian's `prometheus` package (`/usr/bin/prometheus`, `/usr/bin/promtool`); the tests
//! fail, not skip, without it.

use gantry_agent::metrics::{
    AgentMetrics, Format, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE, serve,
};
use gantry_agent::model::{ClusterId, ContainerUsage, ExitReason, GpuInfo, HostUsage, Resources};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdTcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PROMTOOL: &str = "/usr/bin/promtool";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A metrics server on 127.0.0.1 in its own runtime thread; dropping it shuts it down.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(metrics: Arc<AgentMetrics>) -> Server {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
                addr_tx.send(listener.local_addr().expect("local addr")).expect("send addr");
                serve(listener, metrics, stopped).await;
            });
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(30)).expect("server address");
        Server { addr, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A child process killed and reaped on drop, whatever the test's outcome.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A parsed HTTP/1.1 response.
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Sends raw bytes, reads until the server closes, and parses the response.
fn raw_request(addr: SocketAddr, request: &[u8]) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    stream.write_all(request).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("response head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line.split(' ').nth(1).expect("status code").parse().expect("numeric status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect::<Vec<_>>();
    let mut body = body.to_owned();
    if headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        body = dechunk(&body);
    }
    HttpResponse { status, headers, body }
}

/// Decodes a chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// `GET path` with `Connection: close` and optional extra headers.
fn get(addr: SocketAddr, path: &str, extra_headers: &str) -> HttpResponse {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra_headers}\r\n");
    raw_request(addr, request.as_bytes())
}

/// Metrics with every family populated: host, allocatable, two containers, a GPU and a MIG
/// instance, kills, states and heartbeats.
fn populated() -> Arc<AgentMetrics> {
    let metrics = Arc::new(AgentMetrics::new());
    metrics.update_host(&HostUsage {
        cpu_cores: 8,
        cpu_usage: 0.25,
        cpu_seconds_total: 12_345.5,
        memory_total_bytes: 16 << 30,
        memory_available_bytes: 10 << 30,
        memory_used_bytes: 6 << 30,
    });
    metrics.set_allocatable(&Resources { cpu_millis: 7500, memory_bytes: 15 << 30, gpus: 2 });
    metrics.update_containers(&[
        (
            ContainerUsage {
                container_id: 11,
                cluster: ClusterId::LEGACY,
                cpu_seconds: 1.5,
                memory_working_set_bytes: 64 << 20,
                memory_limit_bytes: 128 << 20,
                processes: 3,
            },
            7,
        ),
        (
            ContainerUsage {
                container_id: 12,
                cluster: ClusterId::LEGACY,
                cpu_seconds: 0.25,
                memory_working_set_bytes: 1 << 20,
                memory_limit_bytes: 0,
                processes: 1,
            },
            7,
        ),
        (
            // Another scheduler run's container 12: a series of its own.
            ContainerUsage {
                container_id: 12,
                cluster: ClusterId::from_bits(0xabc),
                cpu_seconds: 9.0,
                memory_working_set_bytes: 1 << 20,
                memory_limit_bytes: 0,
                processes: 1,
            },
            8,
        ),
    ]);
    metrics.update_gpus(&[
        GpuInfo {
            index: 0,
            uuid: "GPU-5c1e7a52-0000-0000-0000-000000000000".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_total_bytes: 80 << 30,
            memory_used_bytes: 3 << 30,
            utilization_percent: 42,
            mig: false,
            containers: vec![11],
        },
        GpuInfo {
            index: 1,
            uuid: "MIG-1f2e3d4c-0000-0000-0000-000000000000".into(),
            model: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".into(),
            memory_total_bytes: 10 << 30,
            memory_used_bytes: 0,
            utilization_percent: 0,
            mig: true,
            containers: vec![],
        },
    ]);
    metrics.set_container_states(&[("running", 2), ("stopping", 1)]);
    metrics.record_kill(ExitReason::MemoryLimit);
    metrics.record_kill(ExitReason::KilledByRequest);
    metrics.record_kill(ExitReason::KilledByRequest);
    metrics.observe_heartbeat(Duration::from_micros(800));
    metrics.observe_heartbeat(Duration::from_millis(12));
    metrics
}

/// The value of the sample whose name-and-labels part is exactly `series`, if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == series).then(|| value.parse().expect("numeric sample value"))
    })
}

/// Runs `promtool check metrics` on `text`; returns its exit success and everything it printed.
fn promtool_check(text: &str) -> (bool, String) {
    assert!(
        Path::new(PROMTOOL).exists(),
        "{PROMTOOL} is missing: install Debian's `prometheus` package (apt-get install -y prometheus)"
    );
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child.stdin.take().expect("promtool stdin").write_all(text.as_bytes()).expect("write to promtool");
    let output = child.wait_with_output().expect("promtool output");
    let printed =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), printed)
}

#[test]
fn exposition_passes_promtool_with_every_family_populated() {
    let metrics = populated();
    let server = Server::start(Arc::clone(&metrics));

    // A plain client (like curl or promtool's users) gets the Prometheus text format.
    let response = get(server.addr, "/metrics", "");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some(PROMETHEUS_TEXT_CONTENT_TYPE));
    let text = response.body;
    assert_eq!(text, metrics.encode(), "the endpoint serves what encode() renders");

    let (ok, printed) = promtool_check(&text);
    assert!(
        ok && printed.trim().is_empty(),
        "promtool check metrics complained:\n{printed}\n--- exposition:\n{text}"
    );

    // Every family is there, with HELP and TYPE.
    for (name, kind) in [
        ("gantry_node_cpu_cores", "gauge"),
        ("gantry_node_cpu_usage_ratio", "gauge"),
        ("gantry_node_cpu_seconds_total", "counter"),
        ("gantry_node_memory_total_bytes", "gauge"),
        ("gantry_node_memory_available_bytes", "gauge"),
        ("gantry_node_memory_used_bytes", "gauge"),
        ("gantry_node_allocatable_cpu_cores", "gauge"),
        ("gantry_node_allocatable_memory_bytes", "gauge"),
        ("gantry_node_allocatable_gpus", "gauge"),
        ("gantry_container_cpu_usage_seconds_total", "counter"),
        ("gantry_container_memory_working_set_bytes", "gauge"),
        ("gantry_container_memory_limit_bytes", "gauge"),
        ("gantry_gpu_utilization_ratio", "gauge"),
        ("gantry_gpu_memory_used_bytes", "gauge"),
        ("gantry_gpu_memory_total_bytes", "gauge"),
        ("gantry_containers", "gauge"),
        ("gantry_container_kills_total", "counter"),
        ("gantry_agent_heartbeat_latency_seconds", "histogram"),
        ("gantry_agent_build_info", "gauge"),
    ] {
        assert!(text.contains(&format!("\n# TYPE {name} {kind}\n")), "no `# TYPE {name} {kind}` in:\n{text}");
        assert!(
            text.lines().any(|l| l.starts_with(&format!("# HELP {name} ")) && l.len() > name.len() + 10),
            "no HELP for {name}"
        );
    }

    // The values are the ones set, in base units.
    assert_eq!(sample(&text, "gantry_node_memory_total_bytes"), Some((16u64 << 30) as f64));
    assert_eq!(sample(&text, "gantry_node_cpu_seconds_total"), Some(12_345.5));
    assert_eq!(sample(&text, "gantry_node_allocatable_cpu_cores"), Some(7.5));
    assert_eq!(
        sample(&text, r#"gantry_container_memory_limit_bytes{container="11",app="7"}"#),
        Some((128u64 << 20) as f64)
    );
    assert_eq!(
        sample(&text, r#"gantry_container_cpu_usage_seconds_total{container="12",app="7"}"#),
        Some(0.25)
    );
    assert_eq!(
        sample(
            &text,
            r#"gantry_container_cpu_usage_seconds_total{container="12.00000000000000000000000000000abc",app="8"}"#
        ),
        Some(9.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"gantry_gpu_utilization_ratio{gpu="0",uuid="GPU-5c1e7a52-0000-0000-0000-000000000000",model="NVIDIA H100 80GB HBM3"}"#
        ),
        Some(0.42)
    );
    assert_eq!(sample(&text, r#"gantry_container_kills_total{reason="killed-by-request"}"#), Some(2.0));
    assert_eq!(sample(&text, r#"gantry_container_kills_total{reason="memory-limit"}"#), Some(1.0));
    assert_eq!(sample(&text, r#"gantry_containers{state="stopping"}"#), Some(1.0));
    assert_eq!(sample(&text, "gantry_agent_heartbeat_latency_seconds_count"), Some(2.0));
    assert_eq!(sample(&text, r#"gantry_agent_heartbeat_latency_seconds_bucket{le="+Inf"}"#), Some(2.0));
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(sample(&text, &format!(r#"gantry_agent_build_info{{version="{version}"}}"#)), Some(1.0));

    // A client that asks for OpenMetrics gets it, complete with its EOF marker.
    let accept = "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n";
    let response = get(server.addr, "/metrics", accept);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
    assert!(response.body.ends_with("# EOF\n"), "OpenMetrics without EOF:\n{}", response.body);
    assert!(response.body.contains("# TYPE gantry_container_kills counter\n"));
    assert!(response.body.contains("# UNIT gantry_node_memory_total_bytes bytes\n"));
}

#[test]
fn promtool_check_catches_a_broken_exposition() {
    // The check above would be worthless if promtool accepted anything.
    let (ok, printed) = promtool_check("# TYPE broken counter\nbroken 1\n");
    assert!(!ok || !printed.trim().is_empty(), "promtool found nothing wrong with a counter without _total");
}

#[test]
fn finished_containers_and_gpus_disappear_and_counters_never_decrease() {
    let metrics = populated();
    let c11 = r#"{container="11",app="7"}"#;
    let c12 = r#"{container="12",app="7"}"#;

    // Container 11 goes away; 12 goes on, reporting less CPU than before (a re-read that went
    // backwards) and then more.
    let usage12 = |cpu_seconds| {
        (
            ContainerUsage {
                container_id: 12,
                cluster: ClusterId::LEGACY,
                cpu_seconds,
                memory_working_set_bytes: 2 << 20,
                memory_limit_bytes: 0,
                processes: 1,
            },
            7,
        )
    };
    metrics.update_containers(&[usage12(0.125)]);
    let text = metrics.encode();
    assert!(!text.contains(c11), "series of finished container 11 remain:\n{text}");
    assert_eq!(sample(&text, &format!("gantry_container_cpu_usage_seconds_total{c12}")), Some(0.25));
    assert_eq!(
        sample(&text, &format!("gantry_container_memory_working_set_bytes{c12}")),
        Some((2u64 << 20) as f64)
    );
    metrics.update_containers(&[usage12(3.75)]);
    assert_eq!(
        sample(&metrics.encode(), &format!("gantry_container_cpu_usage_seconds_total{c12}")),
        Some(3.75)
    );

    // No containers at all: the families stay (HELP/TYPE) but hold no series.
    metrics.update_containers(&[]);
    let text = metrics.encode();
    assert!(!text.contains(c12), "series of finished container 12 remain:\n{text}");
    let (ok, printed) = promtool_check(&text);
    assert!(ok && printed.trim().is_empty(), "promtool check metrics complained:\n{printed}");

    // The host counter follows the host but never goes down; nonsense values do not poison it.
    let mut host = HostUsage { cpu_cores: 8, cpu_seconds_total: 100.0, ..HostUsage::default() };
    metrics.update_host(&host);
    assert_eq!(sample(&metrics.encode(), "gantry_node_cpu_seconds_total"), Some(12_345.5));
    host.cpu_seconds_total = 20_000.0;
    metrics.update_host(&host);
    assert_eq!(sample(&metrics.encode(), "gantry_node_cpu_seconds_total"), Some(20_000.0));
    host.cpu_seconds_total = f64::NAN;
    host.cpu_usage = f64::INFINITY;
    metrics.update_host(&host);
    let text = metrics.encode();
    assert_eq!(sample(&text, "gantry_node_cpu_seconds_total"), Some(20_000.0));
    assert_eq!(sample(&text, "gantry_node_cpu_usage_ratio"), Some(0.0));

    // Kill counters only grow.
    metrics.record_kill(ExitReason::MemoryLimit);
    assert_eq!(
        sample(&metrics.encode(), r#"gantry_container_kills_total{reason="memory-limit"}"#),
        Some(2.0)
    );

    // The MIG instance goes away, the GPU stays.
    let gpu0 = GpuInfo {
        index: 0,
        uuid: "GPU-5c1e7a52-0000-0000-0000-000000000000".into(),
        model: "NVIDIA H100 80GB HBM3".into(),
        memory_total_bytes: 80 << 30,
        memory_used_bytes: 1 << 30,
        utilization_percent: 100,
        mig: false,
        containers: vec![],
    };
    metrics.update_gpus(&[gpu0]);
    let text = metrics.encode();
    assert!(!text.contains("MIG-1f2e3d4c"), "series of a removed MIG instance remain:\n{text}");
    assert!(text.contains(r#"gantry_gpu_utilization_ratio{gpu="0","#), "GPU 0 vanished:\n{text}");

    // A state no longer reported drops to 0 rather than vanishing.
    metrics.set_container_states(&[("running", 1)]);
    let text = metrics.encode();
    assert_eq!(sample(&text, r#"gantry_containers{state="stopping"}"#), Some(0.0));
    assert_eq!(sample(&text, r#"gantry_containers{state="running"}"#), Some(1.0));
}

#[test]
fn endpoint_routes_and_survives_bad_requests() {
    let server = Server::start(populated());

    let health = get(server.addr, "/healthz", "");
    assert_eq!((health.status, health.body.as_str()), (200, "ok"));
    assert_eq!(get(server.addr, "/nope", "").status, 404);
    assert_eq!(get(server.addr, "/metrics/../etc/passwd", "").status, 404);
    assert_eq!(get(server.addr, "/metrics?x=1", "").status, 200);

    let post = raw_request(
        server.addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET"));

    // Garbage, an oversized head and a half-sent request: each gets an error or a closed
    // connection, and the server goes on serving.
    for junk in [
        b"\x00\x01\x02 not http at all\r\n\r\n".to_vec(),
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(64 * 1024)).into_bytes(),
        b"GET /metr".to_vec(),
    ] {
        let mut stream = TcpStream::connect(server.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
        let _ = stream.write_all(&junk);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        if !reply.is_empty() {
            let reply = String::from_utf8_lossy(&reply);
            assert!(reply.starts_with("HTTP/1.1 4"), "junk got a non-4xx reply: {reply}");
        }
    }
    let response = get(server.addr, "/metrics", "");
    assert_eq!(response.status, 200);
    assert!(response.body.contains("gantry_node_memory_total_bytes "));
}

#[test]
fn accept_header_negotiation() {
    // What Prometheus 2.x sends.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;\
                      q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::negotiate(None), Format::PrometheusText);
    assert_eq!(Format::negotiate(Some("*/*")), Format::PrometheusText);
    assert_eq!(Format::negotiate(Some("text/plain;version=0.0.4")), Format::PrometheusText);
    assert_eq!(
        Format::negotiate(Some("application/openmetrics-text; version=1.0.0; q=0.2, text/plain; q=0.9")),
        Format::PrometheusText
    );
    assert_eq!(Format::negotiate(Some("application/openmetrics-text;version=2.0.0")), Format::PrometheusText);
    assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0")), Format::PrometheusText);
    assert_eq!(Format::negotiate(Some(";;;,=,q=,\u{7f}")), Format::PrometheusText);
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    StdTcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().expect("local addr").port()
}

/// `GET` against Prometheus' HTTP API; `None` while it is not answering yet.
fn try_get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = head
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked =
        headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Some(HttpResponse { status, headers, body })
}

/// Polls `query` until it returns one sample; its value.
fn query_value(prometheus: SocketAddr, query: &str, deadline: Instant) -> Option<f64> {
    while Instant::now() < deadline {
        let response = try_get(prometheus, &format!("/api/v1/query?query={query}"));
        if let Some(response) = response.filter(|r| r.status == 200) {
            let json: serde_json::Value = serde_json::from_str(&response.body).expect("query JSON");
            if let Some(value) = json["data"]["result"][0]["value"][1].as_str() {
                return Some(value.parse().expect("numeric value"));
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

#[test]
fn a_real_prometheus_scrapes_the_agent() {
    assert!(
        Path::new(PROMETHEUS).exists(),
        "{PROMETHEUS} is missing: install Debian's `prometheus` package (apt-get install -y prometheus)"
    );
    let metrics = populated();
    // A value no default could produce.
    let memory_total = 123_456_789_012u64;
    metrics.update_host(&HostUsage {
        cpu_cores: 8,
        memory_total_bytes: memory_total,
        memory_available_bytes: 1 << 30,
        memory_used_bytes: memory_total - (1 << 30),
        ..HostUsage::default()
    });
    let server = Server::start(Arc::clone(&metrics));

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gantry-agent-{pid}\n    static_configs:\n      - targets: ['{addr}']\n",
            pid = std::process::id(),
            addr = server.addr
        ),
    )
    .expect("write prometheus.yml");
    let port = free_port();
    let prometheus_addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
    let child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={prometheus_addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let mut prometheus = KillOnDrop(child);
    let prometheus_log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if try_get(prometheus_addr, "/-/ready").is_some_and(|r| r.status == 200) {
            break;
        }
        if let Some(status) = prometheus.0.try_wait().expect("poll prometheus") {
            panic!("prometheus exited with {status}:\n{}", prometheus_log());
        }
        assert!(Instant::now() < deadline, "prometheus not ready within 60 s:\n{}", prometheus_log());
        std::thread::sleep(Duration::from_millis(250));
    }

    let got = query_value(prometheus_addr, "gantry_node_memory_total_bytes", deadline);
    assert_eq!(got, Some(memory_total as f64), "prometheus log:\n{}", prometheus_log());
    // A counter and a labelled series come through too (OpenMetrics counter naming).
    let kills = query_value(
        prometheus_addr,
        "gantry_container_kills_total%7Breason%3D%22killed-by-request%22%7D",
        deadline,
    );
    assert_eq!(kills, Some(2.0));
    let working_set = query_value(
        prometheus_addr,
        "gantry_container_memory_working_set_bytes%7Bcontainer%3D%2211%22%7D",
        deadline,
    );
    assert_eq!(working_set, Some((64u64 << 20) as f64));

    // The scrape itself is healthy, with no error.
    let targets = try_get(prometheus_addr, "/api/v1/targets").expect("targets API");
    let json: serde_json::Value = serde_json::from_str(&targets.body).expect("targets JSON");
    let target = &json["data"]["activeTargets"][0];
    assert_eq!(target["health"], "up", "target: {target}");
    assert_eq!(target["lastError"], "", "target: {target}");
}
