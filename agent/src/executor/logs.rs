//! Reading a container's logs for the scheduler ([`Executor::read_log`]): the end of its stdout
//! or stderr, walked to without following a symbolic link the container's user may have planted
//! (see the [executor](super) docs).

use super::{Executor, WORK_DIR};
use crate::model::ContainerKey;
use crate::shim::{self, SPEC_FILE, ShimSpec};
use std::io;
use std::path::{Component, Path, PathBuf};
use thiserror::Error;

/// Most bytes one [`Executor::read_log`] returns (4 MiB, the protocol's cap on a log chunk):
/// a longer read gets the file's last this many bytes.
pub const MAX_LOG_READ_BYTES: u64 = gantry_proto::MAX_LOG_CHUNK_BYTES;

/// Which of a container's two log files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    /// The command's standard output.
    Stdout,
    /// The command's standard error.
    Stderr,
}

impl LogStream {
    /// `stdout` or `stderr`, as messages and the default file names say it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

impl std::fmt::Display for LogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The end of a log file, as [`Executor::read_log`] read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogRead {
    /// The last bytes of the file: as many as asked, at most [`MAX_LOG_READ_BYTES`].
    pub data: Vec<u8>,
    /// The file's size when it was read; more than `data.len()` for a tail or a capped read.
    pub file_size_bytes: u64,
}

/// Why a container's log could not be read. The text goes to the scheduler, and from there to
/// the person asking, so it names the container and the file.
#[derive(Debug, Error)]
pub enum LogError {
    /// Container ids start at 1.
    #[error("container id 0 is not a valid id")]
    ZeroContainerId,
    /// The node has no directory for this container (never ran here, or was cleaned up).
    #[error("no container {} on this node", .0.id)]
    NoContainer(ContainerKey),
    /// The container has no such file (yet).
    #[error("no {stream} for container {}", id.id)]
    NoFile {
        /// The container.
        id: ContainerKey,
        /// Which file.
        stream: LogStream,
    },
    /// The file, or a directory on its way, is not what the container's launch created: a
    /// symbolic link, something other than a regular file, or a file of another owner.
    #[error("{stream} of container {} {why}: refused", id.id)]
    Refused {
        /// The container.
        id: ContainerKey,
        /// Which file.
        stream: LogStream,
        /// What is wrong with it.
        why: String,
    },
    /// Reading failed.
    #[error("cannot read {stream} of container {}: {source}", id.id)]
    Io {
        /// The container.
        id: ContainerKey,
        /// Which file.
        stream: LogStream,
        /// Why.
        source: io::Error,
    },
}

impl Executor {
    /// Reads the end of a container's stdout or stderr: the last `tail` bytes, or the whole
    /// file when `tail` is `None`, never more than [`MAX_LOG_READ_BYTES`] (the last ones).
    ///
    /// Works for every container whose control directory is still here: running, ended, and
    /// forgotten ([`Executor::forget`] keeps the logs). The file is the one the container
    /// actually used, from its `spec.json` (a launch may redirect its logs). Blocking file I/O:
    /// call it off an async executor's threads.
    ///
    /// Never follows a symbolic link and never leaves the container directory: every directory
    /// on the path is opened relative to the previous one with `O_NOFOLLOW`, and the file must be
    /// a regular file owned by the container's user (a hard link to someone else's file is
    /// refused too). The file is opened `O_NONBLOCK`, so a FIFO planted in its place cannot
    /// hang the read before it is refused.
    pub fn read_log(
        &self,
        id: ContainerKey,
        stream: LogStream,
        tail: Option<u64>,
    ) -> Result<LogRead, LogError> {
        use nix::fcntl::{OFlag, openat};
        use nix::sys::stat::Mode;
        use std::os::unix::fs::{FileExt, MetadataExt};

        if id.id == 0 {
            return Err(LogError::ZeroContainerId);
        }
        let control = self.control_dir(id);
        let refused = |why: String| LogError::Refused { id, stream, why };
        let io = |source: io::Error| LogError::Io { id, stream, source };
        // The control directory and its spec are root-owned: trusted. Without a spec (a launch
        // still writing it) the default file name is the one.
        let spec = shim::read_json::<ShimSpec>(&control.join(SPEC_FILE)).ok();
        let default_name = Path::new(stream.as_str());
        let relative: PathBuf = match &spec {
            Some(spec) => {
                let path = match stream {
                    LogStream::Stdout => &spec.stdout,
                    LogStream::Stderr => &spec.stderr,
                };
                // Relative to the container directory as it was at launch (the work root may
                // have moved since); the walk below starts from where it is now.
                path.strip_prefix(&spec.container_dir)
                    .map_err(|_| {
                        refused(format!("is recorded as {}, outside its directory", path.display()))
                    })?
                    .to_owned()
            }
            None => default_name.to_owned(),
        };
        let parts: Vec<&std::ffi::OsStr> = relative
            .components()
            .map(|c| match c {
                Component::Normal(part) => Ok(part),
                _ => Err(refused(format!("path {} is not a plain relative path", relative.display()))),
            })
            .collect::<Result<_, _>>()?;
        let Some((mut file_name, mut dirs)) = parts.split_last() else {
            return Err(refused("path is empty".into()));
        };
        // Once its files are cleaned up, an ended container's logs are in `logs/` (see
        // `crate::cleanup`), named by stream (one file when both streams shared one).
        let mut first = std::ffi::OsStr::new(WORK_DIR);
        let kept = crate::cleanup::kept_log_name(spec.as_ref(), stream);
        if std::fs::symlink_metadata(control.join(crate::cleanup::LOGS_DIR).join(kept)).is_ok() {
            (first, file_name, dirs) = (std::ffi::OsStr::new(crate::cleanup::LOGS_DIR), &kept, &[]);
        }

        let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut dir = match nix::fcntl::open(&control, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => {
                return Err(LogError::NoContainer(id));
            }
            Err(e) => return Err(io(e.into())),
        };
        // `work/` itself belongs to the container's user but sits in the root-owned control
        // directory, so it cannot be swapped; it is checked like the rest all the same.
        for part in std::iter::once(first).chain(dirs.iter().copied()) {
            dir = match openat(&dir, part, dir_flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::ENOENT) => return Err(LogError::NoFile { id, stream }),
                // O_NOFOLLOW on a symbolic link gives ELOOP; O_DIRECTORY on a file, ENOTDIR.
                Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => {
                    return Err(refused(format!(
                        "has {:?} on its path, which is a symbolic link or not a directory",
                        part
                    )));
                }
                Err(e) => return Err(io(e.into())),
            };
        }
        let file_flags =
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        let file = match openat(&dir, *file_name, file_flags, Mode::empty()) {
            Ok(fd) => std::fs::File::from(fd),
            Err(nix::errno::Errno::ENOENT) => return Err(LogError::NoFile { id, stream }),
            Err(nix::errno::Errno::ELOOP) => return Err(refused("is a symbolic link".into())),
            Err(e) => return Err(io(e.into())),
        };
        let meta = file.metadata().map_err(io)?;
        if !meta.file_type().is_file() {
            return Err(refused("is not a regular file".into()));
        }
        if let Some(spec) = &spec {
            if meta.uid() != spec.uid {
                return Err(refused(format!(
                    "belongs to uid {}, not to the container's user (uid {})",
                    meta.uid(),
                    spec.uid
                )));
            }
        }
        let size = meta.len();
        let want = tail.unwrap_or(u64::MAX).min(MAX_LOG_READ_BYTES).min(size);
        let start = size - want;
        // `want` ≤ MAX_LOG_READ_BYTES, so it fits in memory and in usize.
        let mut data = vec![0u8; usize::try_from(want).unwrap_or(0)];
        let mut filled = 0;
        while filled < data.len() {
            match file.read_at(&mut data[filled..], start + filled as u64) {
                Ok(0) => break, // truncated meanwhile
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        data.truncate(filled);
        Ok(LogRead { data, file_size_bytes: size })
    }
}
