//! Node conditions (`DiskPressure`, `LaunchFailures`, …): what an agent reports keeps new work
//! off its node, as kubelet's node conditions and YARN's unhealthy NodeManagers do.
//!
//! An agent sends its conditions in every `Register` and `Status` (a full picture each time).
//! While it reports any, its node is UNHEALTHY in the engine: it keeps its containers, and
//! nothing new is placed there; once they clear it is RUNNING again. An operator's drain stands
//! apart: a drained node stays DRAINING whatever its agent reports, and an undrained one
//! returns to what its conditions say. The conditions themselves are shown by `gantry nodes`,
//! the REST node's `healthReport` and `conditions`, and `gantry_node_condition`.

use crate::Controller;
use gantry_engine::{Event, NodeCondition};
use gantry_proto::v1;
use gantry_sdk::abi::{GANTRY_NODE_DRAINING, GANTRY_NODE_LOST, GANTRY_NODE_RUNNING, GANTRY_NODE_UNHEALTHY};

/// Most conditions kept per node, and the longest reason (bytes): what an agent sends is
/// shown to people and exported, and a broken one must not flood either.
const MAX_CONDITIONS: usize = 16;
const MAX_REASON_BYTES: usize = 1024;

impl Controller {
    /// `node`'s agent reported `conditions`: keep them, and settle the node's state.
    pub(crate) fn conditions_reported(&mut self, node: &str, mut conditions: Vec<v1::NodeCondition>) {
        let Some(link) = self.agents.get_mut(node) else { return };
        if conditions.is_empty() && link.conditions.is_empty() {
            // Nothing changed, so the node's state needs no settling (a registration or a drain
            // change settles it itself).
            return;
        }
        conditions.truncate(MAX_CONDITIONS);
        for c in &mut conditions {
            c.r#type = clip(&c.r#type, 64);
            c.reason = clip(&c.reason, MAX_REASON_BYTES);
        }
        let was: Vec<String> = link.conditions.iter().map(|c| c.r#type.clone()).collect();
        let now: Vec<String> = conditions.iter().map(|c| c.r#type.clone()).collect();
        if was != now {
            if now.is_empty() {
                tracing::info!(%node, "node conditions cleared; it takes new work again");
            } else {
                let why: Vec<String> =
                    conditions.iter().map(|c| format!("{}: {}", c.r#type, c.reason)).collect();
                tracing::warn!(%node, conditions = ?why, "node reports conditions; it takes no new work");
            }
        }
        link.conditions = conditions;
        self.settle_node_state(node);
    }

    /// The state an undrained node returns to: UNHEALTHY while its agent reports conditions,
    /// RUNNING otherwise.
    pub(crate) fn undrained_state(&self, node: &str) -> NodeCondition {
        if self.agents.get(node).is_some_and(|l| !l.conditions.is_empty()) {
            NodeCondition::Unhealthy
        } else {
            NodeCondition::Running
        }
    }

    /// Puts a node that is neither lost nor drained into the state its conditions call for.
    fn settle_node_state(&mut self, node: &str) {
        let st = self.engine.state();
        let Some(idx) = st.node_by_name(node) else { return };
        let state = st.nodes()[idx.0 as usize].state;
        if state == GANTRY_NODE_LOST || state == GANTRY_NODE_DRAINING {
            return;
        }
        let wanted = self.undrained_state(node);
        let want_abi = match wanted {
            NodeCondition::Unhealthy => GANTRY_NODE_UNHEALTHY,
            _ => GANTRY_NODE_RUNNING,
        };
        if state == want_abi {
            return;
        }
        if let Err(e) = self.event(Event::NodeStateChanged { node: node.to_owned(), state: wanted }) {
            tracing::warn!(%node, error = %e, "cannot apply the node's conditions");
            return;
        }
        // A node back in service has room for pending work.
        self.dirty = true;
    }

    /// Every connected node's conditions, as (node, condition type), for `gantry_node_condition`.
    pub fn node_conditions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .agents
            .iter()
            .flat_map(|(node, link)| link.conditions.iter().map(move |c| (node.clone(), c.r#type.clone())))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// At most `max` bytes of `s`, cut at a character boundary, with control, bidirectional and
/// invisible characters (which could rewrite a listing) written as escapes.
fn clip(s: &str, max: usize) -> String {
    let s = if gantry_sdk::names::forbidden_char(s).is_some() {
        s.chars()
            .map(|c| {
                if gantry_sdk::names::forbidden_char(c.encode_utf8(&mut [0; 4])).is_some() {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        s.to_owned()
    };
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
