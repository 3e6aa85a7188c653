//! Who may join the holders of a shared key (read/write locks, semaphores, segmented
//! locks): the rule every backend applies, in Rust for the memory backend and in
//! `redis/lua/shared.lua` for Redis, which mirrors it line by line.

use crate::LockKind;

/// A live grant of a shared key, as far as admission cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    pub(crate) kind: LockKind,
    /// The permit or shard it holds (0 for readers and writers).
    pub(crate) slot: u32,
}

/// Whether a request of `kind` may join `holders` now, and with which slot.
///
/// - `Err` says why the key cannot be shared with this kind at all (its holders are of
///   another kind: a semaphore's key asked for as a read lock).
/// - `ahead` are the kinds of the live places ahead of the request in the key's line (every
///   place, if the request has none). In fair mode any of them holds the request back; else
///   only a waiting writer holds back a reader (so a stream of readers cannot starve it).
/// - A reader joins while no writer holds the key; a writer only an empty key.
/// - A permit joins while fewer are inside than its own count and every count of those
///   inside (the smallest count wins); a permit or shard takes the first free slot below its
///   count, looking from `start` on (a random start spreads segmented locks over their
///   shards). A shard needs nothing more: a request for fewer shards takes one below its
///   count beside holders of higher ones. A shard in `exhausted` is never taken (see
///   [`every_shard_exhausted`]).
pub(crate) fn admit(
    kind: LockKind,
    holders: &[Share],
    mut ahead: impl Iterator<Item = LockKind>,
    fair: bool,
    start: u32,
    exhausted: &[u32],
) -> Result<Option<u32>, String> {
    if let Some(other) = holders.iter().find(|h| !h.kind.shares_keys_with(kind)) {
        return Err(conflict(other.kind, kind));
    }
    let held_back = if fair {
        ahead.next().is_some()
    } else {
        kind == LockKind::Read && ahead.any(|waiting| waiting == LockKind::Write)
    };
    if held_back {
        return Ok(None);
    }
    Ok(match kind {
        LockKind::Read => (!holders.iter().any(|h| h.kind == LockKind::Write)).then_some(0),
        LockKind::Write | LockKind::Mutex => holders.is_empty().then_some(0),
        LockKind::Semaphore { permits: count } | LockKind::Segmented { shards: count } => {
            let smallest = holders
                .iter()
                .filter_map(|h| h.kind.count())
                .fold(count, u32::min);
            let semaphore = matches!(kind, LockKind::Semaphore { .. });
            if semaphore && holders.len() >= smallest as usize {
                return Ok(None);
            }
            (0..count)
                .map(|offset| (start % count + offset) % count)
                .find(|slot| !holders.iter().any(|h| h.slot == *slot) && !exhausted.contains(slot))
        }
    })
}

/// Whether `kind` is a segmented lock whose every shard (below its count) is in `exhausted`:
/// such a request is refused at once, since no release would let it in.
pub(crate) fn every_shard_exhausted(kind: LockKind, exhausted: &[u32]) -> bool {
    match kind {
        LockKind::Segmented { shards } => (0..shards).all(|shard| exhausted.contains(&shard)),
        _ => false,
    }
}

/// The slot a grant of `kind` names: the permit or shard of a semaphore or a segmented lock
/// (readers and writers take slot 0, which names nothing).
pub(crate) fn slot_of(kind: LockKind, slot: u32) -> Option<u32> {
    kind.count().map(|_| slot)
}

/// The shard a segmented lock's `slot` is (other kinds name none).
pub(crate) fn shard_of(kind: LockKind, slot: u32) -> Option<u32> {
    matches!(kind, LockKind::Segmented { .. }).then_some(slot)
}

/// How the Redis scripts name a shared kind, and its count (0 for readers and writers).
pub(crate) fn script_kind(kind: LockKind) -> (&'static str, u32) {
    match kind {
        LockKind::Read => ("r", 0),
        LockKind::Write => ("w", 0),
        LockKind::Semaphore { permits } => ("s", permits),
        LockKind::Segmented { shards } => ("g", shards),
        // Not a shared kind: no script takes it.
        LockKind::Mutex => ("", 0),
    }
}

/// The kind the Redis scripts (and the SQL shares table) name `tag` with `count` (see
/// [`script_kind`]); `None` for anything else.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn kind_of_script(tag: &str, count: u32) -> Option<LockKind> {
    match (tag, count) {
        ("r", 0) => Some(LockKind::Read),
        ("w", 0) => Some(LockKind::Write),
        ("s", permits) if permits > 0 => Some(LockKind::Semaphore { permits }),
        ("g", shards) if shards > 0 => Some(LockKind::Segmented { shards }),
        _ => None,
    }
}

/// Why a key held as `held` cannot be granted as `asked`.
pub(crate) fn conflict(held: LockKind, asked: LockKind) -> String {
    format!(
        "it is held as a {} lock, and a {} lock was requested; use one kind of lock per key",
        describe(held),
        describe(asked)
    )
}

/// A kind as the conflict message names it.
fn describe(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Read | LockKind::Write => "read/write",
        other => other.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn share(kind: LockKind, slot: u32) -> Share {
        Share { kind, slot }
    }

    const READ: Share = share(LockKind::Read, 0);
    const WRITE: Share = share(LockKind::Write, 0);

    fn admitted(kind: LockKind, holders: &[Share], ahead: &[LockKind], fair: bool) -> Option<u32> {
        admit(kind, holders, ahead.iter().copied(), fair, 0, &[]).unwrap()
    }

    #[test]
    fn readers_share_and_writers_exclude() {
        assert_eq!(admitted(LockKind::Read, &[READ, READ], &[], false), Some(0));
        assert_eq!(admitted(LockKind::Read, &[WRITE], &[], false), None);
        assert_eq!(admitted(LockKind::Write, &[READ], &[], false), None);
        assert_eq!(admitted(LockKind::Write, &[], &[], false), Some(0));
    }

    #[test]
    fn a_waiting_writer_holds_back_later_readers_only() {
        let ahead = [LockKind::Read, LockKind::Write];
        assert_eq!(admitted(LockKind::Read, &[READ], &ahead, false), None);
        assert_eq!(
            admitted(LockKind::Read, &[READ], &[LockKind::Read], false),
            Some(0)
        );
        assert_eq!(
            admitted(LockKind::Read, &[READ], &[LockKind::Read], true),
            None
        );
    }

    #[test]
    fn the_smallest_count_inside_wins() {
        let three = LockKind::Semaphore { permits: 3 };
        let five = LockKind::Semaphore { permits: 5 };
        let inside = [share(three, 0), share(five, 1), share(five, 2)];
        assert_eq!(admitted(five, &inside, &[], false), None);
        assert_eq!(admitted(five, &inside[1..], &[], false), Some(0));
        let two_of_five = [share(five, 0), share(five, 1)];
        assert_eq!(admitted(three, &two_of_five, &[], false), Some(2));
    }

    #[test]
    fn shards_are_looked_for_from_the_start_given() {
        let shards = LockKind::Segmented { shards: 4 };
        let inside = [share(shards, 2), share(shards, 3)];
        assert_eq!(
            admit(shards, &inside, [].into_iter(), false, 2, &[]),
            Ok(Some(0))
        );
        assert_eq!(
            admit(shards, &inside, [].into_iter(), false, 5, &[]),
            Ok(Some(1))
        );
        let fewer = LockKind::Segmented { shards: 2 };
        let low = [share(shards, 0), share(shards, 1)];
        assert_eq!(admit(fewer, &low, [].into_iter(), false, 0, &[]), Ok(None));
        let one = LockKind::Segmented { shards: 1 };
        let beside = admit(shards, &[share(one, 0)], [].into_iter(), false, 0, &[]);
        assert_eq!(beside, Ok(Some(1)), "no count rule for shards");
    }

    #[test]
    fn exhausted_shards_are_never_taken() {
        let shards = LockKind::Segmented { shards: 4 };
        let inside = [share(shards, 1)];
        let free = admit(shards, &inside, [].into_iter(), false, 0, &[0, 2]);
        assert_eq!(free, Ok(Some(3)));
        let none = admit(shards, &inside, [].into_iter(), false, 0, &[0, 2, 3]);
        assert_eq!(none, Ok(None), "the held shard may come back");
        assert!(!every_shard_exhausted(shards, &[0, 2, 3]));
        assert!(every_shard_exhausted(shards, &[3, 2, 1, 0]));
        let fewer = LockKind::Segmented { shards: 2 };
        assert!(every_shard_exhausted(fewer, &[0, 1]));
        assert!(!every_shard_exhausted(
            LockKind::Semaphore { permits: 1 },
            &[0]
        ));
    }

    #[test]
    fn kinds_do_not_mix_on_one_key() {
        let semaphore = LockKind::Semaphore { permits: 2 };
        let why = admit(
            LockKind::Read,
            &[share(semaphore, 0)],
            [].into_iter(),
            false,
            0,
            &[],
        );
        let why = why.unwrap_err();
        assert!(why.contains("held as a semaphore lock"), "{why}");
        assert!(why.contains("a read/write lock was requested"), "{why}");
    }
}
