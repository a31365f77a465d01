//! # gantry-rdl
//!
//! The Reservation Definition Language of Rayon (Curino et al., SoCC 2014; seed `001`): what a
//! reservation asks for. A crate of its own because it is the user's language: the scheduler's
//! API parses it, the engine keeps reservations' definitions in it and lays them out for plugins
//! ([`abi`]), and a planner plugin reads it back.
//!
//! An expression is a tree. Its leaves are **atoms** `atom(b, g, h, l, w)`: bundles (containers)
//! of resources `b`, run at least `g` and at most `h` at a time, in whole gangs of `g` (so the
//! number running is 0 or a multiple of `g` between `g` and `h`), each allocation lasting at least
//! the lease `l`, until the total work `w` (bundle × time) is done. Operators combine them:
//! `window(s, e, expr)` confines `expr` to `[s, e)`, `order(e1, e2, …)` runs the parts one after
//! the other, `all(…)` needs every part, `any(…)` one of them.
//!
//! Times are milliseconds on the plan's clock (the API turns times relative to the submission
//! into plan time before the planner sees them); work is bundle-milliseconds.

//!
//! # Two forms
//!
//! The same expressions are written in JSON (for the API) or in a compact text form (for people
//! and the CLI); [`parse_json`] / [`to_json`] and [`parse_text`] / [`to_text`] read and write
//! them ([`to_text_pretty`] over several lines), and either printer's output parses back to an equal [`Expr`]. [`parse`] takes either
//! (JSON when the first non-blank character is `{`).
//!
//! ## Quantities
//!
//! - **Times and leases**: a number and a unit, `ms`, `s`, `m` (minutes) or `h`, decimals
//!   allowed where they come out to whole milliseconds (`1.5h`, `250ms`, `0s`). Window times are
//!   on the plan's clock (ms, up to [`MAX_INSTANT_MS`]); a lease is at most ten years
//!   ([`MAX_TIME_MS`]).
//! - **Work**: bundle-time in the same units: `50h` is fifty bundle-hours, 180,000,000
//!   bundle-ms. At most [`MAX_WORK`] bundle-ms.
//! - **CPU**: cores, up to three decimals, or millicores. In JSON as on gantry's command line:
//!   `"2"`, `"0.5"`, `"500m"` (a JSON number is cores). In text `2c`, `0.5c`, `500mc`.
//! - **Memory**: binary units, exact to the byte. In JSON as on the command line: `"2GiB"`,
//!   `"512M"`, `"1.5g"` — `B`, `K`, `M`, `G`, `T`, `P`, also `KB`/`KiB`…, any case (a JSON number
//!   is bytes). In text the unit ends in `B`: `512MiB`, `2GiB`, `100B` (`2GB` is also binary).
//! - **GPUs**: whole numbers; in text `1gpu` or `4gpus`.
//!
//! ## JSON
//!
//! An expression is an object with exactly one key, its operator:
//!
//! ```text
//! {"atom":   {"bundle": BUNDLE, "g": INT, "h": INT, "lease": DURATION, "work": DURATION}}
//! {"window": {"start": DURATION, "end": DURATION, "expr": EXPR}}
//! {"order":  [EXPR, …]}        {"all": [EXPR, …]}        {"any": [EXPR, …]}
//! BUNDLE   = {"cpu": CPU, "memory": MEMORY, "gpus": INT}    (each optional, at least one non-zero)
//! DURATION = "90s" | "1.5h" | … | whole milliseconds as a number
//! ```
//!
//! Every key listed is required except the bundle's; any other key is refused. For example:
//!
//! ```
//! use gantry_rdl::{parse_json, parse_text};
//! let json = r#"{"window": {"start": "0s", "end": "2h", "expr": {"order": [
//!     {"atom": {"bundle": {"cpu": "1", "memory": "2GiB"}, "g": 1, "h": 100, "lease": "1m", "work": "50h"}},
//!     {"atom": {"bundle": {"cpu": "2", "memory": "4GiB", "gpus": 1}, "g": 4, "h": 4, "lease": "30m", "work": "2h"}}
//! ]}}}"#;
//! let text = "window(0s, 2h, order(atom(1c/2GiB, 1, 100, 1m, 50h), atom(2c/4GiB/1gpu, 4, 4, 30m, 2h)))";
//! assert_eq!(parse_json(json).unwrap(), parse_text(text).unwrap());
//! ```
//!
//! ## Text
//!
//! Blanks and `#` comments (to the end of the line) may stand between any two tokens; names are
//! lower case; a quantity is written with its unit attached (`2GiB`, not `2 GiB`).
//!
//! ```text
//! rdl      = expr ;
//! expr     = atom | window | nary ;
//! atom     = "atom" "(" bundle "," count "," count "," duration "," duration ")" ;
//!                                 (* b, g, h, lease l, work w *)
//! window   = "window" "(" duration "," duration "," expr ")" ;      (* start, end, inner *)
//! nary     = ( "order" | "all" | "any" ) "(" expr { "," expr } ")" ;
//! bundle   = resource { "/" resource } ;               (* each kind at most once *)
//! resource = decimal "c" | digits "mc"                 (* CPU: cores or millicores *)
//!          | decimal memunit                           (* memory *)
//!          | digits ( "gpu" | "gpus" ) ;
//! memunit  = "B" | ( "K" | "M" | "G" | "T" | "P" ) [ "i" ] "B" ;    (* any case *)
//! count    = digits ;
//! duration = decimal ( "ms" | "s" | "m" | "h" ) ;
//! decimal  = digits [ "." digits ] ;
//! digits   = digit { digit } ;
//! ```
//!
//! # What is refused
//!
//! Every refusal is an [`RdlError`] with the line and column (from 1) of the offending token or
//! value, its path in JSON key terms (`window.expr.order[1].atom.g`, for the text form too), an
//! [`ErrorKind`] and a reason:
//!
//! - malformed input, trailing text, input over [`MAX_INPUT_BYTES`], nesting deeper than
//!   [`MAX_NESTING`] expressions, unknown operators, keys or units, wrong argument counts or
//!   missing keys, wrong types, fractions where whole numbers belong, values over the limits;
//! - an atom with `g`, `h`, `l` or `w` zero, `g > h`, a bundle of no resources, work that is not
//!   a multiple of `g` bundle-ms (a gang's `g` bundles run together and do equal work, so the
//!   work is a whole number of gang-milliseconds), or work less than `g · l` (it cannot fill one
//!   lease of one gang);
//! - a window whose end is not after its start; an empty `order`, `all` or `any`;
//! - anything that cannot fit in time. An atom takes at least `max(l, ceil(w / h'))`, where `h'`
//!   is `h` rounded down to whole gangs of `g` (at most `h'` bundles run at once). Walking the
//!   tree from time 0 with no deadline, a window narrows the interval to its own (an inner window
//!   is cut to the outer one), `order` starts each stage at the earliest finish of the one before,
//!   `all` finishes with its slowest part, and `any` needs each alternative to fit on its own and
//!   lets what follows start after its quickest. Any atom that would end after its deadline, or a
//!   window that closes before its expression can start, is refused.
//!
//! [`Expr::validate`] runs the same checks on an expression built in code.

use gantry_sdk::abi::GantryResources;

pub mod abi;
mod error;
mod json;
mod text;
mod units;
mod validate;

pub use error::{ErrorKind, RdlError};
pub use json::{parse_json, to_json};
pub use text::{parse_text, to_text, to_text_pretty};
pub use units::{
    MAX_CPU_MILLIS, MAX_GPUS, MAX_INSTANT_MS, MAX_PARALLEL, MAX_TIME_MS, MAX_WORK, format_cpu,
    format_duration, format_memory, parse_cpu, parse_duration, parse_memory,
};

/// The largest document either parser reads: 1 MiB.
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// How deep expressions may nest (the root is depth 1): enough for any real reservation, and a
/// bound that keeps a hostile input from exhausting the stack. (The SDK's JSON reader stops at 32
/// levels of JSON; an expression 15 deep is 31 levels of JSON with its bundle.)
pub const MAX_NESTING: usize = 15;

/// Parses either form: JSON when the first non-blank character is `{`, else the text form.
pub fn parse(src: &str) -> Result<Expr, RdlError> {
    if src.trim_start().starts_with('{') { parse_json(src) } else { parse_text(src) }
}

/// One RDL expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `atom(b, g, h, l, w)`.
    Atom(Atom),
    /// `window(s, e, expr)`: the inner expression runs within `[start_ms, end_ms)`.
    Window(Window),
    /// `order(e1, e2, …)`: each part starts after the previous one ends.
    Order(Vec<Expr>),
    /// `all(e1, e2, …)`: every part, or the reservation is rejected.
    All(Vec<Expr>),
    /// `any(e1, e2, …)`: one of the parts (the first that fits).
    Any(Vec<Expr>),
}

/// `window(s, e, expr)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Earliest start, ms.
    pub start_ms: u64,
    /// Deadline (exclusive), ms.
    pub end_ms: u64,
    /// What must run inside.
    pub inner: Box<Expr>,
}

/// `atom(b, g, h, l, w)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Atom {
    /// `b`: the resources of one bundle (container).
    pub bundle: GantryResources,
    /// `g`: the least number of bundles running at once when any run; allocations are whole
    /// multiples of it (a gang of `g`).
    pub min_parallel: u32,
    /// `h`: the most bundles running at once.
    pub max_parallel: u32,
    /// `l`: the least time an allocation lasts once it starts, ms.
    pub min_lease_ms: u64,
    /// `w`: the total work, bundle-milliseconds.
    pub work: u64,
}

impl Expr {
    /// The atoms of the expression in pre-order: the numbering an allocation's
    /// allocation pieces' `atom` index follows (`gantry_sdk::abi::GantryAllocation::atom`).
    pub fn atoms(&self) -> Vec<Atom> {
        fn walk(e: &Expr, out: &mut Vec<Atom>) {
            match e {
                Expr::Atom(a) => out.push(*a),
                Expr::Window(w) => walk(&w.inner, out),
                Expr::Order(v) | Expr::All(v) | Expr::Any(v) => v.iter().for_each(|x| walk(x, out)),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Runs every semantic check of the parsers (see the [module documentation](self)) on an
    /// expression built in code. The error has line and column 0 and names the value by path.
    pub fn validate(&self) -> Result<(), RdlError> {
        validate::check(self).map_err(|i| RdlError {
            line: 0,
            column: 0,
            path: i.path,
            kind: i.kind,
            reason: i.reason,
        })
    }

    /// The least time the expression needs, ms, ignoring windows' positions: an atom's
    /// [`Atom::min_duration_ms`], the sum over an `order`, the longest part of an `all`, the
    /// shortest of an `any`, a window's inner expression.
    pub fn min_duration_ms(&self) -> u64 {
        match self {
            Expr::Atom(a) => a.min_duration_ms(),
            Expr::Window(w) => w.inner.min_duration_ms(),
            Expr::Order(parts) => parts.iter().fold(0u64, |t, p| t.saturating_add(p.min_duration_ms())),
            Expr::All(parts) => parts.iter().map(Expr::min_duration_ms).max().unwrap_or(0),
            Expr::Any(parts) => parts.iter().map(Expr::min_duration_ms).min().unwrap_or(0),
        }
    }

    /// The expression with every window instant mapped by `f` (a shift to another clock: the
    /// engine puts a request's times in engine time, a planner in its plan's).
    pub fn map_times(&self, f: &dyn Fn(u64) -> u64) -> Expr {
        match self {
            Expr::Atom(a) => Expr::Atom(*a),
            Expr::Window(w) => Expr::Window(Window {
                start_ms: f(w.start_ms),
                end_ms: f(w.end_ms),
                inner: Box::new(w.inner.map_times(f)),
            }),
            Expr::Order(v) => Expr::Order(v.iter().map(|x| x.map_times(f)).collect()),
            Expr::All(v) => Expr::All(v.iter().map(|x| x.map_times(f)).collect()),
            Expr::Any(v) => Expr::Any(v.iter().map(|x| x.map_times(f)).collect()),
        }
    }

    /// The operator's name: `atom`, `window`, `order`, `all` or `any`.
    pub fn op_name(&self) -> &'static str {
        validate::op_name(self)
    }
}

impl Atom {
    /// The most bundles that can run at once: `h` rounded down to whole gangs of `g`.
    pub fn max_running(&self) -> u64 {
        validate::effective_parallel(self)
    }

    /// The least time the atom takes, ms: `max(l, ceil(w / h'))`, `h'` being
    /// [`Atom::max_running`].
    pub fn min_duration_ms(&self) -> u64 {
        validate::atom_min_duration(self)
    }
}

impl std::fmt::Display for Expr {
    /// The text form, as [`to_text`] writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&to_text(self))
    }
}

impl std::str::FromStr for Expr {
    type Err = RdlError;

    /// Either form, as [`parse`] reads it.
    fn from_str(s: &str) -> Result<Expr, RdlError> {
        parse(s)
    }
}
