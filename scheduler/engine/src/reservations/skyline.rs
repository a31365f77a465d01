//! What all accepted allocations hold together over time, as a step function: how the host checks
//! a planner's answer against the plan's capacity (`over_capacity`) and notices that a capacity
//! loss overcommits the plan (REPLAN) without walking every reservation.
//!
//! Amounts are `i128` per dimension (CPU millicores, memory bytes, GPUs): a piece holds
//! `bundles × bundle`, and a sum of many never overflows.

use std::collections::BTreeMap;

use crate::model::Resources;

/// An amount of each resource: CPU millicores, memory bytes, GPUs.
pub(crate) type Demand = [i128; 3];

/// No demand.
pub(crate) const ZERO: Demand = [0; 3];

/// `bundles` bundles of `bundle`.
pub(crate) fn demand(bundle: &Resources, bundles: u64) -> Demand {
    let n = i128::from(bundles);
    [
        i128::from(bundle.cpu_millis).saturating_mul(n),
        i128::from(bundle.memory_bytes).saturating_mul(n),
        i128::from(bundle.gpus).saturating_mul(n),
    ]
}

/// `r` as a demand.
pub(crate) fn of(r: &Resources) -> Demand {
    demand(r, 1)
}

/// `d` as resources, clamped to each field's range.
pub(crate) fn resources(d: &Demand) -> Resources {
    let clamp = |x: i128| u64::try_from(x.max(0)).unwrap_or(u64::MAX);
    Resources::new(clamp(d[0]), clamp(d[1]), u32::try_from(d[2].max(0)).unwrap_or(u32::MAX))
}

/// Whether `d` exceeds `cap` in some dimension.
pub(crate) fn exceeds(d: &Demand, cap: &Demand) -> bool {
    d.iter().zip(cap).any(|(x, c)| x > c)
}

fn add_into(a: &mut Demand, b: &Demand, sign: i128) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(y.saturating_mul(sign));
    }
}

/// A step function of demand over time: the value at a key holds until the next key; before the
/// first key (and before `floor`) it is zero.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Skyline {
    steps: BTreeMap<u64, Demand>,
    /// Nothing before this instant is kept (it is the past; see [`Skyline::forget_before`]).
    floor: u64,
}

impl Skyline {
    /// The demand at `t`.
    pub(crate) fn at(&self, t: u64) -> Demand {
        if t < self.floor {
            return ZERO;
        }
        self.steps.range(..=t).next_back().map_or(ZERO, |(_, v)| *v)
    }

    fn split(&mut self, t: u64) {
        if !self.steps.contains_key(&t) {
            let v = self.at(t);
            self.steps.insert(t, v);
        }
    }

    /// Drops the key at `t` if it does not change the value.
    fn merge_at(&mut self, t: u64) {
        if let Some(v) = self.steps.get(&t).copied() {
            let before = self.steps.range(..t).next_back().map_or(ZERO, |(_, v)| *v);
            if before == v {
                self.steps.remove(&t);
            }
        }
    }

    /// Adds `sign` × `d` over `[start, end)` (the part from `floor` on).
    pub(crate) fn add(&mut self, start: u64, end: u64, d: &Demand, sign: i128) {
        let start = start.max(self.floor);
        if start >= end || *d == ZERO {
            return;
        }
        self.split(start);
        self.split(end);
        for (_, v) in self.steps.range_mut(start..end) {
            add_into(v, d, sign);
        }
        self.merge_at(start);
        self.merge_at(end);
    }

    /// The most of each dimension over `[a, b)` (each dimension on its own).
    pub(crate) fn max_over(&self, a: u64, b: u64) -> Demand {
        let mut m = self.at(a);
        if a < b {
            for (_, v) in self.steps.range(a.saturating_add(1)..b) {
                for (x, y) in m.iter_mut().zip(v) {
                    *x = (*x).max(*y);
                }
            }
        }
        m
    }

    /// The first instant at or after `from` where the demand exceeds `cap`.
    pub(crate) fn first_over(&self, from: u64, cap: &Demand) -> Option<u64> {
        if exceeds(&self.at(from), cap) {
            return Some(from);
        }
        self.steps.range(from.saturating_add(1)..).find(|(_, v)| exceeds(v, cap)).map(|(t, _)| *t)
    }

    /// An empty skyline that forgets what lies before `floor`, as `self` does.
    pub(crate) fn empty_like(&self) -> Skyline {
        Skyline { steps: BTreeMap::new(), floor: self.floor }
    }

    /// Forgets what lies before `t` (the past: nothing is checked there any more).
    pub(crate) fn forget_before(&mut self, t: u64) {
        if t <= self.floor {
            return;
        }
        self.split(t);
        self.steps = self.steps.split_off(&t);
        self.floor = t;
        self.merge_at(t);
    }
}

/// A set of signed changes over time, as `(start, end, demand)` segments that do not overlap, in
/// time order: what one planner answer adds to and takes from the skyline.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    events: BTreeMap<u64, Demand>,
}

impl Delta {
    /// Adds `sign` × `d` over `[start, end)`.
    pub(crate) fn add(&mut self, start: u64, end: u64, d: &Demand, sign: i128) {
        if start >= end {
            return;
        }
        add_into(self.events.entry(start).or_insert(ZERO), d, sign);
        add_into(self.events.entry(end).or_insert(ZERO), d, -sign);
    }

    /// The segments where the change is not zero.
    pub(crate) fn segments(&self) -> Vec<(u64, u64, Demand)> {
        let mut out = Vec::new();
        let mut value = ZERO;
        let mut prev: Option<u64> = None;
        for (&t, d) in &self.events {
            if let Some(p) = prev {
                if value != ZERO && p < t {
                    out.push((p, t, value));
                }
            }
            add_into(&mut value, d, 1);
            prev = Some(t);
        }
        out
    }
}

/// Whether `sky` changed by `delta` exceeds `cap` anywhere from `from` on where the change adds
/// something (`everywhere`: anywhere from `from` on at all).
pub(crate) fn over_after(sky: &Skyline, delta: &Delta, from: u64, cap: &Demand, everywhere: bool) -> bool {
    let segments = delta.segments();
    if everywhere {
        let mut after = sky.clone();
        for (s, e, d) in &segments {
            after.add(*s, *e, d, 1);
        }
        return after.first_over(from, cap).is_some();
    }
    segments.iter().any(|(s, e, d)| {
        let (s, e) = ((*s).max(from), *e);
        if s >= e || d.iter().all(|&x| x <= 0) {
            return false;
        }
        let m = sky.max_over(s, e);
        (0..3).any(|k| d[k] > 0 && m[k].saturating_add(d[k]) > cap[k])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_and_taking_back_leaves_nothing() {
        let mut s = Skyline::default();
        s.add(10, 20, &[5, 0, 0], 1);
        s.add(15, 30, &[5, 1, 0], 1);
        assert_eq!(s.at(12), [5, 0, 0]);
        assert_eq!(s.at(17), [10, 1, 0]);
        assert_eq!(s.max_over(0, 100), [10, 1, 0]);
        assert_eq!(s.max_over(20, 30), [5, 1, 0]);
        assert_eq!(s.first_over(0, &[7, 9, 9]), Some(15));
        assert_eq!(s.first_over(20, &[7, 9, 9]), None);
        s.add(10, 20, &[5, 0, 0], -1);
        s.add(15, 30, &[5, 1, 0], -1);
        assert_eq!(s, Skyline::default());
    }

    #[test]
    fn the_past_is_forgotten_and_not_counted_again() {
        let mut s = Skyline::default();
        s.add(0, 100, &[1, 1, 1], 1);
        s.forget_before(50);
        assert_eq!(s.at(10), ZERO);
        assert_eq!(s.at(60), [1, 1, 1]);
        s.add(0, 100, &[1, 1, 1], -1);
        assert_eq!(s.at(60), ZERO);
        assert_eq!(s.max_over(0, 200), ZERO);
    }

    #[test]
    fn a_delta_is_checked_only_where_it_adds_unless_everywhere() {
        let mut s = Skyline::default();
        s.add(0, 10, &[10, 0, 0], 1); // already over a capacity of 8 at 0..10
        let mut d = Delta::default();
        d.add(20, 30, &[8, 0, 0], 1);
        assert!(!over_after(&s, &d, 0, &[8, 8, 8], false));
        assert!(over_after(&s, &d, 0, &[8, 8, 8], true));
        d.add(5, 25, &[1, 0, 0], 1);
        assert!(over_after(&s, &d, 0, &[8, 8, 8], false));
        let mut take = Delta::default();
        take.add(0, 10, &[2, 0, 0], -1);
        assert!(!over_after(&s, &take, 0, &[8, 8, 8], true));
    }
}
