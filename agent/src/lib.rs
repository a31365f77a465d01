//! # gantry-agent
//!
//! The node agent: one per machine. It measures the machine ([`probe`]), launches containers —
//! process trees in their own session and cgroup, with CPU and memory limits — through a small
//! per-container supervisor ([`shim`], [`executor`], [`cgroup`]; each launch checked once,
//! [`launch_spec`]), enforces limits and samples
//! usage ([`monitor`]), remembers its containers across its own restarts (the executor's
//! per-container control directories), exposes `/metrics` ([`metrics`]) and talks to the
//! scheduler over one gRPC stream ([`client`]); [`daemon`] ties them together, and kills the
//! containers of an agent cut off from its scheduler ([`fencing`]; the containers' supervisors
//! do it too, through a lease the agent renews, when the agent itself is dead or stopped:
//! [`lease`], [`shim_wait`]). [`procfs`] is the one reader
//! of `/proc` process tables.

pub mod cgroup;
pub mod cleanup;
pub mod client;
pub mod conditions;
pub mod config;
pub mod daemon;
pub mod disk;
pub mod executor;
pub mod fencing;
pub mod housekeeping;
pub mod instance;
pub mod isolation;
pub mod launch_spec;
pub mod lease;
pub mod metrics;
pub mod model;
pub mod monitor;
pub mod probe;
pub mod procfs;
pub mod sandbox;
pub mod shim;
pub mod shim_wait;
