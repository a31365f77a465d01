//! # gantry
//!
//! The user-facing `gantry` command, on top of the daemon's library ([`gantry_scheduler`]), the
//! agent ([`gantry_agent`], for `gantry dev`) and the simulator ([`gantry_sim`]). One module per
//! operation, as youki lays out its commands; `src/main.rs` only parses and dispatches.
//!
//! - [`cli`]: the cluster commands over the REST API (`submit`, `apps`, `app`, `kill`, `nodes`,
//!   `queues`, `logs`, `node`, `reserve`), one file each.
//! - [`dev`]: `gantry dev`, an all-in-one local cluster (the scheduler and one agent in-process).
//! - [`sim_cli`]: `gantry sim` and `gantry trace gen`.
//! - [`bench`]: `gantry bench engine|store|reserve`; [`loadgen`]: `gantry bench load`.
//! - [`cert_cli`]: `gantry cert`, over the cluster CA ([`ca`]).
//! - [`plugin_cli`]: `gantry plugin inspect`.
//! - [`token_file`]: the CLI's token files, and the one `gantry dev` makes for its user.

pub mod bench;
pub mod ca;
pub mod cert_cli;
pub mod cli;
pub mod dev;
pub mod loadgen;
pub mod plugin_cli;
pub mod sim_cli;
pub mod token_file;
