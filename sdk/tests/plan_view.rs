//! `PlanView`'s helpers over a hand-laid definition: window(0, 100, all(atom 0, atom 1)).

use gantry_sdk::PlanView;
use gantry_sdk::abi::*;

fn atom(index: u32, cpu: u64) -> GantryRdlNode {
    GantryRdlNode {
        kind: GANTRY_RDL_ATOM,
        atom: index,
        bundle: GantryResources::new(cpu, 0, 0),
        min_parallel: 1,
        max_parallel: 4,
        min_lease_ms: 1,
        work: 10,
        ..Default::default()
    }
}

#[test]
fn atoms_are_found_by_index_and_held_capacity_sums_the_pieces_covering_an_instant() {
    let nodes = [
        GantryRdlNode {
            kind: GANTRY_RDL_WINDOW,
            atom: GANTRY_NONE,
            children: GantryRange { start: 1, len: 1 },
            end_ms: 100,
            ..Default::default()
        },
        GantryRdlNode {
            kind: GANTRY_RDL_ALL,
            atom: GANTRY_NONE,
            children: GantryRange { start: 2, len: 2 },
            ..Default::default()
        },
        atom(0, 1000),
        atom(1, 250),
    ];
    let pieces = [
        GantryAllocation { reservation: 0, atom: 0, start_ms: 0, end_ms: 10, bundles: 2 },
        GantryAllocation { reservation: 0, atom: 1, start_ms: 5, end_ms: 20, bundles: 4 },
    ];
    let details = [GantryReservationDetail {
        definition: 0,
        atoms: 2,
        deadline_ms: 100,
        allocation: GantryRange { start: 0, len: 2 },
        ..Default::default()
    }];
    let plan = PlanView { details: &details, rdl_nodes: &nodes, allocations: &pieces, ..PlanView::default() };
    assert_eq!(plan.atom(0, 1).map(|n| n.bundle.cpu_millis), Some(250));
    assert_eq!(plan.atom(0, 2), None);
    assert_eq!(plan.atom(1, 0), None, "no such reservation");
    assert_eq!(plan.held_at(0).cpu_millis, 2000);
    assert_eq!(plan.held_at(7).cpu_millis, 3000);
    assert_eq!(plan.held_at(10).cpu_millis, 1000, "an end is exclusive");
    assert_eq!(plan.held_at(20).cpu_millis, 0);
}

#[test]
fn a_definition_that_loops_back_on_itself_ends_the_walk() {
    // A broken host: the window's child is the window itself.
    let nodes = [GantryRdlNode {
        kind: GANTRY_RDL_WINDOW,
        atom: GANTRY_NONE,
        children: GantryRange { start: 0, len: 1 },
        ..Default::default()
    }];
    let details = [GantryReservationDetail::default()];
    let plan = PlanView { details: &details, rdl_nodes: &nodes, ..PlanView::default() };
    assert_eq!(plan.atom(0, 0), None);
}
