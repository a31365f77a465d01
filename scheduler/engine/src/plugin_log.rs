//! What the engine tells the operator about a plugin that fails, panics, runs past its budget, is
//! quarantined or has decisions refused — the same lines in the daemon's log and on `gantry
//! sim`'s stderr, since both drive this engine.
//!
//! A plugin that fails every cycle would write a line per cycle (ten a second in the daemon,
//! millions in a long simulation), so lines are limited per plugin and kind of incident: the
//! 1st, 2nd, 4th, 8th … occurrence is logged, and any occurrence an hour of engine time after the
//! kind's last line; each line carries the running count and how many went unlogged since the
//! last one. The counts themselves are never limited ([`crate::Engine::policy_status`]: the
//! daemon's metrics and `gantry sim`'s summary.json read them).

use crate::policy::PolicyError;
use crate::state::ClusterState;
use crate::validate::RejectReason;
use gantry_sdk::abi::*;
use std::fmt::Write as _;

/// Engine time after which an incident is logged again whatever its count, ms.
pub const LOG_AGAIN_AFTER_MS: u64 = 3_600_000;

/// A kind of incident: what the limiter counts separately within one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Incident {
    /// An error code, a broken protocol, or malformed decisions.
    Failed,
    /// A panic caught at the boundary.
    Panicked,
    /// A call past its budget, or one refused because such a call still runs.
    TimedOut,
    /// The plugin was quarantined.
    Quarantined,
    /// Decisions refused for this reason (one occurrence per call).
    Rejected(RejectReason),
}

impl Incident {
    /// The incident a failed call is.
    pub(crate) fn of(e: &PolicyError) -> Incident {
        match e {
            PolicyError::Panicked(_) => Incident::Panicked,
            PolicyError::TimedOut { .. } | PolicyError::StillRunning { .. } => Incident::TimedOut,
            _ => Incident::Failed,
        }
    }

    fn slot(self) -> usize {
        match self {
            Incident::Failed => 0,
            Incident::Panicked => 1,
            Incident::TimedOut => 2,
            Incident::Quarantined => 3,
            // `ALL` lists the reasons in declaration order.
            Incident::Rejected(r) => 4 + r as usize,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    count: u64,
    unlogged: u64,
    logged_ms: Option<u64>,
}

/// One plugin's incident counts, for deciding which to log.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
    tallies: [Tally; 4 + RejectReason::ALL.len()],
    /// The current quarantine was logged: so is its end.
    pub(crate) quarantine_logged: bool,
}

/// An occurrence to log: the running count of its kind, and how many were not logged since the
/// kind's last line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Logged {
    pub count: u64,
    pub unlogged: u64,
}

impl LogLimiter {
    /// Counts one occurrence of `what` at engine time `now_ms`; `Some` when it is to be logged.
    pub(crate) fn note(&mut self, what: Incident, now_ms: u64) -> Option<Logged> {
        let t = &mut self.tallies[what.slot()];
        t.count += 1;
        let due = t.count.is_power_of_two()
            || t.logged_ms.is_none_or(|at| now_ms.saturating_sub(at) >= LOG_AGAIN_AFTER_MS);
        if !due {
            t.unlogged += 1;
            return None;
        }
        t.logged_ms = Some(now_ms);
        Some(Logged { count: t.count, unlogged: std::mem::take(&mut t.unlogged) })
    }
}

/// The name of decision kind `GANTRY_DECISION_*`, or `None` for a value the ABI does not define.
pub fn decision_kind_name(kind: u32) -> Option<&'static str> {
    Some(match kind {
        GANTRY_DECISION_ORDER => "ORDER",
        GANTRY_DECISION_PLACE => "PLACE",
        GANTRY_DECISION_WAIT => "WAIT",
        GANTRY_DECISION_ACCEPT_APP => "ACCEPT_APP",
        GANTRY_DECISION_REJECT_APP => "REJECT_APP",
        GANTRY_DECISION_ACCEPT_RESERVATION => "ACCEPT_RESERVATION",
        GANTRY_DECISION_REJECT_RESERVATION => "REJECT_RESERVATION",
        GANTRY_DECISION_PREEMPT => "PREEMPT",
        GANTRY_DECISION_KILL => "KILL",
        GANTRY_DECISION_SET_QUEUE_CAPACITY => "SET_QUEUE_CAPACITY",
        GANTRY_DECISION_MARK_PREEMPT => "MARK_PREEMPT",
        GANTRY_DECISION_PLAN_RESERVATION => "PLAN_RESERVATION",
        _ => return None,
    })
}

/// A refused decision in words, naming what it concerned in the state the plugin was shown: the
/// application and request (by id) and the node (by name) of a PLACE, the container of a
/// PREEMPT, the queue of a SET_QUEUE_CAPACITY …; an index the view does not have is said to be
/// so. `reason` is why it was refused (a `bad_kind` names the kind value).
pub fn describe(state: &ClusterState, d: &GantryDecision, reason: RejectReason) -> String {
    let mut s = String::new();
    let kind = decision_kind_name(d.kind);
    if reason == RejectReason::BadKind || kind.is_none() {
        let _ = match kind {
            Some(name) => write!(s, "kind {} ({name}), which this hook does not take; ", d.kind),
            None => write!(s, "kind {}, which is no decision kind of the ABI; ", d.kind),
        };
    } else if let Some(name) = kind {
        let _ = write!(s, "{name} ");
    }
    match d.kind {
        GANTRY_DECISION_ORDER | GANTRY_DECISION_PLACE | GANTRY_DECISION_WAIT => {
            request(state, d.subject, &mut s);
            if d.kind == GANTRY_DECISION_PLACE {
                s.push_str(" on ");
                node(state, d.target, &mut s);
            }
            if d.kind == GANTRY_DECISION_WAIT {
                let _ = write!(s, " (reason code {})", d.reason);
            }
        }
        GANTRY_DECISION_ACCEPT_APP | GANTRY_DECISION_REJECT_APP => match state.apps.get(d.subject as usize) {
            Some(a) => {
                let _ = write!(s, "app {}", a.id);
            }
            None => {
                let _ = write!(s, "app #{} (not in the view)", d.subject);
            }
        },
        GANTRY_DECISION_ACCEPT_RESERVATION
        | GANTRY_DECISION_REJECT_RESERVATION
        | GANTRY_DECISION_PLAN_RESERVATION => match state.reservations.get(d.subject as usize) {
            Some(r) => {
                let _ = write!(s, "reservation {}", r.id);
            }
            None => {
                let _ = write!(s, "reservation #{} (not in the view)", d.subject);
            }
        },
        GANTRY_DECISION_PREEMPT | GANTRY_DECISION_KILL | GANTRY_DECISION_MARK_PREEMPT => {
            match state.containers.get(d.subject as usize) {
                Some(c) => {
                    let app = state.apps.get(c.app as usize).map_or(0, |a| a.id);
                    let _ = write!(s, "container {} of app {app} on ", c.id);
                    node(state, c.node, &mut s);
                }
                None => {
                    let _ = write!(s, "container #{} (not in the view)", d.subject);
                }
            }
            if d.kind == GANTRY_DECISION_PREEMPT {
                let _ = write!(s, ", grace {} ms", d.value);
            }
        }
        GANTRY_DECISION_SET_QUEUE_CAPACITY => {
            match state.queues.get(d.subject as usize) {
                Some(q) => {
                    let _ = write!(s, "queue `{}`", state.strings.get(q.name));
                }
                None => {
                    let _ = write!(s, "queue #{} (not in the view)", d.subject);
                }
            }
            let _ = write!(s, " to {} ppm", d.value);
        }
        _ => {
            let _ = write!(s, "subject #{}", d.subject);
            if d.target != GANTRY_NONE {
                let _ = write!(s, ", target #{}", d.target);
            }
        }
    }
    s
}

/// "app A request R" of request index `r`.
fn request(state: &ClusterState, r: u32, s: &mut String) {
    match state.requests.get(r as usize) {
        Some(req) => {
            let app = state.apps.get(req.app as usize).map_or(0, |a| a.id);
            let _ = write!(s, "app {app} request {}", req.id);
        }
        None => {
            let _ = write!(s, "request #{r} (not in the view)");
        }
    }
}

/// "node `name`" of node index `n`.
fn node(state: &ClusterState, n: u32, s: &mut String) {
    match state.nodes.get(n as usize) {
        Some(rec) => {
            let _ = write!(s, "node `{}`", state.strings.get(rec.name));
        }
        None => {
            let _ = write!(s, "node #{n} (not in the view)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_and_an_hour_later_are_logged() {
        let mut l = LogLimiter::default();
        let logged: Vec<u64> =
            (1..=20).filter_map(|i| l.note(Incident::Failed, i).map(|g| g.count)).collect();
        assert_eq!(logged, [1, 2, 4, 8, 16]);
        // Another kind counts on its own.
        assert_eq!(l.note(Incident::Panicked, 21), Some(Logged { count: 1, unlogged: 0 }));
        // An hour after the last line, the next occurrence is logged with what was skipped.
        assert_eq!(
            l.note(Incident::Failed, 16 + LOG_AGAIN_AFTER_MS),
            Some(Logged { count: 21, unlogged: 4 })
        );
        assert_eq!(l.note(Incident::Failed, 17 + LOG_AGAIN_AFTER_MS), None);
    }

    #[test]
    fn refused_decisions_in_words_even_when_they_name_nothing() {
        let state = ClusterState::new(&crate::EngineConfig::default()).expect("state");
        let d = |kind, subject, target| GantryDecision { kind, subject, target, ..GantryDecision::default() };
        let cases = [
            (
                d(77, 0, GANTRY_NONE),
                RejectReason::BadKind,
                "kind 77, which is no decision kind of the ABI; subject #0",
            ),
            (
                d(GANTRY_DECISION_ORDER, 3, GANTRY_NONE),
                RejectReason::BadKind,
                "kind 1 (ORDER), which this hook does not take; request #3 (not in the view)",
            ),
            (
                d(GANTRY_DECISION_PLACE, 5, 9),
                RejectReason::UnknownSubject,
                "PLACE request #5 (not in the view) on node #9 (not in the view)",
            ),
            (
                d(GANTRY_DECISION_KILL, 2, GANTRY_NONE),
                RejectReason::UnknownSubject,
                "KILL container #2 (not in the view)",
            ),
            (
                d(GANTRY_DECISION_SET_QUEUE_CAPACITY, 0, GANTRY_NONE),
                RejectReason::InvalidValue,
                "SET_QUEUE_CAPACITY queue `root` to 0 ppm",
            ),
        ];
        for (decision, reason, want) in cases {
            assert_eq!(describe(&state, &decision, reason), want);
        }
    }

    #[test]
    fn incidents_of_errors() {
        assert_eq!(Incident::of(&PolicyError::Panicked("x".into())), Incident::Panicked);
        assert_eq!(Incident::of(&PolicyError::TimedOut { hook: "place", budget_ms: 1 }), Incident::TimedOut);
        assert_eq!(Incident::of(&PolicyError::Failed("x".into())), Incident::Failed);
        let slots: std::collections::BTreeSet<usize> =
            RejectReason::ALL.iter().map(|r| Incident::Rejected(*r).slot()).chain([0, 1, 2, 3]).collect();
        assert_eq!(slots.len(), 4 + RejectReason::ALL.len(), "every kind has a tally of its own");
    }
}
