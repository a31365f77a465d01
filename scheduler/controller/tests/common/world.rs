//! A world for the controller's tests: the real [`Controller`] with simulated agents and a
//! simulated store ([`MemStore`]), driven step by step on a virtual clock, with the faults the
//! daemon faces — a scheduler restart from the store, an agent that disconnects and registers
//! again, a network partition (an agent that hears nothing and is heard by no one, and fences
//! its containers after [`FENCE_MS`]), and commits that fail.

#![allow(dead_code)]

use gantry_controller::memstore::MemStore;
use gantry_controller::{
    Controller, ControllerConfig, Input, LaunchTemplate, Output, Reply, ReplyTo, StreamId,
};
use gantry_engine::{AppId, AppSpec, Engine, EngineConfig, Profile, RequestSpec, Resources};
use gantry_proto::ClusterId;
use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as FromAgent;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;
use std::collections::{BTreeMap, VecDeque};

/// The node timeout of the world's controller.
pub const NODE_TIMEOUT_MS: u64 = 10_000;
/// How long an agent cut off from the scheduler keeps its containers before it kills them and
/// reports them LOST (the agent's default `fencing_timeout_ms`: below the node timeout, so the
/// old copy is dead before the scheduler places a new one).
pub const FENCE_MS: u64 = 8_000;
/// Each node's capacity: 4 cores, 4 GiB.
pub const NODE_CPU_MILLIS: u64 = 4_000;

/// A container a simulated agent runs.
#[derive(Debug, Clone)]
pub struct Running {
    pub app: u64,
    pub cluster: String,
    pub ends_at_ms: u64,
}

/// A simulated agent.
#[derive(Debug)]
pub struct Agent {
    pub name: String,
    instance: String,
    /// Its stream now; 0 while disconnected.
    pub stream: StreamId,
    /// Cut off from the scheduler since then.
    pub partitioned_since: Option<u64>,
    /// When it last heard from the scheduler.
    pub heard_ms: u64,
    pub running: BTreeMap<u64, Running>,
    /// Exits not acknowledged yet, reported again at every registration.
    unacked: Vec<v1::ContainerExited>,
    /// Messages it has to send, in order.
    outbox: VecDeque<FromAgent>,
}

impl Agent {
    /// Whether it and the scheduler hear each other now.
    pub fn in_contact(&self) -> bool {
        self.stream != 0 && self.partitioned_since.is_none()
    }
}

/// The controller, its store and its agents.
pub struct World {
    pub ctl: Controller,
    pub store: MemStore,
    pub agents: BTreeMap<String, Agent>,
    pub now: u64,
    last_stream: u64,
    last_reply: ReplyTo,
    pub answers: BTreeMap<ReplyTo, Reply>,
    /// Submissions by reply id: the app's run time.
    runtimes: BTreeMap<u64, u64>,
    /// Run time by app, once known.
    pub app_runtime: BTreeMap<u64, u64>,
    cluster_bits: u128,
}

pub fn engine() -> Engine {
    Engine::new(EngineConfig::default(), Vec::new(), Profile::default()).expect("engine")
}

fn config(cluster_bits: u128) -> ControllerConfig {
    ControllerConfig {
        node_timeout_ms: NODE_TIMEOUT_MS,
        cycle_interval_ms: 1_000,
        durable: true,
        ..ControllerConfig::new(ClusterId::from_bits(cluster_bits))
    }
}

/// An app of `count` one-core containers that each run `runtime_ms`.
pub fn app(count: u32, gang: bool) -> AppSpec {
    AppSpec {
        name: "job".into(),
        queue: "root.default".into(),
        user: "alice".into(),
        requests: vec![RequestSpec {
            resources: Resources::new(1_000, 1 << 28, 0),
            count,
            gang,
            ..Default::default()
        }],
        ..Default::default()
    }
}

impl World {
    /// A world of `nodes` agents, registered.
    pub fn new(nodes: usize) -> Self {
        let cluster_bits = 0x5eed;
        let mut w = World {
            ctl: Controller::new(engine(), config(cluster_bits), 0),
            store: MemStore::new(),
            agents: BTreeMap::new(),
            now: 0,
            last_stream: 0,
            last_reply: 0,
            answers: BTreeMap::new(),
            runtimes: BTreeMap::new(),
            app_runtime: BTreeMap::new(),
            cluster_bits,
        };
        for k in 0..nodes {
            let name = format!("n{k}");
            w.agents.insert(
                name.clone(),
                Agent {
                    instance: format!("{:032x}", k as u128 + 1),
                    name,
                    stream: 0,
                    partitioned_since: None,
                    heard_ms: 0,
                    running: BTreeMap::new(),
                    unacked: Vec::new(),
                    outbox: VecDeque::new(),
                },
            );
        }
        let names: Vec<String> = w.agents.keys().cloned().collect();
        for n in names {
            w.connect(&n);
        }
        w
    }

    fn input(&mut self, input: Input) {
        self.ctl.handle(self.now, input);
        self.settle();
    }

    fn reply_id(&mut self) -> ReplyTo {
        self.last_reply += 1;
        self.last_reply
    }

    /// Hands the controller an input at the world's time and carries out what follows.
    pub fn send(&mut self, input: Input) {
        self.input(input);
    }

    /// A fresh reply id, for [`World::send`].
    pub fn next_reply(&mut self) -> ReplyTo {
        self.reply_id()
    }

    /// Submits `spec` whose containers run `runtime_ms`; returns the reply id to look for.
    pub fn submit(&mut self, spec: AppSpec, runtime_ms: u64) -> ReplyTo {
        let reply = self.reply_id();
        self.runtimes.insert(reply, runtime_ms);
        let templates =
            vec![LaunchTemplate { argv: vec!["job".into()], ..Default::default() }; spec.requests.len()];
        self.input(Input::Submit { reply, spec, id: None, caller: None, templates });
        reply
    }

    /// Asks to kill `app`; returns the reply id.
    pub fn kill(&mut self, app: AppId) -> ReplyTo {
        let reply = self.reply_id();
        self.input(Input::Kill { reply, app });
        reply
    }

    /// Opens a new stream for `node`'s agent and registers with what it runs.
    pub fn connect(&mut self, node: &str) {
        self.last_stream += 1;
        let stream = self.last_stream;
        let Some(agent) = self.agents.get_mut(node) else { return };
        if agent.partitioned_since.is_some() {
            return;
        }
        agent.stream = stream;
        let register = v1::Register {
            node_name: node.to_owned(),
            instance_id: agent.instance.clone(),
            reports_cluster_ids: true,
            allocatable: Some(v1::Resources { cpu_millis: NODE_CPU_MILLIS, memory_bytes: 4 << 30, gpus: 0 }),
            containers: agent
                .running
                .iter()
                .map(|(id, r)| v1::LiveContainer {
                    container_id: *id,
                    app_id: r.app,
                    state: v1::ContainerState::Running as i32,
                    started_at_ms: 0,
                    cluster_id: r.cluster.clone(),
                })
                .collect(),
            unacked_exits: agent.unacked.clone(),
            ..Default::default()
        };
        let reply = self.reply_id();
        self.input(Input::AgentConnected { reply, stream, register });
        if let Some(Reply::Registered(Err(e))) = self.answers.get(&reply) {
            panic!("registration of {node} refused: {e}");
        }
    }

    /// `node`'s stream ends (the agent reconnects at [`World::connect`]).
    pub fn disconnect(&mut self, node: &str) {
        let Some(agent) = self.agents.get_mut(node) else { return };
        let stream = std::mem::take(&mut agent.stream);
        if stream != 0 {
            self.input(Input::AgentDisconnected { node: node.to_owned(), stream });
        }
    }

    /// Cuts `node` off: nothing reaches it or comes from it until [`World::heal`].
    pub fn partition(&mut self, node: &str) {
        if let Some(agent) = self.agents.get_mut(node) {
            agent.partitioned_since.get_or_insert(self.now);
        }
    }

    /// Ends `node`'s partition: its agent reconnects.
    pub fn heal(&mut self, node: &str) {
        let Some(agent) = self.agents.get_mut(node) else { return };
        if agent.partitioned_since.take().is_some() {
            agent.stream = 0;
            self.connect(node);
        }
    }

    /// The scheduler process dies and starts again from the store: jobs in flight are lost,
    /// every stream ends, and the agents register again.
    pub fn restart(&mut self) {
        self.store.crash();
        self.cluster_bits += 1;
        self.ctl = Controller::recover(engine(), config(self.cluster_bits), self.store.recovered(), self.now);
        for agent in self.agents.values_mut() {
            agent.stream = 0;
            agent.outbox.clear();
        }
        self.settle();
        let names: Vec<String> = self.agents.keys().cloned().collect();
        for n in names {
            self.connect(&n);
        }
    }

    /// What the engine, the store and the agents hold of `app`, for a failure's message.
    pub fn describe(&self, app: AppId) -> String {
        let mut out = format!(
            "app {} in the engine: {:?} {:?}\n",
            app.0,
            self.ctl.engine().app_state(app),
            self.ctl.engine().app_diagnostics(app)
        );
        let st = self.ctl.engine().state();
        if let Some(i) = st.app_index(app) {
            let a = st.apps()[i as usize];
            for r in &st.requests()[a.requests.start as usize..(a.requests.start + a.requests.len) as usize] {
                out += &format!("  request placed {} of {}\n", r.placed, r.count);
            }
            out += &format!(
                "  meta {:?}\n",
                st.app_meta(i).map(|m| (&m.completed, m.live_containers, m.failures))
            );
        }
        for c in st.containers() {
            out += &format!(
                "  engine container {} of app {:?} state {} node {}\n",
                c.id,
                st.apps().get(c.app as usize).map(|a| a.id),
                c.state,
                c.node
            );
        }
        for q in st.queues() {
            out += &format!(
                "  queue {} used {:?} max {:?} guaranteed {:?}\n",
                st.str(q.name),
                q.used,
                q.maximum,
                q.guaranteed
            );
        }
        for n in st.nodes() {
            out += &format!(
                "  node {} state {} allocated {:?} of {:?}\n",
                st.str(n.name),
                n.state,
                n.allocated,
                n.capacity
            );
        }
        for c in self.store.containers().filter(|c| c.app == app) {
            out +=
                &format!("  stored container {} state {} on {} ({:?})\n", c.id.0, c.state, c.node, c.reason);
        }
        for a in self.agents.values() {
            out += &format!(
                "  agent {} stream {} partitioned {:?} runs {:?} unacked {:?}\n",
                a.name,
                a.stream,
                a.partitioned_since,
                a.running
                    .iter()
                    .map(|(id, r)| (*id, r.app, r.cluster.chars().rev().take(2).collect::<String>()))
                    .collect::<Vec<_>>(),
                a.unacked.iter().map(|e| (e.container_id, e.reason)).collect::<Vec<_>>()
            );
        }
        out
    }

    /// Commits (or fails) the oldest store job in flight.
    pub fn commit(&mut self, fail: bool) -> bool {
        match self.store.commit_next(fail) {
            Some((write, result)) => {
                self.input(Input::Committed { write, result });
                true
            }
            None => false,
        }
    }

    /// Commits every job in flight.
    pub fn commit_all(&mut self) {
        while self.commit(false) {}
    }

    /// Time passes: containers end, agents report, partitioned agents fence, the controller
    /// runs what is due.
    pub fn advance(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now = (self.now + 500).min(end);
            let now = self.now;
            for agent in self.agents.values_mut() {
                let cut = agent.partitioned_since.is_some();
                let ended: Vec<u64> =
                    agent.running.iter().filter(|(_, r)| r.ends_at_ms <= now).map(|(id, _)| *id).collect();
                for id in ended {
                    let r = agent.running.remove(&id).expect("running");
                    let exit = v1::ContainerExited {
                        container_id: id,
                        reason: v1::ExitReason::Exited as i32,
                        exit_code: 0,
                        finished_at_ms: now,
                        cluster_id: r.cluster,
                        ..Default::default()
                    };
                    agent.unacked.push(exit.clone());
                    agent.outbox.push_back(FromAgent::ContainerExited(exit));
                }
                if now.saturating_sub(agent.heard_ms) > FENCE_MS {
                    // Fenced: it may no longer run what the scheduler may have placed elsewhere.
                    for (id, r) in std::mem::take(&mut agent.running) {
                        agent.unacked.push(v1::ContainerExited {
                            container_id: id,
                            reason: v1::ExitReason::Lost as i32,
                            finished_at_ms: now,
                            cluster_id: r.cluster,
                            ..Default::default()
                        });
                    }
                }
                if !cut && agent.stream != 0 {
                    agent.outbox.push_back(FromAgent::Status(v1::Status { seq: now, ..Default::default() }));
                }
            }
            self.settle();
            self.ctl.poll(self.now);
            self.settle();
        }
    }

    /// Carries out the controller's outputs and delivers the agents' messages until nothing
    /// moves.
    pub fn settle(&mut self) {
        loop {
            let outputs = self.ctl.take_outputs();
            let mut moved = !outputs.is_empty();
            for o in outputs {
                self.carry_out(o);
            }
            let names: Vec<String> = self.agents.keys().cloned().collect();
            for n in names {
                let Some(agent) = self.agents.get_mut(&n) else { continue };
                if agent.partitioned_since.is_some() || agent.stream == 0 {
                    continue;
                }
                let stream = agent.stream;
                let msgs: Vec<FromAgent> = agent.outbox.drain(..).collect();
                moved |= !msgs.is_empty();
                for msg in msgs {
                    self.ctl.handle(self.now, Input::AgentMessage { node: n.clone(), stream, msg });
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn carry_out(&mut self, output: Output) {
        match output {
            Output::Store { write, writes } => self.store.submit(write, writes),
            Output::Reply { to, reply } => {
                if let (Reply::Submitted(Ok(app)), Some(rt)) = (&reply, self.runtimes.get(&to)) {
                    self.app_runtime.insert(app.0, *rt);
                }
                self.answers.insert(to, reply);
            }
            Output::EngineCommand(_) => {}
            Output::CloseStream { stream } => {
                for a in self.agents.values_mut().filter(|a| a.stream == stream) {
                    a.stream = 0;
                }
            }
            Output::ToAgent { node, stream, msg } => {
                let now = self.now;
                let runtime = match &msg {
                    ToAgent::Launch(l) => self.app_runtime.get(&l.app_id).copied().unwrap_or(1_000),
                    _ => 0,
                };
                let Some(agent) = self.agents.get_mut(&node) else { return };
                if agent.stream != stream || agent.partitioned_since.is_some() {
                    return; // lost on the wire
                }
                agent.heard_ms = now;
                match msg {
                    ToAgent::Launch(l) => {
                        let cluster = l.cluster_id.clone();
                        agent.running.insert(
                            l.container_id,
                            Running { app: l.app_id, cluster: cluster.clone(), ends_at_ms: now + runtime },
                        );
                        agent.outbox.push_back(FromAgent::ContainerStarted(v1::ContainerStarted {
                            container_id: l.container_id,
                            started_at_ms: now,
                            cluster_id: cluster,
                        }));
                    }
                    ToAgent::Kill(k) => {
                        if let Some(r) = agent.running.remove(&k.container_id) {
                            let exit = v1::ContainerExited {
                                container_id: k.container_id,
                                reason: v1::ExitReason::KilledByRequest as i32,
                                exit_code: 137,
                                finished_at_ms: now,
                                cluster_id: r.cluster,
                                ..Default::default()
                            };
                            agent.unacked.push(exit.clone());
                            agent.outbox.push_back(FromAgent::ContainerExited(exit));
                        }
                    }
                    ToAgent::AckExit(a) => agent
                        .unacked
                        .retain(|e| !(e.container_id == a.container_id && e.cluster_id == a.cluster_id)),
                    _ => {}
                }
            }
        }
    }
}
