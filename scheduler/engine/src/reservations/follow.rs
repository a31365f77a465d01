//! The plan follower, run at each cycle: reservations whose deadline has passed end (their
//! applications move to `<plan>.default`), and each reservation queue's guarantee becomes its
//! allocation at this instant — Σ bundles × the atom's bundle over the pieces covering now
//! ([`GuaranteeRule::Fixed`]) — while `default` takes what they leave ([`GuaranteeRule::Rest`]).
//! Guarantees are set again once a follower step (`[reservations] step_ms`), or at once after
//! the plan changed.
//!
//! **Ahead of the plan.** Making room takes time — a preemption round, its wait before the
//! kill, the grace, the next cycle — so a piece's guarantee starts `enforce_ahead_ms` before the
//! piece does: the guarantee is the most the allocation holds from now to that much later.
//!
//! **A run started inside the allocation may finish.** Tasks do not end on the plan's step
//! grid: a piece of 18 bundles for 17 s holds three waves of 4.7 s tasks, not 65 tasks, and a
//! task started 250 ms into its piece (the kill grace that made room for it) ends 250 ms after
//! it. Cutting such a run at the piece's end throws its work away and costs the job its
//! deadline (issue 22: most of `rayon-swim`'s misses). So a reservation's guarantee also covers
//! its containers that started at or after its allocation began and are still within their
//! expected run time (the request's `expected_ms`, or `slow_ms` if longer), up to the most the
//! allocation ever holds at once, until the deadline — out of the plan's capacity that no
//! reservation holds at the moment (earliest deadline first), never out of another
//! reservation's allocation. Containers started before the allocation began (borrowed idle
//! capacity) and containers of unknown run time are not covered.

use std::collections::BTreeMap;

use super::{PlannedReservation, ReservationBook, ReservationEnd};
use crate::event::Command;
use crate::model::Resources;
use crate::state::{ClusterState, GuaranteeRule};
use gantry_sdk::abi::{GANTRY_CONTAINER_ALLOCATED, GANTRY_CONTAINER_RUNNING};

impl ReservationBook {
    /// Follows the plan at `now`.
    pub(crate) fn follow(&mut self, state: &mut ClusterState, now: u64, commands: &mut Vec<Command>) {
        for id in self.expired(now) {
            self.end(state, id, ReservationEnd::Expired, commands);
        }
        // Nothing before now is checked again: the skyline forgets it.
        self.skyline.forget_before(now);
        let step = now / self.config().step_ms.max(1);
        if self.followed_step == Some(step) {
            return;
        }
        self.followed_step = Some(step);
        let carried = carried_runs(state, self.records(), now);
        let ahead = self.config().enforce_ahead_ms;
        let mut held: Vec<(&PlannedReservation, Resources)> =
            self.records().map(|r| (r, ahead_of(r, now, ahead))).collect();
        // What the plan holds for no reservation now: the runs carried past their allocation
        // come out of it, earliest deadline first, never out of another reservation's share.
        let mut spare = held.iter().fold(self.capacity(), |left, (_, allocated)| left.minus(allocated));
        held.sort_by_key(|(r, _)| (r.deadline_ms, r.id.0));
        let rules: Vec<(u32, Resources)> = held
            .into_iter()
            .map(|(r, allocated)| {
                let mut guaranteed = allocated;
                if let Some(runs) = carried.get(&r.queue) {
                    let extra = runs.min_each(&r.peak()).minus(&allocated).min_each(&spare);
                    spare = spare.minus(&extra);
                    guaranteed = allocated.plus(&extra);
                }
                (r.queue, guaranteed)
            })
            .collect();
        for (queue, guaranteed) in rules {
            state.set_queue_rule(queue, GuaranteeRule::Fixed(guaranteed));
        }
        state.recompute_capacity();
    }
}

/// What a reservation's guarantee is at `now` by its allocation: the most it holds from now to
/// `ahead` ms later (pieces starting by then count already, so that the room is made in time).
fn ahead_of(r: &PlannedReservation, now: u64, ahead: u64) -> Resources {
    let until = now.saturating_add(ahead);
    r.allocation
        .iter()
        .filter(|p| p.start_ms > now && p.start_ms <= until)
        .map(|p| r.allocated_at(p.start_ms))
        .fold(r.allocated_at(now), |a, b| a.max_each(&b))
}

/// Per reservation queue, the resources of its live containers that started at or after its
/// allocation began and are within their expected run time at `now` (before its deadline).
fn carried_runs<'a>(
    state: &ClusterState,
    records: impl Iterator<Item = &'a PlannedReservation>,
    now: u64,
) -> BTreeMap<u32, Resources> {
    // Queue → when its allocation begins; reservations past their deadline carry nothing.
    let begins: BTreeMap<u32, u64> = records
        .filter(|r| now < r.deadline_ms)
        .filter_map(|r| r.allocation.iter().map(|p| p.start_ms).min().map(|start| (r.queue, start)))
        .collect();
    let mut out: BTreeMap<u32, Resources> = BTreeMap::new();
    if begins.is_empty() {
        return out;
    }
    let (apps, requests) = (state.apps(), state.requests());
    for c in state.containers() {
        if !matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING) {
            continue;
        }
        let Some(queue) = apps.get(c.app as usize).map(|a| a.queue) else { continue };
        let Some(&begins_ms) = begins.get(&queue) else { continue };
        let run_ms = requests.get(c.request as usize).map_or(0, |r| r.expected_run_ms());
        if run_ms == 0 || c.start_ms < begins_ms || c.start_ms.saturating_add(run_ms) <= now {
            continue;
        }
        let sum = out.entry(queue).or_default();
        *sum = sum.plus(&c.resources);
    }
    out
}
