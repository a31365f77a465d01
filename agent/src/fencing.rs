//! Fencing: an agent cut off from its scheduler stops its containers before the scheduler reruns
//! them elsewhere.
//!
//! The scheduler declares a node lost when it has heard nothing from its agent for its
//! `node_timeout_ms`, and reruns the node's work on other nodes. An agent that is only cut off (a
//! partition, not a crash) would keep its copies running, so the same work would run twice for
//! as long as the partition lasts. The agent cannot tell a partition from a scheduler outage; it
//! knows only when it last heard from the scheduler ([`ContactClock`]). After the agent's
//! `fencing_timeout_ms` of silence it kills every container it runs ([`Fence`] decides which),
//! recording the exits as `fenced`; they wait among the client's unacknowledged exits and go up
//! in the next `Register`, as the scheduler's `LOST`. With the fencing timeout plus the kill
//! grace ([`grace`]) below the scheduler's node timeout, the old copy is dead before the new one
//! is placed. This is the lease idea of Gray and Cheriton (SOSP 1989): a node may act only while
//! its lease, renewed by every message from the scheduler, has not run out.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest grace a fencing kill gives a container between SIGTERM and SIGKILL, whatever the
/// configured `kill_grace_ms`: the copy must be dead before the scheduler's node timeout runs
/// out, and the default fencing timeout leaves 2 s of the default node timeout for the kill.
pub const MAX_GRACE: Duration = Duration::from_secs(1);

/// The grace of a fencing kill: the configured one, at most [`MAX_GRACE`].
pub fn grace(configured: Duration) -> Duration {
    configured.min(MAX_GRACE)
}

/// When the scheduler was last heard from, shared between the scheduler stream's task (which
/// [`touch`](ContactClock::touch)es it on every message) and the agent's main loop (which reads
/// it). Monotonic: a wall-clock step neither fences nor saves a container.
#[derive(Debug, Clone)]
pub struct ContactClock {
    origin: Instant,
    /// Milliseconds from `origin` to the last contact.
    last_ms: Arc<AtomicU64>,
}

impl Default for ContactClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ContactClock {
    /// A clock whose last contact is now: an agent that starts (and re-adopts containers) while
    /// the scheduler is unreachable fences them a fencing timeout after its start.
    pub fn new() -> Self {
        ContactClock { origin: Instant::now(), last_ms: Arc::new(AtomicU64::new(0)) }
    }

    /// Records a contact now.
    pub fn touch(&self) {
        self.touch_at(Instant::now());
    }

    /// How long since the last contact.
    pub fn silent_for(&self) -> Duration {
        self.silent_at(Instant::now())
    }

    fn touch_at(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn silent_at(&self, now: Instant) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(self.origin).saturating_sub(last)
    }
}

/// The fencing decision: which containers to kill, given how long the scheduler has been silent
/// and what runs. Each container is handed out once per silence, so a kill that takes its grace
/// is not started again at every tick.
#[derive(Debug, Clone, Default)]
pub struct Fence<K = crate::model::ContainerKey> {
    /// `None`: fencing is off.
    timeout: Option<Duration>,
    /// Containers handed out for killing during the current silence.
    fenced: HashSet<K>,
}

impl<K: Copy + Eq + std::hash::Hash> Fence<K> {
    /// A fence with the configured `fencing_timeout_ms` (0 = off).
    pub fn new(timeout_ms: u64) -> Self {
        Fence { timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms)), fenced: HashSet::new() }
    }

    /// The timeout, `None` when fencing is off.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The containers of `live` (running, or being launched) to kill now: all those not handed
    /// out yet, once the scheduler has been silent for the timeout; none before, or when fencing
    /// is off. Contact ends the silence, and what was handed out is forgotten.
    pub fn due(&mut self, silent_for: Duration, live: &[K]) -> Vec<K> {
        if self.timeout.is_none_or(|t| silent_for < t) {
            self.fenced.clear();
            return Vec::new();
        }
        self.fenced.retain(|id| live.contains(id));
        live.iter().copied().filter(|id| self.fenced.insert(*id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn nothing_is_fenced_before_the_timeout_and_everything_once_after_it() {
        let mut f = Fence::new(8_000);
        assert_eq!(f.due(7 * S, &[1, 2]), Vec::<u64>::new(), "a silence shorter than the timeout");
        assert_eq!(f.due(8 * S, &[1, 2]), vec![1, 2], "the timeout reached: every live container");
        assert_eq!(f.due(9 * S, &[1, 2]), Vec::<u64>::new(), "kills in progress are not started again");
        assert_eq!(f.due(10 * S, &[2, 3]), vec![3], "a container that appears later (a launch ending)");
    }

    #[test]
    fn contact_ends_the_silence() {
        let mut f = Fence::new(2_000);
        assert_eq!(f.due(3 * S, &[1]), vec![1]);
        // The scheduler is back; 1 survived its kill (or was re-adopted) and the link fails again.
        assert_eq!(f.due(Duration::ZERO, &[1]), Vec::<u64>::new());
        assert_eq!(f.due(2 * S, &[1]), vec![1], "a new silence fences again");
    }

    #[test]
    fn zero_turns_fencing_off() {
        let mut f = Fence::new(0);
        assert_eq!(f.timeout(), None);
        assert_eq!(f.due(Duration::from_secs(86_400 * 365), &[1]), Vec::<u64>::new());
    }

    #[test]
    fn the_grace_is_capped() {
        assert_eq!(grace(Duration::from_secs(30)), MAX_GRACE);
        assert_eq!(grace(Duration::from_millis(200)), Duration::from_millis(200));
    }

    #[test]
    fn the_clock_measures_silence_from_the_last_touch() {
        let c = ContactClock::new();
        let t0 = c.origin;
        assert_eq!(c.silent_at(t0 + 5 * S), 5 * S, "silence counts from the start");
        c.clone().touch_at(t0 + 3 * S);
        assert_eq!(c.silent_at(t0 + 5 * S), 2 * S, "a clone shares the clock");
        c.touch_at(t0 + S);
        assert_eq!(c.silent_at(t0 + 5 * S), 2 * S, "a late-arriving older touch does not go back");
    }
}
