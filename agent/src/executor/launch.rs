//! Launching: a checked spec resolved into what the shim needs ([`Executor::validate`]), the
//! control and container directories, the cgroup, and the shim started and waited for until the
//! command runs ([`Executor::launch`]). A launch that fails leaves nothing behind.

use super::{ContainerHandle, ExecError, Executor, ProcRef, Tracked, WORK_DIR, io_err, started_at_ms};
use crate::cgroup::{ContainerCgroup, Limits};
use crate::launch_spec::{self, ContainedPaths, SpecError};
use crate::model::{ContainerKey, LaunchSpec};
use crate::procfs::descendants;
use crate::shim::{
    self, DEFAULT_PATH, LAUNCH_ERROR_FILE, PID_FILE, PidRecord, SHIM_LOG_FILE, SPEC_FILE, ShimSpec,
};
use gantry_sdk::limits::{self, Limit};
use nix::sys::signal::Signal;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a shim may take to start the command.
const LAUNCH_DEADLINE: Duration = Duration::from_secs(10);

impl Executor {
    /// Checks a launch spec ([`crate::launch_spec::check`], then what needs this node: its GPUs,
    /// the account to run as, no container of the same key) and resolves it (user, paths,
    /// environment) into what the shim needs. Refuses with a clear message; has no effect.
    pub fn validate(&self, spec: &LaunchSpec) -> Result<ShimSpec, SpecError> {
        let ContainedPaths { workdir, stdout, stderr } = launch_spec::check(spec)?;
        if let Some(&index) = spec.gpus.iter().find(|&&index| index >= self.settings.gpu_count) {
            return Err(SpecError::NoSuchGpu { index, count: self.settings.gpu_count });
        }
        // `check` saw an explicit limit; the node's default is checked here, by the same rule.
        let max_pids = spec.max_pids.unwrap_or(self.settings.max_pids);
        limits::check_or_unlimited(Limit::MaxPids, max_pids)?;
        let user = self.identity(spec)?;
        let id = spec.key();
        if self.is_known(id) || self.control_dir(id).exists() {
            return Err(SpecError::AlreadyExists(id));
        }

        let gpu_list = spec.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let container_dir = self.container_dir(id);
        let home = user.home.clone().unwrap_or_else(|| container_dir.clone());
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), DEFAULT_PATH.into()),
            ("HOME".into(), home.to_string_lossy().into_owned()),
            ("USER".into(), user.name.clone()),
            ("LOGNAME".into(), user.name.clone()),
        ];
        env.extend(spec.env.iter().cloned());
        // The agent's own variables win over the spec's: the GPU hand-over must not be undone.
        if !id.cluster.is_legacy() {
            env.push(("GANTRY_CLUSTER_ID".into(), id.cluster.to_wire()));
        }
        env.extend([
            ("GANTRY_CONTAINER_ID".into(), id.id.to_string()),
            ("GANTRY_APP_ID".into(), spec.app_id.to_string()),
            ("CUDA_VISIBLE_DEVICES".into(), gpu_list.clone()),
            ("NVIDIA_VISIBLE_DEVICES".into(), if gpu_list.is_empty() { "void".into() } else { gpu_list }),
        ]);
        let privileged = nix::unistd::geteuid().is_root();
        Ok(ShimSpec {
            container_id: id.id,
            cluster: id.cluster,
            app_id: spec.app_id,
            argv: spec.argv.clone(),
            env: last_wins(env),
            workdir: container_dir.join(workdir),
            stdout: container_dir.join(stdout),
            stderr: container_dir.join(stderr),
            container_dir,
            uid: user.uid,
            gid: user.gid,
            groups: user.groups,
            cgroup: None,
            limits: Limits { memory_bytes: spec.memory_bytes, cpu_millis: spec.cpu_millis, max_pids },
            rlimit_as_bytes: None,
            rlimit_nproc: None,
            // A mount namespace and the bounding set need privileges a non-root agent lacks.
            private_tmp: (self.settings.private_tmp && privileged)
                .then(|| self.control_dir(id).join(crate::sandbox::PRIVATE_DIR).join("tmp")),
            shm_bytes: if spec.memory_bytes == 0 {
                crate::sandbox::DEFAULT_SHM_BYTES
            } else {
                spec.memory_bytes
            },
            no_new_privileges: !self.settings.allow_privilege_escalation,
            drop_bounding_set: !self.settings.allow_privilege_escalation && privileged,
            gpus: spec.gpus.clone(),
            disk_bytes: if spec.disk_bytes == 0 { self.settings.default_disk_bytes } else { spec.disk_bytes },
        })
    }

    /// Who a container runs as ([`crate::isolation::identity`]).
    fn identity(&self, spec: &LaunchSpec) -> Result<crate::isolation::Identity, SpecError> {
        crate::isolation::identity(
            spec,
            self.settings.default_user.as_deref(),
            self.settings.allow_root,
            &self.uids,
        )
    }

    /// Launches a container: control and container directories, cgroup with limits, and the
    /// shim, which starts the command. Returns once the command runs. On any error nothing is
    /// left behind: no directory, no cgroup, no process.
    pub fn launch(&self, spec: &LaunchSpec) -> Result<ContainerHandle, ExecError> {
        let (handle, _) = self.launch_watched(spec)?;
        self.unwatch(handle.key);
        Ok(handle)
    }

    /// [`Executor::launch`], also returning the container's [`ExitNotice`]: readable (at end of
    /// file) the moment its supervisor ends, so a caller can collect the exit at once with
    /// [`Executor::collect_exit`] instead of scanning.
    pub fn launch_watched(&self, spec: &LaunchSpec) -> Result<(ContainerHandle, ExitNotice), ExecError> {
        let shim_spec = self.validate(spec)?;
        let (uid, disk_limit) = (shim_spec.uid, shim_spec.disk_bytes);
        let id = spec.key();
        {
            let mut inner = self.lock();
            if inner.containers.contains_key(&id) || !inner.launching.insert(id) {
                return Err(SpecError::AlreadyExists(id).into());
            }
        }
        let control = self.control_dir(id);
        // Traversable, not listable: the container reaches `work/` through it and sees nothing else.
        let created = std::fs::DirBuilder::new().mode(0o711).create(&control);
        let result = match created {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(SpecError::AlreadyExists(id).into()),
            Err(e) => Err(ExecError::Io { what: "create", path: control.clone(), source: e }),
            Ok(()) => {
                let cgroup = self.layout.container(&self.settings.cgroup_name, id);
                let started = self.start(shim_spec, &control, cgroup.as_ref());
                if started.is_err() {
                    if let Some(cg) = &cgroup {
                        let _ = cg.kill_all();
                        let _ = cg.remove();
                    }
                    let _ = std::fs::remove_dir_all(&control);
                }
                started.map(|(child, rec, notice)| (child, rec, notice, cgroup))
            }
        };
        let mut inner = self.lock();
        inner.launching.remove(&id);
        let (child, rec, notice, cgroup) = result?;
        inner.containers.insert(
            id,
            Tracked {
                app_id: spec.app_id,
                started_at_ms: started_at_ms(&control),
                control: control.clone(),
                cgroup: cgroup.clone(),
                memory_limit: spec.memory_bytes,
                uid,
                disk_limit,
                shim: ProcRef { pid: rec.shim_pid, start_time: rec.shim_start_time },
                cmd: ProcRef { pid: rec.pid, start_time: rec.start_time },
                child: Some(child),
                ended: false,
                watched: true,
            },
        );
        let handle = ContainerHandle {
            key: id,
            pid: rec.pid,
            shim_pid: rec.shim_pid,
            container_dir: control.join(WORK_DIR),
            cgroup,
        };
        Ok((handle, ExitNotice(notice)))
    }

    /// Whether a launch of this id is in progress (between [`Executor::launch`] being called and
    /// returning).
    pub fn is_launching(&self, id: ContainerKey) -> bool {
        self.lock().launching.contains(&id)
    }

    fn start(
        &self,
        mut spec: ShimSpec,
        control: &Path,
        cgroup: Option<&ContainerCgroup>,
    ) -> Result<(Child, PidRecord, OwnedFd), ExecError> {
        let id = spec.key();
        // The container's own: no other uid may read it, its logs included.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&spec.container_dir)
            .map_err(io_err("create", &spec.container_dir))?;
        if let Some(tmp) = &spec.private_tmp {
            crate::sandbox::make_private_tmp(tmp).map_err(io_err("create", tmp))?;
        }
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(
                &spec.container_dir,
                Some(nix::unistd::Uid::from_raw(spec.uid)),
                Some(nix::unistd::Gid::from_raw(spec.gid)),
            )
            .map_err(|e| ExecError::Io {
                what: "chown",
                path: spec.container_dir.clone(),
                source: e.into(),
            })?;
        }
        if let Some(cg) = cgroup {
            cg.create(spec.limits)?;
        } else if spec.limits.memory_bytes > 0 {
            spec.rlimit_as_bytes = Some(spec.limits.memory_bytes);
        }
        // Without a pids controller the process limit falls back to RLIMIT_NPROC, which counts
        // every process of the uid (the user's other containers on this node too).
        if spec.limits.max_pids != 0 && !cgroup.is_some_and(ContainerCgroup::limits_pids) {
            spec.rlimit_nproc = Some(spec.limits.max_pids);
        }
        spec.cgroup = cgroup.cloned();
        shim::write_json(&control.join(SPEC_FILE), &spec)?;
        // Room to record the container's end should it fill the disk (see `crate::disk`).
        crate::disk::create_reserve(control).map_err(io_err("reserve space in", control))?;

        let log_path = control.join(SHIM_LOG_FILE);
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&log_path)
            .map_err(io_err("create", &log_path))?;
        let log2 = log.try_clone().map_err(io_err("open", &log_path))?;
        let program = &self.settings.shim_program;
        // The shim says "running" (one byte) and "ended" (end of file) through this pipe.
        let (notice, notify) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| {
            ExecError::Io { what: "create a pipe for", path: program.clone(), source: e.into() }
        })?;
        // No pre-exec code, so that the standard library starts the shim with posix_spawn (a
        // vfork) rather than fork, which would copy this multi-threaded process's page tables
        // for every container. The shim makes its own session; the pipe is its stdin.
        let mut cmd = Command::new(program);
        cmd.arg("shim")
            .arg(control)
            .arg(shim::NOTIFY_ON_STDIN)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(notify))
            .stdout(log)
            .stderr(log2);
        let mut child =
            cmd.spawn().map_err(|source| ExecError::Spawn { program: program.clone(), source })?;
        // The parent's copy of the write end went with `cmd`: only the shim holds it now.
        drop(cmd);

        let pid_path = control.join(PID_FILE);
        match wait_for_notice(&notice, LAUNCH_DEADLINE) {
            Notice::Running | Notice::Ended => {}
            Notice::SetupFailed(message) => {
                // The shim says why itself (on a full disk, no file could hold it); it exits.
                let _ = child.wait();
                return Err(ExecError::Start { id, message });
            }
            Notice::Failed(e) => {
                abort_shim(&mut child);
                return Err(ExecError::Io { what: "wait for", path: program.clone(), source: e });
            }
            Notice::TimedOut => {
                abort_shim(&mut child);
                return Err(ExecError::Start {
                    id,
                    message: format!(
                        "the supervisor did not start it within {} s",
                        LAUNCH_DEADLINE.as_secs()
                    ),
                });
            }
        }
        // The pid record is written before the notice; without it the shim failed (or died).
        if pid_path.exists() {
            return match shim::read_json(&pid_path) {
                Ok(rec) => Ok((child, rec, notice)),
                Err(e) => {
                    abort_shim(&mut child);
                    Err(e.into())
                }
            };
        }
        let status =
            child.wait().map_err(|e| ExecError::Io { what: "wait for", path: program.clone(), source: e })?;
        let message = std::fs::read_to_string(control.join(LAUNCH_ERROR_FILE))
            .or_else(|_| std::fs::read_to_string(&log_path))
            .unwrap_or_default();
        let message = message.trim();
        let message =
            if message.is_empty() { format!("the supervisor exited ({status})") } else { message.to_owned() };
        Err(ExecError::Start { id, message })
    }
}

/// Ends a supervisor that failed to start its container, with whatever it started.
fn abort_shim(child: &mut Child) {
    for p in descendants(child.id()) {
        let _ = nix::sys::signal::kill(ProcRef { pid: p.pid, start_time: 0 }.nix(), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The read end of a container's notification pipe after launch: it reaches end of file when
/// the container's supervisor exits (the container ended, or its supervisor died). Dropping it
/// changes nothing for the container.
#[derive(Debug)]
pub struct ExitNotice(OwnedFd);

impl ExitNotice {
    /// The pipe's read end, for an event loop (make it non-blocking first).
    pub fn into_fd(self) -> OwnedFd {
        self.0
    }
}

/// What the launch pipe said.
enum Notice {
    /// The shim recorded the command's pid.
    Running,
    /// End of file before that: the shim exited.
    Ended,
    /// The shim could not set the container up, and said why.
    SetupFailed(String),
    TimedOut,
    Failed(io::Error),
}

/// Waits for the shim's first word on the launch pipe, up to `limit`.
fn wait_for_notice(pipe: &OwnedFd, limit: Duration) -> Notice {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Notice::TimedOut;
        }
        let timeout = nix::poll::PollTimeout::try_from(left).unwrap_or(nix::poll::PollTimeout::MAX);
        let mut fds = [nix::poll::PollFd::new(pipe.as_fd(), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Notice::Failed(e.into()),
        }
        // "R" alone, or "E" and the reason in one write (see `shim::NotifyFd`).
        let mut byte = [0u8; 1];
        return match nix::unistd::read(pipe, &mut byte) {
            Ok(0) => Notice::Ended,
            Ok(_) if byte[0] == shim::NOTIFY_FAILED => {
                // Written at once with its first byte: already in the pipe.
                let mut reason = [0u8; libc::PIPE_BUF];
                let n = nix::unistd::read(pipe, &mut reason).unwrap_or(0);
                Notice::SetupFailed(String::from_utf8_lossy(&reason[..n]).trim().to_owned())
            }
            Ok(_) => Notice::Running,
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(e) => Notice::Failed(e.into()),
        };
    }
}

/// Keeps the last value of each variable, in first-seen order.
fn last_wins(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in env {
        match index.get(&k) {
            Some(&i) => out[i].1 = v,
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_environment_values_win() {
        let env = vec![("A".into(), "1".into()), ("B".into(), "2".into()), ("A".into(), "3".into())];
        assert_eq!(last_wins(env), vec![("A".to_owned(), "3".to_owned()), ("B".to_owned(), "2".to_owned())]);
    }
}
