//! How the CLI writes tables, sizes, durations and times for people.

use std::collections::BTreeMap;

/// Left-aligned columns separated by two spaces, one header line; no trailing spaces.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            l.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
            l.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The text, or `-` for nothing.
pub(super) fn dash(s: &str) -> String {
    if s.is_empty() { "-".to_owned() } else { s.to_owned() }
}

/// Labels as `k=v,k=v`, or `-` for none.
pub(super) fn fmt_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// Millicores as cores: `2`, `0.5`, `1.25` (the SDK's one formatter, also the engine's).
pub use gantry_sdk::units::format_cores as fmt_cores;

/// Bytes in binary units: `512Mi`, `1.5Gi`, `100B` (the SDK's one formatter).
pub use gantry_sdk::units::format_bytes as fmt_bytes;

/// A duration in ms, short: `450ms`, `12s`, `3m05s`, `1h02m`, `2d03h`.
pub fn fmt_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS UTC`; `-` for 0.
pub fn fmt_time(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "-".to_owned();
    }
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Howard Hinnant's civil_from_days: days since 1970-01-01 to a proleptic Gregorian date.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}
