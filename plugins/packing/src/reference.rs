//! The brute-force reference: a [`Finder`] that looks at every node for every container, knows
//! nothing of trees, member lists, rack lists, cached misses or excluded full nodes, and computes
//! each key afresh. The randomized test below runs whole `place` calls on random views with the
//! index (in several configurations of trees and scans) and with this reference, and requires
//! identical decisions — which must also pass the checks the engine makes.

use crate::plan::{Call, Finder, Query};
use gantry_sdk::View;
use gantry_sdk::abi::*;

/// Scans every node.
#[derive(Debug, Default)]
pub struct Reference;

impl Finder for Reference {
    fn start(&mut self, _: &Call<'_, '_>) {}
    fn filter_added(&mut self, _: &Call<'_, '_>, _: u32) {}
    fn update(&mut self, _: &Call<'_, '_>, _: u32) {}

    fn best(&mut self, c: &Call<'_, '_>, q: Query, shape: &GantryResources) -> Option<(u32, u64)> {
        let mut best: Option<(u32, u64)> = None;
        for (v, node) in c.view.nodes.iter().enumerate() {
            if node.state != GANTRY_NODE_RUNNING {
                continue;
            }
            if let Some(r) = q.rack {
                if c.racks.names.get(r as usize) != Some(&node.rack) {
                    continue;
                }
            }
            if let Some(f) = q.filter {
                let Some(filter) = c.filters.get(f as usize) else { continue };
                if !View::labels_satisfy(c.view.strings, c.view.node_labels(node), &filter.labels) {
                    continue;
                }
            }
            let room = &c.rooms[v];
            if !shape.fits_in(&room.free) {
                continue;
            }
            let key = c.keyer.key(&node.capacity, &room.used, room.occupied, room.ends_ms, room.rank);
            if best.is_none_or(|(_, k)| key < k) {
                best = Some((v as u32, key));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Basis, Mode, PackingConfig, Ties, UsageOf};
    use crate::plan::{Index, Scratch, place};
    use gantry_sdk::Decisions;
    use gantry_sdk::rng::SplitMix64 as Rng;
    use gantry_sdk::testkit::ViewBuilder;

    const GIB: u64 = 1 << 30;

    const LABEL_SETS: [&[(&str, &str)]; 7] = [
        &[("zone", "a")],
        &[("zone", "b")],
        &[("gpu", "true")],
        &[("zone", "a|b")],
        &[("disk", "ssd")],
        &[("zone", "a"), ("disk", "ssd")],
        &[("gpu", "true"), ("zone", "b")],
    ];

    /// A random view (the SDK's test kit owns its records): nodes on racks with labels, GPUs
    /// (some held beyond what the allocation says), random allocations and queue usage, apps with
    /// gangs and rack constraints, containers, measured usage, all pending in random order.
    fn random_view(rng: &mut Rng) -> ViewBuilder {
        let mut d = ViewBuilder::new(GANTRY_HOOK_PLACE);
        (d.now_ms, d.cycle, d.seed) = (10_000, 1, rng.next_u64());
        let n = 1 + rng.below(60) as usize;
        let racks = 1 + rng.below(5);
        for i in 0..n {
            let mut labels: Vec<(&str, &str)> = Vec::new();
            match rng.below(3) {
                0 => labels.push(("zone", "a")),
                1 => labels.push(("zone", "b")),
                _ => {}
            }
            if rng.one_in(3) {
                labels.push(("gpu", "true"));
            }
            if rng.one_in(2) {
                labels.push(("disk", "ssd"));
            }
            let label_range = d.labels(&labels);
            let rack_name = if rng.one_in(12) { String::new() } else { format!("r{}", rng.below(racks)) };
            let rack = d.intern(&rack_name);
            let name = d.intern(&format!("n{i}"));
            let gpus = [0, 0, 2, 4][rng.below(4) as usize];
            let capacity = GantryResources::new(
                [4000, 8000, 16000][rng.below(3) as usize],
                [8, 16, 32][rng.below(3) as usize] * GIB,
                gpus,
            );
            let allocated = if rng.one_in(3) {
                GantryResources::default()
            } else {
                GantryResources::new(
                    rng.below(capacity.cpu_millis / 500 + 1) * 500,
                    rng.below(capacity.memory_bytes / GIB + 1) * GIB,
                    rng.below(u64::from(gpus) + 1) as u32,
                )
            };
            let gpu_start = d.gpus.len() as u32;
            // Sometimes a GPU record is held although the allocation does not say so.
            let held = (allocated.gpus + u32::from(rng.one_in(4))).min(gpus);
            for g in 0..gpus {
                d.gpus.push(GantryGpu {
                    node: i as u32,
                    index: g,
                    container: if g < held { 0 } else { GANTRY_NONE },
                    ..GantryGpu::default()
                });
            }
            let state = match rng.below(10) {
                0 => GANTRY_NODE_DRAINING,
                1 => GANTRY_NODE_LOST,
                _ => GANTRY_NODE_RUNNING,
            };
            d.nodes.push(GantryNode {
                name,
                rack,
                labels: label_range,
                gpus: GantryRange { start: gpu_start, len: gpus },
                capacity,
                allocated,
                state,
                ..GantryNode::default()
            });
        }
        // root, two leaves.
        let big = GantryResources::new(u64::MAX / 4, u64::MAX / 4, u32::MAX / 4);
        let tight = |rng: &mut Rng| {
            if rng.one_in(2) {
                big
            } else {
                GantryResources::new(rng.below(40_000), rng.below(64) * GIB, rng.below(8) as u32)
            }
        };
        let root_max = tight(rng);
        d.queues.push(GantryQueue {
            parent: GANTRY_NONE,
            absolute_maximum: root_max,
            ..GantryQueue::default()
        });
        for _ in 0..2 {
            let max = tight(rng);
            let used = GantryResources::new(rng.below(10_000), rng.below(16) * GIB, rng.below(3) as u32);
            d.queues.push(GantryQueue {
                parent: 0,
                flags: GANTRY_QUEUE_LEAF,
                absolute_maximum: max,
                used,
                ..GantryQueue::default()
            });
        }
        let apps = 1 + rng.below(6);
        for a in 0..apps {
            let state = match rng.below(8) {
                0 => GANTRY_APP_NEW,
                1 | 2 => GANTRY_APP_RUNNING,
                _ => GANTRY_APP_ACCEPTED,
            };
            let start = d.requests.len() as u32;
            let k = 1 + rng.below(3) as u32;
            for _ in 0..k {
                let gang = rng.one_in(3);
                let count = 1 + rng.below(5) as u32;
                let mut flags = if gang { GANTRY_REQUEST_GANG } else { 0 };
                if rng.one_in(4) {
                    flags |= GANTRY_REQUEST_SAME_RACK_REQUIRED;
                }
                if rng.one_in(4) {
                    flags |= GANTRY_REQUEST_SAME_RACK_PREFERRED;
                }
                let placed = if gang || rng.one_in(2) { 0 } else { rng.below(u64::from(count)) as u32 };
                let selector = if rng.one_in(3) {
                    let set = LABEL_SETS[rng.below(LABEL_SETS.len() as u64) as usize];
                    d.labels(set)
                } else {
                    GantryRange::default()
                };
                let preferred = if rng.one_in(3) {
                    let set = LABEL_SETS[rng.below(LABEL_SETS.len() as u64) as usize];
                    d.labels(set)
                } else {
                    GantryRange::default()
                };
                let resources = GantryResources::new(
                    [0, 500, 1000, 2000, 4000][rng.below(5) as usize],
                    [0, GIB / 2, GIB, 2 * GIB, 4 * GIB, 8 * GIB][rng.below(6) as usize],
                    if rng.one_in(4) { 1 + rng.below(2) as u32 } else { 0 },
                );
                let request = d.requests.len() as u32;
                for _ in 0..placed {
                    let node = rng.below(n as u64) as u32;
                    d.containers.push(GantryContainer {
                        id: d.containers.len() as u64,
                        app: a as u32,
                        request,
                        node,
                        state: if rng.one_in(2) {
                            GANTRY_CONTAINER_RUNNING
                        } else {
                            GANTRY_CONTAINER_ALLOCATED
                        },
                        resources,
                        start_ms: rng.below(10_000),
                        ..GantryContainer::default()
                    });
                }
                d.requests.push(GantryRequest {
                    id: u64::from(request),
                    app: a as u32,
                    flags,
                    resources,
                    count,
                    placed,
                    selector,
                    preferred,
                    expected_ms: [0, 1_000, 5_000, 60_000, 3_600_000][rng.below(5) as usize],
                    slow_ms: if rng.one_in(4) { 7_200_000 } else { 0 },
                    ..GantryRequest::default()
                });
            }
            d.apps.push(GantryApp {
                id: a,
                queue: 1 + rng.below(2) as u32,
                state,
                requests: GantryRange { start, len: k },
                ..GantryApp::default()
            });
        }
        // Some containers of other requests, for measured usage.
        for _ in 0..rng.below(20) {
            d.containers.push(GantryContainer {
                node: rng.below(n as u64) as u32,
                state: GANTRY_CONTAINER_RUNNING,
                resources: GantryResources::new(rng.below(2000), rng.below(4) * GIB, 0),
                start_ms: rng.below(10_000),
                request: GANTRY_NONE,
                ..GantryContainer::default()
            });
        }
        if !rng.one_in(3) {
            for node in &d.nodes {
                let cap = node.capacity;
                d.node_usage.push(if rng.one_in(4) {
                    GantryNodeUsage::default()
                } else {
                    GantryNodeUsage {
                        cpu_millis: rng.below(cap.cpu_millis + 1),
                        memory_bytes: rng.below(cap.memory_bytes + 1),
                        gpus_busy: rng.below(u64::from(cap.gpus) + 1) as u32,
                        sampled_ms: 1 + rng.below(10_000),
                        ..GantryNodeUsage::default()
                    }
                });
            }
        }
        d.pending = (0..d.requests.len() as u32).collect();
        for i in (1..d.pending.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            d.pending.swap(i, j);
        }
        d
    }

    /// The engine's checks on PLACE decisions (scheduler/engine/src/validate.rs), restated:
    /// running node, selector, room, free GPUs, queue maximums up the tree, gangs whole, one
    /// rack where required, no more than asked for.
    fn assert_valid(view: &View<'_>, decisions: &[GantryDecision]) {
        let mut alloc: Vec<GantryResources> = view.nodes.iter().map(|n| n.allocated).collect();
        let mut idle_gpus: Vec<u32> = view
            .nodes
            .iter()
            .map(|n| view.node_gpus(n).iter().filter(|g| g.container == GANTRY_NONE).count() as u32)
            .collect();
        let mut queue_used: Vec<GantryResources> = view.queues.iter().map(|q| q.used).collect();
        let mut per_request: Vec<Vec<u32>> = vec![Vec::new(); view.requests.len()];
        for d in decisions {
            assert_eq!(d.kind, GANTRY_DECISION_PLACE);
            per_request[d.subject as usize].push(d.target);
        }
        for d in decisions {
            let req = &view.requests[d.subject as usize];
            let app = &view.apps[req.app as usize];
            assert!(matches!(app.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING));
            let node = &view.nodes[d.target as usize];
            assert_eq!(node.state, GANTRY_NODE_RUNNING);
            assert!(view.node_matches(node, req.selector));
            alloc[d.target as usize] = alloc[d.target as usize].plus(&req.resources);
            assert!(
                alloc[d.target as usize].fits_in(&node.capacity),
                "node {} {:?} alloc {:?} req {} {:?}",
                d.target,
                node,
                alloc[d.target as usize],
                d.subject,
                req
            );
            if !view.node_gpus(node).is_empty() {
                idle_gpus[d.target as usize] = idle_gpus[d.target as usize]
                    .checked_sub(req.resources.gpus)
                    .expect("more GPUs than the node has free");
            }
            let mut q = app.queue;
            while let Some(rec) = view.queues.get(q as usize) {
                queue_used[q as usize] = queue_used[q as usize].plus(&req.resources);
                assert!(queue_used[q as usize].fits_in(&rec.absolute_maximum), "queue maximum");
                q = rec.parent;
            }
        }
        for (r, nodes) in per_request.iter().enumerate() {
            if nodes.is_empty() {
                continue;
            }
            let req = &view.requests[r];
            assert!(nodes.len() as u32 <= req.count - req.placed);
            if req.flags & GANTRY_REQUEST_GANG != 0 {
                assert_eq!(nodes.len() as u32, req.count, "gang placed whole");
            }
            if req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0 {
                let existing = view
                    .containers
                    .iter()
                    .find(|c| {
                        c.request == r as u32
                            && matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
                    })
                    .map(|c| view.nodes[c.node as usize].rack);
                let rack = existing
                    .filter(|_| req.flags & GANTRY_REQUEST_GANG == 0)
                    .unwrap_or(view.nodes[nodes[0] as usize].rack);
                assert!(nodes.iter().all(|&v| view.nodes[v as usize].rack == rack), "one rack");
            }
        }
    }

    fn configs(rng: &mut Rng) -> Vec<PackingConfig> {
        let mut out = Vec::new();
        for mode in [Mode::Packed, Mode::Spread, Mode::BestFit, Mode::Lifetime] {
            for usage in [UsageOf::Memory, UsageOf::Cpu, UsageOf::Gpus, UsageOf::Dominant, UsageOf::Mean] {
                let basis = if rng.one_in(2) { Basis::Allocated } else { Basis::Measured };
                out.push(PackingConfig {
                    mode,
                    usage,
                    basis,
                    high_threshold: [0.3, 0.6, 0.8, 1.0][rng.below(4) as usize],
                    min_nodes: [0, 5, 30][rng.below(3) as usize],
                    ties: if rng.one_in(2) { Ties::Random } else { Ties::NodeOrder },
                    end_resolution_ms: [1, 1_000, 60_000][rng.below(3) as usize],
                });
            }
        }
        out
    }

    #[test]
    fn the_index_agrees_with_the_brute_force_reference_on_random_views() {
        let mut rng = Rng::new(2024);
        // Indexes kept across views, as the plugin keeps them across calls.
        let mut indexes = [
            Index::default(),
            Index::with_limits(0, usize::MAX),
            Index::with_limits(usize::MAX, 0),
            Index::with_limits(5, 2),
        ];
        let mut scratch = Scratch::default();
        let mut placed = 0usize;
        for round in 0..400 {
            let data = random_view(&mut rng);
            let view = data.view();
            for config in configs(&mut rng) {
                let mut want = Decisions::new();
                place(&config, &view, &mut Scratch::default(), &mut Reference, &mut want);
                assert_valid(&view, want.as_slice());
                placed += want.len();
                for (i, index) in indexes.iter_mut().enumerate() {
                    let mut got = Decisions::new();
                    place(&config, &view, &mut scratch, index, &mut got);
                    assert_eq!(got, want, "round {round}, index {i}, {config:?}");
                }
            }
        }
        assert!(placed > 10_000, "the random views place something: {placed}");
    }
}
