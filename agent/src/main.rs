//! `gantry-agent`: the node agent binary.
//!
//! - `gantry-agent [run] [--config FILE] [flags]`: run the agent.
//! - `gantry-agent probe [--config FILE] [flags]`: print, as JSON, what the agent would register
//!   and report on this machine, and exit.
//! - `gantry-agent shim DIR`: internal; a container's supervisor (started by the agent itself).

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use gantry_agent::config::AgentConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The gantry node agent.
#[derive(Debug, Parser)]
#[command(name = "gantry-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<AgentSubcommand>,
    #[command(flatten)]
    overrides: Overrides,
}

#[derive(Debug, Subcommand)]
enum AgentSubcommand {
    /// Run the agent (the default).
    Run,
    /// Print what the agent would register and report, as JSON, and exit.
    Probe,
}

/// Settings that override the configuration file.
#[derive(Debug, Args)]
struct Overrides {
    /// Configuration file (TOML); without one, defaults apply.
    #[arg(long, global = true, env = "GANTRY_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// Node name (default: the host name).
    #[arg(long, global = true)]
    node_name: Option<String>,
    /// Rack name.
    #[arg(long, global = true)]
    rack: Option<String>,
    /// A node label `key=value` (repeatable).
    #[arg(long = "label", global = true, value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Scheduler endpoint, e.g. http://10.0.0.1:7070.
    #[arg(long, global = true, env = "GANTRY_SCHEDULER_AGENT_ENDPOINT")]
    scheduler: Option<String>,
    /// Directory for container directories and state.
    #[arg(long, global = true)]
    work_root: Option<PathBuf>,
    /// Address of the /metrics endpoint.
    #[arg(long, global = true)]
    metrics_listen: Option<String>,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not key=value")),
    }
}

fn load_config(o: &Overrides) -> anyhow::Result<AgentConfig> {
    let mut c = match &o.config {
        Some(p) => AgentConfig::from_file(p)?,
        None => AgentConfig::default(),
    };
    if let Some(n) = &o.node_name {
        c.node_name = Some(n.clone());
    }
    if let Some(r) = &o.rack {
        c.rack.clone_from(r);
    }
    for (k, v) in &o.labels {
        c.labels.insert(k.clone(), v.clone());
    }
    if let Some(s) = &o.scheduler {
        c.scheduler.clone_from(s);
    }
    if let Some(w) = &o.work_root {
        c.work_root.clone_from(w);
    }
    if let Some(m) = &o.metrics_listen {
        c.metrics_listen.clone_from(m);
    }
    c.validate()?;
    Ok(c)
}

fn probe(config: &AgentConfig) -> anyhow::Result<()> {
    let report = gantry_agent::probe::probe_node(config, Duration::from_millis(250))
        .context("probing this machine")?;
    println!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
    Ok(())
}

fn run(config: AgentConfig) -> anyhow::Result<()> {
    let shim = gantry_agent::shim::program_beside(
        &std::env::current_exe().context("finding the agent's own executable")?,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        tracing::info!(node = %config.node_name(), scheduler = %config.scheduler, "gantry-agent starting");
        let shutdown = async {
            gantry_agent::daemon::shutdown_signal().await;
            tracing::info!("stopping; containers keep running and are re-adopted on restart");
        };
        gantry_agent::daemon::run(config, shim, shutdown).await
    })?;
    Ok(())
}

fn main() -> ExitCode {
    // `gantry-agent shim <DIR>`: a container's supervisor.
    gantry_agent::shim::dispatch();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result =
        load_config(&cli.overrides).and_then(|config| match cli.command.unwrap_or(AgentSubcommand::Run) {
            AgentSubcommand::Run => run(config),
            AgentSubcommand::Probe => probe(&config),
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gantry-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}
