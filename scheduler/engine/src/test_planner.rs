//! A small reservation planner for tests (feature `test-planner`): a Rust [`Plugin`] with the
//! `reserve` hook, used through [`crate::StaticPolicy`], so the engine, the daemon's and the
//! simulator's tests exercise the reservation mechanism without the Rayon planner (which is a
//! plugin of its own, `libgantry_rayon.so`).
//!
//! **Earliest (or latest) fit.** Each atom runs `k` bundles at once for `max(⌈w / k⌉, l)` ms, at
//! the earliest instant from now (or, [`TestPlanner::latest`], the latest before its window's
//! end, as GREE procrastinates) where that fits under the plan's capacity beside every other
//! allocation in the view, `k` the most bundles it may hold (`h` rounded down to whole gangs of
//! `g`) or, where that fits nowhere, the next lower number of whole gangs; `order` and `all`
//! place their parts one after another, `any` the first alternative that fits. A reservation
//! that does not fit is rejected with reason [`NO_ROOM`].
//!
//! - ADMIT / UPDATE: the subject, as above (an update ignores the subject's old allocation).
//! - REPLAN: reservations oldest first keep their allocation where it still fits; one that does
//!   not is placed again from now if it has not started, else given up ([`GIVEN_UP`]).
//! - OPTIMIZE: nothing.
//!
//! A test misbehaves it through its [`Handle`]: fail, panic, answer nothing, or tamper with the
//! good answer (any bad answer can be built from it). The handle also records every call.

use std::ffi::CStr;
use std::sync::{Arc, Mutex, MutexGuard};

use gantry_rdl::Expr;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

/// Rejection code: no room.
pub const NO_ROOM: u32 = 1;
/// Rejection code (REPLAN): a started reservation that no longer fits was given up.
pub const GIVEN_UP: u32 = 2;

/// A change a test makes to the planner's good answer.
pub type Tamper = Box<dyn FnMut(&View<'_>, &mut Decisions) + Send>;

/// How the planner behaves.
#[derive(Default)]
pub enum Mode {
    /// Plans as documented.
    #[default]
    Plan,
    /// Returns an error.
    Fail,
    /// Panics.
    Panic,
    /// Answers nothing.
    Silent,
    /// Plans, then lets the closure change the answer.
    Tamper(Tamper),
}

/// One call the planner received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// `GANTRY_RESERVE_*`.
    pub cause: u32,
    /// The subject's id (ADMIT, UPDATE).
    pub subject: Option<u64>,
    /// Reservations in the view.
    pub reservations: usize,
}

#[derive(Default)]
struct Shared {
    mode: Mode,
    calls: Vec<Seen>,
}

/// A test's hold on a planner: set its behaviour, read its calls.
#[derive(Clone, Default)]
pub struct Handle(Arc<Mutex<Shared>>);

impl Handle {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets how the planner behaves from the next call on.
    pub fn set(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// Plans, then lets `f` change the answer.
    pub fn tamper(&self, f: impl FnMut(&View<'_>, &mut Decisions) + Send + 'static) {
        self.set(Mode::Tamper(Box::new(f)));
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<Seen> {
        self.lock().calls.clone()
    }
}

/// Where in its window an atom goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// As early as it fits.
    Earliest,
    /// As late as it fits.
    Latest,
}

/// The test planner.
pub struct TestPlanner {
    handle: Handle,
    fit: Fit,
}

impl TestPlanner {
    /// An earliest-fit planner and the handle that steers it.
    pub fn earliest() -> (Self, Handle) {
        let handle = Handle::default();
        (TestPlanner { handle: handle.clone(), fit: Fit::Earliest }, handle)
    }

    /// A latest-fit planner (late, as GREE) and the handle that steers it.
    pub fn latest() -> (Self, Handle) {
        let handle = Handle::default();
        (TestPlanner { handle: handle.clone(), fit: Fit::Latest }, handle)
    }
}

impl Plugin for TestPlanner {
    const NAME: &'static CStr = c"test-planner";
    const VERSION: &'static CStr = c"0.1.0";
    const HOOKS: Hooks = Hooks { admit: false, order: false, place: false, rebalance: false, reserve: true };

    /// `{"fit": "latest"}` for a latest-fit planner; anything else is earliest fit.
    fn create(config: &str) -> Result<Self, PluginError> {
        Ok(if config.contains("latest") { TestPlanner::latest().0 } else { TestPlanner::earliest().0 })
    }

    fn reserve(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let mut shared = self.handle.lock();
        let subject = view.reservations.get(view.plan.subject as usize).map(|r| r.id);
        shared.calls.push(Seen { cause: view.plan.cause, subject, reservations: view.reservations.len() });
        match &mut shared.mode {
            Mode::Fail => return Err(PluginError::new("told to fail")),
            Mode::Panic => panic!("told to panic"),
            Mode::Silent => return Ok(()),
            Mode::Plan | Mode::Tamper(_) => {}
        }
        answer(view, out, self.fit)?;
        if let Mode::Tamper(f) = &mut shared.mode {
            f(view, out);
        }
        Ok(())
    }
}

/// Demand per dimension.
type Demand = [u128; 3];

/// A piece held, as demand over time.
#[derive(Debug, Clone, Copy)]
struct Held {
    start: u64,
    end: u64,
    demand: Demand,
}

fn demand(b: &GantryResources, n: u64) -> Demand {
    let n = u128::from(n);
    [u128::from(b.cpu_millis) * n, u128::from(b.memory_bytes) * n, u128::from(b.gpus) * n]
}

/// Whether `add` fits beside `held` over `[a, b)` under `cap`.
fn fits(held: &[Held], a: u64, b: u64, add: &Demand, cap: &Demand) -> bool {
    let mut instants = vec![a];
    instants.extend(held.iter().map(|h| h.start).filter(|&t| a < t && t < b));
    instants.iter().all(|&t| {
        let mut sum = *add;
        for h in held.iter().filter(|h| h.start <= t && t < h.end) {
            for (s, d) in sum.iter_mut().zip(h.demand) {
                *s += d;
            }
        }
        sum.iter().zip(cap).all(|(s, c)| s <= c)
    })
}

/// The definition of view reservation `i` and its atoms' bundles.
fn definition(view: &View<'_>, i: usize) -> Result<(Expr, Vec<GantryResources>), PluginError> {
    let d = view.plan.details.get(i).ok_or("no detail")?;
    let e = gantry_rdl::abi::from_nodes(view.plan.rdl_nodes, d.definition).map_err(|e| e.to_string())?;
    let bundles = e.atoms().iter().map(|a| a.bundle).collect();
    Ok((e, bundles))
}

/// What reservation `i`'s allocation holds, as demand.
fn held_by(view: &View<'_>, i: usize, bundles: &[GantryResources], from: u64) -> Vec<Held> {
    view.plan
        .allocation(i)
        .iter()
        .filter(|p| p.end_ms > from)
        .filter_map(|p| {
            let b = bundles.get(p.atom as usize)?;
            Some(Held { start: p.start_ms.max(from), end: p.end_ms, demand: demand(b, p.bundles) })
        })
        .collect()
}

fn count_atoms(e: &Expr) -> u32 {
    e.atoms().len() as u32
}

/// Where the atoms of one placement go: the side to fill from, the capacity, what is held.
struct Placer<'a> {
    fit: Fit,
    cap: Demand,
    held: &'a mut Vec<Held>,
    out: &'a mut Vec<GantryAllocation>,
}

impl Placer<'_> {
    /// Places `e` (atoms numbered from `base`) in `[lo, hi)`: earliest fit not before `bound`
    /// (returns where it ends), latest fit not after `bound` (returns where it starts).
    fn place(&mut self, e: &Expr, base: u32, lo: u64, hi: u64, bound: u64) -> Option<u64> {
        match e {
            Expr::Atom(a) => self.atom(a, base, lo, hi, bound),
            Expr::Window(w) => self.place(&w.inner, base, lo.max(w.start_ms), hi.min(w.end_ms), bound),
            Expr::Order(v) | Expr::All(v) => {
                let mut bases = Vec::with_capacity(v.len());
                let mut b = base;
                for x in v {
                    bases.push(b);
                    b += count_atoms(x);
                }
                let mut bound = bound;
                match self.fit {
                    Fit::Earliest => {
                        for (x, b) in v.iter().zip(bases) {
                            bound = self.place(x, b, lo, hi, bound)?;
                        }
                    }
                    Fit::Latest => {
                        for (x, b) in v.iter().zip(bases).rev() {
                            bound = self.place(x, b, lo, hi, bound)?;
                        }
                    }
                }
                Some(bound)
            }
            Expr::Any(v) => {
                let mut b = base;
                for x in v {
                    let (h, o) = (self.held.len(), self.out.len());
                    if let Some(t) = self.place(x, b, lo, hi, bound) {
                        return Some(t);
                    }
                    self.held.truncate(h);
                    self.out.truncate(o);
                    b += count_atoms(x);
                }
                None
            }
        }
    }

    /// Places one atom: the most bundles that fit somewhere, earliest or latest.
    fn atom(&mut self, a: &gantry_rdl::Atom, base: u32, lo: u64, hi: u64, bound: u64) -> Option<u64> {
        let g = u64::from(a.min_parallel.max(1));
        let gangs = u64::from(a.max_parallel) / g;
        for k in (1..=gangs).rev().map(|n| n * g) {
            let d = a.work.div_ceil(k).max(a.min_lease_ms).max(1);
            let add = demand(&a.bundle, k);
            let start = match self.fit {
                Fit::Earliest => {
                    let from = lo.max(bound);
                    let mut starts: Vec<u64> = vec![from];
                    starts.extend(self.held.iter().map(|h| h.end).filter(|&t| t > from));
                    starts.sort_unstable();
                    starts
                        .into_iter()
                        .find(|&t| t.saturating_add(d) <= hi && fits(self.held, t, t + d, &add, &self.cap))
                }
                Fit::Latest => {
                    let to = hi.min(bound);
                    let mut ends: Vec<u64> = vec![to];
                    ends.extend(self.held.iter().map(|h| h.start).filter(|&t| t < to));
                    ends.sort_unstable_by(|x, y| y.cmp(x));
                    ends.into_iter()
                        .filter(|&t| t >= d && t - d >= lo)
                        .find(|&t| fits(self.held, t - d, t, &add, &self.cap))
                        .map(|t| t - d)
                }
            };
            if let Some(t) = start {
                self.held.push(Held { start: t, end: t + d, demand: add });
                self.out.push(GantryAllocation {
                    reservation: 0,
                    atom: base,
                    start_ms: t,
                    end_ms: t + d,
                    bundles: k,
                });
                return Some(match self.fit {
                    Fit::Earliest => t + d,
                    Fit::Latest => t,
                });
            }
        }
        None
    }
}

/// Places `e` (a reservation's definition) from now on beside `held`: its pieces, or `None` if
/// it does not fit (then `held` is as it was).
fn place(view: &View<'_>, e: &Expr, fit: Fit, held: &mut Vec<Held>) -> Option<Vec<GantryAllocation>> {
    let now = view.now_ms;
    let before = held.len();
    let mut out = Vec::new();
    let mut placer = Placer { fit, cap: demand(&view.plan.capacity, 1), held, out: &mut out };
    let bound = match fit {
        Fit::Earliest => now,
        Fit::Latest => u64::MAX,
    };
    if placer.place(e, 0, now, u64::MAX, bound).is_none() {
        held.truncate(before);
        return None;
    }
    Some(out)
}

/// The planner's good answer.
pub fn answer(view: &View<'_>, out: &mut Decisions, fit: Fit) -> Result<(), PluginError> {
    let now = view.now_ms;
    let cap = demand(&view.plan.capacity, 1);
    let n = view.reservations.len();
    match view.plan.cause {
        GANTRY_RESERVE_ADMIT | GANTRY_RESERVE_UPDATE => {
            let s = view.plan.subject as usize;
            let mut held = Vec::new();
            for i in (0..n).filter(|&i| i != s) {
                let (_, bundles) = definition(view, i)?;
                held.extend(held_by(view, i, &bundles, now));
            }
            let (e, _) = definition(view, s)?;
            match place(view, &e, fit, &mut held) {
                Some(pieces) => out.plan_reservation(view.plan.subject, pieces),
                None => out.reject_reservation(view.plan.subject, NO_ROOM),
            }
        }
        GANTRY_RESERVE_REPLAN => {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| (view.plan.details[i].accepted_ms, view.reservations[i].id));
            let mut held = Vec::new();
            for i in order {
                let (e, bundles) = definition(view, i)?;
                let mine = held_by(view, i, &bundles, now);
                let keeps = mine.iter().all(|h| fits(&held, h.start, h.end, &h.demand, &cap))
                    && fits_together(&held, &mine, &cap);
                if keeps {
                    held.extend(mine);
                    continue;
                }
                let started = view.plan.allocation(i).iter().any(|p| p.start_ms < now);
                match (!started).then(|| place(view, &e, fit, &mut held)).flatten() {
                    Some(pieces) => out.plan_reservation(i as u32, pieces),
                    None => out.reject_reservation(i as u32, GIVEN_UP),
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether `mine` (pieces that may overlap each other) fits beside `held`.
fn fits_together(held: &[Held], mine: &[Held], cap: &Demand) -> bool {
    let mut all = held.to_vec();
    for h in mine {
        if !fits(&all, h.start, h.end, &h.demand, cap) {
            return false;
        }
        all.push(*h);
    }
    true
}
