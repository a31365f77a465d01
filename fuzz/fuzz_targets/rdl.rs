//! The RDL parsers (gantry-rdl) (text and JSON) and what callers do with a parsed expression.
//!
//! Properties checked besides "no panic": a parsed expression passes `validate()` (the parsers
//! run the same checks), both printers' output parses back to an equal expression (the
//! module's documented round trip), and so does the ABI's node form that the engine lays out for
//! plugins (`gantry_rdl::abi`, read back by planners).
#![no_main]

use gantry_rdl::{self as rdl, Expr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    // Each entry point on the same bytes: `parse` picks a form, the others force one.
    for parsed in [rdl::parse(src), rdl::parse_text(src), rdl::parse_json(src)] {
        match parsed {
            Ok(e) => use_expr(&e),
            Err(err) => {
                let _ = err.to_string();
            }
        }
    }
    // The quantity readers the parsers share, also used on their own by the CLI.
    let _ = rdl::parse_duration(src, rdl::MAX_TIME_MS);
    let _ = rdl::parse_cpu(src);
    let _ = rdl::parse_memory(src);
});

fn use_expr(e: &Expr) {
    if let Err(err) = e.validate() {
        panic!("a parsed expression fails validate(): {err}\n{e:?}");
    }
    let _ = e.min_duration_ms();
    let _ = e.op_name();
    for a in e.atoms() {
        let _ = a.max_running();
        let _ = a.min_duration_ms();
    }
    let text = rdl::to_text(e);
    assert_eq!(rdl::parse_text(&text).as_ref(), Ok(e), "to_text does not round-trip: {text}");
    let pretty = rdl::to_text_pretty(e);
    assert_eq!(rdl::parse_text(&pretty).as_ref(), Ok(e), "to_text_pretty does not round-trip: {pretty}");
    let json = rdl::to_json(e);
    assert_eq!(rdl::parse_json(&json).as_ref(), Ok(e), "to_json does not round-trip: {json}");
    let nodes = rdl::abi::to_nodes(e).expect("a parsed expression lays out");
    assert_eq!(rdl::abi::from_nodes(&nodes, 0).as_ref(), Ok(e), "the node form does not round-trip: {nodes:?}");
    let _ = e.to_string();
}
