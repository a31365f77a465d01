//! gantry's JSON-lines trace reader. Besides "no panic": the jobs it returns are written back by
//! `jsonl::write` to text that reads back to the same jobs (the format's documented round trip).
#![no_main]

use gantry_sim::trace::jsonl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(jobs) = jsonl::parse(text, "fuzz.jsonl") {
        let written = jsonl::write(&jobs);
        assert_eq!(jsonl::parse(&written, "written.jsonl").as_ref(), Ok(&jobs), "{written}");
    }
});
