//! `gantry bench reserve`: admission latency through the ABI as the daemon pays it — each
//! `Engine::handle(now, Event::ReservationSubmitted { .. })` with a reservation planner loaded
//! from its `.so` through the plugin host (by default the Rayon planner, `libgantry_rayon.so`,
//! beside the binary). One figure therefore covers the request put in engine time, the
//! reservation shown in the view's plan arrays, the `reserve` call (direct, or with a call
//! budget: the view copied for the plugin's worker thread), the planner itself, the host's check
//! of its answer and applying it (the record, its queue, the skyline, the view's arrays).
//!
//! The setup is that of the planner's own admission example, so the figures stand next to the
//! linked-in ones: a 10,000-node cluster (32 cores / 128 GiB each, 1,000 with 8 GPUs), one plan
//! queue holding all of it, `[reservations]` with 1 s steps and a 24 h horizon, and the seeded
//! mix of [`gantry_sim::reservation_mix`] (windows of 1–8 h within the day ahead, atoms, `order`,
//! `all`, `any`; total demand ≈ 1.2 × the day's CPU). Reservations are submitted one after the
//! other, `interval_ms` apart on the engine's clock, each one's window counted from its
//! submission; a `Tick` runs at each follower step as in the daemon (the follower, not timed
//! with the admissions, reported on its own).
//!
//! The planner's call is timed by wrapping it ([`Timed`]): what the engine's `Policy::call`
//! takes (the plugin host's work and the plugin's hook); the rest of `handle` is the engine's.
//! Wall-clock time counts waiting for a core, which a busy machine adds; the process's CPU time
//! over each `handle` (every thread's, so the budgeted call's worker too) leaves that out.

use super::{BenchError, quantile_ms};
use gantry_engine::{
    Command, Engine, EngineConfig, Event, NodeSpec, PlanConfig, Policy, PolicyError, Profile, QueueSpec,
    ReservationRequest, Resources, ViewChanges,
};
use gantry_rdl::Expr;
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::{Decisions, Hooks, View};
use gantry_sim::reservation_mix;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The plan queue: all of the cluster.
const PLAN: &str = "root.plan";

/// `gantry bench reserve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ReserveBenchArgs {
    /// Reservations to submit (15,000 leave more than 10,000 accepted).
    #[arg(long, default_value_t = 15_000)]
    pub reservations: u64,
    /// Seed of the reservation mix (the planner's admission example draws the same mix).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The planner's shared library. Default: `libgantry_rayon.so` beside this binary.
    #[arg(long)]
    pub planner: Option<PathBuf>,
    /// The Rayon planner's admission agent (its `agent` setting).
    #[arg(long, default_value = "gree", value_parser = ["gree", "gree-l"])]
    pub agent: String,
    /// The planner's call budget, ms: 0 calls it directly over the engine's arrays; more calls
    /// it on its worker thread over a copy of the view, as the daemon does (default 1000 there).
    #[arg(long, default_value_t = 0)]
    pub budget_ms: u64,
    /// Engine time between two submissions, ms. 0 keeps the clock still: every window then
    /// counts from the same instant, as in the planner's admission example.
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Quantiles of some latencies, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Latency {
    fn of(samples: &[Duration]) -> Latency {
        let mut sorted = samples.to_vec();
        sorted.sort();
        Latency {
            count: sorted.len() as u64,
            p50_us: quantile_ms(&sorted, 0.5) * 1e3,
            p99_us: quantile_ms(&sorted, 0.99) * 1e3,
            max_us: quantile_ms(&sorted, 1.0) * 1e3,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReserveBenchResult {
    /// The planner's library.
    pub planner: String,
    /// Its admission agent.
    pub agent: String,
    /// The mix's seed.
    pub seed: u64,
    /// The call budget, ms (0: direct calls).
    pub budget_ms: u64,
    /// Nodes.
    pub nodes: u64,
    /// Reservations submitted.
    pub submitted: u64,
    /// Their demand over the day's CPU.
    pub demand_ratio: f64,
    /// Admitted.
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Reservations the plan holds at the end.
    pub in_plan: u64,
    /// Allocation pieces the view shows at the end.
    pub pieces: u64,
    /// `handle(ReservationSubmitted)`, every submission.
    pub handle: Latency,
    /// The same, accepted ones.
    pub handle_accepted: Latency,
    /// The same, rejected ones.
    pub handle_rejected: Latency,
    /// The planner's call within it (plugin host and hook).
    pub planner_call: Latency,
    /// The rest of it: the engine's own work (staging, the answer's check, applying it).
    pub engine_rest: Latency,
    /// The process's CPU time over each `handle` (all threads; µs resolution).
    pub handle_cpu: Latency,
    /// The ticks between submissions (the follower; not part of the admissions).
    pub ticks: Latency,
    /// Items of the planner's answers the host refused.
    pub refused: u64,
    /// Planner calls that failed (refused answers included).
    pub failed_calls: u64,
    /// Calls the built-in answered instead of the planner.
    pub builtin: u64,
    /// The whole run of submissions and ticks, s.
    pub wall_s: f64,
}

impl ReserveBenchResult {
    /// The text report.
    pub fn summary(&self) -> String {
        let line = |label: &str, l: &Latency| {
            format!(
                "  {label:28} {:>6}  p50 {:>8.1} us  p99 {:>8.1} us  max {:>9.1} us\n",
                l.count, l.p50_us, l.p99_us, l.max_us
            )
        };
        let mut s = format!(
            "{} nodes, plan of 24 h at 1 s steps; {} reservations (seed {}, demand {:.2} x the day's CPU)\n\
             planner {} (agent {}), {}\n\
             accepted {}, rejected {}; the plan holds {} reservations, {} pieces; {:.1} s\n",
            self.nodes,
            self.submitted,
            self.seed,
            self.demand_ratio,
            self.planner,
            self.agent,
            if self.budget_ms == 0 {
                "direct calls".to_owned()
            } else {
                format!("call budget {} ms (worker thread, view copied)", self.budget_ms)
            },
            self.accepted,
            self.rejected,
            self.in_plan,
            self.pieces,
            self.wall_s,
        );
        s += &line("handle(), all", &self.handle);
        s += &line("handle(), accepted", &self.handle_accepted);
        s += &line("handle(), rejected", &self.handle_rejected);
        s += &line("  planner call (host + hook)", &self.planner_call);
        s += &line("  engine's own part", &self.engine_rest);
        s += &line("handle(), process CPU time", &self.handle_cpu);
        s += &line("ticks (follower, not above)", &self.ticks);
        if self.refused + self.failed_calls + self.builtin > 0 {
            s += &format!(
                "  WARNING: {} answer items refused, {} failed calls, {} built-in answers\n",
                self.refused, self.failed_calls, self.builtin
            );
        }
        s
    }
}

/// A policy whose calls are timed: the nanoseconds of the latest one are left in `last_ns`.
struct Timed {
    inner: DynamicPlugin,
    last_ns: Arc<AtomicU64>,
}

impl Policy for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn hooks(&self) -> Hooks {
        self.inner.hooks()
    }

    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        let t = Instant::now();
        let r = self.inner.call(view, out);
        self.took(t);
        r
    }

    fn call_with_changes(
        &mut self,
        view: &View<'_>,
        changes: &ViewChanges,
        out: &mut Decisions,
    ) -> Result<(), PolicyError> {
        let t = Instant::now();
        let r = self.inner.call_with_changes(view, changes, out);
        self.took(t);
        r
    }
}

impl Timed {
    fn took(&self, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_ns.store(ns, Ordering::Relaxed);
    }
}

/// The CPU time this process has used (every thread), or zero if it cannot be read.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(Duration::ZERO, |u| {
        let us = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
                + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
        };
        us(u.user_time()) + us(u.system_time())
    })
}

/// `libgantry_rayon.so` beside the running binary.
fn default_planner() -> Result<PathBuf, BenchError> {
    let exe =
        std::env::current_exe().map_err(|e| BenchError::Args(format!("cannot find this binary: {e}")))?;
    let dir = exe.parent().ok_or_else(|| BenchError::Args("this binary has no directory".into()))?;
    Ok(dir.join("libgantry_rayon.so"))
}

/// An engine with the whole cluster registered and `planner` as its `reserve` policy.
fn engine(planner: Timed) -> Result<Engine, BenchError> {
    let config = EngineConfig {
        history_len: 0,
        queues: vec![QueueSpec { path: PLAN.into(), guaranteed: 1.0, maximum: 1.0 }],
        reservations: Some(PlanConfig::new(PLAN)),
        ..EngineConfig::default()
    };
    let policies: Vec<Box<dyn Policy>> = vec![Box::new(planner)];
    let mut engine = Engine::new(config, policies, Profile { reserve: Some(0), ..Profile::default() })?;
    let cap = reservation_mix::capacity();
    let per_node = |total: u64| total / reservation_mix::NODES;
    for i in 0..reservation_mix::NODES {
        let gpus = if i < reservation_mix::GPU_NODES { 8 } else { 0 };
        engine.handle(
            0,
            Event::NodeRegistered(NodeSpec {
                name: format!("n{i:05}"),
                rack: format!("r{:03}", i / 40),
                labels: Vec::new(),
                capacity: Resources::new(per_node(cap.cpu_millis), per_node(cap.memory_bytes), gpus),
                gpu_list: Vec::new(),
            }),
        )?;
    }
    Ok(engine)
}

/// Runs the benchmark.
pub fn run(args: &ReserveBenchArgs) -> Result<ReserveBenchResult, BenchError> {
    if args.reservations == 0 {
        return Err(BenchError::Args("--reservations must be positive".into()));
    }
    let path = match &args.planner {
        Some(p) => p.clone(),
        None => default_planner()?,
    };
    let info = gantry_scheduler::plugin_host::inspect(&path)
        .map_err(|source| BenchError::Plugin { path: path.clone(), source })?;
    if !info.hooks.reserve {
        return Err(BenchError::Args(format!(
            "{}: plugin `{}` has no reserve hook",
            path.display(),
            info.name
        )));
    }
    let config = serde_json::json!({ "agent": args.agent }).to_string();
    let plugin = DynamicPlugin::load_budgeted(&path, &config, Duration::from_millis(args.budget_ms))
        .map_err(|source| BenchError::Plugin { path: path.clone(), source })?;
    let last_ns = Arc::new(AtomicU64::new(0));
    let mut engine = engine(Timed { inner: plugin, last_ns: Arc::clone(&last_ns) })?;
    let mix = reservation_mix::generate(args.reservations, args.seed);
    let step_ms = engine.reservation_book().map_or(1_000, |b| b.config().step_ms);

    let n = mix.reservations.len();
    let (mut handle, mut accepted, mut rejected) = (Vec::with_capacity(n), Vec::new(), Vec::new());
    let (mut call, mut rest, mut ticks) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::new());
    let mut cpu = Vec::with_capacity(n);
    let mut now = 1_000u64;
    let started = Instant::now();
    for e in mix.reservations {
        let (arrival, deadline, definition) = match e {
            Expr::Window(w) => (now + w.start_ms, now + w.end_ms, *w.inner),
            other => (now, now + reservation_mix::DAY_MS, other),
        };
        let request = ReservationRequest {
            queue: PLAN.into(),
            name: "bench".into(),
            user: "bench".into(),
            priority: 0,
            arrival_ms: Some(arrival),
            deadline_ms: Some(deadline),
            definition,
        };
        last_ns.store(0, Ordering::Relaxed);
        let cpu_before = cpu_time();
        let t = Instant::now();
        let cmds = engine.handle(now, Event::ReservationSubmitted { id: None, request })?;
        let took = t.elapsed();
        cpu.push(cpu_time().saturating_sub(cpu_before));
        let called = Duration::from_nanos(last_ns.load(Ordering::Relaxed));
        handle.push(took);
        call.push(called);
        rest.push(took.saturating_sub(called));
        match cmds.first() {
            Some(Command::ReservationAdmitted { .. }) => accepted.push(took),
            Some(Command::ReservationRejected { .. }) => rejected.push(took),
            other => return Err(BenchError::Args(format!("a submission was answered {other:?}"))),
        }
        let next = now + args.interval_ms;
        if next / step_ms != now / step_ms {
            let t = Instant::now();
            engine.handle(next, Event::Tick)?;
            ticks.push(t.elapsed());
        }
        now = next;
    }
    let wall = started.elapsed();
    let stats = engine.stats();
    Ok(ReserveBenchResult {
        planner: path.display().to_string(),
        agent: args.agent.clone(),
        seed: args.seed,
        budget_ms: args.budget_ms,
        nodes: reservation_mix::NODES,
        submitted: n as u64,
        demand_ratio: mix.demand_ratio,
        accepted: accepted.len() as u64,
        rejected: rejected.len() as u64,
        in_plan: engine.reservation_book().map_or(0, |b| b.len() as u64),
        pieces: engine
            .reservation_book()
            .map_or(0, |b| b.reservations().map(|r| r.allocation.len() as u64).sum()),
        handle: Latency::of(&handle),
        handle_accepted: Latency::of(&accepted),
        handle_rejected: Latency::of(&rejected),
        planner_call: Latency::of(&call),
        engine_rest: Latency::of(&rest),
        handle_cpu: Latency::of(&cpu),
        ticks: Latency::of(&ticks),
        refused: stats.rejected.total(),
        failed_calls: stats.policy_failures,
        builtin: stats.reservations.builtin,
        wall_s: wall.as_secs_f64(),
    })
}
