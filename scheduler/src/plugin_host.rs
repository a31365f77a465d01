//! The plugin host: loads policy plugins from shared libraries through the C ABI v1 and presents
//! each as an engine [`Policy`]. This module and the SDK glue are the only places with `unsafe`.
//!
//! Loading checks, in order: the library opens (`RTLD_NOW | RTLD_LOCAL`), the v1 entry symbol
//! exists (a library exporting another major's symbol is named as such), the entry returns a
//! vtable, the vtable's `struct_size` covers v1.0, its major is 1, its name and version are
//! non-null UTF-8, and its capability bits agree with its hook pointers. Libraries are never
//! unloaded: a plugin's code may still be referenced by the threads or statics it created.

use gantry_engine::{Policy, PolicyError};
use gantry_sdk::abi::*;
use gantry_sdk::{Decisions, Hooks, View};
use std::ffi::{CString, c_void};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Longest plugin name or version string read from a vtable.
const MAX_NAME_LEN: usize = 256;
/// Bytes of room for a plugin's error message.
const MESSAGE_CAPACITY: usize = 1024;
/// Decision slots offered on a first call.
const INITIAL_DECISIONS: usize = 256;
/// Slack over the view-derived bound on how many decisions a hook may return.
const DECISION_SLACK: u64 = 4096;

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
    /// The implemented hooks by name, e.g. `["order", "place"]`.
    pub fn hook_names(&self) -> Vec<&'static str> {
        let h = self.hooks;
        [(h.admit, "admit"), (h.order, "order"), (h.place, "place"), (h.rebalance, "rebalance")]
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
    let need = std::mem::size_of::<GantryPluginV1>() as u32;
    // SAFETY: every vtable starts with a u32 `struct_size`; read only that before trusting more.
    let got = unsafe { std::ptr::addr_of!((*vt).struct_size).read() };
    if got < need {
        return Err(LoadError::StructTooSmall { path: path.to_owned(), got, need });
    }
    // SAFETY: the plugin declared at least `need` bytes of vtable, so the v1.0 prefix is readable.
    let vtable = unsafe { vt.read() };
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
    vtable: GantryPluginV1,
    instance: *mut c_void,
    /// Host-owned decision buffer; always fully initialised (`len` is the capacity offered).
    decisions: Vec<GantryDecision>,
    message: Vec<u8>,
}

// SAFETY: the instance pointer is only used through `&mut self` (one thread at a time), which is
// what the ABI asks of hosts; the vtable points at static code and data.
unsafe impl Send for DynamicPlugin {}

impl std::fmt::Debug for DynamicPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicPlugin").field("info", &self.info).finish()
    }
}

fn output(decisions: &mut [GantryDecision], message: &mut [u8], attempt: u32) -> GantryOutput {
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
    }
}

fn message_text(message: &[u8], out: &GantryOutput) -> String {
    let n = (out.message_len.min(message.len() as u64)) as usize;
    String::from_utf8_lossy(&message[..n]).into_owned()
}

impl DynamicPlugin {
    /// Loads the library at `path` and creates an instance with `config_json` (a JSON object).
    pub fn load(path: &Path, config_json: &str) -> Result<Self, LoadError> {
        let (loaded, info) = load(path)?;
        let vtable = loaded.vtable;
        let mut message = vec![0u8; MESSAGE_CAPACITY];
        let mut instance: *mut c_void = std::ptr::null_mut();
        if let Some(create) = vtable.create {
            let config = CString::new(config_json).map_err(|_| LoadError::Create {
                path: path.to_owned(),
                name: info.name.clone(),
                code: GANTRY_ERR_CONFIG,
                message: "configuration contains a NUL byte".into(),
            })?;
            let mut out = output(&mut [], &mut message, 0);
            // SAFETY: per the ABI: config bytes + NUL, a slot for the instance, a valid output.
            let rc = unsafe { create(config.as_ptr(), config_json.len() as u64, &mut instance, &mut out) };
            if rc != GANTRY_OK {
                return Err(LoadError::Create {
                    path: path.to_owned(),
                    name: info.name.clone(),
                    code: rc,
                    message: message_text(&message, &out),
                });
            }
        }
        Ok(DynamicPlugin {
            info,
            vtable,
            instance,
            decisions: vec![GantryDecision::default(); INITIAL_DECISIONS],
            message,
        })
    }

    /// What the plugin says about itself.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }
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
        _ => (view.containers.len() + view.queues.len()) as u64,
    };
    n.saturating_mul(2).saturating_add(DECISION_SLACK)
}

impl Policy for DynamicPlugin {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn hooks(&self) -> Hooks {
        self.info.hooks
    }

    fn call(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PolicyError> {
        let hook = match view.hook {
            GANTRY_HOOK_ADMIT => self.vtable.admit,
            GANTRY_HOOK_ORDER => self.vtable.order,
            GANTRY_HOOK_PLACE => self.vtable.place,
            GANTRY_HOOK_REBALANCE => self.vtable.rebalance,
            _ => None,
        }
        .ok_or(PolicyError::Unsupported)?;
        let raw = view.to_raw();
        for attempt in 0..2 {
            let mut o = output(&mut self.decisions, &mut self.message, attempt);
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
                    out.extend_from_slice(&self.decisions[..o.len as usize]);
                    return Ok(());
                }
                GANTRY_BUFFER_FULL => {
                    let limit = decision_limit(view);
                    if attempt > 0 || o.needed <= self.decisions.len() as u64 || o.needed > limit {
                        return Err(PolicyError::Protocol(format!(
                            "asked for {} decision slots (offered {}, limit {limit})",
                            o.needed,
                            self.decisions.len()
                        )));
                    }
                    self.decisions.resize(o.needed as usize, GantryDecision::default());
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

impl Drop for DynamicPlugin {
    fn drop(&mut self) {
        if let Some(destroy) = self.vtable.destroy {
            if !self.instance.is_null() {
                // SAFETY: the instance came from this vtable's `create` and is destroyed once.
                unsafe { destroy(self.instance) };
            }
        }
    }
}
