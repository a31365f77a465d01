//! `gantry`: the command-line interface. Parses the command line and dispatches to the
//! `gantry` library, one module per operation.

use anyhow::Context;
use clap::{Parser, Subcommand};
use gantry::{bench, cert_cli, cli, dev, loadgen, plugin_cli, sim_cli};
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
    Dev(dev::DevArgs),
    /// Work with policy plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Simulate a workload trace through the real engine and plugins on a virtual clock.
    Sim(sim_cli::SimArgs),
    /// Work with workload traces.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Make the cluster's TLS certificates: a CA, the scheduler's, each node's.
    Cert {
        #[command(subcommand)]
        command: cert_cli::CertCommand,
    },
    /// Measure parts of gantry on this machine.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    #[command(flatten)]
    Cluster(cli::ClientCommand),
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Generate a synthetic trace: Poisson arrivals at a target load from weighted job classes.
    Gen(sim_cli::TraceGenArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Placements per second through the engine and a placement policy, on one core, with the
    /// scheduling cycle's p50/p99 duration.
    Engine(bench::EngineBenchArgs),
    /// Simulated agents streaming status and a steady submission rate against a real
    /// scheduler: status and submission round trips, the scheduler's CPU and memory, and
    /// whether anything was lost.
    Load(loadgen::LoadArgs),
    /// The store with a long history of ended applications: its size, the restart cost
    /// before and after retention, and submit latency while a backlog is pruned.
    Store(bench::store::StoreBenchArgs),
    /// Reservation admission through the engine and a planner plugin loaded from its `.so`
    /// (the Rayon planner by default) on a 10,000-node, 24-hour plan: p50/p99/max of
    /// `handle(ReservationSubmitted)`, accepted and rejected, and the planner's call within it.
    Reserve(bench::reserve::ReserveBenchArgs),
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

/// Logs to stderr, `default_filter` unless `RUST_LOG` says otherwise. `gantry sim` logs without
/// wall-clock times: its virtual clock makes them meaningless.
fn init_logging(default_filter: &str, wall_clock: bool) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if wall_clock { builder.init() } else { builder.without_time().init() }
}

/// Prints a benchmark's report: its JSON with `--json`, else its text summary.
fn print_report<R: serde::Serialize>(
    json: bool,
    report: &R,
    summary: impl FnOnce(&R) -> String,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report).context("encoding JSON")?);
    } else {
        print!("{}", summary(report));
    }
    Ok(())
}

fn bench(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Engine(args) => {
            print_report(args.json, &bench::run(&args)?, bench::EngineBenchResult::summary)
        }
        BenchCommand::Store(args) => {
            print_report(args.json, &bench::store::run(&args)?, bench::store::StoreBenchResult::summary)
        }
        BenchCommand::Reserve(args) => {
            print_report(args.json, &bench::reserve::run(&args)?, bench::reserve::ReserveBenchResult::summary)
        }
        BenchCommand::Load(args) => {
            let r = loadgen::run(&args)?;
            print_report(args.json, &r, loadgen::LoadReport::summary)?;
            if !r.nothing_lost {
                anyhow::bail!("something was lost under load (see the report)");
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    // `gantry shim <DIR>`: a container's supervisor, started by the agent `gantry dev` runs.
    gantry_agent::shim::dispatch();
    let cli = Cli::parse();
    let result = match cli.command {
        GantryCommand::Plugin { command: PluginCommand::Inspect { path, json } } => {
            plugin_cli::inspect(&path, json).map(|report| print!("{report}")).map_err(Into::into)
        }
        GantryCommand::Cluster(c) => cli::run(c).map_err(Into::into),
        GantryCommand::Bench { command } => bench(command),
        GantryCommand::Sim(args) => {
            // What goes wrong with a plugin (failed calls, panics, quarantines, refused
            // decisions) is logged by the engine, rate-limited, as in the daemon. The simulated
            // daemon's warnings are the faults and node removals the run was asked for (a line
            // for every node an elastic run removes), counted in the summary's `daemon` block:
            // errors only, unless RUST_LOG asks.
            init_logging("warn,gantry_controller=error", false);
            sim_cli::run_sim(&args).map_err(anyhow::Error::from).and_then(|summary| {
                println!("{}", serde_json::to_string_pretty(&summary).context("encoding JSON")?);
                Ok(())
            })
        }
        GantryCommand::Cert { command } => cert_cli::run(&command)
            .map(|lines| {
                for l in lines {
                    println!("{l}");
                }
            })
            .map_err(Into::into),
        GantryCommand::Trace { command: TraceCommand::Gen(args) } => sim_cli::run_trace_gen(&args)
            .map(|(files, jobs)| {
                for f in files {
                    println!("{}", f.display());
                }
                eprintln!("{jobs} jobs");
            })
            .map_err(Into::into),
        GantryCommand::Dev(args) => {
            init_logging("warn", true);
            dev::run(args)
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
