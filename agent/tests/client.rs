//! The agent's scheduler client against a real tonic server on 127.0.0.1: registration and full
//! resync, commands both ways, refused launches, reconnects that resend unacknowledged exits,
//! and shutdown. Timeouts are failure guards only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_agent::client::{
    AgentEvent, Backoff, Client, ClientError, ClientOptions, LiveContainer, LiveState, RegistrationReport,
    SchedulerCommand, StatusReport,
};
use gantry_agent::executor::{LogRead, LogStream};
use gantry_agent::launch_spec::{self, SpecError};
use gantry_agent::model::{
    ClusterId, ContainerExit, ContainerKey, ContainerUsage, ExitReason, GpuInfo, HostUsage, LaunchSpec,
    NodeReport, Resources,
};
mod common;

use common::{GUARD, Server};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// The agent side: the client running in a task, with the core's ends of its channels.
struct Agent {
    events: mpsc::Sender<AgentEvent>,
    commands: mpsc::Receiver<SchedulerCommand>,
    latencies: mpsc::UnboundedReceiver<Duration>,
    live: Arc<Mutex<Vec<LiveContainer>>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ClientError>>,
}

fn node() -> NodeReport {
    NodeReport {
        name: "n1".into(),
        rack: "r7".into(),
        labels: vec![("gpu".into(), "a100".into()), ("zone".into(), "b".into())],
        capacity: Resources { cpu_millis: 16_000, memory_bytes: 64 << 30, gpus: 1 },
        allocatable: Resources { cpu_millis: 15_500, memory_bytes: 63 << 30, gpus: 1 },
        usage: HostUsage::default(),
        gpus: vec![GpuInfo {
            index: 0,
            uuid: "GPU-1234".into(),
            model: "NVIDIA A100-SXM4-80GB".into(),
            memory_total_bytes: 80 << 30,
            memory_used_bytes: 0,
            utilization_percent: 0,
            mig: false,
            containers: vec![],
        }],
        gpu_note: None,
        containers: vec![],
    }
}

impl Agent {
    fn start(options: ClientOptions) -> Agent {
        let (events, events_rx) = mpsc::channel(64);
        let (commands_tx, commands) = mpsc::channel(64);
        let (latency_tx, latencies) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let live = Arc::new(Mutex::new(vec![LiveContainer {
            key: ContainerKey::legacy(41),
            app_id: 4,
            state: LiveState::Running,
            started_at_ms: 1_000,
        }]));
        let snapshot_live = live.clone();
        let client = Client::new(options, move || RegistrationReport {
            node: node(),
            containers: snapshot_live.lock().expect("live list").clone(),
            conditions: Vec::new(),
        })
        .on_heartbeat_latency(move |d| {
            let _ = latency_tx.send(d);
        });
        let task = tokio::spawn(client.run(events_rx, commands_tx, async {
            let _ = stopped.await;
        }));
        Agent { events, commands, latencies, live, stop: Some(stop), task }
    }

    fn to(addr: SocketAddr) -> Agent {
        let mut options = ClientOptions::new(format!("http://{addr}"));
        options.backoff = Backoff { base: Duration::from_millis(20), cap: Duration::from_millis(200) };
        Self::start(options)
    }

    async fn send(&self, event: AgentEvent) {
        self.events.send(event).await.expect("client gone");
    }

    async fn command(&mut self) -> SchedulerCommand {
        timeout(GUARD, self.commands.recv()).await.expect("guard: no command").expect("client gone")
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = timeout(GUARD, &mut self.task).await.expect("guard: client did not stop");
        result.expect("client task panicked").expect("client failed");
    }
}

fn exit(container_id: u64, reason: ExitReason) -> ContainerExit {
    exit_of(ClusterId::LEGACY, container_id, reason)
}

fn exit_of(cluster: ClusterId, container_id: u64, reason: ExitReason) -> ContainerExit {
    ContainerExit::new(ContainerKey::new(cluster, container_id), reason, 1_700_000_000_000 + container_id)
}

/// Two scheduler runs' cluster ids.
const OLD: ClusterId = ClusterId::from_bits(0x01d);
const NEW: ClusterId = ClusterId::from_bits(0x2e3);

fn unacked_ids(r: &v1::Register) -> Vec<u64> {
    r.unacked_exits.iter().map(|e| e.container_id).collect()
}

fn good_launch(container_id: u64) -> v1::Launch {
    v1::Launch {
        container_id,
        app_id: 3,
        argv: vec!["/bin/sh".into(), "-c".into(), "echo hi".into()],
        env: [("A".to_string(), "1".to_string()), ("B".to_string(), "x=y".to_string())].into(),
        workdir: "work".into(),
        user: String::new(),
        cpu_millis: 500,
        memory_bytes: 64 << 20,
        gpus: vec![0],
        stdout: String::new(),
        stderr: "logs/err".into(),
        cluster_id: String::new(),
        submitter: "alice".into(),
        max_pids: 64,
        disk_bytes: 5 << 20,
    }
}

#[tokio::test]
async fn registers_first_then_relays_commands_and_events_both_ways() {
    let mut server = Server::start(false).await;
    let mut agent = Agent::to(server.addr);
    let mut s = server.accept().await;

    let r = s.register().await;
    assert_eq!((r.node_name.as_str(), r.rack.as_str()), ("n1", "r7"));
    assert_eq!(r.labels.get("gpu").map(String::as_str), Some("a100"));
    assert_eq!(r.labels.len(), 2);
    assert_eq!(r.capacity, Some(v1::Resources { cpu_millis: 16_000, memory_bytes: 64 << 30, gpus: 1 }));
    assert_eq!(r.allocatable, Some(v1::Resources { cpu_millis: 15_500, memory_bytes: 63 << 30, gpus: 1 }));
    assert_eq!(
        r.gpus,
        vec![v1::Gpu {
            index: 0,
            uuid: "GPU-1234".into(),
            model: "NVIDIA A100-SXM4-80GB".into(),
            memory_total_bytes: 80 << 30,
            mig: false
        }]
    );
    assert_eq!(
        r.containers,
        vec![v1::LiveContainer {
            container_id: 41,
            app_id: 4,
            state: v1::ContainerState::Running as i32,
            started_at_ms: 1_000,
            cluster_id: String::new(),
        }]
    );
    assert!(r.unacked_exits.is_empty());
    assert!(r.reports_cluster_ids, "it names containers by cluster id");
    assert_eq!(r.agent_version, env!("CARGO_PKG_VERSION"));
    assert!(r.agent_started_at_ms > 0);

    s.send(Down::Registered(v1::Registered { heartbeat_interval_ms: 500, cluster_id: NEW.to_wire() })).await;
    assert_eq!(
        agent.command().await,
        SchedulerCommand::Registered { heartbeat_interval: Some(Duration::from_millis(500)) }
    );

    // A launch arrives as a checked LaunchSpec.
    s.send(Down::Launch(good_launch(7))).await;
    let want = LaunchSpec {
        container_id: 7,
        cluster: ClusterId::LEGACY,
        app_id: 3,
        argv: vec!["/bin/sh".into(), "-c".into(), "echo hi".into()],
        env: vec![("A".into(), "1".into()), ("B".into(), "x=y".into())],
        workdir: Some("work".into()),
        user: None,
        submitter: "alice".into(),
        max_pids: Some(64),
        cpu_millis: 500,
        memory_bytes: 64 << 20,
        gpus: vec![0],
        stdout: None,
        stderr: Some("logs/err".into()),
        disk_bytes: 5 << 20,
    };
    assert_eq!(agent.command().await, SchedulerCommand::Launch(want.clone()));
    // The same id under a cluster id is another container.
    s.send(Down::Launch(v1::Launch { cluster_id: NEW.to_wire(), ..good_launch(7) })).await;
    assert_eq!(agent.command().await, SchedulerCommand::Launch(LaunchSpec { cluster: NEW, ..want }));

    // Kill: an explicit grace of 0 is not "the default"; each names its container's cluster.
    let kill = |container_id, grace_ms, reason: &str, cluster: ClusterId| {
        Down::Kill(v1::Kill { container_id, grace_ms, reason: reason.into(), cluster_id: cluster.to_wire() })
    };
    s.send(kill(7, Some(0), "test", ClusterId::LEGACY)).await;
    s.send(kill(8, None, "", NEW)).await;
    assert_eq!(
        agent.command().await,
        SchedulerCommand::Kill {
            key: ContainerKey::legacy(7),
            grace: Some(Duration::ZERO),
            reason: "test".into()
        }
    );
    assert_eq!(
        agent.command().await,
        SchedulerCommand::Kill { key: ContainerKey::new(NEW, 8), grace: None, reason: String::new() }
    );

    // Status is numbered and timestamped by the client, usage passed through.
    let report = StatusReport {
        host: HostUsage {
            cpu_cores: 2,
            cpu_usage: 0.25,
            cpu_seconds_total: 1234.5,
            memory_total_bytes: 8 << 30,
            memory_available_bytes: 6 << 30,
            memory_used_bytes: 2 << 30,
        },
        containers: vec![ContainerUsage {
            container_id: 7,
            cluster: NEW,
            cpu_seconds: 1.5,
            memory_working_set_bytes: 10 << 20,
            memory_limit_bytes: 64 << 20,
            processes: 2,
        }],
        gpus: vec![GpuInfo {
            memory_used_bytes: 1 << 30,
            utilization_percent: 42,
            containers: vec![7],
            ..node().gpus[0].clone()
        }],
        conditions: vec![gantry_agent::conditions::NodeCondition {
            kind: gantry_agent::conditions::DISK_PRESSURE,
            reason: "full".into(),
            since_ms: 9,
        }],
    };
    agent.send(AgentEvent::Status(report.clone())).await;
    agent.send(AgentEvent::Status(report)).await;
    let Up::Status(st) = s.recv().await else { panic!("expected Status") };
    assert_eq!(st.seq, 1);
    assert!(st.sent_at_ms > 0);
    let host = st.host.expect("host usage");
    assert_eq!((host.cpu_cores, host.cpu_usage, host.memory_total_bytes), (2, 0.25, 8 << 30));
    assert_eq!(st.containers[0].memory_working_set_bytes, 10 << 20);
    assert_eq!(st.containers[0].processes, 2);
    assert_eq!(
        st.gpus,
        vec![v1::GpuUsage {
            index: 0,
            memory_used_bytes: 1 << 30,
            utilization_percent: 42,
            container_ids: vec![7]
        }]
    );
    assert_eq!(
        st.conditions,
        vec![v1::NodeCondition { r#type: "DiskPressure".into(), reason: "full".into(), since_ms: 9 }]
    );
    let Up::Status(st) = s.recv().await else { panic!("expected Status") };
    assert_eq!(st.seq, 2);

    // StatusAck feeds the heartbeat latency callback, once per acknowledged status.
    s.send(Down::StatusAck(v1::StatusAck { seq: 2 })).await;
    let latency = timeout(GUARD, agent.latencies.recv()).await.expect("guard: no latency").expect("callback");
    assert!(latency < GUARD, "a round trip within this test, got {latency:?}");

    agent.send(AgentEvent::Started { key: ContainerKey::new(NEW, 7), started_at_ms: 1234 }).await;
    assert_eq!(
        s.recv().await,
        Up::ContainerStarted(v1::ContainerStarted {
            container_id: 7,
            started_at_ms: 1234,
            cluster_id: NEW.to_wire()
        })
    );

    agent.send(AgentEvent::Exited(exit_of(NEW, 7, ExitReason::Exited { code: 3 }))).await;
    let Up::ContainerExited(e) = s.recv().await else { panic!("expected ContainerExited") };
    assert_eq!((e.container_id, e.reason, e.exit_code, e.signal), (7, v1::ExitReason::Exited as i32, 3, 0));
    assert_eq!(e.finished_at_ms, 1_700_000_000_007);
    assert_eq!(e.cluster_id, NEW.to_wire());

    agent
        .send(AgentEvent::LaunchFailed { key: ContainerKey::new(NEW, 9), message: "no such user".into() })
        .await;
    assert_eq!(
        s.recv().await,
        Up::LaunchFailed(v1::LaunchFailed {
            container_id: 9,
            message: "no such user".into(),
            cluster_id: NEW.to_wire()
        })
    );

    // A message this agent does not know (a newer scheduler's) is skipped, the stream stays up.
    s.tx.send(Ok(v1::SchedulerMessage { msg: None })).await.expect("stream");
    s.send(Down::Ping(v1::Ping { sent_at_ms: 555 })).await;
    assert_eq!(s.recv().await, Up::Pong(v1::Pong { ping_sent_at_ms: 555 }));

    // An acknowledgement names the cluster too: the legacy container 7 has no pending exit.
    s.send(Down::AckExit(v1::AckExit { container_id: 7, cluster_id: String::new() })).await;
    s.send(Down::AckExit(v1::AckExit { container_id: 7, cluster_id: NEW.to_wire() })).await;
    assert_eq!(agent.command().await, SchedulerCommand::AckExit { key: ContainerKey::new(NEW, 7) });
    assert!(agent.commands.try_recv().is_err(), "nothing else was delivered");

    agent.stop().await;
}

#[tokio::test]
async fn invalid_launches_are_answered_with_launch_failed_and_never_reach_the_core() {
    let mut server = Server::start(false).await;
    let mut agent = Agent::to(server.addr);
    let (mut s, _) = server.handshake().await;
    assert!(matches!(agent.command().await, SchedulerCommand::Registered { .. }));

    let bad: Vec<(v1::Launch, &str)> = vec![
        (v1::Launch { memory_bytes: -1, ..good_launch(20) }, "negative memory_bytes: -1"),
        (v1::Launch { cpu_millis: -500, ..good_launch(21) }, "negative cpu_millis: -500"),
        (v1::Launch { argv: vec![], ..good_launch(22) }, "argv is empty"),
        (v1::Launch { argv: vec![String::new(), "x".into()], ..good_launch(23) }, "argv[0] is empty"),
        (v1::Launch { workdir: "../../etc".into(), ..good_launch(24) }, "workdir \"../../etc\" escapes"),
        (v1::Launch { stdout: "/etc/passwd".into(), ..good_launch(25) }, "absolute"),
        (v1::Launch { stderr: "logs/../../x".into(), ..good_launch(26) }, "`..`"),
        (v1::Launch { env: [("A=B".to_string(), "1".to_string())].into(), ..good_launch(27) }, "A=B"),
        (v1::Launch { argv: vec!["/bin/true\0x".into()], ..good_launch(28) }, "NUL"),
        (v1::Launch { gpus: vec![0, 1, 0], ..good_launch(29) }, "GPU 0 is listed more than once"),
        (v1::Launch { container_id: 0, ..good_launch(0) }, "container id 0"),
        (v1::Launch { cluster_id: "../x".into(), ..good_launch(31) }, "cluster id \"../x\" is not"),
        (
            v1::Launch { cluster_id: NEW.to_wire().to_uppercase(), ..good_launch(32) },
            "32 lowercase hex digits",
        ),
    ];
    for (launch, want) in bad {
        let (id, cluster_id) = (launch.container_id, launch.cluster_id.clone());
        s.send(Down::Launch(launch)).await;
        let Up::LaunchFailed(f) = s.recv().await else { panic!("expected LaunchFailed for {id}") };
        assert_eq!((f.container_id, f.cluster_id), (id, cluster_id), "the failure names the launch");
        assert!(f.message.contains(want), "container {id}: {:?} lacks {want:?}", f.message);
    }
    // Commands are delivered in order: had any bad launch got through, it would come first.
    s.send(Down::Launch(good_launch(30))).await;
    match agent.command().await {
        SchedulerCommand::Launch(spec) => assert_eq!(spec.container_id, 30),
        other => panic!("expected the good launch, got {other:?}"),
    }
    assert!(agent.commands.try_recv().is_err(), "nothing else was delivered");
    agent.stop().await;
}

#[tokio::test]
async fn log_reads_reach_the_core_and_their_answers_go_up_the_stream() {
    let mut server = Server::start(false).await;
    let mut agent = Agent::to(server.addr);
    let (mut s, _) = server.handshake().await;
    assert!(matches!(agent.command().await, SchedulerCommand::Registered { .. }));

    let read = |request_id, container_id, stream: i32, tail_bytes| {
        Down::ReadLog(v1::ReadLog { request_id, container_id, stream, tail_bytes, cluster_id: String::new() })
    };
    s.send(read(5, 7, v1::LogStream::Stderr as i32, Some(3))).await;
    s.send(read(6, 7, v1::LogStream::Stdout as i32, None)).await;
    let of_new = v1::ReadLog {
        request_id: 10,
        container_id: 7,
        stream: v1::LogStream::Stdout as i32,
        tail_bytes: None,
        cluster_id: NEW.to_wire(),
    };
    s.send(Down::ReadLog(of_new.clone())).await;
    let key = ContainerKey::legacy(7);
    assert_eq!(
        agent.command().await,
        SchedulerCommand::ReadLog { request_id: 5, key, stream: LogStream::Stderr, tail: Some(3) }
    );
    assert_eq!(
        agent.command().await,
        SchedulerCommand::ReadLog { request_id: 6, key, stream: LogStream::Stdout, tail: None },
        "an absent tail is the whole file, not zero bytes"
    );
    assert_eq!(
        agent.command().await,
        SchedulerCommand::ReadLog {
            request_id: 10,
            key: ContainerKey::new(NEW, 7),
            stream: LogStream::Stdout,
            tail: None
        },
        "another cluster's container 7"
    );
    let data = LogRead { data: b"abc".to_vec(), file_size_bytes: 10 };
    agent.send(AgentEvent::Log { request_id: 5, outcome: Ok(data) }).await;
    assert_eq!(
        s.recv().await,
        Up::LogChunk(v1::LogChunk {
            request_id: 5,
            data: b"abc".to_vec(),
            file_size_bytes: 10,
            error: String::new()
        })
    );
    agent.send(AgentEvent::Log { request_id: 6, outcome: Err("no stdout for container 7".into()) }).await;
    assert_eq!(
        s.recv().await,
        Up::LogChunk(v1::LogChunk {
            request_id: 6,
            error: "no stdout for container 7".into(),
            ..Default::default()
        })
    );
    // An error must never read as success, even when the core gave no words.
    agent.send(AgentEvent::Log { request_id: 7, outcome: Err(String::new()) }).await;
    let Up::LogChunk(c) = s.recv().await else { panic!("expected LogChunk") };
    assert!(!c.error.is_empty());

    // Reads the core could not act on are answered by the client and never reach it.
    s.send(read(8, 0, v1::LogStream::Stdout as i32, None)).await;
    let Up::LogChunk(c) = s.recv().await else { panic!("expected LogChunk") };
    assert_eq!(c.request_id, 8);
    assert!(c.error.contains("container id 0"), "{}", c.error);
    for stream in [v1::LogStream::Unspecified as i32, 9] {
        s.send(read(9, 7, stream, None)).await;
        let Up::LogChunk(c) = s.recv().await else { panic!("expected LogChunk") };
        assert!(c.error.contains(&format!("unknown log stream {stream}")), "{}", c.error);
    }
    s.send(Down::ReadLog(v1::ReadLog { request_id: 11, cluster_id: "x".into(), ..of_new })).await;
    let Up::LogChunk(c) = s.recv().await else { panic!("expected LogChunk") };
    assert_eq!(c.request_id, 11);
    assert!(c.error.contains("cluster id \"x\""), "{}", c.error);
    assert!(agent.commands.try_recv().is_err(), "nothing else was delivered");
    agent.stop().await;
}

#[test]
fn launch_from_wire_names_the_problem() {
    assert_eq!(
        launch_spec::from_wire(v1::Launch { memory_bytes: i64::MIN, ..good_launch(1) }),
        Err(SpecError::Negative { field: "memory_bytes", value: i64::MIN })
    );
    assert_eq!(
        launch_spec::from_wire(v1::Launch { argv: vec![], ..good_launch(1) }),
        Err(SpecError::EmptyArgv)
    );
    assert!(matches!(
        launch_spec::from_wire(v1::Launch { workdir: "a/./../../b".into(), ..good_launch(1) }),
        Err(SpecError::PathEscape { field: "workdir", .. })
    ));
    let too_many = vec!["x".to_string(); launch_spec::MAX_LAUNCH_ENTRIES + 1];
    assert!(matches!(
        launch_spec::from_wire(v1::Launch { argv: too_many, ..good_launch(1) }),
        Err(SpecError::TooMany { field: "argv", .. })
    ));
    // Inside the container directory is fine, `.` included; limits of 0 mean "none".
    let spec = launch_spec::from_wire(v1::Launch {
        workdir: "./a/b".into(),
        stdout: "out.log".into(),
        cpu_millis: 0,
        memory_bytes: 0,
        ..good_launch(1)
    })
    .expect("valid launch");
    assert_eq!((spec.workdir.as_deref(), spec.stdout.as_deref()), (Some("./a/b"), Some("out.log")));
    assert_eq!((spec.cpu_millis, spec.memory_bytes), (0, 0));
}

#[tokio::test]
async fn reconnects_and_resends_unacknowledged_exits_until_acked() {
    let mut server = Server::start(false).await;
    let mut agent = Agent::to(server.addr);
    let (mut s, r) = server.handshake().await;
    assert!(r.unacked_exits.is_empty());
    assert!(matches!(agent.command().await, SchedulerCommand::Registered { .. }));

    // Exit A reaches the scheduler, which drops the stream without acknowledging it.
    agent.send(AgentEvent::Exited(exit(11, ExitReason::MemoryLimit))).await;
    let Up::ContainerExited(a) = s.recv().await else { panic!("expected ContainerExited") };
    assert_eq!((a.container_id, a.reason), (11, v1::ExitReason::MemoryLimit as i32));
    drop(s);
    // Exit B happens while the agent is disconnected; the core's live list still names A
    // (a snapshot racing the exit): the unacknowledged exit must win.
    agent.send(AgentEvent::Exited(exit(12, ExitReason::KilledByRequest))).await;
    agent.live.lock().expect("live").push(LiveContainer {
        key: ContainerKey::legacy(11),
        app_id: 4,
        state: LiveState::Running,
        started_at_ms: 2_000,
    });

    // Every Register from now on carries A; B joins once the client has seen it (if it saw it
    // only after building a Register, it follows on that stream and the next Register has it).
    let (s, r) = loop {
        let mut s = server.accept().await;
        let r = s.register().await;
        assert!(unacked_ids(&r).contains(&11), "exit A resent: {:?}", unacked_ids(&r));
        assert!(!r.containers.iter().any(|c| c.container_id == 11), "an exited container is not live");
        if unacked_ids(&r).contains(&12) {
            break (s, r);
        }
    };
    assert_eq!(unacked_ids(&r), vec![11, 12]);
    let b = &r.unacked_exits[1];
    assert_eq!((b.reason, b.exit_code), (v1::ExitReason::KilledByRequest as i32, 137));
    assert_eq!(r.containers.iter().map(|c| c.container_id).collect::<Vec<_>>(), vec![41]);

    // Acknowledge A, then drop the stream: the next Register carries only B.
    s.send(Down::Registered(v1::Registered::default())).await;
    s.send(Down::AckExit(v1::AckExit { container_id: 11, cluster_id: String::new() })).await;
    assert!(matches!(agent.command().await, SchedulerCommand::Registered { .. }));
    assert_eq!(agent.command().await, SchedulerCommand::AckExit { key: ContainerKey::legacy(11) });
    drop(s);
    let (s, r) = server.handshake().await;
    assert_eq!(unacked_ids(&r), vec![12]);

    // Acknowledge B: nothing is resent any more.
    s.send(Down::AckExit(v1::AckExit { container_id: 12, cluster_id: String::new() })).await;
    assert!(matches!(agent.command().await, SchedulerCommand::Registered { .. }));
    assert_eq!(agent.command().await, SchedulerCommand::AckExit { key: ContainerKey::legacy(12) });
    drop(s);
    let (_s, r) = server.handshake().await;
    assert!(r.unacked_exits.is_empty(), "{:?}", unacked_ids(&r));
    agent.stop().await;
}

#[tokio::test]
async fn the_same_id_in_two_clusters_is_two_containers_in_register_and_acknowledgements() {
    let mut server = Server::start(false).await;
    let mut agent = Agent::to(server.addr);
    agent.live.lock().expect("live").push(LiveContainer {
        key: ContainerKey::new(NEW, 41),
        app_id: 9,
        state: LiveState::Starting,
        started_at_ms: 0,
    });
    agent.send(AgentEvent::Exited(exit_of(OLD, 5, ExitReason::Lost))).await;
    agent.send(AgentEvent::Exited(exit_of(NEW, 5, ExitReason::Exited { code: 0 }))).await;
    let exits = |r: &v1::Register| -> Vec<(u64, String)> {
        let mut v: Vec<_> = r.unacked_exits.iter().map(|e| (e.container_id, e.cluster_id.clone())).collect();
        v.sort();
        v
    };
    let (s, r) = loop {
        let (s, r) = server.handshake().await;
        if r.unacked_exits.len() == 2 {
            break (s, r);
        }
    };
    assert_eq!(exits(&r), vec![(5, OLD.to_wire()), (5, NEW.to_wire())]);
    let mut live: Vec<(u64, String)> =
        r.containers.iter().map(|c| (c.container_id, c.cluster_id.clone())).collect();
    live.sort();
    assert_eq!(live, vec![(41, String::new()), (41, NEW.to_wire())], "both containers 41 are listed");
    // The new cluster's acknowledgement leaves the old cluster's exit of the same id pending.
    s.send(Down::AckExit(v1::AckExit { container_id: 5, cluster_id: NEW.to_wire() })).await;
    let acked = loop {
        match agent.command().await {
            SchedulerCommand::Registered { .. } => {} // one per handshake above
            other => break other,
        }
    };
    assert_eq!(acked, SchedulerCommand::AckExit { key: ContainerKey::new(NEW, 5) });
    drop(s);
    let (_s, r) = server.handshake().await;
    assert_eq!(exits(&r), vec![(5, OLD.to_wire())]);
    agent.stop().await;
}

#[tokio::test]
async fn keeps_retrying_while_the_scheduler_is_down_and_registers_when_it_is_up() {
    // A port with nothing listening on it (yet).
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = probe.local_addr().expect("addr");
    drop(probe);
    let mut agent = Agent::to(addr);
    agent.send(AgentEvent::Exited(exit(5, ExitReason::Lost))).await;
    agent.send(AgentEvent::LaunchFailed { key: ContainerKey::legacy(6), message: "bad user".into() }).await;
    // Let it fail a few times: starting the server now or later must make no difference.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let listener = TcpListener::bind(addr).await.expect("rebind the port");
    let mut server = Server::serve(listener, false);
    let (mut s, r) = server.handshake().await;
    assert_eq!(unacked_ids(&r), vec![5]);
    assert_eq!(r.unacked_exits[0].reason, v1::ExitReason::Lost as i32);
    // A launch failure from the outage follows the Register.
    assert_eq!(
        s.recv().await,
        Up::LaunchFailed(v1::LaunchFailed {
            container_id: 6,
            message: "bad user".into(),
            cluster_id: String::new()
        })
    );
    assert!(matches!(agent.command().await, SchedulerCommand::Registered { .. }));
    agent.stop().await;
}

#[tokio::test]
async fn shutdown_stops_the_client_connected_or_waiting_to_reconnect() {
    // Connected: stopping ends the stream too.
    let mut server = Server::start(false).await;
    let agent = Agent::to(server.addr);
    let (mut s, _) = server.handshake().await;
    agent.stop().await;
    let end = timeout(GUARD, s.inbound.message()).await.expect("guard: stream still open");
    assert!(!matches!(end, Ok(Some(_))), "no message after shutdown: {end:?}");

    // Waiting out an hour-long backoff after a refused stream: stopping does not wait for it.
    let mut server = Server::start(true).await;
    let mut options = ClientOptions::new(format!("http://{}", server.addr));
    options.backoff = Backoff { base: Duration::from_secs(3600), cap: Duration::from_secs(3600) };
    let agent = Agent::start(options);
    timeout(GUARD, server.refused.recv()).await.expect("guard: agent did not try").expect("server");
    // Give the refusal time to reach the client, so that it is (almost surely) in its pause. Not
    // an assertion: a slower machine only makes this case test the opening stream instead.
    tokio::time::sleep(Duration::from_millis(500)).await;
    agent.stop().await;

    // The core going away (its event sender dropped) stops the client as well.
    let mut server = Server::start(false).await;
    let mut agent = Agent::to(server.addr);
    let _session = server.handshake().await;
    let (closed, _) = mpsc::channel(1);
    drop(std::mem::replace(&mut agent.events, closed));
    let result = timeout(GUARD, &mut agent.task).await.expect("guard: client did not stop");
    result.expect("client task panicked").expect("client failed");
}
