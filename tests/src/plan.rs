//! A reservation plan laid out as a host lays it out in a view (ABI 1.3): for calling `reserve`
//! plugins directly, without an engine.

use gantry_rdl::{Expr, Window, parse_text};
use gantry_sdk::abi::*;
use gantry_sdk::{PlanView, View};

/// Reservations with their definitions and accepted allocations, as a view's arrays.
#[derive(Debug, Default, Clone)]
pub struct PlanFixture {
    /// `View::reservations`.
    pub reservations: Vec<GantryReservation>,
    /// `PlanView::details`.
    pub details: Vec<GantryReservationDetail>,
    /// `PlanView::rdl_nodes`.
    pub nodes: Vec<GantryRdlNode>,
    /// `PlanView::allocations`.
    pub allocations: Vec<GantryAllocation>,
    /// `PlanView::capacity`.
    pub capacity: GantryResources,
}

/// A piece `(atom, start_ms, end_ms, bundles)`.
pub type Piece = (u32, u64, u64, u64);

impl PlanFixture {
    /// An empty plan of `cores` cores and 1 TiB.
    pub fn new(cores: u64) -> Self {
        PlanFixture { capacity: GantryResources::new(cores * 1000, 1 << 40, 0), ..Default::default() }
    }

    /// Adds the RDL `text` (the text form) within `[arrival, deadline)` — wrapped in that window,
    /// as the host does — accepted at `accepted_ms` with `pieces` (NEW when `accepted_ms` is 0,
    /// then `pieces` should be empty), and returns its index.
    pub fn add(
        &mut self,
        text: &str,
        arrival: u64,
        deadline: u64,
        accepted_ms: u64,
        pieces: &[Piece],
    ) -> u32 {
        let inner = parse_text(text).unwrap_or_else(|e| panic!("RDL {text:?}: {e}"));
        self.add_expr(inner, arrival, deadline, accepted_ms, pieces)
    }

    /// [`PlanFixture::add`] for an expression built in code.
    pub fn add_expr(
        &mut self,
        inner: Expr,
        arrival: u64,
        deadline: u64,
        accepted_ms: u64,
        pieces: &[Piece],
    ) -> u32 {
        let r = self.reservations.len() as u32;
        let expr = Expr::Window(Window { start_ms: arrival, end_ms: deadline, inner: Box::new(inner) });
        let definition = gantry_rdl::abi::push_nodes(&expr, &mut self.nodes).expect("nodes");
        let start = self.allocations.len() as u32;
        for &(atom, start_ms, end_ms, bundles) in pieces {
            self.allocations.push(GantryAllocation { reservation: r, atom, start_ms, end_ms, bundles });
        }
        let state = if accepted_ms > 0 { GANTRY_RESERVATION_ACCEPTED } else { GANTRY_RESERVATION_NEW };
        self.reservations.push(GantryReservation {
            id: u64::from(r) + 1,
            start_ms: arrival,
            end_ms: deadline,
            state,
            ..Default::default()
        });
        self.details.push(GantryReservationDetail {
            definition,
            atoms: expr.atoms().len() as u32,
            arrival_ms: arrival,
            deadline_ms: deadline,
            accepted_ms,
            allocation: GantryRange { start, len: pieces.len() as u32 },
            ..Default::default()
        });
        r
    }

    /// A `reserve` view of this plan at `now` for `cause` about `subject`.
    pub fn view(&self, now: u64, cause: u32, subject: u32) -> View<'_> {
        View {
            now_ms: now,
            cycle: 1,
            seed: 1,
            cluster: self.capacity,
            reservations: &self.reservations,
            plan: PlanView {
                cause,
                subject,
                queue: 0,
                capacity: self.capacity,
                step_ms: 1000,
                horizon_ms: 86_400_000,
                details: &self.details,
                rdl_nodes: &self.nodes,
                allocations: &self.allocations,
            },
            ..View::empty(GANTRY_HOOK_RESERVE)
        }
    }
}
