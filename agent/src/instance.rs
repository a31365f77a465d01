//! This agent's instance id: 128 random bits, made once and kept in `<work_root>/agent-instance`
//! (mode 0600), sent in every `Register`. The scheduler lets only one live agent hold a node
//! name: a restarted agent (same work root, same id) is recognised and takes its stream back,
//! while a second agent given the same name (another machine, another work root, another id) is
//! refused until the first has been silent for the node timeout. The id is not a secret against
//! the scheduler's operators, but it is what tells this agent from an impostor that has the join
//! token, so only root reads it.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The file inside the work root.
pub const FILE: &str = "agent-instance";

/// Why the instance id cannot be read or made.
#[derive(Debug, Error)]
pub enum InstanceError {
    /// The file could not be read, written or linked.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds something else than an instance id.
    #[error(
        "{path} does not hold an agent instance id (32 lowercase hex digits). Remove it to make a new one: the scheduler then takes this agent for a new instance, refused while the node's previous agent is live"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// The instance id kept in `work_root`, made (from the kernel's random source) if there is
/// none. Two agents starting at once on one work root end with the same id: the file is linked
/// into place only if absent, and whoever loses reads the winner's.
pub fn load_or_create(work_root: &Path) -> Result<String, InstanceError> {
    let path = work_root.join(FILE);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| InstanceError::Io { path, source }
    };
    match read(&path) {
        Err(InstanceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    let mut bits = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bits))
        .map_err(io(Path::new("/dev/urandom")))?;
    let id: String = bits.iter().map(|b| format!("{b:02x}")).collect();
    // Written in full under a private name, then linked into place: a crash never leaves a
    // half-written id, and an id once there is never replaced.
    let temp = work_root.join(format!(".{FILE}.{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut f| f.write_all(format!("{id}\n").as_bytes()).and_then(|()| f.sync_all()));
    let linked = written.and_then(|()| match std::fs::hard_link(&temp, &path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    let _ = std::fs::remove_file(&temp);
    linked.map_err(io(&path))?;
    if let Ok(dir) = std::fs::File::open(work_root) {
        let _ = dir.sync_all();
    }
    read(&path)
}

fn read(path: &Path) -> Result<String, InstanceError> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(256).read_to_string(&mut text))
        .map_err(|source| InstanceError::Io { path: path.to_owned(), source })?;
    let id = text.trim_end_matches('\n');
    if id.is_empty() || !gantry_proto::is_instance_id(id) {
        return Err(InstanceError::Malformed { path: path.to_owned() });
    }
    Ok(id.to_owned())
}

/// Registrations the scheduler refused because another live agent holds this node's name
/// (`ALREADY_EXISTS`): how long to wait before trying again, and what to log. The other agent
/// may hold the name for good, so the client waits its longest reconnect delay (between half
/// and all of its backoff ceiling) instead of starting again from 100 ms, and says why at
/// once, then at most once a minute while the refusals go on.
#[derive(Debug, Default)]
pub struct Refusals {
    count: u64,
    last_logged: Option<std::time::Instant>,
}

/// How often a run of refusals is logged again.
const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Refusals {
    /// Notes a refusal with the scheduler's `message`; returns the delay before the next attempt,
    /// drawn from `cap/2..=cap` by `rng`.
    pub fn refused(
        &mut self,
        message: &str,
        cap: std::time::Duration,
        rng: &mut impl rand::Rng,
    ) -> std::time::Duration {
        self.count += 1;
        let cap_ns = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        let delay = std::time::Duration::from_nanos(rng.random_range(cap_ns / 2..=cap_ns));
        if self.last_logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            self.last_logged = Some(std::time::Instant::now());
            tracing::error!(
                refusals = self.count,
                retry_in = ?delay,
                "the scheduler refused this agent: {message}"
            );
        }
        delay
    }

    /// Notes a registration that was accepted (ends a run of refusals).
    pub fn accepted(&mut self) {
        if self.count > 0 {
            tracing::info!(refusals = self.count, "registered after the node name was refused");
        }
        *self = Refusals::default();
    }

    /// Refusals since the last accepted registration.
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_id_is_made_once_private_and_read_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = load_or_create(dir.path()).expect("made");
        assert!(gantry_proto::is_instance_id(&first) && !first.is_empty(), "{first}");
        let mode = std::fs::metadata(dir.path().join(FILE)).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(dir.path()).expect("read"), first, "a restart keeps its id");
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(load_or_create(other.path()).expect("made"), first, "another work root, another id");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1, "no temporary file left");
    }

    #[test]
    fn a_refused_agent_waits_its_longest_delay_and_starts_over_once_accepted() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut r = Refusals::default();
        let cap = std::time::Duration::from_secs(2);
        for _ in 0..100 {
            let d = r.refused("node `n` is held", cap, &mut rng);
            assert!(d >= cap / 2 && d <= cap, "{d:?}");
        }
        assert_eq!(r.count(), 100);
        r.accepted();
        assert_eq!(r.count(), 0);
    }

    #[test]
    fn a_malformed_file_is_an_error_and_is_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        for bad in ["", "node-a\n", "0123456789ABCDEF0123456789ABCDEF\n"] {
            std::fs::write(&path, bad).expect("write");
            let err = load_or_create(dir.path()).expect_err(bad);
            assert!(matches!(err, InstanceError::Malformed { .. }), "{bad:?}: {err}");
            assert_eq!(std::fs::read_to_string(&path).expect("read"), bad, "left as it was");
        }
    }
}
