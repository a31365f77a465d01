//! Disk: what a container's files hold, how full the work filesystem is, and a little space
//! kept back so that a container's end can still be recorded on a full disk.
//!
//! The work filesystem has no project quotas here (ext4 mounted `noquota`, tmpfs without
//! `prjquota`), so a container's disk allowance is enforced by measurement: [`measure`] walks
//! its control directory — `work/`, and whatever else of the container's lives there, such as
//! a private `/tmp` — and counts the allocated blocks of every file and directory its user
//! owns. The walk never follows a symbolic link (every directory is opened relative to its
//! parent with `O_NOFOLLOW`, every entry is `lstat`ed), stays on the directory's filesystem,
//! counts a hard-linked file once, and stops after [`MAX_WALK_ENTRIES`] entries so that one
//! container of millions of files cannot stall the round; what it counted by then is a lower
//! bound, which is enough to condemn a container that is over.
//!
//! [`RESERVE_FILE`] is written at launch: [`with_reserve`] deletes it and tries once more when
//! a control file cannot be written for lack of space, so that a container that filled the disk
//! still gets its kill reason and its exit recorded — and ends as its own failure, not as lost.

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag, fstatat};
use std::collections::HashSet;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// Entries one [`measure`] looks at, at most (about a second of walking on a commodity disk).
pub const MAX_WALK_ENTRIES: u64 = 1_000_000;
/// Directory depth one [`measure`] descends to, at most (deeper trees count as far as this).
pub const MAX_WALK_DEPTH: usize = 256;

/// Space kept back in each control directory, released when a record of the container's end
/// cannot be written otherwise (four pages: kill reason, what was seen, exit record, spare).
pub const RESERVE_FILE: &str = "reserve";
/// Size of [`RESERVE_FILE`], bytes.
pub const RESERVE_BYTES: usize = 16 << 10;

/// What a container's files hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirUsage {
    /// Allocated bytes (blocks × 512: a sparse file counts what it really takes).
    pub bytes: u64,
    /// Files, directories and other entries counted.
    pub entries: u64,
    /// The walk stopped at [`MAX_WALK_ENTRIES`] or [`MAX_WALK_DEPTH`]: the figures are a lower
    /// bound.
    pub truncated: bool,
}

/// Measures what the entries under `dir` owned by `uid` hold (all entries when `uid` is
/// `None`), `dir` itself included. Never follows a symbolic link nor crosses into another
/// filesystem. An entry that vanishes during the walk is skipped; a missing `dir` is empty.
pub fn measure(dir: &Path, uid: Option<u32>) -> io::Result<DirUsage> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let root = match Dir::open(dir, flags, Mode::empty()) {
        Ok(d) => d,
        Err(nix::errno::Errno::ENOENT) => return Ok(DirUsage::default()),
        Err(e) => return Err(e.into()),
    };
    let top = nix::sys::stat::fstat(root.as_fd())?;
    let mut walk = Walk { uid, dev: top.st_dev, usage: DirUsage::default(), linked: HashSet::new() };
    walk.count(&top);
    walk.dir(root, 1)?;
    Ok(walk.usage)
}

struct Walk {
    uid: Option<u32>,
    dev: u64,
    usage: DirUsage,
    /// Files with more than one link already counted, by inode.
    linked: HashSet<u64>,
}

impl Walk {
    fn count(&mut self, st: &nix::sys::stat::FileStat) {
        self.usage.entries += 1;
        if self.uid.is_some_and(|uid| uid != st.st_uid) {
            return;
        }
        let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        if !is_dir && st.st_nlink > 1 && !self.linked.insert(st.st_ino) {
            return;
        }
        self.usage.bytes = self.usage.bytes.saturating_add(u64::try_from(st.st_blocks).unwrap_or(0) * 512);
    }

    /// Counts the entries of `dir` and descends into its subdirectories (depth first, one open
    /// directory per level).
    fn dir(&mut self, mut dir: Dir, depth: usize) -> io::Result<()> {
        let mut subdirs = Vec::new();
        let fd = dir.as_fd().try_clone_to_owned()?;
        for entry in dir.iter() {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            if self.usage.entries >= MAX_WALK_ENTRIES {
                self.usage.truncated = true;
                return Ok(());
            }
            let Ok(st) = fstatat(&fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
            if st.st_dev != self.dev {
                continue; // a mount point: another filesystem's business
            }
            self.count(&st);
            let is_dir = match entry.file_type() {
                Some(t) => t == Type::Directory,
                None => SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR,
            };
            if is_dir {
                subdirs.push(name.to_owned());
            }
        }
        drop(dir);
        for name in subdirs {
            if depth >= MAX_WALK_DEPTH {
                self.usage.truncated = true;
                return Ok(());
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            // Replaced by a symbolic link or removed since it was listed: skipped.
            let Ok(sub) = Dir::openat(&fd, name.as_c_str(), flags, Mode::empty()) else { continue };
            self.dir(sub, depth + 1)?;
            if self.usage.truncated {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// How full a filesystem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsUsage {
    /// Size, bytes.
    pub total_bytes: u64,
    /// Free for unprivileged users, bytes (what containers can still write).
    pub available_bytes: u64,
    /// Inodes in all; 0 = the filesystem does not count them (btrfs).
    pub total_inodes: u64,
    /// Inodes free for unprivileged users.
    pub available_inodes: u64,
}

impl FsUsage {
    /// The filesystem holding `path`.
    pub fn of(path: &Path) -> io::Result<FsUsage> {
        let st = nix::sys::statvfs::statvfs(path)?;
        let frsize = st.fragment_size() as u64;
        Ok(FsUsage {
            total_bytes: (st.blocks() as u64).saturating_mul(frsize),
            available_bytes: (st.blocks_available() as u64).saturating_mul(frsize),
            total_inodes: st.files() as u64,
            available_inodes: st.files_available() as u64,
        })
    }

    /// Free space, percent of the size (100 for a filesystem of no size).
    pub fn free_space_percent(&self) -> f64 {
        percent(self.available_bytes, self.total_bytes)
    }

    /// Free inodes, percent of all (100 where the filesystem does not count them).
    pub fn free_inodes_percent(&self) -> f64 {
        percent(self.available_inodes, self.total_inodes)
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 100.0 } else { part as f64 * 100.0 / whole as f64 }
}

/// Writes [`RESERVE_FILE`] into a control directory.
pub fn create_reserve(control: &Path) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(control.join(RESERVE_FILE))?;
    // Written, not just sized: a sparse file would give nothing back.
    f.write_all(&[0u8; RESERVE_BYTES])
}

/// Whether an error is the filesystem's lack of space (or inodes, or quota).
pub trait NoSpace {
    /// True for `ENOSPC` and `EDQUOT`.
    fn is_no_space(&self) -> bool;
}

impl NoSpace for io::Error {
    fn is_no_space(&self) -> bool {
        matches!(self.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
    }
}

impl NoSpace for crate::shim::ShimError {
    fn is_no_space(&self) -> bool {
        matches!(self, crate::shim::ShimError::Io { source, .. } if source.is_no_space())
    }
}

/// Runs `write`; if it fails for lack of space, releases the control directory's reserve and
/// runs it once more (a record of a container's end on a full disk).
pub fn with_reserve<T, E: NoSpace>(control: &Path, mut write: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    match write() {
        Err(e) if e.is_no_space() && std::fs::remove_file(control.join(RESERVE_FILE)).is_ok() => write(),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_counts_files_once_and_never_follows_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b")).expect("dirs");
        std::fs::write(d.join("a/b/f"), vec![1u8; 64 << 10]).expect("file");
        std::fs::hard_link(d.join("a/b/f"), d.join("a/g")).expect("link");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("big"), vec![1u8; 1 << 20]).expect("outside file");
        std::os::unix::fs::symlink(outside.path(), d.join("a/to-outside")).expect("symlink");
        let u = measure(d, None).expect("measure");
        assert!(!u.truncated);
        // dir, a, a/b, a/b/f, a/g (same inode), a/to-outside
        assert_eq!(u.entries, 6, "{u:?}");
        assert!(u.bytes >= 64 << 10 && u.bytes < 512 << 10, "the 1 MiB outside is not counted: {u:?}");
        let nobody = measure(d, Some(u32::MAX - 1)).expect("measure");
        assert_eq!(nobody.bytes, 0, "nothing belongs to that uid");
        assert_eq!(measure(&d.join("missing"), None).expect("missing"), DirUsage::default());
    }

    #[test]
    fn the_reserve_is_released_once_for_lack_of_space() {
        let dir = tempfile::tempdir().expect("tempdir");
        create_reserve(dir.path()).expect("reserve");
        let mut calls = 0;
        let r: io::Result<()> = with_reserve(dir.path(), || {
            calls += 1;
            if calls == 1 { Err(io::Error::from_raw_os_error(libc::ENOSPC)) } else { Ok(()) }
        });
        assert!(r.is_ok());
        assert_eq!(calls, 2);
        assert!(!dir.path().join(RESERVE_FILE).exists());
        let r: io::Result<()> = with_reserve(dir.path(), || Err(io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(r.is_err(), "no reserve left: the error stands");
        let r: io::Result<()> = with_reserve(dir.path(), || Err(io::Error::from_raw_os_error(libc::EACCES)));
        assert!(!r.as_ref().is_err_and(NoSpace::is_no_space));
    }
}
