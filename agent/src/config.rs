//! The agent's configuration: a TOML file, every field optional with a documented default, and
//! command-line flags that override the file.
//!
//! ```toml
//! node_name = "rack3-node07"          # default: the host name
//! rack = "rack3"                      # default: empty (unknown)
//! labels = { gpu = "a100", zone = "b" }
//! scheduler = "http://127.0.0.1:7070" # the scheduler's agent endpoint
//! work_root = "/var/lib/gantry-agent" # one directory per container: its files and the agent's record
//! metrics_listen = "127.0.0.1:9101"   # /metrics
//! container_user = ""                 # one account for containers without one; "": a uid per user
//! allow_root = false                  # containers may run as root only if true
//! kill_grace_ms = 10000               # SIGTERM → SIGKILL grace period
//! sample_interval_ms = 1000           # usage sampling / enforcement interval
//! fencing_timeout_ms = 8000           # kill every container after this long without the scheduler; 0: never
//! cgroup_name = "gantry"              # parent cgroup of all containers
//! max_concurrent_launches = 0         # launches in progress at once; 0: 4 per CPU
//! container_disk_bytes = 10737418240  # disk allowance per container unless its launch asks; 0: unlimited
//! disk_check_interval_ms = 10000      # containers' disk use measured, work fs checked, old work cleaned
//! work_retention_ms = 3600000         # an ended container's work/ is kept this long after its exit is reported
//! log_retention_ms = 604800000        # its stdout and stderr this long
//! disk_pressure_free_percent = 10     # DiskPressure below this share of free space or inodes
//! disk_pressure_clear_percent = 15    # ... until this share is free again
//! launch_failures_threshold = 3       # LaunchFailures after this many failed launches in a row; 0: never
//! launch_failures_clear_ms = 300000   # ... until a launch succeeds or this long has passed
//! [isolation]
//! dynamic_uids = "61184-65519"        # uids for users without a mapped account, one per user
//! max_pids = 4096                     # processes per container unless its request says; 0: none
//! private_tmp = true                  # a private /tmp and /dev/shm per container
//! allow_privilege_escalation = false  # false: no_new_privs and an empty capability bounding set
//! [reserve]                           # kept back for the system (capacity − reserve = allocatable)
//! cpu_millis = 500
//! memory_bytes = 1073741824
//! gpus = 0
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why a configuration could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is too large, malformed, or has unknown fields.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong (with line and column for syntax errors).
        message: String,
    },
    /// A value is out of range.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Resources kept back for the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Reserve {
    /// Millicores (default 500).
    pub cpu_millis: u64,
    /// Bytes (default 1 GiB).
    pub memory_bytes: u64,
    /// GPUs (default 0).
    pub gpus: u32,
}

impl Default for Reserve {
    fn default() -> Self {
        Reserve { cpu_millis: 500, memory_bytes: 1 << 30, gpus: 0 }
    }
}

/// The agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Node name (default: the host name).
    pub node_name: Option<String>,
    /// Rack name (default: empty).
    pub rack: String,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Scheduler endpoint for the agent stream.
    pub scheduler: String,
    /// Directory for container directories and the agent's state.
    pub work_root: PathBuf,
    /// Address of the metrics endpoint.
    pub metrics_listen: String,
    /// One account every container without a mapped account runs as (the old behaviour, e.g.
    /// `nobody`: such containers can then reach each other); empty (the default): a uid of
    /// each user's own from `[isolation] dynamic_uids`.
    pub container_user: String,
    /// Whether containers may run as root.
    pub allow_root: bool,
    /// Grace period between SIGTERM and SIGKILL, ms.
    pub kill_grace_ms: u64,
    /// Sampling interval, ms.
    pub sample_interval_ms: u64,
    /// Name of the parent cgroup of all containers.
    pub cgroup_name: String,
    /// Launches in progress at once (each mostly waits for a fork and two execs); 0 = 4 per CPU.
    pub max_concurrent_launches: u32,
    /// Resources kept back for the system.
    pub reserve: Reserve,
    /// A file holding the token the scheduler asks agents to join with (its `[security]
    /// join_token_file`); absent: join without one.
    pub join_token_file: Option<PathBuf>,
    /// TLS to the scheduler (`scheduler = "https://…"`): the cluster CA that signed the
    /// scheduler's certificate (`gantry cert ca`'s `ca.pem`).
    pub tls_ca_file: Option<PathBuf>,
    /// This node's client certificate for mutual TLS (`gantry cert node NAME`); it must name
    /// the node this agent registers as. Needs `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Fencing: after this long without any message from the scheduler, ms, the agent kills
    /// every container it runs (exit reason `fenced`), because the scheduler declares a silent
    /// node lost after its `node_timeout_ms` and reruns the work elsewhere. Keep it below the
    /// scheduler's `node_timeout_ms` by at least a second of kill grace (default 8000 against
    /// 10000) so the old copy is dead before the new one starts; 0 = never fence. The
    /// containers' supervisors enforce it too, through a lease the agent renews
    /// ([`crate::lease`]), so a dead or stopped agent's containers are fenced as well.
    pub fencing_timeout_ms: u64,
    /// What keeps containers apart (`[isolation]`).
    pub isolation: crate::isolation::IsolationConfig,
    /// Disk allowance of a container whose launch names none, bytes: what its files (its
    /// directory, logs included) may hold before the agent kills it (exit reason `disk-limit`);
    /// 0 = unlimited.
    pub container_disk_bytes: u64,
    /// How often every container's files are measured, the work filesystem's free space and
    /// inodes checked, and ended containers' files cleaned up, ms.
    pub disk_check_interval_ms: u64,
    /// How long an ended container's `work/` is kept after its exit was reported, ms (YARN's
    /// `delete.debug-delay-sec`); its stdout and stderr are moved aside and kept longer.
    pub work_retention_ms: u64,
    /// How long an ended container's stdout and stderr are kept after its exit was reported, ms:
    /// as long as the scheduler keeps ended applications (`[store] retain_completed_for`), so
    /// `gantry logs` answers for as long as `gantry app` does.
    pub log_retention_ms: u64,
    /// The node reports `DiskPressure` (and takes no new work) while less than this percentage
    /// of the work filesystem's space or inodes is free; ended containers' files are cleaned up
    /// earliest first meanwhile, whatever their retention. 0 = never.
    pub disk_pressure_free_percent: u8,
    /// ... and clears it once this percentage is free again (hysteresis, so a node at the
    /// threshold does not flap).
    pub disk_pressure_clear_percent: u8,
    /// The node reports `LaunchFailures` after this many launches in a row failed for reasons of
    /// the node (not of the request); 0 = never.
    pub launch_failures_threshold: u32,
    /// ... until a launch succeeds or this long has passed since the last failure, ms.
    pub launch_failures_clear_ms: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            node_name: None,
            rack: String::new(),
            labels: BTreeMap::new(),
            scheduler: "http://127.0.0.1:7070".into(),
            work_root: PathBuf::from("/var/lib/gantry-agent"),
            metrics_listen: "127.0.0.1:9101".into(),
            container_user: String::new(),
            allow_root: false,
            kill_grace_ms: 10_000,
            sample_interval_ms: 1_000,
            cgroup_name: "gantry".into(),
            max_concurrent_launches: 0,
            reserve: Reserve::default(),
            join_token_file: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            fencing_timeout_ms: 8_000,
            isolation: crate::isolation::IsolationConfig::default(),
            container_disk_bytes: 10 << 30,
            disk_check_interval_ms: 10_000,
            work_retention_ms: 3_600_000,
            log_retention_ms: 7 * 86_400_000,
            disk_pressure_free_percent: 10,
            disk_pressure_clear_percent: 15,
            launch_failures_threshold: 3,
            launch_failures_clear_ms: 300_000,
        }
    }
}

/// The longest node name, rack name, label key or value: the scheduler's limit for names.
pub use gantry_sdk::names::MAX_NAME_LEN;

/// Why a node name, rack name, label key or value would be refused by the scheduler, if it
/// would: the one rule for names ([`gantry_sdk::names::check_name`]).
fn name_problem(s: &str, allow_empty: bool) -> Option<String> {
    gantry_sdk::names::check_name(s, allow_empty).err().map(|problem| problem.to_string())
}

impl AgentConfig {
    /// Reads a configuration file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let read = |source| ConfigError::Read { path: path.to_owned(), source };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::Parse {
                path: path.to_owned(),
                message: format!("{} bytes is larger than the {MAX_CONFIG_BYTES}-byte limit", meta.len()),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::from_str_at(&text, path)
    }

    /// Parses and checks configuration text; `origin` names it in errors. Text over
    /// [`MAX_CONFIG_BYTES`] is refused as a file of that size is.
    pub fn from_str_at(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::Parse {
                path: origin.to_owned(),
                message: format!("{} bytes is larger than the {MAX_CONFIG_BYTES}-byte limit", text.len()),
            });
        }
        let cfg: AgentConfig = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_owned(), message: e.to_string() })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks ranges and names.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, message: String| Err(ConfigError::Invalid { field, message });
        if let Some(n) = &self.node_name {
            let why = name_problem(n, false)
                .or_else(|| n.chars().any(char::is_whitespace).then(|| "contains a space".to_owned()));
            if let Some(why) = why {
                return bad("node_name", format!("{n:?} {why}"));
            }
        }
        if self.labels.len() > 64 {
            return bad("labels", format!("{} labels, more than 64", self.labels.len()));
        }
        // The scheduler refuses a registration whose rack or labels break its name rules; say so
        // at load time instead of failing every registration.
        if let Some(why) = name_problem(&self.rack, true) {
            return bad("rack", format!("{:?} {why}", self.rack));
        }
        for (k, v) in &self.labels {
            if let Some(why) = name_problem(k, false) {
                return bad("labels", format!("key {k:?} {why}"));
            }
            if let Some(why) = name_problem(v, true) {
                return bad("labels", format!("the value of {k:?} {why}"));
            }
        }
        if !(10..=60_000).contains(&self.sample_interval_ms) {
            return bad("sample_interval_ms", format!("{} is not in 10..=60000", self.sample_interval_ms));
        }
        // A session is only known to be live by the scheduler's answers to the statuses sent
        // every sample interval: a timeout of fewer than two intervals would fence a healthy
        // agent.
        let fencing_floor = (2 * self.sample_interval_ms).max(1_000);
        if self.fencing_timeout_ms != 0 && !(fencing_floor..=86_400_000).contains(&self.fencing_timeout_ms) {
            return bad(
                "fencing_timeout_ms",
                format!(
                    "{} is not 0 (off) or in {fencing_floor}..=86400000 (at least 1 s and two sample intervals)",
                    self.fencing_timeout_ms
                ),
            );
        }
        if self.kill_grace_ms > 3_600_000 {
            return bad("kill_grace_ms", format!("{} is more than an hour", self.kill_grace_ms));
        }
        if self.cgroup_name.is_empty()
            || !self.cgroup_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return bad("cgroup_name", format!("`{}` must be [A-Za-z0-9_-]+", self.cgroup_name));
        }
        if self.max_concurrent_launches > 1024 {
            return bad(
                "max_concurrent_launches",
                format!("{} is more than 1024", self.max_concurrent_launches),
            );
        }
        if self.container_user.contains('\0') {
            return bad("container_user", "contains a NUL byte".into());
        }
        if let Err(message) = self.isolation.validate() {
            return bad("isolation", message);
        }
        if !(100..=3_600_000).contains(&self.disk_check_interval_ms) {
            return bad(
                "disk_check_interval_ms",
                format!("{} is not in 100..=3600000", self.disk_check_interval_ms),
            );
        }
        if self.log_retention_ms < self.work_retention_ms {
            return bad(
                "log_retention_ms",
                format!(
                    "{} is shorter than work_retention_ms ({}): logs outlive the work directory",
                    self.log_retention_ms, self.work_retention_ms
                ),
            );
        }
        if self.disk_pressure_free_percent > 99 {
            return bad(
                "disk_pressure_free_percent",
                format!("{} is not in 0..=99", self.disk_pressure_free_percent),
            );
        }
        if self.disk_pressure_free_percent > 0
            && !(self.disk_pressure_free_percent..=100).contains(&self.disk_pressure_clear_percent)
        {
            return bad(
                "disk_pressure_clear_percent",
                format!(
                    "{} is not in {}..=100 (at least disk_pressure_free_percent)",
                    self.disk_pressure_clear_percent, self.disk_pressure_free_percent
                ),
            );
        }
        if !self.work_root.is_absolute() {
            return bad("work_root", format!("{} must be an absolute path", self.work_root.display()));
        }
        Ok(())
    }

    /// The join token from `join_token_file` (trimmed), if one is configured.
    pub fn join_token(&self) -> Result<Option<String>, ConfigError> {
        let Some(path) = &self.join_token_file else { return Ok(None) };
        let read = |source| ConfigError::Read { path: path.clone(), source };
        if std::fs::metadata(path).map_err(read)?.len() > 4096 {
            return Err(ConfigError::Invalid {
                field: "join_token_file",
                message: "larger than 4 KiB".into(),
            });
        }
        let token = std::fs::read_to_string(path).map_err(read)?.trim().to_owned();
        if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::Invalid {
                field: "join_token_file",
                message: format!("{}: the token must be 16 or more printable characters", path.display()),
            });
        }
        Ok(Some(token))
    }

    /// The TLS material to reach the scheduler with, read from the configured files (none
    /// without `tls_ca_file`), or why it cannot be used.
    pub fn client_tls(&self) -> Result<Option<crate::client::ClientTls>, ConfigError> {
        let read_pem = |field: &'static str, path: &PathBuf| -> Result<Vec<u8>, ConfigError> {
            let read = |source| ConfigError::Read { path: path.clone(), source };
            if std::fs::metadata(path).map_err(read)?.len() > 1 << 20 {
                return Err(ConfigError::Invalid {
                    field,
                    message: format!("{} is larger than 1 MiB", path.display()),
                });
            }
            let bytes = std::fs::read(path).map_err(read)?;
            if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(ConfigError::Invalid {
                    field,
                    message: format!("{} is not a PEM file", path.display()),
                });
            }
            Ok(bytes)
        };
        let identity = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(c), Some(k)) => Some((read_pem("tls_cert_file", c)?, read_pem("tls_key_file", k)?)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Invalid {
                    field: "tls_cert_file",
                    message: "tls_cert_file and tls_key_file go together".into(),
                });
            }
        };
        match &self.tls_ca_file {
            Some(ca) => Ok(Some(crate::client::ClientTls { ca_pem: read_pem("tls_ca_file", ca)?, identity })),
            None if identity.is_some() => Err(ConfigError::Invalid {
                field: "tls_ca_file",
                message: "a client certificate needs tls_ca_file to check the scheduler's".into(),
            }),
            None => Ok(None),
        }
    }

    /// The node name: configured, or the host name.
    pub fn node_name(&self) -> String {
        self.node_name.clone().unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".to_owned())
        })
    }

    /// Launches in progress at once: the configured number, or 4 per CPU.
    pub fn launch_slots(&self) -> usize {
        match self.max_concurrent_launches {
            0 => 4 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n as usize,
        }
    }

    /// Directory holding one subdirectory per container.
    pub fn containers_dir(&self) -> PathBuf {
        self.work_root.join("containers")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_files_override_them() {
        AgentConfig::default().validate().expect("defaults");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("agent.toml");
        std::fs::write(
            &p,
            "node_name = \"n1\"\nrack = \"r1\"\nlabels = { gpu = \"a100\" }\nwork_root = \"/tmp/x\"\n[reserve]\ncpu_millis = 1000\n",
        )
        .expect("write");
        let c = AgentConfig::from_file(&p).expect("parses");
        assert_eq!(c.node_name(), "n1");
        assert_eq!(c.labels.get("gpu").map(String::as_str), Some("a100"));
        assert_eq!(c.reserve.cpu_millis, 1000);
        assert_eq!(c.reserve.memory_bytes, 1 << 30, "unset reserve fields keep their defaults");
    }

    #[test]
    fn the_shipped_example_configuration_loads_with_its_documented_defaults() {
        let text = include_str!("../../deploy/config/agent.toml");
        let c = AgentConfig::from_str_at(text, Path::new("deploy/config/agent.toml")).expect("loads");
        assert_eq!(c.isolation, crate::isolation::IsolationConfig::default());
        assert!(c.container_user.is_empty(), "the example keeps a uid per user");
    }

    #[test]
    fn the_settings_before_isolation_load() {
        let c = AgentConfig::from_str_at(crate::isolation::BEFORE_ISOLATION_TOML, Path::new("<before>"))
            .expect("loads");
        assert_eq!(c.container_user, "nobody");
        assert!(
            !c.isolation.private_tmp && c.isolation.allow_privilege_escalation && c.isolation.max_pids == 0
        );
    }

    #[test]
    fn bad_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("agent.toml");
        for (text, want) in [
            ("nod_name = \"x\"\n", "unknown field"),
            ("sample_interval_ms = 1\n", "sample_interval_ms"),
            ("work_root = \"relative\"\n", "absolute"),
            ("cgroup_name = \"../x\"\n", "cgroup_name"),
            ("node_name = \"a b\"\n", "node_name"),
            ("fencing_timeout_ms = 999\n", "fencing_timeout_ms"),
            ("sample_interval_ms = 1000\nfencing_timeout_ms = 1500\n", "two sample intervals"),
            ("rack = \"r\\u0007\"\n", "rack"),
            ("labels = { \"\" = \"x\" }\n", "labels"),
            ("labels = { gpu = \"a\\nb\" }\n", "labels"),
            ("[isolation]\ndynamic_uids = \"0-100\"\n", "below 1000"),
            ("[isolation]\nmax_pids = 99999999\n", "max_pids"),
            ("[isolation]\nprivate_tmp = 1\n", "private_tmp"),
            // Bidirectional and zero-width characters, as the scheduler refuses them.
            ("node_name = \"n\\u202E1\"\n", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
            ("rack = \"r\\u200B1\"\n", "U+200B (ZERO WIDTH SPACE)"),
            ("labels = { \"k\\u2066\" = \"x\" }\n", "U+2066 (LEFT-TO-RIGHT ISOLATE)"),
            ("labels = { gpu = \"a\\uFEFF\" }\n", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
            ("disk_check_interval_ms = 10\n", "disk_check_interval_ms"),
            ("work_retention_ms = 10\nlog_retention_ms = 5\n", "outlive the work directory"),
            ("disk_pressure_free_percent = 100\n", "disk_pressure_free_percent"),
            (
                "disk_pressure_free_percent = 20\ndisk_pressure_clear_percent = 10\n",
                "at least disk_pressure_free_percent",
            ),
            ("container_disk_bytes = -1\n", "container_disk_bytes"),
        ] {
            std::fs::write(&p, text).expect("write");
            let err = AgentConfig::from_file(&p).expect_err(text).to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn long_labels_and_oversized_text_are_refused() {
        let long = "x".repeat(MAX_NAME_LEN + 1);
        for text in [format!("rack = \"{long}\"\n"), format!("labels = {{ {long} = \"1\" }}\n")] {
            let err = AgentConfig::from_str_at(&text, Path::new("<test>")).expect_err("long name");
            assert!(err.to_string().contains("limit is 253"), "{err}");
        }
        let ok = format!("labels = {{ {} = \"{}\" }}\n", "k".repeat(MAX_NAME_LEN), "v".repeat(MAX_NAME_LEN));
        AgentConfig::from_str_at(&ok, Path::new("<test>")).expect("names of exactly the limit");
        let huge = format!("# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
        let err = AgentConfig::from_str_at(&huge, Path::new("<test>")).expect_err("too large");
        assert!(err.to_string().contains("byte limit"), "{err}");
    }
}
