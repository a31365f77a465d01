//! The C ABI v1: every type and constant that crosses the boundary between the scheduler (the
//! host) and a plugin shared library.
//!
//! Everything here is `#[repr(C)]`, has no implicit padding, and has its size pinned by a `const`
//! assertion below (and by `_Static_assert`s in `include/gantry.h`, generated from this file by
//! cbindgen). Records are frozen for the whole major version: a minor version may only append
//! fields to [`GantryPluginV1`], [`GantryView`] and [`GantryOutput`] (each starts with
//! `struct_size`) or add new record arrays to the view. `sdk/ABI.md` is the written contract.
//!
//! Enumerations are plain integers with named constants rather than Rust enums, because a value
//! that arrives from the other side of the boundary may be out of range and must be rejected, not
//! be undefined behaviour.

use core::ffi::{c_char, c_void};

/// The major version of this ABI. A host only looks for the entry symbol of its own major.
pub const GANTRY_ABI_MAJOR: u16 = 1;
/// The minor version of this ABI: minor versions only append fields.
pub const GANTRY_ABI_MINOR: u16 = 3;
/// "No index": used in `u32` cross references that point at nothing (a GPU that no container
/// holds, the root queue's parent, a target that does not apply to a decision).
pub const GANTRY_NONE: u32 = u32::MAX;

// ---------------------------------------------------------------------------------------------
// Return codes of every hook.
// ---------------------------------------------------------------------------------------------

/// The hook succeeded; `GantryOutput::len` decisions were written.
pub const GANTRY_OK: i32 = 0;
/// The decision buffer was too small: the plugin set `GantryOutput::needed` and the host grows the
/// buffer and calls the hook again with the same view.
pub const GANTRY_BUFFER_FULL: i32 = 1;
/// The plugin's configuration was rejected (only from `create`).
pub const GANTRY_ERR_CONFIG: i32 = -1;
/// The plugin failed for a reason of its own; the message says which.
pub const GANTRY_ERR_INTERNAL: i32 = -2;
/// The plugin panicked (or threw); the SDK glue caught it at the boundary.
pub const GANTRY_ERR_PANIC: i32 = -3;
/// The hook is not implemented by this plugin.
pub const GANTRY_ERR_UNSUPPORTED: i32 = -4;
/// The view or output given to the plugin does not match what it was built for (struct sizes or
/// versions).
pub const GANTRY_ERR_INVALID_VIEW: i32 = -5;

// ---------------------------------------------------------------------------------------------
// Capability flags of a plugin: one bit per implemented hook. They must agree with the non-null
// hook pointers of the vtable; a host rejects a vtable where they disagree.
// ---------------------------------------------------------------------------------------------

/// The plugin implements `admit`.
pub const GANTRY_CAP_ADMIT: u64 = 1 << 0;
/// The plugin implements `order`.
pub const GANTRY_CAP_ORDER: u64 = 1 << 1;
/// The plugin implements `place`.
pub const GANTRY_CAP_PLACE: u64 = 1 << 2;
/// The plugin implements `rebalance`.
pub const GANTRY_CAP_REBALANCE: u64 = 1 << 3;
/// The plugin implements `reserve` (ABI 1.3): it plans reservations.
pub const GANTRY_CAP_RESERVE: u64 = 1 << 4;
/// Every capability bit this minor of ABI v1 defines; other bits must be zero. (A 1.0–1.2 host
/// knows only the first four, so it refuses a plugin that sets `GANTRY_CAP_RESERVE`.)
pub const GANTRY_CAP_ALL_V1: u64 =
    GANTRY_CAP_ADMIT | GANTRY_CAP_ORDER | GANTRY_CAP_PLACE | GANTRY_CAP_REBALANCE | GANTRY_CAP_RESERVE;

// ---------------------------------------------------------------------------------------------
// Hook identifiers (GantryView::hook): which extension point a view is passed to.
// ---------------------------------------------------------------------------------------------

/// The view is passed to `admit`.
pub const GANTRY_HOOK_ADMIT: u32 = 1;
/// The view is passed to `order`.
pub const GANTRY_HOOK_ORDER: u32 = 2;
/// The view is passed to `place`.
pub const GANTRY_HOOK_PLACE: u32 = 3;
/// The view is passed to `rebalance`.
pub const GANTRY_HOOK_REBALANCE: u32 = 4;
/// The view is passed to `reserve` (ABI 1.3).
pub const GANTRY_HOOK_RESERVE: u32 = 5;

// ---------------------------------------------------------------------------------------------
// Why a `reserve` call is made (GantryView::reserve_cause, ABI 1.3).
// ---------------------------------------------------------------------------------------------

/// Reservation `reserve_subject` is NEW: plan it (PLAN_RESERVATION) or reject it.
pub const GANTRY_RESERVE_ADMIT: u32 = 1;
/// Accepted reservation `reserve_subject`, not started yet, has a new definition (the view shows
/// the new definition and the old allocation): plan it anew, or reject to refuse the update.
pub const GANTRY_RESERVE_UPDATE: u32 = 2;
/// The plan's capacity dropped and the accepted allocations overcommit it from now on: move,
/// shrink or give up reservations until everything fits.
pub const GANTRY_RESERVE_REPLAN: u32 = 3;
/// Periodic: the plugin may move accepted reservations (never their past); an empty answer
/// changes nothing.
pub const GANTRY_RESERVE_OPTIMIZE: u32 = 4;

// ---------------------------------------------------------------------------------------------
// Kinds of the nodes of a reservation's definition (GantryRdlNode::kind, ABI 1.3): the Rayon
// Reservation Definition Language as a tree.
// ---------------------------------------------------------------------------------------------

/// `atom(b, g, h, l, w)`: bundles `b`, `g` to `h` at a time in gangs of `g`, runs of at least `l`,
/// work `w`.
pub const GANTRY_RDL_ATOM: u32 = 1;
/// `window(s, e, x)`: `x` within `[s, e)`.
pub const GANTRY_RDL_WINDOW: u32 = 2;
/// `order(x1, x2, …)`: each part after the previous part ends.
pub const GANTRY_RDL_ORDER: u32 = 3;
/// `all(x1, x2, …)`: every part.
pub const GANTRY_RDL_ALL: u32 = 4;
/// `any(x1, x2, …)`: at least one part.
pub const GANTRY_RDL_ANY: u32 = 5;

// ---------------------------------------------------------------------------------------------
// States.
// ---------------------------------------------------------------------------------------------

/// Node accepts new containers.
pub const GANTRY_NODE_RUNNING: u32 = 1;
/// Node keeps its containers but accepts no new ones.
pub const GANTRY_NODE_DRAINING: u32 = 2;
/// Node missed its status deadline; its containers are lost.
pub const GANTRY_NODE_LOST: u32 = 3;
/// Node reports itself unhealthy; no new containers.
pub const GANTRY_NODE_UNHEALTHY: u32 = 4;

/// Application submitted, waiting for `admit`.
pub const GANTRY_APP_NEW: u32 = 1;
/// Application admitted; its requests are pending or running.
pub const GANTRY_APP_ACCEPTED: u32 = 2;
/// Application has at least one running container.
pub const GANTRY_APP_RUNNING: u32 = 3;
/// Application finished successfully.
pub const GANTRY_APP_FINISHED: u32 = 4;
/// Application failed (out of attempts).
pub const GANTRY_APP_FAILED: u32 = 5;
/// Application killed by a user or the scheduler.
pub const GANTRY_APP_KILLED: u32 = 6;
/// Application rejected at admission.
pub const GANTRY_APP_REJECTED: u32 = 7;

/// Container allocated on a node; launch command sent, not yet confirmed by the agent.
pub const GANTRY_CONTAINER_ALLOCATED: u32 = 1;
/// Container running on its node.
pub const GANTRY_CONTAINER_RUNNING: u32 = 2;
/// Container asked to stop (graceful kill in progress, e.g. preemption).
pub const GANTRY_CONTAINER_STOPPING: u32 = 3;
/// Container exited with status 0.
pub const GANTRY_CONTAINER_COMPLETED: u32 = 4;
/// Container exited with a non-zero status.
pub const GANTRY_CONTAINER_FAILED: u32 = 5;
/// Container was killed (user, app kill, preemption).
pub const GANTRY_CONTAINER_KILLED: u32 = 6;
/// Container's node was lost.
pub const GANTRY_CONTAINER_LOST: u32 = 7;

/// Reservation requested, waiting for `admit`.
pub const GANTRY_RESERVATION_NEW: u32 = 1;
/// Reservation accepted into the plan.
pub const GANTRY_RESERVATION_ACCEPTED: u32 = 2;
/// Reservation rejected.
pub const GANTRY_RESERVATION_REJECTED: u32 = 3;
/// Reservation's window is over.
pub const GANTRY_RESERVATION_EXPIRED: u32 = 4;

// ---------------------------------------------------------------------------------------------
// Flags of records.
// ---------------------------------------------------------------------------------------------

/// Request flag: all `count` containers must start together (a gang) or none.
pub const GANTRY_REQUEST_GANG: u32 = 1 << 0;
/// Request flag: all containers must be on nodes of one rack.
pub const GANTRY_REQUEST_SAME_RACK_REQUIRED: u32 = 1 << 1;
/// Request flag: all containers should be on nodes of one rack when possible.
pub const GANTRY_REQUEST_SAME_RACK_PREFERRED: u32 = 1 << 2;
/// Request flag: this is the application's master (driver) container; preempted last.
pub const GANTRY_REQUEST_MASTER: u32 = 1 << 3;

/// Queue flag: a leaf queue (applications are submitted only to leaves).
pub const GANTRY_QUEUE_LEAF: u32 = 1 << 0;

/// Container flag: this container is the application's master.
pub const GANTRY_CONTAINER_MASTER: u32 = 1 << 0;
/// Container flag: this container has been selected for preemption.
pub const GANTRY_CONTAINER_PREEMPTING: u32 = 1 << 1;
/// Container flag (ABI 1.2): the latest rebalance call marked this container as a preemption
/// candidate (`GANTRY_DECISION_MARK_PREEMPT`); it still runs.
pub const GANTRY_CONTAINER_PREEMPT_CANDIDATE: u32 = 1 << 2;

// ---------------------------------------------------------------------------------------------
// Decision kinds (GantryDecision::kind).
// ---------------------------------------------------------------------------------------------

/// `order`: `subject` is a pending request; the request's position is the decision's position.
pub const GANTRY_DECISION_ORDER: u32 = 1;
/// `place`: start one container of request `subject` on node `target`. A gang needs exactly
/// `count` PLACE decisions for its request in one call.
pub const GANTRY_DECISION_PLACE: u32 = 2;
/// `place`: request `subject` deliberately waits this cycle; `reason` is a plugin-defined code.
pub const GANTRY_DECISION_WAIT: u32 = 3;
/// `admit`: application `subject` is accepted.
pub const GANTRY_DECISION_ACCEPT_APP: u32 = 4;
/// `admit`: application `subject` is rejected; `reason` is a plugin-defined code.
pub const GANTRY_DECISION_REJECT_APP: u32 = 5;
/// `admit`: reservation `subject` is accepted.
pub const GANTRY_DECISION_ACCEPT_RESERVATION: u32 = 6;
/// `admit`: reservation `subject` is rejected; `reason` is a plugin-defined code.
pub const GANTRY_DECISION_REJECT_RESERVATION: u32 = 7;
/// `rebalance`: preempt container `subject` gracefully; `value` is the grace period in ms.
pub const GANTRY_DECISION_PREEMPT: u32 = 8;
/// `rebalance`: kill container `subject` at once.
pub const GANTRY_DECISION_KILL: u32 = 9;
/// `rebalance`: set queue `subject`'s guaranteed capacity to `value` parts per million of its
/// parent's.
pub const GANTRY_DECISION_SET_QUEUE_CAPACITY: u32 = 10;
/// `rebalance` (ABI 1.2): container `subject` is a *candidate* for preemption — the first of two
/// phases: it is told (the API shows it), not stopped. The candidates are exactly the containers
/// marked by the latest successful rebalance call, so a mark not repeated is cancelled. A plugin
/// preempts (PREEMPT) a candidate that stayed marked long enough.
pub const GANTRY_DECISION_MARK_PREEMPT: u32 = 11;
/// `reserve` (ABI 1.3): reservation `subject`'s allocation becomes exactly the output's
/// allocations that name it (`GantryAllocation::reservation == subject`), past included.
pub const GANTRY_DECISION_PLAN_RESERVATION: u32 = 12;

// ---------------------------------------------------------------------------------------------
// Records.
// ---------------------------------------------------------------------------------------------

/// A string in the view's string arena: `len` bytes of UTF-8 from `offset`. Strings are interned,
/// so two equal strings of one view have equal offsets. An empty string has `len == 0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GantryStrRef {
    /// Byte offset into `GantryView::strings`.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
}

/// A range of records `[start, start + len)` in one of the view's arrays.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GantryRange {
    /// Index of the first record.
    pub start: u32,
    /// Number of records.
    pub len: u32,
}

/// An amount of resources.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GantryResources {
    /// CPU in millicores (1000 = one core).
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Whole GPUs.
    pub gpus: u32,
    /// Reserved, zero in v1.
    pub reserved: u32,
}

/// A `key=value` label of a node, or a term of a request's node selector.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GantryLabel {
    /// The key.
    pub key: GantryStrRef,
    /// The value (may be empty).
    pub value: GantryStrRef,
}

/// A machine with an agent.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryNode {
    /// Unique node name.
    pub name: GantryStrRef,
    /// Rack name (empty when unknown).
    pub rack: GantryStrRef,
    /// Model of the node's GPUs (empty when it has none; mixed nodes report the first).
    pub gpu_model: GantryStrRef,
    /// The node's labels, in `GantryView::labels`.
    pub labels: GantryRange,
    /// The node's GPUs, in `GantryView::gpus`.
    pub gpus: GantryRange,
    /// Allocatable resources (capacity less the agent's reserve).
    pub capacity: GantryResources,
    /// Resources allocated to live containers.
    pub allocated: GantryResources,
    /// One of `GANTRY_NODE_*`.
    pub state: u32,
    /// Reserved, zero in v1.
    pub flags: u32,
}

/// One GPU of a node.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryGpu {
    /// Index of the node in `GantryView::nodes`.
    pub node: u32,
    /// Index of the GPU on its node (as NVML numbers it).
    pub index: u32,
    /// GPU model.
    pub model: GantryStrRef,
    /// GPU memory in bytes.
    pub memory_bytes: u64,
    /// Index of the container holding it in `GantryView::containers`, or `GANTRY_NONE`.
    pub container: u32,
    /// Reserved, zero in v1.
    pub reserved: u32,
}

/// A queue of the hierarchy. Capacities are fractions of the parent's; `absolute_*` are the
/// resulting amounts for the current cluster size.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GantryQueue {
    /// Full dotted path, e.g. `root.prod.etl`.
    pub name: GantryStrRef,
    /// Index of the parent queue, or `GANTRY_NONE` for the root.
    pub parent: u32,
    /// `GANTRY_QUEUE_*` flags.
    pub flags: u32,
    /// Guaranteed capacity as a fraction (0..=1) of the parent's.
    pub guaranteed: f64,
    /// Maximum capacity as a fraction (0..=1) of the parent's.
    pub maximum: f64,
    /// Guaranteed capacity in resources.
    pub absolute_guaranteed: GantryResources,
    /// Maximum capacity in resources; the engine never lets `used` exceed it.
    pub absolute_maximum: GantryResources,
    /// Resources held by the queue's live containers (including its children's).
    pub used: GantryResources,
    /// Resources its pending requests ask for (including its children's).
    pub pending: GantryResources,
}

/// An application: a set of container requests submitted to one leaf queue.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryApp {
    /// Stable application id (the index is valid for one call only; the id forever).
    pub id: u64,
    /// Index of its leaf queue.
    pub queue: u32,
    /// One of `GANTRY_APP_*`.
    pub state: u32,
    /// Submitting user.
    pub user: GantryStrRef,
    /// Priority: higher runs first.
    pub priority: i32,
    /// Attempt number, 1 for the first.
    pub attempt: u32,
    /// Submission time, ms on the engine's clock.
    pub submit_ms: u64,
    /// Its requests, in `GantryView::requests`.
    pub requests: GantryRange,
    /// Resources held by its live containers.
    pub used: GantryResources,
}

/// A request for `count` containers of one size, part of an application.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryRequest {
    /// Stable request id.
    pub id: u64,
    /// Index of its application.
    pub app: u32,
    /// `GANTRY_REQUEST_*` flags.
    pub flags: u32,
    /// Resources of each container.
    pub resources: GantryResources,
    /// Number of containers wanted.
    pub count: u32,
    /// Number already placed (allocated or running); a gang has 0 or `count`.
    pub placed: u32,
    /// Priority within the application (higher first).
    pub priority: i32,
    /// Reserved, zero in v1.
    pub reserved: u32,
    /// Node selector: labels a node must all have (hard constraint), in `GantryView::labels`.
    pub selector: GantryRange,
    /// Preferred labels (soft constraint), in `GantryView::labels`.
    pub preferred: GantryRange,
    /// Expected run time on preferred resources in ms (0 = unknown).
    pub expected_ms: u64,
    /// Expected run time elsewhere in ms (0 = same as `expected_ms`).
    pub slow_ms: u64,
    /// Time by which it should have finished, ms on the engine's clock (0 = none).
    pub deadline_ms: u64,
    /// Time it became pending, ms on the engine's clock.
    pub submit_ms: u64,
}

/// A live container.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryContainer {
    /// Stable container id.
    pub id: u64,
    /// Index of its application.
    pub app: u32,
    /// Index of the request it was placed for.
    pub request: u32,
    /// Index of its node.
    pub node: u32,
    /// One of `GANTRY_CONTAINER_*`.
    pub state: u32,
    /// Resources allocated to it.
    pub resources: GantryResources,
    /// Time it was allocated, ms on the engine's clock.
    pub start_ms: u64,
    /// `GANTRY_CONTAINER_*` flags.
    pub flags: u32,
    /// Reserved, zero in v1.
    pub reserved: u32,
}

/// What a node's agent last measured (ABI 1.1): the node's real usage, next to the allocation
/// the engine keeps in [`GantryNode::allocated`]. Host-wide figures: the agent's own daemons and
/// the page cache it cannot reclaim count too.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryNodeUsage {
    /// CPU in use, millicores (busy fraction of all cores × cores × 1000).
    pub cpu_millis: u64,
    /// Memory in use (total − available), bytes.
    pub memory_bytes: u64,
    /// GPUs (and MIG instances) with at least one process on them.
    pub gpus_busy: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// When the engine received the sample, ms on its clock; 0 = never sampled.
    pub sampled_ms: u64,
}

/// A capacity reservation of a queue over a time window.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryReservation {
    /// Stable reservation id.
    pub id: u64,
    /// Index of the queue it reserves for.
    pub queue: u32,
    /// One of `GANTRY_RESERVATION_*`.
    pub state: u32,
    /// Earliest start, ms on the engine's clock.
    pub start_ms: u64,
    /// Deadline, ms on the engine's clock.
    pub end_ms: u64,
    /// Peak resources asked for.
    pub resources: GantryResources,
}

/// One node of a reservation's definition (ABI 1.3): the RDL expression as a tree a C plugin can
/// walk without a parser. Fields a kind does not use are zero (`atom` is `GANTRY_NONE`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryRdlNode {
    /// One of `GANTRY_RDL_*`.
    pub kind: u32,
    /// ATOM: its index among its reservation's atoms in pre-order, the index allocations name;
    /// other kinds: `GANTRY_NONE`.
    pub atom: u32,
    /// Children in `GantryView::rdl_nodes`, contiguous: one for WINDOW, at least one for ORDER,
    /// ALL and ANY, none for ATOM.
    pub children: GantryRange,
    /// WINDOW: start, ms on the engine's clock.
    pub start_ms: u64,
    /// WINDOW: end (exclusive), ms on the engine's clock.
    pub end_ms: u64,
    /// ATOM: the resources of one bundle (container).
    pub bundle: GantryResources,
    /// ATOM `g`: bundles run in whole gangs of `g` (0 or a multiple of `g` at any time).
    pub min_parallel: u32,
    /// ATOM `h`: the most bundles at once.
    pub max_parallel: u32,
    /// ATOM `l`: every uninterrupted run of the atom's allocation lasts at least this long, ms.
    pub min_lease_ms: u64,
    /// ATOM `w`: total work, bundle-milliseconds.
    pub work: u64,
}

/// What the host knows of a reservation beyond its [`GantryReservation`] record (ABI 1.3),
/// parallel to `GantryView::reservations` (same index).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GantryReservationDetail {
    /// Index of its definition's root in `GantryView::rdl_nodes`. Times are absolute: the user's
    /// expression wrapped in `window(arrival, deadline, …)` on the engine's clock.
    pub definition: u32,
    /// Number of atoms in the definition.
    pub atoms: u32,
    /// Earliest start, ms on the engine's clock.
    pub arrival_ms: u64,
    /// Deadline (exclusive), ms on the engine's clock.
    pub deadline_ms: u64,
    /// When it was accepted, ms; 0 while NEW.
    pub accepted_ms: u64,
    /// Higher is more important when a replan must give something up.
    pub priority: i32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Its accepted allocation in `GantryView::allocations` (empty while NEW), sorted by atom,
    /// then start.
    pub allocation: GantryRange,
}

/// `bundles` bundles of one atom of a reservation over `[start_ms, end_ms)` (ABI 1.3): a piece of
/// an allocation over time, in the view (accepted allocations) and in the output (a plan).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GantryAllocation {
    /// Index of the reservation in `GantryView::reservations`.
    pub reservation: u32,
    /// Pre-order index of the atom within the reservation's definition.
    pub atom: u32,
    /// Start, ms on the engine's clock.
    pub start_ms: u64,
    /// End (exclusive), ms; greater than `start_ms`.
    pub end_ms: u64,
    /// Bundles held throughout: a multiple of the atom's `min_parallel`, at most its
    /// `max_parallel`, never 0.
    pub bundles: u64,
}

/// Everything a hook may look at, borrowed for the duration of one call. Arrays are the engine's
/// own arrays, lent without copying — or, for a plugin with a call budget, a copy made for the
/// call (ABI.md §12); indexes into them are valid for this call only. Array pointers are
/// never null: an empty array has a non-null, suitably aligned pointer that must not be read.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GantryView {
    /// `size_of::<GantryView>()` as the host built it.
    pub struct_size: u32,
    /// Host's ABI major version.
    pub abi_major: u16,
    /// Host's ABI minor version.
    pub abi_minor: u16,
    /// Which hook this view is passed to (`GANTRY_HOOK_*`).
    pub hook: u32,
    /// Reserved, zero in v1.
    pub reserved: u32,
    /// The engine's clock, ms.
    pub now_ms: u64,
    /// Scheduling cycle number (increases by one per cycle).
    pub cycle: u64,
    /// Seed for the plugin's randomness this call (deterministic per engine seed and cycle).
    pub seed: u64,
    /// Total allocatable resources of schedulable nodes.
    pub cluster: GantryResources,
    /// UTF-8 string arena that `GantryStrRef`s point into.
    pub strings: *const u8,
    /// Bytes in `strings`.
    pub strings_len: u64,
    /// Label records.
    pub labels: *const GantryLabel,
    /// Number of label records.
    pub labels_len: u64,
    /// Nodes.
    pub nodes: *const GantryNode,
    /// Number of nodes.
    pub nodes_len: u64,
    /// GPUs.
    pub gpus: *const GantryGpu,
    /// Number of GPUs.
    pub gpus_len: u64,
    /// Queues.
    pub queues: *const GantryQueue,
    /// Number of queues.
    pub queues_len: u64,
    /// Live applications.
    pub apps: *const GantryApp,
    /// Number of applications.
    pub apps_len: u64,
    /// Requests of live applications.
    pub requests: *const GantryRequest,
    /// Number of requests.
    pub requests_len: u64,
    /// Live containers.
    pub containers: *const GantryContainer,
    /// Number of containers.
    pub containers_len: u64,
    /// Reservations.
    pub reservations: *const GantryReservation,
    /// Number of reservations.
    pub reservations_len: u64,
    /// Indexes of pending requests (count > placed, app admitted), in scheduling order: the engine's
    /// default order for `order`, the order hook's result for `place`.
    pub pending: *const u32,
    /// Number of pending request indexes.
    pub pending_len: u64,
    /// ABI 1.1: measured usage per node, parallel to `nodes` (same index), or empty when the host
    /// has none. A 1.0 host's view ends before this field (`struct_size` tells).
    pub node_usage: *const GantryNodeUsage,
    /// Number of node usage records (`nodes_len` or 0).
    pub node_usage_len: u64,
    /// ABI 1.3: why this `reserve` call is made (`GANTRY_RESERVE_*`); 0 in other hooks.
    pub reserve_cause: u32,
    /// ABI 1.3: the reservation a `reserve` call is about (ADMIT, UPDATE), an index into
    /// `reservations`; `GANTRY_NONE` otherwise.
    pub reserve_subject: u32,
    /// ABI 1.3: index of the reservable (plan) queue; `GANTRY_NONE` when the host has none.
    pub plan_queue: u32,
    /// Reserved, zero.
    pub reserved2: u32,
    /// ABI 1.3: what all allocations together must fit within at every instant from `now_ms` on
    /// (the plan queue's guaranteed capacity).
    pub plan_capacity: GantryResources,
    /// ABI 1.3: the step at which the host follows the plan (a hint for a planner's time grid), ms.
    pub plan_step_ms: u64,
    /// ABI 1.3: how far after its submission a reservation's deadline may lie, ms.
    pub plan_horizon_ms: u64,
    /// ABI 1.3: details of each reservation, parallel to `reservations`.
    pub reservation_details: *const GantryReservationDetail,
    /// Number of reservation details (`reservations_len`).
    pub reservation_details_len: u64,
    /// ABI 1.3: the nodes of every reservation's definition.
    pub rdl_nodes: *const GantryRdlNode,
    /// Number of definition nodes.
    pub rdl_nodes_len: u64,
    /// ABI 1.3: every reservation's accepted allocation, contiguous per reservation.
    pub allocations: *const GantryAllocation,
    /// Number of allocation pieces.
    pub allocations_len: u64,
}

/// `struct_size` of an ABI 1.0 [`GantryView`]: the fields before `node_usage`.
pub const GANTRY_VIEW_SIZE_V1_0: u32 = 224;
/// `struct_size` of an ABI 1.1 or 1.2 [`GantryView`]: the fields before `reserve_cause`.
pub const GANTRY_VIEW_SIZE_V1_1: u32 = 240;

/// One decision of a plugin. Which fields mean what depends on `kind` (`GANTRY_DECISION_*`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GantryDecision {
    /// One of `GANTRY_DECISION_*`.
    pub kind: u32,
    /// Index of the record decided on (request, app, reservation, container or queue).
    pub subject: u32,
    /// Index of the target node for PLACE; `GANTRY_NONE` otherwise.
    pub target: u32,
    /// Plugin-defined reason code for WAIT and REJECT_*; zero otherwise.
    pub reason: u32,
    /// Grace period in ms for PREEMPT; capacity in ppm for SET_QUEUE_CAPACITY; zero otherwise.
    pub value: u64,
}

/// The host-owned buffer a hook writes into. The plugin writes at most `capacity` decisions and
/// sets `len`; if it has more, it sets `needed` and returns `GANTRY_BUFFER_FULL`, and the host
/// calls again with a larger buffer. An error message (UTF-8, not NUL-terminated) may be written
/// to `message`, up to `message_capacity` bytes, with its length in `message_len`.
#[repr(C)]
#[derive(Debug)]
pub struct GantryOutput {
    /// `size_of::<GantryOutput>()` as the host built it.
    pub struct_size: u32,
    /// 0 on the first call for a view; 1 when the host calls again with the same view after
    /// `GANTRY_BUFFER_FULL` (the plugin may then return what it computed the first time).
    pub attempt: u32,
    /// Decision records, owned by the host.
    pub decisions: *mut GantryDecision,
    /// Room in `decisions`.
    pub capacity: u64,
    /// Decisions written by the plugin.
    pub len: u64,
    /// Decisions the plugin wanted to write when it returned `GANTRY_BUFFER_FULL`.
    pub needed: u64,
    /// Message bytes, owned by the host.
    pub message: *mut u8,
    /// Room in `message`.
    pub message_capacity: u64,
    /// Message bytes written by the plugin.
    pub message_len: u64,
    /// ABI 1.3: allocation pieces, owned by the host; offered (capacity > 0) in `reserve` calls
    /// only. A plugin checks `struct_size` before touching these four fields.
    pub allocations: *mut GantryAllocation,
    /// Room in `allocations`.
    pub allocations_capacity: u64,
    /// Allocation pieces written by the plugin.
    pub allocations_len: u64,
    /// Pieces the plugin wanted to write when it returned `GANTRY_BUFFER_FULL`.
    pub allocations_needed: u64,
}

/// `struct_size` of an ABI 1.0–1.2 [`GantryOutput`]: the fields before `allocations`.
pub const GANTRY_OUTPUT_SIZE_V1_0: u32 = 64;

/// `create`: build a plugin instance from its configuration (a JSON object, UTF-8, `config_len`
/// bytes, followed by a NUL that is not counted). On success store the instance in `*instance`.
pub type GantryCreateFn = unsafe extern "C" fn(
    config: *const c_char,
    config_len: u64,
    instance: *mut *mut c_void,
    out: *mut GantryOutput,
) -> i32;

/// `destroy`: free an instance made by `create`.
pub type GantryDestroyFn = unsafe extern "C" fn(instance: *mut c_void);

/// `admit`, `order`, `place`, `rebalance`: look at the view, write decisions.
pub type GantryHookFn =
    unsafe extern "C" fn(instance: *mut c_void, view: *const GantryView, out: *mut GantryOutput) -> i32;

/// The plugin's vtable, returned by the entry symbol `gantry_plugin_v1`. Static for the life of
/// the process.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GantryPluginV1 {
    /// `size_of::<GantryPluginV1>()` as the plugin was built.
    pub struct_size: u32,
    /// Must be `GANTRY_ABI_MAJOR` (1).
    pub abi_major: u16,
    /// The minor version the plugin was built against.
    pub abi_minor: u16,
    /// Plugin name, NUL-terminated UTF-8, static.
    pub name: *const c_char,
    /// Plugin version, NUL-terminated UTF-8, static.
    pub version: *const c_char,
    /// `GANTRY_CAP_*` bits: one per implemented hook.
    pub capabilities: u64,
    /// Builds an instance; may be null if the plugin has no state.
    pub create: Option<GantryCreateFn>,
    /// Frees an instance; may be null.
    pub destroy: Option<GantryDestroyFn>,
    /// Admission of new applications and reservations; null if not implemented.
    pub admit: Option<GantryHookFn>,
    /// Ordering of pending requests; null if not implemented.
    pub order: Option<GantryHookFn>,
    /// Placement of pending requests; null if not implemented.
    pub place: Option<GantryHookFn>,
    /// Periodic preemption, kills and capacity edits; null if not implemented.
    pub rebalance: Option<GantryHookFn>,
    /// ABI 1.3: reservation planning; null if not implemented. Absent (beyond `struct_size`)
    /// from a plugin built against 1.0–1.2.
    pub reserve: Option<GantryHookFn>,
}

/// `struct_size` of an ABI 1.0–1.2 [`GantryPluginV1`]: the fields before `reserve`.
pub const GANTRY_PLUGIN_SIZE_V1_0: u32 = 80;

// SAFETY: the vtable is immutable after construction and its `name`/`version` pointers point at
// static, immutable NUL-terminated strings; sharing it between threads cannot race.
unsafe impl Sync for GantryPluginV1 {}
// SAFETY: as above, nothing in the vtable is tied to the thread that made it.
unsafe impl Send for GantryPluginV1 {}

/// The entry symbol's type. The host passes its own ABI version; the plugin returns its static
/// vtable, or null if it cannot work with that host.
pub type GantryEntryV1 = unsafe extern "C" fn(host_major: u16, host_minor: u16) -> *const GantryPluginV1;

/// Name of the entry symbol of ABI v1, NUL-terminated, as looked up by the host.
pub const GANTRY_ENTRY_SYMBOL_V1: &[u8] = b"gantry_plugin_v1\0";

// ---------------------------------------------------------------------------------------------
// Layout pins. The same numbers are asserted on the C side in include/gantry.h.
// ---------------------------------------------------------------------------------------------

#[cfg(not(target_pointer_width = "64"))]
compile_error!("gantry ABI v1 is defined for 64-bit targets only");

const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<GantryStrRef>() == 8);
    assert!(size_of::<GantryRange>() == 8);
    assert!(size_of::<GantryResources>() == 24);
    assert!(size_of::<GantryLabel>() == 16);
    assert!(size_of::<GantryNode>() == 96);
    assert!(size_of::<GantryGpu>() == 32);
    assert!(size_of::<GantryQueue>() == 128);
    assert!(size_of::<GantryApp>() == 72);
    assert!(size_of::<GantryRequest>() == 104);
    assert!(size_of::<GantryContainer>() == 64);
    assert!(size_of::<GantryReservation>() == 56);
    assert!(size_of::<GantryNodeUsage>() == 32);
    assert!(size_of::<GantryRdlNode>() == 80);
    assert!(size_of::<GantryReservationDetail>() == 48);
    assert!(size_of::<GantryAllocation>() == 32);
    assert!(size_of::<GantryView>() == 344);
    assert!(core::mem::offset_of!(GantryView, node_usage) == GANTRY_VIEW_SIZE_V1_0 as usize);
    assert!(core::mem::offset_of!(GantryView, reserve_cause) == GANTRY_VIEW_SIZE_V1_1 as usize);
    assert!(core::mem::offset_of!(GantryView, plan_capacity) == 256);
    assert!(core::mem::offset_of!(GantryView, reservation_details) == 296);
    assert!(size_of::<GantryDecision>() == 24);
    assert!(size_of::<GantryOutput>() == 96);
    assert!(core::mem::offset_of!(GantryOutput, allocations) == GANTRY_OUTPUT_SIZE_V1_0 as usize);
    assert!(size_of::<GantryPluginV1>() == 88);
    assert!(core::mem::offset_of!(GantryPluginV1, reserve) == GANTRY_PLUGIN_SIZE_V1_0 as usize);
    assert!(align_of::<GantryResources>() == 8);
    assert!(align_of::<GantryView>() == 8);
    assert!(core::mem::offset_of!(GantryPluginV1, create) == 32);
    assert!(core::mem::offset_of!(GantryView, strings) == 64);
};
