//! The plugin's settings, read from the JSON object the scheduler passes to `create`. Names and
//! defaults are YARN's (`yarn.resourcemanager.monitor.capacity.preemption.*`), with `_ms` on the
//! durations.

use gantry_sdk::PluginError;
use gantry_sdk::config::ConfigObject;

/// How resources are compared and added up when queues are balanced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calculator {
    /// Memory only, as YARN's `DefaultResourceCalculator`: a queue's size is its memory.
    Memory,
    /// Dominant share, as YARN's `DominantResourceCalculator` (DRF): a queue's size is its
    /// largest share of the cluster over CPU, memory and GPUs.
    Dominant,
}

impl Calculator {
    const NAMES: [(&'static str, Calculator); 2] =
        [("memory", Calculator::Memory), ("dominant", Calculator::Dominant)];

    /// The setting's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Calculator::Memory => "memory",
            Calculator::Dominant => "dominant",
        }
    }
}

/// Everything `create` accepts. See `plugins/preemption/README.md` for the table.
#[derive(Debug, Clone, PartialEq)]
pub struct PreemptionConfig {
    /// Time between two rounds of the policy (YARN's `monitoring_interval`, 3000 ms).
    pub monitoring_interval_ms: u64,
    /// A container selected continuously for this long is preempted (YARN's
    /// `max_wait_before_kill`, 15000 ms).
    pub max_wait_before_kill_ms: u64,
    /// At most this fraction of the cluster is asked back per round (YARN's
    /// `total_preemption_per_round`, 0.1). In (0, 1].
    pub total_preemption_per_round: f64,
    /// Dead zone: a queue is left alone while it holds at most its guarantee × (1 + this)
    /// (YARN's `max_ignored_over_capacity`, 0.1). At least 0.
    pub max_ignored_over_capacity: f64,
    /// Fraction of the imbalance asked back per round; the rest is expected to come back by
    /// containers ending on their own (YARN's `natural_termination_factor`, 0.2). In (0, 1].
    pub natural_termination_factor: f64,
    /// Mark (and count) candidates but never preempt (YARN's `observe_only`, false).
    pub observe_only: bool,
    /// Grace between SIGTERM and SIGKILL of a preempted container (250 ms, the NodeManager's
    /// `sleep-delay-before-sigkill`).
    pub kill_grace_ms: u64,
    /// How resources are measured (`memory`, the default, or `dominant`).
    pub resource_calculator: Calculator,
    /// Queues (full paths) whose containers are never preempted, with their subtrees (YARN's
    /// per-queue `disable_preemption`, which children inherit). Such a queue keeps what it holds
    /// beyond its guarantee; the others give back what the under-served queues then lack.
    pub disable_preemption: Vec<String>,
    /// Count what comes back on its own from the containers' expected run times (their
    /// requests' `expected_ms`) where every container of a queue has one, instead of assuming
    /// `natural_termination_factor` (true).
    pub use_expected_runtimes: bool,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        PreemptionConfig {
            monitoring_interval_ms: 3_000,
            max_wait_before_kill_ms: 15_000,
            total_preemption_per_round: 0.1,
            max_ignored_over_capacity: 0.1,
            natural_termination_factor: 0.2,
            observe_only: false,
            kill_grace_ms: 250,
            resource_calculator: Calculator::Memory,
            disable_preemption: Vec::new(),
            use_expected_runtimes: true,
        }
    }
}

impl PreemptionConfig {
    /// Whether preemption is disabled for the queue at `path`: it, or a queue above it, is
    /// listed in `disable_preemption`.
    pub fn preemption_disabled(&self, path: &str) -> bool {
        self.disable_preemption.iter().any(|d| {
            path.strip_prefix(d.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    }
}

/// The settings `create` knows.
const KNOWN: [&str; 10] = [
    "monitoring_interval_ms",
    "max_wait_before_kill_ms",
    "total_preemption_per_round",
    "max_ignored_over_capacity",
    "natural_termination_factor",
    "observe_only",
    "kill_grace_ms",
    "resource_calculator",
    "disable_preemption",
    "use_expected_runtimes",
];

const NAME: &str = "preemption";

/// Longest interval or wait accepted: one day. Anything longer is a unit mistake.
pub const MAX_INTERVAL_MS: u64 = 86_400_000;
/// Longest grace accepted: the engine's limit for a PREEMPT (one hour).
pub const MAX_GRACE_MS: u64 = 3_600_000;
/// Largest dead zone accepted (a queue would have to hold 101 × its ideal to be touched).
pub const MAX_DEAD_ZONE: f64 = 100.0;

fn err(message: String) -> PluginError {
    PluginError::new(format!("{NAME}: {message}"))
}

fn fraction(c: &mut ConfigObject, key: &str, default: f64) -> Result<f64, PluginError> {
    match c.f64(key)? {
        None => Ok(default),
        Some(v) if v > 0.0 && v <= 1.0 => Ok(v),
        Some(v) => Err(err(format!("`{key}` must be in (0, 1], got {v}"))),
    }
}

fn millis(c: &mut ConfigObject, key: &str, default: u64, min: u64, max: u64) -> Result<u64, PluginError> {
    match c.u64(key)? {
        None => Ok(default),
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(err(format!("`{key}` must be from {min} to {max} ms, got {v}"))),
    }
}

impl PreemptionConfig {
    /// Reads the configuration. Unknown keys, unknown names and out-of-range numbers are refused.
    pub fn parse(text: &str) -> Result<PreemptionConfig, PluginError> {
        let mut c = ConfigObject::parse(NAME, text)?;
        let d = PreemptionConfig::default();
        let monitoring_interval_ms =
            millis(&mut c, "monitoring_interval_ms", d.monitoring_interval_ms, 1, MAX_INTERVAL_MS)?;
        let max_wait_before_kill_ms =
            millis(&mut c, "max_wait_before_kill_ms", d.max_wait_before_kill_ms, 0, MAX_INTERVAL_MS)?;
        let total_preemption_per_round =
            fraction(&mut c, "total_preemption_per_round", d.total_preemption_per_round)?;
        let max_ignored_over_capacity = match c.f64("max_ignored_over_capacity")? {
            None => d.max_ignored_over_capacity,
            Some(v) if (0.0..=MAX_DEAD_ZONE).contains(&v) => v,
            Some(v) => {
                return Err(err(format!(
                    "`max_ignored_over_capacity` must be from 0 to {MAX_DEAD_ZONE}, got {v}"
                )));
            }
        };
        let natural_termination_factor =
            fraction(&mut c, "natural_termination_factor", d.natural_termination_factor)?;
        let observe_only = c.bool("observe_only")?.unwrap_or(d.observe_only);
        let kill_grace_ms = millis(&mut c, "kill_grace_ms", d.kill_grace_ms, 0, MAX_GRACE_MS)?;
        let resource_calculator = match c.str("resource_calculator")? {
            None => d.resource_calculator,
            Some(v) => Calculator::NAMES.iter().find(|(n, _)| *n == v).map(|(_, c)| *c).ok_or_else(|| {
                err(format!("`resource_calculator` must be one of memory, dominant, got {v:?}"))
            })?,
        };
        let disable_preemption = c.str_list("disable_preemption")?.unwrap_or_default();
        if let Some(bad) = disable_preemption.iter().find(|p| !valid_queue_path(p)) {
            return Err(err(format!(
                "`disable_preemption` lists {bad:?}, which is not a queue path (`root` or `root.a.b`)"
            )));
        }
        let use_expected_runtimes = c.bool("use_expected_runtimes")?.unwrap_or(d.use_expected_runtimes);
        c.finish(&KNOWN)?;
        Ok(PreemptionConfig {
            monitoring_interval_ms,
            max_wait_before_kill_ms,
            total_preemption_per_round,
            max_ignored_over_capacity,
            natural_termination_factor,
            observe_only,
            kill_grace_ms,
            resource_calculator,
            disable_preemption,
            use_expected_runtimes,
        })
    }
}

/// `root`, or `root.` followed by names separated by dots, none empty or with blanks.
fn valid_queue_path(path: &str) -> bool {
    let mut parts = path.split('.');
    parts.next() == Some("root") && parts.all(|p| !p.is_empty() && !p.chars().any(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yarns_defaults() {
        let c = PreemptionConfig::parse("{}").unwrap();
        assert_eq!(c, PreemptionConfig::default());
        assert_eq!(c.monitoring_interval_ms, 3_000);
        assert_eq!(c.max_wait_before_kill_ms, 15_000);
        assert_eq!(c.total_preemption_per_round, 0.1);
        assert_eq!(c.max_ignored_over_capacity, 0.1);
        assert_eq!(c.natural_termination_factor, 0.2);
        assert!(!c.observe_only);
        assert_eq!(c.kill_grace_ms, 250);
        assert_eq!(c.resource_calculator, Calculator::Memory);
        assert!(c.disable_preemption.is_empty());
        assert!(c.use_expected_runtimes);
    }

    #[test]
    fn disable_preemption_covers_the_subtree() {
        let c =
            PreemptionConfig::parse(r#"{"disable_preemption": ["root.prod", "root.adhoc.vip"]}"#).unwrap();
        for (path, disabled) in [
            ("root", false),
            ("root.prod", true),
            ("root.prod.etl", true),
            ("root.production", false),
            ("root.adhoc", false),
            ("root.adhoc.vip", true),
            ("root.adhoc.vip.x", true),
        ] {
            assert_eq!(c.preemption_disabled(path), disabled, "{path}");
        }
    }

    #[test]
    fn every_setting_overrides() {
        let c = PreemptionConfig::parse(
            r#"{"monitoring_interval_ms": 1000, "max_wait_before_kill_ms": 0,
                "total_preemption_per_round": 1, "max_ignored_over_capacity": 0,
                "natural_termination_factor": 1.0, "observe_only": true, "kill_grace_ms": 5000,
                "resource_calculator": "dominant", "disable_preemption": ["root.a"],
                "use_expected_runtimes": false}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            PreemptionConfig {
                monitoring_interval_ms: 1000,
                max_wait_before_kill_ms: 0,
                total_preemption_per_round: 1.0,
                max_ignored_over_capacity: 0.0,
                natural_termination_factor: 1.0,
                observe_only: true,
                kill_grace_ms: 5000,
                resource_calculator: Calculator::Dominant,
                disable_preemption: vec!["root.a".into()],
                use_expected_runtimes: false,
            }
        );
        // null means "the default", as for every plugin.
        assert_eq!(
            PreemptionConfig::parse(r#"{"observe_only": null}"#).unwrap(),
            PreemptionConfig::default()
        );
        for (name, calc) in Calculator::NAMES {
            assert_eq!(calc.name(), name);
        }
    }

    #[test]
    fn refuses_bad_settings() {
        for (text, want) in [
            (
                r#"{"monitoring_interval_ms": 0}"#,
                "`monitoring_interval_ms` must be from 1 to 86400000 ms, got 0",
            ),
            (r#"{"monitoring_interval_ms": 86400001}"#, "`monitoring_interval_ms` must be from 1"),
            (r#"{"monitoring_interval_ms": 2.5}"#, "`monitoring_interval_ms` must be a whole number"),
            (r#"{"monitoring_interval_ms": "3s"}"#, "`monitoring_interval_ms` must be a whole number"),
            (r#"{"max_wait_before_kill_ms": -1}"#, "`max_wait_before_kill_ms` must be a whole number"),
            (r#"{"max_wait_before_kill_ms": 86400001}"#, "`max_wait_before_kill_ms` must be from 0"),
            (r#"{"total_preemption_per_round": 0}"#, "`total_preemption_per_round` must be in (0, 1], got 0"),
            (r#"{"total_preemption_per_round": 1.5}"#, "`total_preemption_per_round` must be in (0, 1]"),
            (r#"{"total_preemption_per_round": -0.1}"#, "`total_preemption_per_round` must be in (0, 1]"),
            (r#"{"max_ignored_over_capacity": -0.1}"#, "`max_ignored_over_capacity` must be from 0 to 100"),
            (r#"{"max_ignored_over_capacity": 101}"#, "`max_ignored_over_capacity` must be from 0 to 100"),
            (r#"{"natural_termination_factor": 0}"#, "`natural_termination_factor` must be in (0, 1]"),
            (r#"{"natural_termination_factor": 2}"#, "`natural_termination_factor` must be in (0, 1]"),
            (r#"{"observe_only": "yes"}"#, "`observe_only` must be true or false"),
            (r#"{"kill_grace_ms": 3600001}"#, "`kill_grace_ms` must be from 0 to 3600000 ms"),
            (r#"{"resource_calculator": "cpu"}"#, "`resource_calculator` must be one of memory, dominant"),
            (r#"{"natural_termination": 0.2}"#, "unknown setting `natural_termination`"),
            (r#"{"disable_preemption": "root.a"}"#, "`disable_preemption` must be a list of strings"),
            (r#"{"disable_preemption": ["prod"]}"#, "lists \"prod\", which is not a queue path"),
            (r#"{"disable_preemption": ["root..a"]}"#, "not a queue path"),
            (r#"{"use_expected_runtimes": 1}"#, "`use_expected_runtimes` must be true or false"),
            ("[]", "must be a JSON object"),
            ("{", "invalid JSON"),
        ] {
            let e = PreemptionConfig::parse(text).unwrap_err().message;
            assert!(e.starts_with("preemption: "), "{text}: {e}");
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
