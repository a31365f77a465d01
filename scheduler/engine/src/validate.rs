//! The core never trusts a plugin: every decision is checked here against the state the plugin
//! was shown, before anything is applied. Invalid decisions are dropped, counted by reason, and —
//! when they show the plugin is broken rather than merely wrong about feasibility — count toward
//! its quarantine.

use crate::det_hash::DetHashMap;
use crate::state::{ClusterState, app_is_terminal, container_is_live};
use gantry_sdk::abi::*;
use gantry_sdk::{Feasibility, Infeasible, View};

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

/// Rejections of one call, by reason, with the first refused decision of each reason (so a log
/// line can say what was refused; [`Rejections::merge`] keeps only the counts). Equality looks
/// at the counts alone.
#[derive(Debug, Clone, Default)]
pub struct Rejections {
    counts: [u64; RejectReason::ALL.len()],
    first: [Option<GantryDecision>; RejectReason::ALL.len()],
}

impl PartialEq for Rejections {
    fn eq(&self, other: &Self) -> bool {
        self.counts == other.counts
    }
}

impl Eq for Rejections {}

impl Rejections {
    /// Counts `n` refusals for `reason` of something that is no decision record (a reservation
    /// planner's allocation piece, which logs itself).
    pub(crate) fn add(&mut self, reason: RejectReason, n: u64) {
        self.counts[reason.index()] += n;
    }

    /// Counts `n` refusals for `reason`; `decision` is one of them.
    fn refuse_n(&mut self, reason: RejectReason, n: u64, decision: GantryDecision) {
        self.counts[reason.index()] += n;
        self.first[reason.index()].get_or_insert(decision);
    }

    /// Counts one refused decision.
    fn refuse(&mut self, reason: RejectReason, decision: &GantryDecision) {
        self.refuse_n(reason, 1, *decision);
    }

    /// Rejections for `reason`.
    pub fn get(&self, reason: RejectReason) -> u64 {
        self.counts[reason.index()]
    }

    /// The first decision refused for `reason` in this call's tally (none in a merged total).
    pub fn first(&self, reason: RejectReason) -> Option<GantryDecision> {
        self.first[reason.index()]
    }

    /// All rejections.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Whether any rejection shows a broken plugin.
    pub fn any_malformed(&self) -> bool {
        RejectReason::ALL.iter().any(|r| r.is_malformed() && self.get(*r) > 0)
    }

    /// Adds another tally's counts to this one.
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
                rej.refuse(RejectReason::WrongState, d);
                continue;
            }
            _ => {
                rej.refuse(RejectReason::BadKind, d);
                continue;
            }
        };
        let i = d.subject as usize;
        let (seen, state_ok) = match state.apps.get(i) {
            Some(a) => (&mut seen_apps[i], a.state == GANTRY_APP_NEW),
            None => {
                rej.refuse(RejectReason::UnknownSubject, d);
                continue;
            }
        };
        if *seen {
            rej.refuse(RejectReason::Duplicate, d);
            continue;
        }
        *seen = true;
        if !state_ok {
            rej.refuse(RejectReason::WrongState, d);
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
            rej.refuse(RejectReason::BadKind, d);
            continue;
        }
        match mark.get(d.subject as usize) {
            None => rej.refuse(RejectReason::UnknownSubject, d),
            Some(0) => rej.refuse(RejectReason::WrongState, d),
            Some(2) => rej.refuse(RejectReason::Duplicate, d),
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
    let mut group_of: DetHashMap<u32, usize> = DetHashMap::default();
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
                    rej.refuse(RejectReason::UnknownSubject, d);
                } else {
                    notes.push((d.subject, PlaceNote::Wait(d.reason)));
                }
            }
            _ => rej.refuse(RejectReason::BadKind, d),
        }
    }
    // The SDK's own rules, so that a plugin checking its placements with `Feasibility` and the
    // host agree by construction.
    let view = placement_view(state);
    let mut fit = Feasibility::new(&view);
    let mut accepted = Vec::new();
    for (request, nodes) in groups {
        let n = nodes.len() as u64;
        let placing = |node: u32| GantryDecision {
            kind: GANTRY_DECISION_PLACE,
            subject: request,
            target: node,
            ..GantryDecision::default()
        };
        let first = nodes.first().copied().unwrap_or(GANTRY_NONE);
        if let Err(e) = fit.check_request(request) {
            rej.refuse_n(e.into(), n, placing(first));
            continue;
        }
        // `node`: the placement that broke the rule (a gang's whole group is refused with it).
        let mut refuse = |reason: RejectReason, n: u64, node: u32| {
            rej.refuse_n(reason, n, placing(node));
            notes.push((request, PlaceNote::Refused(reason)));
        };
        if fit.is_gang(request) {
            match fit.try_place_gang(request, &nodes) {
                Ok(()) => accepted.extend(nodes.iter().map(|&node| Placement { request, node })),
                Err((e, node)) => refuse(e.into(), n, node),
            }
            continue;
        }
        // Decisions beyond what the request had left are refused whatever became of the earlier
        // ones.
        let remaining = fit.left(request);
        for (k, &node) in nodes.iter().enumerate() {
            if k as u32 >= remaining {
                refuse(RejectReason::TooMany, 1, node);
                continue;
            }
            match fit.try_place(request, node) {
                Ok(()) => accepted.push(Placement { request, node }),
                Err(e) => refuse(e.into(), 1, node),
            }
        }
    }
    accepted
}

/// The engine's arrays as a view, for the placement rules (only what they read is filled in).
fn placement_view(state: &ClusterState) -> View<'_> {
    View {
        hook: GANTRY_HOOK_PLACE,
        now_ms: 0,
        cycle: 0,
        seed: 0,
        cluster: state.cluster,
        strings: state.strings.bytes(),
        labels: &state.labels,
        nodes: &state.nodes,
        gpus: &[],
        queues: &state.queues,
        apps: &state.apps,
        requests: &state.requests,
        containers: &state.containers,
        reservations: &[],
        pending: &[],
        node_usage: &[],
        plan: gantry_sdk::PlanView::default(),
    }
}

impl From<Infeasible> for RejectReason {
    fn from(e: Infeasible) -> Self {
        match e {
            Infeasible::UnknownRequest => RejectReason::UnknownSubject,
            Infeasible::UnknownNode => RejectReason::UnknownNode,
            Infeasible::WrongState => RejectReason::WrongState,
            Infeasible::NodeNotSchedulable => RejectReason::NodeNotSchedulable,
            Infeasible::SelectorMismatch => RejectReason::SelectorMismatch,
            Infeasible::DoesNotFit => RejectReason::DoesNotFit,
            Infeasible::QueueMaximum => RejectReason::QueueMaximum,
            Infeasible::GangIncomplete => RejectReason::GangIncomplete,
            Infeasible::RackConstraint => RejectReason::RackConstraint,
            Infeasible::TooMany => RejectReason::TooMany,
        }
    }
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
                    rej.refuse(RejectReason::UnknownSubject, d);
                    continue;
                };
                if seen[d.subject as usize] {
                    rej.refuse(RejectReason::Duplicate, d);
                    continue;
                }
                seen[d.subject as usize] = true;
                let app_done = state.apps.get(c.app as usize).is_none_or(|a| app_is_terminal(a.state));
                if !container_is_live(c.state) || app_done {
                    rej.refuse(RejectReason::WrongState, d);
                    continue;
                }
                if d.kind == GANTRY_DECISION_KILL {
                    out.push(RebalanceAction::Kill { container: d.subject });
                } else if c.state == GANTRY_CONTAINER_STOPPING {
                    rej.refuse(RejectReason::AlreadyStopping, d);
                } else if d.kind == GANTRY_DECISION_MARK_PREEMPT {
                    out.push(RebalanceAction::Mark { container: d.subject });
                } else if d.value > MAX_GRACE_MS {
                    rej.refuse(RejectReason::InvalidValue, d);
                } else {
                    out.push(RebalanceAction::Preempt { container: d.subject, grace_ms: d.value });
                }
            }
            GANTRY_DECISION_SET_QUEUE_CAPACITY => {
                let Some(q) = state.queues.get(d.subject as usize) else {
                    rej.refuse(RejectReason::UnknownSubject, d);
                    continue;
                };
                if q.parent == GANTRY_NONE || d.value > 1_000_000 {
                    rej.refuse(RejectReason::InvalidValue, d);
                    continue;
                }
                let g = d.value as f64 / 1e6;
                if g > q.maximum {
                    rej.refuse(RejectReason::QueueCapacity, d);
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
                    rej.refuse(RejectReason::QueueCapacity, d);
                    continue;
                }
                guaranteed[d.subject as usize] = g;
                out.push(RebalanceAction::SetQueueCapacity { queue: d.subject, guaranteed: g });
            }
            _ => rej.refuse(RejectReason::BadKind, d),
        }
    }
    out
}
