//! The discrete-event loop, around the scheduler's real controller.
//!
//! The simulator drives [`gantry_controller::Controller`] — the engine plus every decision the
//! daemon takes: held launches, recovery, reconciliation, liveness — exactly as the daemon's shell
//! does, with simulated agents that speak the agent protocol (`v1` messages) and an in-memory
//! store ([`MemStore`]) in place of sockets and SQLite. So a run can inject what the daemon
//! faces: a scheduler restart from the store at a time ([`DaemonOptions::restarts_at_ms`]), a
//! network partition of a node ([`Partition`]: the agent fences its containers, the scheduler
//! loses the node after its timeout), failing nodes (silent agents, lost after the node
//! timeout), and slow or failing commits.
//!
//! Events wait in a heap ordered by (virtual time, insertion number), so two runs with the same
//! inputs pop them in the same order. At each instant the loop applies every event due, then
//! polls the controller, which runs a scheduling cycle when something made work placeable or its
//! interval has passed, as the daemon's does; while work is pending the loop also visits every
//! `tick_ms`, so time-based policies (waiting for better resources, rebalancing) see time pass.
//! The agents report at most every [`DaemonOptions::status_ms`], when the controller is about to
//! be polled. When nothing is pending the loop jumps to the next event.
//!
//! The simulated agents obey at once: a `Launch` starts its container now and schedules its end
//! after the stage's duration — `duration_ms` where the stage's preferences hold, else
//! `slow_duration_ms`. A stage whose containers are spread over several racks while it prefers
//! one rack runs slow; a gang's containers end together.
//!
//! A `Kill` from rebalancing (reason `Preempted` or `PolicyKill`) is carried out as the daemon's
//! agent does it — SIGTERM, the grace period, SIGKILL — by a process that uses its whole grace:
//! the container holds its resources (as a stopping container in the engine) and exits
//! `grace_ms` later, or at its natural end if that comes first. Other kills (the application was
//! killed at its time limit or failed, a gang restarts) end the container at once. A stopped
//! container's work is lost: the engine puts its request back when it asks for the stop, and the
//! container placed in its stead runs the stage's full duration again, from the start.
//!
//! With [`SimOptions::elastic`] the cluster is a pool that an autoscaler grows and shrinks
//! ([`crate::elastic`]); otherwise every node registers at time 0.
//!
//! A run ends when every job has ended, at `until_ms`, or when it has **stalled**: for
//! [`STALL_AFTER_MS`] of virtual time nothing has been due — no container running or node
//! booting, no arrival, end or time limit ahead — while work is still pending (work no node can
//! hold, or work a strict policy keeps behind it). The daemon would keep such work pending for
//! ever; the simulator reports it unfinished and says when the run stalled
//! ([`SimResult::stalled_at_ms`]).
//!
//! The loop's parts, one concern a file: `events.rs` — what the loop does (the heap of things
//! due, the main loop, when the run stops); `scheduler.rs` — the controller and its store, as the
//! daemon's shell runs them (inputs, outputs, commits, replies, restarts); `agents.rs` — the
//! simulated agents (launches, kills, exits, status reports, fencing, partitions); `jobs.rs` —
//! the jobs' stages, submissions, time limits and reruns; `nodes.rs` — nodes registering,
//! failing, coming back, booting and being removed; `reservations.rs` — deadline jobs'
//! reservations; `measure.rs` — the integrals, samples and the figures a run ends with;
//! `result.rs` — the records a run returns.

mod agents;
mod events;
mod jobs;
mod measure;
mod nodes;
mod reservations;
mod result;
mod scheduler;
#[cfg(test)]
mod tests;

pub(crate) use agents::value_matches;
pub use result::{DaemonFigures, JobOutcome, JobRecord, PlanSample, Sample, SimResult};

use crate::deadlines::{JobReservation, JobReservationRecord, ReservationAnswer};
use crate::elastic::{Autoscaler, ElasticError, ElasticOptions};
use crate::queues::QueueTracker;
use crate::trace::Job;
use agents::{Running, SimAgent};
use events::Due;
use gantry_controller::Controller;
use gantry_controller::memstore::MemStore;
use gantry_engine::{Engine, NodeSpec};
use jobs::JobState;
use scheduler::Scheduler;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

/// How long nothing may be due, with work still pending, before a run is called stalled and
/// stops: one hour of virtual time, so that a policy acting on the passage of time alone still
/// gets its chance.
pub const STALL_AFTER_MS: u64 = 3_600_000;

/// Builds the scheduler's engine (with its plugins and queues): once at the start of a run, and
/// again at each scheduler restart, as a restarted daemon builds its engine from its
/// configuration before it reads the store.
pub type EngineFactory<'a> = dyn FnMut() -> Result<Engine, String> + 'a;

/// How the loop runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Interval of the scheduling cycle (the controller's), and of the loop's visits while work
    /// is pending, ms.
    pub tick_ms: u64,
    /// Stop at this virtual time (ms); jobs still running are reported unfinished.
    pub until_ms: Option<u64>,
    /// Interval of the time-series samples, ms.
    pub sample_ms: u64,
    /// Nodes that fail (and when), by name: their containers are lost and rerun elsewhere.
    pub failures: Vec<NodeFailure>,
    /// Rayon reservations for deadline jobs ([`crate::deadlines`]), each submitted at its time;
    /// an admitted one's job runs its stages in the reservation's queue while it lasts.
    pub job_reservations: Vec<JobReservation>,
    /// An elastic cluster: the nodes are a pool that an autoscaler starts and removes
    /// (`None`: every node registers at time 0 and stays).
    pub elastic: Option<ElasticOptions>,
    /// The daemon's timings and the faults injected into it.
    pub daemon: DaemonOptions,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            tick_ms: 1_000,
            until_ms: None,
            sample_ms: 60_000,
            failures: Vec::new(),
            job_reservations: Vec::new(),
            elastic: None,
            daemon: DaemonOptions::default(),
        }
    }
}

/// The daemon's and the agents' timings, and the faults a run injects into them.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonOptions {
    /// An agent silent this long loses its node (`[server] node_timeout_ms`), ms.
    pub node_timeout_ms: u64,
    /// An agent that hears nothing from the scheduler this long kills its containers (the
    /// agent's `fencing_timeout_ms`), ms.
    pub fence_ms: u64,
    /// How often the agents report, at most. The real agent reports every second; the simulated
    /// ones report when the controller is about to be polled and the interval has passed, which
    /// keeps them inside both timeouts at a fraction of the cost. Ms.
    pub status_ms: u64,
    /// How long an agent whose stream ended waits before it registers again, ms.
    pub reconnect_ms: u64,
    /// How long the store takes to commit a job (0: at once, in the same instant), ms.
    pub commit_ms: u64,
    /// The share of store jobs that fail (a full disk), drawn from `seed`.
    pub commit_failure_rate: f64,
    /// The scheduler process dies at these times and starts again from what the store has
    /// committed, ms.
    pub restarts_at_ms: Vec<u64>,
    /// Network partitions between a node and the scheduler.
    pub partitions: Vec<Partition>,
    /// Seeds the commit failures and the runs' cluster ids.
    pub seed: u64,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            node_timeout_ms: 10_000,
            fence_ms: 8_000,
            status_ms: 3_000,
            reconnect_ms: 1_000,
            commit_ms: 0,
            commit_failure_rate: 0.0,
            restarts_at_ms: Vec::new(),
            partitions: Vec::new(),
            seed: 0,
        }
    }
}

impl DaemonOptions {
    /// Checks the timings against each other, as the daemon's and the agent's configurations
    /// do.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |why: String| Err(SimError::Input(why));
        if self.node_timeout_ms == 0 || self.status_ms == 0 || self.reconnect_ms == 0 {
            return bad(
                "the node timeout, the status interval and the reconnect delay must be positive".into()
            );
        }
        if self.status_ms >= self.node_timeout_ms.min(self.fence_ms) {
            return bad(format!(
                "agents that report every {} ms would be lost (node timeout {} ms) or fence (fencing timeout {} ms) between reports",
                self.status_ms, self.node_timeout_ms, self.fence_ms
            ));
        }
        if !(0.0..1.0).contains(&self.commit_failure_rate) {
            return bad(format!("the commit failure rate {} is not in [0, 1)", self.commit_failure_rate));
        }
        if let Some(p) = self.partitions.iter().find(|p| p.duration_ms == 0) {
            return bad(format!("the partition of {} at {} ms has no duration", p.node, p.at_ms));
        }
        Ok(())
    }
}

/// A node failure injected into a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    /// Node name.
    pub node: String,
    /// When it fails, ms.
    pub at_ms: u64,
    /// When it comes back (registers again), ms; `None` = never.
    pub back_at_ms: Option<u64>,
}

/// A network partition between one node and the scheduler: neither hears the other from
/// `at_ms` for `duration_ms`; then the agent registers again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Node name.
    pub node: String,
    /// When it starts, ms.
    pub at_ms: u64,
    /// How long it lasts, ms.
    pub duration_ms: u64,
}

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The engine refused something the simulator must be able to do (a node, a node failure).
    #[error("the engine refused {what}: {source}")]
    Engine {
        /// What was being done.
        what: String,
        /// Why.
        source: gantry_engine::EngineError,
    },
    /// The engine could not be built (at the start, or at a scheduler restart).
    #[error("cannot build the engine: {0}")]
    Build(String),
    /// The inputs are unusable.
    #[error("{0}")]
    Input(String),
    /// The elastic cluster's settings are unusable.
    #[error(transparent)]
    Elastic(#[from] ElasticError),
}

/// The loop's state.
struct Sim<'a> {
    // The inputs.
    jobs: &'a [Job],
    nodes: &'a [NodeSpec],
    options: &'a SimOptions,

    // The scheduler (`scheduler.rs`).
    ctl: Controller,
    sched: Scheduler<'a>,
    store: MemStore,

    // The loop (`events.rs`).
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Due)>>,
    /// Events in the heap other than ticks, samples and autoscaler checks: while
    /// there are none, nothing will ever happen but the passage of time.
    due_events: usize,
    tick_scheduled: bool,
    /// A sample is due at the end of this instant.
    sample_due: bool,
    stalled_at_ms: Option<u64>,
    /// Scheduling cycles the controller ran.
    cycles: u64,

    // The agents (`agents.rs`).
    agents: Vec<SimAgent>,
    /// Node name → index into the nodes (and the agents).
    node_index: HashMap<String, usize>,
    /// Containers running on agents, by id.
    running: BTreeMap<u64, Running>,
    /// Launches the agents received this instant, started together at its end: a request's
    /// speed depends on where all of its containers landed.
    launching: Vec<agents::AgentLaunch>,
    launches: u64,
    preemptions: u64,
    /// The agents' next status round is due then (taken when the controller is next polled).
    next_status_ms: u64,

    // The jobs (`jobs.rs`).
    state: Vec<JobState>,
    app_job: HashMap<u64, usize>,
    /// Jobs still active with containers to start: while there are any, time keeps ticking.
    pending_jobs: usize,
    /// Jobs submitted that have not started a container yet.
    not_started: usize,
    /// Submissions the engine refused (logged the 1st, 2nd, 4th … time).
    refused_submissions: u64,
    /// Jobs that have ended (any outcome).
    ended_jobs: usize,
    /// Told (virtual time, jobs ended, jobs) whenever a job ends.
    progress: Option<&'a mut dyn FnMut(u64, usize, usize)>,

    // The nodes (`nodes.rs`).
    /// Registered time per node, for node-hours: (since, total).
    node_time: HashMap<String, (Option<u64>, u64)>,
    /// Capacity of the registered (not lost) nodes.
    registered_capacity: [u64; 3],
    /// The autoscaler, on an elastic cluster.
    elastic: Option<Autoscaler<'a>>,

    // The job reservations (`reservations.rs`).
    /// What became of each job reservation.
    job_reservations: Vec<JobReservationRecord>,
    /// Reservation id → index into `job_reservations`.
    reservation_of: HashMap<u64, usize>,
    /// Per job: the queue its stages go to instead of the job's own (an admitted reservation's).
    queue_override: Vec<Option<String>>,
    /// Replans seen: moved, removed.
    replans: (u64, u64),

    // The measures (`measure.rs`).
    allocated: [u64; 3],
    capacity: [u64; 3],
    /// Integral of the allocated shares over time, and when it was last advanced.
    area: [f64; 3],
    area_at: u64,
    /// Integrals over time (ms) of the allocation, of the registered nodes' capacity and of
    /// the billed nodes' capacity (elastic clusters; booting nodes count).
    allocated_area: [f64; 3],
    registered_area: [f64; 3],
    billed_area: [f64; 3],
    samples: Vec<Sample>,
    /// The plan at each sample.
    plan: Vec<PlanSample>,
    /// The leaf queues' figures.
    queues: QueueTracker,
}

/// Runs `jobs` on `nodes` through a controller around the engine `make_engine` builds.
pub fn run(
    make_engine: &mut EngineFactory<'_>,
    nodes: &[NodeSpec],
    jobs: &[Job],
    options: &SimOptions,
) -> Result<SimResult, SimError> {
    run_with_progress(make_engine, nodes, jobs, options, None)
}

/// [`run`], telling `progress` (virtual time ms, jobs ended, jobs) whenever a job ends.
pub fn run_with_progress<'a>(
    make_engine: &'a mut EngineFactory<'_>,
    nodes: &'a [NodeSpec],
    jobs: &'a [Job],
    options: &'a SimOptions,
    progress: Option<&'a mut dyn FnMut(u64, usize, usize)>,
) -> Result<SimResult, SimError> {
    if options.tick_ms == 0 || options.sample_ms == 0 {
        return Err(SimError::Input("tick_ms and sample_ms must be positive".into()));
    }
    options.daemon.validate()?;
    if let Some(e) = &options.elastic {
        e.validate(nodes.len())?;
        if !options.failures.is_empty() {
            return Err(ElasticError::WithFailures.into());
        }
    }
    let node_index: HashMap<String, usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
    let unknown =
        options.failures.iter().map(|f| &f.node).chain(options.daemon.partitions.iter().map(|p| &p.node));
    for name in unknown {
        if !node_index.contains_key(name) {
            return Err(SimError::Input(format!("no node {name:?} in the cluster")));
        }
    }
    let mut capacity = [0u64; 3];
    for n in nodes {
        capacity[0] += n.capacity.cpu_millis;
        capacity[1] += n.capacity.memory_bytes;
        capacity[2] += u64::from(n.capacity.gpus);
    }
    let engine = make_engine().map_err(SimError::Build)?;
    let queues = QueueTracker::new(engine.state());
    let mut sched = Scheduler::new(make_engine, options, nodes);
    let ctl = sched.controller(engine, None, 0);
    let mut sim = Sim {
        jobs,
        nodes,
        options,
        ctl,
        sched,
        store: MemStore::new(),
        now: 0,
        seq: 0,
        heap: BinaryHeap::new(),
        state: jobs.iter().map(|_| JobState::default()).collect(),
        app_job: HashMap::new(),
        agents: nodes.iter().enumerate().map(|(i, _)| SimAgent::new(i)).collect(),
        node_index,
        running: BTreeMap::new(),
        launching: Vec::new(),
        allocated: [0; 3],
        capacity,
        area: [0.0; 3],
        area_at: 0,
        samples: Vec::new(),
        preemptions: 0,
        launches: 0,
        next_status_ms: 0,
        tick_scheduled: false,
        pending_jobs: 0,
        not_started: 0,
        refused_submissions: 0,
        ended_jobs: 0,
        job_reservations: options
            .job_reservations
            .iter()
            .map(|r| JobReservationRecord {
                job: r.job,
                answer: ReservationAnswer::NotSubmitted,
                replanned: 0,
                ended: None,
            })
            .collect(),
        reservation_of: HashMap::new(),
        queue_override: vec![None; jobs.len()],
        replans: (0, 0),
        plan: Vec::new(),
        progress,
        node_time: HashMap::new(),
        elastic: options.elastic.clone().map(|e| Autoscaler::new(e, nodes)),
        registered_capacity: [0; 3],
        allocated_area: [0.0; 3],
        registered_area: [0.0; 3],
        billed_area: [0.0; 3],
        due_events: 0,
        stalled_at_ms: None,
        cycles: 0,
        queues,
        sample_due: false,
    };
    sim.start()?;
    sim.main_loop()?;
    Ok(sim.finish())
}
