//! # gantry-sdk
//!
//! Everything needed to write a scheduling policy plugin for gantry:
//!
//! - [`abi`]: the C ABI v1, `#[repr(C)]` records and constants shared with `include/gantry.h`;
//! - [`View`]: a safe view of the cluster passed to every hook, borrowing the host's arrays;
//! - [`Feasibility`]: the host's own placement rules, to check placements within one call;
//! - [`Plugin`], [`Decisions`] and [`export_plugin!`]: implement the trait, export the type, and
//!   the SDK provides the entry symbol, the vtable, panic catching and buffer handling;
//! - `testkit` (cargo feature `testkit`, for tests): a view builder that owns the records a
//!   hand-built [`View`] borrows.
//!
//! Plugin authors write no `unsafe`. The contract is in `sdk/ABI.md`; the guide in
//! `sdk/README.md`.
//!
//! ```
//! use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
//!
//! /// Places each pending container on the first node with room.
//! struct FirstFit;
//!
//! impl Plugin for FirstFit {
//!     const NAME: &'static core::ffi::CStr = c"first-fit";
//!     const VERSION: &'static core::ffi::CStr = c"0.1.0";
//!     const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };
//!
//!     fn create(_config: &str) -> Result<Self, PluginError> {
//!         Ok(FirstFit)
//!     }
//!
//!     fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
//!         let mut allocated: Vec<_> = view.nodes.iter().map(|n| n.allocated).collect();
//!         for &r in view.pending {
//!             let req = &view.requests[r as usize];
//!             if req.flags & gantry_sdk::abi::GANTRY_REQUEST_GANG != 0 {
//!                 continue; // this tiny example leaves gangs alone
//!             }
//!             for _ in req.placed..req.count {
//!                 let found = view.nodes.iter().enumerate().position(|(i, n)| {
//!                     n.state == gantry_sdk::abi::GANTRY_NODE_RUNNING
//!                         && view.node_matches(n, req.selector)
//!                         && allocated[i].plus(&req.resources).fits_in(&n.capacity)
//!                 });
//!                 let Some(i) = found else { break };
//!                 allocated[i] = allocated[i].plus(&req.resources);
//!                 out.place(r, i as u32);
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! gantry_sdk::export_plugin!(FirstFit);
//! ```

pub mod abi;
pub mod capacity;
pub mod config;
pub mod feasibility;
pub mod limits;
pub mod names;
mod panics;
mod plugin;
pub mod rng;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod units;
mod view;

pub use feasibility::{Feasibility, Infeasible};
pub use plugin::{__private, Decisions, Hooks, Plugin, PluginError};
pub use view::{PlanView, View, ViewError};
