//! The sections of the scheduler's TOML configuration as serde reads them — `[engine]`,
//! `[server]`, `[store]`, `[[queues]]`, `[[plugins]]`, `[profile]`, `[security]`,
//! `[reservations]` — with their defaults; [`super::SchedulerConfig`] checks them together.

use gantry_engine::PlanConfig;
use gantry_sdk::units::{Reading, parse_quantity};
use serde::Deserialize;
use std::path::PathBuf;

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

/// How the configuration reads a duration: the SDK's grammar, whole numbers only, days too;
/// a unit is required (`"0"`, the word for none, is read before).
const CONFIG_DURATION: Reading = Reading { decimals: false, lenient: true, days: true, ..Reading::DURATION };

impl std::str::FromStr for ConfigDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim() == "0" {
            return Ok(ConfigDuration(std::time::Duration::ZERO));
        }
        let ms = parse_quantity(text, &CONFIG_DURATION).map_err(|e| e.to_string())?;
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
    /// How long before a piece of an allocation its guarantee is enforced, and how soon after
    /// admission an allocation may start, ms (default 0: the plan exactly).
    #[serde(default)]
    pub enforce_ahead_ms: u64,
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
        if self.enforce_ahead_ms > gantry_engine::MAX_ENFORCE_AHEAD_MS {
            return Err(format!(
                "reservations.enforce_ahead_ms {} is not in 0..={}",
                self.enforce_ahead_ms,
                gantry_engine::MAX_ENFORCE_AHEAD_MS
            ));
        }
        Ok(PlanConfig {
            queue: self.queue.clone(),
            step_ms: self.step_ms,
            horizon_ms: self.horizon_ms,
            optimize_interval_ms: self.optimize_interval_ms,
            enforce_ahead_ms: self.enforce_ahead_ms,
        })
    }
}
