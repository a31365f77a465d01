//! What the disk round's walk costs: [`gantry_agent::disk::measure`] over a container directory
//! of 10 000 files (100 directories of 100 files, 1 KiB each), cold from the kernel's dentry
//! cache only after the first run, as a real round finds it every `disk_check_interval_ms`.
//!
//! Run: `cargo bench -p gantry-agent --bench disk_walk` (`DISK_WALK_FILES=100000` for another
//! size). Figures go to BENCHMARKS.md.

use std::time::Instant;

fn main() {
    let files: usize = std::env::var("DISK_WALK_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let per_dir = 100;
    for d in 0..files.div_ceil(per_dir) {
        let sub = dir.path().join(format!("d{d}"));
        std::fs::create_dir(&sub).expect("dir");
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::write(sub.join(format!("f{f}")), [7u8; 1024]).expect("file");
        }
    }
    let uid = nix::unistd::geteuid().as_raw();
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..21 {
        let start = Instant::now();
        let usage = gantry_agent::disk::measure(dir.path(), Some(uid)).expect("measure");
        times.push(start.elapsed());
        last = Some(usage);
    }
    times.sort();
    let usage = last.expect("measured");
    let median = times[times.len() / 2];
    println!(
        "disk walk: {} entries, {} KiB counted; median {:.2} ms over {} runs (min {:.2} ms, max {:.2} ms); {:.0} ns per entry",
        usage.entries,
        usage.bytes / 1024,
        median.as_secs_f64() * 1e3,
        times.len(),
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        median.as_nanos() as f64 / usage.entries as f64,
    );
}
