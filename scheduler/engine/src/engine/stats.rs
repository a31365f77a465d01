//! The counters and status records the engine hands out: what it did ([`EngineStats`],
//! [`ReservationStats`], [`Reclaimed`]) and how each loaded policy fares ([`PolicyStatus`]).

use crate::model::Resources;
use crate::validate::Rejections;

/// Counters of the engine's work, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Containers placed (launch commands issued).
    pub placements: u64,
    /// Decisions rejected by validation, by reason.
    pub rejected: Rejections,
    /// Policy calls that failed (error code, panic, protocol violation, or malformed output).
    pub policy_failures: u64,
    /// Times a policy was quarantined.
    pub quarantines: u64,
    /// Cycles whose placement was done by the built-in first-fit FIFO instead of a configured
    /// plugin (because it failed or was quarantined).
    pub fallback_placements: u64,
    /// Containers preempted (PREEMPT or KILL by a rebalance policy), and what they held, by the
    /// index of their leaf queue (queues are never removed, so indexes are stable).
    pub preempted_by_queue: Vec<Reclaimed>,
    /// What the reservation plan did.
    pub reservations: ReservationStats,
}

/// Counts of the reservation plan's outcomes since the engine started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReservationStats {
    /// Submissions and updates accepted.
    pub admitted: u64,
    /// Submissions and updates rejected (no room).
    pub rejected: u64,
    /// Allocations changed by a replan, an update that made room, or the optimiser.
    pub moved: u64,
    /// Reservations ended at their deadline.
    pub expired: u64,
    /// Reservations deleted by a client.
    pub deleted: u64,
    /// Reservations a replan after a capacity loss could not keep.
    pub replan_rejected: u64,
    /// `reserve` calls the built-in answered instead of the planner (none configured,
    /// quarantined, failed, or its answer refused).
    pub builtin: u64,
}

/// What rebalancing took from one queue since the engine started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    /// Containers stopped.
    pub containers: u64,
    /// Their resources, summed.
    pub resources: Resources,
}

/// Health, identity and record of a loaded policy, for status pages and per-plugin metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyStatus {
    /// Policy name.
    pub name: String,
    /// Failed calls in a row.
    pub consecutive_failures: u32,
    /// Until when (engine ms) it is quarantined.
    pub quarantined_until: Option<u64>,
    /// Its decisions refused by validation, by reason, since the engine started.
    pub rejected: Rejections,
    /// Its failed calls (error, panic, protocol violation, malformed output) so far.
    pub failures: u64,
    /// Times it was quarantined so far.
    pub quarantines: u64,
    /// Its failed calls that were panics caught at the boundary.
    pub panics: u64,
    /// Its failed calls that ran past its budget (or came while such a call still ran).
    pub timeouts: u64,
}
