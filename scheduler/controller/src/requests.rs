//! Requests from the REST API: submissions, handed-out ids, kills, drains and reservation
//! changes. Each is checked first (a refusal changes nothing), then stored, and answered — or
//! applied — only once the store has committed it (`commits.rs`).

use crate::Controller;
use crate::Submission;
use crate::commits::AfterCommit;
use crate::messages::{
    Caller, IdKind, LaunchTemplate, Reply, ReplyTo, ReservationOp, ReservationOutcome, SubmitError,
};
use crate::records::{AppRecord, NextIds, PlanReservationRecord, Write};
use gantry_engine::{AppId, AppSpec, Command, EngineError, Event, NodeCondition, ReservationId};
use gantry_sdk::abi::{
    GANTRY_APP_KILLED, GANTRY_APP_NEW, GANTRY_NODE_DRAINING, GANTRY_NODE_RUNNING, GANTRY_NODE_UNHEALTHY,
};

impl Controller {
    /// Takes a submission into the engine and stores it; the answer waits for the commit.
    pub(crate) fn submit(
        &mut self,
        reply: ReplyTo,
        spec: AppSpec,
        id: Option<AppId>,
        caller: Caller,
        templates: Vec<LaunchTemplate>,
    ) {
        match self.take_submission(spec, id, caller, templates) {
            Ok((app, write)) => {
                self.dirty = true;
                self.after_commit(write, AfterCommit::Submitted { to: reply, app });
            }
            Err(e) => self.reply(reply, Reply::Submitted(Err(SubmitError::Engine(e)))),
        }
    }

    fn take_submission(
        &mut self,
        spec: AppSpec,
        id: Option<AppId>,
        caller: Caller,
        templates: Vec<LaunchTemplate>,
    ) -> Result<(AppId, Option<crate::WriteId>), EngineError> {
        if templates.len() != spec.requests.len() {
            return Err(EngineError::Invalid {
                what: "submission",
                reason: "one command per container request is needed".into(),
            });
        }
        if let Some(app) = id {
            // Checked before the engine sees it: a refused id changes nothing.
            self.handed_out_apps
                .check(app.0, &caller)
                .map_err(|e| EngineError::Invalid { what: "application-id", reason: e.to_string() })?;
        }
        match &self.config.max_allocation {
            Some(max) => self.engine.check_fits_within(&spec, max)?,
            None if self.sizes_checked_from_ms.is_none_or(|from| self.now_ms >= from) => {
                self.engine.check_fits(&spec)?
            }
            None => {}
        }
        let spec_copy = spec.clone();
        let event = match id {
            Some(app) => Event::AppSubmittedWithId { app, spec },
            None => Event::AppSubmitted(spec),
        };
        let commands = self.event(event)?;
        let id = Command::accepted_app(&commands)
            .ok_or_else(|| EngineError::Conflict("the engine gave no id".into()))?;
        self.handed_out_apps.use_id(id.0);
        let st = self.engine.state();
        let submit_ms =
            st.app_index(id).and_then(|i| st.apps().get(i as usize)).map_or(self.now_ms, |a| a.submit_ms);
        let record = AppRecord {
            id,
            spec: spec_copy.clone(),
            launch: serde_json::to_value(&templates).unwrap_or(serde_json::Value::Null),
            submit_ms,
            state: GANTRY_APP_NEW,
            state_ms: self.now_ms,
            diagnostics: String::new(),
        };
        let write = self.persist(vec![Write::InsertApp(record)]);
        self.submissions.insert(id.0, Submission { spec: spec_copy, templates });
        Ok((id, write))
    }

    /// Ends a submission the store refused (nothing unacknowledged runs); its end is not
    /// written either, since there is no record.
    pub(crate) fn withdraw(&mut self, app: AppId, reason: String) {
        self.unstored_apps.insert(app.0);
        if let Err(e) = self.event(Event::AppWithdrawn { app, reason }) {
            tracing::error!(app = app.0, error = %e, "cannot withdraw an unstored submission");
        }
        self.dirty = true;
    }

    /// Hands out an id of `kind` for a later submission by `caller`: the engine's counter moves
    /// past it (so no other submission gets it) and the store records the move, so it is never
    /// given again after a restart either.
    pub(crate) fn new_id(&mut self, reply: ReplyTo, kind: IdKind, caller: Caller) {
        let (id, taken) = match kind {
            IdKind::App => {
                let id = self.engine.state().next_app_id();
                (id, Event::IdsTaken { app_below: id + 1, container_below: 0, reservation_below: 0 })
            }
            IdKind::Reservation => {
                let id = self.engine.next_reservation_id();
                (id, Event::IdsTaken { app_below: 0, container_below: 0, reservation_below: id + 1 })
            }
        };
        if let Err(e) = self.event(taken) {
            self.reply(reply, Reply::NewId(Err(SubmitError::Engine(e))));
            return;
        }
        let next = NextIds {
            app: if kind == IdKind::App { id + 1 } else { 0 },
            container: 0,
            reservation: if kind == IdKind::Reservation { id + 1 } else { 0 },
        };
        let write = self.persist(vec![Write::NextIds(next)]);
        match kind {
            IdKind::App => self.handed_out_apps.hand_out(id, caller),
            IdKind::Reservation => self.handed_out_reservations.hand_out(id, caller),
        }
        self.after_commit(write, AfterCommit::NewId { to: reply, id });
    }

    /// Checks that `app` is live and stores its KILLED state; the engine is told once that has
    /// committed, so a kill the store cannot record changes nothing.
    pub(crate) fn kill(&mut self, reply: ReplyTo, app: AppId) {
        let refused = match self.engine.app_state(app) {
            None => Some(EngineError::UnknownApp(app.0)),
            Some(state) if gantry_engine::state::app_is_terminal(state) => {
                Some(EngineError::Conflict(format!("application {} has already ended", app.0)))
            }
            Some(_) => None,
        };
        if let Some(e) = refused {
            self.reply(reply, Reply::Killed(Err(SubmitError::Engine(e))));
            return;
        }
        let write = self.persist(vec![Write::AppState {
            id: app,
            state: GANTRY_APP_KILLED,
            diagnostics: gantry_engine::KILLED_BY_REQUEST.to_owned(),
            at_ms: self.now_ms,
        }]);
        self.after_commit(write, AfterCommit::Kill { to: reply, app });
    }

    /// The kill is stored: stop the application's containers.
    pub(crate) fn apply_kill(&mut self, app: AppId) {
        match self.event(Event::AppKillRequested { app }) {
            Ok(_) => self.dirty = true,
            // It ended by itself after the kill was stored; its own end is stored after the
            // kill, so the store ends as the engine does.
            Err(e) => tracing::info!(app = app.0, error = %e, "stored kill found the app ended"),
        }
    }

    /// Checks the node and stores a drain or undrain; it is applied once committed.
    pub(crate) fn store_node_drain(&mut self, reply: ReplyTo, node: String, drained: bool) {
        if self.engine.state().node_by_name(&node).is_none() {
            self.reply(reply, Reply::NodeDrain(Err(SubmitError::Engine(EngineError::UnknownNode(node)))));
            return;
        }
        self.drain_seq += 1;
        let seq = self.drain_seq;
        let write = self.persist(vec![Write::NodeDrain { node: node.clone(), drained, at_ms: self.now_ms }]);
        self.after_commit(write, AfterCommit::Drain { to: reply, node, drained, seq });
    }

    /// Applies a stored drain or undrain. A lost node only remembers it (it is applied when the
    /// node registers again); undraining a node that is not draining changes nothing.
    pub(crate) fn apply_node_drain(
        &mut self,
        node: &str,
        drained: bool,
        seq: u64,
    ) -> Result<u32, EngineError> {
        let idx = self
            .engine
            .state()
            .node_by_name(node)
            .ok_or_else(|| EngineError::UnknownNode(node.to_owned()))?;
        let applied = self.drain_applied.entry(node.to_owned()).or_default();
        if seq <= *applied {
            // A change stored after this one is already in force.
            return Ok(self.engine.state().nodes()[idx.0 as usize].state);
        }
        *applied = seq;
        if drained {
            self.drained.insert(node.to_owned());
        } else {
            self.drained.remove(node);
        }
        let state = self.engine.state().nodes()[idx.0 as usize].state;
        let wanted = match (drained, state) {
            (true, GANTRY_NODE_RUNNING | GANTRY_NODE_UNHEALTHY) => Some(NodeCondition::Draining),
            // Back to what its agent's conditions say (RUNNING, or UNHEALTHY under pressure).
            (false, GANTRY_NODE_DRAINING) => Some(self.undrained_state(node)),
            _ => None,
        };
        if let Some(condition) = wanted {
            self.event(Event::NodeStateChanged { node: node.to_owned(), state: condition })?;
            // An undrained node has room for pending work.
            self.dirty = true;
        }
        tracing::info!(%node, drained, "node drain changed");
        Ok(self.engine.state().nodes()[idx.0 as usize].state)
    }

    /// The store record of a reservation in the plan.
    pub(crate) fn plan_record(&self, id: ReservationId) -> Option<Write> {
        let r = self.engine.reservation_book()?.get(id)?;
        Some(Write::PutPlanReservation(PlanReservationRecord {
            id,
            request: r.request.clone(),
            submit_ms: r.submit_ms,
            allocation: r.allocation.clone(),
        }))
    }

    /// Applies a reservation change; the answer waits for what it changed to commit, and a
    /// submission whose record fails is taken back out of the plan.
    pub(crate) fn reservation(&mut self, reply: ReplyTo, op: ReservationOp) {
        if let Err(e) = self.change_reservation(reply, op) {
            self.reply(reply, Reply::Reservation(Err(e)));
        }
    }

    /// [`Controller::reservation`] up to the wait for the commit; an error is answered at once.
    fn change_reservation(&mut self, reply: ReplyTo, op: ReservationOp) -> Result<(), SubmitError> {
        let (event, id, is_submit) = match op {
            ReservationOp::Submit { id: Some(id), caller, .. }
                if let Err(e) = self.handed_out_reservations.check(id.0, &caller) =>
            {
                return Err(SubmitError::Engine(EngineError::Invalid {
                    what: "reservation-id",
                    reason: e.to_string(),
                }));
            }
            ReservationOp::Submit { id, request, .. } => {
                (Event::ReservationSubmitted { id, request }, id, true)
            }
            ReservationOp::Update { id, request } => {
                (Event::ReservationUpdated { id, request }, Some(id), false)
            }
            ReservationOp::Delete { id } => (Event::ReservationDeleted { id }, Some(id), false),
            ReservationOp::Optimize => (Event::OptimizeReservations, None, false),
        };
        // Replans and ends are written by `apply`, in order, in their own jobs.
        let commands = self.event(event)?;
        let mut outcome = ReservationOutcome::Accepted { id: id.unwrap_or(ReservationId(0)), moved: 0 };
        let mut writes = Vec::new();
        let mut moved = 0;
        for c in &commands {
            match c {
                Command::ReservationAdmitted { reservation, .. } => {
                    outcome = ReservationOutcome::Accepted { id: *reservation, moved: 0 };
                    writes.extend(self.plan_record(*reservation));
                }
                Command::ReservationRejected { reservation, reason } => {
                    outcome = ReservationOutcome::Rejected { id: *reservation, reason: reason.clone() };
                    if is_submit && id.is_none() {
                        // The answer names the id it gave the request: stored as taken, so no
                        // later reservation gets it after a restart either.
                        writes.push(Write::NextIds(NextIds {
                            app: 0,
                            container: 0,
                            reservation: reservation.0 + 1,
                        }));
                    }
                }
                Command::ReservationReplanned { .. } => moved += 1,
                _ => {}
            }
        }
        let mut undo = None;
        if let ReservationOutcome::Accepted { moved: m, id: accepted } = &mut outcome {
            *m = moved;
            if is_submit {
                // Used: it cannot be submitted again (a rejected one may be retried).
                self.handed_out_reservations.use_id(accepted.0);
                undo = Some(*accepted);
            }
        }
        let write = self.persist(writes);
        self.dirty = true;
        self.after_commit(write, AfterCommit::Reservation { to: reply, outcome, undo });
        Ok(())
    }
}
