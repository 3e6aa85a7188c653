//! The in-process backend: the same semantics as Redis, for tests and single-process use.
//!
//! Leases are measured with `tokio::time::Instant`, so tests can drive expiry with tokio's
//! paused clock.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, BoxFuture, HeldLease, Lease, LockBackend, Release, ReleaseWatch, Turn};
use crate::LockError;
use crate::release_hub::{OwnerTag, ReleaseHub, owner_tag};
use crate::sync::lock_ignoring_poison;

/// Locks held in this process's memory.
#[derive(Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
    releases: Arc<ReleaseHub>,
}

#[derive(Default)]
struct State {
    holders: HashMap<String, Holder>,
    /// Fair waiters per key, oldest first, with the time their place lapses.
    queues: HashMap<String, VecDeque<(String, Instant)>>,
    /// Next free turns reserved by starving waiters, until when.
    reservations: HashMap<String, (String, Instant)>,
    /// Who released each key last, until when that is remembered: a release sent again after
    /// its reply was lost learns that the first one released the key.
    released_by: HashMap<String, (String, Instant)>,
    /// One counter for all keys: strictly increasing per key, with no per-key state left
    /// behind once a key is released.
    last_token: u64,
}

struct Holder {
    owner: String,
    token: u64,
    expires_at: Instant,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes `key` whoever holds it (an operator's forced release); `true` if it was held.
    /// Its holder learns of the loss at its next renewal.
    pub fn force_release(&self, key: &str) -> bool {
        let now = Instant::now();
        let released = self.with_state(|state| {
            let held = state.live_holder(key, now).is_some() && state.holders.remove(key).is_some();
            held.then(|| state.next_waiter(key, now))
        });
        if let Some(next) = released {
            self.releases.released(key, next);
        }
        released.is_some()
    }

    /// How many keys hold something now: live leases (kept ones included), fair queues with
    /// a live place, live turn reservations. 0 once every lock is released and every lease,
    /// place and reservation left behind has run out.
    pub fn keys_in_use(&self) -> usize {
        let now = Instant::now();
        self.with_state(|state| {
            let holders = state.holders.values().filter(|h| h.expires_at > now);
            let queues = state
                .queues
                .values()
                .filter(|queue| queue.iter().any(|(_, lapses_at)| *lapses_at > now));
            let reservations = state
                .reservations
                .values()
                .filter(|(_, until)| *until > now);
            holders.count() + queues.count() + reservations.count()
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

    /// Puts `owner` at the back of `key`'s fair queue, or renews its place there, after
    /// dropping the places that lapsed.
    fn keep_place(&mut self, key: &str, owner: &str, place: Duration, now: Instant) {
        let queue = self.queues.entry(key.to_owned()).or_default();
        queue.retain(|(_, lapses_at)| *lapses_at > now);
        match queue.iter_mut().find(|(waiter, _)| waiter == owner) {
            Some(entry) => entry.1 = now + place,
            None => queue.push_back((owner.to_owned(), now + place)),
        }
    }

    /// The waiter whose turn it is now that `key` is free, as the Redis release script names
    /// it: the fair queue's head while its place lasts and no other waiter reserved the turn,
    /// else the waiter that reserved the turn. `None` when anyone may try (a lapsed head: the
    /// next attempt prunes it; a head and another reserver: both may take the key).
    fn next_waiter(&mut self, key: &str, now: Instant) -> Option<OwnerTag> {
        let reserver = self
            .reservation(key, now)
            .map(|(reserver, _)| reserver.clone());
        // As Redis, whose queue keys expire with the last live place.
        let queue = self
            .queues
            .get(key)
            .filter(|queue| queue.iter().any(|(_, lapses_at)| *lapses_at > now));
        if let Some((head, lapses_at)) = queue.and_then(VecDeque::front) {
            // A reserver may take the key as well as the head: both must hear of it.
            let alone = reserver.as_ref().is_none_or(|r| r == head);
            return (*lapses_at > now && alone).then(|| owner_tag(head));
        }
        reserver.map(|reserver| owner_tag(&reserver))
    }

    /// The live reservation of `key`'s next free turn, if any.
    fn reservation(&mut self, key: &str, now: Instant) -> Option<&(String, Instant)> {
        if self
            .reservations
            .get(key)
            .is_some_and(|(_, until)| *until <= now)
        {
            self.reservations.remove(key);
        }
        self.reservations.get(key)
    }

    /// Whether `owner` may take the free `key` now: not while another waiter has reserved
    /// the turn; in fair mode only as the oldest waiter (its place is then used up).
    fn takes_turn(&mut self, key: &str, owner: &str, turn: Turn, now: Instant) -> bool {
        let Turn::Queue(place) = turn else {
            return match self.reservation(key, now) {
                Some((reserver, _)) if reserver != owner => false,
                Some(_) => {
                    self.reservations.remove(key);
                    true
                }
                None => true,
            };
        };
        self.keep_place(key, owner, place, now);
        let queue = self.queues.entry(key.to_owned()).or_default();
        if queue.front().is_some_and(|(waiter, _)| waiter == owner) {
            queue.pop_front();
            if queue.is_empty() {
                self.queues.remove(key);
            }
            true
        } else {
            false
        }
    }

    /// A held key: a fair waiter keeps its place, a starving one reserves the next turn
    /// unless another waiter did.
    fn wait_for_turn(&mut self, lease: &Lease, turn: Turn, now: Instant) {
        match turn {
            Turn::Queue(place) => self.keep_place(&lease.key, &lease.owner, place, now),
            Turn::Reserve(time) => {
                let free = self
                    .reservation(&lease.key, now)
                    .is_none_or(|(reserver, _)| *reserver == lease.owner);
                if free {
                    let reservation = (lease.owner.clone(), now + time);
                    self.reservations.insert(lease.key.clone(), reservation);
                }
            }
            Turn::Barge => {}
        }
    }

    fn acquire(&mut self, lease: &Lease, turn: Turn) -> Acquire {
        let now = Instant::now();
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                holder.expires_at = now + lease.ttl;
                return Acquire::Granted {
                    token: holder.token,
                };
            }
            Some(holder) => {
                let remaining = holder.expires_at.saturating_duration_since(now);
                self.wait_for_turn(lease, turn, now);
                return Acquire::Held {
                    remaining: Some(remaining),
                };
            }
            None => {}
        }
        if !self.takes_turn(&lease.key, &lease.owner, turn, now) {
            let remaining = self
                .reservation(&lease.key, now)
                .map(|(_, until)| until.saturating_duration_since(now));
            return Acquire::Held { remaining };
        }
        self.last_token += 1;
        let token = self.last_token;
        self.holders.insert(
            lease.key.clone(),
            Holder {
                owner: lease.owner.clone(),
                token,
                expires_at: now + lease.ttl,
            },
        );
        Acquire::Granted { token }
    }

    fn extend(&mut self, held: &HeldLease) -> bool {
        let (lease, now) = (&held.lease, Instant::now());
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner && holder.token == held.token => {
                holder.expires_at = now + lease.ttl;
                true
            }
            _ => false,
        }
    }

    /// Releases (or, with `keep`, shortens) `lease` if it is the owner's, and takes the owner
    /// out of the fair queue. Also says whether waiters should hear of it, and whose turn
    /// it is then.
    fn release(&mut self, lease: &Lease, keep: Duration) -> (Release, Option<Option<OwnerTag>>) {
        let now = Instant::now();
        let left_queue = self.queues.get_mut(&lease.key).is_some_and(|queue| {
            let before = queue.len();
            queue.retain(|(waiter, _)| *waiter != lease.owner);
            queue.len() < before
        });
        let left_reservation = self
            .reservations
            .get(&lease.key)
            .is_some_and(|(reserver, _)| *reserver == lease.owner);
        if left_reservation {
            self.reservations.remove(&lease.key);
        }
        if self.queues.get(&lease.key).is_some_and(VecDeque::is_empty) {
            self.queues.remove(&lease.key);
        }
        let released_before = self
            .released_by
            .get(&lease.key)
            .is_some_and(|(owner, until)| *owner == lease.owner && *until > now);
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                // As in Redis, whose lease has millisecond resolution.
                if keep.as_millis() == 0 {
                    self.holders.remove(&lease.key);
                    self.remember_release(&lease.key, &lease.owner, now);
                    (Release::Released, Some(self.next_waiter(&lease.key, now)))
                } else {
                    // Marked released: an extend can no longer find it ours.
                    holder.owner = released_mark(&lease.owner);
                    holder.expires_at = now + keep;
                    (Release::Released, None)
                }
            }
            Some(holder) if holder.owner == released_mark(&lease.owner) => {
                (Release::Released, None)
            }
            _ if released_before => (Release::Released, None),
            Some(_) => (Release::NotOwner, None),
            // A waiter that leaves may have been the one whose turn it was: anyone may try.
            None => (
                Release::NotOwner,
                (left_queue || left_reservation).then_some(None),
            ),
        }
    }

    /// Remembers that `owner` released `key` (as Redis keeps `...:released-by` for 30 s).
    fn remember_release(&mut self, key: &str, owner: &str, now: Instant) {
        if self.released_by.len() >= 1_024 {
            self.released_by.retain(|_, (_, until)| *until > now);
        }
        let until = now + RELEASE_MEMORY;
        self.released_by
            .insert(key.to_owned(), (owner.to_owned(), until));
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

/// How long the last release of a key is remembered.
const RELEASE_MEMORY: Duration = Duration::from_secs(30);

/// What a key kept after its release (`min_hold_ms`) holds instead of its owner's token.
fn released_mark(owner: &str) -> String {
    format!("{owner}:released")
}

impl LockBackend for MemoryBackend {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        let result = self.with_state(|state| state.acquire(lease, turn));
        Box::pin(std::future::ready(Ok(result)))
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        // In process, every release is announced as it happens: nothing to confirm.
        let (watch, subscribed) = self.releases.watch(key);
        let _ = subscribed.set(());
        Box::pin(std::future::ready(Ok(watch)))
    }

    fn extend<'a>(&'a self, held: &'a [HeldLease]) -> BoxFuture<'a, Result<Vec<bool>, LockError>> {
        let result = self.with_state(|state| held.iter().map(|h| state.extend(h)).collect());
        Box::pin(std::future::ready(Ok(result)))
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        let (result, announce) = self.with_state(|state| state.release(lease, keep));
        if let Some(next) = announce {
            self.releases.released(&lease.key, next);
        }
        Box::pin(std::future::ready(Ok(result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: &str, ttl_ms: u64) -> Lease {
        Lease {
            key: "k".into(),
            owner: owner.into(),
            ttl: Duration::from_millis(ttl_ms),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn leases_expire_on_the_tokio_clock() {
        let backend = MemoryBackend::new();
        let first = backend
            .acquire(&lease("a", 100), Turn::Barge)
            .await
            .unwrap();
        assert!(matches!(first, Acquire::Granted { token: 1 }));
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(matches!(
            backend.acquire(&lease("b", 100), Turn::Barge).await.unwrap(),
            Acquire::Held { remaining: Some(r) } if r == Duration::from_millis(1)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            backend
                .acquire(&lease("b", 100), Turn::Barge)
                .await
                .unwrap(),
            Acquire::Granted { token: 2 }
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
