//! What an operator reads of a lock, as every backend reports it: who holds it, who waits,
//! what a forced release found. The backend layer owns these types (its operator calls
//! return them); [`crate::admin`] shows them to programs and the command-line tool.

use std::time::Duration;

use crate::LockKind;
use crate::release_hub::{OwnerTag, ReleaseEvent};

/// Queue entries an inspection shows at most (the oldest): the next waiters are what an
/// operator needs, and a long line would make each read long.
pub const QUEUE_SHOWN: usize = 100;

/// What one lock holds, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The lock key, as applications write it.
    pub key: String,
    /// Who holds it.
    pub holding: Holding,
    /// How many waiters keep a live place in its line (a release hands the key to the
    /// oldest of them).
    pub waiters: usize,
    /// The line's entries, oldest first ([`QUEUE_SHOWN`] at most), lapsed places included.
    pub queue: Vec<Waiter>,
    /// The last token of the key's fencing counter, when the store keeps one per key (Redis;
    /// the memory backend's counter is shared by all keys). The next grant's token is
    /// greater.
    pub fence: Option<u64>,
    /// On Redlock: on how many masters the holder holds it.
    pub masters: Option<Masters>,
}

impl LockState {
    /// A free key's state, with nothing in line.
    pub(crate) fn free(key: &str) -> LockState {
        LockState {
            key: key.to_owned(),
            holding: Holding::Free,
            waiters: 0,
            queue: Vec::new(),
            fence: None,
            masters: None,
        }
    }

    /// The waiter a release would hand the key to now: the oldest whose place lasts.
    pub fn next_waiter(&self) -> Option<&Waiter> {
        self.queue.iter().find(|waiter| waiter.place_left.is_some())
    }
}

/// Who holds a lock key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holding {
    /// Nobody.
    Free,
    /// A grant.
    Held {
        /// Its owner.
        owner: OwnerTag,
        /// The fencing token of the grant; `None` for a grant written by a version before
        /// tokens were kept in the key.
        token: Option<u64>,
        /// How long the lease still runs (its holder renews it while it works).
        remaining: Duration,
    },
    /// Released by its owner, and kept taken by `min_hold_ms` for a while yet.
    Kept {
        /// The owner that released it.
        owner: OwnerTag,
        /// How long it stays taken.
        remaining: Duration,
    },
    /// Grants of a shared kind hold it together: readers or a writer, a semaphore's permits,
    /// a segmented lock's shards.
    #[non_exhaustive]
    Shared {
        /// The grants, in the order their leases end ([`QUEUE_SHOWN`] at most).
        grants: Vec<SharedGrant>,
        /// How many grants hold the key in all.
        holders: usize,
        /// How long the longest lease of all the grants (shown or not) still runs: until then
        /// the key is held, unless its grants are renewed.
        longest: Duration,
    },
    /// The key, or one that a lock keeps next to it, holds something that is not a lock's
    /// (another program's data): no lock can be taken there.
    Foreign {
        /// What was found.
        reason: String,
    },
}

impl Holding {
    /// A key that the shared `grants` hold, as an operator sees it: the grants in the order
    /// their leases end, [`QUEUE_SHOWN`] at most.
    pub(crate) fn shared(mut grants: Vec<SharedGrant>) -> Holding {
        grants.sort_by_key(|grant| grant.remaining);
        let holders = grants.len();
        let longest = grants
            .last()
            .map_or(Duration::ZERO, |grant| grant.remaining);
        grants.truncate(QUEUE_SHOWN);
        Holding::Shared {
            grants,
            holders,
            longest,
        }
    }

    /// `true` for a key someone holds ([`Holding::Held`], [`Holding::Kept`] or
    /// [`Holding::Shared`]).
    pub fn is_held(&self) -> bool {
        match self {
            Holding::Held { .. } | Holding::Kept { .. } => true,
            Holding::Shared { holders, .. } => *holders > 0,
            Holding::Free | Holding::Foreign { .. } => false,
        }
    }

    /// The owner, for a key one owner holds (not a shared kind's: see its grants).
    pub fn owner(&self) -> Option<OwnerTag> {
        match self {
            Holding::Held { owner, .. } | Holding::Kept { owner, .. } => Some(*owner),
            Holding::Shared { .. } | Holding::Free | Holding::Foreign { .. } => None,
        }
    }

    /// How long the holder's lease still runs, for a key someone holds; for a shared kind,
    /// the longest of its grants' leases (until then the key is held, unless renewed).
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Holding::Held { remaining, .. } | Holding::Kept { remaining, .. } => Some(*remaining),
            Holding::Shared { longest, .. } => Some(*longest),
            Holding::Free | Holding::Foreign { .. } => None,
        }
    }

    /// The fencing token of the grant, when it names one.
    pub fn token(&self) -> Option<u64> {
        match self {
            Holding::Held { token, .. } => *token,
            _ => None,
        }
    }

    /// Every grant shown: the one grant of a key one owner holds, or a shared kind's (see
    /// [`SharedGrant::grant`]); none for a free key or foreign data.
    pub fn grants(&self) -> Vec<Grant> {
        match self {
            Holding::Shared { grants, .. } => grants.iter().map(SharedGrant::grant).collect(),
            holding => holding.grant().into_iter().collect(),
        }
    }

    /// The grant, for a key one owner holds: what [`LockAdmin::force_release_of`](crate::admin::LockAdmin::force_release_of) releases.
    /// A shared kind's grants each name theirs ([`SharedGrant::grant`]).
    pub fn grant(&self) -> Option<Grant> {
        let owner = self.owner()?;
        Some(Grant {
            owner,
            token: self.token(),
        })
    }
}

/// One grant of a key that a shared kind holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedGrant {
    /// Its owner.
    pub owner: OwnerTag,
    /// What it holds: [`LockKind::Read`] or [`LockKind::Write`], a permit of a
    /// [`LockKind::Semaphore`] or a shard of a [`LockKind::Segmented`] lock, with the count its
    /// owner asked for.
    pub kind: LockKind,
    /// The permit or shard it holds, for a semaphore or a segmented lock.
    pub slot: Option<u32>,
    /// Its fencing token; `None` once its owner released it and `min_hold_ms` keeps it.
    pub token: Option<u64>,
    /// How long its lease still runs.
    pub remaining: Duration,
}

impl SharedGrant {
    /// The grant, as [`LockAdmin::force_release_of`](crate::admin::LockAdmin::force_release_of) names it.
    pub fn grant(&self) -> Grant {
        Grant {
            owner: self.owner,
            token: self.token,
        }
    }
}

/// One grant of a key, as a forced release names it: its owner, and its fencing token (when
/// the key names one). A later grant of the key, also to the same owner, has a greater token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// Its owner.
    pub owner: OwnerTag,
    /// Its fencing token; `None` for a key kept after its release, or written by a version
    /// before tokens were kept in the key (the owner alone names the grant then).
    pub token: Option<u64>,
}

impl Grant {
    /// Whichever grant of the key `owner` holds, with no token to compare: for naming a grant
    /// an inspection did not show (beyond [`QUEUE_SHOWN`]) by its owner's tag alone. Unlike a
    /// grant shown, it is not checked against a later grant of the same owner (owner tokens
    /// are drawn per acquisition, so the tag names one grant unless a grant's token is
    /// raised, as on Redlock).
    pub fn of_owner(owner: OwnerTag) -> Grant {
        Grant { owner, token: None }
    }

    /// Whether a key holding `owner`'s grant with `token` holds this grant: the same owner,
    /// and no later grant (a token not above this one's, or none to compare).
    pub(crate) fn is(&self, owner: OwnerTag, token: Option<u64>) -> bool {
        owner == self.owner
            && self
                .token
                .zip(token)
                .is_none_or(|(shown, now)| now <= shown)
    }
}

/// A waiter's place in a key's line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiter.
    pub owner: OwnerTag,
    /// The lease it asks for (a hand-off grants it, at most until the place would lapse);
    /// `None` for an entry of another version's shape.
    pub lease: Option<Duration>,
    /// How long its place lasts without another attempt of the waiter; `None` once it lapsed
    /// (the waiter died or gave up without a word; the next hand-off skips it).
    pub place_left: Option<Duration>,
}

/// On how many Redlock masters a lock is held (by the owner shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Masters {
    /// Masters on which the owner holds the key.
    pub holding: usize,
    /// Masters that answered.
    pub answered: usize,
    /// Masters in all.
    pub of: usize,
}

/// What [`LockAdmin::force_release`](crate::admin::LockAdmin::force_release) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForcedRelease {
    /// The lock key.
    pub key: String,
    /// What held the key when the release ran ([`Holding::Free`]: nothing).
    pub found: Holding,
    /// Whether `found` was released: it was the holder the release was for.
    pub released: bool,
    /// What the release announced to waiters: the key handed to the oldest waiter in line,
    /// or free; `None` when nothing was released.
    pub announced: Option<ReleaseEvent>,
    /// On Redlock: on how many masters the key was released.
    pub masters: Option<Masters>,
}

impl ForcedRelease {
    /// Nothing held the key: nothing was released.
    pub(crate) fn not_held(key: &str) -> ForcedRelease {
        ForcedRelease::of(key, Holding::Free)
    }

    /// `found` held the key, and was not released.
    pub(crate) fn of(key: &str, found: Holding) -> ForcedRelease {
        ForcedRelease {
            key: key.to_owned(),
            found,
            released: false,
            announced: None,
            masters: None,
        }
    }
}
