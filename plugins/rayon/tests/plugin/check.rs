//! The host's checks of a reservation plan (ABI 1.3 contract, "Host validation"), written again
//! from the contract for the tests: an answer the engine would refuse fails here too.

use gantry_rayon::harness::Host;
use gantry_rdl::{Atom, Expr};
use gantry_sdk::abi::*;

/// Per atom of `e` in pre-order: the atom and its effective window (the intersection of the
/// windows above it).
fn atoms_with_windows(e: &Expr, lo: u64, hi: u64, out: &mut Vec<(Atom, u64, u64)>) {
    match e {
        Expr::Atom(a) => out.push((*a, lo, hi)),
        Expr::Window(w) => atoms_with_windows(&w.inner, lo.max(w.start_ms), hi.min(w.end_ms), out),
        Expr::Order(v) | Expr::All(v) | Expr::Any(v) => {
            v.iter().for_each(|x| atoms_with_windows(x, lo, hi, out))
        }
    }
}

fn count(e: &Expr) -> usize {
    match e {
        Expr::Atom(_) => 1,
        Expr::Window(w) => count(&w.inner),
        Expr::Order(v) | Expr::All(v) | Expr::Any(v) => v.iter().map(count).sum(),
    }
}

fn work(pieces: &[GantryAllocation], atom: usize) -> u128 {
    pieces
        .iter()
        .filter(|p| p.atom as usize == atom)
        .map(|p| u128::from(p.end_ms - p.start_ms) * u128::from(p.bundles))
        .sum()
}

/// Whether `e` (atoms from `base`) is complete under `pieces`.
fn complete(e: &Expr, base: usize, pieces: &[GantryAllocation]) -> bool {
    match e {
        Expr::Atom(a) => work(pieces, base) >= u128::from(a.work),
        Expr::Window(w) => complete(&w.inner, base, pieces),
        Expr::Order(v) | Expr::All(v) => {
            let mut b = base;
            v.iter().all(|x| {
                let ok = complete(x, b, pieces);
                b += count(x);
                ok
            })
        }
        Expr::Any(v) => {
            let mut b = base;
            v.iter().any(|x| {
                let ok = complete(x, b, pieces);
                b += count(x);
                ok
            })
        }
    }
}

/// `order` parts follow each other: each part's pieces start at or after the previous part's
/// last piece ends.
fn ordered(e: &Expr, base: usize, pieces: &[GantryAllocation]) -> Result<(), String> {
    match e {
        Expr::Atom(_) => Ok(()),
        Expr::Window(w) => ordered(&w.inner, base, pieces),
        Expr::Order(v) | Expr::All(v) | Expr::Any(v) => {
            let mut b = base;
            let mut prev_end: Option<u64> = None;
            for x in v {
                ordered(x, b, pieces)?;
                let n = count(x);
                let mine = pieces.iter().filter(|p| (b..b + n).contains(&(p.atom as usize)));
                let (first, last) =
                    mine.fold((u64::MAX, 0), |(f, l), p| (f.min(p.start_ms), l.max(p.end_ms)));
                if matches!(e, Expr::Order(_)) && first != u64::MAX {
                    if let Some(end) = prev_end {
                        if first < end {
                            return Err(format!(
                                "order_broken: a part starts at {first}, the previous ends at {end}"
                            ));
                        }
                    }
                    prev_end = Some(last);
                }
                b += n;
            }
            Ok(())
        }
    }
}

/// Checks one reservation's allocation against its definition (engine time), as the host does.
pub fn check_allocation(def: &Expr, pieces: &[GantryAllocation]) -> Result<(), String> {
    let mut atoms = Vec::new();
    atoms_with_windows(def, 0, u64::MAX, &mut atoms);
    for p in pieces {
        let Some(&(a, lo, hi)) = atoms.get(p.atom as usize) else {
            return Err(format!("bad_allocation: atom {} of {}", p.atom, atoms.len()));
        };
        if p.start_ms >= p.end_ms || p.bundles == 0 {
            return Err(format!("bad_allocation: {p:?}"));
        }
        if p.start_ms < lo || p.end_ms > hi {
            return Err(format!("outside_window: {p:?} outside [{lo}, {hi})"));
        }
        if p.bundles % u64::from(a.min_parallel) != 0 || p.bundles > u64::from(a.max_parallel) {
            return Err(format!("gang_size: {p:?} for g {} h {}", a.min_parallel, a.max_parallel));
        }
    }
    for (i, (a, _, _)) in atoms.iter().enumerate() {
        let mut mine: Vec<&GantryAllocation> = pieces.iter().filter(|p| p.atom as usize == i).collect();
        mine.sort_by_key(|p| p.start_ms);
        let mut run: Option<(u64, u64)> = None;
        for p in mine {
            run = match run {
                Some((s, e)) if p.start_ms <= e => Some((s, e.max(p.end_ms))),
                Some((s, e)) => {
                    if e - s < a.min_lease_ms {
                        return Err(format!(
                            "short_lease: atom {i} runs [{s}, {e}) under {}",
                            a.min_lease_ms
                        ));
                    }
                    Some((p.start_ms, p.end_ms))
                }
                None => Some((p.start_ms, p.end_ms)),
            };
        }
        if let Some((s, e)) = run {
            if e - s < a.min_lease_ms {
                return Err(format!("short_lease: atom {i} runs [{s}, {e}) under {}", a.min_lease_ms));
            }
        }
    }
    if !complete(def, 0, pieces) {
        return Err("work_missing".into());
    }
    ordered(def, 0, pieces)
}

/// The allocation before `now` is unchanged.
pub fn check_past(old: &[GantryAllocation], new: &[GantryAllocation], now: u64) -> Result<(), String> {
    let before = |v: &[GantryAllocation]| {
        let mut out: Vec<(u32, u64, u64, u64)> = v
            .iter()
            .filter(|p| p.start_ms < now)
            .map(|p| (p.atom, p.start_ms, p.end_ms.min(now), p.bundles))
            .collect();
        out.sort_unstable();
        // Merge adjacent equal pieces so a split at `now` compares equal.
        let mut merged: Vec<(u32, u64, u64, u64)> = Vec::new();
        for x in out {
            match merged.last_mut() {
                Some(l) if l.0 == x.0 && l.2 == x.1 && l.3 == x.3 => l.2 = x.2,
                _ => merged.push(x),
            }
        }
        merged
    };
    if before(old) != before(new) {
        return Err(format!("past_changed: {:?} became {:?}", before(old), before(new)));
    }
    Ok(())
}

/// Every accepted allocation is valid and all of them together fit the capacity at every
/// instant from now on.
pub fn check_host(host: &Host) -> Result<(), String> {
    let mut events: Vec<(u64, [i128; 3])> = Vec::new();
    for r in host.records() {
        check_allocation(&r.definition, &r.allocation).map_err(|e| format!("reservation {}: {e}", r.id))?;
        let atoms = r.definition.atoms();
        for p in &r.allocation {
            if p.end_ms <= host.now_ms {
                continue;
            }
            let b = atoms[p.atom as usize].bundle;
            let k = i128::from(p.bundles);
            let d = [i128::from(b.cpu_millis) * k, i128::from(b.memory_bytes) * k, i128::from(b.gpus) * k];
            events.push((p.start_ms.max(host.now_ms), d));
            events.push((p.end_ms, d.map(|x| -x)));
        }
    }
    events.sort_by_key(|e| (e.0, e.1[0] > 0));
    let cap = host.capacity;
    let cap = [i128::from(cap.cpu_millis), i128::from(cap.memory_bytes), i128::from(cap.gpus)];
    let mut used = [0i128; 3];
    let mut i = 0;
    while i < events.len() {
        let at = events[i].0;
        while i < events.len() && events[i].0 == at {
            for (u, d) in used.iter_mut().zip(events[i].1) {
                *u += d;
            }
            i += 1;
        }
        if (0..3).any(|d| used[d] > cap[d]) {
            return Err(format!("over_capacity at {at}: {used:?} > {cap:?}"));
        }
    }
    Ok(())
}
