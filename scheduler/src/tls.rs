//! The cluster's own TLS: a certificate authority made by `gantry cert`, the scheduler's
//! certificate (served on both the agents' endpoint and the REST API), and agents' client
//! certificates, each naming one node, so that an agent can only register as the node its
//! certificate names (mutual TLS, as Nomad's `verify_https_client` / Slurm's auth plugins bind a
//! daemon to a host).
//!
//! Keys are ECDSA P-256 (rcgen's default), written with mode 0600 and never overwritten: a
//! second `gantry cert ca` into the same directory would otherwise silently orphan every
//! certificate issued before.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The CA's certificate and key inside a CA directory.
pub const CA_CERT: &str = "ca.pem";
/// The CA's private key inside a CA directory.
pub const CA_KEY: &str = "ca.key";
/// How long a TLS handshake on the REST API may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once on the REST API; more wait (a slow client cannot starve the
/// others of memory).
const MAX_HANDSHAKES: usize = 256;

/// Why certificates could not be made or loaded.
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
    /// A file exists that would be overwritten.
    #[error("{0} already exists; remove it first if you really mean to replace it")]
    Exists(PathBuf),
    /// A PEM file holds nothing usable.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A name cannot go into a certificate.
    #[error("`{name}` cannot be a certificate name: {message}")]
    Name {
        /// The name.
        name: String,
        /// Why.
        message: String,
    },
    /// The certificate could not be made.
    #[error("cannot make the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io { path: path.to_owned(), source }
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The scheduler: a server certificate for its host names and addresses.
    Scheduler,
    /// An agent: a client certificate naming its node.
    Node,
}

/// Validity window starting an hour ago (clocks on a rack differ by seconds, sometimes minutes).
fn validity(days: u32) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - time::Duration::hours(1), now + time::Duration::days(i64::from(days)))
}

/// Writes `contents` to a new file (never over an existing one), mode 0600 for keys.
fn write_new(path: &Path, contents: &str, secret: bool) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true).mode(if secret { 0o600 } else { 0o644 });
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            TlsError::Exists(path.to_owned())
        } else {
            TlsError::Io { path: path.to_owned(), source: e }
        }
    })?;
    file.write_all(contents.as_bytes()).and_then(|()| file.sync_all()).map_err(io_err(path))
}

fn read_text(path: &Path) -> Result<String, TlsError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if meta.len() > 1 << 20 {
        return Err(TlsError::Pem { path: path.to_owned(), message: "larger than 1 MiB".into() });
    }
    std::fs::read_to_string(path).map_err(io_err(path))
}

/// Creates a cluster CA in `dir` (`ca.pem`, `ca.key`), valid for `days`. Refuses to replace one.
pub fn create_ca(dir: &Path, name: &str, days: u32) -> Result<(PathBuf, PathBuf), TlsError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(TlsError::Exists(p.clone()));
        }
    }
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("gantry cluster CA {name}"));
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    (params.not_before, params.not_after) = validity(days);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)?;
    Ok((cert_path, key_path))
}

/// Whether `name` can be a node's or host's DNS name in a certificate (what the agent's
/// registration is checked against).
fn dns_name(name: &str) -> Result<(), TlsError> {
    ServerName::try_from(name.to_owned()).map(|_| ()).map_err(|e| TlsError::Name {
        name: name.to_owned(),
        message: format!("{e} (a host name of letters, digits, `-` and `.`, or an IP address)"),
    })
}

/// Issues a certificate signed by the CA in `ca_dir`: for the scheduler (`names` are its host
/// names and IP addresses, the first is its common name) or for a node (`names` holds exactly
/// its node name). Writes `OUT/<first name>.pem` and `.key`; returns their paths.
pub fn issue(
    ca_dir: &Path,
    role: Role,
    names: &[String],
    days: u32,
    out: &Path,
) -> Result<(PathBuf, PathBuf), TlsError> {
    let first = names
        .first()
        .ok_or_else(|| TlsError::Name { name: String::new(), message: "no name given".into() })?;
    if role == Role::Node && names.len() != 1 {
        return Err(TlsError::Name {
            name: names.join(","),
            message: "a node certificate names exactly one node".into(),
        });
    }
    for n in names {
        dns_name(n)?;
    }
    let ca_key_path = ca_dir.join(CA_KEY);
    let ca_key = rcgen::KeyPair::from_pem(&read_text(&ca_key_path)?)
        .map_err(|e| TlsError::Pem { path: ca_key_path.clone(), message: e.to_string() })?;
    let ca_cert_path = ca_dir.join(CA_CERT);
    let issuer = rcgen::Issuer::from_ca_cert_pem(&read_text(&ca_cert_path)?, ca_key)
        .map_err(|e| TlsError::Pem { path: ca_cert_path.clone(), message: e.to_string() })?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, first.as_str());
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![match role {
        Role::Scheduler => rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        Role::Node => rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    }];
    (params.not_before, params.not_after) = validity(days);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let (cert_path, key_path) = (out.join(format!("{first}.pem")), out.join(format!("{first}.key")));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(TlsError::Exists(p.clone()));
        }
    }
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)?;
    Ok((cert_path, key_path))
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read_text(path)?;
    let certs = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.to_owned(), message: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { path: path.to_owned(), message: "no certificate in it".into() });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = read_text(path)?;
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
        let chain = certs(cert)?;
        let private = private_key(key)?;
        if let Some(ca) = client_ca {
            certs(ca)?;
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
    for c in certs(ca)? {
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

    #[test]
    fn a_ca_issues_certificates_that_name_their_node_and_refuses_to_be_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca");
        create_ca(&ca, "test", 30).expect("ca");
        assert!(matches!(create_ca(&ca, "test", 30), Err(TlsError::Exists(_))), "never overwrite a CA");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(ca.join(CA_KEY)).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the CA key is private");

        let out = dir.path().join("certs");
        let (cert, key) = issue(&ca, Role::Node, &["node-7".into()], 30, &out).expect("node cert");
        let chain = certs(&cert).expect("pem");
        assert!(certificate_names_node(Some(&chain), "node-7").is_ok());
        let other = certificate_names_node(Some(&chain), "node-8").expect_err("another node");
        assert!(other.contains("node-8"), "{other}");
        // Node names are case-sensitive: `NODE-7` is another node, which this certificate does
        // not name (DNS matching would say it does).
        let upper = certificate_names_node(Some(&chain), "NODE-7").expect_err("another node by case");
        assert!(upper.contains("NODE-7") && upper.contains("case"), "{upper}");
        assert!(certificate_names_node(None, "node-7").is_err());
        assert!(private_key(&key).is_ok());
        assert!(matches!(issue(&ca, Role::Node, &["node-7".into()], 30, &out), Err(TlsError::Exists(_))));

        // A scheduler certificate for its names loads with its key; a wrong key is refused.
        let names = ["sched.example".to_owned(), "127.0.0.1".to_owned()];
        let (scert, skey) = issue(&ca, Role::Scheduler, &names, 30, &out).expect("server cert");
        let tls = ServerTls::load(&scert, &skey, Some(&ca.join(CA_CERT))).expect("loads");
        assert!(tls.mutual());
        let err = ServerTls::load(&scert, &key, None).expect_err("the node's key does not match");
        assert!(err.to_string().contains("TLS configuration"), "{err}");

        for bad in [vec![], vec!["two".into(), "names".into()], vec!["not a name".into()]] {
            assert!(issue(&ca, Role::Node, &bad, 30, &out).is_err(), "{bad:?}");
        }
    }
}
