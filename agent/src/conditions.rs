//! Node conditions: what the agent tells the scheduler keeps new work off this node, as
//! kubelet reports `DiskPressure` and YARN's NodeManager an unhealthy health report.
//!
//! - `DiskPressure`: the work filesystem's free space or free inodes fell below
//!   `disk_pressure_free_percent`; it clears once both are back above
//!   `disk_pressure_clear_percent` (hysteresis: a node at the threshold does not flap).
//! - `LaunchFailures`: `launch_failures_threshold` launches in a row failed for reasons of the
//!   node (a full disk, a cgroup that cannot be made, a supervisor that does not start; not a
//!   request's own mistakes such as an unknown user); it clears after a launch succeeds or
//!   `launch_failures_clear_ms` after the last failure, since a node that takes no work
//!   launches nothing that could succeed.
//!
//! The scheduler places nothing new on a node while it reports any condition, and shows them
//! (`gantry nodes`, the REST node's `healthReport`, `gantry_node_condition`).

use crate::config::AgentConfig;
use crate::disk::FsUsage;
use std::sync::{Mutex, PoisonError};

/// The work filesystem is short of space or inodes.
pub const DISK_PRESSURE: &str = "DiskPressure";
/// Launches keep failing on this node.
pub const LAUNCH_FAILURES: &str = "LaunchFailures";

/// One condition that holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    /// [`DISK_PRESSURE`] or [`LAUNCH_FAILURES`].
    pub kind: &'static str,
    /// Why, for people.
    pub reason: String,
    /// Since when, Unix ms.
    pub since_ms: u64,
}

/// Thresholds, from the agent's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Below this percentage free (space or inodes): pressure; 0 = never.
    pub pressure_free_percent: u8,
    /// At or above this percentage free (both): the pressure is over.
    pub clear_free_percent: u8,
    /// Failed launches in a row that make `LaunchFailures`; 0 = never.
    pub launch_failures: u32,
    /// How long after the last failure `LaunchFailures` clears by itself, ms.
    pub launch_failures_clear_ms: u64,
}

impl Thresholds {
    /// The configured thresholds.
    pub fn from_config(cfg: &AgentConfig) -> Thresholds {
        Thresholds {
            pressure_free_percent: cfg.disk_pressure_free_percent,
            clear_free_percent: cfg.disk_pressure_clear_percent,
            launch_failures: cfg.launch_failures_threshold,
            launch_failures_clear_ms: cfg.launch_failures_clear_ms,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    disk: Option<NodeCondition>,
    launches: Option<NodeCondition>,
    failures_in_a_row: u32,
    last_failure_ms: u64,
}

/// The node's conditions, shared by the disk round, the launcher and the status reports.
#[derive(Debug)]
pub struct Conditions {
    thresholds: Thresholds,
    state: Mutex<State>,
}

impl Conditions {
    /// No condition yet.
    pub fn new(thresholds: Thresholds) -> Conditions {
        Conditions { thresholds, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the work filesystem `root` is under pressure now, given how full it is.
    pub fn observe_disk(&self, root: &std::path::Path, fs: &FsUsage, now_ms: u64) -> bool {
        let t = self.thresholds;
        let mut st = self.lock();
        if t.pressure_free_percent == 0 {
            st.disk = None;
            return false;
        }
        let (space, inodes) = (fs.free_space_percent(), fs.free_inodes_percent());
        let low = f64::from(t.pressure_free_percent);
        let clear = f64::from(t.clear_free_percent);
        let short = if space < low {
            Some(format!(
                "{} has {space:.1}% of its space free ({} of {}), below {low}%",
                root.display(),
                gantry_sdk::units::format_bytes(fs.available_bytes),
                gantry_sdk::units::format_bytes(fs.total_bytes)
            ))
        } else if inodes < low {
            Some(format!(
                "{} has {inodes:.1}% of its inodes free ({} of {}), below {low}%",
                root.display(),
                fs.available_inodes,
                fs.total_inodes
            ))
        } else {
            None
        };
        match (&mut st.disk, short) {
            // Still short: the reason follows the figures, the start stays.
            (Some(c), Some(reason)) => c.reason = reason,
            (None, Some(reason)) => {
                tracing::warn!(%reason, "disk pressure: this node takes no new work");
                st.disk = Some(NodeCondition { kind: DISK_PRESSURE, reason, since_ms: now_ms });
            }
            (Some(_), None) if space >= clear && inodes >= clear => {
                tracing::info!(space, inodes, "disk pressure over");
                st.disk = None;
            }
            // Between the two thresholds: as it was.
            (_, None) => {}
        }
        st.disk.is_some()
    }

    /// A launch failed for a reason of the node (`why`).
    pub fn launch_failed(&self, why: &str, now_ms: u64) {
        let t = self.thresholds;
        let mut st = self.lock();
        st.failures_in_a_row = st.failures_in_a_row.saturating_add(1);
        st.last_failure_ms = now_ms;
        if t.launch_failures == 0 || st.failures_in_a_row < t.launch_failures {
            return;
        }
        let reason = format!("the last {} launches failed; the last: {}", st.failures_in_a_row, why.trim());
        match &mut st.launches {
            Some(c) => c.reason = reason,
            None => {
                tracing::warn!(%reason, "launches keep failing: this node takes no new work");
                st.launches = Some(NodeCondition { kind: LAUNCH_FAILURES, reason, since_ms: now_ms });
            }
        }
    }

    /// A launch succeeded.
    pub fn launch_succeeded(&self) {
        let mut st = self.lock();
        st.failures_in_a_row = 0;
        if st.launches.take().is_some() {
            tracing::info!("a launch succeeded: launch failures cleared");
        }
    }

    /// The conditions that hold at `now_ms`, disk pressure first.
    pub fn current(&self, now_ms: u64) -> Vec<NodeCondition> {
        let t = self.thresholds;
        let mut st = self.lock();
        if st.launches.is_some() && now_ms.saturating_sub(st.last_failure_ms) >= t.launch_failures_clear_ms {
            tracing::info!("no launch failed for launch_failures_clear_ms: launch failures cleared");
            st.launches = None;
            st.failures_in_a_row = 0;
        }
        st.disk.iter().chain(st.launches.iter()).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fs(free_percent: u64, free_inodes_percent: u64) -> FsUsage {
        FsUsage {
            total_bytes: 100 << 20,
            available_bytes: free_percent << 20,
            total_inodes: 1000,
            available_inodes: free_inodes_percent * 10,
        }
    }

    fn thresholds() -> Thresholds {
        Thresholds {
            pressure_free_percent: 10,
            clear_free_percent: 15,
            launch_failures: 3,
            launch_failures_clear_ms: 1000,
        }
    }

    #[test]
    fn disk_pressure_sets_below_one_threshold_and_clears_above_the_other() {
        let c = Conditions::new(thresholds());
        let root = Path::new("/w");
        assert!(!c.observe_disk(root, &fs(50, 50), 1));
        assert!(c.observe_disk(root, &fs(5, 50), 2));
        let now = c.current(3);
        assert_eq!(now.len(), 1);
        assert_eq!((now[0].kind, now[0].since_ms), (DISK_PRESSURE, 2));
        assert!(now[0].reason.contains("5.0% of its space free"), "{}", now[0].reason);
        assert!(c.observe_disk(root, &fs(12, 50), 4), "between the thresholds: still under pressure");
        assert_eq!(c.current(5)[0].since_ms, 2, "the start stays");
        assert!(!c.observe_disk(root, &fs(15, 50), 6), "cleared at the clear threshold");
        assert!(c.observe_disk(root, &fs(50, 2), 7), "inodes count too");
        assert!(c.current(8)[0].reason.contains("inodes"));
        let off = Conditions::new(Thresholds { pressure_free_percent: 0, ..thresholds() });
        assert!(!off.observe_disk(root, &fs(0, 0), 1));
    }

    #[test]
    fn launch_failures_set_after_the_threshold_and_clear_on_success_or_time() {
        let c = Conditions::new(thresholds());
        c.launch_failed("disk full", 10);
        c.launch_failed("disk full", 11);
        assert!(c.current(12).is_empty(), "two of three");
        c.launch_failed("No space left on device", 12);
        let now = c.current(13);
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].kind, LAUNCH_FAILURES);
        assert!(now[0].reason.contains("last 3 launches") && now[0].reason.contains("No space"), "{now:?}");
        c.launch_succeeded();
        assert!(c.current(14).is_empty());
        for t in 20..23 {
            c.launch_failed("x", t);
        }
        assert_eq!(c.current(1021).len(), 1, "999 ms after the last failure");
        assert!(c.current(1022).is_empty(), "cleared by time");
        c.launch_failed("x", 1030);
        assert!(c.current(1031).is_empty(), "the count started again");
    }
}
