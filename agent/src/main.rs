//! `gantry-agent`: the node agent binary.

fn main() {
    println!("gantry-agent {}", env!("CARGO_PKG_VERSION"));
}
