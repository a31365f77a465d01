//! The JSON bodies of the REST API, shaped after Hadoop YARN's ResourceManager REST API
//! (`ws/v1/cluster`: `clusterInfo`, `clusterMetrics`, `nodes`/`node`, `apps`/`app`,
//! `new-application`, submit, app `state`, `scheduler`).
//!
//! Conventions, chosen so that YARN tooling keeps working and gantry loses no precision:
//!
//! - **Field names are YARN's** wherever YARN has the field (`appsSubmitted`, `totalMB`,
//!   `usedMemoryMB`, `finalStatus`, `application-name`, `max-app-attempts`, …), including YARN's
//!   mix of camelCase in responses and kebab-case in the submission.
//! - **Resources** in responses are YARN's `{"memory": MiB, "vCores": cores}` *plus* gantry's
//!   exact `cpuMillis`, `memoryBytes` and `gpus` ([`ResourceInfo`]). The YARN figures are
//!   rounded down (a 1.5-core container shows `vCores: 1`); the exact ones are authoritative.
//!   Submissions use only the exact fields ([`ResourceRequest`]): YARN's integral cores cannot
//!   express half a core, and accepting both spellings would make one of them ambiguous.
//! - **Ids are numbers.** gantry's ids are `u64`s, not YARN's `application_<ts>_<seq>` strings;
//!   scripts can compare and sort them.
//! - **App states** are YARN's: `NEW`, `ACCEPTED`, `RUNNING`, `FINISHED`, `FAILED`, `KILLED`.
//!   gantry's `REJECTED` (refused at admission) is reported as `FAILED` with the reason in
//!   `diagnostics` — exactly what YARN does for an app its scheduler refuses — so clients that
//!   know YARN's closed set of states need no new case ([`AppState::from_abi`]).
//! - **Node states** are YARN's: gantry's `DRAINING` (keeps its containers, takes no new ones)
//!   is YARN's graceful `DECOMMISSIONING`.
//! - **Empty lists** are `{"app": []}`, not YARN's `null`, so clients need no special case.
//! - Requests reject unknown fields (`deny_unknown_fields`): a misspelt field is an error, not a
//!   silently ignored wish. Responses accept unknown fields, so an older CLI reads a newer
//!   scheduler.
//!
//! One file per resource of the API: `resources.rs` (amounts), `states.rs` (app, node and
//! container states), `cluster.rs` (info and metrics), `nodes.rs`, `apps.rs`, `submission.rs`
//! (new application, submission and its validation), `queues.rs` (the scheduler's queue
//! tree), `errors.rs` (`RemoteException`) and `filters.rs` (the query strings). Every type is
//! re-exported here, so `api::types::X` names each.

mod apps;
mod cluster;
mod errors;
mod filters;
mod nodes;
mod queues;
mod resources;
mod states;
mod submission;

pub use apps::*;
pub use cluster::*;
pub use errors::*;
pub use filters::*;
pub use nodes::*;
pub use queues::*;
pub use resources::*;
pub use states::*;
pub use submission::*;
