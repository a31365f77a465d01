//! The CLI's argument parsers, for clap's `value_parser`. Quantities go through the SDK's one
//! grammar ([`gantry_sdk::units`]) read as a command line does: blanks allowed, a bare number in
//! the flag's own unit; durations are the API's reading
//! ([`gantry_scheduler::api::durations`]), which the REST API's query strings share.

use gantry_scheduler::api::types::{AppState, RackAffinity};
use gantry_sdk::units::{Fraction, Quantity, Reading, parse_quantity};

pub use gantry_scheduler::api::durations::{parse_duration_ms, parse_duration_or_zero_ms};

/// `--cpu`: cores (`2`, `0.5`, `.5`, at most three decimals) or millicores (`500m`), exact;
/// more than 0.
const CPU: Reading = Reading { lenient: true, min: 1, ..Reading::CPU };

/// Parses a CPU amount into millicores: cores with up to three decimals (`2`, `0.5`, `1.25`)
/// or millicores with an `m` (`500m`), as Kubernetes writes them. Exact: no floating point.
pub fn parse_cpu(s: &str) -> Result<u64, String> {
    parse_quantity(s, &CPU).map_err(|e| e.to_string())
}

/// A size as the command line writes it: a binary unit — `B`, `K`, `M`, `G`, `T`, `P`, also
/// written `KB`/`KiB` and so on, any case — or none, for `bare_unit` bytes; decimals rounded
/// down to a byte (`1.5G`).
fn size_reading(quantity: Quantity, bare_unit: u64) -> Reading {
    Reading { quantity, bare: Some(bare_unit), fraction: Fraction::Down, lenient: true, ..Reading::SIZE }
}

/// Parses a size with an optional binary unit — `B`, `K`, `M`, `G`, `T`, `P`, also written
/// `KB`/`KiB` and so on, any case — into bytes; a bare number is in `bare_unit` bytes. A
/// decimal fraction is allowed (`1.5G`) and rounded down to a byte.
pub fn parse_size(s: &str, bare_unit: u64) -> Result<u64, String> {
    parse_quantity(s, &size_reading(Quantity::Size, bare_unit)).map_err(|e| e.to_string())
}

/// A memory size for `--mem`: see [`parse_size`]; a bare number is MiB; zero is refused.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let reading = Reading { min: 1, ..size_reading(Quantity::Memory, 1 << 20) };
    parse_quantity(s, &reading).map_err(|e| e.to_string())
}

/// A byte count for `--tail`: see [`parse_size`]; a bare number is bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s, 1)
}

/// `key=value` (the value may be empty and may contain `=`; the key may not be empty).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// An application state name, any case.
pub fn parse_state(s: &str) -> Result<AppState, String> {
    s.parse::<AppState>().map_err(|e| e.to_string())
}

/// `none`, `preferred` or `required`.
pub fn parse_rack_affinity(s: &str) -> Result<RackAffinity, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" => Ok(RackAffinity::None),
        "preferred" => Ok(RackAffinity::Preferred),
        "required" => Ok(RackAffinity::Required),
        _ => Err(format!("`{s}` is not one of none, preferred, required")),
    }
}
