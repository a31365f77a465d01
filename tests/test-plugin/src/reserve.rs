//! The test plugin's `reserve` hook (ABI 1.3): a deliberately simple, valid planner, and the
//! misbehaviours a mode builds on it.
//!
//! **The sane planner.** ADMIT and UPDATE lay the subject's atoms one after the other (pre-order;
//! of an `any`, its first part only), starting when every other accepted piece has ended (and not
//! before now): atom `(b, g, h, l, w)` gets the most whole gangs of `g`, at most `h` bundles, that
//! fit the plan capacity by themselves, for `max(l, ceil(w / bundles))` ms, inside its window, or
//! the subject is rejected ([`REJECT_NO_ROOM`], [`REJECT_TOO_BIG`]). Nothing else runs then, so
//! the plan always fits. REPLAN gives up the newest accepted reservations until the rest fits
//! from now on ([`REJECT_REPLANNED`]); OPTIMIZE answers nothing.
//!
//! **Spoilt answers** ([`Spoil`]), each a single broken rule of the contract (abi13.md, "Host
//! validation") for a test to provoke: see the variants.

use gantry_rdl::Expr;
use gantry_rdl::abi::from_nodes;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, PluginError, View};

/// Reject reason: no room inside the window.
pub const REJECT_NO_ROOM: u32 = 1;
/// Reject reason: one gang of an atom exceeds the plan capacity.
pub const REJECT_TOO_BIG: u32 = 2;
/// Reject reason: an atom with `g = 0` or `g > h`.
pub const REJECT_INVALID: u32 = 3;
/// Reject reason (REPLAN): given up so that the rest fits.
pub const REJECT_REPLANNED: u32 = 4;
/// Pieces `reserve-flood` returns: far above the host's limit for a small plan.
pub const FLOOD_PIECES: usize = 1 << 20;

/// How a `reserve` answer is spoilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spoil {
    /// Sane.
    None,
    /// The subject starts at once (ignoring every accepted piece) with `h` bundles rounded down
    /// to whole gangs (ignoring the capacity): over the plan whenever that does not fit.
    OverCapacity,
    /// The subject's atoms are laid from its deadline on: outside the window.
    OutsideWindow,
    /// Every atom of the subject starts at the same instant: an `order` is broken.
    BrokenOrder,
    /// Bundles one less than a whole number of gangs (`g > 1`), or `h + 1` (`g = 1`).
    GangSize,
    /// REPLAN and OPTIMIZE restate each started reservation without its past: pieces that ended
    /// are dropped, a piece running now is cut to start now.
    PastChanged,
    /// The sane answer plus [`FLOOD_PIECES`] pieces for the subject: over the host's limit.
    Flood,
    /// The sane plan of the subject plus a copy of its first piece naming an atom past its last.
    BadAllocation,
}

/// One `reserve` call: the sane answer for `view`, spoilt as `spoil` says.
pub fn reserve(view: &View<'_>, spoil: Spoil, out: &mut Decisions) -> Result<(), PluginError> {
    let plan = &view.plan;
    match plan.cause {
        GANTRY_RESERVE_ADMIT | GANTRY_RESERVE_UPDATE => admit(view, spoil, out),
        GANTRY_RESERVE_REPLAN => {
            replan(view, out)?;
            if spoil == Spoil::PastChanged {
                forget_the_past(view, out);
            }
            Ok(())
        }
        GANTRY_RESERVE_OPTIMIZE => {
            if spoil == Spoil::PastChanged {
                forget_the_past(view, out);
            }
            Ok(())
        }
        cause => Err(PluginError::new(format!("test-misbehave: unknown reserve cause {cause}"))),
    }
}

/// Reservation `r`'s definition, read back from the view.
fn definition(view: &View<'_>, r: u32) -> Result<Expr, PluginError> {
    let detail = view
        .plan
        .details
        .get(r as usize)
        .ok_or_else(|| PluginError::new(format!("test-misbehave: reservation {r} has no detail")))?;
    from_nodes(view.plan.rdl_nodes, detail.definition)
        .map_err(|e| PluginError::new(format!("test-misbehave: reservation {r}: {e}")))
}

/// How many `unit`s fit in `cap` (`u64::MAX` for a zero unit).
fn count(unit: &GantryResources, cap: &GantryResources) -> u64 {
    let dims = [
        (unit.cpu_millis, cap.cpu_millis),
        (unit.memory_bytes, cap.memory_bytes),
        (u64::from(unit.gpus), u64::from(cap.gpus)),
    ];
    dims.iter().filter(|(u, _)| *u > 0).map(|(u, c)| c / u).min().unwrap_or(u64::MAX)
}

/// Lays atoms one after the other.
struct Layout {
    reservation: u32,
    capacity: GantryResources,
    spoil: Spoil,
    /// Where the next atom may start.
    cursor: u64,
    /// Pre-order index of the next atom.
    atom: u32,
    pieces: Vec<GantryAllocation>,
}

impl Layout {
    /// Places `e` within `[lo, hi)`; the reject reason if it does not fit.
    fn place(&mut self, e: &Expr, lo: u64, hi: u64) -> Result<(), u32> {
        match e {
            Expr::Atom(a) => {
                let index = self.atom;
                self.atom += 1;
                let (g, h) = (u64::from(a.min_parallel), u64::from(a.max_parallel));
                if g == 0 || g > h {
                    return Err(REJECT_INVALID);
                }
                let fit = count(&a.bundle.times(a.min_parallel), &self.capacity);
                let gangs = if self.spoil == Spoil::OverCapacity { h / g } else { (h / g).min(fit) };
                if gangs == 0 {
                    return Err(REJECT_TOO_BIG);
                }
                let bundles = match self.spoil {
                    Spoil::GangSize if g > 1 => gangs * g - 1,
                    Spoil::GangSize => h + 1,
                    _ => gangs * g,
                };
                let d = a.work.div_ceil(bundles).max(a.min_lease_ms);
                let start = if self.spoil == Spoil::OutsideWindow {
                    self.cursor.max(hi)
                } else {
                    self.cursor.max(lo)
                };
                let end = start.saturating_add(d);
                if self.spoil != Spoil::OutsideWindow && end > hi {
                    return Err(REJECT_NO_ROOM);
                }
                self.pieces.push(GantryAllocation {
                    reservation: self.reservation,
                    atom: index,
                    start_ms: start,
                    end_ms: end,
                    bundles,
                });
                if self.spoil != Spoil::BrokenOrder {
                    self.cursor = end;
                }
                Ok(())
            }
            Expr::Window(w) => self.place(&w.inner, lo.max(w.start_ms), hi.min(w.end_ms)),
            Expr::Order(parts) | Expr::All(parts) => parts.iter().try_for_each(|p| self.place(p, lo, hi)),
            Expr::Any(parts) => {
                let Some((first, rest)) = parts.split_first() else { return Ok(()) };
                self.place(first, lo, hi)?;
                let skipped: usize = rest.iter().map(|p| p.atoms().len()).sum();
                self.atom += u32::try_from(skipped).unwrap_or(u32::MAX);
                Ok(())
            }
        }
    }
}

/// ADMIT, UPDATE: the subject after everything else, or rejected.
fn admit(view: &View<'_>, spoil: Spoil, out: &mut Decisions) -> Result<(), PluginError> {
    let plan = &view.plan;
    let subject = plan.subject;
    let expr = definition(view, subject)?;
    let others_end =
        plan.allocations.iter().filter(|p| p.reservation != subject).map(|p| p.end_ms).max().unwrap_or(0);
    let cursor = if spoil == Spoil::OverCapacity { view.now_ms } else { view.now_ms.max(others_end) };
    let mut layout =
        Layout { reservation: subject, capacity: plan.capacity, spoil, cursor, atom: 0, pieces: Vec::new() };
    match layout.place(&expr, 0, u64::MAX) {
        Ok(()) => {
            let mut pieces = layout.pieces;
            match spoil {
                Spoil::Flood => {
                    let first = pieces.first().copied().unwrap_or_default();
                    pieces.extend(std::iter::repeat_n(first, FLOOD_PIECES));
                }
                Spoil::BadAllocation => {
                    if let Some(&first) = pieces.first() {
                        let atom = u32::try_from(expr.atoms().len()).unwrap_or(u32::MAX).saturating_add(5);
                        pieces.push(GantryAllocation { atom, ..first });
                    }
                }
                _ => {}
            }
            out.plan_reservation(subject, pieces);
        }
        Err(reason) => out.reject_reservation(subject, reason),
    }
    Ok(())
}

/// Whether the accepted pieces of the reservations not `given_up` fit the plan from now on.
fn fits(view: &View<'_>, atoms: &[Vec<gantry_rdl::Atom>], given_up: &[bool]) -> bool {
    let now = view.now_ms;
    let mut events: Vec<(u64, bool, GantryResources)> = Vec::new();
    for p in view.plan.allocations {
        let r = p.reservation as usize;
        if given_up.get(r).copied().unwrap_or(true) || p.end_ms <= now {
            continue;
        }
        let Some(atom) = atoms.get(r).and_then(|a| a.get(p.atom as usize)) else { continue };
        let n = u32::try_from(p.bundles).unwrap_or(u32::MAX);
        let used = atom.bundle.times(n);
        events.push((p.start_ms.max(now), true, used));
        events.push((p.end_ms, false, used));
    }
    // Ends before starts at the same instant: [s, e) pieces that touch do not overlap.
    events.sort_by_key(|&(t, add, _)| (t, add));
    let mut level = GantryResources::default();
    for (_, add, used) in events {
        level = if add { level.plus(&used) } else { level.minus(&used) };
        if !level.fits_in(&view.plan.capacity) {
            return false;
        }
    }
    true
}

/// REPLAN: give up the newest accepted reservations until the rest fits from now on.
fn replan(view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
    let plan = &view.plan;
    let n = u32::try_from(view.reservations.len()).unwrap_or(u32::MAX);
    let mut atoms = Vec::with_capacity(n as usize);
    for r in 0..n {
        atoms.push(definition(view, r)?.atoms());
    }
    let mut accepted: Vec<u32> = (0..n)
        .filter(|&r| {
            view.reservations.get(r as usize).is_some_and(|x| x.state == GANTRY_RESERVATION_ACCEPTED)
        })
        .collect();
    accepted
        .sort_by_key(|&r| std::cmp::Reverse((plan.details.get(r as usize).map_or(0, |d| d.accepted_ms), r)));
    let mut given_up = vec![false; n as usize];
    for r in accepted {
        if fits(view, &atoms, &given_up) {
            break;
        }
        given_up[r as usize] = true;
        out.reject_reservation(r, REJECT_REPLANNED);
    }
    Ok(())
}

/// `PastChanged`: restates every accepted reservation that has started without its past.
fn forget_the_past(view: &View<'_>, out: &mut Decisions) {
    let now = view.now_ms;
    for (r, detail) in view.plan.details.iter().enumerate() {
        let pieces = view.plan.allocation(r);
        let accepted = view.reservations.get(r).is_some_and(|x| x.state == GANTRY_RESERVATION_ACCEPTED);
        let planned_anew = out.as_slice().iter().any(|d| d.subject as usize == r);
        if !accepted || planned_anew || !pieces.iter().any(|p| p.start_ms < now) || detail.allocation.len == 0
        {
            continue;
        }
        let kept: Vec<GantryAllocation> = pieces
            .iter()
            .filter(|p| p.end_ms > now)
            .map(|p| GantryAllocation { start_ms: p.start_ms.max(now), ..*p })
            .collect();
        out.plan_reservation(r as u32, kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_rdl::{Window, parse_text};
    use gantry_sdk::PlanView;
    use gantry_sdk::testkit::ViewBuilder;

    /// A plan of reservations as a host lays it out (the SDK's test kit owns the records).
    struct Plan(ViewBuilder);

    impl Default for Plan {
        /// No reservation yet, in a plan of 10 cores.
        fn default() -> Self {
            let mut b = ViewBuilder::new(GANTRY_HOOK_RESERVE);
            b.plan.queue = 0;
            b.plan.capacity = GantryResources::new(10_000, 1 << 40, 0);
            b.plan.step_ms = 1000;
            b.plan.horizon_ms = 1 << 40;
            Plan(b)
        }
    }

    impl Plan {
        /// Adds `text` within `[arrival, deadline)`, accepted at `accepted_ms` with `pieces`
        /// (NEW when `accepted_ms` is 0); returns its index.
        fn add(
            &mut self,
            text: &str,
            arrival: u64,
            deadline: u64,
            accepted_ms: u64,
            pieces: &[(u32, u64, u64, u64)],
        ) -> u32 {
            let inner = parse_text(text).expect("rdl");
            let expr = Expr::Window(Window { start_ms: arrival, end_ms: deadline, inner: Box::new(inner) });
            let b = &mut self.0;
            let definition = gantry_rdl::abi::push_nodes(&expr, &mut b.plan.rdl_nodes).expect("nodes");
            let pieces: Vec<GantryAllocation> = pieces
                .iter()
                .map(|&(atom, start_ms, end_ms, bundles)| GantryAllocation {
                    reservation: 0,
                    atom,
                    start_ms,
                    end_ms,
                    bundles,
                })
                .collect();
            let state = if accepted_ms > 0 { GANTRY_RESERVATION_ACCEPTED } else { GANTRY_RESERVATION_NEW };
            let id = b.reservations.len() as u64 + 1;
            b.reservation(id, definition, expr.atoms().len() as u32)
                .window(arrival, deadline)
                .state(state)
                .accepted_ms(accepted_ms)
                .allocation(&pieces)
                .index()
        }

        /// A reserve view at `now`.
        fn view(&self, now: u64, cause: u32, subject: u32) -> View<'_> {
            let view = self.0.view();
            View { now_ms: now, plan: PlanView { cause, subject, ..view.plan }, ..view }
        }
    }

    fn answer(plan: &Plan, now: u64, cause: u32, subject: u32, spoil: Spoil) -> Decisions {
        let mut out = Decisions::new();
        reserve(&plan.view(now, cause, subject), spoil, &mut out).expect("reserve");
        out
    }

    fn pieces(d: &Decisions) -> Vec<(u32, u64, u64, u64)> {
        d.allocations().iter().map(|p| (p.atom, p.start_ms, p.end_ms, p.bundles)).collect()
    }

    /// Two 1-core atoms in order, the first up to 4 bundles (2 s of work), the second a gang of
    /// 2 (8 s, lease 3 s), after an accepted 6-core piece that ends at 5 s.
    fn two_atoms() -> (Plan, u32) {
        let mut plan = Plan::default();
        plan.add("atom(1c, 1, 6, 1s, 6s)", 0, 100_000, 1, &[(0, 1000, 5000, 6)]);
        let s = plan.add("order(atom(1c, 1, 4, 1ms, 2s), atom(1c, 2, 2, 3s, 8s))", 0, 100_000, 0, &[]);
        (plan, s)
    }

    #[test]
    fn sane_admission_lays_atoms_after_everything_else() {
        let (plan, s) = two_atoms();
        let out = answer(&plan, 2000, GANTRY_RESERVE_ADMIT, s, Spoil::None);
        assert_eq!(out.as_slice().len(), 1);
        assert_eq!(
            (out.as_slice()[0].kind, out.as_slice()[0].subject),
            (GANTRY_DECISION_PLAN_RESERVATION, s)
        );
        assert_eq!(pieces(&out), vec![(0, 5000, 5500, 4), (1, 5500, 9500, 2)]);
        assert!(out.allocations().iter().all(|p| p.reservation == s));
    }

    #[test]
    fn each_spoil_breaks_its_rule() {
        let (plan, s) = two_atoms();
        let spoilt = |spoil| pieces(&answer(&plan, 2000, GANTRY_RESERVE_ADMIT, s, spoil));
        assert_eq!(
            spoilt(Spoil::OverCapacity),
            vec![(0, 2000, 2500, 4), (1, 2500, 6500, 2)],
            "over the 6 cores held"
        );
        assert_eq!(spoilt(Spoil::OutsideWindow), vec![(0, 100_000, 100_500, 4), (1, 100_500, 104_500, 2)]);
        assert_eq!(spoilt(Spoil::BrokenOrder), vec![(0, 5000, 5500, 4), (1, 5000, 9000, 2)]);
        assert_eq!(spoilt(Spoil::GangSize), vec![(0, 5000, 5400, 5), (1, 5400, 13_400, 1)]);
        assert_eq!(spoilt(Spoil::Flood).len(), 2 + FLOOD_PIECES);
        let bad = spoilt(Spoil::BadAllocation);
        assert_eq!((bad.len(), bad[2]), (3, (2 + 5, 5000, 5500, 4)));
    }

    #[test]
    fn too_big_and_no_room_are_rejected() {
        let mut plan = Plan::default();
        let big = plan.add("atom(11c, 1, 1, 1s, 1s)", 0, 100_000, 0, &[]);
        let late = plan.add("atom(1c, 1, 1, 1s, 200s)", 0, 100_000, 0, &[]);
        for (r, reason) in [(big, REJECT_TOO_BIG), (late, REJECT_NO_ROOM)] {
            let out = answer(&plan, 0, GANTRY_RESERVE_ADMIT, r, Spoil::None);
            let d = out.as_slice()[0];
            assert_eq!((d.kind, d.subject, d.reason), (GANTRY_DECISION_REJECT_RESERVATION, r, reason));
            assert!(out.allocations().is_empty());
        }
    }

    #[test]
    fn replan_gives_up_the_newest_until_the_rest_fits() {
        let mut plan = Plan::default();
        plan.add("atom(1c, 1, 6, 1s, 6s)", 0, 100_000, 1, &[(0, 0, 10_000, 6)]);
        plan.add("atom(1c, 1, 3, 1s, 3s)", 0, 100_000, 2, &[(0, 0, 10_000, 3)]);
        let new = plan.add("atom(1c, 1, 3, 1s, 3s)", 0, 100_000, 3, &[(0, 0, 10_000, 3)]);
        let out = answer(&plan, 5000, GANTRY_RESERVE_REPLAN, GANTRY_NONE, Spoil::None);
        let rejected: Vec<u32> = out.as_slice().iter().map(|d| d.subject).collect();
        assert_eq!(rejected, vec![new], "12 cores on 10: giving up the newest is enough");
        assert!(out.as_slice().iter().all(|d| d.kind == GANTRY_DECISION_REJECT_RESERVATION));
        assert!(answer(&plan, 5000, GANTRY_RESERVE_OPTIMIZE, GANTRY_NONE, Spoil::None).is_empty());
    }

    #[test]
    fn past_changed_restates_started_reservations_without_their_past() {
        let mut plan = Plan::default();
        let started =
            plan.add("atom(1c, 1, 2, 1s, 8s)", 0, 100_000, 1, &[(0, 0, 2000, 2), (0, 3000, 5000, 2)]);
        plan.add("atom(1c, 1, 2, 1s, 4s)", 0, 100_000, 1, &[(0, 6000, 8000, 2)]);
        let out = answer(&plan, 4000, GANTRY_RESERVE_OPTIMIZE, GANTRY_NONE, Spoil::PastChanged);
        assert_eq!(out.as_slice().len(), 1);
        assert_eq!(
            (out.as_slice()[0].kind, out.as_slice()[0].subject),
            (GANTRY_DECISION_PLAN_RESERVATION, started)
        );
        assert_eq!(pieces(&out), vec![(0, 4000, 5000, 2)]);
    }
}
