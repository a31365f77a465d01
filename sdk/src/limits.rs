//! The one rule for the size of a container: the bounds of its CPU, memory, disk and process
//! limits, and of its argv plus environment. The REST API checks a submission here and the node
//! agent checks a launch here, so a container the API accepts is one every agent can start, and
//! a bound changed here changes for both.
//!
//! The two callers differ only in what 0 means: a submission must ask for a size
//! ([`check`]), while in a launch 0 means "no limit" where the node allows it
//! ([`check_or_unlimited`]). Each caller words its own message (the API names the JSON field and
//! its unit, the agent the launch field); [`OutOfRange`] carries the bounds for it, and its own
//! text is the agent's.

use core::fmt;

/// Smallest CPU limit, millicores: the kernel's smallest CFS quota (1 ms per 100 ms period).
pub const MIN_CPU_MILLIS: u64 = 10;
/// Largest CPU limit, millicores (10 000 cores): anything above is a typo.
pub const MAX_CPU_MILLIS: u64 = 10_000_000;
/// Smallest memory limit, bytes: below 1 MiB not even a shell starts.
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;
/// Largest memory limit, bytes (1 PiB): anything above is a typo.
pub const MAX_MEMORY_BYTES: u64 = 1 << 50;
/// Smallest disk allowance, bytes: a container's logs alone need some.
pub const MIN_DISK_BYTES: u64 = 1 << 20;
/// Largest disk allowance, bytes (1 PiB): anything above is a typo.
pub const MAX_DISK_BYTES: u64 = 1 << 50;
/// Largest process limit (processes and threads at once): the kernel's `pid_max` ceiling, 2^22.
pub const MAX_PIDS: u64 = 1 << 22;
/// Largest argv plus environment of one container, bytes, as [`args_bytes`] counts them (the
/// kernel's own limit is near 2 MiB).
pub const MAX_ARGS_BYTES: usize = 1 << 20;

/// A bounded per-container limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// CPU, millicores ([`MIN_CPU_MILLIS`]..=[`MAX_CPU_MILLIS`]).
    CpuMillis,
    /// Memory, bytes ([`MIN_MEMORY_BYTES`]..=[`MAX_MEMORY_BYTES`]).
    MemoryBytes,
    /// Disk allowance, bytes ([`MIN_DISK_BYTES`]..=[`MAX_DISK_BYTES`]).
    DiskBytes,
    /// Processes and threads at once (1..=[`MAX_PIDS`]).
    MaxPids,
}

impl Limit {
    /// The smallest size that is a limit at all.
    pub const fn min(self) -> u64 {
        match self {
            Limit::CpuMillis => MIN_CPU_MILLIS,
            Limit::MemoryBytes => MIN_MEMORY_BYTES,
            Limit::DiskBytes => MIN_DISK_BYTES,
            Limit::MaxPids => 1,
        }
    }

    /// The largest size accepted.
    pub const fn max(self) -> u64 {
        match self {
            Limit::CpuMillis => MAX_CPU_MILLIS,
            Limit::MemoryBytes => MAX_MEMORY_BYTES,
            Limit::DiskBytes => MAX_DISK_BYTES,
            Limit::MaxPids => MAX_PIDS,
        }
    }

    /// The field of a launch that holds it (`cpu_millis`, …), as messages name it.
    pub const fn field(self) -> &'static str {
        match self {
            Limit::CpuMillis => "cpu_millis",
            Limit::MemoryBytes => "memory_bytes",
            Limit::DiskBytes => "disk_bytes",
            Limit::MaxPids => "max_pids",
        }
    }

    /// Whether `value` is within [`Limit::min`]..=[`Limit::max`].
    pub const fn contains(self, value: u64) -> bool {
        self.min() <= value && value <= self.max()
    }
}

/// A limit outside its bounds. Displays as the agent words it:
/// `cpu_millis 5 is out of range: 0 (no limit) or 10..=10000000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    /// Which limit.
    pub limit: Limit,
    /// The value refused.
    pub value: u64,
    /// Whether 0 ("no limit") was allowed too ([`check_or_unlimited`]).
    pub unlimited_allowed: bool,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (limit, min, max) = (self.limit, self.limit.min(), self.limit.max());
        write!(f, "{} {} is out of range: ", limit.field(), self.value)?;
        if self.unlimited_allowed {
            f.write_str("0 (no limit) or ")?;
        }
        // A bound of 1 goes without saying for a count.
        if min <= 1 { write!(f, "at most {max}") } else { write!(f, "{min}..={max}") }
    }
}

impl std::error::Error for OutOfRange {}

/// Checks a size that must be a limit: [`Limit::min`]..=[`Limit::max`] (the REST API's rule).
pub fn check(limit: Limit, value: u64) -> Result<(), OutOfRange> {
    if limit.contains(value) { Ok(()) } else { Err(OutOfRange { limit, value, unlimited_allowed: false }) }
}

/// Checks a size where 0 means "no limit": 0, or [`Limit::min`]..=[`Limit::max`] (the agent's
/// rule for a launch and its configuration).
pub fn check_or_unlimited(limit: Limit, value: u64) -> Result<(), OutOfRange> {
    if value == 0 || limit.contains(value) {
        Ok(())
    } else {
        Err(OutOfRange { limit, value, unlimited_allowed: true })
    }
}

/// The bytes argv and the environment take, as [`MAX_ARGS_BYTES`] bounds them: each string with
/// its terminating NUL, each variable as `NAME=value` and its NUL.
pub fn args_bytes<'a>(
    argv: impl IntoIterator<Item = &'a str>,
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> usize {
    argv.into_iter().map(|a| a.len() + 1).sum::<usize>()
        + env.into_iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>()
}

/// Argv and environment over [`MAX_ARGS_BYTES`]: their size, as [`args_bytes`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgsTooLarge {
    /// Their size, bytes.
    pub bytes: usize,
}

impl fmt::Display for ArgsTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "argv and environment are {} bytes, more than the {MAX_ARGS_BYTES}-byte limit", self.bytes)
    }
}

impl std::error::Error for ArgsTooLarge {}

/// Checks the size of argv and the environment against [`MAX_ARGS_BYTES`].
pub fn check_args<'a>(
    argv: impl IntoIterator<Item = &'a str>,
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), ArgsTooLarge> {
    let bytes = args_bytes(argv, env);
    if bytes > MAX_ARGS_BYTES { Err(ArgsTooLarge { bytes }) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_zero_is_no_limit_only_where_allowed() {
        for limit in [Limit::CpuMillis, Limit::MemoryBytes, Limit::DiskBytes, Limit::MaxPids] {
            assert_eq!(check(limit, limit.min()), Ok(()), "{limit:?}");
            assert_eq!(check(limit, limit.max()), Ok(()), "{limit:?}");
            assert!(check(limit, limit.max() + 1).is_err(), "{limit:?}");
            assert!(check(limit, 0).is_err(), "{limit:?}: a submission must ask for a size");
            assert_eq!(check_or_unlimited(limit, 0), Ok(()), "{limit:?}");
            assert!(check_or_unlimited(limit, limit.max() + 1).is_err(), "{limit:?}");
        }
        assert!(check(Limit::CpuMillis, MIN_CPU_MILLIS - 1).is_err());
        assert!(check_or_unlimited(Limit::MemoryBytes, MIN_MEMORY_BYTES - 1).is_err());
        assert!(check(Limit::DiskBytes, MIN_DISK_BYTES - 1).is_err());
    }

    #[test]
    fn messages_name_the_field_the_value_and_the_bounds() {
        let text = |r: Result<(), OutOfRange>| r.map_err(|e| e.to_string());
        assert_eq!(
            text(check_or_unlimited(Limit::CpuMillis, 5)),
            Err("cpu_millis 5 is out of range: 0 (no limit) or 10..=10000000".to_owned())
        );
        assert_eq!(
            text(check_or_unlimited(Limit::MemoryBytes, 1)),
            Err(format!("memory_bytes 1 is out of range: 0 (no limit) or 1048576..={MAX_MEMORY_BYTES}"))
        );
        assert_eq!(
            text(check_or_unlimited(Limit::MaxPids, MAX_PIDS + 1)),
            Err("max_pids 4194305 is out of range: 0 (no limit) or at most 4194304".to_owned())
        );
        assert_eq!(
            text(check(Limit::DiskBytes, 1)),
            Err(format!("disk_bytes 1 is out of range: 1048576..={MAX_DISK_BYTES}"))
        );
    }

    #[test]
    fn args_count_each_string_with_its_nul_and_each_variable_as_name_equals_value() {
        assert_eq!(args_bytes(["ls", "-l"], [("A", "1")]), 3 + 3 + 4);
        let big = "x".repeat(MAX_ARGS_BYTES);
        assert_eq!(check_args([big.as_str()], []), Err(ArgsTooLarge { bytes: MAX_ARGS_BYTES + 1 }));
        assert_eq!(check_args([&big[1..]], []), Ok(()));
        assert_eq!(
            ArgsTooLarge { bytes: 7 }.to_string(),
            format!("argv and environment are 7 bytes, more than the {MAX_ARGS_BYTES}-byte limit")
        );
    }
}
