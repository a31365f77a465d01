//! The compact text form: a lexer, a recursive-descent parser that remembers where each value
//! was written, and the printer. The grammar is in the [module documentation](super).

use std::collections::HashMap;
use std::fmt::Write as _;

use gantry_sdk::abi::GantryResources;

use super::error::{RdlError, at};
use super::units::{self, MAX_GPUS, MAX_INSTANT_MS, MAX_PARALLEL, MAX_TIME_MS, MAX_WORK};
use super::validate::{self, child, item};
use super::{Atom, ErrorKind, Expr, MAX_INPUT_BYTES, MAX_NESTING, Window};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// `atom`, `window`, …
    Word(&'a str),
    /// A number with its unit glued on: `4`, `1c`, `2GiB`, `1.5h`.
    Quantity(&'a str),
    Open,
    Close,
    Comma,
    Slash,
    End,
}

fn describe(t: Tok<'_>) -> String {
    match t {
        Tok::Word(w) => format!("`{w}`"),
        Tok::Quantity(q) => format!("`{q}`"),
        Tok::Open => "`(`".to_owned(),
        Tok::Close => "`)`".to_owned(),
        Tok::Comma => "`,`".to_owned(),
        Tok::Slash => "`/`".to_owned(),
        Tok::End => "the end of the input".to_owned(),
    }
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// Where each path's value starts (byte offset), for the checks run after parsing.
    spans: HashMap<String, usize>,
}

type Res<T> = Result<T, RdlError>;

impl<'a> Parser<'a> {
    fn err(&self, offset: usize, path: &str, kind: ErrorKind, reason: impl Into<String>) -> RdlError {
        at(self.src, offset, path, kind, reason)
    }

    /// Skips blanks and `#` comments.
    fn skip(&mut self) {
        let b = self.src.as_bytes();
        loop {
            match b.get(self.pos) {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'#') => {
                    while let Some(&c) = b.get(self.pos) {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    /// The next token and its offset, without consuming it.
    fn peek(&mut self) -> Res<(Tok<'a>, usize)> {
        self.skip();
        let b = self.src.as_bytes();
        let start = self.pos;
        let Some(&c) = b.get(start) else { return Ok((Tok::End, start)) };
        let run = |from: usize, ok: fn(u8) -> bool| {
            let mut i = from;
            while b.get(i).is_some_and(|&c| ok(c)) {
                i += 1;
            }
            i
        };
        let tok = match c {
            b'(' => Tok::Open,
            b')' => Tok::Close,
            b',' => Tok::Comma,
            b'/' => Tok::Slash,
            b'0'..=b'9' => {
                let num_end = run(start, |c| c.is_ascii_digit() || c == b'.');
                let end = run(num_end, |c| c.is_ascii_alphabetic());
                Tok::Quantity(&self.src[start..end])
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = run(start, |c| c.is_ascii_alphanumeric() || c == b'_');
                Tok::Word(&self.src[start..end])
            }
            _ => {
                let ch = self.src[start..].chars().next().unwrap_or('?');
                return Err(self.err(start, "", ErrorKind::Syntax, format!("unexpected character {ch:?}")));
            }
        };
        Ok((tok, start))
    }

    fn next(&mut self) -> Res<(Tok<'a>, usize)> {
        let (t, off) = self.peek()?;
        self.pos = off
            + match t {
                Tok::Word(s) | Tok::Quantity(s) => s.len(),
                Tok::End => 0,
                _ => 1,
            };
        Ok((t, off))
    }

    /// `(` after an operator's name.
    fn open(&mut self, op: &str) -> Res<()> {
        match self.next()? {
            (Tok::Open, _) => Ok(()),
            (t, off) => Err(self.err(
                off,
                "",
                ErrorKind::Syntax,
                format!("expected `(` after `{op}`, found {}", describe(t)),
            )),
        }
    }

    /// The `,` before argument `i` (from 0) of an operator that takes `n`.
    fn comma(&mut self, op: &str, i: usize, n: usize, sig: &str) -> Res<()> {
        match self.next()? {
            (Tok::Comma, _) => Ok(()),
            (Tok::Close, off) => {
                Err(self.err(off, "", ErrorKind::Arity, format!("`{op}` takes {n} arguments {sig}, got {i}")))
            }
            (t, off) => Err(self.err(
                off,
                "",
                ErrorKind::Syntax,
                format!("expected `,` or `)` in `{op}(…)`, found {}", describe(t)),
            )),
        }
    }

    /// The `)` after the last argument of an operator that takes `n`.
    fn close(&mut self, op: &str, n: usize, sig: &str) -> Res<()> {
        match self.next()? {
            (Tok::Close, _) => Ok(()),
            (Tok::Comma, off) => Err(self.err(
                off,
                "",
                ErrorKind::Arity,
                format!("`{op}` takes {n} arguments {sig}, got more"),
            )),
            (t, off) => Err(self.err(
                off,
                "",
                ErrorKind::Syntax,
                format!("expected `)` to close `{op}(`, found {}", describe(t)),
            )),
        }
    }

    fn quantity(&mut self, path: &str, what: &str) -> Res<(&'a str, usize)> {
        match self.next()? {
            (Tok::Quantity(q), off) => {
                self.spans.entry(path.to_owned()).or_insert(off);
                Ok((q, off))
            }
            (t, off) => {
                Err(self.err(off, path, ErrorKind::Syntax, format!("expected {what}, found {}", describe(t))))
            }
        }
    }

    fn duration(&mut self, path: &str, what: &str, max: u64) -> Res<u64> {
        let (q, off) = self.quantity(path, what)?;
        units::parse_duration(q, max).map_err(|e| self.err(off, path, units::error_kind(&e), e.to_string()))
    }

    fn count(&mut self, path: &str, what: &str) -> Res<u32> {
        let (q, off) = self.quantity(path, what)?;
        match q.parse::<u32>() {
            Ok(v) if v <= MAX_PARALLEL => Ok(v),
            Ok(_) => Err(self.err(off, path, ErrorKind::Value, format!("`{q}` is more than {MAX_PARALLEL}"))),
            Err(_) => Err(self.err(
                off,
                path,
                ErrorKind::Value,
                format!("{what} must be a whole number, got `{q}`"),
            )),
        }
    }

    /// `1c/2GiB/1gpu`: components in any order, each at most once.
    fn bundle(&mut self, path: &str) -> Res<GantryResources> {
        let mut b = GantryResources::default();
        let mut seen = [false; 3];
        loop {
            let (q, off) = self.quantity(path, "a bundle such as 1c/2GiB/1gpu")?;
            let (num, unit) = units::split_unit(q);
            let bad = |p: &Self, kind: ErrorKind, why: String| p.err(off, path, kind, why);
            let slot = match unit {
                "c" | "mc" => {
                    let millis = if unit == "c" {
                        units::parse_cpu(num).map_err(|e| e.to_string())
                    } else if num.contains('.') {
                        Err(format!("`{q}`: millicores are whole numbers"))
                    } else {
                        units::parse_cpu(&format!("{num}m")).map_err(|e| e.to_string())
                    }
                    .map_err(|e| bad(self, ErrorKind::Value, e))?;
                    b.cpu_millis = millis;
                    0
                }
                "gpu" | "gpus" => {
                    b.gpus = match num.parse::<u32>() {
                        Ok(n) if n <= MAX_GPUS => n,
                        _ => {
                            return Err(bad(
                                self,
                                ErrorKind::Value,
                                format!("`{q}`: GPUs are a whole number up to {MAX_GPUS}"),
                            ));
                        }
                    };
                    2
                }
                "" => {
                    return Err(bad(
                        self,
                        ErrorKind::Value,
                        format!("`{q}` needs a unit: c or mc (CPU), B/KiB/MiB/GiB/TiB/PiB (memory), gpu"),
                    ));
                }
                u if u.ends_with('B') || u.ends_with('b') => {
                    b.memory_bytes = units::parse_memory(q)
                        .map_err(|e| bad(self, units::error_kind(&e), e.to_string()))?;
                    1
                }
                u => {
                    return Err(bad(
                        self,
                        ErrorKind::Unknown,
                        format!(
                            "unknown bundle unit `{u}` (use c or mc for CPU, B/KiB/MiB/GiB/TiB/PiB for memory, gpu){}",
                            match u {
                                "m" => "; millicores are `mc` here, mebibytes `MiB`",
                                "k" | "K" | "M" | "G" | "T" | "P" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" => {
                                    "; memory units end in B here"
                                }
                                _ => "",
                            }
                        ),
                    ));
                }
            };
            if seen[slot] {
                let what = ["CPU", "memory", "GPUs"][slot];
                return Err(bad(self, ErrorKind::Value, format!("the bundle names its {what} twice")));
            }
            seen[slot] = true;
            match self.peek()? {
                (Tok::Slash, _) => {
                    self.next()?;
                }
                _ => return Ok(b),
            }
        }
    }

    fn expr(&mut self, path: &str, depth: usize) -> Res<Expr> {
        let (tok, off) = self.next()?;
        let Tok::Word(op) = tok else {
            return Err(self.err(
                off,
                path,
                ErrorKind::Syntax,
                format!("expected an expression (atom, window, order, all or any), found {}", describe(tok)),
            ));
        };
        if !matches!(op, "atom" | "window" | "order" | "all" | "any") {
            return Err(self.err(
                off,
                path,
                ErrorKind::Unknown,
                format!("unknown operator `{op}` (expected atom, window, order, all or any)"),
            ));
        }
        if depth > MAX_NESTING {
            return Err(self.err(
                off,
                path,
                ErrorKind::TooDeep,
                format!("expressions nest deeper than {MAX_NESTING}"),
            ));
        }
        self.spans.insert(path.to_owned(), off);
        let p = child(path, op);
        self.spans.insert(p.clone(), off);
        self.open(op)?;
        match op {
            "atom" => {
                const SIG: &str = "(b, g, h, l, w)";
                let bundle = self.bundle(&child(&p, "bundle"))?;
                self.comma(op, 1, 5, SIG)?;
                let g = self.count(&child(&p, "g"), "g (the gang size)")?;
                self.comma(op, 2, 5, SIG)?;
                let h = self.count(&child(&p, "h"), "h (the most bundles at once)")?;
                self.comma(op, 3, 5, SIG)?;
                let l = self.duration(&child(&p, "lease"), "a lease such as 10m", MAX_TIME_MS)?;
                self.comma(op, 4, 5, SIG)?;
                let w = self.duration(&child(&p, "work"), "work in bundle-time such as 50h", MAX_WORK)?;
                self.close(op, 5, SIG)?;
                Ok(Expr::Atom(Atom { bundle, min_parallel: g, max_parallel: h, min_lease_ms: l, work: w }))
            }
            "window" => {
                const SIG: &str = "(start, end, expr)";
                let s = self.duration(&child(&p, "start"), "a start time such as 0s", MAX_INSTANT_MS)?;
                self.comma(op, 1, 3, SIG)?;
                let e = self.duration(&child(&p, "end"), "an end time such as 2h", MAX_INSTANT_MS)?;
                self.comma(op, 2, 3, SIG)?;
                let inner = self.expr(&child(&p, "expr"), depth + 1)?;
                self.close(op, 3, SIG)?;
                Ok(Expr::Window(Window { start_ms: s, end_ms: e, inner: Box::new(inner) }))
            }
            _ => {
                let mut parts = Vec::new();
                if let (Tok::Close, _) = self.peek()? {
                    self.next()?;
                } else {
                    loop {
                        parts.push(self.expr(&item(path, op, parts.len()), depth + 1)?);
                        match self.next()? {
                            (Tok::Comma, _) => {}
                            (Tok::Close, _) => break,
                            (t, off) => {
                                return Err(self.err(
                                    off,
                                    "",
                                    ErrorKind::Syntax,
                                    format!("expected `,` or `)` in `{op}(…)`, found {}", describe(t)),
                                ));
                            }
                        }
                    }
                }
                Ok(match op {
                    "order" => Expr::Order(parts),
                    "all" => Expr::All(parts),
                    _ => Expr::Any(parts),
                })
            }
        }
    }
}

/// Unknown units are [`ErrorKind::Unknown`]; every other bad quantity is a bad value.
/// Parses and checks the text form.
pub fn parse_text(src: &str) -> Result<Expr, RdlError> {
    if src.len() > MAX_INPUT_BYTES {
        return Err(at(
            src,
            MAX_INPUT_BYTES,
            "",
            ErrorKind::TooLarge,
            format!("the input is {} bytes, more than the limit of {MAX_INPUT_BYTES}", src.len()),
        ));
    }
    let mut p = Parser { src, pos: 0, spans: HashMap::new() };
    let e = p.expr("", 1)?;
    if let (t, off) = p.peek()?
        && t != Tok::End
    {
        return Err(p.err(
            off,
            "",
            ErrorKind::Syntax,
            format!("unexpected {} after the expression", describe(t)),
        ));
    }
    validate::check(&e).map_err(|i| {
        let off = p.spans.get(&i.path).copied().unwrap_or(0);
        at(src, off, &i.path, i.kind, i.reason)
    })?;
    Ok(e)
}

/// Writes the text form on one line.
pub fn to_text(e: &Expr) -> String {
    let mut out = String::new();
    write_expr(&mut out, e);
    out
}

/// Writes the text form over several lines, two spaces an indent, keeping any part that fits
/// in 100 columns on one line. It parses back to the same expression as [`to_text`]'s.
pub fn to_text_pretty(e: &Expr) -> String {
    let mut out = String::new();
    write_pretty(&mut out, e, 0);
    out.push('\n');
    out
}

fn write_pretty(out: &mut String, e: &Expr, indent: usize) {
    const WIDTH: usize = 100;
    let flat = to_text(e);
    if indent + flat.len() <= WIDTH || matches!(e, Expr::Atom(_)) {
        out.push_str(&flat);
        return;
    }
    let pad = " ".repeat(indent + 2);
    match e {
        Expr::Atom(_) => {}
        Expr::Window(w) => {
            let _ = write!(
                out,
                "window({}, {},\n{pad}",
                units::format_duration(w.start_ms),
                units::format_duration(w.end_ms)
            );
            write_pretty(out, &w.inner, indent + 2);
            out.push(')');
        }
        Expr::Order(parts) | Expr::All(parts) | Expr::Any(parts) => {
            out.push_str(validate::op_name(e));
            out.push('(');
            for (i, part) in parts.iter().enumerate() {
                out.push_str(if i > 0 { ",\n" } else { "\n" });
                out.push_str(&pad);
                write_pretty(out, part, indent + 2);
            }
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            out.push(')');
        }
    }
}

fn write_expr(out: &mut String, e: &Expr) {
    match e {
        Expr::Atom(a) => {
            out.push_str("atom(");
            write_bundle(out, &a.bundle);
            let _ = write!(
                out,
                ", {}, {}, {}, {})",
                a.min_parallel,
                a.max_parallel,
                units::format_duration(a.min_lease_ms),
                units::format_duration(a.work)
            );
        }
        Expr::Window(w) => {
            let _ = write!(
                out,
                "window({}, {}, ",
                units::format_duration(w.start_ms),
                units::format_duration(w.end_ms)
            );
            write_expr(out, &w.inner);
            out.push(')');
        }
        Expr::Order(parts) | Expr::All(parts) | Expr::Any(parts) => {
            out.push_str(validate::op_name(e));
            out.push('(');
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(out, part);
            }
            out.push(')');
        }
    }
}

fn write_bundle(out: &mut String, b: &GantryResources) {
    let mut parts = Vec::new();
    if b.cpu_millis > 0 {
        parts.push(if b.cpu_millis % 1000 == 0 {
            format!("{}c", b.cpu_millis / 1000)
        } else {
            format!("{}mc", b.cpu_millis)
        });
    }
    if b.memory_bytes > 0 {
        parts.push(units::format_memory(b.memory_bytes));
    }
    if b.gpus > 0 {
        parts.push(format!("{}{}", b.gpus, if b.gpus == 1 { "gpu" } else { "gpus" }));
    }
    if parts.is_empty() {
        parts.push("0c".to_owned());
    }
    out.push_str(&parts.join("/"));
}
