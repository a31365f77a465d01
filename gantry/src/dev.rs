//! `gantry dev`: an all-in-one local cluster — the scheduler (REST API, agent endpoint, built-in
//! policies) and one agent for this machine, in one process. Ctrl-C stops both and kills every
//! container it started, leaving nothing behind.
//!
//! `--config FILE` takes the scheduler's own TOML (`[[plugins]]`, `[profile]`, `[engine]`,
//! `[[queues]]` …) so that a plugin author iterates on this cluster; `gantry dev` keeps the
//! addresses, the data directory and the credentials ([`OWNED`]) and refuses a file that sets
//! them.
//!
//! Both endpoints listen on loopback only, and neither is open: everything on this machine can
//! reach loopback, the containers it runs included, so the REST API wants the token kept in
//! `<data dir>/cli-token` (0600, the starting user's; the CLI finds it by itself, see
//! [`crate::token_file`]) and the agent endpoint a join token only the in-process agent has.

use anyhow::Context;
use gantry_agent::config::AgentConfig;
use gantry_scheduler::config::SchedulerConfig;
use gantry_scheduler::server::serve;
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
    /// The scheduler's configuration (TOML: `[[plugins]]`, `[profile]`, `[engine]`, `[[queues]]`,
    /// `[reservations]` …), merged with `gantry dev`'s own; relative paths in it are relative to
    /// the file. The addresses, data directory and credentials stay `gantry dev`'s.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The settings `gantry dev` owns, and what to do instead of setting them in `--config`.
pub const OWNED: [(&str, &str, &str); 9] = [
    ("server", "listen", "use --listen"),
    ("server", "agent_listen", "gantry dev picks a free loopback port for its agent"),
    ("server", "data_dir", "use --data-dir"),
    ("security", "tokens_file", "gantry dev makes its own token in the data directory"),
    ("security", "join_token_file", "gantry dev makes its agent's join token itself"),
    ("security", "insecure", "gantry dev listens on loopback only"),
    ("security", "tls_cert_file", "gantry dev serves plain HTTP on loopback"),
    ("security", "tls_key_file", "gantry dev serves plain HTTP on loopback"),
    ("security", "tls_client_ca_file", "gantry dev serves plain HTTP on loopback"),
];

/// `gantry dev`'s configuration: its own settings, merged with the user's file when there is one
/// (a file that sets an [`OWNED`] key is refused, naming every such key).
pub fn merged_config(own: &str, user: Option<&Path>, data_dir: PathBuf) -> anyhow::Result<SchedulerConfig> {
    let Some(path) = user else {
        return Ok(SchedulerConfig::from_str_at(own, Path::new("<gantry dev>"), data_dir)?);
    };
    let size = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.len();
    if size > gantry_scheduler::config::MAX_CONFIG_BYTES {
        anyhow::bail!(
            "{}: {size} bytes is larger than the {}-byte limit",
            path.display(),
            gantry_scheduler::config::MAX_CONFIG_BYTES
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: not a valid TOML file", path.display()))?;
    let conflicts: Vec<String> = OWNED
        .iter()
        .filter(|(section, key, _)| {
            table.get(*section).and_then(toml::Value::as_table).is_some_and(|t| t.contains_key(*key))
        })
        .map(|(section, key, instead)| format!("  {section}.{key}: {instead}"))
        .collect();
    if !conflicts.is_empty() {
        anyhow::bail!(
            "{}: gantry dev sets these itself; remove them from the file:\n{}",
            path.display(),
            conflicts.join("\n")
        );
    }
    let own: toml::Table = toml::from_str(own).context("gantry dev's own settings")?;
    for (section, values) in own {
        let toml::Value::Table(values) = values else { continue };
        match table.entry(section.clone()) {
            toml::map::Entry::Vacant(e) => {
                e.insert(toml::Value::Table(values));
            }
            toml::map::Entry::Occupied(mut e) => {
                let Some(existing) = e.get_mut().as_table_mut() else {
                    anyhow::bail!("{}: `{section}` must be a table", path.display());
                };
                existing.extend(values);
            }
        }
    }
    let merged = toml::to_string(&table).context("writing the merged configuration")?;
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(SchedulerConfig::from_str_at(&merged, path, base)?)
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
    join_token_file: PathBuf,
}

impl Secrets {
    /// The scheduler's tokens file, in the data directory.
    const TOKENS: &str = "tokens";
    /// The agent's join token, in the data directory.
    const JOIN_TOKEN: &str = "join-token";

    fn prepare(data_dir: &Path) -> anyhow::Result<Secrets> {
        use crate::token_file::{CLI_TOKEN, random_token, read, write_private};
        let cli_token = data_dir.join(CLI_TOKEN);
        let token = read(&cli_token).unwrap_or_else(|_| random_token());
        let (owner, user) = starting_user();
        write_private(&cli_token, &format!("{token}\n"), owner)
            .with_context(|| format!("writing {}", cli_token.display()))?;
        let tokens_file = data_dir.join(Self::TOKENS);
        write_private(&tokens_file, &format!("{token} {user} admin\n"), None)
            .with_context(|| format!("writing {}", tokens_file.display()))?;
        let join_token_file = data_dir.join(Self::JOIN_TOKEN);
        write_private(&join_token_file, &format!("{}\n", random_token()), None)
            .with_context(|| format!("writing {}", join_token_file.display()))?;
        Ok(Secrets { cli_token, join_token_file })
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
    let text = format!(
        "[server]\nlisten = {:?}\nagent_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n\
         [security]\ntokens_file = {:?}\njoin_token_file = {:?}\n",
        args.listen,
        data_dir.join("scheduler").display().to_string(),
        data_dir.join(Secrets::TOKENS).display().to_string(),
        data_dir.join(Secrets::JOIN_TOKEN).display().to_string(),
    );
    // Checked before anything is written: a refused file leaves no trace.
    let config = merged_config(&text, args.config.as_deref(), data_dir.clone())?;
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let secrets = Secrets::prepare(&data_dir)?;
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
        if let Some(file) = &args.config {
            let plugins: Vec<String> = config
                .plugins
                .iter()
                .map(|p| format!("{} ({})", p.name, config.plugin_path(p).display()))
                .collect();
            let plugins = if plugins.is_empty() { "none".to_owned() } else { plugins.join(", ") };
            println!("  config     {} (plugins: {plugins})", file.display());
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "[server]\nlisten = \"127.0.0.1:8088\"\nagent_listen = \"127.0.0.1:0\"\n\
                       data_dir = \"/dev-data/scheduler\"\n[security]\ntokens_file = \"/dev-data/tokens\"\n";

    fn file(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("scheduler.toml");
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn without_a_file_the_own_settings_are_the_configuration() {
        let c = merged_config(OWN, None, PathBuf::from("/dev-data")).expect("own settings");
        assert_eq!(c.server.listen, "127.0.0.1:8088");
        assert!(c.plugins.is_empty());
    }

    #[test]
    fn a_file_adds_plugins_profile_and_engine_and_keeps_its_own_relative_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file(
            dir.path(),
            "[engine]\nseed = 7\n[server]\ncycle_interval_ms = 50\n[security]\n\
             acl_administer_queue = \"alice\"\n[[plugins]]\nname = \"spread\"\n\
             path = \"./libgantry_spread.so\"\n[plugins.config]\nmax_per_node = 2\n[profile]\nplace = \"spread\"\n",
        );
        let c = merged_config(OWN, Some(&path), PathBuf::from("/dev-data")).expect("merged");
        assert_eq!(c.engine_config().seed, 7);
        assert_eq!(c.profile.place.as_deref(), Some("spread"));
        assert_eq!(c.plugin_path(&c.plugins[0]), dir.path().join("./libgantry_spread.so"));
        assert_eq!(c.plugins[0].config.get("max_per_node").and_then(toml::Value::as_integer), Some(2));
        // Both sides of a shared section survive.
        assert_eq!((c.server.listen.as_str(), c.server.cycle_interval_ms), ("127.0.0.1:8088", 50));
        assert_eq!(c.security.tokens_file, Some(PathBuf::from("/dev-data/tokens")));
        assert_eq!(c.security.acl_administer_queue.as_deref(), Some("alice"));
    }

    #[test]
    fn a_file_that_sets_what_gantry_dev_owns_is_refused_naming_every_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file(
            dir.path(),
            "[server]\nlisten = \"0.0.0.0:80\"\ndata_dir = \"x\"\n[security]\ntls_cert_file = \"c.pem\"\n",
        );
        let err =
            format!("{:#}", merged_config(OWN, Some(&path), PathBuf::from("/dev-data")).expect_err("owned"));
        for want in
            ["server.listen: use --listen", "server.data_dir: use --data-dir", "security.tls_cert_file"]
        {
            assert!(err.contains(want), "{want}: {err}");
        }
        assert!(err.contains("scheduler.toml"), "{err}");
    }

    #[test]
    fn what_the_scheduler_refuses_is_refused_with_the_file_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (text, want) in [
            ("[profile]\nplace = \"nope\"\n", "not in [[plugins]]"),
            ("[engine]\nsede = 1\n", "unknown field"),
            ("[engine\n", "not a valid TOML file"),
            ("server = 5\n", "must be a table"),
        ] {
            let path = file(dir.path(), text);
            let err = format!("{:#}", merged_config(OWN, Some(&path), PathBuf::from("/d")).expect_err(text));
            assert!(err.contains(want) && err.contains("scheduler.toml"), "{text:?}: {err}");
        }
        let err = merged_config(OWN, Some(&dir.path().join("missing.toml")), PathBuf::from("/d"))
            .expect_err("missing file");
        assert!(format!("{err:#}").contains("missing.toml"), "{err:#}");
    }
}
