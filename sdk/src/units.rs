//! Binary size units, as every size in gantry is written (`512M`, `2GiB`, `1.5G`): one table for
//! the CLI's sizes and the RDL's bundle memory, so both read the same spellings; and the one way
//! sizes and CPU are written back to people (the CLI's tables, the engine's diagnostics).

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
