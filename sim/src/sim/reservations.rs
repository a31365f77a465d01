//! Deadline jobs' Rayon reservations ([`crate::deadlines`]): each submitted at its time, the
//! answer recorded, an admitted one's job sent to the reservation's queue while it lasts, and
//! the plan's replans counted.

use super::Sim;
use super::scheduler::Asked;
use crate::deadlines::ReservationAnswer;
use gantry_controller::{Input, ReservationOp, ReservationOutcome, SubmitError};
use gantry_engine::{ReservationEnd, ReservationId};

impl Sim<'_> {
    /// Submits job reservation `k` to the Rayon planner; the answer comes to
    /// [`Sim::reservation_answered`].
    pub(super) fn reserve_job(&mut self, k: usize) {
        let request = self.options.job_reservations[k].request.clone();
        let reply = self.sched.ask(Asked::Reserve(k));
        self.send(Input::Reservation {
            reply,
            op: ReservationOp::Submit { id: None, caller: None, request },
        });
    }

    /// The planner answered job reservation `k`: an admitted one's job will submit its stages
    /// to the reservation's queue (`queue`, from the engine's admission).
    pub(super) fn reservation_answered(
        &mut self,
        k: usize,
        result: Result<ReservationOutcome, SubmitError>,
        queue: Option<String>,
    ) {
        let job = self.job_reservations[k].job;
        self.job_reservations[k].answer = match result {
            Ok(ReservationOutcome::Accepted { id, .. }) => {
                let queue = queue.unwrap_or_default();
                self.reservation_of.insert(id.0, k);
                if self.state[job].ended.is_none() {
                    self.queue_override[job] = Some(queue.clone());
                }
                ReservationAnswer::Admitted { id: id.0, queue }
            }
            Ok(ReservationOutcome::Rejected { reason, .. }) => ReservationAnswer::Rejected(reason),
            Err(e) => {
                tracing::debug!(job = %self.jobs[job].name, error = %e, "reservation refused");
                ReservationAnswer::Refused(e.to_string())
            }
        };
    }

    /// The planner moved `reservation`.
    pub(super) fn reservation_replanned(&mut self, reservation: ReservationId) {
        self.replans.0 += 1;
        if let Some(&k) = self.reservation_of.get(&reservation.0) {
            self.job_reservations[k].replanned += 1;
        }
    }

    /// `reservation` ended (its window closed, or a replan removed it): its job's later stages
    /// go to the job's own queue again.
    pub(super) fn reservation_ended(&mut self, reservation: ReservationId, why: ReservationEnd) {
        if why == ReservationEnd::Replanned {
            self.replans.1 += 1;
        }
        if let Some(k) = self.reservation_of.remove(&reservation.0) {
            let job = self.job_reservations[k].job;
            self.job_reservations[k].ended = Some((self.now, why));
            // Later stages go to the plan queue (its default); the engine has moved
            // the job's current application there.
            self.queue_override[job] = None;
        }
    }
}
