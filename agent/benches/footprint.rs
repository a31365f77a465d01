//! The agent's own footprint — resident memory and CPU — while idle and with 50 running
//! containers at 1 s sampling, side by side with Debian's `prometheus-node-exporter` in the same
//! run. Both are scraped once a second on `/metrics`, as a Prometheus with a 1 s interval would.
//!
//! Run (as root, cgroups writable): `cargo bench -p gantry-agent --bench footprint`
//! Optional: `FOOTPRINT_SECONDS=60` (length of each measured phase, default 30),
//! `AGENT_ISOLATION=off` (the agent before isolation, to measure what it costs).
//! Figures go to BENCHMARKS.md.

#[path = "../tests/common/mod.rs"]
mod common;

use common::Server;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::scheduler_message::Msg as Down;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONTAINERS: u64 = 50;

/// CPU ticks (user + system) and resident set of a process, from /proc.
fn proc_sample(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib =
        status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    Some((ticks, rss_kib * 1024))
}

fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map_or(100.0, |t| t as f64)
}

fn scrape(port: u16) -> usize {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return 0;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out.len()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Footprint {
    cpu_percent_of_one_core: f64,
    rss_max_bytes: u64,
}

/// Measures `pids` for `secs`, scraping each port once a second.
fn measure(pids: &[u32], ports: &[u16], secs: u64) -> Vec<Footprint> {
    let start: Vec<(u64, u64)> = pids.iter().map(|&p| proc_sample(p).expect("process alive")).collect();
    let mut rss_max: Vec<u64> = start.iter().map(|s| s.1).collect();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        for &port in ports {
            scrape(port);
        }
        for (i, &p) in pids.iter().enumerate() {
            if let Some((_, rss)) = proc_sample(p) {
                rss_max[i] = rss_max[i].max(rss);
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let wall = t0.elapsed().as_secs_f64();
    pids.iter()
        .enumerate()
        .map(|(i, &p)| {
            let (ticks, rss) = proc_sample(p).expect("process alive");
            Footprint {
                cpu_percent_of_one_core: (ticks - start[i].0) as f64 / clock_ticks() / wall * 100.0,
                rss_max_bytes: rss_max[i].max(rss),
            }
        })
        .collect()
}

/// Proportional set size (shared pages divided among the processes sharing them), bytes.
fn pss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines().find(|l| l.starts_with("Pss:"))?.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Number of shims, their total RSS and their total PSS.
fn shims_rss(agent_pid: u32) -> (usize, u64, u64) {
    let mut n = 0;
    let mut total = 0;
    let mut total_pss = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let is_shim = cmdline.split(|b| *b == 0).nth(1) == Some(b"shim");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if is_shim && ppid == Some(agent_pid) {
            if let Some((_, rss)) = proc_sample(pid) {
                n += 1;
                total += rss;
                total_pss += pss(pid);
            }
        }
    }
    (n, total, total_pss)
}

fn row(name: &str, f: Footprint) {
    println!(
        "| {name:<34} | {:>8.1} MiB | {:>6.2} % |",
        f.rss_max_bytes as f64 / (1 << 20) as f64,
        f.cpu_percent_of_one_core
    );
}

fn main() {
    let secs: u64 = std::env::var("FOOTPRINT_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let exporter = ["/usr/bin/prometheus-node-exporter", "/usr/bin/node_exporter"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("install Debian's prometheus-node-exporter to compare with");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let agent_port = free_port();
    let exporter_port = free_port();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"bench\"\nwork_root = {:?}\nmetrics_listen = \"127.0.0.1:{agent_port}\"\n\
             cgroup_name = \"gantry-bench-{}\"\nsample_interval_ms = 1000\nkill_grace_ms = 1000\n{}",
            dir.path().join("work").display().to_string(),
            std::process::id(),
            // AGENT_ISOLATION=off: the agent before isolation, to measure what it costs.
            if std::env::var("AGENT_ISOLATION").is_ok_and(|v| v == "off") {
                gantry_agent::isolation::BEFORE_ISOLATION_TOML
            } else {
                ""
            }
        ),
    )
    .expect("config");
    let mut server = rt.block_on(Server::start(false));
    let agent = Killed(
        Command::new(env!("CARGO_BIN_EXE_gantry-agent"))
            .args(["run", "--config"])
            .arg(&config)
            .args(["--scheduler", &format!("http://{}", server.addr)])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the agent"),
    );
    let exporter = Killed(
        Command::new(exporter)
            .arg(format!("--web.listen-address=127.0.0.1:{exporter_port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter"),
    );
    let (session, _) = rt.block_on(server.handshake());
    let mut session = session;
    std::thread::sleep(Duration::from_secs(3)); // both up and warm
    let pids = [agent.0.id(), exporter.0.id()];
    let ports = [agent_port, exporter_port];

    println!("phase 1: idle, {secs} s");
    let idle = measure(&pids, &ports, secs);

    println!("phase 2: launching {CONTAINERS} containers");
    rt.block_on(async {
        for id in 1..=CONTAINERS {
            session
                .send(Down::Launch(v1::Launch {
                    container_id: id,
                    app_id: 1,
                    argv: vec!["sleep".into(), "3600".into()],
                    cpu_millis: 100,
                    memory_bytes: 32 << 20,
                    ..Default::default()
                }))
                .await;
        }
        let mut started = 0;
        while started < CONTAINERS {
            match session.recv().await {
                Up::ContainerStarted(_) => started += 1,
                Up::LaunchFailed(f) => panic!("launch failed: {f:?}"),
                _ => {}
            }
        }
    });
    // Keep draining the agent's status stream in the background while measuring.
    let drain = std::thread::spawn({
        let rt_handle = rt.handle().clone();
        move || {
            rt_handle.block_on(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(secs + 5);
                while tokio::time::Instant::now() < deadline {
                    // Acknowledge statuses as the scheduler does: an agent that hears nothing
                    // fences its containers (and their shims fence them on their own).
                    if let Ok(Ok(Some(v1::AgentMessage { msg: Some(Up::Status(s)) }))) =
                        tokio::time::timeout(Duration::from_secs(2), session.inbound.message()).await
                    {
                        session.send(Down::StatusAck(v1::StatusAck { seq: s.seq })).await;
                    }
                }
                session
            })
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    println!("phase 3: {CONTAINERS} containers, {secs} s");
    let busy = measure(&pids, &ports, secs);
    let (shims, shim_rss, shim_pss) = shims_rss(agent.0.id());
    let mut session = drain.join().expect("drain");

    println!();
    println!("| process ({secs} s each, scraped every 1 s) | max RSS | CPU (one core) |");
    println!("|---|---:|---:|");
    row("gantry-agent, idle", idle[0]);
    row("prometheus-node-exporter, idle", idle[1]);
    row(&format!("gantry-agent, {CONTAINERS} containers"), busy[0]);
    row(&format!("prometheus-node-exporter, {CONTAINERS} c."), busy[1]);
    println!(
        "| {shims} container supervisors (shims), total | {:>8.1} MiB RSS, {:.1} MiB PSS | — |",
        shim_rss as f64 / (1 << 20) as f64,
        shim_pss as f64 / (1 << 20) as f64
    );
    println!("| gantry-agent PSS at the end | {:.1} MiB | — |", pss(agent.0.id()) as f64 / (1 << 20) as f64);

    rt.block_on(async {
        for id in 1..=CONTAINERS {
            session
                .send(Down::Kill(v1::Kill {
                    container_id: id,
                    grace_ms: Some(0),
                    reason: "bench over".into(),
                    cluster_id: String::new(),
                }))
                .await;
        }
        let mut ended = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while ended < CONTAINERS && tokio::time::Instant::now() < deadline {
            if let Up::ContainerExited(e) = session.recv().await {
                ended += 1;
                session
                    .send(Down::AckExit(v1::AckExit {
                        container_id: e.container_id,
                        cluster_id: e.cluster_id,
                    }))
                    .await;
            }
        }
        assert_eq!(ended, CONTAINERS, "every container was killed");
    });
}
