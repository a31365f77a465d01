//! What a run produces: per job a [`JobRecord`], the time series ([`Sample`], [`PlanSample`])
//! and the run's totals ([`SimResult`]) — plain data that `report` writes and the experiments
//! read, apart from the loop that fills it in (`measure.rs` builds it at the end of a run).

use crate::deadlines::JobReservationRecord;
use crate::elastic::ElasticStats;
use crate::queues::QueueStats;

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
    /// When the run stalled (see [the loop's documentation](super)), if it did: from then on
    /// nothing was due; the run stopped [`STALL_AFTER_MS`](super::STALL_AFTER_MS) later with the
    /// pending jobs unfinished.
    pub stalled_at_ms: Option<u64>,
    /// The autoscaler's figures, on an elastic cluster.
    pub elastic: Option<ElasticStats>,
    /// Containers preempted by a policy.
    pub preemptions: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Containers launched.
    pub launches: u64,
    /// What became of each of [`SimOptions::job_reservations`](super::SimOptions::job_reservations),
    /// in the same order.
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
    /// What the scheduler around the engine did: restarts, store jobs, nodes lost, fencing.
    pub daemon: DaemonFigures,
}

/// What the scheduler's controller, its store and the agents did in a run (over every
/// scheduler process, with restarts).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DaemonFigures {
    /// Scheduler restarts.
    pub restarts: u64,
    /// Store jobs (each one transaction in the daemon).
    pub store_jobs: u64,
    /// Store jobs that failed.
    pub failed_commits: u64,
    /// Nodes the scheduler declared lost (silent for the node timeout).
    pub nodes_lost: u64,
    /// Launches that had no agent stream to go to.
    pub launches_undeliverable: u64,
    /// Containers an agent ran that the scheduler did not want, killed when it registered.
    pub reconcile_kills: u64,
    /// Containers the scheduler expected on an agent that registered without them.
    pub reconcile_lost: u64,
    /// Containers agents killed themselves after hearing nothing for their fencing timeout.
    pub fenced: u64,
}

impl DaemonFigures {
    /// Adds one scheduler process's counters.
    pub(super) fn add(&mut self, s: &gantry_controller::ControllerStats) {
        self.nodes_lost += s.nodes_lost;
        self.launches_undeliverable += s.launches_undeliverable;
        self.reconcile_kills += s.reconcile_kills;
        self.reconcile_lost += s.reconcile_lost;
    }
}
