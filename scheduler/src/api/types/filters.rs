//! What a request asks for in its path and query string: which log file, which apps, which
//! nodes; and the query strings the client writes for them.

use super::apps::AppInfo;
use super::nodes::NodeInfo;
use super::states::{AppState, NodeState};

/// Which of a container's log files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogFile {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl LogFile {
    /// The file's name in URLs and on the agent (`stdout`, `stderr`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogFile::Stdout => "stdout",
            LogFile::Stderr => "stderr",
        }
    }

    /// Parses `stdout` or `stderr`.
    pub fn parse(s: &str) -> Option<LogFile> {
        match s {
            "stdout" => Some(LogFile::Stdout),
            "stderr" => Some(LogFile::Stderr),
            _ => None,
        }
    }
}

/// The filters of `GET /ws/v1/cluster/apps` (YARN's query parameter names: `states`, `queue`,
/// `user`, `limit`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppFilter {
    /// Keep apps in any of these states; empty keeps all.
    pub states: Vec<AppState>,
    /// Keep apps of this queue: a full path (`root.prod.etl`) or, without a dot, a leaf's own
    /// name (`etl`), as YARN users name queues.
    pub queue: Option<String>,
    /// Keep apps of this user.
    pub user: Option<String>,
    /// Keep at most this many (the first ones in the backend's order).
    pub limit: Option<usize>,
}

impl AppFilter {
    /// Whether an app passes the state, queue and user filters (`limit` is not about one app).
    pub fn matches(&self, app: &AppInfo) -> bool {
        (self.states.is_empty() || self.states.contains(&app.state))
            && self.queue.as_deref().is_none_or(|q| {
                app.queue == q || (!q.contains('.') && app.queue.rsplit('.').next() == Some(q))
            })
            && self.user.as_deref().is_none_or(|u| app.user == u)
    }

    /// Keeps the apps that match, at most `limit` of them.
    pub fn apply(&self, apps: Vec<AppInfo>) -> Vec<AppInfo> {
        let limit = self.limit.unwrap_or(usize::MAX);
        apps.into_iter().filter(|a| self.matches(a)).take(limit).collect()
    }
}

/// Which nodes `GET /nodes?states=` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFilter {
    /// Keep nodes in any of these states; `None` keeps all. `Some` of an empty list keeps
    /// none: the query named only YARN states that no gantry node is in.
    pub states: Option<Vec<NodeState>>,
}

impl NodeFilter {
    /// Whether a node passes.
    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.states.as_ref().is_none_or(|states| states.contains(&node.state))
    }

    /// Keeps the nodes that match.
    pub fn apply(&self, nodes: Vec<NodeInfo>) -> Vec<NodeInfo> {
        nodes.into_iter().filter(|n| self.matches(n)).collect()
    }
}

impl AppFilter {
    /// The query string (`?states=RUNNING&queue=…`) that asks the API for this filter, empty
    /// when it filters nothing.
    pub fn to_query(&self) -> String {
        let mut parts = Vec::new();
        if !self.states.is_empty() {
            let states: Vec<&str> = self.states.iter().map(|s| s.as_str()).collect();
            parts.push(format!("states={}", states.join(",")));
        }
        if let Some(q) = &self.queue {
            parts.push(format!("queue={}", percent_encode(q)));
        }
        if let Some(u) = &self.user {
            parts.push(format!("user={}", percent_encode(u)));
        }
        if let Some(l) = self.limit {
            parts.push(format!("limit={l}"));
        }
        if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so any queue or user name
/// survives a query string. (Four lines do not justify another dependency.)
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
