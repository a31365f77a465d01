//! Transport security and authorisation both ways, on real daemons, agents and the real CLI:
//! mutual TLS made with `gantry cert` (an agent registers only with a certificate of the
//! cluster CA that names its node; the REST API answers only over HTTPS to clients trusting the
//! CA), YARN-style queue ACLs (submit and administer, inherited, groups from the tokens file),
//! cluster-admin-only operations, and containers running as the submitting user's mapped
//! account.

use gantry_scheduler::api::client::{Client, ClientError};
use gantry_tests::{TestAgent, gantry_bin, wait_until};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";
const MIA: &str = "mia-token-0123456789ab";
const OPS: &str = "ops-token-0123456789abcdef";

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Runs the real `gantry` CLI with `env` set and returns what it did.
fn gantry(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = std::process::Command::new(gantry_bin().expect("gantry"));
    cmd.args(args).env_remove("GANTRY_TOKEN").env_remove("GANTRY_CA_CERT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("gantry runs")
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tokens(dir: &Path) -> String {
    std::fs::write(
        dir.join("tokens"),
        format!("{ALICE} alice\n{BOB} bob\n{MIA} mia groups=ml,etl\n{OPS} ops admin\n"),
    )
    .expect("tokens");
    format!("tokens_file = {:?}\n", path(&dir.join("tokens")))
}

fn daemon_toml(dir: &Path, security: &str, queues: &str) -> String {
    format!(
        "[server]\nagent_listen = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:0\"\ncycle_interval_ms = 50\n\
         data_dir = {:?}\n{queues}\n[security]\n{security}",
        path(&dir.join("data"))
    )
}

fn node_ids(nodes: Vec<gantry_scheduler::api::types::NodeInfo>) -> Vec<String> {
    let mut ids: Vec<String> = nodes.into_iter().map(|n| n.id).collect();
    ids.sort();
    ids
}

#[test]
fn mutual_tls_admits_only_agents_whose_certificate_names_their_node() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (ca, rogue, certs) = (d.join("ca"), d.join("rogue-ca"), d.join("certs"));
    // The cluster's certificates, made by the real CLI as an operator would.
    ok(&gantry(&["cert", "ca", "--dir", &path(&ca), "--name", "test"], &[]));
    ok(&gantry(
        &["cert", "scheduler", "127.0.0.1", "localhost", "--ca-dir", &path(&ca), "--out", &path(&certs)],
        &[],
    ));
    for node in ["tls-good", "tls-thief"] {
        ok(&gantry(&["cert", "node", node, "--ca-dir", &path(&ca), "--out", &path(&certs)], &[]));
    }
    // A certificate from another CA, for the right node name.
    ok(&gantry(&["cert", "ca", "--dir", &path(&rogue)], &[]));
    ok(&gantry(
        &["cert", "node", "tls-rogue", "--ca-dir", &path(&rogue), "--out", &path(&d.join("rogue"))],
        &[],
    ));
    let again = gantry(&["cert", "ca", "--dir", &path(&ca)], &[]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("already exists"));

    let security = format!(
        "{}tls_cert_file = {:?}\ntls_key_file = {:?}\ntls_client_ca_file = {:?}\n",
        tokens(d),
        path(&certs.join("127.0.0.1.pem")),
        path(&certs.join("127.0.0.1.key")),
        path(&ca.join("ca.pem"))
    );
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &daemon_toml(d, &security, ""));
    let ca_pem = ca.join("ca.pem");
    let agent_tls = |ca: &Path, cert: Option<(&Path, &str)>| {
        let mut lines = format!("tls_ca_file = {:?}\n", path(&ca.join("ca.pem")));
        if let Some((dir, name)) = cert {
            lines += &format!(
                "tls_cert_file = {:?}\ntls_key_file = {:?}\n",
                path(&dir.join(format!("{name}.pem"))),
                path(&dir.join(format!("{name}.key")))
            );
        }
        lines
    };
    let addr = bound.agent_addr;
    let _good = TestAgent::start_https(d, "tls-good", addr, &agent_tls(&ca, Some((&certs, "tls-good"))));
    // A real node's certificate used to pose as another node.
    let _impostor =
        TestAgent::start_https(d, "tls-victim", addr, &agent_tls(&ca, Some((&certs, "tls-thief"))));
    // A certificate the cluster CA did not sign.
    let _rogue =
        TestAgent::start_https(d, "tls-rogue", addr, &agent_tls(&ca, Some((&d.join("rogue"), "tls-rogue"))));
    // No client certificate at all, and plain http to the TLS port.
    let _anonymous = TestAgent::start_https(d, "tls-anon", addr, &agent_tls(&ca, None));
    let _plain = TestAgent::start(d, "tls-plain", "r1", &[], addr);

    let https = format!("https://{}", bound.api_addr);
    let client = Client::with_ca(&https, Some(&ca_pem)).expect("client").with_token(Some(OPS.into()));
    wait_until("the agent with its own certificate to register", GUARD, || {
        rt.block_on(client.nodes()).ok().filter(|n| !n.is_empty())
    });
    // The others retried for as long (every few hundred ms).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node_ids(rt.block_on(client.nodes()).expect("nodes")), ["tls-good"]);

    // REST: HTTPS with the cluster CA only.
    let plain =
        Client::new(&format!("http://{}", bound.api_addr)).expect("client").with_token(Some(OPS.into()));
    assert!(matches!(rt.block_on(plain.nodes()), Err(ClientError::Transport { .. })), "no plain HTTP");
    let wrong_ca = Client::with_ca(&https, Some(&rogue.join("ca.pem"))).expect("client");
    assert!(
        matches!(rt.block_on(wrong_ca.nodes()), Err(ClientError::Transport { .. })),
        "server not trusted"
    );
    assert!(Client::new(&https).is_err(), "https without a CA is refused up front");

    // The CLI over HTTPS: submit, and the launch reaches the agent over mutual TLS.
    let env = [
        ("GANTRY_SCHEDULER", https.clone()),
        ("GANTRY_TOKEN", ALICE.to_owned()),
        ("GANTRY_CA_CERT", path(&ca_pem)),
    ];
    let out = ok(&gantry(&["submit", "--json", "--cpu", "10m", "--mem", "16M", "--", "true"], &env));
    let app = serde_json::from_str::<serde_json::Value>(&out).expect("json")["application-id"]
        .as_u64()
        .expect("id");
    wait_until("the app to finish on the TLS agent", GUARD, || {
        let a = rt.block_on(client.app(app)).ok()?;
        (a.state.to_string() == "FINISHED").then_some(())
    });
    let no_ca = gantry(&["nodes"], &env[..2]);
    assert!(!no_ca.status.success() && String::from_utf8_lossy(&no_ca.stderr).contains("--ca-cert"));
}

#[test]
fn queue_acls_and_accounts_decide_who_may_do_what_and_as_whom() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let queues = "[[queues]]\npath = \"root.prod\"\nguaranteed = 0.5\nacl_submit_applications = \"alice\"\n\
                  acl_administer_queue = \"bob\"\n\
                  [[queues]]\npath = \"root.dev\"\nguaranteed = 0.5\nacl_submit_applications = \" ml\"\n";
    // Root admits no one (YARN's root defaults to everyone, which would make the leaves' ACLs moot).
    let security =
        format!("{}acl_submit_applications = \" \"\n[security.accounts]\nalice = \"daemon\"\n", tokens(d));
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &daemon_toml(d, &security, queues));
    let _agent = TestAgent::start(d, "acl-node", "r1", &[], bound.agent_addr);
    let api = format!("http://{}", bound.api_addr);
    let as_user = |token: &str| Client::new(&api).expect("client").with_token(Some(token.to_owned()));
    wait_until("the agent to register", GUARD, || {
        rt.block_on(as_user(OPS).nodes()).ok().filter(|n| !n.is_empty())
    });
    let submit = |token: &str, queue: &str, cmd: &[&str]| -> Output {
        let env = [("GANTRY_SCHEDULER", api.clone()), ("GANTRY_TOKEN", token.to_owned())];
        let mut args = vec!["submit", "--json", "--cpu", "10m", "--mem", "16M", "--queue", queue, "--"];
        args.extend_from_slice(cmd);
        gantry(&args, &env)
    };
    let id = |out: &Output| -> u64 {
        serde_json::from_str::<serde_json::Value>(&ok(out)).expect("json")["application-id"]
            .as_u64()
            .expect("id")
    };
    let refused = |out: &Output, what: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("may not submit to"), "{what}: {err}");
    };

    // Submit rights: the leaf's ACL, a group, administering the queue; never root's "no one".
    let alice_prod = id(&submit(ALICE, "prod", &["sh", "-c", "id -u; sleep 600"]));
    refused(&submit(ALICE, "dev", &["true"]), "alice is not in dev's ACL");
    let mia_dev = id(&submit(MIA, "dev", &["sh", "-c", "id -u; sleep 600"]));
    refused(&submit(MIA, "prod", &["true"]), "the ml group may not use prod");
    let bob_prod = id(&submit(BOB, "prod", &["sh", "-c", "id -u; sleep 600"]));
    refused(&submit(BOB, "dev", &["true"]), "administering prod gives nothing in dev");
    refused(&submit(BOB, "root.default", &["true"]), "root admits no one");
    id(&submit(OPS, "dev", &["true"]));

    // Containers run as the mapped account: alice's as `daemon`; the unmapped each as a uid of
    // their own from the agent's dynamic range, never one they share.
    let mut uids = Vec::new();
    for (token, app) in [(ALICE, alice_prod), (MIA, mia_dev), (BOB, bob_prod)] {
        let c = as_user(token);
        let container = wait_until("the container to start", GUARD, || {
            let v = rt.block_on(c.get_value(&format!("/ws/v1/cluster/apps/{app}"))).ok()?;
            v["app"]["containers"][0]["id"].as_u64()
        });
        let who = wait_until("the container to say who it is", GUARD, || {
            let body = rt.block_on(c.logs(container, gantry_scheduler::api::LogFile::Stdout, None)).ok()?;
            let text = String::from_utf8_lossy(&body).trim().to_owned();
            (!text.is_empty()).then_some(text)
        });
        uids.push(who.parse::<u32>().unwrap_or_else(|_| panic!("app {app}: {who:?} is not a uid")));
    }
    let daemon = std::process::Command::new("id").args(["-u", "daemon"]).output().expect("id -u daemon");
    assert_eq!(uids[0].to_string(), String::from_utf8_lossy(&daemon.stdout).trim(), "alice's account");
    let dynamic = gantry_agent::isolation::UidRange::SYSTEMD;
    for uid in &uids[1..] {
        assert!((dynamic.first..=dynamic.last).contains(uid), "{uids:?}: an unmapped user's uid is dynamic");
    }
    assert_ne!(uids[1], uids[2], "mia and bob never share a uid");

    // Administering: bob administers prod, so he may kill alice's app there, not mia's in dev.
    fn status<T>(r: Result<T, ClientError>) -> u16 {
        match r {
            Err(ClientError::Api { status, .. }) => status,
            Err(e) => panic!("no answer: {e}"),
            Ok(_) => 200,
        }
    }
    assert_eq!(status(rt.block_on(as_user(MIA).kill(alice_prod))), 403);
    assert_eq!(status(rt.block_on(as_user(BOB).kill(mia_dev))), 403);
    assert_eq!(status(rt.block_on(as_user(BOB).kill(alice_prod))), 200, "bob administers prod");
    assert_eq!(status(rt.block_on(as_user(MIA).kill(mia_dev))), 200, "the owner may");

    // Cluster-wide operations need a cluster administrator.
    assert_eq!(status(rt.block_on(as_user(BOB).set_node_drain("acl-node", true))), 403);
    assert_eq!(status(rt.block_on(as_user(OPS).set_node_drain("acl-node", true))), 200);
    assert_eq!(status(rt.block_on(as_user(OPS).set_node_drain("acl-node", false))), 200);
    rt.block_on(as_user(OPS).kill(bob_prod)).expect("an administrator may kill anything");
}

#[test]
fn security_settings_that_cannot_work_are_refused_at_load() {
    let parse = |text: &str| {
        gantry_scheduler::config::SchedulerConfig::from_str_at(text, Path::new("<test>"), ".".into())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    for (text, why) in [
        ("[security]\ntokens_file = \"t\"\n[security.accounts]\nops = \"root\"\n", "allow_root_containers"),
        ("[security.accounts]\nalice = \"daemon\"\n", "tokens_file"),
        ("[security]\nacl_submit_applications = \"alice\"\n", "tokens_file"),
        ("[security]\ntls_cert_file = \"c.pem\"\n", "tls_key_file"),
        ("[security]\ntls_client_ca_file = \"ca.pem\"\n", "tls_cert_file"),
        ("[security]\ntokens_file = \"t\"\nacl_administer_queue = \"a,* b\"\n", "not a user or group"),
    ] {
        let err = parse(text).expect_err(text);
        assert!(err.contains(why), "{text:?}: {err}");
    }
    parse("[security]\ntokens_file = \"t\"\nallow_root_containers = true\n[security.accounts]\nops = \"root\"\n")
        .expect("root when allowed");
}

#[test]
fn sighup_puts_new_tokens_and_acls_in_force_and_a_bad_file_changes_nothing() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let tokens_file = d.join("tokens");
    std::fs::write(&tokens_file, format!("{ALICE} alice\n{OPS} ops admin\n")).expect("tokens");
    let security = |acl: &str| {
        format!(
            "[[queues]]\npath = \"root.prod\"\nguaranteed = 1.0\nacl_submit_applications = \"{acl}\"\n\
             [security]\ntokens_file = {:?}\nacl_submit_applications = \" \"\n",
            path(&tokens_file)
        )
    };
    let files = gantry_tests::scheduler_config(d, "", &security("alice"));
    let mut scheduler = gantry_tests::start_scheduler(&files.config);
    let client = |token: &str| Client::new(&files.api).expect("client").with_token(Some(token.to_owned()));
    let answer = |token: &str| match rt.block_on(client(token).nodes()) {
        Ok(_) => 200,
        Err(ClientError::Api { status, .. }) => status,
        Err(_) => 0, // not up yet
    };
    wait_until("the scheduler to answer alice", GUARD, || (answer(ALICE) == 200).then_some(()));
    assert_eq!(answer(BOB), 401);
    let may_submit = |token: &str| -> u16 {
        let env = [("GANTRY_SCHEDULER", files.api.clone()), ("GANTRY_TOKEN", token.to_owned())];
        let out = gantry(&["submit", "--queue", "prod", "--", "true"], &env);
        if out.status.success() {
            200
        } else if String::from_utf8_lossy(&out.stderr).contains("may not submit to") {
            403
        } else {
            panic!("{}", String::from_utf8_lossy(&out.stderr))
        }
    };
    assert_eq!(may_submit(ALICE), 200);

    let hup = |s: &gantry_tests::KilledOnDrop| {
        let sent = std::process::Command::new("kill").args(["-HUP", &s.0.id().to_string()]).status();
        assert!(sent.is_ok_and(|st| st.success()), "kill -HUP");
    };
    // Rotate: bob in, alice out of the tokens, and prod's ACL names bob now.
    std::fs::write(&tokens_file, format!("{BOB} bob\n{OPS} ops admin\n")).expect("tokens");
    std::fs::write(
        &files.config,
        std::fs::read_to_string(&files.config).expect("config").replace("\"alice\"", "\"bob\""),
    )
    .expect("config");
    hup(&scheduler);
    wait_until("bob's token to be accepted", GUARD, || (answer(BOB) == 200).then_some(()));
    assert_eq!(answer(ALICE), 401, "a removed token is refused at once");
    assert_eq!(may_submit(BOB), 200, "the new ACL is in force");

    // A tokens file that does not parse: the reload is refused, bob's token still works.
    std::fs::write(&tokens_file, "short bob\n").expect("tokens");
    hup(&scheduler);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(answer(BOB), 200, "a bad reload changes nothing");
    assert!(scheduler.0.try_wait().expect("wait").is_none(), "and the scheduler keeps running");
    scheduler.kill9();
}
