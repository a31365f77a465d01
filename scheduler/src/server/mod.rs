//! The scheduler daemon: the engine's core task ([`core`]), the agents' gRPC endpoint
//! ([`agents`]), and [`serve`], which starts them from a configuration.

pub mod agents;
pub mod core;

use crate::config::SchedulerConfig;
use crate::{BuildError, build_engine};
use std::future::Future;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;

/// Why the daemon could not run.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The engine or its plugins could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// An address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("agent endpoint: {0}")]
    Grpc(#[from] tonic::transport::Error),
}

/// A running daemon's addresses, and a handle on its core (for embedding and tests).
#[derive(Debug, Clone)]
pub struct Bound {
    /// The agents' gRPC endpoint.
    pub agent_addr: std::net::SocketAddr,
    /// The core.
    pub core: core::CoreHandle,
}

/// Runs the daemon until `shutdown` completes. `on_bound` is told the addresses once listening.
pub async fn serve(
    config: &SchedulerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound),
) -> Result<(), ServerError> {
    let engine = build_engine(config)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (core, core_task) = core::spawn(
        core::Core::new(engine),
        Duration::from_millis(config.server.cycle_interval_ms),
        Duration::from_millis(config.server.node_timeout_ms),
        stopped(stop_rx.clone()),
    );
    let agent_listener = tokio::net::TcpListener::bind(&config.server.agent_listen)
        .await
        .map_err(|source| ServerError::Listen { addr: config.server.agent_listen.clone(), source })?;
    let agent_addr = agent_listener
        .local_addr()
        .map_err(|source| ServerError::Listen { addr: config.server.agent_listen.clone(), source })?;
    on_bound(Bound { agent_addr, core: core.clone() });
    let grpc = tonic::transport::Server::builder()
        .add_service(agents::AgentEndpoint::new(core.clone()).into_service())
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(agent_listener),
            stopped(stop_rx.clone()),
        );
    let grpc_task = tokio::spawn(grpc);
    shutdown.await;
    let _ = stop_tx.send(true);
    let _ = core_task.await;
    match grpc_task.await {
        Ok(r) => r?,
        Err(e) => tracing::error!(error = %e, "agent endpoint task"),
    }
    Ok(())
}
