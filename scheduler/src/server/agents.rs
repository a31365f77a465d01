//! The agents' gRPC endpoint: one bidirectional stream per agent. The first message must be
//! `Register` (a full resync); everything after it — log chunks included — is relayed to the
//! core in order. A registration the core refuses ends the call with a status: `ALREADY_EXISTS`
//! when another live agent holds the node name ([`gantry_controller::node_claim`]), `INVALID_ARGUMENT` when
//! the registration is malformed, `PERMISSION_DENIED` when mutual TLS's certificate names
//! another node.

use super::core::{CoreHandle, Request};
use gantry_controller::node_claim::Refused;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GrpcRequest, Response, Status, Streaming};

/// How long an agent may take to send its `Register` after opening the stream.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages queued towards one agent before the core's sends fail (the agent is not reading).
const OUTGOING_QUEUE: usize = 4096;

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct AgentEndpoint {
    core: CoreHandle,
    next_stream: Arc<AtomicU64>,
    /// Mutual TLS: a registration must name the node its client certificate names.
    node_certificates: bool,
}

impl AgentEndpoint {
    /// A service relaying to `core`.
    pub fn new(core: CoreHandle) -> Self {
        AgentEndpoint { core, next_stream: Arc::new(AtomicU64::new(1)), node_certificates: false }
    }

    /// With mutual TLS: refuses a registration whose node name its client certificate does not
    /// carry, so a node's key cannot be used to pose as another node (and take its work).
    pub fn require_node_certificates(mut self, on: bool) -> Self {
        self.node_certificates = on;
        self
    }

    /// As a tonic service. Accepts agent messages up to [`gantry_proto::MAX_MESSAGE_BYTES`]:
    /// a full 4 MiB log chunk is larger than tonic's default 4 MiB limit, and a message over
    /// the limit would fail the agent's whole stream, not just the read.
    pub fn into_service(self) -> AgentServiceServer<Self> {
        AgentServiceServer::new(self).max_decoding_message_size(gantry_proto::MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl AgentService for AgentEndpoint {
    type ConnectStream = ReceiverStream<Result<v1::SchedulerMessage, Status>>;

    async fn connect(
        &self,
        request: GrpcRequest<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let peer_certs = request.peer_certs();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Register within 30 s"))??;
        let register = match first.and_then(|m| m.msg) {
            Some(Up::Register(r)) => r,
            _ => return Err(Status::invalid_argument("the first message must be Register")),
        };
        if register.node_name.is_empty() {
            return Err(Status::invalid_argument("Register without a node name"));
        }
        if self.node_certificates {
            crate::tls::certificate_names_node(peer_certs.as_deref().map(Vec::as_slice), &register.node_name)
                .map_err(|why| {
                    tracing::warn!(node = %register.node_name, %why, "agent refused");
                    Status::permission_denied(format!("registration refused: {why}"))
                })?;
        }
        let node = register.node_name.clone();
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(OUTGOING_QUEUE);
        let (reply, accepted) = oneshot::channel();
        self.core
            .send(Request::AgentConnected { register, tx, stream, reply })
            .await
            .map_err(|_| Status::unavailable("scheduler stopping"))?;
        match accepted.await {
            Ok(Ok(())) => {}
            Ok(Err(refused @ Refused::Claimed { .. })) => {
                return Err(Status::already_exists(format!("registration refused: {refused}")));
            }
            Ok(Err(Refused::Invalid(reason))) => {
                return Err(Status::invalid_argument(format!("registration refused: {reason}")));
            }
            Err(_) => return Err(Status::unavailable("scheduler stopping")),
        }
        tracing::info!(%node, stream, "agent registered");
        let core = self.core.clone();
        tokio::spawn(async move {
            loop {
                match inbound.message().await {
                    Ok(Some(v1::AgentMessage { msg: Some(msg) })) => {
                        if core.send(Request::AgentMessage { node: node.clone(), stream, msg }).await.is_err()
                        {
                            break;
                        }
                    }
                    Ok(Some(v1::AgentMessage { msg: None })) => {} // a newer agent's message: skip
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(%node, error = %e, "agent stream failed");
                        break;
                    }
                }
            }
            let _ = core.send(Request::AgentDisconnected { node, stream }).await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
