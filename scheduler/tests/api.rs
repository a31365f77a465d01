//! The REST API against an in-memory fake backend (`fake_backend/`), over real HTTP on
//! 127.0.0.1: every route's happy path and JSON shape (YARN's field names), filters, the error
//! statuses and bodies, size limits, and the typed client. Requests are written by hand on a TCP
//! socket so that malformed, mistyped and oversized ones reach the server exactly as sent. The
//! `gantry` CLI's parsing and output are tested against the same fake in `gantry/tests/cli.rs`.

mod fake_backend;

use fake_backend::*;
use gantry_engine::{Engine, EngineConfig, QueueSpec};
use gantry_scheduler::api::types::*;
use gantry_scheduler::api::{self, AppFilter, LogFile};
use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ----- a raw HTTP client -----------------------------------------------------------------------

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts an error answer: the status, the `RemoteException` shape, the exception name,
    /// and a message containing `needle`.
    fn assert_error(&self, status: u16, exception: &str, needle: &str) {
        assert_eq!(self.status, status, "body: {}", self.text());
        assert!(
            self.header("content-type").unwrap_or("").starts_with("application/json"),
            "{:?}",
            self.headers
        );
        let v = self.json();
        let e = &v["RemoteException"];
        assert_eq!(e["exception"], exception, "{v}");
        assert!(e["javaClassName"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "message {message:?} lacks {needle:?}");
    }
}

/// Sends one request on a fresh connection and reads the whole answer. The body is written
/// by a task of its own so that a server that answers before reading it all (413) cannot
/// deadlock the test; a reset after the answer has arrived is not an error.
async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&bytes).await;
        wr
    });
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    drop(writer.await);
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[end + 4..];
    let find =
        |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().unwrap();
        assert!(rest.len() >= len, "body cut short: {} of {len} bytes", rest.len());
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Resp { status, headers, body }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

async fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, &[], b"").await
}

async fn send_json(addr: SocketAddr, method: &str, path: &str, body: &str) -> Resp {
    http(addr, method, path, &[("Content-Type", "application/json")], body.as_bytes()).await
}

fn valid_submission() -> Value {
    json!({
        "application-name": "hello",
        "queue": "default",
        "user": "alice",
        "priority": 5,
        "max-app-attempts": 2,
        "containers": [{
            "resource": {"cpuMillis": 500, "memoryBytes": 268435456, "gpus": 0},
            "count": 3,
            "gang": true,
            "labels": {"zone": "a"},
            "rackAffinity": "required",
            "command": ["echo", "hello"],
            "env": {"GREETING": "hi"}
        }]
    })
}

// ----- routes: happy paths and shapes ----------------------------------------------------------

#[tokio::test]
async fn cluster_info_has_yarns_shape_at_both_paths() {
    let addr = serve(Fake::populated()).await;
    for path in ["/ws/v1/cluster", "/ws/v1/cluster/info"] {
        let r = get(addr, path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(r.header("content-type").unwrap().starts_with("application/json"));
        let v = r.json();
        let info = &v["clusterInfo"];
        assert_eq!(info["id"], 1_600_000_000_000u64);
        assert_eq!(info["startedOn"], 1_700_000_000_000u64);
        assert_eq!(info["state"], "STARTED");
        assert_eq!(info["haState"], "ACTIVE");
        assert_eq!(info["rmStateStoreName"], "sqlite:/tmp/fake.db");
        assert_eq!(info["resourceManagerVersion"], env!("CARGO_PKG_VERSION"));
        assert_eq!(info["plugins"][0]["name"], "packing");
        assert_eq!(info["plugins"][0]["consecutiveFailures"], 0);
    }
}

#[tokio::test]
async fn cluster_metrics_count_apps_nodes_containers_and_resources() {
    let addr = serve(Fake::populated()).await;
    let r = get(addr, "/ws/v1/cluster/metrics").await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let m = &v["clusterMetrics"];
    assert_eq!(m["appsSubmitted"], 4);
    assert_eq!(m["appsRunning"], 1);
    assert_eq!(m["appsCompleted"], 1);
    assert_eq!(m["appsPending"], 1);
    assert_eq!(m["appsKilled"], 1);
    assert_eq!(m["appsFailed"], 0);
    assert_eq!(m["totalMB"], 8192);
    assert_eq!(m["allocatedMB"], 2048);
    assert_eq!(m["availableMB"], 6144);
    assert_eq!(m["totalVirtualCores"], 4);
    assert_eq!(m["allocatedVirtualCores"], 1, "1.5 cores round down");
    assert_eq!(m["availableVirtualCores"], 2, "2.5 cores round down");
    assert_eq!(m["allocatedResources"]["cpuMillis"], 1500);
    assert_eq!(m["availableResources"]["cpuMillis"], 2500);
    assert_eq!(m["totalResources"]["gpus"], 1);
    assert_eq!(m["containersAllocated"], 1);
    assert_eq!(m["totalNodes"], 2);
    assert_eq!(m["activeNodes"], 1);
    assert_eq!(m["lostNodes"], 1);
    assert_eq!(m["unhealthyNodes"], 0);
    assert_eq!(m["decommissioningNodes"], 0);
}

#[tokio::test]
async fn nodes_list_and_one_node_and_unknown_node() {
    let addr = serve(Fake::populated()).await;
    let v = get(addr, "/ws/v1/cluster/nodes").await.json();
    let nodes = v["nodes"]["node"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let a = &nodes[0];
    assert_eq!(a["id"], "node-a");
    assert_eq!(a["rack"], "r1");
    assert_eq!(a["state"], "RUNNING");
    assert_eq!(a["nodeHostName"], "node-a");
    assert_eq!(a["numContainers"], 1);
    assert_eq!(a["usedMemoryMB"], 2048);
    assert_eq!(a["availMemoryMB"], 6144);
    assert_eq!(a["usedVirtualCores"], 1);
    assert_eq!(a["availableVirtualCores"], 2);
    assert_eq!(a["totalResource"]["memory"], 8192);
    assert_eq!(a["totalResource"]["vCores"], 4);
    assert_eq!(a["usedResource"]["cpuMillis"], 1500);
    assert_eq!(a["labels"]["zone"], "a");
    assert_eq!(a["gpus"][0]["model"], "A100");
    assert_eq!(nodes[1]["state"], "LOST");

    let one = get(addr, "/ws/v1/cluster/nodes/node-b").await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["node"]["id"], "node-b");

    get(addr, "/ws/v1/cluster/nodes/node-z").await.assert_error(404, "NotFoundException", "node-z");
}

#[tokio::test]
async fn nodes_are_filtered_by_yarns_states_and_an_unknown_state_is_refused() {
    let fake = Fake::populated();
    fake.state().nodes.push(NodeInfo::new(
        "node-c",
        "r2",
        NodeState::Decommissioning,
        res(2000, 4 * GIB, 0),
        res(0, 0, 0),
    ));
    let addr = serve(fake).await;
    let ids = |v: Value| -> Vec<String> {
        v["nodes"]["node"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap().to_owned()).collect()
    };
    for (query, want) in [
        ("", &["node-a", "node-b", "node-c"][..]),
        ("?states=RUNNING", &["node-a"]),
        ("?states=lost", &["node-b"]),
        ("?states=running,%20LOST", &["node-a", "node-b"]),
        ("?states=DECOMMISSIONING", &["node-c"]),
        ("?states=draining", &["node-c"]),
        ("?state=LOST", &["node-b"]),
        ("?states=UNHEALTHY", &[]),
        // YARN's states that no gantry node is in: known, so not refused, and matching nothing.
        ("?states=NEW,DECOMMISSIONED,REBOOTED,SHUTDOWN", &[]),
        ("?states=SHUTDOWN,lost", &["node-b"]),
        ("?states=", &["node-a", "node-b", "node-c"]),
    ] {
        let r = get(addr, &format!("/ws/v1/cluster/nodes{query}")).await;
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        assert_eq!(ids(r.json()), want, "{query}");
    }
    get(addr, "/ws/v1/cluster/nodes?states=RUNNING,SLEEPING").await.assert_error(
        400,
        "BadRequestException",
        "unknown node state `SLEEPING`",
    );
    get(addr, "/ws/v1/cluster/nodes?colour=red").await.assert_error(400, "BadRequestException", "colour");
}

#[tokio::test]
async fn submit_is_accepted_with_location_and_the_app_can_be_read_back() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    let r = send_json(addr, "POST", "/ws/v1/cluster/apps", &valid_submission().to_string()).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.header("location"), Some("/ws/v1/cluster/apps/10"));
    assert_eq!(r.json(), json!({"application-id": 10}));

    {
        let s = fake.state();
        let sub = s.submitted.last().unwrap();
        assert_eq!(sub.queue.as_deref(), Some("root.default"), "the queue is normalised to a full path");
        assert_eq!(sub.name, "hello");
        assert_eq!(sub.max_app_attempts, 2);
        let c = &sub.containers[0];
        assert_eq!(c.resource, ResourceRequest { cpu_millis: 500, memory_bytes: 256 << 20, gpus: 0 });
        assert_eq!((c.count, c.gang, c.rack_affinity), (3, true, RackAffinity::Required));
        assert_eq!(c.command, ["echo", "hello"]);
        assert_eq!(c.env["GREETING"], "hi");
    }

    let v = get(addr, "/ws/v1/cluster/apps/10").await.json();
    let app = &v["app"];
    assert_eq!(app["id"], 10);
    assert_eq!(app["name"], "hello");
    assert_eq!(app["user"], "alice");
    assert_eq!(app["queue"], "root.default");
    assert_eq!(app["state"], "ACCEPTED");
    assert_eq!(app["finalStatus"], "UNDEFINED");
    for field in [
        "progress",
        "diagnostics",
        "startedTime",
        "finishedTime",
        "elapsedTime",
        "allocatedMB",
        "allocatedVCores",
        "runningContainers",
    ] {
        assert!(app.get(field).is_some(), "app lacks YARN's `{field}`: {app}");
    }
    assert_eq!(app["requests"][0]["count"], 3);
    assert_eq!(app["requests"][0]["resource"]["cpuMillis"], 500);
    assert_eq!(app["requests"][0]["command"], json!(["echo", "hello"]));
    assert!(app["requests"][0].get("env").is_none(), "the environment is not echoed back");

    let s = get(addr, "/ws/v1/cluster/apps/10/state").await;
    assert_eq!((s.status, s.json()), (200, json!({"state": "ACCEPTED"})));
}

#[tokio::test]
async fn a_submission_with_only_the_required_fields_gets_defaults() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    let body = json!({"containers": [{"resource": {"cpuMillis": 1000, "memoryBytes": 1048576}, "command": ["true"]}]});
    let r = send_json(addr, "POST", "/ws/v1/cluster/apps", &body.to_string()).await;
    assert_eq!(r.status, 202, "{}", r.text());
    let s = fake.state();
    let sub = s.submitted.last().unwrap();
    assert_eq!((sub.queue.as_deref(), sub.user.as_deref(), sub.priority), (None, None, 0));
    assert_eq!((sub.containers[0].count, sub.containers[0].gang), (1, false));
    assert_eq!(sub.containers[0].resource.gpus, 0);
}

#[tokio::test]
async fn new_application_reserves_an_id_that_a_submission_can_use_once() {
    let addr = serve(Fake::populated()).await;
    let r = http(addr, "POST", "/ws/v1/cluster/apps/new-application", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["application-id"], 10);
    assert_eq!(v["maximum-resource-capability"]["memory"], 8192);
    assert_eq!(v["maximum-resource-capability"]["vCores"], 4);

    let mut body = valid_submission();
    body["application-id"] = json!(10);
    let r = send_json(addr, "POST", "/ws/v1/cluster/apps", &body.to_string()).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["application-id"], 10);
    send_json(addr, "POST", "/ws/v1/cluster/apps", &body.to_string()).await.assert_error(
        409,
        "ConflictException",
        "already used",
    );
}

#[tokio::test]
async fn apps_are_filtered_by_state_queue_user_and_limit() {
    let addr = serve(Fake::populated()).await;
    let ids = |v: Value| -> Vec<u64> {
        v["apps"]["app"].as_array().unwrap().iter().map(|a| a["id"].as_u64().unwrap()).collect()
    };
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps").await.json()), [1, 2, 3, 4]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?states=RUNNING").await.json()), [1]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?states=running,finished").await.json()), [1, 2]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?state=KILLED").await.json()), [4]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?queue=root.default").await.json()), [2, 3]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?queue=prod").await.json()), [1], "a leaf's own name");
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?user=alice").await.json()), [1, 3]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?user=alice&states=ACCEPTED").await.json()), [3]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?limit=2").await.json()), [1, 2]);
    assert_eq!(ids(get(addr, "/ws/v1/cluster/apps?user=nobody").await.json()), Vec::<u64>::new());
    assert_eq!(get(addr, "/ws/v1/cluster/apps?user=nobody").await.json(), json!({"apps": {"app": []}}));
    assert_eq!(
        ids(get(addr, "/ws/v1/cluster/apps?queue=&user=").await.json()),
        [1, 2, 3, 4],
        "empty = no filter"
    );

    get(addr, "/ws/v1/cluster/apps?states=SLEEPING").await.assert_error(
        400,
        "BadRequestException",
        "SLEEPING",
    );
    get(addr, "/ws/v1/cluster/apps?limit=-1").await.assert_error(400, "BadRequestException", "limit");
    get(addr, "/ws/v1/cluster/apps?limit=0").await.assert_error(400, "BadRequestException", "limit");
    get(addr, "/ws/v1/cluster/apps?colour=red").await.assert_error(400, "BadRequestException", "colour");
}

#[test]
fn rejected_apps_read_as_failed() {
    assert_eq!(AppState::from_abi(gantry_sdk::abi::GANTRY_APP_REJECTED), Some(AppState::Failed));
    assert_eq!(FinalStatus::of(AppState::Failed), FinalStatus::Failed);
    assert_eq!(AppState::from_abi(gantry_sdk::abi::GANTRY_APP_RUNNING), Some(AppState::Running));
    assert_eq!(AppState::from_abi(99), None);
    assert_eq!(NodeState::from_abi(gantry_sdk::abi::GANTRY_NODE_DRAINING), Some(NodeState::Decommissioning));
}

#[tokio::test]
async fn unknown_and_malformed_app_ids() {
    let addr = serve(Fake::populated()).await;
    get(addr, "/ws/v1/cluster/apps/999").await.assert_error(404, "NotFoundException", "999");
    get(addr, "/ws/v1/cluster/apps/999/state").await.assert_error(404, "NotFoundException", "999");
    get(addr, "/ws/v1/cluster/apps/application_1_2").await.assert_error(
        400,
        "BadRequestException",
        "not a number",
    );
    get(addr, "/ws/v1/cluster/apps/-1/state").await.assert_error(400, "BadRequestException", "not a number");
}

// ----- routes: kill ----------------------------------------------------------------------------

#[tokio::test]
async fn put_killed_kills_and_answers_with_the_state() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    // A running app: 202, still RUNNING while its containers stop.
    let r = send_json(addr, "PUT", "/ws/v1/cluster/apps/1/state", r#"{"state":"KILLED"}"#).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json(), json!({"state": "RUNNING"}));
    assert_eq!(r.header("location"), Some("/ws/v1/cluster/apps/1/state"));
    // An accepted app with nothing running: killed at once (lower case is accepted).
    let r = send_json(addr, "PUT", "/ws/v1/cluster/apps/3/state", r#"{"state":"killed"}"#).await;
    assert_eq!((r.status, r.json()), (202, json!({"state": "KILLED"})));
    // Already killed: 200 and nothing asked of the backend.
    let r = send_json(addr, "PUT", "/ws/v1/cluster/apps/4/state", r#"{"state":"KILLED"}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"state": "KILLED"})));
    assert_eq!(fake.state().killed, [1, 3]);
}

#[tokio::test]
async fn node_state_drains_and_undrains_and_refuses_bad_requests() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    let path = "/ws/v1/cluster/nodes/node-a/state";
    let r = get(addr, path).await;
    assert_eq!((r.status, r.json()), (200, json!({"state": "RUNNING"})));
    let r = send_json(addr, "PUT", path, r#"{"state":"DECOMMISSIONING"}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"state": "DECOMMISSIONING"})));
    assert_eq!(fake.state().nodes[0].state, NodeState::Decommissioning);
    // gantry's own word, any case, is accepted too; undrain with RUNNING.
    let r = send_json(addr, "PUT", path, r#"{"state":"draining"}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"state": "DECOMMISSIONING"})));
    let r = send_json(addr, "PUT", path, r#"{"state":"RUNNING"}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"state": "RUNNING"})));
    // Refused, and nothing changes.
    send_json(addr, "PUT", path, r#"{"state":"LOST"}"#).await.assert_error(
        400,
        "BadRequestException",
        "DECOMMISSIONING",
    );
    send_json(addr, "PUT", path, r#"{"state":"RUNNING","x":1}"#).await.assert_error(
        422,
        "UnprocessableEntityException",
        "x",
    );
    send_json(addr, "PUT", "/ws/v1/cluster/nodes/ghost/state", r#"{"state":"DECOMMISSIONING"}"#)
        .await
        .assert_error(404, "NotFoundException", "ghost");
    get(addr, "/ws/v1/cluster/nodes/ghost/state").await.assert_error(404, "NotFoundException", "ghost");
    fake.state().persist_fails = true;
    send_json(addr, "PUT", path, r#"{"state":"DECOMMISSIONING"}"#).await.assert_error(
        503,
        "ServiceUnavailableException",
        "nothing changed",
    );
    assert_eq!(fake.state().nodes[0].state, NodeState::Running);
}

#[tokio::test]
async fn removable_nodes_filters_by_idle_time_and_refuses_bad_durations() {
    let addr = serve(Fake::populated()).await;
    let r = get(addr, "/ws/v1/cluster/removable-nodes").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let nodes = &r.json()["removableNodes"]["node"];
    assert_eq!(nodes[0]["id"], "node-c");
    assert_eq!(nodes[0]["state"], "RUNNING");
    assert_eq!(nodes[0]["idleSeconds"], 1200.0);
    assert_eq!(nodes[0]["totalResource"]["memoryBytes"], 4 * GIB);
    let r = get(addr, "/ws/v1/cluster/removable-nodes?idle=10m").await;
    assert_eq!(r.json()["removableNodes"]["node"].as_array().map(Vec::len), Some(1));
    let r = get(addr, "/ws/v1/cluster/removable-nodes?idle=30m").await;
    assert_eq!(r.json()["removableNodes"]["node"], json!([]));
    get(addr, "/ws/v1/cluster/removable-nodes?idle=soon").await.assert_error(
        400,
        "BadRequestException",
        "soon",
    );
    get(addr, "/ws/v1/cluster/removable-nodes?since=1").await.assert_error(
        400,
        "BadRequestException",
        "since",
    );
}

#[tokio::test]
async fn put_state_refuses_other_states_ended_apps_and_unknown_apps() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    let path = "/ws/v1/cluster/apps/1/state";
    send_json(addr, "PUT", path, r#"{"state":"RUNNING"}"#).await.assert_error(
        400,
        "BadRequestException",
        "only KILLED",
    );
    send_json(addr, "PUT", path, r#"{"state":"FINISHED"}"#).await.assert_error(
        400,
        "BadRequestException",
        "FINISHED",
    );
    send_json(addr, "PUT", path, r#"{"state":"KILLED","why":"x"}"#).await.assert_error(
        422,
        "UnprocessableEntityException",
        "why",
    );
    send_json(addr, "PUT", path, r#"{"state":"#).await.assert_error(
        400,
        "BadRequestException",
        "malformed JSON",
    );
    send_json(addr, "PUT", "/ws/v1/cluster/apps/2/state", r#"{"state":"KILLED"}"#).await.assert_error(
        409,
        "ConflictException",
        "FINISHED",
    );
    send_json(addr, "PUT", "/ws/v1/cluster/apps/999/state", r#"{"state":"KILLED"}"#).await.assert_error(
        404,
        "NotFoundException",
        "999",
    );
    assert!(fake.state().killed.is_empty(), "no refused request reached the backend");
    assert_eq!(fake.state().apps[0].state, AppState::Running);
}

// ----- routes: refused submissions change nothing ----------------------------------------------

#[tokio::test]
async fn malformed_mistyped_and_absurd_submissions_are_refused_with_a_message() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    let path = "/ws/v1/cluster/apps";
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut v = valid_submission();
        edit(&mut v);
        v.to_string()
    };
    let cases: Vec<(String, u16, &str, &str)> = vec![
        ("{\"containers\": [".into(), 400, "BadRequestException", "malformed JSON"),
        ("".into(), 400, "BadRequestException", "malformed JSON"),
        ("[1, 2]".into(), 422, "UnprocessableEntityException", "invalid request body"),
        (with(&|v| v["colour"] = json!("red")), 422, "UnprocessableEntityException", "colour"),
        (
            with(&|v| v["containers"][0]["resource"]["memory"] = json!(512)),
            422,
            "UnprocessableEntityException",
            "unknown field `memory`",
        ),
        (
            with(&|v| v["containers"][0]["resource"]["memoryBytes"] = json!(-1)),
            422,
            "UnprocessableEntityException",
            "containers[0].resource.memoryBytes",
        ),
        (
            with(&|v| v["containers"][0]["resource"]["cpuMillis"] = json!(1.5)),
            422,
            "UnprocessableEntityException",
            "cpuMillis",
        ),
        (
            with(&|v| v["containers"][0]["resource"]["cpuMillis"] = json!(5)),
            422,
            "UnprocessableEntityException",
            "containers[0].resource.cpuMillis: 5 millicores",
        ),
        (
            with(&|v| v["containers"][0]["resource"]["cpuMillis"] = json!(1u64 << 40)),
            422,
            "UnprocessableEntityException",
            "cpuMillis",
        ),
        (
            with(&|v| v["containers"][0]["resource"]["memoryBytes"] = json!(1u64 << 60)),
            422,
            "UnprocessableEntityException",
            "memoryBytes",
        ),
        (
            with(&|v| v["containers"][0]["resource"]["gpus"] = json!(100_000)),
            422,
            "UnprocessableEntityException",
            "gpus",
        ),
        (
            with(&|v| v["containers"][0]["command"] = json!([])),
            422,
            "UnprocessableEntityException",
            "command",
        ),
        (
            with(&|v| v["containers"][0]["command"] = json!([""])),
            422,
            "UnprocessableEntityException",
            "command[0]",
        ),
        (
            with(&|v| v["containers"][0]["command"] = json!(["echo", "a\u{0}b"])),
            422,
            "UnprocessableEntityException",
            "command[1]",
        ),
        (
            with(&|v| {
                v["containers"][0].as_object_mut().unwrap().remove("command");
            }),
            422,
            "UnprocessableEntityException",
            "command",
        ),
        (with(&|v| v["containers"][0]["count"] = json!(0)), 422, "UnprocessableEntityException", "count"),
        (
            with(&|v| v["containers"][0]["count"] = json!(1_000_000)),
            422,
            "UnprocessableEntityException",
            "count",
        ),
        (with(&|v| v["containers"] = json!([])), 422, "UnprocessableEntityException", "containers"),
        (
            with(&|v| v["max-app-attempts"] = json!(1000)),
            422,
            "UnprocessableEntityException",
            "max-app-attempts",
        ),
        (with(&|v| v["priority"] = json!(1u64 << 40)), 422, "UnprocessableEntityException", "priority"),
        (
            with(&|v| v["application-name"] = json!("x".repeat(300))),
            422,
            "UnprocessableEntityException",
            "application-name",
        ),
        (with(&|v| v["queue"] = json!("root..prod")), 422, "UnprocessableEntityException", "queue"),
        (with(&|v| v["user"] = json!("")), 422, "UnprocessableEntityException", "user"),
        (
            with(&|v| v["containers"][0]["env"] = json!({"A=B": "c"})),
            422,
            "UnprocessableEntityException",
            "env",
        ),
        (
            with(&|v| v["containers"][0]["labels"] = json!({"": "x"})),
            422,
            "UnprocessableEntityException",
            "labels",
        ),
        (
            with(&|v| v["containers"][0]["rackAffinity"] = json!("sometimes")),
            422,
            "UnprocessableEntityException",
            "rackAffinity",
        ),
        (
            with(&|v| v["containers"][0]["expectedMs"] = json!(1u64 << 50)),
            422,
            "UnprocessableEntityException",
            "expectedMs",
        ),
        (with(&|v| v["application-id"] = json!(0)), 422, "UnprocessableEntityException", "application-id"),
        // The backend's own refusal passes through with its status.
        (with(&|v| v["queue"] = json!("nowhere")), 422, "UnprocessableEntityException", "root.nowhere"),
    ];
    for (body, status, exception, needle) in &cases {
        let r = send_json(addr, "POST", path, body).await;
        r.assert_error(*status, exception, needle);
    }
    // Not JSON at all.
    let r = http(
        addr,
        "POST",
        path,
        &[("Content-Type", "text/plain")],
        valid_submission().to_string().as_bytes(),
    )
    .await;
    r.assert_error(415, "UnsupportedMediaTypeException", "Content-Type: application/json");
    let r = http(addr, "POST", path, &[], valid_submission().to_string().as_bytes()).await;
    r.assert_error(415, "UnsupportedMediaTypeException", "application/json");

    let s = fake.state();
    assert!(s.submitted.is_empty(), "a refused submission reached the backend");
    assert_eq!(s.apps.len(), 4);
}

#[tokio::test]
async fn bidi_and_invisible_characters_in_names_are_refused_naming_the_character() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut v = valid_submission();
        edit(&mut v);
        v.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (
            with(&|v| v["application-name"] = json!("evil\u{202E}gpj.exe")),
            "application-name: contains U+202E (RIGHT-TO-LEFT OVERRIDE)",
        ),
        (with(&|v| v["user"] = json!("ad\u{200B}min")), "user: contains U+200B (ZERO WIDTH SPACE)"),
        (with(&|v| v["queue"] = json!("pr\u{2066}od")), "queue: contains U+2066 (LEFT-TO-RIGHT ISOLATE)"),
        (
            with(&|v| v["containers"][0]["labels"] = json!({"kind\u{200D}": "k9"})),
            "contains U+200D (ZERO WIDTH JOINER)",
        ),
        (
            with(&|v| v["containers"][0]["labels"] = json!({"kind": "k9\u{FEFF}"})),
            "contains U+FEFF (ZERO WIDTH NO-BREAK SPACE)",
        ),
        (
            with(&|v| v["containers"][0]["preferredLabels"] = json!({"gpu": "\u{061C}a100"})),
            "containers[0].preferredLabels",
        ),
        (with(&|v| v["application-name"] = json!("tag\u{E0041}")), "contains U+E0041 (a TAG character)"),
        (
            with(&|v| v["application-name"] = json!("two\nlines")),
            "contains U+000A (LINE FEED, a control character)",
        ),
    ];
    for (body, needle) in &cases {
        send_json(addr, "POST", "/ws/v1/cluster/apps", body).await.assert_error(
            422,
            "UnprocessableEntityException",
            needle,
        );
    }
    assert!(fake.state().submitted.is_empty(), "a refused submission reached the backend");
    // Other scripts, emoji and their variation selectors are names like any other.
    let ok = with(&|v| v["application-name"] = json!("数据 Zoë ❤️"));
    assert_eq!(send_json(addr, "POST", "/ws/v1/cluster/apps", &ok).await.status, 202);
}

#[tokio::test]
async fn an_oversized_body_gets_413_and_changes_nothing() {
    let fake = Fake::populated();
    let addr = serve(fake.clone()).await;
    // Valid JSON, padded past the limit with spaces: only its size is wrong.
    let mut body = valid_submission().to_string().into_bytes();
    body.resize(api::MAX_BODY_BYTES + 1, b' ');
    let r = http(addr, "POST", "/ws/v1/cluster/apps", &[("Content-Type", "application/json")], &body).await;
    r.assert_error(413, "PayloadTooLargeException", &api::MAX_BODY_BYTES.to_string());
    // Just under the limit is fine.
    body.truncate(api::MAX_BODY_BYTES);
    let r = http(addr, "POST", "/ws/v1/cluster/apps", &[("Content-Type", "application/json")], &body).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(fake.state().submitted.len(), 1);
}

#[tokio::test]
async fn a_backend_that_cannot_persist_gives_503_and_records_nothing() {
    let fake = Fake::populated();
    fake.state().persist_fails = true;
    let addr = serve(fake.clone()).await;
    let r = send_json(addr, "POST", "/ws/v1/cluster/apps", &valid_submission().to_string()).await;
    r.assert_error(503, "ServiceUnavailableException", "cannot persist");
    assert!(fake.state().submitted.is_empty());
    assert_eq!(get(addr, "/ws/v1/cluster/apps").await.json()["apps"]["app"].as_array().unwrap().len(), 4);
}

// ----- routes: methods and paths ---------------------------------------------------------------

#[tokio::test]
async fn wrong_methods_get_405_and_unknown_paths_404_both_in_json() {
    let addr = serve(Fake::populated()).await;
    for (method, path) in [
        ("DELETE", "/ws/v1/cluster/apps"),
        ("POST", "/ws/v1/cluster/info"),
        ("PUT", "/ws/v1/cluster/nodes"),
        ("GET", "/ws/v1/cluster/apps/new-application"),
        ("POST", "/ws/v1/cluster/apps/1/state"),
        ("DELETE", "/ws/v1/cluster/apps/1"),
    ] {
        let r = http(addr, method, path, &[], b"").await;
        r.assert_error(405, "MethodNotAllowedException", method);
        assert!(r.header("allow").is_some_and(|a| !a.is_empty()), "405 without Allow: {:?}", r.headers);
    }
    get(addr, "/ws/v1/cluster/nope").await.assert_error(404, "NotFoundException", "/ws/v1/cluster/nope");
    get(addr, "/ws/v1/cluster/apps/").await.assert_error(404, "NotFoundException", "trailing slash");
    get(addr, "/metrics/x").await.assert_error(404, "NotFoundException", "/ws/v1/cluster");
}

// ----- routes: scheduler and logs --------------------------------------------------------------

#[tokio::test]
async fn scheduler_reports_the_engines_queue_tree_in_yarns_shape() {
    let addr = serve(Fake::populated()).await;
    let v = get(addr, "/ws/v1/cluster/scheduler").await.json();
    let info = &v["scheduler"]["schedulerInfo"];
    assert_eq!(info["type"], "capacityScheduler");
    assert_eq!(info["queueName"], "root");
    assert_eq!(info["capacity"], 100.0);
    assert_eq!(info["maxCapacity"], 100.0);
    assert_eq!(info["usedCapacity"], 25.0, "1 of 4 cores is the dominant share");
    assert_eq!(info["totalResources"]["cpuMillis"], 4000);
    let queues = info["queues"]["queue"].as_array().unwrap();
    let by_name =
        |n: &str| queues.iter().find(|q| q["queueName"] == n).unwrap_or_else(|| panic!("{n} in {v}"));
    let prod = by_name("prod");
    assert_eq!(prod["queuePath"], "root.prod");
    assert_eq!(prod["type"], "capacitySchedulerLeafQueueInfo");
    assert_eq!(prod["leaf"], true);
    assert_eq!(prod["state"], "RUNNING");
    assert_eq!(prod["capacity"], 70.0);
    assert_eq!(prod["maxCapacity"], 100.0);
    assert_eq!(prod["absoluteCapacity"], 70.0);
    assert_eq!(prod["absoluteMaxCapacity"], 100.0);
    assert_eq!(prod["absoluteUsedCapacity"], 25.0);
    assert_eq!(prod["usedCapacity"], 35.71, "1000 of the 2800 guaranteed millicores");
    assert_eq!(prod["numApplications"], 1);
    assert_eq!(prod["numActiveApplications"], 1);
    assert_eq!(prod["numPendingApplications"], 0);
    assert_eq!(prod["resourcesUsed"]["cpuMillis"], 1000);
    assert_eq!(prod["resourcesUsed"]["memory"], 1024);
    assert_eq!(prod["guaranteedResources"]["cpuMillis"], 2800);
    assert!(prod.get("queues").is_none(), "a leaf has no children");
    let dev = by_name("dev");
    assert_eq!(dev["capacity"], 30.0);
    assert_eq!(dev["maxCapacity"], 50.0);
    assert_eq!(dev["absoluteMaxCapacity"], 50.0);
    assert_eq!(dev["usedCapacity"], 0.0);
    assert_eq!(dev["maximumResources"]["cpuMillis"], 2000);
}

#[test]
fn nested_queues_nest_with_multiplied_absolute_capacities() {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: "root.prod".into(), guaranteed: 0.5, maximum: 0.8 },
            QueueSpec { path: "root.prod.etl".into(), guaranteed: 0.4, maximum: 0.5 },
            QueueSpec { path: "root.prod.web".into(), guaranteed: 0.6, maximum: 1.0 },
            QueueSpec { path: "root.dev".into(), guaranteed: 0.5, maximum: 1.0 },
        ],
        ..EngineConfig::default()
    };
    let engine = Engine::builtin(config).unwrap();
    let st = engine.state();
    let info = SchedulerInfo::from_queues(
        st.queues(),
        |r| st.str(r).to_owned(),
        st.cluster(),
        |_| QueueApps::default(),
    );
    let prod = info.queues.queue.iter().find(|q| q.queue_name == "prod").unwrap();
    assert!(!prod.leaf);
    assert_eq!(prod.kind, None);
    let children = &prod.queues.as_ref().unwrap().queue;
    let names: Vec<&str> = children.iter().map(|q| q.queue_path.as_str()).collect();
    assert_eq!(names, ["root.prod.etl", "root.prod.web"]);
    assert_eq!(children[0].absolute_capacity, 20.0);
    assert_eq!(children[0].absolute_max_capacity, 40.0);
    let flat: Vec<&str> = prod.flatten().iter().map(|q| q.queue_path.as_str()).collect();
    assert_eq!(flat, ["root.prod", "root.prod.etl", "root.prod.web"]);
    // No nodes: no capacity, and no NaN or infinity in the answer.
    assert_eq!(info.used_capacity, 0.0);
    assert!(serde_json::to_string(&info).unwrap().contains("\"usedCapacity\":0.0"));
}

#[tokio::test]
async fn logs_come_back_as_text_with_tail_and_clear_errors() {
    let addr = serve(Fake::populated()).await;
    let r = get(addr, "/ws/v1/cluster/containers/100/logs/stdout").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.text(), "hello from 100\nsecond line\n");
    assert_eq!(get(addr, "/ws/v1/cluster/containers/100/logs/stderr").await.text(), "warning: 100\n");
    assert_eq!(get(addr, "/ws/v1/cluster/containers/100/logs/stdout?tail=12").await.text(), "second line\n");
    assert_eq!(get(addr, "/ws/v1/cluster/containers/100/logs/stdout?tail=0").await.text(), "");

    let base = "/ws/v1/cluster/containers";
    get(addr, &format!("{base}/100/logs/syslog")).await.assert_error(404, "NotFoundException", "stdout");
    get(addr, &format!("{base}/100/logs/stdout?tail=lots")).await.assert_error(
        400,
        "BadRequestException",
        "tail",
    );
    get(addr, &format!("{base}/100/logs/stdout?tail=99999999999")).await.assert_error(
        400,
        "BadRequestException",
        "tail",
    );
    get(addr, &format!("{base}/100/logs/stdout?lines=3")).await.assert_error(
        400,
        "BadRequestException",
        "lines",
    );
    get(addr, &format!("{base}/x/logs/stdout")).await.assert_error(
        400,
        "BadRequestException",
        "not a number",
    );
    get(addr, &format!("{base}/555/logs/stdout")).await.assert_error(404, "NotFoundException", "555");
}

// ----- the typed client ------------------------------------------------------------------------

#[tokio::test]
async fn the_typed_client_reads_what_the_router_writes() {
    let addr = serve(Fake::populated()).await;
    let client = api::client::Client::new(&format!("{addr}")).unwrap();
    assert_eq!(client.base_url(), format!("http://{addr}"));
    assert_eq!(client.info().await.unwrap().ha_state, "ACTIVE");
    assert_eq!(client.metrics().await.unwrap().apps_submitted, 4);
    assert_eq!(client.nodes().await.unwrap().len(), 2);
    assert_eq!(client.node("node-a").await.unwrap().labels["zone"], "a");
    let filter = AppFilter { states: vec![AppState::Running], ..AppFilter::default() };
    assert_eq!(client.apps(&filter).await.unwrap().len(), 1);
    assert_eq!(client.app_state(2).await.unwrap(), AppState::Finished);
    let new = client.new_application().await.unwrap();
    let mut sub: SubmitApp = serde_json::from_value(valid_submission()).unwrap();
    sub.application_id = Some(new.application_id);
    assert_eq!(client.submit(&sub).await.unwrap(), new.application_id);
    let outcome = client.kill(new.application_id).await.unwrap();
    assert!(outcome.accepted);
    assert_eq!(outcome.state, AppState::Killed);
    assert!(!client.kill(new.application_id).await.unwrap().accepted);
    assert_eq!(client.scheduler().await.unwrap().queue_name, "root");
    assert_eq!(&client.logs(100, LogFile::Stderr, None).await.unwrap()[..], b"warning: 100\n");

    let e = client.app(999).await.unwrap_err();
    assert_eq!(e.status(), Some(404));
    assert!(e.to_string().contains("999"), "{e}");
    for bad in ["https://x:1", "ftp://x", "http://x:1/?q=1", "http://"] {
        assert!(api::client::Client::new(bad).is_err(), "{bad}");
    }
}
