//! Admission latency of GREE and GREE-L on a large plan, linked in and through the ABI.
//!
//! ```text
//! cargo run --release -p gantry-rayon --example admission -- [RESERVATIONS] [SEED] [gree|gree-l|both] [linked|abi|both]
//! ```
//!
//! A 10,000-node cluster (32 cores and 128 GiB each; 1,000 of them also with 8 GPUs), a 24-hour
//! plan at 1 s steps, and RESERVATIONS (default 10,000) random reservations whose total work is
//! about 1.2 times what the cluster can run in the day, so some are rejected. Each is a window of
//! 1 to 8 hours around an atom (55 %), an `order` of 2–3 stages (15 %), an `all` of 2–3 parts
//! (15 %) or an `any` of a large and a smaller alternative (15 %); atoms are malleable (g = 1,
//! no lease) or gangs (g = h, the lease the whole run) — the mix of `gantry_sim::reservation_mix`,
//! which `gantry bench reserve` submits through the engine too. They are admitted one by one,
//! first all with GREE into an empty plan, then all with GREE-L into another, timing each
//! admission.
//!
//! `linked` (the default) times `agents::admit` on a plan of its own; `abi` times the plugin's
//! `reserve` hook (ADMIT) called through the SDK's C glue by the harness host
//! (`gantry_rayon::harness`), which lays out every accepted reservation in each call's view as
//! the engine does; `both` runs the two on the same reservations and says whether they decided
//! alike. The ABI figure is the hook alone (the host's own view building is not counted): the
//! view's check against the plugin's mirror, the admission on the mirror's plan (two horizons,
//! 48 h of steps, where the linked plan has 24 h), and the glue's copying of the answer.

use std::time::{Duration, Instant};

use gantry_rayon::agents::{Agent, admit};
use gantry_rayon::harness::{Host, Mode};
use gantry_rayon::plan::{DEFAULT_STEP_MS, Plan};
use gantry_rdl::Expr;
use gantry_sdk::abi::GantryResources;
use gantry_sim::reservation_mix::{self, CORES, DAY_MS, GPU_NODES, NODES};

const HOUR_MS: u64 = 3600 * 1000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let capacity = reservation_mix::capacity();
    let mix = reservation_mix::generate(count, seed);
    let (reservations, demand) = (mix.reservations, mix.demand_ratio);
    println!(
        "{NODES} nodes ({} cores, {} TiB, {} GPUs), 24 h at {DEFAULT_STEP_MS} ms steps, {count} reservations (seed {seed}), demand {:.2} x the day's CPU",
        NODES * CORES,
        NODES * 128 / 1024,
        GPU_NODES * 8,
        demand
    );
    let agents = match args.next().as_deref() {
        Some("gree") => vec![Agent::Gree],
        Some("gree-l") => vec![Agent::GreeL],
        _ => vec![Agent::Gree, Agent::GreeL],
    };
    let (linked, abi) = match args.next().as_deref() {
        Some("abi") => (false, true),
        Some("both") => (true, true),
        _ => (true, false),
    };
    for agent in agents {
        let mut decisions_linked = Vec::new();
        if linked {
            decisions_linked = run_linked(agent, &capacity, &reservations, count);
        }
        if abi {
            let decisions = run_abi(agent, &capacity, &reservations, count);
            if linked {
                let same = decisions == decisions_linked;
                println!(
                    "        linked and through the ABI decided alike: {}",
                    if same { "yes" } else { "NO" }
                );
            }
        }
    }
}

/// Prints the latency figures of one run.
fn report(label: &str, times: &mut [Duration], rejected_times: &mut [Duration], accepted: u64, count: u64) {
    times.sort();
    rejected_times.sort();
    println!(
        "{label:14} accepted {accepted}/{count}; admission p50 {:.1} us, p99 {:.1} us, max {:.1} us",
        percentile(times, 0.50).as_secs_f64() * 1e6,
        percentile(times, 0.99).as_secs_f64() * 1e6,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e6,
    );
    println!(
        "               rejections alone: p50 {:.1} us, p99 {:.1} us",
        percentile(rejected_times, 0.50).as_secs_f64() * 1e6,
        percentile(rejected_times, 0.99).as_secs_f64() * 1e6,
    );
}

/// The plugin's `reserve` hook through the C glue; returns which reservations it accepted.
fn run_abi(agent: Agent, capacity: &GantryResources, reservations: &[Expr], count: u64) -> Vec<bool> {
    let config = format!(r#"{{"agent": "{}"}}"#, if agent == Agent::Gree { "gree" } else { "gree-l" });
    let mut host = match Host::new(Mode::Glue, &config, *capacity, DEFAULT_STEP_MS, DAY_MS) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("cannot create the plugin: {e}");
            std::process::exit(1);
        }
    };
    let mut times = Vec::with_capacity(reservations.len());
    let mut rejected_times = Vec::new();
    let mut decisions = Vec::with_capacity(reservations.len());
    let mut with_host = Vec::with_capacity(reservations.len());
    let started = Instant::now();
    for (id, e) in reservations.iter().enumerate() {
        let (arrival, deadline) = match e {
            Expr::Window(w) => (w.start_ms, w.end_ms),
            _ => (0, DAY_MS),
        };
        let t = Instant::now();
        let answer = match host.submit(id as u64, e.clone(), arrival, deadline, 0) {
            Ok(a) => a,
            Err(err) => {
                eprintln!("reservation {id}: the hook failed: {err}");
                std::process::exit(1);
            }
        };
        with_host.push(t.elapsed());
        times.push(answer.elapsed);
        let ok = answer.decisions.iter().any(|d| d.kind == gantry_sdk::abi::GANTRY_DECISION_PLAN_RESERVATION);
        if !ok {
            rejected_times.push(answer.elapsed);
        }
        decisions.push(ok);
    }
    let wall = started.elapsed();
    let accepted = decisions.iter().filter(|&&x| x).count() as u64;
    report(&format!("{} (ABI)", agent.name()), &mut times, &mut rejected_times, accepted, count);
    with_host.sort();
    println!(
        "               with the harness host's view building: p50 {:.1} us, p99 {:.1} us; total {:.2} s; {} pieces in the last view",
        percentile(&with_host, 0.50).as_secs_f64() * 1e6,
        percentile(&with_host, 0.99).as_secs_f64() * 1e6,
        wall.as_secs_f64(),
        host.records().iter().map(|r| r.allocation.len()).sum::<usize>(),
    );
    decisions
}

/// `agents::admit` on a plan of its own; returns which reservations it accepted.
fn run_linked(agent: Agent, capacity: &GantryResources, reservations: &[Expr], count: u64) -> Vec<bool> {
    {
        let Ok(mut plan) = Plan::with_horizon(DEFAULT_STEP_MS, DAY_MS, capacity) else {
            eprintln!("cannot build the plan");
            std::process::exit(1);
        };
        let mut times = Vec::with_capacity(reservations.len());
        let mut rejected_times = Vec::new();
        let mut decisions = Vec::with_capacity(reservations.len());
        let mut accepted = 0u64;
        let mut intervals = 0usize;
        let started = Instant::now();
        for (id, e) in reservations.iter().enumerate() {
            let t = Instant::now();
            let r = admit(&mut plan, e, agent, id as u64);
            times.push(t.elapsed());
            if r.is_err() {
                rejected_times.push(t.elapsed());
            }
            decisions.push(r.is_ok());
            if let Ok(a) = r {
                accepted += 1;
                intervals += a.atoms.iter().map(Vec::len).sum::<usize>();
            }
        }
        let wall = started.elapsed();
        // Reserved core-hours, from the plan.
        let reserved: f64 =
            (0..plan.steps()).filter_map(|i| plan.used_at(i)).map(|u| u[0] as f64 / 1000.0).sum::<f64>()
                * DEFAULT_STEP_MS as f64
                / HOUR_MS as f64;
        times.sort();
        rejected_times.sort();
        println!(
            "{:7} accepted {accepted}/{count}, {:.1} intervals each, reserved {:.0} % of the day's CPU; admission p50 {:.1} us, p99 {:.1} us, max {:.1} us, total {:.2} s; plan memory {:.1} MB",
            agent.name(),
            intervals as f64 / accepted.max(1) as f64,
            100.0 * reserved / ((NODES * CORES) as f64 * 24.0),
            percentile(&times, 0.50).as_secs_f64() * 1e6,
            percentile(&times, 0.99).as_secs_f64() * 1e6,
            times.last().copied().unwrap_or_default().as_secs_f64() * 1e6,
            wall.as_secs_f64(),
            plan.memory_bytes() as f64 / 1e6,
        );
        println!(
            "        rejections alone: p50 {:.1} us, p99 {:.1} us",
            percentile(&rejected_times, 0.50).as_secs_f64() * 1e6,
            percentile(&rejected_times, 0.99).as_secs_f64() * 1e6,
        );
        decisions
    }
}
