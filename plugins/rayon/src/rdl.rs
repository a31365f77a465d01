//! The Reservation Definition Language: what a reservation asks for.
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

use gantry_sdk::abi::GantryResources;

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
