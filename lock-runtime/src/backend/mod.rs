//! The backend trait: what a store must do for the client to build locks on it.
//!
//! Every backend gives the same semantics, checked by one conformance suite
//! (`testing::conformance`): a grant is exclusive until its lease ends or its owner releases
//! it; an acquire by the current owner is recognised (so a retry after a lost reply does not
//! leave an orphan); release only ever deletes the caller's own grant; each grant carries a
//! fencing token strictly greater than every token granted before for that key.
//!
//! Lost replies: a call that returns [`LockError::Backend`] may have taken effect, or may
//! still take effect. A backend must settle such calls before the next one: whatever a
//! failed call does, it does before any call that starts after it returned (the Redis
//! backend has the server close the connection that carried it before sending anything
//! else). The client relies on this to clean up: the owner-checked release that follows a
//! lost acquire reply cannot be overtaken by that acquire. The Redis Cluster and etcd
//! backends cannot settle (their connections belong to redis-rs's cluster client, and to
//! gRPC), and say so in their docs: a request delivered late there can still take the key
//! for a lease.

#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub mod consensus;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod late_replies;
pub mod memory;
mod native;
pub mod redis;
pub mod redlock;
pub(crate) mod sharing;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;
pub(crate) mod state;
mod timeouts;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

pub(crate) use self::native::{AsyncBackend, AsyncOperator, AsyncResults, AsyncShardMarks};
pub use self::state::{
    ForcedRelease, Grant, Holding, LockState, Masters, QUEUE_SHOWN, SharedGrant, Waiter,
};
pub use self::timeouts::Timeouts;
pub use crate::instance::{OwnedGrant, OwnerPrefix};
pub use crate::release_hub::ReleaseWatch;
use crate::release_hub::owner_tag;
use crate::{LockError, LockKind};

/// A boxed future, as backend methods return them (the client holds backends as trait
/// objects).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One acquisition's identity: which key, which owner, how long.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    /// The lock key as the caller wrote it (backends add their own prefix or layout).
    pub key: String,
    /// The owner token: random, fresh for every acquisition, never shared.
    pub owner: String,
    /// The lease length.
    pub ttl: Duration,
    /// How many replicas must have the grant before an acquire counts it granted
    /// (`min_replicas`; 0: none). A backend without replicas refuses a non-zero count.
    pub replicas: u32,
    /// The kind of lock: who else may hold the key beside this owner. Every method gets
    /// it, so that a backend keeps each kind in its own structure; a backend that does not
    /// offer a kind refuses it with [`LockError::InvalidConfig`].
    pub kind: LockKind,
}

// The owner token stays out of Debug output: whoever has it can release the lock.
impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .field("replicas", &self.replicas)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// A lease as it was granted, with its fencing token: renewal extends this grant only, not
/// a later grant of the same key to the same owner (say, a late acquire of that owner that
/// re-took the key after it was deleted under its holder), so that the holder still learns
/// that its grant ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    /// The lease.
    pub lease: Lease,
    /// The fencing token of its grant.
    pub token: u64,
    /// The permit or shard of its grant, as [`Acquire::Granted`] named it: on Redlock, a
    /// master may hold a grant of the same owner and token in another slot (one that formed
    /// no majority and whose give-back was lost), which must not pass for this one.
    pub slot: Option<u32>,
}

/// The answer to one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours (newly, again for the same owner, or handed over by a release),
    /// with this fencing token.
    Granted {
        /// The fencing token of this grant.
        token: u64,
        /// The permit or shard granted, for a [`LockKind::Semaphore`] or
        /// [`LockKind::Segmented`] lease (renewal extends that one only); `None` for other
        /// kinds.
        slot: Option<u32>,
    },
    /// Another owner holds the key, or it is an earlier waiter's turn.
    Held {
        /// How long the holder's lease still runs, when the backend knows.
        remaining: Option<Duration>,
        /// The key's latest fencing token when the attempt ran: a release that hands the
        /// key to this waiter later grants a greater one, which tells its announcement from
        /// one sent before the attempt and delivered after it.
        latest_token: u64,
    },
}

/// What a renewal found of one lease.
#[derive(Debug, Clone)]
pub enum Extended {
    /// Its lease restarted at its `ttl` from when the call was sent.
    Renewed,
    /// The key is gone, another owner's, or granted anew: the lease is lost.
    Lost,
    /// The backend could not tell for this lease alone (say, its row stayed locked by another
    /// session past the lock wait): the renewal loop asks again, until the lease's deadline,
    /// as after a failed round, while the other leases of the round are settled.
    Unknown(LockError),
}

impl Extended {
    /// [`Renewed`](Self::Renewed) if the grant was found and extended, else
    /// [`Lost`](Self::Lost).
    pub fn found(extended: bool) -> Self {
        if extended {
            Extended::Renewed
        } else {
            Extended::Lost
        }
    }
}

/// How an acquire attempt competes with other waiters for a free key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Turn {
    /// Take a free key at once; if it is held, leave no trace (a single attempt).
    #[default]
    Once,
    /// Take a free key at once; if it is held, keep a place in the key's line for the given
    /// time, so that a release hands the key over (granted for the lease asked for, at
    /// most until the place would have lapsed). A waiter renews its place with each
    /// attempt; a place that lapses (the waiter died) is skipped.
    InLine(Duration),
    /// Fair mode: as `InLine`, but a free key goes only to the oldest waiter in line. A zero
    /// place makes a single attempt that takes no place (and still does not jump the line).
    Fair(Duration),
}

impl Turn {
    /// How long a place in line lasts without an attempt renewing it, if the attempt takes
    /// one.
    pub fn place(self) -> Option<Duration> {
        match self {
            Turn::Once => None,
            Turn::InLine(place) | Turn::Fair(place) => Some(place).filter(|p| !p.is_zero()),
        }
    }
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Our grant was deleted (by this call, or by an earlier send of it whose reply was lost).
    Released,
    /// The key was not ours any more (expired, or taken by someone else); nothing changed.
    NotOwner,
    /// A backend that sent the release again itself (its first try's outcome unknown) found
    /// the key not ours, and cannot tell whether the first try released it.
    Unconfirmed,
}

/// How long a backend remembers an owner's release, so that a release sent again after its
/// reply was lost learns that the first one released the key, whatever the key saw since
/// (other owners' grants and releases, the end of a `min_hold_ms` hold). A resend follows the
/// first send's failure, and backends settle a lost call before the next one: from the first
/// send to the resend's arrival there are at most the first send's response timeout, the
/// settling and the resend's own timeout (a resend later than that is itself an error, never
/// an answer), plus a second of slack. A background release retried for longer reports what
/// it then finds as unconfirmed.
pub(crate) fn release_memory(response_timeout: Duration) -> Duration {
    response_timeout * 3 + Duration::from_secs(1)
}

/// Releases remembered in a process (the memory backend's, a line client's), each for the same
/// time, so that the oldest is forgotten first.
#[derive(Debug)]
pub(crate) struct ReleaseMemory<K> {
    lasts: Duration,
    until: HashMap<K, Instant>,
    /// The entries of `until` in the order they were remembered, so by when they lapse.
    order: VecDeque<(Instant, K)>,
}

impl<K: Hash + Eq + Clone> ReleaseMemory<K> {
    pub(crate) fn new(lasts: Duration) -> Self {
        ReleaseMemory {
            lasts,
            until: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Remembers the release `id` from `now`; forgets those that lapsed.
    pub(crate) fn remember(&mut self, id: K, now: Instant) {
        while let Some((until, _)) = self.order.front()
            && *until <= now
        {
            if let Some((until, id)) = self.order.pop_front()
                && self.until.get(&id) == Some(&until)
            {
                self.until.remove(&id);
            }
        }
        let until = now + self.lasts;
        self.until.insert(id.clone(), until);
        self.order.push_back((until, id));
    }

    /// Whether the release `id` is remembered at `now`.
    pub(crate) fn remembers(&self, id: &K, now: Instant) -> bool {
        self.until.get(id).is_some_and(|until| *until > now)
    }
}

/// What a key kept after its release (`min_hold_ms`) holds instead of its owner's token: the
/// token followed by this.
pub(crate) const RELEASED: &str = ":released";

/// The owner a key kept after `owner`'s release holds: no renewal of `owner`'s matches it.
pub(crate) fn released_mark(owner: &str) -> String {
    format!("{owner}{RELEASED}")
}

/// Who holds a mutex whose grant has `stored_owner` (an owner token, or a released mark),
/// `token` and `remaining` of its lease, as an operator sees it: owners by tag.
pub(crate) fn holding_of(stored_owner: &str, token: u64, remaining: Duration) -> Holding {
    match stored_owner.strip_suffix(RELEASED) {
        Some(owner) => Holding::Kept {
            owner: owner_tag(owner),
            remaining,
        },
        None => Holding::Held {
            owner: owner_tag(stored_owner),
            token: Some(token),
            remaining,
        },
    }
}

/// The grant of `key` whose stored owner (see [`holding_of`]) and fencing token are these,
/// if `owners` matches the owner and it holds the key (a grant kept after its release by
/// `min_hold_ms` was released on purpose, and is left to its keep).
pub(crate) fn owned_grant(
    key: &str,
    stored_owner: &str,
    token: Option<u64>,
    owners: &OwnerPrefix,
) -> Option<OwnedGrant> {
    let held = !stored_owner.ends_with(RELEASED) && owners.matches(stored_owner);
    held.then(|| {
        let owner = owner_tag(stored_owner);
        OwnedGrant::new(key, Grant { owner, token })
    })
}

/// Runs a backend call; if its reply is lost (a backend error), sends it once more at once:
/// every call is safe to repeat for the same owner, and a connection cut between two calls
/// should not fail either. Also says when the second send went out, if a reply was lost: the
/// first send may have taken effect before the second (never after it: backends settle lost
/// calls), and the second's effect dates from then.
pub(crate) async fn resend_once<T, F>(
    call: impl Fn() -> F,
) -> (Result<T, LockError>, Option<Instant>)
where
    F: Future<Output = Result<T, LockError>>,
{
    match call().await {
        Err(error) if error.is_backend() => {
            let resent_at = Instant::now();
            (call().await, Some(resent_at))
        }
        outcome => (outcome, None),
    }
}

/// What a backend offers beyond the calls every backend makes, as one value
/// ([`LockBackend::capabilities`]): a new capability is a field with a default here, not a
/// new method for every backend to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Read/write locks ([`LockKind::Read`], [`LockKind::Write`]). The client refuses a kind
    /// the backend does not offer with [`LockError::InvalidConfig`] before sending anything.
    pub read_write: bool,
    /// Semaphores ([`LockKind::Semaphore`]).
    pub semaphores: bool,
    /// Segmented locks ([`LockKind::Segmented`]).
    pub segmented: bool,
    /// Whether a release hands the key to the oldest waiter in line (see
    /// [`LockBackend::release`]) and [`Turn::Fair`] is offered. A backend that hands
    /// nothing over (Redlock, SQL) treats [`Turn::InLine`] as [`Turn::Once`], except a
    /// writer's, whose place holds back the readers that arrive after it; its releases only
    /// wake the waiters, who attempt again.
    pub hands_off: bool,
    /// Whether a free key goes to the oldest waiter in line in the default mode too, not
    /// only in fair mode: true of a store whose line is the order in which entries were
    /// created (ZooKeeper's sequence numbers, etcd's revisions), where a newcomer can only
    /// queue behind.
    pub always_fair: bool,
    /// How long a grant surely lasts after a call that reached the store, whatever its
    /// lease: a store that ends every grant of a client whose session it stops hearing from
    /// (ZooKeeper, etcd) gives its session timeout, and the client counts each lease valid
    /// for no longer than that after its last confirmed renewal. `None`: the lease alone.
    pub longest_lease: Option<Duration>,
}

impl Capabilities {
    /// The mutex alone, handed off on release: what a backend offers unless it says more.
    pub const MUTEX: Capabilities = Capabilities {
        read_write: false,
        semaphores: false,
        segmented: false,
        hands_off: true,
        always_fair: false,
        longest_lease: None,
    };

    /// Every kind, handed off on release.
    pub const EVERY_KIND: Capabilities = Capabilities {
        read_write: true,
        semaphores: true,
        segmented: true,
        ..Capabilities::MUTEX
    };

    /// These capabilities, with read/write locks offered or not.
    pub const fn with_read_write(mut self, offered: bool) -> Self {
        self.read_write = offered;
        self
    }

    /// These capabilities, with releases handing the key over or not.
    pub const fn with_hands_off(mut self, hands_off: bool) -> Self {
        self.hands_off = hands_off;
        self
    }

    /// These capabilities, with a free key going to the oldest waiter in every mode or not.
    pub const fn with_always_fair(mut self, always_fair: bool) -> Self {
        self.always_fair = always_fair;
        self
    }

    /// These capabilities, with a cap on how long a grant lasts.
    pub const fn with_longest_lease(mut self, longest: Option<Duration>) -> Self {
        self.longest_lease = longest;
        self
    }

    /// Whether `kind` is offered.
    pub fn offers(&self, kind: LockKind) -> bool {
        match kind {
            LockKind::Mutex => true,
            LockKind::Read | LockKind::Write => self.read_write,
            LockKind::Semaphore { .. } => self.semaphores,
            LockKind::Segmented { .. } => self.segmented,
        }
    }
}

/// A store that locks can be built on. Implementations must be cheap to share: the client
/// holds one behind an `Arc` and calls it from any task and any runtime.
pub trait LockBackend: Send + Sync + std::fmt::Debug + 'static {
    /// One acquire attempt: grant the key to `lease.owner` if it is free or already theirs
    /// (refreshing the lease), and return the grant's fencing token. `turn` says how the
    /// attempt competes with other waiters for a free key.
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>>;

    /// A watch that completes on each later release of `key`. Returns once the backend will
    /// announce releases (for Redis: once the subscription is confirmed), so that an attempt
    /// made after this returns cannot miss a release that follows it.
    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>>;

    /// A watch of `key`'s releases if the backend announces them already (for Redis: the
    /// client is subscribed to the key's channel for another waiter), without a round trip;
    /// `None` if that would take a [`subscribe`](Self::subscribe). A request takes it before
    /// its first attempt, so that it needs no second attempt after subscribing.
    fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        let _ = key;
        None
    }

    /// What the backend offers beyond the calls every backend makes: the kinds, hand-off,
    /// fairness, a cap on leases. [`Capabilities::MUTEX`] by default.
    fn capabilities(&self) -> Capabilities {
        Capabilities::MUTEX
    }

    /// For each grant still held as granted (same owner, same token), restart its lease at
    /// `lease.ttl` from now, and say what it found of each, in order: renewed; lost (the key
    /// is gone, owned by another owner, or granted anew); or unknown for that lease alone. An
    /// `Err` leaves every lease of the call unknown. The renewal loop sends every lease due in
    /// one tick in one call, so implementations should batch (Redis: one pipeline).
    fn extend<'a>(
        &'a self,
        held: &'a [HeldLease],
    ) -> BoxFuture<'a, Result<Vec<Extended>, LockError>>;

    /// Delete the key if, and only if, `lease.owner` holds it, hand it to the oldest waiter
    /// in line whose place lasts (a grant with a new fencing token, for that waiter's lease
    /// or until its place would have lapsed, whichever is sooner: the waiter renews it from
    /// there, and one that died holds the key no longer than either), and announce the
    /// release, naming the new owner. With a non-zero `min_hold` (what is left of
    /// `min_hold_ms`), set the grant's remaining lease to it instead: the key stays taken
    /// until then. Also takes the owner out of the key's line. Safe to retry.
    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>>;

    /// [`release`](Self::release) of a grant whose fencing token the caller knows (a guard's):
    /// a backend that remembers releases by token (Redis: a grant whose token lies in the
    /// key's unbroken series of released grants was released) reads it. The default sends
    /// [`release`](Self::release); a wrapper of another backend forwards this call.
    fn release_held<'a>(
        &'a self,
        held: &'a HeldLease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        self.release(&held.lease, min_hold)
    }

    /// The operator's calls (list, inspect, force-release), if the backend offers them:
    /// `None` by default, and [`LockAdmin`](crate::admin::LockAdmin) refuses them with
    /// [`LockError::InvalidConfig`].
    fn operator(&self) -> Option<&dyn OperatorBackend> {
        None
    }

    /// Where a single-flight call (`action = Share`) leaves its value for the callers of other
    /// processes, if the backend offers it: `None` by default, and such calls are refused
    /// with [`LockError::InvalidConfig`] before anything is sent.
    fn results(&self) -> Option<&dyn ResultStore> {
        None
    }

    /// Where segmented locks keep their exhausted shards, if the backend offers it: `None` by
    /// default, and marking or refilling a shard is refused with [`LockError::InvalidConfig`].
    /// A backend that offers it skips the shards marked exhausted in every acquisition of a
    /// segmented lock, and refuses one for which every shard below its count is marked with
    /// [`LockError::Exhausted`] (`shard: None`), without waiting and without taking a place.
    fn shard_marks(&self) -> Option<&dyn ShardMarks> {
        None
    }

    /// Several mutex leases (distinct keys, one lease length, fresh owners, no
    /// `min_replicas`) granted in one call, all or none, where the store can do that
    /// atomically (one Redis server, one slot of a cluster, the memory backend): the call, whose answer is each
    /// lease's token in order, or `None` when some key was not free and nothing was written.
    /// `None` by default, and where the store cannot for these keys:
    /// [`LockClient::lock_all`](crate::LockClient::lock_all) then takes them one by one. A
    /// call whose reply was lost may have granted them all; sent again, it answers as the
    /// first did (keys that hold these owners' grants count as granted).
    fn acquire_together<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        let _ = leases;
        None
    }
}

/// The call of [`LockBackend::acquire_together`].
pub type TogetherCall<'a> = BoxFuture<'a, Result<Option<Vec<u64>>, LockError>>;

/// Whether `leases` are of the kind [`LockBackend::acquire_together`] grants: mutexes without
/// `min_replicas`.
pub(crate) fn mutexes_alone(leases: &[Lease]) -> bool {
    leases
        .iter()
        .all(|lease| lease.kind == LockKind::Mutex && lease.replicas == 0)
}

/// Exhausted shards of segmented locks ([`LockBackend::shard_marks`]): a body that finds the
/// part of a resource its shard guards used up marks the shard, and every client's later
/// acquisitions skip it until it is refilled.
pub trait ShardMarks: Send + Sync {
    /// Marks the shard of `held` (a [`LockKind::Segmented`] grant) exhausted, if that grant
    /// still holds it: `false` if it does not any more, and nothing is marked (the body's view
    /// of the shard may be stale; a refill since must not be undone).
    fn mark_exhausted<'a>(&'a self, held: &'a HeldLease) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Clears the marks of `key`'s shards: `shard`'s, or every one with `None`.
    fn refill<'a>(
        &'a self,
        key: &'a str,
        shard: Option<u32>,
    ) -> BoxFuture<'a, Result<(), LockError>>;
}

/// A value that a single-flight call computed under a key's mutex, as the store keeps it
/// ([`ResultStore`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedResult {
    /// The fencing token of the grant under which it was computed.
    pub token: u64,
    /// The value, serialized.
    pub value: Vec<u8>,
}

impl SharedResult {
    /// A value as a store keeps it, `<token> <value>`; `None` for anything else.
    pub(crate) fn decode(kept: &[u8]) -> Option<SharedResult> {
        let space = kept.iter().position(|&b| b == b' ')?;
        let token = std::str::from_utf8(&kept[..space]).ok()?;
        let plain = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
        Some(SharedResult {
            token: token.parse().ok().filter(|_| plain)?,
            value: kept[space + 1..].to_vec(),
        })
    }
}

/// The error for a store's single-flight value of `key` that fencelock did not write.
pub(crate) fn foreign_result(key: &str) -> LockError {
    LockError::key_in_use(
        key,
        "the key's single-flight value holds data fencelock did not write: delete it, or give \
         fencelock a prefix (or root) of its own",
    )
}

/// Where single-flight calls leave their values ([`LockBackend::results`]).
pub trait ResultStore: Send + Sync {
    /// The value left last for `key`, if it is still kept.
    fn read_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<SharedResult>, LockError>>;

    /// Leaves `result` for `key` for `keep` at least (ZooKeeper and etcd keep it while the
    /// writer's session lasts), if `result.token` is the token of the grant that holds `key`'s
    /// mutex now and no value of that token or a later one is kept; says which it was.
    fn publish_result<'a>(
        &'a self,
        key: &'a str,
        result: &'a SharedResult,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Published, LockError>>;

    /// A watch of `key`'s value, returned once the store watches: it completes when a value
    /// may have been left since, or the key's holder left without one (it may also complete
    /// when neither happened). A call that waits for a flight of another process makes it
    /// before each read of the value, so that no value left after the read goes unseen, and
    /// reads again when it completes; it makes one more once the key was found held, for the
    /// stores that watch the holder as it is then. `None` where the store cannot watch: the
    /// caller reads again after each pause between lock attempts (the default, and MySQL's).
    fn watch_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ResultChange>, LockError>> {
        let _ = key;
        Box::pin(async { Ok(None) })
    }
}

/// A watch of a key's single-flight value ([`ResultStore::watch_result`]): completes when a
/// value may have been left.
pub type ResultChange = BoxFuture<'static, ()>;

/// A watch of a key's releases as a watch of its value, for the stores that announce
/// releases: a holder leaves its value before it releases the key.
pub(crate) fn change_at_release(mut releases: ReleaseWatch) -> ResultChange {
    Box::pin(async move {
        releases.released(None).await;
    })
}

/// What [`ResultStore::publish_result`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Published {
    /// The value is kept.
    Kept,
    /// The token does not hold the key's mutex (any more): the value was computed, at least
    /// in part, without the lock, and nothing was kept.
    NotHeld,
    /// A value of the same token or a later one is kept already; this one was not.
    LaterKept,
}

/// The operator's calls on a backend ([`LockBackend::operator`]), apart from the calls every
/// lock makes, as sqlx puts migrations behind `as_migrate`: a backend offers them all or none.
pub trait OperatorBackend: Send + Sync {
    /// For an operator: every held lock whose key matches `pattern` (a Redis glob over the
    /// lock key text, checked by the caller), in any order, each read at once (see
    /// [`LockAdmin::list`](crate::admin::LockAdmin::list)).
    fn list_locks<'a>(
        &'a self,
        pattern: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockState>, LockError>>;

    /// For an operator: what `key` holds now, read at once.
    fn inspect_lock<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<LockState, LockError>>;

    /// For an operator: releases `key` if it holds `grant` (see [`Grant`]: that grant, or the
    /// key it keeps after its release), whatever its lease, keeping its fencing counter,
    /// handing it over and announcing it as [`release`](LockBackend::release) does, but without
    /// remembering a release of the holder's (whose renewal and release must then find the
    /// lease lost); refuses foreign data in the key with [`LockError::KeyInUse`]. Says what
    /// held the key. Safe to retry: once released, the key no longer holds `grant`.
    fn force_release<'a>(
        &'a self,
        key: &'a str,
        grant: Grant,
    ) -> BoxFuture<'a, Result<ForcedRelease, LockError>>;

    /// For releasing what an instance left ([`LockClient::release_orphans`](crate::LockClient::release_orphans)): every live
    /// grant of a key matching `pattern` whose owner token `owners` matches (all of a shared
    /// kind's grants, not the first [`QUEUE_SHOWN`]), read at once, in any order. Places in
    /// line are left to lapse. Not offered unless a backend says otherwise.
    fn grants_of_owners<'a>(
        &'a self,
        pattern: &'a str,
        owners: &'a OwnerPrefix,
    ) -> BoxFuture<'a, Result<Vec<OwnedGrant>, LockError>> {
        let _ = (pattern, owners);
        Box::pin(std::future::ready(Err(not_offered(
            "finding an instance's grants",
        ))))
    }
}

/// The answer of a backend that does not offer an operator's `what`.
pub(crate) fn not_offered(what: &str) -> LockError {
    LockError::invalid_config(format!(
        "this backend does not offer {what}: the Redis (one server, Sentinel, Cluster), \
         Redlock, SQL, ZooKeeper, etcd and memory backends do"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockClient;
    use crate::release_hub::owner_tag;

    /// A backend with the required methods only (none of them called here).
    #[derive(Debug)]
    struct RequiredOnly;

    impl LockBackend for RequiredOnly {
        fn acquire<'a>(
            &'a self,
            _: &'a Lease,
            _: Turn,
        ) -> BoxFuture<'a, Result<Acquire, LockError>> {
            Box::pin(std::future::pending())
        }

        fn subscribe<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
            Box::pin(std::future::pending())
        }

        fn extend<'a>(
            &'a self,
            _: &'a [HeldLease],
        ) -> BoxFuture<'a, Result<Vec<Extended>, LockError>> {
            Box::pin(std::future::pending())
        }

        fn release<'a>(
            &'a self,
            _: &'a Lease,
            _: Duration,
        ) -> BoxFuture<'a, Result<Release, LockError>> {
            Box::pin(std::future::pending())
        }
    }

    /// A release is remembered for its time, then forgotten; forgetting keeps pace with
    /// remembering, so the memory holds about the releases of one memory's time.
    #[tokio::test(start_paused = true)]
    async fn released_owners_are_remembered_for_their_time_then_forgotten() {
        let lasts = Duration::from_secs(7);
        let mut memory = ReleaseMemory::new(lasts);
        let start = Instant::now();
        for i in 0..1_000u64 {
            memory.remember(i, start + Duration::from_millis(i * 10));
        }
        let last = start + Duration::from_millis(9_990);
        assert!(memory.remembers(&300, last), "remembered until 10 s");
        assert!(!memory.remembers(&299, last), "forgotten at 9.99 s");
        assert_eq!(
            memory.until.len(),
            700,
            "only those of the last 7 s are kept"
        );
        let end = start + Duration::from_millis(16_990);
        assert!(memory.remembers(&999, end - Duration::from_millis(1)));
        assert!(!memory.remembers(&999, end));
        memory.remember(1_000, end);
        assert_eq!((memory.until.len(), memory.order.len()), (1, 1));
    }

    /// A custom backend that offers the mutex alone refuses the other kinds before sending
    /// anything, naming the stores that offer them.
    #[tokio::test]
    async fn a_kind_not_offered_is_refused_naming_the_stores_that_offer_it() {
        let client = LockClient::from_backend(RequiredOnly);
        let kinds = [
            LockKind::Read,
            LockKind::Semaphore { permits: 2 },
            LockKind::Segmented { shards: 2 },
        ];
        for kind in kinds {
            match client.request("k", kind).give_up().acquire().await {
                Err(LockError::InvalidConfig { reason }) => {
                    let offered = format!("does not offer {} locks", kind.name());
                    assert!(reason.contains(&offered), "{reason}");
                    assert!(
                        reason.contains("PostgreSQL, MySQL, ZooKeeper and etcd offer them"),
                        "{reason}"
                    );
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_backend_without_operator_methods_says_what_it_does_not_offer() {
        let admin = LockClient::from_backend(RequiredOnly).admin();
        let grant = Grant {
            owner: owner_tag("o"),
            token: Some(1),
        };
        let refusals = [
            ("listing locks", admin.list("*").await.err()),
            ("inspecting a lock", admin.inspect("k").await.err()),
            (
                "releasing a lock by force",
                admin.force_release_of("k", grant).await.err(),
            ),
        ];
        for (what, refusal) in refusals {
            match refusal {
                Some(LockError::InvalidConfig { reason }) => {
                    assert!(
                        reason.contains(&format!("does not offer {what}")),
                        "{reason}"
                    )
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}
