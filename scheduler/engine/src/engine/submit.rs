//! Applications and containers entering the engine: new submissions (the engine hands out the
//! id, or the driver did), and applications and containers recovered from a driver's durable
//! store after a restart, charged to nodes, apps and queues as placements would be.

use super::Engine;
use crate::error::EngineError;
use crate::event::Command;
use crate::model::*;
use crate::state::{AppMeta, app_is_terminal};
use gantry_sdk::View;
use gantry_sdk::abi::*;

/// Identity of an application recovered from a durable store.
pub(super) struct RestoredApp {
    pub(super) id: AppId,
    pub(super) state: u32,
    pub(super) failures: u32,
    pub(super) submit_ms: u64,
    /// Completed containers per request (may be shorter than the requests).
    pub(super) completed: Vec<u32>,
    /// Recovered from the driver's store (not a new submission under a handed-out id): an app
    /// of a reservation that ended meanwhile may fall back to the plan's default queue.
    pub(super) from_store: bool,
}

/// A container recovered from a durable store.
pub(super) struct RestoredContainer {
    pub(super) container: ContainerId,
    pub(super) app: AppId,
    pub(super) request: u32,
    pub(super) node: String,
    pub(super) gpus: Vec<u32>,
    pub(super) running: bool,
}

impl Engine {
    pub(super) fn submit(&mut self, spec: AppSpec) -> Result<(), EngineError> {
        let id = self.insert_app(spec, None)?;
        self.commands.push(Command::AppAccepted { app: id });
        Ok(())
    }

    /// Records an application: a new one (the engine picks its id), or one recovered from a
    /// driver's durable store with its id, state and failures so far.
    pub(super) fn insert_app(
        &mut self,
        spec: AppSpec,
        restored: Option<RestoredApp>,
    ) -> Result<AppId, EngineError> {
        spec.validate()?;
        let queue =
            match self.state.queue_index.get(&spec.queue) {
                Some(&q) if self.state.queues[q as usize].flags & GANTRY_QUEUE_LEAF != 0 => q,
                _ => match self.book.as_ref().and_then(|b| {
                    b.resolve_queue(&spec.queue, restored.as_ref().is_some_and(|r| r.from_store))
                }) {
                    Some(q) => q,
                    None => return Err(EngineError::UnknownQueue(spec.queue)),
                },
            };
        if let Some(r) = &restored {
            if r.id.0 == 0 || self.state.app_index.contains_key(&r.id.0) {
                return Err(EngineError::Conflict(format!("application {} already exists", r.id.0)));
            }
            if !matches!(r.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                return Err(EngineError::Invalid {
                    what: "restored application",
                    reason: format!("state {} is not a live state", r.state),
                });
            }
            let too_many = r.completed.len() > spec.requests.len()
                || r.completed.iter().zip(&spec.requests).any(|(&done, q)| done > q.count);
            if too_many {
                return Err(EngineError::Invalid {
                    what: "restored application",
                    reason: format!("completed containers {:?} exceed its requests", r.completed),
                });
            }
        }
        let st = &mut self.state;
        let id = match &restored {
            Some(r) => {
                st.next_app = st.next_app.max(r.id.0 + 1);
                r.id.0
            }
            None => {
                st.next_app += 1;
                st.next_app - 1
            }
        };
        let submit_ms = restored.as_ref().map_or(self.now_ms, |r| r.submit_ms);
        let mut completed = vec![0; spec.requests.len()];
        if let Some(r) = &restored {
            completed[..r.completed.len()].copy_from_slice(&r.completed);
        }
        let app_idx = st.apps.len() as u32;
        let start = st.requests.len() as u32;
        for (k, r) in spec.requests.iter().enumerate() {
            let selector = st.intern_labels(&r.selector);
            let preferred = st.intern_labels(&r.preferred);
            let mut flags = 0;
            if r.gang {
                flags |= GANTRY_REQUEST_GANG;
            }
            if r.master {
                flags |= GANTRY_REQUEST_MASTER;
            }
            flags |= match r.rack_affinity {
                RackAffinity::None => 0,
                RackAffinity::Preferred => GANTRY_REQUEST_SAME_RACK_PREFERRED,
                RackAffinity::Required => GANTRY_REQUEST_SAME_RACK_REQUIRED,
            };
            st.requests.push(GantryRequest {
                id: st.next_request,
                app: app_idx,
                flags,
                resources: r.resources,
                count: r.count,
                // Completed containers stay placed: their work is done.
                placed: completed[k],
                priority: r.priority,
                reserved: 0,
                selector,
                preferred,
                expected_ms: r.expected_ms,
                slow_ms: r.slow_ms,
                deadline_ms: r.deadline_ms,
                submit_ms,
            });
            st.next_request += 1;
        }
        let user = st.strings.intern(&spec.user);
        let failures = restored.as_ref().map_or(0, |r| r.failures);
        self.maybe_pending.push(st.apps.len() as u32);
        st.apps.push(GantryApp {
            id,
            queue,
            // A restored app is at most ACCEPTED until its containers are restored too.
            state: restored.as_ref().map_or(GANTRY_APP_NEW, |r| r.state.min(GANTRY_APP_ACCEPTED)),
            user,
            priority: spec.priority,
            attempt: failures + 1,
            submit_ms,
            requests: GantryRange { start, len: spec.requests.len() as u32 },
            used: GantryResources::default(),
        });
        let max_attempts =
            if spec.max_attempts == 0 { self.config.default_max_attempts } else { spec.max_attempts };
        st.app_meta.push(AppMeta {
            name: spec.name,
            max_attempts,
            failures,
            live_containers: 0,
            diagnostics: String::new(),
            completed,
            waiting: GANTRY_NONE,
        });
        st.app_index.insert(id, app_idx);
        if restored.as_ref().is_some_and(|r| r.state > GANTRY_APP_ACCEPTED) {
            // Stored RUNNING, ACCEPTED here until its containers come back: said, so the driver's
            // store follows (it is RUNNING again, and said, once one is restored running).
            self.app_changed(app_idx, String::new());
        }
        Ok(AppId(id))
    }

    /// Re-creates a container recovered from a driver's durable store on its node, with its id
    /// and GPUs, charging node, app and queues as a placement would.
    pub(super) fn restore_container(&mut self, r: RestoredContainer) -> Result<(), EngineError> {
        let app = self.app_idx(r.app)?;
        let node = self.node_idx(&r.node)?;
        let st = &self.state;
        if r.container.0 == 0 || st.container_index.contains_key(&r.container.0) {
            return Err(EngineError::Conflict(format!("container {} already exists", r.container.0)));
        }
        let a = st.apps[app as usize];
        if app_is_terminal(a.state) || r.request >= a.requests.len {
            return Err(EngineError::Invalid {
                what: "restored container",
                reason: format!("application {} has no live request {}", r.app.0, r.request),
            });
        }
        let request = a.requests.start + r.request;
        let req = st.requests[request as usize];
        let n = st.nodes[node as usize];
        if req.placed >= req.count || !n.allocated.plus(&req.resources).fits_in(&n.capacity) {
            return Err(EngineError::Conflict(format!(
                "container {} does not fit its request or node any more",
                r.container.0
            )));
        }
        let free: Vec<u32> = View::range(&st.gpus, n.gpus)
            .iter()
            .filter(|g| g.container == GANTRY_NONE)
            .map(|g| g.index)
            .collect();
        if r.gpus.len() != req.resources.gpus as usize || !r.gpus.iter().all(|g| free.contains(g)) {
            return Err(EngineError::Conflict(format!(
                "container {} holds GPUs {:?} that are not free on `{}`",
                r.container.0, r.gpus, r.node
            )));
        }
        self.state.next_container = self.state.next_container.max(r.container.0 + 1);
        let idx = self.insert_container(request, node, r.container.0, Some(&r.gpus));
        let running = r.running;
        let st = &mut self.state;
        if running {
            st.containers[idx as usize].state = GANTRY_CONTAINER_RUNNING;
            if st.apps[app as usize].state == GANTRY_APP_ACCEPTED {
                st.apps[app as usize].state = GANTRY_APP_RUNNING;
                // Said, so the driver stores it: a silent change left the store behind.
                self.app_changed(app, String::new());
            }
        }
        Ok(())
    }
}
