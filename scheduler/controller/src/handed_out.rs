//! Ids handed out ahead of their use — YARN's `new-application` and `new-reservation` — and to
//! whom, so that a submission may carry only an id that was handed to its own caller and never
//! used. Anything else (a guessed id, another user's, one already used, one past the counter)
//! is refused before it reaches the engine or the store, so it changes nothing.
//!
//! The engine's counters move past every id handed out (`Event::IdsTaken`) and the store records
//! the move before the id is answered, so a handed-out id is never given to anyone else, across
//! restarts too. What is *not* kept across a restart is the hand-out itself: an id handed out
//! before a restart and not used is refused afterwards (the client asks for a new one), as YARN's
//! ids from before an RM restart carry the old cluster timestamp.

use std::collections::BTreeMap;

/// Ids handed out and not used yet that are remembered per kind; past this the oldest are
/// forgotten (a client that asks for ids and never uses them cannot grow the scheduler).
pub const MAX_UNUSED_IDS: usize = 10_000;

/// Who an id was handed to: the authenticated user, or `None` when the API has no tokens (then
/// any caller may use it, as anyone may submit).
pub type Caller = Option<String>;

/// Why a submission's id is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdRefused {
    /// Never handed out, already used, or forgotten (a restart, or more than
    /// [`MAX_UNUSED_IDS`] unused since).
    #[error("{kind} {id} was not handed out by {endpoint}, or has been used; ask {endpoint} for a new one")]
    NotHandedOut {
        /// `application` or `reservation`.
        kind: &'static str,
        /// The id.
        id: u64,
        /// Where ids come from.
        endpoint: &'static str,
    },
    /// Handed to another caller.
    #[error("{kind} {id} was handed out to another user; ask {endpoint} for your own")]
    NotYours {
        /// `application` or `reservation`.
        kind: &'static str,
        /// The id.
        id: u64,
        /// Where ids come from.
        endpoint: &'static str,
    },
}

/// Ids of one kind handed out and not used yet.
#[derive(Debug)]
pub struct HandedOut {
    kind: &'static str,
    endpoint: &'static str,
    unused: BTreeMap<u64, Caller>,
}

impl HandedOut {
    /// An empty record for ids of `kind`, handed out by `endpoint` (both for error messages).
    pub fn new(kind: &'static str, endpoint: &'static str) -> Self {
        HandedOut { kind, endpoint, unused: BTreeMap::new() }
    }

    /// Remembers that `id` went to `caller`, forgetting the oldest beyond [`MAX_UNUSED_IDS`].
    pub fn hand_out(&mut self, id: u64, caller: Caller) {
        self.unused.insert(id, caller);
        while self.unused.len() > MAX_UNUSED_IDS {
            self.unused.pop_first();
        }
    }

    /// Checks that `id` may be used by `caller`, without using it.
    pub fn check(&self, id: u64, caller: &Caller) -> Result<(), IdRefused> {
        let (kind, endpoint) = (self.kind, self.endpoint);
        match self.unused.get(&id) {
            None => Err(IdRefused::NotHandedOut { kind, id, endpoint }),
            Some(owner) if owner.is_some() && owner != caller => {
                Err(IdRefused::NotYours { kind, id, endpoint })
            }
            Some(_) => Ok(()),
        }
    }

    /// Marks `id` used: it cannot be submitted again.
    pub fn use_id(&mut self, id: u64) {
        self.unused.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_caller_it_was_handed_to_may_use_an_id_and_only_once() {
        let mut ids = HandedOut::new("application", "new-application");
        ids.hand_out(4, Some("alice".into()));
        ids.hand_out(5, None);
        assert!(ids.check(4, &Some("alice".into())).is_ok());
        assert!(matches!(ids.check(4, &Some("bob".into())), Err(IdRefused::NotYours { id: 4, .. })));
        assert!(matches!(ids.check(4, &None), Err(IdRefused::NotYours { .. })));
        assert!(ids.check(5, &Some("bob".into())).is_ok(), "an id handed out without tokens is anyone's");
        assert!(matches!(ids.check(3, &None), Err(IdRefused::NotHandedOut { id: 3, .. })));
        ids.use_id(4);
        assert!(matches!(ids.check(4, &Some("alice".into())), Err(IdRefused::NotHandedOut { .. })));
    }

    #[test]
    fn the_oldest_unused_ids_are_forgotten_beyond_the_bound() {
        let mut ids = HandedOut::new("reservation", "new-reservation");
        for id in 1..=(MAX_UNUSED_IDS as u64 + 2) {
            ids.hand_out(id, None);
        }
        assert!(ids.check(1, &None).is_err() && ids.check(2, &None).is_err());
        assert!(ids.check(3, &None).is_ok() && ids.check(MAX_UNUSED_IDS as u64 + 2, &None).is_ok());
    }
}
