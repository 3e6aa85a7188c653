//! The in-process backend: the same semantics as Redis, for tests and single-process use.
//!
//! Leases are measured with `tokio::time::Instant`, so tests can drive expiry with tokio's
//! paused clock.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::sharing::{Share, admit, conflict, every_shard_exhausted, slot_of};
use super::{
    Acquire, AsyncBackend, AsyncOperator, AsyncResults, AsyncShardMarks, Extended, HeldLease,
    Lease, Published, Release, ReleaseMemory, ReleaseWatch, ResultChange, ResultStore, ShardMarks,
    SharedResult, TogetherCall, Turn, change_at_release, holding_of, mutexes_alone, owned_grant,
    release_memory, released_mark,
};
use crate::backend::{
    Capabilities, ForcedRelease, Grant, Holding, LockState, OperatorBackend, OwnedGrant,
    OwnerPrefix, QUEUE_SHOWN, SharedGrant, Waiter,
};
use crate::defects::{self, Defect};
use crate::glob::Glob;
use crate::random;
use crate::release_hub::{ReleaseEvent, ReleaseHub, owner_tag};
use crate::sync::lock_ignoring_poison;
use crate::{LockError, LockKind};

/// Locks held in this process's memory.
pub struct MemoryBackend {
    state: Mutex<State>,
    releases: Arc<ReleaseHub>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// The response timeout the memory backend's release memory is counted from: its replies are
/// never lost, but a test may make them fail; as long as a Redis server's default.
const NOMINAL_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

struct State {
    holders: HashMap<String, Holder>,
    /// The grants of keys held by shared kinds (read/write locks, semaphores, segmented
    /// locks), oldest first.
    shared: HashMap<String, Vec<SharedHolder>>,
    /// The waiters in line per key, oldest first.
    lines: HashMap<String, VecDeque<Place>>,
    /// Who released which key, for a while: a release sent again after its reply was lost
    /// (a test's faults) learns that the first one released the key.
    released: ReleaseMemory<(String, String)>,
    /// One counter for all keys: strictly increasing per key, with no per-key state left
    /// behind once a key is released.
    last_token: u64,
    /// The values single-flight calls left, each until it lapses (a read of its key, or a
    /// sweep once there are twice as many as after the last one, takes it out then).
    results: HashMap<String, (SharedResult, Instant)>,
    /// How many values were left after the last sweep of lapsed ones.
    results_after_sweep: usize,
    /// The shards of segmented locks marked exhausted, per key, until refilled.
    exhausted: HashMap<String, Vec<u32>>,
}

/// How many single-flight values the memory backend keeps before it first sweeps out the
/// lapsed ones.
const RESULTS_SWEPT_FROM: usize = 64;

struct Holder {
    owner: String,
    token: u64,
    expires_at: Instant,
}

/// One grant of a shared key.
struct SharedHolder {
    owner: String,
    kind: LockKind,
    token: u64,
    /// The permit or shard held (0 for readers and writers).
    slot: u32,
    expires_at: Instant,
    /// Released with `min_hold_ms`: it counts until its lease ends, but is renewed no more.
    released: bool,
}

/// A live grant, as [`MemoryBackend::grants`] shows it (test support).
#[cfg(feature = "testing")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveGrant {
    /// The owner token (with a mark once released while its lease is kept, `min_hold_ms`).
    pub owner: String,
    /// The fencing token.
    pub token: u64,
    /// The kind of lock granted.
    pub kind: LockKind,
    /// The permit or shard held, for a semaphore or a segmented lock.
    pub slot: Option<u32>,
}

/// A waiter's place in a key's line: its lease and kind, and when the place lapses.
struct Place {
    owner: String,
    ttl: Duration,
    kind: LockKind,
    lapses_at: Instant,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        MemoryBackend {
            state: Mutex::new(State {
                holders: HashMap::new(),
                shared: HashMap::new(),
                lines: HashMap::new(),
                released: ReleaseMemory::new(release_memory(NOMINAL_RESPONSE_TIMEOUT)),
                last_token: 0,
                results: HashMap::new(),
                results_after_sweep: 0,
                exhausted: HashMap::new(),
            }),
            releases: Arc::default(),
        }
    }

    /// Deletes `key` whoever holds it, as a `DEL` by hand on Redis would (it hands the key
    /// to nobody; for an operator's forced release, see [`OperatorBackend::force_release`]);
    /// `true` if it was held. Its holder learns of the loss at its next renewal; waiters in
    /// this process wake and try.
    pub fn delete_key(&self, key: &str) -> bool {
        let now = Instant::now();
        let released = self.with_state(|state| {
            let shared =
                state.live_shared(key, now).is_some() && state.shared.remove(key).is_some();
            let held = state.live_holder(key, now).is_some() && state.holders.remove(key).is_some();
            shared || held
        });
        if released {
            self.releases
                .announce(key, ReleaseEvent::Released { token: None });
        }
        released
    }

    /// `key`'s live grants, of every kind (one at most for a mutex), oldest first: test
    /// support, for histories that record the grants a release hands over.
    #[cfg(feature = "testing")]
    pub fn grants(&self, key: &str) -> Vec<LiveGrant> {
        let now = Instant::now();
        self.with_state(|state| {
            let mutex = state.live_holder(key, now).map(|holder| LiveGrant {
                owner: holder.owner.clone(),
                token: holder.token,
                kind: LockKind::Mutex,
                slot: None,
            });
            let shared = state.live_shared(key, now).into_iter().flatten();
            let shared = shared.map(|grant| LiveGrant {
                owner: grant.owner.clone(),
                token: grant.token,
                kind: grant.kind,
                slot: slot_of(grant.kind, grant.slot),
            });
            mutex.into_iter().chain(shared).collect()
        })
    }

    /// How many keys hold something now: live leases (kept ones included), lines with a
    /// live place. 0 once every lock is released and every lease and place left behind has
    /// run out.
    pub fn keys_in_use(&self) -> usize {
        let now = Instant::now();
        self.with_state(|state| {
            let holders = state.holders.values().filter(|h| h.expires_at > now);
            let shared = state
                .shared
                .values()
                .filter(|grants| grants.iter().any(|grant| grant.expires_at > now));
            let lines = state
                .lines
                .values()
                .filter(|line| line.iter().any(|place| place.lapses_at > now));
            holders.count() + shared.count() + lines.count()
        })
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // Every update is a single insert or remove.
        let mut state = lock_ignoring_poison(&self.state);
        f(&mut state)
    }
}

impl State {
    fn live_holder(&mut self, key: &str, now: Instant) -> Option<&mut Holder> {
        if self.holders.get(key).is_some_and(|h| h.expires_at <= now) {
            self.holders.remove(key);
        }
        self.holders.get_mut(key)
    }

    /// The shards of `key` marked exhausted, ascending.
    fn exhausted_shards(&self, key: &str) -> Vec<u32> {
        self.exhausted.get(key).cloned().unwrap_or_default()
    }

    /// `key`'s shared grants without those whose lease ended (`None` when none is left).
    fn live_shared(&mut self, key: &str, now: Instant) -> Option<&mut Vec<SharedHolder>> {
        let grants = self.shared.get_mut(key)?;
        grants.retain(|grant| grant.expires_at > now);
        if grants.is_empty() {
            self.shared.remove(key);
            return None;
        }
        self.shared.get_mut(key)
    }

    /// `key`'s line without the places that lapsed (`None` when none is left, as Redis,
    /// whose line keys expire with the last live place).
    fn live_line(&mut self, key: &str, now: Instant) -> Option<&mut VecDeque<Place>> {
        let line = self.lines.get_mut(key)?;
        line.retain(|place| place.lapses_at > now);
        if line.is_empty() {
            self.lines.remove(key);
            return None;
        }
        self.lines.get_mut(key)
    }

    /// Puts the lease's owner at the back of its key's line, or renews its place there.
    fn keep_place(&mut self, lease: &Lease, place: Duration, now: Instant) {
        let line = self.lines.entry(lease.key.clone()).or_default();
        match line.iter_mut().find(|p| p.owner == lease.owner) {
            Some(kept) => kept.lapses_at = now + place,
            None => line.push_back(Place {
                owner: lease.owner.clone(),
                ttl: lease.ttl,
                kind: lease.kind,
                lapses_at: now + place,
            }),
        }
    }

    /// Takes `owner` out of `key`'s line; `true` if it was there.
    fn leave_line(&mut self, key: &str, owner: &str) -> bool {
        let Some(line) = self.lines.get_mut(key) else {
            return false;
        };
        let before = line.len();
        line.retain(|place| place.owner != owner);
        let left = line.len() < before;
        if line.is_empty() {
            self.lines.remove(key);
        }
        left
    }

    fn next_token(&mut self) -> u64 {
        self.last_token += 1;
        self.last_token
    }

    fn grant(&mut self, key: &str, owner: &str, expires_at: Instant) -> u64 {
        self.next_token();
        let holder = Holder {
            owner: owner.to_owned(),
            token: self.last_token,
            expires_at,
        };
        self.holders.insert(key.to_owned(), holder);
        self.last_token
    }

    /// Grants the free `key` to the oldest waiter in line whose place lasts, for its lease or
    /// until the place would have lapsed, whichever is sooner, as the Redis release script
    /// does; `None` if nobody waits.
    fn hand_off(&mut self, key: &str, now: Instant) -> Option<ReleaseEvent> {
        // Unless a test planted the defect of a store whose places never lapse.
        let places_lapse = !defects::planted(Defect::HandOffToLapsedPlace);
        // A shared kind's place, left from before the key served a mutex, is skipped (its
        // next attempt says why it cannot have the key), as the Redis script does.
        let next = loop {
            let line = if places_lapse {
                self.live_line(key, now)
            } else {
                self.lines.get_mut(key)
            };
            let next = line?.pop_front()?;
            if next.kind == LockKind::Mutex {
                break next;
            }
        };
        if self.lines.get(key).is_some_and(VecDeque::is_empty) {
            self.lines.remove(key);
        }
        let lasts_until = if places_lapse {
            next.lapses_at.min(now + next.ttl)
        } else {
            now + next.ttl
        };
        let token = self.grant(key, &next.owner, lasts_until);
        Some(ReleaseEvent::HandedOver {
            to: owner_tag(&next.owner),
            token,
            slot: None,
        })
    }

    fn acquire(&mut self, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        let now = Instant::now();
        if lease.kind.is_shared() {
            return self.acquire_shared(lease, turn, now);
        }
        if let Some(grants) = self.live_shared(&lease.key, now) {
            let why = conflict(grants[0].kind, lease.kind);
            return Err(LockError::key_in_use(&lease.key, why));
        }
        let remaining = match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                // Never shortened, as on Redis.
                holder.expires_at = holder.expires_at.max(now + lease.ttl);
                return Ok(Acquire::Granted {
                    token: holder.token,
                    slot: None,
                });
            }
            Some(holder) => Some(holder.expires_at.saturating_duration_since(now)),
            None => None,
        };
        let earlier_waiter = matches!(turn, Turn::Fair(_))
            && self
                .live_line(&lease.key, now)
                .and_then(|line| line.front())
                .is_some_and(|head| head.owner != lease.owner);
        if remaining.is_some() || earlier_waiter {
            if let Some(place) = turn.place() {
                self.keep_place(lease, place, now);
            }
            return Ok(Acquire::Held {
                remaining,
                latest_token: self.last_token,
            });
        }
        self.leave_line(&lease.key, &lease.owner);
        let token = self.grant(&lease.key, &lease.owner, now + lease.ttl);
        Ok(Acquire::Granted { token, slot: None })
    }

    /// Mutex leases granted together, all or none, as `acquire_together.lua` does: each key
    /// free, with nobody in its line, or already its lease's owner's (a copy of the call);
    /// `None`, with nothing written, otherwise.
    fn acquire_together(&mut self, leases: &[Lease]) -> Option<Vec<u64>> {
        let now = Instant::now();
        let every_one_free = leases
            .iter()
            .all(|lease| match self.live_holder(&lease.key, now) {
                Some(holder) => holder.owner == lease.owner,
                None => {
                    self.live_shared(&lease.key, now).is_none()
                        && self.live_line(&lease.key, now).is_none()
                }
            });
        if !every_one_free {
            return None;
        }
        let granted = leases
            .iter()
            .map(|lease| match self.acquire(lease, Turn::Once) {
                Ok(Acquire::Granted { token, .. }) => Some(token),
                _ => None,
            });
        granted.collect()
    }

    /// [`acquire`](Self::acquire) for a shared kind: joins the key's holders if
    /// [`admit`] lets it, else keeps a place in line as the turn says.
    fn acquire_shared(
        &mut self,
        lease: &Lease,
        turn: Turn,
        now: Instant,
    ) -> Result<Acquire, LockError> {
        if self.live_holder(&lease.key, now).is_some() {
            let why = conflict(LockKind::Mutex, lease.kind);
            return Err(LockError::key_in_use(&lease.key, why));
        }
        let grants = self
            .live_shared(&lease.key, now)
            .map(|grants| &mut **grants)
            .unwrap_or_default();
        let mine = grants.iter_mut().find(|g| g.owner == lease.owner);
        // Its grant kept after its release (min_hold_ms) is all a late copy of the owner's
        // attempt may find: no second grant, and no place.
        let kept = mine.as_ref().is_some_and(|mine| mine.released);
        if let Some(mine) = mine.filter(|mine| !mine.released) {
            mine.expires_at = mine.expires_at.max(now + lease.ttl);
            return Ok(Acquire::Granted {
                token: mine.token,
                slot: slot_of(mine.kind, mine.slot),
            });
        }
        let shares: Vec<Share> = grants.iter().map(SharedHolder::share).collect();
        let remaining = grants
            .iter()
            .map(|g| g.expires_at)
            .min()
            .map(|at| at.saturating_duration_since(now));
        let exhausted = self.exhausted_shards(&lease.key);
        if every_shard_exhausted(lease.kind, &exhausted) {
            return Err(LockError::exhausted(&lease.key, None));
        }
        let ahead: Vec<LockKind> = self
            .live_line(&lease.key, now)
            .map(|line| {
                line.iter()
                    .take_while(|p| p.owner != lease.owner)
                    .map(|p| p.kind)
                    .collect()
            })
            .unwrap_or_default();
        let fair = matches!(turn, Turn::Fair(_));
        let start = lease.kind.count().map_or(0, random::below);
        let admitted = admit(
            lease.kind,
            &shares,
            ahead.into_iter(),
            fair,
            start,
            &exhausted,
        )
        .map_err(|why| LockError::key_in_use(&lease.key, why))?;
        let Some(slot) = admitted.filter(|_| !kept) else {
            if let Some(place) = turn.place().filter(|_| !kept) {
                self.keep_place(lease, place, now);
            }
            return Ok(Acquire::Held {
                remaining,
                latest_token: self.last_token,
            });
        };
        self.leave_line(&lease.key, &lease.owner);
        let token = self.grant_shared(&lease.key, &lease.owner, lease.kind, slot, now + lease.ttl);
        Ok(Acquire::Granted {
            token,
            slot: slot_of(lease.kind, slot),
        })
    }

    fn grant_shared(
        &mut self,
        key: &str,
        owner: &str,
        kind: LockKind,
        slot: u32,
        expires_at: Instant,
    ) -> u64 {
        let token = self.next_token();
        self.shared
            .entry(key.to_owned())
            .or_default()
            .push(SharedHolder {
                owner: owner.to_owned(),
                kind,
                token,
                slot,
                expires_at,
                released: false,
            });
        token
    }

    /// Grants the shared `key` to the waiters at the head of its line, oldest first, while
    /// [`admit`] lets each in (the first it holds back stops the hand-off: nobody overtakes
    /// it), each for its lease or until its place would have lapsed, whichever is sooner.
    fn hand_off_shared(&mut self, key: &str, now: Instant) -> Vec<ReleaseEvent> {
        let mut handed = Vec::new();
        while let Some(next) = self.live_line(key, now).and_then(|line| line.front()) {
            let (kind, owner, lasts_until) = (
                next.kind,
                next.owner.clone(),
                next.lapses_at.min(now + next.ttl),
            );
            let shares: Vec<Share> = self
                .live_shared(key, now)
                .map(|grants| grants.iter().map(SharedHolder::share).collect())
                .unwrap_or_default();
            let start = kind.count().map_or(0, random::below);
            let exhausted = self.exhausted_shards(key);
            let admitted = match kind {
                // A mutex's place, one of a kind the key does not serve now, or one whose
                // every shard is exhausted, is skipped (its next attempt says why), as the
                // Redis script does.
                LockKind::Mutex => Err(String::new()),
                kind if every_shard_exhausted(kind, &exhausted) => Err(String::new()),
                kind => admit(kind, &shares, [].into_iter(), false, start, &exhausted),
            };
            if let Ok(None) = admitted {
                break;
            }
            self.leave_line(key, &owner);
            let Ok(Some(slot)) = admitted else {
                continue;
            };
            let token = self.grant_shared(key, &owner, kind, slot, lasts_until);
            handed.push(ReleaseEvent::HandedOver {
                to: owner_tag(&owner),
                token,
                slot: slot_of(kind, slot),
            });
        }
        handed
    }

    fn extend(&mut self, held: &HeldLease) -> bool {
        let (lease, now) = (&held.lease, Instant::now());
        if lease.kind.is_shared() {
            let grants = self
                .live_shared(&lease.key, now)
                .map(|grants| &mut **grants)
                .unwrap_or_default();
            let mine = grants.iter_mut().find(|g| {
                let same_slot = held.slot.is_none_or(|slot| slot == g.slot);
                g.owner == lease.owner && g.token == held.token && same_slot && !g.released
            });
            return mine
                .map(|grant| grant.expires_at = now + lease.ttl)
                .is_some();
        }
        let any_owner = defects::planted(Defect::RenewalExtendsAnyOwner);
        match self.live_holder(&lease.key, now) {
            Some(holder)
                if any_owner || (holder.owner == lease.owner && holder.token == held.token) =>
            {
                holder.expires_at = now + lease.ttl;
                true
            }
            _ => false,
        }
    }

    /// What `key` holds now, as an operator sees it. The store keeps no fencing counter per
    /// key (one counter serves every key).
    fn lock_state(&mut self, key: &str, now: Instant) -> LockState {
        let holding = match self.live_holder(key, now) {
            Some(holder) => holder.holding(now),
            None => self
                .live_shared(key, now)
                .map_or(Holding::Free, |grants| shared_holding(grants, now)),
        };
        let queue: Vec<Waiter> = self
            .live_line(key, now)
            .map(|line| {
                let shown = line.iter().take(QUEUE_SHOWN);
                shown.map(|place| place.waiter(now)).collect()
            })
            .unwrap_or_default();
        LockState {
            holding,
            waiters: self.lines.get(key).map_or(0, VecDeque::len),
            queue,
            ..LockState::free(key)
        }
    }

    /// Releases `key` if it holds `grant`, hands it to the oldest waiter in line, and says
    /// what held it and what to announce (nothing when nothing was released). No release is
    /// remembered: the holder's next renewal or release finds its lease lost.
    fn force_release(&mut self, key: &str, grant: Grant) -> (ForcedRelease, Vec<ReleaseEvent>) {
        let now = Instant::now();
        if !self.holders.contains_key(key) && self.live_shared(key, now).is_some() {
            return self.force_release_shared(key, grant, now);
        }
        let Some(holder) = self.live_holder(key, now) else {
            return (ForcedRelease::not_held(key), Vec::new());
        };
        let (found, token) = (holder.holding(now), holder.token);
        if !found
            .owner()
            .is_some_and(|owner| grant.is(owner, Some(token)))
        {
            return (ForcedRelease::of(key, found), Vec::new());
        }
        self.holders.remove(key);
        // A kept key's grant too, as the Redis scripts name it.
        let freed = ReleaseEvent::Released { token: Some(token) };
        let announced = self.hand_off(key, now).unwrap_or(freed);
        let forced = ForcedRelease {
            released: true,
            announced: Some(announced),
            ..ForcedRelease::of(key, found)
        };
        (forced, vec![announced])
    }

    /// [`force_release`](Self::force_release) of a key that shared grants hold: ends the
    /// grant named, and lets the head of the line join the others as far as it may.
    fn force_release_shared(
        &mut self,
        key: &str,
        grant: Grant,
        now: Instant,
    ) -> (ForcedRelease, Vec<ReleaseEvent>) {
        let Some(grants) = self.live_shared(key, now) else {
            return (ForcedRelease::not_held(key), Vec::new());
        };
        let found = shared_holding(grants, now);
        let named = grants.iter().position(|held| {
            let token = (!held.released).then_some(held.token);
            grant.is(owner_tag(&held.owner), token)
        });
        let Some(at) = named else {
            return (ForcedRelease::of(key, found), Vec::new());
        };
        let ended = grants.remove(at);
        if grants.is_empty() {
            self.shared.remove(key);
        }
        let mut announced = self.hand_off_shared(key, now);
        if announced.is_empty() {
            announced.push(ReleaseEvent::Released {
                token: Some(ended.token),
            });
        }
        let forced = ForcedRelease {
            released: true,
            announced: announced.first().copied(),
            ..ForcedRelease::of(key, found)
        };
        (forced, announced)
    }

    /// Releases (or, with `min_hold`, shortens) `lease` if it is the owner's, and takes the owner
    /// out of the line. Also says what to announce, if anything.
    fn release(&mut self, lease: &Lease, min_hold: Duration) -> (Release, Vec<ReleaseEvent>) {
        let now = Instant::now();
        let left_line = self.leave_line(&lease.key, &lease.owner);
        let released_before = self
            .released
            .remembers(&(lease.key.clone(), lease.owner.clone()), now);
        if lease.kind.is_shared() {
            return self.release_shared(lease, min_hold, left_line, released_before, now);
        }
        let any_owner = defects::planted(Defect::ReleaseWithoutOwnerCheck);
        let (release, event) = match self.live_holder(&lease.key, now) {
            Some(holder) if any_owner || holder.owner == lease.owner => {
                // As in Redis, whose lease has millisecond resolution.
                if min_hold.as_millis() == 0 {
                    let released = ReleaseEvent::Released {
                        token: Some(holder.token),
                    };
                    self.holders.remove(&lease.key);
                    self.remember_release(lease, now);
                    let handed_over = self.hand_off(&lease.key, now);
                    (Release::Released, Some(handed_over.unwrap_or(released)))
                } else {
                    // Marked released: an extend can no longer find it ours.
                    holder.owner = released_mark(&lease.owner);
                    holder.expires_at = now + min_hold;
                    self.remember_release(lease, now);
                    (Release::Released, None)
                }
            }
            Some(holder) if holder.owner == released_mark(&lease.owner) => {
                (Release::Released, None)
            }
            _ if released_before => (Release::Released, None),
            Some(_) => (Release::NotOwner, None),
            // A fair waiter that leaves a free key may have been the one whose turn it was:
            // the others try again.
            None => (
                Release::NotOwner,
                left_line.then_some(ReleaseEvent::WaiterLeft),
            ),
        };
        (release, event.into_iter().collect())
    }

    /// [`release`](Self::release) for a shared kind: the owner's grant leaves the holders
    /// (or, with `min_hold`, stays until then, renewed no more) and the head of the line joins
    /// them as far as it may.
    fn release_shared(
        &mut self,
        lease: &Lease,
        min_hold: Duration,
        left_line: bool,
        released_before: bool,
        now: Instant,
    ) -> (Release, Vec<ReleaseEvent>) {
        let found = self.live_shared(&lease.key, now).and_then(|grants| {
            let at = grants.iter().position(|g| g.owner == lease.owner)?;
            Some((grants, at))
        });
        let Some((grants, at)) = found else {
            return if released_before {
                (Release::Released, Vec::new())
            } else {
                let left = left_line.then_some(ReleaseEvent::WaiterLeft);
                (Release::NotOwner, left.into_iter().collect())
            };
        };
        let mine = &mut grants[at];
        if mine.released {
            return (Release::Released, Vec::new());
        }
        // As in Redis, whose lease has millisecond resolution.
        if min_hold.as_millis() > 0 {
            mine.released = true;
            mine.expires_at = now + min_hold;
            self.remember_release(lease, now);
            return (Release::Released, Vec::new());
        }
        let token = grants.remove(at).token;
        if grants.is_empty() {
            self.shared.remove(&lease.key);
        }
        self.remember_release(lease, now);
        let mut handed = self.hand_off_shared(&lease.key, now);
        if handed.is_empty() {
            handed.push(ReleaseEvent::Released { token: Some(token) });
        }
        (Release::Released, handed)
    }

    /// Remembers that `lease`'s owner released its key, as Redis does.
    fn remember_release(&mut self, lease: &Lease, now: Instant) {
        let id = (lease.key.clone(), lease.owner.clone());
        self.released.remember(id, now);
    }
}

impl Holder {
    /// Who holds the key, owner by tag.
    fn holding(&self, now: Instant) -> Holding {
        let remaining = self.expires_at.saturating_duration_since(now);
        holding_of(&self.owner, self.token, remaining)
    }
}

/// Who holds a key that the shared `grants` hold, as an operator sees it.
fn shared_holding(grants: &[SharedHolder], now: Instant) -> Holding {
    let shown = grants.iter().map(|grant| SharedGrant {
        owner: owner_tag(&grant.owner),
        kind: grant.kind,
        slot: slot_of(grant.kind, grant.slot),
        token: (!grant.released).then_some(grant.token),
        remaining: grant.expires_at.saturating_duration_since(now),
    });
    Holding::shared(shown.collect())
}

impl SharedHolder {
    fn share(&self) -> Share {
        Share {
            kind: self.kind,
            slot: self.slot,
        }
    }
}

impl Place {
    /// The waiter at this place, owner by tag (a live place: the line keeps no other).
    fn waiter(&self, now: Instant) -> Waiter {
        Waiter {
            owner: owner_tag(&self.owner),
            lease: Some(self.ttl),
            place_left: Some(self.lapses_at.saturating_duration_since(now)),
        }
    }
}

// Debug output counts the locks; it never shows owner tokens.
impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.with_state(|state| state.holders.len());
        f.debug_struct("MemoryBackend")
            .field("held", &held)
            .finish_non_exhaustive()
    }
}

// The calls of every lock (see `LockBackend`): answered at once.
impl AsyncBackend for MemoryBackend {
    async fn try_acquire(&self, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        if lease.replicas > 0 {
            return Err(LockError::invalid_config(
                "`min_replicas` needs a Redis master with replicas; the memory backend has \
                 none: remove `min_replicas` here",
            ));
        }
        self.with_state(|state| state.acquire(lease, turn))
    }

    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, LockError> {
        // In process, every release is announced as it happens: nothing to confirm.
        let (watch, subscribed) = self.releases.watch(key);
        let _ = subscribed.set(());
        Ok(watch)
    }

    fn watch_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.releases.watch_subscribed(key)
    }

    fn offers(&self) -> Capabilities {
        Capabilities::EVERY_KIND
    }

    async fn extend_grants(&self, held: &[HeldLease]) -> Result<Vec<Extended>, LockError> {
        Ok(self.with_state(|state| {
            let extended = held.iter().map(|h| Extended::found(state.extend(h)));
            extended.collect()
        }))
    }

    async fn release_grant(&self, lease: &Lease, min_hold: Duration) -> Result<Release, LockError> {
        let (result, announce) = self.with_state(|state| state.release(lease, min_hold));
        for event in announce {
            self.releases.announce(&lease.key, event);
        }
        Ok(result)
    }

    fn together_call<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        if !mutexes_alone(leases) {
            return None;
        }
        Some(Box::pin(async move {
            Ok(self.with_state(|state| state.acquire_together(leases)))
        }))
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

// Exhausted shards (see `ShardMarks`).
impl AsyncShardMarks for MemoryBackend {
    async fn mark(&self, held: &HeldLease) -> Result<bool, LockError> {
        self.with_state(|state| {
            let (lease, now) = (&held.lease, Instant::now());
            let Some(shard) = held
                .slot
                .filter(|_| matches!(lease.kind, LockKind::Segmented { .. }))
            else {
                return Ok(false);
            };
            let holds = state.live_shared(&lease.key, now).is_some_and(|grants| {
                grants.iter().any(|g| {
                    g.owner == lease.owner
                        && g.token == held.token
                        && g.slot == shard
                        && !g.released
                })
            });
            if holds {
                let marks = state.exhausted.entry(lease.key.clone()).or_default();
                if let Err(at) = marks.binary_search(&shard) {
                    marks.insert(at, shard);
                }
            }
            Ok(holds)
        })
    }

    async fn clear_marks(&self, key: &str, shard: Option<u32>) -> Result<(), LockError> {
        self.with_state(|state| {
            if let Some(marks) = state.exhausted.get_mut(key) {
                marks.retain(|marked| shard.is_some_and(|shard| shard != *marked));
                if marks.is_empty() {
                    state.exhausted.remove(key);
                }
            }
        });
        Ok(())
    }
}

// Single-flight values (see `ResultStore`).
impl AsyncResults for MemoryBackend {
    async fn watch_kept(&self, key: &str) -> Result<Option<ResultChange>, LockError> {
        let releases = self.watch_releases(key).await?;
        Ok(Some(change_at_release(releases)))
    }

    async fn read_kept(&self, key: &str) -> Result<Option<SharedResult>, LockError> {
        let mut state = lock_ignoring_poison(&self.state);
        let now = Instant::now();
        if state
            .results
            .get(key)
            .is_some_and(|(_, lapses_at)| *lapses_at <= now)
        {
            state.results.remove(key);
        }
        Ok(state.results.get(key).map(|(result, _)| result.clone()))
    }

    async fn publish(
        &self,
        key: &str,
        result: &SharedResult,
        keep: Duration,
    ) -> Result<Published, LockError> {
        let mut state = lock_ignoring_poison(&self.state);
        let now = Instant::now();
        let holds = state
            .live_holder(key, now)
            .is_some_and(|holder| holder.token == result.token);
        let later = state
            .results
            .get(key)
            .is_some_and(|(kept, lapses_at)| *lapses_at > now && kept.token >= result.token);
        if !holds {
            return Ok(Published::NotHeld);
        }
        if later {
            return Ok(Published::LaterKept);
        }
        state
            .results
            .insert(key.to_owned(), (result.clone(), now + keep));
        // Values of keys never read again would stay for good: swept as the map doubles.
        if state.results.len() >= (2 * state.results_after_sweep).max(RESULTS_SWEPT_FROM) {
            state.results.retain(|_, (_, lapses_at)| *lapses_at > now);
            state.results_after_sweep = state.results.len();
        }
        Ok(Published::Kept)
    }
}

// An operator's calls (see `OperatorBackend`).
impl AsyncOperator for MemoryBackend {
    async fn list_held(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        let glob = Glob::parse(pattern)?;
        let now = Instant::now();
        Ok(self.with_state(|state| {
            let live_shared = state
                .shared
                .iter()
                .filter(|(_, grants)| grants.iter().any(|grant| grant.expires_at > now));
            let keys: Vec<String> = state
                .holders
                .iter()
                .filter(|(_, holder)| holder.expires_at > now)
                .map(|(key, _)| key)
                .chain(live_shared.map(|(key, _)| key))
                .filter(|key| glob.matches(key))
                .cloned()
                .collect();
            keys.iter().map(|key| state.lock_state(key, now)).collect()
        }))
    }

    async fn inspect_held(&self, key: &str) -> Result<LockState, LockError> {
        let now = Instant::now();
        Ok(self.with_state(|state| state.lock_state(key, now)))
    }

    async fn force_release_held(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        let (forced, announced) = self.with_state(|state| state.force_release(key, grant));
        for event in announced {
            self.releases.announce(key, event);
        }
        Ok(forced)
    }

    async fn owned_grants(
        &self,
        pattern: &str,
        owners: &OwnerPrefix,
    ) -> Result<Vec<OwnedGrant>, LockError> {
        let glob = Glob::parse(pattern)?;
        let now = Instant::now();
        Ok(self.with_state(|state| {
            let held = state.holders.iter().filter(|(_, h)| h.expires_at > now);
            let held = held.map(|(key, h)| (key, h.owner.as_str(), h.token, false));
            let shared = state.shared.iter().flat_map(|(key, grants)| {
                let live = grants.iter().filter(move |g| g.expires_at > now);
                live.map(move |g| (key, g.owner.as_str(), g.token, g.released))
            });
            held.chain(shared)
                .filter(|(key, _, _, released)| !released && glob.matches(key))
                .filter_map(|(key, owner, token, _)| owned_grant(key, owner, Some(token), owners))
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LockBackend;

    fn lease(owner: &str, ttl_ms: u64) -> Lease {
        Lease {
            key: "k".into(),
            owner: owner.into(),
            ttl: Duration::from_millis(ttl_ms),
            replicas: 0,
            kind: LockKind::Mutex,
        }
    }

    /// Review finding: the value of a key never read again stayed for good. Lapsed values
    /// are swept as new ones are left: the map stays bounded by the live ones.
    #[tokio::test(start_paused = true)]
    async fn lapsed_values_of_keys_never_read_again_are_swept() {
        let backend = MemoryBackend::new();
        for round in 0..10 {
            for n in 0..100 {
                let mut lease = lease("a", 1_000);
                lease.key = format!("k{round}:{n}");
                let granted = backend.acquire(&lease, Turn::Once).await.unwrap();
                let Acquire::Granted { token, .. } = granted else {
                    panic!("{granted:?}");
                };
                let result = SharedResult {
                    token,
                    value: Vec::new(),
                };
                let keep = Duration::from_millis(100);
                let published = backend.publish_result(&lease.key, &result, keep).await;
                assert_eq!(published.unwrap(), Published::Kept);
                backend.release(&lease, Duration::ZERO).await.unwrap();
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let kept = lock_ignoring_poison(&backend.state).results.len();
        assert!(kept <= 200, "{kept} values kept, 100 at most live");
    }

    /// Several keys in one call, as `acquire_together.lua`: none while one is held by
    /// another owner or has a waiter in line, each with its own token once all are free,
    /// and the same tokens for a copy of the call.
    #[tokio::test(start_paused = true)]
    async fn several_keys_are_granted_together_or_not_at_all() {
        let backend = MemoryBackend::new();
        let of = |key: &str, owner: &str, ttl_ms| Lease {
            key: key.into(),
            ..lease(owner, ttl_ms)
        };
        let both = [of("a", "x", 1_000), of("b", "y", 1_000)];
        let together = || async { backend.acquire_together(&both).unwrap().await.unwrap() };

        let held = of("b", "other", 1_000);
        backend.acquire(&held, Turn::Once).await.unwrap();
        assert_eq!(together().await, None, "b is held");
        assert!(backend.grants("a").is_empty(), "nothing written");
        backend.release(&held, Duration::ZERO).await.unwrap();

        backend
            .acquire(&of("a", "holder", 100), Turn::Once)
            .await
            .unwrap();
        let place = Turn::InLine(Duration::from_secs(10));
        backend
            .acquire(&of("a", "waiter", 1_000), place)
            .await
            .unwrap();
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(together().await, None, "a waiter is in a's line");

        tokio::time::advance(Duration::from_secs(10)).await;
        let tokens = together().await.expect("both free");
        assert_eq!(together().await, Some(tokens.clone()), "a copy of the call");
        let held = [&backend.grants("a")[0], &backend.grants("b")[0]];
        assert_eq!(held.map(|grant| grant.token).to_vec(), tokens);
        assert_eq!(held.map(|grant| grant.owner.as_str()), ["x", "y"]);
    }

    #[tokio::test(start_paused = true)]
    async fn leases_expire_on_the_tokio_clock() {
        let backend = MemoryBackend::new();
        let first = backend.acquire(&lease("a", 100), Turn::Once).await.unwrap();
        assert!(matches!(first, Acquire::Granted { token: 1, .. }));
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(matches!(
            backend.acquire(&lease("b", 100), Turn::Once).await.unwrap(),
            Acquire::Held { remaining: Some(r), .. } if r == Duration::from_millis(1)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            backend.acquire(&lease("b", 100), Turn::Once).await.unwrap(),
            Acquire::Granted { token: 2, .. }
        ));
        assert_eq!(
            backend
                .release(&lease("a", 100), Duration::ZERO)
                .await
                .unwrap(),
            Release::NotOwner
        );
    }
}
