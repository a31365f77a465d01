//! `gantry-scheduler`: the scheduler daemon. `--check` loads and checks a configuration —
//! queues, plugins, profile — prints what it would run, and exits; without it the daemon serves
//! the agents' stream.

use anyhow::Context;
use clap::Parser;
use gantry_scheduler::{build_engine, config::SchedulerConfig};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// The gantry scheduler daemon.
#[derive(Debug, Parser)]
#[command(name = "gantry-scheduler", version, about)]
struct Args {
    /// Configuration file (TOML). Without one, embedded defaults are used.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Load the configuration and plugins, print the resulting setup, and exit.
    #[arg(long)]
    check: bool,
    /// Listen beyond loopback without tokens ([security] insecure = true): for a trusted network.
    #[arg(long)]
    insecure: bool,
}

fn run(args: Args) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => SchedulerConfig::from_file(path)?,
        None => SchedulerConfig::default(),
    };
    config.security.insecure |= args.insecure;
    let engine = build_engine(&config, None).context("building the engine")?;
    println!("queues:");
    let st = engine.state();
    for q in st.queues() {
        println!(
            "  {:<24} guaranteed {:>5.1}%  maximum {:>5.1}%",
            st.str(q.name),
            q.guaranteed * 100.0,
            q.maximum * 100.0
        );
    }
    println!("plugins:");
    for p in &config.plugins {
        // Loaded already (build_engine): this only reads what the library says about itself.
        match gantry_scheduler::plugin_host::inspect(&config.plugin_path(p)) {
            Ok(info) => {
                println!("  {:<16} {} {} ({})", p.name, info.name, info.version, info.hook_names().join(", "))
            }
            Err(_) => println!("  {}", p.name),
        }
    }
    let hook = |h: &Option<String>| h.clone().unwrap_or_else(|| "(built-in)".into());
    println!("profile:");
    println!("  admit     {}", hook(&config.profile.admit));
    println!("  order     {}", hook(&config.profile.order));
    println!("  place     {}", hook(&config.profile.place));
    println!("  rebalance {}", hook(&config.profile.rebalance));
    // No built-in planner: without a plugin, reservations are refused.
    println!("  reserve   {}", config.profile.reserve.as_deref().unwrap_or("(none)"));
    if args.check {
        return Ok(());
    }
    drop(engine);
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    let config_path = args.config.clone();
    let insecure = args.insecure;
    rt.block_on(gantry_scheduler::server::serve(&config, shutdown_signal(), move |b| {
        tracing::info!(api = %b.api_addr, agents = %b.agent_addr, "gantry-scheduler listening");
        if let (Some(auth), Some(path)) = (b.rest_auth, config_path) {
            tokio::spawn(reload_on_sighup(auth, path, insecure));
        }
    }))?;
    Ok(())
}

/// On every SIGHUP, re-reads the configuration file and puts its tokens, queue ACLs and accounts
/// in force (as Nomad and Prometheus reload on SIGHUP); a file that does not load changes
/// nothing and is logged.
async fn reload_on_sighup(
    auth: std::sync::Arc<gantry_scheduler::auth::RestAuth>,
    path: PathBuf,
    insecure: bool,
) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: tokens and ACLs reload only on restart");
        return;
    };
    while hup.recv().await.is_some() {
        let outcome =
            SchedulerConfig::from_file(&path).map_err(anyhow::Error::from).and_then(|mut config| {
                config.security.insecure |= insecure;
                gantry_scheduler::server::reload_security(&auth, &config).map_err(anyhow::Error::from)
            });
        match outcome {
            Ok(tokens) => {
                tracing::info!(tokens, config = %path.display(), "reloaded tokens, queue ACLs and accounts")
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "reload refused; the previous tokens and ACLs stay")
            }
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM, as the agent's `gantry_agent::daemon::shutdown_signal`
/// does (the daemon does not link the agent for these lines).
async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("stopping");
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gantry-scheduler: {e:#}");
            ExitCode::FAILURE
        }
    }
}
