//! The agents' endpoint of a real daemon over a socket on 127.0.0.1: a registration whose node
//! name, rack or labels break the rule for names — bidirectional and zero-width characters
//! included, which would let `gantry nodes` lie — is refused with the character named, and no
//! node is added.

use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_client::AgentServiceClient;
use gantry_scheduler::config::SchedulerConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokio_stream::wrappers::ReceiverStream;

/// A daemon on loopback with its store under `dir`, running until the test ends.
async fn start_daemon(dir: &Path) -> gantry_scheduler::server::Bound {
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        dir.join("data").display().to_string()
    );
    let config =
        SchedulerConfig::from_str_at(&toml, Path::new("<test>"), PathBuf::from(".")).expect("config");
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        gantry_scheduler::server::serve(&config, std::future::pending(), move |b| {
            let _ = bound_tx.send(b);
        })
        .await
        .expect("daemon");
    });
    bound_rx.await.expect("daemon bound")
}

#[tokio::test]
async fn registrations_with_bidi_or_invisible_characters_are_refused_naming_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bound = start_daemon(dir.path()).await;

    let register = |name: &str, rack: &str, labels: &[(&str, &str)]| v1::Register {
        node_name: name.into(),
        rack: rack.into(),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
        capacity: Some(v1::Resources { cpu_millis: 4000, memory_bytes: 8 << 30, gpus: 0 }),
        allocatable: Some(v1::Resources { cpu_millis: 4000, memory_bytes: 8 << 30, gpus: 0 }),
        ..Default::default()
    };
    for (register, needle) in [
        (register("node\u{202E}1", "r1", &[]), "invalid node name: contains U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        (register("node-1", "r\u{200B}1", &[]), "invalid node rack: contains U+200B (ZERO WIDTH SPACE)"),
        (register("node-1", "r1", &[("kind", "k9\u{2066}")]), "contains U+2066 (LEFT-TO-RIGHT ISOLATE)"),
    ] {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(v1::AgentMessage { msg: Some(Up::Register(register)) }).await.expect("queued");
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", bound.agent_addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let mut client = AgentServiceClient::new(channel);
        let status = client.connect(ReceiverStream::new(rx)).await.expect_err("the registration is refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(needle), "{:?} lacks {needle:?}", status.message());
    }
    let nodes = bound.core.read(|c| c.engine().state().nodes().len()).await.expect("core");
    assert_eq!(nodes, 0, "no refused registration added a node");
}

/// One agent per node name, over the real endpoint: while `n1`'s agent is live another instance
/// is refused with `ALREADY_EXISTS` (an agent without an instance id too), a malformed id with
/// `INVALID_ARGUMENT`, and the same instance replaces the stream (a restart).
#[tokio::test]
async fn a_live_nodes_name_is_refused_to_other_instances_and_kept_for_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bound = start_daemon(dir.path()).await;
    let url = format!("http://{}", bound.agent_addr);
    // Opens a stream registering `n1` with `instance`; keeps the request side open with the
    // answer so that the stream stays live.
    let open = |instance: &'static str| {
        let url = url.clone();
        async move {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            let register = v1::Register {
                node_name: "n1".into(),
                allocatable: Some(v1::Resources { cpu_millis: 1000, memory_bytes: 1 << 30, gpus: 0 }),
                instance_id: instance.into(),
                ..Default::default()
            };
            tx.send(v1::AgentMessage { msg: Some(Up::Register(register)) }).await.expect("queued");
            let channel = tonic::transport::Endpoint::from_shared(url)
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
            let answer = AgentServiceClient::new(channel).connect(ReceiverStream::new(rx)).await;
            (answer, tx)
        }
    };
    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";
    let (first, _first_tx) = open(A).await;
    let mut first = first.expect("the first agent registers").into_inner();
    assert!(matches!(first.message().await, Ok(Some(v1::SchedulerMessage { msg: Some(_) }))));
    for (instance, code, needle) in [
        (B, tonic::Code::AlreadyExists, "node `n1` is held by another live agent"),
        ("", tonic::Code::AlreadyExists, "sends no instance id"),
        ("NOT-HEX", tonic::Code::InvalidArgument, "is not 32 lowercase hex digits"),
    ] {
        let (answer, _tx) = open(instance).await;
        let status = answer.expect_err("refused");
        assert_eq!(status.code(), code, "{instance:?}: {status:?}");
        assert!(status.message().contains(needle), "{instance:?}: {}", status.message());
    }
    // The same instance (a restarted agent) takes the stream over; the old one is ended.
    let (again, _again_tx) = open(A).await;
    again.expect("the same instance is accepted");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Ok(Some(_)) = first.message().await {}
    })
    .await;
    assert!(ended.is_ok(), "the replaced stream ends");
    let nodes = bound.core.read(|c| c.engine().state().nodes().len()).await.expect("core");
    assert_eq!(nodes, 1);
}
