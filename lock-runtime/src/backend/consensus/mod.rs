//! Locks as a line of entries in a consensus store: ZooKeeper (the lock recipe of its
//! documentation, as Curator's InterProcessMutex) and, on the same rules, etcd.
//!
//! A key is a directory of entries (ZooKeeper: a container node; etcd: a key prefix), one per
//! owner that holds or waits for the key, each tied to the client's session (ZooKeeper:
//! ephemeral nodes; etcd: keys attached to the client's lease) and ordered by creation
//! (sequence number, create revision). The oldest live entry holds the key; the others
//! wait, each watching only the entry ahead of it (no herd). A release deletes its entry; the
//! next waiter's client, told by its watch, takes the key over and announces the hand-off.
//! A client whose session ends loses every entry with it: a holder that died or froze past
//! the session timeout frees the key.
//!
//! Leases on top of sessions: each entry says what it is and how long it lasts unrenewed
//! (the lease, the place in line, the `min_hold_ms` keep). The owner rewrites a lease to
//! renew it; a client that has seen a held or kept entry ahead of its own unchanged for that
//! long, on its own clock, deletes it (version-checked, so that a renewal in between wins).
//! A waiting entry's place is counted by its owner's client, which deletes the entry when the
//! waiter stops attempting (renewing a place writes nothing); others delete a waiting entry
//! only once it has stood unchanged at the head for its place, where its owner's client would
//! have taken the key at once. The owner counts
//! its lease from when it sent the write, before anyone could see it: an entry is never
//! deleted while its owner counts it valid (clocks running at the same rate). The store's
//! session timeout also bounds every lease: a client that cannot reach the store stops
//! counting its leases valid before the store can end its session
//! ([`Capabilities::longest_lease`](crate::backend::Capabilities::longest_lease)).
//!
//! Read/write locks are ZooKeeper's shared-lock recipe on the same line: an entry says its kind; a
//! reader waits only for the writers ahead of it (and watches the nearest), a writer for
//! every entry ahead (and watches the one right ahead). Semaphores are Curator's semaphore on
//! the same line: an entry says its count, and holds a permit while fewer entries are ahead
//! of it than its count and every count ahead (the smallest count wins, as on every store);
//! a waiting permit watches the oldest entry, which leaves first when leases are alike, and
//! learns of other departures at its next attempt (so every permit waiter wakes at each
//! change of the oldest entry: a herd, unlike the mutex's one watch per waiter). Segmented
//! locks go in line order: an entry holds a shard once every entry ahead has claimed one and
//! a shard below its count is neither claimed ahead nor exhausted, and then writes its claim
//! into its entry (kept until the entry goes). An entry claims only after reading every claim
//! ahead, and those behind wait for its claim, so no two claim one shard; a stale read shows
//! fewer claims, and only makes an entry wait. A shard waiter watches the oldest entry, as a
//! permit's does. Exhausted shards are kept beside the line, for good, written only while
//! the marking grant's entry is in line. A line serves one family: the mutex, readers and
//! writers, permits, or shards.
//!
//! Fencing tokens are each entry's creation id (ZooKeeper's czxid, etcd's create revision):
//! the store's global counter, so strictly increasing in line order, which is grant order
//! for the mutex and a writer (a permit further back may be granted before one ahead).
//! The line is always fair: a free key goes to its oldest waiter, whatever the mode.

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(test)]
mod races;
mod state;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use self::state::{Admission, EntryKind, State};
use super::sharing::every_shard_exhausted;
use super::{
    Acquire, AsyncBackend, AsyncOperator, AsyncResults, AsyncShardMarks, BoxFuture, Extended,
    HeldLease, Lease, Published, Release, ReleaseMemory, ReleaseWatch, ResultChange, ResultStore,
    SharedResult, Turn, foreign_result, owned_grant, release_memory,
};
use crate::backend::{
    Capabilities, ForcedRelease, Grant, Holding, LockState, OperatorBackend, OwnedGrant,
    OwnerPrefix, ShardMarks, SharedGrant, Waiter,
};
use crate::background::Background;
use crate::glob::Glob;
use crate::release_hub::{ReleaseEvent, ReleaseHub, owner_tag};
use crate::sync::lock_ignoring_poison;
use crate::{LockError, MAX_SHARDS};

/// One entry of a key's line, as read from the store.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Where it is in the store (ZooKeeper: its path; etcd: its key).
    pub(crate) id: String,
    /// Its owner token.
    pub(crate) owner: String,
    /// Its place in line: lower is older.
    pub(crate) order: u64,
    /// Its fencing token: the store's id of its creation.
    pub(crate) token: u64,
    /// Its data version: every write changes it.
    pub(crate) version: i64,
    /// The kind of lock it is for.
    pub(crate) kind: EntryKind,
    pub(crate) state: State,
    /// The client session it belongs to (a count of this client's sessions).
    pub(crate) session: u64,
}

/// Data a store keeps beside a line (a single-flight value, `<token> <value>`; the exhausted
/// shards), and its version.
pub(crate) type Kept = Option<(Vec<u8>, i64)>;

/// What a store must offer for a line of entries: the ZooKeeper and etcd glue.
pub(crate) trait ConsensusStore: Send + Sync + std::fmt::Debug + 'static {
    /// Appends an entry of `owner` for a `kind` lock to `key`'s line, in the current session.
    fn enter<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        kind: EntryKind,
        state: State,
    ) -> BoxFuture<'a, Result<Entry, LockError>>;

    /// `key`'s line, oldest first.
    fn line<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<Entry>, LockError>>;

    /// Writes `state` into `entry` (of its kind) if it still has `version` (any version:
    /// `None`); its new version, or `None` if it is gone (or has another version).
    fn write<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        state: State,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<Option<i64>, LockError>>;

    /// Deletes `entry` if it still has `version` (any version: `None`); whether it did.
    fn remove<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// A future that completes when `entry` changes or goes (or the session ends), once the
    /// store watches it; `None` if it is gone already.
    fn watch<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>>;

    /// Every key with a line (or that had one lately).
    fn keys(&self) -> BoxFuture<'_, Result<Vec<String>, LockError>>;

    /// The single-flight value kept for `key` (`action = Share`), as written, and its
    /// version; `None` when there is none.
    fn result<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>>;

    /// A future that completes when `key`'s single-flight value is written or goes (or the
    /// session ends), once the store watches it; `None` where the store cannot watch it.
    fn watch_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>> {
        let _ = key;
        Box::pin(async { Ok(None) })
    }

    /// Writes `data` as `key`'s single-flight value if it still has `version` (`None`: if
    /// there is none) and `holder`'s entry is still in the line, tied to the current
    /// session; whether it did.
    fn put_result<'a>(
        &'a self,
        key: &'a str,
        data: &'a [u8],
        version: Option<i64>,
        holder: &'a Entry,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// The shards of `key`'s segmented locks marked exhausted (see [`encode_marks`]), as
    /// written, and their version; `None` when none are.
    fn marks<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>>;

    /// Writes `data` as `key`'s exhausted shards if they still have `version` (`None`: if
    /// there are none), kept for good (not tied to a session); empty `data` is none (a store
    /// whose versions start over when data is made again keeps it, empty). With `holder`,
    /// only while that entry is still in the line. Whether it did.
    fn put_marks<'a>(
        &'a self,
        key: &'a str,
        data: &'a [u8],
        version: Option<i64>,
        holder: Option<&'a Entry>,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Restarts the session's timeout, if the calls above do not (etcd's lease needs a
    /// keep-alive; any ZooKeeper request restarts its session's). Sent beside every acquire
    /// and renewal: a grant counts from when it was sent, so the session must too.
    fn refresh(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The current session's count: entries of an earlier one are gone.
    fn session(&self) -> u64;

    /// How long the store keeps a session it does not hear from.
    fn session_timeout(&self) -> Duration;
}

/// A lock backend on a line of entries in `S`; see the [module](self) docs.
pub(crate) struct ConsensusBackend<S: ConsensusStore> {
    shared: Arc<Shared<S>>,
}

impl<S: ConsensusStore> std::fmt::Debug for ConsensusBackend<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsensusBackend")
            .field("store", &self.shared.store)
            .finish_non_exhaustive()
    }
}

struct Shared<S> {
    store: S,
    hub: Arc<ReleaseHub>,
    /// This client's entries, by key and owner.
    ours: Mutex<HashMap<(String, String), Ours>>,
    /// Per key, when this client first saw each entry at its current version.
    sightings: Mutex<HashMap<String, HashMap<String, Sighting>>>,
    /// This client's releases of held entries, for as long as a resend of one may follow
    /// (counting the session timeout as the response timeout), so that a release sent again
    /// after a lost reply learns that the first one released.
    released: Mutex<ReleaseMemory<OursKey>>,
    background: Background,
}

/// One of this client's entries.
#[derive(Debug, Clone)]
struct Ours {
    entry: Entry,
    /// The lease its owner asked for (a hand-off grants it).
    ttl: Duration,
    /// Until when its place in line lasts, while it waits.
    place_until: Option<Instant>,
    /// Whether a task watches the entry ahead of it.
    following: bool,
    /// Whether a release of it was sent (and may have taken effect).
    release_sent: bool,
}

#[derive(Debug, Clone, Copy)]
struct Sighting {
    version: i64,
    since: Instant,
    /// When it was first seen at the head of the line, at this version.
    at_head_since: Option<Instant>,
}

/// Where an owner stands in a key's line.
enum Standing {
    /// The owner has no entry there.
    Missing,
    /// Its entry is the oldest live one: the key is its.
    Head(Entry),
    /// Its entry is kept after its release (`min_hold_ms`): a late copy of its attempt takes
    /// no second grant. The entry's token, and how long it lasts yet.
    Kept(u64, Option<Duration>),
    /// Live entries it waits for are ahead of it.
    Behind(Box<Behind>),
}

struct Behind {
    mine: Entry,
    /// The live entry it watches: the nearest it waits for (a permit: the oldest; a shard:
    /// the nearest that has not claimed yet, else the oldest).
    predecessor: Entry,
    /// The oldest live entry it waits for.
    head: Entry,
    /// How long the first of those to lapse lasts unrenewed yet (`None`: none lapses).
    soonest_left: Option<Duration>,
    /// Whether it is a segmented lock that only waits for the claims of those ahead, with a
    /// shard left for it after them.
    claims_pending: bool,
}

impl<S: ConsensusStore> ConsensusBackend<S> {
    pub(crate) fn new(store: S, background: Background) -> ConsensusBackend<S> {
        let memory = ReleaseMemory::new(release_memory(store.session_timeout()));
        ConsensusBackend {
            shared: Arc::new(Shared {
                store,
                hub: Arc::default(),
                ours: Mutex::default(),
                sightings: Mutex::default(),
                released: Mutex::new(memory),
                background,
            }),
        }
    }
}

type OursKey = (String, String);

fn ours_key(lease: &Lease) -> OursKey {
    (lease.key.clone(), lease.owner.clone())
}

impl<S: ConsensusStore> Shared<S> {
    /// This client's entry for `lease`, if it belongs to the current session.
    fn ours(&self, id: &OursKey) -> Option<Ours> {
        let session = self.store.session();
        let mut ours = lock_ignoring_poison(&self.ours);
        match ours.get(id) {
            Some(entry) if entry.entry.session == session => Some(entry.clone()),
            Some(_) => {
                ours.remove(id);
                None
            }
            None => None,
        }
    }

    fn update(&self, id: &OursKey, change: impl FnOnce(&mut Ours)) {
        if let Some(ours) = lock_ignoring_poison(&self.ours).get_mut(id) {
            change(ours);
        }
    }

    fn forget(&self, id: &OursKey) {
        lock_ignoring_poison(&self.ours).remove(id);
    }

    /// Records when each entry of `key`'s line was first seen at its version (and, for the
    /// first, at the head); returns how long each lasts unrenewed yet, counted as others may
    /// count it (`None`: nobody but its owner ends it). A held or kept entry lasts its lease
    /// or keep from when it was seen at its version. A waiting entry lasts its place from when
    /// it was seen at the head: its owner's client takes the key as soon as it gets there (a
    /// write), so one that stays unchanged there for its place has nobody behind it any more
    /// (its request gone, its client cut off); further back, only its owner ends it.
    /// `exhausted` are the key's exhausted shards.
    fn sight(&self, key: &str, line: &[Entry], exhausted: &[u32]) -> Vec<Option<Duration>> {
        let now = Instant::now();
        let mut sightings = lock_ignoring_poison(&self.sightings);
        let seen = sightings.remove(key).unwrap_or_default();
        let mut fresh = HashMap::with_capacity(line.len());
        // An entry that would hold the key with the entries ahead of it is at the head.
        let mut admission = Admission::skipping(exhausted);
        let left = line
            .iter()
            .map(|entry| {
                // A segmented lock whose every shard is exhausted is at the head too: its
                // client refuses it at its next attempt, so one that stays has stopped.
                let stopped = every_shard_exhausted(entry.kind.lock_kind(), exhausted)
                    && entry.kind.shard().is_none();
                let at_head = admission.next(entry.kind) || stopped;
                let mut sighting = match seen.get(&entry.id) {
                    Some(seen) if seen.version == entry.version => *seen,
                    _ => Sighting {
                        version: entry.version,
                        since: now,
                        at_head_since: None,
                    },
                };
                if at_head {
                    sighting.at_head_since.get_or_insert(now);
                }
                fresh.insert(entry.id.clone(), sighting);
                let since = match entry.state {
                    State::Held(_) | State::Kept(_) => sighting.since,
                    State::Waiting { .. } => sighting.at_head_since?,
                    State::Foreign => return None,
                };
                let lasts = entry.state.lasts()?;
                Some(lasts.saturating_sub(now - since))
            })
            .collect();
        if !fresh.is_empty() {
            sightings.insert(key.to_owned(), fresh);
        }
        left
    }

    /// `key`'s line, and the shards its segmented locks may not claim (read only when a
    /// segmented lock is in line).
    async fn read_line(&self, key: &str) -> Result<(Vec<Entry>, Vec<u32>), LockError> {
        let line = self.store.line(key).await?;
        let shards = line
            .iter()
            .any(|e| matches!(e.kind, EntryKind::Shard { .. }));
        let exhausted = match shards {
            true => self.exhausted(key).await?.0,
            false => Vec::new(),
        };
        Ok((line, exhausted))
    }

    /// `key`'s exhausted shards, ascending, and the version of their data.
    async fn exhausted(&self, key: &str) -> Result<(Vec<u32>, Option<i64>), LockError> {
        match self.store.marks(key).await? {
            None => Ok((Vec::new(), None)),
            Some((data, version)) => match decode_marks(&data) {
                Some(marks) => Ok((marks, Some(version))),
                None => Err(LockError::key_in_use(
                    key,
                    "the key's exhausted shards hold data fencelock did not write: delete \
                     them, or give fencelock a root or prefix of its own",
                )),
            },
        }
    }

    /// Changes `key`'s exhausted shards with `change`, over the version read (again if
    /// another client changed them meanwhile); with `holder`, only while that entry is in
    /// line: `false` once it is not.
    async fn change_marks(
        &self,
        key: &str,
        holder: Option<&Entry>,
        change: impl Fn(&mut Vec<u32>),
    ) -> Result<bool, LockError> {
        for _ in 0..MARK_TRIES {
            let (mut marks, version) = self.exhausted(key).await?;
            change(&mut marks);
            let data = encode_marks(&marks);
            if self.store.put_marks(key, &data, version, holder).await? {
                return Ok(true);
            }
            if let Some(holder) = holder {
                let line = self.store.line(key).await?;
                let there = |e: &Entry| e.id == holder.id && e.token == holder.token;
                if !line.iter().any(there) {
                    return Ok(false);
                }
            }
        }
        Err(LockError::backend(
            Some(key),
            format!(
                "the key's exhausted shards changed under each of {MARK_TRIES} writes in a row"
            ),
            None,
        ))
    }

    /// Where `owner` stands in `key`'s line, after deleting the entries ahead of it that
    /// lapsed and any second entry of its own (an enter sent again after a lost reply).
    async fn stand(&self, key: &str, owner: &str) -> Result<Standing, LockError> {
        let (line, exhausted) = self.read_line(key).await?;
        let left = self.sight(key, &line, &exhausted);
        let Some(at) = line.iter().position(|entry| entry.owner == owner) else {
            return Ok(Standing::Missing);
        };
        let kind = line[at].kind;
        if let Some(foreign) = line[..at].iter().find(|e| e.state == State::Foreign) {
            return Err(LockError::key_in_use(
                key,
                format!(
                    "{} holds data fencelock did not write: delete it, or give fencelock a \
                     root or prefix of its own",
                    foreign.id
                ),
            ));
        }
        for second in line[at + 1..].iter().filter(|entry| entry.owner == owner) {
            self.store.remove(key, second, None).await?;
        }
        if let State::Kept(_) = line[at].state {
            return Ok(Standing::Kept(line[at].token, left[at]));
        }
        // No release would let in a segmented lock whose every shard is exhausted (one that
        // claimed a shard holds it, and is renewed).
        if kind.shard().is_none() && every_shard_exhausted(kind.lock_kind(), &exhausted) {
            return Err(LockError::exhausted(key, None));
        }
        let mine = line[at].clone();
        // After an enter sent twice, the older entry is the one that counts.
        self.update(&(key.to_owned(), owner.to_owned()), |ours| {
            if ours.entry.id != mine.id {
                ours.entry = mine.clone();
            }
        });
        let mut survivors = Vec::new();
        for (entry, left) in line[..at].iter().zip(left) {
            let lapsed = left == Some(Duration::ZERO);
            if lapsed && self.store.remove(key, entry, Some(entry.version)).await? {
                tracing::debug!(target: "fencelock", key, owner = %owner_tag(&entry.owner), "deleted an entry that lapsed");
                continue;
            }
            survivors.push((entry, left));
        }
        // The key's family is its oldest live entry's (after the lapsed ones went): an entry
        // of another family behind that one is a request being refused (it deletes itself),
        // which must not refuse the requests of the key's family.
        if let Some((other, _)) = survivors.first().filter(|(e, _)| !e.kind.mixes_with(kind)) {
            return Err(LockError::key_in_use(
                key,
                format!(
                    "the key is held by {} locks, and this request is for {} locks: use one \
                     kind of lock per key",
                    other.kind.name(),
                    kind.name()
                ),
            ));
        }
        let mut live = Vec::new();
        let mut admission = Admission::skipping(&exhausted);
        // The segmented locks ahead that have not claimed a shard yet, and the nearest.
        let (mut unclaimed, mut nearest_unclaimed) = (0, None);
        for (entry, left) in survivors {
            if !entry.kind.mixes_with(kind) {
                continue;
            }
            if let EntryKind::Shard { shard: None, .. } = entry.kind {
                unclaimed += 1;
                nearest_unclaimed = Some(entry.clone());
            }
            admission.next(entry.kind);
            // An entry this one does not wait for (a reader ahead of a reader) is no obstacle.
            if kind.waits_for(entry.kind) {
                live.push((entry.clone(), left));
            }
        }
        // At the head, a segmented lock claims a free shard, looking from a random one on.
        let at_head = Entry {
            kind: match kind {
                EntryKind::Shard { count, shard: None } => EntryKind::Shard {
                    count,
                    shard: admission.free_shard(count, crate::random::below(count)),
                },
                kind => kind,
            },
            ..mine.clone()
        };
        if admission.next(kind) {
            return Ok(Standing::Head(at_head));
        }
        // The soonest any of them can lapse (several readers may hold ahead of a writer).
        let soonest_left = live.iter().filter_map(|(_, left)| *left).min();
        let (Some((head, _)), Some((nearest, _))) = (live.first().cloned(), live.pop()) else {
            return Ok(Standing::Head(at_head));
        };
        // A segmented lock behind one that has not claimed yet waits for that claim, and has
        // a shard of its own then if enough are free for every claim ahead.
        let claims_pending = match kind {
            EntryKind::Shard { count, .. } => {
                nearest_unclaimed.is_some() && admission.free_shards(count) > unclaimed
            }
            _ => false,
        };
        // A permit or shard waits for any entry ahead to leave: the oldest, likely the first.
        let predecessor = match nearest_unclaimed {
            Some(claiming) => claiming,
            None if kind.counts() => head.clone(),
            None => nearest,
        };
        Ok(Standing::Behind(Box::new(Behind {
            mine,
            predecessor,
            head,
            soonest_left,
            claims_pending,
        })))
    }

    /// Takes the key for `id`'s entry, at the head of the line: writes its lease (the longer
    /// of `ttl` and the one it holds already: a late copy of an attempt never shortens a
    /// lease). `None` if the entry is gone or changed since `mine` was read; else its token,
    /// and until when its place lasted (a watch counted its lease from it).
    async fn claim(
        &self,
        id: &OursKey,
        mine: &Entry,
        ttl: Duration,
    ) -> Result<Option<(u64, Option<Instant>)>, LockError> {
        let ttl = match mine.state {
            State::Held(held) => held.max(ttl),
            _ => ttl,
        };
        if matches!(mine.kind, EntryKind::Shard { shard: None, .. }) {
            // No shard was free after all: nothing to claim.
            return Ok(None);
        }
        // Only over the version read: a request's attempt and this client's watch may both
        // find the entry at the head, and the second claim must not write its lease (a
        // watch's: at most the place left) over the first's.
        let written = self
            .store
            .write(&id.0, mine, State::Held(ttl), Some(mine.version));
        let Some(version) = written.await? else {
            return Ok(None);
        };
        let mut place_until = None;
        self.update(id, |ours| {
            ours.entry.version = version;
            ours.entry.kind = mine.kind;
            ours.entry.state = State::Held(ttl);
            place_until = ours.place_until.take();
        });
        Ok(Some((mine.token, place_until)))
    }

    async fn acquire(self: &Arc<Self>, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        let id = ours_key(lease);
        let Some(kind) = EntryKind::of(lease.kind) else {
            return Err(LockError::invalid_config(format!(
                "this backend does not offer {} locks",
                lease.kind.name()
            )));
        };
        let sent_at = Instant::now();
        // Another pass when the entry changed under the one before (this client's watch
        // claimed it, or another client deleted it once its place lapsed) and when it
        // vanished (its session ended, or that delete): then it enters anew. Also after a
        // wait for the claims ahead (below).
        let mut claim_waits = 0;
        for _ in 0..3 + CLAIM_WAITS {
            let entered: Option<Entry> = match self.ours(&id) {
                Some(_) => None,
                None => {
                    let entry = self
                        .store
                        .enter(&lease.key, &lease.owner, kind, State::Held(lease.ttl))
                        .await?;
                    lock_ignoring_poison(&self.ours).insert(
                        id.clone(),
                        Ours {
                            entry: entry.clone(),
                            ttl: lease.ttl,
                            place_until: None,
                            following: false,
                            release_sent: false,
                        },
                    );
                    Some(entry)
                }
            };
            let standing = match self.stand(&lease.key, &lease.owner).await {
                Err(refused @ (LockError::KeyInUse { .. } | LockError::Exhausted { .. })) => {
                    // Refused before waiting: the entry goes at once, not with the cleanup.
                    if let Some(ours) = self.ours(&id) {
                        self.store.remove(&lease.key, &ours.entry, None).await?;
                    }
                    self.forget(&id);
                    return Err(refused);
                }
                standing => standing?,
            };
            match standing {
                Standing::Missing => self.forget(&id),
                Standing::Kept(token, remaining) => {
                    self.forget(&id);
                    return Ok(Acquire::Held {
                        remaining,
                        latest_token: token,
                    });
                }
                Standing::Head(mine) => {
                    // A fresh entry at the head holds the lease it was created with (a
                    // segmented lock's still has to claim its shard).
                    let fresh = entered.as_ref();
                    let claims = matches!(mine.kind, EntryKind::Shard { .. });
                    if !claims
                        && fresh.is_some_and(|e| e.id == mine.id && e.version == mine.version)
                    {
                        return Ok(granted(mine.token, None));
                    }
                    if let Some((token, _)) = self.claim(&id, &mine, lease.ttl).await? {
                        return Ok(granted(token, mine.kind.shard()));
                    }
                }
                Standing::Behind(behind) => {
                    let Behind {
                        mine,
                        predecessor,
                        head,
                        soonest_left,
                        claims_pending,
                    } = *behind;
                    let held = Acquire::Held {
                        remaining: soonest_left,
                        latest_token: head.token,
                    };
                    // Even one that gives up at once waits for the claims ahead when a shard
                    // is left for it after them: each is a round trip away, and giving up
                    // would refuse a request that a free shard awaits.
                    if turn.place().is_none() && claims_pending && claim_waits < CLAIM_WAITS {
                        claim_waits += 1;
                        if let Some(changed) = self.store.watch(&lease.key, &predecessor).await? {
                            let _ = tokio::time::timeout(CLAIM_WAIT, changed).await;
                        }
                        continue;
                    }
                    let Some(place) = turn.place() else {
                        self.store.remove(&lease.key, &mine, None).await?;
                        self.forget(&id);
                        return Ok(held);
                    };
                    // The place is renewed here, in this client; the store learns only
                    // of a change (what an operator sees).
                    let state = waiting(place, lease.ttl);
                    // Only over the version read: this client's watch may have taken the
                    // key for the entry meanwhile (and announced it), which a waiting state
                    // written over it would undo. The next pass reads the line again.
                    let version = match mine.state == state {
                        true => mine.version,
                        false => {
                            let written =
                                self.store
                                    .write(&lease.key, &mine, state, Some(mine.version));
                            match written.await? {
                                Some(version) => version,
                                None => continue,
                            }
                        }
                    };
                    let follow = {
                        let mut ours = lock_ignoring_poison(&self.ours);
                        match ours.get_mut(&id) {
                            // The watch claimed the key meanwhile, for the place it read
                            // before this attempt: the next pass takes it for the lease.
                            Some(ours) if ours.entry.version > version => continue,
                            Some(ours) => {
                                ours.entry.version = version;
                                ours.entry.state = state;
                                ours.ttl = lease.ttl;
                                ours.place_until = Some(sent_at + place);
                                !std::mem::replace(&mut ours.following, true)
                            }
                            None => false,
                        }
                    };
                    if follow {
                        let shared = self.clone();
                        let following = id.clone();
                        let spawned = self
                            .background
                            .spawn(async move { shared.follow(following).await });
                        if spawned.is_err() {
                            self.update(&id, |ours| ours.following = false);
                        }
                    }
                    return Ok(held);
                }
            }
        }
        Err(LockError::backend(
            Some(&lease.key),
            "the lock's entry in line changed or vanished under the attempt again and again (the \
             store's session ended, or this client's watch claimed it meanwhile)",
            None,
        ))
    }

    /// While `id` waits: watches the entry ahead of it, and when it is at the head, takes the
    /// key and announces the hand-off. Ends when its place lapses, the key is its, or it is
    /// gone.
    async fn follow(self: Arc<Self>, id: OursKey) {
        /// Deletes of a lapsed place sent again: past the longest session at this pause.
        const MAX_TRIES: u32 = 600;
        const RETRY_PAUSE: Duration = Duration::from_millis(200);
        let key = id.0.as_str();
        let mut tries = 0;
        let outcome = loop {
            let Some(ours) = self.ours(&id) else {
                break Ok(None);
            };
            let Some(place_until) = ours.place_until else {
                break Ok(None);
            };
            let now = Instant::now();
            if now >= place_until {
                // The waiter stopped attempting: its place goes to the next one. A delete that
                // fails is sent again while the session lasts (the entry goes with it).
                // Version-checked: an attempt of the waiter may have just taken the key.
                let waiting = Some(ours.entry.version);
                let removed = self.store.remove(key, &ours.entry, waiting).await;
                let still_there = match removed {
                    Ok(false) => !matches!(self.stand(key, &id.1).await, Ok(Standing::Missing)),
                    _ => false,
                };
                match removed {
                    // Taken meanwhile: the claim ends the place, as the next turn sees.
                    Ok(false) if still_there && tries < MAX_TRIES => {
                        tries += 1;
                        tokio::time::sleep(RETRY_PAUSE / 10).await;
                        continue;
                    }
                    Err(_) if ours.entry.session == self.store.session() && tries < MAX_TRIES => {
                        tries += 1;
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    removed => {
                        self.forget(&id);
                        break removed.map(|_| None);
                    }
                }
            }
            let predecessor = match self.stand(key, &id.1).await {
                Ok(Standing::Missing) => {
                    self.forget(&id);
                    break Ok(Some(ReleaseEvent::Interrupted));
                }
                // Only a waiting entry is the watch's to take: held, the waiter's attempt took
                // the key; kept, it has been released since.
                Ok(Standing::Head(mine)) if !matches!(mine.state, State::Waiting { .. }) => {
                    break Ok(None);
                }
                Ok(Standing::Kept(..)) => break Ok(None),
                Ok(Standing::Head(mine)) => {
                    // For the waiter's lease, but no longer than its place: a waiter that
                    // stopped attempting holds the key no longer than either.
                    let lease = ours.ttl.min(place_until - now);
                    break match self.claim(&id, &mine, lease).await {
                        // Announced only while the place it was counted from is the latest:
                        // the waiter counts a hand-off from its last attempt answered, and
                        // one answered after `place_until` was read would outlast this
                        // lease. Then the waiter's next attempt takes the key instead.
                        Ok(Some((token, replaced))) if replaced == Some(place_until) => {
                            Ok(Some(ReleaseEvent::HandedOver {
                                to: owner_tag(&id.1),
                                token,
                                slot: mine.kind.shard(),
                            }))
                        }
                        Ok(_) => Ok(Some(ReleaseEvent::Interrupted)),
                        Err(error) => Err(error),
                    };
                }
                Ok(Standing::Behind(behind)) => *behind,
                Err(error) => break Err(error),
            };
            let Behind {
                predecessor,
                soonest_left,
                ..
            } = predecessor;
            let changed = match self.store.watch(key, &predecessor).await {
                Ok(Some(changed)) => changed,
                Ok(None) => continue,
                Err(error) => break Err(error),
            };
            // Wake when an entry ahead could have lapsed, to delete it, or when the place does.
            let wake_at = soonest_left.map_or(place_until, |left| {
                place_until.min(Instant::now() + left + Duration::from_millis(1))
            });
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        };
        self.update(&id, |ours| ours.following = false);
        match outcome {
            Ok(Some(event)) => self.hub.announce(key, event),
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(target: "fencelock", key, error = %crate::WithSources(&error), "a waiter's watch failed; its waiters try again");
                self.hub.announce(key, ReleaseEvent::Interrupted);
            }
        }
    }

    async fn extend_one(&self, held: &HeldLease) -> Result<bool, LockError> {
        let id = ours_key(&held.lease);
        // The same grant, and the same shard (a stray copy naming another is not it).
        let same =
            |ours: &Ours| ours.entry.token == held.token && ours.entry.kind.shard() == held.slot;
        let Some(ours) = self.ours(&id).filter(same) else {
            return Ok(false);
        };
        let state = State::Held(held.lease.ttl);
        // Only over a held version of the entry: a release's kept entry written meanwhile is
        // not revived. A version changed by another write of this client (a second renewal
        // in the same batch) is read again and written over.
        let key = &held.lease.key;
        let mut entry = ours.entry.clone();
        for _ in 0..3 {
            if let Some(version) = self
                .store
                .write(key, &entry, state, Some(entry.version))
                .await?
            {
                self.update(&id, |ours| {
                    ours.entry.version = version;
                    ours.entry.state = state;
                });
                return Ok(true);
            }
            let line = self.store.line(key).await?;
            match line
                .into_iter()
                .find(|e| e.id == entry.id && e.token == entry.token)
            {
                // Its own kind: a late copy of its enter (etcd applies one late) may have
                // written over the shard it claimed.
                Some(now) if matches!(now.state, State::Held(_)) => {
                    entry = Entry {
                        session: entry.session,
                        kind: entry.kind,
                        ..now
                    }
                }
                _ => break,
            }
        }
        self.forget(&id);
        Ok(false)
    }

    async fn release(
        self: &Arc<Self>,
        lease: &Lease,
        min_hold: Duration,
    ) -> Result<Release, LockError> {
        let id = ours_key(lease);
        let (entries, sent_before) = match self.ours(&id) {
            Some(ours) => (vec![ours.entry], ours.release_sent),
            None if self.released_lately(&id) => return Ok(Release::Released),
            // Not known here (an entry whose reply was lost): looked up.
            None => {
                let line = self.store.line(&lease.key).await?;
                let mine = line.into_iter().filter(|entry| entry.owner == lease.owner);
                (mine.collect(), false)
            }
        };
        self.update(&id, |ours| ours.release_sent = true);
        let mut released = false;
        for entry in &entries {
            let held = matches!(entry.state, State::Held(_));
            if held && !min_hold.is_zero() {
                if let Some(version) = self
                    .store
                    .write(&lease.key, entry, State::Kept(min_hold), None)
                    .await?
                {
                    self.remove_later(&lease.key, entry, version, min_hold);
                    released = true;
                    continue;
                }
            } else if self.store.remove(&lease.key, entry, None).await? {
                released |= held;
                continue;
            }
            // Gone: the first send of this release deleted it, or its lease had ended.
            released |= held && sent_before;
        }
        self.forget(&id);
        if !released {
            return Ok(Release::NotOwner);
        }
        // Waiters of this client in line are told by their own watches (the next one with
        // the hand-off); a watch with no waiter behind it hears of the release here, as does
        // a permit, whose waiters watch the oldest entry only.
        if !self.waits_here(&lease.key) || entries.iter().any(|e| e.kind.counts()) {
            let token = min_hold
                .is_zero()
                .then(|| entries.first().map(|e| e.token))
                .flatten();
            self.hub
                .announce(&lease.key, ReleaseEvent::Released { token });
        }
        lock_ignoring_poison(&self.released).remember(id, Instant::now());
        Ok(Release::Released)
    }

    /// Whether an entry of this client waits in `key`'s line.
    fn waits_here(&self, key: &str) -> bool {
        let ours = lock_ignoring_poison(&self.ours);
        ours.iter()
            .any(|((k, _), ours)| k == key && ours.place_until.is_some())
    }

    fn released_lately(&self, id: &OursKey) -> bool {
        lock_ignoring_poison(&self.released).remembers(id, Instant::now())
    }

    /// Deletes a kept entry once its keep has passed (if nobody else did: version-checked).
    fn remove_later(self: &Arc<Self>, key: &str, entry: &Entry, version: i64, min_hold: Duration) {
        let shared = self.clone();
        let (key, kept) = (key.to_owned(), entry.clone());
        let removing = self.background.spawn(async move {
            tokio::time::sleep(min_hold).await;
            let _ = shared.store.remove(&key, &kept, Some(version)).await;
        });
        if removing.is_err() {
            tracing::debug!(target: "fencelock", key = %entry.id, "no background runtime: a kept entry lapses when a waiter sees it");
        }
    }

    async fn inspect(&self, key: &str) -> Result<LockState, LockError> {
        let (line, exhausted) = self.read_line(key).await?;
        let left = self.sight(key, &line, &exhausted);
        let mut state = LockState::free(key);
        let holders = holder_count(&line, &exhausted);
        if !line.is_empty() {
            state.holding = holding(&line[..holders], &left);
        }
        let ours = lock_ignoring_poison(&self.ours).clone();
        let now = Instant::now();
        state.queue = line
            .iter()
            .zip(left)
            .skip(holders)
            .map(|(entry, left)| {
                // A waiter of this client: its place as counted here; another's: the place
                // it asked for, which its own client counts.
                let mine = ours.get(&(key.to_owned(), entry.owner.clone()));
                let place = match (mine.and_then(|o| o.place_until), entry.state) {
                    (Some(until), _) => Some(until.saturating_duration_since(now)),
                    (None, State::Waiting { place, .. }) => Some(place),
                    (None, _) => left,
                };
                Waiter {
                    owner: owner_tag(&entry.owner),
                    lease: match entry.state {
                        State::Waiting { ttl, .. } | State::Held(ttl) => Some(ttl),
                        State::Kept(_) | State::Foreign => None,
                    },
                    place_left: place.filter(|left| !left.is_zero()),
                }
            })
            .collect();
        state.waiters = state
            .queue
            .iter()
            .filter(|w| w.place_left.is_some())
            .count();
        Ok(state)
    }

    async fn force_release(&self, key: &str, grant: Grant) -> Result<ForcedRelease, LockError> {
        let (line, exhausted) = self.read_line(key).await?;
        let left = self.sight(key, &line, &exhausted);
        if line.is_empty() {
            return Ok(ForcedRelease::not_held(key));
        }
        let holders = holder_count(&line, &exhausted);
        let mut forced = ForcedRelease::of(key, holding(&line[..holders], &left));
        let token = |entry: &Entry| (!matches!(entry.state, State::Kept(_))).then_some(entry.token);
        let named = line[..holders]
            .iter()
            .find(|entry| grant.is(owner_tag(&entry.owner), token(entry)));
        let Some(ended) = named else {
            return Ok(forced);
        };
        if !self.store.remove(key, ended, None).await? {
            return Ok(forced);
        }
        forced.released = true;
        let token = token(ended);
        // The first entry after the holders holds the key now if the one ended held it alone
        // (its client announces that when it takes it). Only a waiter takes it (not a foreign
        // entry, nor a kept one), and the shard a segmented lock's waiter claims is its own
        // client's choice: its waiters attempt again.
        let next = line.get(holders).filter(|next| {
            let waiting = matches!(next.state, State::Waiting { .. });
            holders == 1 && waiting && !matches!(next.kind, EntryKind::Shard { .. })
        });
        let announced = match next {
            Some(next) => ReleaseEvent::HandedOver {
                to: owner_tag(&next.owner),
                token: next.token,
                slot: None,
            },
            None => ReleaseEvent::Released { token },
        };
        if !self.waits_here(key) || ended.kind.counts() {
            self.hub.announce(key, announced);
        }
        forced.announced = Some(announced);
        Ok(forced)
    }

    /// The grants of `owners` that hold `key` (a waiter's entry at the head holds it too: its
    /// client takes the key as soon as it looks).
    async fn owned(&self, key: &str, owners: &OwnerPrefix) -> Result<Vec<OwnedGrant>, LockError> {
        // Foreign data where the marks are kept leaves the grants listed: their forced
        // release says why it fails, and the sweep goes on with the other keys.
        let (line, exhausted) = match self.read_line(key).await {
            Err(LockError::KeyInUse { .. }) => (self.store.line(key).await?, Vec::new()),
            read => read?,
        };
        let holders = &line[..holder_count(&line, &exhausted)];
        let granted = holders
            .iter()
            .filter(|entry| matches!(entry.state, State::Held(_) | State::Waiting { .. }));
        let owned =
            granted.filter_map(|entry| owned_grant(key, &entry.owner, Some(entry.token), owners));
        Ok(owned.collect())
    }
}

/// How many times a segmented lock's attempt that gives up at once waits for a claim ahead
/// of it (see `Behind::claims_pending`), and how long each time at most (a claim is one round
/// trip of the claiming client; one that froze lapses in its own time).
const CLAIM_WAITS: u32 = 4;
const CLAIM_WAIT: Duration = Duration::from_millis(250);

/// How many times a change of a key's exhausted shards is written again when another client
/// changed them meanwhile.
const MARK_TRIES: u32 = 8;

/// Exhausted shards as a store keeps them: ascending, comma-separated (`0,2,3`); empty for
/// none.
fn encode_marks(marks: &[u32]) -> Vec<u8> {
    let marks: Vec<String> = marks.iter().map(u32::to_string).collect();
    marks.join(",").into_bytes()
}

/// Exhausted shards from what [`encode_marks`] wrote; `None` for anything else.
fn decode_marks(data: &[u8]) -> Option<Vec<u32>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut marks = Vec::new();
    for mark in text.split(',').filter(|_| !text.is_empty()) {
        let plain =
            mark.bytes().all(|b| b.is_ascii_digit()) && (mark == "0" || !mark.starts_with('0'));
        let shard: u32 = mark.parse().ok().filter(|_| plain)?;
        (shard < MAX_SHARDS).then_some(())?;
        marks.push(shard);
    }
    marks.sort_unstable();
    marks.dedup();
    Some(marks)
}

/// A key as one path segment (a ZooKeeper node name, a part of an etcd key): bytes other than ASCII letters, digits, `_`, `:`, `.` and `-` are
/// written `%XX`, as is a name of dots only (ZooKeeper refuses `.` and `..`).
pub(crate) fn node_name(key: &str) -> String {
    let all_dots = key.bytes().all(|b| b == b'.');
    let mut name = String::with_capacity(key.len());
    for byte in key.bytes() {
        let plain = byte.is_ascii_alphanumeric()
            || matches!(byte, b'_' | b':' | b'-')
            || (byte == b'.' && !all_dots);
        if plain {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

/// The key a path segment stands for; `None` for a name fencelock did not write.
pub(crate) fn key_of(name: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(name.len());
    let mut rest = name.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

fn waiting(place: Duration, ttl: Duration) -> State {
    State::Waiting { place, ttl }
}

/// A grant of `token`, of `shard` for a segmented lock.
fn granted(token: u64, shard: Option<u32>) -> Acquire {
    Acquire::Granted { token, slot: shard }
}

/// How many entries at the head of a line hold the key: the first, the readers beside a
/// reader, the permits within the counts.
fn holder_count(line: &[Entry], exhausted: &[u32]) -> usize {
    let mut admission = Admission::skipping(exhausted);
    line.iter()
        .take_while(|entry| admission.next(entry.kind))
        .count()
}

/// Who holds a key whose `holders` (see [`holder_count`]) hold it, as an operator sees it;
/// `left` is how long each entry of the line lasts.
fn holding(holders: &[Entry], left: &[Option<Duration>]) -> Holding {
    match holders.first() {
        Some(head) if head.kind == EntryKind::Mutex => {
            entry_holding(head, left.first().copied().flatten())
        }
        Some(_) => shared_holding(holders, left),
        None => Holding::Free,
    }
}

/// What one entry at the head of a line holds, as an operator sees it.
fn entry_holding(head: &Entry, left: Option<Duration>) -> Holding {
    let remaining = left.unwrap_or(Duration::MAX);
    match head.state {
        State::Kept(_) => Holding::Kept {
            owner: owner_tag(&head.owner),
            remaining,
        },
        State::Foreign => Holding::Foreign {
            reason: format!("{} holds data fencelock did not write", head.id),
        },
        State::Waiting { .. } | State::Held(_) => Holding::Held {
            owner: owner_tag(&head.owner),
            token: Some(head.token),
            remaining,
        },
    }
}

/// Who holds a key that the shared `holders` (readers and a writer, or permits: the head of
/// its line) hold, as an operator sees it; `left` is how long each entry of the line lasts.
fn shared_holding(holders: &[Entry], left: &[Option<Duration>]) -> Holding {
    if let Some(foreign) = holders.iter().find(|entry| entry.state == State::Foreign) {
        return entry_holding(foreign, None);
    }
    let grants: Vec<SharedGrant> = holders
        .iter()
        .zip(left)
        .map(|(entry, left)| SharedGrant {
            owner: owner_tag(&entry.owner),
            // A mutex is never shared: what reads as one here is foreign, shown above.
            kind: entry.kind.lock_kind(),
            slot: entry.kind.shard(),
            token: (!matches!(entry.state, State::Kept(_))).then_some(entry.token),
            remaining: left.unwrap_or(Duration::MAX),
        })
        .collect();
    Holding::shared(grants)
}

// The calls of every lock (see `LockBackend`); each keeps the session alive.
impl<S: ConsensusStore> AsyncBackend for ConsensusBackend<S> {
    async fn try_acquire(&self, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        if lease.replicas > 0 {
            return Err(LockError::invalid_config(
                "min_replicas is for Redis replicas: a consensus store writes every grant to a \
                 majority already; remove min_replicas",
            ));
        }
        let (acquired, refreshed) = tokio::join!(
            self.shared.acquire(lease, turn),
            self.shared.store.refresh()
        );
        // Both answers count from this attempt: a grant's lease, and a place in line that a
        // release may hand the key to later. Either needs the session kept alive from here.
        let acquired = acquired?;
        refreshed.map(|()| acquired)
    }

    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, LockError> {
        // Waiters' own watches announce: nothing to set up in the store.
        let (watch, subscribed) = self.shared.hub.watch(key);
        let _ = subscribed.set(());
        Ok(watch)
    }

    fn watch_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.shared.hub.watch_subscribed(key)
    }

    fn offers(&self) -> Capabilities {
        let session = Some(self.shared.store.session_timeout());
        Capabilities::EVERY_KIND
            .with_always_fair(true)
            .with_longest_lease(session)
    }

    async fn extend_grants(&self, held: &[HeldLease]) -> Result<Vec<Extended>, LockError> {
        let extending = held.iter().map(|held| self.shared.extend_one(held));
        let (extended, refreshed) = tokio::join!(
            futures_util::future::join_all(extending),
            self.shared.store.refresh()
        );
        refreshed?;
        // A lease whose entry could not be written is unknown alone.
        let answers = extended.into_iter().map(|extended| match extended {
            Ok(found) => Extended::found(found),
            Err(error) => Extended::Unknown(error),
        });
        Ok(answers.collect())
    }

    async fn release_grant(&self, lease: &Lease, min_hold: Duration) -> Result<Release, LockError> {
        self.shared.release(lease, min_hold).await
    }

    fn operator_calls(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn result_calls(&self) -> Option<&dyn ResultStore> {
        Some(self)
    }

    fn shard_mark_calls(&self) -> Option<&dyn ShardMarks> {
        Some(self)
    }
}

// Exhausted shards (see `ShardMarks`): a node (ZooKeeper) or key (etcd) next to the key's
// line, kept for good, written only while the marking grant's entry is in line.
impl<S: ConsensusStore> AsyncShardMarks for ConsensusBackend<S> {
    async fn mark(&self, held: &HeldLease) -> Result<bool, LockError> {
        let id = ours_key(&held.lease);
        let holder = self.shared.ours(&id).filter(|ours| {
            let entry = &ours.entry;
            entry.token == held.token
                && entry.kind.shard().is_some()
                && entry.kind.shard() == held.slot
                && matches!(entry.state, State::Held(_))
        });
        let Some((holder, shard)) = holder.and_then(|ours| Some((ours.entry, held.slot?))) else {
            return Ok(false);
        };
        let marking = |marks: &mut Vec<u32>| {
            if let Err(at) = marks.binary_search(&shard) {
                marks.insert(at, shard);
            }
        };
        self.shared
            .change_marks(&held.lease.key, Some(&holder), marking)
            .await
    }

    async fn clear_marks(&self, key: &str, shard: Option<u32>) -> Result<(), LockError> {
        let clearing =
            |marks: &mut Vec<u32>| marks.retain(|marked| shard.is_some_and(|s| s != *marked));
        self.shared
            .change_marks(key, None, clearing)
            .await
            .map(drop)
    }
}

// Single-flight values (see `ResultStore`): a node (ZooKeeper) or key (etcd) next to the
// key's line, tied to the session of the client that wrote it last.
impl<S: ConsensusStore> AsyncResults for ConsensusBackend<S> {
    async fn watch_kept(&self, key: &str) -> Result<Option<ResultChange>, LockError> {
        // Only the next waiter hears of a release here: the value itself is watched, and the
        // oldest entry, whose holder may leave without one (a failed flight).
        let store = &self.shared.store;
        let Some(value) = store.watch_result(key).await? else {
            return Ok(None);
        };
        let Some(oldest) = store.line(key).await?.into_iter().next() else {
            // Nobody in line: the value alone, until someone holds the key.
            return Ok(Some(value));
        };
        let holder = match store.watch(key, &oldest).await? {
            Some(holder) => holder,
            // Changed or gone since the line was read: a change to read after at once.
            None => return Ok(Some(Box::pin(std::future::ready(())))),
        };
        Ok(Some(Box::pin(async move {
            futures_util::future::select(value, holder).await;
        })))
    }

    async fn read_kept(&self, key: &str) -> Result<Option<SharedResult>, LockError> {
        match self.shared.store.result(key).await? {
            Some((kept, _)) => SharedResult::decode(&kept)
                .map(Some)
                .ok_or_else(|| foreign_result(key)),
            None => Ok(None),
        }
    }

    async fn publish(
        &self,
        key: &str,
        result: &SharedResult,
        keep: Duration,
    ) -> Result<Published, LockError> {
        // Kept by the session: a value lasts as long as its writer's client, and only a
        // later token's replaces it; `keep` is what a lease-less store cannot count.
        let _ = keep;
        let store = &self.shared.store;
        let data = [format!("{} ", result.token).as_bytes(), &result.value].concat();
        // Another pass when another client wrote in between, or the line changed.
        for _ in 0..3 {
            let line = store.line(key).await?;
            let holder = line
                .iter()
                .find(|entry| entry.token == result.token && matches!(entry.state, State::Held(_)));
            let Some(holder) = holder else {
                return Ok(Published::NotHeld);
            };
            let version = match store.result(key).await? {
                Some((kept, version)) => {
                    let kept = SharedResult::decode(&kept).ok_or_else(|| foreign_result(key))?;
                    if kept.token >= result.token {
                        return Ok(Published::LaterKept);
                    }
                    Some(version)
                }
                None => None,
            };
            if store.put_result(key, &data, version, holder).await? {
                return Ok(Published::Kept);
            }
        }
        // Written by others in between, each time: theirs, of later grants, is kept.
        Ok(Published::LaterKept)
    }
}

// An operator's calls (see `OperatorBackend`).
impl<S: ConsensusStore> AsyncOperator for ConsensusBackend<S> {
    async fn list_held(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        let glob = Glob::parse(pattern)?;
        let mut locks = Vec::new();
        for key in self.shared.store.keys().await? {
            if glob.matches(&key) {
                let state = self.shared.inspect(&key).await?;
                if state.holding != Holding::Free || !state.queue.is_empty() {
                    locks.push(state);
                }
            }
        }
        Ok(locks)
    }

    async fn inspect_held(&self, key: &str) -> Result<LockState, LockError> {
        self.shared.inspect(key).await
    }

    async fn force_release_held(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        self.shared.force_release(key, grant).await
    }

    async fn owned_grants(
        &self,
        pattern: &str,
        owners: &OwnerPrefix,
    ) -> Result<Vec<OwnedGrant>, LockError> {
        let glob = Glob::parse(pattern)?;
        let mut owned = Vec::new();
        for key in self.shared.store.keys().await? {
            if glob.matches(&key) {
                owned.extend(self.shared.owned(&key, owners).await?);
            }
        }
        Ok(owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_node_names_and_back() {
        for key in ["stock:42", "a/b", "100%", "..", ".", "a.b", "é ü"] {
            let name = node_name(key);
            assert!(!name.contains('/'), "{name}");
            assert!(name != "." && name != "..", "{name}");
            assert_eq!(key_of(&name).as_deref(), Some(key));
        }
        for beside in ["stock%result", "stock%exhausted"] {
            assert_eq!(key_of(beside), None, "{beside} is not listed as a key");
        }
    }

    #[test]
    fn marks_read_back_as_written_and_anything_else_is_foreign() {
        for marks in [vec![0], vec![0, 2, 1_023]] {
            assert_eq!(decode_marks(&encode_marks(&marks)), Some(marks));
        }
        assert_eq!(decode_marks(b"3,1,3"), Some(vec![1, 3]));
        assert_eq!(decode_marks(b""), Some(Vec::new()));
        for foreign in [&b","[..], b"1,", b"01", b"-1", b"1 2", b"1024", b"\xff"] {
            assert_eq!(decode_marks(foreign), None, "{foreign:?}");
        }
    }
}
