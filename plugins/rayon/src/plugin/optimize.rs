//! OPTIMIZE: the offline MILP ([`crate::milp`]) over the reservations that have not started, in
//! the call (`inline`) or on a thread of the plugin's own (`background`).
//!
//! A background run works on a snapshot: the mirror's plan, the requests, and the plan's
//! generation and capacity it saw. Its moves are answered at a later OPTIMIZE call only if the
//! generation and capacity are unchanged and nothing it moves has begun since; else they are
//! dropped. The model either keeps everything or moves reservations; an answer that
//! would reject any is dropped (OPTIMIZE may only move).

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::thread::JoinHandle;

use gantry_sdk::abi::{GantryAllocation, GantryResources};
use gantry_sdk::{PluginError, View};

use crate::config::RayonConfig;
use crate::milp::{self, Options, Request};
use crate::plan::Plan;
use crate::plugin::mirror::{self, Mirror, engine_pieces};

/// What the plan looked like: the mirror's generation and the capacity.
pub type Key = (u64, GantryResources);

/// One optimiser run's input.
#[derive(Debug)]
pub struct Job {
    requests: Vec<Request>,
    /// Each request's earliest piece now, engine ms.
    first_start: HashMap<u64, u64>,
    opts: Options,
    origin_ms: u64,
    key: Key,
}

/// One run's moves.
#[derive(Debug)]
pub struct Optimized {
    /// The plan the run saw.
    pub key: Key,
    /// Reservations placed anew: id and new pieces (engine time, canonical).
    pub moves: Vec<(u64, Vec<GantryAllocation>)>,
    /// Per moved reservation, the earliest start of its old and new pieces.
    earliest: Vec<u64>,
}

impl Optimized {
    /// Whether every move still lies wholly after `now` (old pieces and new).
    pub fn still_movable(&self, now: u64) -> bool {
        self.earliest.iter().all(|&t| t > now)
    }
}

impl Job {
    /// The reservations of the view that have not started (every piece after now), as requests
    /// in plan time.
    pub fn new(view: &View<'_>, m: &Mirror, config: &RayonConfig) -> Result<Job, PluginError> {
        let now = view.now_ms;
        let mut requests = Vec::new();
        let mut first_start = HashMap::new();
        for (i, r) in view.reservations.iter().enumerate() {
            let Some(entry) = m.get(r.id) else { continue };
            let Some(first) = entry.pieces.iter().map(|p| p.start_ms).min() else { continue };
            if first <= now {
                continue;
            }
            let abs = mirror::definition(view, i)
                .map_err(|e| PluginError::new(format!("rayon: reservation {}: its definition: {e}", r.id)))?;
            requests.push(Request { id: r.id, expr: m.plan_expr(&abs, now) });
            first_start.insert(r.id, first);
        }
        let opts = Options {
            time_limit: config.optimizer_time_limit,
            max_cells: config.optimizer_max_cells,
            ..Options::default()
        };
        Ok(Job {
            requests,
            first_start,
            opts,
            origin_ms: m.origin_ms(),
            key: (m.generation(), view.plan.capacity),
        })
    }

    /// Runs the model on `plan` (the mirror's, or a copy of it).
    pub fn run(&self, plan: &Plan) -> Optimized {
        let mut out = Optimized { key: self.key, moves: Vec::new(), earliest: Vec::new() };
        if self.requests.is_empty() {
            return out;
        }
        let Ok(o) = milp::optimize(plan, &self.requests, &self.opts) else { return out };
        if o.stats.kept_input.is_some() || !o.rejected.is_empty() {
            return out;
        }
        for (id, allocation) in &o.allocations {
            let pieces = engine_pieces(self.origin_ms, allocation, |k| u32::try_from(k).ok());
            let new_first = pieces.iter().map(|p| p.start_ms).min().unwrap_or(u64::MAX);
            let old_first = self.first_start.get(id).copied().unwrap_or(0);
            out.earliest.push(new_first.min(old_first));
            out.moves.push((*id, pieces));
        }
        out
    }
}

/// The background run, if any.
#[derive(Debug, Default)]
pub struct Background {
    running: Option<(JoinHandle<()>, Receiver<Optimized>)>,
}

impl Background {
    /// Whether no run is going on.
    pub fn idle(&self) -> bool {
        self.running.is_none()
    }

    /// The finished run's result, if one has finished (a run that panicked gives nothing).
    pub fn finished(&mut self) -> Option<Optimized> {
        let result = match &self.running {
            None => return None,
            Some((_, rx)) => match rx.try_recv() {
                Ok(r) => Some(r),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => None,
            },
        };
        if let Some((handle, _)) = self.running.take() {
            let _ = handle.join();
        }
        result
    }

    /// Starts `job` on a copy of `plan`.
    pub fn start(&mut self, job: Job, plan: &Plan) -> Result<(), PluginError> {
        let plan = plan.clone();
        let (tx, rx) = channel();
        let handle = std::thread::Builder::new()
            .name("rayon-optimizer".into())
            .spawn(move || {
                let _ = tx.send(job.run(&plan));
            })
            .map_err(|e| PluginError::new(format!("rayon: cannot start the optimiser's thread: {e}")))?;
        self.running = Some((handle, rx));
        Ok(())
    }
}

impl Drop for Background {
    /// Waits for a run to finish (at most the solver's time limit): the thread runs this
    /// library's code, which the host may unload right after destroying the instance.
    fn drop(&mut self) {
        if let Some((handle, _)) = self.running.take() {
            let _ = handle.join();
        }
    }
}
