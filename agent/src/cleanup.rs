//! Cleaning up after ended containers: their files go, their logs stay as long as the API
//! serves them.
//!
//! A container's control directory stays after its exit was reported (the executor marks it
//! `reported`). After `work_retention_ms` (YARN's `delete.debug-delay-sec`: time to look at
//! what a failed container left) its stdout and stderr are moved into `logs/` of the
//! root-owned control directory and every other directory in it — `work/`, and whatever else
//! of the container's lives there — is removed; after `log_retention_ms` the control directory
//! goes whole. While the work filesystem is under pressure the same is done earliest ended
//! first, whatever the retention, until the pressure is over: first the files, then the logs.
//! Only reported containers are touched, and never one the executor still runs or launches.
//!
//! The container's user owns `work/` and could have put a symbolic link where a log was (or on
//! its way), so the logs are moved like [`crate::executor::Executor::read_log`] reads them:
//! every directory opened relative to its parent with `O_NOFOLLOW`, and only a regular file of
//! the container's user is moved (`renameat`, which moves a name and follows nothing). The
//! removal is the standard library's `remove_dir_all`, which does not follow symbolic links
//! either.

use crate::executor::{LogStream, REPORTED_FILE, WORK_DIR};
use crate::model::ContainerKey;
use crate::shim::{self, SPEC_FILE, ShimSpec};
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Where an ended container's stdout and stderr are kept once its `work/` is gone, inside its
/// control directory (root's, mode 0700).
pub const LOGS_DIR: &str = "logs";

/// How long ended containers' files are kept, ms after their exit was reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `work/` and the container's other files.
    pub work_ms: u64,
    /// stdout and stderr (at least `work_ms`).
    pub logs_ms: u64,
}

/// What one [`clean`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cleaned {
    /// Containers whose files were removed (logs kept).
    pub work: usize,
    /// Containers removed whole, logs included.
    pub whole: usize,
}

/// A reported container's control directory.
#[derive(Debug)]
struct Ended {
    control: PathBuf,
    reported_ms: u64,
    /// Some directory besides `logs/` is left (its files are still there).
    has_files: bool,
}

/// The reported containers under `containers_dir` that `is_live` does not claim, earliest
/// reported first.
fn ended(containers_dir: &Path, is_live: &dyn Fn(ContainerKey) -> bool) -> Vec<Ended> {
    let Ok(entries) = std::fs::read_dir(containers_dir) else { return Vec::new() };
    let mut out: Vec<Ended> = entries
        .flatten()
        .filter_map(|e| {
            let key = ContainerKey::from_name(e.file_name().to_str()?)?;
            if is_live(key) {
                return None;
            }
            let control = e.path();
            let reported = std::fs::symlink_metadata(control.join(REPORTED_FILE)).ok()?;
            let reported_ms = reported
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            Some(Ended { has_files: has_files(&control), control, reported_ms })
        })
        .collect();
    out.sort_by_key(|e| e.reported_ms);
    out
}

/// Whether a control directory still holds a directory other than `logs/`.
fn has_files(control: &Path) -> bool {
    std::fs::read_dir(control)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name() != LOGS_DIR && e.file_type().is_ok_and(|t| t.is_dir()))
}

/// One round: removes what is past its retention, then — while `under_pressure()` says so —
/// more, earliest reported first. `is_live` names the containers the executor still runs or
/// launches (never touched, reported or not).
pub fn clean(
    containers_dir: &Path,
    now_ms: u64,
    retention: Retention,
    is_live: &dyn Fn(ContainerKey) -> bool,
    under_pressure: &mut dyn FnMut() -> bool,
) -> Cleaned {
    let mut done = Cleaned::default();
    let mut left = Vec::new();
    for e in ended(containers_dir, is_live) {
        let age = now_ms.saturating_sub(e.reported_ms);
        if age >= retention.logs_ms {
            remove_whole(&e.control, &mut done);
        } else if age >= retention.work_ms && e.has_files {
            clean_files(&e.control, &mut done);
            left.push(Ended { has_files: false, ..e });
        } else {
            left.push(e);
        }
    }
    // Under pressure: the files of the earliest ended first, then their logs.
    for e in left.iter_mut().filter(|e| e.has_files) {
        if !under_pressure() {
            return done;
        }
        clean_files(&e.control, &mut done);
        e.has_files = false;
    }
    for e in &left {
        if !under_pressure() {
            return done;
        }
        remove_whole(&e.control, &mut done);
    }
    done
}

fn remove_whole(control: &Path, done: &mut Cleaned) {
    match std::fs::remove_dir_all(control) {
        Ok(()) => {
            tracing::info!(dir = %control.display(), "ended container's directory and logs removed");
            done.whole += 1;
        }
        Err(e) => {
            tracing::warn!(dir = %control.display(), error = %e, "cannot remove an ended container's directory")
        }
    }
}

fn clean_files(control: &Path, done: &mut Cleaned) {
    match remove_files(control) {
        Ok(()) => {
            tracing::info!(dir = %control.display(), "ended container's files removed; its logs are kept");
            done.work += 1;
        }
        Err(e) => {
            tracing::warn!(dir = %control.display(), error = %e, "cannot remove an ended container's files")
        }
    }
}

/// Moves an ended container's stdout and stderr into `logs/`, then removes every other
/// directory of its control directory (`work/` first of all). Idempotent.
pub fn remove_files(control: &Path) -> io::Result<()> {
    if let Ok(spec) = shim::read_json::<ShimSpec>(&control.join(SPEC_FILE)) {
        let logs = control.join(LOGS_DIR);
        match std::fs::DirBuilder::new().mode_0700().create(&logs) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        for (name, path) in [("stdout", &spec.stdout), ("stderr", &spec.stderr)] {
            let Ok(relative) = path.strip_prefix(&spec.container_dir) else { continue };
            if let Err(e) = move_log(control, relative, spec.uid, &logs, name) {
                tracing::warn!(dir = %control.display(), log = name, error = %e, "cannot keep a log");
            }
        }
    }
    for entry in std::fs::read_dir(control)?.flatten() {
        // `file_type` does not follow a symbolic link: only real directories go, whole.
        if entry.file_name() != LOGS_DIR && entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

/// The name under [`LOGS_DIR`] of a container's log once its files are cleaned up: the
/// stream's, or `stdout` for stderr when both went to one file.
pub fn kept_log_name(spec: Option<&ShimSpec>, stream: LogStream) -> &'static std::ffi::OsStr {
    let shared = spec.is_some_and(|s| s.stdout == s.stderr);
    let name = if shared { LogStream::Stdout } else { stream };
    std::ffi::OsStr::new(name.as_str())
}

trait DirMode {
    fn mode_0700(&mut self) -> &mut Self;
}

impl DirMode for std::fs::DirBuilder {
    fn mode_0700(&mut self) -> &mut Self {
        std::os::unix::fs::DirBuilderExt::mode(self, 0o700)
    }
}

/// Moves `work/<relative>` to `<logs>/<name>` if it is a regular file of `uid` reached without
/// a symbolic link; anything else is left where it is (and goes with `work/`).
fn move_log(control: &Path, relative: &Path, uid: u32, logs: &Path, name: &str) -> io::Result<()> {
    let parts: Vec<&std::ffi::OsStr> = relative
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            _ => Err(io::Error::other(format!("{} is not a plain relative path", relative.display()))),
        })
        .collect::<io::Result<_>>()?;
    let Some((file, dirs)) = parts.split_last() else { return Ok(()) };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut dir: OwnedFd = nix::fcntl::open(control, flags, Mode::empty())?;
    for part in std::iter::once(std::ffi::OsStr::new(WORK_DIR)).chain(dirs.iter().copied()) {
        dir = match openat(&dir, part, flags, Mode::empty()) {
            Ok(fd) => fd,
            // Gone, or a symbolic link or not a directory: nothing to keep.
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
    }
    let st = match fstatat(&dir, *file, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
    if !regular || st.st_uid != uid {
        return Ok(());
    }
    let logs_fd = nix::fcntl::open(logs, flags, Mode::empty())?;
    renameat(&dir, *file, &logs_fd, name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClusterId;
    use std::os::unix::fs::MetadataExt;

    /// A reported container `id` whose spec puts its logs in `work/out/` (stdout) and `work/`
    /// (stderr), reported `age_ms` ago... by its `reported` file's time.
    fn container(dir: &Path, id: u64, reported_ms: u64) -> PathBuf {
        let key = ContainerKey::new(ClusterId::from_bits(1), id);
        let control = dir.join(key.to_string());
        let work = control.join(WORK_DIR);
        std::fs::create_dir_all(work.join("out")).expect("dirs");
        std::fs::create_dir_all(control.join("tmp")).expect("private tmp");
        std::fs::write(work.join("out/stdout"), format!("out {id}")).expect("stdout");
        std::fs::write(work.join("stderr"), format!("err {id}")).expect("stderr");
        std::fs::write(work.join("data"), vec![0u8; 4096]).expect("data");
        let uid = std::fs::metadata(&work).expect("meta").uid();
        let spec = serde_json::json!({
            "container_id": id, "app_id": 1, "argv": ["true"], "env": [],
            "container_dir": work, "workdir": work, "stdout": work.join("out/stdout"),
            "stderr": work.join("stderr"), "uid": uid, "gid": 0, "groups": [], "cgroup": null,
            "limits": {"memory_bytes": 0, "cpu_millis": 0}, "rlimit_as_bytes": null, "gpus": []
        });
        std::fs::write(control.join(SPEC_FILE), spec.to_string()).expect("spec");
        let reported = std::fs::File::create(control.join(REPORTED_FILE)).expect("reported");
        let when = UNIX_EPOCH + std::time::Duration::from_millis(reported_ms);
        reported.set_modified(when).expect("mtime");
        control
    }

    const RETENTION: Retention = Retention { work_ms: 1_000, logs_ms: 10_000 };

    #[test]
    fn files_go_after_their_retention_and_logs_after_theirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let young = container(dir.path(), 1, 100_000);
        let old = container(dir.path(), 2, 98_000);
        let ancient = container(dir.path(), 3, 80_000);
        let done = clean(dir.path(), 100_500, RETENTION, &|_| false, &mut || false);
        assert_eq!(done, Cleaned { work: 1, whole: 1 });
        assert!(young.join(WORK_DIR).join("data").exists(), "within its retention");
        assert!(!old.join(WORK_DIR).exists() && !old.join("tmp").exists(), "its files are gone");
        assert_eq!(std::fs::read_to_string(old.join(LOGS_DIR).join("stdout")).expect("kept"), "out 2");
        assert_eq!(std::fs::read_to_string(old.join(LOGS_DIR).join("stderr")).expect("kept"), "err 2");
        assert!(old.join(SPEC_FILE).exists(), "the record stays");
        assert!(!ancient.exists(), "past the log retention: gone whole");
        assert_eq!(clean(dir.path(), 100_500, RETENTION, &|_| false, &mut || false), Cleaned::default());
    }

    #[test]
    fn live_and_unreported_containers_are_never_touched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let live = container(dir.path(), 1, 0);
        let unreported = container(dir.path(), 2, 0);
        std::fs::remove_file(unreported.join(REPORTED_FILE)).expect("unreport");
        let key1 = ContainerKey::new(ClusterId::from_bits(1), 1);
        let done = clean(dir.path(), 1 << 40, RETENTION, &|k| k == key1, &mut || true);
        assert_eq!(done, Cleaned::default());
        assert!(live.join(WORK_DIR).join("data").exists() && unreported.join(WORK_DIR).exists());
    }

    #[test]
    fn pressure_cleans_earliest_first_files_before_logs_until_it_is_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b, c) =
            (container(dir.path(), 1, 10), container(dir.path(), 2, 30), container(dir.path(), 3, 20));
        // Pressure for three more checks: a's files, c's files, b's files.
        let mut checks = 0;
        let done = clean(dir.path(), 100, RETENTION, &|_| false, &mut || {
            checks += 1;
            checks <= 3
        });
        assert_eq!(done, Cleaned { work: 3, whole: 0 });
        assert!(a.join(LOGS_DIR).join("stdout").exists() && c.join(LOGS_DIR).exists());
        // Pressure for two more: whole directories, earliest first.
        let mut checks = 0;
        let done = clean(dir.path(), 100, RETENTION, &|_| false, &mut || {
            checks += 1;
            checks <= 1
        });
        assert_eq!(done, Cleaned { work: 0, whole: 1 });
        assert!(!a.exists() && b.exists() && c.exists(), "the earliest reported went first");
    }

    #[test]
    fn a_log_replaced_by_a_symbolic_link_is_not_moved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = container(dir.path(), 1, 0);
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").expect("secret");
        std::fs::remove_file(c.join(WORK_DIR).join("stderr")).expect("rm");
        std::os::unix::fs::symlink(&secret, c.join(WORK_DIR).join("stderr")).expect("symlink");
        std::fs::remove_dir_all(c.join(WORK_DIR).join("out")).expect("rm");
        std::os::unix::fs::symlink(dir.path(), c.join(WORK_DIR).join("out")).expect("dir symlink");
        remove_files(&c).expect("cleaned");
        assert!(!c.join(LOGS_DIR).join("stderr").exists() && !c.join(LOGS_DIR).join("stdout").exists());
        assert_eq!(std::fs::read_to_string(&secret).expect("untouched"), "root's");
        assert!(!c.join(WORK_DIR).exists());
    }
}
