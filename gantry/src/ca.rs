//! The cluster's certificate authority, as `gantry cert` makes it: the CA itself, the
//! scheduler's server certificate and each node's client certificate. The daemons only load what
//! this writes ([`gantry_scheduler::tls`] says what each certificate is used for), so the
//! certificate generator lives here, with the tool, and not in the daemon.
//!
//! Keys are ECDSA P-256 (rcgen's default), written with mode 0600 and never overwritten: a
//! second `gantry cert ca` into the same directory would otherwise silently orphan every
//! certificate issued before.

use gantry_scheduler::tls::{TlsError, read_pem};
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The CA's certificate inside a CA directory.
pub const CA_CERT: &str = "ca.pem";
/// The CA's private key inside a CA directory.
pub const CA_KEY: &str = "ca.key";

/// Why a CA or a certificate could not be made.
#[derive(Debug, Error)]
pub enum CaError {
    /// A file could not be read or written, or the CA's files hold nothing usable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A file exists that would be overwritten.
    #[error("{0} already exists; remove it first if you really mean to replace it")]
    Exists(PathBuf),
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
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Tls(TlsError::Io { path: path.to_owned(), source })
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
fn write_new(path: &Path, contents: &str, secret: bool) -> Result<(), CaError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true).mode(if secret { 0o600 } else { 0o644 });
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CaError::Exists(path.to_owned())
        } else {
            CaError::Tls(TlsError::Io { path: path.to_owned(), source: e })
        }
    })?;
    file.write_all(contents.as_bytes()).and_then(|()| file.sync_all()).map_err(io_err(path))
}

/// Creates a cluster CA in `dir` (`ca.pem`, `ca.key`), valid for `days`. Refuses to replace one.
pub fn create_ca(dir: &Path, name: &str, days: u32) -> Result<(PathBuf, PathBuf), CaError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(CaError::Exists(p.clone()));
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
fn dns_name(name: &str) -> Result<(), CaError> {
    rustls_pki_types::ServerName::try_from(name.to_owned()).map(|_| ()).map_err(|e| CaError::Name {
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
) -> Result<(PathBuf, PathBuf), CaError> {
    let first = names
        .first()
        .ok_or_else(|| CaError::Name { name: String::new(), message: "no name given".into() })?;
    if role == Role::Node && names.len() != 1 {
        return Err(CaError::Name {
            name: names.join(","),
            message: "a node certificate names exactly one node".into(),
        });
    }
    for n in names {
        dns_name(n)?;
    }
    let pem = |path: &Path, e: rcgen::Error| TlsError::Pem { path: path.to_owned(), message: e.to_string() };
    let ca_key_path = ca_dir.join(CA_KEY);
    let ca_key = rcgen::KeyPair::from_pem(&read_pem(&ca_key_path)?).map_err(|e| pem(&ca_key_path, e))?;
    let ca_cert_path = ca_dir.join(CA_CERT);
    let issuer = rcgen::Issuer::from_ca_cert_pem(&read_pem(&ca_cert_path)?, ca_key)
        .map_err(|e| pem(&ca_cert_path, e))?;
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
            return Err(CaError::Exists(p.clone()));
        }
    }
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)?;
    Ok((cert_path, key_path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_scheduler::tls::{ServerTls, certificate_names_node, read_certificates};

    /// What the CA issues is what the daemon accepts: the node certificate names its node (and
    /// only it, case included), the scheduler's loads with its key, a wrong key is refused.
    #[test]
    fn a_ca_issues_certificates_that_name_their_node_and_refuses_to_be_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca");
        create_ca(&ca, "test", 30).expect("ca");
        assert!(matches!(create_ca(&ca, "test", 30), Err(CaError::Exists(_))), "never overwrite a CA");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(ca.join(CA_KEY)).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the CA key is private");

        let out = dir.path().join("certs");
        let (cert, key) = issue(&ca, Role::Node, &["node-7".into()], 30, &out).expect("node cert");
        let chain = read_certificates(&cert).expect("pem");
        assert!(certificate_names_node(Some(&chain), "node-7").is_ok());
        let other = certificate_names_node(Some(&chain), "node-8").expect_err("another node");
        assert!(other.contains("node-8"), "{other}");
        // Node names are case-sensitive: `NODE-7` is another node, which this certificate does
        // not name (DNS matching would say it does).
        let upper = certificate_names_node(Some(&chain), "NODE-7").expect_err("another node by case");
        assert!(upper.contains("NODE-7") && upper.contains("case"), "{upper}");
        assert!(certificate_names_node(None, "node-7").is_err());
        assert!(matches!(issue(&ca, Role::Node, &["node-7".into()], 30, &out), Err(CaError::Exists(_))));

        // A scheduler certificate for its names loads with its key; a wrong key (the node's,
        // which reads as a key) is refused.
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
