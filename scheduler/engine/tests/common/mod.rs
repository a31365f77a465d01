//! Test support shared by the engine's integration tests.

use gantry_engine::rng::SplitMix64;
use gantry_engine::state::{AppMeta, AppSummary};
use gantry_engine::{Engine, EngineStats};
use gantry_sdk::abi::*;

/// Everything observable of an engine, to check that a refused event changed nothing.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub nodes: Vec<GantryNode>,
    pub node_names: Vec<(String, String)>,
    pub gpus: Vec<GantryGpu>,
    pub queues: Vec<GantryQueue>,
    pub apps: Vec<GantryApp>,
    pub metas: Vec<AppMeta>,
    pub requests: Vec<GantryRequest>,
    pub containers: Vec<GantryContainer>,
    pub reservations: Vec<GantryReservation>,
    pub cluster: GantryResources,
    pub history: Vec<AppSummary>,
    pub stats: EngineStats,
}

/// Takes a snapshot of `e`.
pub fn snapshot(e: &Engine) -> Snapshot {
    let s = e.state();
    Snapshot {
        nodes: s.nodes().to_vec(),
        node_names: s.nodes().iter().map(|n| (s.str(n.name).to_owned(), s.str(n.rack).to_owned())).collect(),
        gpus: s.gpus().to_vec(),
        queues: s.queues().to_vec(),
        apps: s.apps().to_vec(),
        metas: (0..s.apps().len() as u32).filter_map(|i| s.app_meta(i).cloned()).collect(),
        requests: s.requests().to_vec(),
        containers: s.containers().to_vec(),
        reservations: s.reservations().to_vec(),
        cluster: s.cluster(),
        history: e.history().cloned().collect(),
        stats: e.stats().clone(),
    }
}

/// Random numbers for test plugins and scenarios: the engine's own SplitMix64.
pub struct Rng(SplitMix64);

#[allow(dead_code)] // each test binary uses a different subset
impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }
    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform-ish in `0..n` (0 when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    /// As `below`, for `usize` bounds.
    pub fn below32(&mut self, n: usize) -> u32 {
        self.below(n as u64) as u32
    }
    /// True once in `one_in` draws.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.0.one_in(one_in)
    }
}
