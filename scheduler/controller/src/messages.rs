//! What goes into the controller and what comes out of it, as data.
//!
//! The daemon turns sockets, REST calls, store commits and its clock into [`Input`]s and carries
//! out the [`Output`]s; the simulator does the same with simulated agents and a simulated store.
//! A request that needs an answer carries a [`ReplyTo`] chosen by the driver; its answer comes
//! back as [`Output::Reply`] — at once, or once the store has committed what it changed.

use crate::node_claim::Refused;
use crate::records::{StoreError, Write};
use gantry_engine::{AppId, AppSpec, Command, EngineError, ReservationId, ReservationRequest};
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as FromAgent;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;

pub use crate::handed_out::Caller;
pub use crate::launch::LaunchTemplate;

/// Names a waiting caller; chosen by the driver, handed back in [`Output::Reply`].
pub type ReplyTo = u64;

/// Names one agent stream (a reconnect gets a new one); chosen by the driver, never 0.
pub type StreamId = u64;

/// Names one job of store writes; chosen by the controller, increasing. A driver reports the
/// outcomes with [`Input::Committed`] in this order (the daemon's store commits in submission
/// order).
pub type WriteId = u64;

/// Something that happened, for the controller to decide on.
#[derive(Debug)]
pub enum Input {
    /// Submit an application (`POST /apps`); answered [`Reply::Submitted`] once its record
    /// commits.
    Submit {
        /// Where the answer goes.
        reply: ReplyTo,
        /// The engine's view of it.
        spec: AppSpec,
        /// An id handed out earlier by `new-application`, if the client uses one: it must have
        /// been handed to `caller` and not used (see [`crate::handed_out`]).
        id: Option<AppId>,
        /// Who submits (the authenticated user; `None` without tokens).
        caller: Caller,
        /// One template per request, in order.
        templates: Vec<LaunchTemplate>,
    },
    /// Hand out an id for a later submission (`new-application`, `new-reservation`); answered
    /// [`Reply::NewId`] once the store has recorded that it is taken.
    NewId {
        /// Where the answer goes.
        reply: ReplyTo,
        /// Which kind of id.
        kind: IdKind,
        /// Who may use it.
        caller: Caller,
    },
    /// Kill an application: its KILLED state is stored first, and only then are its containers
    /// stopped, so a kill the store cannot commit changes nothing ([`Reply::Killed`]).
    Kill {
        /// Where the answer goes.
        reply: ReplyTo,
        /// The app.
        app: AppId,
    },
    /// Drain (`drained`) or undrain a node: stored first, then applied ([`Reply::NodeDrain`]).
    SetNodeDrain {
        /// Where the answer goes.
        reply: ReplyTo,
        /// Node name.
        node: String,
        /// Drain (true) or undrain.
        drained: bool,
    },
    /// A reservation submitted, updated, deleted or re-organised ([`Reply::Reservation`]).
    Reservation {
        /// Where the answer goes.
        reply: ReplyTo,
        /// What to do.
        op: ReservationOp,
    },
    /// Read the end of a container's log through the agent of the node that ran it
    /// ([`Reply::Log`]).
    ReadLog {
        /// Where the answer goes.
        reply: ReplyTo,
        /// Container id.
        container: u64,
        /// Which file.
        stream: v1::LogStream,
        /// Only the last this many bytes; `None` = the whole file (the agent caps both at 4 MiB).
        tail: Option<u64>,
    },
    /// The caller behind `reply` stopped waiting (a log read that timed out): its place is
    /// freed, and a late answer is dropped.
    ReplyAbandoned {
        /// Who gave up.
        reply: ReplyTo,
    },
    /// An agent opened a stream and sent its `Register` ([`Reply::Registered`]).
    AgentConnected {
        /// Where the answer goes.
        reply: ReplyTo,
        /// The new stream.
        stream: StreamId,
        /// Its registration.
        register: v1::Register,
    },
    /// A message on an agent's stream.
    AgentMessage {
        /// Node name.
        node: String,
        /// The stream it came on.
        stream: StreamId,
        /// The message.
        msg: FromAgent,
    },
    /// An agent's stream ended.
    AgentDisconnected {
        /// Node name.
        node: String,
        /// The stream.
        stream: StreamId,
    },
    /// A message the controller sent could not be handed to its stream (closed, or its queue
    /// full): the agent never hears it.
    Undelivered {
        /// Node name.
        node: String,
        /// The message.
        msg: ToAgent,
    },
    /// The outcome of the store job [`Output::Store`] named `write`.
    Committed {
        /// The job.
        write: WriteId,
        /// Committed, or why not.
        result: Result<(), StoreError>,
    },
}

/// Something for the driver to carry out.
// Messages to agents are most outputs, so boxing them would cost an allocation each to save
// space in the rare others.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Output {
    /// Send `msg` on an agent's stream (dropped if that stream has ended meanwhile).
    ToAgent {
        /// Node name (for logs and [`Input::Undelivered`]).
        node: String,
        /// The stream.
        stream: StreamId,
        /// The message.
        msg: ToAgent,
    },
    /// Close an agent's stream: its node was replaced by a newer stream or declared lost.
    CloseStream {
        /// The stream.
        stream: StreamId,
    },
    /// Write these to the store, all or nothing, after every earlier job; report the outcome
    /// as [`Input::Committed`].
    Store {
        /// The job's id.
        write: WriteId,
        /// What to write.
        writes: Vec<Write>,
    },
    /// Answer a caller.
    Reply {
        /// Who asked.
        to: ReplyTo,
        /// The answer.
        reply: Reply,
    },
    /// A command the engine gave, for a driver that observes the engine's decisions
    /// ([`crate::ControllerConfig::report_engine_commands`]); the controller has already carried
    /// it out (or queued what it leads to), so there is nothing to do.
    EngineCommand(Command),
}

/// An answer to a request.
#[derive(Debug)]
pub enum Reply {
    /// To [`Input::Submit`]: the application's id, once stored.
    Submitted(Result<AppId, SubmitError>),
    /// To [`Input::NewId`].
    NewId(Result<u64, SubmitError>),
    /// To [`Input::Kill`].
    Killed(Result<(), SubmitError>),
    /// To [`Input::SetNodeDrain`]: the node's state afterwards (`GANTRY_NODE_*`).
    NodeDrain(Result<u32, SubmitError>),
    /// To [`Input::Reservation`].
    Reservation(Result<ReservationOutcome, SubmitError>),
    /// To [`Input::AgentConnected`]: accepted, or why not (the driver ends the stream then).
    Registered(Result<(), Refused>),
    /// To [`Input::ReadLog`].
    Log(Result<LogChunk, LogError>),
}

/// Why a change was not acknowledged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    /// The engine (or the controller's own checks) refused it; nothing changed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// It could not be made durable; nothing changed.
    #[error("not stored: {0}")]
    Store(StoreError),
}

/// Which kind of id [`Input::NewId`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// An application id (`new-application`).
    App,
    /// A reservation id (`new-reservation`).
    Reservation,
}

/// A change to the reservation plan (see [`Input::Reservation`]).
#[derive(Debug)]
pub enum ReservationOp {
    /// Admit a new reservation.
    Submit {
        /// An id from `new-reservation`, or none.
        id: Option<ReservationId>,
        /// Who submits (the authenticated user; `None` without tokens): an `id` must have been
        /// handed to them.
        caller: Caller,
        /// What it asks for.
        request: ReservationRequest,
    },
    /// Replace a reservation's definition.
    Update {
        /// The reservation.
        id: ReservationId,
        /// Its new request.
        request: ReservationRequest,
    },
    /// Delete a reservation.
    Delete {
        /// The reservation.
        id: ReservationId,
    },
    /// Ask the planner to re-organise the plan now (OPTIMIZE).
    Optimize,
}

/// What a [`ReservationOp`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReservationOutcome {
    /// Accepted (or updated, or deleted, or re-organised): the reservation's id; `moved`
    /// reservations were re-placed to make room.
    Accepted {
        /// The reservation (0 for an optimisation).
        id: ReservationId,
        /// How many other reservations moved.
        moved: usize,
    },
    /// The plan has no room; nothing changed.
    Rejected {
        /// The id it was submitted under.
        id: ReservationId,
        /// Why.
        reason: String,
    },
}

/// A piece of a container's log, as its agent read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogChunk {
    /// The last bytes of the file (at most 4 MiB).
    pub data: Vec<u8>,
    /// The file's size when the agent read it.
    pub file_size_bytes: u64,
}

/// Why a container's log could not be had. Each says what a person can do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The scheduler knows no container of this id (never launched, or forgotten long ago).
    #[error("container {0} not found")]
    UnknownContainer(u64),
    /// The node that ran the container has no stream to the scheduler now.
    #[error(
        "node {node}, which ran container {container}, is not connected; its logs can be read once its agent is back"
    )]
    NodeNotConnected {
        /// The node.
        node: String,
        /// The container.
        container: u64,
    },
    /// The node's stream ended (or was replaced) before the agent answered.
    #[error("node {node} disconnected before it sent container {container}'s log; try again")]
    Disconnected {
        /// The node.
        node: String,
        /// The container.
        container: u64,
    },
    /// The agent could not read the file; its reason (e.g. "no stdout for container 12").
    #[error("{0}")]
    Agent(String),
}
