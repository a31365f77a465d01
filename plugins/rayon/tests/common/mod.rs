//! Expression builders the hand-computed test files share (CPU-only bundles).

use gantry_rdl::{Atom, Expr, Window};
use gantry_sdk::abi::GantryResources;

/// `c` millicores and nothing else.
pub fn cpu(c: u64) -> GantryResources {
    GantryResources { cpu_millis: c, ..Default::default() }
}

/// `atom(c cpu, g, h, lease, work)`; work in bundle-ms.
pub fn atom(c: u64, g: u32, h: u32, lease_ms: u64, work: u64) -> Expr {
    Expr::Atom(Atom { bundle: cpu(c), min_parallel: g, max_parallel: h, min_lease_ms: lease_ms, work })
}

/// `window(start, end, inner)`.
pub fn window(start_ms: u64, end_ms: u64, inner: Expr) -> Expr {
    Expr::Window(Window { start_ms, end_ms, inner: Box::new(inner) })
}
