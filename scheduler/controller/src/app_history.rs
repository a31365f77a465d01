//! What the controller remembers of applications beyond what the engine keeps: every container it
//! launched (node, resources, times, how it ended — for `gantry app` and for routing log reads
//! after the container is gone) and, once an application has ended, its submission, times and
//! counters. The engine forgets an ended app's requests at its next compaction and keeps only a
//! summary; without this record an ended app read back with zero times, no requests and
//! containers without resources.
//!
//! Filled from the engine as things happen, and from the store after a restart
//! ([`EndedApp::from_record`], [`LaunchedContainer::from`]), so an app reads the same before and
//! after a restart — and the same when the API reads an old app from the store by id.

use crate::records::{AppRecord, ContainerRecord};
use gantry_engine::{RequestSpec, Resources};
use gantry_sdk::abi::GANTRY_CONTAINER_FAILED;
use std::collections::{BTreeMap, VecDeque};

/// Applications whose launched containers are remembered; the oldest are forgotten first.
pub const LAUNCHED_HISTORY: usize = 10_000;

/// A container the controller launched, remembered after it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchedContainer {
    /// Container id.
    pub id: u64,
    /// Its node.
    pub node: String,
    /// Index of its request in the application.
    pub request: u32,
    /// Its last known state (`GANTRY_CONTAINER_*`).
    pub state: u32,
    /// Its exit status, once it ended.
    pub exit_code: Option<i32>,
    /// Its resources.
    pub resources: Resources,
    /// Indexes of the node's GPUs it held.
    pub gpus: Vec<u32>,
    /// When it was placed, then when its agent confirmed the start, Unix ms.
    pub started_ms: Option<u64>,
    /// When it ended, Unix ms.
    pub finished_ms: Option<u64>,
    /// How it ended, in words, once it ended.
    pub diagnostics: String,
    /// The cluster id it was launched under: its agent knows it by this and its id.
    pub cluster: gantry_proto::ClusterId,
}

impl From<&ContainerRecord> for LaunchedContainer {
    fn from(c: &ContainerRecord) -> Self {
        LaunchedContainer {
            id: c.id.0,
            node: c.node.clone(),
            request: c.request,
            state: c.state,
            exit_code: c.exit_code,
            resources: c.resources,
            gpus: c.gpus.clone(),
            started_ms: c.started_ms,
            finished_ms: c.finished_ms,
            diagnostics: c.reason.clone().unwrap_or_default(),
            cluster: c.cluster,
        }
    }
}

/// An ended application as the API shows it, beyond the engine's summary (name, queue, user,
/// state, diagnostics).
#[derive(Debug, Clone, PartialEq)]
pub struct EndedApp {
    /// Submission time, Unix ms.
    pub submit_ms: u64,
    /// When it ended, Unix ms.
    pub finished_ms: u64,
    /// Its priority.
    pub priority: i32,
    /// Attempts it was allowed (the engine's default filled in).
    pub max_attempts: u32,
    /// Failed containers.
    pub failures: u32,
    /// Its container groups as submitted.
    pub requests: Vec<RequestSpec>,
    /// The program of each group.
    pub commands: Vec<Vec<String>>,
}

impl EndedApp {
    /// The record of an ended app read back from the store, with its stored containers;
    /// `default_max_attempts` stands in for a submission that named none.
    pub fn from_record(app: &AppRecord, containers: &[&ContainerRecord], default_max_attempts: u32) -> Self {
        let commands = serde_json::from_value::<Vec<crate::launch::LaunchTemplate>>(app.launch.clone())
            .map(|ts| ts.into_iter().map(|t| t.argv).collect())
            .unwrap_or_default();
        EndedApp {
            submit_ms: app.submit_ms,
            finished_ms: app.state_ms,
            priority: app.spec.priority,
            max_attempts: if app.spec.max_attempts == 0 {
                default_max_attempts
            } else {
                app.spec.max_attempts
            },
            failures: containers.iter().filter(|c| c.state == GANTRY_CONTAINER_FAILED).count() as u32,
            requests: app.spec.requests.clone(),
            commands,
        }
    }
}

/// The controller's memory of launched containers and ended applications, bounded.
#[derive(Debug, Default)]
pub struct AppHistory {
    launched: BTreeMap<u64, Vec<LaunchedContainer>>,
    /// Where each remembered container is: its app, and its index in the app's list (lists
    /// only grow, and go as a whole). An app may have tens of thousands of containers, so
    /// finding one by scanning its list would make every start and exit linear in them.
    container_at: BTreeMap<u64, (u64, usize)>,
    /// Apps with remembered containers, oldest first ([`LAUNCHED_HISTORY`] at most).
    launched_order: VecDeque<u64>,
    ended: BTreeMap<u64, EndedApp>,
    /// Ended apps, oldest first (`ended_limit` at most).
    ended_order: VecDeque<u64>,
    ended_limit: usize,
}

impl AppHistory {
    /// Remembers at most `ended_limit` ended applications (the engine's `history_len`).
    pub fn new(ended_limit: usize) -> Self {
        AppHistory { ended_limit, ..AppHistory::default() }
    }

    /// The containers launched for an application, including ended ones.
    pub fn launched(&self, app: u64) -> &[LaunchedContainer] {
        self.launched.get(&app).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The application a remembered container belongs to.
    pub fn app_of_container(&self, container: u64) -> Option<u64> {
        self.container_at.get(&container).map(|&(app, _)| app)
    }

    /// A remembered container.
    pub fn container(&self, container: u64) -> Option<&LaunchedContainer> {
        let &(app, at) = self.container_at.get(&container)?;
        self.launched.get(&app)?.get(at)
    }

    fn container_mut(&mut self, container: u64) -> Option<&mut LaunchedContainer> {
        let &(app, at) = self.container_at.get(&container)?;
        self.launched.get_mut(&app)?.get_mut(at)
    }

    /// Remembers a launched container; one already remembered (restored after a restart) is
    /// replaced.
    pub fn remember_launch(&mut self, app: u64, c: LaunchedContainer) {
        if self.app_of_container(c.id) == Some(app) {
            if let Some(known) = self.container_mut(c.id) {
                *known = c;
                return;
            }
        }
        if !self.launched.contains_key(&app) {
            self.launched_order.push_back(app);
            while self.launched_order.len() > LAUNCHED_HISTORY {
                if let Some(old) = self.launched_order.pop_front() {
                    for c in self.launched.remove(&old).unwrap_or_default() {
                        self.container_at.remove(&c.id);
                    }
                }
            }
        }
        let list = self.launched.entry(app).or_default();
        self.container_at.insert(c.id, (app, list.len()));
        list.push(c);
    }

    /// Updates a remembered container (a start or an end); unknown ones are ignored.
    pub fn update(&mut self, container: u64, change: impl FnOnce(&mut LaunchedContainer)) {
        if let Some(c) = self.container_mut(container) {
            change(c);
        }
    }

    /// Remembers an ended application, forgetting the oldest beyond the limit.
    pub fn remember_end(&mut self, app: u64, ended: EndedApp) {
        if self.ended.insert(app, ended).is_none() {
            self.ended_order.push_back(app);
        }
        while self.ended_order.len() > self.ended_limit {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// What is remembered of an ended application.
    pub fn ended(&self, app: u64) -> Option<&EndedApp> {
        self.ended.get(&app)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(id: u64) -> LaunchedContainer {
        LaunchedContainer {
            id,
            node: "n".into(),
            request: 0,
            state: 0,
            exit_code: None,
            resources: Resources::default(),
            gpus: Vec::new(),
            started_ms: None,
            finished_ms: None,
            diagnostics: String::new(),
            cluster: gantry_proto::ClusterId::LEGACY,
        }
    }

    #[test]
    fn containers_are_found_by_id_and_updated_in_place() {
        let mut h = AppHistory::new(2);
        h.remember_launch(7, container(70));
        h.remember_launch(7, container(71));
        assert_eq!(h.app_of_container(71), Some(7));
        h.update(71, |c| c.exit_code = Some(3));
        assert_eq!(h.container(71).and_then(|c| c.exit_code), Some(3));
        assert_eq!(h.launched(7).len(), 2);
        h.remember_launch(7, LaunchedContainer { node: "m".into(), ..container(71) });
        assert_eq!(h.launched(7).len(), 2, "a restored container replaces its memory");
    }

    #[test]
    fn ended_apps_are_bounded_oldest_first() {
        let mut h = AppHistory::new(2);
        let e = EndedApp {
            submit_ms: 1,
            finished_ms: 2,
            priority: 0,
            max_attempts: 1,
            failures: 0,
            requests: Vec::new(),
            commands: Vec::new(),
        };
        for app in 1..=3 {
            h.remember_end(app, e.clone());
        }
        assert!(h.ended(1).is_none());
        assert!(h.ended(2).is_some() && h.ended(3).is_some());
    }
}
