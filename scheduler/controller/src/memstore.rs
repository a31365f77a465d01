//! A store in memory, for the simulator and the controller's tests: it applies the
//! controller's [`Write`]s to maps as the daemon's SQLite store applies them to tables (ids are
//! refused when duplicated or unknown, counters only grow), keeps jobs in flight until the driver
//! commits or fails them, and reads everything back as a [`Recovered`] for a restart. Only
//! committed jobs survive a restart, as with SQLite.

use crate::messages::WriteId;
use crate::records::{AppRecord, ContainerRecord, PlanReservationRecord, Recovered, StoreError, Write};
use gantry_engine::{AppId, ContainerId, QueueSpec, ReservationId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A store in memory (see the module's documentation).
#[derive(Debug, Default, Clone)]
pub struct MemStore {
    apps: BTreeMap<AppId, AppRecord>,
    containers: BTreeMap<ContainerId, ContainerRecord>,
    plan: BTreeMap<ReservationId, PlanReservationRecord>,
    drained: BTreeSet<String>,
    queues: Option<Vec<QueueSpec>>,
    next_app: u64,
    next_container: u64,
    next_reservation: u64,
    /// Jobs handed over and not committed yet, oldest first.
    in_flight: VecDeque<(WriteId, Vec<Write>)>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        MemStore::default()
    }

    /// Takes a job; it commits at [`MemStore::commit_next`].
    pub fn submit(&mut self, write: WriteId, writes: Vec<Write>) {
        self.in_flight.push_back((write, writes));
    }

    /// Jobs waiting for their commit.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Commits (or, with `fail`, fails with a full disk) the oldest job in flight, all or
    /// nothing. Returns its id and outcome for the controller's `Input::Committed`.
    pub fn commit_next(&mut self, fail: bool) -> Option<(WriteId, Result<(), StoreError>)> {
        let (write, writes) = self.in_flight.pop_front()?;
        if fail {
            return Some((write, Err(StoreError::Full("simulated: no space left on device".into()))));
        }
        if let [w] = writes.as_slice() {
            // `apply` refuses a write before it changes anything, so a one-write job (nearly
            // every job) needs no copy to roll back: the simulator commits millions of them.
            return Some((write, self.apply(w)));
        }
        let before = self.clone_committed();
        for w in &writes {
            if let Err(e) = self.apply(w) {
                *self = MemStore { in_flight: std::mem::take(&mut self.in_flight), ..before };
                return Some((write, Err(e)));
            }
        }
        Some((write, Ok(())))
    }

    /// What a restarted scheduler reads back: only what committed (jobs in flight are lost, as
    /// an uncommitted transaction is).
    pub fn recovered(&self) -> Recovered {
        let max_id = |ids: &mut dyn Iterator<Item = u64>| ids.max().map_or(1, |m| m + 1);
        Recovered {
            apps: self.apps.values().cloned().collect(),
            containers: self.containers.values().cloned().collect(),
            reservations: Vec::new(),
            next_app_id: self.next_app.max(max_id(&mut self.apps.keys().map(|a| a.0))),
            next_container_id: self.next_container.max(max_id(&mut self.containers.keys().map(|c| c.0))),
            next_reservation_id: self.next_reservation.max(max_id(&mut self.plan.keys().map(|r| r.0))),
            queues: self.queues.clone(),
            drained_nodes: self.drained.iter().cloned().collect(),
            plan_reservations: self.plan.values().cloned().collect(),
        }
    }

    /// Forgets the jobs in flight (the scheduler process died before they committed).
    pub fn crash(&mut self) {
        self.in_flight.clear();
    }

    /// The stored application, if any.
    pub fn app(&self, id: AppId) -> Option<&AppRecord> {
        self.apps.get(&id)
    }

    /// Every stored application.
    pub fn apps(&self) -> impl Iterator<Item = &AppRecord> {
        self.apps.values()
    }

    /// Every stored container.
    pub fn containers(&self) -> impl Iterator<Item = &ContainerRecord> {
        self.containers.values()
    }

    fn clone_committed(&self) -> MemStore {
        MemStore { in_flight: VecDeque::new(), ..self.clone() }
    }

    /// Applies one write; a refused write has changed nothing.
    fn apply(&mut self, write: &Write) -> Result<(), StoreError> {
        let refused = |what: String| Err(StoreError::Refused(what));
        match write {
            Write::InsertApp(a) => {
                if self.apps.contains_key(&a.id) {
                    return refused(format!("application {} exists", a.id.0));
                }
                self.next_app = self.next_app.max(a.id.0 + 1);
                self.apps.insert(a.id, a.clone());
            }
            Write::AppState { id, state, diagnostics, at_ms } => {
                let Some(a) = self.apps.get_mut(id) else {
                    return refused(format!("no application {}", id.0));
                };
                a.state = *state;
                a.state_ms = *at_ms;
                a.diagnostics.clone_from(diagnostics);
            }
            Write::DeleteApp { id } => {
                self.apps.remove(id);
                self.containers.retain(|_, c| c.app != *id);
            }
            Write::PruneApps { ids } => {
                for id in ids {
                    self.apps.remove(id);
                    self.containers.retain(|_, c| c.app != *id);
                }
            }
            Write::UpsertContainer(c) => {
                if !self.apps.contains_key(&c.app) {
                    return refused(format!("container {} of unknown application {}", c.id.0, c.app.0));
                }
                self.next_container = self.next_container.max(c.id.0 + 1);
                self.containers.insert(c.id, c.clone());
            }
            Write::ContainerState { id, state, started_ms, exit_code, reason, finished_ms } => {
                let Some(c) = self.containers.get_mut(id) else {
                    return refused(format!("no container {}", id.0));
                };
                c.state = *state;
                if started_ms.is_some() {
                    c.started_ms = *started_ms;
                }
                if exit_code.is_some() {
                    c.exit_code = *exit_code;
                }
                if reason.is_some() {
                    c.reason.clone_from(reason);
                }
                if finished_ms.is_some() {
                    c.finished_ms = *finished_ms;
                }
            }
            Write::NextIds(n) => {
                self.next_app = self.next_app.max(n.app);
                self.next_container = self.next_container.max(n.container);
                self.next_reservation = self.next_reservation.max(n.reservation);
            }
            Write::InsertReservation(r) => self.next_reservation = self.next_reservation.max(r.id.0 + 1),
            Write::ReservationState { .. } => {}
            Write::NodeDrain { node, drained, .. } => {
                if *drained {
                    self.drained.insert(node.clone());
                } else {
                    self.drained.remove(node);
                }
            }
            Write::PutPlanReservation(r) => {
                self.next_reservation = self.next_reservation.max(r.id.0 + 1);
                self.plan.insert(r.id, r.clone());
            }
            Write::DeletePlanReservation { id } => {
                self.plan.remove(id);
            }
            Write::QueueConfig { queues, .. } => self.queues = Some(queues.clone()),
        }
        Ok(())
    }
}
