//! Unit tests: the plugin type called directly with a hand-built view.

use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, PlanView, Plugin, View};
use gantry_spread::{Spread, WAIT_GANG};

const GIB: u64 = 1 << 30;

/// Owned arrays that lend themselves out as a `View`.
#[derive(Default)]
struct Cluster {
    strings: Vec<u8>,
    nodes: Vec<GantryNode>,
    apps: Vec<GantryApp>,
    requests: Vec<GantryRequest>,
    pending: Vec<u32>,
}

impl Cluster {
    fn node(&mut self, name: &str, cores: u64, mem_gib: u64) -> u32 {
        let name_ref = GantryStrRef { offset: self.strings.len() as u32, len: name.len() as u32 };
        self.strings.extend_from_slice(name.as_bytes());
        self.nodes.push(GantryNode {
            name: name_ref,
            capacity: GantryResources::new(cores * 1000, mem_gib * GIB, 0),
            state: GANTRY_NODE_RUNNING,
            ..Default::default()
        });
        self.nodes.len() as u32 - 1
    }

    /// A one-request application; returns the request's index.
    fn request(&mut self, cpu_millis: u64, mem_gib: u64, count: u32, flags: u32) -> u32 {
        let r = self.requests.len() as u32;
        self.apps.push(GantryApp {
            id: u64::from(r) + 1,
            state: GANTRY_APP_ACCEPTED,
            attempt: 1,
            requests: GantryRange { start: r, len: 1 },
            ..Default::default()
        });
        self.requests.push(GantryRequest {
            id: u64::from(r) + 1,
            app: r,
            flags,
            resources: GantryResources::new(cpu_millis, mem_gib * GIB, 0),
            count,
            ..Default::default()
        });
        self.pending.push(r);
        r
    }

    fn view(&self) -> View<'_> {
        View {
            hook: GANTRY_HOOK_PLACE,
            now_ms: 0,
            cycle: 1,
            seed: 1,
            cluster: GantryResources::default(),
            strings: &self.strings,
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
            plan: PlanView::default(),
        }
    }
}

#[test]
fn spreads_and_keeps_gangs_whole() {
    let mut c = Cluster::default();
    let a = c.node("a", 8, 32);
    let b = c.node("b", 8, 32);
    let web = c.request(1000, 1, 3, 0);
    let gang = c.request(4000, 8, 3, GANTRY_REQUEST_GANG); // 3 x 4 cores: only two such slots are left
    let mut plugin = Spread::create("{}").expect("config");
    let mut out = Decisions::new();
    plugin.place(&c.view(), &mut out).expect("place");
    let decided: Vec<(u32, u32, u32)> =
        out.as_slice().iter().map(|d| (d.kind, d.subject, d.target)).collect();
    let place = GANTRY_DECISION_PLACE;
    assert_eq!(decided[..3], [(place, web, a), (place, web, b), (place, web, a)]);
    assert_eq!(decided[3], (GANTRY_DECISION_WAIT, gang, GANTRY_NONE), "the gang waits whole");
    assert_eq!(out.as_slice()[3].reason, WAIT_GANG);
}

#[test]
fn bad_config_is_refused() {
    assert!(Spread::create(r#"{"max_per_node": 0}"#).is_err());
    assert!(Spread::create("not json").is_err());
}
