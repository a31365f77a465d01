//! The scheduler's TOML configuration, read from text as `SchedulerConfig::from_file` reads a
//! file (parse, then every check, which builds an engine from the queues), and the
//! configuration's derived values.
#![no_main]

use gantry_scheduler::config::SchedulerConfig;
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(cfg) = SchedulerConfig::from_str_at(text, Path::new("fuzz.toml"), PathBuf::from("/etc/gantry"))
    else {
        return;
    };
    let _ = cfg.engine_config();
    let _ = cfg.data_dir();
    for p in &cfg.plugins {
        let _ = cfg.plugin_path(p);
    }
    if let Some(r) = &cfg.reservations {
        let _ = r.plan_config();
    }
});
