//! Quantities with units, as every duration, size and CPU amount in gantry is written (`90s`,
//! `1.5h`, `512M`, `2GiB`, `500m`): one grammar for the command line, the REST API's query
//! strings, the scheduler's configuration, the RDL and the examples, so all of them read the same
//! spellings; and the one way sizes and CPU are written back to people (the CLI's tables, the
//! engine's diagnostics).
//!
//! The grammar is `NUMBER [UNIT]`: digits with an optional decimal part, then a unit from the
//! quantity's table ([`Quantity`]). Computed exactly, in integers: no floating point, so
//! `0.1h` is 360000 ms and never 359999. Where callers genuinely differ — what a bare number
//! means, whether days are a unit, whether a fraction of a millisecond is rounded or refused,
//! blanks, the bounds — they say so in a [`Reading`], not in a grammar of their own.

/// What is being read: it decides the units and the words of the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// A duration, in ms: `ms`, `s`, `m` (or `min`), `h`, and `d` where [`Reading::days`] says.
    Duration,
    /// A memory size, in bytes: the binary units of [`binary_unit_bytes`].
    Memory,
    /// Any other size (a disk allowance, a log's tail), in bytes: the same units as memory.
    Size,
    /// A CPU amount, in millicores: `m` for millicores; cores are written bare (`bare: 1000`).
    Cpu,
}

/// What becomes of a value that is not a whole number of the base unit (`0.5ms`, `1.5B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fraction {
    /// Refused: the value must be exact (the RDL, CPU amounts).
    Refuse,
    /// Rounded to the nearest, halves up (the command line's durations).
    Nearest,
    /// Rounded down (the command line's sizes: `1.5B` is one byte).
    Down,
}

/// How one caller reads a quantity: the one grammar, with what differs between callers as
/// settings. Start from [`Reading::DURATION`], [`Reading::MEMORY`], [`Reading::SIZE`] or
/// [`Reading::CPU`] (strict: a unit is required, exact, no blanks, no bounds) and change what
/// differs, e.g. `Reading { bare: Some(1000), ..Reading::DURATION }` for bare seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// What is read.
    pub quantity: Quantity,
    /// Base units (ms, bytes, millicores) that a number without a unit counts; `None`: a unit
    /// is required.
    pub bare: Option<u64>,
    /// Whether a number may have a decimal part (`1.5h`); off, only whole numbers.
    pub decimals: bool,
    /// What becomes of a part smaller than the base unit.
    pub fraction: Fraction,
    /// The command line's leniency: blanks around the text and between number and unit (`1 s`),
    /// and a decimal with digits on one side only (`.5`, `1.`). Off, a quantity is one token
    /// with digits on both sides of its point, as in the RDL.
    pub lenient: bool,
    /// Whether `d` (days) is a unit of a duration.
    pub days: bool,
    /// The smallest value accepted, in the base unit.
    pub min: u64,
    /// The largest value accepted, in the base unit.
    pub max: u64,
}

impl Reading {
    /// A duration: a unit required, exact to the ms, no days, no blanks.
    pub const DURATION: Reading = Reading::strict(Quantity::Duration);
    /// A memory size: a unit required, exact to the byte, no blanks.
    pub const MEMORY: Reading = Reading::strict(Quantity::Memory);
    /// A size: a unit required, exact to the byte, no blanks.
    pub const SIZE: Reading = Reading::strict(Quantity::Size);
    /// A CPU amount: bare numbers are cores, `m` millicores, exact to the millicore, no blanks.
    pub const CPU: Reading = Reading { bare: Some(1000), ..Reading::strict(Quantity::Cpu) };

    const fn strict(quantity: Quantity) -> Reading {
        Reading {
            quantity,
            bare: None,
            decimals: true,
            fraction: Fraction::Refuse,
            lenient: false,
            days: false,
            min: 0,
            max: u64::MAX,
        }
    }
}

/// Why a quantity was refused: the text, what was wrong, and the reading it was read with (for
/// the message). Its `Display` is the message people see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    /// The text as given.
    pub input: String,
    /// What was wrong.
    pub kind: QuantityErrorKind,
    /// How it was read.
    pub reading: Reading,
}

/// What was wrong with a quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantityErrorKind {
    /// A bare number where the reading requires a unit.
    NeedsUnit,
    /// A unit the quantity does not have (as written).
    UnknownUnit(String),
    /// The number is malformed (`1..2`, `-1`, `.`, nothing).
    NotANumber,
    /// More digits than any value needs (over 20 before the point or 18 after it).
    TooManyDigits,
    /// A decimal part where only whole numbers are read.
    NoDecimals,
    /// Not a whole number of the base unit, where fractions are refused.
    NotWhole,
    /// Below [`Reading::min`].
    BelowMin,
    /// Above [`Reading::max`] (or past `u64`).
    AboveMax,
}

impl QuantityError {
    /// Whether the unit was not understood (a caller may classify that apart from bad values).
    pub fn is_unknown_unit(&self) -> bool {
        matches!(self.kind, QuantityErrorKind::UnknownUnit(_))
    }
}

impl core::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = &self.input;
        let r = &self.reading;
        let noun = noun(r.quantity);
        match &self.kind {
            QuantityErrorKind::NeedsUnit => write!(f, "`{s}` needs a unit: {}", unit_hint(r)),
            QuantityErrorKind::UnknownUnit(unit) => write!(
                f,
                "`{s}` is not a {noun}: unknown {} unit `{unit}` (use {})",
                unit_adjective(r.quantity),
                unit_hint(r)
            ),
            QuantityErrorKind::NotANumber => {
                write!(f, "`{s}` is not a {noun} (not a number; e.g. {})", examples(r.quantity))
            }
            QuantityErrorKind::TooManyDigits => write!(f, "`{s}` is not a {noun} (too many digits)"),
            QuantityErrorKind::NoDecimals => write!(f, "`{s}` is not a {noun} (whole numbers only here)"),
            QuantityErrorKind::NotWhole => {
                write!(f, "`{s}` is not a {noun} (not a whole number of {})", base_unit(r.quantity))
            }
            QuantityErrorKind::BelowMin if r.min == 1 => write!(f, "`{s}`: the {noun} must be more than 0"),
            QuantityErrorKind::BelowMin => {
                write!(f, "`{s}` is less than the minimum of {}", describe(r.quantity, r.min))
            }
            QuantityErrorKind::AboveMax if r.max == u64::MAX && r.quantity == Quantity::Duration => {
                write!(f, "`{s}` is too long")
            }
            QuantityErrorKind::AboveMax if r.max == u64::MAX => write!(f, "`{s}` is too large"),
            QuantityErrorKind::AboveMax => {
                write!(f, "`{s}` is more than the limit of {}", describe(r.quantity, r.max))
            }
        }
    }
}

impl std::error::Error for QuantityError {}

fn noun(q: Quantity) -> &'static str {
    match q {
        Quantity::Duration => "duration",
        Quantity::Memory => "memory size",
        Quantity::Size => "size",
        Quantity::Cpu => "CPU amount",
    }
}

fn unit_adjective(q: Quantity) -> &'static str {
    match q {
        Quantity::Duration => "duration",
        Quantity::Memory => "memory",
        Quantity::Size => "size",
        Quantity::Cpu => "CPU",
    }
}

fn unit_hint(r: &Reading) -> &'static str {
    match r.quantity {
        Quantity::Duration if r.days => "ms, s, m, h or d",
        Quantity::Duration => "ms, s, m or h",
        Quantity::Memory | Quantity::Size => "B, KiB, MiB, GiB, TiB or PiB",
        Quantity::Cpu => "cores without a unit, or m for millicores",
    }
}

fn examples(q: Quantity) -> &'static str {
    match q {
        Quantity::Duration => "90s, 15m, 2h",
        Quantity::Memory | Quantity::Size => "512MiB, 2GiB",
        Quantity::Cpu => "2, 0.5 or 500m",
    }
}

fn base_unit(q: Quantity) -> &'static str {
    match q {
        Quantity::Duration => "milliseconds",
        Quantity::Memory | Quantity::Size => "bytes",
        Quantity::Cpu => "millicores",
    }
}

/// A bound, for a message: whole days as `366 days`, other durations exactly, sizes and CPU as
/// the tables write them.
fn describe(q: Quantity, value: u64) -> String {
    const DAY_MS: u64 = 86_400_000;
    match q {
        Quantity::Duration if value >= DAY_MS && value % DAY_MS == 0 => format!("{} days", value / DAY_MS),
        Quantity::Duration => format_duration(value),
        Quantity::Memory | Quantity::Size => format_bytes(value),
        Quantity::Cpu => format!("{} cores", format_cores(value)),
    }
}

/// Base units in one `unit` of `reading`'s quantity, or `None` for a unit it does not have.
fn unit_size(reading: &Reading, unit: &str) -> Option<u64> {
    match reading.quantity {
        Quantity::Duration => match unit {
            "ms" => Some(1),
            "s" => Some(1_000),
            "m" | "min" => Some(60_000),
            "h" => Some(3_600_000),
            "d" if reading.days => Some(86_400_000),
            _ => None,
        },
        Quantity::Memory | Quantity::Size => binary_unit_bytes(unit),
        Quantity::Cpu => (unit == "m").then_some(1),
    }
}

/// Reads a quantity as `reading` says, into its base unit (ms, bytes, millicores).
pub fn parse_quantity(text: &str, reading: &Reading) -> Result<u64, QuantityError> {
    let fail = |kind| QuantityError { input: text.to_owned(), kind, reading: *reading };
    let s = if reading.lenient { text.trim() } else { text };
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = if reading.lenient { unit.trim_start() } else { unit };
    let unit_value = if unit.is_empty() {
        reading.bare.ok_or_else(|| fail(QuantityErrorKind::NeedsUnit))?
    } else {
        unit_size(reading, unit).ok_or_else(|| fail(QuantityErrorKind::UnknownUnit(unit.to_owned())))?
    };
    let (int, frac) = match num.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (num, None),
    };
    let all_digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    let well_formed = all_digits(int)
        && frac.is_none_or(all_digits)
        && if reading.lenient {
            !int.is_empty() || frac.is_some_and(|f| !f.is_empty())
        } else {
            !int.is_empty() && frac.is_none_or(|f| !f.is_empty())
        };
    if !well_formed {
        return Err(fail(QuantityErrorKind::NotANumber));
    }
    if frac.is_some() && !reading.decimals {
        return Err(fail(QuantityErrorKind::NoDecimals));
    }
    // Leading zeros of the whole part and trailing zeros of the decimals change nothing.
    let int = int.trim_start_matches('0');
    let frac = frac.unwrap_or("").trim_end_matches('0');
    if int.len() > 20 || frac.len() > 18 {
        return Err(fail(QuantityErrorKind::TooManyDigits));
    }
    // Exact: at most 20 digits times a unit below 2^64 fits in a u128, and so do 18 decimals.
    let parse = |d: &str| if d.is_empty() { 0 } else { d.parse::<u128>().unwrap_or(u128::MAX) };
    let whole = parse(int).checked_mul(u128::from(unit_value));
    let denominator = 10u128.pow(frac.len() as u32);
    let scaled = parse(frac).saturating_mul(u128::from(unit_value));
    let (part, rest) = (scaled / denominator, scaled % denominator);
    let part = match reading.fraction {
        _ if rest == 0 => part,
        Fraction::Refuse => return Err(fail(QuantityErrorKind::NotWhole)),
        Fraction::Nearest if 2 * rest >= denominator => part + 1,
        Fraction::Nearest | Fraction::Down => part,
    };
    let total = whole.and_then(|w| w.checked_add(part)).ok_or_else(|| fail(QuantityErrorKind::AboveMax))?;
    let value = u64::try_from(total).map_err(|_| fail(QuantityErrorKind::AboveMax))?;
    if value > reading.max {
        return Err(fail(QuantityErrorKind::AboveMax));
    }
    if value < reading.min {
        return Err(fail(QuantityErrorKind::BelowMin));
    }
    Ok(value)
}

/// A duration in ms in the largest of `h`, `m`, `s` and `ms` that writes it exactly (`90m`,
/// `1500ms`, `0s`): what [`parse_quantity`] reads back with any duration reading.
pub fn format_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Bytes in one `unit` — `B`, `K`, `M`, `G`, `T`, `P`, also written `KB` / `KiB` (`Ki`) and so
/// on, any case — or `None` for anything else (the empty string included).
pub fn binary_unit_bytes(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "k" | "kb" | "ki" | "kib" => 1 << 10,
        "m" | "mb" | "mi" | "mib" => 1 << 20,
        "g" | "gb" | "gi" | "gib" => 1 << 30,
        "t" | "tb" | "ti" | "tib" => 1 << 40,
        "p" | "pb" | "pi" | "pib" => 1 << 50,
        _ => return None,
    })
}

/// Millicores as cores: `2`, `0.5`, `1.25`.
pub fn format_cores(millis: u64) -> String {
    if millis % 1000 == 0 {
        return (millis / 1000).to_string();
    }
    let s = format!("{}.{:03}", millis / 1000, millis % 1000);
    s.trim_end_matches('0').to_owned()
}

/// Bytes in binary units: `512Mi`, `1.5Gi`, `100B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] =
        [("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size {
            return if bytes % size == 0 {
                format!("{}{name}", bytes / size)
            } else {
                let s = format!("{:.1}", bytes as f64 / size as f64);
                format!("{}{name}", s.trim_end_matches(".0"))
            };
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::{binary_unit_bytes, format_bytes, format_cores};

    #[test]
    fn sizes_and_cores_are_written_back_briefly() {
        assert_eq!(format_cores(1500), "1.5");
        assert_eq!(format_cores(2000), "2");
        assert_eq!(format_cores(10), "0.01");
        assert_eq!(format_bytes(512 << 20), "512Mi");
        assert_eq!(format_bytes(3 << 29), "1.5Gi");
        assert_eq!(format_bytes(1100 << 20), "1.1Gi");
        assert_eq!(format_bytes(0), "0B");
    }

    #[test]
    fn every_spelling_of_a_unit_reads_the_same() {
        for (units, bytes) in [(["g", "GB", "Gi", "GiB"], 1u64 << 30), (["k", "KB", "ki", "kib"], 1 << 10)] {
            for u in units {
                assert_eq!(binary_unit_bytes(u), Some(bytes), "{u}");
            }
        }
        assert_eq!(binary_unit_bytes("B"), Some(1));
        assert_eq!(binary_unit_bytes(""), None);
        assert_eq!(binary_unit_bytes("gib2"), None);
    }
}
