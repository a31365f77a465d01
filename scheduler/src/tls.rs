//! The cluster's own TLS as the daemon uses it: the scheduler's certificate (served on both the
//! agents' endpoint and the REST API), agents' client certificates, each naming one node, so
//! that an agent can only register as the node its certificate names (mutual TLS, as Nomad's
//! `verify_https_client` / Slurm's auth plugins bind a daemon to a host), and the clients' trust
//! in the cluster CA. This module only loads and checks certificates; `gantry cert` (the `gantry`
//! crate's `ca` module) makes the CA and issues them, so the daemon does not link a certificate
//! generator.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long a TLS handshake on the REST API may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once on the REST API; more wait (a slow client cannot starve the
/// others of memory).
const MAX_HANDSHAKES: usize = 256;

/// Why certificates could not be loaded.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A PEM file holds nothing usable.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io { path: path.to_owned(), source }
}

/// Reads a PEM file (at most 1 MiB): a certificate chain, a key, or a CA's certificate.
pub fn read_pem(path: &Path) -> Result<String, TlsError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if meta.len() > 1 << 20 {
        return Err(TlsError::Pem { path: path.to_owned(), message: "larger than 1 MiB".into() });
    }
    std::fs::read_to_string(path).map_err(io_err(path))
}

/// Reads the certificates of a PEM file (a chain, leaf first); one at least.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.to_owned(), message: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { path: path.to_owned(), message: "no certificate in it".into() });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(text.as_bytes())
        .map_err(|e| TlsError::Pem { path: path.to_owned(), message: format!("no private key: {e}") })
}

/// The scheduler's TLS material, read and checked once at start (a mismatched key or an
/// unreadable file stops the daemon before it listens, never halfway).
#[derive(Clone)]
pub struct ServerTls {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    client_ca_pem: Option<Vec<u8>>,
    rest: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("mutual", &self.client_ca_pem.is_some()).finish()
    }
}

/// rustls' provider; the one compiled in (ring), named explicitly so that no process-wide
/// default has to be installed.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerTls {
    /// Loads the scheduler's certificate chain and key and, for mutual TLS with agents, the CA
    /// their certificates must chain to.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerTls, TlsError> {
        let chain = read_certificates(cert)?;
        let private = private_key(key)?;
        if let Some(ca) = client_ca {
            read_certificates(ca)?;
        }
        // The REST API does not ask for client certificates: its clients are people and tools
        // with bearer tokens.
        let rest = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| TlsError::Config(format!("{} and {}: {e}", cert.display(), key.display())))?;
        Ok(ServerTls {
            cert_pem: std::fs::read(cert).map_err(io_err(cert))?,
            key_pem: std::fs::read(key).map_err(io_err(key))?,
            client_ca_pem: match client_ca {
                Some(p) => Some(std::fs::read(p).map_err(io_err(p))?),
                None => None,
            },
            rest: Arc::new(rest),
        })
    }

    /// Whether agents must present a certificate (mutual TLS).
    pub fn mutual(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    /// The agents' endpoint's configuration: the scheduler's identity and, for mutual TLS, the
    /// CA agents' certificates must chain to (a client without one is refused in the handshake).
    pub fn agent_endpoint(&self) -> tonic::transport::ServerTlsConfig {
        let config = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem))
            .timeout(HANDSHAKE_TIMEOUT);
        match &self.client_ca_pem {
            Some(ca) => config.client_ca_root(tonic::transport::Certificate::from_pem(ca)),
            None => config,
        }
    }

    /// The REST API's listener: TCP with TLS on top, handshakes off the accept loop.
    pub fn rest_listener(&self, tcp: tokio::net::TcpListener) -> std::io::Result<TlsListener> {
        TlsListener::new(tcp, tokio_rustls::TlsAcceptor::from(self.rest.clone()))
    }
}

/// Checks that the client certificate a stream came with names `node` (as a DNS name, or an IP
/// address, in its subject alternative names). The handshake has already checked it chains to
/// the cluster CA. Names are compared exactly, case included: node names are case-sensitive
/// everywhere else (`node-a` and `NODE-A` are two nodes), so DNS's case-insensitive matching
/// would let one node's certificate register a second node; and no wildcard matches either, so
/// a certificate names exactly the nodes it lists.
pub fn certificate_names_node(peer: Option<&[CertificateDer<'static>]>, node: &str) -> Result<(), String> {
    use x509_parser::extensions::GeneralName;
    let leaf = peer.and_then(|c| c.first()).ok_or("the stream has no client certificate")?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("the client certificate cannot be read: {e}"))?;
    let sans = cert
        .subject_alternative_name()
        .map_err(|e| format!("the client certificate's subject alternative names cannot be read: {e}"))?
        .ok_or("the client certificate names no node (it has no subject alternative names)")?;
    let names: Vec<String> = sans
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some((*d).to_owned()),
            GeneralName::IPAddress(b) => match b.len() {
                4 => <[u8; 4]>::try_from(*b).ok().map(|o| std::net::IpAddr::from(o).to_string()),
                16 => <[u8; 16]>::try_from(*b).ok().map(|o| std::net::IpAddr::from(o).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    if names.iter().any(|n| n == node) {
        Ok(())
    } else {
        Err(format!(
            "the client certificate names {names:?}, not node `{node}` (node names are compared exactly, case included)"
        ))
    }
}

/// A TLS listener for axum: a task accepts TCP connections and runs each handshake in its own
/// task with a deadline, so one slow or silent client never holds up the others.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn new(
        tcp: tokio::net::TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(permit) = permits.clone().acquire_owned().await else { return };
                let (stream, peer) = match tcp.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "REST API accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY on an API connection");
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task ended (the runtime is shutting down): wait to be dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// A rustls client configuration that trusts the cluster CA in `ca` (the CLI's `--ca-cert`).
pub fn client_config(ca: &Path) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certificates(ca)? {
        roots.add(c).map_err(|e| TlsError::Pem { path: ca.to_owned(), message: e.to_string() })?;
    }
    client_config_with(roots)
}

/// A rustls client configuration that trusts no certificate (for a plain-http client, whose
/// connector still wants one).
pub fn client_config_trusting_nothing() -> Result<rustls::ClientConfig, TlsError> {
    client_config_with(rustls::RootCertStore::empty())
}

fn client_config_with(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, TlsError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Certificates the CA issues are loaded and checked in the `gantry` crate's `ca` tests, where
    // the CA is made; here, what needs no certificate.
    #[test]
    fn a_stream_without_a_certificate_or_a_file_without_one_is_refused() {
        let err = certificate_names_node(None, "node-7").expect_err("no certificate");
        assert!(err.contains("no client certificate"), "{err}");
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let err = read_certificates(&empty).expect_err("no certificate in it");
        assert!(err.to_string().contains("no certificate in it"), "{err}");
        let err = ServerTls::load(&empty, &empty, None).expect_err("nothing to serve");
        assert!(matches!(err, TlsError::Pem { .. }), "{err}");
    }
}
