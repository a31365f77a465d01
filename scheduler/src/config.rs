//! The scheduler's TOML configuration: engine tunables, the queue hierarchy, the plugins to load
//! (each with its own config table) and the profile mapping extension points to plugins.
//!
//! ```toml
//! [engine]
//! seed = 42                    # seed of the engine's randomness (default 0)
//!
//! [store]                      # retention of ended applications in the SQLite store
//! max_completed_apps = 10000   # keep the most recently ended (default: [engine]'s)
//! retain_completed_for = "7d"  # and none older than this (default "0": no age bound)
//!
//! [[queues]]
//! path = "root.prod"           # full dotted path below root
//! guaranteed = 0.7             # share of the parent guaranteed (0..=1)
//! maximum = 1.0                # share of the parent it may grow to (guaranteed..=1)
//!
//! [[plugins]]
//! name = "firstfit"            # local name used by [profile]
//! path = "target/release/libgantry_minimal.so"   # relative to this file
//! call_budget_ms = 1000        # longest a hook call may take (default 1000; 0 = no limit)
//! [plugins.config]             # passed to the plugin's create() as JSON
//!
//! [profile]
//! place = "firstfit"           # admit / order / place / rebalance / reserve
//!
//! [security]                   # absent: no authentication (loopback only, or --insecure)
//! tokens_file = "tokens"       # REST bearer tokens, lines `TOKEN USER [admin]`
//! join_token_file = "join"     # the token agents must present
//! insecure = false             # allow listening beyond loopback without them
//!
//! [reservations]               # reservations (absent: none); needs [profile] reserve
//! queue = "root.prod"          # the reservable leaf queue; its guarantee is what the plan hands out
//! step_ms = 1000               # the follower's step (and the planner's grid)
//! horizon_ms = 86400000        # how far ahead a deadline may lie
//! optimize_interval_ms = 0     # ask the planner to re-organise the plan this often (0: never)
//! ```
//!
//! The planner is a plugin answering `reserve` (e.g. `libgantry_rayon.so`, whose own
//! `[plugins.config]` chooses its agent and replanner), named by `[profile] reserve`.

use gantry_engine::{EngineConfig, PlanConfig, QueueSpec};
use serde::Deserialize;
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
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error("{path}: {size} bytes is larger than the {MAX_CONFIG_BYTES}-byte limit")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The TOML is malformed or has unknown or mistyped fields.
    #[error("{path}: {message}")]
    Parse {
        /// The file (or `<string>`).
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The content is well-formed but inconsistent.
    #[error("{path}: {message}")]
    Invalid {
        /// The file (or `<string>`).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Engine tunables; every field is optional.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// Seed of the engine's randomness.
    pub seed: Option<u64>,
    /// Attempts an application gets when it does not say (default 3).
    pub default_max_attempts: Option<u32>,
    /// Consecutive failed calls before a plugin is quarantined (default 3).
    pub quarantine_after: Option<u32>,
    /// Quarantine length in ms (default 60000).
    pub quarantine_ms: Option<u64>,
    /// Time between rebalance calls in ms (default 3000).
    pub rebalance_interval_ms: Option<u64>,
    /// Ended applications kept in memory for the API (YARN's `max-completed-applications`;
    /// default 10000); older ones are read from the store when asked for by id.
    pub max_completed_apps: Option<usize>,
}

/// The daemon's network and storage settings; every field is optional.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// REST API and `/metrics` address (default 127.0.0.1:8088, YARN's ResourceManager web port).
    pub listen: String,
    /// Agent stream (gRPC) address (default 127.0.0.1:7070).
    pub agent_listen: String,
    /// Directory of the durable state (SQLite); relative paths are relative to the config file.
    pub data_dir: PathBuf,
    /// A node that sends no status for this long is lost, ms (default 10000).
    pub node_timeout_ms: u64,
    /// Longest time between scheduling cycles when nothing happens, ms (default 100); a
    /// submission or an exit triggers a cycle at once.
    pub cycle_interval_ms: u64,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: "127.0.0.1:8088".into(),
            agent_listen: "127.0.0.1:7070".into(),
            data_dir: PathBuf::from("gantry-data"),
            node_timeout_ms: 10_000,
            cycle_interval_ms: 100,
        }
    }
}

/// How long the store keeps ended applications (`[store]`); every field is optional. Live
/// applications are always kept. See [`crate::store::Retention`].
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// Ended applications the store keeps, the most recently ended (YARN's
    /// `yarn.resourcemanager.state-store.max-completed-applications`). Default: `[engine]
    /// max_completed_apps`, as in YARN; it may not be lower, or a restart would lose apps the
    /// API lists.
    pub max_completed_apps: Option<u64>,
    /// Ended applications that ended longer ago than this are removed whatever their number
    /// (`"7d"`, `"12h"`). Absent or `"0"`: no age bound.
    pub retain_completed_for: Option<ConfigDuration>,
    /// How often the daemon removes what the retention no longer keeps (default `"1m"`).
    pub prune_interval: Option<ConfigDuration>,
    /// Applications removed per store transaction (default 100): bounds how long a submission
    /// queued behind one waits.
    pub prune_chunk_apps: Option<usize>,
}

/// Default `[store] prune_interval`.
pub const DEFAULT_PRUNE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// Shortest and longest `[store] prune_interval`.
pub const PRUNE_INTERVAL_RANGE: std::ops::RangeInclusive<std::time::Duration> =
    std::time::Duration::from_millis(100)..=std::time::Duration::from_secs(86_400);
/// Most `[store] prune_chunk_apps`.
pub const MAX_PRUNE_CHUNK_APPS: usize = 100_000;

/// A duration written as a number and a unit: `500ms`, `90s`, `30m`, `12h`, `7d`, or `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub std::time::Duration);

impl std::str::FromStr for ConfigDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!("`{text}` is not a duration like \"500ms\", \"90s\", \"30m\", \"12h\", \"7d\" or \"0\"")
        };
        let t = text.trim();
        if t == "0" {
            return Ok(ConfigDuration(std::time::Duration::ZERO));
        }
        let digits = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let value: u64 = t[..digits].parse().map_err(|_| bad())?;
        let unit_ms: u64 = match &t[digits..] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let ms = value.checked_mul(unit_ms).ok_or_else(|| format!("`{text}` is too long"))?;
        Ok(ConfigDuration(std::time::Duration::from_millis(ms)))
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A queue definition.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueSection {
    /// Full dotted path, e.g. `root.prod`.
    pub path: String,
    /// Guaranteed share of the parent.
    pub guaranteed: f64,
    /// Maximum share of the parent (default 1.0).
    #[serde(default = "one")]
    pub maximum: f64,
    /// Who may submit here (YARN's `acl_submit_applications`: `users groups`, `*`, or a
    /// single space for no one); a queue also admits whoever its ancestors admit. Absent: only
    /// what the ancestors allow.
    #[serde(default)]
    pub acl_submit_applications: Option<String>,
    /// Who administers this queue and those below it (YARN's `acl_administer_queue`).
    #[serde(default)]
    pub acl_administer_queue: Option<String>,
}

fn one() -> f64 {
    1.0
}

/// A plugin to load.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    /// Local name, used by `[profile]`.
    pub name: String,
    /// Path of the shared library; relative paths are relative to the config file.
    pub path: PathBuf,
    /// Longest one hook call may take, ms: past it the call fails and the built-in policy stands
    /// in, so a plugin that hangs cannot stop scheduling. Budgeted calls run on a worker thread
    /// over a copy of the view; 0 calls directly, without a copy and without a limit.
    #[serde(default = "default_call_budget_ms")]
    pub call_budget_ms: u64,
    /// The plugin's own configuration, handed to its `create` as JSON.
    #[serde(default)]
    pub config: toml::Table,
}

/// A hang stops scheduling for at most a second by default; generous for plugins that answer
/// in milliseconds (BENCHMARKS.md).
pub const DEFAULT_CALL_BUDGET_MS: u64 = 1000;
/// Longest configurable call budget, ms.
pub const MAX_CALL_BUDGET_MS: u64 = 600_000;

fn default_call_budget_ms() -> u64 {
    DEFAULT_CALL_BUDGET_MS
}

impl PluginSection {
    /// The time budget of one hook call (zero: unlimited, direct calls).
    pub fn call_budget(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.call_budget_ms)
    }
}

/// Which plugin answers each extension point (by local name); absent = built-in.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSection {
    /// Plugin answering `admit`.
    pub admit: Option<String>,
    /// Plugin answering `order`.
    pub order: Option<String>,
    /// Plugin answering `place`.
    pub place: Option<String>,
    /// Plugin answering `rebalance`.
    pub rebalance: Option<String>,
    /// The reservation planner, answering `reserve` (needs `[reservations]`).
    pub reserve: Option<String>,
}

/// Authentication (`[security]`); relative paths are relative to the config file.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SecuritySection {
    /// REST bearer tokens, one a line: `TOKEN USER [admin]`. Without it the REST API is open.
    pub tokens_file: Option<PathBuf>,
    /// The token agents present when they connect. Without it any agent may join.
    pub join_token_file: Option<PathBuf>,
    /// Listen beyond loopback without tokens (a trusted network only).
    pub insecure: bool,
    /// The scheduler's certificate chain (PEM), served on the agents' endpoint and the REST API
    /// (HTTPS); `gantry cert scheduler` makes one. Needs `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `tls_cert_file` (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// Mutual TLS: agents must present a certificate signed by this CA (`gantry cert ca`) that
    /// names the node they register as (`gantry cert node NAME`). Needs `tls_cert_file`.
    pub tls_client_ca_file: Option<PathBuf>,
    /// Who may submit to every queue: root's ACL in YARN's format, `users groups` with
    /// comma-separated lists, `*` for everyone, a single space for no one (default `*`).
    pub acl_submit_applications: Option<String>,
    /// Who administers every queue (kills and reads anyone's apps there, and may submit);
    /// default a single space: only the tokens file's `admin`s.
    pub acl_administer_queue: Option<String>,
    /// The account each user's containers run as: `USER = "ACCOUNT"`, `"*"` for everyone not
    /// listed, `"$user"` for an account of the user's own name. Absent: the agent's
    /// `container_user` for everyone. Needs `tokens_file` (the token, not the request, names
    /// the user).
    pub accounts: std::collections::BTreeMap<String, String>,
    /// Whether a user may be mapped to `root` (never by default; agents also refuse it unless
    /// their own `allow_root` is set).
    pub allow_root_containers: bool,
}

/// The reservation plan (`[reservations]`); the planner is the plugin of `[profile] reserve`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReservationsSection {
    /// The reservable leaf queue.
    pub queue: String,
    /// Moved to the Rayon plugin's `[plugins.config]`; refused here with a message saying so.
    #[serde(default)]
    pub agent: Option<toml::Value>,
    /// Moved to the Rayon plugin's `[plugins.config]`; refused here with a message saying so.
    #[serde(default)]
    pub replanner: Option<toml::Value>,
    /// The follower's step, ms (default 1000).
    #[serde(default = "second")]
    pub step_ms: u64,
    /// How far ahead a deadline may lie, ms (default 24 h).
    #[serde(default = "day")]
    pub horizon_ms: u64,
    /// How often the planner is asked to re-organise the plan, ms (default 0: never).
    #[serde(default)]
    pub optimize_interval_ms: u64,
}

fn second() -> u64 {
    1_000
}
fn day() -> u64 {
    86_400_000
}

impl ReservationsSection {
    /// The engine's plan configuration, or what is wrong with the section.
    pub fn plan_config(&self) -> Result<PlanConfig, String> {
        for (key, value) in [("agent", &self.agent), ("replanner", &self.replanner)] {
            if let Some(v) = value {
                return Err(format!(
                    "reservations.{key} moved to the reservation planner's own configuration: load the Rayon \
                     planner as a plugin ([[plugins]] name = \"rayon\", path = \".../libgantry_rayon.so\") with \
                     {key} = {v} in its [plugins.config], and set [profile] reserve = \"rayon\""
                ));
            }
        }
        if !(100..=3_600_000).contains(&self.step_ms) {
            return Err(format!("reservations.step_ms {} is not in 100..=3600000", self.step_ms));
        }
        if self.horizon_ms < self.step_ms || self.horizon_ms > 366 * 86_400_000 {
            return Err(format!("reservations.horizon_ms {} is not in step_ms..=1 year", self.horizon_ms));
        }
        if self.optimize_interval_ms != 0 && !(1_000..=7 * 86_400_000).contains(&self.optimize_interval_ms) {
            return Err(format!(
                "reservations.optimize_interval_ms {} is not 0 (never) or in 1000..=604800000",
                self.optimize_interval_ms
            ));
        }
        Ok(PlanConfig {
            queue: self.queue.clone(),
            step_ms: self.step_ms,
            horizon_ms: self.horizon_ms,
            optimize_interval_ms: self.optimize_interval_ms,
        })
    }
}

/// The whole scheduler configuration.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Network and storage.
    pub server: ServerSection,
    /// Engine tunables.
    pub engine: EngineSection,
    /// Retention of ended applications in the store.
    pub store: StoreSection,
    /// Queue hierarchy below `root` (default: one queue `root.default`).
    pub queues: Vec<QueueSection>,
    /// Plugins to load.
    pub plugins: Vec<PluginSection>,
    /// Extension point → plugin.
    pub profile: ProfileSection,
    /// The reservation plan, if any (with `profile.reserve`).
    pub reservations: Option<ReservationsSection>,
    /// Authentication.
    pub security: SecuritySection,
    /// Directory that relative plugin paths are resolved against (the config file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl SchedulerConfig {
    /// Reads and checks a configuration file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let meta =
            std::fs::metadata(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge { path: path.to_owned(), size: meta.len() });
        }
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        // `--config scheduler.toml` has an empty parent; "." keeps plugin paths relative to the
        // working directory instead of handing dlopen a bare name to search the library path for.
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self::from_str_at(&text, path, base)
    }

    /// Parses and checks configuration text; `origin` names it in errors, `base_dir` resolves
    /// relative plugin paths. Text over [`MAX_CONFIG_BYTES`] is refused as a file of that size is.
    pub fn from_str_at(text: &str, origin: &Path, base_dir: PathBuf) -> Result<Self, ConfigError> {
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge { path: origin.to_owned(), size: text.len() as u64 });
        }
        let mut cfg: SchedulerConfig = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_owned(), message: e.to_string() })?;
        cfg.base_dir = base_dir;
        cfg.check().map_err(|message| ConfigError::Invalid { path: origin.to_owned(), message })?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        let mut names = std::collections::HashSet::new();
        for p in &self.plugins {
            if p.name.is_empty() || p.name.len() > 64 {
                return Err(format!("plugin name `{}` must be 1..=64 bytes", p.name));
            }
            if !names.insert(p.name.as_str()) {
                return Err(format!("plugin `{}` is defined twice", p.name));
            }
            if p.call_budget_ms > MAX_CALL_BUDGET_MS {
                return Err(format!(
                    "plugin `{}`: call_budget_ms {} is above {MAX_CALL_BUDGET_MS} (0 means no limit)",
                    p.name, p.call_budget_ms
                ));
            }
        }
        let profile = [
            ("admit", &self.profile.admit),
            ("order", &self.profile.order),
            ("place", &self.profile.place),
            ("rebalance", &self.profile.rebalance),
            ("reserve", &self.profile.reserve),
        ];
        for (hook, name) in profile {
            if let Some(n) = name {
                if !names.contains(n.as_str()) {
                    return Err(format!("profile.{hook} names plugin `{n}`, which is not in [[plugins]]"));
                }
            }
        }
        let srv = &self.server;
        if !(1_000..=3_600_000).contains(&srv.node_timeout_ms) {
            return Err(format!("server.node_timeout_ms {} is not in 1000..=3600000", srv.node_timeout_ms));
        }
        if !(1..=60_000).contains(&srv.cycle_interval_ms) {
            return Err(format!("server.cycle_interval_ms {} is not in 1..=60000", srv.cycle_interval_ms));
        }
        for (name, addr) in [("server.listen", &srv.listen), ("server.agent_listen", &srv.agent_listen)] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(format!("{name} `{addr}` is not an address like 127.0.0.1:8088"));
            }
        }
        if let Some(r) = &self.reservations {
            r.plan_config()?;
        }
        match (&self.reservations, &self.profile.reserve) {
            (Some(r), None) => {
                return Err(format!(
                    "[reservations] (queue `{}`) needs a planner: load one as a plugin and name it in [profile] reserve \
                     (e.g. the Rayon planner, libgantry_rayon.so)",
                    r.queue
                ));
            }
            (None, Some(p)) => {
                return Err(format!(
                    "profile.reserve names the planner `{p}`, but no queue is reservable: add [reservations] with its queue"
                ));
            }
            _ => {}
        }
        self.check_store()?;
        self.check_security()?;
        // Let the engine validate queues and tunables now, so a bad file fails at load time.
        gantry_engine::Engine::builtin(self.engine_config()).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The engine's configuration.
    pub fn engine_config(&self) -> EngineConfig {
        let d = EngineConfig::default();
        let e = &self.engine;
        EngineConfig {
            seed: e.seed.unwrap_or(d.seed),
            queues: self
                .queues
                .iter()
                .map(|q| QueueSpec { path: q.path.clone(), guaranteed: q.guaranteed, maximum: q.maximum })
                .collect(),
            default_max_attempts: e.default_max_attempts.unwrap_or(d.default_max_attempts),
            quarantine_after: e.quarantine_after.unwrap_or(d.quarantine_after),
            quarantine_ms: e.quarantine_ms.unwrap_or(d.quarantine_ms),
            rebalance_interval_ms: e.rebalance_interval_ms.unwrap_or(d.rebalance_interval_ms),
            history_len: e.max_completed_apps.unwrap_or(d.history_len),
            reservations: self.reservations.as_ref().and_then(|r| r.plan_config().ok()),
        }
    }

    /// How long the store keeps ended applications, defaults filled in (checked at load).
    pub fn retention(&self) -> crate::store::Retention {
        let d = crate::store::Retention::default();
        let s = &self.store;
        crate::store::Retention {
            max_completed_apps: s.max_completed_apps.unwrap_or(self.engine_config().history_len as u64),
            max_age: s.retain_completed_for.map(|c| c.0).filter(|age| !age.is_zero()),
            chunk_apps: s.prune_chunk_apps.unwrap_or(d.chunk_apps),
        }
    }

    /// How often the daemon prunes the store.
    pub fn prune_interval(&self) -> std::time::Duration {
        self.store.prune_interval.map_or(DEFAULT_PRUNE_INTERVAL, |c| c.0)
    }

    /// Checks `[store]` against itself and `[engine]`.
    fn check_store(&self) -> Result<(), String> {
        let r = self.retention();
        let memory = self.engine_config().history_len as u64;
        if r.max_completed_apps < memory {
            return Err(format!(
                "store.max_completed_apps {} is below engine.max_completed_apps {memory}: the store must keep \
                 at least the ended apps the API lists, or a restart would lose them",
                r.max_completed_apps
            ));
        }
        if let Some(age) = r.max_age {
            if age < std::time::Duration::from_secs(1) {
                return Err(format!(
                    "store.retain_completed_for {age:?} is below 1s (\"0\" means no age bound)"
                ));
            }
        }
        let interval = self.prune_interval();
        if !PRUNE_INTERVAL_RANGE.contains(&interval) {
            return Err(format!("store.prune_interval {interval:?} is not in 100ms..=1d"));
        }
        if !(1..=MAX_PRUNE_CHUNK_APPS).contains(&r.chunk_apps) {
            return Err(format!(
                "store.prune_chunk_apps {} is not in 1..={MAX_PRUNE_CHUNK_APPS}",
                r.chunk_apps
            ));
        }
        Ok(())
    }

    /// Where the durable state lives, resolved against the config file's directory.
    pub fn data_dir(&self) -> PathBuf {
        if self.server.data_dir.is_absolute() {
            self.server.data_dir.clone()
        } else {
            self.base_dir.join(&self.server.data_dir)
        }
    }

    /// A path of the configuration, resolved against the config file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_owned() } else { self.base_dir.join(path) }
    }

    /// The REST tokens and the agents' join token, read from their files (none when not
    /// configured), or why they cannot be used.
    pub fn credentials(
        &self,
    ) -> Result<(Option<crate::auth::Tokens>, Option<crate::auth::JoinToken>), String> {
        let s = &self.security;
        let tokens =
            s.tokens_file.as_ref().map(|p| crate::auth::Tokens::read(&self.resolve(p))).transpose()?;
        let join =
            s.join_token_file.as_ref().map(|p| crate::auth::JoinToken::read(&self.resolve(p))).transpose()?;
        Ok((tokens, join))
    }

    /// Checks `[security]` and the queues' ACLs for consistency (files are read at start).
    fn check_security(&self) -> Result<(), String> {
        let s = &self.security;
        match (&s.tls_cert_file, &s.tls_key_file) {
            (Some(_), None) => return Err("security.tls_cert_file needs security.tls_key_file".into()),
            (None, Some(_)) => return Err("security.tls_key_file needs security.tls_cert_file".into()),
            _ => {}
        }
        if s.tls_client_ca_file.is_some() && s.tls_cert_file.is_none() {
            return Err("security.tls_client_ca_file (mutual TLS) needs the scheduler's own tls_cert_file and tls_key_file".into());
        }
        self.queue_acls()?;
        let acls_set = s.acl_submit_applications.is_some()
            || s.acl_administer_queue.is_some()
            || self
                .queues
                .iter()
                .any(|q| q.acl_submit_applications.is_some() || q.acl_administer_queue.is_some());
        if s.tokens_file.is_none() && acls_set {
            return Err("queue ACLs need security.tokens_file: without tokens no caller is known".into());
        }
        if s.tokens_file.is_none() && !s.accounts.is_empty() {
            return Err("security.accounts needs security.tokens_file: without tokens the request, not a token, would name the user".into());
        }
        crate::auth::Accounts::new(&s.accounts, s.allow_root_containers)?;
        Ok(())
    }

    /// The queues' ACLs (root's from `[security]`).
    pub fn queue_acls(&self) -> Result<crate::auth::QueueAcls, String> {
        let s = &self.security;
        let mut acls = crate::auth::QueueAcls::new(
            s.acl_submit_applications.as_deref().unwrap_or("*"),
            s.acl_administer_queue.as_deref().unwrap_or(" "),
        )
        .map_err(|e| format!("security: {e}"))?;
        for q in &self.queues {
            acls.set(&q.path, q.acl_submit_applications.as_deref(), q.acl_administer_queue.as_deref())
                .map_err(|e| format!("queue {}: {e}", q.path))?;
        }
        Ok(acls)
    }

    /// The user → account mapping for containers.
    pub fn accounts(&self) -> Result<crate::auth::Accounts, String> {
        crate::auth::Accounts::new(&self.security.accounts, self.security.allow_root_containers)
    }

    /// The scheduler's TLS material (none when not configured), read and checked.
    pub fn server_tls(&self) -> Result<Option<crate::tls::ServerTls>, String> {
        let s = &self.security;
        let (Some(cert), Some(key)) = (&s.tls_cert_file, &s.tls_key_file) else { return Ok(None) };
        let ca = s.tls_client_ca_file.as_ref().map(|p| self.resolve(p));
        crate::tls::ServerTls::load(&self.resolve(cert), &self.resolve(key), ca.as_deref())
            .map(Some)
            .map_err(|e| e.to_string())
    }

    /// Where a plugin's library is, resolved against the config file's directory.
    pub fn plugin_path(&self, plugin: &PluginSection) -> PathBuf {
        // A file in the working directory written `./lib.so` stays that, not `././lib.so`.
        let here = self.base_dir == Path::new(".") && plugin.path.starts_with(".");
        if plugin.path.is_absolute() || here { plugin.path.clone() } else { self.base_dir.join(&plugin.path) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SchedulerConfig, ConfigError> {
        SchedulerConfig::from_str_at(text, Path::new("<test>"), PathBuf::from("/etc/gantry"))
    }

    #[test]
    fn empty_config_is_all_defaults() {
        let c = parse("").expect("empty config");
        assert_eq!(c.engine_config(), EngineConfig::default());
    }

    #[test]
    fn full_config_parses_and_resolves_paths() {
        let c = parse(
            r#"
            [engine]
            seed = 9
            [[queues]]
            path = "root.prod"
            guaranteed = 0.6
            [[queues]]
            path = "root.dev"
            guaranteed = 0.4
            maximum = 0.5
            [[plugins]]
            name = "ff"
            path = "plugins/libgantry_minimal.so"
            [plugins.config]
            threshold = 0.6
            [profile]
            place = "ff"
            "#,
        )
        .expect("valid config");
        assert_eq!(c.engine_config().seed, 9);
        assert_eq!(c.engine_config().queues.len(), 2);
        assert_eq!(c.plugin_path(&c.plugins[0]), PathBuf::from("/etc/gantry/plugins/libgantry_minimal.so"));
        let here = SchedulerConfig { base_dir: PathBuf::from("."), ..c.clone() };
        let mut p = here.plugins[0].clone();
        for (written, resolved) in
            [("./lib.so", "./lib.so"), ("lib.so", "./lib.so"), ("../lib.so", "./../lib.so")]
        {
            p.path = PathBuf::from(written);
            // As text: Path equality would not see `././`.
            assert_eq!(here.plugin_path(&p).display().to_string(), resolved, "{written}");
        }
        assert_eq!(c.plugins[0].config.get("threshold").and_then(|v| v.as_float()), Some(0.6));
        assert_eq!(c.plugins[0].call_budget_ms, DEFAULT_CALL_BUDGET_MS, "a hang is bounded by default");
    }

    #[test]
    fn bad_configs_are_refused_with_reasons() {
        let cases = [
            ("[engine]\nsede = 1\n", "unknown field"),
            ("[profile]\nplace = \"nope\"\n", "not in [[plugins]]"),
            (
                "[profile]\nreserve = \"nope\"\n",
                "profile.reserve names plugin `nope`, which is not in [[plugins]]",
            ),
            (
                "[[queues]]\npath = \"root.a\"\nguaranteed = 0.7\n[[queues]]\npath = \"root.b\"\nguaranteed = 0.7\n",
                "more than 1",
            ),
            ("[[queues]]\npath = \"root.a.b\"\nguaranteed = 0.5\n", "parent `root.a` is not defined"),
            ("[[queues]]\npath = \"root.a\"\nguaranteed = 0.5\nmaximum = 0.2\n", "maximum"),
            ("[engine]\nquarantine_after = 0\n", "at least 1"),
            (
                "[[plugins]]\nname = \"a\"\npath = \"x.so\"\n[[plugins]]\nname = \"a\"\npath = \"y.so\"\n",
                "defined twice",
            ),
            (
                "[[plugins]]\nname = \"a\"\npath = \"x.so\"\ncall_budget_ms = 600001\n",
                "call_budget_ms 600001",
            ),
            ("[[plugins]]\nname = \"a\"\npath = \"x.so\"\ncall_budget_ms = -1\n", "TOML"),
            ("[engine\n", "TOML"),
            (
                "[[queues]]\npath = \"root.pr\\u202Eod\"\nguaranteed = 0.5\n",
                "contains U+202E (RIGHT-TO-LEFT OVERRIDE)",
            ),
            (
                "[security]\ntokens_file = \"t\"\nacl_submit_applications = \"al\\u200Bice\"\n",
                "contains U+200B (ZERO WIDTH SPACE)",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(want) || (want == "TOML" && err.contains("<test>")), "{text:?}: {err}");
        }
    }

    #[test]
    fn store_retention_follows_the_engine_by_default_and_bad_values_are_refused() {
        use crate::store::Retention;
        use std::time::Duration;
        let c = parse("").expect("defaults");
        assert_eq!(c.retention(), Retention { max_completed_apps: 10_000, max_age: None, chunk_apps: 100 });
        assert_eq!(c.prune_interval(), Duration::from_secs(60));
        let c = parse("[engine]\nmax_completed_apps = 50\n").expect("memory only");
        assert_eq!(
            c.retention().max_completed_apps,
            50,
            "YARN: the state store follows max-completed-applications"
        );
        let c = parse(
            "[store]\nmax_completed_apps = 1000000\nretain_completed_for = \"7d\"\n\
             prune_interval = \"90s\"\nprune_chunk_apps = 200\n",
        )
        .expect("full section");
        assert_eq!(
            c.retention(),
            Retention {
                max_completed_apps: 1_000_000,
                max_age: Some(Duration::from_secs(7 * 86_400)),
                chunk_apps: 200
            }
        );
        assert_eq!(c.prune_interval(), Duration::from_secs(90));
        let c = parse("[store]\nretain_completed_for = \"0\"\nprune_interval = \"250ms\"\n").expect("no age");
        assert_eq!((c.retention().max_age, c.prune_interval()), (None, Duration::from_millis(250)));
        let cases = [
            (
                "[engine]\nmax_completed_apps = 100\n[store]\nmax_completed_apps = 99\n",
                "below engine.max_completed_apps 100",
            ),
            ("[store]\nretain_completed_for = \"7x\"\n", "not a duration"),
            ("[store]\nretain_completed_for = \"1.5d\"\n", "not a duration"),
            ("[store]\nretain_completed_for = \"d\"\n", "not a duration"),
            ("[store]\nretain_completed_for = 7\n", "invalid type"),
            ("[store]\nretain_completed_for = \"500ms\"\n", "below 1s"),
            ("[store]\nretain_completed_for = \"99999999999999999d\"\n", "too long"),
            ("[store]\nprune_interval = \"50ms\"\n", "prune_interval"),
            ("[store]\nprune_interval = \"2d\"\n", "prune_interval"),
            ("[store]\nprune_chunk_apps = 0\n", "prune_chunk_apps 0"),
            ("[store]\nmax_completed = 5\n", "unknown field"),
        ];
        for (text, want) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn reservations_need_a_planner_plugin_and_old_planner_keys_say_where_they_went() {
        let planner = "[[plugins]]\nname = \"rayon\"\npath = \"libgantry_rayon.so\"\n[plugins.config]\nagent = \"gree-l\"\n";
        let queues = "[[queues]]\npath = \"root.prod\"\nguaranteed = 1.0\n";
        let c = parse(&format!(
            "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\noptimize_interval_ms = 60000\n"
        ))
        .expect("valid");
        assert_eq!(
            c.engine_config().reservations,
            Some(PlanConfig { optimize_interval_ms: 60_000, ..PlanConfig::new("root.prod") })
        );
        assert_eq!(c.profile.reserve.as_deref(), Some("rayon"));
        let cases = [
            (format!("{queues}[reservations]\nqueue = \"root.prod\"\n"), "needs a planner"),
            (format!("{queues}{planner}[profile]\nreserve = \"rayon\"\n"), "no queue is reservable"),
            (
                format!(
                    "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\nagent = \"gree\"\n"
                ),
                "reservations.agent moved to the reservation planner's own configuration",
            ),
            (
                format!(
                    "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\nreplanner = \"yarn\"\n"
                ),
                "replanner = \"yarn\" in its [plugins.config]",
            ),
            (
                format!(
                    "{queues}{planner}[profile]\nreserve = \"rayon\"\n[reservations]\nqueue = \"root.prod\"\noptimize_interval_ms = 10\n"
                ),
                "optimize_interval_ms 10",
            ),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(&text).to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn oversized_text_is_refused_as_an_oversized_file_is() {
        let huge = format!("# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
        assert!(matches!(parse(&huge), Err(ConfigError::TooLarge { .. })));
    }
}
