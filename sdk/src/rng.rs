//! SplitMix64 (Steele, Lea and Flood, 2014): the one seeded generator of gantry — the engine's
//! source of per-call seeds, and what plugins, the simulator's workload generator and examples
//! draw from (`View::seed` is a good seed). Tiny, fast, no dependency, and the same sequence on
//! every machine, so runs replay.

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)` (by remainder: a bias of at most n / 2⁶⁴); 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True once in `n` draws on average (always when `n` is 0 or 1).
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_one_in_keeps_its_odds() {
        let mut r = SplitMix64::new(11);
        assert!((0..1000).all(|_| r.below(7) < 7 && (0.0..1.0).contains(&r.unit())));
        assert_eq!(r.below(0), 0);
        assert!((0..100).all(|_| r.one_in(1) && r.one_in(0)), "1 in 1 (or 0) is always");
        let hits = (0..40_000).filter(|_| r.one_in(4)).count();
        assert!((9_000..11_000).contains(&hits), "about a quarter: {hits}");
    }
}
