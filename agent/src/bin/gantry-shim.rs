//! `gantry-shim shim DIR [--notify-on-stdin]`: a container's supervisor, as a binary of its own.
//!
//! The agent starts one per container. Its own binary can do the same (`gantry-agent shim DIR`),
//! but it is large, and a process's start-up (mapping and relocating the binary) is paid once per
//! container; this binary links only the shim and starts in about half the CPU time. The agent
//! uses it when it finds it beside its own executable ([`gantry_agent::shim::program_beside`]).

fn main() {
    gantry_agent::shim::dispatch();
    eprintln!("usage: gantry-shim shim DIR [--notify-on-stdin] (started by gantry-agent, not by hand)");
    std::process::exit(2);
}
