//! The Standard Workload Format reader, with queues from the trace or not (the first byte).
#![no_main]

use gantry_sim::trace::swf::{self, SwfOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let opts = SwfOptions { queues_from_trace: mode & 1 == 1, ..SwfOptions::default() };
    let _ = swf::parse_with_stats(text, "fuzz.swf", &opts);
});
