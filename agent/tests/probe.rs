//! The probe against the real machine: host figures checked against the kernel's own files and
//! tools, process-tree usage ([`gantry_agent::procfs`]) of real processes under a parent that
//! stands in for a container's shim, and the GPU probe's behaviour without NVML.

use gantry_agent::config::AgentConfig;
use gantry_agent::probe::{GpuProbe, HostSampler, node_report, probe_node};
use gantry_agent::procfs::{ProcStat, container_of_pid, descendants, tree_usage};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child started as the leader of a new session, as the agent's shim is (and, like the shim,
/// the parent of what it runs), whose whole process group is killed and reaped when the test
/// ends, pass or fail.
struct Session {
    child: Child,
}

impl Session {
    fn spawn(cmd: &mut Command) -> Session {
        // SAFETY: between fork and exec the closure only calls setsid(2), which is
        // async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Session { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The session leader is also its process group's leader, so the group id is its pid.
        let _ = killpg(Pid::from_raw(i32::try_from(self.pid()).expect("pid fits i32")), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A value from `/proc/meminfo` or `/proc/<pid>/status` (`Key:   123 kB`), in bytes.
fn kib_field(path: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).expect("read proc file");
    let line = text.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key} in {path}"));
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    kib * 1024
}

fn command_output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
}

#[test]
fn memory_total_equals_memtotal_and_used_is_total_less_available() {
    let mut host = HostSampler::new().expect("host sampler");
    let usage = host.sample().expect("sample");
    assert_eq!(usage.memory_total_bytes, kib_field("/proc/meminfo", "MemTotal:"));
    assert!(usage.memory_available_bytes <= usage.memory_total_bytes, "{usage:?}");
    assert!(usage.memory_available_bytes > 0, "{usage:?}");
    assert_eq!(usage.memory_used_bytes + usage.memory_available_bytes, usage.memory_total_bytes);
}

#[test]
fn cores_are_the_online_logical_cpus() {
    let mut host = HostSampler::new().expect("host sampler");
    let usage = host.sample().expect("sample");
    let online: u32 = command_output("getconf", &["_NPROCESSORS_ONLN"]).parse().expect("a number");
    assert_eq!(usage.cpu_cores, online);
    // nproc and available_parallelism honour this process's affinity, so they never exceed it.
    let nproc: u32 = command_output("nproc", &[]).parse().expect("a number");
    let parallelism = std::thread::available_parallelism().expect("parallelism").get();
    assert!(nproc <= usage.cpu_cores && parallelism <= usage.cpu_cores as usize, "{nproc} {parallelism}");
    let report = node_report(&AgentConfig::default(), usage, Vec::new(), None, Vec::new());
    assert_eq!(report.capacity.cpu_millis, u64::from(online) * 1000);
}

/// CPU time this process has used, in clock ticks.
fn own_cpu_ticks() -> u64 {
    let me = ProcStat::read(std::process::id()).expect("own stat");
    me.utime + me.stime
}

#[test]
fn cpu_usage_is_a_fraction_and_cpu_seconds_only_grow() {
    let mut host = HostSampler::new().expect("host sampler");
    let mut last = host.sample().expect("sample");
    for _ in 0..5 {
        // Burn about 0.3 s of CPU in this process between samples, measured by the kernel.
        let start = own_cpu_ticks();
        let mut x = 0u64;
        while own_cpu_ticks() < start + 30 {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        let now = host.sample().expect("sample");
        assert!((0.0..=1.0).contains(&now.cpu_usage), "{now:?}");
        assert!(now.cpu_usage > 0.0, "a busy interval shows some use: {now:?}");
        assert!(
            now.cpu_seconds_total >= last.cpu_seconds_total + 0.15,
            "host CPU seconds grew by {} while this process alone used 0.3 s",
            now.cpu_seconds_total - last.cpu_seconds_total
        );
        last = now;
    }
}

/// Waits (for at most a minute) until `check` gives something.
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn tree_memory_is_within_ten_percent_of_the_kernels_rss() {
    // A shell, in the shim's place, runs python3, which allocates and writes 100 MiB, then says
    // so with its pid and waits. (`; exit` keeps the shell from exec'ing python3 in its place.)
    let script = "import os, time\nb = b'\\x01' * (100 << 20)\nprint('ready', os.getpid(), flush=True)\n\
                  time.sleep(600)\n";
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "python3 -c \"$1\"; exit $?", "sh", script]).stdout(Stdio::piped()).stdin(Stdio::null());
    let mut parent = Session::spawn(&mut cmd);
    let stdout = parent.child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read python's output");
    let python: u32 = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["ready", pid] => pid.parse().expect("a pid"),
        _ => panic!("python3 did not get ready: {line:?}"),
    };

    let status = format!("/proc/{python}/status");
    let rss_before = kib_field(&status, "VmRSS:");
    let procs = descendants(parent.pid());
    let (_, rss) = tree_usage(&procs);
    let rss_after = kib_field(&status, "VmRSS:");
    assert!(rss_before >= 100 << 20, "the process holds 100 MiB: VmRSS {rss_before}");
    let kernel = (rss_before + rss_after) as f64 / 2.0;
    let ours = rss as f64;
    assert!((ours - kernel).abs() <= 0.10 * kernel, "ours {ours} vs VmRSS {kernel}");
    assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![python], "{procs:?}");
}

#[test]
fn tree_cpu_seconds_grow_for_a_busy_process() {
    // A shell whose one child spins.
    let parent = Session::spawn(Command::new("sh").args(["-c", "while :; do :; done & wait"]));
    let first = wait_for("the busy child", || Some(descendants(parent.pid())).filter(|d| !d.is_empty()));
    assert_eq!(first.len(), 1, "{first:?}");
    let (first_cpu, _) = tree_usage(&first);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = first_cpu;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let procs = descendants(parent.pid());
        assert_eq!(procs.len(), 1, "{procs:?}");
        let (now, _) = tree_usage(&procs);
        assert!(now >= last, "CPU seconds went back: {last} → {now}");
        last = now;
        if now >= first_cpu + 0.5 {
            break;
        }
        assert!(Instant::now() < deadline, "a busy loop gained no 0.5 CPU s in 120 s: {first_cpu} → {now}");
    }
}

#[test]
fn processes_are_attributed_to_the_shim_they_run_under() {
    let busy = Session::spawn(Command::new("sh").args(["-c", "while :; do :; done & wait"]));
    let idle = Session::spawn(Command::new("sh").args(["-c", "sleep 600 & sleep 600; wait"]));
    let shims = HashMap::from([(busy.pid(), 1), (idle.pid(), 2)]);
    // The shells start their children asynchronously; wait until all are there.
    let (busy_tree, idle_tree) = wait_for("the busy child and both sleeps", || {
        let (b, i) = (descendants(busy.pid()), descendants(idle.pid()));
        assert!(b.len() <= 1 && i.len() <= 2, "{b:?} {i:?}");
        (b.len() == 1 && i.len() == 2).then_some((b, i))
    });
    for (tree, container) in [(&busy_tree, 1), (&idle_tree, 2)] {
        for p in tree {
            assert_eq!(container_of_pid(p.pid, &shims), Some(container), "{p:?}");
        }
        assert!(tree_usage(tree).1 > 0, "{tree:?}");
    }
    assert_eq!(container_of_pid(busy.pid(), &shims), None, "a shim is not inside its container");
    assert_eq!(container_of_pid(std::process::id(), &shims), None);
    // pid_max is above every pid, so no process has it.
    let nobody: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(container_of_pid(nobody, &shims), None);
}

#[test]
fn node_report_subtracts_the_reserve_saturating() {
    let mut host = HostSampler::new().expect("host sampler");
    let usage = host.sample().expect("sample");
    let mut config = AgentConfig { node_name: Some("n7".into()), rack: "r3".into(), ..Default::default() };
    config.labels.insert("gpu".into(), "none".into());
    config.reserve.cpu_millis = 500;
    config.reserve.memory_bytes = 1 << 20;
    let report = node_report(&config, usage, Vec::new(), Some("no GPUs".into()), Vec::new());
    let cap = report.capacity;
    assert_eq!(cap.memory_bytes, usage.memory_total_bytes);
    assert_eq!(report.allocatable.cpu_millis, cap.cpu_millis - 500);
    assert_eq!(report.allocatable.memory_bytes, cap.memory_bytes - (1 << 20));
    assert_eq!((report.name.as_str(), report.rack.as_str()), ("n7", "r3"));
    assert_eq!(report.labels, vec![("gpu".to_owned(), "none".to_owned())]);

    config.reserve.cpu_millis = u64::MAX;
    config.reserve.memory_bytes = u64::MAX;
    config.reserve.gpus = u32::MAX;
    let huge = node_report(&config, usage, Vec::new(), None, Vec::new());
    assert_eq!(huge.capacity, cap, "the reserve does not change capacity");
    assert_eq!(
        (huge.allocatable.cpu_millis, huge.allocatable.memory_bytes, huge.allocatable.gpus),
        (0, 0, 0)
    );
}

#[test]
fn probe_node_reports_this_machine() {
    let report = probe_node(&AgentConfig::default(), Duration::from_millis(200)).expect("probe");
    assert_eq!(report.capacity.memory_bytes, kib_field("/proc/meminfo", "MemTotal:"));
    assert_eq!(report.gpus.is_empty(), report.gpu_note.is_some(), "a note exactly when no GPUs: {report:?}");
    assert_eq!(report.capacity.gpus as usize, report.gpus.len());
    assert!((0.0..=1.0).contains(&report.usage.cpu_usage), "{report:?}");
    let json = serde_json::to_value(&report).expect("serialises");
    assert!(json["allocatable"]["cpu_millis"].is_u64(), "{json}");
}

/// Log output collected in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn without_nvml_there_are_no_gpus_a_note_and_one_log_line() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let probe = tracing::subscriber::with_default(subscriber, || {
        let mut probe = GpuProbe::with_library("/nonexistent/gantry-test/libnvidia-ml.so.1");
        assert!(!probe.nvml_loaded());
        for _ in 0..5 {
            let sample = probe.sample(|_| Some(1));
            assert!(sample.gpus.is_empty(), "{sample:?}");
            let note = sample.note.expect("a note");
            assert!(note.starts_with("NVML not available"), "{note}");
        }
        probe
    });
    assert_eq!(probe.notes_logged(), 1);
    let logs = String::from_utf8(captured.0.lock().expect("log lock").clone()).expect("utf-8");
    assert_eq!(logs.matches("NVML not available").count(), 1, "logged once, not per sample:\n{logs}");
}
