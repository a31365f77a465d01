//! How containers end: the exits collected from their supervisors' records (or their absence,
//! a lost container), classified by the agent's kill reason, the cgroup's OOM kills and the exit
//! status; and forgetting an ended container once its exit is reported.

use super::{
    AgentKillReason, DISK_SEEN_FILE, ExecError, Executor, KILL_REASON_FILE, MEMORY_SEEN_FILE, ProcRef,
    REPORTED_FILE, Tracked, io_err, reap_if_own_zombie,
};
use crate::cgroup::ContainerCgroup;
use crate::model::{ContainerExit, ContainerKey, DiskSeen, ExitReason, MemorySeen};
use crate::procfs::live_start_time;
use crate::shim::{self, EXIT_FILE, ExitRecord, ExitStatus, SPEC_FILE, ShimSpec};
use nix::sys::signal::Signal;
use std::path::Path;

/// How a container ended, from the shim's record, the agent's kill reason and the cgroup's
/// OOM-kill count. An OOM kill inside a container that still exited 0 is not a memory-limit end
/// (the job coped); a non-zero or signalled end after an OOM kill is.
pub fn classify_exit(status: ExitStatus, kill: Option<AgentKillReason>, oom_kills: u64) -> ExitReason {
    match (kill, status) {
        (Some(AgentKillReason::Request), _) => ExitReason::KilledByRequest,
        (Some(AgentKillReason::MemoryLimit), _) => ExitReason::MemoryLimit,
        (Some(AgentKillReason::Fenced), _) => ExitReason::Fenced,
        (Some(AgentKillReason::DiskLimit), _) => ExitReason::DiskLimit,
        (None, ExitStatus::Exited { code: 0 }) => ExitReason::Exited { code: 0 },
        (None, _) if oom_kills > 0 => ExitReason::MemoryLimit,
        (None, ExitStatus::Exited { code }) => ExitReason::Exited { code },
        (None, ExitStatus::Signaled { signal }) => ExitReason::Signaled { signal },
    }
}

impl Executor {
    /// The containers that ended since the last call (non-blocking), with why and when. Each
    /// exit is returned once per agent run; call [`Executor::forget`] once it is reported.
    pub fn collect_exits(&self) -> Vec<ContainerExit> {
        let mut inner = self.lock();
        let mut out = std::mem::take(&mut inner.pending);
        inner.zombies.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        out.extend(
            inner
                .containers
                .iter_mut()
                .filter(|(_, t)| !t.watched)
                .filter_map(|(&id, t)| Self::exit_if_ended(id, t)),
        );
        out
    }

    /// Hands a container launched with [`Executor::launch_watched`] back to
    /// [`Executor::collect_exits`] (its notice was dropped, or could not be watched).
    pub fn unwatch(&self, id: ContainerKey) {
        if let Some(t) = self.lock().containers.get_mut(&id) {
            t.watched = false;
        }
    }

    /// [`Executor::unwatch`] for every container.
    pub fn unwatch_all(&self) {
        for t in self.lock().containers.values_mut() {
            t.watched = false;
        }
    }

    /// One container's exit, if it has ended and its exit was not collected yet (by this call,
    /// [`Executor::collect_exits`], or adoption). The cheap path after its
    /// [`ExitNotice`](super::ExitNotice) fired.
    pub fn collect_exit(&self, id: ContainerKey) -> Option<ContainerExit> {
        let mut inner = self.lock();
        if let Some(i) = inner.pending.iter().position(|e| e.key() == id) {
            return Some(inner.pending.swap_remove(i));
        }
        inner.containers.get_mut(&id).and_then(|t| Self::exit_if_ended(id, t))
    }

    fn exit_if_ended(id: ContainerKey, t: &mut Tracked) -> Option<ContainerExit> {
        if t.ended {
            return None;
        }
        let exit_path = t.control.join(EXIT_FILE);
        let record = if exit_path.exists() {
            shim::read_json::<ExitRecord>(&exit_path).ok()
        } else if t.shim_alive() {
            return None;
        } else {
            // The shim may have written its record just before it ended.
            shim::read_json::<ExitRecord>(&exit_path).ok()
        };
        if let Some(child) = &mut t.child {
            let _ = child.try_wait();
        }
        t.ended = true;
        Some(match record {
            Some(rec) => recorded_exit(id, &t.control, &rec, t.cgroup.as_ref(), t.memory_limit),
            None => lost(id, t.cgroup.as_ref(), t.cmd),
        })
    }

    /// Forgets an ended container once its exit is reported: removes its cgroup and marks its
    /// control directory reported (the logs stay). Idempotent.
    pub fn forget(&self, id: ContainerKey) -> Result<(), ExecError> {
        let control = self.control_dir(id);
        let tracked = {
            let mut inner = self.lock();
            match inner.containers.get(&id) {
                Some(t) if !t.ended => return Err(ExecError::StillRunning(id)),
                Some(_) => {}
                None if control.is_dir() => {}
                None => return Err(ExecError::Unknown(id)),
            }
            inner.containers.remove(&id)
        };
        let cgroup = match tracked {
            Some(mut t) => {
                match t.child.take() {
                    Some(mut child) => {
                        if matches!(child.try_wait(), Ok(None)) {
                            self.lock().zombies.push(child);
                        }
                    }
                    None => reap_if_own_zombie(t.shim),
                }
                t.cgroup
            }
            None => shim::read_json::<ShimSpec>(&control.join(SPEC_FILE)).ok().and_then(|s| s.cgroup),
        };
        let reported = control.join(REPORTED_FILE);
        shim::write_atomic(&reported, b"").map_err(io_err("write", &reported))?;
        if let Some(cg) = cgroup {
            if cg.remove().is_err() {
                cg.kill_all()?;
                cg.remove()?;
            }
        }
        Ok(())
    }
}

/// A container's end as its supervisor recorded it: classified, and for a memory-limit end,
/// with the memory it was seen using (`limit` is the one its launch asked for).
pub(super) fn recorded_exit(
    id: ContainerKey,
    control: &Path,
    rec: &ExitRecord,
    cgroup: Option<&ContainerCgroup>,
    limit: u64,
) -> ContainerExit {
    let kill =
        std::fs::read_to_string(control.join(KILL_REASON_FILE)).ok().and_then(|s| AgentKillReason::parse(&s));
    let oom = cgroup.and_then(|cg| cg.oom_kills().ok()).unwrap_or(0).max(rec.oom_kills);
    let reason = classify_exit(rec.status, kill, oom);
    let memory = (reason == ExitReason::MemoryLimit).then(|| memory_at_exit(control, cgroup, limit));
    let disk = (reason == ExitReason::DiskLimit)
        .then(|| shim::read_json::<DiskSeen>(&control.join(DISK_SEEN_FILE)).unwrap_or_default());
    ContainerExit { memory, disk, ..ContainerExit::new(id, reason, rec.finished_at_ms) }
}

/// What a container ended for its memory limit was seen using: the monitor's measurement when
/// it killed it, else the cgroup's peak (the kernel's OOM killer acted); and its limit.
fn memory_at_exit(control: &Path, cgroup: Option<&ContainerCgroup>, limit: u64) -> MemorySeen {
    if let Ok(seen) = shim::read_json::<MemorySeen>(&control.join(MEMORY_SEEN_FILE)) {
        return MemorySeen {
            limit_bytes: if seen.limit_bytes == 0 { limit } else { seen.limit_bytes },
            ..seen
        };
    }
    MemorySeen { used_bytes: cgroup.and_then(ContainerCgroup::memory_peak).unwrap_or(0), limit_bytes: limit }
}

/// A container whose supervisor vanished without a record: whatever is left in its cgroup is
/// killed (no stray processes), and it is reported lost now.
pub(super) fn lost(id: ContainerKey, cgroup: Option<&ContainerCgroup>, cmd: ProcRef) -> ContainerExit {
    if let Some(cg) = cgroup.filter(|cg| cg.exists()) {
        if let Err(e) = cg.kill_all() {
            tracing::warn!("container {id}: {e}");
        }
    }
    // Without a cgroup, at least the command's process group (only if the pid is still the
    // command: same start time).
    if cmd.pid != 0 && live_start_time(cmd.pid) == Some(cmd.start_time) {
        let _ = nix::sys::signal::killpg(cmd.nix(), Signal::SIGKILL);
    }
    ContainerExit::new(id, ExitReason::Lost, shim::now_ms())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_classified_by_kill_reason_then_oom_then_status() {
        let code = |code| ExitStatus::Exited { code };
        let sig = ExitStatus::Signaled { signal: 9 };
        assert_eq!(classify_exit(sig, Some(AgentKillReason::Request), 1), ExitReason::KilledByRequest);
        assert_eq!(classify_exit(code(0), Some(AgentKillReason::MemoryLimit), 0), ExitReason::MemoryLimit);
        assert_eq!(classify_exit(code(137), None, 1), ExitReason::MemoryLimit);
        assert_eq!(classify_exit(sig, None, 2), ExitReason::MemoryLimit);
        assert_eq!(
            classify_exit(code(0), None, 1),
            ExitReason::Exited { code: 0 },
            "the job coped with the OOM"
        );
        assert_eq!(classify_exit(code(3), None, 0), ExitReason::Exited { code: 3 });
        assert_eq!(classify_exit(sig, None, 0), ExitReason::Signaled { signal: 9 });
        assert_eq!(AgentKillReason::parse("memory-limit\n"), Some(AgentKillReason::MemoryLimit));
        assert_eq!(AgentKillReason::parse(AgentKillReason::Fenced.as_str()), Some(AgentKillReason::Fenced));
        assert_eq!(classify_exit(sig, Some(AgentKillReason::Fenced), 0), ExitReason::Fenced);
    }
}
