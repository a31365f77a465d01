//! The checks every expression must pass, whichever form it came in: the meaning of each atom
//! and window, then whether everything fits in time.

use super::{Atom, ErrorKind, Expr, MAX_NESTING};

/// A refusal before it has a position: the offending value's path, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub path: String,
    pub kind: ErrorKind,
    pub reason: String,
}

/// `path.key` (or `key` at the root).
pub(crate) fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// `path.key[i]`.
pub(crate) fn item(path: &str, key: &str, i: usize) -> String {
    format!("{}[{i}]", child(path, key))
}

fn invalid(path: String, kind: ErrorKind, reason: String) -> Invalid {
    Invalid { path, kind, reason }
}

/// The operator's key in both forms.
pub(crate) fn op_name(e: &Expr) -> &'static str {
    match e {
        Expr::Atom(_) => "atom",
        Expr::Window(_) => "window",
        Expr::Order(_) => "order",
        Expr::All(_) => "all",
        Expr::Any(_) => "any",
    }
}

/// Every check, structure first (so a meaningless atom is reported as such, not as not
/// fitting), then time.
pub(crate) fn check(e: &Expr) -> Result<(), Invalid> {
    structure(e, "", 1)?;
    earliest_finish(e, "", 0, u64::MAX).map(|_| ())
}

fn structure(e: &Expr, path: &str, depth: usize) -> Result<(), Invalid> {
    if depth > MAX_NESTING {
        return Err(invalid(
            path.to_owned(),
            ErrorKind::TooDeep,
            format!("expressions nest deeper than {MAX_NESTING}"),
        ));
    }
    match e {
        Expr::Atom(a) => atom(a, &child(path, "atom")),
        Expr::Window(w) => {
            let p = child(path, "window");
            if w.end_ms <= w.start_ms {
                return Err(invalid(
                    child(&p, "end"),
                    ErrorKind::Invalid,
                    format!(
                        "the window ends at {}, not after its start {}",
                        super::format_duration(w.end_ms),
                        super::format_duration(w.start_ms)
                    ),
                ));
            }
            structure(&w.inner, &child(&p, "expr"), depth + 1)
        }
        Expr::Order(parts) | Expr::All(parts) | Expr::Any(parts) => {
            let key = op_name(e);
            if parts.is_empty() {
                return Err(invalid(
                    child(path, key),
                    ErrorKind::Invalid,
                    format!("`{key}` needs at least one expression"),
                ));
            }
            for (i, part) in parts.iter().enumerate() {
                structure(part, &item(path, key, i), depth + 1)?;
            }
            Ok(())
        }
    }
}

fn atom(a: &Atom, p: &str) -> Result<(), Invalid> {
    let bad = |key: &str, reason: String| Err(invalid(child(p, key), ErrorKind::Invalid, reason));
    let b = &a.bundle;
    if b.cpu_millis == 0 && b.memory_bytes == 0 && b.gpus == 0 {
        return bad("bundle", "the bundle asks for no resources".to_owned());
    }
    if b.reserved != 0 {
        return bad("bundle", "the bundle's reserved field must be zero".to_owned());
    }
    if a.min_parallel == 0 {
        return bad("g", "g (the gang size) must be at least 1".to_owned());
    }
    if a.max_parallel == 0 {
        return bad("h", "h (the most bundles at once) must be at least 1".to_owned());
    }
    if a.min_parallel > a.max_parallel {
        return bad("g", format!("g = {} is more than h = {}", a.min_parallel, a.max_parallel));
    }
    if a.min_lease_ms == 0 {
        return bad("lease", "the lease must be at least 1 ms".to_owned());
    }
    if a.work == 0 {
        return bad("work", "the work must be more than zero".to_owned());
    }
    let g = u64::from(a.min_parallel);
    if a.work % g != 0 {
        return bad(
            "work",
            format!(
                "work {} bundle-ms does not split into gangs of {g}: it must be a whole number of \
                 gang-ms (a multiple of g bundle-ms)",
                a.work
            ),
        );
    }
    let one_lease = u128::from(g) * u128::from(a.min_lease_ms);
    if u128::from(a.work) < one_lease {
        return bad(
            "work",
            format!(
                "work {} cannot fill one lease of one gang ({g} bundles × {} = {one_lease} bundle-ms)",
                super::format_duration(a.work),
                super::format_duration(a.min_lease_ms)
            ),
        );
    }
    Ok(())
}

/// The most bundles an atom can run at once: `h` rounded down to whole gangs.
pub(crate) fn effective_parallel(a: &Atom) -> u64 {
    let g = u64::from(a.min_parallel.max(1));
    (u64::from(a.max_parallel) / g * g).max(g)
}

/// The least time an atom takes: `max(l, ceil(w / h'))`, `h'` being `h` in whole gangs.
pub(crate) fn atom_min_duration(a: &Atom) -> u64 {
    a.min_lease_ms.max(a.work.div_ceil(effective_parallel(a)))
}

/// The earliest an expression can finish when it may start at `start` and must end by
/// `deadline`; an error where it cannot. `any` needs each alternative to fit on its own (one
/// that never can is a mistake) and lets what follows start after the quickest.
fn earliest_finish(e: &Expr, path: &str, start: u64, deadline: u64) -> Result<u64, Invalid> {
    match e {
        Expr::Atom(a) => {
            let need = atom_min_duration(a);
            let finish = start.saturating_add(need);
            if finish > deadline {
                let key = if a.min_lease_ms >= need { "lease" } else { "work" };
                let why = if key == "lease" {
                    format!("its lease of {}", super::format_duration(a.min_lease_ms))
                } else {
                    format!(
                        "{} of work at most {} bundles at a time",
                        super::format_duration(a.work),
                        effective_parallel(a)
                    )
                };
                return Err(invalid(
                    child(&child(path, "atom"), key),
                    ErrorKind::Fit,
                    format!(
                        "the atom needs at least {} ({why}) but has only {} from {} to its deadline {}",
                        super::format_duration(need),
                        super::format_duration(deadline.saturating_sub(start)),
                        super::format_duration(start),
                        super::format_duration(deadline)
                    ),
                ));
            }
            Ok(finish)
        }
        Expr::Window(w) => {
            let p = child(path, "window");
            let from = start.max(w.start_ms);
            let to = deadline.min(w.end_ms);
            if from >= to {
                let (key, reason) = if w.start_ms >= deadline {
                    (
                        "start",
                        format!(
                            "the window starts at {}, at or after the deadline {} around it",
                            super::format_duration(w.start_ms),
                            super::format_duration(deadline)
                        ),
                    )
                } else {
                    (
                        "end",
                        format!(
                            "the window ends at {}, before its expression can start (at {} at the earliest)",
                            super::format_duration(w.end_ms),
                            super::format_duration(from)
                        ),
                    )
                };
                return Err(invalid(child(&p, key), ErrorKind::Fit, reason));
            }
            earliest_finish(&w.inner, &child(&p, "expr"), from, to)
        }
        Expr::Order(parts) => {
            let mut t = start;
            for (i, part) in parts.iter().enumerate() {
                t = earliest_finish(part, &item(path, "order", i), t, deadline)?;
            }
            Ok(t)
        }
        Expr::All(parts) => {
            let mut t = start;
            for (i, part) in parts.iter().enumerate() {
                t = t.max(earliest_finish(part, &item(path, "all", i), start, deadline)?);
            }
            Ok(t)
        }
        Expr::Any(parts) => {
            let mut t = u64::MAX;
            for (i, part) in parts.iter().enumerate() {
                t = t.min(earliest_finish(part, &item(path, "any", i), start, deadline)?);
            }
            Ok(t.max(start))
        }
    }
}
