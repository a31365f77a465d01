//! A pending request as the policies see it: a job of `want` containers with preferences and
//! expected run times.

use gantry_sdk::View;
use gantry_sdk::abi::{
    GANTRY_REQUEST_GANG, GANTRY_REQUEST_SAME_RACK_PREFERRED, GANTRY_REQUEST_SAME_RACK_REQUIRED, GantryRange,
    GantryRequest, GantryResources,
};

/// What a request wants of its nodes.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Hard node selector.
    pub selector: GantryRange,
    /// Preferred labels (where it runs fast).
    pub preferred: GantryRange,
    /// Its preference set's bit (see `PreferenceSets`), 0 without preferred labels.
    pub preference_bit: u64,
    /// Runs fast only when all containers share a rack.
    pub rack_preferred: bool,
    /// Must stay in one rack.
    pub rack_required: bool,
}

impl Shape {
    /// The shape of `req`, whose preference set has bit `bit`.
    pub fn of(req: &GantryRequest, bit: u64) -> Shape {
        Shape {
            selector: req.selector,
            preferred: req.preferred,
            preference_bit: bit,
            rack_preferred: req.flags & GANTRY_REQUEST_SAME_RACK_PREFERRED != 0,
            rack_required: req.flags & GANTRY_REQUEST_SAME_RACK_REQUIRED != 0,
        }
    }

    /// Whether the request has anything to prefer (else every placement runs fast).
    pub fn has_preferences(&self) -> bool {
        self.preferred.len != 0 || self.rack_preferred
    }
}

/// Expected run times on preferred resources and elsewhere, ms (`None` = not estimated).
pub fn durations(req: &GantryRequest) -> (Option<u64>, Option<u64>) {
    let fast = (req.expected_ms > 0).then_some(req.expected_ms);
    let slow = if req.slow_ms > 0 { Some(req.slow_ms.max(req.expected_ms)) } else { fast };
    (fast, slow)
}

/// One pending request to schedule.
#[derive(Debug, Clone)]
pub struct Job {
    /// Index in `view.requests`.
    pub request: u32,
    /// Index of its leaf queue.
    pub queue: u32,
    /// Containers still to place (a gang: all of them).
    pub want: u32,
    /// All or nothing.
    pub gang: bool,
    /// Size of each container.
    pub res: GantryResources,
    /// Its wishes.
    pub shape: Shape,
    /// Expected run time on preferred resources, ms.
    pub fast_ms: Option<u64>,
    /// Expected run time elsewhere, ms.
    pub slow_ms: Option<u64>,
    /// When it became pending, ms.
    pub submit_ms: u64,
    /// When it is killed if not finished (the request's deadline), ms.
    pub deadline_ms: Option<u64>,
    /// Utility is `horizon_end_ms − completion time`: the deadline, or submission + horizon.
    pub horizon_end_ms: u64,
    /// For a partly placed request that must stay in one rack: that rack's group.
    pub placed_rack: Option<u32>,
    /// Position in the engine's order (FCFS tie-break).
    pub position: usize,
}

impl Job {
    /// The job for pending request `r`, or `None` when it has nothing this plugin may place (a
    /// gang partly placed is the engine's to restart, not ours to finish).
    pub fn new(view: &View<'_>, r: u32, bit: u64, horizon_ms: u64, position: usize) -> Option<Job> {
        let req = view.requests.get(r as usize)?;
        let app = view.apps.get(req.app as usize)?;
        let gang = req.flags & GANTRY_REQUEST_GANG != 0;
        let want = req.count.saturating_sub(req.placed);
        if want == 0 || (gang && req.placed != 0) || req.resources.is_zero() {
            return None;
        }
        let (fast_ms, slow_ms) = durations(req);
        let deadline_ms = (req.deadline_ms > 0).then_some(req.deadline_ms);
        Some(Job {
            request: r,
            queue: app.queue,
            want,
            gang,
            res: req.resources,
            shape: Shape::of(req, bit),
            fast_ms,
            slow_ms,
            submit_ms: req.submit_ms,
            deadline_ms,
            horizon_end_ms: deadline_ms.unwrap_or(req.submit_ms.saturating_add(horizon_ms)),
            placed_rack: None,
            position,
        })
    }

    /// Expected run time on a placement that is (not) fast.
    pub fn run_ms(&self, fast: bool) -> Option<u64> {
        if fast { self.fast_ms } else { self.slow_ms }
    }
}
