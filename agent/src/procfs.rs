//! Processes as `/proc` describes them: one parser of `/proc/<pid>/stat` for the whole agent, the
//! process tree under a pid, and what a set of processes uses.
//!
//! A container that has no cgroup is measured, killed and recognised as its shim's descendants:
//! the shim is a child subreaper, so even processes that daemonise inside the container stay in
//! that tree ([`descendants`], [`tree_usage`], [`container_of_pid`]).

use nix::unistd::{SysconfVar, sysconf};
use std::collections::{HashMap, HashSet};

/// How many parent links [`container_of_pid`] follows before giving up.
const MAX_ANCESTRY: usize = 512;

/// The fields of `/proc/<pid>/stat` the agent uses. Times are in clock ticks
/// ([`clock_ticks_per_second`]), the resident set in pages ([`page_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id (field 1).
    pub pid: u32,
    /// State letter (field 3: `R`, `S`, `D`, `Z`, …).
    pub state: char,
    /// Parent process id (field 4).
    pub ppid: u32,
    /// Process group (field 5).
    pub pgrp: u32,
    /// Session (field 6).
    pub session: u32,
    /// User-mode CPU time of all its threads (field 14).
    pub utime: u64,
    /// Kernel-mode CPU time of all its threads (field 15).
    pub stime: u64,
    /// Start time after boot (field 22): with the pid, it tells a process from a later one that
    /// reused its pid.
    pub start_time: u64,
    /// Resident set, pages (field 24; the same counter as `statm`'s resident and `VmRSS`).
    pub rss_pages: u64,
}

impl ProcStat {
    /// Reads `/proc/<pid>/stat`; `None` when the process does not exist (or the file cannot be
    /// parsed).
    pub fn read(pid: u32) -> Option<ProcStat> {
        let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(&text)
    }

    /// Parses the bytes of a stat file. The command name in parentheses may hold any bytes —
    /// spaces, parentheses, invalid UTF-8 — so the fields are counted from its last `)`. Fields
    /// the agent does not use are not looked at; a missing or negative resident set reads as 0.
    pub fn parse(text: &[u8]) -> Option<ProcStat> {
        let open = text.iter().position(|&b| b == b'(')?;
        let close = text.iter().rposition(|&b| b == b')')?;
        if close < open {
            return None;
        }
        // fields[0] is field 3 (state), so field n is fields[n - 3].
        let mut fields: [&[u8]; 22] = [b""; 22];
        let mut n = 0;
        for (slot, word) in
            fields.iter_mut().zip(text[close + 1..].split(u8::is_ascii_whitespace).filter(|w| !w.is_empty()))
        {
            *slot = word;
            n += 1;
        }
        if n < 20 {
            return None; // no start time (field 22)
        }
        let num = |i: usize| number::<u64>(fields[i - 3]);
        let id = |i: usize| number::<u32>(fields[i - 3]);
        Some(ProcStat {
            pid: number(text[..open].trim_ascii())?,
            state: char::from(*fields[0].first()?),
            ppid: id(4)?,
            pgrp: id(5)?,
            session: id(6)?,
            utime: num(14)?,
            stime: num(15)?,
            start_time: num(22)?,
            rss_pages: number::<i64>(fields[24 - 3]).and_then(|v| u64::try_from(v).ok()).unwrap_or(0),
        })
    }

    /// Whether the process has exited and only waits to be reaped (or is being torn down).
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }
}

fn number<T: std::str::FromStr>(word: &[u8]) -> Option<T> {
    std::str::from_utf8(word).ok()?.parse().ok()
}

/// Kernel clock ticks per second (`USER_HZ`, the unit of `/proc` CPU times).
pub fn clock_ticks_per_second() -> u64 {
    positive_sysconf(SysconfVar::CLK_TCK).unwrap_or(100)
}

/// The memory page size in bytes (the unit of `/proc/<pid>/stat`'s resident set).
pub fn page_size() -> u64 {
    positive_sysconf(SysconfVar::PAGE_SIZE).unwrap_or(4096)
}

/// Reads `var` with `sysconf(3)`; `None` when it is unknown or not positive.
fn positive_sysconf(var: SysconfVar) -> Option<u64> {
    sysconf(var).ok().flatten().and_then(|v| u64::try_from(v).ok()).filter(|&v| v > 0)
}

/// The start time of a live (not zombie) process, for guarding against pid reuse.
pub fn live_start_time(pid: u32) -> Option<u64> {
    ProcStat::read(pid).filter(|s| !s.is_zombie()).map(|s| s.start_time)
}

/// All processes now on the machine, from `/proc` (processes that vanish during the scan are
/// left out).
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()).filter_map(ProcStat::read).collect()
}

/// The live descendants of `root` (not `root` itself), found by walking parent links in `/proc`.
/// Zombies are left out: they hold no resources and cannot be killed.
pub fn descendants(root: u32) -> Vec<ProcStat> {
    let procs = all_processes();
    let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, p) in procs.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(pid) = queue.pop() {
        for &i in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            let p = procs[i];
            if seen.insert(p.pid) {
                queue.push(p.pid);
                if !p.is_zombie() {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// CPU seconds (user + system) and resident bytes of a set of processes (the fallback when there
/// is no cgroup: shared pages are counted once per process, so this over-estimates a little, and
/// the CPU time of a process that has exited is no longer counted).
pub fn tree_usage(procs: &[ProcStat]) -> (f64, u64) {
    let cpu: u64 = procs.iter().map(|p| p.utime + p.stime).sum();
    let rss: u64 = procs.iter().map(|p| p.rss_pages).sum();
    (cpu as f64 / clock_ticks_per_second() as f64, rss.saturating_mul(page_size()))
}

/// The container `pid` belongs to: the one whose shim (`shims` maps shim pids to container ids)
/// is an ancestor of `pid` — the same processes [`descendants`] of that shim gives; the shim
/// itself belongs to none. `None` for a process outside every container or one that is gone.
/// The parent chain is followed for a bounded number of links.
pub fn container_of_pid(pid: u32, shims: &HashMap<u32, u64>) -> Option<u64> {
    let mut current = pid;
    for _ in 0..MAX_ANCESTRY {
        let parent = ProcStat::read(current)?.ppid;
        if let Some(&container) = shims.get(&parent) {
            return Some(container);
        }
        if parent <= 1 {
            return None;
        }
        current = parent;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    #[test]
    fn fields_are_counted_from_the_last_parenthesis() {
        let line = b"4242 (a) b (c) d) S 1 4242 4241 0 -1 4194560 100 0 0 0 \
                     30 12 5 3 20 0 1 0 987654 10000000 2560 18446744073709551615 1 1 0 0 0\n";
        assert_eq!(
            ProcStat::parse(line),
            Some(ProcStat {
                pid: 4242,
                state: 'S',
                ppid: 1,
                pgrp: 4242,
                session: 4241,
                utime: 30,
                stime: 12,
                start_time: 987_654,
                rss_pages: 2560,
            })
        );
        let text = b"42 (a) b (c) S 1 42 42 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 1 0 12345 1000 250 18446744073709551615";
        let s = ProcStat::parse(text).expect("parses");
        assert_eq!(
            (s.pid, s.state, s.ppid, s.pgrp, s.utime, s.stime, s.start_time, s.rss_pages),
            (42, 'S', 1, 42, 7, 3, 12345, 250)
        );
    }

    #[test]
    fn odd_and_truncated_stat_files() {
        let mut odd = b"7 (\xff\xfe) S 1 7 7".to_vec();
        odd.extend_from_slice(b" 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 3\n");
        let s = ProcStat::parse(&odd).expect("non-UTF-8 name");
        assert_eq!((s.pid, s.utime, s.stime, s.start_time, s.rss_pages), (7, 1, 2, 5, 3));
        let no_rss = b"7 (x) Z 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5";
        assert_eq!(ProcStat::parse(no_rss).map(|s| (s.rss_pages, s.is_zombie())), Some((0, true)));
        let negative_rss = b"7 (x) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 -3";
        assert_eq!(ProcStat::parse(negative_rss).map(|s| s.rss_pages), Some(0));
        assert_eq!(ProcStat::parse(b"1 (x) S 0 1 1 0"), None, "truncated");
        assert_eq!(ProcStat::parse(b"1 x S"), None, "no parentheses");
        assert_eq!(ProcStat::parse(b"1 )x( S 0 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 3"), None);
        assert_eq!(ProcStat::parse(b"x (x) S 0 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 3"), None, "bad pid");
    }

    #[test]
    fn own_stat_and_start_time() {
        let me = ProcStat::read(std::process::id()).expect("own stat");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(live_start_time(std::process::id()), Some(me.start_time));
        assert!(me.ppid > 0);
        assert_eq!(me.session, nix::unistd::getsid(None).expect("getsid").as_raw() as u32);
        assert!(clock_ticks_per_second() > 0 && page_size() >= 4096);
    }

    /// A child that is killed and reaped when the test ends, pass or fail.
    struct Reaped(Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn descendants_and_their_container() {
        // A shell (standing for a shim) with a sleeping child of its own.
        let shell = Reaped(Command::new("sh").args(["-c", "sleep 30 & wait"]).spawn().expect("spawn sh"));
        let (me, sh) = (std::process::id(), shell.0.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        let sleep = loop {
            if let [p] = descendants(sh).as_slice() {
                break p.pid;
            }
            assert!(Instant::now() < deadline, "the shell's child never appeared");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mine: Vec<u32> = descendants(me).iter().map(|p| p.pid).collect();
        assert!(mine.contains(&sh) && mine.contains(&sleep), "{mine:?}");

        let shims = HashMap::from([(sh, 7)]);
        assert_eq!(container_of_pid(sleep, &shims), Some(7));
        assert_eq!(container_of_pid(sh, &shims), None, "the shim is not inside its container");
        assert_eq!(container_of_pid(me, &shims), None);
        assert_eq!(container_of_pid(sleep, &HashMap::from([(me, 3), (sh, 7)])), Some(7), "nearest wins");
        assert_eq!(container_of_pid(sleep, &HashMap::from([(me, 3)])), Some(3));
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(sleep as i32), nix::sys::signal::SIGKILL);
        // pid_max is above every pid, so no process has it.
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .expect("pid_max")
            .trim()
            .parse()
            .expect("a number");
        assert_eq!(container_of_pid(pid_max, &HashMap::from([(1, 1)])), None, "no such process");
    }
}
