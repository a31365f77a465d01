//! `gantry bench engine`: how fast the engine places containers through a given placement
//! policy, on one core, with no IO — the scheduling loop alone.
//!
//! It registers `nodes` identical nodes (spread over racks of 40), submits `requests`
//! single-container applications in batches, runs one scheduling cycle per batch, and times
//! only the cycles (`Event::Tick`): placements per second is placements / Σ cycle time. The
//! submissions are timed separately, since a real scheduler receives them over time. Nothing
//! ends during the run, so the cluster is sized to hold every container. With `--waiting N`,
//! N applications no node can hold (each asks for more CPU than a node has) are submitted
//! first and stay pending through every cycle: what requests that wait cost a cycle.

pub mod reserve;
pub mod store;

use gantry_engine::{
    AppSpec, Engine, EngineConfig, Event, NodeSpec, Policy, Profile, RequestSpec, Resources,
};
use gantry_scheduler::plugin_host::DynamicPlugin;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `gantry bench engine` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct EngineBenchArgs {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 10_000)]
    pub nodes: u32,
    /// Requests (one container each) to place.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u32,
    /// Requests submitted between two scheduling cycles.
    #[arg(long, default_value_t = 10_000)]
    pub batch: u32,
    /// Applications that can never be placed, submitted before the rest and pending in every
    /// cycle (each asks for more CPU than a node has).
    #[arg(long, default_value_t = 0)]
    pub waiting: u32,
    /// Placement policy: `builtin` (the engine's first-fit FIFO) or the path of a plugin `.so`.
    #[arg(long, default_value = "builtin")]
    pub plugin: String,
    /// The plugin's configuration, as JSON.
    #[arg(long, default_value = "{}")]
    pub plugin_config: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineBenchResult {
    /// Policy used.
    pub plugin: String,
    /// Nodes.
    pub nodes: u32,
    /// Requests submitted.
    pub requests: u32,
    /// Applications pending through every cycle.
    pub waiting: u32,
    /// Containers placed.
    pub placements: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Placements per second of cycle time.
    pub placements_per_sec: f64,
    /// Median cycle, ms.
    pub cycle_p50_ms: f64,
    /// 99th percentile cycle, ms.
    pub cycle_p99_ms: f64,
    /// Submissions per second (event handling only).
    pub submissions_per_sec: f64,
}

impl EngineBenchResult {
    /// The text report `gantry bench engine` prints without `--json`.
    pub fn summary(&self) -> String {
        format!(
            "{} nodes, {} requests ({} more waiting throughout), policy {}: {} placed in {} cycles\n\
             \x20 placements/s (cycle time)  {:>12.0}\n\
             \x20 cycle p50 / p99            {:>9.3} ms / {:.3} ms\n\
             \x20 submissions/s              {:>12.0}\n",
            self.nodes,
            self.requests,
            self.waiting,
            self.plugin,
            self.placements,
            self.cycles,
            self.placements_per_sec,
            self.cycle_p50_ms,
            self.cycle_p99_ms,
            self.submissions_per_sec
        )
    }
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The plugin could not be loaded.
    #[error("loading {path}: {source}")]
    Plugin {
        /// The library.
        path: PathBuf,
        /// Why.
        source: gantry_scheduler::plugin_host::LoadError,
    },
    /// The engine refused the setup.
    #[error("engine: {0}")]
    Engine(#[from] gantry_engine::EngineError),
    /// Bad arguments.
    #[error("{0}")]
    Args(String),
}

/// Containers per node the cluster is sized for, and the size of each.
const PER_NODE: u64 = 128;
const CONTAINER: Resources = Resources::new(100, 64 << 20, 0);

/// Runs the benchmark.
pub fn run(args: &EngineBenchArgs) -> Result<EngineBenchResult, BenchError> {
    if args.nodes == 0 || args.requests == 0 || args.batch == 0 {
        return Err(BenchError::Args("--nodes, --requests and --batch must be positive".into()));
    }
    if u64::from(args.requests) > u64::from(args.nodes) * PER_NODE {
        return Err(BenchError::Args(format!(
            "{} requests do not fit on {} nodes of {PER_NODE} containers; use more nodes",
            args.requests, args.nodes
        )));
    }
    let (policies, profile): (Vec<Box<dyn Policy>>, Profile) = if args.plugin == "builtin" {
        (Vec::new(), Profile::default())
    } else {
        let path = PathBuf::from(&args.plugin);
        let plugin = DynamicPlugin::load(&path, &args.plugin_config)
            .map_err(|source| BenchError::Plugin { path: path.clone(), source })?;
        (vec![Box::new(plugin)], Profile { place: Some(0), ..Profile::default() })
    };
    let config = EngineConfig { history_len: 0, ..EngineConfig::default() };
    let mut engine = Engine::new(config, policies, profile)?;
    for i in 0..args.nodes {
        engine.handle(
            0,
            Event::NodeRegistered(NodeSpec {
                name: format!("n{i:05}"),
                rack: format!("r{:03}", i / 40),
                labels: Vec::new(),
                capacity: Resources::new(
                    CONTAINER.cpu_millis * PER_NODE,
                    CONTAINER.memory_bytes * PER_NODE,
                    0,
                ),
                gpu_list: Vec::new(),
            }),
        )?;
    }
    let app = AppSpec {
        name: "bench".into(),
        queue: "root.default".into(),
        user: "bench".into(),
        requests: vec![RequestSpec { resources: CONTAINER, count: 1, ..RequestSpec::default() }],
        ..AppSpec::default()
    };
    // More CPU than a node has: pending in every cycle.
    let never = RequestSpec {
        resources: Resources::new(CONTAINER.cpu_millis * PER_NODE + 1, CONTAINER.memory_bytes, 0),
        ..RequestSpec::default()
    };
    let never = AppSpec { requests: vec![RequestSpec { count: 1, ..never }], ..app.clone() };
    for _ in 0..args.waiting {
        engine.handle(0, Event::AppSubmitted(never.clone()))?;
    }
    let mut cycles: Vec<Duration> = Vec::new();
    let mut submitting = Duration::ZERO;
    let mut placements = 0u64;
    let mut submitted = 0u32;
    let mut now = 1u64;
    while submitted < args.requests {
        let n = args.batch.min(args.requests - submitted);
        let t = Instant::now();
        for _ in 0..n {
            engine.handle(now, Event::AppSubmitted(app.clone()))?;
        }
        submitting += t.elapsed();
        submitted += n;
        now += 1;
        let t = Instant::now();
        let cmds = engine.handle(now, Event::Tick)?;
        cycles.push(t.elapsed());
        placements +=
            cmds.iter().filter(|c| matches!(c, gantry_engine::Command::Launch { .. })).count() as u64;
        now += 1;
    }
    let total: Duration = cycles.iter().sum();
    let mut sorted = cycles.clone();
    sorted.sort();
    Ok(EngineBenchResult {
        plugin: args.plugin.clone(),
        nodes: args.nodes,
        requests: args.requests,
        waiting: args.waiting,
        placements,
        cycles: cycles.len() as u64,
        placements_per_sec: placements as f64 / total.as_secs_f64().max(1e-9),
        cycle_p50_ms: quantile_ms(&sorted, 0.5),
        cycle_p99_ms: quantile_ms(&sorted, 0.99),
        submissions_per_sec: f64::from(args.requests) / submitting.as_secs_f64().max(1e-9),
    })
}

/// The `p`-quantile (0..=1) of ascending `sorted`, nearest rank, in ms; 0 without samples.
pub(crate) fn quantile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted[rank].as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_is_placed_and_bad_arguments_are_refused() {
        let args = EngineBenchArgs {
            nodes: 10,
            requests: 1000,
            batch: 300,
            waiting: 0,
            plugin: "builtin".into(),
            plugin_config: "{}".into(),
            json: false,
        };
        let r = run(&args).expect("run");
        assert_eq!((r.placements, r.cycles), (1000, 4));
        assert!(r.placements_per_sec > 0.0 && r.cycle_p99_ms >= r.cycle_p50_ms);
        let waiting = run(&EngineBenchArgs { waiting: 50, ..args.clone() }).expect("run");
        assert_eq!((waiting.placements, waiting.cycles), (1000, 4), "the waiting ones are never placed");
        let too_many = EngineBenchArgs { requests: 10 * 128 + 1, ..args.clone() };
        assert!(matches!(run(&too_many), Err(BenchError::Args(m)) if m.contains("do not fit")));
        let missing = EngineBenchArgs { plugin: "/nonexistent/libx.so".into(), ..args };
        assert!(matches!(run(&missing), Err(BenchError::Plugin { .. })));
    }

    /// The text report keeps the layout `gantry bench engine` printed line by line before it
    /// became one `summary` (BENCHMARKS.md quotes it).
    #[test]
    fn the_summary_is_the_printed_report() {
        let r = EngineBenchResult {
            plugin: "builtin".into(),
            nodes: 10,
            requests: 1000,
            waiting: 50,
            placements: 1000,
            cycles: 4,
            placements_per_sec: 123_456.7,
            cycle_p50_ms: 1.5,
            cycle_p99_ms: 2.25,
            submissions_per_sec: 9876.4,
        };
        assert_eq!(
            r.summary(),
            "10 nodes, 1000 requests (50 more waiting throughout), policy builtin: 1000 placed in 4 cycles\n\
             \x20 placements/s (cycle time)        123457\n\
             \x20 cycle p50 / p99                1.500 ms / 2.250 ms\n\
             \x20 submissions/s                      9876\n"
        );
    }
}
