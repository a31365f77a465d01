//! `gantry-agent`: the node agent binary.

fn main() {
    // `gantry-agent shim <DIR>`: the per-container supervisor; dispatched before anything else
    // runs, because it forks and must stay single-threaded.
    let args: Vec<std::ffi::OsString> = std::env::args_os().take(3).collect();
    if let [_, cmd, dir] = args.as_slice() {
        if cmd == "shim" {
            std::process::exit(gantry_agent::shim::run_shim(std::path::Path::new(dir)));
        }
    }
    println!("gantry-agent {}", env!("CARGO_PKG_VERSION"));
}
