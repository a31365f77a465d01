//! Quantities with units, read and written exactly (no floating point): durations and work,
//! CPU, memory, GPUs. The grammar is the SDK's ([`gantry_sdk::units`]), read strictly: a
//! quantity is one token with a unit, its value exact; this module holds the language's bounds
//! and its way of writing quantities back.

use crate::ErrorKind;
use gantry_sdk::units::{QuantityError, Reading, parse_quantity};

/// The longest lease an expression may name: ten years, in ms.
pub const MAX_TIME_MS: u64 = 10 * 365 * 24 * 3_600_000;
/// The latest instant a window may name, ms: 2^53, so plan clocks that count from the Unix epoch
/// fit, and sums of instants and durations stay far from overflow.
pub const MAX_INSTANT_MS: u64 = 1 << 53;
/// The most work one atom may name, bundle-ms (about 36,000 bundle-years).
pub const MAX_WORK: u64 = 1 << 60;
/// The most bundles an atom may run at once (`g` and `h`).
pub const MAX_PARALLEL: u32 = 1_000_000;
/// The most millicores one bundle may ask for (a million cores).
pub const MAX_CPU_MILLIS: u64 = 1_000_000_000;
/// The most GPUs one bundle may ask for.
pub const MAX_GPUS: u32 = 1_000_000;

const MEMORY_UNITS: [(&str, u64); 6] =
    [("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];

/// Splits `12.5GiB` into `("12.5", "GiB")`.
pub(crate) fn split_unit(s: &str) -> (&str, &str) {
    let i = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    s.split_at(i)
}

/// How a refused quantity is classified: an unknown unit apart from a bad value.
pub(crate) fn error_kind(e: &QuantityError) -> ErrorKind {
    if e.is_unknown_unit() { ErrorKind::Unknown } else { ErrorKind::Value }
}

/// A duration (`90s`, `1.5h`, `250ms`, `0s`) in ms, at most `max`: the SDK's grammar, strict —
/// a unit is required, the value exact to the ms, one token without blanks.
pub fn parse_duration(s: &str, max: u64) -> Result<u64, QuantityError> {
    parse_quantity(s, &Reading { max, ..Reading::DURATION })
}

/// A duration in the largest unit that writes it exactly (the SDK's, which the parser reads
/// back).
pub use gantry_sdk::units::format_duration;

/// A CPU amount as the CLI writes it: cores with up to three decimals (`2`, `0.5`) or
/// millicores (`500m`); into millicores, exact, at most [`MAX_CPU_MILLIS`].
pub fn parse_cpu(s: &str) -> Result<u64, QuantityError> {
    parse_quantity(s, &Reading { max: MAX_CPU_MILLIS, ..Reading::CPU })
}

/// Millicores in the CLI's form: whole cores as `2`, the rest as `1500m`.
pub fn format_cpu(millis: u64) -> String {
    if millis % 1000 == 0 { format!("{}", millis / 1000) } else { format!("{millis}m") }
}

/// A memory size as the CLI writes it: a number and a binary unit, `B`, `K`, `M`, `G`, `T`, `P`,
/// also written `KB` / `KiB` and so on, any case; exact to the byte.
pub fn parse_memory(s: &str) -> Result<u64, QuantityError> {
    parse_quantity(s, &Reading::MEMORY)
}

/// Bytes in the largest binary unit that writes them exactly (`2GiB`, `1536MiB`, `100B`).
pub fn format_memory(bytes: u64) -> String {
    for (unit, size) in MEMORY_UNITS {
        if bytes >= size && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_exact() {
        assert_eq!(parse_duration("1.5h", MAX_TIME_MS), Ok(5_400_000));
        assert_eq!(parse_duration("250ms", MAX_TIME_MS), Ok(250));
        assert_eq!(parse_duration("0s", MAX_TIME_MS), Ok(0));
        assert!(parse_duration("0.5ms", MAX_TIME_MS).is_err());
        assert!(parse_duration("5", MAX_TIME_MS).unwrap_err().to_string().contains("needs a unit"));
        assert!(parse_duration("5d", MAX_TIME_MS).unwrap_err().to_string().contains("unknown duration unit"));
        assert!(parse_duration("1.h", MAX_TIME_MS).is_err());
        assert!(parse_duration("99999999999999999999999h", u64::MAX).is_err());
        assert!(parse_duration("11000d", MAX_TIME_MS).is_err());
        for ms in [1, 999, 1000, 61_000, 60_000, 3_600_000, 5_400_000, MAX_TIME_MS] {
            assert_eq!(parse_duration(&format_duration(ms), MAX_TIME_MS), Ok(ms));
        }
        assert_eq!(format_duration(5_400_000), "90m");
    }

    #[test]
    fn cpu_and_memory_as_the_cli_writes_them() {
        assert_eq!(parse_cpu("2"), Ok(2000));
        assert_eq!(parse_cpu("0.5"), Ok(500));
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert!(parse_cpu("0.0005").is_err());
        assert!(parse_cpu("1.5m").is_err());
        assert!(parse_cpu("-1").is_err());
        assert_eq!(parse_memory("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert!(parse_memory("512").is_err());
        assert!(parse_memory("1.5B").is_err());
        for b in [1, 1023, 1024, 3 << 29, 1 << 50, 5 << 50] {
            assert_eq!(parse_memory(&format_memory(b)), Ok(b));
        }
        for m in [1, 999, 1000, 2500] {
            assert_eq!(parse_cpu(&format_cpu(m)), Ok(m));
        }
    }
}
