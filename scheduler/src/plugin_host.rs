//! The plugin host: loads policy plugins from shared libraries through the C ABI v1 and presents
//! each as an engine [`Policy`]. This module and the SDK glue are the only places with `unsafe`.
//!
//! Loading checks, in order: the library opens (`RTLD_NOW | RTLD_LOCAL`), the v1 entry symbol
//! exists (a library exporting another major's symbol is named as such), the entry returns a
//! vtable, the vtable's `struct_size` covers v1.0, its major is 1, its name and version are
//! non-null UTF-8, and its capability bits agree with its hook pointers. Libraries are never
//! unloaded: a plugin's code may still be referenced by the threads or statics it created.
//!
//! **Time budget.** A hook that never returns (a loop, a deadlock) would stop the engine's thread
//! and with it all scheduling. A plugin loaded with a call budget ([`DynamicPlugin::load_budgeted`])
//! is called on a worker thread of its own, over an owned [`Snapshot`] of the view rather than the
//! engine's arrays; the engine waits at most the budget. A call past it fails
//! ([`PolicyError::TimedOut`]) and the built-in policy stands in; the plugin is *stuck* until that
//! call returns: each call meanwhile fails at once ([`PolicyError::StillRunning`]), so no second
//! call waits behind the first, and the late result is discarded. The stuck thread only reads its
//! own snapshot, so nothing it reads is freed or changed under it. The copy costs time (see
//! BENCHMARKS.md), which is why a budget of zero keeps the direct, zero-copy call; the
//! reservation plan's arrays, which grow with the plan, are copied only from where they changed
//! since the previous call ([`gantry_engine::ViewChanges`]). A plugin must not write to its view
//! (the ABI's pointers are `const`): on the direct path that would corrupt the engine's state, on
//! the budgeted one the snapshot that later calls reuse.
//!
//! **Reservations (ABI 1.3).** A `reserve` call is offered, next to the decision buffer, a
//! host-owned buffer of allocation pieces (none in other hooks); `GANTRY_BUFFER_FULL` grows
//! whichever of the two is short, once, up to a limit derived from the view (`instance.rs`). The
//! pieces come back in [`Decisions::allocations`] for the engine to validate; the snapshot of a
//! budgeted call copies the plan (definitions, details, accepted allocations) with the rest.

mod budget;
mod instance;

use budget::Worker;
use gantry_engine::{Policy, PolicyError, ViewChanges};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, View};
use instance::Instance;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Longest plugin name or version string read from a vtable.
const MAX_NAME_LEN: usize = 256;

/// Why a plugin could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file could not be opened as a shared library.
    #[error("{path}: not a loadable shared library: {reason}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The dynamic loader's message.
        reason: String,
    },
    /// The library exports another major version's entry symbol.
    #[error(
        "{path}: is a gantry ABI v{major} plugin (exports `gantry_plugin_v{major}`); this host speaks ABI v1"
    )]
    OtherMajor {
        /// The file.
        path: PathBuf,
        /// The major version it was built for.
        major: u16,
    },
    /// The library has no gantry entry symbol at all.
    #[error("{path}: not a gantry plugin: no `gantry_plugin_v1` symbol")]
    MissingSymbol {
        /// The file.
        path: PathBuf,
    },
    /// The entry symbol returned null.
    #[error(
        "{path}: the plugin refused this host (gantry_plugin_v1 returned NULL for ABI {host_major}.{host_minor})"
    )]
    Refused {
        /// The file.
        path: PathBuf,
        /// This host's major.
        host_major: u16,
        /// This host's minor.
        host_minor: u16,
    },
    /// The vtable is smaller than v1.0's.
    #[error("{path}: vtable struct_size {got} is smaller than the {need} bytes of ABI v1.0")]
    StructTooSmall {
        /// The file.
        path: PathBuf,
        /// Size it claims.
        got: u32,
        /// Size v1.0 needs.
        need: u32,
    },
    /// The vtable claims another major version.
    #[error("{path}: vtable says ABI major {got}, but its symbol is the v1 entry")]
    MajorMismatch {
        /// The file.
        path: PathBuf,
        /// Major it claims.
        got: u16,
    },
    /// A string of the vtable is null or not UTF-8.
    #[error("{path}: vtable {field} is {problem}")]
    BadString {
        /// The file.
        path: PathBuf,
        /// `name` or `version`.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// Capability bits and hook pointers disagree, or unknown bits are set.
    #[error("{path}: capabilities {caps:#x} do not match its hooks: {detail}")]
    Capabilities {
        /// The file.
        path: PathBuf,
        /// The capability bits.
        caps: u64,
        /// What disagrees.
        detail: String,
    },
    /// The plugin's `create` failed.
    #[error("{path}: plugin `{name}` refused its configuration (code {code}): {message}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Plugin name.
        name: String,
        /// Return code.
        code: i32,
        /// Plugin's message.
        message: String,
    },
    /// The thread that calls a plugin with a time budget could not be started.
    #[error("plugin `{name}`: cannot start its worker thread: {source}")]
    Worker {
        /// Plugin name.
        name: String,
        /// Why.
        source: std::io::Error,
    },
}

/// What a plugin says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// ABI major it was built for.
    pub abi_major: u16,
    /// ABI minor it was built for.
    pub abi_minor: u16,
    /// Size of its vtable.
    pub struct_size: u32,
    /// Its capability bits.
    pub capabilities: u64,
    /// The hooks it implements.
    pub hooks: Hooks,
    /// Whether it has `create` and `destroy`.
    pub has_create: bool,
}

impl PluginInfo {
    /// A warning for a plugin built for a newer minor than this host speaks: it loads (minors
    /// only append), but finds shorter views and outputs than it was compiled for, and fails
    /// every call if it needs what they lack.
    pub fn newer_minor_warning(&self) -> Option<String> {
        (self.abi_major == GANTRY_ABI_MAJOR && self.abi_minor > GANTRY_ABI_MINOR).then(|| {
            format!(
                "built for ABI {}.{}; this host speaks {}.{}: its views and outputs are the shorter {}.{} \
                 ones, so a plugin that needs a newer field or decision fails every call — rebuild it \
                 against this host's SDK (sdk/include/gantry.h), or upgrade gantry",
                self.abi_major,
                self.abi_minor,
                GANTRY_ABI_MAJOR,
                GANTRY_ABI_MINOR,
                GANTRY_ABI_MAJOR,
                GANTRY_ABI_MINOR
            )
        })
    }

    /// The implemented hooks by name, e.g. `["order", "place"]`.
    pub fn hook_names(&self) -> Vec<&'static str> {
        let h = self.hooks;
        [
            (h.admit, "admit"),
            (h.order, "order"),
            (h.place, "place"),
            (h.rebalance, "rebalance"),
            (h.reserve, "reserve"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// A checked vtable of a loaded library.
#[derive(Clone, Copy)]
struct Loaded {
    vtable: GantryPluginV1,
}

/// Reads a NUL-terminated string of at most `MAX_NAME_LEN` bytes.
///
/// # Safety
/// `p` must be null or point at readable bytes up to and including a NUL or `MAX_NAME_LEN` bytes.
unsafe fn read_name(p: *const std::ffi::c_char) -> Result<String, &'static str> {
    if p.is_null() {
        return Err("null");
    }
    let mut bytes = Vec::new();
    for k in 0..MAX_NAME_LEN {
        // SAFETY: per the contract, bytes up to the NUL (or the bound) are readable.
        let b = unsafe { p.add(k).cast::<u8>().read() };
        if b == 0 {
            return String::from_utf8(bytes).map_err(|_| "not UTF-8");
        }
        bytes.push(b);
    }
    Err("longer than 256 bytes or not NUL-terminated")
}

/// Checks that a file is a complete 64-bit little-endian ELF shared object before the dynamic
/// loader maps it: a truncated file would otherwise be mapped past its end and the first touch of
/// a missing page kills the process with SIGBUS instead of giving an error.
fn check_elf(path: &Path) -> Result<(), LoadError> {
    let err = |reason: String| LoadError::Open { path: path.to_owned(), reason };
    let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let len = bytes.len() as u64;
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| bytes.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |o: usize| {
        bytes.get(o..o + 8).map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(err("not an ELF file".into()));
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err(err("not a 64-bit little-endian ELF file".into()));
    }
    if u16_at(16) != Some(3) {
        return Err(err("not a shared object (ELF type is not ET_DYN)".into()));
    }
    let truncated = || err(format!("truncated ELF file ({len} bytes)"));
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    let (shoff, shentsize, shnum) = (u64_at(40), u16_at(58), u16_at(60));
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return Err(truncated());
    };
    let (Some(shoff), Some(shentsize), Some(shnum)) = (shoff, shentsize, shnum) else {
        return Err(truncated());
    };
    let table_end = |off: u64, ent: u16, n: u16| off.checked_add(u64::from(ent) * u64::from(n));
    if table_end(phoff, phentsize, phnum).is_none_or(|e| e > len)
        || (shnum > 0 && table_end(shoff, shentsize, shnum).is_none_or(|e| e > len))
    {
        return Err(truncated());
    }
    for k in 0..u64::from(phnum) {
        let at = (phoff + k * u64::from(phentsize)) as usize;
        let (Some(offset), Some(filesz)) = (u64_at(at + 8), u64_at(at + 32)) else {
            return Err(truncated());
        };
        let p_type = u32_at(at).unwrap_or(0);
        // Every segment the loader maps or reads from the file must lie inside it.
        if p_type != 0 && offset.checked_add(filesz).is_none_or(|e| e > len) {
            return Err(truncated());
        }
    }
    Ok(())
}

/// Opens a library and checks its vtable; the library stays loaded for the life of the process.
fn load(path: &Path) -> Result<(Loaded, PluginInfo), LoadError> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    check_elf(path)?;
    // SAFETY: loading a library runs its initialisers; loading plugins is what the operator
    // configured (or asked to inspect), and gantry plugins must have side-effect-free initialisers.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| LoadError::Open { path: path.to_owned(), reason: e.to_string() })?;
    // Never unloaded (see module docs).
    let lib: &'static Library = Box::leak(Box::new(lib));
    // SAFETY: the symbol is declared by the ABI with exactly this signature.
    let entry = match unsafe { lib.get::<GantryEntryV1>(GANTRY_ENTRY_SYMBOL_V1) } {
        Ok(sym) => *sym,
        Err(_) => {
            for major in 2..=9u16 {
                let name = format!("gantry_plugin_v{major}\0");
                // SAFETY: only the symbol's presence is checked; it is never called.
                if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_ok() {
                    return Err(LoadError::OtherMajor { path: path.to_owned(), major });
                }
            }
            return Err(LoadError::MissingSymbol { path: path.to_owned() });
        }
    };
    // SAFETY: calling the entry symbol per the ABI: two integers in, a pointer out.
    let vt = unsafe { entry(GANTRY_ABI_MAJOR, GANTRY_ABI_MINOR) };
    if vt.is_null() {
        return Err(LoadError::Refused {
            path: path.to_owned(),
            host_major: GANTRY_ABI_MAJOR,
            host_minor: GANTRY_ABI_MINOR,
        });
    }
    let need = GANTRY_PLUGIN_SIZE_V1_0;
    // SAFETY: every vtable starts with a u32 `struct_size`; read only that before trusting more.
    let got = unsafe { std::ptr::addr_of!((*vt).struct_size).read() };
    if got < need {
        return Err(LoadError::StructTooSmall { path: path.to_owned(), got, need });
    }
    // An older minor's vtable is shorter (minor versions append hooks): copy the bytes it declares
    // into a zeroed vtable of this host's size, so a hook it does not have reads as null.
    let copied = (got as usize).min(std::mem::size_of::<GantryPluginV1>());
    let mut local = std::mem::MaybeUninit::<GantryPluginV1>::zeroed();
    // SAFETY: the plugin declared `got` readable bytes at `vt`; `local` has room for `copied`.
    unsafe { std::ptr::copy_nonoverlapping(vt.cast::<u8>(), local.as_mut_ptr().cast::<u8>(), copied) };
    // SAFETY: every field is an integer, a raw pointer or an `Option` of a function pointer, for
    // which all-zero bytes are valid (0, null, `None`).
    let vtable = unsafe { local.assume_init() };
    if vtable.abi_major != GANTRY_ABI_MAJOR {
        return Err(LoadError::MajorMismatch { path: path.to_owned(), got: vtable.abi_major });
    }
    let bad = |field, problem| LoadError::BadString { path: path.to_owned(), field, problem };
    // SAFETY: the ABI says name and version are null or static NUL-terminated strings.
    let name = unsafe { read_name(vtable.name) }.map_err(|p| bad("name", p))?;
    // SAFETY: as above.
    let version = unsafe { read_name(vtable.version) }.map_err(|p| bad("version", p))?;
    if name.is_empty() {
        return Err(bad("name", "empty"));
    }
    let caps = vtable.capabilities;
    let hooks = Hooks {
        admit: vtable.admit.is_some(),
        order: vtable.order.is_some(),
        place: vtable.place.is_some(),
        rebalance: vtable.rebalance.is_some(),
        reserve: vtable.reserve.is_some(),
    };
    let cap_err = |detail: String| LoadError::Capabilities { path: path.to_owned(), caps, detail };
    if caps & !GANTRY_CAP_ALL_V1 != 0 {
        return Err(cap_err(format!("unknown bits {:#x}", caps & !GANTRY_CAP_ALL_V1)));
    }
    if hooks.capabilities() != caps {
        return Err(cap_err(format!(
            "capabilities name {:?} but non-null hooks are {:?}",
            Hooks::from_capabilities(caps),
            hooks
        )));
    }
    let info = PluginInfo {
        path: path.to_owned(),
        name,
        version,
        abi_major: vtable.abi_major,
        abi_minor: vtable.abi_minor,
        struct_size: got,
        capabilities: caps,
        hooks,
        has_create: vtable.create.is_some(),
    };
    Ok((Loaded { vtable }, info))
}

/// Loads a library and reports what it is, without creating an instance.
pub fn inspect(path: &Path) -> Result<PluginInfo, LoadError> {
    load(path).map(|(_, info)| info)
}

/// A plugin instance in a loaded library, usable by the engine as a [`Policy`].
pub struct DynamicPlugin {
    info: PluginInfo,
    caller: Caller,
}

/// How hooks are called.
enum Caller {
    /// On the caller's thread, over the engine's own arrays: no copy, no time limit.
    Direct(Instance),
    /// On the plugin's worker thread, over a snapshot, waiting at most a budget.
    Budgeted(Box<Worker>),
}

impl std::fmt::Debug for DynamicPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicPlugin")
            .field("info", &self.info)
            .field("budget", &self.call_budget())
            .finish()
    }
}

impl DynamicPlugin {
    /// Loads the library at `path` and creates an instance with `config_json` (a JSON object).
    pub fn load(path: &Path, config_json: &str) -> Result<Self, LoadError> {
        let (loaded, info) = load(path)?;
        if let Some(warning) = info.newer_minor_warning() {
            tracing::warn!(plugin = %info.name, path = %path.display(), "{warning}");
        }
        let instance = Instance::create(loaded.vtable, config_json).map_err(|(code, message)| {
            LoadError::Create { path: path.to_owned(), name: info.name.clone(), code, message }
        })?;
        Ok(DynamicPlugin { info, caller: Caller::Direct(instance) })
    }

    /// [`DynamicPlugin::load`], with every hook call limited to `budget` (zero: no limit, the
    /// direct call). The instance is created on this thread, then handed to a worker thread of its
    /// own, which makes every later call and the `destroy`.
    pub fn load_budgeted(path: &Path, config_json: &str, budget: Duration) -> Result<Self, LoadError> {
        let plugin = Self::load(path, config_json)?;
        if budget.is_zero() {
            return Ok(plugin);
        }
        let DynamicPlugin { info, caller } = plugin;
        let instance = match caller {
            Caller::Direct(instance) => instance,
            Caller::Budgeted(worker) => return Ok(DynamicPlugin { info, caller: Caller::Budgeted(worker) }),
        };
        let worker = Worker::start(&info.name, instance, budget)
            .map_err(|source| LoadError::Worker { name: info.name.clone(), source })?;
        Ok(DynamicPlugin { info, caller: Caller::Budgeted(Box::new(worker)) })
    }

    /// What the plugin says about itself.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// The time budget of one hook call; `None` when calls are direct and unlimited.
    pub fn call_budget(&self) -> Option<Duration> {
        match &self.caller {
            Caller::Direct(_) => None,
            Caller::Budgeted(w) => Some(w.budget),
        }
    }
}

impl Policy for DynamicPlugin {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn hooks(&self) -> Hooks {
        self.info.hooks
    }

    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        self.call_tracked(view, None, out)
    }

    fn call_with_changes(
        &mut self,
        view: &View<'_>,
        changes: &ViewChanges,
        out: &mut Decisions,
    ) -> Result<(), PolicyError> {
        self.call_tracked(view, Some(changes), out)
    }
}

impl DynamicPlugin {
    /// A hook call; `changes` lets a budgeted call copy only what changed in the view.
    fn call_tracked(
        &mut self,
        view: &View<'_>,
        changes: Option<&ViewChanges>,
        out: &mut Decisions,
    ) -> Result<(), PolicyError> {
        if !self.info.hooks.has(view.hook) {
            return Err(PolicyError::Unsupported);
        }
        match &mut self.caller {
            Caller::Direct(instance) => instance.call(view, out),
            Caller::Budgeted(worker) => worker.call(&self.info.name, view, changes, out),
        }
    }
}
