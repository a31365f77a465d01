//! The one quantity grammar, with every reading its callers use: each form one of the former
//! grammars (the CLI's, the simulator CLI's, the RDL's, the scheduler configuration's, the
//! Rayon experiment's) accepted, and what each refused. A caller's reading that drifts from
//! what it accepted before fails here.

use gantry_sdk::units::{Fraction, Quantity, QuantityErrorKind, Reading, format_duration, parse_quantity};

const DAY_MS: u64 = 86_400_000;

/// `gantry` flags and the REST API's `idle`: bare seconds, rounded to the ms, 1 ms to 366 days.
const CLI_DURATION: Reading = Reading {
    bare: Some(1000),
    fraction: Fraction::Nearest,
    lenient: true,
    min: 1,
    max: 366 * DAY_MS,
    ..Reading::DURATION
};
/// `gantry sim`'s and `gantry reserve`'s durations that may be zero.
const CLI_DURATION_OR_ZERO: Reading = Reading { min: 0, ..CLI_DURATION };
/// `--mem`, `--disk`: bare MiB, rounded down to a byte, more than 0.
const CLI_MEMORY: Reading =
    Reading { bare: Some(1 << 20), fraction: Fraction::Down, lenient: true, min: 1, ..Reading::MEMORY };
/// `--tail`: bare bytes.
const CLI_BYTES: Reading =
    Reading { bare: Some(1), fraction: Fraction::Down, lenient: true, ..Reading::SIZE };
/// `--cpu`: cores or millicores, exact, more than 0.
const CLI_CPU: Reading = Reading { lenient: true, min: 1, ..Reading::CPU };
/// The RDL's leases, work and windows (their bound is the caller's).
const RDL_DURATION: Reading = Reading { max: 10 * 365 * DAY_MS, ..Reading::DURATION };
/// The RDL's bundle memory.
const RDL_MEMORY: Reading = Reading::MEMORY;
/// The RDL's bundle CPU.
const RDL_CPU: Reading = Reading { max: 1_000_000_000, ..Reading::CPU };
/// The scheduler configuration's `[store]` durations: whole numbers, days too (`"0"` is the
/// caller's own word for none).
const CONFIG_DURATION: Reading = Reading { decimals: false, lenient: true, days: true, ..Reading::DURATION };
/// The Rayon experiment's `--loss-at`, `--milp-time-limit`: bare ms, rounded down.
const EXAMPLE_MS: Reading =
    Reading { bare: Some(1), fraction: Fraction::Down, lenient: true, ..Reading::DURATION };
/// The Rayon experiment's `--node-mem`: bare bytes, rounded down, more than 0.
const EXAMPLE_BYTES: Reading =
    Reading { bare: Some(1), fraction: Fraction::Down, lenient: true, min: 1, ..Reading::MEMORY };

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn every_form_a_caller_accepted_reads_as_it_did() {
    let accepted: &[(&str, &Reading, &str, u64)] = &[
        // The CLI's durations.
        ("cli", &CLI_DURATION, "39", 39_000),
        ("cli", &CLI_DURATION, "39s", 39_000),
        ("cli", &CLI_DURATION, "500ms", 500),
        ("cli", &CLI_DURATION, "1.5m", 90_000),
        ("cli", &CLI_DURATION, "5min", 300_000),
        ("cli", &CLI_DURATION, "2h", 7_200_000),
        ("cli", &CLI_DURATION, "1.5h", 5_400_000),
        ("cli", &CLI_DURATION, " 2h ", 7_200_000),
        ("cli", &CLI_DURATION, "1 s", 1_000),
        ("cli", &CLI_DURATION, ".5s", 500),
        ("cli", &CLI_DURATION, "1.s", 1_000),
        ("cli", &CLI_DURATION, "0.5ms", 1),
        ("cli", &CLI_DURATION, "1.0004s", 1_000),
        ("cli", &CLI_DURATION, "8784h", 366 * DAY_MS),
        ("cli", &CLI_DURATION_OR_ZERO, "0", 0),
        ("cli", &CLI_DURATION_OR_ZERO, "0s", 0),
        ("cli", &CLI_DURATION_OR_ZERO, "0.4ms", 0),
        // The CLI's sizes.
        ("cli", &CLI_MEMORY, "512M", 512 * MIB),
        ("cli", &CLI_MEMORY, "512", 512 * MIB),
        ("cli", &CLI_MEMORY, "2G", 2 * GIB),
        ("cli", &CLI_MEMORY, "2g", 2 * GIB),
        ("cli", &CLI_MEMORY, "1.5G", 3 << 29),
        ("cli", &CLI_MEMORY, "1.5GiB", 3 << 29),
        ("cli", &CLI_MEMORY, "64Ki", 64 << 10),
        ("cli", &CLI_MEMORY, "1T", 1 << 40),
        ("cli", &CLI_MEMORY, "100B", 100),
        ("cli", &CLI_MEMORY, "1.5B", 1),
        ("cli", &CLI_MEMORY, " 2 G ", 2 * GIB),
        ("cli", &CLI_MEMORY, ".5G", GIB / 2),
        ("cli", &CLI_MEMORY, "0.1K", 102),
        ("cli", &CLI_BYTES, "4096", 4096),
        ("cli", &CLI_BYTES, "64K", 65_536),
        ("cli", &CLI_BYTES, "0", 0),
        // The CLI's CPU.
        ("cli", &CLI_CPU, "1", 1000),
        ("cli", &CLI_CPU, "1.5", 1500),
        ("cli", &CLI_CPU, "0.25", 250),
        ("cli", &CLI_CPU, ".5", 500),
        ("cli", &CLI_CPU, "0.001", 1),
        ("cli", &CLI_CPU, "500m", 500),
        ("cli", &CLI_CPU, " 2 ", 2000),
        // The RDL.
        ("rdl", &RDL_DURATION, "1.5h", 5_400_000),
        ("rdl", &RDL_DURATION, "250ms", 250),
        ("rdl", &RDL_DURATION, "0s", 0),
        ("rdl", &RDL_DURATION, "90m", 5_400_000),
        ("rdl", &RDL_MEMORY, "1.5GiB", 3 << 29),
        ("rdl", &RDL_MEMORY, "512m", 512 * MIB),
        ("rdl", &RDL_MEMORY, "100B", 100),
        ("rdl", &RDL_CPU, "2", 2000),
        ("rdl", &RDL_CPU, "0.5", 500),
        ("rdl", &RDL_CPU, "500m", 500),
        ("rdl", &RDL_CPU, "0", 0),
        // The scheduler configuration.
        ("config", &CONFIG_DURATION, "500ms", 500),
        ("config", &CONFIG_DURATION, "90s", 90_000),
        ("config", &CONFIG_DURATION, "30m", 1_800_000),
        ("config", &CONFIG_DURATION, "12h", 43_200_000),
        ("config", &CONFIG_DURATION, "7d", 7 * DAY_MS),
        ("config", &CONFIG_DURATION, " 7d ", 7 * DAY_MS),
        // The Rayon experiment.
        ("example", &EXAMPLE_MS, "12h", 43_200_000),
        ("example", &EXAMPLE_MS, "30m", 1_800_000),
        ("example", &EXAMPLE_MS, "20s", 20_000),
        ("example", &EXAMPLE_MS, "500ms", 500),
        ("example", &EXAMPLE_MS, "1500", 1500),
        ("example", &EXAMPLE_MS, "0", 0),
        ("example", &EXAMPLE_MS, "1.5ms", 1),
        ("example", &EXAMPLE_BYTES, "16GiB", 16 * GIB),
        ("example", &EXAMPLE_BYTES, "16G", 16 * GIB),
        ("example", &EXAMPLE_BYTES, "512MiB", 512 * MIB),
        ("example", &EXAMPLE_BYTES, "512M", 512 * MIB),
        ("example", &EXAMPLE_BYTES, "1000", 1000),
        ("example", &EXAMPLE_BYTES, "1.5G", 3 << 29),
    ];
    for &(caller, reading, text, want) in accepted {
        assert_eq!(parse_quantity(text, reading), Ok(want), "{caller}: {text:?}");
    }
}

#[test]
fn every_form_a_caller_refused_is_refused_for_the_right_reason() {
    use QuantityErrorKind::*;
    let unknown = |u: &str| UnknownUnit(u.to_owned());
    let refused: &[(&str, &Reading, &str, QuantityErrorKind)] = &[
        ("cli", &CLI_DURATION, "0", BelowMin),
        ("cli", &CLI_DURATION, "0s", BelowMin),
        ("cli", &CLI_DURATION, "-1s", unknown("-1s")),
        ("cli", &CLI_DURATION, "1d", unknown("d")),
        ("cli", &CLI_DURATION, "", NotANumber),
        ("cli", &CLI_DURATION, "s", NotANumber),
        ("cli", &CLI_DURATION, ".s", NotANumber),
        ("cli", &CLI_DURATION, "1..2s", NotANumber),
        ("cli", &CLI_DURATION, "1e3", unknown("e3")),
        ("cli", &CLI_DURATION, "9000h", AboveMax),
        ("cli", &CLI_DURATION, "99999999999999999999999h", TooManyDigits),
        ("cli", &CLI_MEMORY, "0", BelowMin),
        ("cli", &CLI_MEMORY, "0M", BelowMin),
        ("cli", &CLI_MEMORY, "-1G", unknown("-1G")),
        ("cli", &CLI_MEMORY, "1X", unknown("X")),
        ("cli", &CLI_MEMORY, "G", NotANumber),
        ("cli", &CLI_MEMORY, "", NotANumber),
        ("cli", &CLI_MEMORY, "1.2.3G", NotANumber),
        ("cli", &CLI_MEMORY, "99999999P", AboveMax),
        ("cli", &CLI_MEMORY, "1.5 potatoes", unknown("potatoes")),
        ("cli", &CLI_CPU, "0", BelowMin),
        ("cli", &CLI_CPU, "0.0", BelowMin),
        ("cli", &CLI_CPU, "-1", unknown("-1")),
        ("cli", &CLI_CPU, "1.0005", NotWhole),
        ("cli", &CLI_CPU, "abc", unknown("abc")),
        ("cli", &CLI_CPU, "", NotANumber),
        ("cli", &CLI_CPU, "1e3", unknown("e3")),
        ("cli", &CLI_CPU, "m", NotANumber),
        ("cli", &CLI_CPU, "1.5m", NotWhole),
        ("cli", &CLI_CPU, "99999999999999999999", AboveMax),
        ("rdl", &RDL_DURATION, "0.5ms", NotWhole),
        ("rdl", &RDL_DURATION, "5", NeedsUnit),
        ("rdl", &RDL_DURATION, "5d", unknown("d")),
        ("rdl", &RDL_DURATION, "1.h", NotANumber),
        ("rdl", &RDL_DURATION, ".5h", NotANumber),
        ("rdl", &RDL_DURATION, "1 s", unknown(" s")),
        ("rdl", &RDL_DURATION, " 1s", unknown(" 1s")),
        ("rdl", &RDL_DURATION, "1.0001s", NotWhole),
        ("rdl", &RDL_DURATION, "87601h", AboveMax),
        ("rdl", &RDL_MEMORY, "512", NeedsUnit),
        ("rdl", &RDL_MEMORY, "1.5B", NotWhole),
        ("rdl", &RDL_MEMORY, "2Q", unknown("Q")),
        ("rdl", &RDL_CPU, "0.0005", NotWhole),
        ("rdl", &RDL_CPU, "1.5m", NotWhole),
        ("rdl", &RDL_CPU, "-1", unknown("-1")),
        ("rdl", &RDL_CPU, "1000001", AboveMax),
        ("config", &CONFIG_DURATION, "7x", unknown("x")),
        ("config", &CONFIG_DURATION, "1.5d", NoDecimals),
        ("config", &CONFIG_DURATION, "d", NotANumber),
        ("config", &CONFIG_DURATION, "7", NeedsUnit),
        ("example", &EXAMPLE_BYTES, "0", BelowMin),
        ("example", &EXAMPLE_MS, "-5s", unknown("-5s")),
    ];
    for (caller, reading, text, want) in refused {
        let got = parse_quantity(text, reading).map_err(|e| e.kind);
        assert_eq!(got, Err(want.clone()), "{caller}: {text:?}");
    }
}

#[test]
fn messages_say_what_was_read_and_what_to_write() {
    let message = |text: &str, reading: &Reading| parse_quantity(text, reading).unwrap_err().to_string();
    assert_eq!(message("5", &RDL_DURATION), "`5` needs a unit: ms, s, m or h");
    assert_eq!(
        message("1d", &CLI_DURATION),
        "`1d` is not a duration: unknown duration unit `d` (use ms, s, m or h)"
    );
    assert_eq!(
        message("7x", &CONFIG_DURATION),
        "`7x` is not a duration: unknown duration unit `x` (use ms, s, m, h or d)"
    );
    assert_eq!(
        message("2Q", &RDL_MEMORY),
        "`2Q` is not a memory size: unknown memory unit `Q` (use B, KiB, MiB, GiB, TiB or PiB)"
    );
    assert_eq!(
        message("1..2s", &CLI_DURATION),
        "`1..2s` is not a duration (not a number; e.g. 90s, 15m, 2h)"
    );
    assert_eq!(
        message("1.0001s", &RDL_DURATION),
        "`1.0001s` is not a duration (not a whole number of milliseconds)"
    );
    assert_eq!(message("1.5d", &CONFIG_DURATION), "`1.5d` is not a duration (whole numbers only here)");
    assert_eq!(message("0s", &CLI_DURATION), "`0s`: the duration must be more than 0");
    assert_eq!(message("9000h", &CLI_DURATION), "`9000h` is more than the limit of 366 days");
    assert_eq!(message("99999999P", &CLI_MEMORY), "`99999999P` is too large");
    assert_eq!(message("99999999999999999d", &CONFIG_DURATION), "`99999999999999999d` is too long");
    assert_eq!(message("1000001", &RDL_CPU), "`1000001` is more than the limit of 1000000 cores");
    assert_eq!(
        message("1x", &RDL_CPU),
        "`1x` is not a CPU amount: unknown CPU unit `x` (use cores without a unit, or m for millicores)"
    );
    let e = parse_quantity("2Q", &RDL_MEMORY).unwrap_err();
    assert!(e.is_unknown_unit());
    assert_eq!(e.reading.quantity, Quantity::Memory);
}

#[test]
fn exact_durations_read_back_what_they_write() {
    for ms in [0, 1, 999, 1000, 61_000, 60_000, 3_600_000, 5_400_000, 10 * 365 * DAY_MS] {
        assert_eq!(parse_quantity(&format_duration(ms), &RDL_DURATION), Ok(ms), "{ms}");
    }
    for ms in [0, 1, 999, 61_000, 5_400_000, 366 * DAY_MS] {
        assert_eq!(parse_quantity(&format_duration(ms), &CLI_DURATION_OR_ZERO), Ok(ms), "{ms}");
    }
    assert_eq!(format_duration(5_400_000), "90m");
    assert_eq!(format_duration(1500), "1500ms");
}

#[test]
fn rounding_is_exact_arithmetic_not_floating_point() {
    // 0.1h in floating point is 359999.99…; exactly, 360000 ms.
    assert_eq!(parse_quantity("0.1h", &RDL_DURATION), Ok(360_000));
    // Halves round up; anything below stays.
    assert_eq!(parse_quantity("2.5ms", &CLI_DURATION), Ok(3));
    assert_eq!(parse_quantity("2.4999ms", &CLI_DURATION), Ok(2));
    // Trailing zeros and leading zeros change nothing, however many.
    assert_eq!(parse_quantity("1.500000000000000000000000s", &RDL_DURATION), Ok(1500));
    assert_eq!(parse_quantity("0000000000000000000000001s", &RDL_DURATION), Ok(1000));
    // The last byte of u64 is reachable; one more is not.
    assert_eq!(parse_quantity("18446744073709551615B", &Reading::SIZE), Ok(u64::MAX));
    assert_eq!(
        parse_quantity("18446744073709551616B", &Reading::SIZE).map_err(|e| e.kind),
        Err(QuantityErrorKind::AboveMax)
    );
}
