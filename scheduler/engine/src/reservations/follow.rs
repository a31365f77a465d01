//! The plan follower, run at each cycle: reservations whose deadline has passed end (their
//! applications move to `<plan>.default`), and each reservation queue's guarantee becomes its
//! allocation at this instant — Σ bundles × the atom's bundle over the pieces covering now
//! ([`GuaranteeRule::Fixed`]) — while `default` takes what they leave ([`GuaranteeRule::Rest`]).
//! Guarantees are set again once a follower step (`[reservations] step_ms`), or at once after
//! the plan changed.

use super::{ReservationBook, ReservationEnd};
use crate::event::Command;
use crate::model::Resources;
use crate::state::{ClusterState, GuaranteeRule};

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
        let rules: Vec<(u32, Resources)> = self.records().map(|r| (r.queue, r.allocated_at(now))).collect();
        for (queue, guaranteed) in rules {
            state.set_queue_rule(queue, GuaranteeRule::Fixed(guaranteed));
        }
        state.recompute_capacity();
    }
}
