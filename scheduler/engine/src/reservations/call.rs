//! Calling the reservation planner, the policy in `Profile::reserve` (the `reserve` hook of ABI
//! 1.3), at once — not in the cycle — with a cause:
//!
//! - ADMIT when a reservation is submitted (the subject is NEW: plan it or reject it);
//! - UPDATE when an accepted reservation that has not started gets a new definition (plan it
//!   anew, or reject: the update is refused and the old allocation stays);
//! - REPLAN when the plan queue's capacity falls so that the accepted allocations overcommit it
//!   from now on (move, shrink or give up reservations until everything fits);
//! - OPTIMIZE every `[reservations] optimize_interval_ms` at a cycle, or when a client asks
//!   (move accepted reservations; an empty answer changes nothing).
//!
//! Only an answer the host has checked ([`super::validate`]) is applied, whole. When the planner
//! is absent, quarantined, fails, or its answer is refused (a failed call, toward quarantine),
//! the built-in stands in: ADMIT rejects with the reason, UPDATE is refused, OPTIMIZE does
//! nothing, and REPLAN is YARN's `SimpleCapacityReplanner`: at each instant from now on where the
//! plan is over its capacity, the reservations holding something there are given up, newest
//! first, until it fits.

use gantry_sdk::abi::*;

use super::book::{Prepared, ReservationBook};
use super::validate::{self, Answer, Call, Refusal, cause_name};
use super::{AtomInterval, ReservationEnd, ReservationRequest};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::event::Command;
use crate::model::ReservationId;
use crate::plugin_log::Incident;
use crate::policy::PolicyError;
use crate::validate::Rejections;

/// What a `reserve` call came to.
enum Outcome {
    /// A checked answer, to apply.
    Answer(Answer),
    /// The built-in stands in, for this reason.
    Builtin(String),
}

impl Engine {
    /// The book and the planner, or why reservations cannot be planned.
    fn planner(&self) -> Result<(&ReservationBook, usize), EngineError> {
        match (&self.book, self.profile.reserve) {
            (Some(book), Some(slot)) => Ok((book, slot)),
            _ => Err(EngineError::NoReservationPlanner),
        }
    }

    /// `Event::ReservationSubmitted`: the planner admits or rejects it at once.
    pub(crate) fn submit_reservation(
        &mut self,
        id: Option<ReservationId>,
        request: ReservationRequest,
    ) -> Result<(), EngineError> {
        let now = self.now_ms;
        let (book, _) = self.planner()?;
        let id = match id {
            Some(id) if id.0 == 0 => {
                return Err(EngineError::Invalid { what: "reservation id", reason: "must not be 0".into() });
            }
            Some(id) if book.get(id).is_some() || self.state.plan.index_of(id.0).is_some() => {
                return Err(EngineError::Conflict(format!("reservation {} already exists", id.0)));
            }
            Some(id) => id,
            None => ReservationId(self.state.next_reservation),
        };
        let prepared = book.for_admission(book.prepare(request, now)?, now);
        if let Some(why) = book.cannot_plan(&prepared, now) {
            self.state.next_reservation = self.state.next_reservation.max(id.0 + 1);
            self.commands.push(Command::ReservationRejected { reservation: id, reason: why });
            return Ok(());
        }
        let book = self.book.as_mut().ok_or(EngineError::NoReservationPlanner)?;
        let index = book.stage_new(&mut self.state, id, prepared)?;
        self.state.next_reservation = self.state.next_reservation.max(id.0 + 1);
        let outcome = self.reserve_call(GANTRY_RESERVE_ADMIT, index);
        self.finish_subject(GANTRY_RESERVE_ADMIT, id, outcome);
        Ok(())
    }

    /// `Event::ReservationUpdated`: the planner plans the new definition or refuses it (the old
    /// allocation stays). Only a reservation that has not started may change.
    pub(crate) fn update_reservation(
        &mut self,
        id: ReservationId,
        request: ReservationRequest,
    ) -> Result<(), EngineError> {
        let now = self.now_ms;
        let (book, _) = self.planner()?;
        let Some(r) = book.get(id) else {
            return Err(EngineError::Conflict(format!("reservation {} does not exist", id.0)));
        };
        if r.started(now) {
            return Err(EngineError::Conflict(format!(
                "reservation {} has started; only a reservation that has not started can be updated",
                id.0
            )));
        }
        let prepared: Prepared = book.for_admission(book.prepare(request, now)?, now);
        if let Some(why) = book.cannot_plan(&prepared, now) {
            self.commands.push(Command::ReservationRejected { reservation: id, reason: why });
            return Ok(());
        }
        let book = self.book.as_mut().ok_or(EngineError::NoReservationPlanner)?;
        let index = book.stage_update(&mut self.state, id, prepared)?;
        let outcome = self.reserve_call(GANTRY_RESERVE_UPDATE, index);
        self.finish_subject(GANTRY_RESERVE_UPDATE, id, outcome);
        Ok(())
    }

    /// Asks the planner to re-organise the plan (OPTIMIZE); applies a checked answer's moves.
    /// Nothing happens without a planner or reservations.
    pub(crate) fn optimize_reservations(&mut self) {
        if self.planner().map_or(true, |(book, _)| book.is_empty()) {
            return;
        }
        match self.reserve_call(GANTRY_RESERVE_OPTIMIZE, GANTRY_NONE) {
            Outcome::Answer(answer) => {
                let moved = self.apply_moves(answer.planned);
                tracing::debug!(moved, "reservation plan optimised");
            }
            Outcome::Builtin(why) => tracing::debug!(%why, "the plan is kept as it is"),
        }
    }

    /// The periodic OPTIMIZE call, at a cycle, when due.
    pub(crate) fn optimize_when_due(&mut self) {
        let now = self.now_ms;
        let Some(book) = &mut self.book else { return };
        let every = book.config().optimize_interval_ms;
        if every == 0 || now < book.next_optimize_ms {
            return;
        }
        book.next_optimize_ms = now.saturating_add(every);
        self.optimize_reservations();
    }

    /// Follows the plan queue's guarantee after an event: the plan's capacity becomes it, and
    /// if it fell so that the accepted allocations overcommit it from now on, the planner
    /// re-plans (REPLAN). Only a loss re-plans: while a restarted scheduler's nodes come back
    /// one by one the restored plan is over the capacity seen so far, and nothing must move for
    /// that.
    pub(crate) fn follow_plan_capacity(&mut self) {
        let now = self.now_ms;
        let Some(book) = &mut self.book else { return };
        let cap = self.state.queues[book.plan_queue as usize].absolute_guaranteed;
        if cap == book.capacity() {
            return;
        }
        let fell = book.set_capacity(&mut self.state, cap);
        if fell && book.overcommitted(now).is_some() {
            self.replan_reservations();
        }
    }

    /// REPLAN, or YARN's simple replanner when the planner's answer cannot be used.
    fn replan_reservations(&mut self) {
        match self.reserve_call(GANTRY_RESERVE_REPLAN, GANTRY_NONE) {
            Outcome::Answer(answer) => {
                let given_up = answer.rejected.len();
                for (id, _) in &answer.rejected {
                    self.end_reservation(*id, ReservationEnd::Replanned);
                }
                let moved = self.apply_moves(answer.planned);
                tracing::info!(moved, given_up, "re-planned reservations after a capacity loss");
            }
            Outcome::Builtin(why) => {
                let given_up = self.simple_replan();
                tracing::warn!(%why, given_up, "the plan was repaired by YARN's simple replanner");
            }
        }
    }

    /// YARN's `SimpleCapacityReplanner`: gives up reservations holding something where the plan
    /// is over its capacity, newest first, until it fits. Returns how many it gave up.
    fn simple_replan(&mut self) -> usize {
        let now = self.now_ms;
        let mut given_up = 0;
        while let Some(t) = self.book.as_ref().and_then(|b| b.overcommitted(now)) {
            let victim = self.book.as_ref().and_then(|b| b.active_newest_first(t).first().copied());
            let Some(victim) = victim else {
                tracing::error!(at = t, "the plan is over its capacity where no reservation holds anything");
                break;
            };
            self.end_reservation(victim, ReservationEnd::Replanned);
            given_up += 1;
        }
        given_up
    }

    fn end_reservation(&mut self, id: ReservationId, why: ReservationEnd) {
        if let Some(book) = &mut self.book {
            book.end(&mut self.state, id.0, why, &mut self.commands);
        }
    }

    /// Gives accepted reservations their new allocations; returns how many changed.
    fn apply_moves(&mut self, planned: Vec<(ReservationId, Vec<AtomInterval>)>) -> usize {
        let Some(book) = &mut self.book else { return 0 };
        let mut moved = 0;
        for (id, allocation) in planned {
            if book.set_allocation(&mut self.state, id, allocation.clone()) {
                self.commands.push(Command::ReservationReplanned { reservation: id, allocation });
                moved += 1;
            }
        }
        moved
    }

    /// Applies what an ADMIT or UPDATE call came to for its subject `id` (and the other
    /// reservations the answer moved).
    fn finish_subject(&mut self, cause: u32, id: ReservationId, outcome: Outcome) {
        let name = self.planner_name();
        let update = cause == GANTRY_RESERVE_UPDATE;
        let refused = |why: String| if update { format!("the update was refused: {why}") } else { why };
        let mut answer = match outcome {
            Outcome::Answer(answer) => answer,
            Outcome::Builtin(why) => {
                if let Some(book) = &mut self.book {
                    book.unstage(&mut self.state);
                }
                self.commands.push(Command::ReservationRejected { reservation: id, reason: refused(why) });
                return;
            }
        };
        let mine = answer.planned.iter().position(|(r, _)| *r == id).map(|k| answer.planned.swap_remove(k).1);
        let code = answer.rejected.iter().find(|(r, _)| *r == id).map(|(_, c)| *c);
        let now = self.now_ms;
        let Some(book) = &mut self.book else { return };
        match mine {
            Some(allocation) => {
                let queue = book.accept_staged(&mut self.state, now, allocation.clone());
                let queue = queue.map(|q| self.state.queue_path(q).to_owned()).unwrap_or_default();
                self.commands.push(Command::ReservationAdmitted { reservation: id, queue, allocation });
            }
            None => {
                book.unstage(&mut self.state);
                let reason = match code {
                    Some(code) if update => format!(
                        "the planner `{name}` refused the update (reason {code}); the old allocation stays"
                    ),
                    Some(code) => {
                        format!("no room in the plan: the planner `{name}` rejected it (reason {code})")
                    }
                    None => refused(format!("the planner `{name}` gave no answer")),
                };
                self.commands.push(Command::ReservationRejected { reservation: id, reason });
            }
        }
        self.apply_moves(answer.planned);
    }

    fn planner_name(&self) -> String {
        self.profile
            .reserve
            .and_then(|i| self.policies.get(i))
            .map_or_else(|| "none".to_owned(), |p| p.policy.name().to_owned())
    }

    /// Calls the planner with `cause` about view index `subject` and checks its answer.
    fn reserve_call(&mut self, cause: u32, subject: u32) -> Outcome {
        let Some(i) = self.profile.reserve else {
            self.stats.reservations.builtin += 1;
            return Outcome::Builtin("no reservation planner is configured".into());
        };
        let now = self.now_ms;
        let name = self.policies[i].policy.name().to_owned();
        if let Some(until) = self.policies[i].quarantined_until {
            if now < until {
                self.stats.reservations.builtin += 1;
                return Outcome::Builtin(format!("the planner `{name}` is quarantined until {until}"));
            }
            self.policies[i].quarantined_until = None;
            tracing::info!(policy = %name, "quarantine over; trying the plugin again");
        }
        let seed = self.rng.next_u64();
        let changes = self.state.view_changes(i);
        let mut view = self.state.view(GANTRY_HOOK_RESERVE, now, self.cycle, seed, &[]);
        view.plan.cause = cause;
        view.plan.subject = subject;
        self.buf.clear();
        if let Err(e) = self.policies[i].policy.call_with_changes(&view, &changes, &mut self.buf) {
            self.buf.clear();
            self.policy_failed(i, GANTRY_HOOK_RESERVE, &e);
            self.stats.reservations.builtin += 1;
            return Outcome::Builtin(format!("the planner `{name}` failed: {e}"));
        }
        let checked = {
            let Some(book) = &self.book else {
                return Outcome::Builtin("no queue is reservable".into());
            };
            let state = &self.state;
            let lookup = |k: u32| book.subject(state, k);
            let call = Call {
                cause,
                subject,
                now,
                capacity: book.capacity_demand(),
                reservations: state.reservations.len(),
                lookup: &lookup,
                skyline: &book.skyline,
            };
            validate::check(&call, self.buf.as_slice(), self.buf.allocations())
        };
        match checked {
            Ok(answer) => {
                self.policies[i].succeeded();
                Outcome::Answer(answer)
            }
            Err(refusals) => {
                let reasons = validate::reasons(&refusals);
                self.answer_refused(i, cause, &refusals);
                self.stats.reservations.builtin += 1;
                Outcome::Builtin(format!("the planner `{name}`'s answer was refused ({reasons})"))
            }
        }
    }

    /// Counts, logs and charges a refused answer: a failed call toward quarantine. The lines are
    /// limited per reason like the other hooks' refusals (`crate::plugin_log`): one per reason
    /// and call at most, naming the first refusal, with the running count.
    fn answer_refused(&mut self, i: usize, cause: u32, refusals: &[Refusal]) {
        let mut rej = Rejections::default();
        for r in refusals {
            rej.add(r.reason, 1);
        }
        let now = self.now_ms;
        let p = &mut self.policies[i];
        for (reason, n) in rej.iter() {
            let Some(l) = p.log.note(Incident::Rejected(reason), now) else { continue };
            let Some(first) = refusals.iter().find(|r| r.reason == reason) else { continue };
            tracing::warn!(
                policy = p.policy.name(),
                cause = cause_name(cause),
                engine_ms = now,
                reason = reason.as_str(),
                n,
                reservation = first.reservation.map(|id| id.0),
                detail = %first.detail,
                calls = l.count,
                unlogged_calls = l.unlogged,
                "reservation planner's answer refused"
            );
        }
        self.stats.rejected.merge(&rej);
        self.policies[i].rejected.merge(&rej);
        let e = PolicyError::Protocol(format!(
            "its {} answer was refused: {}",
            cause_name(cause),
            validate::reasons(refusals)
        ));
        self.policy_failed(i, GANTRY_HOOK_RESERVE, &e);
    }
}
