//! The scheduler daemon: the engine's core task ([`core`]), the agents' gRPC endpoint
//! ([`agents`]), and [`serve`], which starts them from a configuration.

pub mod agents;
pub mod backend;
pub mod core;
mod pruner;

use crate::config::SchedulerConfig;
use crate::metrics::SchedulerMetrics;
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
    /// The durable state could not be opened or read.
    #[error("store {path}: {source}")]
    Store {
        /// The database file.
        path: std::path::PathBuf,
        /// Why.
        source: crate::store::StoreError,
    },
    /// The tokens could not be read.
    #[error("security: {0}")]
    Security(String),
    /// The daemon would listen beyond loopback without authentication.
    #[error(
        "{0}: anyone who can reach it could submit or join. Configure [security] tokens_file and join_token_file, or set [security] insecure = true (gantry-scheduler --insecure) on a trusted network"
    )]
    Insecure(String),
    /// The data directory could not be created.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A running daemon's addresses, and a handle on its core (for embedding and tests).
#[derive(Debug, Clone)]
pub struct Bound {
    /// The agents' gRPC endpoint.
    pub agent_addr: std::net::SocketAddr,
    /// The REST API and `/metrics`.
    pub api_addr: std::net::SocketAddr,
    /// The core.
    pub core: core::CoreHandle,
    /// The REST API's tokens and rules, when it has tokens: [`reload_security`] replaces them.
    pub rest_auth: Option<std::sync::Arc<crate::auth::RestAuth>>,
}

/// Puts the tokens file's current contents and `config`'s queue ACLs and accounts in force
/// without a restart (the daemon's `SIGHUP`). Everything is read and checked first: on any error
/// nothing changes. Other settings (addresses, queues, plugins, TLS files) need a restart.
/// Returns how many tokens are now valid.
pub fn reload_security(auth: &crate::auth::RestAuth, config: &SchedulerConfig) -> Result<usize, ServerError> {
    let (tokens, _) = config.credentials().map_err(ServerError::Security)?;
    let tokens = tokens.ok_or_else(|| {
        ServerError::Security(
            "tokens_file is no longer configured: turning authentication off needs a restart".into(),
        )
    })?;
    let policy = crate::auth::Policy {
        acls: config.queue_acls().map_err(ServerError::Security)?,
        accounts: config.accounts().map_err(ServerError::Security)?,
    };
    let count = tokens.len();
    auth.replace(tokens, policy);
    Ok(count)
}

/// `GET /metrics`: the scheduler's metrics, refreshed from the engine at scrape time.
async fn metrics_handler(
    axum::extract::State((core, metrics)): axum::extract::State<(
        core::CoreHandle,
        std::sync::Arc<SchedulerMetrics>,
    )>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let m = metrics.clone();
    let streams = core
        .read(move |c| {
            m.update_from_engine(c.engine());
            m.set_node_conditions(&c.node_conditions());
            c.agents().len() as u64
        })
        .await;
    if let Ok(n) = streams {
        metrics.set_agent_streams(n);
    }
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok());
    match metrics.render(accept) {
        Ok((content_type, body)) => {
            ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Runs the daemon until `shutdown` completes. `on_bound` is told the addresses once listening.
pub async fn serve(
    config: &SchedulerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound),
) -> Result<(), ServerError> {
    let (tokens, join) = config.credentials().map_err(ServerError::Security)?;
    let tls = config.server_tls().map_err(ServerError::Security)?;
    let mutual_tls = tls.as_ref().is_some_and(crate::tls::ServerTls::mutual);
    if !config.security.insecure {
        let mut open = Vec::new();
        if tokens.is_none() && !crate::auth::is_loopback(&config.server.listen) {
            open.push(format!("the REST API would listen on {} without tokens_file", config.server.listen));
        }
        if join.is_none() && !mutual_tls && !crate::auth::is_loopback(&config.server.agent_listen) {
            open.push(format!(
                "the agent endpoint would listen on {} without join_token_file or tls_client_ca_file",
                config.server.agent_listen
            ));
        }
        if !open.is_empty() {
            return Err(ServerError::Insecure(open.join("; and ")));
        }
    }
    if tokens.is_some() && tls.is_none() && !crate::auth::is_loopback(&config.server.listen) {
        tracing::warn!(
            listen = %config.server.listen,
            "REST bearer tokens cross the network in clear: configure [security] tls_cert_file and tls_key_file"
        );
    }
    let policy = crate::auth::Policy {
        acls: config.queue_acls().map_err(ServerError::Security)?,
        accounts: config.accounts().map_err(ServerError::Security)?,
    };
    let rest_auth = tokens.map(|t| std::sync::Arc::new(crate::auth::RestAuth::new(t, policy)));
    let metrics = std::sync::Arc::new(SchedulerMetrics::new());
    let engine = build_engine(config, Some(&metrics))?;
    // Nothing acknowledged is lost: the store is opened (and the engine rebuilt from it) before
    // anything listens.
    let data_dir = config.data_dir();
    std::fs::create_dir_all(&data_dir)
        .map_err(|source| ServerError::DataDir { path: data_dir.clone(), source })?;
    let db = data_dir.join("gantry.db");
    let store =
        crate::store::Store::open(&db).map_err(|source| ServerError::Store { path: db.clone(), source })?;
    let node_timeout = Duration::from_millis(config.server.node_timeout_ms);
    {
        let metrics = metrics.clone();
        store.observe_commits(Box::new(move |took, jobs| metrics.observe_store_commit(took, jobs)));
    }
    let store = std::sync::Arc::new(store);
    let mut core_state = core::Core::recover(engine, std::sync::Arc::clone(&store), node_timeout)
        .map_err(|source| ServerError::Store { path: db.clone(), source })?;
    core_state.set_metrics(metrics.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (core, core_task) = core::spawn(
        core_state,
        Duration::from_millis(config.server.cycle_interval_ms),
        Duration::from_millis(config.server.node_timeout_ms),
        stopped(stop_rx.clone()),
    );
    // Ended applications beyond the retention leave the store in the background.
    let pruner_task = tokio::spawn(pruner::run(
        store,
        config.retention(),
        config.prune_interval(),
        metrics.clone(),
        stop_rx.clone(),
    ));
    let agent_listener = tokio::net::TcpListener::bind(&config.server.agent_listen)
        .await
        .map_err(|source| ServerError::Listen { addr: config.server.agent_listen.clone(), source })?;
    let agent_addr = agent_listener
        .local_addr()
        .map_err(|source| ServerError::Listen { addr: config.server.agent_listen.clone(), source })?;
    let api_listener = tokio::net::TcpListener::bind(&config.server.listen)
        .await
        .map_err(|source| ServerError::Listen { addr: config.server.listen.clone(), source })?;
    let api_addr = api_listener
        .local_addr()
        .map_err(|source| ServerError::Listen { addr: config.server.listen.clone(), source })?;
    let app = crate::api::router(backend::DaemonBackend::new(core.clone()))
        .route("/metrics", axum::routing::get(metrics_handler).with_state((core.clone(), metrics)));
    // With tokens, every request — `/metrics` included — needs one (Prometheus sends it with
    // `authorization: credentials_file`).
    let app = match &rest_auth {
        Some(auth) => {
            app.layer(axum::middleware::from_fn_with_state(auth.clone(), crate::api::routes::require_token))
        }
        None => app,
    };
    // TCP_NODELAY on both endpoints: replies and stream messages are small, and Nagle's
    // algorithm against the peer's delayed ACK holds a small write back for up to 40 ms.
    let api_task = match &tls {
        Some(tls) => {
            let listener = tls
                .rest_listener(api_listener)
                .map_err(|source| ServerError::Listen { addr: config.server.listen.clone(), source })?;
            tokio::spawn(
                axum::serve(listener, app).with_graceful_shutdown(stopped(stop_rx.clone())).into_future(),
            )
        }
        None => {
            let listener = axum::serve::ListenerExt::tap_io(api_listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY on an API connection");
                }
            });
            tokio::spawn(
                axum::serve(listener, app).with_graceful_shutdown(stopped(stop_rx.clone())).into_future(),
            )
        }
    };
    on_bound(Bound { agent_addr, api_addr, core: core.clone(), rest_auth });
    let mut grpc = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        grpc = grpc.tls_config(tls.agent_endpoint())?;
    }
    let grpc = grpc
        .add_service(tonic::service::interceptor::InterceptedService::new(
            agents::AgentEndpoint::new(core.clone()).require_node_certificates(mutual_tls).into_service(),
            move |req: tonic::Request<()>| {
                let header = req.metadata().get("authorization").and_then(|v| v.to_str().ok());
                match &join {
                    Some(j) if !j.admits(header) => {
                        Err(tonic::Status::unauthenticated("the agent's join token is missing or wrong"))
                    }
                    _ => Ok(req),
                }
            },
        ))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(agent_listener).with_nodelay(Some(true)),
            stopped(stop_rx.clone()),
        );
    let grpc_task = tokio::spawn(grpc);
    shutdown.await;
    let _ = stop_tx.send(true);
    let _ = core_task.await;
    // Its round stops after the current chunk; then the store closes with the last reference.
    let _ = pruner_task.await;
    if let Ok(Err(e)) = api_task.await {
        tracing::error!(error = %e, "REST API");
    }
    match grpc_task.await {
        Ok(r) => r?,
        Err(e) => tracing::error!(error = %e, "agent endpoint task"),
    }
    Ok(())
}
