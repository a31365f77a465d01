//! The Alibaba GPU 2023 pod-list reader, under each of its options (chosen by the first byte).
#![no_main]

use gantry_sim::trace::alibaba::{self, AlibabaOptions, GpuSpecAs, PendingPods};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let opts = AlibabaOptions {
        pending: if mode & 1 == 0 { PendingPods::Skip } else { PendingPods::RunUntilDeleted },
        gpu_spec: if mode & 2 == 0 { GpuSpecAs::Selector } else { GpuSpecAs::Preference { slowdown: 1.5 } },
    };
    let _ = alibaba::parse_with_stats(text, "openb_pod_list_fuzz.csv", &opts);
});
