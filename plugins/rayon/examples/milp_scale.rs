//! The optimiser on a plan the size it is meant for (about 1,500 cells), under a 20 s time limit:
//! `cargo run --release -p gantry-rayon --example milp_scale` (`MILP_N` reservations, 40 by
//! default, and `MILP_CELLS` the cell bound, 1,500 by default). First on the plan as GREE left
//! it, then after the last 100 steps lose half the capacity.

use std::time::{Duration, Instant};

use gantry_rayon::agents::{Agent, admit};
use gantry_rayon::milp::{self, Options, Request};
use gantry_rayon::plan::Plan;
use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;
use gantry_sdk::rng::SplitMix64;

fn cpu(c: u64) -> GantryResources {
    GantryResources { cpu_millis: c, ..Default::default() }
}

/// The SDK's seeded generator, with the draw this example makes.
struct Rng(SplitMix64);

impl Rng {
    /// Uniform in `[0, n)`.
    fn next(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
}

/// `n` reservations (GREE and GREE-L alternately) on a 600-step plan of 64 CPUs.
fn scenario(n: u64) -> (Plan, Vec<Request>) {
    let steps = 600;
    let mut plan = Plan::new(1000, steps, &cpu(64_000)).expect("plan");
    let mut rng = Rng(SplitMix64::new(0x9e37_79b9_7f4a_7c15));
    let mut requests = Vec::new();
    for id in 0..n {
        let start = rng.next(400);
        let len = 60 + rng.next(steps as u64 - start - 60 + 1);
        let g = 1 + rng.next(2) as u32;
        let h = g * (1 + rng.next(4) as u32);
        let work = (5 + rng.next(40)) * u64::from(g) * 1000;
        let expr = Expr::Window(Window {
            start_ms: start * 1000,
            end_ms: (start + len).min(steps as u64) * 1000,
            inner: Box::new(Expr::Atom(Atom {
                bundle: cpu(1000 * (1 + rng.next(4))),
                min_parallel: g,
                max_parallel: h,
                min_lease_ms: 0,
                work,
            })),
        });
        let agent = if id % 2 == 0 { Agent::Gree } else { Agent::GreeL };
        if admit(&mut plan, &expr, agent, id).is_ok() {
            requests.push(Request { id, expr });
        }
    }
    (plan, requests)
}

fn knobs() -> (u64, Options) {
    let n: u64 = std::env::var("MILP_N").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let max_cells: usize = std::env::var("MILP_CELLS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    (n, Options { time_limit: Duration::from_secs(20), max_cells, ..Options::default() })
}

fn main() {
    reservations_on_ten_minutes();
    capacity_loss_at_scale();
}

fn reservations_on_ten_minutes() {
    let (n, opts) = knobs();
    let (mut plan, requests) = scenario(n);
    let t = Instant::now();
    let out = milp::optimize(&plan, &requests, &opts).expect("optimise");
    let wall = t.elapsed();
    println!("{} reservations: {:?} (wall {wall:?})", requests.len(), out.stats);
    assert!(out.stats.cells <= opts.max_cells);
    assert_eq!(out.stats.rejections, 0);
    out.apply(&mut plan).expect("apply");
    assert_eq!(plan.overcommitted(), None);
}

/// The last 100 steps lose half the capacity: keeping everything no longer fits, so the solver
/// has no feasible start; what it returns must fit (or be the input, with the reason).
fn capacity_loss_at_scale() {
    let (n, opts) = knobs();
    let (mut plan, requests) = scenario(n);
    plan.set_capacity(500, 600, &cpu(32_000)).expect("capacity");
    let t = Instant::now();
    let out = milp::optimize(&plan, &requests, &opts).expect("optimise");
    println!("capacity loss, {} reservations: {:?} (wall {:?})", requests.len(), out.stats, t.elapsed());
    if out.stats.kept_input.is_none() {
        out.apply(&mut plan).expect("apply");
        assert_eq!(plan.overcommitted(), None);
    }
}
