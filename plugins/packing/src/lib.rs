//! # gantry-packing
//!
//! Container packing, after Qubole's allocation strategy for YARN in elastic clusters (seed
//! `003`; `README.md` beside this crate has the settings and measured throughput). Spreading
//! containers evenly leaves every node holding a little work, so none can be given back when the
//! load drops; packing fills some nodes and leaves the rest empty, ready to scale down, while
//! still keeping clear of nodes that are already hot.
//!
//! Nodes fall into three categories by *usage* (see [`UsageOf`]; memory share by default):
//!
//! - **medium**: something allocated, usage at most `high_threshold` (60 % by default);
//! - **low**: nothing allocated;
//! - **high**: usage above `high_threshold`.
//!
//! Each container goes to the first node that fits, trying medium nodes fullest first, then low
//! nodes in a random order drawn from the call's seed, then high nodes least used first. A node
//! fits when every dimension fits (CPU, memory, GPUs against free GPUs), it is RUNNING and has
//! every label of the request's selector. Within each category, nodes that meet the request's
//! preferences (preferred labels; the rack of its earlier containers for
//! `GANTRY_REQUEST_SAME_RACK_PREFERRED`) come first. With fewer than `min_nodes` RUNNING nodes
//! packing is off and nodes are taken least used first, as in `spread`. Gangs place whole or not
//! at all (on one rack when required), and no request goes past its queue's (or an ancestor's)
//! maximum, so the engine has nothing to reject.
//!
//! `mode = "lifetime"` goes beyond the seed: nodes with work come first, the one whose work is
//! expected to end last first (from each container's start and its request's expected run time),
//! so nodes whose work ends soon are left to drain; then empty nodes in node order, so the same
//! few take new work and the rest stay empty long enough for the autoscaler's cool-down.
//!
//! `mode = "spread"` (least used first, YARN's uniform default) and `mode = "best-fit"` (most
//! used that fits first, like Kubernetes' `MostAllocated`) are the baselines.
//!
//! Placement comes from an index (`tree.rs`): a tournament tree over the nodes holding the
//! smallest key and the largest free room per dimension of each subtree, so finding the best
//! fitting node and charging a placement are O(log n) in the usual case, not a scan.
//!
//! The plugin implements `place` only and keeps nothing between calls but reusable buffers.

mod config;
mod plan;
#[cfg(test)]
mod reference;
mod tree;
mod usage;

pub use config::{Basis, Mode, PackingConfig, Ties, UsageOf};
pub use usage::usage;

use core::ffi::CStr;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use plan::{Index, Scratch};

/// The crate version as a NUL-terminated string, checked at compile time.
const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
};

/// The plugin. See the crate documentation.
#[derive(Debug)]
pub struct Packing {
    config: PackingConfig,
    scratch: Scratch,
    index: Index,
}

impl Packing {
    /// An instance with this configuration.
    pub fn with_config(config: PackingConfig) -> Packing {
        Packing { config, scratch: Scratch::default(), index: Index::default() }
    }

    /// Its configuration.
    pub fn config(&self) -> &PackingConfig {
        &self.config
    }
}

impl Plugin for Packing {
    const NAME: &'static CStr = c"packing";
    const VERSION: &'static CStr = VERSION;
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(config: &str) -> Result<Self, PluginError> {
        PackingConfig::parse(config).map(Packing::with_config)
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        plan::place(&self.config, view, &mut self.scratch, &mut self.index, out);
        Ok(())
    }
}

gantry_sdk::export_plugin!(Packing);
