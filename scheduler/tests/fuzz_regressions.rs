//! Inputs fuzzing found (`fuzz/regressions/<target>/`, see `fuzz/README.md`), each now refused
//! cleanly by the functions the REST routes call.

use gantry_engine::{Engine, EngineConfig, EngineError, Event, MAX_NAME_LEN};
use gantry_scheduler::api::types::SubmitApp;

/// The fuzz target's input: a selector byte (0: `POST /apps`), then the body.
fn submission(input: &[u8]) -> SubmitApp {
    let (&selector, body) = input.split_first().expect("non-empty input");
    assert_eq!(selector % 6, 0, "a POST /apps body");
    serde_json::from_slice(body).expect("the body decodes")
}

/// What a real engine says to the submission once normalised, as the daemon submits it.
fn engine_verdict(mut req: SubmitApp) -> Result<(), EngineError> {
    req.normalize();
    let mut engine = Engine::builtin(EngineConfig::default()).expect("engine");
    engine.handle(0, Event::AppSubmitted(req.to_app_spec("root.default", "gantry"))).map(|_| ())
}

/// `rest_decode` found a queue of 250 bytes, within the name limit as written but not once
/// `normalize` made it `root.…`: `validate` passed it and the engine refused it. `validate` now
/// measures the full path.
#[test]
fn a_queue_whose_full_path_is_over_the_name_limit_is_refused_by_validate() {
    let req =
        submission(include_bytes!("../../fuzz/regressions/rest_decode/submit-queue-full-path-too-long"));
    let err = req.validate().expect_err("refused");
    assert_eq!(err.field, "queue", "{err}");
    assert!(err.message.contains("full path"), "{err}");

    // At the boundary: `root.` + 248 bytes is exactly the limit and reaches the engine, which
    // refuses it only because no such queue exists; one byte more is refused by `validate`.
    let mut req = req;
    req.queue = Some("q".repeat(MAX_NAME_LEN - "root.".len()));
    req.validate().expect("a full path of exactly the limit");
    assert!(matches!(engine_verdict(req.clone()), Err(EngineError::UnknownQueue(_))));
    req.queue = Some("q".repeat(MAX_NAME_LEN - "root.".len() + 1));
    assert_eq!(req.validate().expect_err("one byte over").field, "queue");
    // A full path as written is measured as it is.
    req.queue = Some(format!("root.{}", "q".repeat(MAX_NAME_LEN - "root.".len())));
    req.validate().expect("root.-prefixed path of exactly the limit");
}
