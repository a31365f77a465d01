//! The JSON form: read with the SDK's reader ([`gantry_sdk::config::Json`]), turned into an
//! [`Expr`], and written back. The SDK's values carry no positions, so errors about a value are
//! placed by walking the source text along the value's path ([`locate`]).

use std::fmt::Write as _;

use gantry_sdk::abi::GantryResources;
use gantry_sdk::config::Json;

use super::error::{RdlError, at};
use super::units::{self, MAX_GPUS, MAX_INSTANT_MS, MAX_PARALLEL, MAX_TIME_MS, MAX_WORK};
use super::validate::{self, child, item};
use super::{Atom, ErrorKind, Expr, MAX_INPUT_BYTES, MAX_NESTING, Window};

type Res<T> = Result<T, RdlError>;

struct Reader<'a> {
    src: &'a str,
}

impl Reader<'_> {
    /// An error at the value `path` names.
    fn fail(&self, path: &str, kind: ErrorKind, reason: impl Into<String>) -> RdlError {
        at(self.src, locate(self.src, path).unwrap_or(0), path, kind, reason)
    }

    /// An error at the key of entry `i` of the object at `path`.
    fn fail_key(
        &self,
        path: &str,
        i: usize,
        key: &str,
        kind: ErrorKind,
        reason: impl Into<String>,
    ) -> RdlError {
        let off = locate(self.src, path)
            .and_then(|o| entries(self.src.as_bytes(), o))
            .and_then(|e| e.get(i).map(|(k, _, _)| *k))
            .unwrap_or(0);
        at(self.src, off, &child(path, key), kind, reason)
    }

    /// The entries of an object with exactly the `required` and `optional` keys (in any
    /// order), in the order `required` then `optional` lists them.
    fn object<'j>(
        &self,
        v: &'j Json,
        path: &str,
        what: &str,
        required: &[&str],
        optional: &[&str],
    ) -> Res<Vec<Option<&'j Json>>> {
        let Json::Object(entries) = v else {
            return Err(self.fail(
                path,
                ErrorKind::Value,
                format!("{what} must be an object, got {}", v.kind()),
            ));
        };
        let known: Vec<&str> = required.iter().chain(optional).copied().collect();
        let mut found = vec![None; known.len()];
        for (i, (k, val)) in entries.iter().enumerate() {
            match known.iter().position(|n| n == k) {
                Some(slot) => found[slot] = Some(val),
                None => {
                    return Err(self.fail_key(
                        path,
                        i,
                        k,
                        ErrorKind::Unknown,
                        format!("unknown key {k:?} in {what} (expected {})", known.join(", ")),
                    ));
                }
            }
        }
        if let Some(missing) = required.iter().zip(&found).find(|(_, f)| f.is_none()).map(|(k, _)| k) {
            return Err(self.fail(
                path,
                ErrorKind::Arity,
                format!("{what} lacks {missing:?} (it needs {})", required.join(", ")),
            ));
        }
        Ok(found)
    }

    fn expr(&self, v: &Json, path: &str, depth: usize) -> Res<Expr> {
        const OPS: &str = "atom, window, order, all or any";
        let Json::Object(entries) = v else {
            return Err(self.fail(
                path,
                ErrorKind::Value,
                format!("an expression is an object with one key ({OPS}), got {}", v.kind()),
            ));
        };
        let Some((op, body)) = entries.first() else {
            return Err(self.fail(
                path,
                ErrorKind::Arity,
                format!("an empty object is no expression (use {OPS})"),
            ));
        };
        if !matches!(op.as_str(), "atom" | "window" | "order" | "all" | "any") {
            return Err(self.fail_key(
                path,
                0,
                op,
                ErrorKind::Unknown,
                format!("unknown operator {op:?} (expected {OPS})"),
            ));
        }
        if let Some((extra, _)) = entries.get(1) {
            return Err(self.fail_key(
                path,
                1,
                extra,
                ErrorKind::Arity,
                format!("an expression has one operator key; {extra:?} is a second one after {op:?}"),
            ));
        }
        if depth > MAX_NESTING {
            return Err(self.fail(
                path,
                ErrorKind::TooDeep,
                format!("expressions nest deeper than {MAX_NESTING}"),
            ));
        }
        let p = child(path, op);
        match op.as_str() {
            "atom" => {
                let f = self.object(body, &p, "an atom", &["bundle", "g", "h", "lease", "work"], &[])?;
                let get = |i: usize| f[i].unwrap_or(&Json::Null);
                Ok(Expr::Atom(Atom {
                    bundle: self.bundle(get(0), &child(&p, "bundle"))?,
                    min_parallel: self.count(get(1), &child(&p, "g"), "g (the gang size)")?,
                    max_parallel: self.count(get(2), &child(&p, "h"), "h (the most bundles at once)")?,
                    min_lease_ms: self.duration(get(3), &child(&p, "lease"), "the lease", MAX_TIME_MS)?,
                    work: self.duration(get(4), &child(&p, "work"), "the work", MAX_WORK)?,
                }))
            }
            "window" => {
                let f = self.object(body, &p, "a window", &["start", "end", "expr"], &[])?;
                let get = |i: usize| f[i].unwrap_or(&Json::Null);
                Ok(Expr::Window(Window {
                    start_ms: self.duration(get(0), &child(&p, "start"), "the start", MAX_INSTANT_MS)?,
                    end_ms: self.duration(get(1), &child(&p, "end"), "the end", MAX_INSTANT_MS)?,
                    inner: Box::new(self.expr(get(2), &child(&p, "expr"), depth + 1)?),
                }))
            }
            _ => {
                let Json::Array(items) = body else {
                    return Err(self.fail(
                        &p,
                        ErrorKind::Value,
                        format!("{op:?} takes an array of expressions, got {}", body.kind()),
                    ));
                };
                let parts = items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.expr(x, &item(path, op, i), depth + 1))
                    .collect::<Res<Vec<_>>>()?;
                Ok(match op.as_str() {
                    "order" => Expr::Order(parts),
                    "all" => Expr::All(parts),
                    _ => Expr::Any(parts),
                })
            }
        }
    }

    fn bundle(&self, v: &Json, path: &str) -> Res<GantryResources> {
        let f = self.object(v, path, "a bundle", &[], &["cpu", "memory", "gpus"])?;
        let mut b = GantryResources::default();
        if let Some(cpu) = f[0] {
            let p = child(path, "cpu");
            b.cpu_millis = match cpu {
                Json::String(s) | Json::Number(s) => {
                    units::parse_cpu(s).map_err(|e| self.fail(&p, ErrorKind::Value, e.to_string()))?
                }
                other => {
                    return Err(self.fail(
                        &p,
                        ErrorKind::Value,
                        format!(
                            "cpu must be cores or millicores such as \"2\", \"0.5\" or \"500m\", got {}",
                            other.kind()
                        ),
                    ));
                }
            };
        }
        if let Some(mem) = f[1] {
            let p = child(path, "memory");
            b.memory_bytes = match mem {
                Json::String(s) => {
                    units::parse_memory(s).map_err(|e| self.fail(&p, units::error_kind(&e), e.to_string()))?
                }
                Json::Number(n) => n.parse::<u64>().map_err(|_| {
                    self.fail(&p, ErrorKind::Value, format!("memory as a number is whole bytes, got {n}"))
                })?,
                other => {
                    return Err(self.fail(
                        &p,
                        ErrorKind::Value,
                        format!("memory must be a size such as \"2GiB\", got {}", other.kind()),
                    ));
                }
            };
        }
        if let Some(gpus) = f[2] {
            let p = child(path, "gpus");
            b.gpus = match gpus {
                Json::Number(n) => match n.parse::<u32>() {
                    Ok(g) if g <= MAX_GPUS => g,
                    _ => {
                        return Err(self.fail(
                            &p,
                            ErrorKind::Value,
                            format!("gpus must be a whole number up to {MAX_GPUS}, got {n}"),
                        ));
                    }
                },
                other => {
                    return Err(self.fail(
                        &p,
                        ErrorKind::Value,
                        format!("gpus must be a number, got {}", other.kind()),
                    ));
                }
            };
        }
        Ok(b)
    }

    fn count(&self, v: &Json, path: &str, what: &str) -> Res<u32> {
        match v {
            Json::Number(n) => match n.parse::<u32>() {
                Ok(x) if x <= MAX_PARALLEL => Ok(x),
                Ok(_) => {
                    Err(self.fail(path, ErrorKind::Value, format!("{what} is more than {MAX_PARALLEL}")))
                }
                Err(_) => {
                    Err(self.fail(path, ErrorKind::Value, format!("{what} must be a whole number, got {n}")))
                }
            },
            other => Err(self.fail(
                path,
                ErrorKind::Value,
                format!("{what} must be a number, got {}", other.kind()),
            )),
        }
    }

    fn duration(&self, v: &Json, path: &str, what: &str, max: u64) -> Res<u64> {
        match v {
            Json::String(s) => units::parse_duration(s, max)
                .map_err(|e| self.fail(path, units::error_kind(&e), e.to_string())),
            Json::Number(n) => match n.parse::<u64>() {
                Ok(ms) if ms <= max => Ok(ms),
                Ok(_) => Err(self.fail(
                    path,
                    ErrorKind::Value,
                    format!("{what} {n} is more than the limit of {max}"),
                )),
                Err(_) => Err(self.fail(
                    path,
                    ErrorKind::Value,
                    format!("{what} as a number is whole milliseconds, got {n}"),
                )),
            },
            other => Err(self.fail(
                path,
                ErrorKind::Value,
                format!("{what} must be a duration such as \"90s\" or whole ms, got {}", other.kind()),
            )),
        }
    }
}

/// Parses and checks the JSON form.
pub fn parse_json(src: &str) -> Result<Expr, RdlError> {
    if src.len() > MAX_INPUT_BYTES {
        return Err(at(
            src,
            MAX_INPUT_BYTES,
            "",
            ErrorKind::TooLarge,
            format!("the input is {} bytes, more than the limit of {MAX_INPUT_BYTES}", src.len()),
        ));
    }
    let json = Json::parse(src).map_err(|e| sdk_error(src, &e))?;
    let r = Reader { src };
    let e = r.expr(&json, "", 1)?;
    validate::check(&e).map_err(|i| r.fail(&i.path, i.kind, i.reason))?;
    Ok(e)
}

/// The SDK's `invalid JSON at byte N: what` as a positioned error.
fn sdk_error(src: &str, message: &str) -> RdlError {
    let rest = message.strip_prefix("invalid JSON at byte ").unwrap_or(message);
    let (offset, reason) = match rest.split_once(": ") {
        Some((n, why)) => (n.parse::<usize>().unwrap_or(0), why),
        None => (0, rest),
    };
    let kind = if reason.contains("nested too deeply") { ErrorKind::TooDeep } else { ErrorKind::Syntax };
    at(src, offset, "", kind, format!("invalid JSON: {reason}"))
}

// ----- finding a value in the source by its path ------------------------------------------------

fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Past the string that starts at `i` (a `"`).
fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        match b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// Past the value that starts at `i`. The text has already passed the SDK's reader, so this
/// only needs to find the value's end.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' => {
            let mut j = ws(b, i + 1);
            if b.get(j) == Some(&b'}') {
                return Some(j + 1);
            }
            loop {
                j = ws(b, skip_string(b, j)?);
                j = skip_value(b, ws(b, j + 1))?;
                j = ws(b, j);
                match b.get(j)? {
                    b',' => j = ws(b, j + 1),
                    b'}' => return Some(j + 1),
                    _ => return None,
                }
            }
        }
        b'[' => {
            let mut j = ws(b, i + 1);
            if b.get(j) == Some(&b']') {
                return Some(j + 1);
            }
            loop {
                j = ws(b, skip_value(b, j)?);
                match b.get(j)? {
                    b',' => j = ws(b, j + 1),
                    b']' => return Some(j + 1),
                    _ => return None,
                }
            }
        }
        _ => {
            let mut j = i;
            while b.get(j).is_some_and(|c| !matches!(c, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')) {
                j += 1;
            }
            Some(j)
        }
    }
}

/// The entries of the object at `i`: (key offset, key, value offset).
fn entries(b: &[u8], i: usize) -> Option<Vec<(usize, String, usize)>> {
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = ws(b, i + 1);
    if b.get(j) == Some(&b'}') {
        return Some(out);
    }
    loop {
        let key_end = skip_string(b, j)?;
        let raw = std::str::from_utf8(b.get(j..key_end)?).ok()?;
        let key = match Json::parse(raw) {
            Ok(Json::String(k)) => k,
            _ => return None,
        };
        let value = ws(b, ws(b, key_end) + 1);
        out.push((j, key, value));
        j = ws(b, skip_value(b, value)?);
        match b.get(j)? {
            b',' => j = ws(b, j + 1),
            _ => return Some(out),
        }
    }
}

/// The offset of the value at `path` (`window.expr.order[1].atom.g`; empty: the document).
pub(crate) fn locate(src: &str, path: &str) -> Option<usize> {
    let b = src.as_bytes();
    let mut pos = ws(b, 0);
    if path.is_empty() {
        return Some(pos);
    }
    for seg in path.split('.') {
        let (key, index) = match seg.split_once('[') {
            Some((k, rest)) => (k, Some(rest.strip_suffix(']')?.parse::<usize>().ok()?)),
            None => (seg, None),
        };
        pos = entries(b, pos)?.into_iter().find(|(_, k, _)| k == key)?.2;
        if let Some(n) = index {
            if b.get(pos) != Some(&b'[') {
                return None;
            }
            let mut j = ws(b, pos + 1);
            for _ in 0..n {
                j = ws(b, skip_value(b, j)?);
                if b.get(j) != Some(&b',') {
                    return None;
                }
                j = ws(b, j + 1);
            }
            pos = j;
        }
    }
    Some(pos)
}

// ----- writing ----------------------------------------------------------------------------------

/// Writes the JSON form on one line.
pub fn to_json(e: &Expr) -> String {
    let mut out = String::new();
    write_expr(&mut out, e);
    out
}

fn write_expr(out: &mut String, e: &Expr) {
    match e {
        Expr::Atom(a) => {
            out.push_str(r#"{"atom": {"bundle": {"#);
            let b = &a.bundle;
            let mut fields = Vec::new();
            if b.cpu_millis > 0 {
                fields.push(format!(r#""cpu": "{}""#, units::format_cpu(b.cpu_millis)));
            }
            if b.memory_bytes > 0 {
                fields.push(format!(r#""memory": "{}""#, units::format_memory(b.memory_bytes)));
            }
            if b.gpus > 0 {
                fields.push(format!(r#""gpus": {}"#, b.gpus));
            }
            out.push_str(&fields.join(", "));
            let _ = write!(
                out,
                r#"}}, "g": {}, "h": {}, "lease": "{}", "work": "{}"}}}}"#,
                a.min_parallel,
                a.max_parallel,
                units::format_duration(a.min_lease_ms),
                units::format_duration(a.work)
            );
        }
        Expr::Window(w) => {
            let _ = write!(
                out,
                r#"{{"window": {{"start": "{}", "end": "{}", "expr": "#,
                units::format_duration(w.start_ms),
                units::format_duration(w.end_ms)
            );
            write_expr(out, &w.inner);
            out.push_str("}}");
        }
        Expr::Order(parts) | Expr::All(parts) | Expr::Any(parts) => {
            let _ = write!(out, r#"{{"{}": ["#, validate::op_name(e));
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(out, part);
            }
            out.push_str("]}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_values_by_path() {
        let src = "{\"window\": {\"start\": \"0s\",\n \"end\": 5, \"expr\": {\"order\": [ {\"a\\u0074om\": 1}, [2, 3] ]}}}";
        let at = |p: &str| locate(src, p).map(|o| &src[o..o + 2]);
        assert_eq!(at(""), Some("{\""));
        assert_eq!(at("window.start"), Some("\"0"));
        assert_eq!(at("window.end"), Some("5,"));
        assert_eq!(at("window.expr.order[0].atom"), Some("1}"));
        assert_eq!(at("window.expr.order[1]"), Some("[2"));
        assert_eq!(at("window.expr.order[2]"), None);
        assert_eq!(at("window.nope"), None);
    }
}
