//! The `gantry-scheduler` child a run starts: ephemeral loopback ports, a fresh data directory
//! removed when it is dropped, and its store read back after it stops.

use super::report::AppVerdict;
use super::{LoadError, START_TIMEOUT, io};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A `gantry-scheduler` child on ephemeral loopback ports with its own data directory; killed
/// and its directory removed when dropped, whatever happened.
pub(super) struct ChildScheduler {
    pub(super) child: std::process::Child,
    pub(super) dir: PathBuf,
    pub(super) api: std::net::SocketAddr,
    pub(super) agents: std::net::SocketAddr,
}

impl ChildScheduler {
    pub(super) async fn start(bin: &Path, node_timeout_ms: u64) -> Result<ChildScheduler, LoadError> {
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("gantry-load-{}-{stamp}", std::process::id()));
        std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?;
        // From here on the guard owns the directory, also when starting fails.
        let mut guard = DirGuard(Some(dir.clone()));
        let data = toml::Value::String(dir.join("data").display().to_string());
        // The store keeps every ended app (no retention by count), so the verdict read from it
        // after the run finds each acknowledged one.
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nagent_listen = \"127.0.0.1:0\"\ndata_dir = {data}\nnode_timeout_ms = {node_timeout_ms}\n\
             [store]\nmax_completed_apps = {}\n",
            i64::MAX
        );
        let config_path = dir.join("scheduler.toml");
        std::fs::write(&config_path, config).map_err(io("writing the scheduler's configuration"))?;
        let log_path = dir.join("scheduler.log");
        let log = std::fs::File::create(&log_path).map_err(io("creating the scheduler's log"))?;
        let child = std::process::Command::new(bin)
            .arg("--config")
            .arg(&config_path)
            // Its default level, whatever the caller's; the listening line is at info.
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!("starting {}", bin.display())))?;
        let mut this = ChildScheduler {
            child,
            dir: guard.0.take().unwrap_or_default(),
            api: ([127, 0, 0, 1], 0).into(),
            agents: ([127, 0, 0, 1], 0).into(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some((api, agents)) = listening_addresses(&text) {
                (this.api, this.agents) = (api, agents);
                return Ok(this);
            }
            let failed = |reason: String| LoadError::SchedulerStart { reason, log: tail(&text, 30) };
            match this.child.try_wait() {
                Ok(Some(status)) => return Err(failed(format!("it exited with {status}"))),
                Ok(None) if Instant::now() >= deadline => {
                    return Err(failed(format!("not listening after {} s", START_TIMEOUT.as_secs())));
                }
                Ok(None) => {}
                Err(e) => return Err(failed(format!("cannot wait for it: {e}"))),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL if it has not stopped within 10 s; returns once it is gone.
    pub(super) async fn stop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Every application in the stopped child's store, after an integrity check.
    pub(super) fn stored_apps(&self) -> Result<HashMap<u64, AppVerdict>, LoadError> {
        let path = self.dir.join("data").join("gantry.db");
        let failed = |e: gantry_scheduler::store::StoreError| LoadError::Store {
            path: path.clone(),
            message: e.to_string(),
        };
        let store = gantry_scheduler::store::Store::open(&path).map_err(failed)?;
        store.check_integrity().map_err(failed)?;
        let recovered = store.load().map_err(failed)?;
        store.close().map_err(failed)?;
        Ok(recovered.apps.iter().map(|a| (a.id.0, AppVerdict::from_engine(a.state))).collect())
    }
}

impl Drop for ChildScheduler {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes a directory when dropped, unless it was taken.
pub(super) struct DirGuard(Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The addresses in the daemon's `gantry-scheduler listening api=… agents=…` log line.
pub(super) fn listening_addresses(log: &str) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    let line = log.lines().find(|l| l.contains("gantry-scheduler listening"))?;
    let field =
        |name: &str| line.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse().ok());
    Some((field("api=")?, field("agents=")?))
}

/// The last `n` lines of `text`.
pub(super) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
