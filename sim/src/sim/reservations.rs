//! Deadline jobs' Rayon reservations ([`crate::deadlines`]): each submitted at its time, the
//! answer recorded, an admitted one's job sent to the reservation's queue while it lasts, and
//! the plan's replans counted.

use super::Sim;
use crate::deadlines::ReservationAnswer;
use gantry_engine::{Command, Event, ReservationEnd, ReservationId};

impl Sim<'_> {
    /// Submits job reservation `k` to the Rayon planner; an admitted one's job will submit its
    /// stages to the reservation's queue.
    pub(super) fn reserve_job(&mut self, k: usize) {
        let r = &self.options.job_reservations[k];
        let job = r.job;
        let event = Event::ReservationSubmitted { id: None, request: r.request.clone() };
        match self.engine.handle(self.now, event) {
            Ok(cmds) => {
                for c in &cmds {
                    match c {
                        Command::ReservationAdmitted { reservation, queue, .. } => {
                            self.job_reservations[k].answer =
                                ReservationAnswer::Admitted { id: reservation.0, queue: queue.clone() };
                            self.reservation_of.insert(reservation.0, k);
                            if self.state[job].ended.is_none() {
                                self.queue_override[job] = Some(queue.clone());
                            }
                        }
                        Command::ReservationRejected { reason, .. } => {
                            self.job_reservations[k].answer = ReservationAnswer::Rejected(reason.clone());
                        }
                        _ => {}
                    }
                }
                self.apply(cmds);
            }
            Err(e) => {
                tracing::debug!(job = %self.jobs[job].name, error = %e, "reservation refused");
                self.job_reservations[k].answer = ReservationAnswer::Refused(e.to_string());
            }
        }
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
