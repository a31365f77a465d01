//! One plugin instance and the host-owned buffers its hooks write into: the call itself, the
//! output protocol (sdk/ABI.md §9) and its limits.

use gantry_engine::PolicyError;
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, View};
use std::ffi::{CString, c_void};

/// Bytes of room for a plugin's error message.
const MESSAGE_CAPACITY: usize = 1024;
/// Decision slots offered on a first call.
const INITIAL_DECISIONS: usize = 256;
/// Slack over the view-derived bound on how many decisions a hook may return.
const DECISION_SLACK: u64 = 4096;
/// Allocation pieces offered on a first `reserve` call (32 KiB).
const INITIAL_ALLOCATIONS: usize = 1024;
/// Pieces per atom of every reservation in the view that the limit on a `reserve` answer allows
/// beyond the pieces the plan already holds: room to re-plan each atom in that many runs.
const PIECES_PER_ATOM: u64 = 64;
/// Slack over the view-derived bound on how many pieces a `reserve` call may return (8 MiB of
/// pieces): twice the engine's limit for one reservation (counted as `bad_allocation` when
/// exceeded), so that a planner that overdoes one reservation meets that refusal, with its
/// reason, rather than a protocol violation here.
const ALLOCATION_SLACK: u64 = 2 * gantry_engine::MAX_ALLOCATION_PIECES as u64;

/// A plugin instance with the host buffers its hooks write into: all one call needs. It lives
/// on exactly one thread at a time (the engine's, or the plugin's worker), and destroys the
/// instance when dropped.
pub(super) struct Instance {
    vtable: GantryPluginV1,
    instance: *mut c_void,
    /// Host-owned decision buffer; always fully initialised (`len` is the capacity offered).
    decisions: Vec<GantryDecision>,
    /// Host-owned allocation buffer, offered in `reserve` calls only; fully initialised.
    allocations: Vec<GantryAllocation>,
    message: Vec<u8>,
}

// SAFETY: the instance pointer is only used through `&mut Instance`, so by one thread at a time,
// which is what the ABI asks of hosts (sdk/ABI.md §12); the vtable points at static code and data.
unsafe impl Send for Instance {}

/// An output over the host's buffers; `allocations` is empty (capacity 0, null) outside
/// `reserve` calls.
fn output(
    decisions: &mut [GantryDecision],
    allocations: &mut [GantryAllocation],
    message: &mut [u8],
    attempt: u32,
) -> GantryOutput {
    GantryOutput {
        struct_size: std::mem::size_of::<GantryOutput>() as u32,
        attempt,
        decisions: decisions.as_mut_ptr(),
        capacity: decisions.len() as u64,
        len: 0,
        needed: 0,
        message: message.as_mut_ptr(),
        message_capacity: message.len() as u64,
        message_len: 0,
        allocations: if allocations.is_empty() { std::ptr::null_mut() } else { allocations.as_mut_ptr() },
        allocations_capacity: allocations.len() as u64,
        allocations_len: 0,
        allocations_needed: 0,
    }
}

fn message_text(message: &[u8], out: &GantryOutput) -> String {
    let n = (out.message_len.min(message.len() as u64)) as usize;
    String::from_utf8_lossy(&message[..n]).into_owned()
}

/// How many decisions a hook could sensibly return for this view; more is a broken plugin.
fn decision_limit(view: &View<'_>) -> u64 {
    let n = match view.hook {
        GANTRY_HOOK_ADMIT => (view.apps.len() + view.reservations.len()) as u64,
        GANTRY_HOOK_ORDER => view.pending.len() as u64,
        GANTRY_HOOK_PLACE => view
            .pending
            .iter()
            .filter_map(|&r| view.requests.get(r as usize))
            .map(|r| u64::from(r.count.saturating_sub(r.placed)) + 1)
            .sum(),
        // One PLAN_RESERVATION or REJECT_RESERVATION per reservation.
        GANTRY_HOOK_RESERVE => view.reservations.len() as u64,
        _ => (view.containers.len() + view.queues.len()) as u64,
    };
    n.saturating_mul(2).saturating_add(DECISION_SLACK)
}

/// How many allocation pieces a `reserve` call could sensibly return for this view:
/// `2 × (allocations_len + 64 × atoms) + 262 144`, where `allocations_len` is every piece the plan
/// holds now (a re-plan may restate all of them) and `atoms` counts the atoms of every
/// reservation in the view (each may be planned anew in up to 64 runs). More is a broken plugin.
fn allocation_limit(view: &View<'_>) -> u64 {
    let atoms = view.plan.details.iter().fold(0u64, |n, d| n.saturating_add(u64::from(d.atoms)));
    (view.plan.allocations.len() as u64)
        .saturating_add(atoms.saturating_mul(PIECES_PER_ATOM))
        .saturating_mul(2)
        .saturating_add(ALLOCATION_SLACK)
}

impl Instance {
    /// Creates an instance of `vtable`'s plugin with `config_json`: the plugin's `create` (if it
    /// has one) or a null instance. On failure, `create`'s return code and message.
    pub(super) fn create(vtable: GantryPluginV1, config_json: &str) -> Result<Instance, (i32, String)> {
        let mut message = vec![0u8; MESSAGE_CAPACITY];
        let mut instance: *mut c_void = std::ptr::null_mut();
        if let Some(create) = vtable.create {
            let config = CString::new(config_json)
                .map_err(|_| (GANTRY_ERR_CONFIG, "configuration contains a NUL byte".to_owned()))?;
            let mut out = output(&mut [], &mut [], &mut message, 0);
            // SAFETY: per the ABI: config bytes + NUL, a slot for the instance, a valid output.
            let rc = unsafe { create(config.as_ptr(), config_json.len() as u64, &mut instance, &mut out) };
            if rc != GANTRY_OK {
                return Err((rc, message_text(&message, &out)));
            }
        }
        Ok(Instance {
            vtable,
            instance,
            decisions: vec![GantryDecision::default(); INITIAL_DECISIONS],
            allocations: Vec::new(),
            message,
        })
    }

    /// Calls the hook named by `view.hook`, growing the buffers once if asked.
    pub(super) fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        let reserve = view.hook == GANTRY_HOOK_RESERVE;
        let hook = match view.hook {
            GANTRY_HOOK_ADMIT => self.vtable.admit,
            GANTRY_HOOK_ORDER => self.vtable.order,
            GANTRY_HOOK_PLACE => self.vtable.place,
            GANTRY_HOOK_REBALANCE => self.vtable.rebalance,
            GANTRY_HOOK_RESERVE => self.vtable.reserve,
            _ => None,
        }
        .ok_or(PolicyError::Unsupported)?;
        if reserve && self.allocations.is_empty() {
            self.allocations.resize(INITIAL_ALLOCATIONS, GantryAllocation::default());
        }
        let raw = view.to_raw();
        for attempt in 0..2 {
            let offered: &mut [GantryAllocation] = if reserve { &mut self.allocations } else { &mut [] };
            let pieces_offered = offered.len() as u64;
            let mut o = output(&mut self.decisions, offered, &mut self.message, attempt);
            // SAFETY: the instance came from this vtable's `create` (or is null for a plugin
            // without one); `raw` borrows `view`'s slices, which outlive the call; `o` points at
            // our initialised buffers with their true sizes.
            let rc = unsafe { hook(self.instance, &raw, &mut o) };
            match rc {
                GANTRY_OK => {
                    if o.len > self.decisions.len() as u64 {
                        return Err(PolicyError::Protocol(format!(
                            "wrote {} decisions into a buffer of {}",
                            o.len,
                            self.decisions.len()
                        )));
                    }
                    if o.allocations_len > pieces_offered {
                        return Err(PolicyError::Protocol(format!(
                            "wrote {} allocation pieces into a buffer of {pieces_offered}",
                            o.allocations_len
                        )));
                    }
                    out.extend_from_slice(&self.decisions[..o.len as usize]);
                    if reserve {
                        out.extend_allocations(&self.allocations[..o.allocations_len as usize]);
                    }
                    return Ok(());
                }
                GANTRY_BUFFER_FULL => {
                    let limit = decision_limit(view);
                    let pieces_limit = if reserve { allocation_limit(view) } else { 0 };
                    let decisions_short = o.needed > self.decisions.len() as u64;
                    let pieces_short = reserve && o.allocations_needed > pieces_offered;
                    let over = o.needed > limit || (reserve && o.allocations_needed > pieces_limit);
                    if attempt > 0 || !(decisions_short || pieces_short) || over {
                        let pieces = if reserve {
                            format!(
                                " and {} allocation slots (offered {pieces_offered}, limit {pieces_limit})",
                                o.allocations_needed
                            )
                        } else {
                            String::new()
                        };
                        return Err(PolicyError::Protocol(format!(
                            "asked for {} decision slots (offered {}, limit {limit}){pieces}",
                            o.needed,
                            self.decisions.len()
                        )));
                    }
                    if decisions_short {
                        self.decisions.resize(o.needed as usize, GantryDecision::default());
                    }
                    if pieces_short {
                        self.allocations.resize(o.allocations_needed as usize, GantryAllocation::default());
                    }
                }
                GANTRY_ERR_PANIC => return Err(PolicyError::Panicked(message_text(&self.message, &o))),
                code if code < 0 => {
                    return Err(PolicyError::Failed(format!(
                        "code {code}: {}",
                        message_text(&self.message, &o)
                    )));
                }
                code => return Err(PolicyError::Protocol(format!("unknown return code {code}"))),
            }
        }
        Err(PolicyError::Protocol("buffer still full after growing it".into()))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(destroy) = self.vtable.destroy {
            if !self.instance.is_null() {
                // SAFETY: the instance came from this vtable's `create` and is destroyed once.
                unsafe { destroy(self.instance) };
            }
        }
    }
}
