//! Application, node and container states by YARN's names, and a group's rack affinity, with
//! their conversions from the engine's.

use gantry_engine::RackAffinity as EngineRackAffinity;
use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An application's state, by YARN's names (see the module docs for `REJECTED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AppState {
    /// Submitted, waiting for admission.
    New,
    /// Admitted; containers pending or starting.
    Accepted,
    /// At least one container running.
    Running,
    /// Finished successfully.
    Finished,
    /// Failed: out of attempts, or refused at admission.
    Failed,
    /// Killed by a user or the scheduler.
    Killed,
}

impl AppState {
    /// All states, in lifecycle order.
    pub const ALL: [AppState; 6] = [
        AppState::New,
        AppState::Accepted,
        AppState::Running,
        AppState::Finished,
        AppState::Failed,
        AppState::Killed,
    ];

    /// Maps gantry's `GANTRY_APP_*`; `REJECTED` becomes `FAILED`. `None` for an unknown value.
    pub fn from_abi(state: u32) -> Option<AppState> {
        Some(match state {
            GANTRY_APP_NEW => AppState::New,
            GANTRY_APP_ACCEPTED => AppState::Accepted,
            GANTRY_APP_RUNNING => AppState::Running,
            GANTRY_APP_FINISHED => AppState::Finished,
            GANTRY_APP_FAILED | GANTRY_APP_REJECTED => AppState::Failed,
            GANTRY_APP_KILLED => AppState::Killed,
            _ => return None,
        })
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AppState::New => "NEW",
            AppState::Accepted => "ACCEPTED",
            AppState::Running => "RUNNING",
            AppState::Finished => "FINISHED",
            AppState::Failed => "FAILED",
            AppState::Killed => "KILLED",
        }
    }

    /// Whether the app is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, AppState::Finished | AppState::Failed | AppState::Killed)
    }
}

impl fmt::Display for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a state name was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown application state `{0}`; it is one of NEW, ACCEPTED, RUNNING, FINISHED, FAILED, KILLED")]
pub struct UnknownState(pub String);

impl FromStr for AppState {
    type Err = UnknownState;

    /// Parses a state name, ignoring case (`running` = `RUNNING`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AppState::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// YARN's `finalStatus`: the outcome, `UNDEFINED` until the app is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FinalStatus {
    /// Not over yet.
    Undefined,
    /// Finished successfully.
    Succeeded,
    /// Failed or rejected.
    Failed,
    /// Killed.
    Killed,
}

impl FinalStatus {
    /// The outcome an app state implies.
    pub fn of(state: AppState) -> FinalStatus {
        match state {
            AppState::New | AppState::Accepted | AppState::Running => FinalStatus::Undefined,
            AppState::Finished => FinalStatus::Succeeded,
            AppState::Failed => FinalStatus::Failed,
            AppState::Killed => FinalStatus::Killed,
        }
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            FinalStatus::Undefined => "UNDEFINED",
            FinalStatus::Succeeded => "SUCCEEDED",
            FinalStatus::Failed => "FAILED",
            FinalStatus::Killed => "KILLED",
        }
    }
}

/// A node's state, by YARN's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    /// Accepts containers.
    Running,
    /// gantry's `DRAINING`: keeps its containers, accepts no new ones.
    Decommissioning,
    /// Missed its status deadline; its containers are lost.
    Lost,
    /// Reports itself unhealthy; no new containers.
    Unhealthy,
}

impl NodeState {
    /// Maps gantry's `GANTRY_NODE_*`; `None` for an unknown value.
    pub fn from_abi(state: u32) -> Option<NodeState> {
        Some(match state {
            GANTRY_NODE_RUNNING => NodeState::Running,
            GANTRY_NODE_DRAINING => NodeState::Decommissioning,
            GANTRY_NODE_LOST => NodeState::Lost,
            GANTRY_NODE_UNHEALTHY => NodeState::Unhealthy,
            _ => return None,
        })
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Running => "RUNNING",
            NodeState::Decommissioning => "DECOMMISSIONING",
            NodeState::Lost => "LOST",
            NodeState::Unhealthy => "UNHEALTHY",
        }
    }

    /// Reads one name of a `GET /nodes?states=` list, ignoring case: gantry's states by YARN's
    /// names (and `DRAINING`, gantry's own word for DECOMMISSIONING); `None` for the states of
    /// YARN's list that no gantry node is ever in (NEW, DECOMMISSIONED, REBOOTED, SHUTDOWN),
    /// which match no node — YARN's tools name every state when they want all nodes.
    pub fn from_filter_name(name: &str) -> Result<Option<NodeState>, UnknownNodeState> {
        let upper = name.trim().to_ascii_uppercase();
        Ok(Some(match upper.as_str() {
            "RUNNING" => NodeState::Running,
            "DECOMMISSIONING" | "DRAINING" => NodeState::Decommissioning,
            "LOST" => NodeState::Lost,
            "UNHEALTHY" => NodeState::Unhealthy,
            "NEW" | "DECOMMISSIONED" | "REBOOTED" | "SHUTDOWN" => return Ok(None),
            _ => return Err(UnknownNodeState(name.to_owned())),
        }))
    }
}

/// Why a node state name in a filter was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown node state `{0}`; it is one of RUNNING, UNHEALTHY, DECOMMISSIONING (or DRAINING), LOST, \
     or YARN's NEW, DECOMMISSIONED, REBOOTED, SHUTDOWN (which no gantry node is in)"
)]
pub struct UnknownNodeState(pub String);

/// A container's state, by gantry's names (YARN's REST API does not list containers of the RM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContainerState {
    /// Placed; the launch is on its way to the agent.
    Allocated,
    /// Running on its node.
    Running,
    /// Being killed (grace period).
    Stopping,
    /// Exited with status 0.
    Completed,
    /// Exited with a non-zero status.
    Failed,
    /// Killed (by a user, its app's end, or preemption).
    Killed,
    /// Its node was lost, or its agent no longer knew it.
    Lost,
}

impl ContainerState {
    /// Maps gantry's `GANTRY_CONTAINER_*`; `None` for an unknown value.
    pub fn from_abi(state: u32) -> Option<ContainerState> {
        Some(match state {
            GANTRY_CONTAINER_ALLOCATED => ContainerState::Allocated,
            GANTRY_CONTAINER_RUNNING => ContainerState::Running,
            GANTRY_CONTAINER_STOPPING => ContainerState::Stopping,
            GANTRY_CONTAINER_COMPLETED => ContainerState::Completed,
            GANTRY_CONTAINER_FAILED => ContainerState::Failed,
            GANTRY_CONTAINER_KILLED => ContainerState::Killed,
            GANTRY_CONTAINER_LOST => ContainerState::Lost,
            _ => return None,
        })
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Allocated => "ALLOCATED",
            ContainerState::Running => "RUNNING",
            ContainerState::Stopping => "STOPPING",
            ContainerState::Completed => "COMPLETED",
            ContainerState::Failed => "FAILED",
            ContainerState::Killed => "KILLED",
            ContainerState::Lost => "LOST",
        }
    }
}

/// Whether a group's containers must or should share a rack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RackAffinity {
    /// No constraint.
    #[default]
    None,
    /// One rack when possible.
    Preferred,
    /// One rack or not at all.
    Required,
}

impl From<EngineRackAffinity> for RackAffinity {
    fn from(r: EngineRackAffinity) -> Self {
        match r {
            EngineRackAffinity::None => RackAffinity::None,
            EngineRackAffinity::Preferred => RackAffinity::Preferred,
            EngineRackAffinity::Required => RackAffinity::Required,
        }
    }
}

impl From<RackAffinity> for EngineRackAffinity {
    fn from(r: RackAffinity) -> Self {
        match r {
            RackAffinity::None => EngineRackAffinity::None,
            RackAffinity::Preferred => EngineRackAffinity::Preferred,
            RackAffinity::Required => EngineRackAffinity::Required,
        }
    }
}
