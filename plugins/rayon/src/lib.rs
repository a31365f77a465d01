//! # gantry-rayon
//!
//! The Rayon reservation system (Curino et al., "Reservation-based Scheduling: If You're Late
//! Don't Blame Us!", SoCC 2014; seed `001`): production jobs reserve capacity ahead of their
//! deadlines in the Reservation Definition Language ([`rdl`]), a planner keeps the cluster's
//! capacity over time ([`plan`]) and admits or rejects each reservation at once with a greedy
//! agent ([`agents`]: GREE, procrastinating, and GREE-L, as flat as possible). When capacity is
//! lost, [`replan`] moves, reshapes and as a last resort rejects reservations; [`milp`] is the
//! paper's offline optimiser over the accepted plan.
//!
//! A library: the scheduler links it (the ABI's reservation record cannot carry RDL). It depends
//! only on the SDK, for the resource record and its small JSON reader.

pub mod agents;
pub mod milp;
pub mod plan;
pub mod replan;

/// The Reservation Definition Language, which lives in its own crate (`gantry-rdl`) because the
/// scheduler's API parses it too.
pub use gantry_rdl as rdl;
