//! A panic inside a hook is the host's to report: it logs it with the plugin's name,
//! rate-limited, and counts it. Rust's default panic hook would also print it — message and,
//! with `RUST_BACKTRACE` set, a whole backtrace — to the host's stderr on every call, so that a
//! plugin panicking each cycle floods the scheduler's log. The glue installs, once per library
//! (each cdylib has its own copy of the standard library, so this touches no other plugin and
//! not the host), a panic hook that keeps the message and location of a panic raised inside a
//! glue call for the error it returns, prints nothing, and hands every other panic to the hook
//! it replaced.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    /// This thread is inside a glue call.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// The last panic inside a glue call on this thread, "message at file:line:column".
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: std::sync::Once = std::sync::Once::new();

/// The text of a panic payload.
fn payload_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload.downcast_ref::<&str>().copied().or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

/// Installs the quiet hook (once per library).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_CALL.with(Cell::get) {
                return previous(info);
            }
            let mut text = payload_text(info.payload()).unwrap_or("(no message)").to_owned();
            if let Some(at) = info.location() {
                text.push_str(&format!(" at {}:{}:{}", at.file(), at.line(), at.column()));
            }
            LAST.with(|l| *l.borrow_mut() = Some(text));
        }));
    });
}

/// Runs `f` as a glue call: a panic is caught and returned as its message ("plugin panicked:
/// MESSAGE at FILE:LINE:COLUMN"), not printed.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let outer = IN_CALL.with(|c| c.replace(true));
    LAST.with(|l| l.borrow_mut().take());
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_CALL.with(|c| c.set(outer));
    result.map_err(|payload| {
        let kept = LAST.with(|l| l.borrow_mut().take());
        let text = kept.or_else(|| payload_text(payload.as_ref()).map(str::to_owned));
        match text {
            Some(t) => format!("plugin panicked: {t}"),
            None => "plugin panicked".to_owned(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_call_comes_back_with_its_location() {
        install();
        let err = catch(|| -> u32 { panic!("boom {}", 7) }).expect_err("panics");
        assert!(err.starts_with("plugin panicked: boom 7 at "), "{err}");
        assert!(err.contains("panics.rs:"), "{err}");
        assert_eq!(catch(|| 5), Ok(5));
        // Outside a call, the previous hook runs again (the flag is down).
        assert!(!IN_CALL.with(Cell::get));
    }
}
