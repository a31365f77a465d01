//! A plugin built against ABI 1.1 works under a 1.0 host, whose view is shorter and has no
//! `node_usage`: the SDK glue reads only the bytes the host declared, and the plugin sees an
//! empty `node_usage`. Under a 1.1 host it sees the host's array.
//!
//! The test plays the host, so it calls the C entry points directly; that is the ABI boundary,
//! where `unsafe` belongs.

use core::ffi::c_void;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};
use std::sync::Mutex;

/// What the plugin saw on its last call: (nodes, node_usage records).
static SEEN: Mutex<Option<(usize, Vec<GantryNodeUsage>)>> = Mutex::new(None);
/// The tests share `SEEN`, so they take turns.
static SERIAL: Mutex<()> = Mutex::new(());

struct Recorder;

impl Plugin for Recorder {
    const NAME: &'static core::ffi::CStr = c"recorder";
    const VERSION: &'static core::ffi::CStr = c"1";
    const HOOKS: Hooks = Hooks { admit: false, order: false, place: true, rebalance: false, reserve: false };

    fn create(_config: &str) -> Result<Self, PluginError> {
        Ok(Recorder)
    }

    fn place(&mut self, view: &View<'_>, _out: &mut Decisions) -> Result<(), PluginError> {
        *SEEN.lock().map_err(|_| PluginError::new("poisoned"))? =
            Some((view.nodes.len(), view.node_usage.to_vec()));
        Ok(())
    }
}

/// A 1.0 host's view: 224 bytes, 8-aligned, nothing after.
#[repr(C, align(8))]
struct ViewV1_0([u8; GANTRY_VIEW_SIZE_V1_0 as usize]);

fn output() -> GantryOutput {
    GantryOutput {
        struct_size: core::mem::size_of::<GantryOutput>() as u32,
        attempt: 0,
        decisions: core::ptr::NonNull::dangling().as_ptr(),
        capacity: 0,
        len: 0,
        needed: 0,
        message: core::ptr::NonNull::dangling().as_ptr(),
        message_capacity: 0,
        message_len: 0,
        allocations: core::ptr::null_mut(),
        allocations_capacity: 0,
        allocations_len: 0,
        allocations_needed: 0,
    }
}

/// Calls Recorder's place hook through the glue with `view`, returning the code.
fn call_place(view: *const GantryView) -> i32 {
    let mut instance: *mut c_void = core::ptr::null_mut();
    let mut out = output();
    // SAFETY: "{}" is 2 readable bytes; `instance` and `out` are valid for writes.
    let code =
        unsafe { gantry_sdk::__private::create::<Recorder>(c"{}".as_ptr(), 2, &mut instance, &mut out) };
    assert_eq!(code, GANTRY_OK);
    let mut out = output();
    // SAFETY: `instance` came from create; `view` is valid for the bytes its struct_size says.
    let code =
        unsafe { gantry_sdk::__private::hook::<Recorder, GANTRY_HOOK_PLACE>(instance, view, &mut out) };
    // SAFETY: the instance came from create and is destroyed once.
    unsafe { gantry_sdk::__private::destroy::<Recorder>(instance) };
    code
}

#[test]
fn a_1_1_plugin_reads_a_1_0_view_without_node_usage_and_a_1_1_view_with_it() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let nodes = [GantryNode::default(), GantryNode::default()];
    let usage = [
        GantryNodeUsage { cpu_millis: 1, ..Default::default() },
        GantryNodeUsage { memory_bytes: 2, sampled_ms: 7, ..Default::default() },
    ];
    let full = View {
        hook: GANTRY_HOOK_PLACE,
        now_ms: 1,
        cycle: 1,
        seed: 1,
        cluster: GantryResources::default(),
        strings: &[],
        labels: &[],
        nodes: &nodes,
        gpus: &[],
        queues: &[],
        apps: &[],
        requests: &[],
        containers: &[],
        reservations: &[],
        pending: &[],
        node_usage: &usage,
        plan: gantry_sdk::PlanView::default(),
    }
    .to_raw();

    assert_eq!(call_place(&full), GANTRY_OK);
    assert_eq!(SEEN.lock().expect("lock").take(), Some((2, usage.to_vec())));

    // The same view as a 1.0 host builds it: the prefix only, struct_size 224.
    let mut old = ViewV1_0([0; GANTRY_VIEW_SIZE_V1_0 as usize]);
    // SAFETY: `full` has at least 224 bytes; `old` has exactly 224 and does not overlap it.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&full as *const GantryView).cast::<u8>(),
            old.0.as_mut_ptr(),
            old.0.len(),
        )
    };
    old.0[..4].copy_from_slice(&GANTRY_VIEW_SIZE_V1_0.to_ne_bytes());
    assert_eq!(call_place(old.0.as_ptr().cast::<GantryView>()), GANTRY_OK);
    assert_eq!(SEEN.lock().expect("lock").take(), Some((2, Vec::new())), "no node_usage from a 1.0 host");

    // Shorter than 1.0 is refused.
    let mut short = ViewV1_0([0; GANTRY_VIEW_SIZE_V1_0 as usize]);
    short.0.copy_from_slice(&old.0);
    short.0[..4].copy_from_slice(&(GANTRY_VIEW_SIZE_V1_0 - 8).to_ne_bytes());
    assert_eq!(call_place(short.0.as_ptr().cast::<GantryView>()), GANTRY_ERR_INVALID_VIEW);
}

/// The bytes of a 1.1/1.2 host's view: 240 bytes, 8-aligned.
#[repr(C, align(8))]
struct ViewV1_1([u8; GANTRY_VIEW_SIZE_V1_1 as usize]);

#[test]
fn a_1_3_plugin_reads_a_1_2_view_and_writes_into_a_1_2_output() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let nodes = [GantryNode::default()];
    let usage = [GantryNodeUsage { cpu_millis: 5, sampled_ms: 3, ..Default::default() }];
    let full = View {
        hook: GANTRY_HOOK_PLACE,
        now_ms: 1,
        cycle: 1,
        seed: 1,
        cluster: GantryResources::default(),
        strings: &[],
        labels: &[],
        nodes: &nodes,
        gpus: &[],
        queues: &[],
        apps: &[],
        requests: &[],
        containers: &[],
        reservations: &[],
        pending: &[],
        node_usage: &usage,
        plan: gantry_sdk::PlanView::default(),
    }
    .to_raw();
    // The view as a 1.1/1.2 host builds it: everything up to `node_usage`, struct_size 240.
    let mut old = ViewV1_1([0; GANTRY_VIEW_SIZE_V1_1 as usize]);
    // SAFETY: `full` has at least 240 bytes; `old` has exactly 240 and does not overlap it.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&full as *const GantryView).cast::<u8>(),
            old.0.as_mut_ptr(),
            old.0.len(),
        )
    };
    old.0[..4].copy_from_slice(&GANTRY_VIEW_SIZE_V1_1.to_ne_bytes());

    let mut instance: *mut c_void = core::ptr::null_mut();
    let mut out = output();
    // SAFETY: "{}" is 2 readable bytes; `instance` and `out` are valid for writes.
    let code =
        unsafe { gantry_sdk::__private::create::<Recorder>(c"{}".as_ptr(), 2, &mut instance, &mut out) };
    assert_eq!(code, GANTRY_OK);
    // A 1.2 host's output is 64 bytes: the glue must not touch the allocation fields beyond it.
    let mut out = output();
    out.struct_size = GANTRY_OUTPUT_SIZE_V1_0;
    out.allocations_len = 77;
    // SAFETY: `instance` came from create; `old` is valid for the 240 bytes its struct_size says.
    let code = unsafe {
        gantry_sdk::__private::hook::<Recorder, GANTRY_HOOK_PLACE>(instance, old.0.as_ptr().cast(), &mut out)
    };
    // SAFETY: the instance came from create and is destroyed once.
    unsafe { gantry_sdk::__private::destroy::<Recorder>(instance) };
    assert_eq!(code, GANTRY_OK, "a 1.2 host's output is enough for hooks without allocations");
    assert_eq!(out.allocations_len, 77, "fields beyond a 1.2 output's struct_size are left alone");
    assert_eq!(SEEN.lock().expect("lock").take(), Some((1, usage.to_vec())), "node_usage from a 1.2 host");
}
