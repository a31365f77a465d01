//! Durations as the REST API's query strings (`/removable-nodes?idle=10m`) and the `gantry`
//! command line write them: the SDK's one grammar ([`gantry_sdk::units`]) read leniently — a
//! bare number is seconds, `ms`, `s`, `m` (`min`) or `h` otherwise, decimals rounded to the ms,
//! blanks allowed — up to one year. Here, beside the API that reads them, so that the CLI (a
//! client of the API) and the routes share one reading and neither imports the other.

use crate::api::types::MAX_EXPECTED_MS;
use gantry_sdk::units::{Fraction, Reading, parse_quantity};

/// A duration that may be zero (a boot delay of `0s`): bare seconds, rounded to the ms, at most
/// [`MAX_EXPECTED_MS`].
pub const DURATION_OR_ZERO: Reading = Reading {
    bare: Some(1000),
    fraction: Fraction::Nearest,
    lenient: true,
    min: 0,
    max: MAX_EXPECTED_MS,
    ..Reading::DURATION
};

/// A duration of at least 1 ms (zero would mean "unknown"): otherwise [`DURATION_OR_ZERO`].
pub const DURATION: Reading = Reading { min: 1, ..DURATION_OR_ZERO };

/// A duration in ms: a number with `ms`, `s`, `m` or `h` (decimals allowed, `1.5h`); a bare
/// number is seconds. Zero is refused (it would mean "unknown").
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    parse_quantity(s, &DURATION).map_err(|e| e.to_string())
}

/// As [`parse_duration_ms`], but zero is a duration too (a boot delay of `0s`).
pub fn parse_duration_or_zero_ms(s: &str) -> Result<u64, String> {
    parse_quantity(s, &DURATION_OR_ZERO).map_err(|e| e.to_string())
}
