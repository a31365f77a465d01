//! The plugin's settings, read from the JSON object the scheduler passes to `create`
//! (`[plugins.config]` of the `rayon` plugin). Every setting is typed, defaulted and checked here;
//! unknown keys are refused. `plugins/rayon/README.md` has the table.

use std::time::Duration;

use gantry_sdk::PluginError;
use gantry_sdk::config::ConfigObject;

use crate::agents::Agent;

/// How a capacity loss is re-planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replanner {
    /// Rayon's ([`crate::replan::replan`]): move and reshape within windows, reject as few as
    /// possible (lowest priority, then newest).
    Rayon,
    /// YARN's `SimpleCapacityReplanner` ([`crate::replan::replan_yarn_simple`]): give up the newest
    /// reservations active at each overcommitted step until it fits.
    YarnSimple,
}

impl Replanner {
    /// `yarn` is the name the scheduler's own `[reservations] replanner` used before the planner
    /// became a plugin, kept so a moved setting works as it was written.
    const NAMES: [(&'static str, Replanner); 3] = [
        ("rayon", Replanner::Rayon),
        ("yarn-simple", Replanner::YarnSimple),
        ("yarn", Replanner::YarnSimple),
    ];

    /// The setting's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Replanner::Rayon => "rayon",
            Replanner::YarnSimple => "yarn-simple",
        }
    }
}

/// When the offline optimiser ([`crate::milp`]) runs on an OPTIMIZE call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optimizer {
    /// Never: OPTIMIZE calls answer nothing.
    Off,
    /// In the call itself (deterministic, for `gantry sim`; the call takes up to the time limit).
    Inline,
    /// On a thread of the plugin's own: a call starts a run on a snapshot of the plan, and a later
    /// call answers with its result if the accepted allocations are still those it optimised.
    Background,
}

impl Optimizer {
    const NAMES: [(&'static str, Optimizer); 3] =
        [("off", Optimizer::Off), ("inline", Optimizer::Inline), ("background", Optimizer::Background)];

    /// The setting's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Off => "off",
            Optimizer::Inline => "inline",
            Optimizer::Background => "background",
        }
    }
}

/// Everything `create` accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RayonConfig {
    /// The admission agent (`agent`: `gree`, the default, or `gree-l`).
    pub agent: Agent,
    /// How a capacity loss is re-planned (`replanner`: `rayon`, the default, or `yarn-simple`, also
    /// spelled `yarn`).
    pub replanner: Replanner,
    /// When the MILP runs (`optimizer`: `off`, the default, `inline` or `background`).
    pub optimizer: Optimizer,
    /// The solver's time limit (`optimizer_time_limit_ms`, 10 s).
    pub optimizer_time_limit: Duration,
    /// The most integer cells of the model (`optimizer_max_cells`, 1,500; slots coarsen to fit).
    pub optimizer_max_cells: usize,
}

impl Default for RayonConfig {
    fn default() -> Self {
        RayonConfig {
            agent: Agent::Gree,
            replanner: Replanner::Rayon,
            optimizer: Optimizer::Off,
            optimizer_time_limit: Duration::from_secs(10),
            optimizer_max_cells: 1500,
        }
    }
}

const NAME: &str = "rayon";

/// The settings `create` knows.
const KNOWN: [&str; 5] =
    ["agent", "replanner", "optimizer", "optimizer_time_limit_ms", "optimizer_max_cells"];

/// Longest solver time limit accepted: ten minutes. A background run is joined when the plugin
/// is destroyed, so this also bounds how long an unload may wait.
pub const MAX_TIME_LIMIT_MS: u64 = 600_000;
/// Most cells accepted: beyond this the model is far past what the pure-Rust solver handles.
pub const MAX_CELLS: u64 = 1_000_000;

fn err(message: String) -> PluginError {
    PluginError::new(format!("{NAME}: {message}"))
}

fn one_of<T: Copy>(
    c: &mut ConfigObject,
    key: &str,
    names: &[(&str, T)],
    default: T,
) -> Result<T, PluginError> {
    match c.str(key)? {
        None => Ok(default),
        Some(v) => names.iter().find(|(n, _)| *n == v).map(|(_, x)| *x).ok_or_else(|| {
            let list: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
            err(format!("`{key}` must be one of {}, got {v:?}", list.join(", ")))
        }),
    }
}

fn bounded(c: &mut ConfigObject, key: &str, default: u64, min: u64, max: u64) -> Result<u64, PluginError> {
    match c.u64(key)? {
        None => Ok(default),
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(err(format!("`{key}` must be from {min} to {max}, got {v}"))),
    }
}

impl RayonConfig {
    /// Reads the configuration. Unknown keys, unknown names and out-of-range numbers are refused,
    /// each error naming its key.
    pub fn parse(text: &str) -> Result<RayonConfig, PluginError> {
        let mut c = ConfigObject::parse(NAME, text)?;
        let d = RayonConfig::default();
        let agent = one_of(&mut c, "agent", &[("gree", Agent::Gree), ("gree-l", Agent::GreeL)], d.agent)?;
        let replanner = one_of(&mut c, "replanner", &Replanner::NAMES, d.replanner)?;
        let optimizer = one_of(&mut c, "optimizer", &Optimizer::NAMES, d.optimizer)?;
        let limit_ms = bounded(
            &mut c,
            "optimizer_time_limit_ms",
            d.optimizer_time_limit.as_millis() as u64,
            1,
            MAX_TIME_LIMIT_MS,
        )?;
        let cells = bounded(&mut c, "optimizer_max_cells", d.optimizer_max_cells as u64, 1, MAX_CELLS)?;
        c.finish(&KNOWN)?;
        Ok(RayonConfig {
            agent,
            replanner,
            optimizer,
            optimizer_time_limit: Duration::from_millis(limit_ms),
            optimizer_max_cells: usize::try_from(cells).unwrap_or(usize::MAX),
        })
    }

    /// The agent's setting spelling.
    pub fn agent_name(&self) -> &'static str {
        match self.agent {
            Agent::Gree => "gree",
            Agent::GreeL => "gree-l",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = RayonConfig::parse("{}").unwrap();
        assert_eq!(c, RayonConfig::default());
        assert_eq!(c.agent, Agent::Gree);
        assert_eq!(c.replanner, Replanner::Rayon);
        assert_eq!(c.optimizer, Optimizer::Off);
        assert_eq!(c.optimizer_time_limit, Duration::from_secs(10));
        assert_eq!(c.optimizer_max_cells, 1500);
        assert_eq!(c.agent_name(), "gree");
        // null means "the default", as for every plugin.
        assert_eq!(RayonConfig::parse(r#"{"agent": null}"#).unwrap(), RayonConfig::default());
    }

    #[test]
    fn every_setting_overrides() {
        let c = RayonConfig::parse(
            r#"{"agent": "gree-l", "replanner": "yarn-simple", "optimizer": "background",
                "optimizer_time_limit_ms": 2500, "optimizer_max_cells": 300}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            RayonConfig {
                agent: Agent::GreeL,
                replanner: Replanner::YarnSimple,
                optimizer: Optimizer::Background,
                optimizer_time_limit: Duration::from_millis(2500),
                optimizer_max_cells: 300,
            }
        );
        assert_eq!(c.agent_name(), "gree-l");
        for (name, r) in Replanner::NAMES {
            assert_eq!(r.name(), if name == "yarn" { "yarn-simple" } else { name });
        }
        let old = RayonConfig::parse(r#"{"replanner": "yarn"}"#).expect("the old spelling");
        assert_eq!(old.replanner, Replanner::YarnSimple);
        for (name, o) in Optimizer::NAMES {
            assert_eq!(o.name(), name);
        }
    }

    #[test]
    fn refuses_bad_settings_naming_the_key() {
        for (text, want) in [
            (r#"{"agent": "greedy"}"#, "`agent` must be one of gree, gree-l, got \"greedy\""),
            (r#"{"agent": 1}"#, "`agent` must be a string"),
            (r#"{"replanner": "simple"}"#, "`replanner` must be one of rayon, yarn-simple, yarn"),
            (r#"{"optimizer": "on"}"#, "`optimizer` must be one of off, inline, background"),
            (
                r#"{"optimizer_time_limit_ms": 0}"#,
                "`optimizer_time_limit_ms` must be from 1 to 600000, got 0",
            ),
            (r#"{"optimizer_time_limit_ms": 600001}"#, "`optimizer_time_limit_ms` must be from 1"),
            (r#"{"optimizer_time_limit_ms": "10s"}"#, "`optimizer_time_limit_ms` must be a whole number"),
            (r#"{"optimizer_max_cells": 0}"#, "`optimizer_max_cells` must be from 1 to 1000000"),
            (r#"{"step_ms": 1000}"#, "unknown setting `step_ms`"),
            ("[]", "must be a JSON object"),
            ("{", "configuration"),
        ] {
            let e = RayonConfig::parse(text).unwrap_err().message;
            assert!(e.starts_with("rayon: "), "{text}: {e}");
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
