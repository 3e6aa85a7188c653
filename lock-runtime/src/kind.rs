//! Lock kinds: what a grant shares with the other grants of its key.

use fencelock_options::{Count, check_count};

use crate::LockError;
pub use fencelock_options::{MAX_PERMITS, MAX_SHARDS};

/// What kind of lock a request asks for. Every kind has leases, renewal, loss detection,
/// notified waiting and fencing tokens; they differ in who may hold a key at once.
///
/// A key is used by one kind at a time: a request of another kind (a read lock of a key
/// held as a semaphore, a mutex of a key held by readers) fails with
/// [`LockError::KeyInUse`]. Read and write locks of one key are one kind; semaphores (and
/// segmented locks) of one key may ask for different counts (see each kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// One holder at a time ([`LockClient::lock`](crate::LockClient::lock)).
    #[default]
    Mutex,
    /// A read lock: any number of readers together, never with a writer. A reader that
    /// arrives while a writer waits queues behind that writer, so a stream of readers does
    /// not starve writers.
    Read,
    /// A write lock: one writer, and no reader, at a time. Its fencing token exceeds every
    /// earlier reader's and writer's of the key.
    Write,
    /// A counting semaphore: at most `permits` holders at once, each with its own lease
    /// (a crashed holder's permit comes back when its lease ends). When holders ask for
    /// different counts, the smallest wins: a request enters only while fewer holders are
    /// inside than its own count and every count of those inside, so no holder ever sees
    /// more inside than it asked for (on Redlock, where each master applies this rule to
    /// the grants it has, the bound is the largest count asked for: each permit is a
    /// numbered slot that a majority must grant).
    Semaphore {
        /// How many holders may be inside at once, 1 to [`MAX_PERMITS`].
        permits: u32,
    },
    /// A segmented lock (a hot item's stock split into shards): `shards` exclusive shards under one key; an
    /// acquisition takes one free shard (picked at random among the free ones, so load
    /// spreads), and waits on all of them when none is free. The body learns its shard
    /// from [`LockGuard::shard`](crate::LockGuard::shard) or
    /// [`current_shard`](crate::current_shard). Requests with fewer shards use only the
    /// shards below their count.
    Segmented {
        /// How many shards the key has, 1 to [`MAX_SHARDS`].
        shards: u32,
    },
}

impl LockKind {
    /// The kind's name, as spans record it (`mode`) and errors say it.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Mutex => "exclusive",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Semaphore { .. } => "semaphore",
            LockKind::Segmented { .. } => "segmented",
        }
    }

    /// Whether grants of this kind may share a key with other grants (every kind but the
    /// mutex): backends keep them in a structure of their own.
    pub fn is_shared(self) -> bool {
        self != LockKind::Mutex
    }

    /// The count that sizes the kind (permits, shards), if it has one.
    pub fn count(self) -> Option<u32> {
        match self {
            LockKind::Semaphore { permits } => Some(permits),
            LockKind::Segmented { shards } => Some(shards),
            _ => None,
        }
    }

    /// Whether grants of `self` and `other` may be grants of one key: read and write locks
    /// of one key are one lock; a semaphore's permits are one whatever count each asks for.
    pub(crate) fn shares_keys_with(self, other: LockKind) -> bool {
        let family = |kind: LockKind| match kind {
            LockKind::Mutex => 0,
            LockKind::Read | LockKind::Write => 1,
            LockKind::Semaphore { .. } => 2,
            LockKind::Segmented { .. } => 3,
        };
        family(self) == family(other)
    }

    /// Checks the kind's count by the rules the attribute applies to literals.
    pub(crate) fn validate(self) -> Result<(), LockError> {
        let checked = match self {
            LockKind::Semaphore { permits } => check_count(Count::Permits, permits.into()),
            LockKind::Segmented { shards } => check_count(Count::Shards, shards.into()),
            _ => return Ok(()),
        };
        checked.map(drop).map_err(LockError::invalid_config)
    }

    /// How a request of this kind inside a body that holds `held` of the same key (through
    /// the same client, in shard `shard` for a segmented lock) is served: `Ok(())` re-enters
    /// the held grant, an error says why it cannot (it would wait for its own holder, break
    /// its own count, or mix kinds on one key).
    pub(crate) fn reenters(
        self,
        held: LockKind,
        shard: Option<u32>,
        key: &str,
    ) -> Result<(), LockError> {
        match (held, self) {
            (LockKind::Read, LockKind::Write) => Err(LockError::invalid_config(format!(
                "a write lock of `{key}` is requested inside a read lock of it, which would \
                 wait for itself (the read lock is only released after the write lock is \
                 granted): take the write lock around the read instead"
            ))),
            // Inside a permit of a semaphore that lets in more, the inner call could see
            // more holders than it asked for.
            (LockKind::Semaphore { permits: held }, LockKind::Semaphore { permits: asked })
                if asked < held =>
            {
                Err(LockError::invalid_config(format!(
                    "a semaphore of {asked} permits of `{key}` is requested inside a permit of \
                     {held} of it, where up to {held} may be inside: give both the same count, \
                     or take the smaller one outside"
                )))
            }
            // The inner body's shard must be one of its own.
            (LockKind::Segmented { .. }, LockKind::Segmented { shards: asked })
                if shard.is_none_or(|shard| shard >= asked) =>
            {
                Err(LockError::invalid_config(format!(
                    "a segmented lock of {asked} shards of `{key}` is requested inside shard \
                     {} of it, which is not below {asked}: give both the same count of shards",
                    shard.map_or_else(|| "?".to_owned(), |shard| shard.to_string())
                )))
            }
            (held, asked) if held.shares_keys_with(asked) => Ok(()),
            (held, asked) => Err(LockError::key_in_use(
                key,
                format!(
                    "this body holds it as a {} lock, and a {} lock of the same key was \
                     requested inside it; use one kind of lock per key",
                    held.name(),
                    asked.name()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked_as_the_attribute_checks_literals() {
        assert!(LockKind::Semaphore { permits: 3 }.validate().is_ok());
        let refused = [
            (
                LockKind::Semaphore { permits: 0 },
                "`permits` must be at least 1",
            ),
            (
                LockKind::Segmented {
                    shards: MAX_SHARDS + 1,
                },
                "`shards` must be at most 1_024",
            ),
        ];
        for (kind, message) in refused {
            match kind.validate() {
                Err(LockError::InvalidConfig { reason }) => {
                    assert!(reason.contains(message), "{reason}")
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_write_reenters_nothing_but_its_own_family() {
        assert!(LockKind::Read.reenters(LockKind::Write, None, "k").is_ok());
        assert!(LockKind::Write.reenters(LockKind::Write, None, "k").is_ok());
        assert!(LockKind::Read.reenters(LockKind::Read, None, "k").is_ok());
        let upgrade = LockKind::Write
            .reenters(LockKind::Read, None, "k")
            .unwrap_err();
        assert!(upgrade.to_string().contains("wait for itself"), "{upgrade}");
        let mixed = LockKind::Mutex
            .reenters(LockKind::Read, None, "k")
            .unwrap_err();
        assert!(matches!(mixed, LockError::KeyInUse { .. }), "{mixed:?}");
    }

    #[test]
    fn a_nested_count_reenters_only_where_it_holds() {
        let permits = |permits| LockKind::Semaphore { permits };
        let shards = |shards| LockKind::Segmented { shards };
        assert!(permits(5).reenters(permits(3), None, "k").is_ok());
        let fewer = permits(3).reenters(permits(5), None, "k").unwrap_err();
        assert!(
            fewer.to_string().contains("up to 5 may be inside"),
            "{fewer}"
        );
        assert!(shards(4).reenters(shards(100), Some(3), "k").is_ok());
        let outside = shards(4).reenters(shards(100), Some(63), "k").unwrap_err();
        assert!(outside.to_string().contains("shard 63"), "{outside}");
    }
}
