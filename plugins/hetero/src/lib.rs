//! # gantry-hetero
//!
//! Heterogeneity-aware placement of gangs on racks and special machines, after the CMU report
//! "Intelligent scheduling on YARN" (seed `002`; `README.md` beside this crate has the settings
//! and the measured effect of each).
//!
//! A pending request is a *job* of `count` containers. Where it would rather run is stated by the
//! request itself, so nothing here knows about "GPU jobs" or "MPI jobs":
//!
//! - preferred labels (`GantryRequest::preferred`, e.g. `gpu = "true"` or a GPU model), and/or
//!   one rack for all its containers (`GANTRY_REQUEST_SAME_RACK_PREFERRED`);
//! - its expected run time there (`expected_ms`) and elsewhere (`slow_ms`);
//! - its deadline (`deadline_ms`): a job completing T after submission earns `deadline − T`
//!   (or `utility_horizon_s − T` without a deadline), the seed's utility `1200 − T`.
//!
//! The **policy** picks the order (strict FCFS, SJF, or greedy utility) and whether a job that
//! cannot start holds up the rest; the **placement** mode says how preferences bind (`none`,
//! `soft`, `hard`); the **switches** are the report's refinements plus backfilling and dropping
//! hopeless starts. Gangs are all or nothing; a node selector is always a hard constraint.
//!
//! The plugin implements `place` only and keeps no state between calls other than the distinct
//! preference sets it has seen (which tell node kinds apart). Everything else is recomputed from
//! the view, so a restarted scheduler picks up where it was.

mod cluster;
mod config;
mod job;
mod schedule;

pub use config::{HeteroConfig, Placement, Policy, Switches};
pub use schedule::{WAIT_FOR_PREFERRED, WAIT_HOPELESS};

use cluster::{Cluster, PreferenceSets};
use core::ffi::CStr;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use job::Job;

/// The crate version as a NUL-terminated string, checked at compile time.
const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
};

/// The plugin. See the crate documentation.
#[derive(Debug)]
pub struct Hetero {
    config: HeteroConfig,
    preferences: PreferenceSets,
    /// Scratch: each request's preference-set bit, per call.
    request_bits: Vec<u64>,
}

impl Hetero {
    /// An instance with this configuration.
    pub fn with_config(config: HeteroConfig) -> Hetero {
        Hetero { config, preferences: PreferenceSets::default(), request_bits: Vec::new() }
    }

    /// Its configuration.
    pub fn config(&self) -> &HeteroConfig {
        &self.config
    }
}

impl Plugin for Hetero {
    const NAME: &'static CStr = c"hetero";
    const VERSION: &'static CStr = VERSION;
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(config: &str) -> Result<Self, PluginError> {
        HeteroConfig::parse(config).map(Hetero::with_config)
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        if view.pending.is_empty() {
            return Ok(());
        }
        self.preferences.learn(view, &mut self.request_bits);
        let cluster = Cluster::new(view, &self.preferences, &self.request_bits);
        let jobs: Vec<Job> = view
            .pending
            .iter()
            .take(self.config.max_scan)
            .enumerate()
            .filter_map(|(position, &r)| {
                let bit = self.request_bits.get(r as usize).copied().unwrap_or(0);
                Job::new(view, r, bit, self.config.horizon_ms, position)
            })
            .collect();
        schedule::Scheduler::new(&self.config, view, cluster, out).run(jobs);
        Ok(())
    }
}

gantry_sdk::export_plugin!(Hetero);
