//! The plugin guide (`sdk/README.md`) cannot go stale: every code block it marks
//! `<!-- guide: PATH -->` is the file at PATH, which the test suite compiles and runs (the Rust
//! plugin `plugins/examples/spread` with its own tests, the C plugin `plugins/examples/c/sjf.c`,
//! the configurations and the trace), and every output it marks `<!-- guide-output: NAME -->` is
//! what the tools print today. `GANTRY_BLESS=1` rewrites the marked blocks from the files and the
//! tools.

use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::abi::*;
use gantry_tests::{c_plugin, gantry_bin, rust_plugin, scheduler_bin, workspace_root};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One marked block of the guide: what it is, and the line range of its body.
struct Block {
    marker: Marker,
    /// Lines of the README: the body is `body.0..body.1` (between the fences).
    body: (usize, usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Marker {
    /// A file of the repository, relative to its root.
    Source(String),
    /// The output of a tool run (see [`output`]).
    Output(String),
}

fn readme_path() -> PathBuf {
    workspace_root().join("sdk/README.md")
}

/// The marked blocks: a marker line, then a fenced block right after it.
fn blocks(lines: &[&str]) -> Vec<Block> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let inner = line.trim().strip_prefix("<!--").and_then(|l| l.strip_suffix("-->")).map(str::trim);
        let marker = match inner {
            Some(m) if m.starts_with("guide:") => Marker::Source(m["guide:".len()..].trim().to_owned()),
            Some(m) if m.starts_with("guide-output:") => {
                Marker::Output(m["guide-output:".len()..].trim().to_owned())
            }
            _ => continue,
        };
        let open = lines.get(i + 1).copied().unwrap_or_default();
        assert!(open.starts_with("```"), "README line {}: a marker must be followed by a fence", i + 2);
        let end = (i + 2..lines.len())
            .find(|&k| lines[k] == "```")
            .unwrap_or_else(|| panic!("README line {}: unclosed fence", i + 2));
        out.push(Block { marker, body: (i + 2, end) });
    }
    out
}

/// Copies `from` to `dir/to` (creating directories).
fn place(from: &Path, dir: &Path, to: &str) {
    let dest = dir.join(to);
    std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
    std::fs::copy(from, &dest)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), dest.display()));
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// What the guide shows a tool printing, produced now in a scratch directory laid out as the
/// guide says.
fn output(name: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let inspect = |lib: &str| {
        run(Command::new(gantry_bin().expect("gantry")).current_dir(d).args(["plugin", "inspect", lib]))
    };
    match name {
        "inspect minimal" => {
            place(&rust_plugin("gantry_minimal").expect("minimal"), d, "target/release/libgantry_minimal.so");
            inspect("target/release/libgantry_minimal.so")
        }
        "inspect spread" => {
            place(&rust_plugin("gantry_spread").expect("spread"), d, "target/release/libgantry_spread.so");
            inspect("target/release/libgantry_spread.so")
        }
        "inspect c-first-fit" => {
            place(
                &c_plugin("plugins/examples/c/first_fit.c").expect("cc"),
                d,
                "target/libgantry_c_first_fit.so",
            );
            inspect("target/libgantry_c_first_fit.so")
        }
        "check scheduler.toml" => {
            place(&rust_plugin("gantry_spread").expect("spread"), d, "target/release/libgantry_spread.so");
            place(&workspace_root().join("plugins/examples/spread/scheduler.toml"), d, "scheduler.toml");
            run(Command::new(scheduler_bin().expect("scheduler")).current_dir(d).args([
                "--config",
                "scheduler.toml",
                "--check",
            ]))
        }
        other => panic!("the guide marks an output `{other}` this test does not know"),
    }
}

#[test]
fn the_guide_shows_the_files_and_outputs_as_they_are() {
    let text = std::fs::read_to_string(readme_path()).expect("README");
    let lines: Vec<&str> = text.lines().collect();
    let blocks = blocks(&lines);
    assert!(blocks.len() >= 10, "the guide's blocks are marked ({} found)", blocks.len());
    let bless = std::env::var_os("GANTRY_BLESS").is_some();
    let mut rewritten: Vec<String> = Vec::new();
    let mut next = 0;
    let mut stale = Vec::new();
    for b in &blocks {
        let want = match &b.marker {
            Marker::Source(path) => std::fs::read_to_string(workspace_root().join(path))
                .unwrap_or_else(|e| panic!("{path} (marked in the guide): {e}")),
            Marker::Output(name) => output(name),
        };
        let have: String = lines[b.body.0..b.body.1].iter().map(|l| format!("{l}\n")).collect();
        if have != want {
            stale.push(format!("{:?} (README lines {}..{})", b.marker, b.body.0 + 1, b.body.1));
        }
        rewritten.extend(lines[next..b.body.0].iter().map(|l| (*l).to_owned()));
        rewritten.extend(want.lines().map(str::to_owned));
        next = b.body.1;
    }
    rewritten.extend(lines[next..].iter().map(|l| (*l).to_owned()));
    if bless {
        std::fs::write(readme_path(), rewritten.join("\n") + "\n").expect("bless README");
    } else {
        assert!(stale.is_empty(), "stale guide blocks (GANTRY_BLESS=1 rewrites them):\n{}", stale.join("\n"));
    }
}

/// The guide's configuration with both plugins loads: the C `order` plugin next to the Rust
/// `place` plugin.
#[test]
fn the_guide_configuration_with_both_plugins_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    place(&rust_plugin("gantry_spread").expect("spread"), d, "libgantry_spread.so");
    place(&c_plugin("plugins/examples/c/sjf.c").expect("cc"), d, "libgantry_sjf.so");
    place(&workspace_root().join("plugins/examples/spread/with-sjf.toml"), d, "scheduler.toml");
    let out = run(Command::new(scheduler_bin().expect("scheduler")).current_dir(d).args([
        "--config",
        "scheduler.toml",
        "--check",
    ]));
    assert!(out.contains("  order     sjf\n  place     spread\n"), "{out}");
}

/// Owned arrays lent out as a view with `pending` requests of the given expected run times.
struct Pending {
    apps: Vec<GantryApp>,
    requests: Vec<GantryRequest>,
    pending: Vec<u32>,
    nodes: Vec<GantryNode>,
}

impl Pending {
    fn new(expected_ms: &[u64]) -> Pending {
        let n = expected_ms.len() as u32;
        Pending {
            apps: (0..n)
                .map(|i| GantryApp {
                    id: u64::from(i) + 1,
                    state: GANTRY_APP_ACCEPTED,
                    requests: GantryRange { start: i, len: 1 },
                    ..Default::default()
                })
                .collect(),
            requests: expected_ms
                .iter()
                .enumerate()
                .map(|(i, &e)| GantryRequest {
                    id: i as u64 + 1,
                    app: i as u32,
                    count: 1,
                    resources: GantryResources::new(100, 1 << 20, 0),
                    expected_ms: e,
                    ..Default::default()
                })
                .collect(),
            pending: (0..n).collect(),
            nodes: vec![GantryNode {
                capacity: GantryResources::new(8000, 8 << 30, 0),
                state: GANTRY_NODE_RUNNING,
                ..Default::default()
            }],
        }
    }

    fn view(&self, hook: u32) -> gantry_sdk::View<'_> {
        gantry_sdk::View {
            hook,
            now_ms: 0,
            cycle: 1,
            seed: 1,
            cluster: GantryResources::default(),
            strings: &[],
            labels: &[],
            nodes: &self.nodes,
            gpus: &[],
            queues: &[],
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

#[test]
fn the_guides_c_plugin_orders_shortest_first() {
    use gantry_engine::Policy;
    let mut sjf =
        DynamicPlugin::load(&c_plugin("plugins/examples/c/sjf.c").expect("cc"), "{}").expect("load");
    assert_eq!(sjf.info().hook_names(), ["order"]);
    let p = Pending::new(&[300, 0, 100, 300]);
    let mut out = gantry_sdk::Decisions::new();
    sjf.call(&p.view(GANTRY_HOOK_ORDER), &mut out).expect("order");
    let order: Vec<u32> = out.as_slice().iter().map(|d| d.subject).collect();
    assert_eq!(order, [2, 0, 3, 1], "shortest first, ties in pending order, unknown last");
}

/// Calls a C example the way a 1.2 host would — entry (1, 2), a 240-byte view, a 64-byte
/// output — and returns the hook's return code and decisions. The guide teaches checking sizes
/// against the fields read, not `sizeof`, so an older host is served.
fn call_as_1_2_host(lib: &Path, hook: u32) -> (i32, Vec<GantryDecision>) {
    let p = Pending::new(&[300, 100]);
    let view = p.view(hook).to_raw();
    // SAFETY: the test plays the host of the C ABI: the library is a gantry plugin built by the
    // test, its entry and hooks are called with records valid for the calls, as ABI.md says.
    unsafe {
        let lib = libloading::Library::new(lib).expect("dlopen");
        let entry = lib
            .get::<unsafe extern "C" fn(u16, u16) -> *const GantryPluginV1>(b"gantry_plugin_v1\0")
            .expect("entry");
        let vt = entry(1, 2).as_ref().expect("the plugin serves a 1.2 host");
        let mut message = [0u8; 256];
        let mut decisions = vec![GantryDecision::default(); 16];
        // A 1.2 output ends before `allocations`: the fields after it are the host's own.
        let mut out = GantryOutput {
            struct_size: GANTRY_OUTPUT_SIZE_V1_0,
            attempt: 0,
            decisions: decisions.as_mut_ptr(),
            capacity: decisions.len() as u64,
            len: 0,
            needed: 0,
            message: message.as_mut_ptr(),
            message_capacity: message.len() as u64,
            message_len: 0,
            allocations: std::ptr::null_mut(),
            allocations_capacity: 0,
            allocations_len: 0,
            allocations_needed: 0,
        };
        let mut instance = std::ptr::null_mut();
        if let Some(create) = vt.create {
            assert_eq!(create(c"{}".as_ptr(), 2, &mut instance, &mut out), GANTRY_OK);
        }
        let mut old = view;
        old.struct_size = GANTRY_VIEW_SIZE_V1_1;
        let f = if hook == GANTRY_HOOK_ORDER { vt.order } else { vt.place };
        let rc = f.expect("hook")(instance, &old, &mut out);
        let got = decisions[..out.len.min(decisions.len() as u64) as usize].to_vec();
        if let Some(destroy) = vt.destroy {
            destroy(instance);
        }
        std::mem::forget(lib); // never unloaded, as the host does
        (rc, got)
    }
}

#[test]
fn the_c_examples_serve_an_older_host() {
    let sjf = c_plugin("plugins/examples/c/sjf.c").expect("cc");
    let (rc, decided) = call_as_1_2_host(&sjf, GANTRY_HOOK_ORDER);
    assert_eq!(rc, GANTRY_OK);
    assert_eq!(decided.iter().map(|d| d.subject).collect::<Vec<_>>(), [1, 0]);
    let first_fit = c_plugin("plugins/examples/c/first_fit.c").expect("cc");
    let (rc, decided) = call_as_1_2_host(&first_fit, GANTRY_HOOK_PLACE);
    assert_eq!(rc, GANTRY_OK);
    assert_eq!(decided.len(), 2, "both requests placed: {decided:?}");
}

/// The guide's simulator run: its configuration and trace, the spread plugin in the real engine.
#[test]
fn the_guides_simulation_runs_the_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    place(&rust_plugin("gantry_spread").expect("spread"), d, "target/release/libgantry_spread.so");
    let spread = workspace_root().join("plugins/examples/spread");
    place(&spread.join("scheduler.toml"), d, "scheduler.toml");
    place(&spread.join("jobs.jsonl"), d, "jobs.jsonl");
    let out = run(Command::new(gantry_bin().expect("gantry")).current_dir(d).args([
        "sim",
        "--cluster",
        workspace_root().join("sim/examples/clusters/hetero-seed002.toml").to_str().expect("path"),
        "--trace",
        "jobs.jsonl",
        "--format",
        "gantry",
        "--config",
        "scheduler.toml",
        "--out",
        "sim-out",
    ]));
    let summary: serde_json::Value = serde_json::from_str(&out).expect("summary");
    assert_eq!((summary["jobs"].as_u64(), summary["completed"].as_u64()), (Some(2), Some(2)), "{summary}");
    assert_eq!(summary["plugins"]["spread"]["failed_calls"], 0, "{summary}");
}
