//! Errors the engine returns for events it refuses. A refused event changes nothing.

use thiserror::Error;

/// Why the engine refused an event or a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    /// A field failed validation.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The thing that was invalid.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// An event named a node the engine does not know.
    #[error("unknown node `{0}`")]
    UnknownNode(String),
    /// An event named an application the engine does not know (or no longer keeps).
    #[error("unknown application {0}")]
    UnknownApp(u64),
    /// An event named a container the engine does not know (or no longer keeps).
    #[error("unknown container {0}")]
    UnknownContainer(u64),
    /// A submission named a queue that does not exist or is not a leaf.
    #[error("queue `{0}` does not exist or is not a leaf queue")]
    UnknownQueue(String),
    /// The queue configuration is inconsistent.
    #[error("queue configuration: {0}")]
    QueueConfig(String),
    /// The plugin profile is inconsistent.
    #[error("plugin profile: {0}")]
    Profile(String),
    /// An event is not allowed in the current state.
    #[error("{0}")]
    Conflict(String),
    /// A submission asks for more than any node could ever give one container (YARN's
    /// InvalidResourceRequestException): the message names the request, the resource and the
    /// maximum.
    #[error("invalid resource request: {0}")]
    InvalidResourceRequest(String),
    /// A reservation event, but no reservation planner is configured (no reservable queue, or
    /// no policy answering `reserve`).
    #[error(
        "no reservation planner is configured: reservations need [reservations] and a planner plugin in [profile] reserve"
    )]
    NoReservationPlanner,
}
