//! What runs in a container — the program, its environment and the account it runs as — which
//! the engine does not carry, and the `Launch` message built from it and an engine placement.

use gantry_engine::{AppId, ContainerId, Resources};
use gantry_proto::{ClusterId, v1};

/// What runs in a container: the program and its environment (per request of an application).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaunchTemplate {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The Unix account the containers run as (`[security] accounts`); `None` = the agent's
    /// `container_user`. Absent in templates stored before accounts existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The submitting user (the app's), for whom an agent without an account to use runs the
    /// containers under a uid of their own. Absent in templates stored before isolation: such
    /// launches carry the app's user from the engine instead.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub submitter: String,
    /// Most processes per container; `None`: the node's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u64>,
    /// The containers' disk allowance, bytes (`Launch.disk_bytes`); `None` = the node's
    /// default. Absent in templates stored before disk allowances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// Where and what an engine placement launches.
pub(crate) struct Placement<'a> {
    pub container: ContainerId,
    pub app: AppId,
    pub resources: Resources,
    pub gpus: &'a [u32],
    pub cluster: ClusterId,
    /// The app's user as the engine has it, for templates stored before isolation.
    pub app_user: &'a str,
}

impl LaunchTemplate {
    /// The `Launch` message for `placement` of this template.
    pub(crate) fn launch(self, placement: &Placement<'_>) -> v1::Launch {
        v1::Launch {
            container_id: placement.container.0,
            app_id: placement.app.0,
            argv: self.argv,
            env: self.env.into_iter().collect(),
            user: self.account.unwrap_or_default(),
            submitter: if self.submitter.is_empty() { placement.app_user.to_owned() } else { self.submitter },
            max_pids: self.max_pids.unwrap_or(0),
            cpu_millis: i64::try_from(placement.resources.cpu_millis).unwrap_or(i64::MAX),
            memory_bytes: i64::try_from(placement.resources.memory_bytes).unwrap_or(i64::MAX),
            gpus: placement.gpus.to_vec(),
            cluster_id: placement.cluster.to_wire(),
            disk_bytes: self.disk_bytes.unwrap_or(0),
            ..Default::default()
        }
    }
}
