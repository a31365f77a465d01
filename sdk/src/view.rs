//! A safe, borrowed view of the cluster: the Rust face of [`GantryView`].
//!
//! The engine builds a [`View`] from its own arrays without copying; the host turns it into a raw
//! [`GantryView`] for a shared library with [`View::to_raw`], and the SDK glue inside the library
//! turns it back with [`View::from_raw`]. Plugins only ever see `View`.

use crate::abi::*;

/// Why a raw view could not be turned into a [`View`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewError {
    /// The host's view struct is smaller than this SDK's.
    StructTooSmall {
        /// Size the host reported.
        got: u32,
        /// Size this SDK needs.
        need: u32,
    },
    /// The host speaks another major version.
    WrongMajor(u16),
    /// An array pointer was null (empty arrays have a non-null, dangling pointer).
    NullArray(&'static str),
}

impl core::fmt::Display for ViewError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ViewError::StructTooSmall { got, need } => {
                write!(f, "view struct_size {got} is smaller than {need}")
            }
            ViewError::WrongMajor(m) => write!(f, "view is ABI major {m}, plugin speaks 1"),
            ViewError::NullArray(name) => write!(f, "view array `{name}` has a null pointer"),
        }
    }
}

impl std::error::Error for ViewError {}

/// Everything a hook may look at during one call. Indexes between records are positions in these
/// slices and are valid for this call only; remember ids (`GantryApp::id`, …) across calls.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Which hook this view is for (`GANTRY_HOOK_*`).
    pub hook: u32,
    /// The engine's clock in ms.
    pub now_ms: u64,
    /// Scheduling cycle number.
    pub cycle: u64,
    /// Seed for this call's randomness.
    pub seed: u64,
    /// Total allocatable resources of schedulable nodes.
    pub cluster: GantryResources,
    /// String arena.
    pub strings: &'a [u8],
    /// Label records (node labels, selectors and preferences point here).
    pub labels: &'a [GantryLabel],
    /// Nodes.
    pub nodes: &'a [GantryNode],
    /// GPUs.
    pub gpus: &'a [GantryGpu],
    /// Queues.
    pub queues: &'a [GantryQueue],
    /// Live applications.
    pub apps: &'a [GantryApp],
    /// Requests of live applications.
    pub requests: &'a [GantryRequest],
    /// Live containers.
    pub containers: &'a [GantryContainer],
    /// Reservations.
    pub reservations: &'a [GantryReservation],
    /// Pending request indexes in scheduling order.
    pub pending: &'a [u32],
    /// ABI 1.1: what each node's agent last measured, parallel to `nodes`; empty when the host is
    /// 1.0 or keeps no measurements. A record with `sampled_ms == 0` was never sampled.
    pub node_usage: &'a [GantryNodeUsage],
    /// ABI 1.3: the reservation plan — why a `reserve` call is made, the plan's capacity, and
    /// every reservation's definition and accepted allocation. Empty from an older host.
    pub plan: PlanView<'a>,
}

/// The reservation side of a [`View`] (ABI 1.3). `details` is parallel to `View::reservations`;
/// a detail's `definition` indexes `rdl_nodes`, its `allocation` range `allocations`.
#[derive(Debug, Clone, Copy)]
pub struct PlanView<'a> {
    /// `GANTRY_RESERVE_*` in a `reserve` call, 0 otherwise.
    pub cause: u32,
    /// The reservation a `reserve` call is about (ADMIT, UPDATE), else `GANTRY_NONE`.
    pub subject: u32,
    /// Index of the plan queue, or `GANTRY_NONE`.
    pub queue: u32,
    /// What all allocations together must fit within at every instant from now on.
    pub capacity: GantryResources,
    /// The host's follower step, ms (a hint for a time grid).
    pub step_ms: u64,
    /// How far after its submission a deadline may lie, ms.
    pub horizon_ms: u64,
    /// Per reservation, parallel to `View::reservations`.
    pub details: &'a [GantryReservationDetail],
    /// Every reservation's definition nodes.
    pub rdl_nodes: &'a [GantryRdlNode],
    /// Every reservation's accepted allocation.
    pub allocations: &'a [GantryAllocation],
}

impl PlanView<'static> {
    /// No plan: no reservable queue, nothing reserved.
    pub const EMPTY: PlanView<'static> = PlanView {
        cause: 0,
        subject: GANTRY_NONE,
        queue: GANTRY_NONE,
        capacity: GantryResources::new(0, 0, 0),
        step_ms: 0,
        horizon_ms: 0,
        details: &[],
        rdl_nodes: &[],
        allocations: &[],
    };
}

impl Default for PlanView<'_> {
    /// No plan: no reservable queue, nothing reserved ([`PlanView::EMPTY`]).
    fn default() -> Self {
        PlanView::EMPTY
    }
}

impl<'a> PlanView<'a> {
    /// The children of a definition node; empty if its range is out of bounds.
    pub fn children(&self, node: &GantryRdlNode) -> &'a [GantryRdlNode] {
        View::range(self.rdl_nodes, node.children)
    }

    /// The root of reservation `index`'s definition, if the index and its detail are in range.
    pub fn definition(&self, index: usize) -> Option<&'a GantryRdlNode> {
        self.rdl_nodes.get(self.details.get(index)?.definition as usize)
    }

    /// Reservation `index`'s accepted allocation (empty while NEW or out of range).
    pub fn allocation(&self, index: usize) -> &'a [GantryAllocation] {
        self.details.get(index).map_or(&[], |d| View::range(self.allocations, d.allocation))
    }

    /// The node of atom `atom` (pre-order index) of reservation `index`'s definition, found by
    /// walking the definition (a planner that asks often should keep its own table).
    pub fn atom(&self, index: usize, atom: u32) -> Option<&'a GantryRdlNode> {
        let mut stack = vec![self.definition(index)?];
        // A well-formed definition has fewer nodes than the array; the bound stops a broken one.
        let mut budget = self.rdl_nodes.len();
        while let Some(node) = stack.pop() {
            if node.kind == GANTRY_RDL_ATOM && node.atom == atom {
                return Some(node);
            }
            budget = budget.checked_sub(1)?;
            stack.extend(self.children(node).iter().rev());
        }
        None
    }

    /// What every accepted allocation in the view holds together at instant `t`, ms: what a
    /// planner compares with [`PlanView::capacity`]. A scan of all pieces.
    pub fn held_at(&self, t: u64) -> GantryResources {
        let mut held = GantryResources::default();
        for (index, _) in self.details.iter().enumerate() {
            for piece in self.allocation(index).iter().filter(|p| p.start_ms <= t && t < p.end_ms) {
                if let Some(atom) = self.atom(index, piece.atom) {
                    let bundles = u32::try_from(piece.bundles).unwrap_or(u32::MAX);
                    held = held.plus(&atom.bundle.times(bundles));
                }
            }
        }
        held
    }
}

/// Turns a (pointer, length) pair of the raw view into a slice.
///
/// # Safety
/// `ptr` must be non-null and aligned, and point at `len` initialised `T`s that stay valid and
/// unmodified for `'a` (any non-null aligned pointer when `len == 0`).
#[inline(always)]
unsafe fn raw_slice<'a, T>(ptr: *const T, len: u64) -> &'a [T] {
    // SAFETY: the caller's promise; `len` fits in usize because ABI v1 is 64-bit only.
    unsafe { core::slice::from_raw_parts(ptr, len as usize) }
}

impl View<'static> {
    /// A view of nothing for `hook` (`GANTRY_HOOK_*`): every array empty, the clock, cycle and seed
    /// at 0, no plan. The base of a hand-built view in tests and harnesses:
    /// `View { reservations: &mine, plan, ..View::empty(GANTRY_HOOK_RESERVE) }`.
    pub const fn empty(hook: u32) -> View<'static> {
        View {
            hook,
            now_ms: 0,
            cycle: 0,
            seed: 0,
            cluster: GantryResources::new(0, 0, 0),
            strings: &[],
            labels: &[],
            nodes: &[],
            gpus: &[],
            queues: &[],
            apps: &[],
            requests: &[],
            containers: &[],
            reservations: &[],
            pending: &[],
            node_usage: &[],
            plan: PlanView::EMPTY,
        }
    }
}

impl<'a> View<'a> {
    /// Describes this view as a raw [`GantryView`] whose pointers borrow from `self`'s slices.
    /// The result must not outlive `'a`.
    #[inline]
    pub fn to_raw(&self) -> GantryView {
        GantryView {
            struct_size: core::mem::size_of::<GantryView>() as u32,
            abi_major: GANTRY_ABI_MAJOR,
            abi_minor: GANTRY_ABI_MINOR,
            hook: self.hook,
            reserved: 0,
            now_ms: self.now_ms,
            cycle: self.cycle,
            seed: self.seed,
            cluster: self.cluster,
            strings: self.strings.as_ptr(),
            strings_len: self.strings.len() as u64,
            labels: self.labels.as_ptr(),
            labels_len: self.labels.len() as u64,
            nodes: self.nodes.as_ptr(),
            nodes_len: self.nodes.len() as u64,
            gpus: self.gpus.as_ptr(),
            gpus_len: self.gpus.len() as u64,
            queues: self.queues.as_ptr(),
            queues_len: self.queues.len() as u64,
            apps: self.apps.as_ptr(),
            apps_len: self.apps.len() as u64,
            requests: self.requests.as_ptr(),
            requests_len: self.requests.len() as u64,
            containers: self.containers.as_ptr(),
            containers_len: self.containers.len() as u64,
            reservations: self.reservations.as_ptr(),
            reservations_len: self.reservations.len() as u64,
            pending: self.pending.as_ptr(),
            pending_len: self.pending.len() as u64,
            node_usage: self.node_usage.as_ptr(),
            node_usage_len: self.node_usage.len() as u64,
            reserve_cause: self.plan.cause,
            reserve_subject: self.plan.subject,
            plan_queue: self.plan.queue,
            reserved2: 0,
            plan_capacity: self.plan.capacity,
            plan_step_ms: self.plan.step_ms,
            plan_horizon_ms: self.plan.horizon_ms,
            reservation_details: self.plan.details.as_ptr(),
            reservation_details_len: self.plan.details.len() as u64,
            rdl_nodes: self.plan.rdl_nodes.as_ptr(),
            rdl_nodes_len: self.plan.rdl_nodes.len() as u64,
            allocations: self.plan.allocations.as_ptr(),
            allocations_len: self.plan.allocations.len() as u64,
        }
    }

    /// Reads a raw view handed over by a host.
    ///
    /// # Safety
    /// Every (pointer, length) pair of `raw` must describe initialised records that stay valid and
    /// unmodified for `'a` — which the host guarantees for the duration of one hook call.
    #[inline]
    pub unsafe fn from_raw(raw: &'a GantryView) -> Result<View<'a>, ViewError> {
        Self::check_raw(raw)?;
        // SAFETY: checked above; validity for 'a is the caller's promise.
        Ok(unsafe { Self::from_checked_raw(raw) })
    }

    /// Checks what can be checked of a raw view: version, size, and no null array pointer.
    #[inline]
    pub fn check_raw(raw: &GantryView) -> Result<(), ViewError> {
        // A 1.0 host's view is shorter; its fields are all this SDK needs (node usage is optional).
        let need = GANTRY_VIEW_SIZE_V1_0;
        if raw.abi_major != GANTRY_ABI_MAJOR {
            return Err(ViewError::WrongMajor(raw.abi_major));
        }
        if raw.struct_size < need {
            return Err(ViewError::StructTooSmall { got: raw.struct_size, need });
        }
        // Array pointers are never null (an empty array has a dangling, aligned pointer), so one
        // branch-free test covers all ten.
        let any_null = raw.strings.is_null()
            | raw.labels.is_null()
            | raw.nodes.is_null()
            | raw.gpus.is_null()
            | raw.queues.is_null()
            | raw.apps.is_null()
            | raw.requests.is_null()
            | raw.containers.is_null()
            | raw.reservations.is_null()
            | raw.pending.is_null()
            | (Self::has_node_usage(raw) && raw.node_usage.is_null())
            | (Self::has_plan(raw)
                && (raw.reservation_details.is_null() | raw.rdl_nodes.is_null() | raw.allocations.is_null()));
        if any_null {
            return Err(Self::first_null_array(raw));
        }
        Ok(())
    }

    /// Reads a raw view that passed [`View::check_raw`], without checking again.
    ///
    /// # Safety
    /// `raw` must have passed `check_raw`, and every (pointer, length) pair must describe
    /// initialised records that stay valid and unmodified for `'a`.
    #[inline(always)]
    pub unsafe fn from_checked_raw(raw: &'a GantryView) -> View<'a> {
        // SAFETY (each call below): non-null (check_raw), valid for 'a (the caller).
        unsafe {
            View {
                hook: raw.hook,
                now_ms: raw.now_ms,
                cycle: raw.cycle,
                seed: raw.seed,
                cluster: raw.cluster,
                strings: raw_slice(raw.strings, raw.strings_len),
                labels: raw_slice(raw.labels, raw.labels_len),
                nodes: raw_slice(raw.nodes, raw.nodes_len),
                gpus: raw_slice(raw.gpus, raw.gpus_len),
                queues: raw_slice(raw.queues, raw.queues_len),
                apps: raw_slice(raw.apps, raw.apps_len),
                requests: raw_slice(raw.requests, raw.requests_len),
                containers: raw_slice(raw.containers, raw.containers_len),
                reservations: raw_slice(raw.reservations, raw.reservations_len),
                pending: raw_slice(raw.pending, raw.pending_len),
                node_usage: if Self::has_node_usage(raw) {
                    raw_slice(raw.node_usage, raw.node_usage_len)
                } else {
                    &[]
                },
                plan: if Self::has_plan(raw) {
                    PlanView {
                        cause: raw.reserve_cause,
                        subject: raw.reserve_subject,
                        queue: raw.plan_queue,
                        capacity: raw.plan_capacity,
                        step_ms: raw.plan_step_ms,
                        horizon_ms: raw.plan_horizon_ms,
                        details: raw_slice(raw.reservation_details, raw.reservation_details_len),
                        rdl_nodes: raw_slice(raw.rdl_nodes, raw.rdl_nodes_len),
                        allocations: raw_slice(raw.allocations, raw.allocations_len),
                    }
                } else {
                    PlanView::default()
                },
            }
        }
    }

    /// Whether the host's view is long enough (ABI ≥ 1.1) to carry `node_usage`.
    #[inline(always)]
    fn has_node_usage(raw: &GantryView) -> bool {
        raw.struct_size >= GANTRY_VIEW_SIZE_V1_1
    }

    /// Whether the host's view is long enough (ABI ≥ 1.3) to carry the reservation plan.
    #[inline(always)]
    fn has_plan(raw: &GantryView) -> bool {
        raw.struct_size as usize >= core::mem::size_of::<GantryView>()
    }

    /// Names the first array of `raw` whose pointer is null (the cold path of `check_raw`).
    #[cold]
    fn first_null_array(raw: &GantryView) -> ViewError {
        let pointers = [
            (raw.strings.is_null(), "strings"),
            (raw.labels.is_null(), "labels"),
            (raw.nodes.is_null(), "nodes"),
            (raw.gpus.is_null(), "gpus"),
            (raw.queues.is_null(), "queues"),
            (raw.apps.is_null(), "apps"),
            (raw.requests.is_null(), "requests"),
            (raw.containers.is_null(), "containers"),
            (raw.reservations.is_null(), "reservations"),
            (raw.pending.is_null(), "pending"),
            (raw.node_usage.is_null() && Self::has_node_usage(raw), "node_usage"),
            (raw.reservation_details.is_null() && Self::has_plan(raw), "reservation_details"),
            (raw.rdl_nodes.is_null() && Self::has_plan(raw), "rdl_nodes"),
            (raw.allocations.is_null() && Self::has_plan(raw), "allocations"),
        ];
        ViewError::NullArray(pointers.iter().find(|p| p.0).map_or("?", |p| p.1))
    }

    /// The text of a string reference; empty if it is out of range or not UTF-8.
    pub fn str(&self, s: GantryStrRef) -> &'a str {
        let start = s.offset as usize;
        let end = start.saturating_add(s.len as usize);
        self.strings.get(start..end).and_then(|b| core::str::from_utf8(b).ok()).unwrap_or("")
    }

    /// The records of a range in one of the view's arrays; empty if the range is out of bounds.
    pub fn range<T>(slice: &'a [T], range: GantryRange) -> &'a [T] {
        let start = range.start as usize;
        slice.get(start..start.saturating_add(range.len as usize)).unwrap_or(&[])
    }

    /// The labels of a node.
    pub fn node_labels(&self, node: &GantryNode) -> &'a [GantryLabel] {
        Self::range(self.labels, node.labels)
    }

    /// The GPUs of a node.
    pub fn node_gpus(&self, node: &GantryNode) -> &'a [GantryGpu] {
        Self::range(self.gpus, node.gpus)
    }

    /// Whether `node` carries every label of `selector` (a range in `labels`); see
    /// [`View::labels_satisfy`].
    pub fn node_matches(&self, node: &GantryNode, selector: GantryRange) -> bool {
        Self::labels_satisfy(self.strings, self.node_labels(node), Self::range(self.labels, selector))
    }

    /// Whether labels `have` satisfy every term of `want`: the same key with the same value, or —
    /// for a wanted value listing alternatives, `A|B` — with one of them. Strings are interned,
    /// so the common case compares references; only alternatives compare text (in `strings`,
    /// the view's string arena).
    pub fn labels_satisfy(strings: &[u8], have: &[GantryLabel], want: &[GantryLabel]) -> bool {
        let text = |s: GantryStrRef| {
            let start = s.offset as usize;
            strings
                .get(start..start.saturating_add(s.len as usize))
                .and_then(|b| core::str::from_utf8(b).ok())
        };
        want.iter().all(|w| {
            have.contains(w)
                || text(w.value).is_some_and(|v| {
                    v.contains('|')
                        && have.iter().any(|h| {
                            h.key == w.key
                                && text(h.value).is_some_and(|hv| v.split('|').any(|alt| alt == hv))
                        })
                })
        })
    }

    /// Whether `node` is schedulable and has room for `res` on top of what it has allocated.
    pub fn node_fits(node: &GantryNode, res: &GantryResources) -> bool {
        node.state == GANTRY_NODE_RUNNING && node.allocated.plus(res).fits_in(&node.capacity)
    }
}

impl GantryRequest {
    /// How long one of its containers is expected to run, ms: the longer of its two expected run
    /// times (where it prefers to run, and elsewhere); 0 when unknown. What plans around a
    /// container's end (packing by lifetime, a reservation's carried runs, a work-sized
    /// scale-up) read.
    pub const fn expected_run_ms(&self) -> u64 {
        if self.slow_ms > self.expected_ms { self.slow_ms } else { self.expected_ms }
    }
}

impl GantryResources {
    /// Resources with the given CPU (millicores), memory (bytes) and GPUs.
    pub const fn new(cpu_millis: u64, memory_bytes: u64, gpus: u32) -> Self {
        GantryResources { cpu_millis, memory_bytes, gpus, reserved: 0 }
    }

    /// Whether every dimension of `self` is at most that of `other`.
    pub const fn fits_in(&self, other: &GantryResources) -> bool {
        self.cpu_millis <= other.cpu_millis
            && self.memory_bytes <= other.memory_bytes
            && self.gpus <= other.gpus
    }

    /// Sum, saturating at the type's maximum.
    pub const fn plus(&self, other: &GantryResources) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            gpus: self.gpus.saturating_add(other.gpus),
            reserved: 0,
        }
    }

    /// Difference, saturating at zero.
    pub const fn minus(&self, other: &GantryResources) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            gpus: self.gpus.saturating_sub(other.gpus),
            reserved: 0,
        }
    }

    /// The larger of `self` and `other` in each dimension.
    pub const fn max_each(&self, other: &GantryResources) -> GantryResources {
        GantryResources {
            cpu_millis: if self.cpu_millis > other.cpu_millis { self.cpu_millis } else { other.cpu_millis },
            memory_bytes: if self.memory_bytes > other.memory_bytes {
                self.memory_bytes
            } else {
                other.memory_bytes
            },
            gpus: if self.gpus > other.gpus { self.gpus } else { other.gpus },
            reserved: 0,
        }
    }

    /// The smaller of `self` and `other` in each dimension.
    pub const fn min_each(&self, other: &GantryResources) -> GantryResources {
        GantryResources {
            cpu_millis: if self.cpu_millis < other.cpu_millis { self.cpu_millis } else { other.cpu_millis },
            memory_bytes: if self.memory_bytes < other.memory_bytes {
                self.memory_bytes
            } else {
                other.memory_bytes
            },
            gpus: if self.gpus < other.gpus { self.gpus } else { other.gpus },
            reserved: 0,
        }
    }

    /// `self` times `n`, saturating.
    pub const fn times(&self, n: u32) -> GantryResources {
        GantryResources {
            cpu_millis: self.cpu_millis.saturating_mul(n as u64),
            memory_bytes: self.memory_bytes.saturating_mul(n as u64),
            gpus: self.gpus.saturating_mul(n),
            reserved: 0,
        }
    }

    /// Whether every dimension is zero.
    pub const fn is_zero(&self) -> bool {
        self.cpu_millis == 0 && self.memory_bytes == 0 && self.gpus == 0
    }
}
