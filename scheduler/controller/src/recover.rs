//! Recovery after a restart: the controller is rebuilt from what the store holds.
//!
//! Every id the store has seen is taken first (app, container and reservation ids only grow
//! across restarts); reservations come back before their applications (their queues must
//! exist); live applications come back with their failures and their completed containers per
//! request (`Event::AppRestored`), so finished work never runs again; their live containers
//! wait for their agents to re-register (`reconcile.rs`), and scheduling waits up to the node
//! timeout for that, so nothing runs twice. Ended applications are remembered for the API, as
//! many as the engine keeps of its own.

use crate::app_history::{EndedApp, LaunchedContainer};
use crate::records::{ContainerRecord, Recovered};
use crate::{Controller, ControllerConfig, LaunchTemplate, Submission};
use gantry_engine::{AppSpec, Engine, Event};
use gantry_sdk::abi::*;
use std::collections::{BTreeMap, BTreeSet};

impl Controller {
    /// A controller rebuilt from `recovered` (the store's [`Recovered`]) at `now_ms`. Writes it
    /// decides on meanwhile (forgetting reservations that ended while it was down) are in its
    /// outputs.
    pub fn recover(engine: Engine, config: ControllerConfig, recovered: Recovered, now_ms: u64) -> Self {
        let mut c = Controller::new(engine, ControllerConfig { durable: true, ..config }, now_ms);
        // Every id the store has seen (ended and deleted apps included) or handed out is taken:
        // without this a restarted engine counts from 1 again and overwrites what is stored.
        let taken = Event::IdsTaken {
            app_below: recovered.next_app_id,
            container_below: recovered.next_container_id,
            reservation_below: recovered.next_reservation_id,
        };
        if let Err(e) = c.event(taken) {
            tracing::error!(error = %e, "cannot restore the id counters");
        }
        // Reservations first: their queues must exist before their applications come back.
        for r in recovered.plan_reservations {
            let event = Event::ReservationRestored {
                id: r.id,
                request: r.request,
                submit_ms: r.submit_ms,
                allocation: r.allocation,
            };
            // One whose deadline passed while the scheduler was down ends at once, and `apply`
            // forgets it in the store.
            if let Err(e) = c.event(event) {
                tracing::error!(reservation = r.id.0, error = %e, "cannot restore reservation");
            }
        }
        let mut live_apps = BTreeSet::new();
        let mut by_app: BTreeMap<u64, Vec<&ContainerRecord>> = BTreeMap::new();
        for container in &recovered.containers {
            by_app.entry(container.app.0).or_default().push(container);
        }
        for a in recovered.apps {
            let stored = by_app.get(&a.id.0).map(Vec::as_slice).unwrap_or_default();
            if !matches!(a.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                let ended = EndedApp::from_record(&a, stored, c.engine.default_max_attempts());
                c.history.remember_end(a.id.0, ended);
                c.past.push(gantry_engine::state::AppSummary {
                    id: a.id,
                    name: a.spec.name.clone(),
                    queue: a.spec.queue.clone(),
                    user: a.spec.user.clone(),
                    state: a.state,
                    diagnostics: a.diagnostics.clone(),
                });
                continue;
            }
            let templates: Vec<LaunchTemplate> = serde_json::from_value(a.launch.clone()).unwrap_or_default();
            let submission = Submission { spec: a.spec.clone(), templates };
            let event = Event::AppRestored {
                app: a.id,
                completed: completed_per_request(&a.spec, stored),
                spec: a.spec,
                state: a.state,
                failures: stored.iter().filter(|c| c.state == GANTRY_CONTAINER_FAILED).count() as u32,
                submit_ms: a.submit_ms,
            };
            match c.event(event) {
                Ok(_) => {
                    c.submissions.insert(a.id.0, submission);
                    live_apps.insert(a.id.0);
                }
                Err(e) => tracing::error!(app = a.id.0, error = %e, "cannot restore application"),
            }
        }
        for container in recovered.containers {
            // Every stored container is remembered with its node, so `gantry app` lists it and
            // its logs can be read from that node after the restart too.
            c.history.remember_launch(container.app.0, LaunchedContainer::from(&container));
            if live_apps.contains(&container.app.0)
                && gantry_engine::state::container_is_live(container.state)
            {
                c.known_as.insert(container.id.0, container.cluster);
                c.awaiting.entry(container.node.clone()).or_default().push(container);
            }
        }
        // As many as the engine keeps of its own (max_completed_apps); older ones are read from
        // the store when asked for by id.
        let keep = c.past.len().saturating_sub(c.engine.history_len());
        c.past.drain(..keep);
        tracing::info!(
            ended = c.past.len(),
            apps = live_apps.len(),
            containers = c.awaiting.values().map(Vec::len).sum::<usize>(),
            "restored from the store"
        );
        c.drained = recovered.drained_nodes.into_iter().collect();
        let grace = c.now_ms + c.config.node_timeout_ms;
        c.recovering_until_ms = Some(grace);
        c.sizes_checked_from_ms = Some(grace);
        c
    }
}

/// Per request of a live app, the stored containers that completed and must not run again
/// after a restart. A gang restarts whole when a member ends otherwise (its completed members run
/// again), so for a gang only completions after its last other end count.
fn completed_per_request(spec: &AppSpec, stored: &[&ContainerRecord]) -> Vec<u32> {
    spec.requests
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let mine = || stored.iter().filter(|c| c.request as usize == k);
            let restarted_after = if r.gang {
                mine()
                    .filter(|c| {
                        matches!(
                            c.state,
                            GANTRY_CONTAINER_FAILED | GANTRY_CONTAINER_LOST | GANTRY_CONTAINER_KILLED
                        )
                    })
                    .map(|c| c.id.0)
                    .max()
                    .unwrap_or(0)
            } else {
                0
            };
            let done =
                mine().filter(|c| c.state == GANTRY_CONTAINER_COMPLETED && c.id.0 > restarted_after).count();
            (done as u32).min(r.count)
        })
        .collect()
}
