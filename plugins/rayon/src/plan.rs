//! The plan: the cluster's capacity over time, in steps, and what each reservation holds.
//!
//! Time is cut into `steps` steps of `step_ms` (default one second) from plan time 0; step `i`
//! is `[i·step_ms, (i+1)·step_ms)`. Each step has a capacity per dimension (CPU millicores,
//! memory bytes, GPUs), which [`Plan::set_capacity`] may change over a range (nodes lost or
//! added), and a free amount: capacity less what the reservations hold.
//!
//! Free capacity lives in one segment tree per dimension with range add and min / max per
//! subtree, so a reservation's piece is added or removed in `O(log steps)` and window questions —
//! the least free over a window, the latest step or run where a demand fits — are answered in
//! `O(log steps)` per step found, whatever the number of nodes or reservations. The size depends
//! only on the number of steps: for 24 h at 1 s (86,400 steps) about 27 MB (three trees of
//! 8 MiB and the per-step capacity). Each tree also keeps exact sums, so the free capacity of a
//! window in all ([`Plan::free_sum`]) is one query: a necessary condition that rejects work too
//! large for a window without looking at its gaps.
//!
//! Every reservation's pieces are kept by id, so [`Plan::remove`] subtracts exactly what
//! [`Plan::add`] (or an admission agent) added.

mod tree;

use std::collections::HashMap;
use std::fmt;

use gantry_sdk::abi::GantryResources;

use tree::Tree;

/// Dimensions: CPU millicores, memory bytes, GPUs.
pub const DIMS: usize = 3;

/// An amount per dimension, signed so free capacity can go negative after a capacity loss.
pub type Vector = [i64; DIMS];

/// Names of the dimensions, for messages.
pub const DIM_NAMES: [&str; DIMS] = ["cpu_millis", "memory_bytes", "gpus"];

/// The default step: one second.
pub const DEFAULT_STEP_MS: u64 = 1000;

/// The resources of a record as a vector (saturating at `i64::MAX`).
pub fn vector(r: &GantryResources) -> Vector {
    [
        i64::try_from(r.cpu_millis).unwrap_or(i64::MAX),
        i64::try_from(r.memory_bytes).unwrap_or(i64::MAX),
        i64::from(r.gpus),
    ]
}

/// `k × v`, saturating.
pub fn scale(v: &Vector, k: i64) -> Vector {
    [v[0].saturating_mul(k), v[1].saturating_mul(k), v[2].saturating_mul(k)]
}

/// A constant demand over a range of steps: what a reservation holds, piece by piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// First step.
    pub start: usize,
    /// One past the last step.
    pub end: usize,
    /// Held at every step of the range.
    pub demand: Vector,
}

/// Why the plan refused an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The plan has no step or a zero step length.
    Empty,
    /// A range is empty or reaches past the horizon.
    BadRange {
        /// First step.
        start: usize,
        /// One past the last step.
        end: usize,
    },
    /// A demand is negative.
    NegativeDemand,
    /// The id already holds a reservation.
    Duplicate(u64),
    /// A piece does not fit: at `step`, dimension `dim` has less free than it needs.
    NoRoom {
        /// The first step found short.
        step: usize,
        /// The dimension's name.
        dim: &'static str,
        /// Free there.
        free: i64,
        /// Needed there.
        need: i64,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Empty => write!(f, "the plan needs at least one step of at least 1 ms"),
            PlanError::BadRange { start, end } => {
                write!(f, "steps [{start}, {end}) are empty or beyond the horizon")
            }
            PlanError::NegativeDemand => write!(f, "a demand is negative"),
            PlanError::Duplicate(id) => write!(f, "reservation {id} is already in the plan"),
            PlanError::NoRoom { step, dim, free, need } => {
                write!(f, "step {step}: {dim} free {free}, needs {need}")
            }
        }
    }
}

impl std::error::Error for PlanError {}

/// The cluster's capacity over time and the reservations in it.
#[derive(Debug, Clone)]
pub struct Plan {
    step_ms: u64,
    steps: usize,
    /// Capacity per step.
    capacity: Vec<Vector>,
    /// Free capacity per dimension.
    free: [Tree; DIMS],
    reservations: HashMap<u64, Vec<Piece>>,
}

impl Plan {
    /// A plan of `steps` steps of `step_ms`, each with `capacity`.
    pub fn new(step_ms: u64, steps: usize, capacity: &GantryResources) -> Result<Self, PlanError> {
        if step_ms == 0 || steps == 0 {
            return Err(PlanError::Empty);
        }
        let cap = vector(capacity);
        Ok(Plan {
            step_ms,
            steps,
            capacity: vec![cap; steps],
            free: [Tree::new(steps, cap[0]), Tree::new(steps, cap[1]), Tree::new(steps, cap[2])],
            reservations: HashMap::new(),
        })
    }

    /// A plan covering `horizon_ms` (rounded up to whole steps).
    pub fn with_horizon(
        step_ms: u64,
        horizon_ms: u64,
        capacity: &GantryResources,
    ) -> Result<Self, PlanError> {
        if step_ms == 0 {
            return Err(PlanError::Empty);
        }
        let steps = usize::try_from(horizon_ms.div_ceil(step_ms)).map_err(|_| PlanError::Empty)?;
        Plan::new(step_ms, steps, capacity)
    }

    /// The step length, ms.
    pub fn step_ms(&self) -> u64 {
        self.step_ms
    }

    /// The number of steps.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The horizon, ms.
    pub fn horizon_ms(&self) -> u64 {
        self.step_ms.saturating_mul(self.steps as u64)
    }

    /// The first step that starts at or after `ms`.
    pub fn step_at_or_after(&self, ms: u64) -> usize {
        usize::try_from(ms.div_ceil(self.step_ms)).unwrap_or(usize::MAX).min(self.steps)
    }

    /// The number of steps that end at or before `ms` (so `[a, step_before(e))` lies in `[.., e)`).
    pub fn step_before(&self, ms: u64) -> usize {
        usize::try_from(ms / self.step_ms).unwrap_or(usize::MAX).min(self.steps)
    }

    /// Start of step `i`, ms.
    pub fn ms_of(&self, step: usize) -> u64 {
        (step as u64).saturating_mul(self.step_ms)
    }

    /// Ids of the reservations in the plan.
    pub fn reservation_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.reservations.keys().copied()
    }

    /// The number of reservations in the plan.
    pub fn len(&self) -> usize {
        self.reservations.len()
    }

    /// Whether the plan holds no reservation.
    pub fn is_empty(&self) -> bool {
        self.reservations.is_empty()
    }

    /// What reservation `id` holds.
    pub fn pieces(&self, id: u64) -> Option<&[Piece]> {
        self.reservations.get(&id).map(Vec::as_slice)
    }

    /// Capacity at step `i`.
    pub fn capacity_at(&self, step: usize) -> Option<Vector> {
        self.capacity.get(step).copied()
    }

    /// Free capacity at step `i`.
    pub fn free_at(&self, step: usize) -> Option<Vector> {
        (step < self.steps).then(|| [self.free[0].get(step), self.free[1].get(step), self.free[2].get(step)])
    }

    /// Held by reservations at step `i`.
    pub fn used_at(&self, step: usize) -> Option<Vector> {
        let cap = self.capacity_at(step)?;
        let free = self.free_at(step)?;
        Some([cap[0] - free[0], cap[1] - free[1], cap[2] - free[2]])
    }

    /// The least free capacity over `[start, end)`, per dimension; `None` for an empty range.
    pub fn min_free(&self, start: usize, end: usize) -> Option<Vector> {
        let end = end.min(self.steps);
        (start < end).then(|| {
            [
                self.free[0].range_min(start, end),
                self.free[1].range_min(start, end),
                self.free[2].range_min(start, end),
            ]
        })
    }

    /// The total free capacity over `[start, end)` (step × amount), per dimension.
    pub fn free_sum(&self, start: usize, end: usize) -> [i128; DIMS] {
        [
            self.free[0].range_sum(start, end),
            self.free[1].range_sum(start, end),
            self.free[2].range_sum(start, end),
        ]
    }

    /// The most free capacity over `[start, end)`, per dimension; `None` for an empty range.
    pub fn max_free(&self, start: usize, end: usize) -> Option<Vector> {
        let end = end.min(self.steps);
        (start < end).then(|| {
            [
                self.free[0].range_max(start, end),
                self.free[1].range_max(start, end),
                self.free[2].range_max(start, end),
            ]
        })
    }

    /// Whether `demand` fits at every step of `[start, end)`.
    pub fn fits(&self, demand: &Vector, start: usize, end: usize) -> bool {
        match self.min_free(start, end) {
            Some(m) => (0..DIMS).all(|d| demand[d] <= 0 || m[d] >= demand[d]),
            None => false,
        }
    }

    /// Whether `demand` fits at step `i` (a point query per dimension).
    pub fn fits_at(&self, demand: &Vector, step: usize) -> bool {
        step < self.steps
            && self.free.iter().enumerate().all(|(d, t)| demand[d] <= 0 || t.get(step) >= demand[d])
    }

    /// How many times `bundle` fits at step `i` (`u64::MAX` for an all-zero bundle).
    pub fn count_fitting(&self, bundle: &Vector, step: usize) -> u64 {
        let Some(free) = self.free_at(step) else {
            return 0;
        };
        count(&free, bundle)
    }

    /// The latest step of `[lo, hi)` where `demand` fits.
    pub fn latest_fit(&self, demand: &Vector, lo: usize, hi: usize) -> Option<usize> {
        let mut hi = hi.min(self.steps);
        loop {
            if lo >= hi {
                return None;
            }
            let mut x = hi - 1;
            for (d, tree) in self.free.iter().enumerate() {
                if demand[d] > 0 {
                    x = x.min(tree.last_at_least(lo, x + 1, demand[d])?);
                }
            }
            // `x` is the latest step no dimension rules out; check them all there.
            if self.fits_at(demand, x) {
                return Some(x);
            }
            hi = x;
        }
    }

    /// The earliest step of `[lo, hi)` where `demand` fits.
    pub fn earliest_fit(&self, demand: &Vector, lo: usize, hi: usize) -> Option<usize> {
        let hi = hi.min(self.steps);
        let mut lo = lo;
        loop {
            if lo >= hi {
                return None;
            }
            let mut x = lo;
            for (d, tree) in self.free.iter().enumerate() {
                if demand[d] > 0 {
                    x = x.max(tree.first_at_least(x, hi, demand[d])?);
                }
            }
            if self.fits_at(demand, x) {
                return Some(x);
            }
            lo = x + 1;
        }
    }

    /// The first step of the run of steps ending at `x` (within `[lo, x]`) where `demand` fits
    /// at every step. `x` itself must fit.
    pub fn run_start(&self, demand: &Vector, lo: usize, x: usize) -> usize {
        let mut start = lo;
        for (d, tree) in self.free.iter().enumerate() {
            if demand[d] > 0 {
                if let Some(b) = tree.last_below(lo, x + 1, demand[d]) {
                    start = start.max(b + 1);
                }
            }
        }
        start
    }

    /// One past the last step of the run starting at `x` (within `[x, hi)`) where `demand`
    /// fits at every step.
    pub fn run_end(&self, demand: &Vector, x: usize, hi: usize) -> usize {
        let hi = hi.min(self.steps);
        let mut end = hi;
        for (d, tree) in self.free.iter().enumerate() {
            if demand[d] > 0 {
                if let Some(b) = tree.first_below(x, hi, demand[d]) {
                    end = end.min(b);
                }
            }
        }
        end
    }

    /// The latest run of at least `len` steps within `[lo, hi)` where `demand` fits at every
    /// step, as the maximal run `[start, end)` containing it (`end` as late as possible).
    pub fn latest_run(&self, demand: &Vector, lo: usize, hi: usize, len: usize) -> Option<(usize, usize)> {
        let mut unlimited = usize::MAX;
        self.latest_run_probing(demand, lo, hi, len, &mut unlimited)
    }

    /// [`Plan::latest_run`] looking at no more than `probes` runs (decremented per run looked
    /// at): `None` also when the budget runs out first.
    pub fn latest_run_probing(
        &self,
        demand: &Vector,
        lo: usize,
        hi: usize,
        len: usize,
        probes: &mut usize,
    ) -> Option<(usize, usize)> {
        let len = len.max(1);
        // `end` is the candidate end: the steps after it are ruled out.
        let mut end = hi.min(self.steps);
        while end >= lo + len {
            if *probes == 0 {
                return None;
            }
            *probes -= 1;
            // Skip the steps one dimension rules out (one pass: a step another dimension rules
            // out is found as a blocker below).
            let mut x = end - 1;
            for (d, tree) in self.free.iter().enumerate() {
                if demand[d] > 0 {
                    x = x.min(tree.last_at_least(lo, x + 1, demand[d])?);
                }
            }
            end = x + 1;
            if end < lo + len {
                return None;
            }
            // The latest step of the last `len` that some dimension rules out, if any.
            let blocker = self
                .free
                .iter()
                .enumerate()
                .filter(|&(d, _)| demand[d] > 0)
                .filter_map(|(d, tree)| tree.last_below(end - len, end, demand[d]))
                .max();
            match blocker {
                None => return Some((self.run_start(demand, lo, end - 1), end)),
                Some(b) => end = b,
            }
        }
        None
    }

    /// The earliest run of at least `len` steps within `[lo, hi)` where `demand` fits at every
    /// step, as the maximal run `[start, end)` containing it (`start` as early as possible).
    pub fn earliest_run(&self, demand: &Vector, lo: usize, hi: usize, len: usize) -> Option<(usize, usize)> {
        let len = len.max(1);
        let hi = hi.min(self.steps);
        let mut lo = lo;
        while hi >= lo + len {
            let x = self.earliest_fit(demand, lo, hi)?;
            let end = self.run_end(demand, x, hi);
            if end - x >= len {
                return Some((x, end));
            }
            lo = end;
        }
        None
    }

    /// Changes the capacity of steps `[start, end)` to `capacity` (nodes lost or added). Free
    /// capacity follows; it may go negative where reservations now hold more than there is
    /// ([`Plan::overcommitted`] finds such steps).
    pub fn set_capacity(
        &mut self,
        start: usize,
        end: usize,
        capacity: &GantryResources,
    ) -> Result<(), PlanError> {
        if start >= end || end > self.steps {
            return Err(PlanError::BadRange { start, end });
        }
        let new = vector(capacity);
        // Runs of equal change become one range add each.
        let mut run_start = start;
        let mut run_delta = delta(&self.capacity[start], &new);
        for i in start..=end {
            let d = if i < end { delta(&self.capacity[i], &new) } else { [i64::MIN; DIMS] };
            if d != run_delta {
                for (k, tree) in self.free.iter_mut().enumerate() {
                    tree.range_add(run_start, i, run_delta[k]);
                }
                run_start = i;
                run_delta = d;
            }
        }
        for c in &mut self.capacity[start..end] {
            *c = new;
        }
        Ok(())
    }

    /// The first step whose free capacity is negative in some dimension, if any.
    pub fn overcommitted(&self) -> Option<usize> {
        self.free.iter().filter_map(|t| t.first_below(0, self.steps, 0)).min()
    }

    /// Adds reservation `id` holding `pieces`, if every piece fits (pieces of one reservation
    /// may overlap; they add up). All or nothing: on error the plan is unchanged.
    pub fn add(&mut self, id: u64, pieces: Vec<Piece>) -> Result<(), PlanError> {
        if self.reservations.contains_key(&id) {
            return Err(PlanError::Duplicate(id));
        }
        for (k, p) in pieces.iter().enumerate() {
            let checked = self.check(p);
            if let Err(e) = checked {
                for q in pieces[..k].iter().rev() {
                    self.apply(q, -1);
                }
                return Err(e);
            }
            self.apply(p, 1);
        }
        self.reservations.insert(id, pieces);
        Ok(())
    }

    /// Puts reservation `id` back with `pieces` it held before (a driver restoring its plan after
    /// a restart, or moving the plan to a new origin), checking ranges and signs but not room: the
    /// capacity may not be back yet, so free may go negative ([`Plan::overcommitted`]).
    pub fn restore(&mut self, id: u64, pieces: Vec<Piece>) -> Result<(), PlanError> {
        if self.reservations.contains_key(&id) {
            return Err(PlanError::Duplicate(id));
        }
        for p in &pieces {
            if p.start >= p.end || p.end > self.steps {
                return Err(PlanError::BadRange { start: p.start, end: p.end });
            }
            if p.demand.iter().any(|&d| d < 0) {
                return Err(PlanError::NegativeDemand);
            }
        }
        for p in &pieces {
            self.apply(p, 1);
        }
        self.reservations.insert(id, pieces);
        Ok(())
    }

    /// Removes reservation `id`, giving back exactly what it held; returns its pieces.
    pub fn remove(&mut self, id: u64) -> Option<Vec<Piece>> {
        let pieces = self.reservations.remove(&id)?;
        for p in pieces.iter().rev() {
            self.apply(p, -1);
        }
        Some(pieces)
    }

    /// Checks one piece: a valid range, a non-negative demand, room at every step.
    pub fn check(&self, p: &Piece) -> Result<(), PlanError> {
        if p.start >= p.end || p.end > self.steps {
            return Err(PlanError::BadRange { start: p.start, end: p.end });
        }
        if p.demand.iter().any(|&d| d < 0) {
            return Err(PlanError::NegativeDemand);
        }
        for (d, tree) in self.free.iter().enumerate() {
            if p.demand[d] > 0 {
                if let Some(step) = tree.first_below(p.start, p.end, p.demand[d]) {
                    return Err(PlanError::NoRoom {
                        step,
                        dim: DIM_NAMES[d],
                        free: tree.get(step),
                        need: p.demand[d],
                    });
                }
            }
        }
        Ok(())
    }

    /// Holds (`sign` 1) or gives back (`sign` -1) a piece without checks or bookkeeping; the
    /// agents use it while they build an admission and record it with [`Plan::record`].
    pub(crate) fn apply(&mut self, p: &Piece, sign: i64) {
        for (d, tree) in self.free.iter_mut().enumerate() {
            tree.range_add(p.start, p.end, -sign * p.demand[d]);
        }
    }

    /// Records pieces already applied with [`Plan::apply`] under `id`.
    pub(crate) fn record(&mut self, id: u64, pieces: Vec<Piece>) {
        self.reservations.insert(id, pieces);
    }

    /// Heap bytes held by the plan (trees, capacity, reservations' pieces).
    pub fn memory_bytes(&self) -> usize {
        let trees: usize = self.free.iter().map(Tree::memory_bytes).sum();
        let cap = self.capacity.capacity() * size_of::<Vector>();
        let pieces: usize = self
            .reservations
            .values()
            .map(|v| v.capacity() * size_of::<Piece>() + size_of::<Vec<Piece>>() + 16)
            .sum();
        let table = self.reservations.capacity() * (size_of::<u64>() + size_of::<Vec<Piece>>());
        trees + cap + pieces + table
    }
}

/// `new - old`.
fn delta(old: &Vector, new: &Vector) -> Vector {
    [new[0] - old[0], new[1] - old[1], new[2] - old[2]]
}

/// How many times `bundle` fits in `free` (`u64::MAX` if the bundle is all zero).
pub fn count(free: &Vector, bundle: &Vector) -> u64 {
    let mut n = u64::MAX;
    for d in 0..DIMS {
        if bundle[d] > 0 {
            let k = if free[d] <= 0 { 0 } else { (free[d] / bundle[d]) as u64 };
            n = n.min(k);
        }
    }
    n
}
