//! The CMU 15-719 trace reader: GPU or MPI file, unknown durations refused or scaled (the first
//! byte).
#![no_main]

use gantry_sim::trace::cmu::{self, CmuConfig, UnknownDuration};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let file = if mode & 1 == 0 { "traceGPU-fuzz.csv" } else { "traceMPI-fuzz.csv" };
    let cfg = CmuConfig {
        unknown_duration: if mode & 2 == 0 { UnknownDuration::Error } else { UnknownDuration::TypeRatio },
        ..CmuConfig::default()
    };
    let _ = cmu::parse(text, file, &cfg);
});
