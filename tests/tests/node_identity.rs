//! One agent per node name (issue 19, items 4 and 5), on the real scheduler and agent binaries:
//! a second agent that registers with a live node's name — with the shared join token, or with
//! a copy of the node's own certificate under mutual TLS — is refused and says why, while the
//! first keeps its stream and its work (nothing relaunched); the first agent, `kill -9`ed and
//! restarted on its own work root, is recognised at once and re-adopts its container; and a
//! node's certificate cannot register the same name in other letter case. Timeouts are
//! failure guards.

use gantry_scheduler::api::client::Client;
use gantry_tests::{agent_bin, free_port, gantry_cli, kill_leftover_containers, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);
const JOIN_TOKEN: &str = "join-token-0123456789abcdef";

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A real agent whose stderr goes to a log file the test reads; killed (and its containers and
/// cgroups removed) when dropped.
struct Agent {
    child: std::process::Child,
    config: PathBuf,
    log: PathBuf,
    work: PathBuf,
    cgroup: String,
    url: String,
}

impl Agent {
    /// Starts an agent for node `name` with the work root `dir/work` and `extra` configuration
    /// lines (join token or TLS files).
    fn start(dir: &Path, name: &str, url: &str, extra: &str) -> Agent {
        std::fs::create_dir_all(dir).expect("agent dir");
        let work = dir.join("work");
        // Its own cgroup parent: two agents of one node name in one test (or in two tests
        // running at once) must not share one.
        let cgroup =
            gantry_tests::test_cgroup_name(dir, dir.file_name().and_then(|n| n.to_str()).unwrap_or("agent"));
        let config = dir.join("agent.toml");
        std::fs::write(
            &config,
            format!(
                "{extra}\nnode_name = \"{name}\"\nrack = \"r1\"\nwork_root = {:?}\nmetrics_listen = \"127.0.0.1:{}\"\n\
                 cgroup_name = \"{cgroup}\"\nsample_interval_ms = 200\nkill_grace_ms = 1000\n\
                 [reserve]\ncpu_millis = 0\nmemory_bytes = 0\n",
                path(&work),
                free_port()
            ),
        )
        .expect("agent config");
        let log = dir.join("agent.log");
        Agent { child: spawn(&config, &log, url), config, log, work, cgroup, url: url.into() }
    }

    /// What it has logged so far (every run of it).
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn restart(&mut self) {
        self.child = spawn(&self.config, &self.log, &self.url);
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

fn spawn(config: &Path, log: &Path, url: &str) -> std::process::Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("agent log");
    Command::new(agent_bin().expect("agent binary"))
        .args(["run", "--config"])
        .arg(config)
        .args(["--scheduler", url])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start agent")
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
        kill_leftover_containers(&self.work, &self.cgroup);
    }
}

fn metric(api: &str, series: &str) -> f64 {
    let text = gantry_tests::scrape(api.parse().expect("address"));
    gantry_tests::sample(&text, series).unwrap_or_else(|| panic!("no {series} in {text:.3000}"))
}

/// The ids of `app`'s containers and whether each is RUNNING.
fn containers(rt: &tokio::runtime::Runtime, client: &Client, app: u64) -> Vec<(u64, bool)> {
    let v = rt.block_on(client.get_value(&format!("/ws/v1/cluster/apps/{app}"))).expect("app");
    v["app"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter().filter_map(|c| Some((c["id"].as_u64()?, c["state"].as_str()? == "RUNNING"))).collect()
        })
        .unwrap_or_default()
}

fn registrations(log: &str) -> usize {
    log.matches("registered with the scheduler").count()
}

#[test]
fn a_second_agent_with_a_live_nodes_name_is_refused_and_a_restarted_one_is_recognised() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let join = d.join("join-token");
    std::fs::write(&join, JOIN_TOKEN).expect("join token");
    // A node timeout far beyond the guard: an agent that was not recognised would wait it out.
    let files = gantry_tests::scheduler_config(
        d,
        "node_timeout_ms = 120000\ncycle_interval_ms = 50",
        &format!("[security]\njoin_token_file = {:?}\n", path(&join)),
    );
    let _scheduler = gantry_tests::start_scheduler(&files.config);
    let url = format!("http://{}", files.agents);
    let token = format!("join_token_file = {:?}\n", path(&join));
    let mut a = Agent::start(&d.join("a"), "node-a", &url, &token);
    let client = Client::new(&files.api).expect("client");
    wait_until("node-a to register", GUARD, || {
        rt.block_on(client.nodes()).ok().filter(|n| n.iter().any(|n| n.id == "node-a"))
    });

    // Work on node-a: one long container.
    let marker = "3119"; // an argument no other process has
    let out =
        gantry_cli(&files.api, &["submit", "--json", "--cpu", "10m", "--mem", "16M", "--", "sleep", marker]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let app = serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
        .as_u64()
        .expect("id");
    let first = wait_until("the container to run on node-a", GUARD, || {
        match containers(&rt, &client, app).as_slice() {
            [(id, true)] => Some(*id),
            _ => None,
        }
    });
    assert_eq!(registrations(&a.log()), 1, "{}", a.log());

    // A second agent claims node-a with the shared join token, from another work root.
    let mut b = Agent::start(&d.join("b"), "node-a", &url, &token);
    let said = wait_until("the second agent to be refused", GUARD, || {
        let log = b.log();
        log.contains("the scheduler refused this agent").then_some(log)
    });
    assert!(said.contains("node `node-a` is held by another live agent"), "{said}");
    // It keeps trying (slowly) for a while; node-a's agent keeps its stream and its work.
    std::thread::sleep(Duration::from_secs(6));
    assert!(b.running(), "a refused agent waits and retries; it does not exit");
    assert_eq!(registrations(&b.log()), 0, "{}", b.log());
    assert_eq!(registrations(&a.log()), 1, "node-a's agent never lost its stream: {}", a.log());
    assert_eq!(containers(&rt, &client, app), [(first, true)], "nothing relaunched");
    let refused =
        metric(&files.api, "gantry_scheduler_registrations_refused_total{reason=\"another_instance\"}");
    assert!(refused >= 1.0, "{refused}");
    println!("refusals of the second agent in about 6 s: {refused}");
    assert_eq!(metric(&files.api, "gantry_agent_streams"), 1.0);
    drop(b);

    // node-a's agent dies and comes back on its own work root: the same instance, recognised at
    // once (not after the 120 s node timeout), its container re-adopted, not relaunched.
    a.kill9();
    a.restart();
    wait_until("the restarted agent to register", GUARD, || (registrations(&a.log()) == 2).then_some(()));
    assert!(!a.log().contains("the scheduler refused this agent"), "{}", a.log());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(containers(&rt, &client, app), [(first, true)], "re-adopted, not relaunched");
    let instance = std::fs::read_to_string(a.work.join("agent-instance")).expect("instance file");
    assert_eq!(instance.trim().len(), 32, "{instance:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(a.work.join("agent-instance")).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn under_mutual_tls_a_copied_certificate_cannot_take_a_live_name_nor_register_it_in_other_case() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (ca, certs) = (d.join("ca"), d.join("certs"));
    let cert = |args: &[&str]| {
        let out = Command::new(gantry_tests::gantry_bin().expect("gantry"))
            .arg("cert")
            .args(args)
            .output()
            .expect("gantry cert");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    cert(&["ca", "--dir", &path(&ca), "--name", "test"]);
    cert(&["scheduler", "127.0.0.1", "--ca-dir", &path(&ca), "--out", &path(&certs)]);
    cert(&["node", "node-a", "--ca-dir", &path(&ca), "--out", &path(&certs)]);
    let files = gantry_tests::scheduler_config(
        d,
        "node_timeout_ms = 120000\ncycle_interval_ms = 50",
        &format!(
            "[security]\ntls_cert_file = {:?}\ntls_key_file = {:?}\ntls_client_ca_file = {:?}\n",
            path(&certs.join("127.0.0.1.pem")),
            path(&certs.join("127.0.0.1.key")),
            path(&ca.join("ca.pem"))
        ),
    );
    let _scheduler = gantry_tests::start_scheduler(&files.config);
    let url = format!("https://{}", files.agents);
    // Every agent presents node-a's certificate.
    let tls = format!(
        "tls_ca_file = {:?}\ntls_cert_file = {:?}\ntls_key_file = {:?}\n",
        path(&ca.join("ca.pem")),
        path(&certs.join("node-a.pem")),
        path(&certs.join("node-a.key"))
    );
    let a = Agent::start(&d.join("a"), "node-a", &url, &tls);
    let client =
        Client::with_ca(&format!("https://{}", files.api), Some(&ca.join("ca.pem"))).expect("client");
    wait_until("node-a to register", GUARD, || {
        rt.block_on(client.nodes()).ok().filter(|n| n.iter().any(|n| n.id == "node-a"))
    });
    let copy = Agent::start(&d.join("copy"), "node-a", &url, &tls);
    let upper = Agent::start(&d.join("upper"), "NODE-A", &url, &tls);
    let said = wait_until("the copy to be refused", GUARD, || {
        let log = copy.log();
        log.contains("the scheduler refused this agent").then_some(log)
    });
    assert!(said.contains("node `node-a` is held by another live agent"), "{said}");
    wait_until("NODE-A to be refused", GUARD, || upper.log().contains("not node `NODE-A`").then_some(()));
    // Both keep trying for a while; only node-a is a node, registered once.
    std::thread::sleep(Duration::from_secs(4));
    let mut ids: Vec<String> =
        rt.block_on(client.nodes()).expect("nodes").into_iter().map(|n| n.id).collect();
    ids.sort();
    assert_eq!(ids, ["node-a"]);
    assert_eq!(registrations(&a.log()), 1, "{}", a.log());
    assert_eq!(registrations(&copy.log()) + registrations(&upper.log()), 0);
}
