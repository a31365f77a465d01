//! # gantry-engine
//!
//! The heart of the gantry scheduler: a pure, deterministic state machine. It takes
//! [`Event`]s (a node registered, an app was submitted, a container exited, time passed) and
//! returns [`Command`]s (launch, kill, state changes). It owns no sockets, threads, clock or
//! unseeded randomness — time comes in with each event — so the daemon and the simulator drive
//! the very same code, and every run can be replayed.
//!
//! A `Tick` runs one scheduling cycle: **admit** new apps → **order** pending requests →
//! **place** them → **validate** every decision → **commit** → commands. Each step may be
//! answered by a [`Policy`] (a plugin); the engine validates whatever it returns ([`validate`])
//! and falls back to built-in behaviour ([`fifo::FirstFitFifo`]) when a plugin fails or is
//! quarantined. Reservations are planned by a plugin too, at once when they are submitted
//! ([`reservations`]).
//!
//! The records the engine keeps are the `repr(C)` records of the plugin ABI
//! ([`gantry_sdk::abi`]), so the view passed to a plugin borrows the engine's own arrays.

mod det_hash;
pub mod engine;
pub mod error;
pub mod event;
pub mod fifo;
pub mod model;
pub mod plugin_log;
pub mod policy;
pub mod reservations;
pub mod rng;
pub mod state;
pub mod strings;
#[cfg(feature = "test-planner")]
pub mod test_planner;
pub mod validate;
pub mod waiting;

pub use engine::{
    APP_KILL_GRACE_MS, Engine, EngineStats, KILLED_BY_REQUEST, PolicyStatus, Reclaimed, ReservationStats,
};
pub use error::EngineError;
pub use event::{Command, Event, KillReason, NodeCondition};
pub use model::*;
pub use policy::{Policy, PolicyError, Profile, StaticPolicy, ViewChanges, hook_name};
pub use reservations::validate::{MAX_ALLOCATION_PIECES, Refusal, cause_name};
pub use reservations::{
    AtomInterval, MAX_ENFORCE_AHEAD_MS, PlanConfig, PlannedPiece, PlannedReservation, ReservationBook,
    ReservationEnd, ReservationRequest, legacy_allocation,
};
pub use state::{IdleNode, NodeMeta};
pub use validate::{PlaceNote, RejectReason, Rejections};
pub use waiting::Waiting;
