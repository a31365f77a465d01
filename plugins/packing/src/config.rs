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
    /// Packing by when work ends: nodes with work first, the one whose work is expected to end
    /// last first (so nodes whose work ends soon drain), fullest first among equal ends; then
    /// empty nodes. Goes beyond the seed (issue 22).
    Lifetime,
}

impl Mode {
    const NAMES: [(&'static str, Mode); 4] = [
        ("packed", Mode::Packed),
        ("spread", Mode::Spread),
        ("best-fit", Mode::BestFit),
        ("lifetime", Mode::Lifetime),
    ];

    /// Whether the mode packs, and so turns itself off below `min_nodes`.
    pub fn packs(self) -> bool {
        matches!(self, Mode::Packed | Mode::Lifetime)
    }
}

/// How nodes that are otherwise equal are ordered — among empty nodes, the whole order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ties {
    /// A random permutation drawn from the call's seed (the seed picks empty nodes at random).
    Random,
    /// The nodes' order in the view (the engine's node index, stable for the cluster's life):
    /// the same few empty nodes take new work, so the others stay empty long enough for an
    /// autoscaler's cool-down.
    NodeOrder,
}

impl Ties {
    const NAMES: [(&'static str, Ties); 2] = [("random", Ties::Random), ("node-order", Ties::NodeOrder)];

    /// The default of `mode`: node order for `lifetime`, the seed's random order otherwise.
    pub fn default_for(mode: Mode) -> Ties {
        if mode == Mode::Lifetime { Ties::NodeOrder } else { Ties::Random }
    }
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
    /// Order among equals.
    pub ties: Ties,
    /// `lifetime`: ends closer than this count as equal (ms, at least 1).
    pub end_resolution_ms: u64,
}

impl Default for PackingConfig {
    fn default() -> Self {
        PackingConfig {
            mode: Mode::Packed,
            usage: UsageOf::Memory,
            basis: Basis::Allocated,
            high_threshold: 0.6,
            min_nodes: 5,
            ties: Ties::Random,
            end_resolution_ms: DEFAULT_END_RESOLUTION_S * 1000,
        }
    }
}

/// `lifetime`'s default resolution of end times: a minute.
const DEFAULT_END_RESOLUTION_S: u64 = 60;
/// Largest `end_resolution_s`: a year.
const MAX_END_RESOLUTION_S: u64 = 365 * 24 * 3600;

/// The settings `create` knows.
const KNOWN: [&str; 7] =
    ["mode", "usage", "basis", "high_threshold", "min_nodes", "ties", "end_resolution_s"];

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
        cfg.ties = match c.str("ties")? {
            Some(v) => pick("ties", &v, &Ties::NAMES)?,
            None => Ties::default_for(cfg.mode),
        };
        if let Some(s) = c.u64("end_resolution_s")? {
            if !(1..=MAX_END_RESOLUTION_S).contains(&s) {
                return Err(PluginError::new(format!(
                    "{NAME}: `end_resolution_s` must be from 1 to {MAX_END_RESOLUTION_S} seconds, got {s}"
                )));
            }
            cfg.end_resolution_ms = s * 1000;
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
            r#"{"mode":"best-fit","usage":"dominant","basis":"measured","high_threshold":1,"min_nodes":0,
                "ties":"node-order","end_resolution_s":3600}"#,
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
                ties: Ties::NodeOrder,
                end_resolution_ms: 3_600_000,
            }
        );
        // Ties follow the mode unless set: node order for `lifetime`, random otherwise.
        assert_eq!(PackingConfig::parse(r#"{"mode":"lifetime"}"#).unwrap().ties, Ties::NodeOrder);
        assert_eq!(PackingConfig::parse(r#"{"mode":"packed"}"#).unwrap().ties, Ties::Random);
        assert_eq!(
            PackingConfig::parse(r#"{"mode":"lifetime","ties":"random"}"#).unwrap().ties,
            Ties::Random
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
            (r#"{"mode":"tight"}"#, "`mode` must be one of packed, spread, best-fit, lifetime"),
            (r#"{"ties":"alphabetical"}"#, "`ties` must be one of random, node-order"),
            (r#"{"end_resolution_s":0}"#, "`end_resolution_s` must be from 1 to 31536000 seconds"),
            (r#"{"end_resolution_s":31536001}"#, "`end_resolution_s` must be from 1"),
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
