//! State writes whose job failed are written again. Most of what the controller stores is not
//! waited for (an app's or a container's state, a replanned reservation): such a write failing —
//! a full disk, an I/O error — must not leave the store behind for good, or a restart would bring
//! back a finished app as running. The controller remembers which records each such job touched;
//! when the job fails for a reason that can pass, those records are written again from what the
//! controller knows *then* (never the failed write itself, which a newer one may have overtaken),
//! at the next liveness check (every half second at most), until a write of them commits.

use crate::Controller;
use crate::records::{StoreError, Write};
use gantry_engine::{AppId, ContainerId, ReservationId};
use std::collections::BTreeSet;

/// A record a state write touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RecordKey {
    App(u64),
    Container(u64),
    Plan(u64),
}

impl RecordKey {
    /// The record `write` changes, if it is one that can be written again from what the
    /// controller knows (submissions, launches, drains and ids are answered with the failure
    /// instead).
    pub(crate) fn of(write: &Write) -> Option<RecordKey> {
        match write {
            Write::AppState { id, .. } => Some(RecordKey::App(id.0)),
            Write::ContainerState { id, .. } => Some(RecordKey::Container(id.0)),
            Write::PutPlanReservation(r) => Some(RecordKey::Plan(r.id.0)),
            Write::DeletePlanReservation { id } => Some(RecordKey::Plan(id.0)),
            _ => None,
        }
    }
}

/// Whether a failed job is worth writing again: not when the store refused what it says (a
/// record it does not have), which another try would not change.
pub(crate) fn passes(e: &StoreError) -> bool {
    !matches!(e, StoreError::Refused(_) | StoreError::Corrupt { .. })
}

impl Controller {
    /// Writes again, from what is known now, every record whose last write failed.
    pub(crate) fn rewrite_failed(&mut self) {
        let keys: BTreeSet<RecordKey> = std::mem::take(&mut self.commits.rewrite);
        if keys.is_empty() {
            return;
        }
        let writes: Vec<Write> = keys.into_iter().filter_map(|k| self.current(k)).collect();
        tracing::info!(records = writes.len(), "writing again what a failed store job held");
        self.persist(writes);
    }

    /// The write that brings record `key` up to date, if the controller still knows it.
    fn current(&self, key: RecordKey) -> Option<Write> {
        match key {
            RecordKey::App(id) if self.unstored_apps.contains(&id) => None,
            RecordKey::App(id) => {
                let st = self.engine.state();
                let (state, diagnostics) = match st.app_index(AppId(id)) {
                    Some(i) => {
                        let a = st.apps().get(i as usize)?;
                        (a.state, st.app_meta(i).map(|m| m.diagnostics.clone()).unwrap_or_default())
                    }
                    None => self
                        .engine
                        .history()
                        .chain(self.past.iter())
                        .find(|h| h.id.0 == id)
                        .map(|h| (h.state, h.diagnostics.clone()))?,
                };
                Some(Write::AppState { id: AppId(id), state, diagnostics, at_ms: self.now_ms })
            }
            RecordKey::Container(id) => {
                let c = self.history.container(id)?;
                Some(Write::ContainerState {
                    id: ContainerId(id),
                    state: c.state,
                    started_ms: c.started_ms,
                    exit_code: c.exit_code,
                    reason: (!c.diagnostics.is_empty()).then(|| c.diagnostics.clone()),
                    finished_ms: c.finished_ms,
                })
            }
            RecordKey::Plan(id) => Some(
                self.plan_record(ReservationId(id))
                    .unwrap_or(Write::DeletePlanReservation { id: ReservationId(id) }),
            ),
        }
    }
}
