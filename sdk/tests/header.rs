//! The header drift check: `include/gantry.h` must be exactly what cbindgen generates from
//! `src/abi.rs` with `cbindgen.toml`, and it must compile (its `_Static_assert`s pin the layout).
//!
//! Regenerate the header with `GANTRY_BLESS=1 cargo test -p gantry-sdk --test header`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const BLESS_HINT: &str = "GANTRY_BLESS=1 cargo test -p gantry-sdk --test header";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `GANTRY_BLESS=1`: write the header instead of checking it.
fn blessing() -> bool {
    std::env::var_os("GANTRY_BLESS").is_some_and(|v| v == "1")
}

fn header_path() -> PathBuf {
    crate_dir().join("include").join("gantry.h")
}

/// Generates the header in memory: cbindgen on `src/abi.rs` (the ABI module only), then
/// [`postprocess`].
fn generate() -> String {
    let dir = crate_dir();
    let config_path = dir.join("cbindgen.toml");
    let config = cbindgen::Config::from_file(&config_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", config_path.display()));
    let abi_path = dir.join("src").join("abi.rs");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(&abi_path)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen failed on {}: {e}", abi_path.display()));
    let mut raw = Vec::new();
    bindings.write(&mut raw);
    let raw = String::from_utf8(raw).expect("cbindgen wrote non-UTF-8 output");
    let abi = std::fs::read_to_string(&abi_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", abi_path.display()));
    postprocess(&raw, &abi)
}

/// The `<stdint.h>` literal macro for a Rust integer type.
fn literal_macro(rust_type: &str) -> Option<&'static str> {
    Some(match rust_type {
        "u8" => "UINT8_C",
        "u16" => "UINT16_C",
        "u32" => "UINT32_C",
        "u64" => "UINT64_C",
        "i8" => "INT8_C",
        "i16" => "INT16_C",
        "i32" => "INT32_C",
        "i64" => "INT64_C",
        _ => return None,
    })
}

/// The Rust type of every `pub const NAME: TYPE = ...;` of `src/abi.rs`.
fn constant_types(abi: &str) -> HashMap<&str, &str> {
    abi.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("pub const ")?;
            let (name, rest) = rest.split_once(':')?;
            let (ty, _) = rest.split_once('=')?;
            Some((name.trim(), ty.trim()))
        })
        .collect()
}

/// The names of the function-pointer aliases (`pub type NAME = ... fn(...)`) of `src/abi.rs`.
fn function_pointer_types(abi: &str) -> Vec<&str> {
    abi.split("pub type ")
        .skip(1)
        .filter_map(|item| {
            let (name, rest) = item.split_once('=')?;
            let (definition, _) = rest.split_once(';')?;
            definition.contains("fn(").then_some(name.trim())
        })
        .collect()
}

/// Fixes what cbindgen 0.28 cannot express:
///
/// - it writes `Option<GantryHookFn>` literally when the function pointer type is an alias
///   (cbindgen issue #326); a C function pointer is nullable, so the field is just `GantryHookFn`;
/// - it writes Rust's untyped integer literals as plain C literals (`#define GANTRY_CAP_PLACE
///   (1 << 2)` is an `int`, `#define GANTRY_ERR_CONFIG -1` is unparenthesised). Each integer
///   literal of a `GANTRY_*` #define gets the C type of its Rust constant through the `<stdint.h>`
///   macros (`(UINT64_C(1) << 2)`), which keeps the constants usable in `#if`, and negative values
///   are parenthesised. Shift counts and literals that already have a suffix are left alone.
fn postprocess(header: &str, abi: &str) -> String {
    let mut header = header.to_owned();
    for name in function_pointer_types(abi) {
        header = header.replace(&format!("Option<{name}>"), name);
    }
    assert!(
        !header.contains("Option<"),
        "cbindgen left an `Option<...>` that postprocess does not know how to write in C"
    );
    let types = constant_types(abi);
    let mut out = String::with_capacity(header.len() + 1024);
    for line in header.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let typed =
            body.strip_prefix("#define ").and_then(|rest| rest.split_once(' ')).and_then(|(name, expr)| {
                let mac = literal_macro(types.get(name)?)?;
                Some(format!("#define {name} {}", type_literals(expr.trim(), mac)))
            });
        match typed {
            Some(typed) => {
                out.push_str(&typed);
                out.push_str(&line[body.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Wraps the plain decimal literals of a C constant expression in `mac(...)`.
fn type_literals(expr: &str, mac: &str) -> String {
    let bytes = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() + 16);
    let mut i = 0;
    let mut after_shift = false;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let token = &expr[start..i];
            if c.is_ascii_digit() && !after_shift && token.bytes().all(|b| b.is_ascii_digit()) {
                let _ = write!(out, "{mac}({token})");
            } else {
                out.push_str(token);
            }
            after_shift = false;
        } else if expr[i..].starts_with("<<") || expr[i..].starts_with(">>") {
            out.push_str(&expr[i..i + 2]);
            i += 2;
            after_shift = true;
        } else {
            if !c.is_ascii_whitespace() {
                after_shift = false;
            }
            out.push(char::from(c));
            i += 1;
        }
    }
    if out.starts_with('-') { format!("({out})") } else { out }
}

/// The first differing line of two texts, for the failure message.
fn first_difference(expected: &str, actual: &str) -> String {
    let mut expected_lines = expected.lines();
    let mut actual_lines = actual.lines();
    let mut number = 1;
    loop {
        match (expected_lines.next(), actual_lines.next()) {
            (Some(e), Some(a)) if e == a => number += 1,
            (None, None) => return "the files differ only in line endings".to_owned(),
            (e, a) => {
                return format!(
                    "first difference at line {number}:\n  generated: {}\n  committed: {}",
                    e.unwrap_or("<end of file>"),
                    a.unwrap_or("<end of file>"),
                );
            }
        }
    }
}

#[test]
fn header_matches_generated() {
    let generated = generate();
    let path = header_path();
    if blessing() {
        std::fs::create_dir_all(path.parent().unwrap()).expect("cannot create include/");
        std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {}: {e}\nhint: generate it with `{BLESS_HINT}`", path.display())
    });
    if committed != generated {
        panic!(
            "{} is out of date with src/abi.rs and cbindgen.toml ({})\n\
             hint: regenerate it with `{BLESS_HINT}` and commit the result",
            path.display(),
            first_difference(&generated, &committed),
        );
    }
}

/// A translation unit that includes the header and uses a little of everything in it.
const PROBE_C: &str = r#"#include "gantry.h"
#include "gantry.h" /* the include guard works */

#if GANTRY_ABI_MAJOR != 1
#error "the ABI constants must be usable in #if"
#endif

#ifndef __cplusplus
_Static_assert(_Generic(GANTRY_CAP_PLACE, uint64_t: 1, default: 0), "capabilities are uint64_t");
_Static_assert(_Generic(GANTRY_CAP_ALL_V1, uint64_t: 1, default: 0), "capabilities are uint64_t");
_Static_assert(_Generic(GANTRY_NONE, uint32_t: 1, default: 0), "GANTRY_NONE is uint32_t");
_Static_assert(_Generic(GANTRY_DECISION_PLACE, uint32_t: 1, default: 0), "kinds are uint32_t");
_Static_assert(_Generic(GANTRY_ERR_CONFIG, int32_t: 1, default: 0), "codes are int32_t");
_Static_assert(GANTRY_ERR_CONFIG == -1 && 0 - GANTRY_ERR_CONFIG == 1, "negative codes");
#endif

static int32_t probe_place(void *instance, const GantryView *view, GantryOutput *out) {
    (void)instance;
    if (out->capacity < 1) {
        out->needed = 1;
        return GANTRY_BUFFER_FULL;
    }
    GantryDecision d = {GANTRY_DECISION_PLACE, view->pending_len ? view->pending[0] : 0,
                        GANTRY_NONE, 0, 0};
    out->decisions[0] = d;
    out->len = 1;
    return GANTRY_OK;
}

static const GantryPluginV1 PROBE = {
    sizeof(GantryPluginV1), GANTRY_ABI_MAJOR, GANTRY_ABI_MINOR, "probe", "0.0.0",
    GANTRY_CAP_PLACE, NULL, NULL, NULL, NULL, probe_place, NULL, NULL,
};

const GantryPluginV1 *gantry_plugin_v1(uint16_t host_major, uint16_t host_minor) {
    (void)host_minor;
    return host_major == GANTRY_ABI_MAJOR ? &PROBE : NULL;
}

GantryEntryV1 probe_entry = gantry_plugin_v1;
GantryCreateFn probe_create = NULL;
GantryDestroyFn probe_destroy = NULL;
GantryHookFn probe_hook = probe_place;
const char probe_symbol[] = GANTRY_ENTRY_SYMBOL_V1;
"#;

/// Whether `program` can be run.
fn have(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Compiles `source` (written to `dir/name`) with `compiler` and `args`, panicking with its
/// diagnostics on failure.
fn compile(compiler: &str, args: &[&str], include: &Path, dir: &Path, name: &str, source: &str) {
    let file = dir.join(name);
    std::fs::write(&file, source).expect("cannot write the probe source");
    let output = Command::new(compiler)
        .args(args)
        .arg("-I")
        .arg(include)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {} rejected a file including include/gantry.h:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

#[test]
fn header_compiles_as_c11() {
    if !have("cc") {
        eprintln!("NOTICE: no `cc` on PATH; skipping the C compile check of include/gantry.h");
        return;
    }
    let dir = std::env::temp_dir().join(format!("gantry-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("cannot create a temporary directory");
    // While blessing, `header_matches_generated` may be rewriting include/gantry.h right now:
    // check the freshly generated text instead.
    let include = if blessing() {
        let include = dir.join("include");
        std::fs::create_dir_all(&include).expect("cannot create a temporary directory");
        std::fs::write(include.join("gantry.h"), generate()).expect("cannot write the header");
        include
    } else {
        crate_dir().join("include")
    };
    compile(
        "cc",
        &["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"],
        &include,
        &dir,
        "probe.c",
        PROBE_C,
    );
    // The header also declares itself usable from C++ (extern "C", static_assert).
    if have("c++") {
        compile(
            "c++",
            &["-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"],
            &include,
            &dir,
            "probe.cc",
            PROBE_C,
        );
    } else {
        eprintln!("NOTICE: no `c++` on PATH; skipping the C++ compile check of include/gantry.h");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
