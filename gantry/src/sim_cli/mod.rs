//! `gantry sim`: a workload trace through the real engine — the scheduler's configuration, its
//! queues and its plugin `.so` files — on a virtual clock ([`gantry_sim`]), with the results
//! written to a directory.
//!
//! Split by what each part does: the flags (`args.rs`), what they ask for, checked
//! (`options.rs`: Alibaba, elastic, deadline and node-loss options), the run (`run.rs`: traces,
//! engine, progress, outputs), and `gantry trace gen` (`trace_gen.rs`).

mod args;
mod options;
mod run;
#[cfg(test)]
mod tests;
mod trace_gen;

pub use args::{AgentArg, DaemonArgs, DeadlineArgs, GpuSpecMode, ReplannerArg, SimArgs, TraceFormat};
pub use options::{
    SimPlan, alibaba_options, daemon_options, deadline_options, default_planner, elastic_options, lost_nodes,
};
pub use run::{engine_for, engine_with_plan, read_traces, run_sim};
pub use trace_gen::{GenFormat, TraceGenArgs, run_trace_gen};

use gantry_sim::trace;
use std::path::PathBuf;

/// Why a simulation did not run.
#[derive(Debug, thiserror::Error)]
pub enum SimCliError {
    /// The cluster file.
    #[error(transparent)]
    Cluster(#[from] gantry_sim::cluster::ClusterError),
    /// A trace.
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// The scheduler configuration.
    #[error("{0}")]
    Config(String),
    /// The engine or its plugins.
    #[error(transparent)]
    Build(#[from] gantry_scheduler::BuildError),
    /// The engine refused the setup.
    #[error(transparent)]
    Engine(#[from] gantry_engine::EngineError),
    /// The run.
    #[error(transparent)]
    Sim(#[from] gantry_sim::sim::SimError),
    /// Writing the results.
    #[error("writing {path}: {source}")]
    Write {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Bad arguments.
    #[error("{0}")]
    Args(String),
}
