//! The agent's TOML configuration, read from text as `AgentConfig::from_file` reads a file.
#![no_main]

use gantry_agent::config::AgentConfig;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(cfg) = AgentConfig::from_str_at(text, Path::new("fuzz.toml")) {
        let _ = cfg.launch_slots();
        let _ = cfg.containers_dir();
    }
});
