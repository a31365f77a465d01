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
//! enforce_ahead_ms = 0         # raise a piece's guarantee this long before it starts, and start
//!                              # no allocation sooner after admission (the time preemption needs)
//! ```
//!
//! The planner is a plugin answering `reserve` (e.g. `libgantry_rayon.so`, whose own
//! `[plugins.config]` chooses its agent and replanner), named by `[profile] reserve`.

use gantry_engine::{EngineConfig, QueueSpec};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

mod sections;
#[cfg(test)]
mod tests;

pub use sections::*;

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
