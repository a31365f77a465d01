//! The engine's interface: events in, commands out (see DESIGN.md, "The engine is sans-IO").

use crate::model::{AppId, AppSpec, ContainerId, NodeId, NodeSpec, ReservationId, Resources};
use crate::reservations::{AtomInterval, ReservationEnd, ReservationRequest};

/// Something that happened, as a driver (the daemon or the simulator) reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An agent registered (or re-registered) its node.
    NodeRegistered(NodeSpec),
    /// An operator or the agent changed a node's schedulability.
    NodeStateChanged {
        /// Node name.
        node: String,
        /// New state.
        state: NodeCondition,
    },
    /// The node missed its status deadline; its containers are lost.
    NodeLost {
        /// Node name.
        node: String,
    },
    /// An agent reported what its node really uses (host-wide); plugins see it as the view's
    /// `node_usage` (ABI 1.1). Refused for an unknown or lost node.
    NodeUsageReported {
        /// Node name.
        node: String,
        /// Measured usage: CPU in use (millicores), memory in use (bytes), busy GPUs.
        used: Resources,
    },
    /// A user submitted an application.
    AppSubmitted(AppSpec),
    /// A user submitted an application under an id handed out earlier (YARN's
    /// `new-application`, see [`Event::IdsTaken`]). Refused if the id was never handed out (it
    /// is not below the engine's next application id) or a live application has it; the driver
    /// checks that it was handed to this caller and not used before. Answered `AppAccepted`.
    AppSubmittedWithId {
        /// The id handed out.
        app: AppId,
        /// Its submission.
        spec: AppSpec,
    },
    /// Ids below these are taken — recorded in the driver's durable store (after a restart), or
    /// handed out to a client that will submit with them later — so the engine never gives them
    /// again. Each counter moves up to its value, never down.
    IdsTaken {
        /// Application ids below this are taken.
        app_below: u64,
        /// Container ids below this are taken.
        container_below: u64,
        /// Reservation ids below this are taken.
        reservation_below: u64,
    },
    /// An application recovered from the driver's durable store after a restart, with the id,
    /// state and failure count it had (no `AppAccepted` reply: it was acknowledged long ago).
    AppRestored {
        /// Its id (the engine's next ids move past it).
        app: AppId,
        /// Its submission.
        spec: AppSpec,
        /// Its state (NEW, ACCEPTED or RUNNING; RUNNING is restored as ACCEPTED until one of its
        /// containers is restored running).
        state: u32,
        /// Failed containers so far.
        failures: u32,
        /// When it was submitted, ms.
        submit_ms: u64,
        /// Per request, in order, the containers that completed (exited 0) before the restart:
        /// they count as placed and never run again. Empty = none; refused if longer than the
        /// requests or above a request's count.
        completed: Vec<u32>,
    },
    /// A container recovered from the durable store, on a node that is registered (or restored).
    ContainerRestored {
        /// Its id.
        container: ContainerId,
        /// Its application (restored first).
        app: AppId,
        /// Index of its request within the application.
        request: u32,
        /// Its node's name.
        node: String,
        /// The GPU indexes it was given.
        gpus: Vec<u32>,
        /// Whether it had been confirmed running.
        running: bool,
    },
    /// The driver has restored every container it will after a restart (their agents came
    /// back, or stopped being waited for). A gang missing members restarts whole, as it does
    /// when a member is lost: members that did not come back cannot be placed on their own.
    RestoreEnded,
    /// A user asked to kill an application.
    AppKillRequested {
        /// The application.
        app: AppId,
    },
    /// The driver could not make a submission durable after the engine took it (the store's
    /// commit failed): the application is ended as KILLED with `reason`, its containers stopped.
    AppWithdrawn {
        /// The application.
        app: AppId,
        /// Why, for its diagnostics.
        reason: String,
    },
    /// A client submitted a reservation to the plan (needs `EngineConfig::reservations` and a
    /// planner, `Profile::reserve`, else `EngineError::NoReservationPlanner`). The planner is
    /// asked at once (ADMIT); answered `ReservationAdmitted` (and `ReservationReplanned` for
    /// reservations it moved) or `ReservationRejected`.
    ReservationSubmitted {
        /// An id handed out earlier (`new-reservation`), or `None` for a new one.
        id: Option<ReservationId>,
        /// What it asks for.
        request: ReservationRequest,
    },
    /// A client replaced the definition of an accepted reservation that has not started (e.g.
    /// the job turned out larger; one that has started is refused). The planner is asked at once
    /// (UPDATE); answered `ReservationAdmitted` (and `ReservationReplanned` for reservations
    /// moved to make room) or `ReservationRejected` (the old allocation stays).
    ReservationUpdated {
        /// The reservation.
        id: ReservationId,
        /// Its new request (same queue).
        request: ReservationRequest,
    },
    /// A client deleted an accepted reservation.
    ReservationDeleted {
        /// The reservation.
        id: ReservationId,
    },
    /// A reservation recovered from the driver's store with the allocation it had (not planned
    /// again; answered `ReservationEnded { Expired }` if its deadline has passed).
    ReservationRestored {
        /// Its id.
        id: ReservationId,
        /// Its request.
        request: ReservationRequest,
        /// When it was accepted, ms.
        submit_ms: u64,
        /// Its allocation.
        allocation: Vec<AtomInterval>,
    },
    /// A client asked the planner to re-organise the plan now (the `reserve` hook with
    /// OPTIMIZE, as `[reservations] optimize_interval_ms` does periodically). Answered
    /// `ReservationReplanned` for each reservation it moved.
    OptimizeReservations,
    /// An agent confirmed a container started.
    ContainerStarted {
        /// The container.
        container: ContainerId,
    },
    /// An agent reported a container's exit (build one with [`Event::container_exited`] when
    /// there is nothing to say beyond the status).
    ContainerExited {
        /// The container.
        container: ContainerId,
        /// Exit status (0 = success).
        exit_code: i32,
        /// How it ended in words, as its agent told it, without the container's name (e.g.
        /// "was killed for running beyond its memory limit: 1.1Gi of 1Gi used (exit status
        /// 137)"); empty = "exited with status N". The engine prefixes the container and adds
        /// why it had asked it to stop, for the container's and the application's diagnostics.
        diagnostics: String,
    },
    /// An agent no longer has a container the engine thought it ran (found at reconciliation):
    /// it is lost, and its request runs again without using an attempt, as for a lost node.
    ContainerLost {
        /// The container.
        container: ContainerId,
    },
    /// Time passed: run a scheduling cycle (and `rebalance` when its interval is due).
    Tick,
}

/// A schedulability state an operator or agent may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeCondition {
    /// Accepts containers.
    Running,
    /// Keeps its containers, accepts no new ones.
    Draining,
    /// Reports itself unhealthy: no new containers.
    Unhealthy,
}

/// Why a container is being killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// Its application was killed.
    AppKilled,
    /// Its application failed (out of attempts).
    AppFailed,
    /// A gang sibling failed, so the gang restarts.
    GangRestart,
    /// A `rebalance` plugin preempted it.
    Preempted,
    /// A `rebalance` plugin killed it.
    PolicyKill,
}

/// What the engine asks its driver to do. Commands are ordered: apply them in sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Start a container on a node.
    Launch {
        /// New container id.
        container: ContainerId,
        /// Its application.
        app: AppId,
        /// Index of the app's request it serves.
        request: u32,
        /// Where.
        node: NodeId,
        /// Its resources.
        resources: Resources,
        /// Indexes (on the node) of the GPUs handed to it.
        gpus: Vec<u32>,
    },
    /// Stop a container: SIGTERM, `grace_ms`, then SIGKILL.
    Kill {
        /// The container.
        container: ContainerId,
        /// Its node.
        node: NodeId,
        /// Grace period in ms (0 = at once).
        grace_ms: u64,
        /// Why.
        reason: KillReason,
    },
    /// An application was recorded under this id (the reply to a submission).
    AppAccepted {
        /// The new id.
        app: AppId,
    },
    /// An application changed state.
    AppStateChanged {
        /// The application.
        app: AppId,
        /// New state (`GANTRY_APP_*`).
        state: u32,
        /// Human-readable reason.
        diagnostics: String,
    },
    /// A reservation was accepted into the plan (the answer to a submission or update).
    ReservationAdmitted {
        /// Its id.
        reservation: ReservationId,
        /// The queue its applications are submitted to.
        queue: String,
        /// Its allocation, sorted by atom, then start.
        allocation: Vec<AtomInterval>,
    },
    /// A reservation could not be placed; nothing changed.
    ReservationRejected {
        /// The id it was submitted (or updated) under.
        reservation: ReservationId,
        /// Why.
        reason: String,
    },
    /// A reservation's allocation changed (a replan, an update that made room, an optimisation).
    ReservationReplanned {
        /// Its id.
        reservation: ReservationId,
        /// Its new allocation, sorted by atom, then start.
        allocation: Vec<AtomInterval>,
    },
    /// A reservation left the plan; its applications moved to the plan's default queue.
    ReservationEnded {
        /// Its id.
        reservation: ReservationId,
        /// Why.
        why: ReservationEnd,
    },
}

impl Event {
    /// [`Event::ContainerExited`] with nothing known beyond the exit status.
    pub fn container_exited(container: ContainerId, exit_code: i32) -> Event {
        Event::ContainerExited { container, exit_code, diagnostics: String::new() }
    }
}

impl KillReason {
    /// Why the engine asked a container to stop, in words (for its diagnostics).
    pub fn describe(self) -> &'static str {
        match self {
            KillReason::AppKilled => "its application was killed",
            KillReason::AppFailed => "its application failed",
            KillReason::GangRestart => "a member of its gang ended, so the gang restarts whole",
            KillReason::Preempted => "preempted by the rebalance plugin",
            KillReason::PolicyKill => "killed by the rebalance plugin",
        }
    }
}

impl Command {
    /// The application that a submission's commands accept (`AppAccepted`), if any: how a
    /// driver learns the id the engine gave a new application.
    pub fn accepted_app(commands: &[Command]) -> Option<AppId> {
        commands.iter().find_map(|c| match c {
            Command::AppAccepted { app } => Some(*app),
            _ => None,
        })
    }
}
