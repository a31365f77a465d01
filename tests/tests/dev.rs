//! The README's first command: `gantry dev`, then `gantry submit -- echo hello`, on the real
//! binaries. Ctrl-C stops the cluster with no process left behind. Timeouts are failure guards.

use gantry_tests::gantry_bin;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

fn gantry(api: &str, args: &[&str]) -> std::process::Output {
    gantry_tests::gantry_cli(api, args)
}

fn app_json(api: &str, id: u64) -> serde_json::Value {
    let out = gantry(api, &["app", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn wait_state(api: &str, id: u64, want: &str) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let v = app_json(api, id);
        if v["app"]["state"] == want {
            return v;
        }
        assert!(start.elapsed() < GUARD, "guard: app {id} never reached {want}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// POSTs a JSON body over a plain HTTP/1.1 connection; returns the whole reply.
fn post(api: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(api).expect("connect");
    s.set_read_timeout(Some(GUARD)).expect("timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The server may answer (413) and close before reading the whole body: ignore write errors.
    let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes()));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn processes_with(arg: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

/// `gantry dev`, interrupted (so it cleans up) if the test fails half-way.
struct Dev(std::process::Child);

impl Drop for Dev {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn gantry_dev_runs_submitted_work_and_stops_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = gantry_tests::free_port();
    let api = format!("127.0.0.1:{port}");
    let mut dev = Dev(Command::new(gantry_bin().expect("gantry binary"))
        .args(["dev", "--listen", &api, "--data-dir"])
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start gantry dev"));
    let start = Instant::now();
    while std::net::TcpStream::connect(&api).is_err() {
        assert!(start.elapsed() < GUARD, "guard: gantry dev never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Wait for the agent to register before submitting.
    while !String::from_utf8_lossy(&gantry(&api, &["nodes"]).stdout).contains("RUNNING") {
        assert!(start.elapsed() < GUARD, "guard: the dev agent never registered");
        std::thread::sleep(Duration::from_millis(100));
    }

    let out = gantry(&api, &["submit", "--", "echo", "hello"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("application 1 accepted"));
    let done = wait_state(&api, 1, "FINISHED");
    assert_eq!(done["app"]["finalStatus"], "SUCCEEDED");
    let logs = gantry(&api, &["logs", "1"]);
    assert!(logs.status.success(), "{}", String::from_utf8_lossy(&logs.stderr));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("hello"),
        "{}",
        String::from_utf8_lossy(&logs.stdout)
    );

    // Malformed and oversized requests get a 4xx with a message and change nothing.
    let before = gantry(&api, &["apps", "--json"]).stdout;
    for (body, want) in [
        ("{not json".to_owned(), "400"),
        (r#"{"containers": [{"resource": {"cpuMillis": -5, "memoryBytes": 1, "gpus": 0}, "command": ["x"]}]}"#.to_owned(), "4"),
        (r#"{"containers": [], "bogus": 1}"#.to_owned(), "4"),
        (format!(r#"{{"application-name": "{}", "containers": []}}"#, "x".repeat(2 << 20)), "413"),
    ] {
        let reply = post(&api, "/ws/v1/cluster/apps", &body);
        let status = reply.split_whitespace().nth(1).unwrap_or_default().to_owned();
        assert!(status.starts_with(want), "{status} for {:.60}: {reply:.300}", body);
        if status != "413" {
            assert!(reply.contains("RemoteException") && reply.contains("message"), "{reply:.400}");
        }
    }
    assert_eq!(gantry(&api, &["apps", "--json"]).stdout, before, "refused requests changed nothing");

    // The live daemon's /metrics passes promtool.
    let metrics = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&api).expect("connect");
        s.set_read_timeout(Some(GUARD)).expect("timeout");
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n").expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
    };
    assert!(metrics.contains("gantry_apps{state=\"finished\"} 1"), "{metrics:.2000}");
    // The daemon feeds what only it sees: cycles timed, submissions counted once committed,
    // store commits timed.
    let sample = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or_else(|| panic!("no {name} in {metrics:.3000}"))
    };
    assert!(sample("gantry_scheduler_cycle_duration_seconds_count") >= 1.0);
    assert_eq!(sample("gantry_scheduler_submissions_total"), 1.0, "one app was acknowledged");
    assert!(sample("gantry_store_commit_duration_seconds_count") >= 1.0);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) must be installed");
    {
        use std::io::Write;
        promtool.stdin.take().expect("stdin").write_all(metrics.as_bytes()).expect("feed promtool");
    }
    let checked = promtool.wait_with_output().expect("promtool");
    let said =
        format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(checked.status.success() && said.trim().is_empty(), "promtool: {said}");

    // Something still running when Ctrl-C comes.
    let marker = "3017"; // an argument no other process has
    let out = gantry(&api, &["submit", "--", "sleep", marker]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_state(&api, 2, "RUNNING");
    assert_eq!(processes_with(marker).len(), 1, "the container runs");

    let pid = dev.0.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().expect("kill").success());
    let deadline = Instant::now() + GUARD;
    let status = loop {
        if let Some(s) = dev.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "guard: gantry dev did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "Ctrl-C stops gantry dev cleanly: {status:?}");
    assert_eq!(processes_with(marker), Vec::<u32>::new(), "no container left behind");
    assert!(processes_with("shim").iter().all(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| !String::from_utf8_lossy(&c).contains("gantry-dev"))
    }));
    // Nor any cgroup: the containers' and the agent's parent, in every controller (issue 19).
    let cgroup = format!("gantry-dev-{pid}");
    let left: Vec<_> = ["memory", "cpu", "cpuacct", "pids", "freezer", "unified"]
        .iter()
        .map(|c| std::path::Path::new("/sys/fs/cgroup").join(c).join(&cgroup))
        .filter(|p| p.exists())
        .collect();
    gantry_tests::remove_cgroups(&cgroup);
    assert!(left.is_empty(), "gantry dev left cgroups behind: {left:?}");
}
