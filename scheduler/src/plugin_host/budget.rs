//! The budgeted call path: a plugin's worker thread, and the owned [`Snapshot`] of the view it
//! reads (see the module documentation of `plugin_host`).

use super::instance::Instance;
use gantry_engine::{PolicyError, ViewChanges, hook_name};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, PlanView, View};
use std::sync::mpsc;
use std::time::Duration;

/// An owned copy of a [`View`]: what a budgeted call reads, so that a call abandoned past its
/// budget never reads memory the engine frees or changes. Its buffers are reused from call to
/// call, so a copy allocates only when the cluster grew. When it holds the previous view the
/// engine built for this plugin, the arrays the engine tracks ([`ViewChanges`]: the reservation
/// plan's, the largest of a big plan) are copied only from where they changed: an admission
/// copies the new reservation, not the plan.
#[derive(Debug, Default)]
struct Snapshot {
    /// The serial of the view it holds ([`ViewChanges::serial`]); 0 when unknown.
    serial: u64,
    hook: u32,
    now_ms: u64,
    cycle: u64,
    seed: u64,
    cluster: GantryResources,
    strings: Vec<u8>,
    labels: Vec<GantryLabel>,
    nodes: Vec<GantryNode>,
    gpus: Vec<GantryGpu>,
    queues: Vec<GantryQueue>,
    apps: Vec<GantryApp>,
    requests: Vec<GantryRequest>,
    containers: Vec<GantryContainer>,
    reservations: Vec<GantryReservation>,
    pending: Vec<u32>,
    node_usage: Vec<GantryNodeUsage>,
    /// The plan's scalars (cause, subject, queue, capacity, step, horizon); its arrays below.
    plan: PlanScalars,
    details: Vec<GantryReservationDetail>,
    rdl_nodes: Vec<GantryRdlNode>,
    allocations: Vec<GantryAllocation>,
}

/// The scalar fields of a [`PlanView`].
#[derive(Debug, Clone, Copy, Default)]
struct PlanScalars {
    cause: u32,
    subject: u32,
    queue: u32,
    capacity: GantryResources,
    step_ms: u64,
    horizon_ms: u64,
}

/// Makes `to` an exact copy of `from`, reusing its allocation.
fn copy_into<T: Copy>(to: &mut Vec<T>, from: &[T]) {
    to.clear();
    to.extend_from_slice(from);
}

/// Makes `to` an exact copy of `from`, given that `to` is a copy of an earlier version of it
/// whose first `unchanged` elements are still those of `from`.
fn copy_tail<T: Copy>(to: &mut Vec<T>, from: &[T], unchanged: usize) {
    let keep = unchanged.min(to.len()).min(from.len());
    to.truncate(keep);
    to.extend_from_slice(&from[keep..]);
}

impl Snapshot {
    /// Makes this an exact copy of `view`; `changes` (what the engine said `view` shares with
    /// the previous view it built for this plugin) lets it copy less when this holds that view.
    fn copy_from(&mut self, view: &View<'_>, changes: Option<&ViewChanges>) {
        // Only a copy of exactly the previous view may be brought up to date.
        let since = changes.filter(|c| c.previous != 0 && c.previous == self.serial);
        self.serial = changes.map_or(0, |c| c.serial);
        let View { hook, now_ms, cycle, seed, cluster, .. } = *view;
        (self.hook, self.now_ms, self.cycle, self.seed, self.cluster) = (hook, now_ms, cycle, seed, cluster);
        copy_into(&mut self.strings, view.strings);
        copy_into(&mut self.labels, view.labels);
        copy_into(&mut self.nodes, view.nodes);
        copy_into(&mut self.gpus, view.gpus);
        copy_into(&mut self.queues, view.queues);
        copy_into(&mut self.apps, view.apps);
        copy_into(&mut self.requests, view.requests);
        copy_into(&mut self.containers, view.containers);
        let from = |f: fn(&ViewChanges) -> usize| since.map_or(0, f);
        copy_tail(&mut self.reservations, view.reservations, from(|c| c.reservations_from));
        copy_into(&mut self.pending, view.pending);
        copy_into(&mut self.node_usage, view.node_usage);
        let PlanView {
            cause,
            subject,
            queue,
            capacity,
            step_ms,
            horizon_ms,
            details,
            rdl_nodes,
            allocations,
        } = view.plan;
        self.plan = PlanScalars { cause, subject, queue, capacity, step_ms, horizon_ms };
        copy_tail(&mut self.details, details, from(|c| c.details_from));
        copy_tail(&mut self.rdl_nodes, rdl_nodes, from(|c| c.rdl_nodes_from));
        copy_tail(&mut self.allocations, allocations, from(|c| c.allocations_from));
    }

    /// The view over this copy.
    fn view(&self) -> View<'_> {
        View {
            hook: self.hook,
            now_ms: self.now_ms,
            cycle: self.cycle,
            seed: self.seed,
            cluster: self.cluster,
            strings: &self.strings,
            labels: &self.labels,
            nodes: &self.nodes,
            gpus: &self.gpus,
            queues: &self.queues,
            apps: &self.apps,
            requests: &self.requests,
            containers: &self.containers,
            reservations: &self.reservations,
            pending: &self.pending,
            node_usage: &self.node_usage,
            plan: PlanView {
                cause: self.plan.cause,
                subject: self.plan.subject,
                queue: self.plan.queue,
                capacity: self.plan.capacity,
                step_ms: self.plan.step_ms,
                horizon_ms: self.plan.horizon_ms,
                details: &self.details,
                rdl_nodes: &self.rdl_nodes,
                allocations: &self.allocations,
            },
        }
    }
}

/// One budgeted call, sent to the worker and sent back with its result; the same buffers go
/// back and forth, so steady state allocates nothing.
#[derive(Debug)]
struct Job {
    snapshot: Snapshot,
    decisions: Decisions,
    result: Result<(), PolicyError>,
}

impl Default for Job {
    fn default() -> Self {
        Job { snapshot: Snapshot::default(), decisions: Decisions::new(), result: Ok(()) }
    }
}

/// The engine's side of a plugin's worker thread.
pub(super) struct Worker {
    pub(super) budget: Duration,
    /// Calls to make; `None` once dropping (closing it ends the worker's loop).
    jobs: Option<mpsc::Sender<Job>>,
    replies: mpsc::Receiver<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The hook of a call that ran past its budget and has not returned yet.
    stuck: Option<&'static str>,
    /// The buffers of the last call that came back, for the next one.
    spare: Option<Job>,
}

/// The error of a call to a plugin whose worker thread has ended (it only ends when its
/// channels close, so this means the worker was lost; the plugin is not called again).
fn worker_gone() -> PolicyError {
    PolicyError::Failed("the plugin's worker thread has ended".into())
}

impl Worker {
    /// Starts the thread `gantry-plugin:NAME`, which owns `instance` from now on.
    pub(super) fn start(name: &str, instance: Instance, budget: Duration) -> std::io::Result<Worker> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (reply_tx, replies) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(format!("gantry-plugin:{name}"))
            .spawn(move || serve(instance, &job_rx, &reply_tx))?;
        Ok(Worker { budget, jobs: Some(jobs), replies, thread: Some(thread), stuck: None, spare: None })
    }

    /// Copies `view` (only what changed since the previous one, per `changes`, when the copy at
    /// hand is of that one), hands it to the worker and waits at most the budget for the answer.
    pub(super) fn call(
        &mut self,
        name: &str,
        view: &View<'_>,
        changes: Option<&ViewChanges>,
        out: &mut Decisions,
    ) -> Result<(), PolicyError> {
        if let Some(hook) = self.stuck {
            match self.replies.try_recv() {
                Ok(late) => {
                    tracing::info!(
                        plugin = name,
                        hook,
                        "the call past its budget returned; its result is discarded"
                    );
                    self.stuck = None;
                    self.spare = Some(late);
                }
                Err(mpsc::TryRecvError::Empty) => return Err(PolicyError::StillRunning { hook }),
                Err(mpsc::TryRecvError::Disconnected) => return Err(worker_gone()),
            }
        }
        let mut job = self.spare.take().unwrap_or_default();
        job.snapshot.copy_from(view, changes);
        let Some(jobs) = &self.jobs else { return Err(worker_gone()) };
        jobs.send(job).map_err(|_| worker_gone())?;
        match self.replies.recv_timeout(self.budget) {
            Ok(mut job) => {
                let result = std::mem::replace(&mut job.result, Ok(()));
                if result.is_ok() {
                    out.extend_from_slice(job.decisions.as_slice());
                    out.extend_allocations(job.decisions.allocations());
                }
                self.spare = Some(job);
                result
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let hook = hook_name(view.hook);
                self.stuck = Some(hook);
                Err(PolicyError::TimedOut { hook, budget_ms: self.budget.as_millis() as u64 })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(worker_gone()),
        }
    }
}

/// The worker thread: calls the plugin for each job until the engine's side is dropped, then
/// destroys the instance (dropping it) on this thread, after its last call.
fn serve(mut instance: Instance, jobs: &mpsc::Receiver<Job>, replies: &mpsc::Sender<Job>) {
    while let Ok(mut job) = jobs.recv() {
        job.decisions.clear();
        let Job { snapshot, decisions, .. } = &mut job;
        // A plugin's own panics are caught by its SDK glue (or abort at the C boundary); this
        // catches the host's, so that one bad call does not end the worker.
        job.result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            instance.call(&snapshot.view(), decisions)
        }))
        .unwrap_or_else(|_| Err(PolicyError::Panicked("the plugin host panicked during the call".into())));
        if replies.send(job).is_err() {
            break;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.jobs = None;
        if self.stuck.is_some() && self.replies.try_recv().is_err() {
            // A call is still running: waiting for it could block forever. The thread ends, and
            // destroys the instance, when (if) that call returns.
            return;
        }
        if let Some(thread) = self.thread.take() {
            // Idle, so it ends at once: the instance is destroyed before the plugin is gone.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(start_ms: u64) -> GantryAllocation {
        GantryAllocation { reservation: 0, atom: 0, start_ms, end_ms: start_ms + 1, bundles: 1 }
    }

    fn view<'a>(nodes: &'a [GantryNode], allocations: &'a [GantryAllocation]) -> View<'a> {
        View {
            hook: GANTRY_HOOK_RESERVE,
            now_ms: 0,
            cycle: 0,
            seed: 0,
            cluster: GantryResources::default(),
            strings: &[],
            labels: &[],
            nodes,
            gpus: &[],
            queues: &[],
            apps: &[],
            requests: &[],
            containers: &[],
            reservations: &[],
            pending: &[],
            node_usage: &[],
            plan: PlanView { allocations, ..PlanView::default() },
        }
    }

    fn changes(serial: u64, previous: u64, allocations_from: usize) -> ViewChanges {
        ViewChanges {
            serial,
            previous,
            reservations_from: 0,
            details_from: 0,
            rdl_nodes_from: 0,
            allocations_from,
        }
    }

    #[test]
    fn a_copy_of_the_previous_view_takes_only_the_changed_tail_and_any_other_copy_is_whole() {
        let nodes = [GantryNode::default(); 3];
        let first: Vec<GantryAllocation> = (0..4).map(piece).collect();
        let mut s = Snapshot::default();
        s.copy_from(&view(&nodes, &first), Some(&changes(7, 0, 0)));
        assert_eq!((s.serial, s.allocations.as_slice(), s.nodes.len()), (7, first.as_slice(), 3));
        // The engine changed piece 2 and appended one; it says pieces 0 and 1 are unchanged.
        let mut second = first.clone();
        second[2] = piece(20);
        second.push(piece(30));
        // Proof that the prefix is kept, not copied: plant a marker where the engine says
        // nothing changed.
        s.allocations[0].bundles = 99;
        s.copy_from(&view(&nodes, &second), Some(&changes(8, 7, 2)));
        assert_eq!(s.allocations[0].bundles, 99, "the unchanged prefix is not copied again");
        assert_eq!(&s.allocations[1..], &second[1..]);
        // A copy of another view than the previous one (a call abandoned past its budget took
        // it), or no changes at all: everything is copied.
        s.allocations[0].bundles = 99;
        s.copy_from(&view(&nodes, &second), Some(&changes(10, 9, 4)));
        assert_eq!((s.serial, s.allocations.as_slice()), (10, second.as_slice()));
        s.allocations[0].bundles = 99;
        s.copy_from(&view(&nodes, &first), None);
        assert_eq!((s.serial, s.allocations.as_slice()), (0, first.as_slice()));
        // A shorter array: cut to what is unchanged, then the rest.
        s.copy_from(&view(&nodes, &second), Some(&changes(11, 0, 0)));
        s.copy_from(&view(&nodes, &second[..2]), Some(&changes(12, 11, 5)));
        assert_eq!(s.allocations.as_slice(), &second[..2]);
    }
}
