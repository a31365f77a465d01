//! The plugin's mirror of the host's plan: a [`Plan`] holding every accepted allocation the view
//! shows, kept in step with the view cheaply.
//!
//! **Time.** The plan covers two horizons (`plan.horizon_ms`, the farthest a deadline lies after
//! its submission) from an origin on a step boundary (`plan.step_ms`, the host's follower step),
//! and is rebuilt at a new origin once `now` has passed the first horizon, so a deadline always
//! lies inside it (as the engine's linked-in book did). Expressions are moved to plan time with
//! [`Mirror::plan_expr`]: windows start no earlier than now; pieces come back to engine time by
//! adding the origin. A piece `[a, b)` of the view holds plan steps `[⌊a⌋, ⌈b⌉)`: a piece cut
//! inside a step holds the whole step (conservative).
//!
//! **Keeping in step.** The host changes an accepted allocation only by applying an answer of
//! this plugin; on its own it only removes reservations (deletion, expiry, its built-in replan
//! after a refused REPLAN answer, a rejected ADMIT) and, after a restart, restores them into a new
//! instance. So each call checks, in one pass over the view's reservation records (not their
//! pieces) and without allocating:
//!
//! - **membership**: the wrapping sum of `mix(id)` and the count over the view's accepted
//!   reservations whose deadline has not passed, against the mirror's (kept as it changes);
//! - **the previous call's answers**: each reservation the plugin planned in its previous call
//!   (the *unconfirmed* ones, usually one) must show exactly that allocation — a 64-bit
//!   fingerprint of its pieces in canonical form (sorted by atom then start, adjacent equal
//!   pieces merged), so a host that splits or reorders pieces still matches.
//!
//! Only when one of them differs (the host refused an answer, gave something up, a reservation
//! was deleted, a restart) does [`Mirror::sync`] compare every reservation's fingerprint and redo
//! those that differ. Reservations whose deadline has passed are left out on both sides, so
//! expiry costs nothing either. [`Mirror::generation`] counts changes of the plan from now on,
//! for work done on a snapshot (the background optimiser).

use std::collections::{BTreeSet, HashMap};

use gantry_rdl::{Expr, Window};
use gantry_sdk::abi::*;
use gantry_sdk::{PluginError, View};

use crate::agents::Allocation;
use crate::plan::{self, Piece, Plan};

/// The step used when the host gives no hint: one second.
pub const DEFAULT_STEP_MS: u64 = 1_000;
/// The horizon used when the host gives none: a day.
pub const DEFAULT_HORIZON_MS: u64 = 24 * 3_600_000;
/// Most steps the plan may have (two horizons): about 600 MB of trees.
pub const MAX_STEPS: u64 = 4_000_000;

const K: [u64; 6] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
];

/// The high and low halves of a 128-bit product folded together: a cheap, well-mixing hash step.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a).wrapping_mul(u128::from(b));
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline(always)]
fn piece_hash(p: &GantryAllocation) -> u64 {
    fold(p.start_ms ^ K[0], p.end_ms ^ K[1]) ^ fold(p.bundles ^ K[2], u64::from(p.atom) ^ K[3])
}

/// The fingerprint of an allocation, as if in canonical form: `pieces` sorted by atom then start
/// (the view's order) with adjacent pieces of one atom and height merged on the way. The
/// `reservation` field (an index, valid for one call) is ignored.
#[inline]
pub fn fingerprint(pieces: &[GantryAllocation]) -> u64 {
    let mut h = K[4];
    let mut it = pieces.iter();
    let Some(first) = it.next() else { return h };
    let mut cur = *first;
    for p in it {
        if p.atom == cur.atom && p.start_ms == cur.end_ms && p.bundles == cur.bundles {
            cur.end_ms = p.end_ms;
        } else {
            h = h.wrapping_add(piece_hash(&cur));
            cur = *p;
        }
    }
    h.wrapping_add(piece_hash(&cur))
}

/// One reservation's term in the membership sums.
#[inline(always)]
fn term(id: u64) -> u64 {
    fold(id ^ K[5], K[0]).wrapping_add(id)
}

/// `pieces` in canonical form: sorted by atom then start, adjacent pieces of one atom and height
/// merged, `reservation` zero.
pub fn canonical(pieces: impl IntoIterator<Item = GantryAllocation>) -> Vec<GantryAllocation> {
    let mut v: Vec<GantryAllocation> =
        pieces.into_iter().map(|p| GantryAllocation { reservation: 0, ..p }).collect();
    v.sort_by_key(|p| (p.atom, p.start_ms, p.end_ms));
    let mut out: Vec<GantryAllocation> = Vec::with_capacity(v.len());
    for p in v {
        match out.last_mut() {
            Some(l) if l.atom == p.atom && l.end_ms == p.start_ms && l.bundles == p.bundles => {
                l.end_ms = p.end_ms
            }
            _ => out.push(p),
        }
    }
    out
}

/// Whether reservation `i` of the view counts: accepted, deadline not passed.
#[inline(always)]
fn counted(r: &GantryReservation, d: &GantryReservationDetail, now: u64) -> bool {
    r.state == GANTRY_RESERVATION_ACCEPTED && d.deadline_ms > now
}

/// Reservation `i`'s definition, read back from the view's nodes (absolute times).
pub fn definition(view: &View<'_>, i: usize) -> Result<Expr, String> {
    let d = view.plan.details.get(i).ok_or_else(|| format!("reservation index {i} has no detail"))?;
    gantry_rdl::abi::from_nodes(view.plan.rdl_nodes, d.definition).map_err(|e| e.to_string())
}

/// An accepted reservation as the mirror holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Fingerprint of `pieces`.
    pub fp: u64,
    /// Its deadline, engine ms: it leaves the mirror then.
    pub deadline_ms: u64,
    /// Each atom's bundle, in pre-order.
    pub bundles: Vec<GantryResources>,
    /// Its allocation in canonical form, engine time.
    pub pieces: Vec<GantryAllocation>,
}

impl Entry {
    /// An entry for `pieces` (made canonical).
    pub fn new(deadline_ms: u64, bundles: Vec<GantryResources>, pieces: Vec<GantryAllocation>) -> Entry {
        let pieces = canonical(pieces);
        Entry { fp: fingerprint(&pieces), deadline_ms, bundles, pieces }
    }

    /// Reservation `i` of the view, with its definition (absolute times).
    pub fn from_view(view: &View<'_>, i: usize) -> Result<(Entry, Expr), PluginError> {
        let r = &view.reservations[i];
        let d = &view.plan.details[i];
        let expr = definition(view, i)
            .map_err(|e| PluginError::new(format!("rayon: reservation {}: its definition: {e}", r.id)))?;
        let bundles: Vec<GantryResources> = expr.atoms().iter().map(|a| a.bundle).collect();
        let pieces = View::range(view.plan.allocations, d.allocation);
        if let Some(p) = pieces.iter().find(|p| p.atom as usize >= bundles.len() || p.end_ms <= p.start_ms) {
            return Err(PluginError::new(format!(
                "rayon: reservation {}: an allocation piece (atom {}, [{}, {}) ms) does not fit its {} atoms",
                r.id,
                p.atom,
                p.start_ms,
                p.end_ms,
                bundles.len()
            )));
        }
        Ok((Entry::new(d.deadline_ms, bundles, pieces.to_vec()), expr))
    }
}

/// The plan and the accepted reservations in it. See the [module documentation](self).
#[derive(Debug)]
pub struct Mirror {
    /// The plan; reservation ids are the view's `GantryReservation::id`.
    pub plan: Plan,
    origin_ms: u64,
    horizon_ms: u64,
    /// The capacity set from the current step on.
    capacity: GantryResources,
    entries: HashMap<u64, Entry>,
    by_deadline: BTreeSet<(u64, u64)>,
    /// Membership sum over `entries`.
    sum: u64,
    /// Reservations whose entry comes from an answer the host has not shown back yet.
    unconfirmed: Vec<u64>,
    generation: u64,
}

impl Mirror {
    /// An empty plan of two horizons of `step_ms` steps from the step boundary at or before `now`.
    pub fn new(
        now: u64,
        step_ms: u64,
        horizon_ms: u64,
        capacity: GantryResources,
    ) -> Result<Mirror, PluginError> {
        let steps = horizon_ms.div_ceil(step_ms.max(1)).saturating_mul(2);
        if step_ms == 0 || steps == 0 || steps > MAX_STEPS {
            return Err(PluginError::new(format!(
                "rayon: a plan of two horizons of {horizon_ms} ms at {step_ms} ms steps has {steps} steps; \
                 at least 1 and at most {MAX_STEPS} are supported"
            )));
        }
        let plan = Plan::new(step_ms, steps as usize, &capacity)
            .map_err(|e| PluginError::new(format!("rayon: {e}")))?;
        Ok(Mirror {
            plan,
            origin_ms: now / step_ms * step_ms,
            horizon_ms,
            capacity,
            entries: HashMap::new(),
            by_deadline: BTreeSet::new(),
            sum: 0,
            unconfirmed: Vec::new(),
            generation: 0,
        })
    }

    /// Whether this plan serves a call at `now` with this step and horizon.
    pub fn serves(&self, now: u64, step_ms: u64, horizon_ms: u64) -> bool {
        self.plan.step_ms() == step_ms
            && self.horizon_ms == horizon_ms
            && now >= self.origin_ms
            && now < self.origin_ms.saturating_add(horizon_ms)
    }

    /// The plan's origin, engine ms.
    pub fn origin_ms(&self) -> u64 {
        self.origin_ms
    }

    /// The plan's end, engine ms.
    pub fn end_ms(&self) -> u64 {
        self.origin_ms.saturating_add(self.plan.horizon_ms())
    }

    /// The membership sum and the number of reservations.
    pub fn digest(&self) -> (u64, usize) {
        (self.sum, self.entries.len())
    }

    /// Counts every change of what the plan holds from now on (not expiry, which only drops the
    /// past): equal generations mean the same plan.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the view shows what the mirror holds: the same membership, and the previous
    /// call's answers applied as given (see the [module documentation](self)). One pass over the
    /// reservation records; pieces are read only for the unconfirmed reservations.
    pub fn in_step(&self, view: &View<'_>) -> bool {
        let now = view.now_ms;
        let mut sum = 0u64;
        let mut n = 0usize;
        let mut confirmed = 0usize;
        let few = self.unconfirmed.len() <= 8;
        let many: std::collections::HashSet<u64> =
            if few { Default::default() } else { self.unconfirmed.iter().copied().collect() };
        for (r, d) in view.reservations.iter().zip(view.plan.details) {
            if !counted(r, d, now) {
                continue;
            }
            sum = sum.wrapping_add(term(r.id));
            n += 1;
            let pending = if few { self.unconfirmed.contains(&r.id) } else { many.contains(&r.id) };
            if pending {
                let fp = fingerprint(View::range(view.plan.allocations, d.allocation));
                if self.entries.get(&r.id).is_none_or(|e| e.fp != fp) {
                    return false;
                }
                confirmed += 1;
            }
        }
        let mut ids = self.unconfirmed.clone();
        ids.sort_unstable();
        ids.dedup();
        let expected = ids.iter().filter(|id| self.entries.contains_key(id)).count();
        (sum, n) == self.digest() && confirmed == expected
    }

    /// The view has shown everything answered so far.
    pub fn confirmed(&mut self) {
        self.unconfirmed.clear();
    }

    /// The reservation with id `id`.
    pub fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// The reservations, by id.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.entries.iter().map(|(id, e)| (*id, e))
    }

    /// The number of reservations held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no reservation is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The step holding instant `ms` (0 before the origin).
    pub fn step_of(&self, ms: u64) -> usize {
        usize::try_from(ms.saturating_sub(self.origin_ms) / self.plan.step_ms()).unwrap_or(usize::MAX)
    }

    /// `ms` rounded down to a step boundary (not before the origin).
    pub fn floor_ms(&self, ms: u64) -> u64 {
        let step = self.plan.step_ms();
        self.origin_ms + ms.saturating_sub(self.origin_ms) / step * step
    }

    /// `ms` rounded up to a step boundary (not before the origin).
    pub fn ceil_ms(&self, ms: u64) -> u64 {
        let step = self.plan.step_ms();
        self.origin_ms.saturating_add(ms.saturating_sub(self.origin_ms).div_ceil(step).saturating_mul(step))
    }

    /// Drops the reservations whose deadline is at or before `now` (only their past goes, so the
    /// generation stays).
    pub fn expire(&mut self, now: u64) {
        while let Some(&(deadline, id)) = self.by_deadline.first() {
            if deadline > now {
                break;
            }
            let generation = self.generation;
            self.remove(id);
            self.generation = generation;
        }
    }

    /// Sets the capacity from the step holding `now` on, if it changed.
    pub fn set_capacity(&mut self, now: u64, capacity: GantryResources) {
        if capacity == self.capacity {
            return;
        }
        self.generation += 1;
        let from = self.step_of(now);
        let steps = self.plan.steps();
        if from < steps {
            // A valid range by construction.
            let _ = self.plan.set_capacity(from, steps, &capacity);
        }
        self.capacity = capacity;
    }

    /// The view's pieces (engine time) as plan steps: `[⌊a⌋, ⌈b⌉)` from the origin, clipped to
    /// the plan; pieces ending before the origin are dropped.
    pub fn to_steps(&self, pieces: &[GantryAllocation], bundles: &[GantryResources]) -> Vec<Piece> {
        let step = self.plan.step_ms();
        let origin = self.origin_ms;
        let steps = self.plan.steps() as u64;
        pieces
            .iter()
            .filter_map(|p| {
                let bundle = bundles.get(p.atom as usize)?;
                if p.end_ms <= origin {
                    return None;
                }
                let s = (p.start_ms.max(origin) - origin) / step;
                let e = (p.end_ms - origin).div_ceil(step).min(steps);
                (s < e).then(|| Piece {
                    start: s as usize,
                    end: e as usize,
                    demand: plan::scale(&plan::vector(bundle), i64::try_from(p.bundles).unwrap_or(i64::MAX)),
                })
            })
            .collect()
    }

    /// Adds reservation `id` as the view shows it, pieces the plan does not hold yet (no room
    /// check: the host's word is the truth, even where it overcommits the plan).
    fn insert_seen(&mut self, id: u64, entry: Entry) {
        self.remove(id);
        let steps = self.to_steps(&entry.pieces, &entry.bundles);
        if !steps.is_empty() {
            // Ranges and signs are valid by construction; the id was just removed.
            let _ = self.plan.restore(id, steps);
        }
        self.keep(id, entry);
    }

    /// Puts in reservation `id` with the allocation an answer gives it, whose pieces the plan
    /// does not hold yet.
    pub fn insert(&mut self, id: u64, entry: Entry) {
        self.insert_seen(id, entry);
        self.unconfirmed.push(id);
    }

    /// Puts in reservation `id` with the allocation an answer gives it, which an admission
    /// agent has just put in the plan.
    pub fn record(&mut self, id: u64, entry: Entry) {
        self.keep(id, entry);
        self.unconfirmed.push(id);
    }

    fn keep(&mut self, id: u64, entry: Entry) {
        self.generation += 1;
        self.sum = self.sum.wrapping_add(term(id));
        self.by_deadline.insert((entry.deadline_ms, id));
        if let Some(old) = self.entries.insert(id, entry) {
            self.sum = self.sum.wrapping_sub(term(id));
            self.by_deadline.remove(&(old.deadline_ms, id));
        }
    }

    /// Takes reservation `id` out; returns its entry and the plan pieces it held (which
    /// [`Mirror::put_back`] restores exactly).
    pub fn remove(&mut self, id: u64) -> Option<(Entry, Vec<Piece>)> {
        let steps = self.plan.remove(id).unwrap_or_default();
        let entry = self.entries.remove(&id)?;
        self.generation += 1;
        self.sum = self.sum.wrapping_sub(term(id));
        self.by_deadline.remove(&(entry.deadline_ms, id));
        Some((entry, steps))
    }

    /// Undoes [`Mirror::remove`] (the entry is as the view shows it).
    pub fn put_back(&mut self, id: u64, entry: Entry, steps: Vec<Piece>) {
        if !steps.is_empty() {
            let _ = self.plan.restore(id, steps);
        }
        self.keep(id, entry);
    }

    /// Brings the mirror in step with the view, reservation by reservation: those that differ or
    /// are gone are taken out, those that are new or changed are put in as the view shows them.
    /// Returns how many reservations it took out or put in.
    pub fn sync(&mut self, view: &View<'_>) -> Result<usize, PluginError> {
        let now = view.now_ms;
        let mut seen: HashMap<u64, (usize, u64)> = HashMap::with_capacity(view.reservations.len());
        for (i, (r, d)) in view.reservations.iter().zip(view.plan.details).enumerate() {
            if counted(r, d, now) {
                let fp = fingerprint(View::range(view.plan.allocations, d.allocation));
                if seen.insert(r.id, (i, fp)).is_some() {
                    return Err(PluginError::new(format!(
                        "rayon: the view holds reservation {} twice",
                        r.id
                    )));
                }
            }
        }
        let stale: Vec<u64> = self
            .entries
            .iter()
            .filter(|(id, e)| seen.get(id).is_none_or(|&(_, fp)| fp != e.fp))
            .map(|(id, _)| *id)
            .collect();
        let mut changed = stale.len();
        for id in stale {
            self.remove(id);
        }
        let mut fresh: Vec<(u64, usize)> = seen
            .iter()
            .filter(|(id, _)| !self.entries.contains_key(id))
            .map(|(id, &(i, _))| (*id, i))
            .collect();
        fresh.sort_unstable();
        changed += fresh.len();
        for (id, i) in fresh {
            let (entry, _) = Entry::from_view(view, i)?;
            self.insert_seen(id, entry);
        }
        self.unconfirmed.clear();
        Ok(changed)
    }

    /// `abs` (engine time) in plan time, its windows starting no earlier than `now`, inside the
    /// plan.
    pub fn plan_expr(&self, abs: &Expr, now: u64) -> Expr {
        let origin = self.origin_ms;
        let from = now.max(origin);
        let inner = abs.map_times(&|t| t.max(from) - origin);
        Expr::Window(Window {
            start_ms: from - origin,
            end_ms: self.end_ms() - origin,
            inner: Box::new(inner),
        })
    }

    /// An agent's allocation (plan time) as pieces in engine time, canonical; `atom_of` maps the
    /// allocation's atoms to the definition's (`None`: left out).
    pub fn to_engine(
        &self,
        allocation: &Allocation,
        atom_of: impl Fn(usize) -> Option<u32>,
    ) -> Vec<GantryAllocation> {
        engine_pieces(self.origin_ms, allocation, atom_of)
    }
}

/// [`Mirror::to_engine`] for a plan whose origin is `origin`.
pub fn engine_pieces(
    origin: u64,
    allocation: &Allocation,
    atom_of: impl Fn(usize) -> Option<u32>,
) -> Vec<GantryAllocation> {
    canonical(allocation.atoms.iter().enumerate().flat_map(|(k, ivs)| {
        let atom = atom_of(k);
        ivs.iter().filter_map(move |iv| {
            Some(GantryAllocation {
                reservation: 0,
                atom: atom?,
                start_ms: origin + iv.start_ms,
                end_ms: origin + iv.end_ms,
                bundles: iv.bundles,
            })
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(atom: u32, start_ms: u64, end_ms: u64, bundles: u64) -> GantryAllocation {
        GantryAllocation { reservation: 7, atom, start_ms, end_ms, bundles }
    }

    #[test]
    fn fingerprints_see_through_splits_and_indexes_but_not_changes() {
        let a = [piece(0, 0, 10, 2), piece(0, 10, 20, 3), piece(1, 5, 9, 1)];
        let split = [piece(0, 0, 4, 2), piece(0, 4, 10, 2), piece(0, 10, 20, 3), piece(1, 5, 9, 1)];
        assert_eq!(fingerprint(&a), fingerprint(&split));
        assert_eq!(canonical(split), canonical(a));
        let mut other = a;
        other[0].reservation = 99;
        assert_eq!(fingerprint(&a), fingerprint(&other));
        // Heights swapped between two pieces: a linear checksum would miss it.
        let swapped = [piece(0, 0, 10, 3), piece(0, 10, 20, 2), piece(1, 5, 9, 1)];
        assert_ne!(fingerprint(&a), fingerprint(&swapped));
        let moved = [piece(0, 0, 10, 2), piece(0, 10, 20, 3), piece(1, 6, 10, 1)];
        assert_ne!(fingerprint(&a), fingerprint(&moved));
        let other_atom = [piece(0, 0, 10, 2), piece(0, 10, 20, 3), piece(0, 25, 29, 1)];
        assert_ne!(fingerprint(&a), fingerprint(&other_atom));
        assert_ne!(fingerprint(&[]), fingerprint(&a[..1]));
        assert_ne!(term(1), term(2));
    }
}
