//! `gantry-agent`: the node agent. Until the agent issue lands it only reports its version; it
//! says so instead of pretending to run.

fn main() {
    let arg = std::env::args().nth(1);
    match arg.as_deref() {
        None | Some("--version") | Some("-V") => {
            println!("gantry-agent {}", env!("CARGO_PKG_VERSION"));
        }
        Some(other) => {
            eprintln!(
                "gantry-agent {}: `{other}` is not supported yet; this build only reports its version",
                env!("CARGO_PKG_VERSION")
            );
            std::process::exit(2);
        }
    }
}
