//! Authentication: bearer tokens for REST clients (and Prometheus), a join token for agents, and
//! the rule that a daemon reachable from other machines does not run open.
//!
//! The tokens file has one token a line, `TOKEN USER [admin]`, `#` comments and blank lines
//! allowed (the idea of Kubernetes' static token file, without its CSV). The join token file
//! holds one token. Tokens are compared in constant time, so a client cannot learn a token from
//! how long a refusal takes.

use std::collections::HashSet;
use std::path::Path;

/// Longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 512;
/// Shortest token accepted: shorter ones are too easy to guess.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user the token belongs to.
    pub user: String,
    /// Whether the user administers the cluster (may kill and read any application).
    pub admin: bool,
    /// The groups the tokens file lists for the user (`groups=a,b`), for queue ACLs.
    pub groups: Vec<String>,
}

/// The REST tokens, by value.
#[derive(Clone, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<(Vec<u8>, Caller)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        let users: Vec<&str> = self.entries.iter().map(|(_, c)| c.user.as_str()).collect();
        f.debug_struct("Tokens").field("users", &users).finish()
    }
}

/// Equal in time independent of where they differ (lengths are not secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn check_token(token: &str, what: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_BYTES || token.len() > MAX_TOKEN_BYTES {
        return Err(format!("{what} must be {MIN_TOKEN_BYTES} to {MAX_TOKEN_BYTES} bytes"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{what} must be printable ASCII without spaces"));
    }
    Ok(())
}

impl Tokens {
    /// Parses a tokens file's text; errors name the line.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries = Vec::new();
        let mut seen = HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |m: String| format!("line {}: {m}", i + 1);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (token, user, rest) = match fields.as_slice() {
                [t, u, rest @ ..] => (*t, *u, rest),
                _ => return Err(bad("expected `TOKEN USER [admin] [groups=a,b]`".into())),
            };
            let (mut admin, mut groups) = (false, Vec::new());
            for word in rest {
                match (*word, word.strip_prefix("groups=")) {
                    ("admin", _) if !admin => admin = true,
                    (_, Some(list)) if groups.is_empty() => {
                        groups = list.split(',').map(str::to_owned).collect();
                        if let Some((g, why)) =
                            groups.iter().find_map(|g| principal_problem(g).map(|why| (g, why)))
                        {
                            return Err(bad(format!("group {g:?} in `groups=` {why}")));
                        }
                    }
                    _ => {
                        return Err(bad(format!(
                            "unexpected `{word}`: expected `TOKEN USER [admin] [groups=a,b]`"
                        )));
                    }
                }
            }
            check_token(token, "a token").map_err(bad)?;
            if let Some(why) = principal_problem(user) {
                return Err(bad(format!("user {user:?} {why}")));
            }
            if !seen.insert(token.to_owned()) {
                return Err(bad("the token is listed twice".into()));
            }
            entries.push((token.as_bytes().to_vec(), Caller { user: user.to_owned(), admin, groups }));
        }
        if entries.is_empty() {
            return Err("no tokens".into());
        }
        Ok(Tokens { entries })
    }

    /// Reads a tokens file.
    pub fn read(path: &Path) -> Result<Tokens, String> {
        let text = read_secret(path)?;
        Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The caller a bearer token belongs to. Every entry is compared, so the time taken does not
    /// tell which one matched.
    pub fn caller(&self, token: &str) -> Option<&Caller> {
        let mut found = None;
        for (t, c) in &self.entries {
            if same(t, token.as_bytes()) {
                found = Some(c);
            }
        }
        found
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none (never, for a parsed file).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The caller of a request with this `Authorization` header value (`Bearer TOKEN`).
    pub fn authorize(&self, header: Option<&str>) -> Option<&Caller> {
        let token = header?.strip_prefix("Bearer ")?.trim();
        self.caller(token)
    }
}

/// An agents' join token.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken(String);

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JoinToken(…)")
    }
}

impl JoinToken {
    /// A join token from its text (trimmed).
    pub fn new(text: &str) -> Result<JoinToken, String> {
        let token = text.trim();
        check_token(token, "the join token")?;
        Ok(JoinToken(token.to_owned()))
    }

    /// Reads a join token file.
    pub fn read(path: &Path) -> Result<JoinToken, String> {
        JoinToken::new(&read_secret(path)?).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The token.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether an `authorization` value (`Bearer TOKEN`) carries this token.
    pub fn admits(&self, header: Option<&str>) -> bool {
        header
            .and_then(|h| h.strip_prefix("Bearer "))
            .is_some_and(|t| same(t.trim().as_bytes(), self.0.as_bytes()))
    }
}

/// Why `name` cannot be a user or group name, if it cannot: the rule for every name
/// ([`gantry_sdk::names::check_name`]: 1..=253 bytes, no control, bidirectional or invisible
/// characters), and no spaces or commas (the separators of the tokens file and of ACLs).
fn principal_problem(name: &str) -> Option<String> {
    if let Err(problem) = gantry_sdk::names::check_name(name, false) {
        return Some(problem.to_string());
    }
    name.chars().any(|c| c.is_whitespace() || c == ',').then(|| "contains a space or a comma".to_owned())
}

/// One access control list in YARN's format: `users groups`, each a comma-separated list; `*`
/// admits everyone and a single space (or an empty string) no one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    everyone: bool,
    users: HashSet<String>,
    groups: HashSet<String>,
}

impl Acl {
    /// Parses an ACL; errors say which name is wrong.
    pub fn parse(text: &str) -> Result<Acl, String> {
        if text.trim() == "*" {
            return Ok(Acl { everyone: true, ..Acl::default() });
        }
        // The first space separates users from groups, so ` ml` is the group `ml` alone.
        let (users, groups) = text.split_once(' ').unwrap_or((text, ""));
        let list = |part: &str| -> Result<HashSet<String>, String> {
            part.trim()
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| match principal_problem(n) {
                    None if n != "*" => Ok(n.to_owned()),
                    None => Err(format!(
                        "ACL {text:?}: `*` is not a user or group name; alone it admits everyone"
                    )),
                    Some(why) => Err(format!("ACL {text:?}: {n:?} is not a user or group name: it {why}")),
                })
                .collect()
        };
        let users = list(users)?;
        let groups = list(groups)?;
        Ok(Acl { everyone: false, users, groups })
    }

    /// Whether the ACL admits `caller`.
    pub fn admits(&self, caller: &Caller) -> bool {
        self.everyone
            || self.users.contains(&caller.user)
            || caller.groups.iter().any(|g| self.groups.contains(g))
    }
}

/// What a caller wants to do in a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueRight {
    /// Submit applications (and reservations) to it.
    Submit,
    /// Kill and read the logs of anyone's applications in it.
    Administer,
}

/// The queues' ACLs. As in YARN, a right granted on a queue holds on every queue below it, and
/// administering a queue includes submitting to it; cluster administrators (`admin` in the
/// tokens file) hold every right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueAcls {
    /// Dotted queue path → (submit, administer); `root` always present.
    acls: std::collections::HashMap<String, (Option<Acl>, Option<Acl>)>,
}

impl QueueAcls {
    /// Root's ACLs.
    pub fn new(root_submit: &str, root_administer: &str) -> Result<QueueAcls, String> {
        let mut acls = std::collections::HashMap::new();
        acls.insert("root".to_owned(), (Some(Acl::parse(root_submit)?), Some(Acl::parse(root_administer)?)));
        Ok(QueueAcls { acls })
    }

    /// Sets a queue's own ACLs (absent = only what its ancestors grant).
    pub fn set(&mut self, path: &str, submit: Option<&str>, administer: Option<&str>) -> Result<(), String> {
        let submit = submit.map(Acl::parse).transpose()?;
        let administer = administer.map(Acl::parse).transpose()?;
        self.acls.insert(path.to_owned(), (submit, administer));
        Ok(())
    }

    /// Whether `caller` holds `right` on the queue at `path` (a full dotted path; a path below
    /// an unknown queue is judged by its known ancestors).
    pub fn allows(&self, caller: &Caller, path: &str, right: QueueRight) -> bool {
        if caller.admin {
            return true;
        }
        let mut prefix = path;
        loop {
            if let Some((submit, administer)) = self.acls.get(prefix) {
                let admits = |acl: &Option<Acl>| acl.as_ref().is_some_and(|a| a.admits(caller));
                if admits(administer) || (right == QueueRight::Submit && admits(submit)) {
                    return true;
                }
            }
            match prefix.rfind('.') {
                Some(dot) => prefix = &prefix[..dot],
                None => return false,
            }
        }
    }
}

/// The account a user's containers run as (`[security] accounts`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Accounts {
    by_user: std::collections::BTreeMap<String, String>,
    allow_root: bool,
}

/// The value of `accounts` that stands for the user's own name.
const OWN_ACCOUNT: &str = "$user";

/// Whether `name` may be a Unix account name (POSIX portable characters, as useradd accepts).
fn valid_account(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl Accounts {
    /// The mapping, checked: account names valid, and none is `root` unless `allow_root`.
    pub fn new(
        map: &std::collections::BTreeMap<String, String>,
        allow_root: bool,
    ) -> Result<Accounts, String> {
        for (user, account) in map {
            if account != OWN_ACCOUNT && !valid_account(account) {
                return Err(format!(
                    "security.accounts: `{account}` (for `{user}`) is not a valid account name"
                ));
            }
            if (account == "root" || (account == OWN_ACCOUNT && user == "root")) && !allow_root {
                return Err(format!(
                    "security.accounts maps `{user}` to root; set security.allow_root_containers = true if you really mean it"
                ));
            }
        }
        Ok(Accounts { by_user: map.clone(), allow_root })
    }

    /// The account `user`'s containers run as: `None` for the agent's own `container_user`,
    /// or an error when the mapping gives no usable account (e.g. `$user` for a user whose
    /// name is no account name, or root when root is not allowed).
    pub fn account_for(&self, user: &str) -> Result<Option<String>, String> {
        let Some(mapped) = self.by_user.get(user).or_else(|| self.by_user.get("*")) else {
            return Ok(None);
        };
        let account = if mapped == OWN_ACCOUNT { user } else { mapped.as_str() };
        if !valid_account(account) {
            return Err(format!(
                "user `{user}` has no account to run containers as (`{account}` is not an account name)"
            ));
        }
        if account == "root" && !self.allow_root {
            return Err(format!(
                "user `{user}` would run containers as root, which this cluster does not allow"
            ));
        }
        Ok(Some(account.to_owned()))
    }
}

/// The cluster's access rules for authenticated REST requests.
#[derive(Debug)]
pub struct Policy {
    /// Who may submit to and administer each queue.
    pub acls: QueueAcls,
    /// The account each user's containers run as.
    pub accounts: Accounts,
}

/// An authenticated request: its caller and the rules, handed to the REST routes by the
/// token middleware.
#[derive(Debug, Clone)]
pub struct Access {
    /// Who is calling.
    pub caller: Caller,
    /// The cluster's rules.
    pub policy: std::sync::Arc<Policy>,
}

impl Access {
    /// Whether the caller holds `right` on `queue`.
    pub fn may(&self, queue: &str, right: QueueRight) -> bool {
        self.policy.acls.allows(&self.caller, queue, right)
    }

    /// Whether the caller may act on something `owner` owns in `queue`: the owner, the queue's
    /// administrators, or a cluster administrator.
    pub fn may_act_on(&self, owner: &str, queue: &str) -> bool {
        self.caller.user == owner || self.may(queue, QueueRight::Administer)
    }
}

/// The REST API's current tokens and rules, replaced whole on a reload (`SIGHUP`): a request
/// sees either the old set or the new one, never a mix.
#[derive(Debug)]
pub struct RestAuth {
    current: std::sync::RwLock<(std::sync::Arc<Tokens>, std::sync::Arc<Policy>)>,
}

impl RestAuth {
    /// The tokens and rules the daemon starts with.
    pub fn new(tokens: Tokens, policy: Policy) -> RestAuth {
        RestAuth {
            current: std::sync::RwLock::new((std::sync::Arc::new(tokens), std::sync::Arc::new(policy))),
        }
    }

    /// The tokens and rules in force now.
    pub fn current(&self) -> (std::sync::Arc<Tokens>, std::sync::Arc<Policy>) {
        // A panic while holding the lock cannot leave the pair half-written: it is one assignment.
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts new tokens and rules in force for every later request.
    pub fn replace(&self, tokens: Tokens, policy: Policy) {
        let next = (std::sync::Arc::new(tokens), std::sync::Arc::new(policy));
        match self.current.write() {
            Ok(mut g) => *g = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
    }
}

/// Reads a small secret file (at most 1 MiB).
fn read_secret(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.len() > 1 << 20 {
        return Err(format!("{} is larger than 1 MiB", path.display()));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Whether every address `addr` (`host:port`) can mean is a loopback one.
pub fn is_loopback(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tokens_file_names_users_and_admins_and_refuses_bad_lines() {
        let t = Tokens::parse(
            "# ops\nalice-token-0123456789 alice\n\nops-token-0123456789abc ops admin  # on call\n",
        )
        .expect("valid");
        assert_eq!(
            t.caller("alice-token-0123456789"),
            Some(&Caller { user: "alice".into(), admin: false, groups: vec![] })
        );
        assert_eq!(t.authorize(Some("Bearer ops-token-0123456789abc")).map(|c| c.admin), Some(true));
        assert_eq!(t.authorize(Some("ops-token-0123456789abc")), None, "the scheme is required");
        assert_eq!(t.authorize(Some("Bearer ops-token-0123456789ab")), None);
        assert_eq!(t.authorize(None), None);
        assert!(!format!("{t:?}").contains("token-0123"), "Debug never shows a token");
        for (text, why) in [
            ("short alice\n", "bytes"),
            ("alice-token-0123456789 alice root\n", "line 1"),
            ("alice-token-0123456789 alice\nalice-token-0123456789 bob\n", "twice"),
            ("# nothing\n", "no tokens"),
            ("alice-token-0123456789 ali\u{202E}ce\n", "contains U+202E (RIGHT-TO-LEFT OVERRIDE)"),
            ("alice-token-0123456789 alice groups=ml\u{200B}\n", "contains U+200B (ZERO WIDTH SPACE)"),
        ] {
            let err = Tokens::parse(text).expect_err(text);
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    fn caller(user: &str, groups: &[&str]) -> Caller {
        Caller { user: user.into(), admin: false, groups: groups.iter().map(|g| (*g).to_owned()).collect() }
    }

    #[test]
    fn tokens_carry_groups() {
        let t = Tokens::parse(
            "bob-token-0123456789ab bob groups=ml,etl\nops-token-0123456789ab ops admin groups=sre\n",
        )
        .expect("valid");
        assert_eq!(
            t.caller("bob-token-0123456789ab").map(|c| c.groups.clone()),
            Some(vec!["ml".into(), "etl".into()])
        );
        assert_eq!(t.caller("ops-token-0123456789ab").map(|c| c.admin), Some(true));
        for bad in ["x-token-0123456789abcd x groups=a,,b\n", "x-token-0123456789abcd x admin admin\n"] {
            assert!(Tokens::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn acls_follow_yarn_users_groups_everyone_and_no_one() {
        let acl = Acl::parse("alice,bob ml").expect("acl");
        assert!(acl.admits(&caller("alice", &[])) && acl.admits(&caller("carol", &["ml"])));
        assert!(!acl.admits(&caller("carol", &["etl"])));
        assert!(Acl::parse("*").expect("all").admits(&caller("anyone", &[])));
        for nobody in [" ", ""] {
            assert!(!Acl::parse(nobody).expect("none").admits(&caller("alice", &["ml"])));
        }
        assert!(Acl::parse(" ml").expect("groups only").admits(&caller("x", &["ml"])));
        assert!(Acl::parse("a,* b").is_err());
        let err = Acl::parse("alice,bo\u{2067}b").expect_err("bidi");
        assert!(err.contains("contains U+2067 (RIGHT-TO-LEFT ISOLATE)"), "{err}");
    }

    #[test]
    fn queue_rights_are_inherited_and_administering_includes_submitting() {
        let mut acls = QueueAcls::new(" ", "ops").expect("root");
        acls.set("root.prod", Some("alice"), Some("bob")).expect("prod");
        acls.set("root.prod.etl", Some(" etl"), None).expect("etl");
        let (alice, bob, ops, eve) =
            (caller("alice", &[]), caller("bob", &[]), caller("ops", &[]), caller("eve", &["etl"]));
        assert!(acls.allows(&alice, "root.prod", QueueRight::Submit));
        assert!(acls.allows(&alice, "root.prod.etl", QueueRight::Submit), "inherited from root.prod");
        assert!(!acls.allows(&alice, "root.prod", QueueRight::Administer));
        assert!(!acls.allows(&alice, "root.dev", QueueRight::Submit), "root admits no one");
        assert!(acls.allows(&bob, "root.prod.etl", QueueRight::Submit), "administer includes submit");
        assert!(acls.allows(&bob, "root.prod.etl", QueueRight::Administer));
        assert!(acls.allows(&ops, "root.dev", QueueRight::Administer), "root's administrators");
        assert!(
            acls.allows(&eve, "root.prod.etl", QueueRight::Submit)
                && !acls.allows(&eve, "root.prod", QueueRight::Submit)
        );
        let admin = Caller { admin: true, ..caller("root-ops", &[]) };
        assert!(acls.allows(&admin, "root.anything", QueueRight::Administer));
    }

    #[test]
    fn accounts_map_users_and_refuse_root_unless_allowed() {
        let map =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(u, a)| ((*u).to_owned(), (*a).to_owned())).collect();
        assert_eq!(Accounts::new(&map(&[]), false).expect("empty").account_for("alice"), Ok(None));
        let a = Accounts::new(&map(&[("alice", "svc-alice"), ("*", "$user")]), false).expect("valid");
        assert_eq!(a.account_for("alice"), Ok(Some("svc-alice".into())));
        assert_eq!(a.account_for("bob"), Ok(Some("bob".into())));
        assert!(a.account_for("root").is_err(), "$user must not make root");
        assert!(a.account_for("bad name").is_err());
        assert!(Accounts::new(&map(&[("ops", "root")]), false).is_err());
        assert_eq!(
            Accounts::new(&map(&[("ops", "root")]), true).expect("allowed").account_for("ops"),
            Ok(Some("root".into()))
        );
        assert!(Accounts::new(&map(&[("x", "no/slash")]), false).is_err());
    }

    #[test]
    fn join_tokens_and_loopback() {
        let j = JoinToken::new("  join-0123456789abcdef\n").expect("valid");
        assert!(j.admits(Some("Bearer join-0123456789abcdef")));
        assert!(!j.admits(Some("Bearer join-0123456789abcdeF")));
        assert!(!j.admits(None));
        assert!(JoinToken::new("short").is_err());
        assert!(is_loopback("127.0.0.1:8088") && is_loopback("[::1]:7070"));
        assert!(!is_loopback("0.0.0.0:8088") && !is_loopback("10.1.2.3:7070"));
    }
}
