//! What the shim does to a container's process before it drops to the container's user:
//! a mount namespace with a private `/tmp` and `/dev/shm`, and no way back to privileges.
//!
//! Part of the shim (only its forked child calls [`enter`] and [`confine`]), which is why it may
//! hold `unsafe`. Shared `/tmp` and `/dev/shm` let one container read what another left there
//! and outlive both; setuid binaries and the full bounding set let a container regain what
//! dropping to its user took away. Docker, systemd (`PrivateTmp=`, `NoNewPrivileges=`,
//! `CapabilityBoundingSet=`) and kubelet (`allowPrivilegeEscalation: false`) close the same
//! holes the same way.
//!
//! `/tmp` is a directory of the container's on the work filesystem (`<control>/private/tmp`,
//! under a root-only directory, so no other container can reach it by its path; a bind mount
//! does not check the directories above it), so large temporary files count against the
//! container's disk, not its memory. `/dev/shm` is a tmpfs, charged to the container's memory
//! cgroup like any shared memory, sized to its memory limit. Both go with the container: the
//! namespace dies with its last process, and the shim removes the directory.

use crate::shim::ShimSpec;
use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path};

/// The root-only directory in a control directory that holds the container's private `/tmp`.
pub const PRIVATE_DIR: &str = "private";
/// Size of a private `/dev/shm` for a container without a memory limit (Docker's default).
pub const DEFAULT_SHM_BYTES: u64 = 64 << 20;

/// Creates `<control>/private/tmp` for a container: `private/` root-only, `tmp/` a world-writable
/// sticky directory as `/tmp` is.
pub fn make_private_tmp(tmp: &Path) -> io::Result<()> {
    let private = tmp.parent().ok_or_else(|| io::Error::other("private /tmp has no parent"))?;
    std::fs::DirBuilder::new().mode(0o700).create(private)?;
    std::fs::DirBuilder::new().mode(0o700).create(tmp)?;
    // Set after creation: the umask would clear the sticky and world bits.
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o1777))
}

/// Removes a container's private `/tmp` after it ended (its files belong to the container's
/// user; `remove_dir_all` follows no symbolic link).
pub fn remove_private_tmp(spec: &ShimSpec) {
    if let Some(private) = spec.private_tmp.as_deref().and_then(Path::parent) {
        if let Err(e) = std::fs::remove_dir_all(private) {
            if e.kind() != io::ErrorKind::NotFound {
                eprintln!("gantry-shim: cannot remove {}: {e}", private.display());
            }
        }
    }
}

/// In the forked child, as root: a mount namespace of its own, the private `/tmp` and a fresh
/// `/dev/shm` mounted in it, nothing of it propagating back to the host. A container directory
/// that lies under `/tmp` (`gantry dev` puts its work root there) is mounted again at its own
/// path inside the private `/tmp`, so every path in the spec stays valid.
pub fn enter(spec: &ShimSpec) -> Result<(), String> {
    let Some(tmp) = &spec.private_tmp else { return Ok(()) };
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    nix::sched::unshare(CloneFlags::CLONE_NEWNS).map_err(|e| fail("unshare(CLONE_NEWNS)", &e))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| fail("making / a slave mount", &e))?;
    // Mounted into the private /tmp before that covers the host's (a mount from another
    // namespace cannot be the source of a bind, so it cannot be done afterwards), and carried
    // along by the recursive bind.
    if let Some(rest) = under(&spec.container_dir, Path::new("/tmp")) {
        let target = tmp.join(rest);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&target)
            .map_err(|e| fail(&format!("creating {}", target.display()), &e))?;
        mount(Some(&spec.container_dir), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .map_err(|e| fail(&format!("mounting the container directory at {}", target.display()), &e))?;
    }
    bind(tmp, Path::new("/tmp")).map_err(|e| fail("mounting the private /tmp", &e))?;
    let shm_options = format!("mode=1777,size={}", spec.shm_bytes.max(1 << 20));
    mount(
        Some("tmpfs"),
        "/dev/shm",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(shm_options.as_str()),
    )
    .map_err(|e| fail("mounting a private /dev/shm", &e))?;
    Ok(())
}

/// Bind-mounts `source` (with the mounts below it) at `target`, then makes the mount nosuid
/// and nodev (a bind mount takes flags only on a remount).
fn bind(source: &Path, target: &Path) -> nix::Result<()> {
    mount(Some(source), target, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)?;
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
}

/// The part of `path` below `dir`, if it lies there.
fn under<'a>(path: &'a Path, dir: &Path) -> Option<&'a Path> {
    path.strip_prefix(dir).ok().filter(|rest| rest.components().all(|c| matches!(c, Component::Normal(_))))
}

/// In the forked child, still as root: empties the capability bounding set, so that no exec —
/// of a setuid-root binary, or by a container running as root — can give capabilities back.
pub fn drop_bounding_set(spec: &ShimSpec) -> Result<(), String> {
    if !spec.drop_bounding_set {
        return Ok(());
    }
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
        .unwrap_or(40);
    for cap in 0..=last {
        // SAFETY: PR_CAPBSET_DROP takes a capability number and no pointer; it only changes this
        // process's bounding set.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // A capability this kernel does not know is not in the set to begin with.
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(format!("dropping capability {cap} from the bounding set: {e}"));
            }
        }
    }
    Ok(())
}

/// In the forked child, last thing before exec: no_new_privs, so setuid and file capabilities
/// are ignored by every exec from here on (it is inherited and cannot be unset).
pub fn confine(spec: &ShimSpec) -> Result<(), String> {
    if spec.no_new_privileges {
        nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_inside_a_directory_are_under_it() {
        assert_eq!(under(Path::new("/tmp/a/b"), Path::new("/tmp")), Some(Path::new("a/b")));
        assert_eq!(under(Path::new("/tmpx/a"), Path::new("/tmp")), None);
        assert_eq!(under(Path::new("/var/lib/x"), Path::new("/tmp")), None);
    }
}
