//! `gantry plugin inspect`: what a plugin library says about itself — name, version, ABI
//! version, hooks — read through the daemon's own loader ([`gantry_scheduler::plugin_host`]), so
//! a library this accepts is one the scheduler loads.

use gantry_scheduler::plugin_host::{self, LoadError};
use std::path::{Path, PathBuf};

/// Why a plugin could not be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// No file at the path.
    #[error("{}: no such file", .0.display())]
    NoSuchFile(PathBuf),
    /// Not a gantry ABI v1 plugin, or it could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The JSON report.
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Inspects the plugin at `path`; returns the report to print (text, or JSON with `json`).
pub fn inspect(path: &Path, json: bool) -> Result<String, InspectError> {
    // dlopen resolves bare names through the library search path; a path is what is meant here.
    let path = if path.components().count() == 1 { Path::new(".").join(path) } else { path.to_owned() };
    if !path.exists() {
        return Err(InspectError::NoSuchFile(path));
    }
    let info = plugin_host::inspect(&path)?;
    if json {
        let v = serde_json::json!({
            "path": info.path,
            "name": info.name,
            "version": info.version,
            "abi": format!("{}.{}", info.abi_major, info.abi_minor),
            "abi_major": info.abi_major,
            "abi_minor": info.abi_minor,
            "vtable_size": info.struct_size,
            "capabilities": info.capabilities,
            "hooks": info.hook_names(),
            "has_create": info.has_create,
            "warning": info.newer_minor_warning(),
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let hooks = info.hook_names();
    let mut out = format!(
        "name:     {}\nversion:  {}\nabi:      {}.{} (vtable {} bytes)\nhooks:    {}\ncreate:   {}\npath:     {}\n",
        info.name,
        info.version,
        info.abi_major,
        info.abi_minor,
        info.struct_size,
        if hooks.is_empty() { "(none)".to_owned() } else { hooks.join(", ") },
        if info.has_create { "yes" } else { "no (stateless)" },
        info.path.display()
    );
    if let Some(warning) = info.newer_minor_warning() {
        out.push_str(&format!("warning:  {warning}\n"));
    }
    Ok(out)
}
