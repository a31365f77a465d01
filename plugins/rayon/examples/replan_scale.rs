//! The replanner at scale (`cargo run --release -p gantry-rayon --example replan_scale [N]`,
//! N reservations, 2,000 by default):
//! a 24-hour plan at 1 s steps on 10,000 nodes, filled with random reservations by GREE-L, then
//! 5 % of the nodes lost for 12 hours. Prints the time and the rejections of gantry's replanner
//! and of YARN's.

use std::time::Instant;

use gantry_rayon::agents::{Agent, admit};
use gantry_rayon::plan::Plan;
use gantry_rayon::replan::{ReservationInfo, affected, replan, replan_yarn_simple};
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;
use gantry_sdk::rng::SplitMix64;

const GIB: u64 = 1 << 30;
const NODES: u64 = 10_000;
const HOUR_MS: u64 = 3_600_000;

/// The SDK's seeded generator, with the draw this example makes.
struct Rng(SplitMix64);

impl Rng {
    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.below(hi - lo)
    }
}

fn node(n: u64) -> GantryResources {
    GantryResources { cpu_millis: 16_000 * n, memory_bytes: 64 * GIB * n, gpus: 0, reserved: 0 }
}

fn main() {
    let reservations: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut plan = Plan::with_horizon(1000, 24 * HOUR_MS, &node(NODES)).expect("plan");
    let mut rng = Rng(SplitMix64::new(0x9e37_79b9_7f4a_7c15));
    // About the day's capacity in all: n · h · 2.5 cores · 2.5 h ≈ 160,000 cores · 24 h.
    let h_mean = (614_400 / reservations.max(1)).max(10);
    let mut infos = Vec::new();
    let t = Instant::now();
    for id in 0..reservations {
        // Containers of 1 to 4 cores at 4 GiB a core; up to twice the mean width at a time; 1 to 4 hours of
        // work at full width, in a window 1.5 to 3 times as long.
        let cores = rng.range(1, 5);
        let h = rng.range(10, 2 * h_mean);
        let run_ms = rng.range(HOUR_MS, 4 * HOUR_MS);
        let len = run_ms * rng.range(15, 31) / 10;
        let start = rng.range(0, 24 * HOUR_MS - len);
        let expr = Expr::Window(Window {
            start_ms: start,
            end_ms: start + len,
            inner: Box::new(Expr::Atom(Atom {
                bundle: GantryResources {
                    cpu_millis: cores * 1000,
                    memory_bytes: cores * 4 * GIB,
                    gpus: 0,
                    reserved: 0,
                },
                min_parallel: 1,
                max_parallel: h as u32,
                min_lease_ms: 60_000,
                work: h * run_ms,
            })),
        });
        if admit(&mut plan, &expr, Agent::GreeL, id).is_ok() {
            infos.push(ReservationInfo::new(id, expr, (id % 3) as i64, id));
        }
    }
    println!("admitted {} of {reservations} in {:?}", infos.len(), t.elapsed());
    let lost = NODES * 95 / 100;
    plan.set_capacity(6 * 3600, 18 * 3600, &node(lost)).expect("range");
    let hit = affected(&plan);
    println!("5 % of nodes lost for 12 h: {} reservations affected", hit.len());

    let mut yarn = plan.clone();
    let t = Instant::now();
    let y = replan_yarn_simple(&mut yarn, &infos);
    println!("YARN: {} rejected in {:?}", y.rejected.len(), t.elapsed());
    assert_eq!(yarn.overcommitted(), None);

    let t = Instant::now();
    let r = replan(&mut plan, &infos, Agent::GreeL);
    println!(
        "gantry ({}): {} kept, {} moved, {} rejected in {:?}",
        r.strategy,
        r.kept.len(),
        r.moved.len(),
        r.rejected.len(),
        t.elapsed()
    );
    assert_eq!(plan.overcommitted(), None);
    assert!(r.rejected.len() <= y.rejected.len());
}
