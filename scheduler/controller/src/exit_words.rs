//! How a container ended, in words, from what its agent reported: the phrase the engine puts
//! after "container N " in the container's and the application's diagnostics (YARN's
//! "Container killed on request. Exit code is 143", "… is running beyond physical memory
//! limits. Current usage: 1.1 GB of 1 GB physical memory used"). Older agents send no memory
//! figures; the words then say what is known.

use gantry_proto::v1;
use gantry_sdk::units::format_bytes;

/// How a container ended, as its agent's `ContainerExited` tells it.
pub fn exit_phrase(e: &v1::ContainerExited) -> String {
    let code = e.exit_code;
    match v1::ExitReason::try_from(e.reason).unwrap_or(v1::ExitReason::Unspecified) {
        v1::ExitReason::Exited => match code {
            126 => "exited with status 126 (its command could not be executed; see its stderr)".into(),
            127 => "exited with status 127 (its command was not found; see its stderr)".into(),
            _ => format!("exited with status {code}"),
        },
        v1::ExitReason::Signaled => format!(
            "was killed by signal {} ({}), which gantry did not send (exit status {code})",
            e.signal,
            signal_name(e.signal)
        ),
        v1::ExitReason::MemoryLimit => {
            let (used, limit) = (e.memory_used_bytes, e.memory_limit_bytes);
            let seen = match (used, limit) {
                (0, 0) => String::new(),
                (0, limit) => format!(" of {}", format_bytes(limit)),
                (used, 0) => format!(": {} used", format_bytes(used)),
                (used, limit) => format!(": {} of {} used", format_bytes(used), format_bytes(limit)),
            };
            format!("was killed for running beyond its memory limit{seen} (exit status {code})")
        }
        v1::ExitReason::DiskLimit => {
            let (used, limit) = (e.disk_used_bytes, e.disk_limit_bytes);
            let seen = match (used, limit) {
                (0, 0) => String::new(),
                (0, limit) => format!(" of {}", format_bytes(limit)),
                (used, 0) => format!(": it used {}", format_bytes(used)),
                (used, limit) => {
                    format!(": it used {} of its {} disk allowance", format_bytes(used), format_bytes(limit))
                }
            };
            format!("was killed for writing beyond its disk allowance{seen} (exit status {code})")
        }
        v1::ExitReason::KilledByRequest => format!("was killed on request (exit status {code})"),
        v1::ExitReason::Lost => {
            "was lost on its node: it vanished without an exit record, or its agent stopped it \
             after losing contact with the scheduler"
                .into()
        }
        v1::ExitReason::Unspecified => {
            format!("ended for a reason this scheduler does not know (exit status {code})")
        }
    }
}

/// A launch the agent refused or could not start: nothing of it ran.
pub fn launch_failed_phrase(node: &str, message: &str) -> String {
    let message = message.trim();
    let message = if message.is_empty() { "its agent gave no reason" } else { message };
    format!("could not be launched on node {node}: {message}")
}

/// The conventional name of a Linux signal number, or "an unusual signal".
fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => "an unusual signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(reason: v1::ExitReason, exit_code: i32) -> v1::ContainerExited {
        v1::ContainerExited { container_id: 7, reason: reason as i32, exit_code, ..Default::default() }
    }

    #[test]
    fn every_reason_reads_as_words() {
        let oom = v1::ContainerExited {
            memory_used_bytes: 1100 << 20,
            memory_limit_bytes: 1 << 30,
            ..exit(v1::ExitReason::MemoryLimit, 137)
        };
        assert_eq!(
            exit_phrase(&oom),
            "was killed for running beyond its memory limit: 1.1Gi of 1Gi used (exit status 137)"
        );
        let old_agent = exit(v1::ExitReason::MemoryLimit, 137);
        assert_eq!(
            exit_phrase(&old_agent),
            "was killed for running beyond its memory limit (exit status 137)"
        );
        let signaled = v1::ContainerExited { signal: 11, ..exit(v1::ExitReason::Signaled, 139) };
        assert!(exit_phrase(&signaled).contains("signal 11 (SIGSEGV)"), "{}", exit_phrase(&signaled));
        assert_eq!(exit_phrase(&exit(v1::ExitReason::Exited, 3)), "exited with status 3");
        let disk = v1::ContainerExited {
            disk_used_bytes: 12 << 20,
            disk_limit_bytes: 10 << 20,
            ..exit(v1::ExitReason::DiskLimit, 137)
        };
        assert_eq!(
            exit_phrase(&disk),
            "was killed for writing beyond its disk allowance: it used 12Mi of its 10Mi disk allowance (exit status 137)"
        );
        assert!(exit_phrase(&exit(v1::ExitReason::Exited, 127)).contains("not found"));
        assert_eq!(
            exit_phrase(&exit(v1::ExitReason::KilledByRequest, 143)),
            "was killed on request (exit status 143)"
        );
        assert!(exit_phrase(&exit(v1::ExitReason::Lost, -1)).starts_with("was lost"));
        let unknown = v1::ContainerExited { reason: 99, exit_code: 5, ..Default::default() };
        assert!(exit_phrase(&unknown).contains("does not know (exit status 5)"));
        assert_eq!(
            launch_failed_phrase("n1", "unknown user \"bob\"\n"),
            "could not be launched on node n1: unknown user \"bob\""
        );
    }
}
