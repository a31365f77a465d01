//! Reconnect delays: exponential backoff with full jitter.

use std::time::Duration;

use rand::Rng;

/// Reconnect delays: exponential backoff with full jitter, i.e. a uniformly random delay in
/// `0..=min(cap, base·2^attempt)`. Jitter spreads a rack's agents out when a scheduler restarts,
/// instead of having them all reconnect in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's delay.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(10) }
    }
}

impl Backoff {
    /// Upper bound of the delay before retry `attempt` (0-based): `min(cap, base·2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A random delay in `0..=ceiling(attempt)`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=ceiling))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn backoff_ceiling_doubles_up_to_the_cap_and_delays_stay_below_it() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(1), Duration::from_millis(200));
        assert_eq!(b.ceiling(6), Duration::from_millis(6400));
        assert_eq!(b.ceiling(7), Duration::from_secs(10), "12.8 s is capped");
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(10), "no overflow");
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..200).map(|_| b.delay(3, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(800)));
        // Full jitter: the delays spread over the range rather than sitting at the ceiling.
        assert!(delays.iter().any(|d| *d < Duration::from_millis(400)));
        assert!(delays.iter().any(|d| *d > Duration::from_millis(400)));
    }
}
