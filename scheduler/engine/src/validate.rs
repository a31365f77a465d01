//! The core never trusts a plugin: every decision is checked here against the state the plugin
//! was shown, before anything is applied. Invalid decisions are dropped, counted by reason, and —
//! when they show the plugin is broken rather than merely wrong about feasibility — count toward
//! its quarantine.

use crate::state::{ClusterState, app_is_terminal, container_is_live};
use gantry_sdk::View;
use gantry_sdk::abi::*;
use std::collections::HashMap;

/// Longest grace period a PREEMPT may ask for (one hour).
pub const MAX_GRACE_MS: u64 = 3_600_000;

/// Why a decision was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectReason {
    /// The decision kind is unknown or not valid for this hook.
    BadKind,
    /// The subject index is out of range.
    UnknownSubject,
    /// The target node index is out of range.
    UnknownNode,
    /// The same subject was decided twice where once is the rule.
    Duplicate,
    /// The subject is not in a state the decision applies to (e.g. not pending, not new).
    WrongState,
    /// A value is out of its range (grace period, capacity).
    InvalidValue,
    /// The node accepts no containers (draining, lost, unhealthy).
    NodeNotSchedulable,
    /// The node lacks a label of the request's selector.
    SelectorMismatch,
    /// The node has no room left.
    DoesNotFit,
    /// The queue (or an ancestor) would exceed its maximum capacity.
    QueueMaximum,
    /// A gang got fewer or more placements than its size.
    GangIncomplete,
    /// A same-rack gang was spread over racks.
    RackConstraint,
    /// More placements than the request has containers left.
    TooMany,
    /// Sibling queues would be guaranteed more than their parent.
    QueueCapacity,
    /// The container is already stopping (e.g. preempted again during its grace period).
    AlreadyStopping,
    /// `reserve`: an allocation piece for a reservation without a PLAN decision, of an atom the
    /// definition lacks, empty, of zero bundles, or too many pieces.
    BadAllocation,
    /// `reserve`: a piece outside its atom's window, or a new piece before now.
    OutsideWindow,
    /// `reserve`: bundles not a multiple of the atom's gang `g`, or above its `h`.
    GangSize,
    /// `reserve`: a run of an atom's allocation shorter than its lease.
    ShortLease,
    /// `reserve`: the definition's work is not all allocated.
    WorkMissing,
    /// `reserve`: a part of an `order` starts before the previous one ends.
    OrderBroken,
    /// `reserve`: the allocations would exceed the plan's capacity.
    OverCapacity,
    /// `reserve`: an accepted reservation's allocation before now changed.
    PastChanged,
}

impl RejectReason {
    /// Every reason, in a fixed order (for metrics).
    pub const ALL: [RejectReason; 23] = [
        RejectReason::BadKind,
        RejectReason::UnknownSubject,
        RejectReason::UnknownNode,
        RejectReason::Duplicate,
        RejectReason::WrongState,
        RejectReason::InvalidValue,
        RejectReason::NodeNotSchedulable,
        RejectReason::SelectorMismatch,
        RejectReason::DoesNotFit,
        RejectReason::QueueMaximum,
        RejectReason::GangIncomplete,
        RejectReason::RackConstraint,
        RejectReason::TooMany,
        RejectReason::QueueCapacity,
        RejectReason::AlreadyStopping,
        RejectReason::BadAllocation,
        RejectReason::OutsideWindow,
        RejectReason::GangSize,
        RejectReason::ShortLease,
        RejectReason::WorkMissing,
        RejectReason::OrderBroken,
        RejectReason::OverCapacity,
        RejectReason::PastChanged,
    ];

    /// A short snake_case name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::BadKind => "bad_kind",
            RejectReason::UnknownSubject => "unknown_subject",
            RejectReason::UnknownNode => "unknown_node",
            RejectReason::Duplicate => "duplicate",
            RejectReason::WrongState => "wrong_state",
            RejectReason::InvalidValue => "invalid_value",
            RejectReason::NodeNotSchedulable => "node_not_schedulable",
            RejectReason::SelectorMismatch => "selector_mismatch",
            RejectReason::DoesNotFit => "does_not_fit",
            RejectReason::QueueMaximum => "queue_maximum",
            RejectReason::GangIncomplete => "gang_incomplete",
            RejectReason::RackConstraint => "rack_constraint",
            RejectReason::TooMany => "too_many",
            RejectReason::QueueCapacity => "queue_capacity",
            RejectReason::AlreadyStopping => "already_stopping",
            RejectReason::BadAllocation => "bad_allocation",
            RejectReason::OutsideWindow => "outside_window",
            RejectReason::GangSize => "gang_size",
            RejectReason::ShortLease => "short_lease",
            RejectReason::WorkMissing => "work_missing",
            RejectReason::OrderBroken => "order_broken",
            RejectReason::OverCapacity => "over_capacity",
            RejectReason::PastChanged => "past_changed",
        }
    }

    /// What the rule is, in words, for the diagnostics of the request a refused decision named.
    pub fn describe(self) -> &'static str {
        match self {
            RejectReason::BadKind => "it was of a kind this hook does not take",
            RejectReason::UnknownSubject => "it named a record the view does not have",
            RejectReason::UnknownNode => "it named a node the view does not have",
            RejectReason::Duplicate => "it named the same thing twice",
            RejectReason::WrongState => {
                "the request had nothing left to place, or its application was not admitted"
            }
            RejectReason::InvalidValue => "a value was out of range",
            RejectReason::NodeNotSchedulable => {
                "it chose a node that accepts no containers (draining, unhealthy or lost)"
            }
            RejectReason::SelectorMismatch => "it chose a node without the request's labels",
            RejectReason::DoesNotFit => "it chose a node without room for the container",
            RejectReason::QueueMaximum => "the container would take its queue above its maximum",
            RejectReason::GangIncomplete => {
                "a gang is placed whole: one placement per member, all in one call"
            }
            RejectReason::RackConstraint => "it broke the request's same-rack requirement",
            RejectReason::TooMany => "more placements than the request has containers left",
            RejectReason::QueueCapacity => "sibling queues would be guaranteed more than their parent",
            RejectReason::AlreadyStopping => "the container was already stopping",
            RejectReason::BadAllocation => "an allocation piece was malformed",
            RejectReason::OutsideWindow => "an allocation piece lay outside its window",
            RejectReason::GangSize => "an allocation broke the gang size or the most bundles at once",
            RejectReason::ShortLease => "an allocation ran shorter than the lease",
            RejectReason::WorkMissing => "an allocation did not hold all the work",
            RejectReason::OrderBroken => "an allocation broke an order",
            RejectReason::OverCapacity => "the allocations would exceed the plan's capacity",
            RejectReason::PastChanged => "an allocation changed what was held before now",
        }
    }

    /// Whether this shows the plugin is broken (it could not have been right about anything in
    /// the view it was given), as opposed to a placement the rules forbid.
    pub fn is_malformed(self) -> bool {
        matches!(
            self,
            RejectReason::BadKind
                | RejectReason::UnknownSubject
                | RejectReason::UnknownNode
                | RejectReason::Duplicate
                | RejectReason::WrongState
                | RejectReason::InvalidValue
                | RejectReason::BadAllocation
        )
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Rejections of one call, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rejections {
    counts: [u64; RejectReason::ALL.len()],
}

impl Rejections {
    pub(crate) fn add(&mut self, reason: RejectReason, n: u64) {
        self.counts[reason.index()] += n;
    }

    /// Rejections for `reason`.
    pub fn get(&self, reason: RejectReason) -> u64 {
        self.counts[reason.index()]
    }

    /// All rejections.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Whether any rejection shows a broken plugin.
    pub fn any_malformed(&self) -> bool {
        RejectReason::ALL.iter().any(|r| r.is_malformed() && self.get(*r) > 0)
    }

    /// Adds another tally to this one.
    pub fn merge(&mut self, other: &Rejections) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// (reason, count) for every non-zero reason.
    pub fn iter(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL.iter().map(|r| (*r, self.get(*r))).filter(|(_, n)| *n > 0)
    }
}

/// The outcome of `admit`: which new apps to reject (with the plugin's reason).
#[derive(Debug, Default)]
pub struct AdmitOutcome {
    /// (app index, reason code).
    pub rejected_apps: Vec<(u32, u32)>,
}

/// Checks `admit` decisions.
pub fn admit(state: &ClusterState, decisions: &[GantryDecision], rej: &mut Rejections) -> AdmitOutcome {
    let mut out = AdmitOutcome::default();
    let mut seen_apps = vec![false; state.apps.len()];
    for d in decisions {
        let accept = match d.kind {
            GANTRY_DECISION_ACCEPT_APP => true,
            GANTRY_DECISION_REJECT_APP => false,
            // Reservations are planned by `reserve` (ABI 1.3): admit never sees a NEW one.
            GANTRY_DECISION_ACCEPT_RESERVATION | GANTRY_DECISION_REJECT_RESERVATION => {
                rej.add(RejectReason::WrongState, 1);
                continue;
            }
            _ => {
                rej.add(RejectReason::BadKind, 1);
                continue;
            }
        };
        let i = d.subject as usize;
        let (seen, state_ok) = match state.apps.get(i) {
            Some(a) => (&mut seen_apps[i], a.state == GANTRY_APP_NEW),
            None => {
                rej.add(RejectReason::UnknownSubject, 1);
                continue;
            }
        };
        if *seen {
            rej.add(RejectReason::Duplicate, 1);
            continue;
        }
        *seen = true;
        if !state_ok {
            rej.add(RejectReason::WrongState, 1);
            continue;
        }
        if !accept {
            out.rejected_apps.push((d.subject, d.reason));
        }
    }
    out
}

/// Checks `order` decisions and returns the new pending order: the valid ones first, then the
/// rest in their previous order.
pub fn order(
    state: &ClusterState,
    pending: &[u32],
    decisions: &[GantryDecision],
    rej: &mut Rejections,
) -> Vec<u32> {
    // 0 = not pending, 1 = pending and not yet ordered, 2 = ordered.
    let mut mark = vec![0u8; state.requests.len()];
    for &p in pending {
        mark[p as usize] = 1;
    }
    let mut ordered = Vec::with_capacity(pending.len());
    for d in decisions {
        if d.kind != GANTRY_DECISION_ORDER {
            rej.add(RejectReason::BadKind, 1);
            continue;
        }
        match mark.get(d.subject as usize) {
            None => rej.add(RejectReason::UnknownSubject, 1),
            Some(0) => rej.add(RejectReason::WrongState, 1),
            Some(2) => rej.add(RejectReason::Duplicate, 1),
            Some(_) => {
                mark[d.subject as usize] = 2;
                ordered.push(d.subject);
            }
        }
    }
    ordered.extend(pending.iter().copied().filter(|&p| mark[p as usize] == 1));
    ordered
}

/// One accepted placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Request index.
    pub request: u32,
    /// Node index.
    pub node: u32,
}

/// Tentative allocations of one batch, on top of the state's.
struct Tentative {
    nodes: HashMap<u32, GantryResources>,
    queues: Vec<GantryResources>,
}

impl Tentative {
    fn node_alloc(&self, state: &ClusterState, node: u32) -> GantryResources {
        let base = state.nodes[node as usize].allocated;
        self.nodes.get(&node).map_or(base, |d| base.plus(d))
    }

    fn queue_room(&self, state: &ClusterState, queue: u32, res: &GantryResources) -> bool {
        let mut q = queue;
        while let Some(rec) = state.queues.get(q as usize) {
            if !rec.used.plus(&self.queues[q as usize]).plus(res).fits_in(&rec.absolute_maximum) {
                return false;
            }
            q = rec.parent;
        }
        true
    }

    fn charge(&mut self, state: &ClusterState, node: u32, queue: u32, res: &GantryResources) {
        let e = self.nodes.entry(node).or_default();
        *e = e.plus(res);
        let mut q = queue;
        while let Some(rec) = state.queues.get(q as usize) {
            self.queues[q as usize] = self.queues[q as usize].plus(res);
            q = rec.parent;
        }
    }
}

/// What a `place` call said about one request besides placing it: a WAIT with the plugin's
/// reason code, or a refused PLACE. The engine turns these into the request's pending reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceNote {
    /// The plugin left it waiting, with its own reason code.
    Wait(u32),
    /// A placement of it was refused.
    Refused(RejectReason),
}

/// Checks `place` decisions against the state and each other, in order. Gangs are all-or-nothing:
/// if any member is invalid, none is placed. Returns the accepted placements in decision order;
/// appends to `notes` (request index, note) for each WAIT and each refused placement.
pub fn place(
    state: &ClusterState,
    decisions: &[GantryDecision],
    rej: &mut Rejections,
    notes: &mut Vec<(u32, PlaceNote)>,
) -> Vec<Placement> {
    // Group PLACE decisions by request, keeping the order in which requests first appear.
    let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut group_of: HashMap<u32, usize> = HashMap::new();
    for d in decisions {
        match d.kind {
            GANTRY_DECISION_PLACE => {
                let g = *group_of.entry(d.subject).or_insert_with(|| {
                    groups.push((d.subject, Vec::new()));
                    groups.len() - 1
                });
                groups[g].1.push(d.target);
            }
            GANTRY_DECISION_WAIT => {
                if state.requests.get(d.subject as usize).is_none() {
                    rej.add(RejectReason::UnknownSubject, 1);
                } else {
                    notes.push((d.subject, PlaceNote::Wait(d.reason)));
                }
            }
            _ => rej.add(RejectReason::BadKind, 1),
        }
    }
    let mut tent =
        Tentative { nodes: HashMap::new(), queues: vec![GantryResources::default(); state.queues.len()] };
    let mut accepted = Vec::new();
    for (request, nodes) in groups {
        let n = nodes.len() as u64;
        let Some(req) = state.requests.get(request as usize) else {
            rej.add(RejectReason::UnknownSubject, n);
            continue;
        };
        let app = &state.apps[req.app as usize];
        if !matches!(app.state, GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING) || req.placed >= req.count {
            rej.add(RejectReason::WrongState, n);
            continue;
        }
        let mut refuse = |reason: RejectReason, n: u64| {
            rej.add(reason, n);
            notes.push((request, PlaceNote::Refused(reason)));
        };
        let gang = req.flags & GANTRY_REQUEST_GANG != 0;
        if gang {
            if req.placed != 0 || nodes.len() != req.count as usize {
                refuse(RejectReason::GangIncomplete, n);
                continue;
            }
            let same_rack = req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0;
            let first_rack = nodes.first().and_then(|&i| state.nodes.get(i as usize)).map(|n| n.rack);
            // Check the members against a copy, so a failing member leaves no trace.
            let mut trial = Tentative { nodes: tent.nodes.clone(), queues: tent.queues.clone() };
            let mut failure = None;
            for &node in &nodes {
                if let Err(reason) = check_one(state, &trial, req, app.queue, node) {
                    failure = Some(reason);
                    break;
                }
                if same_rack && first_rack != Some(state.nodes[node as usize].rack) {
                    failure = Some(RejectReason::RackConstraint);
                    break;
                }
                trial.charge(state, node, app.queue, &req.resources);
            }
            match failure {
                Some(reason) => refuse(reason, n),
                None => {
                    tent = trial;
                    accepted.extend(nodes.iter().map(|&node| Placement { request, node }));
                }
            }
            continue;
        }
        let remaining = req.count - req.placed;
        // A same-rack request stays on the rack its running containers use, or else the rack of
        // its first placement in this batch.
        let mut rack = (req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0)
            .then(|| state.request_rack(request))
            .flatten();
        for (k, &node) in nodes.iter().enumerate() {
            if k as u32 >= remaining {
                refuse(RejectReason::TooMany, 1);
                continue;
            }
            let on_rack = match (rack, state.nodes.get(node as usize)) {
                (Some(r), Some(n)) => r == n.rack,
                _ => true,
            };
            match check_one(state, &tent, req, app.queue, node) {
                Ok(()) if !on_rack => refuse(RejectReason::RackConstraint, 1),
                Ok(()) => {
                    if req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0 {
                        rack = Some(state.nodes[node as usize].rack);
                    }
                    tent.charge(state, node, app.queue, &req.resources);
                    accepted.push(Placement { request, node });
                }
                Err(reason) => refuse(reason, 1),
            }
        }
    }
    accepted
}

fn check_one(
    state: &ClusterState,
    tent: &Tentative,
    req: &GantryRequest,
    queue: u32,
    node: u32,
) -> Result<(), RejectReason> {
    let Some(n) = state.nodes.get(node as usize) else {
        return Err(RejectReason::UnknownNode);
    };
    if n.state != GANTRY_NODE_RUNNING {
        return Err(RejectReason::NodeNotSchedulable);
    }
    let have = View::range(&state.labels, n.labels);
    if !View::labels_satisfy(state.strings.bytes(), have, View::range(&state.labels, req.selector)) {
        return Err(RejectReason::SelectorMismatch);
    }
    if !tent.node_alloc(state, node).plus(&req.resources).fits_in(&n.capacity) {
        return Err(RejectReason::DoesNotFit);
    }
    if !tent.queue_room(state, queue, &req.resources) {
        return Err(RejectReason::QueueMaximum);
    }
    Ok(())
}

/// An accepted `rebalance` action.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RebalanceAction {
    /// Preempt container index with this grace.
    Preempt {
        /// Container index.
        container: u32,
        /// Grace in ms.
        grace_ms: u64,
    },
    /// Kill container index now.
    Kill {
        /// Container index.
        container: u32,
    },
    /// Mark container index as a preemption candidate (ABI 1.2).
    Mark {
        /// Container index.
        container: u32,
    },
    /// Set a queue's guaranteed share (fraction of parent).
    SetQueueCapacity {
        /// Queue index.
        queue: u32,
        /// Fraction 0..=1.
        guaranteed: f64,
    },
}

/// Checks `rebalance` decisions.
pub fn rebalance(
    state: &ClusterState,
    decisions: &[GantryDecision],
    rej: &mut Rejections,
) -> Vec<RebalanceAction> {
    let mut out = Vec::new();
    let mut seen = vec![false; state.containers.len()];
    let mut guaranteed: Vec<f64> = state.queues.iter().map(|q| q.guaranteed).collect();
    for d in decisions {
        match d.kind {
            GANTRY_DECISION_PREEMPT | GANTRY_DECISION_KILL | GANTRY_DECISION_MARK_PREEMPT => {
                let Some(c) = state.containers.get(d.subject as usize) else {
                    rej.add(RejectReason::UnknownSubject, 1);
                    continue;
                };
                if seen[d.subject as usize] {
                    rej.add(RejectReason::Duplicate, 1);
                    continue;
                }
                seen[d.subject as usize] = true;
                let app_done = state.apps.get(c.app as usize).is_none_or(|a| app_is_terminal(a.state));
                if !container_is_live(c.state) || app_done {
                    rej.add(RejectReason::WrongState, 1);
                    continue;
                }
                if d.kind == GANTRY_DECISION_KILL {
                    out.push(RebalanceAction::Kill { container: d.subject });
                } else if c.state == GANTRY_CONTAINER_STOPPING {
                    rej.add(RejectReason::AlreadyStopping, 1);
                } else if d.kind == GANTRY_DECISION_MARK_PREEMPT {
                    out.push(RebalanceAction::Mark { container: d.subject });
                } else if d.value > MAX_GRACE_MS {
                    rej.add(RejectReason::InvalidValue, 1);
                } else {
                    out.push(RebalanceAction::Preempt { container: d.subject, grace_ms: d.value });
                }
            }
            GANTRY_DECISION_SET_QUEUE_CAPACITY => {
                let Some(q) = state.queues.get(d.subject as usize) else {
                    rej.add(RejectReason::UnknownSubject, 1);
                    continue;
                };
                if q.parent == GANTRY_NONE || d.value > 1_000_000 {
                    rej.add(RejectReason::InvalidValue, 1);
                    continue;
                }
                let g = d.value as f64 / 1e6;
                if g > q.maximum {
                    rej.add(RejectReason::QueueCapacity, 1);
                    continue;
                }
                let siblings: f64 = state
                    .queues
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| s.parent == q.parent && *i != d.subject as usize)
                    .map(|(i, _)| guaranteed[i])
                    .sum();
                if siblings + g > 1.0 + 1e-9 {
                    rej.add(RejectReason::QueueCapacity, 1);
                    continue;
                }
                guaranteed[d.subject as usize] = g;
                out.push(RebalanceAction::SetQueueCapacity { queue: d.subject, guaranteed: g });
            }
            _ => rej.add(RejectReason::BadKind, 1),
        }
    }
    out
}
