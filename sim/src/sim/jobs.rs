//! The jobs' side of a run: each job's progress through its stages (one application per stage,
//! submitted when the previous one finishes), the containers it still has to start, its time
//! limit, and its end — what a user's client would see and do, as opposed to what the agents do
//! with containers (`agents.rs`).

use super::events::Due;
use super::scheduler::Asked;
use super::{JobOutcome, Sim};
use crate::trace::{Job, Stage};
use gantry_controller::{Input, LaunchTemplate, SubmitError};
use gantry_engine::{AppId, AppSpec, RequestSpec};
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
    /// The queue its current stage was submitted to.
    queue: String,
    /// Requests of its client the scheduler could not store (submissions, kills), each sent
    /// again a cycle later up to [`CLIENT_RETRIES`].
    unstored: u32,
}

/// How many times a simulated client sends a request again that the scheduler could not store
/// before it gives up (a submission then ends the job as rejected): a store that fails every
/// commit would otherwise keep the run going for ever.
pub(super) const CLIENT_RETRIES: u32 = 100;

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
            self.kill_app(i);
        }
    }

    /// Whether job `i`'s client sends an unstored request again (it has retries left).
    pub(super) fn retry_unstored(&mut self, i: usize) -> bool {
        self.state[i].unstored += 1;
        self.state[i].unstored <= CLIENT_RETRIES
    }

    /// Asks the scheduler to kill job `i`'s current application (asked again while the store
    /// cannot record the kill).
    pub(super) fn kill_app(&mut self, i: usize) {
        if let Some(app) = self.state[i].app {
            let reply = self.sched.ask(Asked::Kill(i));
            self.send(Input::Kill { reply, app });
        }
    }

    /// Submits job `i`'s current stage as an application (at its arrival, after each finished
    /// stage, and again when the scheduler could not store it); the answer comes to
    /// [`Sim::submitted`].
    pub(super) fn submit_stage(&mut self, i: usize) {
        if self.state[i].ended.is_some() {
            return;
        }
        let job = &self.jobs[i];
        let s = self.state[i].stage;
        let Some(stage) = job.stages.get(s) else { return };
        let queue = match &self.queue_override[i] {
            Some(q) => q.clone(),
            None if job.queue.is_empty() => "root.default".to_owned(),
            None => job.queue.clone(),
        };
        let spec = AppSpec {
            name: if job.stages.len() > 1 { format!("{}#{s}", job.name) } else { job.name.clone() },
            queue: queue.clone(),
            user: job.user.clone(),
            priority: job.priority,
            max_attempts: 0,
            requests: vec![request_of(stage, job, self.now)],
        };
        // The simulated containers run nothing; the command names the job for the records.
        let templates = vec![LaunchTemplate { argv: vec![job.name.clone()], ..Default::default() }];
        self.state[i].queue = queue;
        let reply = self.sched.ask(Asked::Submit(i));
        self.send(Input::Submit { reply, spec, id: None, caller: None, templates });
    }

    /// The scheduler answered job `i`'s submission: accepted (and stored), refused, or not
    /// stored (the client submits again a cycle later).
    pub(super) fn submitted(&mut self, i: usize, result: Result<AppId, SubmitError>) {
        match result {
            Ok(app) => {
                self.app_job.insert(app.0, i);
                if self.state[i].ended.is_some() {
                    // Its time limit passed while the submission was on its way.
                    self.state[i].app = Some(app);
                    self.kill_app(i);
                    return;
                }
                if self.state[i].app.is_none() {
                    self.not_started += 1;
                }
                self.state[i].app = Some(app);
                let queue = std::mem::take(&mut self.state[i].queue);
                self.queues.submitted(&queue, self.now);
                let count = self.jobs[i].stages.get(self.state[i].stage).map_or(0, |s| s.count);
                self.set_unplaced(i, count);
                // An application the engine ended as it took it (its state change came before
                // this answer named it).
                if let Some(state) =
                    self.ctl.engine().app_state(app).filter(|&s| {
                        s != GANTRY_APP_ACCEPTED && s != GANTRY_APP_RUNNING && s != GANTRY_APP_NEW
                    })
                {
                    self.app_state(app, state);
                }
            }
            Err(SubmitError::Store(e)) => {
                if self.retry_unstored(i) {
                    tracing::debug!(job = %self.jobs[i].name, error = %e, "submission not stored; sending it again");
                    self.push(self.now.saturating_add(self.options.tick_ms), Due::Arrival(i));
                } else {
                    tracing::warn!(job = %self.jobs[i].name, error = %e, retries = CLIENT_RETRIES, "submission never stored; the job is given up");
                    self.end_job(i, JobOutcome::Rejected);
                }
            }
            Err(SubmitError::Engine(e)) => {
                // Often the configuration's fault (a queue it lacks): say so, but not per job.
                self.refused_submissions += 1;
                if self.refused_submissions.is_power_of_two() {
                    tracing::warn!(job = %self.jobs[i].name, error = %e, count = self.refused_submissions, "submission refused");
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
