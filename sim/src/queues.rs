//! Per-queue figures of a run: what each leaf queue holds, asks for, is guaranteed and would get
//! in an ideal balanced assignment, sampled over time; when each first held a given share of its
//! guarantee; and what rebalancing took from it.
//!
//! Everything is read from the engine's own records (`ClusterState`), never from the simulator's
//! bookkeeping, so the figures are what a plugin sees:
//!
//! - **used**: `GantryQueue::used`, the resources of the queue's live containers — allocated,
//!   running and *stopping* ones (a preempted container holds its resources until its exit).
//! - **pending**: what the queue's admitted and new applications still ask for, `(count − placed)
//!   × size` per request, computed at the sample (the engine's `GantryQueue::pending` is
//!   refreshed before each cycle's placements, so it overstates the demand right after them).
//! - **guaranteed**: `GantryQueue::absolute_guaranteed`.
//! - **ideal**: the balanced assignment of YARN's proportional capacity preemption policy
//!   (seed 004), computed here independently of any plugin, per resource: the root gets the
//!   queues' base capacity; each parent's share goes to its children by water-filling weighted by
//!   their guaranteed fractions — each child gets `min(demand, maximum, λ × guaranteed)` with the
//!   level λ set so that the shares add up to the parent's (or every child is satisfied) —, where
//!   a child's demand is `used + pending` (summed over its subtree) and its maximum
//!   `absolute_maximum`; what is left after the children with a guarantee are satisfied goes to
//!   the children without one, in equal parts. This is the fixed point of YARN's iterative
//!   `computeFixpointAllocation`, with no dead zone and no per-round bound (those shape how fast
//!   a policy moves towards it, not where it goes).
//!
//! Shares are of the queues' base capacity, the root queue's `absolute_guaranteed` (on a fixed
//! cluster: the whole cluster).

use gantry_engine::EngineStats;
use gantry_engine::state::ClusterState;
use gantry_sdk::abi::*;
use std::collections::HashMap;

/// The shares of its guarantee whose first time is recorded: 50 %, 90 % and 100 %.
pub const GUARANTEE_FRACTIONS: [f64; 3] = [0.5, 0.9, 1.0];

/// CPU and memory as shares of the queues' base capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Shares {
    /// CPU.
    pub cpu: f64,
    /// Memory.
    pub memory: f64,
}

/// One leaf queue at one sample time.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSample {
    /// Virtual time, ms.
    pub t_ms: u64,
    /// Position of the leaf queue in [`QueueStats::leaves`].
    pub leaf: usize,
    /// Held by its live containers (stopping ones included).
    pub used: Shares,
    /// Asked for by its pending requests.
    pub pending: Shares,
    /// Guaranteed.
    pub guaranteed: Shares,
    /// Its ideal balanced assignment (module documentation).
    pub ideal: Shares,
}

/// What happened to one leaf queue over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct LeafRecord {
    /// Full path, e.g. `root.a`.
    pub path: String,
    /// Configured guaranteed share of the cluster: the product of the guaranteed fractions from
    /// the root down.
    pub guaranteed: f64,
    /// Configured maximum share of the cluster, likewise.
    pub maximum: f64,
    /// First submission to the queue, ms.
    pub first_submit_ms: Option<u64>,
    /// When the queue first held each of [`GUARANTEE_FRACTIONS`] of its guarantee, `[cpu,
    /// memory]` (none where its guarantee of that resource is 0).
    pub reached_ms: [[Option<u64>; 3]; 2],
    /// Containers rebalancing stopped (`EngineStats::preempted_by_queue`: each PREEMPT and KILL
    /// decision applied, so a preempted container killed during its grace counts twice).
    pub preempted_containers: u64,
    /// Their resources, summed.
    pub preempted: GantryResources,
}

/// The per-queue part of a run's result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueStats {
    /// The leaf queues, in the engine's queue order.
    pub leaves: Vec<LeafRecord>,
    /// Samples: every leaf at each sample time, in time then leaf order.
    pub samples: Vec<QueueSample>,
}

/// Follows the leaf queues during a run.
pub(crate) struct QueueTracker {
    /// Engine queue index of each leaf.
    leaves: Vec<u32>,
    /// Leaf path → position.
    by_path: HashMap<String, usize>,
    first_submit: Vec<Option<u64>>,
    reached: Vec<[[Option<u64>; 3]; 2]>,
    samples: Vec<QueueSample>,
}

impl QueueTracker {
    pub(crate) fn new(state: &ClusterState) -> Self {
        let leaves: Vec<u32> = state
            .queues()
            .iter()
            .enumerate()
            .filter(|(_, q)| q.flags & GANTRY_QUEUE_LEAF != 0)
            .map(|(i, _)| i as u32)
            .collect();
        let by_path = leaves.iter().enumerate().map(|(k, &q)| (state.queue_path(q).to_owned(), k)).collect();
        QueueTracker {
            first_submit: vec![None; leaves.len()],
            reached: vec![[[None; 3]; 2]; leaves.len()],
            leaves,
            by_path,
            samples: Vec::new(),
        }
    }

    /// An application was submitted to the queue `path` at `now`.
    pub(crate) fn submitted(&mut self, path: &str, now: u64) {
        if let Some(&k) = self.by_path.get(path) {
            self.first_submit[k].get_or_insert(now);
        }
    }

    /// Records which leaves hold which share of their guarantee now.
    pub(crate) fn observe(&mut self, now: u64, state: &ClusterState) {
        let queues = state.queues();
        for (k, &q) in self.leaves.iter().enumerate() {
            let Some(rec) = queues.get(q as usize) else { continue };
            let used = [rec.used.cpu_millis, rec.used.memory_bytes];
            let guaranteed = [rec.absolute_guaranteed.cpu_millis, rec.absolute_guaranteed.memory_bytes];
            for r in 0..2 {
                if guaranteed[r] == 0 {
                    continue;
                }
                for (f, at) in GUARANTEE_FRACTIONS.iter().zip(&mut self.reached[k][r]) {
                    if at.is_none() && used[r] as f64 >= f * guaranteed[r] as f64 {
                        *at = Some(now);
                    }
                }
            }
        }
    }

    /// Samples every leaf queue now.
    pub(crate) fn sample(&mut self, now: u64, state: &ClusterState) {
        let queues = state.queues();
        let n = queues.len();
        // Pending per queue (leaves first, then summed up the tree below).
        let mut pending = vec![[0u64; 2]; n];
        let requests = state.requests();
        for app in state.apps() {
            if !matches!(app.state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) {
                continue;
            }
            let Some(p) = pending.get_mut(app.queue as usize) else { continue };
            let (start, len) = (app.requests.start as usize, app.requests.len as usize);
            for r in requests.get(start..start + len).unwrap_or(&[]) {
                let left = u64::from(r.count.saturating_sub(r.placed));
                p[0] += r.resources.cpu_millis * left;
                p[1] += r.resources.memory_bytes * left;
            }
        }
        // Demand: used + pending, summed from the leaves up (parents precede their children).
        let mut demand: Vec<[u64; 2]> = pending.clone();
        for i in (0..n).rev() {
            let q = &queues[i];
            if q.flags & GANTRY_QUEUE_LEAF != 0 {
                demand[i][0] += q.used.cpu_millis;
                demand[i][1] += q.used.memory_bytes;
            }
            let parent = q.parent as usize;
            if q.parent != GANTRY_NONE && parent < n {
                let d = demand[i];
                demand[parent][0] += d[0];
                demand[parent][1] += d[1];
            }
        }
        let base = queues.first().map_or([0, 0], |root| {
            [root.absolute_guaranteed.cpu_millis, root.absolute_guaranteed.memory_bytes]
        });
        let ideal = [0, 1].map(|r| ideal_assignment(state, r, base[r] as f64, &demand));
        let share = |v: f64, r: usize| if base[r] == 0 { 0.0 } else { v / base[r] as f64 };
        let shares = |v: [f64; 2]| Shares { cpu: share(v[0], 0), memory: share(v[1], 1) };
        for (k, &q) in self.leaves.iter().enumerate() {
            let Some(rec) = queues.get(q as usize) else { continue };
            let qi = q as usize;
            self.samples.push(QueueSample {
                t_ms: now,
                leaf: k,
                used: shares([rec.used.cpu_millis as f64, rec.used.memory_bytes as f64]),
                pending: shares([pending[qi][0] as f64, pending[qi][1] as f64]),
                guaranteed: shares([
                    rec.absolute_guaranteed.cpu_millis as f64,
                    rec.absolute_guaranteed.memory_bytes as f64,
                ]),
                ideal: shares([ideal[0][qi], ideal[1][qi]]),
            });
        }
    }

    /// The run's per-queue result, with what rebalancing took from each leaf.
    pub(crate) fn finish(self, state: &ClusterState, stats: &EngineStats) -> QueueStats {
        let queues = state.queues();
        let configured = |q: u32, f: fn(&GantryQueue) -> f64| {
            let mut share = 1.0;
            let mut i = q;
            while let Some(rec) = queues.get(i as usize) {
                share *= f(rec);
                i = rec.parent;
            }
            share
        };
        let leaves = self
            .leaves
            .iter()
            .enumerate()
            .map(|(k, &q)| {
                let taken = stats.preempted_by_queue.get(q as usize).copied().unwrap_or_default();
                LeafRecord {
                    path: state.queue_path(q).to_owned(),
                    guaranteed: configured(q, |r| r.guaranteed),
                    maximum: configured(q, |r| r.maximum),
                    first_submit_ms: self.first_submit[k],
                    reached_ms: self.reached[k],
                    preempted_containers: taken.containers,
                    preempted: taken.resources,
                }
            })
            .collect();
        QueueStats { leaves, samples: self.samples }
    }
}

/// The ideal assignment of resource `r` (0 CPU, 1 memory) to every queue, given the root's
/// capacity and each queue's demand (module documentation).
fn ideal_assignment(state: &ClusterState, r: usize, root: f64, demand: &[[u64; 2]]) -> Vec<f64> {
    let queues = state.queues();
    let n = queues.len();
    let mut ideal = vec![0.0; n];
    if n == 0 {
        return ideal;
    }
    ideal[0] = root.min(demand[0][r] as f64);
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, q) in queues.iter().enumerate() {
        if let Some(c) = children.get_mut(q.parent as usize) {
            c.push(i);
        }
    }
    // Parents precede their children, so each parent's share is known when its turn comes.
    for p in 0..n {
        let kids = &children[p];
        if kids.is_empty() {
            continue;
        }
        let caps: Vec<f64> = kids
            .iter()
            .map(|&c| {
                let max = [queues[c].absolute_maximum.cpu_millis, queues[c].absolute_maximum.memory_bytes][r];
                (demand[c][r].min(max)) as f64
            })
            .collect();
        let weights: Vec<f64> = kids.iter().map(|&c| queues[c].guaranteed.max(0.0)).collect();
        for (&c, v) in kids.iter().zip(water_fill(ideal[p], &caps, &weights)) {
            ideal[c] = v;
        }
    }
    ideal
}

/// Shares `total` among claimants with `caps` by weighted water-filling: each gets
/// `min(cap, λ × weight)` for the largest level λ the total allows; what is left once every
/// claimant with a weight is satisfied goes to the weightless ones the same way with equal
/// weights.
pub fn water_fill(total: f64, caps: &[f64], weights: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; caps.len()];
    let weighted: Vec<usize> =
        (0..caps.len()).filter(|&i| weights.get(i).is_some_and(|&w| w > 0.0)).collect();
    let weightless: Vec<usize> = (0..caps.len()).filter(|i| !weighted.contains(i)).collect();
    let left = fill(total, caps, weights, &weighted, &mut out);
    let ones = vec![1.0; caps.len()];
    fill(left, caps, &ones, &weightless, &mut out);
    out
}

/// Water-fills `total` over the claimants `who`; returns what is left.
fn fill(total: f64, caps: &[f64], weights: &[f64], who: &[usize], out: &mut [f64]) -> f64 {
    let mut order: Vec<usize> = who.iter().copied().filter(|&i| caps[i] > 0.0).collect();
    // Those satisfied at the lowest level first.
    order.sort_by(|&a, &b| (caps[a] / weights[a]).total_cmp(&(caps[b] / weights[b])).then(a.cmp(&b)));
    let mut left = total.max(0.0);
    let mut weight: f64 = order.iter().map(|&i| weights[i]).sum();
    for (k, &i) in order.iter().enumerate() {
        let level = left / weight;
        if caps[i] <= level * weights[i] {
            out[i] = caps[i];
            left -= caps[i];
            weight -= weights[i];
        } else {
            for &j in &order[k..] {
                out[j] = level * weights[j];
            }
            return 0.0;
        }
    }
    left.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn water_filling_matches_hand_computed_shares() {
        // Everyone wants more than there is: shares in proportion to the weights.
        assert!(close(&water_fill(100.0, &[500.0, 500.0], &[0.8, 0.2]), &[80.0, 20.0]));
        // The seed's two of three queues (40 % and 20 %): 2/3 and 1/3 of the cluster.
        let two = water_fill(90.0, &[1e9, 1e9], &[0.4, 0.2]);
        assert!(close(&two, &[60.0, 30.0]), "{two:?}");
        // One is satisfied below its share; the rest goes to the other.
        assert!(close(&water_fill(100.0, &[10.0, 500.0], &[0.5, 0.5]), &[10.0, 90.0]));
        // All satisfied: each gets its demand, the rest stays unassigned.
        assert!(close(&water_fill(100.0, &[10.0, 20.0], &[0.5, 0.5]), &[10.0, 20.0]));
        // 40 / 20 / 40 where the middle one may have only 10 (the cap is min(demand, maximum)):
        // the other two share the rest equally; with 30 allowed it is not capped at all.
        let capped = water_fill(100.0, &[1e9, 10.0, 1e9], &[0.4, 0.2, 0.4]);
        assert!(close(&capped, &[45.0, 10.0, 45.0]), "{capped:?}");
        let loose = water_fill(100.0, &[1e9, 30.0, 1e9], &[0.4, 0.2, 0.4]);
        assert!(close(&loose, &[40.0, 20.0, 40.0]), "{loose:?}");
        // A weightless claimant gets what the weighted ones leave, in equal parts.
        let weightless = water_fill(100.0, &[50.0, 1e9, 1e9], &[1.0, 0.0, 0.0]);
        assert!(close(&weightless, &[50.0, 25.0, 25.0]), "{weightless:?}");
        // Nothing wanted, nothing given.
        assert!(close(&water_fill(100.0, &[0.0, 0.0], &[0.5, 0.5]), &[0.0, 0.0]));
    }
}
