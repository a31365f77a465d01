//! # gantry-rayon
//!
//! The Rayon reservation system (Curino et al., "Reservation-based Scheduling: If You're Late
//! Don't Blame Us!", SoCC 2014; seed `001`) as a gantry plugin, `libgantry_rayon.so`: production
//! jobs reserve capacity ahead of their deadlines in the Reservation Definition Language (crate
//! `gantry-rdl`), and this plugin answers the host's ABI 1.3 `reserve` hook ([`plugin`]): it
//! keeps the cluster's capacity over time ([`plan`]) and admits or rejects each reservation at
//! once with a greedy agent ([`agents`]: GREE, procrastinating, and GREE-L, as flat as
//! possible). When capacity is lost, [`replan`] moves, reshapes and as a last resort gives up
//! reservations; [`milp`] is the paper's offline optimiser over the accepted plan.
//!
//! The host keeps only the generic mechanism (records, queues, the plan follower, validation);
//! `plugins/rayon/README.md` has the settings, reason codes and how to load it. The same code
//! links statically (`rlib`) into the tests, examples and benchmarks, which drive it through
//! the SDK's C glue (`harness`, behind the `harness` feature they turn on).

pub mod agents;
mod config;
#[cfg(feature = "harness")]
pub mod harness;
pub mod milp;
pub mod plan;
pub mod plugin;
pub mod replan;

pub use config::{Optimizer, RayonConfig, Replanner};
pub use plugin::{
    REASON_BAD_DEFINITION, REASON_DEADLINE_PASSED, REASON_GIVEN_UP, REASON_NO_ROOM, REASON_STARTED, Rayon,
    ReplanReport, Stats,
};

/// The Reservation Definition Language, which lives in its own crate (`gantry-rdl`); kept here
/// for the crates that still reach it through this one.
pub use gantry_rdl as rdl;

use core::ffi::CStr;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

/// The crate version as a NUL-terminated string, checked at compile time.
const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
};

impl Plugin for Rayon {
    const NAME: &'static CStr = c"rayon";
    const VERSION: &'static CStr = VERSION;
    const HOOKS: Hooks = Hooks { reserve: true, ..Hooks::NONE };

    fn create(config: &str) -> Result<Self, PluginError> {
        RayonConfig::parse(config).map(Rayon::with_config)
    }

    fn reserve(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.reserve_view(view, out)
    }
}

gantry_sdk::export_plugin!(Rayon);
