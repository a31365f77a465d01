//! The fencing lease: fencing that does not die with the agent.
//!
//! [`crate::fencing`] kills an agent's containers once the scheduler has been silent for
//! `fencing_timeout_ms`, but it runs inside the agent: an agent that is `kill -9`ed, hangs or is
//! `SIGSTOP`ped fences nothing, and its containers run on after the scheduler has rerun them
//! elsewhere. So the agent also keeps a *lease* that the containers' supervisors watch:
//!
//! - The agent writes `<containers dir>/lease` ([`LEASE_FILE`], JSON [`LeaseRecord`]): the
//!   instant until which its containers may run, last contact with the scheduler plus the
//!   fencing timeout, in `CLOCK_BOOTTIME` milliseconds. Boot time is the same for every process
//!   of the machine, never jumps with the wall clock, and keeps counting through a suspend (a
//!   machine that slept through its lease must not wake up with live containers). The stream's
//!   task records each message from the scheduler; the agent's main loop writes the lease from
//!   it at most once per [`RENEW_EVERY`] (or a quarter of the timeout, if that is shorter), and
//!   before each launch, with an atomic rename, so a reader sees a whole record or the previous
//!   one ([`Lease`]). A main loop that hangs stops renewing as surely as a dead agent.
//! - Each shim holds the deadline it last read and reads the file again only when that deadline
//!   passes ([`LeaseWatch`]); if the deadline has not moved, the lease has run out and the shim
//!   kills its container with kill reason `fenced` (reported as LOST, like the agent's own
//!   fencing; SIGTERM, then SIGKILL cgroup-wide after [`crate::fencing::MAX_GRACE`]: see
//!   [`crate::shim_wait`]). A renewal lags the contact by at most the renewal period, so a shim
//!   fences no later than the agent would, and before the scheduler's node timeout.
//!
//! The rules for a missing lease: **no lease file means no fencing by shims.** An agent with
//! `fencing_timeout_ms = 0` removes the file at start; an agent too old to know leases never
//! writes one. A shim that finds no file looks again every [`ABSENT_RECHECK`] (an agent
//! restarted with fencing on writes one on its first contact), and one whose lease disappears
//! stops fencing. An agent with fencing on renews the lease before it starts a launch (which
//! came with a contact), so a container it launches always starts under a valid lease. A lease file that cannot be read or parsed is no renewal: the deadline already
//! known stands. A restarted agent never extends the lease at start (only contact does): its
//! predecessor's containers are fenced on the old deadline if the scheduler stays silent.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;

/// The lease file's name in the agent's containers directory.
pub const LEASE_FILE: &str = "lease";
/// The agent writes its lease at most this often (and at most four times per fencing timeout).
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How often a shim without a lease file looks for one.
pub const ABSENT_RECHECK: Duration = Duration::from_secs(5);

/// The lease file's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRecord {
    /// Containers may run until this instant, `CLOCK_BOOTTIME` milliseconds.
    pub deadline_boottime_ms: u64,
}

/// Why the lease could not be kept.
#[derive(Debug, Error)]
pub enum LeaseError {
    /// The lease file could not be written or removed.
    #[error("cannot {what} the fencing lease {path}: {source}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// `CLOCK_BOOTTIME` now, milliseconds: monotonic, shared by all processes of the machine, and
/// counting through suspend.
pub fn boottime_ms() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
        Ok(t) => {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
            secs.saturating_mul(1000).saturating_add(nanos / 1_000_000)
        }
        // Linux has had CLOCK_BOOTTIME since 2.6.39; without it nothing here can work.
        Err(_) => 0,
    }
}

/// The lease file of an agent whose containers' control directories are in `containers_dir`.
pub fn lease_path(containers_dir: &Path) -> PathBuf {
    containers_dir.join(LEASE_FILE)
}

/// The lease file of the container whose control directory is `control_dir`.
pub fn lease_path_of(control_dir: &Path) -> Option<PathBuf> {
    control_dir.parent().map(lease_path)
}

/// What a lease file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRead {
    /// There is none: fencing by shims is off.
    Absent,
    /// Containers may run until this instant (`CLOCK_BOOTTIME` ms).
    Until(u64),
    /// It exists but could not be read or parsed (why).
    Unreadable(String),
}

/// Reads a lease file.
pub fn read(path: &Path) -> LeaseRead {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice::<LeaseRecord>(&bytes) {
            Ok(r) => LeaseRead::Until(r.deadline_boottime_ms),
            Err(e) => LeaseRead::Unreadable(format!("{}: {e}", path.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => LeaseRead::Absent,
        Err(e) => LeaseRead::Unreadable(format!("{}: {e}", path.display())),
    }
}

fn write(path: &Path, deadline_boottime_ms: u64) -> Result<(), LeaseError> {
    let data = serde_json::to_vec(&LeaseRecord { deadline_boottime_ms }).unwrap_or_default();
    crate::shim::write_atomic(path, &data).map_err(|source| LeaseError::Io {
        what: "write",
        path: path.to_owned(),
        source,
    })
}

/// The agent's side. The scheduler stream's task records each contact ([`Lease::contact`], an
/// atomic store); the agent's main loop writes the lease ([`Lease::renew`]) on a timer and
/// before each launch. Both must work for the lease to move: an agent whose stream task still
/// hears the scheduler but whose main loop is stuck sends no more statuses, so the scheduler
/// will declare the node lost, and its containers must be fenced too.
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    timeout_ms: u64,
    /// The least time between two writes, ms.
    every_ms: u64,
    /// The last contact with the scheduler, boot time ms (0: none yet in this run).
    contact_ms: AtomicU64,
    /// The last write: when (boot time ms) and the deadline written.
    written: Mutex<Option<(u64, u64)>>,
}

impl Lease {
    /// Sets the lease up at agent start: with `timeout_ms = 0` (fencing off) the file is removed
    /// and `None` returned. Otherwise the lease is not extended (only contact does that), but a
    /// deadline further away than the timeout — a file from before a reboot, or from a longer
    /// configured timeout — is brought back to now plus the timeout.
    pub fn start(containers_dir: &Path, timeout_ms: u64) -> Result<Option<Lease>, LeaseError> {
        let path = lease_path(containers_dir);
        if timeout_ms == 0 {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(LeaseError::Io { what: "remove", path, source: e })
                }
                _ => Ok(None),
            };
        }
        let every_ms = u64::try_from(RENEW_EVERY.as_millis()).unwrap_or(u64::MAX).min(timeout_ms / 4).max(1);
        let latest = boottime_ms().saturating_add(timeout_ms);
        if let LeaseRead::Until(deadline) = read(&path) {
            if deadline > latest {
                write(&path, latest)?;
            }
        }
        Ok(Some(Lease {
            path,
            timeout_ms,
            every_ms,
            contact_ms: AtomicU64::new(0),
            written: Mutex::new(None),
        }))
    }

    /// The lease file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How often the main loop should call [`Lease::renew`].
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.every_ms)
    }

    /// Records a contact with the scheduler now (cheap: called on every message).
    pub fn contact(&self) {
        self.contact_at(boottime_ms());
    }

    fn contact_at(&self, now: u64) {
        self.contact_ms.fetch_max(now, Ordering::Relaxed);
    }

    /// Writes the lease — the last contact plus the fencing timeout — if that moved it, at most
    /// once per [`Lease::period`] (so the deadline written trails the last contact by at most
    /// that). Returns whether it wrote.
    pub fn renew(&self) -> Result<bool, LeaseError> {
        self.renew_at(boottime_ms())
    }

    fn renew_at(&self, now: u64) -> Result<bool, LeaseError> {
        let contact = self.contact_ms.load(Ordering::Relaxed);
        if contact == 0 {
            return Ok(false);
        }
        let deadline = contact.saturating_add(self.timeout_ms);
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, last)) = *written {
            // A lease that has run out is renewed at once, whatever the period: a launch right
            // after a pause would otherwise start under it, and its shim would fence it at once.
            let ran_out = last <= now;
            if deadline <= last || (now < at.saturating_add(self.every_ms) && !ran_out) {
                return Ok(false);
            }
        }
        // Counted as written even if it fails, so a failing disk is retried (and logged) once per
        // period, not in a tight loop.
        *written = Some((now, deadline));
        write(&self.path, deadline).map(|()| true)
    }
}

/// [`Lease::start`] for an agent's configuration; a lease that cannot be set up is logged and
/// left to the shims as it is (the agent's own fencing still works).
pub fn start_lease(config: &crate::config::AgentConfig) -> Option<Lease> {
    match Lease::start(&config.containers_dir(), config.fencing_timeout_ms) {
        Ok(lease) => lease,
        Err(e) => {
            tracing::warn!(error = %e, "fencing lease");
            None
        }
    }
}

/// [`Lease::renew`], logging a failure (the shims then fence on the deadline last written).
pub fn renew(lease: Option<&Lease>) {
    if let Some(Err(e)) = lease.map(Lease::renew) {
        tracing::warn!(error = %e, "cannot renew the fencing lease; containers are fenced on its last deadline");
    }
}

/// The shim's side: the deadline last read, and when to read the file again.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    path: Option<PathBuf>,
    /// The deadline last read, `None` while there is no lease.
    known: Option<u64>,
    /// When to read the file again (boot time ms).
    next_read: u64,
    /// The lease ran out: the container is being fenced, and nothing changes that.
    expired: bool,
}

impl LeaseWatch {
    /// Starts watching the lease at `path` (`None`: no lease, never fence); reads it at once.
    pub fn new(path: Option<PathBuf>) -> LeaseWatch {
        let mut w = LeaseWatch { path, known: None, next_read: 0, expired: false };
        w.check(boottime_ms());
        w
    }

    /// When [`LeaseWatch::check`] next has something to do (boot time ms); `None` once expired,
    /// or when there is nothing to watch.
    pub fn next_check(&self) -> Option<u64> {
        (!self.expired && self.path.is_some()).then_some(self.next_read)
    }

    /// The deadline last read (`None`: no lease).
    pub fn deadline(&self) -> Option<u64> {
        self.known
    }

    /// True once the lease has run out (and from then on). Reads the file only when the time
    /// set by the last read has come: the known deadline, or the next look for a missing file.
    pub fn check(&mut self, now: u64) -> bool {
        if self.expired {
            return true;
        }
        let Some(path) = &self.path else { return false };
        if now < self.next_read {
            return false;
        }
        let read = read(path);
        self.observe(now, read)
    }

    fn observe(&mut self, now: u64, read: LeaseRead) -> bool {
        let recheck = u64::try_from(ABSENT_RECHECK.as_millis()).unwrap_or(u64::MAX);
        match read {
            LeaseRead::Until(deadline) if deadline > now => {
                self.known = Some(deadline);
                self.next_read = deadline;
            }
            LeaseRead::Until(deadline) => {
                self.known = Some(deadline);
                self.expired = true;
            }
            LeaseRead::Absent => {
                self.known = None;
                self.next_read = now.saturating_add(recheck);
            }
            LeaseRead::Unreadable(why) => {
                eprintln!("gantry-shim: fencing lease unreadable ({why}); the known deadline stands");
                match self.known {
                    Some(deadline) if deadline <= now => self.expired = true,
                    Some(deadline) => self.next_read = deadline,
                    None => self.next_read = now.saturating_add(recheck),
                }
            }
        }
        self.expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_moves_forward() {
        let a = boottime_ms();
        std::thread::sleep(Duration::from_millis(20));
        let b = boottime_ms();
        assert!(a > 0 && b >= a + 20, "{a} then {b}");
    }

    #[test]
    fn renewals_follow_contact_and_are_rate_limited() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lease = Lease::start(dir.path(), 8_000).expect("start").expect("fencing on");
        assert!(!lease.renew_at(100_000).expect("renew"), "no contact yet: nothing to write");
        assert_eq!(read(lease.path()), LeaseRead::Absent, "starting writes nothing");
        lease.contact_at(100_000);
        assert!(lease.renew_at(100_000).expect("renew"));
        assert_eq!(read(lease.path()), LeaseRead::Until(108_000));
        lease.contact_at(100_500);
        assert!(!lease.renew_at(100_999).expect("renew"), "within a second of the last write");
        assert!(lease.renew_at(101_000).expect("renew"));
        assert_eq!(read(lease.path()), LeaseRead::Until(108_500), "the last contact, not the write");
        assert!(!lease.renew_at(105_000).expect("renew"), "no contact since: the deadline stands");
        assert_eq!(read(lease.path()), LeaseRead::Until(108_500));
        lease.contact_at(100_200);
        assert!(!lease.renew_at(106_000).expect("renew"), "a contact recorded late never goes back");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, [LEASE_FILE], "no temporary file is left behind");
    }

    #[test]
    fn a_lease_that_ran_out_is_renewed_at_once_after_a_pause() {
        // The agent is paused (SIGSTOP, a stalled VM) past its lease. On resuming, the renewal
        // tick can run before the first message from the scheduler is seen: it writes the old
        // contact's deadline, already past. The launches that follow renew before they start;
        // rate-limited, they started under the dead lease and their shims fenced them at once —
        // 218 containers in a second of `gantry dev` after a 12 s pause.
        let dir = tempfile::tempdir().expect("tempdir");
        let lease = Lease::start(dir.path(), 8_000).expect("start").expect("fencing on");
        lease.contact_at(100_000);
        assert!(lease.renew_at(100_000).expect("renew"));
        lease.contact_at(100_500);
        assert!(lease.renew_at(120_000).expect("renew"), "the tick on resuming");
        assert_eq!(read(lease.path()), LeaseRead::Until(108_500), "the old contact's deadline, past");
        lease.contact_at(120_001);
        assert!(lease.renew_at(120_002).expect("renew"), "a launch renews a dead lease at once");
        assert_eq!(read(lease.path()), LeaseRead::Until(128_001));
    }

    #[test]
    fn a_restarted_agent_does_not_extend_the_lease_but_clamps_a_far_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = lease_path(dir.path());
        let soon = boottime_ms() + 3_000;
        write(&path, soon).expect("write");
        Lease::start(dir.path(), 8_000).expect("start");
        assert_eq!(read(&path), LeaseRead::Until(soon), "start alone extends nothing");
        write(&path, u64::MAX / 2).expect("write");
        Lease::start(dir.path(), 8_000).expect("start");
        match read(&path) {
            LeaseRead::Until(d) => assert!(d <= boottime_ms() + 8_000, "clamped to the timeout: {d}"),
            other => panic!("{other:?}"),
        }
        let short = Lease::start(dir.path(), 2_000).expect("start").expect("fencing on");
        assert_eq!(short.period(), Duration::from_millis(500), "a 2 s timeout is renewed every 500 ms");
        assert!(Lease::start(dir.path(), 0).expect("start").is_none(), "0: fencing off");
        assert_eq!(read(&path), LeaseRead::Absent, "fencing off removes the lease");
    }

    #[test]
    fn a_shim_reads_the_lease_only_when_its_deadline_passes() {
        let mut w = LeaseWatch { path: None, known: None, next_read: 0, expired: false };
        assert!(!w.check(u64::MAX), "no lease path: never fenced");
        assert_eq!(w.next_check(), None);

        w.path = Some(PathBuf::from("/nonexistent"));
        assert!(!w.observe(1_000, LeaseRead::Until(9_000)));
        assert_eq!(w.next_check(), Some(9_000), "next read at the deadline");
        assert!(!w.check(8_999), "before the deadline nothing is read (the path does not exist)");
        assert!(!w.observe(9_000, LeaseRead::Until(10_000)), "renewed");
        assert!(w.observe(10_000, LeaseRead::Until(10_000)), "not renewed: expired");
        assert!(w.check(20_000), "expired stays expired");
        assert_eq!(w.next_check(), None);
    }

    #[test]
    fn missing_and_unreadable_leases() {
        let mut w = LeaseWatch { path: Some("/x".into()), known: None, next_read: 0, expired: false };
        assert!(!w.observe(1_000, LeaseRead::Absent), "no lease: not fenced");
        assert_eq!(w.next_check(), Some(6_000), "looked for again later");
        assert!(!w.observe(6_000, LeaseRead::Unreadable("bad".into())), "nothing known yet");
        assert!(!w.observe(7_000, LeaseRead::Until(9_000)));
        assert!(!w.observe(8_000, LeaseRead::Unreadable("bad".into())), "the known deadline stands");
        assert_eq!(w.next_check(), Some(9_000));
        assert!(w.observe(9_000, LeaseRead::Unreadable("bad".into())), "and runs out");
        let mut w = LeaseWatch { path: Some("/x".into()), known: None, next_read: 0, expired: false };
        assert!(!w.observe(1_000, LeaseRead::Until(2_000)));
        assert!(!w.observe(2_000, LeaseRead::Absent), "a lease removed (fencing turned off) stops fencing");
        assert_eq!(w.deadline(), None);
    }

    #[test]
    fn a_real_file_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let control = dir.path().join("7");
        let path = lease_path_of(&control).expect("parent");
        assert_eq!(path, dir.path().join(LEASE_FILE));
        let now = boottime_ms();
        write(&path, now + 60_000).expect("write");
        let mut w = LeaseWatch::new(Some(path.clone()));
        assert_eq!(w.deadline(), Some(now + 60_000));
        write(&path, now).expect("write");
        assert!(!w.check(now + 59_999), "the file is not read before the known deadline");
        assert!(w.check(now + 60_000), "read at the deadline: run out");
        std::fs::write(&path, "{\"deadline_boottime_ms\": \"soon\"}").expect("write");
        assert!(matches!(read(&path), LeaseRead::Unreadable(_)));
    }
}
