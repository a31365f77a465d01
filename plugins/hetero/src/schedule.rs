//! The policies: which job goes next, whether it starts now, waits for better resources, or
//! holds up the jobs behind it.

use crate::cluster::{Chooser, Cluster, Kind};
use crate::config::{HeteroConfig, Placement, Policy};
use crate::job::Job;
use gantry_sdk::{Decisions, View};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// WAIT reason: the job waits for preferred resources expected to free soon (`wait_for_better`).
pub const WAIT_FOR_PREFERRED: u32 = 1;
/// WAIT reason: no placement available now finishes before the job's deadline (`skip_hopeless`).
pub const WAIT_HOPELESS: u32 = 2;

/// Most look-aheads (`Cluster::earliest`) per call; each costs up to `lookahead_steps` searches.
const LOOKAHEADS_PER_CALL: usize = 64;

/// What to do with a job now.
#[derive(Debug)]
enum Verdict {
    /// Start on these nodes; expected to end then (if estimated).
    Start { nodes: Vec<u32>, end_ms: Option<u64> },
    /// Do not start now; hold these nodes from this time on, if given.
    Wait { reason: u32, hold: Option<(u64, Vec<u32>)> },
    /// Nothing fits now.
    Blocked,
}

/// One call's scheduler: the configuration, the cluster picture and the decisions.
pub struct Scheduler<'a, 'v> {
    cfg: &'a HeteroConfig,
    view: &'a View<'v>,
    cluster: Cluster,
    out: &'a mut Decisions,
    lookaheads: usize,
}

impl<'a, 'v> Scheduler<'a, 'v> {
    /// A scheduler for one call.
    pub fn new(cfg: &'a HeteroConfig, view: &'a View<'v>, cluster: Cluster, out: &'a mut Decisions) -> Self {
        Scheduler { cfg, view, cluster, out, lookaheads: 0 }
    }

    fn chooser(&self) -> Chooser {
        match self.cfg.policy {
            Policy::Fcfs => Chooser::FirstFit,
            Policy::FcfsRandom => Chooser::Random,
            Policy::FcfsHetero | Policy::SjfHetero | Policy::GreedyUtility => Chooser::Aware {
                protect: self.cfg.switches.protect_preferred,
                no_mixing: self.cfg.switches.no_mixing,
            },
        }
    }

    /// Runs the configured policy over `jobs` (in the engine's order).
    pub fn run(mut self, mut jobs: Vec<Job>) {
        for job in &mut jobs {
            if job.shape.rack_required && !job.gang {
                job.placed_rack = self.placed_rack(job.request);
            }
        }
        match self.cfg.policy {
            Policy::Fcfs | Policy::FcfsRandom | Policy::FcfsHetero => self.in_order(&jobs),
            Policy::SjfHetero => {
                let by_machine = self.cfg.switches.sjf_machine_seconds;
                // Unestimated jobs go last, in FCFS order.
                jobs.sort_by_key(|j| {
                    let key =
                        j.fast_ms.map(|d| if by_machine { d.saturating_mul(u64::from(j.want)) } else { d });
                    (key.is_none(), key, j.position)
                });
                self.in_order(&jobs);
            }
            Policy::GreedyUtility => self.greedy(&jobs),
        }
    }

    /// The rack a request's running containers are on.
    fn placed_rack(&self, request: u32) -> Option<u32> {
        self.view.containers.iter().find(|c| c.request == request).and_then(|c| self.cluster.rack_of(c.node))
    }

    /// Walks the jobs in order. Strict policies stop at the first job that does not start unless
    /// backfilling; the others skip it. With `backfill`, the first such job holds the nodes it
    /// will need at the earliest time it fits.
    fn in_order(&mut self, jobs: &[Job]) {
        let strict = self.cfg.policy.strict_order();
        let backfill = self.cfg.switches.backfill;
        let mut reserved = false;
        for job in jobs {
            match self.verdict(job) {
                Verdict::Start { nodes, end_ms } => {
                    self.start(job, &nodes, end_ms);
                    continue;
                }
                Verdict::Wait { reason, hold } => {
                    self.out.wait(job.request, reason);
                    if reason == WAIT_HOPELESS {
                        // It cannot finish in time anywhere, so it holds up nobody.
                        continue;
                    }
                    if let Some((from, nodes)) = hold {
                        self.cluster.hold(job, &nodes, from);
                        reserved = true;
                    }
                }
                Verdict::Blocked => {
                    if backfill && !reserved {
                        reserved = true;
                        self.reserve(job);
                    }
                }
            }
            if strict && !backfill {
                return;
            }
        }
    }

    /// Holds the nodes a blocked job needs at the earliest time it fits, if that can be told.
    fn reserve(&mut self, job: &Job) {
        let kind = if self.cfg.placement == Placement::Hard { Kind::Fast } else { Kind::Any };
        if let Some((from, nodes)) = self.earliest(job, kind) {
            self.cluster.hold(job, &nodes, from);
        }
    }

    /// Greedy utility: start the job that earns the most if started now, again and again.
    /// Utilities only fall as nodes fill, so a job whose fresh value still beats every other
    /// job's last value is the true maximum (lazy evaluation: one re-check per pick, not a full
    /// rescan).
    fn greedy(&mut self, jobs: &[Job]) {
        let now = self.view.now_ms;
        let utility = |job: &Job, end_ms: Option<u64>| -> i64 {
            let end = end_ms.unwrap_or(now.saturating_add(job.horizon_end_ms.saturating_sub(job.submit_ms)));
            job.horizon_end_ms as i64 - end as i64
        };
        let mut heap: BinaryHeap<(i64, Reverse<usize>)> = BinaryHeap::new();
        for (i, job) in jobs.iter().enumerate() {
            match self.verdict(job) {
                Verdict::Start { end_ms, .. } => heap.push((utility(job, end_ms), Reverse(i))),
                Verdict::Wait { reason, hold } => {
                    self.out.wait(job.request, reason);
                    if let Some((from, nodes)) = hold {
                        self.cluster.hold(job, &nodes, from);
                    }
                }
                Verdict::Blocked => {}
            }
        }
        while let Some((_, Reverse(i))) = heap.pop() {
            let job = &jobs[i];
            match self.verdict(job) {
                Verdict::Start { nodes, end_ms } => {
                    let u = utility(job, end_ms);
                    if heap.peek().is_none_or(|&(next, _)| u >= next) {
                        self.start(job, &nodes, end_ms);
                    } else {
                        heap.push((u, Reverse(i)));
                    }
                }
                Verdict::Wait { reason, hold } => {
                    self.out.wait(job.request, reason);
                    if let Some((from, nodes)) = hold {
                        self.cluster.hold(job, &nodes, from);
                    }
                }
                Verdict::Blocked => {}
            }
        }
    }

    fn start(&mut self, job: &Job, nodes: &[u32], end_ms: Option<u64>) {
        self.cluster.take(self.view, job, nodes, end_ms);
        for &n in nodes {
            self.out.place(job.request, n);
        }
    }

    fn earliest(&mut self, job: &Job, kind: Kind) -> Option<(u64, Vec<u32>)> {
        if self.lookaheads >= LOOKAHEADS_PER_CALL {
            return None;
        }
        self.lookaheads += 1;
        let chooser = self.chooser();
        self.cluster.earliest(self.view, job, kind, chooser, self.cfg.lookahead_steps)
    }

    /// A placement of `kind` available now, with its expected end.
    fn find_now(&mut self, job: &Job, kind: Kind) -> Option<(Vec<u32>, Option<u64>)> {
        let now = self.view.now_ms;
        let chooser = self.chooser();
        // Holds bind unless the job is known to end before they start; which run time applies
        // depends on where it lands, so try with the faster estimate, then confirm.
        let optimistic =
            job.run_ms(kind == Kind::Fast || !job.shape.has_preferences()).map(|d| now.saturating_add(d));
        let nodes = self.cluster.find(self.view, job, kind, chooser, optimistic)?;
        let fast = self.cluster.runs_fast(self.view, &job.shape, &nodes);
        let end_ms = job.run_ms(fast).map(|d| now.saturating_add(d));
        if end_ms != optimistic {
            // Landed slow: search again with the slow end, which may bind more holds.
            let nodes = self.cluster.find(self.view, job, kind, chooser, end_ms)?;
            return Some((nodes, end_ms));
        }
        Some((nodes, end_ms))
    }

    fn hopeless(&self, job: &Job, end_ms: Option<u64>) -> bool {
        self.cfg.switches.skip_hopeless && matches!((end_ms, job.deadline_ms), (Some(e), Some(d)) if e > d)
    }

    /// Decides one job against the current picture.
    fn verdict(&mut self, job: &Job) -> Verdict {
        if !self.cluster.queue_room(self.view, job, if job.gang { job.want } else { 1 }) {
            return Verdict::Blocked;
        }
        let placement = if job.shape.has_preferences() { self.cfg.placement } else { Placement::None };
        let fast = match placement {
            Placement::None => None,
            Placement::Soft | Placement::Hard => self.find_now(job, Kind::Fast),
        };
        if let Some((nodes, end_ms)) = fast {
            return self.start_unless_hopeless(job, nodes, end_ms);
        }
        if placement == Placement::Hard {
            return Verdict::Blocked;
        }
        let Some((nodes, end_ms)) = self.find_now(job, Kind::Any) else {
            return Verdict::Blocked;
        };
        let may_wait = placement == Placement::Soft && !self.cluster.runs_fast(self.view, &job.shape, &nodes);
        let waiting_pays = may_wait && self.cfg.switches.wait_for_better;
        let hopeless = self.hopeless(job, end_ms);
        if (waiting_pays || (may_wait && hopeless))
            && let (Some(slow_end), Some(fast_ms)) = (end_ms, job.fast_ms)
            && let Some((from, fast_nodes)) = self.earliest(job, Kind::Fast)
        {
            let fast_end = from.saturating_add(fast_ms);
            let in_time = job.deadline_ms.is_none_or(|d| fast_end <= d);
            if fast_end < slow_end && in_time {
                return Verdict::Wait { reason: WAIT_FOR_PREFERRED, hold: Some((from, fast_nodes)) };
            }
        }
        self.start_unless_hopeless(job, nodes, end_ms)
    }

    fn start_unless_hopeless(&self, job: &Job, mut nodes: Vec<u32>, end_ms: Option<u64>) -> Verdict {
        if self.hopeless(job, end_ms) {
            return Verdict::Wait { reason: WAIT_HOPELESS, hold: None };
        }
        // A gang's queue room was checked whole; a plain request places what its queue allows.
        while !job.gang && nodes.len() > 1 && !self.cluster.queue_room(self.view, job, nodes.len() as u32) {
            nodes.pop();
        }
        Verdict::Start { nodes, end_ms }
    }
}
