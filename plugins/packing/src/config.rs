//! The plugin's settings, read from the JSON object the scheduler passes to `create`.

use gantry_sdk::PluginError;
use gantry_sdk::config::ConfigObject;

/// How nodes are ordered for each container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Container packing: medium-usage nodes fullest first, then empty nodes at random, then
    /// high-usage nodes least used first.
    Packed,
    /// YARN's uniform default: the least used node first.
    Spread,
    /// Like Kubernetes' `MostAllocated` scoring: the most used node that fits first.
    BestFit,
}

impl Mode {
    const NAMES: [(&'static str, Mode); 3] =
        [("packed", Mode::Packed), ("spread", Mode::Spread), ("best-fit", Mode::BestFit)];
}

/// Which resource a node's *usage* (the number that orders and categorises nodes) measures.
/// Each dimension's share is `used / capacity`; dimensions a node lacks (capacity 0) are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageOf {
    /// Memory share (what YARN's `DefaultResourceCalculator` compares).
    Memory,
    /// CPU share.
    Cpu,
    /// GPU share.
    Gpus,
    /// The largest share (as dominant resource fairness defines a dominant share).
    Dominant,
    /// The mean of the shares.
    Mean,
}

impl UsageOf {
    const NAMES: [(&'static str, UsageOf); 5] = [
        ("memory", UsageOf::Memory),
        ("cpu", UsageOf::Cpu),
        ("gpus", UsageOf::Gpus),
        ("dominant", UsageOf::Dominant),
        ("mean", UsageOf::Mean),
    ];
}

/// What "used" means when computing usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The resources allocated to containers (`GantryNode::allocated`).
    Allocated,
    /// What the node's agent last measured (`View::node_usage`, ABI 1.1), plus what was placed
    /// there since; the allocation where no sample exists.
    Measured,
}

impl Basis {
    const NAMES: [(&'static str, Basis); 2] =
        [("allocated", Basis::Allocated), ("measured", Basis::Measured)];
}

/// Everything `create` accepts. See `plugins/packing/README.md` for the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PackingConfig {
    /// Node order.
    pub mode: Mode,
    /// What usage measures.
    pub usage: UsageOf,
    /// Allocated or measured usage.
    pub basis: Basis,
    /// A node whose usage is above this fraction is a high-usage node (Qubole's
    /// `HIGH_NODE_THRESHOLD`, 60 % by default). In (0, 1].
    pub high_threshold: f64,
    /// Packing turns itself off (orders like `spread`) while fewer nodes than this are RUNNING.
    pub min_nodes: u32,
}

impl Default for PackingConfig {
    fn default() -> Self {
        PackingConfig {
            mode: Mode::Packed,
            usage: UsageOf::Memory,
            basis: Basis::Allocated,
            high_threshold: 0.6,
            min_nodes: 5,
        }
    }
}

/// The settings `create` knows.
const KNOWN: [&str; 5] = ["mode", "usage", "basis", "high_threshold", "min_nodes"];

const NAME: &str = "packing";

fn pick<T: Copy>(key: &str, value: &str, names: &[(&str, T)]) -> Result<T, PluginError> {
    names.iter().find(|(n, _)| *n == value).map(|(_, v)| *v).ok_or_else(|| {
        let list: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        PluginError::new(format!("{NAME}: `{key}` must be one of {}, got {value:?}", list.join(", ")))
    })
}

impl PackingConfig {
    /// Reads the configuration. Unknown keys, unknown names and out-of-range numbers are refused.
    pub fn parse(text: &str) -> Result<PackingConfig, PluginError> {
        let mut c = ConfigObject::parse(NAME, text)?;
        let mut cfg = PackingConfig::default();
        if let Some(v) = c.str("mode")? {
            cfg.mode = pick("mode", &v, &Mode::NAMES)?;
        }
        if let Some(v) = c.str("usage")? {
            cfg.usage = pick("usage", &v, &UsageOf::NAMES)?;
        }
        if let Some(v) = c.str("basis")? {
            cfg.basis = pick("basis", &v, &Basis::NAMES)?;
        }
        if let Some(t) = c.f64("high_threshold")? {
            if !(t > 0.0 && t <= 1.0) {
                return Err(PluginError::new(format!("{NAME}: `high_threshold` must be in (0, 1], got {t}")));
            }
            cfg.high_threshold = t;
        }
        if let Some(n) = c.u64("min_nodes")? {
            cfg.min_nodes = u32::try_from(n).map_err(|_| {
                PluginError::new(format!("{NAME}: `min_nodes` must be at most {}, got {n}", u32::MAX))
            })?;
        }
        c.finish(&KNOWN)?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(PackingConfig::parse("{}").unwrap(), PackingConfig::default());
        let c = PackingConfig::parse(
            r#"{"mode":"best-fit","usage":"dominant","basis":"measured","high_threshold":1,"min_nodes":0}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            PackingConfig {
                mode: Mode::BestFit,
                usage: UsageOf::Dominant,
                basis: Basis::Measured,
                high_threshold: 1.0,
                min_nodes: 0,
            }
        );
        for (name, mode) in Mode::NAMES {
            assert_eq!(PackingConfig::parse(&format!(r#"{{"mode":"{name}"}}"#)).unwrap().mode, mode);
        }
        for (name, usage) in UsageOf::NAMES {
            assert_eq!(PackingConfig::parse(&format!(r#"{{"usage":"{name}"}}"#)).unwrap().usage, usage);
        }
    }

    #[test]
    fn refuses_bad_settings() {
        for (text, want) in [
            (r#"{"mode":"tight"}"#, "`mode` must be one of packed, spread, best-fit"),
            (r#"{"usage":"disk"}"#, "`usage` must be one of memory, cpu, gpus, dominant, mean"),
            (r#"{"basis":"guessed"}"#, "`basis` must be one of allocated, measured"),
            (r#"{"high_threshold":0}"#, "`high_threshold` must be in (0, 1]"),
            (r#"{"high_threshold":1.5}"#, "`high_threshold` must be in (0, 1]"),
            (r#"{"high_threshold":-0.2}"#, "`high_threshold` must be in (0, 1]"),
            (r#"{"high_threshold":"high"}"#, "high_threshold"),
            (r#"{"min_nodes":-1}"#, "min_nodes"),
            (r#"{"min_nodes":4294967296}"#, "`min_nodes` must be at most"),
            (r#"{"high_treshold":0.7}"#, "unknown setting `high_treshold`"),
            ("[]", "must be a JSON object"),
            ("{", "invalid JSON"),
        ] {
            let e = PackingConfig::parse(text).unwrap_err().message;
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
