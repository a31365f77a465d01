//! The reservation arrays of every hook's view (ABI 1.3, `View::plan`): one `GantryReservation`
//! and one `GantryReservationDetail` per reservation (parallel, same index), every definition as
//! `GantryRdlNode`s, every accepted allocation as `GantryAllocation`s. They live in
//! [`ClusterState`] next to the other records and change with the book, so a view borrows them
//! as it borrows the rest.
//!
//! Kept incrementally, so admitting one reservation costs the same at 10 and 10,000: a new or
//! changed definition or allocation is appended and the old block left unused, a removed
//! reservation's slot takes the last one's (the order of reservations in a view means nothing),
//! and the unused blocks are dropped in one pass once they are as large as the used ones.
//!
//! Every change in place (not an append) is noted, per policy, as the first index of the array
//! that changed since the view last built for that policy ([`ClusterState::view_changes`]), so
//! a host that copies each view (budgeted plugin calls) copies only what changed: an admission
//! appends, so its copy of the plan is a few hundred bytes, not the whole plan.

use std::sync::atomic::{AtomicU64, Ordering};

use gantry_rdl::Expr;
use gantry_sdk::abi::*;

use super::AtomInterval;
use crate::det_hash::IdMap;
use crate::error::EngineError;
use crate::policy::ViewChanges;
use crate::state::ClusterState;

/// Unused nodes or pieces below this many are never compacted.
const COMPACT_MIN: usize = 4096;

/// The tracked arrays' positions in [`Seen::from`].
const RESERVATIONS: usize = 0;
const DETAILS: usize = 1;
const NODES: usize = 2;
const PIECES: usize = 3;

/// Serial numbers of views, unique in the process (so a copy made for one engine can never be
/// taken for a copy of another's view).
static VIEW_SERIAL: AtomicU64 = AtomicU64::new(0);

/// The view last built for one policy, and what has changed since in each tracked array.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// 0: none built yet.
    serial: u64,
    /// Per tracked array, the first index that may differ from that view.
    from: [usize; 4],
}

/// What a reservation's record and detail say besides its definition and allocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) queue: u32,
    pub(crate) state: u32,
    pub(crate) arrival_ms: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) accepted_ms: u64,
    pub(crate) priority: i32,
}

/// The reservation side of the view, besides `ClusterState::reservations`.
#[derive(Debug, Clone)]
pub(crate) struct PlanArrays {
    /// The plan queue's index, or `GANTRY_NONE`.
    pub(crate) queue: u32,
    /// What all allocations must fit within from now on.
    pub(crate) capacity: GantryResources,
    pub(crate) step_ms: u64,
    pub(crate) horizon_ms: u64,
    /// Parallel to `ClusterState::reservations`.
    pub(crate) details: Vec<GantryReservationDetail>,
    pub(crate) nodes: Vec<GantryRdlNode>,
    pub(crate) allocations: Vec<GantryAllocation>,
    /// Parallel to `details`: each definition's block of nodes (root first).
    blocks: Vec<GantryRange>,
    /// Reservation id → index.
    index: IdMap<u32>,
    unused_nodes: usize,
    unused_pieces: usize,
    /// By policy slot.
    seen: Vec<Seen>,
}

impl Default for PlanArrays {
    fn default() -> Self {
        PlanArrays {
            queue: GANTRY_NONE,
            capacity: GantryResources::default(),
            step_ms: 0,
            horizon_ms: 0,
            details: Vec::new(),
            nodes: Vec::new(),
            allocations: Vec::new(),
            blocks: Vec::new(),
            index: IdMap::default(),
            unused_nodes: 0,
            unused_pieces: 0,
            seen: Vec::new(),
        }
    }
}

impl PlanArrays {
    /// The view index of reservation `id`.
    pub(crate) fn index_of(&self, id: u64) -> Option<u32> {
        self.index.get(&id).copied()
    }

    /// Notes that tracked array `array` may differ from index `at` on (it changed there, or
    /// was cut there), for every policy's next view.
    fn touch(&mut self, array: usize, at: usize) {
        for s in &mut self.seen {
            s.from[array] = s.from[array].min(at);
        }
    }
}

fn len32(n: usize) -> Result<u32, EngineError> {
    u32::try_from(n).ok().filter(|&n| n != GANTRY_NONE).ok_or_else(|| EngineError::Invalid {
        what: "reservation",
        reason: "the plan holds more than the view can index".into(),
    })
}

impl ClusterState {
    /// What the view about to be built for the policy in `slot` shares with the previous one
    /// built for it; changes count from this view on.
    pub(crate) fn view_changes(&mut self, slot: usize) -> ViewChanges {
        let serial = VIEW_SERIAL.fetch_add(1, Ordering::Relaxed) + 1;
        let lens = [
            self.reservations.len(),
            self.plan.details.len(),
            self.plan.nodes.len(),
            self.plan.allocations.len(),
        ];
        let seen = &mut self.plan.seen;
        if seen.len() <= slot {
            seen.resize(slot + 1, Seen::default());
        }
        let old = std::mem::replace(&mut seen[slot], Seen { serial, from: lens });
        ViewChanges {
            serial,
            previous: old.serial,
            reservations_from: old.from[RESERVATIONS],
            details_from: old.from[DETAILS],
            rdl_nodes_from: old.from[NODES],
            allocations_from: old.from[PIECES],
        }
    }

    /// Adds a reservation with `definition` (engine time) and no allocation; returns its index.
    pub(crate) fn plan_insert(&mut self, e: &Entry, definition: &Expr) -> Result<u32, EngineError> {
        let at = len32(self.reservations.len())?;
        let (root, block) = self.push_definition(definition)?;
        self.reservations.push(GantryReservation {
            id: e.id,
            queue: e.queue,
            state: e.state,
            start_ms: e.arrival_ms,
            end_ms: e.deadline_ms,
            resources: GantryResources::default(),
        });
        self.plan.details.push(GantryReservationDetail {
            definition: root,
            atoms: len32(definition.atoms().len())?,
            arrival_ms: e.arrival_ms,
            deadline_ms: e.deadline_ms,
            accepted_ms: e.accepted_ms,
            priority: e.priority,
            reserved: 0,
            allocation: GantryRange::default(),
        });
        self.plan.blocks.push(block);
        self.plan.index.insert(e.id, at);
        Ok(at)
    }

    fn push_definition(&mut self, definition: &Expr) -> Result<(u32, GantryRange), EngineError> {
        let start = self.plan.nodes.len();
        let root = gantry_rdl::abi::push_nodes(definition, &mut self.plan.nodes).map_err(|e| {
            self.plan.nodes.truncate(start);
            self.plan.touch(NODES, start);
            EngineError::Invalid { what: "reservation definition", reason: e.to_string() }
        })?;
        let len = len32(self.plan.nodes.len() - start)?;
        Ok((root, GantryRange { start: len32(start)?, len }))
    }

    /// Sets what reservation `id`'s record says besides its definition and allocation.
    pub(crate) fn plan_set_entry(&mut self, e: &Entry) {
        let Some(i) = self.plan.index_of(e.id) else { return };
        self.plan.touch(RESERVATIONS, i as usize);
        self.plan.touch(DETAILS, i as usize);
        let r = &mut self.reservations[i as usize];
        r.queue = e.queue;
        r.state = e.state;
        r.start_ms = e.arrival_ms;
        r.end_ms = e.deadline_ms;
        let d = &mut self.plan.details[i as usize];
        d.arrival_ms = e.arrival_ms;
        d.deadline_ms = e.deadline_ms;
        d.accepted_ms = e.accepted_ms;
        d.priority = e.priority;
    }

    /// Replaces reservation `id`'s definition in the view.
    pub(crate) fn plan_set_definition(&mut self, id: u64, definition: &Expr) -> Result<(), EngineError> {
        let Some(i) = self.plan.index_of(id) else { return Ok(()) };
        let atoms = len32(definition.atoms().len())?;
        let (root, block) = self.push_definition(definition)?;
        let i = i as usize;
        self.plan.touch(DETAILS, i);
        self.plan.unused_nodes += self.plan.blocks[i].len as usize;
        self.plan.blocks[i] = block;
        self.plan.details[i].definition = root;
        self.plan.details[i].atoms = atoms;
        self.plan_compact();
        Ok(())
    }

    /// Replaces reservation `id`'s allocation in the view (`allocation` sorted by atom, then
    /// start); `peak` is the most it holds at once.
    pub(crate) fn plan_set_allocation(
        &mut self,
        id: u64,
        allocation: &[AtomInterval],
        peak: GantryResources,
    ) {
        let Some(i) = self.plan.index_of(id) else { return };
        self.plan.touch(RESERVATIONS, i as usize);
        self.plan.touch(DETAILS, i as usize);
        let start = self.plan.allocations.len();
        self.plan.allocations.extend(allocation.iter().map(|p| GantryAllocation {
            reservation: i,
            atom: p.atom,
            start_ms: p.start_ms,
            end_ms: p.end_ms,
            bundles: p.bundles,
        }));
        let d = &mut self.plan.details[i as usize];
        self.plan.unused_pieces += d.allocation.len as usize;
        d.allocation = GantryRange {
            start: u32::try_from(start).unwrap_or(GANTRY_NONE),
            len: u32::try_from(allocation.len()).unwrap_or(0),
        };
        self.reservations[i as usize].resources = peak;
        self.plan_compact();
    }

    /// Takes reservation `id` out of the view; the last reservation takes its index.
    pub(crate) fn plan_remove(&mut self, id: u64) {
        let Some(i) = self.plan.index.remove(&id) else { return };
        let i = i as usize;
        self.plan.touch(RESERVATIONS, i);
        self.plan.touch(DETAILS, i);
        self.plan.unused_nodes += self.plan.blocks[i].len as usize;
        self.plan.unused_pieces += self.plan.details[i].allocation.len as usize;
        self.reservations.swap_remove(i);
        self.plan.details.swap_remove(i);
        self.plan.blocks.swap_remove(i);
        if let Some(moved) = self.reservations.get(i) {
            self.plan.index.insert(moved.id, i as u32);
            let range = self.plan.details[i].allocation;
            let (s, l) = (range.start as usize, range.len as usize);
            self.plan.touch(PIECES, s);
            for p in self.plan.allocations.get_mut(s..s + l).unwrap_or_default() {
                p.reservation = i as u32;
            }
        }
        self.plan_compact();
    }

    /// Drops unused nodes and pieces once they are as many as the used ones.
    fn plan_compact(&mut self) {
        let p = &mut self.plan;
        if p.unused_nodes >= COMPACT_MIN && p.unused_nodes * 2 >= p.nodes.len() {
            p.touch(NODES, 0);
            p.touch(DETAILS, 0);
            let mut nodes = Vec::with_capacity(p.nodes.len() - p.unused_nodes);
            for (block, d) in p.blocks.iter_mut().zip(&mut p.details) {
                let old = block.start as usize;
                let new = nodes.len() as u32;
                for n in &p.nodes[old..old + block.len as usize] {
                    let mut n = *n;
                    if n.children.len > 0 {
                        n.children.start = n.children.start - block.start + new;
                    }
                    nodes.push(n);
                }
                d.definition = d.definition - block.start + new;
                block.start = new;
            }
            p.nodes = nodes;
            p.unused_nodes = 0;
        }
        if p.unused_pieces >= COMPACT_MIN && p.unused_pieces * 2 >= p.allocations.len() {
            p.touch(PIECES, 0);
            p.touch(DETAILS, 0);
            let mut pieces = Vec::with_capacity(p.allocations.len() - p.unused_pieces);
            for d in &mut p.details {
                let old = d.allocation.start as usize;
                let new = pieces.len() as u32;
                pieces.extend_from_slice(&p.allocations[old..old + d.allocation.len as usize]);
                d.allocation.start = new;
            }
            p.allocations = pieces;
            p.unused_pieces = 0;
        }
    }

    /// Checks the arrays against themselves: parallel lengths, the index, every definition
    /// readable back, every piece naming its own reservation. Used by tests.
    pub(crate) fn check_plan_arrays(&self) -> Result<(), String> {
        let p = &self.plan;
        if p.details.len() != self.reservations.len() || p.blocks.len() != self.reservations.len() {
            return Err("plan details are not parallel to the reservations".into());
        }
        for (i, r) in self.reservations.iter().enumerate() {
            if p.index.get(&r.id) != Some(&(i as u32)) {
                return Err(format!("reservation {} is not at its index {i}", r.id));
            }
            let d = &p.details[i];
            gantry_rdl::abi::from_nodes(&p.nodes, d.definition)
                .map_err(|e| format!("reservation {}: {e}", r.id))?;
            let (s, l) = (d.allocation.start as usize, d.allocation.len as usize);
            let pieces = p.allocations.get(s..s + l).ok_or(format!("reservation {}: bad range", r.id))?;
            if pieces.iter().any(|x| x.reservation != i as u32) {
                return Err(format!("reservation {}: a piece names another reservation", r.id));
            }
            if !pieces.windows(2).all(|w| (w[0].atom, w[0].start_ms) <= (w[1].atom, w[1].start_ms)) {
                return Err(format!("reservation {}: pieces not sorted by atom and start", r.id));
            }
        }
        if p.index.len() != self.reservations.len() {
            return Err("the plan's index holds ids no reservation has".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64) -> Entry {
        Entry {
            id,
            queue: 0,
            state: GANTRY_RESERVATION_ACCEPTED,
            arrival_ms: 0,
            deadline_ms: 100,
            accepted_ms: 1,
            priority: 0,
        }
    }

    #[test]
    fn removals_and_changes_compact_and_keep_every_reservation_readable() {
        let e =
            gantry_rdl::parse_text("order(atom(1c, 1, 2, 1s, 2s), window(0s, 9s, atom(1gpu, 1, 1, 1s, 1s)))")
                .expect("rdl");
        let mut s = ClusterState::default();
        for id in 1..=3_000u64 {
            s.plan_insert(&entry(id), &e).expect("insert");
            let a = [AtomInterval { atom: 0, start_ms: id, end_ms: id + 5, bundles: 1 }];
            s.plan_set_allocation(id, &a, GantryResources::default());
            s.plan_set_allocation(id, &a, GantryResources::default());
        }
        // Every other one leaves, the rest get a new definition: unused blocks pile up past the
        // threshold and are dropped.
        for id in (1..=3_000u64).step_by(2) {
            s.plan_remove(id);
        }
        for id in (2..=3_000u64).step_by(2) {
            s.plan_set_definition(id, &e).expect("definition");
        }
        s.check_plan_arrays().expect("consistent");
        assert_eq!(s.reservations.len(), 1_500);
        assert!(s.plan.nodes.len() < 2 * 1_500 * 5, "unused nodes dropped: {}", s.plan.nodes.len());
        assert!(s.plan.allocations.len() < 2 * 1_500, "unused pieces dropped: {}", s.plan.allocations.len());
        for (i, r) in s.reservations.iter().enumerate() {
            let d = s.plan.details[i];
            let p = s.plan.allocations[d.allocation.start as usize];
            assert_eq!((p.reservation, p.start_ms), (i as u32, r.id));
            assert_eq!(gantry_rdl::abi::from_nodes(&s.plan.nodes, d.definition).expect("reads"), e);
        }
    }

    /// A policy's copy of the plan, kept up to date from `view_changes` alone, as the plugin
    /// host's budgeted calls keep theirs.
    #[derive(Default)]
    struct Copy {
        serial: u64,
        reservations: Vec<GantryReservation>,
        details: Vec<GantryReservationDetail>,
        nodes: Vec<GantryRdlNode>,
        pieces: Vec<GantryAllocation>,
    }

    fn tail<T: Clone>(to: &mut Vec<T>, from: &[T], unchanged: usize) -> usize {
        let keep = unchanged.min(to.len()).min(from.len());
        to.truncate(keep);
        to.extend_from_slice(&from[keep..]);
        from.len() - keep
    }

    impl Copy {
        /// Brings the copy up to date for the next view of `slot`; returns the elements copied.
        fn update(&mut self, s: &mut ClusterState, slot: usize) -> usize {
            let c = s.view_changes(slot);
            let whole = c.previous == 0 || c.previous != self.serial;
            let from = |n: usize| if whole { 0 } else { n };
            self.serial = c.serial;
            tail(&mut self.reservations, &s.reservations, from(c.reservations_from))
                + tail(&mut self.details, &s.plan.details, from(c.details_from))
                + tail(&mut self.nodes, &s.plan.nodes, from(c.rdl_nodes_from))
                + tail(&mut self.pieces, &s.plan.allocations, from(c.allocations_from))
        }

        fn same(&self, s: &ClusterState) -> bool {
            self.reservations == s.reservations
                && self.details == s.plan.details
                && self.nodes == s.plan.nodes
                && self.pieces == s.plan.allocations
        }
    }

    #[test]
    fn a_copy_updated_from_the_changes_alone_is_always_the_plan() {
        let e =
            gantry_rdl::parse_text("order(atom(1c, 1, 2, 1s, 2s), window(0s, 9s, atom(1gpu, 1, 1, 1s, 1s)))")
                .expect("rdl");
        let mut s = ClusterState::default();
        let mut rng = gantry_sdk::rng::SplitMix64::new(5);
        // Slot 0 is shown every view, slot 1 one in seven, slot 2 loses its copy now and then
        // (a call abandoned past its budget): each must see the arrays exactly.
        let mut copies = [Copy::default(), Copy::default(), Copy::default()];
        let (mut live, mut next_id) = (Vec::<u64>::new(), 1u64);
        let (mut admissions, mut compactions) = (0, 0);
        for step in 0..12_000u64 {
            let pick = |rng: &mut gantry_sdk::rng::SplitMix64, n: usize| (rng.next_u64() % n as u64) as usize;
            let unused = (s.plan.unused_nodes, s.plan.unused_pieces);
            let mut admitted = false;
            match rng.next_u64() % 10 {
                // Mostly admissions: a new reservation, then its allocation or its removal.
                0..=5 => {
                    let id = next_id;
                    next_id += 1;
                    s.plan_insert(&entry(id), &e).expect("insert");
                    if rng.next_u64() % 3 == 0 {
                        s.plan_remove(id);
                    } else {
                        let a = [AtomInterval { atom: 0, start_ms: step, end_ms: step + 5, bundles: 1 }];
                        s.plan_set_allocation(id, &a, GantryResources::default());
                        s.plan_set_entry(&entry(id));
                        live.push(id);
                        admitted = true;
                    }
                }
                6 if !live.is_empty() => {
                    let id = live.swap_remove(pick(&mut rng, live.len()));
                    s.plan_remove(id);
                }
                7 if !live.is_empty() => {
                    let id = live[pick(&mut rng, live.len())];
                    s.plan_set_definition(id, &e).expect("definition");
                }
                8 if !live.is_empty() => {
                    let id = live[pick(&mut rng, live.len())];
                    let a = [
                        AtomInterval { atom: 0, start_ms: step, end_ms: step + 1, bundles: 2 },
                        AtomInterval { atom: 1, start_ms: step + 1, end_ms: step + 2, bundles: 1 },
                    ];
                    s.plan_set_allocation(id, &a, GantryResources::default());
                }
                _ => {}
            }
            let compacted = s.plan.unused_nodes < unused.0 || s.plan.unused_pieces < unused.1;
            compactions += usize::from(compacted);
            if step % 500 == 499 {
                copies[2] = Copy::default();
            }
            for (k, c) in copies.iter_mut().enumerate() {
                if k != 1 || step % 7 == 0 {
                    let n = c.update(&mut s, k);
                    assert!(c.same(&s), "slot {k} differs after step {step}");
                    if k == 0 && admitted && !compacted {
                        // An admission alone: its record, detail, 4 nodes and 1 piece.
                        assert_eq!(n, 7, "step {step}: an admission copied {n} elements");
                        admissions += 1;
                    }
                }
            }
        }
        s.check_plan_arrays().expect("consistent");
        assert!(admissions > 1_000 && compactions > 0, "{admissions} admissions, {compactions} compactions");
    }
}
