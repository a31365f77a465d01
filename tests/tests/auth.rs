//! Authentication both ways, on real daemons on loopback: REST bearer tokens (refused without or
//! with a wrong one; the token decides the submitting user; killing another user's application
//! needs an administrator), the agents' join token (a real agent with it registers, one without
//! it never does), and the rule that a daemon listening beyond loopback without tokens refuses to
//! start unless told `insecure`.

use gantry_scheduler::api::client::{Client, ClientError};
use gantry_tests::{TestAgent, gantry_cli, wait_until};
use std::time::Duration;

const GUARD: Duration = Duration::from_secs(60);
const ALICE: &str = "alice-token-0123456789";
const CAROL: &str = "carol-token-0123456789";
const OPS: &str = "ops-token-0123456789abcdef";
const JOIN: &str = "join-token-0123456789abcdef";

/// Writes the tokens and join token files and returns the `[security]` section naming them.
fn security(dir: &std::path::Path) -> String {
    std::fs::write(
        dir.join("tokens"),
        format!("# test users\n{ALICE} alice\n{CAROL} carol\n{OPS} ops admin\n"),
    )
    .expect("tokens");
    std::fs::write(dir.join("join"), format!("{JOIN}\n")).expect("join token");
    format!(
        "[security]\ntokens_file = {:?}\njoin_token_file = {:?}\n",
        dir.join("tokens").display().to_string(),
        dir.join("join").display().to_string()
    )
}

fn daemon_toml(dir: &std::path::Path, listen: &str, extra: &str) -> String {
    format!(
        "[server]\nagent_listen = \"{listen}:0\"\nlisten = \"{listen}:0\"\ncycle_interval_ms = 50\ndata_dir = {:?}\n{extra}",
        dir.join("data").display().to_string()
    )
}

fn status(r: Result<impl std::fmt::Debug, ClientError>) -> u16 {
    match r {
        Err(ClientError::Api { status, .. }) => status,
        Err(e) => panic!("no answer: {e}"),
        Ok(v) => panic!("accepted: {v:?}"),
    }
}

#[test]
fn tokens_and_join_tokens_let_in_exactly_who_they_name() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = daemon_toml(dir.path(), "127.0.0.1", &security(dir.path()));
    let (bound, _stop) = gantry_tests::start_daemon(&rt, &toml);
    let api = bound.api_addr.to_string();
    let client =
        |token: Option<&str>| Client::new(&api).expect("client").with_token(token.map(str::to_owned));

    // REST: nothing without a valid token, /metrics included.
    assert_eq!(status(rt.block_on(client(None).nodes())), 401);
    assert_eq!(status(rt.block_on(client(Some("alice-token-012345678X")).nodes())), 401);
    assert_eq!(status(rt.block_on(client(None).get_value("/metrics"))), 401);
    assert!(rt.block_on(client(Some(OPS)).get_value("/ws/v1/cluster/info")).is_ok());

    // Agents: one without the join token never registers; one with it does.
    let _stranger = TestAgent::start(dir.path(), "stranger", "r1", &[], bound.agent_addr);
    let join_file = format!("join_token_file = {:?}", dir.path().join("join").display().to_string());
    let _member = TestAgent::start_with(dir.path(), "member", "r1", &[], bound.agent_addr, &join_file);
    let nodes = wait_until("the member to register", GUARD, || {
        rt.block_on(client(Some(ALICE)).nodes()).ok().filter(|n| !n.is_empty())
    });
    // The stranger had as long as the member (both retry every few hundred ms).
    std::thread::sleep(Duration::from_secs(2));
    let nodes: Vec<String> = rt
        .block_on(client(Some(ALICE)).nodes())
        .map(|n| n.into_iter().map(|n| n.id).collect())
        .unwrap_or_else(|_| nodes.into_iter().map(|n| n.id).collect());
    assert_eq!(nodes, ["member"], "only the agent with the join token joined");

    // The CLI: GANTRY_TOKEN decides the user; submitting as someone else is refused.
    let cli = |token: &str, args: &[&str]| {
        std::process::Command::new(gantry_tests::gantry_bin().expect("gantry"))
            .args(args)
            .env("GANTRY_SCHEDULER", format!("http://{api}"))
            .env("GANTRY_TOKEN", token)
            .env_remove("USER")
            .output()
            .expect("gantry")
    };
    let out = cli(ALICE, &["submit", "--json", "--cpu", "10m", "--mem", "16M", "--", "sleep", "600"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let app = serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["application-id"]
        .as_u64()
        .expect("id");
    let info = rt.block_on(client(Some(ALICE)).app(app)).expect("app");
    assert_eq!(info.user, "alice", "the token names the user");
    let out = cli(ALICE, &["submit", "--user", "bob", "--", "true"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("may not submit as"));
    let out = gantry_cli(&api, &["apps"]);
    assert!(!out.status.success(), "no token, no listing");

    // Logs: the owner's and an administrator's, not another user's.
    let container = wait_until("alice's container to be placed", GUARD, || {
        let v = rt.block_on(client(Some(ALICE)).get_value(&format!("/ws/v1/cluster/apps/{app}"))).ok()?;
        v["app"]["containers"][0]["id"].as_u64()
    });
    let logs = |token: &str| {
        rt.block_on(
            client(Some(token)).get_value(&format!("/ws/v1/cluster/containers/{container}/logs/stdout")),
        )
    };
    assert!(matches!(logs(CAROL), Err(ClientError::Api { status: 403, .. })), "{:?}", logs(CAROL));
    for allowed in [ALICE, OPS] {
        assert!(!matches!(logs(allowed), Err(ClientError::Api { status: 403 | 401, .. })));
    }

    // Killing: not another user's app, unless an administrator.
    assert_eq!(status(rt.block_on(client(Some(CAROL)).kill(app))), 403);
    assert!(rt.block_on(client(Some(OPS)).kill(app)).is_ok(), "an administrator may");
}

#[test]
fn a_daemon_beyond_loopback_without_tokens_refuses_to_start_unless_insecure() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let parse = |text: &str| {
        gantry_scheduler::config::SchedulerConfig::from_str_at(
            text,
            std::path::Path::new("<test>"),
            std::path::PathBuf::from("."),
        )
        .expect("config")
    };
    let open = parse(&daemon_toml(dir.path(), "0.0.0.0", ""));
    let err = rt.block_on(gantry_scheduler::server::serve(&open, async {}, |_| {})).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("0.0.0.0") && text.contains("tokens_file") && text.contains("join_token_file"),
        "{text}"
    );
    assert!(!dir.path().join("data").exists(), "refused before touching the store");

    // With tokens it starts; so it does with `insecure` (told to).
    for extra in [security(dir.path()), "[security]\ninsecure = true\n".to_owned()] {
        let config = parse(&daemon_toml(dir.path(), "0.0.0.0", &extra));
        let served = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(3),
                gantry_scheduler::server::serve(&config, async {}, |_| {}),
            )
            .await
        });
        assert!(matches!(served, Ok(Ok(()))), "{extra}: {served:?}");
    }
    // A tokens file that cannot be read is an error at start, not an open API.
    let missing =
        parse(&daemon_toml(dir.path(), "127.0.0.1", "[security]\ntokens_file = \"/nonexistent/tokens\"\n"));
    let err = rt.block_on(gantry_scheduler::server::serve(&missing, async {}, |_| {})).expect_err("refused");
    assert!(err.to_string().contains("/nonexistent/tokens"), "{err}");
}
