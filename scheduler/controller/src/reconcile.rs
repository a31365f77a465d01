//! Reconciliation when an agent (re)registers: what it runs is compared with what the engine
//! wants on its node.
//!
//! - Exits it has not had acknowledged are applied first.
//! - Containers of another scheduler state (a fresh data directory, a restored backup, another
//!   cluster) are not ours, whatever their numbers: they are killed, addressed by their own
//!   cluster id, as YARN's NodeManager kills its containers when it resyncs with a
//!   ResourceManager that does not know them; their exits are only acknowledged, never applied.
//! - Of ours, containers the engine does not want are killed; those it is stopping are asked to
//!   stop again (the first kill may have been lost with the old stream); those it wants and the
//!   agent reports running are marked running; those it wants and the agent lacks are lost.
//!
//! An agent older than cluster ids (`Register.reports_cluster_ids` false) reports none and is
//! taken at its word. After a scheduler restart the containers the store says run on the node
//! are restored into the engine first ([`Controller::restore_awaited`]), so they count as wanted.

use crate::Controller;
use crate::exit_words;
use gantry_engine::{ContainerId, Event};
use gantry_proto::v1;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;
use gantry_sdk::abi::{GANTRY_CONTAINER_RUNNING, GANTRY_CONTAINER_STOPPING};
use std::collections::BTreeSet;

impl Controller {
    /// After a restart: the containers the store says run on `node` are wanted again (if the
    /// agent still has them; reconciliation loses the others).
    pub(crate) fn restore_awaited(&mut self, node: &str) {
        for c in self.awaiting.remove(node).unwrap_or_default() {
            let event = Event::ContainerRestored {
                container: c.id,
                app: c.app,
                request: c.request,
                node: node.to_owned(),
                gpus: c.gpus.clone(),
                running: c.state == GANTRY_CONTAINER_RUNNING,
            };
            match self.event(event) {
                Ok(_) => self.history.remember_launch(c.app.0, crate::LaunchedContainer::from(&c)),
                Err(e) => tracing::warn!(container = c.id.0, error = %e, "cannot restore container"),
            }
        }
    }

    /// Reconciles what `node`'s agent reports in `r` with what the engine wants there.
    pub(crate) fn reconcile(&mut self, node: &str, r: &v1::Register) {
        for exit in &r.unacked_exits {
            self.exited(node, exit, exit_words::exit_phrase(exit), false);
        }
        let (ours, foreign): (Vec<&v1::LiveContainer>, Vec<&v1::LiveContainer>) =
            r.containers.iter().partition(|c| self.ours(node, &c.cluster_id, c.container_id));
        for c in foreign {
            tracing::warn!(%node, container = c.container_id, cluster = %c.cluster_id, "agent runs a container of another scheduler state; killing it");
            self.kill_unwanted(node, c, "another scheduler state's");
        }
        let reported: BTreeSet<u64> = ours.iter().map(|c| c.container_id).collect();
        let (wanted, stopping): (BTreeSet<u64>, BTreeSet<u64>) = {
            let st = self.engine.state();
            let idx = st.node_by_name(node).map(|n| n.0);
            let here = || st.containers().iter().filter(|c| Some(c.node) == idx);
            (
                here().filter(|c| gantry_engine::state::container_is_live(c.state)).map(|c| c.id).collect(),
                here().filter(|c| c.state == GANTRY_CONTAINER_STOPPING).map(|c| c.id).collect(),
            )
        };
        for c in ours {
            if !wanted.contains(&c.container_id) {
                tracing::warn!(%node, container = c.container_id, "agent runs a container the scheduler does not want; killing it");
                self.kill_unwanted(node, c, "not wanted");
            } else if stopping.contains(&c.container_id) {
                // Asked to stop while its agent could not hear it (the kill was lost with the
                // stream): asked again, or it would run beside its replacement until it ends.
                self.kill_unwanted(node, c, "stopping");
            } else if c.state == v1::ContainerState::Running as i32 {
                if let Err(e) = self.event(Event::ContainerStarted { container: ContainerId(c.container_id) })
                {
                    tracing::debug!(container = c.container_id, error = %e, "start refused");
                }
            }
        }
        let exited: BTreeSet<u64> = r
            .unacked_exits
            .iter()
            .filter(|e| self.ours(node, &e.cluster_id, e.container_id))
            .map(|e| e.container_id)
            .collect();
        for id in wanted.difference(&reported) {
            if exited.contains(id) {
                continue;
            }
            tracing::warn!(%node, container = id, "container missing on its node; lost");
            self.stats.reconcile_lost += 1;
            if let Err(e) = self.event(Event::ContainerLost { container: ContainerId(*id) }) {
                tracing::debug!(error = %e, "lost container");
            }
        }
    }

    /// Kills a container the agent runs that the scheduler does not want, by its own name.
    fn kill_unwanted(&mut self, node: &str, c: &v1::LiveContainer, reason: &str) {
        self.stats.reconcile_kills += 1;
        let kill = v1::Kill {
            container_id: c.container_id,
            grace_ms: Some(0),
            reason: reason.into(),
            cluster_id: c.cluster_id.clone(),
        };
        self.send_to(node, ToAgent::Kill(kill));
    }
}
