//! Integration tests of the engine through its public API: events in, commands out, state read
//! back through `Engine::state()`, `Engine::stats()` and `Engine::app_state()`.
//!
//! Every accepted event is followed by `check_invariants()`; every refused event is checked to
//! leave the engine's records exactly as they were.

use gantry_engine::state::{AppMeta, AppSummary};
use gantry_engine::{
    APP_KILL_GRACE_MS, AppId, AppSpec, Command, ContainerId, Engine, EngineConfig, EngineError, Event,
    GpuSpec, KillReason, NodeCondition, NodeId, NodeSpec, Policy, Profile, QueueSpec, RackAffinity,
    RejectReason, RequestSpec, Resources, StaticPolicy,
};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

mod common;
use common::{Rng, snapshot};

const GIB: u64 = 1 << 30;

// ----- specs ----------------------------------------------------------------------------------

fn res(cpu_millis: u64, mem_gib: u64, gpus: u32) -> Resources {
    Resources::new(cpu_millis, mem_gib * GIB, gpus)
}

fn node(name: &str, rack: &str, cores: u64, mem_gib: u64, gpus: u32) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        rack: rack.into(),
        labels: Vec::new(),
        capacity: res(cores * 1000, mem_gib, gpus),
        gpu_list: Vec::new(),
    }
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn req(cpu_millis: u64, mem_gib: u64, gpus: u32, count: u32) -> RequestSpec {
    RequestSpec { resources: res(cpu_millis, mem_gib, gpus), count, ..Default::default() }
}

fn gang(cpu_millis: u64, mem_gib: u64, count: u32) -> RequestSpec {
    RequestSpec { gang: true, ..req(cpu_millis, mem_gib, 0, count) }
}

fn app(name: &str, queue: &str, requests: Vec<RequestSpec>) -> AppSpec {
    AppSpec { name: name.into(), queue: queue.into(), user: "alice".into(), requests, ..Default::default() }
}

const DEFAULT_Q: &str = "root.default";

// ----- command helpers ------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct Launch {
    container: ContainerId,
    app: AppId,
    request: u32,
    node: NodeId,
    resources: Resources,
    gpus: Vec<u32>,
}

fn launches(cmds: &[Command]) -> Vec<Launch> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Launch { container, app, request, node, resources, gpus } => Some(Launch {
                container: *container,
                app: *app,
                request: *request,
                node: *node,
                resources: *resources,
                gpus: gpus.clone(),
            }),
            _ => None,
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kill {
    container: ContainerId,
    node: NodeId,
    grace_ms: u64,
    reason: KillReason,
}

fn kills(cmds: &[Command]) -> Vec<Kill> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Kill { container, node, grace_ms, reason } => {
                Some(Kill { container: *container, node: *node, grace_ms: *grace_ms, reason: *reason })
            }
            _ => None,
        })
        .collect()
}

fn changes(cmds: &[Command]) -> Vec<(AppId, u32, String)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::AppStateChanged { app, state, diagnostics } => Some((*app, *state, diagnostics.clone())),
            _ => None,
        })
        .collect()
}

fn changes_of(cmds: &[Command], id: AppId) -> Vec<u32> {
    changes(cmds).into_iter().filter(|(a, _, _)| *a == id).map(|(_, s, _)| s).collect()
}

// ----- snapshots of everything observable -----------------------------------------------------

// ----- the harness ----------------------------------------------------------------------------

/// An engine and its clock. `ok` applies an event that must be accepted, `refused` one that must
/// be refused without changing anything; both check the invariants afterwards.
struct H {
    e: Engine,
    t: u64,
}

impl H {
    fn builtin() -> H {
        H::config(EngineConfig::default())
    }

    fn config(config: EngineConfig) -> H {
        H { e: Engine::builtin(config).expect("engine"), t: 0 }
    }

    fn with(e: Engine) -> H {
        H { e, t: 0 }
    }

    fn ok(&mut self, ev: Event) -> Vec<Command> {
        let shown = format!("{ev:?}");
        let cmds = self.e.handle(self.t, ev).unwrap_or_else(|err| panic!("{shown} refused: {err}"));
        if let Err(msg) = self.e.state().check_invariants() {
            panic!("invariants broken after {shown}: {msg}");
        }
        cmds
    }

    fn refused(&mut self, ev: Event) -> EngineError {
        let before = snapshot(&self.e);
        let shown = format!("{ev:?}");
        let err = match self.e.handle(self.t, ev) {
            Ok(cmds) => panic!("{shown} was accepted (commands {cmds:?}) but must be refused"),
            Err(err) => err,
        };
        assert_eq!(before, snapshot(&self.e), "refused {shown} ({err}) changed the state");
        self.e.state().check_invariants().expect("invariants after a refused event");
        err
    }

    fn tick(&mut self) -> Vec<Command> {
        self.t += 1_000;
        self.ok(Event::Tick)
    }

    fn register(&mut self, spec: NodeSpec) -> Vec<Command> {
        self.ok(Event::NodeRegistered(spec))
    }

    fn submit(&mut self, spec: AppSpec) -> AppId {
        let cmds = self.ok(Event::AppSubmitted(spec));
        match cmds.as_slice() {
            [Command::AppAccepted { app }] => *app,
            other => panic!("a submission answers exactly AppAccepted, got {other:?}"),
        }
    }

    fn start(&mut self, c: ContainerId) -> Vec<Command> {
        self.ok(Event::ContainerStarted { container: c })
    }

    fn exit(&mut self, c: ContainerId, exit_code: i32) -> Vec<Command> {
        self.ok(Event::container_exited(c, exit_code))
    }

    fn kill_app(&mut self, app: AppId) -> Vec<Command> {
        self.ok(Event::AppKillRequested { app })
    }

    fn set_node(&mut self, name: &str, state: NodeCondition) -> Vec<Command> {
        self.ok(Event::NodeStateChanged { node: name.into(), state })
    }

    fn lose(&mut self, name: &str) -> Vec<Command> {
        self.ok(Event::NodeLost { node: name.into() })
    }

    fn state_of(&self, app: AppId) -> u32 {
        self.e.app_state(app).unwrap_or_else(|| panic!("app {app:?} is neither live nor remembered"))
    }

    fn node_id(&self, name: &str) -> NodeId {
        self.e.state().node_by_name(name).unwrap_or_else(|| panic!("node {name} unknown"))
    }

    fn node_rec(&self, name: &str) -> GantryNode {
        self.e.state().nodes()[self.node_id(name).0 as usize]
    }

    fn container(&self, c: ContainerId) -> GantryContainer {
        let i = self.e.state().container_index(c).unwrap_or_else(|| panic!("container {c:?} unknown"));
        self.e.state().containers()[i as usize]
    }

    fn app_rec(&self, app: AppId) -> GantryApp {
        let i = self.e.state().app_index(app).unwrap_or_else(|| panic!("app {app:?} is not live"));
        self.e.state().apps()[i as usize]
    }

    fn app_meta(&self, app: AppId) -> AppMeta {
        let i = self.e.state().app_index(app).unwrap_or_else(|| panic!("app {app:?} is not live"));
        self.e.state().app_meta(i).cloned().expect("meta")
    }

    /// The `k`-th request of a live app.
    fn request(&self, app: AppId, k: u32) -> GantryRequest {
        let a = self.app_rec(app);
        assert!(k < a.requests.len);
        self.e.state().requests()[(a.requests.start + k) as usize]
    }

    fn queue(&self, path: &str) -> GantryQueue {
        let s = self.e.state();
        *s.queues().iter().find(|q| s.str(q.name) == path).unwrap_or_else(|| panic!("queue {path} unknown"))
    }

    fn summary(&self, app: AppId) -> AppSummary {
        self.e.history().find(|s| s.id == app).cloned().unwrap_or_else(|| panic!("{app:?} not in history"))
    }

    fn live_containers(&self) -> Vec<GantryContainer> {
        self.e
            .state()
            .containers()
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING | GANTRY_CONTAINER_STOPPING
                )
            })
            .copied()
            .collect()
    }
}

// ----- an in-test plugin ----------------------------------------------------------------------

type HookFn = Box<dyn FnMut(&View<'_>, &mut Decisions) + Send>;

/// A plugin whose every hook is one closure (the profile decides which hook it serves).
struct FnPlugin {
    hook: HookFn,
}

impl FnPlugin {
    fn run(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        (self.hook)(view, out);
        Ok(())
    }
}

impl Plugin for FnPlugin {
    const NAME: &'static core::ffi::CStr = c"test-fn-plugin";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: Hooks = Hooks { admit: true, order: true, place: true, rebalance: true, reserve: false };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Err(PluginError::new("built by the test, not from a configuration"))
    }
    fn admit(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.run(view, out)
    }
    fn order(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.run(view, out)
    }
    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.run(view, out)
    }
    fn rebalance(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.run(view, out)
    }
}

fn engine_with(config: EngineConfig, profile: Profile, hook: HookFn) -> Engine {
    let policy: Box<dyn Policy> = Box::new(StaticPolicy::new(FnPlugin { hook }));
    Engine::new(config, vec![policy], profile).expect("engine with plugin")
}

// =============================================================================================
// Nodes
// =============================================================================================

#[test]
fn node_registration_records_capacity_rack_and_gpus() {
    let mut h = H::builtin();
    assert!(h.register(node("n1", "r1", 8, 32, 0)).is_empty(), "registration issues no commands");
    let mut g = node("g1", "r2", 16, 64, 2);
    g.gpu_list = vec![
        GpuSpec { index: 0, model: "A100".into(), memory_bytes: 80 * GIB },
        GpuSpec { index: 1, model: "A100".into(), memory_bytes: 80 * GIB },
    ];
    h.register(g);

    let s = h.e.state();
    assert_eq!(s.nodes().len(), 2);
    assert_eq!(h.node_id("n1"), NodeId(0));
    assert_eq!(h.node_id("g1"), NodeId(1));
    let n1 = h.node_rec("n1");
    assert_eq!(s.str(n1.name), "n1");
    assert_eq!(s.str(n1.rack), "r1");
    assert_eq!(n1.capacity, res(8000, 32, 0));
    assert_eq!(n1.allocated, Resources::default());
    assert_eq!(n1.state, GANTRY_NODE_RUNNING);
    let g1 = h.node_rec("g1");
    assert_eq!(s.str(g1.gpu_model), "A100");
    assert_eq!(g1.gpus.len, 2);
    assert_eq!(s.cluster(), res(24_000, 96, 2));
    let gpus: Vec<_> = View::range(s.gpus(), g1.gpus).to_vec();
    assert!(gpus.iter().all(|g| g.node == 1 && g.container == GANTRY_NONE && g.memory_bytes == 80 * GIB));
    // Queue capacities follow the cluster.
    assert_eq!(h.queue("root.default").absolute_maximum, res(24_000, 96, 2));
}

#[test]
fn node_reregistration_updates_labels_and_capacity_in_place() {
    let mut h = H::builtin();
    let mut n1 = node("n1", "r1", 4, 16, 0);
    n1.labels = labels(&[("zone", "a")]);
    h.register(n1);
    // Wants zone=b, which no node has yet.
    let mut r = req(1000, 1, 0, 2);
    r.selector = labels(&[("zone", "b")]);
    let id = h.submit(app("picky", DEFAULT_Q, vec![r]));
    assert!(launches(&h.tick()).is_empty(), "no node has zone=b");

    let mut n1b = node("n1", "r9", 8, 32, 0);
    n1b.labels = labels(&[("zone", "b"), ("ssd", "")]);
    h.register(n1b);
    let s = h.e.state();
    assert_eq!(s.nodes().len(), 1, "re-registration updates, it does not add");
    let rec = h.node_rec("n1");
    assert_eq!(rec.capacity, res(8000, 32, 0));
    assert_eq!(s.str(rec.rack), "r9");
    assert_eq!(rec.labels.len, 2);
    assert_eq!(s.cluster(), res(8000, 32, 0));

    let l = launches(&h.tick());
    assert_eq!(l.len(), 2, "the new label is used for placement");
    assert!(l.iter().all(|x| x.app == id && x.node == NodeId(0)));

    // The old label is gone.
    let mut old = req(1000, 1, 0, 1);
    old.selector = labels(&[("zone", "a")]);
    h.submit(app("old-zone", DEFAULT_Q, vec![old]));
    assert!(launches(&h.tick()).is_empty(), "zone=a was replaced by the re-registration");
}

#[test]
fn node_reregistration_refuses_capacity_below_what_containers_hold() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 2));
    let id = h.submit(app("big", DEFAULT_Q, vec![req(6000, 20, 1, 1)]));
    let l = launches(&h.tick());
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].app, id);

    let err = h.refused(Event::NodeRegistered(node("n1", "r1", 4, 32, 2)));
    assert!(matches!(err, EngineError::Conflict(ref m) if m.contains("less capacity")), "{err}");
    let err = h.refused(Event::NodeRegistered(node("n1", "r1", 8, 16, 2)));
    assert!(matches!(err, EngineError::Conflict(_)), "{err}");
    // A different GPU count while a container holds one of them.
    let err = h.refused(Event::NodeRegistered(node("n1", "r1", 8, 32, 3)));
    assert!(matches!(err, EngineError::Conflict(ref m) if m.contains("GPU")), "{err}");
    assert_eq!(h.node_rec("n1").capacity, res(8000, 32, 2));

    // Exactly what the containers hold is fine, and the container keeps its GPU.
    h.register(node("n1", "r1", 6, 20, 2));
    assert_eq!(h.node_rec("n1").capacity, res(6000, 20, 2));
    assert_eq!(h.node_rec("n1").allocated, res(6000, 20, 1));
    assert_eq!(h.container(l[0].container).state, GANTRY_CONTAINER_ALLOCATED);
}

#[test]
fn invalid_node_specs_are_refused_without_state_change() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 8, 0));

    let mut many = node("n2", "r1", 4, 8, 0);
    many.labels = (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let err = h.refused(Event::NodeRegistered(many));
    assert!(matches!(err, EngineError::Invalid { what: "node labels", .. }), "{err}");

    let err = h.refused(Event::NodeRegistered(node("n\u{7}2", "r1", 4, 8, 0)));
    assert!(
        matches!(err, EngineError::Invalid { what: "node name", ref reason } if reason.contains("control"))
    );
    let err = h.refused(Event::NodeRegistered(node("n2", "r\n1", 4, 8, 0)));
    assert!(matches!(err, EngineError::Invalid { what: "node rack", .. }), "{err}");
    let mut bad_label = node("n2", "r1", 4, 8, 0);
    bad_label.labels = labels(&[("zo\tne", "a")]);
    assert!(matches!(h.refused(Event::NodeRegistered(bad_label)), EngineError::Invalid { .. }));
    let err = h.refused(Event::NodeRegistered(node("", "r1", 4, 8, 0)));
    assert!(matches!(err, EngineError::Invalid { what: "node name", .. }), "{err}");
    let err = h.refused(Event::NodeRegistered(node(&"x".repeat(254), "r1", 4, 8, 0)));
    assert!(matches!(err, EngineError::Invalid { what: "node name", .. }), "{err}");
    let err = h.refused(Event::NodeRegistered(node("n2\u{200D}", "r1", 4, 8, 0)));
    assert_eq!(err.to_string(), "invalid node name: contains U+200D (ZERO WIDTH JOINER)");
    let err = h.refused(Event::NodeRegistered(node("n2", "r\u{202D}1", 4, 8, 0)));
    assert_eq!(err.to_string(), "invalid node rack: contains U+202D (LEFT-TO-RIGHT OVERRIDE)");
    let mut bidi_label = node("n2", "r1", 4, 8, 0);
    bidi_label.labels = labels(&[("kind\u{FEFF}", "k9")]);
    let err = h.refused(Event::NodeRegistered(bidi_label));
    assert_eq!(
        err.to_string(),
        "invalid node labels: key \"kind\\u{feff}\" contains U+FEFF (ZERO WIDTH NO-BREAK SPACE)"
    );
    let mut gpus = node("n2", "r1", 4, 8, 2);
    gpus.gpu_list = vec![GpuSpec { index: 0, model: "T4".into(), memory_bytes: 0 }];
    let err = h.refused(Event::NodeRegistered(gpus));
    assert!(matches!(err, EngineError::Invalid { what: "node GPUs", .. }), "{err}");
    // Re-registering an existing node with an invalid spec changes nothing either.
    let mut n1 = node("n1", "r1", 16, 8, 0);
    n1.labels = (0..65).map(|i| (format!("k{i}"), String::new())).collect();
    h.refused(Event::NodeRegistered(n1));
    assert_eq!(h.node_rec("n1").capacity, res(4000, 8, 0));
    assert_eq!(h.e.state().nodes().len(), 1);
}

#[test]
fn invalid_submissions_are_refused_without_state_change() {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: "root.prod".into(), guaranteed: 0.6, maximum: 1.0 },
            QueueSpec { path: "root.prod.etl".into(), guaranteed: 1.0, maximum: 1.0 },
            QueueSpec { path: "root.dev".into(), guaranteed: 0.4, maximum: 1.0 },
        ],
        ..Default::default()
    };
    let mut h = H::config(config);
    h.register(node("n1", "r1", 8, 32, 0));
    let good = app("ok", "root.dev", vec![req(1000, 1, 0, 1)]);
    h.submit(good.clone());
    h.tick();

    let err = h.refused(Event::AppSubmitted(AppSpec { queue: "root.nope".into(), ..good.clone() }));
    assert_eq!(err, EngineError::UnknownQueue("root.nope".into()));
    let err = h.refused(Event::AppSubmitted(AppSpec { queue: "root.prod".into(), ..good.clone() }));
    assert_eq!(err, EngineError::UnknownQueue("root.prod".into()), "a parent queue is not a leaf");
    let err = h.refused(Event::AppSubmitted(AppSpec { queue: "root".into(), ..good.clone() }));
    assert_eq!(err, EngineError::UnknownQueue("root".into()));
    assert!(err.to_string().contains("not a leaf"), "{err}");

    let err = h.refused(Event::AppSubmitted(app("zero", "root.dev", vec![req(1000, 1, 0, 0)])));
    assert!(
        matches!(err, EngineError::Invalid { what: "request", ref reason } if reason.contains("count 0"))
    );
    let err = h.refused(Event::AppSubmitted(app("nothing", "root.dev", vec![req(0, 0, 0, 1)])));
    assert!(
        matches!(err, EngineError::Invalid { what: "request", ref reason } if reason.contains("no resources")),
        "{err}"
    );
    let mut sel = req(1000, 1, 0, 1);
    sel.selector = (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let err = h.refused(Event::AppSubmitted(app("labels", "root.dev", vec![sel])));
    assert!(
        matches!(err, EngineError::Invalid { what: "request selector", ref reason } if reason.contains("65"))
    );
    let mut pref = req(1000, 1, 0, 1);
    pref.preferred = (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let err = h.refused(Event::AppSubmitted(app("labels", "root.dev", vec![pref])));
    assert!(matches!(err, EngineError::Invalid { what: "request preferences", .. }), "{err}");

    let err = h.refused(Event::AppSubmitted(AppSpec { name: "bad\nname".into(), ..good.clone() }));
    assert!(
        matches!(err, EngineError::Invalid { what: "app name", ref reason } if reason.contains("control"))
    );
    let err = h.refused(Event::AppSubmitted(AppSpec { user: "eve\u{1b}[0m".into(), ..good.clone() }));
    assert!(matches!(err, EngineError::Invalid { what: "app user", .. }), "{err}");
    let err = h.refused(Event::AppSubmitted(AppSpec { user: String::new(), ..good.clone() }));
    assert!(matches!(err, EngineError::Invalid { what: "app user", .. }), "{err}");
    let err = h.refused(Event::AppSubmitted(AppSpec { queue: "root.\tdev".into(), ..good.clone() }));
    assert!(matches!(err, EngineError::Invalid { what: "app queue", .. }), "{err}");
    let mut ctl_sel = req(1000, 1, 0, 1);
    ctl_sel.selector = labels(&[("zone", "a\u{0}")]);
    let err = h.refused(Event::AppSubmitted(app("sel", "root.dev", vec![ctl_sel])));
    assert!(matches!(err, EngineError::Invalid { what: "request selector", .. }), "{err}");

    // Bidirectional and zero-width characters would let a listing lie: refused, named.
    let err = h.refused(Event::AppSubmitted(AppSpec { name: "evil\u{202E}gpj.exe".into(), ..good.clone() }));
    assert_eq!(err.to_string(), "invalid app name: contains U+202E (RIGHT-TO-LEFT OVERRIDE)");
    let err = h.refused(Event::AppSubmitted(AppSpec { user: "ad\u{200B}min".into(), ..good.clone() }));
    assert_eq!(err.to_string(), "invalid app user: contains U+200B (ZERO WIDTH SPACE)");
    let mut zw_sel = req(1000, 1, 0, 1);
    zw_sel.selector = labels(&[("kind", "k9\u{2069}")]);
    let err = h.refused(Event::AppSubmitted(app("sel", "root.dev", vec![zw_sel])));
    assert!(err.to_string().contains("U+2069 (POP DIRECTIONAL ISOLATE)"), "{err}");

    let err = h.refused(Event::AppSubmitted(app("empty", "root.dev", Vec::new())));
    assert!(matches!(err, EngineError::Invalid { what: "app", .. }), "{err}");
    let err = h.refused(Event::AppSubmitted(AppSpec { max_attempts: 101, ..good.clone() }));
    assert!(
        matches!(err, EngineError::Invalid { what: "app", ref reason } if reason.contains("max_attempts"))
    );
    let mut reserved = req(1000, 1, 0, 1);
    reserved.resources.reserved = 1;
    assert!(matches!(
        h.refused(Event::AppSubmitted(app("r", "root.dev", vec![reserved]))),
        EngineError::Invalid { what: "request", .. }
    ));

    // Nothing was recorded: the next accepted app gets the next id, and the next tick places it.
    let next = h.submit(good);
    assert_eq!(next, AppId(2), "refused submissions consume no ids");
    assert_eq!(launches(&h.tick()).len(), 1);
}

#[test]
fn unknown_ids_are_refused_without_state_change() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let id = h.submit(app("a", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let c = launches(&h.tick())[0].container;

    assert_eq!(h.refused(Event::AppKillRequested { app: AppId(999) }), EngineError::UnknownApp(999));
    assert_eq!(
        h.refused(Event::ContainerStarted { container: ContainerId(999) }),
        EngineError::UnknownContainer(999)
    );
    assert_eq!(h.refused(Event::container_exited(ContainerId(999), 0)), EngineError::UnknownContainer(999));
    assert_eq!(h.refused(Event::NodeLost { node: "ghost".into() }), EngineError::UnknownNode("ghost".into()));
    assert_eq!(
        h.refused(Event::NodeStateChanged { node: "ghost".into(), state: NodeCondition::Draining }),
        EngineError::UnknownNode("ghost".into())
    );
    assert!(h.refused(Event::NodeLost { node: "ghost".into() }).to_string().contains("ghost"));

    // A container that has exited is no longer known to container events.
    h.start(c);
    h.exit(c, 0);
    assert_eq!(h.refused(Event::container_exited(c, 1)), EngineError::UnknownContainer(c.0));
    assert_eq!(h.refused(Event::ContainerStarted { container: c }), EngineError::UnknownContainer(c.0));
    assert_eq!(h.state_of(id), GANTRY_APP_FINISHED);

    // A lost node must re-register before its state can be changed.
    h.lose("n1");
    let err = h.refused(Event::NodeStateChanged { node: "n1".into(), state: NodeCondition::Running });
    assert!(matches!(err, EngineError::Conflict(ref m) if m.contains("re-register")), "{err}");
}

#[test]
fn killing_an_ended_app_is_refused() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let done = h.submit(app("done", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let c = launches(&h.tick())[0].container;
    h.start(c);
    h.exit(c, 0);
    assert_eq!(h.state_of(done), GANTRY_APP_FINISHED);
    // Still in the records (compaction happens at the next cycle): a conflict.
    let err = h.refused(Event::AppKillRequested { app: done });
    assert!(matches!(err, EngineError::Conflict(ref m) if m.contains("already ended")), "{err}");
    // After the cycle it is only in history: unknown to events, still known to queries.
    h.tick();
    assert_eq!(h.e.state().app_index(done), None);
    assert_eq!(h.refused(Event::AppKillRequested { app: done }), EngineError::UnknownApp(done.0));
    assert_eq!(h.state_of(done), GANTRY_APP_FINISHED);

    // A killed app whose containers are still stopping cannot be killed again.
    let k = h.submit(app("k", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    h.tick();
    let cmds = h.kill_app(k);
    assert_eq!(kills(&cmds).len(), 1);
    let err = h.refused(Event::AppKillRequested { app: k });
    assert!(matches!(err, EngineError::Conflict(_)), "{err}");
}

// =============================================================================================
// Application lifecycle
// =============================================================================================

#[test]
fn app_lifecycle_new_accepted_running_finished() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    h.register(node("n2", "r1", 8, 32, 0));
    let id = h.submit(app("wordcount", DEFAULT_Q, vec![req(3000, 4, 0, 3)]));
    assert_eq!(id, AppId(1));
    assert_eq!(h.state_of(id), GANTRY_APP_NEW);

    let cmds = h.tick();
    assert_eq!(changes_of(&cmds, id), vec![GANTRY_APP_ACCEPTED]);
    let l = launches(&cmds);
    assert_eq!(l.len(), 3);
    // Acceptance is reported before the launches.
    let first_launch = cmds.iter().position(|c| matches!(c, Command::Launch { .. })).expect("launch");
    let accepted_at = cmds.iter().position(|c| matches!(c, Command::AppStateChanged { .. })).expect("change");
    assert!(accepted_at < first_launch);
    // First fit: two on n1 (8 cores hold two 3-core containers), one on n2.
    assert_eq!(l.iter().map(|x| x.node.0).collect::<Vec<_>>(), vec![0, 0, 1]);
    for x in &l {
        assert_eq!((x.app, x.request, x.resources), (id, 0, res(3000, 4, 0)));
        assert!(x.gpus.is_empty());
        assert_eq!(h.container(x.container).state, GANTRY_CONTAINER_ALLOCATED);
    }
    assert_eq!(h.state_of(id), GANTRY_APP_ACCEPTED);
    assert_eq!(h.request(id, 0).placed, 3);
    assert_eq!(h.app_rec(id).used, res(9000, 12, 0));
    assert_eq!(h.queue("root.default").used, res(9000, 12, 0));
    assert_eq!(h.node_rec("n1").allocated, res(6000, 8, 0));
    assert!(launches(&h.tick()).is_empty(), "nothing is placed twice");

    let cmds = h.start(l[0].container);
    assert_eq!(changes_of(&cmds, id), vec![GANTRY_APP_RUNNING]);
    assert_eq!(h.container(l[0].container).state, GANTRY_CONTAINER_RUNNING);
    assert!(changes(&h.start(l[1].container)).is_empty(), "RUNNING is reported once");
    h.start(l[2].container);
    assert_eq!(h.state_of(id), GANTRY_APP_RUNNING);

    assert!(h.exit(l[0].container, 0).is_empty());
    assert_eq!(h.container(l[0].container).state, GANTRY_CONTAINER_COMPLETED);
    assert!(h.exit(l[1].container, 0).is_empty());
    let cmds = h.exit(l[2].container, 0);
    let ch = changes(&cmds);
    assert_eq!(ch.len(), 1);
    assert_eq!((ch[0].0, ch[0].1), (id, GANTRY_APP_FINISHED));
    assert_eq!(h.state_of(id), GANTRY_APP_FINISHED);
    assert_eq!(h.node_rec("n1").allocated, Resources::default());
    assert_eq!(h.queue("root.default").used, Resources::default());

    // The next cycle drops the records; the app is remembered.
    let cmds = h.tick();
    assert!(cmds.is_empty(), "{cmds:?}");
    assert!(h.e.state().apps().is_empty());
    assert!(h.e.state().requests().is_empty());
    assert!(h.e.state().containers().is_empty());
    assert_eq!(h.state_of(id), GANTRY_APP_FINISHED);
    let s = h.summary(id);
    assert_eq!((s.name.as_str(), s.queue.as_str(), s.user.as_str()), ("wordcount", DEFAULT_Q, "alice"));
    assert_eq!(s.state, GANTRY_APP_FINISHED);
}

/// BUG: `finish_if_done` reports "all containers completed" in the AppStateChanged command but
/// never stores it in the app's diagnostics (unlike `end_app` and admission), so the remembered
/// summary of every FINISHED app says nothing about why it is in its state.
#[test]
fn finished_app_is_remembered_with_why_it_finished() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let id = h.submit(app("short", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let c = launches(&h.tick())[0].container;
    h.start(c);
    let cmds = h.exit(c, 0);
    let reported = changes(&cmds).pop().expect("a state change");
    assert_eq!((reported.0, reported.1), (id, GANTRY_APP_FINISHED));
    assert_eq!(h.app_meta(id).diagnostics, reported.2, "the live record says why, as the command did");
    h.tick();
    assert_eq!(h.summary(id).diagnostics, reported.2, "history says why, as the command did");
}

#[test]
fn failed_container_is_retried_until_max_attempts_then_app_fails() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let mut spec = app("flaky", DEFAULT_Q, vec![req(1000, 1, 0, 2)]);
    spec.max_attempts = 3;
    let id = h.submit(spec);
    let l = launches(&h.tick());
    assert_eq!(l.len(), 2);
    let steady = l[1].container;
    h.start(steady);
    let mut flaky = l[0].container;

    for attempt in 1..3 {
        h.start(flaky);
        let cmds = h.exit(flaky, 1);
        assert!(kills(&cmds).is_empty() && changes(&cmds).is_empty(), "a retry is silent: {cmds:?}");
        assert_eq!(h.container(flaky).state, GANTRY_CONTAINER_FAILED);
        assert_eq!(h.app_meta(id).failures, attempt);
        assert_eq!(h.app_rec(id).attempt, attempt + 1);
        assert_eq!(h.request(id, 0).placed, 1, "the failed container is pending again");
        let again = launches(&h.tick());
        assert_eq!(again.len(), 1, "one replacement, attempt {attempt}");
        assert_ne!(again[0].container, flaky, "a retry is a new container");
        assert_eq!((again[0].app, again[0].request), (id, 0));
        flaky = again[0].container;
    }
    h.start(flaky);
    let cmds = h.exit(flaky, 137);
    let ch = changes(&cmds);
    assert_eq!(ch.len(), 1);
    assert_eq!((ch[0].0, ch[0].1), (id, GANTRY_APP_FAILED));
    assert!(ch[0].2.contains("3 of 3 attempts"), "{}", ch[0].2);
    assert!(ch[0].2.contains("137"), "{}", ch[0].2);
    assert_eq!(
        kills(&cmds),
        vec![Kill {
            container: steady,
            node: NodeId(0),
            grace_ms: APP_KILL_GRACE_MS,
            reason: KillReason::AppFailed
        }]
    );
    assert_eq!(h.state_of(id), GANTRY_APP_FAILED);
    assert!(launches(&h.tick()).is_empty(), "a failed app is not retried");
    assert_eq!(h.container(steady).state, GANTRY_CONTAINER_STOPPING);

    h.exit(steady, 143);
    h.tick();
    assert_eq!(h.e.state().app_index(id), None);
    let s = h.summary(id);
    assert_eq!(s.state, GANTRY_APP_FAILED);
    assert!(s.diagnostics.contains("attempts used"), "{}", s.diagnostics);
}

#[test]
fn default_max_attempts_comes_from_the_config() {
    let mut h = H::config(EngineConfig { default_max_attempts: 1, ..Default::default() });
    h.register(node("n1", "r1", 8, 32, 0));
    let id = h.submit(app("once", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let c = launches(&h.tick())[0].container;
    let cmds = h.exit(c, 2);
    assert_eq!(changes_of(&cmds, id), vec![GANTRY_APP_FAILED]);
}

#[test]
fn gang_member_failure_restarts_whole_gang() {
    let mut h = H::builtin();
    for n in ["n1", "n2", "n3"] {
        h.register(node(n, "r1", 4, 16, 0));
    }
    // One member per node: the whole cluster holds exactly one gang.
    let id = h.submit(app("mpi", DEFAULT_Q, vec![gang(4000, 8, 3)]));
    let first = launches(&h.tick());
    assert_eq!(first.len(), 3, "the gang starts whole");
    for x in &first {
        h.start(x.container);
    }
    assert_eq!(h.request(id, 0).placed, 3);

    let cmds = h.exit(first[1].container, 1);
    let k = kills(&cmds);
    let mut expected: Vec<Kill> = [0, 2]
        .iter()
        .map(|&i| Kill {
            container: first[i].container,
            node: first[i].node,
            grace_ms: 0,
            reason: KillReason::GangRestart,
        })
        .collect();
    expected.sort_by_key(|k| k.container);
    let mut got = k.clone();
    got.sort_by_key(|k| k.container);
    assert_eq!(got, expected, "the other members are killed at once");
    assert!(changes(&cmds).is_empty(), "the app goes on");
    assert_eq!(h.request(id, 0).placed, 0, "the gang is pending as a whole");
    assert_eq!(h.app_meta(id).failures, 1);
    assert_eq!(h.state_of(id), GANTRY_APP_RUNNING);

    // While the killed members still hold their nodes, no partial gang is placed.
    assert!(launches(&h.tick()).is_empty());
    h.exit(first[0].container, 137);
    assert!(launches(&h.tick()).is_empty(), "two of three nodes free: still no partial gang");
    assert_eq!(h.container(first[2].container).state, GANTRY_CONTAINER_STOPPING);
    h.exit(first[2].container, 137);
    let second = launches(&h.tick());
    assert_eq!(second.len(), 3, "the gang is placed again, whole");
    assert!(second.iter().all(|x| x.app == id && x.request == 0));
    assert!(second.iter().all(|x| first.iter().all(|f| f.container != x.container)));
    // Killed members do not count as failures.
    assert_eq!(h.app_meta(id).failures, 1);
    for x in &second {
        h.start(x.container);
    }
    let mut last = Vec::new();
    for x in &second {
        last = h.exit(x.container, 0);
    }
    assert_eq!(changes_of(&last, id), vec![GANTRY_APP_FINISHED]);
}

/// BUG: an app whose gang was restarted never finishes if a killed member of the old gang reports
/// its exit after the new gang completed. `container_exited` only calls `finish_if_done` for a
/// COMPLETED exit; the exit of a STOPPING container (the last live one) never re-checks.
#[test]
fn gang_app_finishes_when_a_killed_old_member_exits_last() {
    let mut h = H::builtin();
    for n in ["n1", "n2", "n3", "n4"] {
        h.register(node(n, "r1", 4, 16, 0));
    }
    let id = h.submit(app("mpi", DEFAULT_Q, vec![gang(4000, 8, 2)]));
    let first = launches(&h.tick());
    assert_eq!(first.len(), 2);
    for x in &first {
        h.start(x.container);
    }
    let cmds = h.exit(first[0].container, 1);
    assert_eq!(kills(&cmds).len(), 1);
    let straggler = first[1].container;

    // Two free nodes: the gang is placed again while the old member is still stopping.
    let second = launches(&h.tick());
    assert_eq!(second.len(), 2);
    for x in &second {
        h.start(x.container);
    }
    for x in &second {
        h.exit(x.container, 0);
    }
    assert_eq!(h.state_of(id), GANTRY_APP_RUNNING, "the old member is still live");
    assert_eq!(h.request(id, 0).placed, 2);

    // The killed old member finally reports its exit: nothing of the app is live any more and
    // every container it wanted completed.
    let mut cmds_after = h.exit(straggler, 137);
    cmds_after.extend(h.tick());
    assert!(h.live_containers().is_empty());
    assert_eq!(
        h.state_of(id),
        GANTRY_APP_FINISHED,
        "all containers of the app completed and none is live, yet it is not FINISHED"
    );
    assert_eq!(changes_of(&cmds_after, id), vec![GANTRY_APP_FINISHED]);
}

#[test]
fn lost_node_repends_its_containers_without_using_attempts() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 16, 0));
    h.register(node("n2", "r1", 4, 16, 0));
    h.register(node("n3", "r1", 4, 16, 0));
    let mut spec = app("svc", DEFAULT_Q, vec![req(2000, 4, 0, 4)]);
    spec.max_attempts = 1; // a single failure would end it; a node loss must not
    let id = h.submit(spec);
    let l = launches(&h.tick());
    assert_eq!(l.iter().map(|x| x.node.0).collect::<Vec<_>>(), vec![0, 0, 1, 1]);
    for x in &l {
        h.start(x.container);
    }

    let cmds = h.lose("n1");
    assert!(cmds.is_empty(), "nothing to kill on a lost node, no state change: {cmds:?}");
    for x in &l[..2] {
        assert_eq!(h.container(x.container).state, GANTRY_CONTAINER_LOST);
        let err = h.refused(Event::container_exited(x.container, 0));
        assert_eq!(err, EngineError::UnknownContainer(x.container.0), "a lost container is gone");
    }
    assert_eq!(h.node_rec("n1").state, GANTRY_NODE_LOST);
    assert_eq!(h.node_rec("n1").allocated, Resources::default());
    assert_eq!(h.e.state().cluster(), res(8000, 32, 0), "a lost node leaves the cluster");
    assert_eq!(h.request(id, 0).placed, 2);
    assert_eq!(h.app_meta(id).failures, 0, "losses are not failures");
    assert_eq!(h.app_rec(id).attempt, 1);
    assert_eq!(h.state_of(id), GANTRY_APP_RUNNING);

    let again = launches(&h.tick());
    assert_eq!(again.len(), 2, "the lost containers are placed again");
    assert!(again.iter().all(|x| x.node == NodeId(2)), "on the only node with room, never the lost one");
    assert!(
        h.e.state().containers().iter().all(|c| c.state != GANTRY_CONTAINER_LOST),
        "dropped at the cycle"
    );

    // The node comes back and is usable again.
    h.register(node("n1", "r1", 4, 16, 0));
    assert_eq!(h.node_rec("n1").state, GANTRY_NODE_RUNNING);
    let other = h.submit(app("next", DEFAULT_Q, vec![req(2000, 4, 0, 2)]));
    let l2 = launches(&h.tick());
    assert_eq!(l2.len(), 2);
    assert!(l2.iter().all(|x| x.app == other && x.node == NodeId(0)));
}

#[test]
fn lost_node_restarts_a_gang_with_a_member_on_it() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 16, 0));
    h.register(node("n2", "r1", 4, 16, 0));
    h.register(node("n3", "r1", 4, 16, 0));
    let mut spec = app("mpi", DEFAULT_Q, vec![gang(4000, 8, 2)]);
    spec.max_attempts = 1;
    let id = h.submit(spec);
    let first = launches(&h.tick());
    assert_eq!(first.iter().map(|x| x.node.0).collect::<Vec<_>>(), vec![0, 1]);
    let cmds = h.lose("n1");
    assert_eq!(
        kills(&cmds),
        vec![Kill {
            container: first[1].container,
            node: NodeId(1),
            grace_ms: 0,
            reason: KillReason::GangRestart
        }]
    );
    assert_eq!(h.app_meta(id).failures, 0);
    assert_eq!(h.request(id, 0).placed, 0);
    assert!(launches(&h.tick()).is_empty(), "n2 is still held by the stopping member; n1 is lost");
    h.exit(first[1].container, 137);
    let second = launches(&h.tick());
    assert_eq!(second.iter().map(|x| x.node.0).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(h.state_of(id), GANTRY_APP_ACCEPTED);
}

#[test]
fn app_kill_stops_containers_with_grace_and_is_remembered() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 16, 0));
    h.register(node("n2", "r1", 4, 16, 0));
    let id = h.submit(app("etl", DEFAULT_Q, vec![req(3000, 4, 0, 2), req(1000, 1, 0, 5)]));
    let l = launches(&h.tick());
    // 2 × 3 cores, then 1-core containers where they fit: 1 on n1, 1 on n2.
    assert_eq!(l.len(), 4);
    h.start(l[0].container);
    h.start(l[1].container);

    let cmds = h.kill_app(id);
    let ch = changes(&cmds);
    assert_eq!(ch.len(), 1);
    assert_eq!((ch[0].0, ch[0].1, ch[0].2.as_str()), (id, GANTRY_APP_KILLED, "killed by request"));
    let mut k = kills(&cmds);
    k.sort_by_key(|k| k.container);
    let mut expected: Vec<Kill> = l
        .iter()
        .map(|x| Kill {
            container: x.container,
            node: x.node,
            grace_ms: APP_KILL_GRACE_MS,
            reason: KillReason::AppKilled,
        })
        .collect();
    expected.sort_by_key(|k| k.container);
    assert_eq!(k, expected, "every live container, running or only allocated, gets 10 s");
    assert_eq!(APP_KILL_GRACE_MS, 10_000);
    assert_eq!(h.state_of(id), GANTRY_APP_KILLED);

    // The containers hold their resources until they exit, and nothing is placed for the app.
    let tick = h.tick();
    assert!(launches(&tick).is_empty());
    assert!(kills(&tick).is_empty(), "kills are not repeated");
    assert!(h.e.state().app_index(id).is_some(), "kept while containers are live");
    assert_eq!(h.node_rec("n1").allocated.cpu_millis + h.node_rec("n2").allocated.cpu_millis, 8000);
    for x in &l {
        assert_eq!(h.container(x.container).state, GANTRY_CONTAINER_STOPPING);
    }
    // The agents report exits (a started container by SIGTERM, an unstarted one as well).
    for (k, x) in l.iter().enumerate() {
        let cmds = h.exit(x.container, if k % 2 == 0 { 143 } else { 0 });
        assert!(cmds.is_empty(), "{cmds:?}");
        assert_eq!(h.container(x.container).state, GANTRY_CONTAINER_KILLED, "a stopped container was killed");
    }
    assert_eq!(h.state_of(id), GANTRY_APP_KILLED, "exits of a killed app do not change its state");
    assert!(h.tick().is_empty());
    assert_eq!(h.e.state().app_index(id), None, "records dropped once the exits arrived");
    assert!(h.e.state().containers().is_empty());
    assert!(h.e.state().requests().is_empty());
    assert_eq!(
        h.e.state().nodes().iter().map(|n| n.allocated).collect::<Vec<_>>(),
        vec![Resources::default(); 2]
    );
    assert_eq!(h.e.app_state(id), Some(GANTRY_APP_KILLED));
    let s = h.summary(id);
    assert_eq!(
        (s.state, s.diagnostics.as_str(), s.name.as_str()),
        (GANTRY_APP_KILLED, "killed by request", "etl")
    );
}

#[test]
fn completed_containers_are_counted_per_request_and_a_restarted_gang_starts_again() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let id = h.submit(app("progress", DEFAULT_Q, vec![req(1000, 1, 0, 2), gang(1000, 1, 2)]));
    let l = launches(&h.tick());
    assert_eq!(l.len(), 4);
    for x in &l {
        h.start(x.container);
    }
    let of = |k: u32| l.iter().filter(|x| x.request == k).map(|x| x.container).collect::<Vec<_>>();
    let (single, pair) = (of(0), of(1));
    assert_eq!(h.app_meta(id).completed, [0, 0], "running is not completed");

    h.exit(single[0], 0);
    assert_eq!(h.app_meta(id).completed, [1, 0]);
    assert_eq!(h.request(id, 0).placed, 2, "a completed container still counts as placed");
    h.exit(single[1], 1);
    assert_eq!(h.app_meta(id).completed, [1, 0], "a failure is not a completion");

    // One member of the gang completes, the other fails: the whole gang runs again, so its
    // completion no longer counts.
    h.exit(pair[0], 0);
    assert_eq!(h.app_meta(id).completed, [1, 1]);
    h.exit(pair[1], 1);
    assert_eq!(h.app_meta(id).completed, [1, 0]);
    assert_eq!(h.app_meta(id).completed_total(), 1);

    let again = launches(&h.tick());
    assert_eq!(again.iter().map(|x| x.request).collect::<Vec<_>>(), [0, 1, 1]);
    for x in &again {
        h.start(x.container);
        h.exit(x.container, 0);
    }
    assert_eq!(h.state_of(id), GANTRY_APP_FINISHED);
    assert_eq!(h.app_meta(id).completed, [2, 2], "everything it needed completed");
}

#[test]
fn app_killed_before_admission_never_runs() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 16, 0));
    let id = h.submit(app("oops", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let cmds = h.kill_app(id);
    assert!(kills(&cmds).is_empty());
    assert_eq!(changes_of(&cmds, id), vec![GANTRY_APP_KILLED]);
    let cmds = h.tick();
    assert!(cmds.is_empty(), "not admitted, not placed: {cmds:?}");
    assert_eq!(h.e.app_state(id), Some(GANTRY_APP_KILLED));
    assert_eq!(h.e.state().app_index(id), None);
}

// =============================================================================================
// Queues
// =============================================================================================

fn two_by_four_cores(h: &mut H) {
    h.register(node("n1", "r1", 4, 64, 0));
    h.register(node("n2", "r2", 4, 64, 0));
}

#[test]
fn queue_maximum_holds_even_when_the_rest_of_the_cluster_is_idle() {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: "root.a".into(), guaranteed: 0.5, maximum: 0.5 },
            QueueSpec { path: "root.a.x".into(), guaranteed: 1.0, maximum: 1.0 },
            QueueSpec { path: "root.b".into(), guaranteed: 0.5, maximum: 1.0 },
        ],
        ..Default::default()
    };
    let mut h = H::config(config);
    two_by_four_cores(&mut h);
    assert_eq!(h.queue("root.a").absolute_maximum, res(4000, 64, 0));
    assert_eq!(h.queue("root.a.x").absolute_maximum, res(4000, 64, 0));
    let a = h.submit(app("hungry", "root.a.x", vec![req(1000, 1, 0, 10)]));
    let mut placed = 0;
    for _ in 0..4 {
        placed += launches(&h.tick()).len();
        let q = h.queue("root.a");
        assert!(q.used.fits_in(&q.absolute_maximum), "root.a uses {:?} > {:?}", q.used, q.absolute_maximum);
    }
    assert_eq!(placed, 4, "half of 8 cores, though the other half is idle");
    assert_eq!(h.queue("root.a").used.cpu_millis, 4000);
    assert_eq!(h.queue("root.a.x").used.cpu_millis, 4000);
    assert_eq!(h.queue("root").used.cpu_millis, 4000);
    assert_eq!(h.request(a, 0).placed, 4);
    assert_eq!(h.queue("root.a").pending.cpu_millis, 6000, "the rest is pending");

    // The other half goes to root.b.
    h.submit(app("b", "root.b", vec![req(1000, 1, 0, 10)]));
    let l = launches(&h.tick());
    assert_eq!(l.len(), 4);
    assert_eq!(h.queue("root.b").used.cpu_millis, 4000);
    // Finished work of root.a makes room for more of root.a, never beyond its maximum.
    let a_idx = h.e.state().app_index(a).expect("live");
    let mine: Vec<ContainerId> =
        h.live_containers().iter().filter(|c| c.app == a_idx).map(|c| ContainerId(c.id)).collect();
    assert_eq!(mine.len(), 4);
    h.exit(mine[0], 0);
    let more = launches(&h.tick());
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].app, a);
    assert_eq!(h.queue("root.a").used.cpu_millis, 4000);
}

#[test]
fn elastic_queue_uses_idle_capacity_beyond_its_guarantee() {
    let config = EngineConfig {
        queues: vec![
            QueueSpec { path: "root.a".into(), guaranteed: 0.2, maximum: 1.0 },
            QueueSpec { path: "root.b".into(), guaranteed: 0.8, maximum: 1.0 },
        ],
        ..Default::default()
    };
    let mut h = H::config(config);
    two_by_four_cores(&mut h);
    assert_eq!(h.queue("root.a").absolute_guaranteed.cpu_millis, 1600);
    h.submit(app("hungry", "root.a", vec![req(1000, 1, 0, 10)]));
    let l = launches(&h.tick());
    assert_eq!(l.len(), 8, "an idle cluster is all root.a's up to its maximum");
    assert_eq!(h.queue("root.a").used.cpu_millis, 8000);
}

// =============================================================================================
// Admission, draining, GPUs
// =============================================================================================

#[test]
fn admission_plugin_rejection_is_reported_with_its_reason_code() {
    let hook: HookFn = Box::new(|view, out| {
        assert_eq!(view.hook, GANTRY_HOOK_ADMIT);
        for (i, a) in view.apps.iter().enumerate() {
            if a.state == GANTRY_APP_NEW && view.str(a.user) == "mallory" {
                out.reject_app(i as u32, 42);
            }
        }
    });
    let mut h =
        H::with(engine_with(EngineConfig::default(), Profile { admit: Some(0), ..Default::default() }, hook));
    h.register(node("n1", "r1", 8, 32, 0));
    let good = h.submit(app("good", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let bad = h.submit(AppSpec { user: "mallory".into(), ..app("bad", DEFAULT_Q, vec![req(1000, 1, 0, 1)]) });

    let cmds = h.tick();
    let ch = changes(&cmds);
    let rejected: Vec<_> = ch.iter().filter(|(a, _, _)| *a == bad).collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].1, GANTRY_APP_REJECTED);
    assert!(rejected[0].2.contains("42"), "diagnostics name the reason code: {}", rejected[0].2);
    assert_eq!(changes_of(&cmds, good), vec![GANTRY_APP_ACCEPTED]);
    let l = launches(&cmds);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].app, good);

    assert_eq!(h.e.app_state(bad), Some(GANTRY_APP_REJECTED));
    assert_eq!(h.e.state().app_index(bad), None, "a rejected app holds nothing and is dropped");
    let s = h.summary(bad);
    assert_eq!(s.user, "mallory");
    assert!(s.diagnostics.contains("reason code 42"), "{}", s.diagnostics);
    assert_eq!(h.e.stats().rejected.total(), 0);
    assert_eq!(h.e.stats().policy_failures, 0);
}

#[test]
fn draining_node_gets_no_new_containers() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    h.register(node("n2", "r1", 8, 32, 0));
    let first = h.submit(app("x", DEFAULT_Q, vec![req(1000, 1, 0, 2)]));
    let l = launches(&h.tick());
    assert!(l.iter().all(|x| x.node == NodeId(0)), "first fit uses n1");

    let cmds = h.set_node("n1", NodeCondition::Draining);
    assert!(cmds.is_empty(), "draining kills nothing: {cmds:?}");
    assert_eq!(h.node_rec("n1").state, GANTRY_NODE_DRAINING);
    assert_eq!(h.e.state().cluster(), res(8000, 32, 0), "only schedulable nodes count");
    h.submit(app("y", DEFAULT_Q, vec![req(1000, 1, 0, 3)]));
    let l2 = launches(&h.tick());
    assert_eq!(l2.len(), 3);
    assert!(l2.iter().all(|x| x.node == NodeId(1)), "nothing new on the draining node: {l2:?}");
    for x in &l {
        assert_eq!(h.container(x.container).state, GANTRY_CONTAINER_ALLOCATED, "its containers stay");
    }
    assert_eq!(h.state_of(first), GANTRY_APP_ACCEPTED);

    h.set_node("n1", NodeCondition::Unhealthy);
    h.submit(app("z", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let l3 = launches(&h.tick());
    assert!(l3.iter().all(|x| x.node == NodeId(1)), "nor on an unhealthy one");

    h.set_node("n1", NodeCondition::Running);
    h.submit(app("w", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let l4 = launches(&h.tick());
    assert_eq!(l4.len(), 1);
    assert_eq!(l4[0].node, NodeId(0), "schedulable again");
}

#[test]
fn plugin_placement_on_a_draining_node_is_rejected() {
    // A plugin that puts everything on node 0.
    let hook: HookFn = Box::new(|view, out| {
        for &r in view.pending {
            out.place(r, 0);
        }
    });
    let config = EngineConfig { quarantine_after: 100, ..Default::default() };
    let mut h = H::with(engine_with(config, Profile { place: Some(0), ..Default::default() }, hook));
    h.register(node("n1", "r1", 8, 32, 0));
    h.register(node("n2", "r1", 8, 32, 0));
    h.set_node("n1", NodeCondition::Draining);
    h.submit(app("x", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    assert!(launches(&h.tick()).is_empty());
    assert_eq!(h.e.stats().rejected.get(RejectReason::NodeNotSchedulable), 1);
    assert_eq!(h.node_rec("n1").allocated, Resources::default());
}

/// BUG (capacity accounting): the cluster total used for queue maximums leaves out draining
/// nodes but queue usage still counts the containers running on them, so draining a busy node
/// shrinks every queue's headroom by that node's allocation *twice* — here the single queue,
/// whose maximum is the whole cluster, cannot use an idle node at all.
#[test]
fn draining_a_busy_node_does_not_block_idle_capacity_elsewhere() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 16, 0));
    h.register(node("n2", "r1", 4, 16, 0));
    h.submit(app("busy", DEFAULT_Q, vec![req(4000, 16, 0, 1)]));
    let l = launches(&h.tick());
    assert_eq!(l[0].node, NodeId(0));
    h.set_node("n1", NodeCondition::Draining);
    // n2 is idle and schedulable; root.default may use 100% of the cluster.
    h.submit(app("next", DEFAULT_Q, vec![req(1000, 1, 0, 4)]));
    let l2 = launches(&h.tick());
    assert_eq!(
        l2.len(),
        4,
        "n2 is idle, yet nothing is placed: root.default max {:?}, used {:?}",
        h.queue("root.default").absolute_maximum,
        h.queue("root.default").used
    );
}

#[test]
fn gpus_are_handed_out_by_index_and_returned_on_exit() {
    let mut h = H::builtin();
    let mut g = node("g1", "r1", 32, 256, 4);
    g.gpu_list = [2u32, 3, 5, 7]
        .iter()
        .map(|&index| GpuSpec { index, model: "H100".into(), memory_bytes: 80 * GIB })
        .collect();
    h.register(g);
    h.register(node("anon", "r1", 32, 256, 2)); // GPUs without a list: indexes 0..2

    let a = h.submit(app("a", DEFAULT_Q, vec![req(1000, 1, 2, 1)]));
    let b = h.submit(app("b", DEFAULT_Q, vec![req(1000, 1, 2, 1)]));
    let c = h.submit(app("c", DEFAULT_Q, vec![req(1000, 1, 1, 2)]));
    let l = launches(&h.tick());
    let by_app = |id: AppId| l.iter().filter(|x| x.app == id).cloned().collect::<Vec<_>>();
    assert_eq!(
        by_app(a).iter().map(|x| (x.node.0, x.gpus.clone())).collect::<Vec<_>>(),
        vec![(0, vec![2, 3])]
    );
    assert_eq!(
        by_app(b).iter().map(|x| (x.node.0, x.gpus.clone())).collect::<Vec<_>>(),
        vec![(0, vec![5, 7])]
    );
    assert_eq!(
        by_app(c).iter().map(|x| (x.node.0, x.gpus.clone())).collect::<Vec<_>>(),
        vec![(1, vec![0]), (1, vec![1])]
    );
    let held = |h: &H| h.e.state().gpus().iter().filter(|g| g.container != GANTRY_NONE).count();
    assert_eq!(held(&h), 6);
    assert_eq!(h.node_rec("g1").allocated.gpus, 4);

    // All GPUs are taken: a new GPU app waits.
    let d = h.submit(app("d", DEFAULT_Q, vec![req(1000, 1, 1, 1)]));
    assert!(launches(&h.tick()).is_empty());
    // a's container exits: its two GPUs are free at once, and handed out again by index.
    h.exit(by_app(a)[0].container, 0);
    assert_eq!(held(&h), 4);
    let g1 = h.node_rec("g1");
    let free: Vec<u32> = View::range(h.e.state().gpus(), g1.gpus)
        .iter()
        .filter(|g| g.container == GANTRY_NONE)
        .map(|g| g.index)
        .collect();
    assert_eq!(free, vec![2, 3]);
    let l2 = launches(&h.tick());
    assert_eq!(l2.len(), 1);
    assert_eq!((l2[0].app, l2[0].node, l2[0].gpus.clone()), (d, NodeId(0), vec![2]));
    // A killed container's GPUs come back when it exits, not before.
    let cmds = h.kill_app(b);
    assert_eq!(kills(&cmds).len(), 1);
    assert_eq!(held(&h), 5);
    h.exit(by_app(b)[0].container, 143);
    assert_eq!(held(&h), 3);
}

// =============================================================================================
// Determinism
// =============================================================================================

/// A placement plugin that scatters containers over random nodes drawn from the view's seed.
fn scatter_hook(seeds: std::sync::Arc<std::sync::Mutex<Vec<u64>>>) -> HookFn {
    Box::new(move |view, out| {
        seeds.lock().expect("seeds").push(view.seed);
        let mut rng = Rng::new(view.seed);
        let n = view.nodes.len() as u64;
        for &r in view.pending {
            let req = &view.requests[r as usize];
            let k = if req.flags & GANTRY_REQUEST_GANG != 0 {
                req.count
            } else {
                rng.below(u64::from(req.count - req.placed) + 1) as u32
            };
            for _ in 0..k {
                out.place(r, rng.below(n) as u32);
            }
        }
    })
}

/// Drives an engine through a fixed script whose later events depend on earlier commands, and
/// returns every command it issued.
fn scripted_run(e: Engine) -> Vec<Command> {
    let mut h = H::with(e);
    let mut log = Vec::new();
    for i in 0..6 {
        log.extend(h.register(node(&format!("n{i}"), &format!("r{}", i % 2), 4 + i, 16, (i % 3) as u32)));
    }
    for k in 0..8u32 {
        let mut r = req(500 + 250 * u64::from(k), 1 + u64::from(k % 3), k % 2, 1 + k % 4);
        r.gang = k % 3 == 0;
        log.extend(h.ok(Event::AppSubmitted(app(&format!("app{k}"), DEFAULT_Q, vec![r]))));
    }
    for round in 0..12u64 {
        let cmds = h.tick();
        for x in launches(&cmds) {
            log.extend(h.start(x.container));
        }
        log.extend(cmds);
        // Exit some live containers, chosen from their ids.
        for c in h.live_containers() {
            if (c.id + round) % 3 == 0 {
                log.extend(h.exit(ContainerId(c.id), if c.id % 4 == 0 { 1 } else { 0 }));
            }
        }
        if round == 5 {
            log.extend(h.lose("n2"));
        }
        if round == 7 {
            log.extend(h.register(node("n2", "r0", 6, 16, 2)));
        }
    }
    log
}

#[test]
fn same_seed_and_events_give_identical_commands() {
    let run = |seed: u64| {
        let seeds = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let config = EngineConfig { seed, ..Default::default() };
        let e = engine_with(
            config,
            Profile { place: Some(0), ..Default::default() },
            scatter_hook(seeds.clone()),
        );
        let log = scripted_run(e);
        let seen = seeds.lock().expect("seeds").clone();
        (log, seen)
    };
    let (a, seeds_a) = run(7);
    let (b, seeds_b) = run(7);
    assert!(launches(&a).len() > 10, "the script does real work ({} launches)", launches(&a).len());
    assert_eq!(seeds_a, seeds_b);
    assert_eq!(a, b, "same seed, same events: same commands");
    let (c, seeds_c) = run(8);
    assert_ne!(seeds_a, seeds_c, "the seed reaches the plugin");
    assert_ne!(a, c, "a different seed scatters differently");

    // The built-in policy is deterministic too.
    let x = scripted_run(Engine::builtin(EngineConfig { seed: 1, ..Default::default() }).expect("engine"));
    let y = scripted_run(Engine::builtin(EngineConfig { seed: 1, ..Default::default() }).expect("engine"));
    assert!(!launches(&x).is_empty());
    assert_eq!(x, y);
}

// =============================================================================================
// Gangs and rebalancing
// =============================================================================================

/// A rebalance plugin that acts once on the first RUNNING container of a gang request.
fn once_on_gang_member(kill: bool) -> HookFn {
    let mut done = false;
    Box::new(move |view, out| {
        if done || view.hook != GANTRY_HOOK_REBALANCE {
            return;
        }
        let target = view.containers.iter().position(|c| {
            c.state == GANTRY_CONTAINER_RUNNING
                && view.requests[c.request as usize].flags & GANTRY_REQUEST_GANG != 0
        });
        if let Some(i) = target {
            if kill {
                out.kill(i as u32);
            } else {
                out.preempt(i as u32, 5_000);
            }
            done = true;
        }
    })
}

fn rebalance_engine(kill: bool) -> H {
    let config = EngineConfig { rebalance_interval_ms: 1, ..Default::default() };
    let mut h = H::with(engine_with(
        config,
        Profile { rebalance: Some(0), ..Default::default() },
        once_on_gang_member(kill),
    ));
    for n in ["n1", "n2", "n3", "n4"] {
        h.register(node(n, "r1", 4, 16, 0));
    }
    h
}

/// BUG: a gang member killed by a `rebalance` KILL leaves its gang wedged: `stop_container`
/// decrements `placed` to `count - 1`, the exit of a PolicyKill'ed container does not restart the
/// gang (only `Preempted` does), and a gang with `0 < placed < count` can never be placed again,
/// so the app can never finish.
#[test]
fn gang_member_killed_by_policy_restarts_the_gang() {
    let mut h = rebalance_engine(true);
    let id = h.submit(app("mpi", DEFAULT_Q, vec![gang(4000, 8, 2)]));
    let first = launches(&h.tick());
    assert_eq!(first.len(), 2);
    for x in &first {
        h.start(x.container);
    }
    let mut log = h.tick();
    let policy_kills: Vec<Kill> =
        kills(&log).into_iter().filter(|k| k.reason == KillReason::PolicyKill).collect();
    assert_eq!(policy_kills.len(), 1);
    let victim = policy_kills[0].container;
    log.extend(h.exit(victim, 137));
    for _ in 0..3 {
        log.extend(h.tick());
        // Exit whatever the engine killed meanwhile (the rest of the gang, if it restarts it).
        for kill in kills(&log) {
            if h.e.state().container_index(kill.container).is_some()
                && h.container(kill.container).state == GANTRY_CONTAINER_STOPPING
            {
                log.extend(h.exit(kill.container, 137));
            }
        }
        let placed = h.request(id, 0).placed;
        assert!(placed == 0 || placed == 2, "a gang has 0 or count placed (ABI), got {placed}");
    }
    let relaunched: Vec<_> = launches(&log).into_iter().filter(|x| x.app == id).collect();
    assert_eq!(relaunched.len(), 2, "the gang is placed again, whole: {log:?}");
}

/// BUG: a gang member preempted with a grace period restarts its gang when it *exits*. If the gang
/// already restarted meanwhile (another member failed), that exit kills the brand-new gang.
#[test]
fn preempted_member_exiting_after_its_gang_restarted_does_not_kill_the_new_gang() {
    let mut h = rebalance_engine(false);
    let id = h.submit(app("mpi", DEFAULT_Q, vec![gang(4000, 8, 2)]));
    let first = launches(&h.tick());
    for x in &first {
        h.start(x.container);
    }
    let k = kills(&h.tick());
    let preempts: Vec<&Kill> = k.iter().filter(|k| k.reason == KillReason::Preempted).collect();
    assert_eq!(preempts.len(), 1);
    assert_eq!(preempts[0].grace_ms, 5_000);
    let preempted = preempts[0].container;
    let other = first.iter().map(|x| x.container).find(|&c| c != preempted).expect("other");
    if h.container(other).state == GANTRY_CONTAINER_STOPPING {
        // The engine restarted the gang right away: the other member was killed and exits.
        h.exit(other, 137);
    } else {
        // The other member fails while the preempted one is still in its grace period.
        h.exit(other, 1);
    }
    let second = launches(&h.tick());
    assert_eq!(second.len(), 2, "the gang restarts on the two free nodes");
    for x in &second {
        h.start(x.container);
    }
    // The old, preempted member is done at last.
    let cmds = h.exit(preempted, 143);
    assert!(kills(&cmds).is_empty(), "the exit of an old-generation member kills the new gang: {cmds:?}");
    assert_eq!(h.request(id, 0).placed, 2);
}

// =============================================================================================
// Refusals change nothing, constraints hold
// =============================================================================================

/// BUG (minor): `ClusterState::register_node` interns the node's name, rack and GPU model into
/// the append-only string arena *before* its conflict checks, so a refused re-registration still
/// grows the arena that every plugin view carries (`View::strings`), and an agent that keeps
/// re-registering with new names grows it without bound.
#[test]
fn refused_reregistration_leaves_the_string_arena_unchanged() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 1));
    h.submit(app("holder", DEFAULT_Q, vec![req(4000, 1, 1, 1)]));
    assert_eq!(launches(&h.tick()).len(), 1);
    // The arena holds ASCII only here, so its end is the first offset where one byte no longer
    // resolves.
    let byte_at = |h: &H, at: u32| h.e.state().str(GantryStrRef { offset: at, len: 1 }).to_owned();
    let end_of_arena = |h: &H| (0..1 << 16).find(|&o| byte_at(h, o).is_empty()).expect("arena end");
    let end = end_of_arena(&h);
    let err = h.refused(Event::NodeRegistered(node("n1", "a-rack-never-seen-before", 2, 32, 1)));
    assert!(matches!(err, EngineError::Conflict(_)), "{err}");
    let grown = h.e.state().str(GantryStrRef { offset: end, len: end_of_arena(&h) - end }).to_owned();
    assert_eq!(grown, "", "the refused re-registration left `{grown}` in the string arena");
}

/// BUG (or unenforced contract): `RackAffinity::Required` is documented as "one rack or not at
/// all" and the ABI flag `GANTRY_REQUEST_SAME_RACK_REQUIRED` as "all containers must be on nodes
/// of one rack", but only gangs are checked (`validate::place`) and the built-in placement only
/// honours it for gangs, so a non-gang request is spread over racks.
#[test]
fn same_rack_required_holds_for_non_gang_requests() {
    let mut h = H::builtin();
    h.register(node("a1", "ra", 1, 8, 0));
    h.register(node("b1", "rb", 4, 8, 0));
    h.register(node("b2", "rb", 4, 8, 0));
    let mut r = req(1000, 1, 0, 3);
    r.rack_affinity = RackAffinity::Required;
    h.submit(app("rack-bound", DEFAULT_Q, vec![r]));
    let l = launches(&h.tick());
    let racks: std::collections::BTreeSet<String> =
        l.iter().map(|x| h.e.state().str(h.e.state().nodes()[x.node.0 as usize].rack).to_owned()).collect();
    assert_eq!(racks.len(), 1, "containers of a same-rack request spread over racks {racks:?}");
}

// ----- recovery: what a daemon restores from its store after a restart ------------------------

#[test]
fn a_restored_app_whose_containers_all_completed_finishes_at_once() {
    // Both containers completed before the restart, but the app's FINISHED was not stored:
    // nothing will exit again, so the restore itself finishes it (and says so, for the store).
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let cmds = h.ok(Event::AppRestored {
        app: AppId(7),
        spec: app("done", DEFAULT_Q, vec![req(1000, 1, 0, 2)]),
        state: GANTRY_APP_RUNNING,
        failures: 0,
        submit_ms: 5,
        completed: vec![2],
    });
    assert_eq!(changes_of(&cmds, AppId(7)), vec![GANTRY_APP_ACCEPTED, GANTRY_APP_FINISHED]);
    assert!(launches(&h.tick()).is_empty(), "nothing runs again");
}

#[test]
fn a_restored_running_app_says_its_state_as_the_engine_has_it() {
    // Stored RUNNING; ACCEPTED here until a container comes back running, then RUNNING: each
    // change is a command, so the driver's store follows the engine.
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let cmds = h.ok(Event::AppRestored {
        app: AppId(8),
        spec: app("old", DEFAULT_Q, vec![req(1000, 1, 0, 1)]),
        state: GANTRY_APP_RUNNING,
        failures: 0,
        submit_ms: 5,
        completed: Vec::new(),
    });
    assert_eq!(changes_of(&cmds, AppId(8)), vec![GANTRY_APP_ACCEPTED]);
    let cmds = h.ok(Event::ContainerRestored {
        container: ContainerId(30),
        app: AppId(8),
        request: 0,
        node: "n1".into(),
        gpus: Vec::new(),
        running: true,
    });
    assert_eq!(changes_of(&cmds, AppId(8)), vec![GANTRY_APP_RUNNING]);
}

#[test]
fn a_restored_gang_missing_members_starts_again_whole() {
    // A gang of 3: one member completed and one came back after the restart; the third did
    // not. Members are placed only whole, so once the restore ends the gang starts again whole:
    // the restored member is stopped and all three are placed anew.
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    h.ok(Event::AppRestored {
        app: AppId(9),
        spec: app("g", DEFAULT_Q, vec![gang(1000, 1, 3)]),
        state: GANTRY_APP_RUNNING,
        failures: 0,
        submit_ms: 5,
        completed: vec![1],
    });
    h.ok(Event::ContainerRestored {
        container: ContainerId(40),
        app: AppId(9),
        request: 0,
        node: "n1".into(),
        gpus: Vec::new(),
        running: true,
    });
    assert_eq!(h.request(AppId(9), 0).placed, 2);
    let cmds = h.ok(Event::RestoreEnded);
    let k = kills(&cmds);
    assert_eq!(k.len(), 1, "the restored member is stopped: {cmds:?}");
    assert_eq!(k[0].container, ContainerId(40));
    assert_eq!(h.request(AppId(9), 0).placed, 0);
    assert_eq!(h.app_meta(AppId(9)).completed, vec![0]);
    h.exit(ContainerId(40), 137);
    assert_eq!(launches(&h.tick()).len(), 3, "placed whole");
}

#[test]
fn a_gang_with_completed_members_and_nothing_live_starts_again_whole() {
    // What a restore leaves when the members that had not completed are gone for good: the
    // next cycle starts the gang again whole instead of waiting for room for one member,
    // which a gang can never be given alone.
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    h.ok(Event::AppRestored {
        app: AppId(10),
        spec: app("g", DEFAULT_Q, vec![gang(1000, 1, 3)]),
        state: GANTRY_APP_RUNNING,
        failures: 0,
        submit_ms: 5,
        completed: vec![1],
    });
    assert_eq!(launches(&h.tick()).len(), 3);
    assert_eq!(h.app_meta(AppId(10)).completed, vec![0]);
}

#[test]
fn restored_apps_and_containers_resume_and_new_ids_follow_them() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 2));
    h.ok(Event::AppRestored {
        app: AppId(41),
        spec: app("old", DEFAULT_Q, vec![req(1000, 1, 1, 2)]),
        state: GANTRY_APP_RUNNING,
        failures: 1,
        submit_ms: 5,
        completed: Vec::new(),
    });
    // One of its two containers was running before the restart, on GPU 1.
    h.ok(Event::ContainerRestored {
        container: ContainerId(900),
        app: AppId(41),
        request: 0,
        node: "n1".into(),
        gpus: vec![1],
        running: true,
    });
    let c = h.container(ContainerId(900));
    assert_eq!(c.state, GANTRY_CONTAINER_RUNNING);
    assert_eq!(h.app_rec(AppId(41)).state, GANTRY_APP_RUNNING);
    assert_eq!(h.app_rec(AppId(41)).attempt, 2, "failures carry over");
    let held: Vec<u32> =
        h.e.state().gpus().iter().filter(|g| g.container != GANTRY_NONE).map(|g| g.index).collect();
    assert_eq!(held, vec![1], "the restored container keeps its GPU");
    // The other container is still pending and gets placed, with a fresh id and the free GPU.
    let l = launches(&h.tick());
    assert_eq!(l.len(), 1);
    assert!(l[0].container.0 > 900, "new container ids follow the restored ones");
    assert_eq!(l[0].gpus, vec![0]);
    // A new app gets an id after the restored one.
    let fresh = h.submit(app("new", DEFAULT_Q, vec![req(100, 1, 0, 1)]));
    assert!(fresh.0 > 41);
    // And the restored app finishes normally.
    h.start(l[0].container);
    h.exit(ContainerId(900), 0);
    let cmds = h.exit(l[0].container, 0);
    assert_eq!(changes_of(&cmds, AppId(41)), vec![GANTRY_APP_FINISHED]);
}

#[test]
fn bad_restores_are_refused_and_change_nothing() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 2, 4, 1));
    let spec = app("old", DEFAULT_Q, vec![req(1000, 1, 1, 1)]);
    h.ok(Event::AppRestored {
        app: AppId(7),
        spec: spec.clone(),
        state: GANTRY_APP_ACCEPTED,
        failures: 0,
        submit_ms: 0,
        completed: Vec::new(),
    });
    // The same id twice; a terminal state; an unknown queue.
    h.refused(Event::AppRestored {
        app: AppId(7),
        spec: spec.clone(),
        state: GANTRY_APP_ACCEPTED,
        failures: 0,
        submit_ms: 0,
        completed: Vec::new(),
    });
    h.refused(Event::AppRestored {
        app: AppId(8),
        spec: spec.clone(),
        state: GANTRY_APP_FINISHED,
        failures: 0,
        submit_ms: 0,
        completed: Vec::new(),
    });
    h.refused(Event::AppRestored {
        app: AppId(9),
        spec: app("x", "root.nope", vec![req(1, 1, 0, 1)]),
        state: GANTRY_APP_NEW,
        failures: 0,
        submit_ms: 0,
        completed: Vec::new(),
    });
    let restored = |container: u64, request: u32, node: &str, gpus: Vec<u32>| Event::ContainerRestored {
        container: ContainerId(container),
        app: AppId(7),
        request,
        node: node.into(),
        gpus,
        running: true,
    };
    h.refused(restored(1, 0, "nowhere", vec![0]));
    h.refused(restored(1, 3, "n1", vec![0]));
    h.refused(restored(1, 0, "n1", vec![5]));
    h.refused(restored(1, 0, "n1", vec![]));
    h.ok(restored(1, 0, "n1", vec![0]));
    // The request is complete now: a second container does not fit it.
    h.refused(restored(2, 0, "n1", vec![0]));
    h.refused(restored(1, 0, "n1", vec![0]));
}

#[test]
fn a_container_missing_on_its_node_is_lost_and_reruns_without_using_an_attempt() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 4, 8, 0));
    let a = h.submit(AppSpec { max_attempts: 1, ..app("one-shot", DEFAULT_Q, vec![req(1000, 1, 0, 1)]) });
    let l = launches(&h.tick());
    h.start(l[0].container);
    h.ok(Event::ContainerLost { container: l[0].container });
    assert_eq!(h.state_of(a), GANTRY_APP_RUNNING, "a lost container is not a failure");
    let again = launches(&h.tick());
    assert_eq!(again.len(), 1, "it runs again");
    assert_ne!(again[0].container, l[0].container);
    h.refused(Event::ContainerLost { container: l[0].container });
}

#[test]
fn a_selector_value_with_alternatives_matches_any_of_them_and_nothing_else() {
    let mut h = H::builtin();
    let mut a100 = node("a100", "r1", 8, 32, 0);
    a100.labels = labels(&[("gpu_model", "A100")]);
    let mut v100 = node("v100", "r1", 8, 32, 0);
    v100.labels = labels(&[("gpu_model", "V100")]);
    h.register(a100);
    h.register(v100);
    let mut either = req(8000, 1, 0, 1);
    either.selector = labels(&[("gpu_model", "H100|V100")]);
    let mut neither = req(1000, 1, 0, 1);
    neither.selector = labels(&[("gpu_model", "H100|T4")]);
    let ok = h.submit(app("either", DEFAULT_Q, vec![either]));
    h.submit(app("neither", DEFAULT_Q, vec![neither]));
    let l = launches(&h.tick());
    assert_eq!(l.len(), 1, "only the request one of whose models exists is placed: {l:?}");
    assert_eq!((l[0].app, l[0].node), (ok, NodeId(1)), "on the V100 node, the A100 one does not match");

    // The validator applies the same rule to a plugin's decisions.
    let hook: HookFn = Box::new(|view, out| {
        for &r in view.pending {
            out.place(r, 0); // always node 0 (the A100)
        }
    });
    let mut p =
        H::with(engine_with(EngineConfig::default(), Profile { place: Some(0), ..Default::default() }, hook));
    let mut a100 = node("a100", "r1", 8, 32, 0);
    a100.labels = labels(&[("gpu_model", "A100")]);
    p.register(a100);
    let mut wrong = req(1000, 1, 0, 1);
    wrong.selector = labels(&[("gpu_model", "H100|V100")]);
    let mut right = req(1000, 1, 0, 1);
    right.selector = labels(&[("gpu_model", "V100|A100")]);
    p.submit(app("wrong", DEFAULT_Q, vec![wrong]));
    let good = p.submit(app("right", DEFAULT_Q, vec![right]));
    let l = launches(&p.tick());
    assert_eq!(l.iter().map(|x| x.app).collect::<Vec<_>>(), vec![good]);
    assert_eq!(p.e.stats().rejected.get(RejectReason::SelectorMismatch), 1);
}

// =============================================================================================
// The downscale signal and measured usage
// =============================================================================================

fn idle(h: &H) -> Vec<(String, u64, u32)> {
    let st = h.e.state();
    h.e.idle_nodes()
        .iter()
        .map(|n| (st.str(st.nodes()[n.index as usize].name).to_owned(), n.since_ms, n.state))
        .collect()
}

#[test]
fn idle_nodes_are_the_empty_live_nodes_with_the_time_they_emptied() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    h.t = 500;
    h.register(node("n2", "r1", 8, 32, 0));
    assert_eq!(idle(&h), [("n1".into(), 0, GANTRY_NODE_RUNNING), ("n2".into(), 500, GANTRY_NODE_RUNNING)]);

    h.submit(app("x", DEFAULT_Q, vec![req(1000, 1, 0, 2)]));
    let l = launches(&h.tick()); // t = 1500, first fit: both on n1
    assert!(l.iter().all(|x| x.node == NodeId(0)));
    assert_eq!(idle(&h), [("n2".into(), 500, GANTRY_NODE_RUNNING)], "a node with containers is not idle");
    assert_eq!(h.e.state().node_meta(0).map(|m| m.live_containers), Some(2));

    // Re-registering a busy node or an idle one changes neither.
    h.t = 2_000;
    h.register(node("n2", "r1", 8, 32, 0));
    assert_eq!(idle(&h), [("n2".into(), 500, GANTRY_NODE_RUNNING)]);

    // The node empties when its last container exits, not before.
    h.t = 3_000;
    h.exit(l[0].container, 0);
    assert_eq!(idle(&h).len(), 1);
    h.t = 4_000;
    h.exit(l[1].container, 0);
    assert_eq!(
        idle(&h),
        [("n2".into(), 500, GANTRY_NODE_RUNNING), ("n1".into(), 4_000, GANTRY_NODE_RUNNING)]
    );

    // A drained empty node is still listed (with its state): an autoscaler drains, then removes.
    h.set_node("n1", NodeCondition::Draining);
    assert_eq!(idle(&h)[1], ("n1".into(), 4_000, GANTRY_NODE_DRAINING));

    // A lost node is not removable; back from the dead, it is empty from its return on.
    h.lose("n2");
    assert_eq!(idle(&h), [("n1".into(), 4_000, GANTRY_NODE_DRAINING)]);
    h.t = 9_000;
    h.register(node("n2", "r1", 8, 32, 0));
    assert_eq!(idle(&h)[1], ("n2".into(), 9_000, GANTRY_NODE_RUNNING));
}

#[test]
fn a_node_lost_with_containers_is_idle_from_its_return() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    h.submit(app("x", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    h.tick();
    assert!(idle(&h).is_empty());
    h.t = 5_000;
    h.lose("n1");
    assert!(idle(&h).is_empty(), "lost nodes are never removable");
    h.t = 7_000;
    h.register(node("n1", "r1", 8, 32, 0));
    assert_eq!(idle(&h), [("n1".into(), 7_000, GANTRY_NODE_RUNNING)]);
}

#[test]
fn measured_usage_reaches_plugins_and_is_forgotten_when_the_node_is_lost() {
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<GantryNodeUsage>>>> = Default::default();
    let record = seen.clone();
    let hook: HookFn = Box::new(move |view, _out| {
        assert_eq!(view.node_usage.len(), view.nodes.len(), "node_usage is parallel to nodes");
        record.lock().expect("lock").push(view.node_usage.to_vec());
    });
    let mut h =
        H::with(engine_with(EngineConfig::default(), Profile { place: Some(0), ..Default::default() }, hook));
    h.register(node("n1", "r1", 8, 32, 0));
    h.register(node("n2", "r1", 8, 32, 0));
    h.t = 2_000;
    h.ok(Event::NodeUsageReported { node: "n2".into(), used: res(1500, 3, 1) });
    h.submit(app("x", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    h.tick();
    let last = seen.lock().expect("lock").last().cloned().expect("place was called");
    assert_eq!(last[0], GantryNodeUsage::default(), "never sampled: all zero");
    assert_eq!(
        last[1],
        GantryNodeUsage {
            cpu_millis: 1500,
            memory_bytes: 3 * GIB,
            gpus_busy: 1,
            reserved: 0,
            sampled_ms: 2_000
        }
    );

    assert_eq!(
        h.refused(Event::NodeUsageReported { node: "ghost".into(), used: res(1, 1, 0) }),
        EngineError::UnknownNode("ghost".into())
    );
    h.lose("n2");
    assert_eq!(h.e.state().node_usage()[1], GantryNodeUsage::default(), "a lost node's sample is dropped");
    assert!(matches!(
        h.refused(Event::NodeUsageReported { node: "n2".into(), used: res(1, 1, 0) }),
        EngineError::Conflict(_)
    ));
}

// =============================================================================================
// Preemption candidates (two phases, ABI 1.2)
// =============================================================================================

/// The candidates are exactly the latest rebalance call's marks: new marks start their clock,
/// repeated ones keep it, missing ones are cancelled; a PREEMPT clears the mark and is counted
/// against the queue; bad marks are rejected.
#[test]
fn preemption_marks_follow_the_latest_rebalance_call() {
    // Per call: the container indexes to mark, and to preempt.
    let script: Vec<(Vec<u32>, Vec<u32>)> = vec![
        (vec![0, 1], vec![]),
        (vec![1, 2], vec![]),
        (vec![2, 2, 99], vec![]), // a duplicate and an unknown index: both rejected
        (vec![], vec![2]),
        (vec![2], vec![]), // stopping: rejected
        (vec![], vec![]),  // call 5 kills 2 (below)
    ];
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let hook: HookFn = Box::new(move |view, out| {
        let call = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Containers in id order, so the script's numbers do not depend on array positions.
        let mut by_id: Vec<(u64, u32)> =
            view.containers.iter().enumerate().map(|(i, c)| (c.id, i as u32)).collect();
        by_id.sort();
        let index = |k: u32| by_id.get(k as usize).map_or(k, |&(_, i)| i);
        if let Some((marks, preempts)) = script.get(call) {
            for &m in marks {
                out.mark_preempt(index(m));
            }
            for &p in preempts {
                out.preempt(index(p), 1_000);
            }
        }
        if call == 5 {
            out.kill(index(2));
        }
    });
    let config = EngineConfig { rebalance_interval_ms: 1, ..Default::default() };
    let mut h = H::with(engine_with(config, Profile { rebalance: Some(0), ..Default::default() }, hook));
    h.register(node("n1", "r1", 8, 32, 0));
    h.submit(app("x", DEFAULT_Q, vec![req(1000, 1, 0, 3)]));
    let l = launches(&h.tick()); // call 0: marks the first two
    assert_eq!(l.len(), 3);
    let ids: Vec<ContainerId> = l.iter().map(|x| x.container).collect();
    let candidate = |h: &H, c: ContainerId| {
        let i = h.e.state().container_index(c).expect("live");
        let flagged = h.container(c).flags & GANTRY_CONTAINER_PREEMPT_CANDIDATE != 0;
        let since = h.e.state().container_meta(i).and_then(|m| m.candidate_since_ms);
        assert_eq!(flagged, since.is_some(), "flag and clock agree");
        since
    };
    let t0 = h.t;
    assert_eq!(
        [candidate(&h, ids[0]), candidate(&h, ids[1]), candidate(&h, ids[2])],
        [Some(t0), Some(t0), None]
    );

    h.tick(); // call 1: 1 stays (same clock), 2 is new, 0 is cancelled
    let t1 = h.t;
    assert_eq!(
        [candidate(&h, ids[0]), candidate(&h, ids[1]), candidate(&h, ids[2])],
        [None, Some(t0), Some(t1)]
    );
    assert_eq!(h.e.stats().rejected.total(), 0);

    h.tick(); // call 2: 2 again (kept), a duplicate and an unknown index rejected; 1 cancelled
    assert_eq!([candidate(&h, ids[1]), candidate(&h, ids[2])], [None, Some(t1)]);
    assert_eq!(h.e.stats().rejected.get(RejectReason::Duplicate), 1);
    assert_eq!(h.e.stats().rejected.get(RejectReason::UnknownSubject), 1);

    let k = kills(&h.tick()); // call 3: preempt 2
    assert_eq!(k.len(), 1);
    assert_eq!((k[0].container, k[0].reason, k[0].grace_ms), (ids[2], KillReason::Preempted, 1_000));
    assert_eq!(candidate(&h, ids[2]), None, "a stopped container is no longer a candidate");
    let queue =
        h.e.state().queues().iter().position(|q| h.e.state().str(q.name) == DEFAULT_Q).expect("queue");
    let taken = h.e.stats().preempted_by_queue[queue];
    assert_eq!((taken.containers, taken.resources), (1, res(1000, 1, 0)));

    h.tick(); // call 4: marking a stopping container is refused
    assert_eq!(h.e.stats().rejected.get(RejectReason::AlreadyStopping), 1);
    assert_eq!(candidate(&h, ids[2]), None);

    let k = kills(&h.tick()); // call 5: kill it during its grace: stopped now, counted once
    assert_eq!(k.len(), 1);
    assert_eq!(h.e.stats().preempted_by_queue[queue].containers, 1, "a container is reclaimed once");
}

#[test]
fn containers_completed_before_a_restart_stay_placed_and_never_run_again() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    // Three containers wanted, two completed before the restart: one more runs, then it is done.
    h.ok(Event::AppRestored {
        app: AppId(5),
        spec: app("half", DEFAULT_Q, vec![req(100, 1, 0, 3)]),
        state: GANTRY_APP_RUNNING,
        failures: 0,
        submit_ms: 0,
        completed: vec![2],
    });
    let l = launches(&h.tick());
    assert_eq!(l.len(), 1, "only the container that had not completed runs");
    assert!(launches(&h.tick()).is_empty());
    h.start(l[0].container);
    let cmds = h.exit(l[0].container, 0);
    assert_eq!(changes_of(&cmds, AppId(5)), vec![GANTRY_APP_FINISHED]);
    // More completions than a request wants, or than it has requests: refused.
    for completed in [vec![4], vec![1, 1]] {
        h.refused(Event::AppRestored {
            app: AppId(6),
            spec: app("bad", DEFAULT_Q, vec![req(100, 1, 0, 3)]),
            state: GANTRY_APP_RUNNING,
            failures: 0,
            submit_ms: 0,
            completed,
        });
    }
}

// =============================================================================================
// What users are told: why an application waits, how its containers ended
// =============================================================================================

impl H {
    fn waiting(&self, app: AppId) -> Option<String> {
        self.e.waiting_reason(app)
    }

    fn diagnostics(&self, app: AppId) -> String {
        self.e.app_diagnostics(app).unwrap_or_else(|| panic!("{app:?} unknown"))
    }
}

fn with_labels(spec: NodeSpec, pairs: &[(&str, &str)]) -> NodeSpec {
    NodeSpec { labels: labels(pairs), ..spec }
}

fn selecting(r: RequestSpec, pairs: &[(&str, &str)]) -> RequestSpec {
    RequestSpec { selector: labels(pairs), ..r }
}

/// Requests no node can hold say so — too large in one dimension, a label no node carries, a
/// gang larger than the cluster, no node at all — and the words change as the nodes do.
#[test]
fn a_request_no_node_can_hold_says_why_it_waits() {
    let mut h = H::builtin();
    let early = h.submit(app("early", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    h.tick();
    assert_eq!(h.waiting(early).as_deref(), Some("waiting: no node is registered"));
    assert_eq!(h.diagnostics(early), "waiting: no node is registered");

    h.register(node("n1", "r1", 4, 16, 0));
    h.register(node("n2", "r1", 4, 64, 0));
    h.register(node("n3", "r2", 2, 8, 1));
    let cpu = h.submit(app("cpu", DEFAULT_Q, vec![req(64_000, 1, 0, 1)]));
    let mem = h.submit(app("mem", DEFAULT_Q, vec![req(1000, 100, 0, 1)]));
    let gpus = h.submit(app("gpus", DEFAULT_Q, vec![req(1000, 1, 4, 1)]));
    let label = h.submit(app("label", DEFAULT_Q, vec![selecting(req(1000, 1, 0, 1), &[("gpu", "a100")])]));
    let big_gang = h.submit(app("gang", DEFAULT_Q, vec![gang(2000, 1, 8)]));
    let launched = launches(&h.tick());
    assert_eq!(launched.iter().map(|l| l.app).collect::<Vec<_>>(), vec![early], "{launched:?}");
    assert_eq!(h.waiting(early), None, "cleared once it runs");
    assert_eq!(h.diagnostics(early), "");
    assert_eq!(
        h.waiting(cpu).as_deref(),
        Some("waiting: needs 64 CPU per container; the largest node has 4 CPU")
    );
    assert_eq!(
        h.waiting(mem).as_deref(),
        Some("waiting: needs 100Gi of memory per container; the largest node has 64Gi of memory")
    );
    assert_eq!(
        h.waiting(gpus).as_deref(),
        Some("waiting: needs 4 GPUs per container; the largest node has 1 GPU")
    );
    assert_eq!(h.waiting(label).as_deref(), Some("waiting: no node has label gpu=a100"));
    // 2 + 2 + 1 members of 2 CPU fit on the three nodes, even empty.
    assert_eq!(
        h.waiting(big_gang).as_deref(),
        Some(
            "waiting: gang of 8 needs room for all 8 at once; the 3 nodes it may use are registered \
             and they hold at most 5 even when empty"
        )
    );

    // A node with the label, but too small for what the request asks of it.
    h.register(with_labels(node("a1", "r3", 2, 8, 0), &[("gpu", "a100")]));
    let label_cpu =
        h.submit(app("label-cpu", DEFAULT_Q, vec![selecting(req(3000, 1, 0, 1), &[("gpu", "a100|h100")])]));
    let launched = launches(&h.tick());
    assert_eq!(launched.iter().map(|l| l.app).collect::<Vec<_>>(), vec![label], "the label came");
    assert_eq!(h.waiting(label), None);
    assert_eq!(
        h.waiting(label_cpu).as_deref(),
        Some("waiting: needs 3 CPU per container; the largest node with label gpu=a100|h100 has 2 CPU")
    );
    // One more node: the gang would fit the empty cluster (2+2+1+1+2 members), so it waits for
    // room like anyone (6 fit now).
    h.register(node("m0", "r4", 4, 16, 0));
    let launched = launches(&h.tick());
    assert!(launched.iter().all(|l| l.app != big_gang), "{launched:?}");
    assert_eq!(h.waiting(big_gang).as_deref(), Some("waiting for resources: the cluster is full"));
    assert_eq!(
        h.waiting(cpu).as_deref(),
        Some("waiting: needs 64 CPU per container; the largest node has 4 CPU"),
        "what no node can give stays said"
    );
}

/// A same-rack gang is measured against one rack; a queue at its configured maximum is named;
/// once the room is there, the reason goes.
#[test]
fn a_gang_too_large_for_a_rack_and_a_queue_at_its_maximum_say_so() {
    let queues = vec![
        QueueSpec { path: "root.dev".into(), guaranteed: 0.5, maximum: 0.5 },
        QueueSpec { path: "root.prod".into(), guaranteed: 0.5, maximum: 1.0 },
    ];
    let mut h = H::config(EngineConfig { queues, ..Default::default() });
    for (name, rack) in [("n1", "r1"), ("n2", "r1"), ("n3", "r2")] {
        h.register(node(name, rack, 4, 16, 0));
    }
    let racked = RequestSpec { rack_affinity: RackAffinity::Required, ..gang(4000, 1, 3) };
    let g = h.submit(app("racked", "root.prod", vec![racked]));
    let dev = h.submit(app("dev", "root.dev", vec![req(2000, 1, 0, 3)]));
    let placed = launches(&h.tick());
    assert_eq!(placed.iter().filter(|l| l.app == dev).count(), 3, "dev fills its 6 of 12 CPU");
    assert_eq!(
        h.waiting(g).as_deref(),
        Some(
            "waiting: gang of 3 needs room for all 3 at once; the 3 nodes it may use are registered \
             and one rack of them holds at most 2 even when empty"
        )
    );
    let more = h.submit(app("more", "root.dev", vec![req(1000, 1, 0, 1)]));
    h.tick();
    assert_eq!(h.waiting(more).as_deref(), Some("waiting: queue root.dev is at its maximum (50% of root)"));
    let first = placed.iter().find(|l| l.app == dev).expect("a dev container").container;
    h.exit(first, 0);
    let launched = launches(&h.tick());
    assert!(launched.iter().any(|l| l.app == more), "{launched:?}");
    assert_eq!(h.waiting(more), None);
}

/// The placement plugin's WAIT and the host's refusal of its decision reach the application's
/// diagnostics: a forgotten gang member no longer leaves an application waiting in silence.
#[test]
fn a_plugins_wait_and_a_refused_decision_say_why_an_app_waits() {
    // WAIT for the first pending request with code 7; place a gang one member short.
    let hook: HookFn = Box::new(|view, out| {
        for &r in view.pending {
            let req = view.requests[r as usize];
            if req.flags & GANTRY_REQUEST_GANG != 0 {
                for _ in 1..req.count {
                    out.place(r, 0);
                }
            } else {
                out.wait(r, 7);
            }
        }
    });
    let config = EngineConfig { quarantine_after: 100, ..Default::default() };
    let mut h = H::with(engine_with(config, Profile { place: Some(0), ..Default::default() }, hook));
    h.register(node("n1", "r1", 8, 32, 0));
    let held = h.submit(app("held", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let short = h.submit(app("short", DEFAULT_Q, vec![gang(1000, 1, 3)]));
    assert!(launches(&h.tick()).is_empty());
    assert_eq!(
        h.waiting(held).as_deref(),
        Some("waiting: plugin test-fn-plugin holds it back (its reason code 7)")
    );
    assert_eq!(
        h.waiting(short).as_deref(),
        Some(
            "waiting: the placement plugin test-fn-plugin's decision was refused: a gang is placed \
             whole: one placement per member, all in one call (gang_incomplete)"
        )
    );
}

/// How a container ended reaches its own diagnostics and its application's: the words its
/// driver gave (a memory-limit kill with usage and limit), the attempts used, and why the engine
/// had asked it to stop.
#[test]
fn how_a_container_ended_reaches_the_container_and_the_app() {
    let mut h = H::builtin();
    h.register(node("n1", "r1", 8, 32, 0));
    let a = h.submit(AppSpec { max_attempts: 2, ..app("hog", DEFAULT_Q, vec![req(1000, 1, 0, 1)]) });
    let c1 = launches(&h.tick())[0].container;
    h.start(c1);
    let oom = "was killed for running beyond its memory limit: 1.1Gi of 1Gi used (exit status 137)";
    let exited =
        |c: ContainerId| Event::ContainerExited { container: c, exit_code: 137, diagnostics: oom.into() };
    h.ok(exited(c1));
    let told = format!("container {} {oom}", c1.0);
    assert_eq!(h.e.container_diagnostics(c1), Some(told.as_str()));
    assert_eq!(h.diagnostics(a), format!("attempt 1 of 2 failed: {told}; it runs again"));
    let c2 = launches(&h.tick())[0].container;
    assert_eq!(h.diagnostics(a), format!("attempt 1 of 2 failed: {told}; it runs again"), "placed again");
    let cmds = h.ok(exited(c2));
    let told = format!("container {} {oom}", c2.0);
    assert_eq!(changes(&cmds), vec![(a, GANTRY_APP_FAILED, format!("{told}; 2 of 2 attempts used"))]);
    assert_eq!(h.diagnostics(a), format!("{told}; 2 of 2 attempts used"));

    // Without words the exit status is said, and a stop the engine asked for says why.
    let b = h.submit(app("b", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let c3 = launches(&h.tick())[0].container;
    h.kill_app(b);
    h.exit(c3, 143);
    assert_eq!(
        h.e.container_diagnostics(c3),
        Some(
            format!(
                "container {} exited with status 143; it had been asked to stop: its application was killed",
                c3.0
            )
            .as_str()
        )
    );

    // A container lost with its node: the app is told, and no attempt is used.
    let d = h.submit(app("d", DEFAULT_Q, vec![req(1000, 1, 0, 1)]));
    let c4 = launches(&h.tick())[0].container;
    h.lose("n1");
    assert_eq!(
        h.diagnostics(d),
        format!(
            "container {} was lost with its node n1 (no word from its agent); it runs again (a loss uses no attempt)",
            c4.0
        )
    );
    h.tick();
    assert_eq!(
        h.diagnostics(d),
        format!(
            "waiting: no node is registered; container {} was lost with its node n1 (no word from its \
             agent); it runs again (a loss uses no attempt)",
            c4.0
        )
    );
}

/// A submission asking more of a resource than the largest node that is not lost has is
/// refused, naming the resource and the maximum; with no node registered nothing is refused.
#[test]
fn a_submission_larger_than_every_node_is_refused_unless_no_node_is_registered() {
    let mut h = H::builtin();
    let huge = app("huge", DEFAULT_Q, vec![req(1000, 1, 0, 1), req(64_000, 1, 0, 1)]);
    assert_eq!(h.e.check_fits(&huge), Ok(()), "no node yet: nothing to measure against");
    h.register(node("n1", "r1", 16, 64, 0));
    h.register(node("n2", "r1", 4, 128, 2));
    let refused = h.e.check_fits(&huge).expect_err("64 CPU on 16-CPU nodes");
    assert_eq!(
        refused.to_string(),
        "invalid resource request: request 1 asks for 64 CPU per container, more than the maximum \
         allocation of 16 CPU (the largest registered node's)"
    );
    // Each dimension is measured on its own: 16 CPU on n1, 128Gi on n2.
    assert_eq!(h.e.check_fits(&app("fits", DEFAULT_Q, vec![req(16_000, 128, 2, 1)])), Ok(()));
    let gpus = h.e.check_fits(&app("gpus", DEFAULT_Q, vec![req(1000, 1, 4, 1)])).expect_err("4 GPUs");
    assert!(
        gpus.to_string().contains("4 GPUs per container, more than the maximum allocation of 2 GPUs"),
        "{gpus}"
    );
    // A lost node is no measure; when every node is lost, nothing is.
    h.lose("n1");
    assert!(h.e.check_fits(&app("cpu", DEFAULT_Q, vec![req(8000, 1, 0, 1)])).is_err());
    h.lose("n2");
    assert_eq!(h.e.check_fits(&huge), Ok(()));
}
