//! How much each leaf gives back: the arithmetic of one round, on plain numbers in the resource
//! calculator's unit, apart from the view (`plan.rs` digests the view into [`LeafFigures`] and
//! picks the containers).
//!
//! 1. **Over capacity** (YARN's dead zone): a leaf that may be preempted is over capacity when it
//!    holds more than its guarantee × (1 + `max_ignored_over_capacity`) and more than its ideal.
//!    A leaf inside the dead zone keeps what it holds, whatever its ideal.
//! 2. **Excess**: held − ideal (the ideal of a leaf above its guarantee is at least the
//!    guarantee, so this is YARN's used − max(ideal, min(used + pending, guarantee))).
//! 3. **Pace**: the excesses are scaled down together to at most `total_preemption_per_round` ×
//!    the cluster. Each round adds that step to what the leaf is already giving back — its
//!    containers marked last round and still running, plus the fraction of a container the
//!    previous round could not take (`carry`) — so marks accumulate round after round until the
//!    excess is covered (YARN asks for the same step every round, and so re-selects the same
//!    newest containers until they are killed: one step per kill wait, not per round).
//! 4. **Natural termination**: where every container of the leaf has an expected run time, what
//!    will end on its own within the kill wait (`ending`) is not asked for, and the step is not
//!    damped; otherwise the step is damped by `natural_termination_factor`, YARN's assumption
//!    that the rest comes back by itself.
//! 5. **Need**: the targets are scaled down together to what the under-served leaves lack beyond
//!    the free room they can use — in whole containers of theirs, since that is all they can run
//!    (`plan.rs` computes it: a fragment of free room counts for nothing, and a lack of half a
//!    container is a need of one).
//!
//! A target is a fraction of containers; `plan.rs` takes whole containers up to it and carries
//! the remainder to the next round. Only once a leaf's target is its whole excess (the pace has
//! caught up) may the last container go past it, within the need: damping never rounds half a
//! container up to a whole preemption, and an under-served queue is never left one container
//! short for ever.

use crate::config::PreemptionConfig;

/// A leaf's figures for one round, in the calculator's unit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LeafFigures {
    /// Its queue index.
    pub queue: usize,
    /// What its running (not stopping) containers hold.
    pub held: f64,
    /// Its ideal amount.
    pub ideal: f64,
    /// Its absolute guarantee.
    pub guarantee: f64,
    /// Whether its containers may be preempted (`disable_preemption`).
    pub preemptable: bool,
    /// What its containers selected last round, still running, hold.
    pub marked: f64,
    /// What the previous round's target left untaken (the fraction of a container).
    pub carry: f64,
    /// What its containers expected to end within the kill wait hold; `None` when some
    /// container's run time is unknown (or expected run times are not used).
    pub ending: Option<f64>,
}

impl LeafFigures {
    /// Whether it is over capacity: preemptable, above its guarantee beyond the dead zone, and
    /// above its ideal (`eps` absorbs rounding).
    pub fn over_capacity(&self, dead_zone: f64, eps: f64) -> bool {
        self.preemptable
            && self.held > self.guarantee * (1.0 + dead_zone) + eps
            && self.held > self.ideal + eps
    }

    /// What it holds beyond its ideal, if it is over capacity.
    pub fn excess(&self, dead_zone: f64, eps: f64) -> f64 {
        if self.over_capacity(dead_zone, eps) { (self.held - self.ideal).max(0.0) } else { 0.0 }
    }

    /// What the under-served leaf lacks of its ideal.
    pub fn lack(&self) -> f64 {
        (self.ideal - self.held).max(0.0)
    }
}

/// The outcome of [`targets`].
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    /// Per leaf (same order): what it is to have given back after this round, marks included.
    pub target: Vec<f64>,
    /// Per leaf: the most it is to give back at all (its excess, less what ends on its own); a
    /// target that reached it is complete.
    pub cap: Vec<f64>,
}

impl Targets {
    /// Whether leaf `i`'s target is all it is to give back (no longer paced).
    pub fn complete(&self, i: usize, eps: f64) -> bool {
        self.target[i] > eps && self.target[i] >= self.cap[i] - eps
    }
}

/// Each leaf's target for this round (see the module's documentation). `total` is the cluster,
/// `need` what the under-served leaves need beyond the free room they can use.
pub fn targets(leaves: &[LeafFigures], total: f64, need: f64, config: &PreemptionConfig) -> Targets {
    let eps = 1e-9 * total.max(1.0);
    let dead_zone = config.max_ignored_over_capacity;
    let excess: Vec<f64> = leaves.iter().map(|l| l.excess(dead_zone, eps)).collect();
    let sum: f64 = excess.iter().sum();
    let bound = config.total_preemption_per_round * total;
    let scale = if sum > bound { bound / sum } else { 1.0 };
    let (mut target, cap): (Vec<f64>, Vec<f64>) = leaves
        .iter()
        .zip(&excess)
        .map(|(l, &e)| {
            if e <= 0.0 {
                return (0.0, 0.0);
            }
            let (cap, step) = match l.ending {
                Some(ending) => ((e - ending).max(0.0), e * scale),
                None => (e, e * scale * config.natural_termination_factor),
            };
            ((l.marked + l.carry + step).min(cap), cap)
        })
        .unzip();
    let asked: f64 = target.iter().sum();
    let need = need.max(0.0);
    if asked > need {
        let s = if asked > 0.0 { need / asked } else { 0.0 };
        target.iter_mut().for_each(|t| *t *= s);
    }
    Targets { target, cap }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PreemptionConfig {
        PreemptionConfig::default()
    }

    /// A preemptable leaf: held, ideal, guarantee; nothing marked or carried, run times unknown.
    fn leaf(queue: usize, held: f64, ideal: f64, guarantee: f64) -> LeafFigures {
        LeafFigures { queue, held, ideal, guarantee, preemptable: true, ..LeafFigures::default() }
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9 * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn the_dead_zone_is_measured_against_the_guarantee() {
        // (held, ideal, guarantee, dead zone) → over capacity?
        let cases = [
            // The issue's case: B guaranteed 25 holds 54 with an ideal of 50. Against the ideal
            // (54 ≤ 55) it would be left alone; against its guarantee (54 > 27.5) it is over.
            (54.0, 50.0, 25.0, 0.1, true),
            // Inside the dead zone above its guarantee: 21.5 ≤ 20 × 1.1.
            (21.5, 10.0, 20.0, 0.1, false),
            // Just past it.
            (22.5, 10.0, 20.0, 0.1, true),
            // Above its guarantee beyond the dead zone, but not above its ideal.
            (40.0, 40.0, 20.0, 0.1, false),
            // No dead zone: anything above both.
            (20.5, 20.0, 20.0, 0.0, true),
            // At or below its guarantee: never.
            (20.0, 5.0, 20.0, 0.0, false),
        ];
        for (held, ideal, guarantee, dead_zone, over) in cases {
            let l = leaf(0, held, ideal, guarantee);
            assert_eq!(l.over_capacity(dead_zone, 1e-9), over, "{held} {ideal} {guarantee} {dead_zone}");
        }
        let mut disabled = leaf(0, 90.0, 10.0, 10.0);
        disabled.preemptable = false;
        assert!(!disabled.over_capacity(0.0, 1e-9), "a queue that may not be preempted is never over");
    }

    #[test]
    fn the_issues_three_queues_give_back_four_and_six() {
        // 100 unit containers; A/B/C guaranteed 55/25/20. B holds 54, C 46, A asks for 10;
        // nothing is free. Ideal: A 10, B 50, C 40 (ideal.rs). YARN takes 4 from B and 6 from C.
        // One unconstrained round (no bound, no damping, no dead zone in the way).
        let c =
            PreemptionConfig { total_preemption_per_round: 1.0, natural_termination_factor: 1.0, ..cfg() };
        let leaves = [leaf(1, 0.0, 10.0, 55.0), leaf(2, 54.0, 50.0, 25.0), leaf(3, 46.0, 40.0, 20.0)];
        let t = targets(&leaves, 100.0, 10.0, &c);
        close(&t.target, &[0.0, 4.0, 6.0]);
        assert!(t.complete(1, 1e-9) && t.complete(2, 1e-9));
        // With YARN's defaults the first round asks 10 × 0.2 = 2, shared 4:6, paced.
        let t = targets(&leaves, 100.0, 10.0, &cfg());
        close(&t.target, &[0.0, 0.8, 1.2]);
        assert!(!t.complete(1, 1e-9));
    }

    #[test]
    fn bound_damping_marks_and_carry() {
        // The seed's first scenario in containers of 1: B holds 100 with an ideal of 20; the
        // cluster is 100. (marked, carry, ending) → target.
        let cases = [
            // First round: 80 → bounded to 10 → × 0.2 = 2.
            (0.0, 0.0, None, 2.0),
            // Marks accumulate: 2 marked and 0.4 carried + 2 more.
            (2.0, 0.4, None, 4.4),
            // Never past the excess.
            (79.0, 0.5, None, 80.0),
            // Known run times, nothing ending within the wait: the step is not damped.
            (0.0, 0.0, Some(0.0), 10.0),
            (10.0, 0.0, Some(0.0), 20.0),
            // 75 of B's 100 end within the wait: only 80 − 75 = 5 is asked for at all.
            (0.0, 0.0, Some(75.0), 5.0),
            // All of the excess ends on its own: nothing.
            (0.0, 0.0, Some(90.0), 0.0),
        ];
        for (marked, carry, ending, want) in cases {
            let b = LeafFigures { marked, carry, ending, ..leaf(1, 100.0, 20.0, 20.0) };
            let t = targets(&[leaf(0, 0.0, 80.0, 80.0), b], 100.0, 80.0, &cfg());
            close(&t.target, &[0.0, want]);
        }
    }

    #[test]
    fn the_bound_is_shared_in_proportion_to_the_excess() {
        // Excesses 30 and 10 on a cluster of 100, bound 10 %: scaled by 1/4 → 7.5 and 2.5; × 0.2.
        let leaves = [leaf(0, 0.0, 40.0, 40.0), leaf(1, 60.0, 30.0, 30.0), leaf(2, 40.0, 30.0, 30.0)];
        close(&targets(&leaves, 100.0, 40.0, &cfg()).target, &[0.0, 1.5, 0.5]);
    }

    #[test]
    fn never_more_than_the_need() {
        let c =
            PreemptionConfig { total_preemption_per_round: 1.0, natural_termination_factor: 1.0, ..cfg() };
        // B is 50 over; A lacks 30, of which free room A can use covers 10: the need is 20, and
        // B's target is cut to it (no longer complete).
        let leaves = [leaf(0, 20.0, 50.0, 50.0), leaf(1, 70.0, 20.0, 20.0)];
        let t = targets(&leaves, 100.0, 20.0, &c);
        close(&t.target, &[0.0, 20.0]);
        assert!(!t.complete(1, 1e-9));
        // Nothing needed: nothing asked.
        close(&targets(&leaves, 100.0, 0.0, &c).target, &[0.0, 0.0]);
    }

    #[test]
    fn leaves_in_the_dead_zone_or_not_preemptable_give_nothing() {
        let c =
            PreemptionConfig { total_preemption_per_round: 1.0, natural_termination_factor: 1.0, ..cfg() };
        // B: 21 ≤ 20 × 1.1, left alone though it is 11 over its ideal; C may not be preempted.
        let mut cq = leaf(2, 49.0, 40.0, 30.0);
        cq.preemptable = false;
        let leaves = [leaf(0, 30.0, 50.0, 50.0), leaf(1, 21.0, 10.0, 20.0), cq];
        close(&targets(&leaves, 100.0, 20.0, &c).target, &[0.0, 0.0, 0.0]);
    }
}
