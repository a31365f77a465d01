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

#[tokio::test]
async fn registrations_with_bidi_or_invisible_characters_are_refused_naming_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        dir.path().join("data").display().to_string()
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
    let bound = bound_rx.await.expect("daemon bound");

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
