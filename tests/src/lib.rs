//! Helpers for gantry's end-to-end tests and benchmarks: building the real plugin shared
//! libraries and binaries, compiling the C plugins with the system compiler, and synthetic
//! clusters.

use anyhow::{Context, bail};
use gantry_engine::{AppSpec, Engine, Event, GpuSpec, NodeSpec, RackAffinity, RequestSpec, Resources};
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod plan;

/// One GiB.
pub const GIB: u64 = 1 << 30;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The cargo target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// Builds (once per process) the `gantry` binary and the Rust plugin libraries (the Rayon
/// planner's `libgantry_rayon.so` among them) in the debug profile, and returns the profile's
/// output directory. Cargo makes this a no-op when they are up to date.
pub fn build_artifacts() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            // Two invocations: target filters such as --bins would otherwise also apply to the
            // plugin packages and leave their shared libraries unbuilt.
            let builds: [&[&str]; 2] = [
                &[
                    "build",
                    "--quiet",
                    "-p",
                    "gantry",
                    "-p",
                    "gantry-scheduler",
                    "-p",
                    "gantry-agent",
                    "--bins",
                ],
                &[
                    "build",
                    "--quiet",
                    "-p",
                    "gantry-example-minimal",
                    "-p",
                    "gantry-test-plugin",
                    "-p",
                    "gantry-hetero",
                    "-p",
                    "gantry-packing",
                    "-p",
                    "gantry-preemption",
                    "-p",
                    "gantry-rayon",
                    "-p",
                    "gantry-spread",
                    "--lib",
                ],
            ];
            for args in builds {
                let out = Command::new(&cargo)
                    .current_dir(workspace_root())
                    .args(args)
                    .output()
                    .map_err(|e| format!("running cargo: {e}"))?;
                if !out.status.success() {
                    return Err(format!("cargo build failed:\n{}", String::from_utf8_lossy(&out.stderr)));
                }
            }
            Ok(target_dir().join("debug"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// A scheduler configuration's planner: the Rayon planner plugin (`libgantry_rayon.so`, built on
/// demand) with its admission `agent` (`gree`, `gree-l`), as `[profile] reserve`. Goes with a
/// `[reservations]` section; the configuration must have no other `[profile]`.
pub fn rayon_planner_toml(agent: &str) -> String {
    let path = build_artifacts().expect("artifacts").join("libgantry_rayon.so");
    format!(
        "[[plugins]]\nname = \"rayon\"\npath = {:?}\n[plugins.config]\nagent = \"{agent}\"\n[profile]\nreserve = \"rayon\"\n",
        path.display().to_string()
    )
}

/// Path of the `gantry` CLI binary (built on demand).
pub fn gantry_bin() -> anyhow::Result<PathBuf> {
    Ok(build_artifacts()?.join("gantry"))
}

/// The control directory of container `id` on the agent whose work root is `work_root`:
/// `containers/<id>.<cluster id>`, or `containers/<id>` for a container of the legacy cluster
/// (a scheduler or agent older than cluster ids). With several (scheduler runs that each used
/// the id), the most recently created.
pub fn container_control_dir(work_root: &Path, id: u64) -> Option<PathBuf> {
    let (bare, prefix) = (id.to_string(), format!("{id}."));
    std::fs::read_dir(work_root.join("containers"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n == bare || n.starts_with(&prefix)))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, path)| path)
}

/// The cgroup parent of a test agent whose files live in `dir`: unique to the directory (tests
/// run in parallel within one process, and two of them with an agent of the same name once
/// shared a parent, so one agent's cleanup broke the other's launches), the same again when an
/// agent of that directory restarts.
pub fn test_cgroup_name(dir: &Path, tag: &str) -> String {
    // FNV-1a of the path: stable, no dependency.
    let hash = dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("gantry-test-{}-{:08x}-{tag}", std::process::id(), hash as u32)
}

/// Kills every container process an agent left under `work_root` (their supervisors and
/// command process groups, from the pid records) and removes the agent's cgroups named
/// `cgroup_name`: tests that `kill -9` agents leave containers running by design.
pub fn kill_leftover_containers(work_root: &Path, cgroup_name: &str) {
    let entries = std::fs::read_dir(work_root.join("containers")).into_iter().flatten().flatten();
    for e in entries {
        let Ok(text) = std::fs::read_to_string(e.path().join("pid")) else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        for (key, group) in [("pid", true), ("shim_pid", false)] {
            if let Some(pid) = v[key].as_u64().filter(|p| *p > 1) {
                let target = if group { format!("-{pid}") } else { pid.to_string() };
                let _ = Command::new("kill").args(["-KILL", "--", &target]).output();
            }
        }
    }
    remove_cgroups(cgroup_name);
}

/// Removes an agent's parent cgroup `cgroup_name` and its containers' cgroups in every v1
/// controller (and the v2 mount): frozen ones are thawed first (a process killed while frozen
/// cannot die, and a kill interrupted between freeze and thaw leaves one frozen), what is left
/// in them is SIGKILLed, and removal is retried while the kernel tears the processes down.
pub fn remove_cgroups(cgroup_name: &str) {
    let parents: Vec<PathBuf> = ["memory", "cpu", "cpuacct", "pids", "freezer", "unified"]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c).join(cgroup_name))
        .filter(|p| p.is_dir())
        .collect();
    let children = || -> Vec<PathBuf> {
        parents
            .iter()
            .flat_map(|p| std::fs::read_dir(p).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect()
    };
    for child in children() {
        let _ = std::fs::write(child.join("freezer.state"), "THAWED");
        let _ = std::fs::write(child.join("cgroup.freeze"), "0");
    }
    for child in children() {
        let procs = std::fs::read_to_string(child.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace().filter(|p| p.parse::<u32>().is_ok_and(|p| p > 1)) {
            let _ = Command::new("kill").args(["-KILL", pid]).output();
        }
    }
    for child in children() {
        let start = std::time::Instant::now();
        while std::fs::remove_dir(&child).is_err() && start.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    for parent in &parents {
        let _ = std::fs::remove_dir(parent);
    }
}

/// Starts the scheduler daemon in-process on `rt` with the configuration `toml` (`[server]`
/// addresses of port 0 bind ephemeral ports) and returns where it listens and the sender that
/// stops it. Tests and benchmarks submit through the returned core.
pub fn start_daemon(
    rt: &tokio::runtime::Runtime,
    toml: &str,
) -> (gantry_scheduler::server::Bound, tokio::sync::oneshot::Sender<()>) {
    let config =
        gantry_scheduler::config::SchedulerConfig::from_str_at(toml, Path::new("<test>"), PathBuf::from("."))
            .expect("daemon config");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        gantry_scheduler::server::serve(&config, shutdown, move |b| {
            let _ = bound_tx.send(b);
        })
        .await
        .expect("daemon");
    });
    (bound_rx.recv_timeout(std::time::Duration::from_secs(60)).expect("daemon bound"), stop)
}

/// Runs the real `gantry` CLI against the scheduler whose REST API listens on `api`
/// (`GANTRY_SCHEDULER`), and returns what it did.
pub fn gantry_cli(api: &str, args: &[&str]) -> std::process::Output {
    gantry_cli_in(None, api, args)
}

/// [`gantry_cli`] run inside the network namespace `netns` (see [`command_in`]).
pub fn gantry_cli_in(netns: Option<&Path>, api: &str, args: &[&str]) -> std::process::Output {
    command_in(netns, &gantry_bin().expect("gantry binary"))
        .args(args)
        .env("GANTRY_SCHEDULER", format!("http://{api}"))
        .output()
        .expect("run gantry")
}

/// The scheduler's `/metrics` text at `addr` (classic text format, no token).
pub fn scrape(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(60))).expect("timeout");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("answer");
    text
}

/// The value of `series` in a `/metrics` text, if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `f` every 100 ms until it returns a value; fails the test after `guard` (a correctness
/// bound, never a timing assertion).
pub fn wait_until<T>(what: &str, guard: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < guard, "guard: gave up waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A command running `program`, inside the network namespace `netns` (a path such as
/// `/run/netns/NAME`, from `ip netns add`) when one is given. `nsenter --net` switches only the
/// network namespace: the process keeps the host's mounts, so the agent still finds its cgroup
/// tree (`ip netns exec` remounts `/sys` and would hide it).
pub fn command_in(netns: Option<&Path>, program: &Path) -> Command {
    match netns {
        None => Command::new(program),
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg(program);
            c
        }
    }
}

/// A real `gantry-agent` on loopback, with its own work root, cgroup parent, rack and labels,
/// reporting to the scheduler at `scheduler`. Killed when dropped, with the containers it left
/// (containers outlive a killed agent by design).
pub struct TestAgent {
    child: std::process::Child,
    /// Its work root.
    pub work: PathBuf,
    /// Where its `/metrics` listens (`127.0.0.1:PORT`, in its network namespace).
    pub metrics: String,
    config: PathBuf,
    cgroup: String,
    netns: Option<PathBuf>,
    /// `http` or `https` (TLS to the scheduler, with `tls_ca_file` in the extra lines).
    scheme: &'static str,
}

impl TestAgent {
    /// Writes the agent's configuration under `dir` and starts it: node `name` in `rack`, with
    /// `labels`, no reserve, samples every 200 ms, 1 s kill grace.
    pub fn start(
        dir: &Path,
        name: &str,
        rack: &str,
        labels: &[(&str, &str)],
        scheduler: std::net::SocketAddr,
    ) -> TestAgent {
        Self::start_with(dir, name, rack, labels, scheduler, "")
    }

    /// As [`TestAgent::start`], with `extra` top-level TOML lines (e.g. `join_token_file`).
    pub fn start_with(
        dir: &Path,
        name: &str,
        rack: &str,
        labels: &[(&str, &str)],
        scheduler: std::net::SocketAddr,
        extra: &str,
    ) -> TestAgent {
        Self::start_in(None, dir, name, rack, labels, scheduler, extra)
    }

    /// As [`TestAgent::start_with`], inside the network namespace `netns` (see [`command_in`])
    /// when one is given.
    pub fn start_in(
        netns: Option<&Path>,
        dir: &Path,
        name: &str,
        rack: &str,
        labels: &[(&str, &str)],
        scheduler: std::net::SocketAddr,
        extra: &str,
    ) -> TestAgent {
        Self::start_full(netns, dir, name, rack, labels, scheduler, extra, "http")
    }

    /// As [`TestAgent::start_with`], reaching the scheduler over `https://` (`extra` names the
    /// agent's `tls_ca_file` and, for mutual TLS, its certificate and key).
    pub fn start_https(dir: &Path, name: &str, scheduler: std::net::SocketAddr, extra: &str) -> TestAgent {
        Self::start_full(None, dir, name, "r1", &[], scheduler, extra, "https")
    }

    #[allow(clippy::too_many_arguments)]
    fn start_full(
        netns: Option<&Path>,
        dir: &Path,
        name: &str,
        rack: &str,
        labels: &[(&str, &str)],
        scheduler: std::net::SocketAddr,
        extra: &str,
        scheme: &'static str,
    ) -> TestAgent {
        let work = dir.join(name);
        let port = free_port();
        let config = dir.join(format!("{name}.toml"));
        let cgroup = test_cgroup_name(&work, name);
        let labels: String = labels.iter().map(|(k, v)| format!("{k} = {v:?}\n")).collect();
        std::fs::write(
            &config,
            format!(
                "{extra}\nnode_name = \"{name}\"\nrack = \"{rack}\"\nwork_root = {:?}\nmetrics_listen = \"127.0.0.1:{port}\"\n\
                 cgroup_name = \"{cgroup}\"\nsample_interval_ms = 200\nkill_grace_ms = 1000\n\
                 [reserve]\ncpu_millis = 0\nmemory_bytes = 0\n[labels]\n{labels}",
                work.display().to_string(),
            ),
        )
        .expect("agent config");
        let netns = netns.map(Path::to_path_buf);
        let child = Self::spawn(netns.as_deref(), &config, &format!("{scheme}://{scheduler}"));
        let metrics = format!("127.0.0.1:{port}");
        TestAgent { child, work, metrics, config, cgroup, netns, scheme }
    }

    fn spawn(netns: Option<&Path>, config: &Path, url: &str) -> std::process::Child {
        command_in(netns, &agent_bin().expect("agent binary"))
            .args(["run", "--config"])
            .arg(config)
            .args(["--scheduler", url])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start agent")
    }

    /// Starts the agent again with the same configuration (after [`TestAgent::kill9`]).
    pub fn restart(&mut self, scheduler: std::net::SocketAddr) {
        self.child =
            Self::spawn(self.netns.as_deref(), &self.config, &format!("{}://{scheduler}", self.scheme));
    }

    /// The agent's process id (to stop and continue it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs the agent (its containers keep running).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.kill9();
        kill_leftover_containers(&self.work, &self.cgroup);
    }
}

/// A free TCP port on loopback (bound, read, released: for a daemon started right after).
///
/// Taken below the kernel's ephemeral range (32768–60999 by default), never from it: a port the
/// kernel hands out for `bind(0)` is handed out again to the next test's outgoing connection or
/// listener, and a daemon started a moment later then finds it taken ("Address already in use",
/// seen in the suite). Each test process starts at its own place in 20000–31999 (from its pid)
/// and walks on, so parallel tests rarely try the same port; a port in use is skipped.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for _ in 0..SPAN {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (start + k) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port()
}

/// A child process, SIGKILLed when dropped.
pub struct KilledOnDrop(pub std::process::Child);

impl KilledOnDrop {
    /// SIGKILLs it now and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Where a scheduler started with [`scheduler_config`] listens, and its configuration file.
pub struct SchedulerFiles {
    /// The REST API's `host:port`.
    pub api: String,
    /// The agent endpoint's `host:port`.
    pub agents: String,
    /// The configuration file.
    pub config: PathBuf,
}

/// Writes `dir/scheduler.toml` for the real binary: the REST API and the agent endpoint on free
/// loopback ports, state in `dir/data`, `server` appended to the `[server]` table (e.g.
/// `node_timeout_ms = 5000`) and `rest` after it (queues, plugins, profile).
pub fn scheduler_config(dir: &Path, server: &str, rest: &str) -> SchedulerFiles {
    let (api, agents) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let config = dir.join("scheduler.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"{api}\"\nagent_listen = \"{agents}\"\ndata_dir = \"data\"\n{server}\n{rest}"
        ),
    )
    .expect("scheduler config");
    SchedulerFiles { api, agents, config }
}

/// Starts the real `gantry-scheduler` binary with `config`.
pub fn start_scheduler(config: &Path) -> KilledOnDrop {
    start_scheduler_in(None, config)
}

/// [`start_scheduler`] inside the network namespace `netns` (see [`command_in`]).
pub fn start_scheduler_in(netns: Option<&Path>, config: &Path) -> KilledOnDrop {
    KilledOnDrop(
        command_in(netns, &scheduler_bin().expect("scheduler binary"))
            .arg("--config")
            .arg(config)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start scheduler"),
    )
}

/// Path of the `gantry-agent` binary (built on demand).
pub fn agent_bin() -> anyhow::Result<PathBuf> {
    Ok(build_artifacts()?.join("gantry-agent"))
}

/// Path of the `gantry-scheduler` binary (built on demand).
pub fn scheduler_bin() -> anyhow::Result<PathBuf> {
    Ok(build_artifacts()?.join("gantry-scheduler"))
}

/// Path of a Rust plugin library by its library name (e.g. `gantry_minimal`), built on demand.
pub fn rust_plugin(lib: &str) -> anyhow::Result<PathBuf> {
    let p = build_artifacts()?.join(format!("lib{lib}.so"));
    if !p.exists() {
        bail!("{} was not built", p.display());
    }
    Ok(p)
}

/// Builds a Rust plugin package in the release profile (for benchmarks) and returns the path of
/// its library `lib<lib>.so`.
pub fn release_rust_plugin(package: &str, lib: &str) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["build", "--quiet", "--release", "-p", package])
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo build --release -p {package} failed");
    }
    Ok(target_dir().join("release").join(format!("lib{lib}.so")))
}

/// Compiles a C plugin source (path relative to the workspace root) into
/// `target/c-plugins/lib<stem>.so` with the system C compiler, and returns the library's path.
/// Each call writes to a temporary name and renames, so parallel tests do not collide.
pub fn c_plugin(source: &str) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let src = root.join(source);
    let stem = src.file_stem().and_then(|s| s.to_str()).context("C source has no file name")?;
    let dir = target_dir().join("c-plugins");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = dir.join(format!("libgantry_{stem}.so"));
    // Unique per process and per call: tests of one process compile in parallel too.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".libgantry_{stem}.{}.{call}.so", std::process::id()));
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = Command::new(cc)
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I"])
        .arg(root.join("sdk/include"))
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .status()
        .context("running the C compiler (cc)")?;
    if !status.success() {
        bail!("compiling {} failed", src.display());
    }
    std::fs::rename(&tmp, &out).with_context(|| format!("renaming to {}", out.display()))?;
    Ok(out)
}

/// A node spec with `cpu_cores` cores, `mem_gib` GiB and `gpus` GPUs of `model`.
pub fn node(name: &str, rack: &str, cpu_cores: u64, mem_gib: u64, gpus: u32, model: &str) -> NodeSpec {
    NodeSpec {
        name: name.to_owned(),
        rack: rack.to_owned(),
        labels: if gpus > 0 { vec![("gpu".into(), model.to_owned())] } else { Vec::new() },
        capacity: Resources::new(cpu_cores * 1000, mem_gib * GIB, gpus),
        gpu_list: (0..gpus)
            .map(|index| GpuSpec { index, model: model.to_owned(), memory_bytes: 80 * GIB })
            .collect(),
    }
}

/// A one-request application in `root.default`.
pub fn app(name: &str, cpu_millis: u64, mem_gib: u64, gpus: u32, count: u32, gang: bool) -> AppSpec {
    AppSpec {
        name: name.to_owned(),
        queue: "root.default".into(),
        user: "alice".into(),
        requests: vec![RequestSpec {
            resources: Resources::new(cpu_millis, mem_gib * GIB, gpus),
            count,
            gang,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Registers `nodes` with an engine at time 0.
pub fn register_all(engine: &mut Engine, nodes: &[NodeSpec]) -> anyhow::Result<()> {
    for n in nodes {
        engine.handle(0, Event::NodeRegistered(n.clone()))?;
    }
    Ok(())
}

/// Owned arrays from which a [`View`] can be borrowed: a synthetic cluster for benchmarks and
/// plugin tests that do not need an engine.
#[derive(Debug, Default, Clone)]
pub struct SyntheticCluster {
    /// String arena.
    pub strings: Vec<u8>,
    /// Labels.
    pub labels: Vec<GantryLabel>,
    /// Nodes.
    pub nodes: Vec<GantryNode>,
    /// Queues.
    pub queues: Vec<GantryQueue>,
    /// Apps.
    pub apps: Vec<GantryApp>,
    /// Requests.
    pub requests: Vec<GantryRequest>,
    /// Pending request indexes.
    pub pending: Vec<u32>,
}

impl SyntheticCluster {
    /// `nodes` nodes (16 cores, 64 GiB, in racks of 40) and `pending` one-container requests of
    /// 1–4 cores and 2–8 GiB, every tenth a gang of 4, in one unbounded queue.
    pub fn new(nodes: usize, pending: usize) -> Self {
        let mut c = SyntheticCluster::default();
        let intern = |s: &str, bytes: &mut Vec<u8>| {
            let r = GantryStrRef { offset: bytes.len() as u32, len: s.len() as u32 };
            bytes.extend_from_slice(s.as_bytes());
            r
        };
        let root = intern("root", &mut c.strings);
        let cap = Resources::new(16_000 * nodes as u64, 64 * GIB * nodes as u64, 0);
        c.queues.push(GantryQueue {
            name: root,
            parent: GANTRY_NONE,
            flags: GANTRY_QUEUE_LEAF,
            guaranteed: 1.0,
            maximum: 1.0,
            absolute_guaranteed: cap,
            absolute_maximum: cap,
            ..Default::default()
        });
        let racks: Vec<GantryStrRef> =
            (0..nodes.div_ceil(40)).map(|r| intern(&format!("rack-{r}"), &mut c.strings)).collect();
        for i in 0..nodes {
            let name = intern(&format!("node-{i:05}"), &mut c.strings);
            c.nodes.push(GantryNode {
                name,
                rack: racks[i / 40],
                capacity: Resources::new(16_000, 64 * GIB, 0),
                state: GANTRY_NODE_RUNNING,
                ..Default::default()
            });
        }
        for k in 0..pending {
            let gang = k % 10 == 9;
            c.apps.push(GantryApp {
                id: k as u64 + 1,
                queue: 0,
                state: GANTRY_APP_ACCEPTED,
                attempt: 1,
                requests: GantryRange { start: k as u32, len: 1 },
                ..Default::default()
            });
            c.requests.push(GantryRequest {
                id: k as u64 + 1,
                app: k as u32,
                flags: if gang { GANTRY_REQUEST_GANG } else { 0 },
                resources: Resources::new(1000 * (1 + k as u64 % 4), 2 * GIB * (1 + k as u64 % 4), 0),
                count: if gang { 4 } else { 1 },
                ..Default::default()
            });
            c.pending.push(k as u32);
        }
        c
    }

    /// A place-hook view of the cluster.
    pub fn view(&self) -> View<'_> {
        View {
            hook: GANTRY_HOOK_PLACE,
            now_ms: 0,
            cycle: 1,
            seed: 1,
            cluster: self.queues.first().map(|q| q.absolute_maximum).unwrap_or_default(),
            strings: &self.strings,
            labels: &self.labels,
            nodes: &self.nodes,
            gpus: &[],
            queues: &self.queues,
            apps: &self.apps,
            requests: &self.requests,
            containers: &[],
            reservations: &[],
            pending: &self.pending,
            node_usage: &[],
            plan: gantry_sdk::PlanView::default(),
        }
    }
}

/// A two-rack cluster with GPU and plain nodes, used by several tests.
pub fn small_cluster() -> Vec<NodeSpec> {
    let mut v = Vec::new();
    for i in 0..4 {
        v.push(node(&format!("gpu-{i}"), "rack-gpu", 16, 64, 4, "A100"));
    }
    for i in 0..6 {
        v.push(node(&format!("cpu-{i}"), "rack-a", 8, 32, 0, ""));
    }
    v
}

/// Shorthand for a same-rack gang request spec.
pub fn same_rack_gang(cpu_millis: u64, mem_gib: u64, count: u32) -> RequestSpec {
    RequestSpec {
        resources: Resources::new(cpu_millis, mem_gib * GIB, 0),
        count,
        gang: true,
        rack_affinity: RackAffinity::Required,
        ..Default::default()
    }
}

/// How many containers `commands` launch.
pub fn launches(commands: &[gantry_engine::Command]) -> usize {
    commands.iter().filter(|c| matches!(c, gantry_engine::Command::Launch { .. })).count()
}

/// Runs one scheduling cycle at `t` and checks the state's invariants after it.
pub fn tick(e: &mut Engine, t: u64) -> Vec<gantry_engine::Command> {
    let commands = e.handle(t, Event::Tick).expect("tick");
    e.state().check_invariants().expect("invariants hold after every cycle");
    commands
}

/// Agent configuration lines (top-level keys and an `[isolation]` table, so they go before any
/// other table) for benchmarks: with `AGENT_ISOLATION=off`, the agent as it was before
/// isolation (every container as `nobody`, the host's `/tmp`, no process limit, privileges
/// kept), to measure in one run what isolation costs; `no-private-tmp`: isolation without the
/// mount namespace; otherwise nothing (the defaults).
pub fn agent_isolation_from_env() -> &'static str {
    match std::env::var("AGENT_ISOLATION").as_deref() {
        Ok("off") => gantry_agent::isolation::BEFORE_ISOLATION_TOML,
        // Everything but the mount namespace, to tell its share of the cost.
        Ok("no-private-tmp") => "[isolation]\nprivate_tmp = false\n",
        _ => "",
    }
}

/// The lines `CONTAINER UNIX_MS` that copies of an app appended to a shared file, as
/// (container, ms): how the fencing tests see when each copy ran.
pub fn container_timestamps(path: &Path) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// A directory that containers, which run as unprivileged uids of their own, can reach and write
/// in (for tests that have them record what ran), removed when dropped. It is not under `dir`
/// when that is under `/tmp`: a container sees a `/tmp` of its own, so it lies in the target
/// directory instead.
pub fn container_writable_dir(dir: &Path, name: &str) -> SharedDir {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let base = if dir.starts_with("/tmp") { target_dir().join("container-shared") } else { dir.to_owned() };
    std::fs::create_dir_all(&base).expect("base of the shared directory");
    mode(&base, 0o711).expect("chmod");
    let holder = tempfile::Builder::new().prefix("shared-").tempdir_in(&base).expect("shared directory");
    mode(holder.path(), 0o711).expect("chmod");
    let out = holder.path().join(name);
    std::fs::create_dir(&out).expect("output directory");
    mode(&out, 0o777).expect("chmod");
    SharedDir { path: out, _holder: holder }
}

/// A directory from [`container_writable_dir`]; derefs to its path.
pub struct SharedDir {
    path: PathBuf,
    _holder: tempfile::TempDir,
}

impl std::ops::Deref for SharedDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for SharedDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A tmpfs mounted for a test (needs root, as the cgroup tests do), unmounted when dropped: a
/// disk that a test can fill to the last byte.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `8m`) on `dir`, creating it.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes zeros to `path` until its filesystem is full.
pub fn fill_disk(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}
