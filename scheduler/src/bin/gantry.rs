//! `gantry`: the command-line interface.

use anyhow::Context;
use clap::{Parser, Subcommand};
use gantry_scheduler::plugin_host;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// gantry: a cluster resource manager with policy plugins.
#[derive(Debug, Parser)]
#[command(name = "gantry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: GantryCommand,
}

/// `gantry`'s commands (named apart from the engine's `gantry_engine::Command`).
#[derive(Debug, Subcommand)]
enum GantryCommand {
    /// Run an all-in-one local cluster: the scheduler and one agent for this machine.
    Dev(gantry_scheduler::dev::DevArgs),
    /// Work with policy plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Simulate a workload trace through the real engine and plugins on a virtual clock.
    Sim(gantry_scheduler::sim_cli::SimArgs),
    /// Work with workload traces.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Make the cluster's TLS certificates: a CA, the scheduler's, each node's.
    Cert {
        #[command(subcommand)]
        command: gantry_scheduler::cert_cli::CertCommand,
    },
    /// Measure parts of gantry on this machine.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    #[command(flatten)]
    Cluster(gantry_scheduler::cli::ClientCommand),
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Generate a synthetic trace: Poisson arrivals at a target load from weighted job classes.
    Gen(gantry_scheduler::sim_cli::TraceGenArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Placements per second through the engine and a placement policy, on one core, with the
    /// scheduling cycle's p50/p99 duration.
    Engine(gantry_scheduler::bench::EngineBenchArgs),
    /// Simulated agents streaming status and a steady submission rate against a real
    /// scheduler: status and submission round trips, the scheduler's CPU and memory, and
    /// whether anything was lost.
    Load(gantry_scheduler::loadgen::LoadArgs),
    /// The store with a long history of ended applications: its size, the restart cost
    /// before and after retention, and submit latency while a backlog is pruned.
    Store(gantry_scheduler::bench::store::StoreBenchArgs),
    /// Reservation admission through the engine and a planner plugin loaded from its `.so`
    /// (the Rayon planner by default) on a 10,000-node, 24-hour plan: p50/p99/max of
    /// `handle(ReservationSubmitted)`, accepted and rejected, and the planner's call within it.
    Reserve(gantry_scheduler::bench::reserve::ReserveBenchArgs),
}

fn sim(args: &gantry_scheduler::sim_cli::SimArgs) -> anyhow::Result<()> {
    // What goes wrong with a plugin (failed calls, panics, quarantines, refused decisions) is
    // logged by the engine, rate-limited, as in the daemon; the virtual clock makes wall-clock
    // times meaningless here.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
    let summary = gantry_scheduler::sim_cli::run_sim(args)?;
    println!("{}", serde_json::to_string_pretty(&summary).context("encoding JSON")?);
    Ok(())
}

fn bench_engine(args: &gantry_scheduler::bench::EngineBenchArgs) -> anyhow::Result<()> {
    let r = gantry_scheduler::bench::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r).context("encoding JSON")?);
    } else {
        println!(
            "{} nodes, {} requests ({} more waiting throughout), policy {}: {} placed in {} cycles",
            r.nodes, r.requests, r.waiting, r.plugin, r.placements, r.cycles
        );
        println!("  placements/s (cycle time)  {:>12.0}", r.placements_per_sec);
        println!("  cycle p50 / p99            {:>9.3} ms / {:.3} ms", r.cycle_p50_ms, r.cycle_p99_ms);
        println!("  submissions/s              {:>12.0}", r.submissions_per_sec);
    }
    Ok(())
}

fn bench_store(args: &gantry_scheduler::bench::store::StoreBenchArgs) -> anyhow::Result<()> {
    let r = gantry_scheduler::bench::store::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r).context("encoding JSON")?);
    } else {
        print!("{}", r.summary());
    }
    Ok(())
}

fn bench_reserve(args: &gantry_scheduler::bench::reserve::ReserveBenchArgs) -> anyhow::Result<()> {
    let r = gantry_scheduler::bench::reserve::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r).context("encoding JSON")?);
    } else {
        print!("{}", r.summary());
    }
    Ok(())
}

fn bench_load(args: &gantry_scheduler::loadgen::LoadArgs) -> anyhow::Result<()> {
    let r = gantry_scheduler::loadgen::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r).context("encoding JSON")?);
    } else {
        print!("{}", r.summary());
    }
    if !r.nothing_lost {
        anyhow::bail!("something was lost under load (see the report)");
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Print a plugin's name, version, ABI version and hooks; fail with a reason for anything
    /// that is not a gantry ABI v1 plugin.
    Inspect {
        /// Path of the shared library.
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn inspect(path: PathBuf, json: bool) -> anyhow::Result<()> {
    // dlopen resolves bare names through the library search path; a path is what is meant here.
    let path = if path.components().count() == 1 { PathBuf::from(".").join(&path) } else { path };
    if !path.exists() {
        anyhow::bail!("{}: no such file", path.display());
    }
    let info = plugin_host::inspect(&path)?;
    if json {
        let v = serde_json::json!({
            "path": info.path,
            "name": info.name,
            "version": info.version,
            "abi": format!("{}.{}", info.abi_major, info.abi_minor),
            "abi_major": info.abi_major,
            "abi_minor": info.abi_minor,
            "vtable_size": info.struct_size,
            "capabilities": info.capabilities,
            "hooks": info.hook_names(),
            "has_create": info.has_create,
            "warning": info.newer_minor_warning(),
        });
        println!("{}", serde_json::to_string_pretty(&v).context("encoding JSON")?);
    } else {
        println!("name:     {}", info.name);
        println!("version:  {}", info.version);
        println!("abi:      {}.{} (vtable {} bytes)", info.abi_major, info.abi_minor, info.struct_size);
        let hooks = info.hook_names();
        println!("hooks:    {}", if hooks.is_empty() { "(none)".to_owned() } else { hooks.join(", ") });
        println!("create:   {}", if info.has_create { "yes" } else { "no (stateless)" });
        println!("path:     {}", info.path.display());
        if let Some(warning) = info.newer_minor_warning() {
            println!("warning:  {warning}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    // `gantry shim <DIR>`: a container's supervisor, started by the agent `gantry dev` runs.
    gantry_agent::shim::dispatch();
    let cli = Cli::parse();
    let result = match cli.command {
        GantryCommand::Plugin { command: PluginCommand::Inspect { path, json } } => inspect(path, json),
        GantryCommand::Cluster(c) => gantry_scheduler::cli::run(c).map_err(Into::into),
        GantryCommand::Bench { command: BenchCommand::Engine(args) } => bench_engine(&args),
        GantryCommand::Bench { command: BenchCommand::Load(args) } => bench_load(&args),
        GantryCommand::Bench { command: BenchCommand::Store(args) } => bench_store(&args),
        GantryCommand::Bench { command: BenchCommand::Reserve(args) } => bench_reserve(&args),
        GantryCommand::Sim(args) => sim(&args),
        GantryCommand::Cert { command } => gantry_scheduler::cert_cli::run(&command)
            .map(|lines| {
                for l in lines {
                    println!("{l}");
                }
            })
            .map_err(Into::into),
        GantryCommand::Trace { command: TraceCommand::Gen(args) } => {
            gantry_scheduler::sim_cli::run_trace_gen(&args)
                .map(|(files, jobs)| {
                    for f in files {
                        println!("{}", f.display());
                    }
                    eprintln!("{jobs} jobs");
                })
                .map_err(Into::into)
        }
        GantryCommand::Dev(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
                )
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .init();
            gantry_scheduler::dev::run(args)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gantry: {e:#}");
            ExitCode::FAILURE
        }
    }
}
