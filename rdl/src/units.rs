//! Quantities with units, read and written exactly (no floating point): durations and work,
//! CPU, memory, GPUs.

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

const DURATION_UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
const MEMORY_UNITS: [(&str, u64); 6] =
    [("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];

/// Splits `12.5GiB` into `("12.5", "GiB")`.
pub(crate) fn split_unit(s: &str) -> (&str, &str) {
    let i = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    s.split_at(i)
}

/// `digits[.digits]` times `unit`, exactly: `None` when malformed, not a whole number of the
/// base unit, or past `u64`.
pub(crate) fn scaled(num: &str, unit: u64) -> Result<u64, &'static str> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || (num.contains('.') && !all_digits(frac)) {
        return Err("not a number");
    }
    if frac.len() > 18 || int.len() > 20 {
        return Err("too many digits");
    }
    let int: u128 = int.parse().map_err(|_| "not a number")?;
    let frac_value: u128 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| "not a number")? };
    let denom = 10u128.pow(frac.len() as u32);
    let frac_scaled = frac_value * unit as u128;
    if frac_scaled % denom != 0 {
        return Err("not a whole number of the smallest unit");
    }
    let total = int * unit as u128 + frac_scaled / denom;
    u64::try_from(total).map_err(|_| "too large")
}

/// A duration (`90s`, `1.5h`, `250ms`, `0s`) in ms, at most `max`.
pub fn parse_duration(s: &str, max: u64) -> Result<u64, String> {
    let (num, unit) = split_unit(s);
    let Some(&(_, unit_ms)) = DURATION_UNITS.iter().find(|(u, _)| *u == unit) else {
        return Err(if unit.is_empty() {
            format!("`{s}` needs a unit: ms, s, m or h")
        } else {
            format!("unknown duration unit `{unit}` in `{s}` (use ms, s, m or h)")
        });
    };
    let ms = scaled(num, unit_ms).map_err(|why| format!("`{s}` is not a duration ({why})"))?;
    if ms > max {
        return Err(format!("`{s}` is more than the limit of {}", format_duration(max)));
    }
    Ok(ms)
}

/// A duration in the largest unit that writes it exactly.
pub fn format_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in DURATION_UNITS {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A CPU amount as the CLI reads it: cores with up to three decimals (`2`, `0.5`) or
/// millicores (`500m`); into millicores.
pub fn parse_cpu(s: &str) -> Result<u64, String> {
    let millis = if let Some(m) = s.strip_suffix('m') {
        if m.contains('.') {
            return Err(format!("`{s}`: millicores are whole numbers"));
        }
        scaled(m, 1)
    } else {
        scaled(s, 1000)
    }
    .map_err(|why| format!("`{s}` is not a CPU amount such as 2, 0.5 or 500m ({why})"))?;
    if millis > MAX_CPU_MILLIS {
        return Err(format!("`{s}` is more than {} cores", MAX_CPU_MILLIS / 1000));
    }
    Ok(millis)
}

/// Millicores in the CLI's form: whole cores as `2`, the rest as `1500m`.
pub fn format_cpu(millis: u64) -> String {
    if millis % 1000 == 0 { format!("{}", millis / 1000) } else { format!("{millis}m") }
}

/// A memory size as the CLI reads it: a number and a binary unit, `B`, `K`, `M`, `G`, `T`, `P`,
/// also written `KB` / `KiB` and so on, any case; exact to the byte.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let (num, unit) = split_unit(s);
    let unit_bytes = match gantry_sdk::units::binary_unit_bytes(unit) {
        Some(b) => b,
        None if unit.is_empty() => return Err(format!("`{s}` needs a unit: B, KiB, MiB, GiB, TiB or PiB")),
        None => {
            return Err(format!("unknown memory unit `{unit}` in `{s}` (use B, KiB, MiB, GiB, TiB or PiB)"));
        }
    };
    scaled(num, unit_bytes).map_err(|why| format!("`{s}` is not a memory size ({why})"))
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
        assert!(parse_duration("5", MAX_TIME_MS).unwrap_err().contains("needs a unit"));
        assert!(parse_duration("5d", MAX_TIME_MS).unwrap_err().contains("unknown duration unit"));
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
