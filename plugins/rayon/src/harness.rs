//! A minimal reservation host, for this crate's tests, examples and benchmarks: it keeps
//! reservations as records the way the engine does (definition in engine time, arrival, deadline,
//! priority, state, accepted allocation), lays them out in a view as ABI 1.3 says (reservation
//! details, definition nodes breadth first, allocation pieces per reservation sorted by atom then
//! start), calls the plugin's `reserve` hook and applies the answer.
//!
//! The view's records are kept by the SDK's test kit ([`ViewBuilder`], which lays a reservation
//! out as the engine does); this module is behind the crate's `harness` feature, which the tests,
//! examples and benchmarks turn on, so the plugin itself does not carry it.
//!
//! The call goes through the SDK's C glue ([`Mode::Glue`]: `gantry_sdk::__private::hook` with a
//! raw `GantryView` and a host-owned `GantryOutput`, what `libgantry_rayon.so` does inside the
//! scheduler, minus `dlopen`) or straight to the Rust instance ([`Mode::Direct`], which lets a
//! caller read the plugin's statistics). The host does **not** validate answers (the engine
//! does); tests check them themselves.

use core::ffi::{c_char, c_void};
use std::time::{Duration, Instant};

use gantry_rdl::Expr;
use gantry_sdk::abi::*;
use gantry_sdk::testkit::ViewBuilder;
use gantry_sdk::{Decisions, Plugin};

use crate::plugin::Rayon;

/// How the host calls the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Through the C glue, as the scheduler calls a shared library.
    Glue,
    /// A direct Rust call.
    Direct,
}

/// A reservation as the host keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Its id.
    pub id: u64,
    /// Its definition, engine time (already wrapped in `window(arrival, deadline, …)`).
    pub definition: Expr,
    /// Earliest start, engine ms.
    pub arrival_ms: u64,
    /// Deadline, engine ms.
    pub deadline_ms: u64,
    /// When it was accepted (0 while NEW).
    pub accepted_ms: u64,
    /// Higher is more important.
    pub priority: i32,
    /// `GANTRY_RESERVATION_NEW` or `_ACCEPTED`.
    pub state: u32,
    /// Its accepted allocation, sorted by atom then start (`reservation` unused).
    pub allocation: Vec<GantryAllocation>,
}

/// What one call answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The decisions.
    pub decisions: Vec<GantryDecision>,
    /// The allocation pieces of its PLAN_RESERVATION decisions.
    pub pieces: Vec<GantryAllocation>,
    /// How long the hook took (the call alone, not the host's view building).
    pub elapsed: Duration,
}

impl Answer {
    /// The plan answered for view index `index`, if any (sorted by atom then start).
    pub fn planned(&self, index: u32) -> Option<Vec<GantryAllocation>> {
        self.decisions.iter().any(|d| d.kind == GANTRY_DECISION_PLAN_RESERVATION && d.subject == index).then(
            || {
                let mut v: Vec<GantryAllocation> =
                    self.pieces.iter().filter(|p| p.reservation == index).copied().collect();
                v.sort_by_key(|p| (p.atom, p.start_ms));
                v
            },
        )
    }

    /// The rejection reason answered for view index `index`, if any.
    pub fn rejected(&self, index: u32) -> Option<u32> {
        self.decisions
            .iter()
            .find(|d| d.kind == GANTRY_DECISION_REJECT_RESERVATION && d.subject == index)
            .map(|d| d.reason)
    }
}

enum Caller {
    Glue(*mut c_void),
    Direct(Box<Rayon>),
}

/// The host. See the [module documentation](self).
pub struct Host {
    caller: Caller,
    /// The clock, engine ms.
    pub now_ms: u64,
    /// The plan's capacity from now on.
    pub capacity: GantryResources,
    /// The follower step (the planner's hint).
    pub step_ms: u64,
    /// How far after its submission a deadline may lie.
    pub horizon_ms: u64,
    records: Vec<Record>,
    /// The records as the view lays them out (reservations, details, definition nodes and
    /// allocations); the plan's settings are set at each call.
    view: ViewBuilder,
    /// The view arrays no longer match `records`.
    dirty: bool,
    decisions: Vec<GantryDecision>,
    pieces: Vec<GantryAllocation>,
    message: Vec<u8>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("now_ms", &self.now_ms).field("records", &self.records.len()).finish()
    }
}

fn message(buf: &[u8], len: u64) -> String {
    String::from_utf8_lossy(&buf[..(len as usize).min(buf.len())]).into_owned()
}

impl Host {
    /// A host with an empty plan of `capacity`, and a plugin instance created from `config`.
    pub fn new(
        mode: Mode,
        config: &str,
        capacity: GantryResources,
        step_ms: u64,
        horizon_ms: u64,
    ) -> Result<Host, String> {
        let mut host = Host {
            caller: Caller::Direct(Box::new(Rayon::create("{}").map_err(|e| e.message)?)),
            now_ms: 0,
            capacity,
            step_ms,
            horizon_ms,
            records: Vec::new(),
            view: ViewBuilder::new(GANTRY_HOOK_RESERVE),
            dirty: false,
            decisions: vec![GantryDecision::default(); 16],
            pieces: vec![GantryAllocation::default(); 64],
            message: vec![0; 1024],
        };
        host.restart(mode, config)?;
        Ok(host)
    }

    /// Replaces the plugin instance with a new one (a scheduler restart: the records stay).
    pub fn restart(&mut self, mode: Mode, config: &str) -> Result<(), String> {
        let caller = match mode {
            Mode::Direct => Caller::Direct(Box::new(Rayon::create(config).map_err(|e| e.message)?)),
            Mode::Glue => {
                let mut instance: *mut c_void = core::ptr::null_mut();
                let mut out = self.output(0);
                // SAFETY: `config` is `len` readable bytes, `instance` a writable slot, `out` a valid
                // output whose buffers outlive the call: what the ABI asks of a host.
                let rc = unsafe {
                    gantry_sdk::__private::create::<Rayon>(
                        config.as_ptr().cast::<c_char>(),
                        config.len() as u64,
                        &mut instance,
                        &mut out,
                    )
                };
                if rc != GANTRY_OK {
                    return Err(message(&self.message, out.message_len));
                }
                Caller::Glue(instance)
            }
        };
        self.destroy();
        self.caller = caller;
        Ok(())
    }

    fn destroy(&mut self) {
        if let Caller::Glue(instance) = self.caller {
            // SAFETY: the instance came from `create::<Rayon>` and is destroyed once (the caller
            // is replaced right after).
            unsafe { gantry_sdk::__private::destroy::<Rayon>(instance) };
            self.caller = Caller::Glue(core::ptr::null_mut());
        }
    }

    /// A host with the same settings, clock and records, and a new plugin instance (a
    /// restarted scheduler, or a second planner to compare on the same plan).
    pub fn fork(&self, mode: Mode, config: &str) -> Result<Host, String> {
        let mut h = Host::new(mode, config, self.capacity, self.step_ms, self.horizon_ms)?;
        h.now_ms = self.now_ms;
        h.records = self.records.clone();
        h.dirty = true;
        Ok(h)
    }

    /// The plugin, in [`Mode::Direct`].
    pub fn plugin(&self) -> Option<&Rayon> {
        match &self.caller {
            Caller::Direct(p) => Some(p),
            Caller::Glue(_) => None,
        }
    }

    /// The records, in view order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The record of reservation `id`.
    pub fn record(&self, id: u64) -> Option<&Record> {
        self.records.iter().find(|r| r.id == id)
    }

    fn index_of(&self, id: u64) -> Option<usize> {
        self.records.iter().position(|r| r.id == id)
    }

    fn output(&mut self, attempt: u32) -> GantryOutput {
        output(&mut self.decisions, &mut self.message, &mut self.pieces, attempt)
    }

    /// Appends record `i`'s view entries (its allocation at the end of the allocations).
    fn push_view(&mut self, i: usize) -> Result<(), String> {
        let r = &self.records[i];
        let b = &mut self.view;
        let root =
            gantry_rdl::abi::push_nodes(&r.definition, &mut b.plan.rdl_nodes).map_err(|e| e.to_string())?;
        b.reservation(r.id, root, r.definition.atoms().len() as u32)
            .window(r.arrival_ms, r.deadline_ms)
            .state(r.state)
            .accepted_ms(r.accepted_ms)
            .priority(r.priority)
            .allocation(&r.allocation);
        Ok(())
    }

    fn rebuild(&mut self) -> Result<(), String> {
        if !self.dirty {
            return Ok(());
        }
        let b = &mut self.view;
        b.reservations.clear();
        b.plan.details.clear();
        b.plan.rdl_nodes.clear();
        b.plan.allocations.clear();
        for i in 0..self.records.len() {
            self.push_view(i)?;
        }
        self.dirty = false;
        Ok(())
    }

    /// Calls the hook with `cause` about view index `subject` (`GANTRY_NONE` for none); applies
    /// nothing.
    pub fn call(&mut self, cause: u32, subject: u32) -> Result<Answer, String> {
        self.rebuild()?;
        let b = &mut self.view;
        (b.now_ms, b.cluster) = (self.now_ms, self.capacity);
        (b.plan.cause, b.plan.subject, b.plan.capacity) = (cause, subject, self.capacity);
        (b.plan.step_ms, b.plan.horizon_ms) = (self.step_ms, self.horizon_ms);
        let view = self.view.view();
        match &mut self.caller {
            Caller::Direct(p) => {
                let mut out = Decisions::new();
                let t = Instant::now();
                let r = p.reserve_view(&view, &mut out);
                let elapsed = t.elapsed();
                r.map_err(|e| e.message)?;
                Ok(Answer { decisions: out.as_slice().to_vec(), pieces: out.allocations().to_vec(), elapsed })
            }
            Caller::Glue(instance) => {
                let instance = *instance;
                let raw = view.to_raw();
                let mut elapsed = Duration::ZERO;
                for attempt in 0..2 {
                    // The buffers, not `self`: the view still borrows the host's arrays.
                    let mut out = output(&mut self.decisions, &mut self.message, &mut self.pieces, attempt);
                    let t = Instant::now();
                    // SAFETY: `instance` came from `create::<Rayon>`; `raw` borrows the view's
                    // slices, which live until the end of this function; `out` points at this
                    // host's buffers with their true sizes.
                    let rc = unsafe {
                        gantry_sdk::__private::hook::<Rayon, GANTRY_HOOK_RESERVE>(instance, &raw, &mut out)
                    };
                    elapsed += t.elapsed();
                    match rc {
                        GANTRY_OK => {
                            let n = (out.len as usize).min(self.decisions.len());
                            let m = (out.allocations_len as usize).min(self.pieces.len());
                            return Ok(Answer {
                                decisions: self.decisions[..n].to_vec(),
                                pieces: self.pieces[..m].to_vec(),
                                elapsed,
                            });
                        }
                        GANTRY_BUFFER_FULL if attempt == 0 => {
                            let (n, m) = (out.needed as usize, out.allocations_needed as usize);
                            self.decisions.resize(n.max(self.decisions.len()), GantryDecision::default());
                            self.pieces.resize(m.max(self.pieces.len()), GantryAllocation::default());
                        }
                        rc => return Err(format!("code {rc}: {}", message(&self.message, out.message_len))),
                    }
                }
                Err("buffer still full after growing it".into())
            }
        }
    }

    /// Applies an answer the way the engine does once it has validated it: PLAN replaces an
    /// allocation (a NEW reservation becomes accepted), REJECT drops a NEW reservation and gives
    /// up an accepted one, except for the subject of an UPDATE (the update is refused).
    pub fn apply(&mut self, answer: &Answer, cause: u32) {
        let mut gone = Vec::new();
        for d in &answer.decisions {
            let i = d.subject as usize;
            if i >= self.records.len() {
                continue;
            }
            match d.kind {
                GANTRY_DECISION_PLAN_RESERVATION => {
                    let r = &mut self.records[i];
                    r.allocation = answer.planned(d.subject).unwrap_or_default();
                    if r.state == GANTRY_RESERVATION_NEW {
                        r.state = GANTRY_RESERVATION_ACCEPTED;
                        r.accepted_ms = self.now_ms;
                    }
                }
                GANTRY_DECISION_REJECT_RESERVATION if cause != GANTRY_RESERVE_UPDATE => gone.push(i),
                _ => {}
            }
        }
        gone.sort_unstable();
        for i in gone.into_iter().rev() {
            self.records.remove(i);
        }
        self.dirty = true;
    }

    /// Submits a reservation (ADMIT) and applies the answer; a NEW reservation left without a
    /// plan is dropped (rejected).
    pub fn submit(
        &mut self,
        id: u64,
        definition: Expr,
        arrival_ms: u64,
        deadline_ms: u64,
        priority: i32,
    ) -> Result<Answer, String> {
        self.rebuild()?;
        self.records.push(Record {
            id,
            definition,
            arrival_ms,
            deadline_ms,
            accepted_ms: 0,
            priority,
            state: GANTRY_RESERVATION_NEW,
            allocation: Vec::new(),
        });
        let i = self.records.len() - 1;
        let marks = (self.view.plan.rdl_nodes.len(), self.view.plan.allocations.len());
        self.push_view(i)?;
        let answer = self.call(GANTRY_RESERVE_ADMIT, i as u32)?;
        let only_subject = answer.decisions.iter().all(|d| d.subject == i as u32);
        match answer.planned(i as u32) {
            Some(pieces) if only_subject && !self.dirty => {
                // The common case, kept cheap: the new reservation's pieces go at the end.
                let b = &mut self.view;
                let start = b.plan.allocations.len() as u32;
                b.plan
                    .allocations
                    .extend(pieces.iter().map(|p| GantryAllocation { reservation: i as u32, ..*p }));
                let d = &mut b.plan.details[i];
                d.allocation = GantryRange { start, len: pieces.len() as u32 };
                d.accepted_ms = self.now_ms;
                b.reservations[i].state = GANTRY_RESERVATION_ACCEPTED;
                let r = &mut self.records[i];
                r.allocation = pieces;
                r.state = GANTRY_RESERVATION_ACCEPTED;
                r.accepted_ms = self.now_ms;
            }
            _ if only_subject && !self.dirty => {
                self.records.pop();
                let b = &mut self.view;
                b.reservations.pop();
                b.plan.details.pop();
                b.plan.rdl_nodes.truncate(marks.0);
                b.plan.allocations.truncate(marks.1);
            }
            _ => {
                self.apply(&answer, GANTRY_RESERVE_ADMIT);
                if self.records.get(i).is_some_and(|r| r.id == id && r.state == GANTRY_RESERVATION_NEW) {
                    self.records.remove(i);
                }
            }
        }
        Ok(answer)
    }

    /// Updates reservation `id`'s definition (UPDATE) and applies the answer; a refused update
    /// keeps the old definition.
    pub fn update(&mut self, id: u64, definition: Expr, deadline_ms: u64) -> Result<Answer, String> {
        let i = self.index_of(id).ok_or_else(|| format!("no reservation {id}"))?;
        let old = (self.records[i].definition.clone(), self.records[i].deadline_ms);
        self.records[i].definition = definition;
        self.records[i].deadline_ms = deadline_ms;
        self.dirty = true;
        let answer = self.call(GANTRY_RESERVE_UPDATE, i as u32)?;
        if answer.planned(i as u32).is_none() {
            self.records[i].definition = old.0;
            self.records[i].deadline_ms = old.1;
        }
        self.apply(&answer, GANTRY_RESERVE_UPDATE);
        Ok(answer)
    }

    /// Asks for a replan (REPLAN) and applies the answer.
    pub fn replan(&mut self) -> Result<Answer, String> {
        let answer = self.call(GANTRY_RESERVE_REPLAN, GANTRY_NONE)?;
        self.apply(&answer, GANTRY_RESERVE_REPLAN);
        Ok(answer)
    }

    /// Asks for a better layout (OPTIMIZE) and applies the answer.
    pub fn optimize(&mut self) -> Result<Answer, String> {
        let answer = self.call(GANTRY_RESERVE_OPTIMIZE, GANTRY_NONE)?;
        self.apply(&answer, GANTRY_RESERVE_OPTIMIZE);
        Ok(answer)
    }

    /// Drops reservation `id` (deleted by a client, or given up by the host's own replanner).
    pub fn delete(&mut self, id: u64) -> bool {
        let Some(i) = self.index_of(id) else { return false };
        self.records.remove(i);
        self.dirty = true;
        true
    }

    /// Sets reservation `id`'s allocation as the host would without asking (to test divergence).
    pub fn set_allocation(&mut self, id: u64, allocation: Vec<GantryAllocation>) -> bool {
        let Some(i) = self.index_of(id) else { return false };
        self.records[i].allocation = allocation;
        self.dirty = true;
        true
    }

    /// Drops the reservations whose deadline has passed, as the engine's follower does.
    pub fn expire(&mut self) {
        let now = self.now_ms;
        let before = self.records.len();
        self.records.retain(|r| r.deadline_ms > now);
        self.dirty |= self.records.len() != before;
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// A host output over these buffers, their whole lengths offered, for call `attempt`.
fn output(
    decisions: &mut [GantryDecision],
    message: &mut [u8],
    pieces: &mut [GantryAllocation],
    attempt: u32,
) -> GantryOutput {
    GantryOutput {
        struct_size: core::mem::size_of::<GantryOutput>() as u32,
        attempt,
        decisions: decisions.as_mut_ptr(),
        capacity: decisions.len() as u64,
        len: 0,
        needed: 0,
        message: message.as_mut_ptr(),
        message_capacity: message.len() as u64,
        message_len: 0,
        allocations: pieces.as_mut_ptr(),
        allocations_capacity: pieces.len() as u64,
        allocations_len: 0,
        allocations_needed: 0,
    }
}
