//! The plugin's settings, read from the JSON object the scheduler passes to `create`.

use gantry_sdk::PluginError;
use gantry_sdk::config::ConfigObject;

/// Which job goes next, and whether a job that cannot start holds up the ones behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Strict first come, first served, first-fit nodes in the view's order: the first job that
    /// cannot start stops the queue (the seed's s-FCFS).
    Fcfs,
    /// Strict FCFS on randomly chosen nodes (the seed's "FCFS random").
    FcfsRandom,
    /// Strict FCFS with heterogeneity-aware node choice (racks packed best-fit, scarce nodes
    /// spared; see [`Switches`]).
    FcfsHetero,
    /// Shortest expected job first, heterogeneity-aware node choice; a job that cannot start is
    /// skipped.
    SjfHetero,
    /// Repeatedly start the job with the highest utility if started now (horizon − wait −
    /// run time on the placement found), heterogeneity-aware node choice.
    GreedyUtility,
}

impl Policy {
    const NAMES: [(&'static str, Policy); 5] = [
        ("fcfs", Policy::Fcfs),
        ("fcfs-random", Policy::FcfsRandom),
        ("fcfs-hetero", Policy::FcfsHetero),
        ("sjf-hetero", Policy::SjfHetero),
        ("greedy-utility", Policy::GreedyUtility),
    ];

    /// Whether the first job that cannot start stops the queue (unless backfilling).
    pub fn strict_order(self) -> bool {
        matches!(self, Policy::Fcfs | Policy::FcfsRandom | Policy::FcfsHetero)
    }
}

/// How a request's preferences (preferred labels, one rack) bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Ignored: any node that passes the selector.
    None,
    /// Preferred resources when free, else anywhere (where the job runs at its slower duration).
    Soft,
    /// Only preferred resources; otherwise the job waits.
    Hard,
}

impl Placement {
    const NAMES: [(&'static str, Placement); 3] =
        [("none", Placement::None), ("soft", Placement::Soft), ("hard", Placement::Hard)];
}

/// The refinements, each switchable so its effect can be measured. Section numbers are the seed
/// report's (`shared/seeds/002_…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Switches {
    /// §5.1.1: a job runs on nodes of one kind only. Nodes are of the same kind when they satisfy
    /// the same known preference sets (e.g. all GPU machines, or all plain ones), so a job that
    /// cannot get enough preferred nodes does not take the few there are.
    pub no_mixing: bool,
    /// §5.1.2: spare nodes that other jobs prefer. A job whose preferences a plain node satisfies
    /// (an MPI job wanting one rack) takes plain racks first and nodes other jobs prefer (the GPU
    /// rack) only when nothing else fits; a job placed off its preferences takes plain nodes first.
    pub protect_preferred: bool,
    /// §5.2: SJF orders by machine-seconds, expected run time × containers, not run time.
    pub sjf_machine_seconds: bool,
    /// §2: a job that could start now only off its preferences waits instead when its preferred
    /// resources are expected to free soon enough that waiting finishes it earlier; the nodes it
    /// waits for are held for it. This makes the soft/hard choice per job, by expected utility.
    pub wait_for_better: bool,
    /// EASY backfilling: the first job that cannot start gets a reservation at the earliest time
    /// it fits (from the running containers' expected ends); later jobs start only if they do not
    /// delay it. Strict FCFS then no longer stops at that job.
    pub backfill: bool,
    /// A job that cannot finish before its deadline on any placement available now is not
    /// started there (it would be killed and earn nothing, and hold machines others could use);
    /// it waits for a placement that finishes in time.
    pub skip_hopeless: bool,
}

impl Switches {
    /// The default: every refinement but `no_mixing`, which `protect_preferred` mostly
    /// subsumes and which, with it, only stops jobs that could start (EXPERIMENTS.md,
    /// "hetero-seed": all-but-no_mixing beats all at each load tried).
    pub const RECOMMENDED: Switches = Switches { no_mixing: false, ..Switches::ALL };

    /// Every refinement on.
    pub const ALL: Switches = Switches {
        no_mixing: true,
        protect_preferred: true,
        sjf_machine_seconds: true,
        wait_for_better: true,
        backfill: true,
        skip_hopeless: true,
    };
}

/// Everything `create` accepts. See `plugins/hetero/README.md` for the table.
#[derive(Debug, Clone, PartialEq)]
pub struct HeteroConfig {
    /// Order and blocking.
    pub policy: Policy,
    /// How preferences bind.
    pub placement: Placement,
    /// Refinements.
    pub switches: Switches,
    /// Utility horizon for requests without a deadline: a job completing T ms after its
    /// submission earns `horizon − T` (the seed's 1200 s).
    pub horizon_ms: u64,
    /// Most pending requests considered per call; the rest wait for the next cycle. Bounds a
    /// call's time on very long queues.
    pub max_scan: usize,
    /// Most distinct release times looked ahead when finding when a job will fit.
    pub lookahead_steps: usize,
}

impl Default for HeteroConfig {
    fn default() -> Self {
        HeteroConfig {
            policy: Policy::SjfHetero,
            placement: Placement::Soft,
            switches: Switches::RECOMMENDED,
            horizon_ms: 1_200_000,
            max_scan: 2_000,
            lookahead_steps: 512,
        }
    }
}

/// The settings `create` knows.
const KNOWN: [&str; 12] = [
    "policy",
    "placement",
    "no_mixing",
    "protect_preferred",
    "sjf_machine_seconds",
    "wait_for_better",
    "backfill",
    "skip_hopeless",
    "utility_horizon_s",
    "max_scan",
    "lookahead_steps",
    "improvements",
];

const NAME: &str = "hetero";

fn pick<T: Copy>(key: &str, value: &str, names: &[(&str, T)]) -> Result<T, PluginError> {
    names.iter().find(|(n, _)| *n == value).map(|(_, v)| *v).ok_or_else(|| {
        let list: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        PluginError::new(format!("{NAME}: `{key}` must be one of {}, got {value:?}", list.join(", ")))
    })
}

impl HeteroConfig {
    /// Reads the configuration. Unknown keys, unknown names and out-of-range numbers are refused.
    ///
    /// `improvements` sets the refinements at once (`"recommended"`, the default, `"all"` or
    /// `"none"`); the individual switches then override it.
    pub fn parse(text: &str) -> Result<HeteroConfig, PluginError> {
        let mut c = ConfigObject::parse(NAME, text)?;
        let mut cfg = HeteroConfig::default();
        if let Some(p) = c.str("policy")? {
            cfg.policy = pick("policy", &p, &Policy::NAMES)?;
        }
        if let Some(p) = c.str("placement")? {
            cfg.placement = pick("placement", &p, &Placement::NAMES)?;
        }
        if let Some(all) = c.str("improvements")? {
            cfg.switches = pick(
                "improvements",
                &all,
                &[
                    ("recommended", Switches::RECOMMENDED),
                    ("all", Switches::ALL),
                    ("none", Switches::default()),
                ],
            )?;
        }
        let s = &mut cfg.switches;
        for (key, field) in [
            ("no_mixing", &mut s.no_mixing),
            ("protect_preferred", &mut s.protect_preferred),
            ("sjf_machine_seconds", &mut s.sjf_machine_seconds),
            ("wait_for_better", &mut s.wait_for_better),
            ("backfill", &mut s.backfill),
            ("skip_hopeless", &mut s.skip_hopeless),
        ] {
            if let Some(v) = c.bool(key)? {
                *field = v;
            }
        }
        if let Some(h) = c.f64("utility_horizon_s")? {
            if !(h > 0.0 && h <= 365.0 * 86_400.0) {
                return Err(PluginError::new(format!(
                    "{NAME}: `utility_horizon_s` must be in (0, 31536000], got {h}"
                )));
            }
            cfg.horizon_ms = (h * 1000.0).round() as u64;
        }
        for (key, field, max) in [
            ("max_scan", &mut cfg.max_scan, 1_000_000usize),
            ("lookahead_steps", &mut cfg.lookahead_steps, 100_000usize),
        ] {
            if let Some(v) = c.u64(key)? {
                if v == 0 || v > max as u64 {
                    return Err(PluginError::new(format!("{NAME}: `{key}` must be in 1..={max}, got {v}")));
                }
                *field = v as usize;
            }
        }
        c.finish(&KNOWN)?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_names_and_overrides() {
        assert_eq!(HeteroConfig::parse("{}").unwrap(), HeteroConfig::default());
        let c = HeteroConfig::parse(
            r#"{"policy":"fcfs-random","placement":"hard","improvements":"none","backfill":true,"utility_horizon_s":600}"#,
        )
        .unwrap();
        assert_eq!(c.policy, Policy::FcfsRandom);
        assert_eq!(c.placement, Placement::Hard);
        assert_eq!(c.switches, Switches { backfill: true, ..Switches::default() });
        assert_eq!(c.horizon_ms, 600_000);
    }

    #[test]
    fn refuses_bad_settings() {
        for (text, want) in [
            (r#"{"policy":"lifo"}"#, "`policy` must be one of fcfs, fcfs-random"),
            (r#"{"placement":"firm"}"#, "`placement` must be one of none, soft, hard"),
            (r#"{"no_mixing":"yes"}"#, "`no_mixing` must be true or false"),
            (r#"{"utility_horizon_s":-5}"#, "`utility_horizon_s` must be in"),
            (r#"{"max_scan":0}"#, "`max_scan` must be in 1..="),
            (r#"{"polcy":"fcfs"}"#, "unknown setting `polcy`"),
            ("[]", "must be a JSON object"),
        ] {
            let e = HeteroConfig::parse(text).unwrap_err().message;
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
