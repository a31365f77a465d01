//! The safe side of a plugin: the [`Plugin`] trait, the [`Decisions`] a hook returns, and the
//! glue that [`export_plugin!`](crate::export_plugin) puts behind the C entry symbol.

use crate::abi::*;
use crate::view::View;
use core::ffi::{CStr, c_char, c_void};

/// Which hooks a plugin implements. Only these get non-null pointers in the vtable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hooks {
    /// `admit` is implemented.
    pub admit: bool,
    /// `order` is implemented.
    pub order: bool,
    /// `place` is implemented.
    pub place: bool,
    /// `rebalance` is implemented.
    pub rebalance: bool,
    /// `reserve` is implemented (ABI 1.3).
    pub reserve: bool,
}

impl Hooks {
    /// No hooks.
    pub const NONE: Hooks =
        Hooks { admit: false, order: false, place: false, rebalance: false, reserve: false };

    /// The `GANTRY_CAP_*` bits for these hooks.
    pub const fn capabilities(&self) -> u64 {
        (if self.admit { GANTRY_CAP_ADMIT } else { 0 })
            | (if self.order { GANTRY_CAP_ORDER } else { 0 })
            | (if self.place { GANTRY_CAP_PLACE } else { 0 })
            | (if self.rebalance { GANTRY_CAP_REBALANCE } else { 0 })
            | (if self.reserve { GANTRY_CAP_RESERVE } else { 0 })
    }

    /// The hooks named by `GANTRY_CAP_*` bits (unknown bits ignored).
    pub const fn from_capabilities(caps: u64) -> Hooks {
        Hooks {
            admit: caps & GANTRY_CAP_ADMIT != 0,
            order: caps & GANTRY_CAP_ORDER != 0,
            place: caps & GANTRY_CAP_PLACE != 0,
            rebalance: caps & GANTRY_CAP_REBALANCE != 0,
            reserve: caps & GANTRY_CAP_RESERVE != 0,
        }
    }

    /// Whether the hook with id `GANTRY_HOOK_*` is in the set.
    pub const fn has(&self, hook: u32) -> bool {
        match hook {
            GANTRY_HOOK_ADMIT => self.admit,
            GANTRY_HOOK_ORDER => self.order,
            GANTRY_HOOK_PLACE => self.place,
            GANTRY_HOOK_REBALANCE => self.rebalance,
            GANTRY_HOOK_RESERVE => self.reserve,
            _ => false,
        }
    }
}

/// The decisions a hook returns, in order, and (from `reserve`) the allocation pieces its
/// PLAN_RESERVATION decisions refer to. Indexes are positions in the [`View`] the hook was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    records: Vec<GantryDecision>,
    allocations: Vec<GantryAllocation>,
}

impl Decisions {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a raw decision record (for plugins that build their own).
    pub fn push(&mut self, decision: GantryDecision) {
        self.records.push(decision);
    }

    fn push_kind(&mut self, kind: u32, subject: u32, target: u32, reason: u32, value: u64) {
        self.records.push(GantryDecision { kind, subject, target, reason, value });
    }

    /// `order`: request `request` comes next.
    pub fn order(&mut self, request: u32) {
        self.push_kind(GANTRY_DECISION_ORDER, request, GANTRY_NONE, 0, 0);
    }

    /// `place`: one container of `request` on `node`. A gang needs `count` of these in one call.
    pub fn place(&mut self, request: u32, node: u32) {
        self.push_kind(GANTRY_DECISION_PLACE, request, node, 0, 0);
    }

    /// `place`: `request` waits this cycle, for a plugin-defined `reason`.
    pub fn wait(&mut self, request: u32, reason: u32) {
        self.push_kind(GANTRY_DECISION_WAIT, request, GANTRY_NONE, reason, 0);
    }

    /// `admit`: accept application `app`.
    pub fn accept_app(&mut self, app: u32) {
        self.push_kind(GANTRY_DECISION_ACCEPT_APP, app, GANTRY_NONE, 0, 0);
    }

    /// `admit`: reject application `app` for a plugin-defined `reason`.
    pub fn reject_app(&mut self, app: u32, reason: u32) {
        self.push_kind(GANTRY_DECISION_REJECT_APP, app, GANTRY_NONE, reason, 0);
    }

    /// `admit`: accept reservation `reservation`.
    pub fn accept_reservation(&mut self, reservation: u32) {
        self.push_kind(GANTRY_DECISION_ACCEPT_RESERVATION, reservation, GANTRY_NONE, 0, 0);
    }

    /// `admit`: reject reservation `reservation` for a plugin-defined `reason`.
    pub fn reject_reservation(&mut self, reservation: u32, reason: u32) {
        self.push_kind(GANTRY_DECISION_REJECT_RESERVATION, reservation, GANTRY_NONE, reason, 0);
    }

    /// `rebalance`: preempt `container`, giving it `grace_ms` to stop.
    pub fn preempt(&mut self, container: u32, grace_ms: u64) {
        self.push_kind(GANTRY_DECISION_PREEMPT, container, GANTRY_NONE, 0, grace_ms);
    }

    /// `rebalance` (ABI 1.2): mark `container` as a preemption candidate (told, not stopped). Marks
    /// not repeated in the next rebalance call are cancelled.
    pub fn mark_preempt(&mut self, container: u32) {
        self.push_kind(GANTRY_DECISION_MARK_PREEMPT, container, GANTRY_NONE, 0, 0);
    }

    /// `rebalance`: kill `container` now.
    pub fn kill(&mut self, container: u32) {
        self.push_kind(GANTRY_DECISION_KILL, container, GANTRY_NONE, 0, 0);
    }

    /// `rebalance`: set `queue`'s guaranteed capacity to `ppm` parts per million of its parent's.
    pub fn set_queue_capacity(&mut self, queue: u32, ppm: u64) {
        self.push_kind(GANTRY_DECISION_SET_QUEUE_CAPACITY, queue, GANTRY_NONE, 0, ppm);
    }

    /// `reserve` (ABI 1.3): reservation `reservation`'s allocation becomes `pieces` (their
    /// `reservation` field is set to `reservation`; `atom`, times and `bundles` are yours).
    pub fn plan_reservation(&mut self, reservation: u32, pieces: impl IntoIterator<Item = GantryAllocation>) {
        self.push_kind(GANTRY_DECISION_PLAN_RESERVATION, reservation, GANTRY_NONE, 0, 0);
        self.allocations.extend(pieces.into_iter().map(|p| GantryAllocation { reservation, ..p }));
    }

    /// Appends raw allocation pieces (what a host does with a shared library's output; a
    /// PLAN_RESERVATION decision names the reservation they belong to).
    pub fn extend_allocations(&mut self, pieces: &[GantryAllocation]) {
        self.allocations.extend_from_slice(pieces);
    }

    /// The allocation pieces so far (ABI 1.3, `reserve` only).
    pub fn allocations(&self) -> &[GantryAllocation] {
        &self.allocations
    }

    /// Appends raw decision records (what a host does with a shared library's output).
    #[inline]
    pub fn extend_from_slice(&mut self, decisions: &[GantryDecision]) {
        self.records.extend_from_slice(decisions);
    }

    /// The decisions so far.
    pub fn as_slice(&self) -> &[GantryDecision] {
        &self.records
    }

    /// Number of decisions.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Removes all decisions and allocation pieces, keeping the allocated memory.
    pub fn clear(&mut self) {
        self.records.clear();
        self.allocations.clear();
    }
}

impl From<Vec<GantryDecision>> for Decisions {
    fn from(records: Vec<GantryDecision>) -> Self {
        Decisions { records, allocations: Vec::new() }
    }
}

/// A hook's failure, with a message for the scheduler's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// What went wrong.
    pub message: String,
}

impl PluginError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        PluginError { message: message.into() }
    }
}

impl core::fmt::Display for PluginError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PluginError {}

impl From<String> for PluginError {
    fn from(message: String) -> Self {
        PluginError { message }
    }
}

impl From<&str> for PluginError {
    fn from(message: &str) -> Self {
        PluginError { message: message.to_owned() }
    }
}

/// A scheduling policy. Implement the hooks you list in [`Plugin::HOOKS`] and export the type
/// with [`export_plugin!`](crate::export_plugin); the glue catches panics and speaks the C ABI.
///
/// The host calls one instance from one thread at a time. A hook may be called again with the
/// same view after it returned more decisions than the host's buffer held; the glue answers such a
/// retry from what the first call produced, so a hook runs once per view.
pub trait Plugin: Sized + Send + 'static {
    /// Plugin name, as shown by `gantry plugin inspect`.
    const NAME: &'static CStr;
    /// Plugin version.
    const VERSION: &'static CStr;
    /// The hooks this plugin implements.
    const HOOKS: Hooks;

    /// Builds an instance from the plugin's configuration, a JSON object (`{}` when the
    /// scheduler's config has no table for it).
    fn create(config: &str) -> Result<Self, PluginError>;

    /// Admission: accept or reject new applications (`GANTRY_APP_NEW`) and reservations
    /// (`GANTRY_RESERVATION_NEW`). What is not mentioned is accepted.
    fn admit(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let _ = (view, out);
        Err(PluginError::new("admit is not implemented"))
    }

    /// Ordering: emit ORDER decisions for pending requests, most urgent first. Requests left out
    /// keep the engine's order after the ones given.
    fn order(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let _ = (view, out);
        Err(PluginError::new("order is not implemented"))
    }

    /// Placement: emit PLACE (and optionally WAIT) decisions for `view.pending`.
    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let _ = (view, out);
        Err(PluginError::new("place is not implemented"))
    }

    /// Periodic rebalancing: PREEMPT, KILL and SET_QUEUE_CAPACITY decisions.
    fn rebalance(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let _ = (view, out);
        Err(PluginError::new("rebalance is not implemented"))
    }

    /// Reservation planning (ABI 1.3): `view.plan.cause` says why. Answer PLAN_RESERVATION with
    /// the allocation ([`Decisions::plan_reservation`]) or REJECT_RESERVATION; the host checks the
    /// whole answer (ABI.md §8, `reserve`).
    fn reserve(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        let _ = (view, out);
        Err(PluginError::new("reserve is not implemented"))
    }

    /// Calls the hook with id `GANTRY_HOOK_*`.
    fn call_hook(&mut self, hook: u32, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        match hook {
            GANTRY_HOOK_ADMIT => self.admit(view, out),
            GANTRY_HOOK_ORDER => self.order(view, out),
            GANTRY_HOOK_PLACE => self.place(view, out),
            GANTRY_HOOK_REBALANCE => self.rebalance(view, out),
            GANTRY_HOOK_RESERVE => self.reserve(view, out),
            other => Err(PluginError::new(format!("unknown hook id {other}"))),
        }
    }
}

/// Exports a [`Plugin`] type as a gantry ABI v1 shared library: defines the entry symbol
/// `gantry_plugin_v1` and its static vtable. Use once per `cdylib`, as in the crate-level example:
/// `gantry_sdk::export_plugin!(MyPlugin);`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        /// The gantry ABI v1 entry symbol.
        #[unsafe(no_mangle)]
        pub extern "C" fn gantry_plugin_v1(
            host_major: u16,
            host_minor: u16,
        ) -> *const $crate::abi::GantryPluginV1 {
            static VTABLE: $crate::abi::GantryPluginV1 = $crate::__private::vtable::<$plugin>();
            $crate::__private::entry(&VTABLE, host_major, host_minor)
        }
    };
}

/// Glue used by [`export_plugin!`]; not part of the public API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    /// What the glue keeps per instance: the plugin, and decisions kept for a retry after
    /// `GANTRY_BUFFER_FULL`.
    pub struct Instance<P> {
        plugin: P,
        scratch: Decisions,
        /// Hook whose decisions are in `scratch`, awaiting the host's retry after
        /// `GANTRY_BUFFER_FULL`.
        pending_retry: Option<u32>,
    }

    /// The vtable for `P`.
    pub const fn vtable<P: Plugin>() -> GantryPluginV1 {
        let hooks = P::HOOKS;
        GantryPluginV1 {
            struct_size: core::mem::size_of::<GantryPluginV1>() as u32,
            abi_major: GANTRY_ABI_MAJOR,
            abi_minor: GANTRY_ABI_MINOR,
            name: P::NAME.as_ptr(),
            version: P::VERSION.as_ptr(),
            capabilities: hooks.capabilities(),
            create: Some(create::<P> as GantryCreateFn),
            destroy: Some(destroy::<P> as GantryDestroyFn),
            admit: if hooks.admit { Some(hook::<P, GANTRY_HOOK_ADMIT> as GantryHookFn) } else { None },
            order: if hooks.order { Some(hook::<P, GANTRY_HOOK_ORDER> as GantryHookFn) } else { None },
            place: if hooks.place { Some(hook::<P, GANTRY_HOOK_PLACE> as GantryHookFn) } else { None },
            rebalance: if hooks.rebalance {
                Some(hook::<P, GANTRY_HOOK_REBALANCE> as GantryHookFn)
            } else {
                None
            },
            reserve: if hooks.reserve { Some(hook::<P, GANTRY_HOOK_RESERVE> as GantryHookFn) } else { None },
        }
    }

    /// The entry symbol's body: refuse hosts of another major version, and hosts too old for a
    /// hook the plugin implements (a 1.0–1.2 host cannot call `reserve`; it would refuse the
    /// capability bit anyway, and a plugin built for 1.3 that has only older hooks still loads).
    pub fn entry(vtable: &'static GantryPluginV1, host_major: u16, host_minor: u16) -> *const GantryPluginV1 {
        if host_major != GANTRY_ABI_MAJOR {
            return core::ptr::null();
        }
        if vtable.capabilities & GANTRY_CAP_RESERVE != 0 && host_minor < 3 {
            return core::ptr::null();
        }
        vtable
    }

    /// Copies `message` into the host's message buffer, truncated at a character boundary.
    fn write_message(out: &mut GantryOutput, message: &str) {
        if out.message.is_null() || out.message_capacity == 0 {
            out.message_len = 0;
            return;
        }
        let cap = usize::try_from(out.message_capacity).unwrap_or(usize::MAX);
        let mut n = message.len().min(cap);
        while !message.is_char_boundary(n) {
            n -= 1;
        }
        // SAFETY: the host gave `message_capacity` writable bytes at `message`; we write `n` of
        // them from a distinct Rust string.
        unsafe { core::ptr::copy_nonoverlapping(message.as_ptr(), out.message, n) };
        out.message_len = n as u64;
    }

    /// Checks the host's output struct and returns it as a reference.
    ///
    /// # Safety
    /// `out` must be null or point at a `GantryOutput` valid for writes for the call.
    #[inline]
    unsafe fn output<'o>(out: *mut GantryOutput) -> Option<&'o mut GantryOutput> {
        // SAFETY: the caller guarantees `out` is null or valid.
        let out = unsafe { out.as_mut()? };
        // A 1.0–1.2 host's output ends before `allocations`; those four fields are then never
        // touched (`has_allocations`).
        if out.struct_size < GANTRY_OUTPUT_SIZE_V1_0 {
            return None;
        }
        out.len = 0;
        out.needed = 0;
        out.message_len = 0;
        if has_allocations(out) {
            out.allocations_len = 0;
            out.allocations_needed = 0;
        }
        Some(out)
    }

    /// Whether the host's output is long enough (ABI ≥ 1.3) to carry allocation pieces.
    #[inline]
    fn has_allocations(out: &GantryOutput) -> bool {
        out.struct_size as usize >= core::mem::size_of::<GantryOutput>()
    }

    /// `create` for `P`.
    ///
    /// # Safety
    /// Called by the host per the ABI: `config` points at `config_len` bytes, `instance` and
    /// `out` are valid for writes.
    pub unsafe extern "C" fn create<P: Plugin>(
        config: *const c_char,
        config_len: u64,
        instance: *mut *mut c_void,
        out: *mut GantryOutput,
    ) -> i32 {
        // SAFETY: per the ABI, `out` is null or valid for the call.
        let Some(out) = (unsafe { output(out) }) else {
            return GANTRY_ERR_INVALID_VIEW;
        };
        if instance.is_null() {
            write_message(out, "create: instance pointer is null");
            return GANTRY_ERR_INVALID_VIEW;
        }
        let bytes: &[u8] = if config.is_null() || config_len == 0 {
            b"{}"
        } else {
            // SAFETY: the host passes `config_len` readable bytes at `config`.
            unsafe { core::slice::from_raw_parts(config.cast::<u8>(), config_len as usize) }
        };
        let Ok(text) = core::str::from_utf8(bytes) else {
            write_message(out, "configuration is not UTF-8");
            return GANTRY_ERR_CONFIG;
        };
        crate::panics::install();
        match crate::panics::catch(|| P::create(text)) {
            Ok(Ok(plugin)) => {
                let boxed = Box::new(Instance { plugin, scratch: Decisions::new(), pending_retry: None });
                // SAFETY: checked non-null above; the host owns the slot.
                unsafe { *instance = Box::into_raw(boxed).cast::<c_void>() };
                GANTRY_OK
            }
            Ok(Err(e)) => {
                write_message(out, &e.message);
                GANTRY_ERR_CONFIG
            }
            Err(panic) => {
                write_message(out, &panic);
                GANTRY_ERR_PANIC
            }
        }
    }

    /// `destroy` for `P`.
    ///
    /// # Safety
    /// `instance` must be null or a pointer returned by `create::<P>` not yet destroyed.
    pub unsafe extern "C" fn destroy<P: Plugin>(instance: *mut c_void) {
        if instance.is_null() {
            return;
        }
        // SAFETY: the pointer came from Box::into_raw in create::<P> and is destroyed once.
        let boxed = unsafe { Box::from_raw(instance.cast::<Instance<P>>()) };
        // A panicking Drop must not unwind into the host.
        let _ = crate::panics::catch(move || drop(boxed));
    }

    /// Any hook of `P`, selected by `HOOK`.
    ///
    /// # Safety
    /// Called by the host per the ABI: `instance` from `create::<P>`, `view` valid for the call,
    /// `out` valid for writes with `capacity` decision slots.
    pub unsafe extern "C" fn hook<P: Plugin, const HOOK: u32>(
        instance: *mut c_void,
        view: *const GantryView,
        out: *mut GantryOutput,
    ) -> i32 {
        // SAFETY: per the ABI, `out` is null or valid for the call.
        let Some(out) = (unsafe { output(out) }) else {
            return GANTRY_ERR_INVALID_VIEW;
        };
        if instance.is_null() || view.is_null() {
            write_message(out, "instance or view pointer is null");
            return GANTRY_ERR_INVALID_VIEW;
        }
        // SAFETY: non-null, and the host keeps at least the view's first field valid for the call.
        let host_size = unsafe { (*view).struct_size };
        // An older host's view is shorter than ours (minor versions append fields): copy what it
        // has into a zeroed view of our size, so nothing past its end is ever read.
        let copied = (host_size as usize).min(core::mem::size_of::<GantryView>());
        let mut local = core::mem::MaybeUninit::<GantryView>::zeroed();
        // SAFETY: the host's view is `host_size` readable bytes; `local` has room for `copied`.
        unsafe { core::ptr::copy_nonoverlapping(view.cast::<u8>(), local.as_mut_ptr().cast::<u8>(), copied) };
        // SAFETY: every field is an integer or a raw pointer, for which all-zero bytes are valid.
        let local = unsafe { local.assume_init() };
        let raw = &local;
        if let Err(e) = View::check_raw(raw) {
            write_message(out, &e.to_string());
            return GANTRY_ERR_INVALID_VIEW;
        }
        // SAFETY: checked just above; the host keeps the arrays valid for the call.
        let view = unsafe { View::from_checked_raw(raw) };
        // SAFETY: `instance` came from create::<P>; the host calls one instance from one thread.
        let inst = unsafe { &mut *instance.cast::<Instance<P>>() };
        // Answer a retry from the first call's decisions, so the hook runs once per view.
        let key = HOOK;
        if out.attempt == 0 || inst.pending_retry != Some(key) {
            inst.scratch.clear();
            inst.pending_retry = None;
            let Instance { plugin, scratch, .. } = inst;
            match crate::panics::catch(|| plugin.call_hook(HOOK, &view, scratch)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    write_message(out, &e.message);
                    return GANTRY_ERR_INTERNAL;
                }
                Err(panic) => {
                    write_message(out, &panic);
                    return GANTRY_ERR_PANIC;
                }
            }
        }
        let decisions = inst.scratch.as_slice();
        let pieces = inst.scratch.allocations();
        if !pieces.is_empty() && !has_allocations(out) {
            write_message(
                out,
                "the host's output has no room for allocation pieces (host ABI older than 1.3)",
            );
            return GANTRY_ERR_INVALID_VIEW;
        }
        let n = decisions.len() as u64;
        let m = pieces.len() as u64;
        let decisions_short = n > out.capacity || (n > 0 && out.decisions.is_null());
        let pieces_short = m > 0 && (m > out.allocations_capacity || out.allocations.is_null());
        if decisions_short || pieces_short {
            out.needed = n;
            if has_allocations(out) {
                out.allocations_needed = m;
            }
            inst.pending_retry = Some(key);
            return GANTRY_BUFFER_FULL;
        }
        // SAFETY: the host gave `capacity` >= n writable slots at `decisions`.
        unsafe { core::ptr::copy_nonoverlapping(decisions.as_ptr(), out.decisions, decisions.len()) };
        out.len = n;
        if m > 0 {
            // SAFETY: checked above: the host's output has the 1.3 fields and `allocations_capacity`
            // >= m writable pieces at a non-null `allocations`.
            unsafe { core::ptr::copy_nonoverlapping(pieces.as_ptr(), out.allocations, pieces.len()) };
            out.allocations_len = m;
        }
        inst.pending_retry = None;
        GANTRY_OK
    }
}
