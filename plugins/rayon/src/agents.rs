//! Admission agents: GREE and GREE-L (Rayon, SoCC 2014, §4.2).
//!
//! [`admit`] places a whole RDL expression in the [`Plan`] or rejects it, all or nothing: a
//! rejected expression leaves the plan exactly as it was (everything placed on the way is given
//! back), an accepted one is recorded under the reservation's id so [`Plan::remove`] undoes it.
//!
//! ## Shapes
//!
//! An atom `atom(b, g, h, l, w)` runs in whole gangs of `g` bundles, `k` gangs at a time with
//! `1 ≤ k ≤ ⌊h/g⌋`, on whole plan steps inside its window (a step that the window cuts is not
//! used). Its work becomes `⌈w / (g · step)⌉` gang-steps.
//!
//! - **GREE** procrastinates: from the end of the window backwards, it takes at the latest step
//!   where a gang fits as many gangs as fit there (up to `⌊h/g⌋`), holds that height back to
//!   where it stops fitting or a taller one fits again (but at least a lease), and goes on before
//!   it: tallest and rightmost, step by step. A run shorter than the lease is tried at a lower
//!   height (the tallest whose run is long enough), or skipped. The last piece is the full height
//!   for whole steps and the rest just before it (a piece of at least a lease), or, where that
//!   cannot hold the lease, the balanced shape below.
//! - **GREE-L** is as flat as possible: the lowest height `k` gangs (from `⌈work / window⌉`
//!   upwards; the first 16 heights one by one, then 25 % apart) for which a contiguous span of
//!   `⌈work / k⌉` steps (at least the lease) fits inside the window, the latest such span. If
//!   none does, it falls back to GREE's shape. The search is bounded so admission stays fast on
//!   a fragmented plan: it looks at no more than 24 runs of free capacity per height (from the
//!   end of the window backwards) and 48 per atom, and treats a height whose budget ran out as
//!   not fitting; so on a very fragmented plan a flat span far from the deadline can be missed
//!   and GREE's shape used instead.
//!
//! ## Tasks
//!
//! An atom whose work is a whole number of leases per gang (`w` a multiple of `g · l`, with
//! `l` at least a step) is that many tasks of one lease each, and a gang runs whole tasks. The
//! agents place it as below, counting whole tasks instead of gang-steps: GREE-L the lowest
//! rectangle of `k` gangs for `⌈n / k⌉` tasks that fits ([`flat_tasks`]), GREE (and GREE-L where
//! no rectangle fits) tallest rightmost, each piece `k` gangs for as many whole tasks as its run
//! of free room holds ([`gree_tasks`]). The fluid shapes can hold the work and not the tasks.
//!
//! ## Work, lease and excess
//!
//! The last piece (GREE) or the flat span (GREE-L) covers the remaining gang-steps with two
//! heights one gang apart, the taller one latest, so the work is covered exactly to the
//! gang-step: the excess over `w` is less than one step of one gang. Each maximal interval of
//! constant height lasts at least the lease `l` (rounded up to whole steps), so every bundle
//! runs at least `l` once started. When the lease and exactness cannot both hold (the work left
//! is not a sum of long enough pieces), the lease wins and the excess is below two leases of one
//! gang (`2 · ⌈l/step⌉` gang-steps); with a lease of one step or less it is always exact.
//!
//! ## Operators
//!
//! `window` narrows the window; `order` places its stages last-first, each ending before the
//! next one's start and starting no earlier than the earlier stages' least duration after the
//! window opens (in whole steps, at the most gangs the window's most free capacity holds); `all` places every part or none; `any` takes the first alternative that
//! fits. Atoms are numbered in pre-order; [`Allocation::atoms`] has one entry per atom (empty for
//! atoms of alternatives not taken, or with no work).

use std::fmt;

use crate::plan::{self, Piece, Plan, Vector};
use gantry_rdl::{Atom, Expr};

/// Which greedy agent places a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    /// Procrastinating: as late as possible, tallest rightmost.
    Gree,
    /// As flat as possible (fewer preemptions), else GREE's shape.
    GreeL,
}

impl Agent {
    /// The agent's name as the paper writes it.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Gree => "GREE",
            Agent::GreeL => "GREE-L",
        }
    }
}

/// `bundles` bundles from `start_ms` to `end_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Start, ms (plan time).
    pub start_ms: u64,
    /// End (exclusive), ms.
    pub end_ms: u64,
    /// Bundles running throughout (a multiple of the atom's `g`).
    pub bundles: u64,
}

/// An accepted reservation's allocation: per atom, in pre-order, its intervals in time order
/// (adjacent intervals have different heights).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allocation {
    /// Intervals per atom.
    pub atoms: Vec<Vec<Interval>>,
}

impl Allocation {
    /// Bundle-milliseconds allocated to atom `i`.
    pub fn work_ms(&self, atom: usize) -> u128 {
        self.atoms.get(atom).map_or(0, |iv| {
            iv.iter().map(|x| u128::from(x.end_ms - x.start_ms) * u128::from(x.bundles)).sum()
        })
    }

    /// First start and last end of atom `i`'s intervals.
    pub fn span_ms(&self, atom: usize) -> Option<(u64, u64)> {
        let iv = self.atoms.get(atom)?;
        Some((iv.first()?.start_ms, iv.last()?.end_ms))
    }
}

/// Why a reservation was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The atom (pre-order index) that did not fit, if one atom is to blame.
    pub atom: Option<usize>,
    /// What did not fit.
    pub reason: String,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.atom {
            Some(a) => write!(f, "atom {a}: {}", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

impl std::error::Error for Rejection {}

/// Places `expr` in `plan` with `agent` as reservation `id`, or rejects it and leaves the plan
/// unchanged.
pub fn admit(plan: &mut Plan, expr: &Expr, agent: Agent, id: u64) -> Result<Allocation, Rejection> {
    if plan.pieces(id).is_some() {
        return Err(Rejection { atom: None, reason: format!("reservation {id} is already in the plan") });
    }
    let atoms = count_atoms(expr);
    let steps = plan.steps();
    let mut ctx = Ctx { plan, agent, applied: Vec::new(), segs: vec![Vec::new(); atoms], g: vec![0; atoms] };
    match ctx.place(expr, 0, steps, 0) {
        Ok(_) => {
            let step_ms = ctx.plan.step_ms();
            let atoms = ctx.segs.iter().zip(&ctx.g).map(|(segs, &g)| intervals(segs, g, step_ms)).collect();
            let pieces = std::mem::take(&mut ctx.applied);
            ctx.plan.record(id, pieces);
            Ok(Allocation { atoms })
        }
        Err(e) => {
            ctx.rollback(0);
            Err(e)
        }
    }
}

/// The number of atoms in `e`.
pub fn count_atoms(e: &Expr) -> usize {
    match e {
        Expr::Atom(_) => 1,
        Expr::Window(w) => count_atoms(&w.inner),
        Expr::Order(v) | Expr::All(v) | Expr::Any(v) => v.iter().map(count_atoms).sum(),
    }
}

/// A lower bound on the steps `e` occupies once placed within `[lo, hi)` of `plan`: an atom with
/// work at least its gang-steps over the most gangs that fit (at most `⌊h/g⌋`, at most what the
/// most free capacity of the range holds) and at least its lease; none without work (or where
/// nothing fits, which its placement finds out). The sum over an `order`, the most of an `all`,
/// the least of an `any`.
fn least_steps(e: &Expr, plan: &Plan, lo: usize, hi: usize) -> usize {
    match e {
        Expr::Atom(a) => {
            let Ok(shape) = Shape::new(a, plan.step_ms()) else {
                return 0;
            };
            let fit = plan.max_free(lo, hi).map_or(0, |f| plan::count(&f, &shape.gang));
            let gangs = shape.max_gangs.min(fit);
            if shape.work == 0 || gangs == 0 {
                return 0;
            }
            shape.steps_at(gangs)
        }
        Expr::Window(w) => least_steps(&w.inner, plan, lo, hi),
        Expr::Order(v) => v.iter().fold(0usize, |t, p| t.saturating_add(least_steps(p, plan, lo, hi))),
        Expr::All(v) => v.iter().map(|p| least_steps(p, plan, lo, hi)).max().unwrap_or(0),
        Expr::Any(v) => v.iter().map(|p| least_steps(p, plan, lo, hi)).min().unwrap_or(0),
    }
}

/// `k` gangs over steps `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    start: usize,
    end: usize,
    gangs: u64,
}

/// Segments in time order, adjacent equal heights merged, as intervals of bundles.
fn intervals(segs: &[Seg], g: u64, step_ms: u64) -> Vec<Interval> {
    let mut sorted: Vec<Seg> = segs.to_vec();
    sorted.sort_by_key(|s| s.start);
    let mut out: Vec<Interval> = Vec::with_capacity(sorted.len());
    for s in sorted {
        let start_ms = s.start as u64 * step_ms;
        let end_ms = s.end as u64 * step_ms;
        let bundles = s.gangs * g;
        if let Some(last) = out.last_mut() {
            if last.end_ms == start_ms && last.bundles == bundles {
                last.end_ms = end_ms;
                continue;
            }
        }
        out.push(Interval { start_ms, end_ms, bundles });
    }
    out
}

/// An atom in plan units.
struct Shape {
    /// One gang's demand.
    gang: Vector,
    /// Most gangs at once.
    max_gangs: u64,
    /// Least steps per constant-height interval.
    lease: usize,
    /// Gang-steps of work.
    work: u64,
    /// Whole leases of work per gang when the work is a whole number of them (`w` a multiple
    /// of `g · l`): the atom is that many tasks of one lease each, and a gang runs whole tasks.
    tasks: Option<u64>,
    /// The lease, ms, and the plan's step, ms (to turn tasks into steps).
    lease_ms: u64,
    step_ms: u64,
}

impl Shape {
    fn new(a: &Atom, step_ms: u64) -> Result<Shape, String> {
        if a.min_parallel == 0 {
            return Err("g (min_parallel) is 0".into());
        }
        if a.max_parallel < a.min_parallel {
            return Err(format!("h ({}) is below g ({})", a.max_parallel, a.min_parallel));
        }
        let g = u64::from(a.min_parallel);
        let per_gang_step = u128::from(g) * u128::from(step_ms);
        let work = u64::try_from(u128::from(a.work).div_ceil(per_gang_step))
            .map_err(|_| "work too large".to_string())?;
        let lease = usize::try_from(a.min_lease_ms.div_ceil(step_ms).max(1))
            .map_err(|_| "lease too long".to_string())?;
        // Leases shorter than a step are fluid: many tasks share a step, and rounding each gang's
        // tasks up to whole steps would waste more than the fluid shapes' step of excess.
        let per_gang_lease = u128::from(g) * u128::from(a.min_lease_ms);
        let tasks = (a.min_lease_ms >= step_ms && a.work > 0 && u128::from(a.work) % per_gang_lease == 0)
            .then(|| u64::try_from(u128::from(a.work) / per_gang_lease).ok())
            .flatten();
        Ok(Shape {
            gang: plan::scale(&plan::vector(&a.bundle), i64::from(a.min_parallel)),
            max_gangs: u64::from(a.max_parallel / a.min_parallel),
            lease,
            work,
            tasks,
            lease_ms: a.min_lease_ms,
            step_ms,
        })
    }

    /// Steps a gang needs to run `per_gang` tasks one after another (at least a lease).
    fn task_steps(&self, per_gang: u64) -> usize {
        let ms = u128::from(per_gang) * u128::from(self.lease_ms);
        usize::try_from(ms.div_ceil(u128::from(self.step_ms.max(1)))).unwrap_or(usize::MAX).max(self.lease)
    }

    /// Steps `k` gangs need for the whole atom: whole tasks per gang for a task atom, the
    /// gang-steps spread evenly otherwise (at least a lease either way).
    fn steps_at(&self, k: u64) -> usize {
        match self.tasks {
            Some(n) => self.task_steps(n.div_ceil(k.max(1))),
            None => usize::try_from(self.work.div_ceil(k.max(1))).unwrap_or(usize::MAX).max(self.lease),
        }
    }

    fn demand(&self, gangs: u64) -> Vector {
        plan::scale(&self.gang, i64::try_from(gangs).unwrap_or(i64::MAX))
    }
}

struct Ctx<'a> {
    plan: &'a mut Plan,
    agent: Agent,
    /// Pieces held so far, in order, to record or give back.
    applied: Vec<Piece>,
    /// Segments per atom.
    segs: Vec<Vec<Seg>>,
    /// `g` per atom (for the intervals' bundles).
    g: Vec<u64>,
}

/// Steps `[start, end)` covered by what an expression placed, if it placed anything.
type Span = Option<(usize, usize)>;

fn join(a: Span, b: Span) -> Span {
    match (a, b) {
        (Some((s1, e1)), Some((s2, e2))) => Some((s1.min(s2), e1.max(e2))),
        (x, None) | (None, x) => x,
    }
}

impl Ctx<'_> {
    /// Gives back everything applied after the first `mark` pieces.
    fn rollback(&mut self, mark: usize) {
        while self.applied.len() > mark {
            if let Some(p) = self.applied.pop() {
                self.plan.apply(&p, -1);
            }
        }
    }

    /// Places `e` within steps `[lo, hi)`; `base` is the pre-order index of its first atom. On
    /// error, everything it placed is given back.
    fn place(&mut self, e: &Expr, lo: usize, hi: usize, base: usize) -> Result<Span, Rejection> {
        let mark = self.applied.len();
        let result = self.place_inner(e, lo, hi, base);
        if result.is_err() {
            self.rollback(mark);
            let n = count_atoms(e);
            for s in &mut self.segs[base..base + n] {
                s.clear();
            }
        }
        result
    }

    fn place_inner(&mut self, e: &Expr, lo: usize, hi: usize, base: usize) -> Result<Span, Rejection> {
        match e {
            Expr::Atom(a) => self.place_atom(a, lo, hi, base),
            Expr::Window(w) => {
                if w.end_ms <= w.start_ms {
                    return Err(Rejection {
                        atom: None,
                        reason: format!("window [{}, {}) ms is empty", w.start_ms, w.end_ms),
                    });
                }
                let lo = lo.max(self.plan.step_at_or_after(w.start_ms));
                let hi = hi.min(self.plan.step_before(w.end_ms));
                self.place(&w.inner, lo, hi.max(lo), base)
            }
            Expr::All(parts) => {
                let mut span = None;
                let mut b = base;
                for p in parts {
                    span = join(span, self.place(p, lo, hi, b)?);
                    b += count_atoms(p);
                }
                Ok(span)
            }
            Expr::Any(parts) => {
                let mut reasons = Vec::new();
                let mut b = base;
                for (i, p) in parts.iter().enumerate() {
                    match self.place(p, lo, hi, b) {
                        Ok(span) => return Ok(span),
                        Err(r) => reasons.push(format!("alternative {i}: {r}")),
                    }
                    b += count_atoms(p);
                }
                Err(Rejection {
                    atom: None,
                    reason: if reasons.is_empty() {
                        "any() has no alternative".into()
                    } else {
                        format!("no alternative fits ({})", reasons.join("; "))
                    },
                })
            }
            Expr::Order(stages) => {
                // Last stage first, each stage's window ending where the next one starts.
                let counts: Vec<usize> = stages.iter().map(count_atoms).collect();
                let mut bases = Vec::with_capacity(stages.len());
                let mut b = base;
                for c in &counts {
                    bases.push(b);
                    b += c;
                }
                // A stage may not start before the earlier stages' least steps from `lo` (at the
                // most gangs that fit in the window's most free capacity): they could not fit
                // before it. (Without this bound GREE-L laid a malleable last stage
                // flat over the whole window, leaving no room for the stages before it, even on
                // an empty plan.)
                let least: Vec<usize> = stages.iter().map(|s| least_steps(s, self.plan, lo, hi)).collect();
                let mut span = None;
                let mut end = hi;
                for (i, stage) in stages.iter().enumerate().rev() {
                    let before = least[..i].iter().fold(0usize, |t, &n| t.saturating_add(n));
                    let floor = lo.saturating_add(before).min(end);
                    let placed = self.place(stage, floor, end.max(floor), bases[i])?;
                    if let Some((s, _)) = placed {
                        end = s;
                    }
                    span = join(span, placed);
                }
                Ok(span)
            }
        }
    }

    fn place_atom(&mut self, a: &Atom, lo: usize, hi: usize, idx: usize) -> Result<Span, Rejection> {
        let reject = |reason: String| Rejection { atom: Some(idx), reason };
        let step_ms = self.plan.step_ms();
        let shape = Shape::new(a, step_ms).map_err(reject)?;
        self.g[idx] = u64::from(a.min_parallel);
        if shape.work == 0 {
            return Ok(None);
        }
        let len = hi.saturating_sub(lo);
        let window = format!("window [{}, {}) ms", self.plan.ms_of(lo), self.plan.ms_of(lo + len));
        if shape.max_gangs == 0 || len < shape.lease {
            return Err(reject(format!("{window} is shorter than the lease ({} steps)", shape.lease)));
        }
        if u128::from(shape.max_gangs) * (len as u128) < u128::from(shape.work) {
            return Err(reject(format!(
                "{window} is too short: {} gang-steps of work, at most {} gangs at a time over {len} steps",
                shape.work, shape.max_gangs
            )));
        }
        // A necessary condition from the trees' sums: the window's free capacity must hold the
        // work, dimension by dimension, however it is cut up.
        let free = self.plan.free_sum(lo, hi);
        for (d, &free) in free.iter().enumerate() {
            let need = i128::from(shape.gang[d]) * i128::from(shape.work);
            if need > free {
                return Err(reject(format!(
                    "not enough free capacity in {window}: {} needs {need} step-units in all, {free} are free",
                    plan::DIM_NAMES[d],
                )));
            }
        }
        let segs = match (self.agent, shape.tasks.is_some()) {
            (Agent::Gree, false) => gree(self.plan, &shape, lo, hi),
            (Agent::GreeL, false) => match flat(self.plan, &shape, lo, hi) {
                Some(s) => Ok(s),
                None => gree(self.plan, &shape, lo, hi),
            },
            (Agent::Gree, true) => gree_tasks(self.plan, &shape, lo, hi),
            (Agent::GreeL, true) => match flat_tasks(self.plan, &shape, lo, hi) {
                Some(s) => Ok(s),
                None => gree_tasks(self.plan, &shape, lo, hi),
            },
        }
        .map_err(|left| {
            reject(format!(
                "no room in {window}: {left} of {} gang-steps ({} bundles of cpu {} m, memory {} B, gpus {} per gang) could not be placed",
                shape.work, a.min_parallel, a.bundle.cpu_millis, a.bundle.memory_bytes, a.bundle.gpus
            ))
        })?;
        let mut span = None;
        for s in &segs {
            let piece = Piece { start: s.start, end: s.end, demand: shape.demand(s.gangs) };
            self.plan.apply(&piece, 1);
            self.applied.push(piece);
            span = join(span, Some((s.start, s.end)));
        }
        self.segs[idx] = segs;
        Ok(span)
    }
}

/// GREE: tallest rightmost. Err carries the gang-steps left unplaced.
fn gree(plan: &Plan, shape: &Shape, lo: usize, hi: usize) -> Result<Vec<Seg>, u64> {
    if shape.max_gangs == 1 && shape.lease as u64 >= shape.work {
        // A rigid gang (one piece of one gang): the walk below would end in the latest run at
        // least a lease long; find it directly.
        let n = shape.lease;
        return match plan.latest_run(&shape.gang, lo, hi, n) {
            Some((_, end)) => Ok(tail(shape.work, 1, end - n, end, shape.lease)),
            None => Err(shape.work),
        };
    }
    let mut left = shape.work;
    let mut cursor = hi;
    let mut segs = Vec::new();
    let lease = shape.lease;
    while left > 0 {
        // Give up as soon as the steps left before the cursor cannot hold the rest of the work
        // at the most gangs at a time.
        if u128::from(shape.max_gangs) * (cursor.saturating_sub(lo) as u128) < u128::from(left) {
            return Err(left);
        }
        let Some(x) = plan.latest_fit(&shape.gang, lo, cursor) else {
            return Err(left);
        };
        let (k, start) = match walk_at(plan, shape, lo, x, shape.max_gangs, lease) {
            Walk::Take { gangs, start } => (gangs, start),
            Walk::Skip(to) => {
                // Not even one gang holds a lease here: skip the whole run.
                cursor = to;
                continue;
            }
        };
        let len = x + 1 - start;
        if u128::from(k) * (len as u128) >= u128::from(left) {
            segs.extend(tall_tail(left, k, start, x + 1, lease));
            left = 0;
        } else {
            segs.push(Seg { start, end: x + 1, gangs: k });
            left -= k * len as u64;
            cursor = start;
        }
    }
    Ok(segs)
}

/// GREE-L for a task atom: the lowest height `k` whose rectangle of `⌈n / k⌉` whole tasks a
/// gang fits inside the window, latest first (the fluid shapes below would hold the work but not
/// the tasks: 18 bundles for 17 s hold 306 bundle-seconds, but three waves of 4.7 s tasks, not
/// the 65 tasks of 303 s, which need four — issue 22, `rayon-swim`). Bounded as [`flat`] is.
fn flat_tasks(plan: &Plan, shape: &Shape, lo: usize, hi: usize) -> Option<Vec<Seg>> {
    let n = shape.tasks?;
    let max_free = plan.max_free(lo, hi)?;
    let top = plan::count(&max_free, &shape.gang).min(shape.max_gangs).min(n);
    let mut budget = FLAT_PROBES;
    let mut last_steps = usize::MAX;
    for k in 1..=top {
        let steps = shape.steps_at(k);
        if budget == 0 {
            break;
        }
        if steps > hi - lo || steps == last_steps {
            continue;
        }
        last_steps = steps;
        let mut probes = budget.min(FLAT_PROBES_PER_HEIGHT);
        let before = probes;
        let found = plan.latest_run_probing(&shape.demand(k), lo, hi, steps, &mut probes);
        budget -= before - probes;
        // The latest run of free room at least `steps` long: the rectangle is its last steps.
        if let Some((_, e)) = found {
            return Some(vec![Seg { start: e - steps, end: e, gangs: k }]);
        }
    }
    None
}

/// GREE for a task atom: tallest rightmost as [`gree`], in whole tasks. From the end of the
/// window backwards, at the latest step where a gang fits, as many gangs as fit there for as
/// many whole tasks as their run of free room holds; a run that holds no whole task is skipped.
/// Each piece runs `gangs × tasks` whole tasks on its own, so the shape holds the tasks whatever
/// the heights. Err carries the gang-steps of the tasks left unplaced.
fn gree_tasks(plan: &Plan, shape: &Shape, lo: usize, hi: usize) -> Result<Vec<Seg>, u64> {
    let Some(n) = shape.tasks else { return gree(plan, shape, lo, hi) };
    let unplaced = |left: u64| {
        u64::try_from(u128::from(left) * u128::from(shape.lease_ms) / u128::from(shape.step_ms.max(1)))
            .unwrap_or(u64::MAX)
    };
    let one = shape.task_steps(1);
    let tasks_in = |steps: usize| -> u64 {
        u64::try_from(steps as u128 * u128::from(shape.step_ms) / u128::from(shape.lease_ms.max(1)))
            .unwrap_or(u64::MAX)
    };
    let mut left = n;
    let mut cursor = hi;
    let mut segs = Vec::new();
    while left > 0 {
        // Give up as soon as the steps left before the cursor cannot hold the rest at the most
        // gangs at a time.
        if u128::from(shape.max_gangs) * u128::from(tasks_in(cursor.saturating_sub(lo))) < u128::from(left) {
            return Err(unplaced(left));
        }
        let Some(x) = plan.latest_fit(&shape.gang, lo, cursor) else {
            return Err(unplaced(left));
        };
        let (k, start) = match walk_at(plan, shape, lo, x, shape.max_gangs.min(left), one) {
            Walk::Take { gangs, start } => (gangs, start),
            Walk::Skip(to) => {
                // Not even one gang holds a whole task here: skip the whole run.
                cursor = to;
                continue;
            }
        };
        let per_gang = tasks_in(x + 1 - start).max(1);
        if k.saturating_mul(per_gang) >= left {
            let steps = shape.task_steps(left.div_ceil(k));
            segs.push(Seg { start: x + 1 - steps, end: x + 1, gangs: k });
            left = 0;
        } else {
            let steps = shape.task_steps(per_gang);
            segs.push(Seg { start: x + 1 - steps, end: x + 1, gangs: k });
            left -= k * per_gang;
            cursor = x + 1 - steps;
        }
    }
    Ok(segs)
}

/// Where GREE's walk goes at step `x` (the latest step before its cursor where a gang fits):
/// the tallest height, at most `max_k`, whose run of free room up to `x` lasts at least `min`
/// steps, and where that run starts — held back only to where a taller height fits again (but
/// at least `min` steps); or, where not even one gang's run lasts `min`, `Skip` to the run's
/// start.
enum Walk {
    Take { gangs: u64, start: usize },
    Skip(usize),
}

fn walk_at(plan: &Plan, shape: &Shape, lo: usize, x: usize, max_k: u64, min: usize) -> Walk {
    let fit = plan.count_fitting(&shape.gang, x).min(max_k);
    let run = |k: u64| x + 1 - plan.run_start(&shape.demand(k), lo, x);
    let mut k = fit;
    let mut len = run(k);
    if len < min {
        let len1 = run(1);
        if len1 < min {
            return Walk::Skip(x + 1 - len1);
        }
        // The tallest height whose run is long enough: run length falls as height grows.
        let (mut ok, mut bad) = (1, k);
        while bad - ok > 1 {
            let mid = ok + (bad - ok) / 2;
            if run(mid) >= min {
                ok = mid;
            } else {
                bad = mid;
            }
        }
        k = ok;
        len = run(k);
    }
    let mut start = x + 1 - len;
    if k < max_k {
        // Tallest per step: the height holds back only to where a taller one fits again (but at
        // least `min` steps).
        if let Some(y) = plan.latest_fit(&shape.demand(k + 1), start, x + 1) {
            start = start.max((y + 1).min(x + 1 - min));
        }
    }
    Walk::Take { gangs: k, start }
}

/// Runs GREE-L looks at per height before it tries the next height.
const FLAT_PROBES_PER_HEIGHT: usize = 24;
/// Runs GREE-L looks at per atom before it falls back to GREE.
const FLAT_PROBES: usize = 48;

/// GREE-L: the lowest height with a contiguous span inside the window, latest span first.
fn flat(plan: &Plan, shape: &Shape, lo: usize, hi: usize) -> Option<Vec<Seg>> {
    let len = (hi - lo) as u64;
    let max_free = plan.max_free(lo, hi)?;
    // A height no dimension reaches anywhere in the window cannot fit.
    let top = plan::count(&max_free, &shape.gang).min(shape.max_gangs);
    let mut k = shape.work.div_ceil(len).max(1);
    let mut tried = 0u32;
    let mut budget = FLAT_PROBES;
    while k <= top && budget > 0 {
        let n = (shape.work.div_ceil(k) as usize).max(shape.lease);
        if n as u64 <= len {
            let mut probes = budget.min(FLAT_PROBES_PER_HEIGHT);
            let before = probes;
            let found = plan.latest_run_probing(&shape.demand(k), lo, hi, n, &mut probes);
            budget -= before - probes;
            if let Some((s, e)) = found {
                return Some(tail(shape.work, k, s, e, shape.lease));
            }
        }
        tried += 1;
        k = if tried < 16 { k + 1 } else { (k + k / 4).max(k + 1) };
    }
    None
}

/// GREE's last piece: `k` gangs back from `end` for as many whole steps as the work needs,
/// the rest before them in a piece of at least a lease; else [`tail`]'s balanced shape.
fn tall_tail(work: u64, k: u64, start: usize, end: usize, lease: usize) -> Vec<Seg> {
    let m = (work / k) as usize;
    let r = work % k;
    let seg = |s: usize, e: usize, gangs: u64| Seg { start: s, end: e, gangs };
    if m >= lease && m <= end - start {
        if r == 0 {
            return vec![seg(end - m, end, k)];
        }
        let limit = (r as usize).min(4 * lease + 16);
        for p in lease..=limit {
            if end - start >= m + p && r % p as u64 == 0 {
                return vec![seg(end - m - p, end - m, r / p as u64), seg(end - m, end, k)];
            }
        }
    }
    tail(work, k, start, end, lease)
}

/// Covers `work` gang-steps with at most `max` gangs, ending at `end`, within `[start, end)`:
/// `n` steps of two heights one gang apart (the taller latest), each part at least `lease`
/// steps. The caller guarantees `max · (end - start) ≥ work` and `end - start ≥ lease`.
fn tail(work: u64, max: u64, start: usize, end: usize, lease: usize) -> Vec<Seg> {
    let len = end - start;
    let l = lease as u64;
    let n_min = (work.div_ceil(max) as usize).max(lease).min(len);
    let seg = |s: usize, e: usize, gangs: u64| Seg { start: s, end: e, gangs };
    let limit = len.min(n_min + 4 * lease + 16);
    for n in n_min..=limit {
        let q = work / n as u64;
        let a = work % n as u64;
        if q == 0 {
            break;
        }
        if a == 0 {
            return vec![seg(end - n, end, q)];
        }
        if a >= l && n as u64 - a >= l {
            let a = a as usize;
            return vec![seg(end - n, end - a, q), seg(end - a, end, q + 1)];
        }
    }
    // The lease wins over exactness.
    let n = n_min;
    let q = work / n as u64;
    let a = work % n as u64;
    if q == 0 {
        return vec![seg(end - n, end, 1)];
    }
    if a == 0 {
        return vec![seg(end - n, end, q)];
    }
    if a < l && n >= 2 * lease {
        return vec![seg(end - n, end - lease, q), seg(end - lease, end, q + 1)];
    }
    vec![seg(end - n, end, q + 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(segs: &[Seg]) -> u64 {
        segs.iter().map(|s| (s.end - s.start) as u64 * s.gangs).sum()
    }

    #[test]
    fn tail_is_exact_with_a_unit_lease() {
        for work in 1..60u64 {
            for max in 1..6u64 {
                let len = work.div_ceil(max) as usize + 3;
                let segs = tail(work, max, 100, 100 + len, 1);
                assert_eq!(total(&segs), work, "work {work} max {max}");
                assert!(segs.iter().all(|s| s.gangs >= 1 && s.gangs <= max));
                assert!(segs.iter().all(|s| s.start >= 100 && s.end == 100 + len || s.end < 100 + len));
            }
        }
    }

    #[test]
    fn tail_holds_the_lease_with_small_excess() {
        for work in 1..80u64 {
            for max in 1..5u64 {
                for lease in 1..7usize {
                    let len = (work.div_ceil(max) as usize).max(lease) + 2;
                    let segs = tail(work, max, 0, len, lease);
                    let t = total(&segs);
                    assert!(t >= work);
                    assert!(t - work < 2 * lease as u64, "work {work} max {max} lease {lease}");
                    assert!(segs.iter().all(|s| s.end - s.start >= lease));
                    assert!(segs.iter().all(|s| s.gangs >= 1 && s.gangs <= max));
                }
            }
        }
    }
}
