//! What keeps the containers of one node apart: the `[isolation]` settings, and the per-user
//! uids handed to users without a mapped account.
//!
//! Containers of different users must never share a uid: with one (`nobody`, as before), any
//! container could read another's files and `kill -9 -1` every other container. A container runs
//! as the Unix account the scheduler maps its user to (`[security] accounts`); where none is
//! mapped, as a uid of its own per user, taken from [`IsolationConfig::dynamic_uids`] the first
//! time that user runs here and kept in `<work_root>/uids.json`, much as systemd's `DynamicUser=`
//! takes one from 61184–65519. Kept, not recycled: a uid handed to another user could reach
//! the files the first one left in retained work directories.
//!
//! The rest of the settings are carried out by the shim ([`crate::sandbox`]): a process limit, a
//! private `/tmp` and `/dev/shm`, and no way back to privileges (no_new_privs, an empty bounding
//! set).

use crate::launch_spec::SpecError;
use crate::model::LaunchSpec;
use gantry_sdk::limits::{self, Limit};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use thiserror::Error;

/// systemd's range for dynamic users (`DynamicUser=`), which no distribution assigns.
pub const DEFAULT_DYNAMIC_UIDS: &str = "61184-65519";
/// Processes and threads a container may have at once unless its request says otherwise.
pub const DEFAULT_MAX_PIDS: u64 = 4096;
/// The file recording which uid each user was given (root only).
pub const UIDS_FILE: &str = "uids.json";

/// Agent configuration that turns isolation off, as agents ran before it (every container as
/// `nobody`, the host's `/tmp` and `/dev/shm`, no process limit, privileges kept): top-level
/// keys and the `[isolation]` table, so it goes before any other table. For benchmarks that
/// measure what isolation costs, and for operators who must have the old behaviour back.
pub const BEFORE_ISOLATION_TOML: &str = "container_user = \"nobody\"\n[isolation]\nmax_pids = 0\n\
                                          private_tmp = false\nallow_privilege_escalation = true\n";

/// `[isolation]` in the agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IsolationConfig {
    /// Uids for users without a mapped account, `FIRST-LAST` (default 61184-65519); uids with an
    /// entry in the password or group database are skipped.
    pub dynamic_uids: String,
    /// Processes and threads per container unless its request says (0: unlimited; default 4096;
    /// at most [`gantry_sdk::limits::MAX_PIDS`]).
    pub max_pids: u64,
    /// A private `/tmp` and `/dev/shm` per container, gone with it (default true).
    pub private_tmp: bool,
    /// Whether containers may gain privileges: setuid binaries and file capabilities work, and the
    /// capability bounding set is kept (default false: no_new_privs and an empty bounding set).
    pub allow_privilege_escalation: bool,
}

impl Default for IsolationConfig {
    fn default() -> Self {
        IsolationConfig {
            dynamic_uids: DEFAULT_DYNAMIC_UIDS.into(),
            max_pids: DEFAULT_MAX_PIDS,
            private_tmp: true,
            allow_privilege_escalation: false,
        }
    }
}

impl IsolationConfig {
    /// Checks the settings; the message names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        UidRange::parse(&self.dynamic_uids)?;
        if limits::check_or_unlimited(Limit::MaxPids, self.max_pids).is_err() {
            return Err(format!("max_pids {} is more than {}", self.max_pids, limits::MAX_PIDS));
        }
        Ok(())
    }

    /// The parsed uid range (checked by [`IsolationConfig::validate`]).
    pub fn uid_range(&self) -> Result<UidRange, String> {
        UidRange::parse(&self.dynamic_uids)
    }
}

/// An inclusive range of uids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// First uid.
    pub first: u32,
    /// Last uid (inclusive).
    pub last: u32,
}

impl UidRange {
    /// [`DEFAULT_DYNAMIC_UIDS`].
    pub const SYSTEMD: UidRange = UidRange { first: 61184, last: 65519 };

    /// Parses `FIRST-LAST`; refuses root, uids below 1000 (system accounts) and the overflow uid.
    pub fn parse(text: &str) -> Result<UidRange, String> {
        let (a, b) = text.split_once('-').ok_or_else(|| {
            format!("dynamic_uids {text:?} is not FIRST-LAST (e.g. {DEFAULT_DYNAMIC_UIDS})")
        })?;
        let num = |s: &str| {
            s.trim().parse::<u32>().map_err(|_| format!("dynamic_uids {text:?}: {s:?} is not a uid"))
        };
        let (first, last) = (num(a)?, num(b)?);
        if first > last {
            return Err(format!("dynamic_uids {text:?}: the range is empty"));
        }
        if first < 1000 {
            return Err(format!("dynamic_uids {text:?} reaches below 1000, where system accounts live"));
        }
        if last >= 65534 && first <= 65534 || last == u32::MAX {
            return Err(format!("dynamic_uids {text:?} holds the overflow uid (65534, nobody) or -1"));
        }
        Ok(UidRange { first, last })
    }
}

/// Who a container runs as, resolved by the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// `USER` and `LOGNAME`.
    pub name: String,
    /// `HOME`; `None`: the container directory.
    pub home: Option<PathBuf>,
}

impl Identity {
    /// A dynamic user: the uid, a group of the same number and no other, named after the
    /// submitting user (there is no account to name), at home in the container directory.
    pub fn dynamic(uid: u32, submitter: &str) -> Identity {
        let name = if submitter.is_empty() { "gantry".to_owned() } else { submitter.to_owned() };
        Identity { uid, gid: uid, groups: vec![uid], name, home: None }
    }

    /// The account of a uid (the agent's own, for an agent that cannot switch users), or a bare
    /// uid where it has none.
    pub fn of_uid(uid: u32) -> Result<Identity, String> {
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => Ok(Identity {
                uid,
                gid: u.gid.as_raw(),
                groups: vec![u.gid.as_raw()],
                name: u.name,
                home: Some(u.dir),
            }),
            Ok(None) => Ok(Identity {
                uid,
                gid: nix::unistd::getegid().as_raw(),
                groups: vec![],
                name: uid.to_string(),
                home: None,
            }),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Who a container runs as: the account its user is mapped to (`spec.user`), else the
/// configured `container_user`, else a uid of the submitting user's own from the dynamic
/// range — or, for an agent that is not root and cannot switch users, the agent's own uid.
/// `spec` has passed [`crate::launch_spec::check`] (no NUL byte in its user or submitter).
pub fn identity(
    spec: &LaunchSpec,
    default_user: Option<&str>,
    allow_root: bool,
    uids: &UidTable,
) -> Result<Identity, SpecError> {
    let agent_uid = nix::unistd::geteuid();
    let account = spec.user.as_deref().filter(|u| !u.is_empty()).or(default_user);
    let Some(name) = account else {
        if !agent_uid.is_root() {
            return Identity::of_uid(agent_uid.as_raw())
                .map_err(|message| SpecError::UserLookup { user: format!("uid {agent_uid}"), message });
        }
        let uid = uids
            .uid_for(&spec.submitter)
            .map_err(|e| SpecError::NoDynamicUid { user: spec.submitter.clone(), message: e.to_string() })?;
        return Ok(Identity::dynamic(uid, &spec.submitter));
    };
    let user = match nix::unistd::User::from_name(name) {
        Ok(Some(u)) if !name.is_empty() => u,
        Ok(_) => return Err(SpecError::UnknownUser(name.to_owned())),
        Err(e) => return Err(SpecError::UserLookup { user: name.to_owned(), message: e.to_string() }),
    };
    if user.uid.is_root() && !allow_root {
        return Err(SpecError::RootNotAllowed(name.to_owned()));
    }
    if !agent_uid.is_root() && user.uid != agent_uid {
        return Err(SpecError::CannotSwitchUser {
            user: name.to_owned(),
            uid: user.uid.as_raw(),
            agent_uid: agent_uid.as_raw(),
        });
    }
    let groups = std::ffi::CString::new(name)
        .ok()
        .and_then(|c| nix::unistd::getgrouplist(&c, user.gid).ok())
        .unwrap_or_else(|| vec![user.gid]);
    Ok(Identity {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups: groups.iter().map(|g| g.as_raw()).collect(),
        name: user.name.clone(),
        home: Some(user.dir.clone()),
    })
}

/// Why a user could not be given a uid.
#[derive(Debug, Error)]
pub enum UidError {
    /// Every uid of the range is taken.
    #[error("no free uid left in dynamic_uids {first}-{last} ({used} users have one on this node)")]
    Exhausted {
        /// First uid of the range.
        first: u32,
        /// Last uid of the range.
        last: u32,
        /// Users holding one.
        used: usize,
    },
    /// The table could not be read or written.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The table is not what this agent writes.
    #[error("{path} is malformed: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The table on disk: user name → uid.
#[derive(Debug, Default, Serialize, Deserialize)]
struct UidFile {
    users: BTreeMap<String, u32>,
}

/// The per-user uids of this node, persisted so a user keeps their uid across agent restarts
/// (their retained files stay theirs, and a restarted agent re-adopts containers under it).
#[derive(Debug)]
pub struct UidTable {
    path: PathBuf,
    range: UidRange,
    users: Mutex<Option<BTreeMap<String, u32>>>,
}

impl UidTable {
    /// A table kept in `work_root/uids.json`, read on first use.
    pub fn new(work_root: &Path, range: UidRange) -> UidTable {
        UidTable { path: work_root.join(UIDS_FILE), range, users: Mutex::new(None) }
    }

    /// The uid of `user`, taking the lowest free one of the range the first time (written to the
    /// table before it is returned, so no other user can ever be given it).
    pub fn uid_for(&self, user: &str) -> Result<u32, UidError> {
        let mut guard = self.users.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(self.load()?);
        }
        let users = guard.get_or_insert_with(BTreeMap::new);
        if let Some(uid) = users.get(user) {
            return Ok(*uid);
        }
        let taken: std::collections::HashSet<u32> = users.values().copied().collect();
        let uid = (self.range.first..=self.range.last)
            .find(|u| !taken.contains(u) && !in_system_databases(*u))
            .ok_or(UidError::Exhausted {
                first: self.range.first,
                last: self.range.last,
                used: users.len(),
            })?;
        let mut next = users.clone();
        next.insert(user.to_owned(), uid);
        self.save(&next)?;
        *users = next;
        Ok(uid)
    }

    fn load(&self) -> Result<BTreeMap<String, u32>, UidError> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(source) => return Err(UidError::Io { what: "read", path: self.path.clone(), source }),
        };
        let file: UidFile = serde_json::from_slice(&text)
            .map_err(|e| UidError::Malformed { path: self.path.clone(), message: e.to_string() })?;
        let mut seen = std::collections::HashSet::new();
        for (user, uid) in &file.users {
            if !seen.insert(*uid) {
                return Err(UidError::Malformed {
                    path: self.path.clone(),
                    message: format!("uid {uid} is given to more than one user ({user} among them)"),
                });
            }
        }
        Ok(file.users)
    }

    fn save(&self, users: &BTreeMap<String, u32>) -> Result<(), UidError> {
        let data = serde_json::to_vec_pretty(&UidFile { users: users.clone() })
            .map_err(|e| UidError::Malformed { path: self.path.clone(), message: e.to_string() })?;
        crate::shim::write_atomic(&self.path, &data).map_err(|source| UidError::Io {
            what: "write",
            path: self.path.clone(),
            source,
        })
    }
}

/// Gives a control directory written by an agent older than isolation (0755, files 0644) the
/// modes this one writes (0711, files 0600), so an upgraded node stops showing one container's
/// environment to the others. Failures are logged; the directory keeps working.
pub fn restrict_control_dir(control: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode: u32| {
        if let Err(e) = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %p.display(), "cannot restrict: {e}");
            }
        }
    };
    set(control, 0o711);
    let Ok(entries) = std::fs::read_dir(control) else { return };
    for entry in entries.flatten() {
        // Only the agent's own regular files: `work/` and `private/` keep theirs.
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            set(&entry.path(), 0o600);
        }
    }
}

/// Whether a uid (or the gid of the same number, which a dynamic user also takes) belongs to an
/// account or group of this machine.
fn in_system_databases(uid: u32) -> bool {
    !matches!(nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)), Ok(None))
        || !matches!(nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(uid)), Ok(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        assert_eq!(UidRange::parse("61184-65519"), Ok(UidRange { first: 61184, last: 65519 }));
        for (text, want) in [
            ("61184", "FIRST-LAST"),
            ("5-10", "below 1000"),
            ("2000-1000", "empty"),
            ("60000-70000", "overflow"),
            ("a-2000", "not a uid"),
        ] {
            let err = UidRange::parse(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn each_user_keeps_one_uid_of_their_own_across_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let range = UidRange { first: 61184, last: 61186 };
        let table = UidTable::new(dir.path(), range);
        let alice = table.uid_for("alice").expect("alice");
        let bob = table.uid_for("bob").expect("bob");
        assert_ne!(alice, bob);
        assert_eq!(table.uid_for("alice").expect("again"), alice);
        let reread = UidTable::new(dir.path(), range);
        assert_eq!(reread.uid_for("bob").expect("bob after a restart"), bob);
        reread.uid_for("carol").expect("the third uid");
        let err = reread.uid_for("dave").expect_err("the range is used up").to_string();
        assert!(err.contains("no free uid"), "{err}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(UIDS_FILE)).expect("table").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the table is the agent's alone");
    }

    #[test]
    fn a_table_giving_one_uid_twice_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(UIDS_FILE), r#"{"users":{"a":61184,"b":61184}}"#).expect("write");
        let table = UidTable::new(dir.path(), UidRange { first: 61184, last: 61190 });
        let err = table.uid_for("c").expect_err("malformed").to_string();
        assert!(err.contains("more than one user"), "{err}");
    }
}
