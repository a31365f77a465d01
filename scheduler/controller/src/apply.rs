//! The one place engine commands are carried out: launches become records and held `Launch`
//! messages, kills become `Kill` messages, state changes become store writes and the history
//! the API reads. [`Controller::event`] is the only caller, so no command is ever dropped.

use crate::Controller;
use crate::app_history::{EndedApp, LaunchedContainer};
use crate::launch::Placement;
use crate::records::{ContainerRecord, Write};
use gantry_engine::{AppId, Command, ContainerId, NodeId, Resources};
use gantry_proto::ClusterId;
use gantry_proto::v1;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;
use gantry_sdk::abi::*;

impl Controller {
    pub(crate) fn apply(&mut self, commands: &[Command]) {
        for c in commands {
            if self.config.report_engine_commands {
                self.outbox.push(crate::Output::EngineCommand(c.clone()));
            }
            match c {
                Command::Launch { container, app, request, node, resources, gpus } => {
                    self.launch(*container, *app, *request, *node, *resources, gpus)
                }
                Command::Kill { container, node, grace_ms, reason } => {
                    let name = self.node_name(node.0);
                    let kill = v1::Kill {
                        container_id: container.0,
                        grace_ms: Some(*grace_ms),
                        reason: format!("{reason:?}"),
                        cluster_id: self.cluster_of(container.0).to_wire(),
                    };
                    if !self.send_to(&name, ToAgent::Kill(kill)) {
                        tracing::warn!(container = container.0, node = %name, "no stream to the node for a kill");
                    }
                }
                Command::AppStateChanged { app, state, diagnostics } => {
                    tracing::info!(app = app.0, state, %diagnostics, "application state");
                    let ended = matches!(
                        *state,
                        GANTRY_APP_FINISHED | GANTRY_APP_FAILED | GANTRY_APP_KILLED | GANTRY_APP_REJECTED
                    );
                    let at_ms = self.now_ms;
                    if !self.unstored_apps.contains(&app.0) {
                        self.persist(vec![Write::AppState {
                            id: *app,
                            state: *state,
                            diagnostics: diagnostics.clone(),
                            at_ms,
                        }]);
                    } else if ended {
                        self.unstored_apps.remove(&app.0);
                    }
                    if ended {
                        self.record_end(*app, at_ms);
                    }
                }
                Command::ReservationReplanned { reservation, .. } => {
                    tracing::info!(reservation = reservation.0, "reservation re-planned");
                    if let Some(w) = self.plan_record(*reservation) {
                        self.persist(vec![w]);
                    }
                }
                Command::ReservationEnded { reservation, why } => {
                    tracing::info!(reservation = reservation.0, ?why, "reservation ended");
                    self.persist(vec![Write::DeletePlanReservation { id: *reservation }]);
                }
                Command::AppAccepted { .. }
                | Command::ReservationAdmitted { .. }
                | Command::ReservationRejected { .. } => {}
            }
        }
    }

    /// A placement: the container's record is stored, remembered for the API, and its `Launch`
    /// leaves once the record has committed.
    fn launch(
        &mut self,
        container: ContainerId,
        app: AppId,
        request: u32,
        node: NodeId,
        resources: Resources,
        gpus: &[u32],
    ) {
        let name = self.node_name(node.0);
        let cluster = self.launch_cluster(&name);
        if cluster != self.config.cluster {
            self.known_as.insert(container.0, cluster);
        }
        let Some(template) = self.template(app.0, request as usize).cloned() else {
            tracing::error!(app = app.0, request, "no launch template; cannot start container");
            return;
        };
        let app_user = self.submissions.get(&app.0).map(|s| s.spec.user.clone()).unwrap_or_default();
        let launch =
            template.launch(&Placement { container, app, resources, gpus, cluster, app_user: &app_user });
        let placed_ms = self.now_ms;
        let record = self.persist(vec![Write::UpsertContainer(ContainerRecord {
            id: container,
            app,
            request,
            node: name.clone(),
            resources,
            gpus: gpus.to_vec(),
            state: GANTRY_CONTAINER_ALLOCATED,
            started_ms: Some(placed_ms),
            exit_code: None,
            reason: None,
            finished_ms: None,
            cluster,
        })]);
        self.history.remember_launch(
            app.0,
            LaunchedContainer {
                id: container.0,
                node: name.clone(),
                request,
                state: GANTRY_CONTAINER_ALLOCATED,
                exit_code: None,
                resources,
                gpus: gpus.to_vec(),
                started_ms: Some(placed_ms),
                finished_ms: None,
                diagnostics: String::new(),
                cluster,
            },
        );
        self.send_launch(&name, launch, record);
    }

    /// The cluster id a container launched on `node` now gets: this run's, unless the node's
    /// agent is older than cluster ids (it names its containers legacy, and keeps doing so for
    /// them after an upgrade).
    fn launch_cluster(&self, node: &str) -> ClusterId {
        match self.agents.get(node) {
            Some(link) if !link.reports_cluster_ids => ClusterId::LEGACY,
            _ => self.config.cluster,
        }
    }

    /// Keeps an application that just ended for the API: its submission, times and counters
    /// (the engine still holds it until its next compaction).
    fn record_end(&mut self, app: AppId, finished_ms: u64) {
        let crate::Submission { spec, templates } = self.submissions.remove(&app.0).unwrap_or_default();
        let st = self.engine.state();
        let Some(i) = st.app_index(app) else { return };
        let (Some(a), Some(meta)) = (st.apps().get(i as usize), st.app_meta(i)) else { return };
        let ended = EndedApp {
            submit_ms: a.submit_ms,
            finished_ms,
            priority: a.priority,
            max_attempts: meta.max_attempts,
            failures: meta.failures,
            requests: spec.requests,
            commands: templates.into_iter().map(|t| t.argv).collect(),
        };
        self.history.remember_end(app.0, ended);
    }

    pub(crate) fn node_name(&self, node: u32) -> String {
        let st = self.engine.state();
        st.nodes().get(node as usize).map(|n| st.str(n.name).to_owned()).unwrap_or_default()
    }
}
