//! How the engine calls policies. A [`Policy`] is either a plugin loaded from a shared library
//! (the scheduler's plugin host implements this trait over the C vtable) or a Rust [`Plugin`]
//! linked in ([`StaticPolicy`]); the engine does not know which, and trusts neither.

use gantry_sdk::{Decisions, Hooks, Plugin, View};
use thiserror::Error;

/// Why a policy call produced nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    /// The policy does not implement the hook.
    #[error("hook not implemented")]
    Unsupported,
    /// The policy reported a failure.
    #[error("policy failed: {0}")]
    Failed(String),
    /// The policy panicked; the panic was caught at the boundary.
    #[error("policy panicked: {0}")]
    Panicked(String),
    /// The policy's output broke the protocol (return code, buffer sizes).
    #[error("policy broke the ABI protocol: {0}")]
    Protocol(String),
    /// The call ran past its time budget; the host stopped waiting and left the plugin to finish
    /// on its own thread.
    #[error("its {hook} call exceeded its {budget_ms} ms budget")]
    TimedOut {
        /// The hook (`admit`, `order`, `place`, `rebalance`).
        hook: &'static str,
        /// The budget, ms.
        budget_ms: u64,
    },
    /// An earlier call ran past its budget and has not returned yet, so the plugin cannot be
    /// called: the call fails at once rather than wait behind it.
    #[error("its earlier {hook} call ran past its budget and has not returned yet")]
    StillRunning {
        /// The hook of the call still running.
        hook: &'static str,
    },
}

/// The name of hook `GANTRY_HOOK_*` (`admit`, `order`, `place`, `rebalance`, `reserve`; `unknown`
/// otherwise),
/// for errors, logs and metric labels.
pub fn hook_name(hook: u32) -> &'static str {
    use gantry_sdk::abi::*;
    match hook {
        GANTRY_HOOK_ADMIT => "admit",
        GANTRY_HOOK_ORDER => "order",
        GANTRY_HOOK_PLACE => "place",
        GANTRY_HOOK_REBALANCE => "rebalance",
        GANTRY_HOOK_RESERVE => "reserve",
        _ => "unknown",
    }
}

/// What a view shares with the previous view the engine built for the same policy, so that a
/// host that keeps its own copy of each view — the plugin host's budgeted calls copy the view for
/// the plugin's worker thread — need only copy what changed. Tracked for the arrays that grow with
/// the reservation plan (`reservations`, `plan.details`, `plan.rdl_nodes`, `plan.allocations`),
/// which the engine changes mostly by appending; the other arrays are not tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewChanges {
    /// This view's serial number: unique in the process, never 0.
    pub serial: u64,
    /// The serial of the previous view built for this policy; 0 when there was none.
    pub previous: u64,
    /// In `reservations`, the first index that may differ from the previous view: the elements
    /// before it are unchanged (the array may have grown or shrunk after it).
    pub reservations_from: usize,
    /// The same in `plan.details`.
    pub details_from: usize,
    /// The same in `plan.rdl_nodes`.
    pub rdl_nodes_from: usize,
    /// The same in `plan.allocations`.
    pub allocations_from: usize,
}

/// A scheduling policy as the engine sees it.
pub trait Policy: Send {
    /// Name for logs and metrics.
    fn name(&self) -> &str;
    /// The hooks it implements.
    fn hooks(&self) -> Hooks;
    /// Calls the hook named by `view.hook`, appending decisions to `out`.
    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError>;

    /// [`Policy::call`], told what the view shares with the previous one the engine built for
    /// this policy (what the engine calls). Only a policy that copies views needs it; the
    /// default ignores it.
    fn call_with_changes(
        &mut self,
        view: &View<'_>,
        changes: &ViewChanges,
        out: &mut Decisions,
    ) -> Result<(), PolicyError> {
        let _ = changes;
        self.call(view, out)
    }
}

/// A Rust [`Plugin`] linked into the scheduler, called directly (no C ABI in between). Used for
/// the built-in fallback, for tests, and to measure what the dynamic path costs.
pub struct StaticPolicy<P: Plugin> {
    name: String,
    plugin: P,
}

impl<P: Plugin> StaticPolicy<P> {
    /// Wraps an instance.
    pub fn new(plugin: P) -> Self {
        StaticPolicy { name: P::NAME.to_string_lossy().into_owned(), plugin }
    }

    /// Creates an instance from a JSON config, as the dynamic path would.
    pub fn create(config: &str) -> Result<Self, PolicyError> {
        P::create(config).map(Self::new).map_err(|e| PolicyError::Failed(e.message))
    }
}

impl<P: Plugin> Policy for StaticPolicy<P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn hooks(&self) -> Hooks {
        P::HOOKS
    }

    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        if !P::HOOKS.has(view.hook) {
            return Err(PolicyError::Unsupported);
        }
        let plugin = &mut self.plugin;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            plugin.call_hook(view.hook, view, out)
        })) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(PolicyError::Failed(e.message)),
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_owned());
                Err(PolicyError::Panicked(msg))
            }
        }
    }
}

/// Which loaded policy serves each extension point: indexes into the list of policies given to
/// the engine. An empty slot means the engine's built-in behaviour (accept all; default order;
/// first-fit FIFO placement; no rebalancing; no reservations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Profile {
    /// Policy answering `admit`.
    pub admit: Option<usize>,
    /// Policy answering `order`.
    pub order: Option<usize>,
    /// Policy answering `place`.
    pub place: Option<usize>,
    /// Policy answering `rebalance`.
    pub rebalance: Option<usize>,
    /// The reservation planner, answering `reserve` (needs `EngineConfig::reservations`).
    pub reserve: Option<usize>,
}
