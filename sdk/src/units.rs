//! Binary size units, as every size in gantry is written (`512M`, `2GiB`, `1.5G`): one table for
//! the CLI's sizes and the RDL's bundle memory, so both read the same spellings.

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

#[cfg(test)]
mod tests {
    use super::binary_unit_bytes;

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
