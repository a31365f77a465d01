//! The engine's hash maps, all with fixed hashers, so that a run replays the same on every
//! machine and every run (iteration order included). `clippy.toml` forbids `HashMap`, `HashSet`
//! and `RandomState` in this crate because std's default hasher is seeded at random per process;
//! these aliases are the one place that names them, with a hasher that is not.
//!
//! - [`IdMap`]: keys are ids the engine hands out itself (apps, containers, reservations) — hot
//!   lookups on every event, hashed with one multiplication;
//! - [`DetHashMap`] and [`DetHashSet`]: any other key (names, labels, tuples), hashed with std's
//!   SipHash-1-3 under fixed keys: as fast as the std default, without its random seed.

use std::hash::{BuildHasherDefault, DefaultHasher};

/// A hash map with std's SipHash under fixed keys (`DefaultHasher::default()` is the same in
/// every instance): deterministic, as fast as `HashMap`'s default, and resistant enough for
/// names that come from clients (nodes, queues, labels).
#[allow(clippy::disallowed_types)] // the one deterministic alias: see the module documentation
pub(crate) type DetHashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<DefaultHasher>>;

/// A hash set with the hasher of [`DetHashMap`].
#[allow(clippy::disallowed_types)] // the one deterministic alias: see the module documentation
pub(crate) type DetHashSet<T> = std::collections::HashSet<T, BuildHasherDefault<DefaultHasher>>;

/// A map keyed by the engine's own ids (apps, containers): sequential numbers the engine hands
/// out, never chosen by a client, so they need no DoS-resistant hash. One multiplication
/// (Fibonacci hashing) spreads them over the table; SipHash cost a tenth of a placement.
#[allow(clippy::disallowed_types)] // the one deterministic alias: see the module documentation
pub(crate) type IdMap<V> = std::collections::HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// The hasher of [`IdMap`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; this keeps any other use correct, if slower.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// The whole point: two maps built apart hash alike, so the same insertions iterate in the
    /// same order (std's default would differ between two `RandomState`s).
    #[test]
    fn hashers_are_the_same_in_every_instance() {
        let a = BuildHasherDefault::<DefaultHasher>::default();
        let b = BuildHasherDefault::<DefaultHasher>::default();
        assert_eq!(a.hash_one("node-17"), b.hash_one("node-17"));
        let mut x: DetHashMap<String, u32> = DetHashMap::default();
        let mut y: DetHashMap<String, u32> = DetHashMap::default();
        for i in 0..200 {
            x.insert(format!("n{i}"), i);
            y.insert(format!("n{i}"), i);
        }
        assert!(x.iter().eq(y.iter()), "same insertions, same iteration order");
        let ids = BuildHasherDefault::<IdHasher>::default();
        assert_eq!(ids.hash_one(7u64), 7u64.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
}
