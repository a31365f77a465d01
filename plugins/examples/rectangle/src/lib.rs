//! The reservation planner of the SDK guide: a definition that is one atom in a window gets `h`
//! bundles (whole gangs of `g`) from the earliest instant at which they fit, for as long as its
//! work needs; anything else is rejected. No update, replan or optimisation: the host's
//! built-ins stand in for those.

use gantry_rdl::{Expr, abi::from_nodes};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

/// Reason code: the definition is more than one atom in a window.
pub const UNSUPPORTED: u32 = 1;
/// Reason code: no instant in the window has room for the rectangle.
pub const NO_ROOM: u32 = 2;

pub struct Rectangle;

impl Plugin for Rectangle {
    const NAME: &'static std::ffi::CStr = c"rectangle";
    const VERSION: &'static std::ffi::CStr = c"0.1.0";
    const HOOKS: Hooks = Hooks { reserve: true, ..Hooks::NONE };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Ok(Rectangle)
    }

    fn reserve(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let plan = &view.plan;
        if plan.cause != GANTRY_RESERVE_ADMIT {
            return Ok(()); // the host's built-ins handle updates and replans
        }
        let r = plan.subject;
        let detail = plan.details.get(r as usize).ok_or("the subject is out of range")?;
        let expr = from_nodes(plan.rdl_nodes, detail.definition).map_err(|e| e.to_string())?;
        let Expr::Window(w) = &expr else { return Err("the host wraps every definition in a window".into()) };
        let Expr::Atom(atom) = &*w.inner else {
            out.reject_reservation(r, UNSUPPORTED);
            return Ok(());
        };
        let bundles = u64::from(atom.max_parallel / atom.min_parallel * atom.min_parallel);
        let length = atom.work.div_ceil(bundles).max(atom.min_lease_ms);
        let need = atom.bundle.times(bundles as u32);
        let earliest = w.start_ms.max(view.now_ms);
        // Candidate starts: the earliest instant, and every instant at which room frees up.
        let mut starts: Vec<u64> =
            plan.allocations.iter().map(|p| p.end_ms).filter(|&t| t > earliest).collect();
        starts.push(earliest);
        starts.sort_unstable();
        for start in starts {
            let end = start.saturating_add(length);
            if end > w.end_ms {
                break;
            }
            // What the plan holds changes only where a piece starts: check `start` and those.
            let fits = std::iter::once(start)
                .chain(plan.allocations.iter().map(|p| p.start_ms).filter(|&t| start < t && t < end))
                .all(|t| plan.held_at(t).plus(&need).fits_in(&plan.capacity));
            if fits {
                let piece =
                    GantryAllocation { atom: 0, start_ms: start, end_ms: end, bundles, ..Default::default() };
                out.plan_reservation(r, [piece]);
                return Ok(());
            }
        }
        out.reject_reservation(r, NO_ROOM);
        Ok(())
    }
}

gantry_sdk::export_plugin!(Rectangle);
