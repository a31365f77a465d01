//! A node's usage and the key that orders nodes.
//!
//! Every mode is "take the fitting node with the smallest key". A key is one `u64`:
//!
//! ```text
//!   bits 63..62  category   packed: 0 medium, 1 low (empty), 2 high; lifetime: 0 with work,
//!                           1 empty; other modes: always 0
//!   bits 61..32  usage      quantised usage, or its complement where fuller nodes come first;
//!                           lifetime: 18 bits of the complement of when the node's work ends
//!                           (in `end_resolution` steps from now), then 12 of usage's complement
//!   bits 31..0   rank       the node's place among equals: a seeded permutation of the node
//!                           index (random but reproducible), or the index itself (`ties`)
//! ```
//!
//! The rank breaks ties and is the whole order among empty nodes, so "low-usage nodes are picked
//! at random" is "in the order of a random permutation drawn from the call's seed". Either way it
//! is a bijection of the node index, so no two nodes share a key.

use crate::config::{Mode, UsageOf};
use gantry_sdk::abi::GantryResources;

/// The key of a node that must not be chosen (not running, or too full for anything pending).
pub const NO_KEY: u64 = u64::MAX;

/// Usage is clamped to `[0, USAGE_CLAMP]` and quantised to `USAGE_STEPS` per unit, so the
/// quantised value stays within the key's 30 usage bits (2^29 at most).
const USAGE_CLAMP: f64 = 2.0;
const USAGE_STEPS: f64 = (1u64 << 28) as f64;
const USAGE_MAX: u64 = 1 << 29;
/// `lifetime`'s fields: end steps (18 bits: half a year in minutes) and usage (12 bits).
const END_STEPS_MAX: u64 = (1 << 18) - 1;
const USAGE12_MAX: u64 = (1 << 12) - 1;

/// The category bits of a key (0, 1 or 2; 3 only for [`NO_KEY`]).
#[inline]
pub fn category(key: u64) -> u64 {
    key >> 62
}

/// Category numbers of packed mode, in the order they are tried.
pub const MEDIUM: u64 = 0;
/// Nodes with nothing allocated.
pub const LOW: u64 = 1;
/// Nodes above the threshold.
pub const HIGH: u64 = 2;

/// `used / capacity` for one dimension; `None` when the node lacks it.
#[inline]
fn share(used: u64, capacity: u64) -> Option<f64> {
    (capacity > 0).then(|| used as f64 / capacity as f64)
}

/// A node's usage: `used` against `capacity` as `what` measures it. Dimensions the node lacks
/// (capacity 0) are left out; a node lacking every dimension asked for has usage 0.
pub fn usage(what: UsageOf, used: &GantryResources, capacity: &GantryResources) -> f64 {
    let cpu = share(used.cpu_millis, capacity.cpu_millis);
    let mem = share(used.memory_bytes, capacity.memory_bytes);
    let gpu = share(u64::from(used.gpus), u64::from(capacity.gpus));
    match what {
        UsageOf::Memory => mem.unwrap_or(0.0),
        UsageOf::Cpu => cpu.unwrap_or(0.0),
        UsageOf::Gpus => gpu.unwrap_or(0.0),
        UsageOf::Dominant => [cpu, mem, gpu].into_iter().flatten().fold(0.0, f64::max),
        UsageOf::Mean => {
            let (sum, n) =
                [cpu, mem, gpu].into_iter().flatten().fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
            if n == 0 { 0.0 } else { sum / f64::from(n) }
        }
    }
}

/// Quantises a usage for the key (NaN counts as 0).
#[inline]
fn quantise(u: f64) -> u64 {
    // `as` saturates and maps NaN to 0; the clamp keeps the result at most USAGE_MAX.
    (u.clamp(0.0, USAGE_CLAMP) * USAGE_STEPS) as u64
}

/// A seeded bijection of `u32`: the node's rank among equals.
#[inline]
pub fn rank(seed: u64, node: u32) -> u32 {
    let s = gantry_sdk::rng::SplitMix64::new(seed).next_u64();
    let mut x = node ^ (s as u32);
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x = x.wrapping_add((s >> 32) as u32);
    x = x.wrapping_mul(0x9e37_79b1);
    x ^ (x >> 13)
}

/// Computes keys for one call.
#[derive(Debug, Clone, Copy)]
pub struct Keyer {
    /// The mode in effect (`Spread` while packing is off for lack of nodes).
    pub mode: Mode,
    /// What usage measures.
    pub usage: UsageOf,
    /// High-usage threshold.
    pub threshold: f64,
    /// The call's time, ms (`lifetime`).
    pub now_ms: u64,
    /// Ends closer than this are equal, ms, at least 1 (`lifetime`).
    pub end_resolution_ms: u64,
}

impl Keyer {
    /// The key of a node that may be chosen: `used` (allocated, or measured plus placed since)
    /// against `capacity`; `occupied` when anything is allocated on it (containers, or
    /// placements of this call); `ends_ms` when its work is expected to end (`lifetime`;
    /// `u64::MAX` when unknown); `rank` its place among equals.
    #[inline]
    pub fn key(
        &self,
        capacity: &GantryResources,
        used: &GantryResources,
        occupied: bool,
        ends_ms: u64,
        rank: u32,
    ) -> u64 {
        let u = usage(self.usage, used, capacity);
        let q = quantise(u);
        let rank = u64::from(rank);
        match self.mode {
            Mode::Lifetime if !occupied => (LOW << 62) | rank,
            Mode::Lifetime => {
                let steps =
                    (ends_ms.saturating_sub(self.now_ms) / self.end_resolution_ms.max(1)).min(END_STEPS_MAX);
                let u12 = (u.clamp(0.0, 1.0) * USAGE12_MAX as f64) as u64;
                (((END_STEPS_MAX - steps) << 12 | (USAGE12_MAX - u12)) << 32) | rank
            }
            Mode::Spread => (q << 32) | rank,
            Mode::BestFit => ((USAGE_MAX - q) << 32) | rank,
            Mode::Packed if !occupied => (LOW << 62) | rank,
            Mode::Packed if u > self.threshold => (HIGH << 62) | (q << 32) | rank,
            Mode::Packed => (MEDIUM << 62) | ((USAGE_MAX - q) << 32) | rank,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// A node of 8 cores, 16 GiB and 4 GPUs with this much used.
    fn key(k: &Keyer, cpu: u64, mem_gib: u64, gpus: u32) -> u64 {
        let capacity = GantryResources::new(8000, 16 * GIB, 4);
        let used = GantryResources::new(cpu, mem_gib * GIB, gpus);
        k.key(&capacity, &used, !used.is_zero(), u64::MAX, 0)
    }

    #[test]
    fn usage_per_setting_leaves_out_missing_dimensions() {
        let cap = GantryResources::new(8000, 16 * GIB, 4);
        let used = GantryResources::new(2000, 12 * GIB, 1);
        assert_eq!(usage(UsageOf::Memory, &used, &cap), 0.75);
        assert_eq!(usage(UsageOf::Cpu, &used, &cap), 0.25);
        assert_eq!(usage(UsageOf::Gpus, &used, &cap), 0.25);
        assert_eq!(usage(UsageOf::Dominant, &used, &cap), 0.75);
        assert!((usage(UsageOf::Mean, &used, &cap) - (0.25 + 0.75 + 0.25) / 3.0).abs() < 1e-12);
        // A node without GPUs: the GPU share is left out, not counted as 0.
        let no_gpu = GantryResources::new(8000, 16 * GIB, 0);
        assert_eq!(usage(UsageOf::Mean, &used, &no_gpu), 0.5);
        assert_eq!(usage(UsageOf::Gpus, &used, &no_gpu), 0.0);
        assert_eq!(usage(UsageOf::Dominant, &GantryResources::default(), &GantryResources::default()), 0.0);
    }

    #[test]
    fn rank_is_a_seeded_permutation() {
        let mut seen: Vec<u32> = (0..5000).map(|n| rank(42, n)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 5000);
        assert_ne!(
            (0..8).map(|n| rank(1, n)).collect::<Vec<_>>(),
            (0..8).map(|n| rank(2, n)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn packed_keys_order_medium_fullest_then_low_then_high_least_used() {
        let k = Keyer {
            mode: Mode::Packed,
            usage: UsageOf::Memory,
            threshold: 0.6,
            now_ms: 0,
            end_resolution_ms: 1,
        };
        let medium_full = key(&k, 100, 9, 0); // 0.5625
        let medium_light = key(&k, 100, 1, 0); // 0.0625
        let at_threshold =
            k.key(&GantryResources::new(10, 10, 0), &GantryResources::new(6, 6, 0), true, u64::MAX, 0);
        let empty = key(&k, 0, 0, 0);
        let high_light = key(&k, 100, 10, 0); // 0.625
        let high_full = key(&k, 100, 15, 0);
        assert_eq!(category(at_threshold), MEDIUM, "usage equal to the threshold is medium");
        assert!(at_threshold < medium_full && medium_full < medium_light);
        assert!(medium_light < empty && empty < high_light && high_light < high_full);
        // CPU allocated but no memory: occupied, so medium with usage 0, not low.
        assert_eq!(category(key(&k, 500, 0, 0)), MEDIUM);
        assert!(high_full < NO_KEY);
        let spread = Keyer { mode: Mode::Spread, ..k };
        assert!(key(&spread, 0, 0, 0) < key(&spread, 100, 1, 0));
        assert!(key(&spread, 100, 1, 0) < key(&spread, 100, 15, 0));
        let best = Keyer { mode: Mode::BestFit, ..k };
        assert!(key(&best, 100, 15, 0) < key(&best, 100, 1, 0));
        assert!(key(&best, 100, 1, 0) < key(&best, 0, 0, 0));
        assert_eq!(category(key(&best, 100, 15, 0)), 0);
    }

    #[test]
    fn lifetime_keys_order_nodes_by_when_their_work_ends_then_fullest_then_empty() {
        let k = Keyer {
            mode: Mode::Lifetime,
            usage: UsageOf::Memory,
            threshold: 0.6,
            now_ms: 1_000_000,
            end_resolution_ms: 60_000,
        };
        let cap = GantryResources::new(8000, 16 * GIB, 0);
        let used = |gib: u64| GantryResources::new(1000, gib * GIB, 0);
        let ends_in = |min: u64| 1_000_000 + min * 60_000;
        let late_light = k.key(&cap, &used(1), true, ends_in(60), 7);
        let soon_full = k.key(&cap, &used(15), true, ends_in(2), 3);
        let soon_light = k.key(&cap, &used(2), true, ends_in(2), 1);
        let unknown = k.key(&cap, &used(1), true, u64::MAX, 9);
        let empty_first = k.key(&cap, &GantryResources::default(), false, 0, 0);
        let empty_second = k.key(&cap, &GantryResources::default(), false, 0, 1);
        // Work that never announced its end keeps its node longest: it comes first.
        assert!(unknown < late_light, "unknown end first");
        assert!(late_light < soon_full, "the later end first, however light");
        assert!(soon_full < soon_light, "equal ends: fullest first");
        assert!(soon_light < empty_first && empty_first < empty_second, "empty nodes last, by rank");
        // Ends within one resolution step are equal: usage decides.
        let a = k.key(&cap, &used(4), true, ends_in(2) + 10_000, 0);
        let b = k.key(&cap, &used(8), true, ends_in(2) + 20_000, 1);
        assert!(b < a);
        // Work past its expected end counts as ending now.
        assert_eq!(k.key(&cap, &used(4), true, 0, 0), k.key(&cap, &used(4), true, 1_000_000, 0));
    }
}
