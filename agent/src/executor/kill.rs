//! Stopping containers: a graceful kill (SIGTERM, the grace period, then SIGKILL) and the
//! agent's own kills for memory, disk and fencing, each recorded as an [`AgentKillReason`] in
//! the control directory before the signal, so the exit says why.

use super::{DISK_SEEN_FILE, ExecError, Executor, KILL_REASON_FILE, MEMORY_SEEN_FILE, ProcRef};
use crate::model::{ContainerKey, DiskSeen, MemorySeen};
use crate::procfs::descendants;
use crate::shim::{self, EXIT_FILE};
use nix::sys::signal::Signal;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a container may take to end after SIGKILL (the shim's own cleanup deadline is 15 s).
const KILL_DEADLINE: Duration = Duration::from_secs(20);

/// Why the agent (not the container itself) killed a container, as recorded in its control
/// directory ([`KILL_REASON_FILE`]); not the scheduler's own kill reasons, which it sends as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKillReason {
    /// The scheduler asked.
    Request,
    /// The monitor found it over its memory limit.
    MemoryLimit,
    /// The agent fenced itself: no word from the scheduler for its fencing timeout.
    Fenced,
    /// The disk round found its files over its disk allowance.
    DiskLimit,
}

impl AgentKillReason {
    /// The word recorded in the kill-reason file.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKillReason::Request => "request",
            AgentKillReason::MemoryLimit => "memory-limit",
            AgentKillReason::Fenced => "fenced",
            AgentKillReason::DiskLimit => "disk-limit",
        }
    }

    /// The reason a kill-reason file records, if it holds one.
    pub(super) fn parse(s: &str) -> Option<AgentKillReason> {
        match s.trim() {
            "request" => Some(AgentKillReason::Request),
            "memory-limit" => Some(AgentKillReason::MemoryLimit),
            "fenced" => Some(AgentKillReason::Fenced),
            "disk-limit" => Some(AgentKillReason::DiskLimit),
            _ => None,
        }
    }
}

impl Executor {
    /// Records why the agent kills a container (the first reason recorded wins), unless it has
    /// already ended.
    fn mark(&self, control: &Path, reason: AgentKillReason) -> Result<(), ExecError> {
        if control.join(EXIT_FILE).exists() {
            return Ok(());
        }
        let path = control.join(KILL_REASON_FILE);
        let write = || -> io::Result<()> {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
            let written = f.write_all(reason.as_str().as_bytes()).and_then(|()| f.sync_all());
            if written.is_err() {
                // An empty reason would stand for none: try again from scratch (the reserve).
                let _ = std::fs::remove_file(&path);
            }
            written
        };
        match crate::disk::with_reserve(control, write) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(ExecError::Io { what: "write", path, source: e }),
        }
    }

    /// Asks a container to stop: records the kill as requested and sends SIGTERM to its process
    /// group. The first half of [`Executor::kill`], for callers that run their own timer.
    pub fn request_kill(&self, id: ContainerKey) -> Result<(), ExecError> {
        self.signal(id, Some(AgentKillReason::Request), Signal::SIGTERM)
    }

    /// SIGKILLs everything left of a container: cgroup-wide, or — without a cgroup — its process
    /// group and every descendant of its supervisor. The second half of [`Executor::kill`].
    pub fn force_kill(&self, id: ContainerKey) -> Result<(), ExecError> {
        self.signal(id, None, Signal::SIGKILL)
    }

    /// Kills a container for exceeding its memory limit; its exit is reported as
    /// [`ExitReason::MemoryLimit`](crate::model::ExitReason::MemoryLimit) with `seen`, the usage
    /// that condemned it. Returns once SIGKILL is sent.
    pub fn kill_for_memory(&self, id: ContainerKey, seen: MemorySeen) -> Result<(), ExecError> {
        let control =
            self.lock().containers.get(&id).map(|t| t.control.clone()).ok_or(ExecError::Unknown(id))?;
        let path = control.join(MEMORY_SEEN_FILE);
        if !path.exists() {
            // Only read back for a memory-limit end; a container that ended first keeps its own.
            shim::write_json(&path, &seen)?;
        }
        self.signal(id, Some(AgentKillReason::MemoryLimit), Signal::SIGKILL)
    }

    /// Kills a container whose files hold more than its disk allowance; its exit is reported as
    /// [`ExitReason::DiskLimit`](crate::model::ExitReason::DiskLimit) with `seen`. Returns once
    /// SIGKILL is sent.
    pub fn kill_for_disk(&self, id: ContainerKey, seen: DiskSeen) -> Result<(), ExecError> {
        let control =
            self.lock().containers.get(&id).map(|t| t.control.clone()).ok_or(ExecError::Unknown(id))?;
        let path = control.join(DISK_SEEN_FILE);
        if !path.exists() {
            crate::disk::with_reserve(&control, || shim::write_json(&path, &seen))?;
        }
        self.signal(id, Some(AgentKillReason::DiskLimit), Signal::SIGKILL)
    }

    fn signal(
        &self,
        id: ContainerKey,
        reason: Option<AgentKillReason>,
        signal: Signal,
    ) -> Result<(), ExecError> {
        let (control, cgroup, shim, cmd) = {
            let mut inner = self.lock();
            let t = inner.containers.get_mut(&id).ok_or(ExecError::Unknown(id))?;
            if t.ended || t.control.join(EXIT_FILE).exists() || !t.shim_alive() {
                return Ok(());
            }
            (t.control.clone(), t.cgroup.clone(), t.shim, t.cmd)
        };
        if let Some(reason) = reason {
            self.mark(&control, reason)?;
        }
        if signal == Signal::SIGTERM {
            let _ = nix::sys::signal::killpg(cmd.nix(), Signal::SIGTERM);
            return Ok(());
        }
        match cgroup {
            Some(cg) => cg.kill_all()?,
            None => {
                let _ = nix::sys::signal::killpg(cmd.nix(), Signal::SIGKILL);
                for p in descendants(shim.pid) {
                    let _ =
                        nix::sys::signal::kill(ProcRef { pid: p.pid, start_time: 0 }.nix(), Signal::SIGKILL);
                }
            }
        }
        Ok(())
    }

    /// Whether a container has ended (its supervisor recorded the exit, or is gone). Unknown ids
    /// count as ended.
    pub fn has_ended(&self, id: ContainerKey) -> bool {
        let mut inner = self.lock();
        match inner.containers.get_mut(&id) {
            None => true,
            Some(t) => t.ended || t.control.join(EXIT_FILE).exists() || !t.shim_alive(),
        }
    }

    /// Kills a container gracefully: SIGTERM to its process group, up to `grace` for it to end,
    /// then SIGKILL to everything left. Returns once it has ended; its exit (reported as
    /// [`ExitReason::KilledByRequest`](crate::model::ExitReason::KilledByRequest)) comes out of
    /// [`Executor::collect_exits`].
    pub async fn kill(&self, id: ContainerKey, grace: Duration) -> Result<(), ExecError> {
        self.kill_as(id, grace, AgentKillReason::Request).await
    }

    /// [`Executor::kill`] recording `reason` instead (the first reason recorded wins), e.g.
    /// [`AgentKillReason::Fenced`] so the exit says why the agent stopped it.
    pub async fn kill_as(
        &self,
        id: ContainerKey,
        grace: Duration,
        reason: AgentKillReason,
    ) -> Result<(), ExecError> {
        self.signal(id, Some(reason), Signal::SIGTERM)?;
        if !self.wait_ended(id, grace).await {
            self.force_kill(id)?;
            if !self.wait_ended(id, KILL_DEADLINE).await {
                return Err(ExecError::KillTimeout { id, secs: KILL_DEADLINE.as_secs() });
            }
        }
        Ok(())
    }

    async fn wait_ended(&self, id: ContainerKey, limit: Duration) -> bool {
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            if self.has_ended(id) {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(pause.min(limit.saturating_sub(start.elapsed()))).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}
