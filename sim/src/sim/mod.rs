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

use crate::deadlines::{JobReservation, JobReservationRecord, ReservationAnswer};
use crate::elastic::{Autoscaler, ElasticError, ElasticOptions, ElasticStats};
use crate::queues::{QueueStats, QueueTracker};
use crate::trace::{Job, Stage};
use gantry_engine::{
    AppId, AppSpec, Command, ContainerId, Engine, Event, KillReason, NodeCondition, NodeId, NodeSpec,
    RackAffinity, RequestSpec, ReservationEnd, Resources,
};
use gantry_sdk::abi::*;
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

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    /// Every stage finished.
    Completed,
    /// Killed at its time limit.
    Killed,
    /// Refused by the engine at submission or admission.
    Rejected,
    /// A stage failed (out of attempts) or was killed by the scheduler.
    Failed,
    /// Still pending or running when the run stopped.
    Unfinished,
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobRecord {
    /// The trace's name for it.
    pub name: String,
    /// Its class.
    pub class: String,
    /// Containers of its largest stage.
    pub containers: u32,
    /// Submitted, ms.
    pub submit_ms: u64,
    /// Its first container started, ms.
    pub start_ms: Option<u64>,
    /// It ended (completed, killed, failed), ms.
    pub end_ms: Option<u64>,
    /// How it ended.
    pub outcome: JobOutcome,
    /// Whether any of its stages ran on resources its preferences did not want (slow).
    pub ran_slow: bool,
    /// Its containers preempted by a policy.
    pub preempted: u32,
}

impl JobRecord {
    /// Time from submission to the first container's start, ms.
    pub fn wait_ms(&self) -> Option<u64> {
        self.start_ms.map(|s| s.saturating_sub(self.submit_ms))
    }

    /// Time from submission to the end, ms (the seed's T).
    pub fn completion_ms(&self) -> Option<u64> {
        self.end_ms.map(|e| e.saturating_sub(self.submit_ms))
    }
}

/// One time-series sample.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Virtual time, ms.
    pub t_ms: u64,
    /// Allocated share of the cluster's CPU, 0..=1.
    pub cpu: f64,
    /// Allocated share of the cluster's memory.
    pub memory: f64,
    /// Allocated share of the cluster's GPUs (0 without GPUs).
    pub gpus: f64,
    /// Containers running.
    pub running: u64,
    /// Jobs submitted and not yet started.
    pub waiting_jobs: u64,
    /// Nodes registered with the engine.
    pub nodes: u32,
    /// Nodes started and still booting (billed, not registered yet).
    pub booting: u32,
    /// Allocated share of the registered nodes' CPU (0 with none registered).
    pub cpu_registered: f64,
    /// Allocated share of the registered nodes' memory.
    pub memory_registered: f64,
    /// Allocated share of the registered nodes' GPUs (0 without GPUs).
    pub gpus_registered: f64,
}

/// The Rayon plan at one sample time (runs whose engine has a plan).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlanSample {
    /// Virtual time, ms.
    pub t_ms: u64,
    /// CPU the plan can hand out now (the plan queue's guarantee), millicores.
    pub capacity_cpu: u64,
    /// CPU the plan's reservations hold now (their allocations), millicores.
    pub reserved_cpu: u64,
    /// The most CPU reserved at any plan step in the next hour (one step in ten), millicores:
    /// a capacity loss that leaves less than this overcommits the plan and re-plans.
    pub reserved_next_hour_cpu: u64,
    /// CPU the reservations' queues use now (their jobs' containers), millicores.
    pub used_cpu: u64,
    /// Reservations in the plan.
    pub reservations: u32,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// Per job, in trace order.
    pub jobs: Vec<JobRecord>,
    /// The time series.
    pub samples: Vec<Sample>,
    /// Virtual time at the end of the run, ms.
    pub end_ms: u64,
    /// Time-averaged allocated share of CPU, memory and GPUs over the run.
    pub utilisation: [f64; 3],
    /// Node-hours: the time each node was registered, summed; on an elastic cluster the time
    /// each node was billed (from its start, boot included, to its removal).
    pub node_hours: f64,
    /// When the run stalled (see the module documentation), if it did: from then on nothing was
    /// due; the run stopped [`STALL_AFTER_MS`] later with the pending jobs unfinished.
    pub stalled_at_ms: Option<u64>,
    /// The autoscaler's figures, on an elastic cluster.
    pub elastic: Option<ElasticStats>,
    /// Containers preempted by a policy.
    pub preemptions: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Containers launched.
    pub launches: u64,
    /// What became of each of [`SimOptions::job_reservations`], in the same order.
    pub job_reservations: Vec<JobReservationRecord>,
    /// Rayon replans seen: reservations moved (`ReservationReplanned`) and removed
    /// (`ReservationEnded { why: Replanned }`).
    pub replans: (u64, u64),
    /// Per leaf queue: samples over time, guarantee reached, what rebalancing took.
    pub queues: QueueStats,
    /// The Rayon plan at each sample time (empty without a plan).
    pub plan: Vec<PlanSample>,
    /// Each loaded plugin's record at the end: failed calls, panics, quarantines, refused
    /// decisions by reason (what the daemon exports as metrics).
    pub plugins: Vec<gantry_engine::PolicyStatus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// A job arrives (index into the jobs).
    Arrival(usize),
    /// A container's natural end (its id); ignored if it was killed or lost first.
    End(u64),
    /// A stopped container's exit (its id): at once, or after its grace period.
    Killed(u64),
    /// A job's time limit.
    Limit(usize),
    /// A node fails (index into the failures).
    Fail(usize),
    /// A deadline job's Rayon reservation (index into the options' job reservations).
    ReserveJob(usize),
    /// A failed node registers again.
    Back(usize),
    /// A periodic scheduling cycle.
    Tick,
    /// The autoscaler's periodic check.
    Check,
    /// An elastic pool node (its index) finished booting and registers.
    Boot(usize),
    /// A time-series sample, taken at the end of its instant (after its events and cycle).
    Sample,
}

impl Due {
    /// Ticks, samples and checks recur for as long as the run goes on; the others are things
    /// that happen.
    fn periodic(self) -> bool {
        matches!(self, Due::Tick | Due::Sample | Due::Check)
    }
}

/// A running container as the simulated agent sees it.
struct Running {
    job: usize,
    node: u32,
    resources: Resources,
    /// Told to stop (its exit is due); its work is already counted to run again.
    stopping: bool,
}

struct JobState {
    stage: usize,
    /// Containers of the current stage not running yet (to start, or to start again).
    unplaced: u32,
    app: Option<AppId>,
    started: Option<u64>,
    ended: Option<(u64, JobOutcome)>,
    ran_slow: bool,
    preempted: u32,
}

/// The loop's state.
struct Sim<'a> {
    engine: &'a mut Engine,
    jobs: &'a [Job],
    nodes: &'a [NodeSpec],
    options: &'a SimOptions,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Due)>>,
    state: Vec<JobState>,
    app_job: HashMap<u64, usize>,
    running: BTreeMap<u64, Running>,
    allocated: [u64; 3],
    capacity: [u64; 3],
    /// Integral of the allocated shares over time, and when it was last advanced.
    area: [f64; 3],
    area_at: u64,
    samples: Vec<Sample>,
    preemptions: u64,
    cycles: u64,
    launches: u64,
    tick_scheduled: bool,
    /// Jobs still active with containers to start: while there are any, time keeps ticking.
    pending_jobs: usize,
    /// Jobs submitted that have not started a container yet.
    not_started: usize,
    /// Submissions the engine refused (logged the 1st, 2nd, 4th … time).
    refused_submissions: u64,
    /// Jobs that have ended (any outcome).
    ended_jobs: usize,
    /// What became of each job reservation.
    job_reservations: Vec<JobReservationRecord>,
    /// Reservation id → index into `job_reservations`.
    reservation_of: HashMap<u64, usize>,
    /// Per job: the queue its stages go to instead of the job's own (an admitted reservation's).
    queue_override: Vec<Option<String>>,
    /// Replans seen: moved, removed.
    replans: (u64, u64),
    /// The plan at each sample.
    plan: Vec<PlanSample>,
    /// Told (virtual time, jobs ended, jobs) whenever a job ends.
    progress: Option<&'a mut dyn FnMut(u64, usize, usize)>,
    /// Registered time per node, for node-hours: (since, total).
    node_time: HashMap<String, (Option<u64>, u64)>,
    /// Node name → rack, from the specs.
    rack_of: HashMap<String, String>,
    /// The autoscaler, on an elastic cluster.
    elastic: Option<Autoscaler<'a>>,
    /// Capacity of the registered (not lost) nodes.
    registered_capacity: [u64; 3],
    /// Integrals over time (ms) of the allocation, of the registered nodes' capacity and of
    /// the billed nodes' capacity (elastic clusters; booting nodes count).
    allocated_area: [f64; 3],
    registered_area: [f64; 3],
    billed_area: [f64; 3],
    /// Events in the heap other than ticks, samples and autoscaler checks: while there are
    /// none, nothing will ever happen but the passage of time.
    due_events: usize,
    stalled_at_ms: Option<u64>,
    /// The leaf queues' figures.
    queues: QueueTracker,
    /// A sample is due at the end of this instant.
    sample_due: bool,
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
        state: jobs
            .iter()
            .map(|_| JobState {
                stage: 0,
                unplaced: 0,
                app: None,
                started: None,
                ended: None,
                ran_slow: false,
                preempted: 0,
            })
            .collect(),
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

impl Sim<'_> {
    fn push(&mut self, at: u64, due: Due) {
        if !due.periodic() {
            self.due_events += 1;
        }
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, due)));
    }

    fn start(&mut self) -> Result<(), SimError> {
        let first: Vec<usize> = match self.elastic.as_mut() {
            Some(a) => a.initial(0),
            None => (0..self.nodes.len()).collect(),
        };
        for i in first {
            self.register(i)?;
        }
        if let Some(a) = &self.elastic {
            let check = a.options.check_ms;
            self.push(check, Due::Check);
        }
        // Before the arrivals, so that a reservation submitted at its job's arrival is answered
        // before the job's first stage is submitted.
        for (i, r) in self.options.job_reservations.iter().enumerate() {
            if r.job >= self.jobs.len() {
                return Err(SimError::Input(format!(
                    "job reservation {i} names job {}, of {}",
                    r.job,
                    self.jobs.len()
                )));
            }
            self.push(r.at_ms, Due::ReserveJob(i));
        }
        for (i, job) in self.jobs.iter().enumerate() {
            self.push(job.submit_ms, Due::Arrival(i));
            if let Some(limit) = job.time_limit_ms {
                self.push(job.submit_ms.saturating_add(limit), Due::Limit(i));
            }
        }
        for (i, f) in self.options.failures.iter().enumerate() {
            self.push(f.at_ms, Due::Fail(i));
            if let Some(back) = f.back_at_ms {
                self.push(back, Due::Back(i));
            }
        }
        self.push(0, Due::Sample);
        Ok(())
    }

    fn all_done(&self) -> bool {
        self.ended_jobs == self.jobs.len()
    }

    fn main_loop(&mut self) -> Result<(), SimError> {
        let mut quiet_since: Option<u64> = None;
        while let Some(Reverse((at, _, _))) = self.heap.peek().copied() {
            if self.options.until_ms.is_some_and(|u| at > u) {
                self.advance(self.options.until_ms.unwrap_or(at));
                break;
            }
            self.advance(at);
            let mut tick = false;
            // Every event due now, then one cycle.
            while let Some(Reverse((t, _, due))) = self.heap.peek().copied() {
                if t != at {
                    break;
                }
                self.heap.pop();
                if !due.periodic() {
                    self.due_events -= 1;
                }
                tick |= self.handle_due(due)?;
            }
            if tick {
                self.cycle();
            }
            self.queues.observe(self.now, self.engine.state());
            if std::mem::take(&mut self.sample_due) {
                self.sample();
            }
            if self.all_done() {
                break;
            }
            if self.due_events == 0 {
                let since = *quiet_since.get_or_insert(self.now);
                if self.now.saturating_sub(since) >= STALL_AFTER_MS {
                    self.stalled_at_ms = Some(since);
                    break;
                }
            } else {
                quiet_since = None;
            }
            // Keep time moving for pending work.
            if !self.tick_scheduled && self.pending_work() {
                self.tick_scheduled = true;
                self.push(self.now + self.options.tick_ms, Due::Tick);
            }
        }
        Ok(())
    }

    /// Registers node `i` of the cluster (or pool) with the engine now.
    fn register(&mut self, i: usize) -> Result<(), SimError> {
        let n = &self.nodes[i];
        let cmds = self
            .engine
            .handle(self.now, Event::NodeRegistered(n.clone()))
            .map_err(|source| SimError::Engine { what: format!("node {}", n.name), source })?;
        self.node_time.entry(n.name.clone()).or_insert((None, 0)).0 = Some(self.now);
        add_capacity(&mut self.registered_capacity, &n.capacity, true);
        self.apply(cmds);
        Ok(())
    }

    /// The autoscaler's check: removes nodes idle past the cool-down, starts nodes for work
    /// waiting past the threshold. True if the engine should run a cycle.
    fn autoscale(&mut self) -> Result<bool, SimError> {
        let Some(a) = self.elastic.as_ref() else { return Ok(false) };
        let idle = self.engine.idle_nodes();
        let remove = a.plan_scale_down(self.now, &idle, self.engine.state());
        for i in remove {
            let name = self.nodes[i].name.clone();
            let what = |source| SimError::Engine { what: format!("the removal of node {name}"), source };
            // Drain first (no new containers), then take the (empty) node away.
            let cmds = self
                .engine
                .handle(
                    self.now,
                    Event::NodeStateChanged { node: name.clone(), state: NodeCondition::Draining },
                )
                .map_err(what)?;
            self.apply(cmds);
            let cmds = self.engine.handle(self.now, Event::NodeLost { node: name.clone() }).map_err(what)?;
            self.apply(cmds);
            self.unregister(i);
            if let Some(a) = self.elastic.as_mut() {
                a.removed(i, self.now);
            }
        }
        let Some(a) = self.elastic.as_mut() else { return Ok(false) };
        let start = a.plan_scale_up(self.now, self.engine.state());
        if !start.is_empty() {
            a.stats.scale_ups += 1;
        }
        let boot = a.options.boot_ms;
        let check = a.options.check_ms;
        for &i in &start {
            a.start(i, self.now);
        }
        for i in start {
            self.push(self.now.saturating_add(boot), Due::Boot(i));
        }
        if !self.all_done() {
            self.push(self.now.saturating_add(check), Due::Check);
        }
        Ok(false)
    }

    /// Node `i` of the cluster (or pool) is no longer registered: stops its registered time.
    fn unregister(&mut self, i: usize) {
        let n = &self.nodes[i];
        if let Some((since, total)) = self.node_time.get_mut(&n.name) {
            if let Some(s) = since.take() {
                *total += self.now - s;
                add_capacity(&mut self.registered_capacity, &n.capacity, false);
            }
        }
    }

    fn pending_work(&self) -> bool {
        self.pending_jobs > 0
    }

    /// Sets a job's count of containers to start, keeping [`Sim::pending_jobs`] true.
    fn set_unplaced(&mut self, job: usize, n: u32) {
        let before = self.state[job].unplaced > 0;
        self.state[job].unplaced = n;
        match (before, n > 0) {
            (false, true) => self.pending_jobs += 1,
            (true, false) => self.pending_jobs -= 1,
            _ => {}
        }
    }

    /// Records a job's end (the first one counts).
    fn end_job(&mut self, job: usize, outcome: JobOutcome) {
        if self.state[job].ended.is_some() {
            return;
        }
        self.state[job].ended = Some((self.now, outcome));
        self.ended_jobs += 1;
        if let Some(p) = self.progress.as_mut() {
            p(self.now, self.ended_jobs, self.jobs.len());
        }
        self.set_unplaced(job, 0);
        if self.state[job].app.is_some() && self.state[job].started.is_none() {
            self.not_started -= 1;
        }
    }

    /// Moves the clock to `t`, integrating the allocation over the interval.
    fn advance(&mut self, t: u64) {
        if t > self.area_at {
            let dt = (t - self.area_at) as f64;
            let billed = self.elastic.as_ref().map_or(self.registered_capacity, |a| a.billed_capacity());
            for (k, billed) in billed.iter().enumerate() {
                if self.capacity[k] > 0 {
                    self.area[k] += dt * self.allocated[k] as f64 / self.capacity[k] as f64;
                }
                self.allocated_area[k] += dt * self.allocated[k] as f64;
                self.registered_area[k] += dt * self.registered_capacity[k] as f64;
                self.billed_area[k] += dt * *billed as f64;
            }
            self.area_at = t;
        }
        self.now = self.now.max(t);
    }

    /// Applies one due event; true if a scheduling cycle should follow.
    fn handle_due(&mut self, due: Due) -> Result<bool, SimError> {
        match due {
            Due::Arrival(i) => {
                self.submit_stage(i);
                Ok(true)
            }
            Due::End(c) => Ok(self.container_ended(c, 0)),
            Due::Killed(c) => Ok(self.container_ended(c, 128 + 15)),
            Due::Limit(i) => {
                if self.state[i].ended.is_none() {
                    self.end_job(i, JobOutcome::Killed);
                    if let Some(app) = self.state[i].app {
                        self.event(Event::AppKillRequested { app });
                    }
                }
                Ok(true)
            }
            Due::Fail(f) => {
                let node = self.options.failures[f].node.clone();
                if let Some(i) = self.nodes.iter().position(|n| n.name == node) {
                    self.unregister(i);
                }
                let lost: Vec<u64> = self
                    .running
                    .iter()
                    .filter(|(_, r)| self.node_name(r.node) == node)
                    .map(|(&c, _)| c)
                    .collect();
                for c in lost {
                    if let Some(r) = self.release(c).filter(|r| !r.stopping) {
                        self.rerun(r.job);
                    }
                }
                self.engine
                    .handle(self.now, Event::NodeLost { node: node.clone() })
                    .map(|cmds| self.apply(cmds))
                    .map_err(|source| SimError::Engine {
                        what: format!("the loss of node {node}"),
                        source,
                    })?;
                Ok(true)
            }
            Due::Back(f) => {
                let name = &self.options.failures[f].node;
                let Some(spec) = self.nodes.iter().find(|n| &n.name == name).cloned() else {
                    return Err(SimError::Input(format!("node failure names an unknown node {name:?}")));
                };
                if let Some((since, _)) = self.node_time.get_mut(name) {
                    if since.is_none() {
                        *since = Some(self.now);
                        add_capacity(&mut self.registered_capacity, &spec.capacity, true);
                    }
                }
                self.engine
                    .handle(self.now, Event::NodeRegistered(spec))
                    .map(|cmds| self.apply(cmds))
                    .map_err(|source| SimError::Engine {
                        what: format!("node {name} coming back"),
                        source,
                    })?;
                Ok(true)
            }
            Due::Tick => {
                self.tick_scheduled = false;
                Ok(true)
            }
            Due::Check => self.autoscale(),
            Due::Boot(i) => {
                let ready = self.elastic.as_mut().is_some_and(|a| a.booted(i, self.now));
                if ready {
                    self.register(i)?;
                }
                Ok(ready)
            }
            Due::ReserveJob(k) => {
                self.reserve_job(k);
                Ok(true)
            }
            Due::Sample => {
                // Taken once this instant is over (its events and its cycle applied).
                self.sample_due = true;
                if !self.all_done() {
                    self.push(self.now + self.options.sample_ms, Due::Sample);
                }
                Ok(false)
            }
        }
    }

    /// Submits job reservation `k` to the Rayon planner; an admitted one's job will submit its
    /// stages to the reservation's queue.
    fn reserve_job(&mut self, k: usize) {
        let r = &self.options.job_reservations[k];
        let job = r.job;
        let event = Event::ReservationSubmitted { id: None, request: r.request.clone() };
        match self.engine.handle(self.now, event) {
            Ok(cmds) => {
                for c in &cmds {
                    match c {
                        Command::ReservationAdmitted { reservation, queue, .. } => {
                            self.job_reservations[k].answer =
                                ReservationAnswer::Admitted { id: reservation.0, queue: queue.clone() };
                            self.reservation_of.insert(reservation.0, k);
                            if self.state[job].ended.is_none() {
                                self.queue_override[job] = Some(queue.clone());
                            }
                        }
                        Command::ReservationRejected { reason, .. } => {
                            self.job_reservations[k].answer = ReservationAnswer::Rejected(reason.clone());
                        }
                        _ => {}
                    }
                }
                self.apply(cmds);
            }
            Err(e) => {
                tracing::debug!(job = %self.jobs[job].name, error = %e, "reservation refused");
                self.job_reservations[k].answer = ReservationAnswer::Refused(e.to_string());
            }
        }
    }

    fn node_name(&self, node: u32) -> &str {
        let st = self.engine.state();
        st.nodes().get(node as usize).map_or("", |n| st.str(n.name))
    }

    fn sample(&mut self) {
        let share = |k: usize, s: &Self| {
            if s.capacity[k] == 0 { 0.0 } else { s.allocated[k] as f64 / s.capacity[k] as f64 }
        };
        let registered = |k: usize, s: &Self| {
            let cap = s.registered_capacity[k];
            if cap == 0 { 0.0 } else { s.allocated[k] as f64 / cap as f64 }
        };
        let waiting = self.not_started;
        let (nodes, booting) = match &self.elastic {
            Some(a) => (a.registered(), a.booting()),
            None => (self.node_time.values().filter(|(since, _)| since.is_some()).count(), 0),
        };
        self.queues.sample(self.now, self.engine.state());
        self.sample_plan();
        self.samples.push(Sample {
            t_ms: self.now,
            cpu: share(0, self),
            memory: share(1, self),
            gpus: share(2, self),
            running: self.running.len() as u64,
            waiting_jobs: waiting as u64,
            nodes: nodes as u32,
            booting: booting as u32,
            cpu_registered: registered(0, self),
            memory_registered: registered(1, self),
            gpus_registered: registered(2, self),
        });
    }

    /// Records the Rayon plan now, if the engine has one.
    fn sample_plan(&mut self) {
        let Some(book) = self.engine.reservation_book() else { return };
        let step = book.config().step_ms;
        let now = book.skyline(self.now, self.now.saturating_add(1), step);
        // No plan before the first reservation.
        let Some(&(_, capacity, reserved)) = now.first() else { return };
        let (capacity_cpu, reserved_cpu) = (capacity.cpu_millis, reserved.cpu_millis);
        let reserved_next_hour_cpu = book
            .skyline(self.now, self.now.saturating_add(3_600_000), step.saturating_mul(10))
            .iter()
            .map(|(_, _, r)| r.cpu_millis)
            .max()
            .unwrap_or(0);
        let queues = self.engine.state().queues();
        let used_cpu =
            book.reservations().filter_map(|r| queues.get(r.queue as usize)).map(|q| q.used.cpu_millis).sum();
        self.plan.push(PlanSample {
            t_ms: self.now,
            capacity_cpu,
            reserved_cpu,
            reserved_next_hour_cpu,
            used_cpu,
            reservations: book.reservations().count() as u32,
        });
    }

    fn event(&mut self, event: Event) {
        match self.engine.handle(self.now, event) {
            Ok(cmds) => self.apply(cmds),
            Err(e) => tracing::debug!(error = %e, "event refused"),
        }
    }

    fn cycle(&mut self) {
        self.cycles += 1;
        self.event(Event::Tick);
    }

    fn submit_stage(&mut self, i: usize) {
        let job = &self.jobs[i];
        let s = self.state[i].stage;
        let Some(stage) = job.stages.get(s) else { return };
        let spec_queue = match &self.queue_override[i] {
            Some(q) => q.clone(),
            None if job.queue.is_empty() => "root.default".to_owned(),
            None => job.queue.clone(),
        };
        let spec = AppSpec {
            name: if job.stages.len() > 1 { format!("{}#{s}", job.name) } else { job.name.clone() },
            queue: spec_queue.clone(),
            user: job.user.clone(),
            priority: job.priority,
            max_attempts: 0,
            requests: vec![request_of(stage, job, self.now)],
        };
        match self.engine.handle(self.now, Event::AppSubmitted(spec)) {
            Ok(cmds) => {
                for c in &cmds {
                    if let Command::AppAccepted { app } = c {
                        if self.state[i].app.is_none() {
                            self.not_started += 1;
                        }
                        self.state[i].app = Some(*app);
                        self.app_job.insert(app.0, i);
                        self.queues.submitted(&spec_queue, self.now);
                        self.set_unplaced(i, stage.count);
                    }
                }
                self.apply(cmds);
            }
            Err(e) => {
                // Often the configuration's fault (a queue it lacks): say so, but not per job.
                self.refused_submissions += 1;
                if self.refused_submissions.is_power_of_two() {
                    tracing::warn!(job = %job.name, error = %e, count = self.refused_submissions, "submission refused");
                }
                self.end_job(i, JobOutcome::Rejected);
            }
        }
    }

    /// Applies the engine's commands as obedient agents would.
    fn apply(&mut self, cmds: Vec<Command>) {
        // Launches of one request in one batch start together: their speed depends on where
        // all of them landed.
        let mut launches: Vec<(ContainerId, AppId, u32, NodeId, Resources)> = Vec::new();
        for c in cmds {
            match c {
                Command::Launch { container, app, request, node, resources, .. } => {
                    launches.push((container, app, request, node, resources));
                }
                Command::Kill { container, reason, grace_ms, .. } => {
                    let Some(r) = self.running.get_mut(&container.0) else { continue };
                    let (job, first) = (r.job, !r.stopping);
                    r.stopping = true;
                    let rebalancing = matches!(reason, KillReason::Preempted | KillReason::PolicyKill);
                    if first {
                        if rebalancing {
                            self.preemptions += 1;
                            self.state[job].preempted += 1;
                        }
                        // The engine has put its request back: the work runs again.
                        self.rerun(job);
                    }
                    // A rebalancing victim uses its whole grace (a later KILL cuts it short);
                    // any other process ends at once on SIGTERM.
                    let at = if rebalancing { self.now.saturating_add(grace_ms) } else { self.now };
                    self.push(at, Due::Killed(container.0));
                }
                Command::AppStateChanged { app, state, .. } => self.app_state(app, state),
                Command::ReservationReplanned { reservation, .. } => {
                    self.replans.0 += 1;
                    if let Some(&k) = self.reservation_of.get(&reservation.0) {
                        self.job_reservations[k].replanned += 1;
                    }
                }
                Command::ReservationEnded { reservation, why } => {
                    if why == ReservationEnd::Replanned {
                        self.replans.1 += 1;
                    }
                    if let Some(k) = self.reservation_of.remove(&reservation.0) {
                        let job = self.job_reservations[k].job;
                        self.job_reservations[k].ended = Some((self.now, why));
                        // Later stages go to the plan queue (its default); the engine has moved
                        // the job's current application there.
                        self.queue_override[job] = None;
                    }
                }
                Command::AppAccepted { .. }
                | Command::ReservationAdmitted { .. }
                | Command::ReservationRejected { .. } => {}
            }
        }
        self.start_launches(launches);
    }

    fn start_launches(&mut self, mut launches: Vec<(ContainerId, AppId, u32, NodeId, Resources)>) {
        // Group by (app, request), keeping the engine's order within a group.
        launches.sort_by_key(|l| (l.1.0, l.2));
        let mut at = 0;
        while at < launches.len() {
            let key = (launches[at].1, launches[at].2);
            let end =
                launches[at..].iter().position(|l| (l.1, l.2) != key).map_or(launches.len(), |p| at + p);
            self.start_group(&launches[at..end]);
            at = end;
        }
    }

    /// Starts the containers of one request launched together and schedules their ends.
    fn start_group(&mut self, group: &[(ContainerId, AppId, u32, NodeId, Resources)]) {
        let Some(&(_, app, _, _, _)) = group.first() else { return };
        let Some(&job) = self.app_job.get(&app.0) else { return };
        let stage = &self.jobs[job].stages[self.state[job].stage.min(self.jobs[job].stages.len() - 1)];
        let fast = self.preferences_hold(stage, group);
        let duration = if fast { stage.duration_ms } else { stage.slow_duration_ms };
        if !fast {
            self.state[job].ran_slow = true;
        }
        if self.state[job].started.is_none() {
            self.state[job].started = Some(self.now);
            self.not_started -= 1;
        }
        let unplaced = self.state[job].unplaced.saturating_sub(group.len() as u32);
        self.set_unplaced(job, unplaced);
        for &(container, _, _, node, resources) in group {
            self.launches += 1;
            self.running.insert(container.0, Running { job, node: node.0, resources, stopping: false });
            self.allocated[0] += resources.cpu_millis;
            self.allocated[1] += resources.memory_bytes;
            self.allocated[2] += u64::from(resources.gpus);
            self.event(Event::ContainerStarted { container });
            self.push(self.now.saturating_add(duration), Due::End(container.0));
        }
    }

    /// Whether the stage runs fast where `group` landed: every node has the preferred labels,
    /// and a stage that prefers one rack got one rack.
    fn preferences_hold(
        &self,
        stage: &Stage,
        group: &[(ContainerId, AppId, u32, NodeId, Resources)],
    ) -> bool {
        let st = self.engine.state();
        let labels_hold = group.iter().all(|&(_, _, _, node, _)| {
            let Some(n) = st.nodes().get(node.0 as usize) else { return false };
            let name = st.str(n.name);
            let Some(spec) = self.nodes.iter().find(|s| s.name == name) else { return false };
            stage
                .preferred
                .iter()
                .all(|(k, v)| spec.labels.iter().any(|(lk, lv)| lk == k && value_matches(v, lv)))
        });
        let rack_holds = stage.rack_affinity != RackAffinity::Preferred || {
            let racks: Vec<&str> = group
                .iter()
                .map(|&(_, _, _, node, _)| {
                    self.rack_of.get(self.node_name(node.0)).map_or("", String::as_str)
                })
                .collect();
            racks.windows(2).all(|w| w[0] == w[1]) && racks.first().is_some_and(|r| !r.is_empty())
        };
        labels_hold && rack_holds
    }

    /// A container of `job` ended before its time: unless the job is over, the engine places it
    /// again (a retry, a gang restart, a lost node's rerun).
    fn rerun(&mut self, job: usize) {
        if self.state[job].ended.is_none() {
            let n = self.state[job].unplaced + 1;
            self.set_unplaced(job, n);
        }
    }

    fn release(&mut self, container: u64) -> Option<Running> {
        let r = self.running.remove(&container)?;
        self.allocated[0] -= r.resources.cpu_millis;
        self.allocated[1] -= r.resources.memory_bytes;
        self.allocated[2] -= u64::from(r.resources.gpus);
        Some(r)
    }

    /// A container ended with `code`; true if a cycle should follow.
    fn container_ended(&mut self, container: u64, code: i32) -> bool {
        let Some(r) = self.release(container) else {
            return false; // ended, killed or lost earlier
        };
        if code != 0 && !r.stopping {
            self.rerun(r.job);
        }
        self.event(Event::container_exited(ContainerId(container), code));
        true
    }

    fn app_state(&mut self, app: AppId, state: u32) {
        let Some(&job) = self.app_job.get(&app.0) else { return };
        if self.state[job].ended.is_some() {
            return;
        }
        match state {
            GANTRY_APP_FINISHED => {
                self.state[job].stage += 1;
                if self.state[job].stage < self.jobs[job].stages.len() {
                    self.submit_stage(job);
                } else {
                    self.end_job(job, JobOutcome::Completed);
                }
            }
            GANTRY_APP_FAILED | GANTRY_APP_KILLED => {
                self.end_job(job, JobOutcome::Failed);
            }
            GANTRY_APP_REJECTED => {
                self.end_job(job, JobOutcome::Rejected);
            }
            _ => {}
        }
    }

    fn finish(mut self) -> SimResult {
        let end = self.now;
        self.sample();
        let queues = self.queues.finish(self.engine.state(), self.engine.stats());
        let registered_ms = self
            .node_time
            .values()
            .map(|&(since, total)| total + since.map_or(0, |s| end.saturating_sub(s)))
            .sum::<u64>();
        let utilisation = self.area.map(|a| if end == 0 { 0.0 } else { a / end as f64 });
        let ratio = |num: &[f64; 3], den: &[f64; 3]| {
            [0, 1, 2].map(|k| if den[k] > 0.0 { num[k] / den[k] } else { 0.0 })
        };
        let elastic = self.elastic.take().map(|mut a| {
            a.finish(end);
            a.stats.utilisation_registered = ratio(&self.allocated_area, &self.registered_area);
            a.stats.utilisation_billed = ratio(&self.allocated_area, &self.billed_area);
            a.stats
        });
        let billed_ms = elastic.as_ref().map_or(registered_ms, |e| e.billed_node_ms);
        let hours = billed_ms as f64 / 3_600_000.0;
        let jobs = self
            .jobs
            .iter()
            .zip(&self.state)
            .map(|(j, s)| JobRecord {
                name: j.name.clone(),
                class: j.class.clone(),
                containers: j.stages.iter().map(|st| st.count).max().unwrap_or(0),
                submit_ms: j.submit_ms,
                start_ms: s.started,
                end_ms: s.ended.map(|(t, _)| t),
                outcome: s.ended.map_or(JobOutcome::Unfinished, |(_, o)| o),
                ran_slow: s.ran_slow,
                preempted: s.preempted,
            })
            .collect();
        SimResult {
            jobs,
            samples: self.samples,
            end_ms: end,
            utilisation,
            node_hours: hours,
            stalled_at_ms: self.stalled_at_ms,
            elastic,
            preemptions: self.preemptions,
            cycles: self.cycles,
            launches: self.launches,
            job_reservations: self.job_reservations,
            replans: self.replans,
            queues,
            plan: self.plan,
            plugins: self.engine.policy_status(),
        }
    }
}

fn add_capacity(total: &mut [u64; 3], r: &Resources, add: bool) {
    let r = [r.cpu_millis, r.memory_bytes, u64::from(r.gpus)];
    for k in 0..3 {
        total[k] = if add { total[k] + r[k] } else { total[k].saturating_sub(r[k]) };
    }
}

/// Whether a node label value satisfies a wanted value (`A|B` accepts either).
pub(crate) fn value_matches(wanted: &str, have: &str) -> bool {
    wanted.split('|').any(|w| w == have)
}

/// The engine request for a stage submitted at `now`.
fn request_of(stage: &Stage, job: &Job, now: u64) -> RequestSpec {
    RequestSpec {
        resources: stage.resources,
        count: stage.count,
        gang: stage.gang,
        priority: 0,
        selector: stage.selector.clone(),
        preferred: stage.preferred.clone(),
        rack_affinity: stage.rack_affinity,
        master: false,
        expected_ms: stage.duration_ms,
        slow_ms: if stage.slow_duration_ms == stage.duration_ms { 0 } else { stage.slow_duration_ms },
        deadline_ms: job.time_limit_ms.map_or(0, |l| job.submit_ms.saturating_add(l).max(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_engine::EngineConfig;

    const S: u64 = 1_000;

    fn node(name: &str, rack: &str, cores: u64, labels: &[(&str, &str)]) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            rack: rack.into(),
            labels: labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            capacity: Resources::new(cores * 1000, cores << 30, 0),
            gpu_list: Vec::new(),
        }
    }

    fn stage(count: u32, gang: bool, fast: u64, slow: u64) -> Stage {
        Stage {
            resources: Resources::new(1000, 1 << 30, 0),
            count,
            gang,
            selector: Vec::new(),
            preferred: Vec::new(),
            rack_affinity: RackAffinity::None,
            duration_ms: fast,
            slow_duration_ms: slow,
        }
    }

    fn job(name: &str, at: u64, stages: Vec<Stage>) -> Job {
        Job {
            name: name.into(),
            submit_ms: at,
            queue: String::new(),
            user: "u".into(),
            class: "test".into(),
            priority: 0,
            stages,
            time_limit_ms: None,
        }
    }

    fn engine() -> Engine {
        Engine::builtin(EngineConfig::default()).expect("engine")
    }

    #[test]
    fn jobs_run_for_their_durations_and_stages_follow_each_other() {
        let nodes = [node("a", "r1", 2, &[]), node("b", "r1", 2, &[])];
        let jobs = [
            job("one", 0, vec![stage(2, false, 10 * S, 10 * S)]),
            job("two-stages", 5 * S, vec![stage(1, false, 3 * S, 3 * S), stage(2, true, 4 * S, 4 * S)]),
        ];
        let r = run(&mut engine(), &nodes, &jobs, &SimOptions::default()).expect("run");
        let one = &r.jobs[0];
        assert_eq!((one.start_ms, one.end_ms, one.outcome), (Some(0), Some(10 * S), JobOutcome::Completed));
        let two = &r.jobs[1];
        assert_eq!(two.start_ms, Some(5 * S), "room for it on arrival");
        assert_eq!(two.end_ms, Some(12 * S), "3 s, then the second stage's 4 s");
        assert_eq!(r.launches, 5);
        assert_eq!(r.end_ms, 12 * S);
        // CPU: 2 of 4 cores for 10 s, 1 core 5..8, 2 cores 8..12 → (20 + 3 + 8) / (4 · 12).
        assert!((r.utilisation[0] - 31.0 / 48.0).abs() < 1e-9, "{:?}", r.utilisation);
    }

    #[test]
    fn a_sample_shows_the_end_of_its_instant() {
        // At 10 s the first job's containers end and the waiting job's start: the sample then
        // sees the node full, not the gap between the two.
        let nodes = [node("a", "r1", 2, &[])];
        let jobs = [
            job("first", 0, vec![stage(2, false, 10 * S, 10 * S)]),
            job("next", 0, vec![stage(2, false, 5 * S, 5 * S)]),
        ];
        let options = SimOptions { sample_ms: 5 * S, ..SimOptions::default() };
        let r = run(&mut engine(), &nodes, &jobs, &options).expect("run");
        let cpu: Vec<(u64, f64)> = r.samples.iter().map(|s| (s.t_ms / S, s.cpu)).collect();
        assert_eq!(&cpu[..3], &[(0, 1.0), (5, 1.0), (10, 1.0)], "{cpu:?}");
        assert_eq!(r.jobs[1].start_ms, Some(10 * S));
    }

    #[test]
    fn a_job_that_waits_for_room_waits_and_preferences_decide_the_speed() {
        let nodes = [node("gpu", "r0", 2, &[("gpu", "true")]), node("plain", "r1", 2, &[])];
        let mut fast = stage(1, false, 10 * S, 30 * S);
        fast.preferred = vec![("gpu".into(), "true".into())];
        let mut rack = stage(2, true, 5 * S, 20 * S);
        rack.rack_affinity = RackAffinity::Preferred;
        rack.resources = Resources::new(2000, 1 << 30, 0);
        let jobs = [
            job("filler", 0, vec![stage(2, false, 50 * S, 50 * S)]),
            job("pref", S, vec![fast]),
            job("spread", 2 * S, vec![rack]),
        ];
        let r = run(&mut engine(), &nodes, &jobs, &SimOptions::default()).expect("run");
        // The built-in first fit puts the filler's two containers on `gpu`; `pref` lands on
        // `plain` and runs slow.
        assert!(r.jobs[1].ran_slow);
        assert_eq!(r.jobs[1].completion_ms(), Some(30 * S));
        // The gang of two whole nodes waits for the filler, then spans both racks: slow.
        assert_eq!(r.jobs[2].start_ms, Some(50 * S));
        assert!(r.jobs[2].ran_slow);
        assert_eq!(r.jobs[2].end_ms, Some(70 * S));
    }

    #[test]
    fn time_limits_kill_and_lost_nodes_rerun_their_work() {
        let nodes = [node("a", "r1", 1, &[]), node("b", "r1", 1, &[])];
        let mut limited = job("limited", 0, vec![stage(1, false, 100 * S, 100 * S)]);
        limited.time_limit_ms = Some(20 * S);
        let jobs = [limited, job("survivor", 0, vec![stage(1, false, 30 * S, 30 * S)])];
        let options = SimOptions {
            failures: vec![NodeFailure { node: "b".into(), at_ms: 10 * S, back_at_ms: None }],
            ..SimOptions::default()
        };
        let r = run(&mut engine(), &nodes, &jobs, &options).expect("run");
        assert_eq!((r.jobs[0].end_ms, r.jobs[0].outcome), (Some(20 * S), JobOutcome::Killed));
        // `survivor` ran on b, which failed at 10 s; it reruns on a once `limited` is gone.
        assert_eq!(r.jobs[1].outcome, JobOutcome::Completed);
        assert_eq!(r.jobs[1].end_ms, Some(50 * S));
        assert!((r.node_hours - (50.0 + 10.0) / 3600.0).abs() < 1e-9, "{}", r.node_hours);
    }

    #[test]
    fn the_same_inputs_give_the_same_result() {
        let nodes: Vec<NodeSpec> =
            (0..6).map(|i| node(&format!("n{i}"), &format!("r{}", i % 2), 4, &[])).collect();
        let jobs: Vec<Job> = (0..200u64)
            .map(|i| {
                job(
                    &format!("j{i}"),
                    i * 300,
                    vec![stage(1 + (i % 4) as u32, i % 3 == 0, (5 + i % 17) * S, (9 + i % 17) * S)],
                )
            })
            .collect();
        let a = run(&mut engine(), &nodes, &jobs, &SimOptions::default()).expect("run");
        let b = run(&mut engine(), &nodes, &jobs, &SimOptions::default()).expect("run");
        assert_eq!(a, b);
        assert!(a.jobs.iter().all(|j| j.outcome == JobOutcome::Completed));
    }
}
