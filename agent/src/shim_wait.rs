//! The shim's wait for its command, with a timer: the part of the supervisor that acts while the
//! agent may be dead, hung or stopped.
//!
//! The shim blocks `SIGCHLD` before it forks, and here waits for it on a `signalfd` with
//! `poll`'s timeout, so it stays single-threaded and still wakes for two duties besides reaping:
//!
//! - **Fencing** ([`crate::lease`]): when the agent's lease runs out, the shim records the kill
//!   reason `fenced` (the executor's `kill-reason` file; the first reason recorded wins), sends
//!   SIGTERM to the command's process group and, after [`crate::fencing::MAX_GRACE`], SIGKILLs
//!   the container cgroup-wide — what the agent's own fencing does, without the agent.
//! - **Interrupted kills**: the v1 kill freezes the cgroup, SIGKILLs its members and thaws it; an
//!   agent that dies between the freeze and the thaw leaves the processes frozen for good, and a
//!   frozen command never ends. Gantry freezes a container only to kill it, so a cgroup seen
//!   frozen (or freezing) for [`FROZEN_LIMIT`] while the command lives is a kill to finish: every
//!   member is SIGKILLed and the cgroup thawed.
//!
//! With a cgroup the shim wakes every [`FROZEN_POLL`] (one read of `freezer.state`); it reads the
//! lease file only when the deadline it knows passes.

use crate::cgroup::ContainerCgroup;
use crate::lease::{LeaseWatch, boottime_ms};
use crate::procfs::descendants;
use crate::shim::{ExitStatus, ShimError, ShimSpec};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

/// How often a shim with a cgroup looks at its freezer state.
pub const FROZEN_POLL: Duration = Duration::from_secs(2);
/// How long a cgroup may stay frozen, with the command alive, before the shim finishes the kill
/// (an agent's own kill holds it frozen for about a second at most).
pub const FROZEN_LIMIT: Duration = Duration::from_secs(5);
/// The longest single sleep: the timer re-reads the clock at least this often, since `poll`'s
/// timeout does not count time suspended and boot time does.
const MAX_SLEEP: Duration = Duration::from_secs(2);

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The signals [`wait_for`] waits on; block them (before forking) with [`block_sigchld`].
fn sigchld() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    set
}

/// Blocks `SIGCHLD`, so that [`wait_for`] can take it from a `signalfd` and none is lost between
/// a check and the sleep. Call before forking: the command's setup resets the mask before exec.
pub fn block_sigchld() -> Result<(), ShimError> {
    nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&sigchld()), None)
        .map_err(|errno| ShimError::Sys { what: "sigprocmask(SIGCHLD)", errno })
}

/// Where a fencing kill stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fencing {
    /// The lease holds.
    No,
    /// SIGTERM sent; SIGKILL at this boot time (ms).
    Terminated { kill_at: u64 },
    /// SIGKILL sent.
    Killed,
}

/// The shim's timer duties while the command runs.
struct Duties<'a> {
    spec: &'a ShimSpec,
    dir: &'a Path,
    me: u32,
    lease: LeaseWatch,
    fencing: Fencing,
    /// When the cgroup was first seen frozen in the current stretch (boot time ms).
    frozen_since: Option<u64>,
    next_frozen_check: u64,
}

impl Duties<'_> {
    /// Does what is due at `now` (boot time ms).
    fn run(&mut self, now: u64, child: Pid) {
        if self.fencing == Fencing::No && self.lease.check(now) {
            eprintln!(
                "gantry-shim: the agent's fencing lease ran out (deadline {:?} ms of boot time, now {now}): fencing the container",
                self.lease.deadline()
            );
            mark_fenced(self.dir);
            let _ = nix::sys::signal::killpg(child, Signal::SIGTERM);
            self.fencing = Fencing::Terminated { kill_at: now.saturating_add(ms(crate::fencing::MAX_GRACE)) };
        }
        if let Fencing::Terminated { kill_at } = self.fencing {
            if now >= kill_at {
                kill_everything(self.spec.cgroup.as_ref(), child, self.me);
                self.fencing = Fencing::Killed;
            }
        }
        if let Some(cg) = &self.spec.cgroup {
            if now >= self.next_frozen_check {
                self.next_frozen_check = now.saturating_add(ms(FROZEN_POLL));
                self.watch_freezer(cg, now);
            }
        }
    }

    fn watch_freezer(&mut self, cg: &ContainerCgroup, now: u64) {
        if !cg.freeze_requested().unwrap_or(false) {
            self.frozen_since = None;
            return;
        }
        let since = *self.frozen_since.get_or_insert(now);
        if now.saturating_sub(since) >= ms(FROZEN_LIMIT) {
            eprintln!(
                "gantry-shim: the container's cgroup has been frozen for {} s: finishing the interrupted kill",
                now.saturating_sub(since) / 1000
            );
            if let Err(e) = cg.kill_all() {
                eprintln!("gantry-shim: {e}");
            }
            self.frozen_since = None;
        }
    }

    /// When something is next due (boot time ms).
    fn next_due(&self, now: u64) -> u64 {
        let mut next = now.saturating_add(ms(MAX_SLEEP));
        if let Some(at) = self.lease.next_check() {
            next = next.min(at);
        }
        if let Fencing::Terminated { kill_at } = self.fencing {
            next = next.min(kill_at);
        }
        if self.spec.cgroup.is_some() {
            next = next.min(self.next_frozen_check);
        }
        next.max(now)
    }
}

/// Records `fenced` as the reason the container was killed, unless a reason is recorded already
/// (the first wins, as in the executor).
fn mark_fenced(dir: &Path) {
    let path = dir.join(crate::executor::KILL_REASON_FILE);
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
        Ok(mut f) => {
            if let Err(e) = f.write_all(crate::executor::AgentKillReason::Fenced.as_str().as_bytes()) {
                eprintln!("gantry-shim: cannot record the kill reason in {}: {e}", path.display());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => eprintln!("gantry-shim: cannot record the kill reason in {}: {e}", path.display()),
    }
}

/// SIGKILLs the container: cgroup-wide, else its process group and the shim's descendants.
fn kill_everything(cgroup: Option<&ContainerCgroup>, child: Pid, me: u32) {
    match cgroup {
        Some(cg) => {
            if let Err(e) = cg.kill_all() {
                eprintln!("gantry-shim: {e}");
            }
        }
        None => {
            let _ = nix::sys::signal::killpg(child, Signal::SIGKILL);
            for p in descendants(me) {
                let _ = nix::sys::signal::kill(
                    Pid::from_raw(i32::try_from(p.pid).unwrap_or(i32::MAX)),
                    Signal::SIGKILL,
                );
            }
        }
    }
}

/// Reaps every child that has ended; the command's status once it is among them.
fn reap(child: Pid) -> Result<Option<ExitStatus>, ShimError> {
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == child => {
                return Ok(Some(ExitStatus::Exited { code }));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == child => {
                return Ok(Some(ExitStatus::Signaled { signal: signal as i32 }));
            }
            Ok(WaitStatus::StillAlive) => return Ok(None),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(errno) => return Err(ShimError::Sys { what: "waitpid", errno }),
        }
    }
}

/// Waits for the command (`child`) to end, reaping re-parented orphans along the way, fencing
/// it when the agent's lease runs out and finishing an interrupted kill. `SIGCHLD` must have
/// been blocked ([`block_sigchld`]) before the command was forked. `dir` is the control
/// directory.
pub fn wait_for(child: Pid, spec: &ShimSpec, dir: &Path) -> Result<ExitStatus, ShimError> {
    let lease = crate::lease::lease_path_of(dir);
    let now = boottime_ms();
    let mut duties = Duties {
        spec,
        dir,
        me: std::process::id(),
        lease: LeaseWatch::new(lease),
        fencing: Fencing::No,
        frozen_since: None,
        next_frozen_check: now.saturating_add(ms(FROZEN_POLL)),
    };
    // Without a signalfd (out of descriptors) the shim still works, checking every 100 ms.
    let signals = match SignalFd::with_flags(&sigchld(), SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(fd) => Some(fd),
        Err(e) => {
            eprintln!("gantry-shim: signalfd: {e}; polling for the command's end instead");
            None
        }
    };
    loop {
        if let Some(status) = reap(child)? {
            return Ok(status);
        }
        let now = boottime_ms();
        duties.run(now, child);
        let sleep = Duration::from_millis(duties.next_due(boottime_ms()).saturating_sub(boottime_ms()));
        match &signals {
            Some(fd) => {
                let timeout = PollTimeout::try_from(sleep).unwrap_or(PollTimeout::MAX);
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, timeout) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(errno) => return Err(ShimError::Sys { what: "poll", errno }),
                }
                // Drain: SIGCHLDs coalesce, and `reap` collects every ended child anyway.
                while let Ok(Some(_)) = fd.read_signal() {}
            }
            None => std::thread::sleep(sleep.min(Duration::from_millis(100))),
        }
    }
}
