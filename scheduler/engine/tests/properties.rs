//! Property tests of the engine: random clusters, queue hierarchies, applications and a random
//! (often wrong, sometimes malicious) placement plugin, interleaved with random events. After
//! every step the engine's bookkeeping must be consistent, gangs must launch whole, and no
//! acknowledged application may ever be lost.
//!
//! The runs are deterministic: a fixed proptest seed, no failure persistence, and the plugin draws
//! only from the view's seed and a salt from the strategy.

use gantry_engine::{
    AppId, AppSpec, Command, ContainerId, Engine, EngineConfig, EngineError, Event, GpuSpec, NodeCondition,
    NodeSpec, Policy, Profile, QueueSpec, RackAffinity, RequestSpec, Resources, StaticPolicy,
};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use proptest::prelude::*;
use proptest::test_runner::{RngSeed, TestCaseError};
use std::collections::{BTreeMap, BTreeSet};

mod common;
use common::{Rng, snapshot};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Labels nodes may carry and selectors may ask for.
const LABEL_POOL: [(&str, &str); 4] = [("zone", "a"), ("zone", "b"), ("disk", "ssd"), ("arch", "arm")];

fn config(cases: u32, seed: u64) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 1_000,
        ..ProptestConfig::default()
    }
}

fn pool_labels(mask: u8) -> Vec<(String, String)> {
    LABEL_POOL
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, (k, v))| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn is_live(state: u32) -> bool {
    matches!(state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING | GANTRY_CONTAINER_STOPPING)
}

fn is_terminal(state: u32) -> bool {
    matches!(state, GANTRY_APP_FINISHED | GANTRY_APP_FAILED | GANTRY_APP_KILLED | GANTRY_APP_REJECTED)
}

// =============================================================================================
// Generators
// =============================================================================================

#[derive(Debug, Clone)]
struct NodeGen {
    cores: u64,
    mem_gib: u64,
    gpus: u32,
    listed_gpus: bool,
    rack: u8,
    labels: u8,
}

fn node_gen(min_cores: u64, min_mem_gib: u64, gpus: bool) -> impl Strategy<Value = NodeGen> {
    let gpu = if gpus { prop_oneof![3 => Just(0u32), 2 => 1u32..=4].boxed() } else { Just(0u32).boxed() };
    (min_cores..=16, min_mem_gib..=64, gpu, any::<bool>(), 0u8..3, 0u8..16).prop_map(
        |(cores, mem_gib, gpus, listed_gpus, rack, labels)| NodeGen {
            cores,
            mem_gib,
            gpus,
            listed_gpus,
            rack,
            labels,
        },
    )
}

fn build_nodes(racks: u8, gens: &[NodeGen]) -> Vec<NodeSpec> {
    gens.iter()
        .enumerate()
        .map(|(i, g)| NodeSpec {
            name: format!("n{i}"),
            rack: format!("rack{}", g.rack % racks),
            labels: pool_labels(g.labels),
            capacity: Resources::new(g.cores * 1000, g.mem_gib * GIB, g.gpus),
            gpu_list: if g.listed_gpus { gpu_list(g.gpus) } else { Vec::new() },
        })
        .collect()
}

/// GPUs with indexes that are not their positions (1, 3, 5, …).
fn gpu_list(n: u32) -> Vec<GpuSpec> {
    (0..n).map(|k| GpuSpec { index: 2 * k + 1, model: "L4".into(), memory_bytes: 24 * GIB }).collect()
}

/// A top-level queue: weight and headroom (percent), and children (empty: a leaf).
#[derive(Debug, Clone)]
struct QueueGen {
    weight: u8,
    headroom: u8,
    children: Vec<(u8, u8)>,
}

fn queues_gen() -> impl Strategy<Value = Vec<QueueGen>> {
    prop::collection::vec(
        (0u8..=100, 0u8..=100, prop::collection::vec((0u8..=100, 0u8..=100), 0..=2))
            .prop_map(|(weight, headroom, children)| QueueGen { weight, headroom, children }),
        1..=3,
    )
}

/// Guaranteed shares that sum to at most 1, maximums in guaranteed..=1.
fn shares(weight: u8, headroom: u8, siblings: usize) -> (f64, f64) {
    let g = f64::from(weight) / 100.0 / siblings as f64;
    let m = (g + (1.0 - g) * f64::from(headroom) / 100.0).clamp(g, 1.0);
    (g, m)
}

/// The queue specs and the leaf paths.
fn build_queues(gens: &[QueueGen]) -> (Vec<QueueSpec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut leaves = Vec::new();
    for (i, q) in gens.iter().enumerate() {
        let path = format!("root.q{i}");
        let (guaranteed, maximum) = shares(q.weight, q.headroom, gens.len());
        specs.push(QueueSpec { path: path.clone(), guaranteed, maximum });
        if q.children.is_empty() {
            leaves.push(path);
            continue;
        }
        for (j, &(w, h)) in q.children.iter().enumerate() {
            let child = format!("{path}.c{j}");
            let (guaranteed, maximum) = shares(w, h, q.children.len());
            specs.push(QueueSpec { path: child.clone(), guaranteed, maximum });
            leaves.push(child);
        }
    }
    (specs, leaves)
}

#[derive(Debug, Clone)]
struct ReqGen {
    cpu_millis: u64,
    mem_bytes: u64,
    gpus: u32,
    count: u32,
    gang: bool,
    selector: u8,
    rack: u8,
    priority: i32,
}

#[derive(Debug, Clone)]
struct AppGen {
    leaf: usize,
    priority: i32,
    max_attempts: u32,
    requests: Vec<ReqGen>,
}

/// Bounds of generated apps.
#[derive(Debug, Clone, Copy)]
struct AppBounds {
    max_cpu_millis: u64,
    max_mem_units: u64,
    gpus: bool,
    selectors: bool,
    required_racks: bool,
}

const WILD: AppBounds =
    AppBounds { max_cpu_millis: 4_000, max_mem_units: 32, gpus: true, selectors: true, required_racks: true };

fn req_gen(b: AppBounds) -> impl Strategy<Value = ReqGen> {
    let gpus = if b.gpus { prop_oneof![4 => Just(0u32), 1 => 1u32..=2].boxed() } else { Just(0u32).boxed() };
    let selector =
        if b.selectors { prop_oneof![3 => Just(0u8), 1 => 1u8..16].boxed() } else { Just(0u8).boxed() };
    let rack = if b.required_racks { 0u8..3 } else { 0u8..2 };
    (
        (1..=b.max_cpu_millis / 100, 0..=b.max_mem_units, gpus),
        (1u32..=6, prop::bool::weighted(0.35), selector, rack, -1i32..=1),
    )
        .prop_map(|((cpu, mem, gpus), (count, gang, selector, rack, priority))| ReqGen {
            cpu_millis: cpu * 100,
            mem_bytes: mem * 256 * MIB,
            gpus,
            count,
            gang,
            selector,
            rack,
            priority,
        })
}

fn app_gen(b: AppBounds) -> impl Strategy<Value = AppGen> {
    (0usize..16, -1i32..=1, 0u32..=4, prop::collection::vec(req_gen(b), 1..=3)).prop_map(
        |(leaf, priority, max_attempts, requests)| AppGen { leaf, priority, max_attempts, requests },
    )
}

fn build_app(g: &AppGen, leaves: &[String], k: usize) -> AppSpec {
    AppSpec {
        name: format!("app{k}"),
        queue: leaves[g.leaf % leaves.len()].clone(),
        user: format!("user{}", k % 3),
        priority: g.priority,
        max_attempts: g.max_attempts,
        requests: g
            .requests
            .iter()
            .map(|r| RequestSpec {
                resources: Resources::new(r.cpu_millis, r.mem_bytes, r.gpus),
                count: r.count,
                gang: r.gang,
                priority: r.priority,
                selector: pool_labels(r.selector),
                rack_affinity: match r.rack {
                    0 => RackAffinity::None,
                    1 => RackAffinity::Preferred,
                    _ => RackAffinity::Required,
                },
                ..Default::default()
            })
            .collect(),
    }
}

/// One step of a scenario. Indexes are reduced modulo what exists when the step runs.
#[derive(Debug, Clone)]
enum Op {
    /// Advance the clock by this many ms and run a cycle.
    Tick(u16),
    /// Start an allocated container.
    Start(u16),
    /// A live container exits with this code.
    Exit(u16, i32),
    /// An exit for a container that is not live (ended, or never existed): must be refused.
    ExitStale(u16),
    /// Lose a node.
    Lose(u8),
    /// Re-register a node: 0 same, 1 halved, 2 doubled, 3 new labels, 4 one more GPU.
    Reregister(u8, u8),
    /// Set a node's condition: 0 running, 1 draining, 2 unhealthy.
    SetNode(u8, u8),
    /// Kill an acknowledged app (live or not).
    Kill(u16),
    /// Submit an app.
    Submit(AppGen),
}

fn op_gen(b: AppBounds, resize: bool) -> impl Strategy<Value = Op> {
    let exit_code = prop_oneof![5 => Just(0i32), 2 => Just(1), 1 => Just(137), 1 => Just(-1)];
    let variant = if resize { 0u8..5 } else { 0u8..1 };
    prop_oneof![
        6 => (0u16..3_000).prop_map(Op::Tick),
        5 => any::<u16>().prop_map(Op::Start),
        6 => (any::<u16>(), exit_code).prop_map(|(p, c)| Op::Exit(p, c)),
        1 => any::<u16>().prop_map(Op::ExitStale),
        1 => any::<u8>().prop_map(Op::Lose),
        1 => (any::<u8>(), variant).prop_map(|(n, v)| Op::Reregister(n, v)),
        1 => (any::<u8>(), 0u8..3).prop_map(|(n, c)| Op::SetNode(n, c)),
        1 => any::<u16>().prop_map(Op::Kill),
        2 => app_gen(b).prop_map(Op::Submit),
    ]
}

#[derive(Debug, Clone)]
struct Scenario {
    nodes: Vec<NodeSpec>,
    queues: Vec<QueueGen>,
    apps: Vec<AppGen>,
    ops: Vec<Op>,
    salt: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        1u8..=3,
        prop::collection::vec(node_gen(1, 1, true), 1..=12),
        queues_gen(),
        prop::collection::vec(app_gen(WILD), 1..=6),
        prop::collection::vec(op_gen(WILD, true), 10..=60),
        any::<u64>(),
    )
        .prop_map(|(racks, nodes, queues, apps, ops, salt)| Scenario {
            nodes: build_nodes(racks, &nodes),
            queues,
            apps,
            ops,
            salt,
        })
}

// =============================================================================================
// A random placement plugin
// =============================================================================================

/// Places at random: sometimes sensibly (fit-aware), sometimes blindly, sometimes for requests
/// that are not pending or do not exist, on nodes that do not exist, repeated, with garbage kinds;
/// now and then it fails outright.
struct ChaosPlacer {
    salt: u64,
}

impl ChaosPlacer {
    fn sensible(
        &self,
        view: &View<'_>,
        rng: &mut Rng,
        r: u32,
        alloc: &mut [GantryResources],
        out: &mut Decisions,
    ) {
        let req = &view.requests[r as usize];
        let gang = req.flags & GANTRY_REQUEST_GANG != 0;
        let want = if gang { req.count } else { rng.below(u64::from(req.count - req.placed) + 1) as u32 };
        let n = view.nodes.len();
        let start = rng.below32(n) as usize;
        for _ in 0..want {
            let found = (0..n).map(|k| (start + k) % n).find(|&i| {
                let node = &view.nodes[i];
                node.state == GANTRY_NODE_RUNNING
                    && view.node_matches(node, req.selector)
                    && alloc[i].plus(&req.resources).fits_in(&node.capacity)
            });
            match found {
                Some(i) => {
                    alloc[i] = alloc[i].plus(&req.resources);
                    out.place(r, i as u32);
                }
                // A gang member with nowhere to go: place it anyway, and the gang is rejected.
                None if gang => out.place(r, rng.below32(n)),
                None => break,
            }
        }
    }
}

impl Plugin for ChaosPlacer {
    const NAME: &'static core::ffi::CStr = c"test-chaos-placer";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Ok(ChaosPlacer { salt: 0 })
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let mut rng = Rng::new(view.seed ^ self.salt);
        if rng.chance(25) {
            return Err(PluginError::new("chaos: no placement this cycle"));
        }
        let nodes = view.nodes.len();
        let mut alloc: Vec<GantryResources> = view.nodes.iter().map(|n| n.allocated).collect();
        for &r in view.pending {
            let req = &view.requests[r as usize];
            match rng.below(10) {
                0..=4 => self.sensible(view, &mut rng, r, &mut alloc, out),
                5 | 6 => {
                    // Blind: any number of places (even more than asked) on random nodes, now and
                    // then one past the last node.
                    for _ in 0..rng.below(u64::from(req.count) + 2) {
                        let node =
                            if rng.chance(30) { nodes as u32 + rng.below32(3) } else { rng.below32(nodes) };
                        out.place(r, node);
                    }
                }
                7 => out.wait(r, rng.next() as u32),
                _ => {}
            }
        }
        if rng.chance(4) {
            for _ in 0..=rng.below(2) {
                match rng.below(6) {
                    // A request past the end.
                    0 => out.place(view.requests.len() as u32 + rng.below32(3), rng.below32(nodes)),
                    // Any request, pending or not.
                    1 => out.place(rng.below32(view.requests.len()), rng.below32(nodes)),
                    // A kind that does not belong to `place`, or to anything.
                    2 => {
                        let kinds = [
                            0,
                            GANTRY_DECISION_ORDER,
                            GANTRY_DECISION_ACCEPT_APP,
                            GANTRY_DECISION_KILL,
                            99,
                            u32::MAX,
                        ];
                        out.push(GantryDecision {
                            kind: kinds[rng.below32(kinds.len()) as usize],
                            subject: rng.below32(view.requests.len() + 1),
                            target: rng.below32(nodes + 1),
                            reason: 0,
                            value: rng.next(),
                        });
                    }
                    // Repeat an earlier decision.
                    3 => {
                        if !out.is_empty() {
                            let d = out.as_slice()[rng.below32(out.len()) as usize];
                            out.push(d);
                        }
                    }
                    // WAIT for a request that does not exist.
                    4 => out.wait(view.requests.len() as u32 + rng.below32(5), 7),
                    _ => {
                        // Repeat every decision so far (duplicated gangs, too many places).
                        let all = out.as_slice().to_vec();
                        out.extend_from_slice(&all);
                    }
                }
            }
        }
        Ok(())
    }
}

// =============================================================================================
// The simulation and its checks
// =============================================================================================

/// What the event is expected to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Accept,
    Refuse,
    Either,
}

/// One Launch of a tick: container, node index, resources, GPU indexes.
type LaunchedMember = (ContainerId, u32, Resources, Vec<u32>);

struct Sim {
    e: Engine,
    t: u64,
    nodes: Vec<NodeSpec>,
    leaves: Vec<String>,
    /// Every acknowledged app and its spec.
    specs: BTreeMap<AppId, AppSpec>,
    /// The last state each app was reported in (NEW until the first AppStateChanged).
    reported: BTreeMap<AppId, u32>,
    /// Every container id ever launched.
    launched: Vec<ContainerId>,
    /// Containers that completed (exit 0, not asked to stop), by (app, request index in the app).
    completed: BTreeMap<(AppId, u32), u32>,
    submitted: usize,
    builtin_only: bool,
}

impl Sim {
    fn new(s: &Scenario, queues: &[QueueGen], plugin: bool) -> Result<Sim, TestCaseError> {
        let (queue_specs, mut leaves) = build_queues(queues);
        if leaves.is_empty() {
            leaves.push("root.default".to_owned());
        }
        let config = EngineConfig {
            seed: s.salt.rotate_left(17),
            queues: queue_specs,
            quarantine_after: 3,
            quarantine_ms: 5_000,
            ..Default::default()
        };
        let e = if plugin {
            let p: Box<dyn Policy> = Box::new(StaticPolicy::new(ChaosPlacer { salt: s.salt }));
            Engine::new(config, vec![p], Profile { place: Some(0), ..Default::default() })
        } else {
            Engine::builtin(config)
        };
        let e = e.map_err(|err| TestCaseError::fail(format!("engine refused a valid config: {err}")))?;
        let mut sim = Sim {
            e,
            t: 0,
            nodes: s.nodes.clone(),
            leaves,
            specs: BTreeMap::new(),
            reported: BTreeMap::new(),
            launched: Vec::new(),
            completed: BTreeMap::new(),
            submitted: 0,
            builtin_only: !plugin,
        };
        for n in s.nodes.clone() {
            sim.apply(Event::NodeRegistered(n), Expect::Accept)?;
        }
        for a in &s.apps {
            sim.submit(a)?;
        }
        Ok(sim)
    }

    fn submit(&mut self, g: &AppGen) -> Result<(), TestCaseError> {
        let spec = build_app(g, &self.leaves, self.submitted);
        self.submitted += 1;
        self.apply(Event::AppSubmitted(spec), Expect::Accept)
    }

    fn live(&self) -> Vec<GantryContainer> {
        self.e.state().containers().iter().filter(|c| is_live(c.state)).copied().collect()
    }

    fn tick(&mut self, advance: u64) -> Result<(), TestCaseError> {
        self.t += advance;
        self.apply(Event::Tick, Expect::Accept)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let n = self.nodes.len();
        match op {
            Op::Tick(ms) => self.tick(u64::from(*ms)),
            Op::Start(p) => {
                let allocated: Vec<_> =
                    self.live().into_iter().filter(|c| c.state == GANTRY_CONTAINER_ALLOCATED).collect();
                if allocated.is_empty() {
                    return Ok(());
                }
                let c = allocated[*p as usize % allocated.len()];
                self.apply(Event::ContainerStarted { container: ContainerId(c.id) }, Expect::Accept)
            }
            Op::Exit(p, code) => {
                let live = self.live();
                if live.is_empty() {
                    return Ok(());
                }
                let c = live[*p as usize % live.len()];
                self.apply(Event::container_exited(ContainerId(c.id), *code), Expect::Accept)
            }
            Op::ExitStale(p) => {
                let live: BTreeSet<u64> = self.live().iter().map(|c| c.id).collect();
                let ended: Vec<ContainerId> =
                    self.launched.iter().copied().filter(|c| !live.contains(&c.0)).collect();
                let c = if ended.is_empty() || *p % 4 == 0 {
                    ContainerId(1_000_000 + u64::from(*p))
                } else {
                    ended[*p as usize % ended.len()]
                };
                self.apply(Event::container_exited(c, 0), Expect::Refuse)
            }
            Op::Lose(i) => {
                let name = self.nodes[*i as usize % n].name.clone();
                self.apply(Event::NodeLost { node: name }, Expect::Accept)
            }
            Op::Reregister(i, variant) => {
                let k = *i as usize % n;
                let mut spec = self.nodes[k].clone();
                let expect = match variant {
                    0 => Expect::Accept,
                    1 => {
                        let c = &mut spec.capacity;
                        *c = Resources::new(c.cpu_millis / 2, c.memory_bytes / 2, c.gpus / 2);
                        if !spec.gpu_list.is_empty() {
                            spec.gpu_list = gpu_list(c.gpus);
                        }
                        Expect::Either
                    }
                    2 => {
                        let c = &mut spec.capacity;
                        *c = Resources::new(c.cpu_millis * 2, c.memory_bytes * 2, c.gpus);
                        Expect::Accept
                    }
                    3 => {
                        let mask = LABEL_POOL
                            .iter()
                            .enumerate()
                            .filter(|(_, (k, v))| !spec.labels.iter().any(|(a, b)| a == k && b == v))
                            .fold(0u8, |m, (j, _)| m | (1 << j));
                        spec.labels = pool_labels(mask);
                        Expect::Accept
                    }
                    _ => {
                        spec.capacity.gpus += 1;
                        if !spec.gpu_list.is_empty() {
                            spec.gpu_list = gpu_list(spec.capacity.gpus);
                        }
                        Expect::Either
                    }
                };
                let accepted = self.apply_then(Event::NodeRegistered(spec.clone()), expect)?;
                if accepted {
                    self.nodes[k] = spec;
                }
                Ok(())
            }
            Op::SetNode(i, cond) => {
                let k = *i as usize % n;
                let lost = self.e.state().nodes()[k].state == GANTRY_NODE_LOST;
                let state = match cond {
                    0 => NodeCondition::Running,
                    1 => NodeCondition::Draining,
                    _ => NodeCondition::Unhealthy,
                };
                let expect = if lost { Expect::Refuse } else { Expect::Accept };
                self.apply(Event::NodeStateChanged { node: self.nodes[k].name.clone(), state }, expect)
            }
            Op::Kill(p) => {
                if self.specs.is_empty() {
                    return Ok(());
                }
                let ids: Vec<AppId> = self.specs.keys().copied().collect();
                let id = ids[*p as usize % ids.len()];
                let s = self.e.state();
                let live_and_running =
                    s.app_index(id).is_some_and(|i| !is_terminal(s.apps()[i as usize].state));
                let expect = if live_and_running { Expect::Accept } else { Expect::Refuse };
                self.apply(Event::AppKillRequested { app: id }, expect)
            }
            Op::Submit(g) => self.submit(g),
        }
    }

    fn apply(&mut self, ev: Event, expect: Expect) -> Result<(), TestCaseError> {
        self.apply_then(ev, expect).map(|_| ())
    }

    /// Applies an event, checks its outcome against `expect` and every property; returns whether
    /// it was accepted.
    fn apply_then(&mut self, ev: Event, expect: Expect) -> Result<bool, TestCaseError> {
        let before = snapshot(&self.e);
        let shown = format!("{ev:?}");
        let is_tick = matches!(ev, Event::Tick);
        let submitted = match &ev {
            Event::AppSubmitted(spec) => Some(spec.clone()),
            _ => None,
        };
        let exited = match ev {
            Event::ContainerExited { container, .. } => Some(container),
            _ => None,
        };
        let result = self.e.handle(self.t, ev);
        let accepted = result.is_ok();
        match result {
            Ok(cmds) => {
                if let Some(id) = exited {
                    self.note_exit(id);
                }
                prop_assert!(
                    expect != Expect::Refuse,
                    "{} was accepted but must be refused: {:?}",
                    shown,
                    cmds
                );
                self.check_commands(&shown, is_tick, submitted, &cmds)?;
            }
            Err(err) => {
                prop_assert!(expect != Expect::Accept, "{} was refused: {}", shown, err);
                if let Some(stale) = shown.strip_prefix("ContainerExited") {
                    prop_assert!(matches!(err, EngineError::UnknownContainer(_)), "{}: {}", stale, err);
                }
                let after = snapshot(&self.e);
                prop_assert!(before == after, "refused {} ({}) changed the state", shown, err);
            }
        }
        self.check_state(&shown)?;
        Ok(accepted)
    }

    fn check_commands(
        &mut self,
        shown: &str,
        is_tick: bool,
        submitted: Option<AppSpec>,
        cmds: &[Command],
    ) -> Result<(), TestCaseError> {
        let s = self.e.state();
        let mut groups: BTreeMap<(AppId, u32), Vec<LaunchedMember>> = BTreeMap::new();
        for c in cmds {
            match c {
                Command::AppAccepted { app } => {
                    let spec = submitted.clone();
                    prop_assert!(spec.is_some(), "AppAccepted outside a submission: {}", shown);
                    prop_assert!(!self.specs.contains_key(app), "app id {:?} reused", app);
                    self.specs.insert(*app, spec.expect("checked"));
                    self.reported.insert(*app, GANTRY_APP_NEW);
                }
                Command::AppStateChanged { app, state, .. } => {
                    let prev = self.reported.get(app).copied();
                    prop_assert!(prev.is_some(), "state change of unknown app {:?}", app);
                    let prev = prev.expect("checked");
                    prop_assert!(
                        !is_terminal(prev),
                        "{:?} changed state after ending: {} -> {}",
                        app,
                        prev,
                        state
                    );
                    prop_assert!(*state != prev, "{:?} re-reported state {}", app, state);
                    self.reported.insert(*app, *state);
                }
                Command::Launch { container, app, request, node, resources, gpus } => {
                    prop_assert!(is_tick, "Launch outside a cycle: {}", shown);
                    self.launched.push(*container);
                    groups.entry((*app, *request)).or_default().push((
                        *container,
                        node.0,
                        *resources,
                        gpus.clone(),
                    ));
                }
                Command::Kill { container, .. } => {
                    prop_assert!(
                        s.container_index(*container).is_some(),
                        "Kill of unknown container {:?}",
                        container
                    );
                }
                Command::ReservationAdmitted { .. }
                | Command::ReservationRejected { .. }
                | Command::ReservationReplanned { .. }
                | Command::ReservationEnded { .. } => {
                    prop_assert!(false, "no reservations were asked for: {:?}", c);
                }
            }
        }
        for ((app, request), members) in &groups {
            let spec = &self.specs[app];
            let r = &spec.requests[*request as usize];
            if r.gang {
                prop_assert_eq!(
                    members.len(),
                    r.count as usize,
                    "gang {:?}/{} launched partly",
                    app,
                    request
                );
            } else {
                prop_assert!(members.len() <= r.count as usize, "{:?}/{} launched too many", app, request);
            }
            let mut racks = BTreeSet::new();
            for (container, node, resources, gpus) in members {
                prop_assert_eq!(*resources, r.resources);
                let n = s.nodes()[*node as usize];
                prop_assert_eq!(n.state, GANTRY_NODE_RUNNING, "launch on an unschedulable node");
                racks.insert(s.str(n.rack).to_owned());
                // The GPUs named are distinct GPUs of that node, held by this container.
                prop_assert_eq!(gpus.len(), r.resources.gpus as usize);
                let ci = s.container_index(*container).expect("launched container is known");
                let held: BTreeSet<u32> = View::range(s.gpus(), n.gpus)
                    .iter()
                    .filter(|g| g.container == ci)
                    .map(|g| g.index)
                    .collect();
                prop_assert_eq!(&held, &gpus.iter().copied().collect::<BTreeSet<u32>>());
            }
            if r.gang && r.rack_affinity == RackAffinity::Required {
                prop_assert_eq!(racks.len(), 1, "same-rack gang spread over racks {:?}", racks);
            }
            // The queue and its ancestors stay within their maximums after placing.
            let a = s.apps()[s.app_index(*app).expect("launched app is live") as usize];
            let mut q = a.queue;
            while let Some(rec) = s.queues().get(q as usize) {
                prop_assert!(
                    rec.used.fits_in(&rec.absolute_maximum),
                    "queue {} used {:?} > max {:?}",
                    s.str(rec.name),
                    rec.used,
                    rec.absolute_maximum
                );
                q = rec.parent;
            }
        }
        Ok(())
    }

    fn check_state(&self, shown: &str) -> Result<(), TestCaseError> {
        let s = self.e.state();
        if let Err(msg) = s.check_invariants() {
            prop_assert!(false, "invariants broken after {}: {}", shown, msg);
        }
        for (&id, &reported) in &self.reported {
            let state = self.e.app_state(id);
            prop_assert!(state.is_some(), "acknowledged app {:?} was lost after {}", id, shown);
            let state = state.expect("checked");
            prop_assert_eq!(
                state,
                reported,
                "{:?} is in a state other than last reported, after {}",
                id,
                shown
            );
            match s.app_index(id) {
                None => prop_assert!(is_terminal(state), "{:?} dropped while in state {}", id, state),
                Some(i) => {
                    let a = s.apps()[i as usize];
                    if is_terminal(a.state) {
                        prop_assert!(self.e.waiting_reason(id).is_none(), "ended {:?} still waits", id);
                        continue;
                    }
                    if shown == "Tick" {
                        // Right after a cycle, exactly the admitted apps with something left to
                        // place say why they wait.
                        let unplaced =
                            View::range(s.requests(), a.requests).iter().any(|r| r.placed < r.count);
                        let admitted = matches!(a.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING);
                        prop_assert_eq!(
                            self.e.waiting_reason(id).is_some(),
                            admitted && unplaced,
                            "{:?} (state {}) and its pending reason disagree: {:?}",
                            id,
                            a.state,
                            self.e.waiting_reason(id)
                        );
                    }
                    for r in View::range(s.requests(), a.requests) {
                        if r.flags & GANTRY_REQUEST_GANG != 0 {
                            prop_assert!(
                                r.placed == 0 || r.placed == r.count,
                                "gang request of {:?} has {} of {} placed after {}",
                                id,
                                r.placed,
                                r.count,
                                shown
                            );
                        }
                    }
                }
            }
        }
        self.check_placed_counts(shown)?;
        if self.builtin_only {
            prop_assert_eq!(
                self.e.stats().rejected.total(),
                0,
                "built-in decisions rejected: {:?}",
                self.e.stats()
            );
        }
        Ok(())
    }

    /// Records a container that just completed, so `placed` can be checked against it.
    fn note_exit(&mut self, id: ContainerId) {
        let s = self.e.state();
        let Some(i) = s.container_index(id) else { return };
        let c = s.containers()[i as usize];
        if c.state == GANTRY_CONTAINER_COMPLETED {
            let a = s.apps()[c.app as usize];
            *self.completed.entry((AppId(a.id), c.request - a.requests.start)).or_default() += 1;
        }
    }

    /// A running app's non-gang request counts as placed exactly its allocated or running
    /// containers plus those that completed.
    fn check_placed_counts(&self, shown: &str) -> Result<(), TestCaseError> {
        let s = self.e.state();
        let mut active: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        for c in s.containers() {
            if matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING) {
                *active.entry((c.app, c.request)).or_default() += 1;
            }
        }
        for (i, a) in s.apps().iter().enumerate() {
            if is_terminal(a.state) {
                continue;
            }
            for k in 0..a.requests.len {
                let ri = a.requests.start + k;
                let r = s.requests()[ri as usize];
                if r.flags & GANTRY_REQUEST_GANG != 0 {
                    continue;
                }
                let live = active.get(&(i as u32, ri)).copied().unwrap_or(0);
                let done = self.completed.get(&(AppId(a.id), k)).copied().unwrap_or(0);
                prop_assert_eq!(
                    r.placed,
                    live + done,
                    "app {} request {}: placed {} but {} live and {} completed, after {}",
                    a.id,
                    k,
                    r.placed,
                    live,
                    done,
                    shown
                );
            }
        }
        Ok(())
    }

    fn all_apps_ended(&self) -> bool {
        self.specs.keys().all(|&id| self.e.app_state(id).is_some_and(is_terminal))
    }
}

fn run(s: &Scenario, plugin: bool) -> Result<Sim, TestCaseError> {
    let mut sim = Sim::new(s, &s.queues, plugin)?;
    for op in &s.ops {
        sim.step(op)?;
    }
    // A few quiet cycles at the end (past any quarantine).
    for _ in 0..3 {
        sim.tick(2_500)?;
    }
    Ok(sim)
}

proptest! {
    #![proptest_config(config(64, 0x6761_6e74_7279_0001))]

    /// A random placement plugin — right, wrong or malformed — never breaks the engine: after every
    /// step the invariants hold, gangs launch whole, queues stay within their maximums, refused
    /// events change nothing and no acknowledged application is lost.
    #[test]
    fn random_placement_plugin_never_breaks_the_engine(s in scenario()) {
        let sim = run(&s, true)?;
        // The scenario exercised the engine (not a vacuous pass every time).
        prop_assert!(sim.e.stats().cycles >= 3);
    }

    /// The built-in policy alone never has a decision rejected, whatever happens to the cluster.
    #[test]
    fn builtin_policy_decisions_are_never_rejected(s in scenario()) {
        let sim = run(&s, false)?;
        prop_assert_eq!(sim.e.stats().rejected.total(), 0);
        prop_assert_eq!(sim.e.stats().policy_failures, 0);
    }
}

// =============================================================================================
// Liveness: when every container eventually completes, every application ends
// =============================================================================================

/// Apps that always fit: no GPUs, no selectors, small containers on big nodes, one queue.
const FITS: AppBounds = AppBounds {
    max_cpu_millis: 1_000,
    max_mem_units: 8,
    gpus: false,
    selectors: false,
    required_racks: false,
};

fn fitting_scenario() -> impl Strategy<Value = Scenario> {
    (
        1u8..=2,
        prop::collection::vec(node_gen(8, 16, false), 1..=4),
        prop::collection::vec(app_gen(FITS), 1..=5),
        prop::collection::vec(op_gen(FITS, false), 10..=50),
        any::<u64>(),
    )
        .prop_map(|(racks, nodes, apps, ops, salt)| Scenario {
            nodes: build_nodes(racks, &nodes),
            queues: Vec::new(),
            apps,
            ops,
            salt,
        })
}

proptest! {
    #![proptest_config(config(64, 0x6761_6e74_7279_0002))]

    /// With the built-in policy and room for everything, once the disturbances stop and every
    /// container runs to completion (exits reported in any order), every application ends.
    #[test]
    fn every_app_ends_once_its_containers_complete(s in fitting_scenario()) {
        let mut sim = Sim::new(&s, &[], false)?;
        for op in &s.ops {
            sim.step(op)?;
        }
        // Bring every node back (an operator's drain survives re-registration, so undrain too),
        // then let everything run to completion.
        for spec in sim.nodes.clone() {
            let node = spec.name.clone();
            sim.apply(Event::NodeRegistered(spec), Expect::Accept)?;
            sim.apply(Event::NodeStateChanged { node, state: NodeCondition::Running }, Expect::Accept)?;
        }
        let mut rng = Rng::new(s.salt);
        for _ in 0..20 {
            if sim.all_apps_ended() && sim.live().is_empty() {
                break;
            }
            sim.tick(1_000)?;
            for c in sim.live() {
                if c.state == GANTRY_CONTAINER_ALLOCATED {
                    sim.apply(Event::ContainerStarted { container: ContainerId(c.id) }, Expect::Accept)?;
                }
            }
            let mut live = sim.live();
            // Exits arrive in any order.
            for i in (1..live.len()).rev() {
                live.swap(i, rng.below32(i + 1) as usize);
            }
            for c in live {
                sim.apply(Event::container_exited(ContainerId(c.id), 0), Expect::Accept)?;
            }
        }
        sim.tick(1_000)?;
        let stuck: Vec<(AppId, Option<u32>)> = sim
            .specs
            .keys()
            .map(|&id| (id, sim.e.app_state(id)))
            .filter(|(_, st)| !st.is_some_and(is_terminal))
            .collect();
        prop_assert!(stuck.is_empty(), "apps that never end though all their containers completed: {:?}", stuck);
        prop_assert!(sim.live().is_empty());
        prop_assert!(sim.e.state().apps().is_empty(), "ended apps are dropped from the records");
    }
}
