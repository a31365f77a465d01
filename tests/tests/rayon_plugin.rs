//! The Rayon planner as a real shared library (`libgantry_rayon.so`), loaded through the
//! scheduler's plugin host and called on its ABI 1.3 `reserve` hook with hand-built views: it
//! reports the hook, plans a reservation within its window, rejects one that does not fit beside
//! an accepted allocation (which a fresh instance learns from the view alone), and refuses a bad
//! setting when created.

use gantry_engine::Policy;
use gantry_scheduler::plugin_host::{DynamicPlugin, LoadError, inspect};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, PlanView, View};
use gantry_tests::rust_plugin;

const HOUR: u64 = 3_600_000;
/// The plugin's `no_room` reason (plugins/rayon/README.md).
const NO_ROOM: u32 = 1;

fn cores(n: u64) -> GantryResources {
    GantryResources { cpu_millis: n * 1000, ..Default::default() }
}

/// `window(0, 1 h, atom(1 core, 10, 10, 1 h, 10 bundle-hours))`: ten bundles for the whole hour.
fn rigid_hour() -> gantry_rdl::Expr {
    gantry_rdl::parse_text("window(0s, 1h, atom(1c, 10, 10, 1h, 10h))").expect("rdl")
}

/// The view arrays of a plan with `accepted` (reservation id, pieces) and one NEW reservation.
struct Plan {
    reservations: Vec<GantryReservation>,
    details: Vec<GantryReservationDetail>,
    nodes: Vec<GantryRdlNode>,
    allocations: Vec<GantryAllocation>,
}

impl Plan {
    fn new(accepted: &[(u64, Vec<GantryAllocation>)], new_id: u64) -> Plan {
        let mut p = Plan {
            reservations: Vec::new(),
            details: Vec::new(),
            nodes: Vec::new(),
            allocations: Vec::new(),
        };
        let mut add = |id: u64, state: u32, pieces: &[GantryAllocation]| {
            let i = p.reservations.len() as u32;
            let root = gantry_rdl::abi::push_nodes(&rigid_hour(), &mut p.nodes).expect("nodes");
            let start = p.allocations.len() as u32;
            p.allocations.extend(pieces.iter().map(|x| GantryAllocation { reservation: i, ..*x }));
            p.reservations.push(GantryReservation {
                id,
                queue: 0,
                state,
                start_ms: 0,
                end_ms: HOUR,
                resources: cores(10),
            });
            p.details.push(GantryReservationDetail {
                definition: root,
                atoms: 1,
                arrival_ms: 0,
                deadline_ms: HOUR,
                accepted_ms: 0,
                priority: 0,
                reserved: 0,
                allocation: GantryRange { start, len: pieces.len() as u32 },
            });
        };
        for (id, pieces) in accepted {
            add(*id, GANTRY_RESERVATION_ACCEPTED, pieces);
        }
        add(new_id, GANTRY_RESERVATION_NEW, &[]);
        p
    }

    fn view(&self) -> View<'_> {
        View {
            now_ms: 0,
            cluster: cores(10),
            reservations: &self.reservations,
            plan: PlanView {
                cause: GANTRY_RESERVE_ADMIT,
                subject: (self.reservations.len() - 1) as u32,
                queue: 0,
                capacity: cores(10),
                step_ms: 1000,
                horizon_ms: 24 * HOUR,
                details: &self.details,
                rdl_nodes: &self.nodes,
                allocations: &self.allocations,
            },
            ..View::empty(GANTRY_HOOK_RESERVE)
        }
    }
}

#[test]
fn the_library_reports_its_reserve_hook() {
    let info = inspect(&rust_plugin("gantry_rayon").expect("build")).expect("loads");
    assert_eq!(info.name, "rayon");
    assert_eq!(info.capabilities, GANTRY_CAP_RESERVE);
    assert!(info.hooks.reserve);
    assert_eq!(info.hook_names(), vec!["reserve"]);
}

#[test]
fn admission_through_the_loaded_library() {
    let path = rust_plugin("gantry_rayon").expect("build");
    let mut plugin = DynamicPlugin::load(&path, r#"{"agent": "gree-l"}"#).expect("loads");

    let plan = Plan::new(&[], 1);
    let mut out = Decisions::new();
    plugin.call(&plan.view(), &mut out).expect("reserve");
    let d = out.as_slice();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].kind, d[0].subject), (GANTRY_DECISION_PLAN_RESERVATION, 0));
    let pieces = out.allocations().to_vec();
    assert_eq!(
        pieces,
        vec![GantryAllocation { reservation: 0, atom: 0, start_ms: 0, end_ms: HOUR, bundles: 10 }],
        "ten bundles over the whole window"
    );

    // A fresh instance (a restarted scheduler) sees reservation 1 accepted in the view only, and
    // must not book the same hour twice.
    let mut fresh = DynamicPlugin::load(&path, "{}").expect("loads");
    let plan = Plan::new(&[(1, pieces)], 2);
    let mut out = Decisions::new();
    fresh.call(&plan.view(), &mut out).expect("reserve");
    let d = out.as_slice();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].kind, d[0].subject, d[0].reason), (GANTRY_DECISION_REJECT_RESERVATION, 1, NO_ROOM));
    assert!(out.allocations().is_empty());
}

#[test]
fn a_bad_setting_is_refused_when_loaded() {
    let path = rust_plugin("gantry_rayon").expect("build");
    match DynamicPlugin::load(&path, r#"{"agent": "greedy"}"#) {
        Err(LoadError::Create { code, message, .. }) => {
            assert_eq!(code, GANTRY_ERR_CONFIG);
            assert!(message.contains("`agent` must be one of gree, gree-l"), "{message}");
        }
        other => panic!("expected a create error, got {other:?}"),
    }
}
