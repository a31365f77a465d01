//! The plugin: the Rayon planner behind the ABI 1.3 `reserve` hook.
//!
//! The host keeps reservations as records and asks this plugin, at once, for an allocation
//! whenever one is submitted (ADMIT) or updated (UPDATE), for moves when the plan's capacity
//! drops under what is accepted (REPLAN), and periodically for a better layout (OPTIMIZE). The
//! plugin keeps its own [`Plan`] as a mirror of the accepted allocations the
//! view shows ([`mirror`]); every answer updates the mirror as if the host accepted it, and the
//! next call finds out cheaply whether it did. See `plugins/rayon/README.md`.

pub mod mirror;
mod optimize;
pub mod started;

use std::collections::HashMap;

use gantry_rdl::Expr;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, PluginError, View};

use crate::agents;
use crate::config::{Optimizer, RayonConfig, Replanner};
use crate::plan::Plan;
use crate::replan::{self, ReservationInfo};
use mirror::{DEFAULT_HORIZON_MS, DEFAULT_STEP_MS, Entry, Mirror, canonical};
use optimize::Background;

/// REJECT reason: no placement fits the reservation's windows in the plan as it stands.
pub const REASON_NO_ROOM: u32 = 1;
/// REJECT reason: its deadline has passed.
pub const REASON_DEADLINE_PASSED: u32 = 2;
/// REJECT reason: its definition in the view cannot be read back (a host bug).
pub const REASON_BAD_DEFINITION: u32 = 3;
/// REJECT reason (REPLAN): it could not be kept after the capacity loss and was given up.
pub const REASON_GIVEN_UP: u32 = 4;
/// REJECT reason (UPDATE): its allocation has already begun, so it cannot be re-planned anew.
pub const REASON_STARTED: u32 = 5;

/// What the plugin has done since it was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// `reserve` calls, per cause (ADMIT, UPDATE, REPLAN, OPTIMIZE).
    pub calls: [u64; 4],
    /// ADMIT and UPDATE answered with a plan.
    pub planned: u64,
    /// ADMIT and UPDATE answered with a rejection.
    pub rejected: u64,
    /// Plans built from the view (the first call, a new origin, a new step or horizon).
    pub rebuilds: u64,
    /// Calls that found the view different from the mirror and re-synchronised it.
    pub syncs: u64,
    /// Reservations taken out or put in by those.
    pub synced: u64,
    /// Reservations moved by REPLAN answers.
    pub replan_moved: u64,
    /// Reservations given up by REPLAN answers.
    pub replan_given_up: u64,
    /// Optimiser runs finished.
    pub optimizer_runs: u64,
    /// Reservations moved by OPTIMIZE answers.
    pub optimizer_moved: u64,
    /// Background results dropped because the plan changed while they were computed.
    pub optimizer_stale: u64,
}

/// What the latest REPLAN did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplanReport {
    /// The strategy whose outcome was kept (the replanner's name for YARN's).
    pub strategy: &'static str,
    /// Reservations holding an overcommitted dimension at an overcommitted step.
    pub affected: usize,
    /// Reservations moved (answered with a plan).
    pub moved: usize,
    /// Reservations given up.
    pub given_up: usize,
    /// Whether the plan still overcommits afterwards.
    pub overcommitted: bool,
}

/// The Rayon planner as a plugin.
#[derive(Debug)]
pub struct Rayon {
    config: RayonConfig,
    mirror: Option<Mirror>,
    stats: Stats,
    last_replan: Option<ReplanReport>,
    background: Background,
}

impl Rayon {
    /// An instance with this configuration.
    pub fn with_config(config: RayonConfig) -> Rayon {
        Rayon {
            config,
            mirror: None,
            stats: Stats::default(),
            last_replan: None,
            background: Background::default(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &RayonConfig {
        &self.config
    }

    /// What it has done so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// What the latest REPLAN did.
    pub fn last_replan(&self) -> Option<&ReplanReport> {
        self.last_replan.as_ref()
    }

    /// The mirror's plan (plan time from [`Rayon::origin_ms`]), once a call has built it.
    pub fn plan(&self) -> Option<&Plan> {
        self.mirror.as_ref().map(|m| &m.plan)
    }

    /// The plan's origin, engine ms.
    pub fn origin_ms(&self) -> Option<u64> {
        self.mirror.as_ref().map(Mirror::origin_ms)
    }

    /// The `reserve` hook's work.
    pub fn reserve_view(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let plan = &view.plan;
        if plan.details.len() != view.reservations.len() {
            return Err(PluginError::new(format!(
                "rayon: the view has {} reservations but {} reservation details",
                view.reservations.len(),
                plan.details.len()
            )));
        }
        let cause = plan.cause;
        if let Some(n) = cause.checked_sub(1).and_then(|c| self.stats.calls.get_mut(c as usize)) {
            *n += 1;
        }
        self.prepare(view)?;
        match cause {
            GANTRY_RESERVE_ADMIT | GANTRY_RESERVE_UPDATE => self.plan_subject(view, out),
            GANTRY_RESERVE_REPLAN => self.replan(view, out),
            GANTRY_RESERVE_OPTIMIZE => self.optimize(view, out),
            other => Err(PluginError::new(format!("rayon: unknown reserve cause {other}"))),
        }
    }

    /// Makes the mirror serve this call: built (or rebuilt at a new origin) when needed, expired
    /// reservations dropped, the capacity from now on set, and re-synchronised with the view
    /// only when it is not in step ([`Mirror::in_step`]).
    fn prepare(&mut self, view: &View<'_>) -> Result<(), PluginError> {
        let now = view.now_ms;
        let step = if view.plan.step_ms > 0 { view.plan.step_ms } else { DEFAULT_STEP_MS };
        let horizon = if view.plan.horizon_ms > 0 { view.plan.horizon_ms } else { DEFAULT_HORIZON_MS };
        let fresh = !self.mirror.as_ref().is_some_and(|m| m.serves(now, step, horizon));
        if fresh {
            self.mirror = Some(Mirror::new(now, step, horizon, view.plan.capacity)?);
            self.stats.rebuilds += 1;
        }
        let Some(m) = self.mirror.as_mut() else { unreachable!("the mirror was just set") };
        m.expire(now);
        m.set_capacity(now, view.plan.capacity);
        if fresh || !m.in_step(view) {
            let n = m.sync(view)?;
            if !fresh {
                self.stats.syncs += 1;
                self.stats.synced += n as u64;
            }
        }
        m.confirmed();
        Ok(())
    }

    fn mirror(&mut self) -> Result<&mut Mirror, PluginError> {
        self.mirror.as_mut().ok_or_else(|| PluginError::new("rayon: no plan"))
    }

    /// ADMIT and UPDATE: plan the subject with its (new) definition, or reject it.
    fn plan_subject(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let s = view.plan.subject;
        let (Some(r), Some(d)) = (view.reservations.get(s as usize), view.plan.details.get(s as usize))
        else {
            return Err(PluginError::new(format!(
                "rayon: the subject {s} is not one of the view's {} reservations",
                view.reservations.len()
            )));
        };
        let now = view.now_ms;
        let update = view.plan.cause == GANTRY_RESERVE_UPDATE;
        let agent = self.config.agent;
        let reject = |this: &mut Rayon, out: &mut Decisions, reason: u32| {
            this.stats.rejected += 1;
            out.reject_reservation(s, reason);
            Ok(())
        };
        if update && View::range(view.plan.allocations, d.allocation).iter().any(|p| p.start_ms < now) {
            return reject(self, out, REASON_STARTED);
        }
        let Ok(abs) = mirror::definition(view, s as usize) else {
            return reject(self, out, REASON_BAD_DEFINITION);
        };
        if d.deadline_ms <= now {
            return reject(self, out, REASON_DEADLINE_PASSED);
        }
        let m = self.mirror()?;
        // ADMIT: a NEW reservation is not in the mirror (unless an id came back); UPDATE: its
        // old allocation goes out first and comes back if the new definition does not fit.
        let old = m.remove(r.id);
        let expr = m.plan_expr(&abs, now);
        match agents::admit(&mut m.plan, &expr, agent, r.id) {
            Ok(allocation) => {
                let pieces = m.to_engine(&allocation, |k| u32::try_from(k).ok());
                out.plan_reservation(s, pieces.iter().copied());
                let bundles = abs.atoms().iter().map(|a| a.bundle).collect();
                m.record(r.id, Entry::new(d.deadline_ms, bundles, pieces));
                self.stats.planned += 1;
                Ok(())
            }
            Err(_) if update => match make_room(m, view, s as usize, &abs, agent) {
                Some(moved) => {
                    for (index, entry) in moved {
                        out.plan_reservation(index as u32, entry.pieces.iter().copied());
                        let id = view.reservations[index].id;
                        m.record(id, entry);
                    }
                    self.stats.planned += 1;
                    Ok(())
                }
                None => {
                    if let Some((entry, steps)) = old {
                        m.put_back(r.id, entry, steps);
                    }
                    reject(self, out, REASON_NO_ROOM)
                }
            },
            Err(_) => reject(self, out, REASON_NO_ROOM),
        }
    }

    /// REPLAN: re-place what the capacity loss overcommits from now on (see [`started`] for what
    /// a reservation that has begun keeps).
    fn replan(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let now = view.now_ms;
        let agent = self.config.agent;
        let replanner = self.config.replanner;
        let capacity = view.plan.capacity;
        let m = self.mirror.as_mut().ok_or_else(|| PluginError::new("rayon: no plan"))?;
        // A plan of what is held from now on only (the past does not overcommit anything).
        let mut w = Plan::new(m.plan.step_ms(), m.plan.steps(), &capacity)
            .map_err(|e| PluginError::new(format!("rayon: {e}")))?;
        let mut infos = Vec::new();
        let mut splits: HashMap<u64, (u32, started::Split)> = HashMap::new();
        for (i, (r, d)) in view.reservations.iter().zip(view.plan.details).enumerate() {
            let Some(entry) = m.get(r.id) else { continue };
            let future: Vec<GantryAllocation> = entry
                .pieces
                .iter()
                .filter(|p| p.end_ms > now)
                .map(|p| GantryAllocation { start_ms: p.start_ms.max(now), ..*p })
                .collect();
            let steps = m.to_steps(&future, &entry.bundles);
            if steps.is_empty() {
                continue;
            }
            let _ = w.restore(r.id, steps);
            let abs = mirror::definition(view, i)
                .map_err(|e| PluginError::new(format!("rayon: reservation {}: its definition: {e}", r.id)))?;
            let split = started::split(&abs, d.deadline_ms, &entry.pieces, now, m);
            infos.push(ReservationInfo::new(r.id, split.expr.clone(), i64::from(d.priority), d.accepted_ms));
            splits.insert(r.id, (i as u32, split));
        }
        let outcome = match replanner {
            Replanner::Rayon => replan::replan(&mut w, &infos, agent),
            Replanner::YarnSimple => replan::replan_yarn_simple(&mut w, &infos),
        };
        let mut moved = 0;
        for mv in &outcome.moved {
            let Some((index, split)) = splits.get(&mv.id) else { continue };
            let Some((entry, _)) = m.remove(mv.id) else { continue };
            let new = m.to_engine(&mv.allocation, |k| split.map.get(k).copied().flatten());
            let pieces = canonical(split.kept.iter().copied().chain(new));
            if pieces != entry.pieces {
                out.plan_reservation(*index, pieces.iter().copied());
                moved += 1;
            }
            m.insert(mv.id, Entry::new(entry.deadline_ms, entry.bundles, pieces));
        }
        for id in &outcome.rejected {
            let Some((index, _)) = splits.get(id) else { continue };
            out.reject_reservation(*index, REASON_GIVEN_UP);
            m.remove(*id);
        }
        self.stats.replan_moved += moved as u64;
        self.stats.replan_given_up += outcome.rejected.len() as u64;
        self.last_replan = Some(ReplanReport {
            strategy: outcome.strategy,
            affected: outcome.affected.len(),
            moved,
            given_up: outcome.rejected.len(),
            overcommitted: outcome.overcommitted.is_some(),
        });
        Ok(())
    }

    /// OPTIMIZE: the offline MILP, as configured.
    fn optimize(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        match self.config.optimizer {
            Optimizer::Off => Ok(()),
            Optimizer::Inline => {
                let m = self.mirror.as_ref().ok_or_else(|| PluginError::new("rayon: no plan"))?;
                let result = optimize::Job::new(view, m, &self.config)?.run(&m.plan);
                self.stats.optimizer_runs += 1;
                self.apply_optimized(view, result, out)
            }
            Optimizer::Background => {
                if let Some(result) = self.background.finished() {
                    self.stats.optimizer_runs += 1;
                    let current = self.mirror()?.generation();
                    if result.key == (current, view.plan.capacity) && result.still_movable(view.now_ms) {
                        self.apply_optimized(view, result, out)?;
                    } else {
                        self.stats.optimizer_stale += 1;
                    }
                }
                if self.background.idle() {
                    let m = self.mirror.as_ref().ok_or_else(|| PluginError::new("rayon: no plan"))?;
                    let job = optimize::Job::new(view, m, &self.config)?;
                    self.background.start(job, &m.plan)?;
                }
                Ok(())
            }
        }
    }

    /// Answers an optimiser's moves and puts them in the mirror.
    fn apply_optimized(
        &mut self,
        view: &View<'_>,
        result: optimize::Optimized,
        out: &mut Decisions,
    ) -> Result<(), PluginError> {
        let index: HashMap<u64, u32> =
            view.reservations.iter().enumerate().map(|(i, r)| (r.id, i as u32)).collect();
        let m = self.mirror()?;
        let mut moved = 0;
        for (id, pieces) in result.moves {
            let (Some(&i), Some(old)) = (index.get(&id), m.get(id)) else { continue };
            if old.pieces == pieces {
                continue;
            }
            let entry = Entry::new(old.deadline_ms, old.bundles.clone(), pieces);
            out.plan_reservation(i, entry.pieces.iter().copied());
            m.insert(id, entry);
            moved += 1;
        }
        self.stats.optimizer_moved += moved;
        Ok(())
    }
}

/// UPDATE when the new definition does not fit as the plan stands: as the scheduler's linked-in
/// planner did before it became a plugin, take out every other reservation that has not started,
/// place the updated one, then put the others back most important first (priority, then the
/// earliest accepted). Returns the new entries of the subject (first) and of every reservation
/// whose allocation changed, by view index; or `None`, with the mirror as it was (apart from the
/// subject, which the caller puts back), when one of them no longer fits.
fn make_room(
    m: &mut Mirror,
    view: &View<'_>,
    subject: usize,
    abs: &Expr,
    agent: agents::Agent,
) -> Option<Vec<(usize, Entry)>> {
    let now = view.now_ms;
    let mut waiting: Vec<usize> = (0..view.reservations.len())
        .filter(|&i| i != subject && view.reservations[i].state == GANTRY_RESERVATION_ACCEPTED)
        .filter(|&i| {
            let pieces = view.plan.allocation(i);
            !pieces.is_empty() && pieces.iter().all(|p| p.start_ms > now)
        })
        .collect();
    if waiting.is_empty() {
        return None;
    }
    let detail = |i: usize| view.plan.details[i];
    waiting.sort_by_key(|&i| {
        (std::cmp::Reverse(detail(i).priority), detail(i).accepted_ms, view.reservations[i].id)
    });
    let mut taken = Vec::with_capacity(waiting.len());
    for &i in &waiting {
        if let Some(old) = m.remove(view.reservations[i].id) {
            taken.push((i, old));
        }
    }
    let mut placed: Vec<(usize, Entry)> = Vec::with_capacity(waiting.len() + 1);
    let mut place = |m: &mut Mirror, i: usize, abs: &Expr| -> bool {
        let expr = m.plan_expr(abs, now);
        match agents::admit(&mut m.plan, &expr, agent, view.reservations[i].id) {
            Ok(allocation) => {
                let pieces = m.to_engine(&allocation, |k| u32::try_from(k).ok());
                let bundles = abs.atoms().iter().map(|a| a.bundle).collect();
                placed.push((i, Entry::new(detail(i).deadline_ms, bundles, pieces)));
                true
            }
            Err(_) => false,
        }
    };
    let mut fits = place(m, subject, abs);
    for &(i, _) in &taken {
        if !fits {
            break;
        }
        fits = mirror::definition(view, i).is_ok_and(|e| place(m, i, &e));
    }
    if !fits {
        // Undo: what was placed goes out of the plan, what was taken comes back as it was.
        for (i, _) in &placed {
            let _ = m.plan.remove(view.reservations[*i].id);
        }
        for (i, (entry, steps)) in taken {
            m.put_back(view.reservations[i].id, entry, steps);
        }
        return None;
    }
    // Reservations that came back where they were need no answer; their entries return as they
    // were, with the plan pieces the agent gave them again.
    let mut changed = Vec::with_capacity(placed.len());
    for (k, (i, entry)) in placed.into_iter().enumerate() {
        let same = k > 0 && mirror::canonical(view.plan.allocation(i).iter().copied()) == entry.pieces;
        if same {
            m.record(view.reservations[i].id, entry);
        } else {
            changed.push((i, entry));
        }
    }
    Some(changed)
}
