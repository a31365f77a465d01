//! The README's first command: `gantry dev`, then `gantry submit -- echo hello` from the same
//! directory, on the real binaries — the CLI finds the token `gantry dev` made by itself. Ctrl-C
//! stops the cluster with no process left behind. A container cannot use the REST API (issue 19,
//! item 7). Timeouts are failure guards.

use gantry_tests::gantry_bin;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

/// The real CLI against `api`, run in `dir` (where `gantry dev` was started) with no token in
/// its environment.
fn gantry_in(dir: &Path, api: &str, args: &[&str]) -> std::process::Output {
    Command::new(gantry_bin().expect("gantry binary"))
        .current_dir(dir)
        .args(args)
        .env("GANTRY_SCHEDULER", format!("http://{api}"))
        .env_remove("GANTRY_TOKEN")
        .env_remove("GANTRY_TOKEN_FILE")
        .output()
        .expect("run gantry")
}

/// Starts `gantry dev` in `dir` (its state in `dir/gantry-dev`, the default) and waits until its
/// agent has registered.
fn start_dev(dir: &Path, api: &str) -> Dev {
    start_dev_with(dir, api, &[])
}

/// [`start_dev`] with more arguments.
fn start_dev_with(dir: &Path, api: &str, extra: &[&str]) -> Dev {
    use std::io::BufRead;
    let mut child = Command::new(gantry_bin().expect("gantry binary"))
        .current_dir(dir)
        .args(["dev", "--listen", api])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start gantry dev");
    let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut dev = Dev { child, containers: String::new(), out };
    let start = Instant::now();
    while std::net::TcpStream::connect(api).is_err() {
        assert!(start.elapsed() < GUARD, "guard: gantry dev never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The banner names the container directory (a failure guard: the banner is printed at once).
    let mut line = String::new();
    while dev.containers.is_empty() {
        line.clear();
        assert!(dev.out.read_line(&mut line).expect("banner") > 0, "gantry dev ended before its banner");
        if let Some(path) = line.trim().strip_prefix("containers") {
            dev.containers = path.trim().to_owned();
        }
    }
    // Wait for the agent to register before submitting.
    while !String::from_utf8_lossy(&gantry_in(dir, api, &["nodes"]).stdout).contains("RUNNING") {
        assert!(start.elapsed() < GUARD, "guard: the dev agent never registered");
        std::thread::sleep(Duration::from_millis(100));
    }
    dev
}

fn app_json(dir: &Path, api: &str, id: u64) -> serde_json::Value {
    let out = gantry_in(dir, api, &["app", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn wait_state(dir: &Path, api: &str, id: u64, want: &str) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let v = app_json(dir, api, id);
        if v["app"]["state"] == want {
            return v;
        }
        assert!(start.elapsed() < GUARD, "guard: app {id} never reached {want}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// POSTs a JSON body with `token` over a plain HTTP/1.1 connection; returns the whole reply.
fn post(api: &str, token: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(api).expect("connect");
    s.set_read_timeout(Some(GUARD)).expect("timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The server may answer (413) and close before reading the whole body: ignore write errors.
    let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes()));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET path` with `token`; returns the body.
fn get(api: &str, token: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(api).expect("connect");
    s.set_read_timeout(Some(GUARD)).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
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
struct Dev {
    child: std::process::Child,
    /// Where its agent keeps containers (from its banner): this cluster's shims name it.
    containers: String,
    /// Its standard output, kept open so that it can still print when it stops.
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Drop for Dev {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn gantry_dev_runs_submitted_work_and_stops_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let port = gantry_tests::free_port();
    let api = format!("127.0.0.1:{port}");
    let mut dev = start_dev(d, &api);
    let gantry = |api: &str, args: &[&str]| gantry_in(d, api, args);
    let token = std::fs::read_to_string(d.join("gantry-dev/cli-token")).expect("the dev token");
    let token = token.trim();

    let out = gantry(&api, &["submit", "--", "echo", "hello"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("application 1 accepted"));
    let done = wait_state(d, &api, 1, "FINISHED");
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
        let reply = post(&api, token, "/ws/v1/cluster/apps", &body);
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
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n")
            .expect("write");
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
    wait_state(d, &api, 2, "RUNNING");
    assert_eq!(processes_with(marker).len(), 1, "the container runs");

    let pid = dev.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().expect("kill").success());
    let deadline = Instant::now() + GUARD;
    let status = loop {
        if let Some(s) = dev.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "guard: gantry dev did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "Ctrl-C stops gantry dev cleanly: {status:?}");
    assert_eq!(processes_with(marker), Vec::<u32>::new(), "no container left behind");
    // No supervisor of this cluster's containers is left (other tests' clusters may run on).
    assert!(!dev.containers.is_empty());
    assert!(processes_with("shim").iter().all(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| !String::from_utf8_lossy(&c).contains(&dev.containers))
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

/// Issue 19, item 7: under `gantry dev` a container used curl on the loopback REST API to kill
/// another user's application. Now the API wants the token `gantry dev` keeps in its data
/// directory (0600, readable by the person who started it, not by a container's user): the
/// container's raw request gets 401 and the other application runs on.
#[test]
fn a_container_under_gantry_dev_cannot_drive_the_rest_api() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Traversable by everyone, so that only the token file's own mode keeps the token private.
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let port = gantry_tests::free_port();
    let api = format!("127.0.0.1:{port}");
    let _dev = start_dev(d, &api);
    let token_file = d.join("gantry-dev/cli-token");
    let mode = std::fs::metadata(&token_file).expect("token file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the dev token is private");
    let submit = |args: &[&str]| -> u64 {
        let mut all = vec!["submit", "--json", "--cpu", "10m", "--mem", "16M"];
        all.extend_from_slice(args);
        let out = gantry_in(d, &api, &all);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
            .as_u64()
            .expect("id")
    };
    let victim = submit(&["--user", "victim", "--", "sleep", "3121"]);
    wait_state(d, &api, victim, "RUNNING");

    // Another user's container: can it read the token, and does the API obey it without one?
    let script = format!(
        r#"if [ -r {token} ]; then echo token-readable; else echo token-unreadable; fi
exec 3<>/dev/tcp/127.0.0.1/{port} || exit 3
printf 'PUT /ws/v1/cluster/apps/{victim}/state HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 18\r\nConnection: close\r\n\r\n{{"state":"KILLED"}}' >&3
read -r status <&3
echo "answer: $status""#,
        token = token_file.display()
    );
    let attacker = submit(&["--user", "mallory", "--", "/bin/bash", "-c", &script]);
    gantry_tests::wait_until("the attacker to end", GUARD, || {
        let state = app_json(d, &api, attacker)["app"]["state"].as_str().map(str::to_owned)?;
        (state == "FINISHED" || state == "FAILED").then_some(())
    });
    let logs = gantry_in(d, &api, &["logs", &attacker.to_string()]);
    let said = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(said.contains("token-unreadable"), "{said}");
    assert!(said.contains("answer: HTTP/1.1 401"), "the container's request is refused: {said}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(app_json(d, &api, victim)["app"]["state"], "RUNNING", "the other app runs on");

    // The person who started it: the CLI in another directory finds no token and says what to
    // do; GANTRY_TOKEN_FILE points it at the token from anywhere.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let out = gantry_in(elsewhere.path(), &api, &["apps"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("GANTRY_TOKEN_FILE"), "{err}");
    let out = Command::new(gantry_bin().expect("gantry binary"))
        .current_dir(elsewhere.path())
        .args(["kill", &victim.to_string()])
        .env("GANTRY_SCHEDULER", format!("http://{api}"))
        .env("GANTRY_TOKEN_FILE", &token_file)
        .env_remove("GANTRY_TOKEN")
        .output()
        .expect("run gantry");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_state(d, &api, victim, "KILLED");
}

/// Issue 20, item 5: `gantry dev --config FILE` loads the plugins the file names, so a plugin
/// author iterates on the all-in-one cluster; the plugin places the work (its hook is timed in
/// /metrics under its configured name) and the banner names the file.
#[test]
fn gantry_dev_loads_the_plugins_of_its_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let lib = gantry_tests::rust_plugin("gantry_testplugin").expect("test plugin");
    std::fs::copy(&lib, d.join("libtp.so")).expect("copy the plugin next to the config");
    std::fs::write(
        d.join("scheduler.toml"),
        "[engine]\nseed = 5\n[[plugins]]\nname = \"mine\"\npath = \"./libtp.so\"\n\
         [plugins.config]\nmode = \"ok\"\n[profile]\nplace = \"mine\"\n",
    )
    .expect("config");
    let api = format!("127.0.0.1:{}", gantry_tests::free_port());
    let mut dev = start_dev_with(d, &api, &["--config", "scheduler.toml"]);
    let token = std::fs::read_to_string(d.join("gantry-dev/cli-token")).expect("the dev token");
    let out = gantry_in(d, &api, &["submit", "--", "echo", "hello"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wait_state(d, &api, 1, "FINISHED")["app"]["finalStatus"], "SUCCEEDED");
    let info = get(&api, token.trim(), "/ws/v1/cluster/info");
    assert!(info.contains(r#""name":"mine""#), "the plugin is loaded: {info}");
    let metrics = get(&api, token.trim(), "/metrics");
    let placed = gantry_tests::sample(
        &metrics,
        r#"gantry_scheduler_plugin_hook_duration_seconds_count{plugin="mine",hook="place"}"#,
    );
    assert!(placed.is_some_and(|n| n >= 1.0), "the plugin placed the app: {metrics:.3000}");
    let fallback = gantry_tests::sample(&metrics, "gantry_scheduler_fallback_placement_cycles_total");
    assert_eq!(fallback, Some(0.0), "the built-in never stood in");
    // The banner said which file and which plugins.
    let mut banner = String::new();
    let mut line = String::new();
    while !line.starts_with("Ctrl-C") {
        line.clear();
        use std::io::BufRead;
        assert!(dev.out.read_line(&mut line).expect("banner") > 0, "the banner ended early");
        banner.push_str(&line);
    }
    assert!(banner.contains("config     scheduler.toml (plugins: mine ("), "{banner}");
}

/// `gantry dev --config` refuses a file that sets what `gantry dev` owns (addresses, data
/// directory, credentials), naming each key, and leaves nothing behind.
#[test]
fn gantry_dev_refuses_a_config_that_sets_what_it_owns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(
        d.join("scheduler.toml"),
        "[server]\nlisten = \"0.0.0.0:8088\"\n[security]\ntokens_file = \"t\"\n",
    )
    .expect("config");
    let out = Command::new(gantry_bin().expect("gantry binary"))
        .current_dir(d)
        .args(["dev", "--config", "scheduler.toml"])
        .stdin(Stdio::null())
        .output()
        .expect("run gantry dev");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("server.listen: use --listen") && err.contains("security.tokens_file"), "{err}");
    assert!(!d.join("gantry-dev").exists(), "a refused configuration leaves no state behind");
}
