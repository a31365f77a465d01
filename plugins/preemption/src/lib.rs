//! # gantry-preemption
//!
//! Proportional capacity preemption on hierarchical queues, after YARN-569's
//! `ProportionalCapacityPreemptionPolicy` (seed `004`; `README.md` beside this crate has the
//! settings and what differs from YARN). Queues may lend their idle guaranteed capacity to
//! others; when a queue wants its guarantee back, this plugin takes containers back from the
//! queues that hold more than their fair share, so the lender gets its capacity quickly while the
//! cluster stays busy.
//!
//! Every `monitoring_interval_ms` (a *round*, on the engine's clock) the `rebalance` hook:
//!
//! 1. computes the **ideal assignment** of the cluster to the queue tree ([`ideal`]): each queue
//!    gets at least min(guarantee, held + pending), and what is left goes to the queues that
//!    still want more in proportion to their guarantees, up to their maxima, level by level;
//!    only pending requests that could run on room the preemption would free are counted;
//! 2. asks each leaf holding more than its ideal × (1 + `max_ignored_over_capacity`) for
//!    (held − ideal), scaled so that all leaves together give at most
//!    `total_preemption_per_round` of the cluster, times `natural_termination_factor`, and never
//!    more in total than the under-served queues lack beyond free room ([`plan::amounts`]);
//! 3. selects **victims** from those leaves: newest application first, its newest container
//!    first, masters last, only on nodes where the freed room helps, never taking a leaf below
//!    its guarantee ([`plan::plan`]);
//! 4. **marks** the selected containers (`GANTRY_DECISION_MARK_PREEMPT`: told, still running) on
//!    every call, and **preempts** (`GANTRY_DECISION_PREEMPT`, SIGTERM then SIGKILL after
//!    `kill_grace_ms`) a container that has stayed selected for `max_wait_before_kill_ms`. A
//!    container that is no longer selected is no longer marked, which cancels its mark. With
//!    `observe_only` it marks and counts, and never preempts.
//!
//! The `order` hook puts the pending requests of the leaf queue furthest below its guarantee
//! first, so room freed by preemption goes to the queue it was freed for.

mod amounts;
mod config;
pub mod ideal;
pub mod plan;
#[cfg(test)]
mod testkit;

pub use config::{Calculator, PreemptionConfig};
pub use plan::{Measure, Plan, QueuePlan};

use core::ffi::CStr;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use std::collections::BTreeMap;

/// The crate version as a NUL-terminated string, checked at compile time.
const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
};

/// A container the policy has selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Selected {
    /// When it was first selected (continuously since).
    since_ms: u64,
    /// In observe-only mode: its wait is over and it was counted as one that would be preempted.
    counted: bool,
}

/// What the plugin has done since it was created.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Rounds computed.
    pub rounds: u64,
    /// Containers selected for the first time (each counted once per continuous selection).
    pub selected: u64,
    /// Selections dropped while the container still ran (no longer needed).
    pub cancelled: u64,
    /// Containers preempted.
    pub preempted: u64,
    /// In observe-only mode: containers whose wait ran out, which would have been preempted.
    pub would_preempt: u64,
    /// Resources of the preempted containers, by queue path.
    pub reclaimed: BTreeMap<String, GantryResources>,
}

/// The plugin. See the crate documentation.
#[derive(Debug)]
pub struct Preemption {
    config: PreemptionConfig,
    /// Selected containers by id.
    selected: BTreeMap<u64, Selected>,
    /// When the next round is due; `None` before the first.
    next_round_ms: Option<u64>,
    /// Per leaf queue path: the fraction of a container its last target left untaken
    /// ([`amounts`]), added to its next one.
    carry: BTreeMap<String, f64>,
    stats: Stats,
    last_plan: Option<Plan>,
}

impl Preemption {
    /// An instance with this configuration.
    pub fn with_config(config: PreemptionConfig) -> Preemption {
        Preemption {
            config,
            selected: BTreeMap::new(),
            next_round_ms: None,
            carry: BTreeMap::new(),
            stats: Stats::default(),
            last_plan: None,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &PreemptionConfig {
        &self.config
    }

    /// What it has done so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The figures of the latest round.
    pub fn last_plan(&self) -> Option<&Plan> {
        self.last_plan.as_ref()
    }

    /// Ids of the containers selected now, with the time each was first selected.
    pub fn selected(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.selected.iter().map(|(id, s)| (*id, s.since_ms))
    }

    /// The `rebalance` hook's work, on any view.
    pub fn rebalance_view(&mut self, view: &View<'_>, out: &mut Decisions) {
        let now = view.now_ms;
        let index: BTreeMap<u64, u32> = view
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| plan::selectable(view, c))
            .map(|(i, c)| (c.id, i as u32))
            .collect();
        if self.next_round_ms.is_none_or(|t| now >= t) {
            self.next_round_ms = Some(now.saturating_add(self.config.monitoring_interval_ms));
            let previous = &self.selected;
            let carry = &self.carry;
            let p = plan::plan(
                view,
                &self.config,
                |id| previous.contains_key(&id),
                |q| carry.get(view.str(view.queues[q].name)).copied().unwrap_or(0.0),
            );
            self.carry = p
                .queues
                .iter()
                .enumerate()
                .filter(|(_, qp)| qp.carry > 0.0)
                .map(|(q, qp)| (view.str(view.queues[q].name).to_owned(), qp.carry))
                .collect();
            let mut next = BTreeMap::new();
            for &v in &p.victims {
                let id = view.containers[v as usize].id;
                let entry = match self.selected.get(&id) {
                    Some(s) => *s,
                    None => {
                        self.stats.selected += 1;
                        Selected { since_ms: now, counted: false }
                    }
                };
                next.insert(id, entry);
            }
            self.stats.cancelled +=
                self.selected.keys().filter(|id| index.contains_key(id) && !next.contains_key(id)).count()
                    as u64;
            self.selected = next;
            self.stats.rounds += 1;
            self.last_plan = Some(p);
        } else {
            self.selected.retain(|id, _| index.contains_key(id));
        }

        let mut done = Vec::new();
        for (id, s) in &mut self.selected {
            let Some(&i) = index.get(id) else {
                done.push(*id);
                continue;
            };
            let waited = now.saturating_sub(s.since_ms) >= self.config.max_wait_before_kill_ms;
            if waited && !self.config.observe_only {
                out.preempt(i, self.config.kill_grace_ms);
                self.stats.preempted += 1;
                let c = &view.containers[i as usize];
                let queue = view
                    .apps
                    .get(c.app as usize)
                    .and_then(|a| view.queues.get(a.queue as usize))
                    .map(|q| view.str(q.name).to_owned())
                    .unwrap_or_default();
                let total = self.stats.reclaimed.entry(queue).or_default();
                *total = total.plus(&c.resources);
                done.push(*id);
            } else {
                if waited && !s.counted {
                    s.counted = true;
                    self.stats.would_preempt += 1;
                }
                out.mark_preempt(i);
            }
        }
        for id in done {
            self.selected.remove(&id);
        }
    }

    /// The `order` hook's work: the leaves take turns by need. The next request is the first
    /// pending one (in the engine's order) of the leaf whose usage, plus what the requests
    /// already ordered ask for, is the smallest share of its guarantee (for a leaf without one,
    /// of its ideal share; last if that is nothing too) — between equals a leaf measured against
    /// its guarantee first, then the engine's order. So room freed in one cycle is shared by the
    /// under-served queues request by request, as YARN re-sorts its queues after each
    /// assignment, instead of going wholly to the queue furthest below at the cycle's start; and
    /// room `rebalance` freed for a guarantee goes to it, not to a leaf level with it by its
    /// ideal share. (Ranking every leaf below its guarantee before all others fixes that too,
    /// but hands best-effort queues room that reservations between their pieces could have
    /// used: in `rayon-swim` with YARN's preemption settings, 93.9 % of GREE's accepted jobs on
    /// time instead of 96.5 %.)
    pub fn order_view(&self, view: &View<'_>, out: &mut Decisions) {
        let m = Measure::new(self.config.resource_calculator, plan::cluster_of(view));
        // A leaf without a guarantee is measured against its ideal share instead (what its
        // guaranteed siblings leave idle, which `rebalance` reclaims for it): ranking it last
        // would hand the room `rebalance` freed for it straight back to the borrower, round
        // after round (found with Rayon's reservation queues, guaranteed nothing until their
        // allocation starts).
        let inputs: Vec<crate::ideal::QueueInput> = view
            .queues
            .iter()
            .enumerate()
            .map(|(q, rec)| {
                let leaf = rec.flags & GANTRY_QUEUE_LEAF != 0;
                crate::ideal::QueueInput {
                    parent: (rec.parent != GANTRY_NONE).then_some(rec.parent as usize).filter(|&p| p < q),
                    guarantee: m.of(&rec.absolute_guaranteed),
                    maximum: m.of(&rec.absolute_maximum),
                    held: if leaf { m.of(&rec.used) } else { 0.0 },
                    demand: if leaf { m.of(&rec.used.plus(&rec.pending)) } else { 0.0 },
                    keeps_all: leaf && self.config.preemption_disabled(view.str(rec.name)),
                }
            })
            .collect();
        let ideal = crate::ideal::ideal_assignment(&inputs, m.total());
        // Per leaf: its guarantee (or ideal), its projected usage, and its pending requests in order.
        let mut leaves: Vec<TurnTaker> = Vec::new();
        let mut leaf_of: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        let mut orphans = Vec::new();
        for (pos, &ri) in view.pending.iter().enumerate() {
            let queue =
                view.requests.get(ri as usize).and_then(|r| view.apps.get(r.app as usize)).map(|a| a.queue);
            let Some(q) = queue.and_then(|q| view.queues.get(q as usize).map(|rec| (q, rec))) else {
                orphans.push(ri);
                continue;
            };
            let slot = *leaf_of.entry(q.0).or_insert_with(|| {
                let guarantee = m.of(&q.1.absolute_guaranteed);
                let share =
                    if guarantee > 0.0 { guarantee } else { ideal.get(q.0 as usize).copied().unwrap_or(0.0) };
                leaves.push(TurnTaker {
                    share,
                    guaranteed: guarantee > 0.0,
                    used: m.of(&q.1.used),
                    requests: Default::default(),
                });
                leaves.len() - 1
            });
            leaves[slot].requests.push_back((pos, ri));
        }
        loop {
            let next = leaves
                .iter()
                .enumerate()
                .filter_map(|(k, leaf)| leaf.requests.front().map(|&(pos, _)| (leaf.rank(), pos, k)))
                .min_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.0.1.cmp(&b.0.1)).then(a.1.cmp(&b.1)));
            let Some((_, _, k)) = next else { break };
            let Some((_, ri)) = leaves[k].requests.pop_front() else { break };
            if let Some(r) = view.requests.get(ri as usize) {
                leaves[k].used += m.of(&r.resources) * f64::from(r.count.saturating_sub(r.placed));
            }
            out.order(ri);
        }
        for ri in orphans {
            out.order(ri);
        }
    }
}

/// A leaf in `order`'s turns: what it is measured against, what it holds (plus what was
/// ordered for it), its pending requests in the engine's order (position, request index).
struct TurnTaker {
    share: f64,
    /// `share` is its guarantee (not its ideal share).
    guaranteed: bool,
    used: f64,
    requests: std::collections::VecDeque<(usize, u32)>,
}

impl TurnTaker {
    /// Smaller goes first: usage over share (a leaf with neither guarantee nor ideal share
    /// last), and between equals a leaf measured against its guarantee before one measured
    /// against its ideal share.
    fn rank(&self) -> (f64, u8) {
        let ratio = if self.share > 0.0 { self.used / self.share } else { f64::INFINITY };
        (ratio, u8::from(!self.guaranteed))
    }
}

impl Plugin for Preemption {
    const NAME: &'static CStr = c"preemption";
    const VERSION: &'static CStr = VERSION;
    const HOOKS: Hooks = Hooks { order: true, rebalance: true, ..Hooks::NONE };

    fn create(config: &str) -> Result<Self, PluginError> {
        PreemptionConfig::parse(config).map(Preemption::with_config)
    }

    fn order(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.order_view(view, out);
        Ok(())
    }

    fn rebalance(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.rebalance_view(view, out);
        Ok(())
    }
}

gantry_sdk::export_plugin!(Preemption);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{Cluster, gib};

    /// The seed's first scenario (10 × 10 GiB; B 20 % holds everything, A 80 % wants it all);
    /// without A's request when `demand` is false.
    fn scenario_with(demand: bool) -> Cluster {
        let mut c = Cluster::of_nodes(10, gib(10));
        let a = c.queue("root.a", 0, 0.8, 1.0);
        let b = c.queue("root.b", 0, 0.2, 1.0);
        let app_b = c.app(b, 0);
        for i in 0..100u32 {
            c.container(app_b, i / 10, gib(1), u64::from(i), false);
        }
        let app_a = c.app(a, 400_000);
        if demand {
            c.pending(app_a, gib(1), 100, &[]);
        }
        c
    }

    fn call(p: &mut Preemption, c: &mut Cluster, now_ms: u64) -> Vec<(u32, u32, u64)> {
        c.now_ms = now_ms;
        let mut out = Decisions::new();
        p.rebalance_view(&c.view(), &mut out);
        out.as_slice().iter().map(|d| (d.kind, d.subject, d.value)).collect()
    }

    fn marks(ids: &[u32]) -> Vec<(u32, u32, u64)> {
        ids.iter().map(|&i| (GANTRY_DECISION_MARK_PREEMPT, i, 0)).collect()
    }

    #[test]
    fn marked_every_call_preempted_after_the_wait() {
        let mut c = scenario_with(true);
        let mut p = Preemption::with_config(PreemptionConfig::default());
        let range = |from: u32| (from..100).collect::<Vec<u32>>();
        // Round at 0: two containers (2 GiB, see plan.rs) marked. Containers are indexed by id
        // order in the decisions.
        assert_eq!(call(&mut p, &mut c, 0), marks(&[98, 99]));
        // Between rounds the marks are repeated, or the engine would cancel them.
        assert_eq!(call(&mut p, &mut c, 1_000), marks(&[98, 99]));
        // Each round adds two more: the marked ones count as being given back (amounts.rs).
        for (t, from) in [(3_000, 96), (6_000, 94), (9_000, 92), (12_000, 90), (14_999, 90)] {
            assert_eq!(call(&mut p, &mut c, t), marks(&range(from)), "at {t}");
        }
        // 15 s after the first two were selected: they are preempted with the 250 ms grace, the
        // others stay marked, and the round adds two more.
        let mut want = marks(&(88..98).collect::<Vec<u32>>());
        want.extend([(GANTRY_DECISION_PREEMPT, 98, 250), (GANTRY_DECISION_PREEMPT, 99, 250)]);
        assert_eq!(call(&mut p, &mut c, 15_000), want);
        assert_eq!(p.stats().preempted, 2);
        assert_eq!(p.stats().reclaimed.get("root.b"), Some(&gib(2)));
        assert_eq!(p.stats().selected, 12);
        assert_eq!(p.stats().rounds, 6);
        // The engine now shows them stopping; each selection keeps the time it was first made.
        c.container_state(98, GANTRY_CONTAINER_STOPPING);
        c.container_state(99, GANTRY_CONTAINER_STOPPING);
        let since: Vec<(u64, u64)> = p.selected().collect();
        assert_eq!(since[..2], [(5088, 15_000), (5089, 15_000)]);
        assert_eq!(since[since.len() - 2..], [(5096, 3_000), (5097, 3_000)]);
    }

    #[test]
    fn marks_are_cancelled_when_the_demand_leaves() {
        let mut c = scenario_with(true);
        let mut p = Preemption::with_config(PreemptionConfig::default());
        assert_eq!(call(&mut p, &mut c, 0), marks(&[98, 99]));
        // A's request goes away (its app ended, say). Until the next round the marks stay…
        let mut c = scenario_with(false);
        assert_eq!(call(&mut p, &mut c, 1_000), marks(&[98, 99]));
        // …and the round at 3 s selects nothing: no marks, so the engine drops them.
        assert_eq!(call(&mut p, &mut c, 3_000), vec![]);
        assert_eq!(p.stats().cancelled, 2);
        // Nothing is ever preempted.
        assert_eq!(call(&mut p, &mut c, 20_000), vec![]);
        assert_eq!(p.stats().preempted, 0);
    }

    #[test]
    fn observe_only_marks_and_counts_but_never_preempts() {
        let mut c = scenario_with(true);
        let cfg = PreemptionConfig { observe_only: true, ..PreemptionConfig::default() };
        let mut p = Preemption::with_config(cfg);
        // The marks accumulate two a round (nothing is ever killed, so they stay) up to B's
        // whole excess of 80 GiB.
        for (round, t) in (0..=60_000).step_by(3_000).enumerate() {
            let marked = (2 * (round as u32 + 1)).min(80);
            assert_eq!(call(&mut p, &mut c, t), marks(&(100 - marked..100).collect::<Vec<u32>>()), "at {t}");
        }
        assert_eq!(p.stats().preempted, 0);
        // Those selected 15 s or more before the last round would have been preempted.
        assert_eq!(p.stats().would_preempt, 2 * 16);
        assert_eq!(p.stats().selected, 42);
        assert!(p.stats().reclaimed.is_empty());
    }

    #[test]
    fn rounds_follow_the_monitoring_interval_not_the_calls() {
        let mut c = scenario_with(true);
        let cfg = PreemptionConfig { monitoring_interval_ms: 10_000, ..PreemptionConfig::default() };
        let mut p = Preemption::with_config(cfg);
        for t in [0, 1_000, 3_000, 9_999] {
            call(&mut p, &mut c, t);
        }
        assert_eq!(p.stats().rounds, 1);
        call(&mut p, &mut c, 10_000);
        assert_eq!(p.stats().rounds, 2);
        // A container selected but gone between rounds is dropped, not marked (the second round
        // selected four: two at 0, two more at 10 s).
        c.container_state(99, GANTRY_CONTAINER_KILLED);
        assert_eq!(call(&mut p, &mut c, 11_000), marks(&[96, 97, 98]));
    }

    #[test]
    fn no_wait_preempts_at_once() {
        let mut c = scenario_with(true);
        let cfg =
            PreemptionConfig { max_wait_before_kill_ms: 0, kill_grace_ms: 0, ..PreemptionConfig::default() };
        let mut p = Preemption::with_config(cfg);
        assert_eq!(
            call(&mut p, &mut c, 0),
            vec![(GANTRY_DECISION_PREEMPT, 98, 0), (GANTRY_DECISION_PREEMPT, 99, 0)]
        );
    }

    #[test]
    fn order_puts_the_queue_furthest_below_its_guarantee_first() {
        // Queues x (50 %), y (30 %), z (20 %), w (no guarantee) of 10 GiB; x holds 4 (0.8 of its
        // 5), y holds 0, z holds 3 (1.5 of its 2), w holds 1.
        let mut c = Cluster::new();
        c.node("n0", gib(10), &[]);
        let x = c.queue("root.x", 0, 0.5, 1.0);
        let y = c.queue("root.y", 0, 0.3, 1.0);
        let z = c.queue("root.z", 0, 0.2, 1.0);
        let w = c.queue("root.w", 0, 0.0, 1.0);
        let (ax, ay, az, aw) = (c.app(x, 0), c.app(y, 0), c.app(z, 0), c.app(w, 0));
        c.container(ax, 0, gib(4), 0, false);
        c.container(az, 0, gib(3), 0, false);
        c.container(aw, 0, gib(1), 0, false);
        // Pending in the engine's order: w, z, x, y, z, x.
        let rw = c.pending(aw, gib(1), 1, &[]);
        let rz1 = c.pending(az, gib(1), 1, &[]);
        let rx1 = c.pending(ax, gib(1), 1, &[]);
        let ry = c.pending(ay, gib(1), 1, &[]);
        let rz2 = c.pending(az, gib(1), 1, &[]);
        let rx2 = c.pending(ax, gib(1), 1, &[]);
        let p = Preemption::with_config(PreemptionConfig::default());
        let mut out = Decisions::new();
        p.order_view(&c.view(), &mut out);
        let got: Vec<u32> = out.as_slice().iter().map(|d| d.subject).collect();
        assert!(out.as_slice().iter().all(|d| d.kind == GANTRY_DECISION_ORDER));
        // y (0) → x (0.8) → z (1.5) → w (no guarantee); the engine's order within a queue.
        assert_eq!(got, vec![ry, rx1, rx2, rz1, rz2, rw]);
    }

    #[test]
    fn a_leaf_without_a_guarantee_is_served_up_to_its_ideal_share_before_a_borrower() {
        // 10 GiB; prod (50 %) has `default` (all of prod's guarantee, idle) and `r` (nothing
        // guaranteed, as a Rayon reservation before its allocation starts); adhoc (50 %) holds
        // all 10. `rebalance` reclaims prod's idle 5 GiB for r (its ideal share), so `order` must
        // give r the freed room before adhoc, which is twice over its guarantee: with r ranked
        // last the room went straight back to adhoc, round after round.
        let mut c = Cluster::new();
        c.node("n0", gib(10), &[]);
        let prod = c.queue("root.prod", 0, 0.5, 1.0);
        let adhoc = c.queue("root.adhoc", 0, 0.5, 1.0);
        c.queue("root.prod.default", prod, 1.0, 1.0);
        let r = c.queue("root.prod.r", prod, 0.0, 1.0);
        let (a_adhoc, a_r) = (c.app(adhoc, 0), c.app(r, 1));
        for _ in 0..10 {
            c.container(a_adhoc, 0, gib(1), 0, false);
        }
        let adhoc_more = c.pending(a_adhoc, gib(1), 1, &[]);
        let reserved = c.pending(a_r, gib(1), 5, &[]);
        let p = Preemption::with_config(PreemptionConfig::default());
        let mut out = Decisions::new();
        p.order_view(&c.view(), &mut out);
        let got: Vec<u32> = out.as_slice().iter().map(|d| d.subject).collect();
        assert_eq!(got, vec![reserved, adhoc_more]);
    }

    #[test]
    fn room_freed_for_a_guarantee_goes_to_it_not_to_a_leaf_level_with_it_by_ideal_share() {
        // Found in rayon-swim (issue 22): reservation r1 is between allocations (guaranteed
        // nothing, an ideal share of prod's idle room), r2's allocation has begun (1 GiB
        // guaranteed, nothing running). `rebalance` preempted r1's container for r2; both are at
        // 0 of their share, and r1's request came first in the engine's order, so r1 took the
        // room back, and was preempted again a second later, until r2's deadline passed.
        let mut c = Cluster::new();
        c.node("n0", gib(10), &[]);
        let prod = c.queue("root.prod", 0, 0.5, 1.0);
        let adhoc = c.queue("root.adhoc", 0, 0.5, 1.0);
        c.queue("root.prod.default", prod, 0.8, 1.0);
        let r1 = c.queue("root.prod.r1", prod, 0.0, 1.0);
        let r2 = c.queue("root.prod.r2", prod, 0.2, 1.0);
        let (a_adhoc, a_r1, a_r2) = (c.app(adhoc, 0), c.app(r1, 1), c.app(r2, 2));
        for _ in 0..9 {
            c.container(a_adhoc, 0, gib(1), 0, false);
        }
        let first = c.pending(a_r1, gib(1), 1, &[]);
        let owed = c.pending(a_r2, gib(1), 1, &[]);
        let p = Preemption::with_config(PreemptionConfig::default());
        let mut out = Decisions::new();
        p.order_view(&c.view(), &mut out);
        let got: Vec<u32> = out.as_slice().iter().map(|d| d.subject).collect();
        assert_eq!(got, vec![owed, first]);
    }

    #[test]
    fn order_lets_the_under_served_queues_take_turns() {
        // 100 GiB; A guaranteed 40 %, B 20 %, both empty, two requests of 20 × 1 GiB each, A's
        // first in the engine's order. Ranking once would give A1 A2 B1 B2 (both at 0). Taking
        // turns: A1 (tie, earlier) → A at 20/40 = 0.5; B1 (0) → B at 20/20 = 1; A2 (0.5) → A at
        // 1; then B2, the only one left.
        let mut c = Cluster::of_nodes(10, gib(10));
        let a = c.queue("root.a", 0, 0.4, 1.0);
        let b = c.queue("root.b", 0, 0.2, 1.0);
        let (aa, ab) = (c.app(a, 0), c.app(b, 1));
        let a1 = c.pending(aa, gib(1), 20, &[]);
        let a2 = c.pending(aa, gib(1), 20, &[]);
        let b1 = c.pending(ab, gib(1), 20, &[]);
        let b2 = c.pending(ab, gib(1), 20, &[]);
        let p = Preemption::with_config(PreemptionConfig::default());
        let mut out = Decisions::new();
        p.order_view(&c.view(), &mut out);
        let got: Vec<u32> = out.as_slice().iter().map(|d| d.subject).collect();
        assert_eq!(got, vec![a1, b1, a2, b2]);
    }

    #[test]
    fn create_reads_the_configuration() {
        let p = Preemption::create(r#"{"observe_only": true}"#).unwrap();
        assert!(p.config().observe_only);
        assert!(p.last_plan().is_none());
        assert!(Preemption::create(r#"{"observe": true}"#).is_err());
    }
}
