//! Operating locks: list the held ones, inspect one, release one by force, watch a key's
//! releases. This is what the `fencelock` command-line tool does; [`LockClient::admin`] gives
//! the same to a program.
//!
//! Owners are named by their [`OwnerTag`] (a one-way tag of the owner token, as release
//! notifications name them), never by their token: whoever has a token can release the lock.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::LockBackend;
use crate::glob::Glob;
use crate::release_hub::Following;
use crate::{LockClient, LockError, key};

pub use crate::release_hub::{OwnerTag, ReleaseEvent};

/// Queue entries an inspection shows at most (the oldest): the next waiters are what an
/// operator needs, and a long line would make each read long.
pub const QUEUE_SHOWN: usize = 100;

/// An operator's handle on a client's locks, from [`LockClient::admin`]. Keys are lock keys
/// as applications write them (`stock:42`, without the client's prefix), checked like a
/// request's.
///
/// ```
/// use fencelock::admin::Holding;
/// use fencelock::{LockClient, LockError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locks = LockClient::memory();
/// let guard = locks.lock("stock:42").acquire().await?;
/// let admin = locks.admin();
/// let held = admin.list("stock:*").await?;
/// assert_eq!(held[0].key, "stock:42");
/// assert!(matches!(held[0].holding, Holding::Held { token: Some(t), .. } if t == guard.token()));
///
/// // Owner-unchecked: the holder learns of it at its next renewal or release.
/// let forced = admin.force_release("stock:42").await?;
/// assert!(forced.released && forced.found.is_held());
/// assert!(guard.release().await.unwrap_err().is_lost());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockAdmin {
    client: LockClient,
}

impl LockClient {
    /// An operator's handle on this client's locks: list, inspect, force-release, watch.
    pub fn admin(&self) -> LockAdmin {
        LockAdmin {
            client: self.clone(),
        }
    }
}

impl LockAdmin {
    fn backend(&self) -> &Arc<dyn LockBackend> {
        self.client.backend()
    }

    /// The held locks whose key matches `pattern`, sorted by key. `pattern` is a Redis glob
    /// over the lock key text (`*` any text, `?` any byte, `[a-z]`, `\` escapes; `*` lists
    /// every lock). On Redis it is a `SCAN` (never `KEYS`, which blocks the server), page by
    /// page, each page's locks read in one pipeline; on a Redis Cluster every master is
    /// scanned, on Redlock every master and each lock merged over them. A key that appears
    /// in the middle of a listing may be missed, as with any `SCAN`.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        Glob::parse(pattern)?;
        let mut locks = self.backend().list_locks(pattern).await?;
        locks.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(locks)
    }

    /// What `key` holds now (free or not), read at once.
    pub async fn inspect(&self, key: &str) -> Result<LockState, LockError> {
        key::validate(key)?;
        self.backend().inspect_lock(key).await
    }

    /// Releases `key` whoever holds it (no owner check), keeping its fencing counter: the
    /// oldest waiter whose place lasts gets the key with a greater token, as after a release,
    /// or waiters hear that it is free. The former holder is not told; its next renewal or
    /// release reports [`LockError::Lost`]. Reads the key first and releases only the grant
    /// it found there ([`force_release_of`](Self::force_release_of)): if another grant took
    /// its place meanwhile, nothing is released. Foreign data in the key (or next to it) is
    /// refused with [`LockError::KeyInUse`] and left alone.
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease, LockError> {
        let state = self.inspect(key).await?;
        match state.holding {
            Holding::Foreign { reason } => Err(LockError::key_in_use(key, reason)),
            holding => match holding.grant() {
                Some(grant) => self.force_release_of(key, grant).await,
                None => Ok(ForcedRelease::not_held(key)),
            },
        }
    }

    /// Releases `key` by force, as [`force_release`](Self::force_release) does, if and only if
    /// it holds `grant` (as [`Holding::grant`] gave it: that grant, or the key it keeps after
    /// its release by `min_hold_ms`), never one that took its place since, also of the same
    /// owner (a later grant carries a greater token). Safe to send again: once released, the
    /// key no longer holds `grant` (so a second send after a lost reply says nothing was
    /// released; [`inspect`](Self::inspect) tells what holds the key). Unlike
    /// `force_release`, it does not look for foreign data next to the key first.
    pub async fn force_release_of(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        key::validate(key)?;
        self.backend().force_release(key, grant).await
    }

    /// Every release announcement of `key` from now on, in order (returned once the backend
    /// announces them to this watch). Waiters only ever need the last of several; this
    /// keeps each, on its own channel, without adding to their path.
    pub async fn watch(&self, key: &str) -> Result<ReleaseEvents, LockError> {
        key::validate(key)?;
        let watch = self.backend().subscribe(key).await?;
        Ok(ReleaseEvents {
            backend: self.backend().clone(),
            key: key.to_owned(),
            following: watch.follow(),
            interrupted: false,
        })
    }
}

/// The release announcements of one key, from [`LockAdmin::watch`].
#[derive(Debug)]
pub struct ReleaseEvents {
    backend: Arc<dyn LockBackend>,
    key: String,
    following: Following,
    /// The subscription was interrupted: subscribe again before waiting.
    interrupted: bool,
}

impl ReleaseEvents {
    /// The next announcement. After [`ReleaseEvent::Interrupted`] the key is subscribed again
    /// first; an error when that fails (or the backend is gone).
    pub async fn next(&mut self) -> Result<ReleaseEvent, LockError> {
        if self.interrupted {
            // The old watch is kept until the new one exists, so the subscription is never
            // left idle for the backend to drop meanwhile.
            self.following = self.backend.subscribe(&self.key).await?.follow();
            self.interrupted = false;
        }
        let event = self.following.next().await.ok_or_else(|| {
            LockError::backend(
                Some(&self.key),
                "the backend stopped announcing releases",
                None,
            )
        })?;
        self.interrupted = event == ReleaseEvent::Interrupted;
        Ok(event)
    }
}

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
    /// The key, or one that a lock keeps next to it, holds something that is not a lock's
    /// (another program's data): no lock can be taken there.
    Foreign {
        /// What was found.
        reason: String,
    },
}

impl Holding {
    /// `true` for a key someone holds ([`Holding::Held`] or [`Holding::Kept`]).
    pub fn is_held(&self) -> bool {
        matches!(self, Holding::Held { .. } | Holding::Kept { .. })
    }

    /// The owner, for a key someone holds.
    pub fn owner(&self) -> Option<OwnerTag> {
        match self {
            Holding::Held { owner, .. } | Holding::Kept { owner, .. } => Some(*owner),
            Holding::Free | Holding::Foreign { .. } => None,
        }
    }

    /// How long the holder's lease still runs, for a key someone holds.
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Holding::Held { remaining, .. } | Holding::Kept { remaining, .. } => Some(*remaining),
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

    /// The grant, for a key someone holds: what [`LockAdmin::force_release_of`] releases.
    pub fn grant(&self) -> Option<Grant> {
        let owner = self.owner()?;
        Some(Grant {
            owner,
            token: self.token(),
        })
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

/// What [`LockAdmin::force_release`] did.
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
