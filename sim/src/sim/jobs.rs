//! The jobs' side of a run: each job's progress through its stages (one application per stage,
//! submitted when the previous one finishes), the containers it still has to start, its time
//! limit, and its end — what a user's client would see and do, as opposed to what the agents do
//! with containers (`agents.rs`).

use super::{JobOutcome, Sim};
use crate::trace::{Job, Stage};
use gantry_engine::{AppId, AppSpec, Command, Event, RequestSpec};
use gantry_sdk::abi::*;

/// Where one job stands.
#[derive(Default)]
pub(super) struct JobState {
    /// Its current stage (index into the job's stages).
    pub(super) stage: usize,
    /// Containers of the current stage not running yet (to start, or to start again).
    pub(super) unplaced: u32,
    /// The application of its current stage, once accepted.
    pub(super) app: Option<AppId>,
    /// Its first container started.
    pub(super) started: Option<u64>,
    /// When and how it ended.
    pub(super) ended: Option<(u64, JobOutcome)>,
    /// Whether any stage ran where its preferences did not hold.
    pub(super) ran_slow: bool,
    /// Its containers preempted by a policy.
    pub(super) preempted: u32,
}

impl Sim<'_> {
    /// Sets a job's count of containers to start, keeping [`Sim::pending_jobs`] true.
    pub(super) fn set_unplaced(&mut self, job: usize, n: u32) {
        let before = self.state[job].unplaced > 0;
        self.state[job].unplaced = n;
        match (before, n > 0) {
            (false, true) => self.pending_jobs += 1,
            (true, false) => self.pending_jobs -= 1,
            _ => {}
        }
    }

    /// Records a job's end (the first one counts).
    pub(super) fn end_job(&mut self, job: usize, outcome: JobOutcome) {
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

    /// Job `i`'s time limit: unless it has ended, it is killed now.
    pub(super) fn time_limit(&mut self, i: usize) {
        if self.state[i].ended.is_none() {
            self.end_job(i, JobOutcome::Killed);
            if let Some(app) = self.state[i].app {
                self.event(Event::AppKillRequested { app });
            }
        }
    }

    /// Submits job `i`'s current stage as an application (at its arrival, and after each
    /// finished stage).
    pub(super) fn submit_stage(&mut self, i: usize) {
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

    /// A container of `job` ended before its time: unless the job is over, the engine places it
    /// again (a retry, a gang restart, a lost node's rerun).
    pub(super) fn rerun(&mut self, job: usize) {
        if self.state[job].ended.is_none() {
            let n = self.state[job].unplaced + 1;
            self.set_unplaced(job, n);
        }
    }

    /// An application changed state: a finished stage submits the next one (or completes the
    /// job); a failed, killed or rejected one ends the job.
    pub(super) fn app_state(&mut self, app: AppId, state: u32) {
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
