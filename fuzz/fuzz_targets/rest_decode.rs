//! The REST API's request decoding: every JSON body the daemon accepts, decoded as axum's
//! `Json` extractor does (`serde_json::from_slice`) and then checked by the same functions the
//! routes call, plus the parsers of path and query parameters.
//!
//! The first byte picks the body; the rest is the body. Besides "no panic", a submission that
//! passes `SubmitApp::validate` must be one the engine accepts (or refuses only for its unknown
//! queue), as `validate` promises.
#![no_main]

use gantry_engine::{Engine, EngineConfig, EngineError, Event};
use gantry_scheduler::api::LogFile;
use gantry_scheduler::api::reservations::{ReservationDelete, ReservationSubmit, parse_reservation_id};
use gantry_scheduler::api::types::{AppState, AppStateRequest, NodeStateRequest, SubmitApp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 6 {
        0 => submit_app(body),
        1 => {
            if let Ok(req) = serde_json::from_slice::<AppStateRequest>(body) {
                let _ = req.kills();
            }
        }
        2 => {
            if let Ok(req) = serde_json::from_slice::<NodeStateRequest>(body) {
                let _ = req.drains();
            }
        }
        3 => reservation_submit(body),
        4 => {
            if let Ok(req) = serde_json::from_slice::<ReservationDelete>(body) {
                let _ = parse_reservation_id(&req.reservation_id);
            }
        }
        _ => params(body),
    }
});

/// `POST /apps`: decode, validate, normalise, and hand the spec to a real engine.
fn submit_app(body: &[u8]) {
    let Ok(mut req) = serde_json::from_slice::<SubmitApp>(body) else { return };
    if req.validate().is_err() {
        return;
    }
    req.normalize();
    let spec = req.to_app_spec("root.default", "gantry");
    let mut engine = Engine::builtin(EngineConfig::default()).expect("the default engine builds");
    match engine.handle(0, Event::AppSubmitted(spec)) {
        Ok(_) | Err(EngineError::UnknownQueue(_)) => {}
        Err(e) => panic!("SubmitApp::validate passed a submission the engine refuses: {e}"),
    }
}

/// `POST /reservation/submit` and `/update`: the id and the definition (YARN's requests →
/// RDL, or RDL in either form), as both routes read them.
fn reservation_submit(body: &[u8]) {
    let Ok(req) = serde_json::from_slice::<ReservationSubmit>(body) else { return };
    if let Some(id) = &req.reservation_id {
        let _ = parse_reservation_id(id);
    }
    let queue = req.queue.clone().unwrap_or_else(|| "root.plan".to_owned());
    if let Ok(r) = req.definition.to_request(queue, "fuzz".to_owned()) {
        if let Err(e) = r.definition.validate() {
            panic!("to_request returned a definition that fails validate(): {e}");
        }
        let _ = r.definition.min_duration_ms();
    }
}

/// Path segments and query values the routes parse themselves.
fn params(body: &[u8]) {
    let Ok(s) = std::str::from_utf8(body) else { return };
    let _ = gantry_scheduler::api::durations::parse_duration_ms(s);
    let _ = s.parse::<AppState>();
    let _ = LogFile::parse(s);
    let _ = parse_reservation_id(s);
    let _ = s.parse::<u64>();
}
