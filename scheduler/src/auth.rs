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
            let (token, user, admin) = match fields.as_slice() {
                [t, u] => (*t, *u, false),
                [t, u, "admin"] => (*t, *u, true),
                _ => return Err(bad("expected `TOKEN USER [admin]`".into())),
            };
            check_token(token, "a token").map_err(bad)?;
            if user.len() > 253 || user.chars().any(char::is_control) {
                return Err(bad(format!("user `{user}` is not a valid name")));
            }
            if !seen.insert(token.to_owned()) {
                return Err(bad("the token is listed twice".into()));
            }
            entries.push((token.as_bytes().to_vec(), Caller { user: user.to_owned(), admin }));
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
        assert_eq!(t.caller("alice-token-0123456789"), Some(&Caller { user: "alice".into(), admin: false }));
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
        ] {
            let err = Tokens::parse(text).expect_err(text);
            assert!(err.contains(why), "{text:?}: {err}");
        }
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
