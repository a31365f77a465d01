//! Amounts of resources: YARN's rounded figures next to gantry's exact ones in responses
//! ([`ResourceInfo`]), the exact ones alone in submissions ([`ResourceRequest`]), and the shares
//! the other bodies compute from them.

use gantry_sdk::abi::*;
use serde::{Deserialize, Serialize};

/// Bytes in a MiB: YARN's memory unit.
const MIB: u64 = 1 << 20;

/// An amount of resources in a response: YARN's rounded `memory` (MiB) and `vCores` next to
/// gantry's exact figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// Memory in MiB, rounded down (YARN's `memory`).
    pub memory: u64,
    /// Whole cores, rounded down (YARN's `vCores`).
    #[serde(rename = "vCores")]
    pub v_cores: u64,
    /// CPU in millicores (1000 = one core), exact.
    pub cpu_millis: u64,
    /// Memory in bytes, exact.
    pub memory_bytes: u64,
    /// Whole GPUs (MIG instances count one each).
    pub gpus: u32,
}

impl From<GantryResources> for ResourceInfo {
    fn from(r: GantryResources) -> Self {
        ResourceInfo {
            memory: r.memory_bytes / MIB,
            v_cores: r.cpu_millis / 1000,
            cpu_millis: r.cpu_millis,
            memory_bytes: r.memory_bytes,
            gpus: r.gpus,
        }
    }
}

impl ResourceInfo {
    /// Back to the engine's record.
    pub fn to_gantry(self) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis,
            memory_bytes: self.memory_bytes,
            gpus: self.gpus,
            reserved: 0,
        }
    }
}

/// The resources of each container of a submitted group, in gantry's exact units only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceRequest {
    /// CPU in millicores (1000 = one core), [`MIN_CPU_MILLIS`]..=[`MAX_CPU_MILLIS`].
    pub cpu_millis: u64,
    /// Memory in bytes, [`MIN_MEMORY_BYTES`]..=[`MAX_MEMORY_BYTES`].
    pub memory_bytes: u64,
    /// Whole GPUs, 0..=[`MAX_GPUS`].
    #[serde(default)]
    pub gpus: u32,
}

impl ResourceRequest {
    /// As the engine's record.
    pub fn to_gantry(self) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis,
            memory_bytes: self.memory_bytes,
            gpus: self.gpus,
            reserved: 0,
        }
    }
}

/// The larger of `num / den` over CPU, memory and GPUs (the dominant share), ignoring
/// dimensions the denominator does not have. 0 when it has none.
pub(super) fn dominant_share(num: &GantryResources, den: &GantryResources) -> f64 {
    let mut share: f64 = 0.0;
    for (n, d) in [
        (num.cpu_millis as f64, den.cpu_millis as f64),
        (num.memory_bytes as f64, den.memory_bytes as f64),
        (num.gpus as f64, den.gpus as f64),
    ] {
        if d > 0.0 {
            share = share.max(n / d);
        }
    }
    share
}

pub(super) fn minus(a: &GantryResources, b: &GantryResources) -> GantryResources {
    GantryResources {
        cpu_millis: a.cpu_millis.saturating_sub(b.cpu_millis),
        memory_bytes: a.memory_bytes.saturating_sub(b.memory_bytes),
        gpus: a.gpus.saturating_sub(b.gpus),
        reserved: 0,
    }
}

/// Rounds a percentage to two decimals so that responses do not show float noise.
pub(super) fn percent(fraction: f64) -> f64 {
    if fraction.is_finite() { (fraction * 10_000.0).round() / 100.0 } else { 0.0 }
}
