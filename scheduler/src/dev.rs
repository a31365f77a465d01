//! `gantry dev`: an all-in-one local cluster — the scheduler (REST API, agent endpoint, built-in
//! policies) and one agent for this machine, in one process. Ctrl-C stops both and kills every
//! container it started, leaving nothing behind.
//!
//! Both endpoints listen on loopback only, and neither is open: everything on this machine can
//! reach loopback, the containers it runs included, so the REST API wants the token kept in
//! `<data dir>/cli-token` (0600, the starting user's; the CLI finds it by itself, see
//! [`crate::token_file`]) and the agent endpoint a join token only the in-process agent has.

use crate::config::SchedulerConfig;
use crate::server::serve;
use anyhow::Context;
use gantry_agent::config::AgentConfig;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Options of `gantry dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Address of the REST API and /metrics.
    #[arg(long, default_value = "127.0.0.1:8088")]
    pub listen: String,
    /// Directory for the scheduler's state; the agent's container directories go under it too.
    #[arg(long, default_value = "gantry-dev")]
    pub data_dir: PathBuf,
}

/// Creates `dir` (and parents) so that the unprivileged container user can traverse it.
fn traversable_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("making {} traversable", dir.display()))
}

/// The credentials of a dev cluster, in its data directory: the CLI's token (kept across runs,
/// so an exported token stays good), the scheduler's tokens file naming it (an admin: the person
/// who started the cluster may do anything in it), and the agent's join token.
struct Secrets {
    cli_token: PathBuf,
    tokens_file: PathBuf,
    join_token_file: PathBuf,
}

impl Secrets {
    fn prepare(data_dir: &Path) -> anyhow::Result<Secrets> {
        use crate::token_file::{CLI_TOKEN, random_token, read, write_private};
        let cli_token = data_dir.join(CLI_TOKEN);
        let token = read(&cli_token).unwrap_or_else(|_| random_token());
        let (owner, user) = starting_user();
        write_private(&cli_token, &format!("{token}\n"), owner)
            .with_context(|| format!("writing {}", cli_token.display()))?;
        let tokens_file = data_dir.join("tokens");
        write_private(&tokens_file, &format!("{token} {user} admin\n"), None)
            .with_context(|| format!("writing {}", tokens_file.display()))?;
        let join_token_file = data_dir.join("join-token");
        write_private(&join_token_file, &format!("{}\n", random_token()), None)
            .with_context(|| format!("writing {}", join_token_file.display()))?;
        Ok(Secrets { cli_token, tokens_file, join_token_file })
    }
}

/// Who started `gantry dev`: under sudo the invoking user (who runs the CLI in the other
/// terminal), so the token file is made theirs; and the user name the token stands for (the one
/// the CLI submits as by default, `$USER`), or `dev` where that is no usable name.
fn starting_user() -> (Option<(u32, u32)>, String) {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let usable = |name: &String| {
        name.len() <= 32 && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    let sudo = nix::unistd::getuid().is_root().then(|| {
        let uid = var("SUDO_UID")?.parse().ok()?;
        let gid = var("SUDO_GID")?.parse().ok()?;
        Some((uid, gid))
    });
    let owner = sudo.flatten();
    let name = if owner.is_some() { var("SUDO_USER") } else { var("USER") };
    (owner, name.filter(usable).unwrap_or_else(|| "dev".to_owned()))
}

/// Runs the local cluster until Ctrl-C or SIGTERM.
pub fn run(args: DevArgs) -> anyhow::Result<()> {
    let data_dir = std::path::absolute(&args.data_dir).context("resolving --data-dir")?;
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let text = format!(
        "[server]\nlisten = {:?}\nagent_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        args.listen,
        data_dir.join("scheduler").display().to_string()
    );
    let secrets = Secrets::prepare(&data_dir)?;
    let text = format!(
        "{text}[security]\ntokens_file = {:?}\njoin_token_file = {:?}\n",
        secrets.tokens_file.display().to_string(),
        secrets.join_token_file.display().to_string()
    );
    let config = SchedulerConfig::from_str_at(&text, Path::new("<gantry dev>"), data_dir.clone())?;
    // Containers run as `nobody`, who must reach their directories: the agent's work root lives
    // in a world-traversable directory of its own.
    // One per data directory: container ids restart with a new data directory, and an agent
    // refuses an id whose directory it still has.
    let tag = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data_dir.hash(&mut h);
        h.finish()
    };
    let work_root =
        std::env::temp_dir().join(format!("gantry-dev-{}-{tag:016x}", nix::unistd::getuid())).join("agent");
    for dir in [work_root.parent().unwrap_or(&work_root), &work_root] {
        traversable_dir(dir)?;
    }
    let shim = gantry_agent::shim::program_beside(
        &std::env::current_exe().context("finding gantry's own executable")?,
    );
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let scheduler = tokio::spawn({
            let config = config.clone();
            let stopped = stopped(stop_rx.clone());
            async move {
                serve(&config, stopped, move |b| {
                    let _ = bound_tx.send(b);
                })
                .await
            }
        });
        let bound = match bound_rx.await {
            Ok(b) => b,
            Err(_) => {
                return match scheduler.await {
                    Ok(Err(e)) => Err(anyhow::Error::new(e).context("starting the scheduler")),
                    _ => Err(anyhow::anyhow!("the scheduler stopped before listening")),
                };
            }
        };
        let agent_config = AgentConfig {
            node_name: Some("dev".into()),
            scheduler: format!("http://{}", bound.agent_addr),
            work_root: work_root.clone(),
            metrics_listen: "127.0.0.1:0".into(),
            cgroup_name: format!("gantry-dev-{}", std::process::id()),
            join_token_file: Some(secrets.join_token_file.clone()),
            ..AgentConfig::default()
        };
        agent_config.validate()?;
        let agent = tokio::spawn(gantry_agent::daemon::run_with(
            agent_config,
            shim,
            gantry_agent::daemon::RunOptions { kill_containers_on_exit: true },
            stopped(stop_rx.clone()),
        ));
        let api = bound.api_addr;
        println!("gantry dev: a scheduler and one agent on this machine");
        println!("  REST API   http://{api}/ws/v1/cluster   (metrics: http://{api}/metrics)");
        println!("  state      {}", data_dir.display());
        println!("  containers {}", work_root.display());
        println!(
            "  token      {} (yours only; the CLI reads it by itself from the directory",
            secrets.cli_token.display()
        );
        println!("             gantry dev was started in, elsewhere set GANTRY_TOKEN_FILE)");
        println!();
        println!("In another terminal:");
        println!("  export GANTRY_SCHEDULER=http://{api}");
        println!("  export GANTRY_TOKEN_FILE={}", secrets.cli_token.display());
        println!("  gantry submit -- echo hello");
        println!("  gantry apps; gantry logs 1");
        println!();
        println!("Ctrl-C stops the cluster and every container it started.");
        gantry_agent::daemon::shutdown_signal().await;
        let _ = stop_tx.send(true);
        match agent.await {
            Ok(Err(e)) => eprintln!("gantry dev: agent: {e}"),
            Err(e) => eprintln!("gantry dev: agent task: {e}"),
            Ok(Ok(())) => {}
        }
        match scheduler.await {
            Ok(r) => r.context("scheduler")?,
            Err(e) => eprintln!("gantry dev: scheduler task: {e}"),
        }
        println!("gantry dev: stopped");
        Ok(())
    })
}
