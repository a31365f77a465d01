//! A segment tree over steps with range add and min / max queries, for one resource dimension.
//!
//! Adds are not pushed down: a node's `add` applies to its whole subtree, and its `min` / `max`
//! already include it, so a query adds up the `add`s on the way down. Three `i64` per node,
//! `2 × next_power_of_two(steps)` nodes, and an `i128` sum per inner node: 8 MiB for a day at
//! one-second steps.

/// Padding leaves: never the minimum, never the maximum.
const BIG: i64 = i64::MAX / 4;

/// One node: together, so a descent touches one cache line per node.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// Least value in the subtree, `add` included.
    min: i64,
    /// Largest value in the subtree, `add` included.
    max: i64,
    /// Added to the whole subtree and not pushed down.
    add: i64,
}

#[derive(Debug, Clone)]
pub(crate) struct Tree {
    /// Number of real leaves.
    n: usize,
    /// Leaves in the padded tree (a power of two).
    size: usize,
    /// Index 1 is the root, `2v` and `2v + 1` the children of `v`, leaves from `size`.
    nodes: Vec<Node>,
    /// Sums of the inner nodes (index `1..size`; a leaf's sum is its `min`), including their
    /// own `add`; exact in `i128`.
    sum: Vec<i128>,
}

impl Tree {
    /// A tree of `n` steps, all at `value`.
    pub(crate) fn new(n: usize, value: i64) -> Self {
        let size = n.max(1).next_power_of_two();
        let mut nodes = vec![Node { min: BIG, max: -BIG, add: 0 }; 2 * size];
        for leaf in &mut nodes[size..size + n] {
            leaf.min = value;
            leaf.max = value;
        }
        for v in (1..size).rev() {
            nodes[v].min = nodes[2 * v].min.min(nodes[2 * v + 1].min);
            nodes[v].max = nodes[2 * v].max.max(nodes[2 * v + 1].max);
        }
        let mut tree = Tree { n, size, nodes, sum: vec![0; size] };
        for v in (1..size).rev() {
            tree.sum[v] = tree.child_sum(2 * v) + tree.child_sum(2 * v + 1);
        }
        tree
    }

    /// The sum of node `v`'s subtree (padding leaves count 0).
    fn child_sum(&self, v: usize) -> i128 {
        if v >= self.size {
            if v - self.size < self.n { i128::from(self.nodes[v].min) } else { 0 }
        } else {
            self.sum[v]
        }
    }

    /// Sum over `[l, r)`.
    pub(crate) fn range_sum(&self, l: usize, r: usize) -> i128 {
        let r = r.min(self.n);
        if l >= r {
            return 0;
        }
        self.sum_rec(1, 0, self.size, l, r)
    }

    fn sum_rec(&self, v: usize, lo: usize, hi: usize, l: usize, r: usize) -> i128 {
        if l <= lo && hi <= r {
            return self.child_sum(v);
        }
        let mid = (lo + hi) / 2;
        let mut total = 0;
        if l < mid {
            total += self.sum_rec(2 * v, lo, mid, l, r);
        }
        if mid < r {
            total += self.sum_rec(2 * v + 1, mid, hi, l, r);
        }
        let overlap = r.min(hi) - l.max(lo);
        total + i128::from(self.nodes[v].add) * overlap as i128
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>() + self.sum.capacity() * size_of::<i128>()
    }

    /// Adds `delta` to every step of `[l, r)`.
    pub(crate) fn range_add(&mut self, l: usize, r: usize, delta: i64) {
        let r = r.min(self.n);
        if l >= r || delta == 0 {
            return;
        }
        self.add_rec(1, 0, self.size, l, r, delta);
    }

    fn add_rec(&mut self, v: usize, lo: usize, hi: usize, l: usize, r: usize, delta: i64) {
        if r <= lo || hi <= l {
            return;
        }
        if l <= lo && hi <= r {
            self.nodes[v].add += delta;
            self.nodes[v].min += delta;
            self.nodes[v].max += delta;
            if v < self.size {
                self.sum[v] += i128::from(delta) * (hi - lo) as i128;
            }
            return;
        }
        let mid = (lo + hi) / 2;
        self.add_rec(2 * v, lo, mid, l, r, delta);
        self.add_rec(2 * v + 1, mid, hi, l, r, delta);
        self.nodes[v].min = self.nodes[2 * v].min.min(self.nodes[2 * v + 1].min) + self.nodes[v].add;
        self.nodes[v].max = self.nodes[2 * v].max.max(self.nodes[2 * v + 1].max) + self.nodes[v].add;
        self.sum[v] = self.child_sum(2 * v)
            + self.child_sum(2 * v + 1)
            + i128::from(self.nodes[v].add) * (hi - lo) as i128;
    }

    /// The value at step `i`.
    pub(crate) fn get(&self, i: usize) -> i64 {
        let mut v = self.size + i;
        let mut total = self.nodes[v].min;
        v /= 2;
        while v >= 1 {
            total += self.nodes[v].add;
            v /= 2;
        }
        total
    }

    /// Minimum over `[l, r)` (`BIG` if empty).
    pub(crate) fn range_min(&self, l: usize, r: usize) -> i64 {
        let r = r.min(self.n);
        if l >= r {
            return BIG;
        }
        self.min_rec(1, 0, self.size, l, r)
    }

    fn min_rec(&self, v: usize, lo: usize, hi: usize, l: usize, r: usize) -> i64 {
        if l <= lo && hi <= r {
            return self.nodes[v].min;
        }
        let mid = (lo + hi) / 2;
        let mut best = BIG;
        if l < mid {
            best = best.min(self.min_rec(2 * v, lo, mid, l, r));
        }
        if mid < r {
            best = best.min(self.min_rec(2 * v + 1, mid, hi, l, r));
        }
        best + self.nodes[v].add
    }

    /// Maximum over `[l, r)` (`-BIG` if empty).
    pub(crate) fn range_max(&self, l: usize, r: usize) -> i64 {
        let r = r.min(self.n);
        if l >= r {
            return -BIG;
        }
        self.max_rec(1, 0, self.size, l, r)
    }

    fn max_rec(&self, v: usize, lo: usize, hi: usize, l: usize, r: usize) -> i64 {
        if l <= lo && hi <= r {
            return self.nodes[v].max;
        }
        let mid = (lo + hi) / 2;
        let mut best = -BIG;
        if l < mid {
            best = best.max(self.max_rec(2 * v, lo, mid, l, r));
        }
        if mid < r {
            best = best.max(self.max_rec(2 * v + 1, mid, hi, l, r));
        }
        best + self.nodes[v].add
    }

    /// The last step of `[l, r)` whose value is below `thr`.
    pub(crate) fn last_below(&self, l: usize, r: usize, thr: i64) -> Option<usize> {
        self.find::<true>(l, r, Probe { thr, below: true })
    }

    /// The last step of `[l, r)` whose value is at least `thr`.
    pub(crate) fn last_at_least(&self, l: usize, r: usize, thr: i64) -> Option<usize> {
        self.find::<true>(l, r, Probe { thr, below: false })
    }

    /// The first step of `[l, r)` whose value is below `thr`.
    pub(crate) fn first_below(&self, l: usize, r: usize, thr: i64) -> Option<usize> {
        self.find::<false>(l, r, Probe { thr, below: true })
    }

    /// The first step of `[l, r)` whose value is at least `thr`.
    pub(crate) fn first_at_least(&self, l: usize, r: usize, thr: i64) -> Option<usize> {
        self.find::<false>(l, r, Probe { thr, below: false })
    }

    /// The last (`LAST`) or first step of `[l, r)` that `probe` matches. The direction is a
    /// const parameter so each search compiles to its own loop: this is admission's hot path.
    fn find<const LAST: bool>(&self, l: usize, r: usize, probe: Probe) -> Option<usize> {
        let r = r.min(self.n);
        if l >= r {
            return None;
        }
        self.find_rec::<LAST>(1, 0, self.size, l, r, 0, probe)
    }

    /// Whether the subtree at `v` (with `above` added by its ancestors) can hold a match.
    fn may_hold(&self, v: usize, above: i64, probe: Probe) -> bool {
        if probe.below {
            self.nodes[v].min + above < probe.thr
        } else {
            self.nodes[v].max + above >= probe.thr
        }
    }

    /// Descends into the subtree at `v` (covering `[lo, hi)`), nearer end first, skipping
    /// subtrees outside `[l, r)` or that cannot hold a match.
    #[allow(clippy::too_many_arguments)]
    fn find_rec<const LAST: bool>(
        &self,
        v: usize,
        lo: usize,
        hi: usize,
        l: usize,
        r: usize,
        above: i64,
        probe: Probe,
    ) -> Option<usize> {
        if r <= lo || hi <= l || !self.may_hold(v, above, probe) {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        let inner = above + self.nodes[v].add;
        if LAST {
            self.find_rec::<LAST>(2 * v + 1, mid, hi, l, r, inner, probe)
                .or_else(|| self.find_rec::<LAST>(2 * v, lo, mid, l, r, inner, probe))
        } else {
            self.find_rec::<LAST>(2 * v, lo, mid, l, r, inner, probe)
                .or_else(|| self.find_rec::<LAST>(2 * v + 1, mid, hi, l, r, inner, probe))
        }
    }
}

/// What [`Tree::find`] looks for: a value below `thr`, or at least `thr`.
#[derive(Debug, Clone, Copy)]
struct Probe {
    thr: i64,
    below: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_plain_array() {
        let n = 37;
        let mut t = Tree::new(n, 10);
        let mut a = vec![10i64; n];
        let ops = [(3, 20, -4), (0, 37, 2), (10, 11, -9), (30, 37, 5), (5, 6, -1)];
        for &(l, r, d) in &ops {
            t.range_add(l, r, d);
            for x in &mut a[l..r] {
                *x += d;
            }
            for (i, &x) in a.iter().enumerate() {
                assert_eq!(t.get(i), x);
            }
            for l in 0..n {
                for r in l + 1..=n {
                    let s = &a[l..r];
                    assert_eq!(t.range_min(l, r), *s.iter().min().unwrap_or(&BIG));
                    assert_eq!(t.range_max(l, r), *s.iter().max().unwrap_or(&-BIG));
                    assert_eq!(t.range_sum(l, r), s.iter().map(|&x| i128::from(x)).sum::<i128>());
                    for thr in [0, 7, 8, 12, 13] {
                        let lb = (l..r).rev().find(|&i| a[i] < thr);
                        let la = (l..r).rev().find(|&i| a[i] >= thr);
                        let fb = (l..r).find(|&i| a[i] < thr);
                        let fa = (l..r).find(|&i| a[i] >= thr);
                        assert_eq!(t.last_below(l, r, thr), lb);
                        assert_eq!(t.last_at_least(l, r, thr), la);
                        assert_eq!(t.first_below(l, r, thr), fb);
                        assert_eq!(t.first_at_least(l, r, thr), fa);
                    }
                }
            }
        }
    }
}
