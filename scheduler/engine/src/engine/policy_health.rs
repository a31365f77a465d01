//! Calling a policy and keeping its record: the view for a hook, the call, the judgement of
//! what validation refused, and quarantine after failures in a row (the built-in policy stands
//! in meanwhile). Log lines are rate-limited by [`crate::plugin_log`].

use super::{Engine, PolicyStatus};
use crate::plugin_log::{Incident, LogLimiter};
use crate::policy::{Policy, PolicyError, hook_name};
use crate::validate::Rejections;

/// A loaded policy, its health and its record.
pub(crate) struct PolicySlot {
    pub(crate) policy: Box<dyn Policy>,
    consecutive_failures: u32,
    pub(crate) quarantined_until: Option<u64>,
    /// Its decisions refused by validation, by reason, since the engine started.
    pub(crate) rejected: Rejections,
    /// Its failed calls since the engine started.
    failures: u64,
    /// Times it was quarantined since the engine started.
    quarantines: u64,
    /// Its failed calls that were panics, and calls past its budget, since the engine started.
    panics: u64,
    timeouts: u64,
    /// Which of its incidents to log.
    pub(crate) log: LogLimiter,
}

impl PolicySlot {
    /// A newly loaded policy: healthy, nothing on its record.
    pub(super) fn new(policy: Box<dyn Policy>) -> Self {
        PolicySlot {
            policy,
            consecutive_failures: 0,
            quarantined_until: None,
            rejected: Rejections::default(),
            failures: 0,
            quarantines: 0,
            panics: 0,
            timeouts: 0,
            log: LogLimiter::default(),
        }
    }

    /// A call succeeded: the failures in a row start again from zero.
    pub(crate) fn succeeded(&mut self) {
        self.consecutive_failures = 0;
    }
}

/// What a policy call produced.
pub(super) enum CallResult {
    /// Decisions to validate (in the engine's reusable buffer).
    Decisions,
    /// No policy for the hook (or quarantined): use the built-in behaviour.
    Builtin,
}

impl Engine {
    /// Builds the view for `hook` and calls the policy in `slot` (unless absent or quarantined),
    /// leaving its decisions in `self.buf`. Failures count toward quarantine.
    pub(super) fn call(&mut self, hook: u32, slot: Option<usize>) -> CallResult {
        let Some(i) = slot else { return CallResult::Builtin };
        let now = self.now_ms;
        let p = &mut self.policies[i];
        if let Some(until) = p.quarantined_until {
            if now < until {
                return CallResult::Builtin;
            }
            p.quarantined_until = None;
            if std::mem::take(&mut p.log.quarantine_logged) {
                tracing::info!(policy = p.policy.name(), "quarantine over; trying the plugin again");
            }
        }
        let changes = self.state.view_changes(i);
        let view = self.state.view(hook, now, self.cycle, self.rng.next_u64(), &self.pending);
        self.buf.clear();
        match p.policy.call_with_changes(&view, &changes, &mut self.buf) {
            Ok(()) => CallResult::Decisions,
            Err(e) => {
                self.buf.clear();
                self.policy_failed(i, hook, &e);
                CallResult::Builtin
            }
        }
    }

    /// Counts a failed call of policy `i` toward its quarantine, and logs it (rate-limited,
    /// [`crate::plugin_log`]).
    pub(crate) fn policy_failed(&mut self, i: usize, hook: u32, e: &PolicyError) {
        self.stats.policy_failures += 1;
        let now = self.now_ms;
        let p = &mut self.policies[i];
        p.failures += 1;
        p.consecutive_failures += 1;
        let incident = Incident::of(e);
        match incident {
            Incident::Panicked => p.panics += 1,
            Incident::TimedOut => p.timeouts += 1,
            _ => {}
        }
        if let Some(l) = p.log.note(incident, now) {
            tracing::warn!(
                policy = p.policy.name(),
                hook = hook_name(hook),
                engine_ms = now,
                in_a_row = p.consecutive_failures,
                count = l.count,
                unlogged = l.unlogged,
                error = %e,
                "plugin call failed"
            );
        }
        if p.consecutive_failures >= self.config.quarantine_after {
            p.quarantined_until = Some(now.saturating_add(self.config.quarantine_ms));
            p.consecutive_failures = 0;
            p.quarantines += 1;
            self.stats.quarantines += 1;
            let logged = p.log.note(Incident::Quarantined, now);
            p.log.quarantine_logged = logged.is_some();
            if let Some(l) = logged {
                tracing::error!(
                    policy = p.policy.name(),
                    engine_ms = now,
                    quarantine_ms = self.config.quarantine_ms,
                    count = l.count,
                    unlogged = l.unlogged,
                    "plugin quarantined; the built-in policy stands in"
                );
            }
        }
    }

    /// Records the outcome of validating a `hook` call's decisions against the policy's health,
    /// and logs what was refused (rate-limited per reason): the plugin, the hook, the reason, how
    /// many, and the first such decision with what it concerned.
    pub(super) fn judge(&mut self, slot: Option<usize>, hook: u32, rej: &Rejections) {
        self.stats.rejected.merge(rej);
        let Some(i) = slot else { return };
        let now = self.now_ms;
        let p = &mut self.policies[i];
        p.rejected.merge(rej);
        for (reason, n) in rej.iter() {
            let Some(l) = p.log.note(Incident::Rejected(reason), now) else { continue };
            let decision = rej.first(reason).map(|d| crate::plugin_log::describe(&self.state, &d, reason));
            tracing::warn!(
                policy = p.policy.name(),
                hook = hook_name(hook),
                engine_ms = now,
                reason = reason.as_str(),
                n,
                decision = decision.as_deref().unwrap_or(""),
                calls = l.count,
                unlogged_calls = l.unlogged,
                "decisions rejected"
            );
        }
        if rej.any_malformed() {
            let what: Vec<String> = rej
                .iter()
                .filter(|(r, _)| r.is_malformed())
                .map(|(r, n)| match rej.first(r) {
                    Some(d) if r == crate::validate::RejectReason::BadKind => {
                        format!("{n} {} (kind {})", r.as_str(), d.kind)
                    }
                    _ => format!("{n} {}", r.as_str()),
                })
                .collect();
            let e = PolicyError::Protocol(format!("malformed decisions: {}", what.join(", ")));
            self.policy_failed(i, hook, &e);
        } else {
            self.policies[i].consecutive_failures = 0;
        }
    }

    /// Names and health of the loaded policies.
    pub fn policy_status(&self) -> Vec<PolicyStatus> {
        self.policies
            .iter()
            .map(|p| PolicyStatus {
                name: p.policy.name().to_owned(),
                consecutive_failures: p.consecutive_failures,
                quarantined_until: p.quarantined_until,
                rejected: p.rejected.clone(),
                failures: p.failures,
                quarantines: p.quarantines,
                panics: p.panics,
                timeouts: p.timeouts,
            })
            .collect()
    }
}
