//! The RDL front end: both forms, exact error positions, round trips, hostile input.

use gantry_rdl::{
    Atom, ErrorKind, Expr, MAX_INPUT_BYTES, MAX_NESTING, RdlError, Window, parse, parse_json, parse_text,
    to_json, to_text, to_text_pretty,
};
use gantry_sdk::abi::GantryResources;

const GIB: u64 = 1 << 30;
const H: u64 = 3_600_000;

fn atom(cpu_millis: u64, memory_bytes: u64, gpus: u32, g: u32, h: u32, l: u64, w: u64) -> Expr {
    Expr::Atom(Atom {
        bundle: GantryResources { cpu_millis, memory_bytes, gpus, reserved: 0 },
        min_parallel: g,
        max_parallel: h,
        min_lease_ms: l,
        work: w,
    })
}

fn window(start_ms: u64, end_ms: u64, inner: Expr) -> Expr {
    Expr::Window(Window { start_ms, end_ms, inner: Box::new(inner) })
}

#[track_caller]
fn text_err(src: &str) -> RdlError {
    match parse_text(src) {
        Ok(e) => panic!("{src:?} accepted as {e:?}"),
        Err(e) => e,
    }
}

#[track_caller]
fn json_err(src: &str) -> RdlError {
    match parse_json(src) {
        Ok(e) => panic!("{src:?} accepted as {e:?}"),
        Err(e) => e,
    }
}

/// Checks line, column, kind, path and a piece of the reason.
#[track_caller]
fn check(e: &RdlError, line: usize, column: usize, kind: ErrorKind, path: &str, reason: &str) {
    assert_eq!((e.line, e.column, e.kind, e.path.as_str()), (line, column, kind, path), "{e}");
    assert!(e.reason.contains(reason), "reason {:?} lacks {reason:?}", e.reason);
}

#[test]
fn the_example_in_both_forms() {
    let text = "# a deadline job\n\
                window(0s, 2h,   # within two hours\n\
                  order(atom(1c/2GiB, 1, 100, 1m, 50h),\n\
                        all(atom(2c/4GiB/1gpu, 4, 4, 30m, 2h), atom(500mc/512MiB, 2, 10, 1s, 10m))))\n";
    let json = r#"{"window": {"start": "0s", "end": "2h", "expr": {"order": [
        {"atom": {"bundle": {"cpu": "1", "memory": "2GiB", "gpus": 0}, "g": 1, "h": 100, "lease": "1m", "work": "50h"}},
        {"all": [
          {"atom": {"bundle": {"cpu": 2, "memory": "4g", "gpus": 1}, "g": 4, "h": 4, "lease": "30m", "work": 7200000}},
          {"atom": {"bundle": {"cpu": "500m", "memory": 536870912}, "g": 2, "h": 10, "lease": "1000ms", "work": "0.5h"}}
        ]}]}}}"#;
    let want = window(
        0,
        2 * H,
        Expr::Order(vec![
            atom(1000, 2 * GIB, 0, 1, 100, 60_000, 50 * H),
            Expr::All(vec![
                atom(2000, 4 * GIB, 1, 4, 4, 30 * 60_000, 2 * H),
                atom(500, GIB / 2, 0, 2, 10, 1000, H / 6 * 3),
            ]),
        ]),
    );
    // 10m of work is H/6; the JSON says 0.5h — make them the same first.
    let text = text.replace("10m)", "30m)");
    assert_eq!(parse_text(&text), Ok(want.clone()));
    assert_eq!(parse_json(json), Ok(want.clone()));
    assert_eq!(parse(&text), Ok(want.clone()));
    assert_eq!(parse(json), Ok(want.clone()));
    assert_eq!(
        to_text(&want),
        "window(0s, 2h, order(atom(1c/2GiB, 1, 100, 1m, 50h), all(atom(2c/4GiB/1gpu, 4, 4, 30m, 2h), \
         atom(500mc/512MiB, 2, 10, 1s, 30m))))"
    );
    assert_eq!(parse_json(&to_json(&want)), Ok(want.clone()));
    assert_eq!(want.to_string().parse::<Expr>(), Ok(want.clone()));
    assert_eq!(want.min_duration_ms(), 50 * H / 100 + 30 * 60_000);
}

#[test]
fn equal_expressions_in_both_forms() {
    let pairs = [
        (
            "atom(1gpu, 1, 1, 1s, 1s)",
            r#"{"atom": {"bundle": {"gpus": 1}, "g": 1, "h": 1, "lease": "1s", "work": 1000}}"#,
        ),
        (
            "any(atom(1.5c, 2, 6, 1m, 1h), atom(4TiB, 1, 1, 1ms, 1ms))",
            r#"{"any": [{"atom": {"bundle": {"cpu": 1.5}, "g": 2, "h": 6, "lease": 60000, "work": "60m"}},
                        {"atom": {"bundle": {"memory": "4T"}, "g": 1, "h": 1, "lease": "1ms", "work": 1}}]}"#,
        ),
        (
            "window(1h, 3h, window(90m, 2h, atom(1c, 1, 1, 30m, 30m)))",
            r#"{"window": {"expr": {"window": {"start": "1.5h", "end": "120m", "expr":
                 {"atom": {"work": "30m", "lease": "30m", "h": 1, "g": 1, "bundle": {"cpu": "1000m"}}}}},
               "end": "3h", "start": "1h"}}"#,
        ),
        (
            "order(atom(1c,1,1,1s,1s),atom(1c,1,1,1s,1s))#no spaces",
            r#"{"order":[{"atom":{"bundle":{"cpu":"1"},"g":1,"h":1,"lease":"1s","work":"1s"}},{"atom":{"bundle":{"cpu":"1"},"g":1,"h":1,"lease":"1s","work":"1s"}}]}"#,
        ),
    ];
    for (text, json) in pairs {
        let a = parse_text(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let b = parse_json(json).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(a, b, "{text} vs {json}");
        assert_eq!(parse_text(&to_text(&a)), Ok(a.clone()));
        assert_eq!(parse_json(&to_json(&a)), Ok(a.clone()));
    }
}

// ----- text: exact positions ------------------------------------------------------------------

#[test]
fn text_atom_values() {
    use ErrorKind::*;
    let e = text_err("atom(1c, 0, 4, 1s, 4s)");
    check(&e, 1, 10, Invalid, "atom.g", "g (the gang size) must be at least 1");
    let e = text_err("atom(1c, 1, 0, 1s, 4s)");
    check(&e, 1, 13, Invalid, "atom.h", "h (the most bundles at once) must be at least 1");
    let e = text_err("atom(1c, 5, 4, 1s, 40s)");
    check(&e, 1, 10, Invalid, "atom.g", "g = 5 is more than h = 4");
    let e = text_err("atom(1c, 1, 4, 1s, 0s)");
    check(&e, 1, 20, Invalid, "atom.work", "the work must be more than zero");
    let e = text_err("atom(1c, 1, 4, 0s, 1s)");
    check(&e, 1, 16, Invalid, "atom.lease", "the lease must be at least 1 ms");
    let e = text_err("atom(1c, 3, 3, 1ms, 1000ms)");
    check(&e, 1, 21, Invalid, "atom.work", "does not split into gangs of 3");
    let e = text_err("atom(1c, 4, 8, 1m, 2m)");
    check(&e, 1, 20, Invalid, "atom.work", "cannot fill one lease of one gang (4 bundles × 1m");
    let e = text_err("atom(0c/0B, 1, 1, 1s, 1s)");
    check(&e, 1, 6, Invalid, "atom.bundle", "the bundle asks for no resources");
    let e = text_err("atom(0gpus, 1, 1, 1s, 1s)");
    check(&e, 1, 6, Invalid, "atom.bundle", "no resources");
    let e = text_err("atom(1c, 1.5, 1, 1s, 1s)");
    check(&e, 1, 10, Value, "atom.g", "g (the gang size) must be a whole number, got `1.5`");
    let e = text_err("atom(1c, 1, 2000000, 1s, 1s)");
    check(&e, 1, 13, Value, "atom.h", "more than 1000000");
    let e = text_err("atom(1c, 1gpu, 1, 1s, 1s)");
    check(&e, 1, 10, Value, "atom.g", "must be a whole number");
}

#[test]
fn text_bundles_and_units() {
    use ErrorKind::*;
    check(&text_err("atom(1x, 1, 1, 1s, 1s)"), 1, 6, Unknown, "atom.bundle", "unknown bundle unit `x`");
    check(&text_err("atom(1c/500m, 1, 1, 1s, 1s)"), 1, 9, Unknown, "atom.bundle", "millicores are `mc` here");
    check(&text_err("atom(2G, 1, 1, 1s, 1s)"), 1, 6, Unknown, "atom.bundle", "memory units end in B here");
    check(&text_err("atom(1c/2c, 1, 1, 1s, 1s)"), 1, 9, Value, "atom.bundle", "names its CPU twice");
    check(&text_err("atom(1c/2GiB/3MiB, 1, 1, 1s, 1s)"), 1, 14, Value, "atom.bundle", "memory twice");
    check(&text_err("atom(1c/2, 1, 1, 1s, 1s)"), 1, 9, Value, "atom.bundle", "`2` needs a unit");
    check(&text_err("atom(0.0001c, 1, 1, 1s, 1s)"), 1, 6, Value, "atom.bundle", "not a CPU amount");
    check(&text_err("atom(1.5mc, 1, 1, 1s, 1s)"), 1, 6, Value, "atom.bundle", "millicores are whole");
    check(&text_err("atom(2XB, 1, 1, 1s, 1s)"), 1, 6, Unknown, "atom.bundle", "unknown memory unit `XB`");
    check(&text_err("atom(1.5gpu, 1, 1, 1s, 1s)"), 1, 6, Value, "atom.bundle", "GPUs are a whole number");
    check(&text_err("atom(1c, 1, 1, 1d, 1s)"), 1, 16, Unknown, "atom.lease", "unknown duration unit `d`");
    check(&text_err("atom(1c, 1, 1, 1s, 5)"), 1, 20, Value, "atom.work", "`5` needs a unit");
    check(&text_err("atom(1c, 1, 1, 1.0001s, 2s)"), 1, 16, Value, "atom.lease", "not a whole number");
    check(&text_err("atom(1c, 1, 1, 1s, 1..5s)"), 1, 20, Value, "atom.work", "not a number");
    check(
        &text_err("window(0s, 9999999999h, atom(1c, 1, 1, 1s, 1s))"),
        1,
        12,
        Value,
        "window.end",
        "more than the limit",
    );
    assert!(parse_text("atom( 1c / 2GiB ,1,1 , 1s,1s )").is_ok());
    check(&text_err("atom(1c, 1, 1, 99999h, 99999h)"), 1, 16, Value, "atom.lease", "more than the limit");
    // Windows on a plan clock that counts from the Unix epoch.
    let e = parse_text("window(1764000000s, 1764007200s, atom(1c, 1, 1, 1h, 1h))")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parse_json(&to_json(&e)), Ok(e));
}

#[test]
fn text_structure() {
    use ErrorKind::*;
    check(&text_err("atomic(1c, 1, 1, 1s, 1s)"), 1, 1, Unknown, "", "unknown operator `atomic`");
    check(
        &text_err("order(atom(1c, 1, 1, 1s, 1s), seq())"),
        1,
        31,
        Unknown,
        "order[1]",
        "unknown operator `seq`",
    );
    check(&text_err("Atom(1c, 1, 1, 1s, 1s)"), 1, 1, Unknown, "", "unknown operator `Atom`");
    check(
        &text_err("atom(1c, 1, 1, 1s)"),
        1,
        18,
        Arity,
        "",
        "`atom` takes 5 arguments (b, g, h, l, w), got 4",
    );
    check(
        &text_err("atom(1c, 1, 1, 1s, 1s, 1s)"),
        1,
        22,
        Arity,
        "",
        "takes 5 arguments (b, g, h, l, w), got more",
    );
    check(
        &text_err("window(0s, atom(1c, 1, 1, 1s, 1s))"),
        1,
        12,
        Syntax,
        "window.end",
        "expected an end time",
    );
    check(
        &text_err("window(0s, 1h)"),
        1,
        14,
        Arity,
        "",
        "`window` takes 3 arguments (start, end, expr), got 2",
    );
    check(
        &text_err("window(0s, 1h, atom(1c, 1, 1, 1s, 1s), 1s)"),
        1,
        38,
        Arity,
        "",
        "`window` takes 3 arguments",
    );
    check(&text_err("order()"), 1, 1, Invalid, "order", "`order` needs at least one expression");
    check(&text_err("window(0s, 1h, all())"), 1, 16, Invalid, "window.expr.all", "`all` needs at least one");
    check(&text_err("any(atom(1c, 1, 1, 1s, 1s), any())"), 1, 29, Invalid, "any[1].any", "`any` needs");
    check(
        &text_err("atom(1c, 1, 1, 1s, 1s) atom"),
        1,
        24,
        Syntax,
        "",
        "unexpected `atom` after the expression",
    );
    check(&text_err("atom(1c, 1, 1, 1s, 1s))"), 1, 23, Syntax, "", "unexpected `)` after the expression");
    check(
        &text_err("atom(1c, 1, 1, 1s, 1s"),
        1,
        22,
        Syntax,
        "",
        "expected `)` to close `atom(`, found the end",
    );
    check(&text_err("order(atom(1c, 1, 1, 1s, 1s)"), 1, 29, Syntax, "", "expected `,` or `)` in `order(…)`");
    check(
        &text_err("order(atom(1c, 1, 1, 1s, 1s) atom(1c, 1, 1, 1s, 1s))"),
        1,
        30,
        Syntax,
        "",
        "expected `,` or `)`",
    );
    check(&text_err("order(atom(1c, 1, 1, 1s, 1s),)"), 1, 30, Syntax, "order[1]", "expected an expression");
    check(&text_err("atom 1c, 1, 1, 1s, 1s)"), 1, 6, Syntax, "", "expected `(` after `atom`");
    check(&text_err("atom(1c; 1, 1, 1s, 1s)"), 1, 8, Syntax, "", "unexpected character ';'");
    check(&text_err("atom(1c, 1, 1, 1s, 1s) é"), 1, 24, Syntax, "", "unexpected character 'é'");
    check(
        &text_err(""),
        1,
        1,
        Syntax,
        "",
        "expected an expression (atom, window, order, all or any), found the end",
    );
    check(&text_err("  # only a comment\n"), 2, 1, Syntax, "", "found the end of the input");
    check(&text_err("5h"), 1, 1, Syntax, "", "expected an expression");
}

#[test]
fn text_windows_and_fit() {
    use ErrorKind::*;
    check(
        &text_err("window(2h, 2h, atom(1c, 1, 1, 1s, 1s))"),
        1,
        12,
        Invalid,
        "window.end",
        "not after its start 2h",
    );
    check(&text_err("window(3h, 2h, atom(1c, 1, 1, 1s, 1s))"), 1, 12, Invalid, "window.end", "ends at 2h");
    // 50 bundle-hours at 10 at a time: 5 hours, in a two-hour window.
    check(
        &text_err("window(0s, 2h, atom(1c, 1, 10, 1m, 50h))"),
        1,
        36,
        Fit,
        "window.expr.atom.work",
        "needs at least 5h (50h of work at most 10 bundles at a time) but has only 2h",
    );
    // The lease alone is longer than the window.
    check(
        &text_err("window(1h, 2h, atom(1c, 1, 1, 61m, 61m))"),
        1,
        31,
        Fit,
        "window.expr.atom.lease",
        "its lease of 61m",
    );
    // h = 7 in gangs of 3 runs at most 6: 60 bundle-minutes need 10 minutes, not ceil(60/7).
    check(
        &text_err("window(0s, 9m, atom(1c, 3, 7, 1m, 60m))"),
        1,
        35,
        Fit,
        "window.expr.atom.work",
        "needs at least 10m",
    );
    assert!(parse_text("window(0s, 10m, atom(1c, 3, 7, 1m, 60m))").is_ok());
    // An order chain: 40m then 30m in one hour.
    let src = "window(0s, 1h, order(\n  atom(1c, 1, 1, 40m, 40m),\n  atom(1c, 1, 1, 30m, 30m)))";
    check(
        &text_err(src),
        3,
        18,
        Fit,
        "window.expr.order[1].atom.lease",
        "but has only 20m from 40m to its deadline 1h",
    );
    // The same in `all` fits.
    assert!(parse_text(&src.replace("order", "all")).is_ok());
    // Nested windows: the inner one is cut to the outer one.
    let src = "window(0s, 1h, window(30m, 2h, atom(1c, 1, 1, 45m, 45m)))";
    check(
        &text_err(src),
        1,
        47,
        Fit,
        "window.expr.window.expr.atom.lease",
        "has only 30m from 30m to its deadline 1h",
    );
    // An inner window past the outer deadline.
    let src = "window(0s, 1h, window(1h, 2h, atom(1c, 1, 1, 1m, 1m)))";
    check(
        &text_err(src),
        1,
        23,
        Fit,
        "window.expr.window.start",
        "starts at 1h, at or after the deadline 1h",
    );
    // A stage window that closes before the previous stage can end.
    let src = "order(atom(1c, 1, 1, 2h, 2h), window(0s, 1h, atom(1c, 1, 1, 1m, 1m)))";
    check(
        &text_err(src),
        1,
        42,
        Fit,
        "order[1].window.end",
        "ends at 1h, before its expression can start (at 2h",
    );
    // `any`: every alternative must fit on its own.
    let src = "window(0s, 1h, any(atom(1c, 1, 1, 1m, 1m), atom(1c, 1, 1, 2h, 2h)))";
    check(&text_err(src), 1, 59, Fit, "window.expr.any[1].atom.lease", "needs at least 2h");
    // ... and what follows starts after the quickest.
    assert!(
        parse_text(
            "window(0s, 1h, order(any(atom(1c,1,1,1m,1m), atom(1c,1,1,50m,50m)), atom(1c,1,1,50m,50m)))"
        )
        .is_ok()
    );
}

#[test]
fn text_positions_across_lines_and_comments() {
    let src = "# header\nwindow(0s, 2h, # comment with atom( in it\n\n\torder(\n\t\tatom(1c, 2, 1, 1s, 2s)))";
    check(
        &text_err(src),
        5,
        12,
        ErrorKind::Invalid,
        "window.expr.order[0].atom.g",
        "g = 2 is more than h = 1",
    );
    let src = "order(atom(1c, 1, 1, 1s, 1s),\n# é ü\n  atom(1c, 1, 1, 1s, 1s) ¿)";
    check(&text_err(src), 3, 26, ErrorKind::Syntax, "", "unexpected character '¿'");
    let src = "all(atom(ç";
    check(&text_err(src), 1, 10, ErrorKind::Syntax, "", "unexpected character 'ç'");
}

#[test]
fn nesting_bound() {
    let mut text = "atom(1c, 1, 1, 1s, 1s)".to_owned();
    let mut json =
        r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1s", "work": "1s"}}"#.to_owned();
    for _ in 1..MAX_NESTING {
        text = format!("all({text})");
        json = format!(r#"{{"all": [{json}]}}"#);
    }
    assert!(parse_text(&text).is_ok());
    assert!(parse_json(&json).is_ok());
    let e = text_err(&format!("all({text})"));
    let path = "all[0].".repeat(MAX_NESTING);
    check(&e, 1, 4 * MAX_NESTING + 1, ErrorKind::TooDeep, path.trim_end_matches('.'), "deeper than 15");
    let e = json_err(&format!(r#"{{"all": [{json}]}}"#));
    assert_eq!(e.kind, ErrorKind::TooDeep, "{e}");
    // Far deeper: refused at once, no stack overflow.
    let deep = "all(".repeat(100_000);
    assert_eq!(text_err(&deep).kind, ErrorKind::TooDeep);
    let deep = r#"{"all": ["#.repeat(50_000);
    assert_eq!(json_err(&deep).kind, ErrorKind::TooDeep);
}

#[test]
fn input_size_bound() {
    let one = "atom(1c, 1, 1, 1s, 1s)";
    let text = format!("{one}{}", " ".repeat(MAX_INPUT_BYTES - one.len()));
    assert!(parse_text(&text).is_ok());
    let text = format!("{text} ");
    let e = text_err(&text);
    check(&e, 1, MAX_INPUT_BYTES + 1, ErrorKind::TooLarge, "", "more than the limit of 1048576");
    let e = json_err(&format!("{}{{}}", "\n".repeat(MAX_INPUT_BYTES)));
    check(&e, MAX_INPUT_BYTES + 1, 1, ErrorKind::TooLarge, "", "1048578 bytes");
}

// ----- JSON: exact positions --------------------------------------------------------------------

const A: &str = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1s", "work": "1s"}}"#;

#[test]
fn json_atom_values() {
    use ErrorKind::*;
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 0, "h": 1, "lease": "1s", "work": "1s"}}"#;
    check(&json_err(src), 1, 40, Invalid, "atom.g", "at least 1");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 2, "h": 1, "lease": "1s", "work": "2s"}}"#;
    check(&json_err(src), 1, 40, Invalid, "atom.g", "g = 2 is more than h = 1");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 0, "lease": "1s", "work": "1s"}}"#;
    check(&json_err(src), 1, 48, Invalid, "atom.h", "at least 1");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 3, "h": 3, "lease": 1, "work": 1000}}"#;
    check(&json_err(src), 1, 71, Invalid, "atom.work", "does not split into gangs of 3");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 2, "h": 2, "lease": "1h", "work": "1h"}}"#;
    check(&json_err(src), 1, 74, Invalid, "atom.work", "cannot fill one lease");
    let src = r#"{"atom": {"bundle": {"gpus": 0}, "g": 1, "h": 1, "lease": "1s", "work": "1s"}}"#;
    check(&json_err(src), 1, 21, Invalid, "atom.bundle", "no resources");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": "1", "h": 1, "lease": "1s", "work": "1s"}}"#;
    check(&json_err(src), 1, 40, Value, "atom.g", "must be a number, got a string");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1.0, "h": 1, "lease": "1s", "work": "1s"}}"#;
    check(&json_err(src), 1, 40, Value, "atom.g", "must be a whole number, got 1.0");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": -4, "lease": "1s", "work": "1s"}}"#;
    check(&json_err(src), 1, 48, Value, "atom.h", "whole number, got -4");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1 s", "work": "1s"}}"#;
    check(&json_err(src), 1, 60, Unknown, "atom.lease", "unknown duration unit ` s`");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": 1.5, "work": "1s"}}"#;
    check(&json_err(src), 1, 60, Value, "atom.lease", "whole milliseconds, got 1.5");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": null, "work": "1s"}}"#;
    check(&json_err(src), 1, 60, Value, "atom.lease", "got null");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1s", "work": "1y"}}"#;
    check(&json_err(src), 1, 74, Unknown, "atom.work", "unknown duration unit `y`");
}

#[test]
fn json_bundles() {
    use ErrorKind::*;
    let b = |bundle: &str| {
        format!(r#"{{"atom": {{"bundle": {bundle}, "g": 1, "h": 1, "lease": "1s", "work": "1s"}}}}"#)
    };
    check(&json_err(&b(r#"{"cpu": "1x"}"#)), 1, 29, Value, "atom.bundle.cpu", "not a CPU amount");
    check(&json_err(&b(r#"{"cpu": true}"#)), 1, 29, Value, "atom.bundle.cpu", "got a boolean");
    check(&json_err(&b(r#"{"memory": "2"}"#)), 1, 32, Value, "atom.bundle.memory", "needs a unit");
    check(
        &json_err(&b(r#"{"memory": "2Q"}"#)),
        1,
        32,
        Unknown,
        "atom.bundle.memory",
        "unknown memory unit `Q`",
    );
    check(&json_err(&b(r#"{"memory": 1.5}"#)), 1, 32, Value, "atom.bundle.memory", "whole bytes, got 1.5");
    check(
        &json_err(&b(r#"{"gpus": "1"}"#)),
        1,
        30,
        Value,
        "atom.bundle.gpus",
        "must be a number, got a string",
    );
    check(&json_err(&b(r#"{"gpus": 4294967296}"#)), 1, 30, Value, "atom.bundle.gpus", "whole number up to");
    check(
        &json_err(&b(r#"{"cpu": "1", "disk": "1G"}"#)),
        1,
        34,
        Unknown,
        "atom.bundle.disk",
        "unknown key \"disk\" in a bundle",
    );
    check(&json_err(&b(r#"[1]"#)), 1, 21, Value, "atom.bundle", "a bundle must be an object, got an array");
    check(&json_err(&b(r#"{}"#)), 1, 21, Invalid, "atom.bundle", "no resources");
}

#[test]
fn json_structure() {
    use ErrorKind::*;
    check(&json_err(r#"{"atomic": {}}"#), 1, 2, Unknown, "atomic", "unknown operator \"atomic\"");
    check(
        &json_err(&format!(r#"{{"order": [{A}, {{"seq": []}}]}}"#)),
        1,
        94,
        Unknown,
        "order[1].seq",
        "unknown operator",
    );
    check(
        &json_err(&format!(r#"{{"all": [{A}], "any": [{A}]}}"#)),
        1,
        92,
        Arity,
        "any",
        "\"any\" is a second one",
    );
    check(&json_err("{}"), 1, 1, Arity, "", "an empty object is no expression");
    check(&json_err("[]"), 1, 1, Value, "", "an expression is an object with one key");
    check(&json_err(&format!(r#"{{"order": [{A}, 3]}}"#)), 1, 93, Value, "order[1]", "got a number");
    check(
        &json_err(r#"{"order": {}}"#),
        1,
        11,
        Value,
        "order",
        "\"order\" takes an array of expressions, got an object",
    );
    check(&json_err(r#"{"any": []}"#), 1, 9, Invalid, "any", "`any` needs at least one expression");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1s"}}"#;
    check(&json_err(src), 1, 10, Arity, "atom", "an atom lacks \"work\"");
    let src = r#"{"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1s", "work": "1s", "w": 1}}"#;
    check(&json_err(src), 1, 80, Unknown, "atom.w", "unknown key \"w\" in an atom");
    let src = format!(r#"{{"window": {{"start": "0s", "expr": {A}}}}}"#);
    check(&json_err(&src), 1, 12, Arity, "window", "a window lacks \"end\"");
    let src = format!(r#"{{"window": {{"start": "0s", "end": "1h", "expr": {A}, "priority": 1}}}}"#);
    check(&json_err(&src), 1, 130, Unknown, "window.priority", "unknown key \"priority\" in a window");
    check(&json_err(r#"{"window": 5}"#), 1, 12, Value, "window", "a window must be an object, got a number");
}

#[test]
fn json_syntax() {
    use ErrorKind::*;
    check(&json_err(""), 1, 1, Syntax, "", "invalid JSON: unexpected end");
    check(&json_err(&format!("{A} x")), 1, 81, Syntax, "", "trailing characters");
    check(&json_err(&format!("{A}\n,")), 2, 1, Syntax, "", "trailing characters");
    check(&json_err("{\"atom\":\n  {\"bundle\" {}}}"), 2, 13, Syntax, "", "expected ':'");
    check(&json_err("{\"atom\": {\"g\": 1,}}"), 1, 18, Syntax, "", "expected a key");
    check(&json_err("{\"a\": 1, \"a\": 2}"), 1, 13, Syntax, "", "key \"a\" appears twice");
    check(&json_err("{\"atom\": tru}"), 1, 10, Syntax, "", "expected a value");
}

#[test]
fn json_windows_and_fit() {
    use ErrorKind::*;
    let src = r#"{"window": {"start": "2h", "end": "1h", "expr": {"atom": {"bundle": {"cpu": "1"}, "g": 1, "h": 1, "lease": "1s", "work": "1s"}}}}"#;
    check(&json_err(src), 1, 35, Invalid, "window.end", "ends at 1h, not after its start 2h");
    let src = "{\"window\": {\"start\": \"0s\", \"end\": \"1h\", \"expr\": {\"order\": [\n\
               {\"atom\": {\"bundle\": {\"cpu\": \"1\"}, \"g\": 1, \"h\": 1, \"lease\": \"40m\", \"work\": \"40m\"}},\n\
               {\"atom\": {\"bundle\": {\"cpu\": \"1\"}, \"g\": 2, \"h\": 4, \"lease\": \"1m\", \"work\": \"2h\"}}]}}}";
    check(
        &json_err(src),
        3,
        74,
        Fit,
        "window.expr.order[1].atom.work",
        "needs at least 30m (2h of work at most 4 bundles at a time) but has only 20m",
    );
}

#[test]
fn validate_code_built_expressions() {
    let e = window(0, H, Expr::Order(vec![atom(1000, 0, 0, 1, 1, 1000, 1000), Expr::Any(vec![])]));
    let err = e.validate().unwrap_err();
    assert_eq!(
        (err.line, err.column, err.kind, err.path.as_str()),
        (0, 0, ErrorKind::Invalid, "window.expr.order[1].any")
    );
    assert_eq!(err.to_string(), "`any` needs at least one expression (at window.expr.order[1].any)");
    let e = atom(1000, 0, 0, 2, 4, 1000, 8 * H);
    assert_eq!(e.validate(), Ok(()));
    assert_eq!(e.min_duration_ms(), 2 * H);
    let err = parse_text("atom(1c, 0, 1, 1s, 1s)").unwrap_err();
    assert_eq!(err.to_string(), "line 1, column 10: g (the gang size) must be at least 1 (at atom.g)");
}

// ----- properties -----------------------------------------------------------------------------

mod props {
    use super::*;
    use proptest::prelude::*;

    /// A valid atom: gangs of `g`, `h` from `g` up, a lease and work that fills it.
    fn arb_atom() -> impl Strategy<Value = Expr> {
        (
            (0u64..4, prop_oneof![Just(0u64), 1u64..8 * GIB, (1u64..64).prop_map(|g| g * GIB)], 0u32..3),
            1u32..6,
            0u32..20,
            prop_oneof![1u64..5_000, (1u64..120).prop_map(|m| m * 60_000)],
            0u64..3,
            0u64..50_000,
        )
            .prop_filter_map(
                "a bundle needs something",
                |((cpu, mem, gpus), g, extra_h, lease, leases, extra)| {
                    let cpu = [0, 500, 1000, 2250][cpu as usize];
                    if cpu == 0 && mem == 0 && gpus == 0 {
                        return None;
                    }
                    let gw = lease * (1 + leases) + extra;
                    Some(atom(cpu, mem, gpus, g, g + extra_h, lease, gw * u64::from(g)))
                },
            )
    }

    /// A tree whose windows hold `(delay, slack)` until [`fix`] turns them into times.
    fn arb_tree() -> impl Strategy<Value = Expr> {
        arb_atom().prop_recursive(5, 40, 4, |inner| {
            prop_oneof![
                (0u64..3 * H, 1u64..H, inner.clone()).prop_map(|(d, s, e)| window(d, s, e)),
                prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::Order),
                prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::All),
                prop::collection::vec(inner, 1..4).prop_map(Expr::Any),
            ]
        })
    }

    /// Gives each window a start `delay` after the earliest its expression could start and an
    /// end `slack` after the latest it could finish, so every tree fits; returns that finish.
    fn fix(e: &mut Expr, start: u64) -> u64 {
        match e {
            Expr::Atom(a) => start + a.min_duration_ms(),
            Expr::Window(w) => {
                w.start_ms += start;
                let finish = fix(&mut w.inner, w.start_ms);
                w.end_ms += finish;
                w.end_ms
            }
            Expr::Order(parts) => parts.iter_mut().fold(start, |t, p| fix(p, t)),
            Expr::All(parts) | Expr::Any(parts) => {
                parts.iter_mut().map(|p| fix(p, start)).max().unwrap_or(start)
            }
        }
    }

    fn arb_expr() -> impl Strategy<Value = Expr> {
        arb_tree().prop_map(|mut e| {
            fix(&mut e, 0);
            e
        })
    }

    /// Any atom the printers can write, sense or not.
    fn arb_raw_atom() -> impl Strategy<Value = Expr> {
        (0u64..3, 0u64..3, 0u32..2, 0u32..5, 0u32..5, 0u64..4, 0u64..13)
            .prop_map(|(c, m, gpus, g, h, l, w)| atom(c * 500, m * GIB, gpus, g, h, l * 60_000, w * 300_000))
    }

    /// Any tree the printers can write, with windows anywhere in the first few hours.
    fn arb_raw_expr() -> impl Strategy<Value = Expr> {
        arb_raw_atom().prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                (0u64..4, 0u64..4, inner.clone()).prop_map(|(s, e, x)| window(
                    s * 1_800_000,
                    e * 1_800_000,
                    x
                )),
                prop::collection::vec(inner.clone(), 0..3).prop_map(Expr::Order),
                prop::collection::vec(inner.clone(), 0..3).prop_map(Expr::All),
                prop::collection::vec(inner, 0..3).prop_map(Expr::Any),
            ]
        })
    }

    /// The token at an error's line and column: up to a delimiter, quotes dropped.
    fn token_at(src: &str, e: &RdlError) -> String {
        let line = src.split('\n').nth(e.line - 1).unwrap_or("");
        let rest: String = line.chars().skip(e.column - 1).collect();
        rest.trim_start_matches('"')
            .chars()
            .take_while(|c| !matches!(c, ',' | ')' | '"' | '}' | ' '))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn print_then_parse_is_the_identity(e in arb_expr()) {
            prop_assert_eq!(e.validate(), Ok(()));
            let text = to_text(&e);
            let json = to_json(&e);
            prop_assert_eq!(parse_text(&text), Ok(e.clone()), "{}", text);
            prop_assert_eq!(parse_json(&json), Ok(e.clone()), "{}", json);
            prop_assert_eq!(parse(&text), parse(&json));
            let pretty = to_text_pretty(&e);
            prop_assert_eq!(parse_text(&pretty), Ok(e.clone()), "{}", pretty);
        }

        #[test]
        fn both_forms_refuse_alike_and_point_at_the_value(e in arb_raw_expr()) {
            let (text, json) = (to_text(&e), to_json(&e));
            match e.validate() {
                Ok(()) => {
                    prop_assert_eq!(parse_text(&text), Ok(e.clone()));
                    prop_assert_eq!(parse_json(&json), Ok(e.clone()));
                }
                Err(want) => {
                    let (t, j) = (parse_text(&text).unwrap_err(), parse_json(&json).unwrap_err());
                    for got in [&t, &j] {
                        prop_assert_eq!(
                            (&got.path, got.kind, &got.reason),
                            (&want.path, want.kind, &want.reason)
                        );
                    }
                    let leaf = want.path.rsplit('.').next().unwrap_or("");
                    if matches!(leaf, "g" | "h" | "lease" | "work" | "start" | "end") {
                        let tok = token_at(&text, &t);
                        prop_assert!(!tok.is_empty(), "{} in {}", t, text);
                        prop_assert_eq!(&tok, &token_at(&json, &j), "{} / {}", text, json);
                    }
                    if leaf == "bundle" {
                        prop_assert!(json[j.column - 1..].starts_with('{'), "{} in {}", j, json);
                    }
                }
            }
        }

        #[test]
        fn every_truncation_is_refused_without_panic(e in arb_expr(), cut in 0.0f64..1.0) {
            for s in [to_text(&e), to_json(&e)] {
                let mut n = (s.len() as f64 * cut) as usize;
                while !s.is_char_boundary(n) { n -= 1; }
                let err = parse(&s[..n]).unwrap_err();
                prop_assert!(err.line >= 1 && err.column >= 1, "{}", err);
            }
        }

        #[test]
        fn mutated_input_never_panics(e in arb_expr(), at in 0usize..10_000, byte in any::<u8>()) {
            for s in [to_text(&e), to_json(&e)] {
                let mut b = s.into_bytes();
                let i = at % b.len();
                b[i] = byte;
                if let Ok(s) = String::from_utf8(b) {
                    if let Err(err) = parse(&s) {
                        prop_assert!(err.line >= 1 && err.column >= 1, "{}", err);
                    }
                }
            }
        }

        #[test]
        fn garbage_never_panics(s in "\\PC{0,200}") {
            let _ = parse_text(&s);
            let _ = parse_json(&s);
        }

        #[test]
        fn rdl_shaped_garbage_never_panics(s in "[a-z(){}\\[\\],/:\"0-9. #\n]{0,120}") {
            for r in [parse_text(&s), parse_json(&s)] {
                if let Err(err) = r {
                    prop_assert!(err.line >= 1 && err.column >= 1 && !err.reason.is_empty(), "{}", err);
                }
            }
        }
    }
}

#[test]
fn every_prefix_of_the_example_is_refused() {
    let text =
        "window(0s, 2h, order(atom(1c/2GiB, 1, 100, 1m, 50h), all(atom(2c/4GiB/1gpu, 4, 4, 30m, 2h))))";
    let e = parse_text(text).unwrap_or_else(|e| panic!("{e}"));
    let json = to_json(&e);
    for s in [text.to_owned(), json] {
        for n in 0..s.len() {
            assert!(parse(&s[..n]).is_err(), "{:?} accepted", &s[..n]);
        }
    }
}

#[test]
fn crlf_tabs_and_leading_blanks() {
    let src = "order(\r\n\tatom(1c, 1, 1, 1s, 1s),\r\n\tatom(1c, 1, 1, 1s, 0s))";
    check(&text_err(src), 3, 21, ErrorKind::Invalid, "order[1].atom.work", "the work must be more than zero");
    let json = format!("\r\n  \t{A}");
    assert_eq!(parse(&json), parse_text("atom(1c, 1, 1, 1s, 1s)"));
    let err = json_err(&format!("\r\n{}", A.replace("\"g\": 1", "\"g\": 0")));
    check(&err, 2, 40, ErrorKind::Invalid, "atom.g", "must be at least 1");
    assert_eq!(err.to_string(), "line 2, column 40: g (the gang size) must be at least 1 (at atom.g)");
}

#[test]
fn validate_bounds_the_depth_of_code_built_trees() {
    let mut e = atom(1000, 0, 0, 1, 1, 1000, 1000);
    for _ in 0..10_000 {
        e = Expr::All(vec![e]);
    }
    let err = e.validate().unwrap_err();
    assert_eq!(err.kind, ErrorKind::TooDeep);
    assert_eq!(err.path, "all[0].".repeat(MAX_NESTING).trim_end_matches('.'));
    // Dropping it must not overflow the stack either: unwrap it level by level.
    while let Expr::All(mut parts) = e {
        e = parts.pop().unwrap_or_else(|| atom(1, 0, 0, 1, 1, 1, 1));
    }
}

#[test]
fn a_reserved_bundle_field_is_refused_in_code() {
    let mut a = Atom {
        bundle: GantryResources { cpu_millis: 1000, memory_bytes: 0, gpus: 0, reserved: 7 },
        min_parallel: 1,
        max_parallel: 1,
        min_lease_ms: 1000,
        work: 1000,
    };
    assert_eq!(Expr::Atom(a).validate().unwrap_err().path, "atom.bundle");
    a.bundle.reserved = 0;
    assert_eq!(Expr::Atom(a).validate(), Ok(()));
    assert_eq!(a.max_running(), 1);
}

#[test]
fn a_document_near_the_size_limit_parses() {
    let one = atom(1500, 3 * GIB, 1, 2, 8, 60_000, 4 * H);
    let parts: Vec<Expr> = (0..20_000).map(|_| one.clone()).collect();
    let e = window(0, 24 * H, Expr::All(parts));
    let text = to_text(&e);
    let json = to_json(&e);
    assert!(text.len() < MAX_INPUT_BYTES && json.len() > MAX_INPUT_BYTES, "{} {}", text.len(), json.len());
    let started = std::time::Instant::now();
    assert_eq!(parse_text(&text), Ok(e.clone()));
    assert_eq!(json_err(&json).kind, ErrorKind::TooLarge);
    let Expr::Window(w) = &e else { unreachable!() };
    let Expr::All(parts) = w.inner.as_ref() else { unreachable!() };
    let smaller = window(0, 24 * H, Expr::All(parts[..8_000].to_vec()));
    assert_eq!(parse_json(&to_json(&smaller)), Ok(smaller));
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

#[test]
fn the_pretty_printer() {
    let a = "atom(2c/4GiB/1gpu, 4, 4, 30m, 2h)";
    let src = format!("window(0s, 2h, order(atom(1c/2GiB, 1, 100, 1m, 50h), all({a}, {a}, {a})))");
    let e = parse_text(&src).unwrap_or_else(|e| panic!("{e}"));
    let pretty = to_text_pretty(&e);
    assert_eq!(
        pretty,
        format!(
            "window(0s, 2h,\n  order(\n    atom(1c/2GiB, 1, 100, 1m, 50h),\n    all(\n      {a},\n      {a},\n      {a}\n    )\n  ))\n"
        )
    );
    assert_eq!(parse_text(&pretty), Ok(e));
}
