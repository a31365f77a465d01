//! One agent per node name. Every agent sends a random instance id of its own
//! (`Register.instance_id`, kept in its work root), so a restarted agent is told from a second
//! agent that claims the same name: while the node's agent is live — heard from within the node
//! timeout, whether or not its stream is still open — a registration from another instance is
//! refused, and the agent that holds the name keeps its stream and its work (as kubelet's one
//! Node object per identity). Without this two agents of one name took turns replacing each
//! other's stream, and the work ran on whichever had the name that moment.
//!
//! The same instance replaces the old stream (a restart, or a reconnect whose old stream the
//! scheduler has not seen die). An agent older than instance ids (empty id) is accepted as before
//! where no live agent with an id holds the name; it cannot displace one that has. Once the holder
//! has been silent for the node timeout, the node is lost and any instance may take the name.
//!
//! The claims live in memory: after a scheduler restart the first agent to register holds the
//! name.

use std::time::Duration;

/// The agent that holds a node name now.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    /// Its instance id (empty: an agent older than instance ids).
    pub instance: &'a str,
    /// How long since the scheduler last heard from it.
    pub silent_for: Duration,
}

/// Why a registration of a held name is refused (a label of
/// `gantry_scheduler_registrations_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// Both carry instance ids, and they differ.
    AnotherInstance,
    /// The holder has an instance id and the newcomer none.
    NoInstanceId,
}

impl Conflict {
    /// Every conflict, for metrics created at zero.
    pub const ALL: [Conflict; 2] = [Conflict::AnotherInstance, Conflict::NoInstanceId];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Conflict::AnotherInstance => "another_instance",
            Conflict::NoInstanceId => "no_instance_id",
        }
    }
}

/// Why the controller refused a registration; the agents' endpoint turns it into a gRPC status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The registration is malformed (names, instance id): `INVALID_ARGUMENT`.
    #[error("{0}")]
    Invalid(String),
    /// Another live agent holds the node name: `ALREADY_EXISTS`.
    #[error(
        "node `{node}` is held by another live agent (heard from {:.1} s ago){}; a second agent may not register under its name while it is live (node timeout {} s). Give this agent its own node_name, or stop the other one",
        silent_for.as_secs_f64(),
        match conflict {
            Conflict::AnotherInstance => "",
            Conflict::NoInstanceId => " and this agent sends no instance id (an agent older than instance ids)",
        },
        node_timeout.as_secs()
    )]
    Claimed {
        /// The node name.
        node: String,
        /// Which conflict.
        conflict: Conflict,
        /// How long the holder has been silent.
        silent_for: Duration,
        /// The node timeout, after which the name is free.
        node_timeout: Duration,
    },
}

/// Whether an agent of instance `incoming` may register as `node`, which `holder` holds now (if
/// anyone does). The instance id must already be well formed.
pub fn check(
    node: &str,
    holder: Option<Holder<'_>>,
    incoming: &str,
    node_timeout: Duration,
) -> Result<(), Refused> {
    let Some(holder) = holder else { return Ok(()) };
    if holder.silent_for > node_timeout || holder.instance.is_empty() || holder.instance == incoming {
        return Ok(());
    }
    let conflict = if incoming.is_empty() { Conflict::NoInstanceId } else { Conflict::AnotherInstance };
    Err(Refused::Claimed { node: node.to_owned(), conflict, silent_for: holder.silent_for, node_timeout })
}

/// Checks the instance id's form (see [`gantry_proto::is_instance_id`]).
pub fn check_instance_id(instance: &str) -> Result<(), Refused> {
    if gantry_proto::is_instance_id(instance) {
        Ok(())
    } else {
        let shown: String = instance.chars().take(64).collect();
        Err(Refused::Invalid(format!("instance id {shown:?} is not 32 lowercase hex digits (nor empty)")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";
    const TIMEOUT: Duration = Duration::from_secs(10);

    fn held(instance: &str, silent_s: u64) -> Option<Holder<'_>> {
        Some(Holder { instance, silent_for: Duration::from_secs(silent_s) })
    }

    #[test]
    fn a_live_holder_keeps_its_name_against_another_instance_or_none() {
        let err = check("node-a", held(A, 1), B, TIMEOUT).expect_err("another instance");
        assert!(matches!(err, Refused::Claimed { conflict: Conflict::AnotherInstance, .. }));
        let text = err.to_string();
        assert!(text.contains("node `node-a`") && text.contains("another live agent"), "{text}");
        let err = check("node-a", held(A, 1), "", TIMEOUT).expect_err("no instance id");
        assert!(matches!(err, Refused::Claimed { conflict: Conflict::NoInstanceId, .. }), "{err}");
    }

    #[test]
    fn the_same_instance_a_free_name_a_silent_holder_or_an_old_holder_let_it_in() {
        assert_eq!(check("n", None, B, TIMEOUT), Ok(()));
        assert_eq!(check("n", held(A, 1), A, TIMEOUT), Ok(()), "a restart or reconnect");
        assert_eq!(check("n", held(A, 11), B, TIMEOUT), Ok(()), "silent past the node timeout");
        assert_eq!(check("n", held("", 1), B, TIMEOUT), Ok(()), "an agent older than instance ids");
        assert_eq!(check("n", held("", 1), "", TIMEOUT), Ok(()), "two old agents: as before");
    }

    #[test]
    fn malformed_instance_ids_are_invalid() {
        assert_eq!(check_instance_id(A), Ok(()));
        assert_eq!(check_instance_id(""), Ok(()));
        let err = check_instance_id("ABC").expect_err("upper case, short");
        assert!(matches!(err, Refused::Invalid(ref m) if m.contains("\"ABC\"")), "{err}");
    }
}
