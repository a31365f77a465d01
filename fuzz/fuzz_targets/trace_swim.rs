//! The SWIM (Facebook 2009) workload reader with the default model.
#![no_main]

use gantry_sim::trace::swim::{self, SwimModel};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = swim::parse(text, "fuzz.tsv", &SwimModel::default());
});
