//! The one check of a launch spec, wherever it comes from: a `Launch` off the wire
//! ([`from_wire`], called by the [client](crate::client) before anything reaches the core) and a
//! [`LaunchSpec`] handed to the executor ([`check`], called by `Executor::validate` before it
//! resolves the spec for the shim). Both run [`check`], so a launch the client lets through is
//! one the executor would not refuse for its content, and the two cannot drift apart.
//!
//! [`check`] holds everything that can be said of a spec without knowing the node: a program to
//! run, no NUL bytes, valid environment names, sizes within [`gantry_sdk::limits`], no GPU twice,
//! and paths that stay inside the container directory. What needs the node — GPUs it has, the
//! account to run as, a container of the same key already here — the executor adds.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use gantry_proto::v1;
use gantry_sdk::limits::{self, ArgsTooLarge, Limit, OutOfRange};
use thiserror::Error;

use crate::model::{ClusterId, ContainerKey, LaunchSpec};

/// Most `argv` or `env` entries a launch may have.
pub const MAX_LAUNCH_ENTRIES: usize = 4096;

/// Why a launch was refused. Nothing was launched. The text goes back to the scheduler in
/// `LaunchFailed`, after `launch refused: `.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SpecError {
    /// Container ids start at 1; 0 is what a missing field reads as.
    #[error("container id 0 is not a valid id")]
    ZeroContainerId,
    /// A cluster id that is neither empty nor 32 lowercase hex digits.
    #[error("{0}")]
    BadCluster(gantry_proto::ClusterIdError),
    /// A limit below zero on the wire.
    #[error("negative {field}: {value}")]
    Negative {
        /// The field (`cpu_millis` or `memory_bytes`).
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// No program.
    #[error("argv is empty: a container needs a program to run")]
    EmptyArgv,
    /// `argv[0]` is the empty string.
    #[error("argv[0] is empty: a container needs a program to run")]
    EmptyProgram,
    /// Too many `argv` or `env` entries.
    #[error("{field} has {count} entries, more than {max}")]
    TooMany {
        /// The field.
        field: &'static str,
        /// How many it has.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A string holds a NUL byte, which no process can be given.
    #[error("{field} contains a NUL byte")]
    Nul {
        /// Which part of the spec.
        field: String,
    },
    /// An environment variable name is empty or holds `=`.
    #[error("environment variable name {name:?} is invalid: it must be non-empty and contain no '='")]
    EnvName {
        /// The name.
        name: String,
    },
    /// argv and environment are too large ([`gantry_sdk::limits::MAX_ARGS_BYTES`]).
    #[error(transparent)]
    TooLarge(#[from] ArgsTooLarge),
    /// A CPU, memory or process limit out of range ([`gantry_sdk::limits`]).
    #[error(transparent)]
    Limit(#[from] OutOfRange),
    /// An absolute path.
    #[error("{field} {path:?} must be a path relative to the container directory: it is absolute")]
    AbsolutePath {
        /// `workdir`, `stdout` or `stderr`.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// A path with `..`.
    #[error("{field} {path:?} escapes the container directory: it has a `..` component")]
    PathEscape {
        /// `workdir`, `stdout` or `stderr`.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// A log path that names no file.
    #[error("{field} {path:?} does not name a file")]
    NotAFile {
        /// `stdout` or `stderr`.
        field: &'static str,
        /// The path.
        path: String,
    },
    /// A GPU index listed twice.
    #[error("GPU {0} is listed more than once")]
    DuplicateGpu(u32),
    /// A GPU index the node does not have.
    #[error("GPU {index} does not exist on this node ({count} GPUs)")]
    NoSuchGpu {
        /// The index.
        index: u32,
        /// GPUs on the node.
        count: u32,
    },
    /// No such account.
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    /// The account database could not be read.
    #[error("cannot look up user {user:?}: {message}")]
    UserLookup {
        /// The user.
        user: String,
        /// Why.
        message: String,
    },
    /// uid 0 without `allow_root`.
    #[error("user {0:?} is root; containers may run as root only when allow_root is set")]
    RootNotAllowed(String),
    /// A non-root agent can only start containers as itself.
    #[error("the agent runs as uid {agent_uid} and cannot start containers as {user:?} (uid {uid})")]
    CannotSwitchUser {
        /// The user.
        user: String,
        /// Its uid.
        uid: u32,
        /// The agent's uid.
        agent_uid: u32,
    },
    /// No uid could be given to the submitting user.
    #[error("no uid for user {user:?}: {message}")]
    NoDynamicUid {
        /// The submitting user.
        user: String,
        /// Why.
        message: String,
    },
    /// A container of this cluster and id is on this node already.
    #[error("container {0} already exists on this node")]
    AlreadyExists(ContainerKey),
}

impl SpecError {
    /// Whether the node, not the request, is at fault: its user could not be given a uid (the
    /// uid table could not be written, or the node's range is used up). Counts towards the
    /// node's `LaunchFailures` condition; every other refusal is the request's own.
    pub fn blames_the_node(&self) -> bool {
        matches!(self, SpecError::NoDynamicUid { .. })
    }
}

/// A checked spec's paths, relative to the container directory and normalised (no `.`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainedPaths {
    /// The working directory (empty: the container directory itself).
    pub workdir: PathBuf,
    /// The stdout file.
    pub stdout: PathBuf,
    /// The stderr file.
    pub stderr: PathBuf,
}

/// Checks what can be checked of a launch without knowing the node (see the module docs), and
/// returns its paths made relative and normalised. Has no effect.
pub fn check(spec: &LaunchSpec) -> Result<ContainedPaths, SpecError> {
    let argv0 = spec.argv.first().ok_or(SpecError::EmptyArgv)?;
    if argv0.is_empty() {
        return Err(SpecError::EmptyProgram);
    }
    for (field, count) in [("argv", spec.argv.len()), ("env", spec.env.len())] {
        if count > MAX_LAUNCH_ENTRIES {
            return Err(SpecError::TooMany { field, count, max: MAX_LAUNCH_ENTRIES });
        }
    }
    for (i, a) in spec.argv.iter().enumerate() {
        no_nul(&format!("argv[{i}]"), a)?;
    }
    for (k, v) in &spec.env {
        no_nul(&format!("environment variable {k:?}"), k)?;
        no_nul(&format!("environment variable {k:?}"), v)?;
        if k.is_empty() || k.contains('=') {
            return Err(SpecError::EnvName { name: k.clone() });
        }
    }
    if let Some(user) = &spec.user {
        no_nul("user", user)?;
    }
    no_nul("submitter", &spec.submitter)?;
    limits::check_args(
        spec.argv.iter().map(String::as_str),
        spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )?;
    limits::check_or_unlimited(Limit::CpuMillis, spec.cpu_millis)?;
    limits::check_or_unlimited(Limit::MemoryBytes, spec.memory_bytes)?;
    if let Some(max_pids) = spec.max_pids {
        limits::check_or_unlimited(Limit::MaxPids, max_pids)?;
    }
    let mut seen = HashSet::new();
    if let Some(&index) = spec.gpus.iter().find(|&&g| !seen.insert(g)) {
        return Err(SpecError::DuplicateGpu(index));
    }
    Ok(ContainedPaths {
        workdir: contained("workdir", spec.workdir.as_deref().unwrap_or("."), false)?,
        stdout: contained("stdout", spec.stdout.as_deref().unwrap_or("stdout"), true)?,
        stderr: contained("stderr", spec.stderr.as_deref().unwrap_or("stderr"), true)?,
    })
}

/// Turns a `Launch` from the wire into a [`LaunchSpec`] and [`check`]s it: refuses what could
/// run something other than asked (container id 0, a bad cluster id, negative limits, and all
/// that [`check`] refuses). Account names and GPU indexes are checked by the executor, which
/// knows the machine.
pub fn from_wire(launch: v1::Launch) -> Result<LaunchSpec, SpecError> {
    if launch.container_id == 0 {
        return Err(SpecError::ZeroContainerId);
    }
    let cluster = ClusterId::parse(&launch.cluster_id).map_err(SpecError::BadCluster)?;
    let non_negative =
        |field, value: i64| u64::try_from(value).map_err(|_| SpecError::Negative { field, value });
    let cpu_millis = non_negative("cpu_millis", launch.cpu_millis)?;
    let memory_bytes = non_negative("memory_bytes", launch.memory_bytes)?;
    // An empty string on the wire is an absent field: the default.
    let optional = |s: String| (!s.is_empty()).then_some(s);
    let spec = LaunchSpec {
        container_id: launch.container_id,
        cluster,
        app_id: launch.app_id,
        workdir: optional(launch.workdir),
        stdout: optional(launch.stdout),
        stderr: optional(launch.stderr),
        argv: launch.argv,
        env: launch.env.into_iter().collect(),
        user: optional(launch.user),
        submitter: launch.submitter,
        max_pids: (launch.max_pids != 0).then_some(launch.max_pids),
        cpu_millis,
        memory_bytes,
        gpus: launch.gpus,
        disk_bytes: launch.disk_bytes,
    };
    check(&spec)?;
    Ok(spec)
}

/// Refuses a string no process can be given (it holds a NUL byte).
fn no_nul(field: &str, s: &str) -> Result<(), SpecError> {
    if s.contains('\0') { Err(SpecError::Nul { field: field.to_owned() }) } else { Ok(()) }
}

/// A spec path made relative and normalised; refuses absolute paths and `..`, and for a file,
/// a path that names none.
fn contained(field: &'static str, raw: &str, file: bool) -> Result<PathBuf, SpecError> {
    no_nul(field, raw)?;
    let mut out = PathBuf::new();
    for c in Path::new(raw).components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => return Err(SpecError::PathEscape { field, path: raw.to_owned() }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(SpecError::AbsolutePath { field, path: raw.to_owned() });
            }
        }
    }
    if file && out.as_os_str().is_empty() {
        return Err(SpecError::NotAFile { field, path: raw.to_owned() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LaunchSpec {
        LaunchSpec { container_id: 7, argv: vec!["sleep".into(), "1".into()], ..LaunchSpec::default() }
    }

    fn launch() -> v1::Launch {
        v1::Launch { container_id: 7, argv: vec!["sleep".into(), "1".into()], ..v1::Launch::default() }
    }

    #[test]
    fn paths_stay_inside_the_container_directory() {
        assert_eq!(contained("workdir", ".", false), Ok(PathBuf::new()));
        assert_eq!(contained("stdout", "./logs//out.txt", true), Ok(PathBuf::from("logs/out.txt")));
        assert!(matches!(contained("stdout", "/var/log/x", true), Err(SpecError::AbsolutePath { .. })));
        assert!(matches!(contained("workdir", "a/../../b", false), Err(SpecError::PathEscape { .. })));
        assert!(matches!(contained("stderr", ".", true), Err(SpecError::NotAFile { .. })));
        assert!(matches!(contained("stderr", "a\0b", true), Err(SpecError::Nul { .. })));
    }

    /// Every content problem that either old check refused — the client's wire check and the
    /// executor's — is refused by both ways in, with the same words: were the two to drift
    /// apart again, one of the pairs below would differ.
    #[test]
    fn both_ways_in_refuse_the_same_specs_with_the_same_words() {
        type Edit = fn(&mut LaunchSpec, &mut v1::Launch);
        let cases: Vec<(&str, Edit)> = vec![
            ("argv is empty", |s, l| {
                s.argv.clear();
                l.argv.clear();
            }),
            ("argv[0] is empty", |s, l| {
                s.argv = vec![String::new(), "x".into()];
                l.argv = s.argv.clone();
            }),
            ("argv has 4097 entries, more than 4096", |s, l| {
                s.argv = vec!["x".into(); MAX_LAUNCH_ENTRIES + 1];
                l.argv = s.argv.clone();
            }),
            ("env has 4097 entries", |s, l| {
                s.env = (0..=MAX_LAUNCH_ENTRIES).map(|i| (format!("V{i}"), String::new())).collect();
                l.env = s.env.iter().cloned().collect();
            }),
            ("argv[2] contains a NUL byte", |s, l| {
                s.argv.push("a\0b".into());
                l.argv = s.argv.clone();
            }),
            ("environment variable \"A\" contains a NUL byte", |s, l| {
                s.env = vec![("A".into(), "x\0".into())];
                l.env = s.env.iter().cloned().collect();
            }),
            ("environment variable name \"A=B\" is invalid", |s, l| {
                s.env = vec![("A=B".into(), "1".into())];
                l.env = s.env.iter().cloned().collect();
            }),
            ("environment variable name \"\" is invalid", |s, l| {
                s.env = vec![(String::new(), "1".into())];
                l.env = s.env.iter().cloned().collect();
            }),
            ("user contains a NUL byte", |s, l| {
                s.user = Some("a\0".into());
                l.user = "a\0".into();
            }),
            ("submitter contains a NUL byte", |s, l| {
                s.submitter = "a\0".into();
                l.submitter = "a\0".into();
            }),
            ("more than the 1048576-byte limit", |s, l| {
                s.argv.push("x".repeat(limits::MAX_ARGS_BYTES));
                l.argv = s.argv.clone();
            }),
            ("cpu_millis 5 is out of range: 0 (no limit) or 10..=10000000", |s, l| {
                s.cpu_millis = 5;
                l.cpu_millis = 5;
            }),
            ("memory_bytes 1 is out of range", |s, l| {
                s.memory_bytes = 1;
                l.memory_bytes = 1;
            }),
            ("max_pids 4194305 is out of range: 0 (no limit) or at most 4194304", |s, l| {
                s.max_pids = Some(limits::MAX_PIDS + 1);
                l.max_pids = limits::MAX_PIDS + 1;
            }),
            ("GPU 0 is listed more than once", |s, l| {
                s.gpus = vec![0, 1, 0];
                l.gpus = s.gpus.clone();
            }),
            ("workdir \"../../etc\" escapes the container directory: it has a `..` component", |s, l| {
                s.workdir = Some("../../etc".into());
                l.workdir = "../../etc".into();
            }),
            ("stderr \"logs/../../x\" escapes", |s, l| {
                s.stderr = Some("logs/../../x".into());
                l.stderr = "logs/../../x".into();
            }),
            (
                "stdout \"/etc/passwd\" must be a path relative to the container directory: it is absolute",
                |s, l| {
                    s.stdout = Some("/etc/passwd".into());
                    l.stdout = "/etc/passwd".into();
                },
            ),
            ("stdout \".\" does not name a file", |s, l| {
                s.stdout = Some(".".into());
                l.stdout = ".".into();
            }),
            ("workdir contains a NUL byte", |s, l| {
                s.workdir = Some("a\0".into());
                l.workdir = "a\0".into();
            }),
        ];
        for (want, edit) in cases {
            let (mut s, mut l) = (spec(), launch());
            edit(&mut s, &mut l);
            let by_check = check(&s).expect_err(want).to_string();
            let by_wire = from_wire(l).expect_err(want).to_string();
            assert!(by_check.contains(want), "{by_check:?} lacks {want:?}");
            assert_eq!(by_wire, by_check, "{want}");
        }
    }

    #[test]
    fn the_wire_refuses_what_only_the_wire_can_say() {
        assert_eq!(from_wire(v1::Launch { container_id: 0, ..launch() }), Err(SpecError::ZeroContainerId));
        assert_eq!(
            from_wire(v1::Launch { memory_bytes: -1, ..launch() }).map_err(|e| e.to_string()),
            Err("negative memory_bytes: -1".into())
        );
        assert_eq!(
            from_wire(v1::Launch { cpu_millis: i64::MIN, ..launch() }),
            Err(SpecError::Negative { field: "cpu_millis", value: i64::MIN })
        );
        assert!(matches!(
            from_wire(v1::Launch { cluster_id: "../x".into(), ..launch() }),
            Err(SpecError::BadCluster(_))
        ));
    }

    #[test]
    fn good_specs_pass_with_normalised_paths_and_zero_meaning_no_limit() {
        let s = LaunchSpec {
            workdir: Some("./a/b".into()),
            stdout: Some("logs//out".into()),
            max_pids: Some(0),
            gpus: vec![1, 0],
            ..spec()
        };
        let paths = check(&s).expect("valid");
        assert_eq!(paths.workdir, PathBuf::from("a/b"));
        assert_eq!(paths.stdout, PathBuf::from("logs/out"));
        assert_eq!(paths.stderr, PathBuf::from("stderr"), "the default name");
        let wire = from_wire(v1::Launch {
            workdir: "./a/b".into(),
            cpu_millis: 0,
            memory_bytes: 0,
            cluster_id: String::new(),
            ..launch()
        })
        .expect("valid");
        assert_eq!(wire.workdir.as_deref(), Some("./a/b"), "kept as sent; the executor resolves it");
        assert_eq!(wire.key(), ContainerKey::new(ClusterId::LEGACY, 7));
        assert_eq!((wire.stdout, wire.user, wire.max_pids), (None, None, None), "empty is absent");
    }
}
