//! A random mix of reservations for a large plan: what the admission benchmarks submit — the
//! Rayon planner's own (`plugins/rayon/examples/admission.rs`, linked in and through the C glue)
//! and `gantry bench reserve` (through the engine and the plugin host) — so that both time the
//! very same reservations for a seed.
//!
//! The cluster ([`capacity`]): [`NODES`] nodes of [`CORES`] cores and 128 GiB, [`GPU_NODES`] of
//! them also with 8 GPUs. [`generate`] draws `count` reservations whose total work is about 1.2
//! times what the cluster's CPU can run in a day, so some are rejected: each a `window` of 1 to
//! 8 hours somewhere in the day around an atom (55 %), an `order` of 2–3 stages (15 %), an `all`
//! of 2–3 parts (15 %) or an `any` of a large and a smaller alternative (15 %). Atoms ask for
//! 1, 2, 4 or 8 cores (5 % with a GPU) and are malleable (g = 1, a lease of 1 ms, h of 50 to
//! 3,000 but at least what fits the work in the window) or gangs (g = h of 16–256, the lease
//! their whole run). Sizes vary tenfold around the mean. Every reservation is valid RDL (what
//! the API would accept).
//! Seeded SplitMix64 ([`gantry_sdk::rng`]): the same seed gives the same mix.

use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;

/// Nodes in the cluster.
pub const NODES: u64 = 10_000;
/// Nodes that also have 8 GPUs.
pub const GPU_NODES: u64 = 1_000;
/// Cores per node (128 GiB each).
pub const CORES: u64 = 32;
const GIB: u64 = 1 << 30;
/// A day, ms: the windows lie in `[0, DAY_MS)`.
pub const DAY_MS: u64 = 24 * 3600 * 1000;
const HOUR_MS: u64 = 3600 * 1000;

/// What the whole cluster holds.
pub fn capacity() -> GantryResources {
    GantryResources {
        cpu_millis: NODES * CORES * 1000,
        memory_bytes: NODES * 128 * GIB,
        gpus: (GPU_NODES * 8) as u32,
        reserved: 0,
    }
}

/// The reservations of a mix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// Each a `window(start, end, …)` with `0 ≤ start < end ≤ DAY_MS`, in submission order.
    pub reservations: Vec<Expr>,
    /// Their real demand over the day's CPU (about 1.2).
    pub demand_ratio: f64,
}

/// The SDK's SplitMix64, with the draws the mix needs.
struct Rng(gantry_sdk::rng::SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        self.0.unit()
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
}

/// One atom of about `core_ms` core-milliseconds that can run in `window_ms`; with its real
/// demand in core-ms.
fn atom(rng: &mut Rng, core_ms: f64, window_ms: u64) -> (Expr, f64) {
    let gpu = rng.unit() < 0.05;
    let cores = rng.pick(&[1u64, 2, 4, 8]);
    let bundle = GantryResources {
        cpu_millis: cores * 1000,
        memory_bytes: cores * rng.pick(&[2u64, 4, 4, 6]) * GIB,
        gpus: u32::from(gpu),
        reserved: 0,
    };
    let bundle_ms = (core_ms / cores as f64).max(1000.0);
    let gang = rng.unit() < 0.3;
    let (g, h, lease, work) = if gang {
        // g = h: an MPI-like job of `h` bundles for its whole run.
        let h = rng.pick(&[16u64, 32, 64, 128, 256]);
        let run_ms = ((bundle_ms / h as f64) as u64).clamp(60_000, window_ms * 3 / 4);
        let run_ms = run_ms / 1000 * 1000;
        (h, h, run_ms, h * run_ms)
    } else {
        // Malleable: the least lease the RDL allows, and at least as many bundles at once as
        // the work needs to fit the window (an expression that cannot is invalid RDL).
        let work = bundle_ms as u64;
        let h = rng.range(50, 3000).max(work.div_ceil(window_ms.max(1)));
        (1, h, 1, work)
    };
    let expr = Expr::Atom(Atom {
        bundle,
        min_parallel: g as u32,
        max_parallel: h as u32,
        min_lease_ms: lease,
        work,
    });
    (expr, work as f64 * cores as f64)
}

/// One reservation of about `core_ms` core-milliseconds; with its real demand.
fn reservation(rng: &mut Rng, core_ms: f64) -> (Expr, f64) {
    let len = rng.range(HOUR_MS, 8 * HOUR_MS);
    let start = rng.range(0, DAY_MS - len);
    let kind = rng.unit();
    let (inner, demand) = if kind < 0.55 {
        atom(rng, core_ms, len)
    } else if kind < 0.85 {
        let n = rng.range(2, 4);
        let per = core_ms / n as f64;
        let stage_len = if kind < 0.70 { len / n } else { len };
        let mut parts = Vec::new();
        let mut total = 0.0;
        for _ in 0..n {
            let (e, d) = atom(rng, per, stage_len);
            parts.push(e);
            total += d;
        }
        (if kind < 0.70 { Expr::Order(parts) } else { Expr::All(parts) }, total)
    } else {
        // The large alternative first; if it does not fit, two thirds of it.
        let (big, d) = atom(rng, core_ms * 1.5, len);
        let (small, _) = atom(rng, core_ms, len);
        (Expr::Any(vec![big, small]), d)
    };
    let expr = Expr::Window(Window { start_ms: start, end_ms: start + len, inner: Box::new(inner) });
    (expr, demand)
}

/// `count` reservations drawn with `seed` (see the module documentation).
pub fn generate(count: u64, seed: u64) -> Mix {
    let day_core_ms = (NODES * CORES) as f64 * DAY_MS as f64;
    let per_res = 1.29 * day_core_ms / count.max(1) as f64;
    let mut rng = Rng(gantry_sdk::rng::SplitMix64::new(seed));
    let mut total = 0.0;
    let reservations = (0..count)
        .map(|_| {
            // Sizes vary tenfold around the mean.
            let size = per_res * (0.1 + 1.8 * rng.unit());
            let (e, d) = reservation(&mut rng, size);
            total += d;
            e
        })
        .collect();
    Mix { reservations, demand_ratio: total / day_core_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_valid_mix_of_every_shape_within_the_day() {
        let mix = generate(400, 7);
        assert_eq!(mix, generate(400, 7), "same seed, same mix");
        assert_ne!(mix.reservations, generate(400, 8).reservations);
        assert!((1.0..1.5).contains(&mix.demand_ratio), "demand {}", mix.demand_ratio);
        let mut shapes = [0usize; 4];
        for e in &mix.reservations {
            e.validate().expect("valid RDL");
            let Expr::Window(w) = e else { panic!("not a window: {e:?}") };
            assert!(w.start_ms < w.end_ms && w.end_ms <= DAY_MS);
            let k = match *w.inner {
                Expr::Atom(_) => 0,
                Expr::Order(_) => 1,
                Expr::All(_) => 2,
                Expr::Any(_) => 3,
                Expr::Window(_) => panic!("a window in a window"),
            };
            shapes[k] += 1;
        }
        assert!(shapes.iter().all(|&n| n > 0), "every shape drawn: {shapes:?}");
    }
}
