//! The discrete-event loop.
//!
//! Events wait in a heap ordered by (virtual time, insertion number), so two runs with the same
//! inputs pop them in the same order. At each instant the loop applies every event due, then runs
//! one scheduling cycle (`Event::Tick`), as the daemon does after anything that can make work
//! placeable; while work is pending it also ticks every `tick_ms`, so time-based policies (waiting
//! for better resources, rebalancing) see time pass. When nothing is pending it jumps to the next
//! event.
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
//! due, the main loop, one cycle per instant, when the run stops); `agents.rs` — what the
//! simulated agents do with the engine's commands (launches, kills, container ends, a lost
//! node's containers); `jobs.rs` — the jobs' stages, submissions, time limits and reruns;
//! `nodes.rs` — nodes registering, failing, coming back, booting and being removed;
//! `reservations.rs` — deadline jobs' reservations; `measure.rs` — the integrals, samples and
//! the figures a run ends with; `result.rs` — the records a run returns.

mod agents;
mod events;
mod jobs;
mod measure;
mod nodes;
mod reservations;
mod result;
#[cfg(test)]
mod tests;

pub(crate) use agents::value_matches;
pub use result::{JobOutcome, JobRecord, PlanSample, Sample, SimResult};

use crate::deadlines::{JobReservation, JobReservationRecord, ReservationAnswer};
use crate::elastic::{Autoscaler, ElasticError, ElasticOptions};
use crate::queues::QueueTracker;
use crate::trace::Job;
use agents::Running;
use events::Due;
use gantry_engine::{Engine, NodeSpec};
use jobs::JobState;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

/// How long nothing may be due, with work still pending, before a run is called stalled and
/// stops: one hour of virtual time, so that a policy acting on the passage of time alone still
/// gets its chance.
pub const STALL_AFTER_MS: u64 = 3_600_000;

/// How the loop runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Interval of the periodic scheduling cycle while work is pending, ms.
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
        }
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
    engine: &'a mut Engine,
    jobs: &'a [Job],
    nodes: &'a [NodeSpec],
    options: &'a SimOptions,

    // The loop (`events.rs`).
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Due)>>,
    /// Events in the heap other than ticks, samples and autoscaler checks: while there are
    /// none, nothing will ever happen but the passage of time.
    due_events: usize,
    tick_scheduled: bool,
    /// A sample is due at the end of this instant.
    sample_due: bool,
    stalled_at_ms: Option<u64>,
    cycles: u64,

    // The agents (`agents.rs`).
    running: BTreeMap<u64, Running>,
    /// Node name → rack, from the specs.
    rack_of: HashMap<String, String>,
    launches: u64,
    preemptions: u64,

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

/// Runs `jobs` on `nodes` through `engine` (already built, with its plugins and queues).
pub fn run(
    engine: &mut Engine,
    nodes: &[NodeSpec],
    jobs: &[Job],
    options: &SimOptions,
) -> Result<SimResult, SimError> {
    run_with_progress(engine, nodes, jobs, options, None)
}

/// [`run`], telling `progress` (virtual time ms, jobs ended, jobs) whenever a job ends.
pub fn run_with_progress<'a>(
    engine: &'a mut Engine,
    nodes: &'a [NodeSpec],
    jobs: &'a [Job],
    options: &'a SimOptions,
    progress: Option<&'a mut dyn FnMut(u64, usize, usize)>,
) -> Result<SimResult, SimError> {
    if options.tick_ms == 0 || options.sample_ms == 0 {
        return Err(SimError::Input("tick_ms and sample_ms must be positive".into()));
    }
    if let Some(e) = &options.elastic {
        e.validate(nodes.len())?;
        if !options.failures.is_empty() {
            return Err(ElasticError::WithFailures.into());
        }
    }
    let mut capacity = [0u64; 3];
    for n in nodes {
        capacity[0] += n.capacity.cpu_millis;
        capacity[1] += n.capacity.memory_bytes;
        capacity[2] += u64::from(n.capacity.gpus);
    }
    let queues = QueueTracker::new(engine.state());
    let mut sim = Sim {
        engine,
        jobs,
        nodes,
        options,
        now: 0,
        seq: 0,
        heap: BinaryHeap::new(),
        state: jobs.iter().map(|_| JobState::default()).collect(),
        app_job: HashMap::new(),
        running: BTreeMap::new(),
        allocated: [0; 3],
        capacity,
        area: [0.0; 3],
        area_at: 0,
        samples: Vec::new(),
        preemptions: 0,
        cycles: 0,
        launches: 0,
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
        rack_of: nodes.iter().map(|n| (n.name.clone(), n.rack.clone())).collect(),
        elastic: options.elastic.clone().map(|e| Autoscaler::new(e, nodes)),
        registered_capacity: [0; 3],
        allocated_area: [0.0; 3],
        registered_area: [0.0; 3],
        billed_area: [0.0; 3],
        due_events: 0,
        stalled_at_ms: None,
        queues,
        sample_due: false,
    };
    sim.start()?;
    sim.main_loop()?;
    Ok(sim.finish())
}
