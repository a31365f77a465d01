//! The ideal balanced assignment of the cluster to the queue tree (YARN-569's "ideal balanced
//! state"), on plain numbers in the resource calculator's unit (bytes of memory, or dominant
//! shares).
//!
//! At every level the parent's ideal amount is shared among its children by *water-filling*:
//! each child's ideal is `clamp(λ × guarantee, floor, cap)`, with one water level `λ` for all the
//! children, chosen so that the shares add up to what the parent has (or every child is capped):
//!
//! - `cap = min(demand, maximum)`: a queue never gets more than it holds plus what it asks for,
//!   nor more than its absolute maximum;
//! - `floor = min(held, guarantee, cap)`: a queue keeps what it holds up to its guarantee — a
//!   leaf whose preemption is disabled keeps all it holds, and a parent keeps at least what its
//!   children keep (YARN's "untouchable extra": the others share what is left).
//!
//! When the parent has at least the children's guarantees (always at the root, whose total is
//! the cluster), `λ ≥ 1`, so each child gets at least `min(guarantee, demand)` and what is left
//! goes to the children that still want more in proportion to their guarantees — the fixed
//! point YARN reaches by offering the unassigned rest over and over (`ideal_by_offers` in the
//! tests is that loop, and agrees). The floor only matters below a parent that gets less than its
//! children's guarantees; it keeps a child at or under its guarantee from being asked to give
//! anything back to a sibling. Children with no guarantee share, equally, only what is left once
//! every guaranteed sibling is capped.

/// One queue's numbers. For a leaf, `held` and `demand` are its own; a parent's are the sums of
/// its children's (plus its own, normally zero).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueInput {
    /// Index of the parent in the same slice; `None` (or an index that is not smaller than the
    /// queue's own, which is treated the same way) for a top-level queue.
    pub parent: Option<usize>,
    /// Absolute guaranteed capacity.
    pub guarantee: f64,
    /// Absolute maximum capacity.
    pub maximum: f64,
    /// What the queue's containers hold and will keep holding (stopping containers left out).
    pub held: f64,
    /// `held` plus what its pending requests ask for (those that could run).
    pub demand: f64,
    /// A leaf whose containers are never preempted (`disable_preemption`): it keeps all it holds.
    pub keeps_all: bool,
}

/// The ideal amount of each queue (same order as `queues`); top-level queues share `total`.
pub fn ideal_assignment(queues: &[QueueInput], total: f64) -> Vec<f64> {
    let n = queues.len();
    let parent = |i: usize| queues[i].parent.filter(|&p| p < i);
    // Subtree sums, children after parents (parent index < child index).
    let mut held: Vec<f64> = queues.iter().map(|q| q.held.max(0.0)).collect();
    let mut demand: Vec<f64> = queues.iter().map(|q| q.demand.max(q.held).max(0.0)).collect();
    for i in (0..n).rev() {
        if let Some(p) = parent(i) {
            held[p] += held[i];
            demand[p] += demand[i];
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut top = Vec::new();
    for i in 0..n {
        match parent(i) {
            Some(p) => children[p].push(i),
            None => top.push(i),
        }
    }
    // What each queue keeps whatever the others want: up to its guarantee, all of it for a leaf
    // whose preemption is disabled, and at least what its children keep (children after parents,
    // so this runs from the bottom up).
    let mut keep: Vec<f64> = (0..n)
        .map(|i| if queues[i].keeps_all { held[i] } else { held[i].min(queues[i].guarantee.max(0.0)) })
        .collect();
    let mut kept_by_children = vec![0.0; n];
    for i in (0..n).rev() {
        keep[i] = keep[i].max(kept_by_children[i]);
        if let Some(p) = parent(i) {
            kept_by_children[p] += keep[i];
        }
    }
    let item = |i: usize| {
        let q = &queues[i];
        let guarantee = q.guarantee.max(0.0);
        let cap = demand[i].min(q.maximum.max(0.0));
        Item { weight: guarantee, floor: keep[i].min(cap), cap }
    };
    let mut ideal = vec![0.0; n];
    let share = |members: &[usize], amount: f64, ideal: &mut Vec<f64>| {
        let items: Vec<Item> = members.iter().map(|&i| item(i)).collect();
        for (&i, v) in members.iter().zip(share_out(amount, &items)) {
            ideal[i] = v;
        }
    };
    share(&top, total.max(0.0), &mut ideal);
    for p in 0..n {
        if !children[p].is_empty() {
            let amount = ideal[p];
            share(&children[p], amount, &mut ideal);
        }
    }
    ideal
}

/// A sibling in [`share_out`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Item {
    /// Its weight (guarantee); 0 = no guarantee.
    pub weight: f64,
    /// The least it gets (`floor <= cap`).
    pub floor: f64,
    /// The most it gets.
    pub cap: f64,
}

/// Shares `amount` among `items`: guaranteed items by water level, then what is left equally
/// among items without a guarantee.
pub(crate) fn share_out(amount: f64, items: &[Item]) -> Vec<f64> {
    let floor_sum: f64 = items.iter().filter(|it| it.weight <= 0.0).map(|it| it.floor.min(it.cap)).sum();
    let weighted: Vec<Item> = items.iter().copied().filter(|it| it.weight > 0.0).collect();
    let first = water_level(amount - floor_sum, &weighted);
    let given: f64 = first.iter().sum::<f64>() + floor_sum;
    let unweighted: Vec<Item> = items
        .iter()
        .filter(|it| it.weight <= 0.0)
        .map(|it| Item { weight: 1.0, floor: it.floor.min(it.cap), cap: it.cap })
        .collect();
    let second = water_level(amount - given + unweighted.iter().map(|it| it.floor).sum::<f64>(), &unweighted);
    let (mut a, mut b) = (first.into_iter(), second.into_iter());
    items.iter().map(|it| if it.weight > 0.0 { a.next() } else { b.next() }.unwrap_or(0.0)).collect()
}

/// `clamp(λ × weight, floor, cap)` for the λ at which the results add up to `amount`; every cap
/// when the caps add up to less, every floor when the floors add up to more. Weights must be > 0.
fn water_level(amount: f64, items: &[Item]) -> Vec<f64> {
    let at = |l: f64| -> Vec<f64> {
        items.iter().map(|it| (l * it.weight).max(it.floor).min(it.cap.max(it.floor))).collect()
    };
    let sum = |l: f64| -> f64 { at(l).iter().sum() };
    let caps: f64 = items.iter().map(|it| it.cap.max(it.floor)).sum();
    if caps <= amount {
        return items.iter().map(|it| it.cap.max(it.floor)).collect();
    }
    let floors: f64 = items.iter().map(|it| it.floor).sum();
    if floors >= amount {
        return items.iter().map(|it| it.floor).collect();
    }
    // The sum is piecewise linear and non-decreasing in λ, with bends where an item leaves its
    // floor or reaches its cap: find the two bends around `amount`, then interpolate.
    let mut bends: Vec<f64> =
        items.iter().flat_map(|it| [it.floor / it.weight, it.cap.max(it.floor) / it.weight]).collect();
    bends.sort_by(f64::total_cmp);
    bends.dedup();
    let upper = bends.partition_point(|&l| sum(l) < amount);
    let Some(&hi) = bends.get(upper) else {
        return at(bends.last().copied().unwrap_or(0.0));
    };
    let lo = if upper == 0 { 0.0 } else { bends[upper - 1] };
    let (s_lo, s_hi) = (sum(lo), sum(hi));
    let level = if s_hi > s_lo { lo + (amount - s_lo) / (s_hi - s_lo) * (hi - lo) } else { hi };
    at(level)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-6 * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    /// A leaf below `parent`: guarantee, maximum, held, pending (demand = held + pending).
    fn leaf(parent: Option<usize>, g: f64, max: f64, held: f64, pending: f64) -> QueueInput {
        QueueInput { parent, guarantee: g, maximum: max, held, demand: held + pending, keeps_all: false }
    }

    fn parent(parent: Option<usize>, g: f64, max: f64) -> QueueInput {
        QueueInput { parent, guarantee: g, maximum: max, held: 0.0, demand: 0.0, keeps_all: false }
    }

    /// The seed's first scenario on a cluster of 100: B (20 %, max 100 %) holds everything, A
    /// (80 %) arrives wanting all of it.
    #[test]
    fn two_queues_the_seeds_scenario() {
        // root = 100; A: floor min(0, 80) = 0, cap 100; B: floor min(100, 20) = 20, cap 100.
        // λ·80 + max(20, λ·20) = 100 → λ = 1: A 80, B 20 (each exactly its guarantee).
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 80.0, 100.0, 0.0, 100.0),
            leaf(Some(0), 20.0, 100.0, 100.0, 0.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 80.0, 20.0]);

        // A wants only 30: A gets min(80, 30) = 30; B keeps the rest, 70 (its demand is 100).
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 80.0, 100.0, 0.0, 30.0),
            leaf(Some(0), 20.0, 100.0, 100.0, 0.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 30.0, 70.0]);

        // Hard maxima 80/20 (the seed's second configuration): B is capped at 20 whatever it holds.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 80.0, 80.0, 0.0, 100.0),
            leaf(Some(0), 20.0, 20.0, 20.0, 80.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 80.0, 20.0]);

        // Nobody else wants anything: B may keep the whole cluster.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 80.0, 100.0, 0.0, 0.0),
            leaf(Some(0), 20.0, 100.0, 100.0, 0.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 0.0, 100.0]);
    }

    /// `disable_preemption` (YARN's semantics): a leaf that may not be preempted keeps all it
    /// holds beyond its guarantee, and its parent at least what its children keep; the others
    /// share what is left.
    #[test]
    fn a_queue_that_may_not_be_preempted_keeps_what_it_holds() {
        // 100 units, A/B/C guaranteed 50/30/20. B holds 60 (30 over its guarantee), C holds 40,
        // A asks for 50. With B preemptable: A 50, B 30, C 20. With B not: B keeps 60, and A
        // and C share the other 40 by guarantee with floors — C keeps its 20, A gets 20.
        let mut q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 50.0, 100.0, 0.0, 50.0),
            leaf(Some(0), 30.0, 100.0, 60.0, 0.0),
            leaf(Some(0), 20.0, 100.0, 40.0, 0.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 50.0, 30.0, 20.0]);
        q[2].keeps_all = true;
        close(&ideal_assignment(&q, 100.0), &[100.0, 20.0, 60.0, 20.0]);

        // Nested: root → P (60: X 30, Y 30) and Q (40). X may not be preempted and holds 50; Y
        // holds 20 (within its guarantee); Q asks for 40. P keeps at least what its children
        // keep, 50 + 20 = 70, above its own guarantee of 60: Q gets the remaining 30.
        let mut q = [
            parent(None, 100.0, 100.0),
            parent(Some(0), 60.0, 100.0),
            leaf(Some(1), 30.0, 100.0, 50.0, 0.0),
            leaf(Some(1), 30.0, 100.0, 20.0, 0.0),
            leaf(Some(0), 40.0, 100.0, 0.0, 40.0),
        ];
        q[2].keeps_all = true;
        close(&ideal_assignment(&q, 100.0), &[100.0, 70.0, 50.0, 20.0, 30.0]);
    }

    /// The seed's second scenario: guarantees 40/20/40 on 100.
    #[test]
    fn three_queues_the_seeds_over_capacity_shares() {
        // Only B (20 %) and A (40 %) want everything: the spare 40 goes 2:1 by guarantee,
        // λ·40 + λ·20 = 100 → λ = 5/3: A 66.67, B 33.33 ("33 % and 66 %" in the seed).
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 40.0, 100.0, 0.0, 100.0),
            leaf(Some(0), 20.0, 100.0, 100.0, 0.0),
            leaf(Some(0), 40.0, 100.0, 0.0, 0.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 200.0 / 3.0, 100.0 / 3.0, 0.0]);

        // All three want at least their guarantee: each gets exactly its guarantee.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 40.0, 100.0, 10.0, 90.0),
            leaf(Some(0), 20.0, 100.0, 70.0, 30.0),
            leaf(Some(0), 40.0, 100.0, 20.0, 80.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 40.0, 20.0, 40.0]);

        // C wants only 10: its unused 30 is shared by A and B 2:1 — λ·40 + λ·20 = 90 → λ = 1.5:
        // A 60, B 30, C 10.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 40.0, 100.0, 10.0, 90.0),
            leaf(Some(0), 20.0, 100.0, 70.0, 30.0),
            leaf(Some(0), 40.0, 100.0, 0.0, 10.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 60.0, 30.0, 10.0]);

        // Same, but B's maximum is 25: B stops at 25 and A takes the last 5: A 65, B 25, C 10.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 40.0, 100.0, 10.0, 90.0),
            leaf(Some(0), 20.0, 25.0, 25.0, 75.0),
            leaf(Some(0), 40.0, 100.0, 0.0, 10.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 65.0, 25.0, 10.0]);
    }

    /// Nested queues: root → prod (60 %) → {etl 50 %, web 50 %} and dev (40 %) → {a 75 %, b 25 %}
    /// of a cluster of 200, so etl and web are guaranteed 60 each, a 60 and b 20.
    #[test]
    fn four_leaves_two_levels() {
        let tree = |etl: (f64, f64), web: (f64, f64), a: (f64, f64), b: (f64, f64)| {
            [
                parent(None, 200.0, 200.0),               // 0 root
                parent(Some(0), 120.0, 200.0),            // 1 prod
                parent(Some(0), 80.0, 200.0),             // 2 dev
                leaf(Some(1), 60.0, 200.0, etl.0, etl.1), // 3 prod.etl
                leaf(Some(1), 60.0, 200.0, web.0, web.1), // 4 prod.web
                leaf(Some(2), 60.0, 200.0, a.0, a.1),     // 5 dev.a
                leaf(Some(2), 20.0, 200.0, b.0, b.1),     // 6 dev.b
            ]
        };
        // dev.b holds the whole cluster; etl wants 100, a wants 30.
        // Top: prod demand 100 (floor 0), dev demand 200 + 30 = 230 (floor min(200, 80) = 80).
        //   λ·120 capped at 100 → prod 100 (λ ≥ 5/6); dev = max(80, λ·80) takes the other 100.
        // prod's 100: etl cap 100, web cap 0 → etl 100, web 0.
        // dev's 100: a: floor 0, cap 30; b: floor min(200, 20) = 20, cap 200.
        //   λ·60 ≤ 30 → a 30 at λ = 0.5; b = max(20, λ·20) = 70 at λ = 3.5 → a 30, b 70.
        let q = tree((0.0, 100.0), (0.0, 0.0), (0.0, 30.0), (200.0, 0.0));
        close(&ideal_assignment(&q, 200.0), &[200.0, 100.0, 100.0, 100.0, 0.0, 30.0, 70.0]);

        // Everyone wants 100 more than it holds; holdings etl 10, web 50, a 40, b 100.
        // Top: prod demand 260, dev 340; λ = 1 → prod 120, dev 80 (their guarantees).
        // prod: etl, web weights 60/60, both capped far above → 60 / 60.
        // dev (80): a floor min(40, 60) = 40, b floor min(100, 20) = 20; λ·60 + λ·20 = 80 → λ = 1:
        //   a 60, b 20.
        let q = tree((10.0, 100.0), (50.0, 100.0), (40.0, 100.0), (100.0, 100.0));
        close(&ideal_assignment(&q, 200.0), &[200.0, 120.0, 80.0, 60.0, 60.0, 60.0, 20.0]);

        // Nobody in prod wants anything: dev shares the whole 200, a:b = 3:1 → 150 / 50.
        let q = tree((0.0, 0.0), (0.0, 0.0), (40.0, 300.0), (100.0, 300.0));
        close(&ideal_assignment(&q, 200.0), &[200.0, 0.0, 200.0, 0.0, 0.0, 150.0, 50.0]);
    }

    /// A queue at or under its guarantee keeps what it holds, even under a starved parent.
    #[test]
    fn floors_protect_what_a_queue_holds_up_to_its_guarantee() {
        // root 100 → p (50 %, max 50 %) → {x 60 %, y 40 %} of p: x guaranteed 30, y 20;
        // q (50 %) holds 50 and wants more.
        // p's cap is its maximum, 50; q = 50. In p: x holds 30 (= guarantee), y holds 10 and wants
        // 100: x floor 30, y floor 10; λ·30 + λ·20 = 50 → λ = 1: x 30, y 20.
        let q = [
            parent(None, 100.0, 100.0),
            parent(Some(0), 50.0, 50.0),
            leaf(Some(1), 30.0, 50.0, 30.0, 0.0),
            leaf(Some(1), 20.0, 50.0, 10.0, 100.0),
            leaf(Some(0), 50.0, 100.0, 50.0, 100.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 50.0, 30.0, 20.0, 50.0]);

        // A parent given less than its children's guarantees (the cluster shrank to 60): p and q
        // hold 30 each and both want more, so each keeps its 30 (its floor; the floors use it
        // all). In p, x holds 25 (under its 30) and wants 100 more, y holds 5 and wants 100 more.
        // Shares by guarantee alone would be 30 × 3/5 = 18 and 12, taking 7 from x for y; the
        // floors (x 25, y 5) already add up to p's 30, so x keeps 25 and y 5.
        let q = [
            parent(None, 100.0, 100.0),
            parent(Some(0), 50.0, 100.0),
            leaf(Some(1), 30.0, 100.0, 25.0, 100.0),
            leaf(Some(1), 20.0, 100.0, 5.0, 100.0),
            leaf(Some(0), 50.0, 100.0, 30.0, 100.0),
        ];
        close(&ideal_assignment(&q, 60.0), &[60.0, 30.0, 25.0, 5.0, 30.0]);
    }

    #[test]
    fn queues_without_a_guarantee_get_only_whats_left_and_share_it_equally() {
        // root 100: g (guarantee 60) wants 70; z1, z2 (no guarantee) each hold 20 and want 50.
        // g gets 70 (its cap); the remaining 30 is split equally: 15 / 15.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 60.0, 100.0, 0.0, 70.0),
            leaf(Some(0), 0.0, 100.0, 20.0, 30.0),
            leaf(Some(0), 0.0, 100.0, 20.0, 30.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 70.0, 15.0, 15.0]);
        // g wants everything: the unguaranteed queues get nothing.
        let q = [
            parent(None, 100.0, 100.0),
            leaf(Some(0), 60.0, 100.0, 0.0, 100.0),
            leaf(Some(0), 0.0, 100.0, 20.0, 30.0),
            leaf(Some(0), 0.0, 100.0, 20.0, 30.0),
        ];
        close(&ideal_assignment(&q, 100.0), &[100.0, 100.0, 0.0, 0.0]);
    }

    #[test]
    fn degenerate_inputs() {
        assert!(ideal_assignment(&[], 100.0).is_empty());
        // A parent index that does not come before the queue is treated as top level; NaN-free.
        let q = [leaf(Some(5), 10.0, 100.0, 0.0, 50.0), leaf(Some(1), 10.0, 100.0, 0.0, 50.0)];
        close(&ideal_assignment(&q, 100.0), &[50.0, 50.0]);
        // Nothing to share.
        let q = [leaf(None, 10.0, 100.0, 0.0, 50.0)];
        close(&ideal_assignment(&q, 0.0), &[0.0]);
        close(&ideal_assignment(&q, -5.0), &[0.0]);
    }

    /// The loop the seed describes: start from nothing; offer each queue that still wants more
    /// its guarantee's share of what is unassigned; a queue takes what it can up to its cap; a
    /// queue that took less than offered is satisfied and drops out; repeat until nothing is
    /// unassigned or nobody wants more.
    fn ideal_by_offers(amount: f64, items: &[Item]) -> Vec<f64> {
        let mut got = vec![0.0; items.len()];
        let mut active: Vec<usize> = (0..items.len()).filter(|&i| items[i].cap > 0.0).collect();
        let mut left = amount;
        while !active.is_empty() && left > 1e-9 {
            let w: f64 = active.iter().map(|&i| items[i].weight).sum();
            let mut taken = 0.0;
            active.retain(|&i| {
                let offer = left * items[i].weight / w;
                let take = offer.min(items[i].cap - got[i]);
                got[i] += take;
                taken += take;
                take >= offer - 1e-12
            });
            left -= taken;
        }
        got
    }

    #[test]
    fn water_level_is_the_offer_loops_fixed_point() {
        // The SDK's seeded generator, so the cases are the same every run.
        let mut rng = gantry_sdk::rng::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.unit();
        for _ in 0..2000 {
            let n = 1 + (next() * 6.0) as usize;
            let items: Vec<Item> = (0..n)
                .map(|_| Item {
                    weight: 0.05 + next(),
                    floor: 0.0,
                    cap: if next() < 0.2 { 0.0 } else { next() * 100.0 },
                })
                .collect();
            let amount = next() * 150.0;
            close(&water_level(amount, &items), &ideal_by_offers(amount, &items));
        }
    }
}
