//! One round of the policy on a view: what each queue holds and could use, its ideal amount
//! ([`crate::ideal`]), how much each over-capacity leaf gives back ([`crate::amounts`]), and
//! which containers.

use crate::amounts::{LeafFigures, targets};
use crate::config::{Calculator, PreemptionConfig};
use crate::ideal::{QueueInput, ideal_assignment};
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::collections::BTreeMap;

/// Turns resources into the resource calculator's single number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    calculator: Calculator,
    cluster: GantryResources,
}

impl Measure {
    /// A measure for this calculator; `cluster` is the whole (dominant shares are fractions of it).
    pub fn new(calculator: Calculator, cluster: GantryResources) -> Measure {
        Measure { calculator, cluster }
    }

    /// The measure of the whole cluster (bytes of memory, or 1 for dominant shares).
    pub fn total(&self) -> f64 {
        self.of(&self.cluster)
    }

    /// Bytes of memory, or the largest share of the cluster over the dimensions it has.
    pub fn of(&self, r: &GantryResources) -> f64 {
        match self.calculator {
            Calculator::Memory => r.memory_bytes as f64,
            Calculator::Dominant => {
                let share = |x: u64, of: u64| if of == 0 { 0.0 } else { x as f64 / of as f64 };
                share(r.cpu_millis, self.cluster.cpu_millis)
                    .max(share(r.memory_bytes, self.cluster.memory_bytes))
                    .max(share(u64::from(r.gpus), u64::from(self.cluster.gpus)))
            }
        }
    }
}

/// The cluster a view's queues are shares of: the root queue's absolute guarantee (RUNNING nodes'
/// capacity plus what draining nodes still hold), or the view's cluster when there is no root.
pub fn cluster_of(view: &View<'_>) -> GantryResources {
    view.queues
        .iter()
        .find(|q| q.parent == GANTRY_NONE)
        .map(|q| q.absolute_guaranteed)
        .filter(|r| !r.is_zero())
        .unwrap_or(view.cluster)
}

/// One queue's figures for a round, in the calculator's unit. Parents' figures cover their
/// subtree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueuePlan {
    /// Absolute guaranteed capacity.
    pub guarantee: f64,
    /// Absolute maximum capacity.
    pub maximum: f64,
    /// What its running (not stopping) containers hold.
    pub held: f64,
    /// What its pending requests ask for, counting only requests that could run on freed room.
    pub pending: f64,
    /// Its ideal amount.
    pub ideal: f64,
    /// What it is to have given back after this round, its containers marked before included
    /// (leaves only): a fraction of containers ([`crate::amounts`]).
    pub to_preempt: f64,
    /// What the containers selected from it free.
    pub selected: f64,
    /// What `to_preempt` left untaken (less than a container), carried to the next round.
    pub carry: f64,
}

/// The outcome of one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The cluster, in the calculator's unit.
    pub total: f64,
    /// What the queues share: the cluster less the free room on nodes no pending request could
    /// use (its selector matches none of them).
    pub available: f64,
    /// What the under-served queues lack beyond what free and stopping room gives them: the
    /// victims never free more.
    pub need: f64,
    /// Per queue, in the view's order.
    pub queues: Vec<QueuePlan>,
    /// Containers to preempt (indexes in the view), in the order they were chosen.
    pub victims: Vec<u32>,
}

fn live(c: &GantryContainer) -> bool {
    matches!(c.state, GANTRY_CONTAINER_ALLOCATED | GANTRY_CONTAINER_RUNNING)
}

fn app_live(view: &View<'_>, app: u32) -> bool {
    view.apps.get(app as usize).is_some_and(|a| matches!(a.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING))
}

/// Whether a container may be selected: running or allocated (not stopping), of a live app.
pub fn selectable(view: &View<'_>, c: &GantryContainer) -> bool {
    live(c) && app_live(view, c.app)
}

/// A pending request, as far as preemption cares.
struct Pending {
    leaf: usize,
    shape: usize,
    want: GantryResources,
}

/// Pending requests of one size and selector.
struct Shape {
    resources: GantryResources,
    /// RUNNING nodes it fits on when empty (selector and capacity).
    nodes: Vec<u32>,
}

/// Computes one round. `was_selected` tells which container ids the previous round selected: they
/// count as already being given back, and the victim order prefers them, so a selection stays put
/// while it is still needed. `carried` is each queue's carry from the previous round (by index in
/// this view).
pub fn plan(
    view: &View<'_>,
    config: &PreemptionConfig,
    was_selected: impl Fn(u64) -> bool,
    carried: impl Fn(usize) -> f64,
) -> Plan {
    let m = Measure::new(config.resource_calculator, cluster_of(view));
    let total = m.total();
    let nq = view.queues.len();
    let mut plan = Plan { total, queues: vec![QueuePlan::default(); nq], ..Plan::default() };
    if nq == 0 || total <= 0.0 {
        return plan;
    }
    let eps = 1e-9 * total;
    let parent = |q: usize| Some(view.queues[q].parent as usize).filter(|&p| p < q);
    let mut is_leaf = vec![true; nq];
    for q in 0..nq {
        if let Some(p) = parent(q) {
            is_leaf[p] = false;
        }
    }
    let queue_of = |app: u32| view.apps.get(app as usize).map(|a| a.queue as usize).filter(|&q| q < nq);
    let preemptable: Vec<bool> =
        view.queues.iter().map(|q| !config.preemption_disabled(view.str(q.name))).collect();
    let dead_zone = config.max_ignored_over_capacity;

    // What each queue's running containers hold, and per node what is free and what stopping
    // containers will free.
    let mut held = vec![GantryResources::default(); nq];
    let nn = view.nodes.len();
    let mut free: Vec<GantryResources> = view.nodes.iter().map(|n| n.capacity.minus(&n.allocated)).collect();
    for c in view.containers {
        if live(c) {
            if let Some(q) = queue_of(c.app) {
                held[q] = held[q].plus(&c.resources);
            }
        } else if c.state == GANTRY_CONTAINER_STOPPING
            && let Some(f) = free.get_mut(c.node as usize)
        {
            *f = f.plus(&c.resources);
        }
    }

    // Pending requests, grouped by shape so each shape is matched against the nodes once.
    let mut shapes: Vec<Shape> = Vec::new();
    type ShapeKey = (u64, u64, u32, Vec<(u32, u32, u32, u32)>);
    let mut shape_index: BTreeMap<ShapeKey, usize> = BTreeMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    for &ri in view.pending {
        let Some(r) = view.requests.get(ri as usize) else { continue };
        let Some(leaf) = queue_of(r.app) else { continue };
        if r.placed >= r.count || r.resources.is_zero() {
            continue;
        }
        let res = r.resources;
        let selector = View::range(view.labels, r.selector)
            .iter()
            .map(|l| (l.key.offset, l.key.len, l.value.offset, l.value.len))
            .collect();
        let key = (res.cpu_millis, res.memory_bytes, res.gpus, selector);
        let shape = match shape_index.get(&key) {
            Some(&s) => s,
            None => {
                let nodes = (0..nn as u32)
                    .filter(|&n| {
                        let node = &view.nodes[n as usize];
                        node.state == GANTRY_NODE_RUNNING
                            && r.resources.fits_in(&node.capacity)
                            && view.node_matches(node, r.selector)
                    })
                    .collect();
                shape_index.insert(key, shapes.len());
                shapes.push(Shape { resources: r.resources, nodes });
                shapes.len() - 1
            }
        };
        pending.push(Pending { leaf, shape, want: r.resources.times(r.count - r.placed) });
    }

    // Free room no pending request could ever use is no use to anyone: the queues share what is
    // left. On each RUNNING node only the room that holds whole containers of some pending shape
    // counts — all of it is stranded on a node no shape fits at all, and a fragment smaller than
    // every shape that fits there is too, or a queue would be promised room nobody can use and,
    // taking whole containers, stay one short for ever.
    let stranded = (0..nn)
        .filter(|&n| view.nodes[n].state == GANTRY_NODE_RUNNING)
        .map(|n| {
            let usable = shapes
                .iter()
                .filter(|shape| shape.nodes.contains(&(n as u32)))
                .map(|shape| whole_fits(&free[n], &shape.resources) as f64 * m.of(&shape.resources))
                .fold(0.0, f64::max);
            (m.of(&free[n]) - usable).max(0.0)
        })
        .sum::<f64>();
    let available = (total - stranded).max(0.0);
    plan.available = available;

    // Which requests count: at first every request some node could ever hold; then only those
    // that some node could hold once the over-capacity queues' containers on it are gone. Fewer
    // counted requests can only shrink the set of over-capacity queues, so this settles.
    let mut counted: Vec<bool> = pending.iter().map(|p| !shapes[p.shape].nodes.is_empty()).collect();
    let mut over_prev: Option<Vec<bool>> = None;
    let mut ideal;
    let mut held_m;
    let mut over;
    let mut room_after = free.clone();
    let mut rounds = 0;
    loop {
        let mut asked = vec![GantryResources::default(); nq];
        for (p, _) in pending.iter().zip(&counted).filter(|(_, c)| **c) {
            asked[p.leaf] = asked[p.leaf].plus(&p.want);
        }
        let inputs: Vec<QueueInput> = (0..nq)
            .map(|q| {
                let rec = &view.queues[q];
                QueueInput {
                    parent: parent(q),
                    guarantee: m.of(&rec.absolute_guaranteed),
                    maximum: m.of(&rec.absolute_maximum),
                    held: m.of(&held[q]),
                    demand: m.of(&held[q].plus(&asked[q])),
                    keeps_all: is_leaf[q] && !preemptable[q],
                }
            })
            .collect();
        ideal = ideal_assignment(&inputs, available);
        held_m = inputs.iter().map(|i| i.held).collect::<Vec<f64>>();
        over = (0..nq)
            .map(|q| {
                let figures = LeafFigures {
                    held: held_m[q],
                    ideal: ideal[q],
                    guarantee: inputs[q].guarantee,
                    preemptable: preemptable[q],
                    ..LeafFigures::default()
                };
                is_leaf[q] && figures.over_capacity(dead_zone, eps)
            })
            .collect::<Vec<bool>>();
        for (q, plan_q) in plan.queues.iter_mut().enumerate() {
            plan_q.guarantee = inputs[q].guarantee;
            plan_q.maximum = inputs[q].maximum;
            plan_q.ideal = ideal[q];
        }
        rounds += 1;
        if over_prev.as_ref() == Some(&over) || rounds > nq + 1 {
            break;
        }
        // Room each node would have once the over-capacity queues' containers on it are gone.
        room_after.clone_from(&free);
        for c in view.containers {
            if selectable(view, c)
                && queue_of(c.app).is_some_and(|q| over[q])
                && let Some(r) = room_after.get_mut(c.node as usize)
            {
                *r = r.plus(&c.resources);
            }
        }
        let fits: Vec<bool> = shapes
            .iter()
            .map(|shape| shape.nodes.iter().any(|&n| shape.resources.fits_in(&room_after[n as usize])))
            .collect();
        for (p, count) in pending.iter().zip(counted.iter_mut()) {
            *count = !over[p.leaf] && fits[p.shape];
        }
        over_prev = Some(over.clone());
    }

    // Subtree figures for the report.
    let mut held_sub = held_m.clone();
    let mut pending_sub = vec![0.0; nq];
    for (p, _) in pending.iter().zip(&counted).filter(|(_, c)| **c) {
        pending_sub[p.leaf] += m.of(&p.want);
    }
    for q in (0..nq).rev() {
        if let Some(p) = parent(q) {
            held_sub[p] += held_sub[q];
            pending_sub[p] += pending_sub[q];
        }
    }
    for (q, plan_q) in plan.queues.iter_mut().enumerate() {
        plan_q.held = held_sub[q];
        plan_q.pending = pending_sub[q];
    }

    // Nodes where freed room helps: some counted request of an under-served leaf fits there once
    // the over-capacity queues' containers are gone.
    let under: Vec<bool> = (0..nq).map(|q| is_leaf[q] && ideal[q] - held_m[q] > eps).collect();
    let mut wanted_shape = vec![false; shapes.len()];
    for (p, _) in pending.iter().zip(&counted).filter(|(p, c)| **c && under[p.leaf]) {
        wanted_shape[p.shape] = true;
    }
    let mut useful = vec![false; nn];
    for (shape, _) in shapes.iter().zip(&wanted_shape).filter(|(_, w)| **w) {
        for &n in &shape.nodes {
            if shape.resources.fits_in(&room_after[n as usize]) {
                useful[n as usize] = true;
            }
        }
    }
    // The free (and freeing) room the under-served leaves can use: per node, the most whole
    // containers of one of their shapes it holds. Fragments no pending container fits in do not
    // count, or a queue could stay short of one container for ever.
    let usable_free: f64 = (0..nn)
        .map(|n| {
            let best = shapes
                .iter()
                .zip(&wanted_shape)
                .filter(|(shape, w)| **w && shape.nodes.contains(&(n as u32)))
                .map(|(shape, _)| whole_fits(&free[n], &shape.resources) as f64 * m.of(&shape.resources))
                .fold(0.0, f64::max);
            best.min(m.of(&free[n]))
        })
        .sum();

    // How much each over-capacity leaf is to have given back (amounts.rs): what is marked already
    // counts, and so does what ends on its own within the kill wait where run times are known.
    let horizon = view.now_ms.saturating_add(config.max_wait_before_kill_ms);
    let mut marked = vec![0.0; nq];
    let mut ending = vec![0.0; nq];
    let mut unknown_runtime = vec![!config.use_expected_runtimes; nq];
    for c in view.containers.iter().filter(|c| selectable(view, c)) {
        let Some(q) = queue_of(c.app) else { continue };
        let size = m.of(&c.resources);
        if was_selected(c.id) {
            marked[q] += size;
        }
        let expected = view.requests.get(c.request as usize).map_or(0, |r| r.expected_run_ms());
        if expected == 0 {
            unknown_runtime[q] = true;
        } else if c.start_ms.saturating_add(expected) <= horizon {
            ending[q] += size;
        }
    }
    let leaves: Vec<LeafFigures> = (0..nq)
        .filter(|&q| is_leaf[q])
        .map(|q| LeafFigures {
            queue: q,
            held: held_m[q],
            ideal: ideal[q],
            guarantee: plan.queues[q].guarantee,
            preemptable: preemptable[q],
            marked: marked[q],
            carry: carried(q).max(0.0),
            ending: (!unknown_runtime[q]).then_some(ending[q]),
        })
        .collect();
    // What the under-served leaves lack, in whole containers of what they ask for (all they can
    // run): the victims never free more (they would end over their ideal and the next round
    // would take it back), and never more than that less the free room they can use.
    let lack_total: f64 = leaves
        .iter()
        .filter(|l| under[l.queue])
        .map(|l| {
            let unit = pending
                .iter()
                .zip(&counted)
                .filter(|(p, c)| **c && p.leaf == l.queue)
                .map(|(p, _)| m.of(&shapes[p.shape].resources))
                .filter(|u| *u > eps)
                .fold(f64::INFINITY, f64::min);
            let lack = l.lack();
            if !unit.is_finite() {
                return lack;
            }
            // Rounded up where the extra part of a container would not make the queue over
            // capacity itself (the next round would take it back: two queues above their
            // guarantees would trade a container for ever), down otherwise.
            let up = ((lack / unit - 1e-9).ceil() * unit).min(m.of(&asked_of(&pending, &counted, l.queue)));
            let settled = l.ideal.max(l.guarantee * (1.0 + dead_zone));
            if l.held + up <= settled + eps { up.max(lack) } else { (lack / unit + 1e-9).floor() * unit }
        })
        .sum();
    let need = (lack_total - usable_free).max(0.0);
    plan.need = need;
    let t = targets(&leaves, total, need, config);
    for (leaf, target) in leaves.iter().zip(&t.target) {
        plan.queues[leaf.queue].to_preempt = *target;
        plan.queues[leaf.queue].carry = *target;
    }
    if need <= eps || t.target.iter().all(|a| *a <= eps) {
        return plan;
    }
    let complete: Vec<bool> = {
        let mut c = vec![false; nq];
        for (i, leaf) in leaves.iter().enumerate() {
            c[leaf.queue] = t.complete(i, eps);
        }
        c
    };

    // What the under-served leaves need, per dimension: the part of their counted pending
    // requests their lack covers, less what is free or being freed on the nodes that help. A
    // victim must free some dimension that is still needed (under the dominant calculator a
    // queue's share and another's lack may be in different resources).
    let mut wanted = [0.0f64; 3];
    for q in (0..nq).filter(|&q| under[q]) {
        let lack = ideal[q] - held_m[q];
        let asked = asked_of(&pending, &counted, q);
        let asked_m = m.of(&asked);
        if asked_m > 0.0 {
            let share = (lack / asked_m).min(1.0);
            let v = dims(&asked);
            for d in 0..3 {
                wanted[d] += v[d] * share;
            }
        }
    }
    for (n, room) in free.iter().enumerate() {
        if useful[n] {
            let room = dims(room);
            for d in 0..3 {
                wanted[d] -= room[d];
            }
        }
    }

    // Victims: leaves that are to give back most first; within a leaf, newest application first,
    // its newest container first, masters after everything else; containers selected last round
    // before others, so a selection stays put while it is needed. A leaf is never taken below its
    // guarantee, and selection stops once the need is met.
    let mut order: Vec<(usize, f64)> =
        leaves.iter().zip(&t.target).filter(|(_, a)| **a > eps).map(|(l, a)| (l.queue, *a)).collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut taken_total = 0.0;
    for (q, amount) in order {
        // Candidates come in units: a container, or a whole gang (stopping one member restarts
        // the gang, so all its members' room comes free together).
        let mut units: Vec<Vec<u32>> = Vec::new();
        let mut gang_unit: BTreeMap<u32, usize> = BTreeMap::new();
        for i in 0..view.containers.len() as u32 {
            let c = &view.containers[i as usize];
            if !selectable(view, c) || queue_of(c.app) != Some(q) {
                continue;
            }
            let gang =
                view.requests.get(c.request as usize).is_some_and(|r| r.flags & GANTRY_REQUEST_GANG != 0);
            match gang.then(|| gang_unit.get(&c.request)).flatten() {
                Some(&u) => units[u].push(i),
                None => {
                    if gang {
                        gang_unit.insert(c.request, units.len());
                    }
                    units.push(vec![i]);
                }
            }
        }
        units.retain(|u| {
            u.iter().any(|&i| useful.get(view.containers[i as usize].node as usize) == Some(&true))
        });
        units.sort_by_cached_key(|u| {
            let c = |i: u32| &view.containers[i as usize];
            let app = &view.apps[c(u[0]).app as usize];
            (
                u.iter().any(|&i| c(i).flags & GANTRY_CONTAINER_MASTER != 0),
                !u.iter().any(|&i| was_selected(c(i).id)),
                core::cmp::Reverse((app.submit_ms, app.id)),
                core::cmp::Reverse(u.iter().map(|&i| (c(i).start_ms, c(i).id)).max()),
            )
        });
        let guarantee = plan.queues[q].guarantee;
        let mut taken = GantryResources::default();
        let mut freed = 0.0;
        for unit in units {
            if freed >= amount - eps || taken_total >= need - eps || wanted.iter().all(|w| *w <= 0.0) {
                break;
            }
            let size = unit
                .iter()
                .fold(GantryResources::default(), |acc, &i| acc.plus(&view.containers[i as usize].resources));
            let next = taken.plus(&size);
            let next_freed = held_m[q] - m.of(&held[q].minus(&next));
            let gain = next_freed - freed;
            let frees = dims(&size);
            let helps = (0..3).any(|d| wanted[d] > 0.0 && frees[d] > 0.0);
            // Skip a unit that frees nothing needed or nothing that counts; that would take the
            // leaf past its target while the target is still paced (what is left carries over:
            // damping never turns part of a container into a whole preemption); that would take
            // the total past the need or past what the under-served queues lack (they would end
            // over their ideal and the next round would take it back); or of a leaf already down
            // to its guarantee (the last unit may leave it less than itself below: with whole
            // containers the alternative leaves the under-served queue one short for ever).
            if !helps
                || gain <= eps
                || (freed + gain > amount + eps && !complete[q])
                || taken_total + gain > need + eps
                || taken_total + gain > lack_total + eps
                || held_m[q] - freed <= guarantee + eps
            {
                continue;
            }
            plan.victims.extend_from_slice(&unit);
            for d in 0..3 {
                wanted[d] -= frees[d];
            }
            taken_total += gain;
            taken = next;
            freed = next_freed;
        }
        plan.queues[q].selected = freed;
        plan.queues[q].carry = (amount - freed).max(0.0);
    }
    plan
}

/// How many whole containers of size `r` fit in `free`.
fn whole_fits(free: &GantryResources, r: &GantryResources) -> u64 {
    let dims = [
        (free.cpu_millis, r.cpu_millis),
        (free.memory_bytes, r.memory_bytes),
        (u64::from(free.gpus), u64::from(r.gpus)),
    ];
    dims.iter().filter(|(_, need)| *need > 0).map(|(have, need)| have / need).min().unwrap_or(0)
}

/// CPU, memory and GPUs as numbers.
fn dims(r: &GantryResources) -> [f64; 3] {
    [r.cpu_millis as f64, r.memory_bytes as f64, f64::from(r.gpus)]
}

/// What leaf `q`'s counted pending requests ask for.
fn asked_of(pending: &[Pending], counted: &[bool], q: usize) -> GantryResources {
    pending
        .iter()
        .zip(counted)
        .filter(|(p, c)| **c && p.leaf == q)
        .fold(GantryResources::default(), |acc, (p, _)| acc.plus(&p.want))
}

#[cfg(test)]
mod tests;
