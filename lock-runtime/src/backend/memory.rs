//! The in-process backend: the same semantics as Redis, for tests and single-process use.
//!
//! Leases are measured with `tokio::time::Instant`, so tests can drive expiry with tokio's
//! paused clock.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, BoxFuture, HeldLease, Lease, LockBackend, Release, ReleaseWatch, Turn};
use crate::admin::{ForcedRelease, Grant, Holding, LockState, QUEUE_SHOWN, Waiter};
use crate::glob::Glob;
use crate::release_hub::{ReleaseEvent, ReleaseHub, owner_tag};
use crate::sync::lock_ignoring_poison;
use crate::{LockError, LockKind};

/// Locks held in this process's memory.
#[derive(Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
    releases: Arc<ReleaseHub>,
}

#[derive(Default)]
struct State {
    holders: HashMap<String, Holder>,
    /// The waiters in line per key, oldest first.
    lines: HashMap<String, VecDeque<Place>>,
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

/// A waiter's place in a key's line: its lease, and when the place lapses.
struct Place {
    owner: String,
    ttl: Duration,
    lapses_at: Instant,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes `key` whoever holds it, as a `DEL` by hand on Redis would (it hands the key
    /// to nobody; for an operator's forced release, see [`LockBackend::force_release`]);
    /// `true` if it was held. Its holder learns of the loss at its next renewal; waiters in
    /// this process wake and try.
    pub fn delete_key(&self, key: &str) -> bool {
        let now = Instant::now();
        let released = self.with_state(|state| {
            state.live_holder(key, now).is_some() && state.holders.remove(key).is_some()
        });
        if released {
            self.releases
                .announce(key, ReleaseEvent::Released { token: None });
        }
        released
    }

    /// The owner token and fencing token of `key`'s live grant, if any: test support, for
    /// histories that record the grants a release hands over.
    #[cfg(feature = "testing")]
    pub fn holder(&self, key: &str) -> Option<(String, u64)> {
        let now = Instant::now();
        self.with_state(|state| {
            let holder = state.live_holder(key, now)?;
            Some((holder.owner.clone(), holder.token))
        })
    }

    /// How many keys hold something now: live leases (kept ones included), lines with a
    /// live place. 0 once every lock is released and every lease and place left behind has
    /// run out.
    pub fn keys_in_use(&self) -> usize {
        let now = Instant::now();
        self.with_state(|state| {
            let holders = state.holders.values().filter(|h| h.expires_at > now);
            let lines = state
                .lines
                .values()
                .filter(|line| line.iter().any(|place| place.lapses_at > now));
            holders.count() + lines.count()
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

    fn grant(&mut self, key: &str, owner: &str, expires_at: Instant) -> u64 {
        self.last_token += 1;
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
        let next = self.live_line(key, now)?.pop_front()?;
        if self.lines.get(key).is_some_and(VecDeque::is_empty) {
            self.lines.remove(key);
        }
        let token = self.grant(key, &next.owner, next.lapses_at.min(now + next.ttl));
        Some(ReleaseEvent::HandedOver {
            to: owner_tag(&next.owner),
            token,
        })
    }

    fn acquire(&mut self, lease: &Lease, turn: Turn) -> Acquire {
        let now = Instant::now();
        let remaining = match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                // Never shortened, as on Redis.
                holder.expires_at = holder.expires_at.max(now + lease.ttl);
                return Acquire::Granted {
                    token: holder.token,
                    shard: None,
                };
            }
            Some(holder) => Some(holder.expires_at.saturating_duration_since(now)),
            None => None,
        };
        let earlier_waiter = matches!(turn, Turn::Queue(_))
            && self
                .live_line(&lease.key, now)
                .and_then(|line| line.front())
                .is_some_and(|head| head.owner != lease.owner);
        if remaining.is_some() || earlier_waiter {
            if let Some(place) = turn.place() {
                self.keep_place(lease, place, now);
            }
            return Acquire::Held {
                remaining,
                latest_token: self.last_token,
            };
        }
        self.leave_line(&lease.key, &lease.owner);
        let token = self.grant(&lease.key, &lease.owner, now + lease.ttl);
        Acquire::Granted { token, shard: None }
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

    /// What `key` holds now, as an operator sees it. The store keeps no fencing counter per
    /// key (one counter serves every key).
    fn lock_state(&mut self, key: &str, now: Instant) -> LockState {
        let holding = match self.live_holder(key, now) {
            Some(holder) => holder.holding(now),
            None => Holding::Free,
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
    fn force_release(&mut self, key: &str, grant: Grant) -> ForcedRelease {
        let now = Instant::now();
        let Some(holder) = self.live_holder(key, now) else {
            return ForcedRelease::not_held(key);
        };
        let (found, token) = (holder.holding(now), holder.token);
        if !found
            .owner()
            .is_some_and(|owner| grant.is(owner, Some(token)))
        {
            return ForcedRelease::of(key, found);
        }
        self.holders.remove(key);
        // A kept key's grant too, as the Redis scripts name it.
        let freed = ReleaseEvent::Released { token: Some(token) };
        ForcedRelease {
            released: true,
            announced: Some(self.hand_off(key, now).unwrap_or(freed)),
            ..ForcedRelease::of(key, found)
        }
    }

    /// Releases (or, with `keep`, shortens) `lease` if it is the owner's, and takes the owner
    /// out of the line. Also says what to announce, if anything.
    fn release(&mut self, lease: &Lease, keep: Duration) -> (Release, Option<ReleaseEvent>) {
        let now = Instant::now();
        let left_line = self.leave_line(&lease.key, &lease.owner);
        let released_before = self
            .released_by
            .get(&lease.key)
            .is_some_and(|(owner, until)| *owner == lease.owner && *until > now);
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                // As in Redis, whose lease has millisecond resolution.
                if keep.as_millis() == 0 {
                    let released = ReleaseEvent::Released {
                        token: Some(holder.token),
                    };
                    self.holders.remove(&lease.key);
                    self.remember_release(&lease.key, &lease.owner, now);
                    let handed_over = self.hand_off(&lease.key, now);
                    (Release::Released, Some(handed_over.unwrap_or(released)))
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
            // A fair waiter that leaves a free key may have been the one whose turn it was:
            // the others try again.
            None => (
                Release::NotOwner,
                left_line.then_some(ReleaseEvent::WaiterLeft),
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

impl Holder {
    /// Who holds the key, owner by tag.
    fn holding(&self, now: Instant) -> Holding {
        let remaining = self.expires_at.saturating_duration_since(now);
        match self.owner.strip_suffix(RELEASED) {
            Some(owner) => Holding::Kept {
                owner: owner_tag(owner),
                remaining,
            },
            None => Holding::Held {
                owner: owner_tag(&self.owner),
                token: Some(self.token),
                remaining,
            },
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

/// How long the last release of a key is remembered.
const RELEASE_MEMORY: Duration = Duration::from_secs(30);

/// What a key kept after its release (`min_hold_ms`) holds instead of its owner's token: the
/// token followed by this.
const RELEASED: &str = ":released";

fn released_mark(owner: &str) -> String {
    format!("{owner}{RELEASED}")
}

impl LockBackend for MemoryBackend {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        if lease.replicas > 0 {
            return Box::pin(std::future::ready(Err(LockError::invalid_config(
                "`min_replicas` needs a Redis master with replicas; the memory backend has \
                 none: remove `min_replicas` here",
            ))));
        }
        let result = self.with_state(|state| state.acquire(lease, turn));
        Box::pin(std::future::ready(Ok(result)))
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        // In process, every release is announced as it happens: nothing to confirm.
        let (watch, subscribed) = self.releases.watch(key);
        let _ = subscribed.set(());
        Box::pin(std::future::ready(Ok(watch)))
    }

    fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.releases.watch_subscribed(key)
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
        if let Some(event) = announce {
            self.releases.announce(&lease.key, event);
        }
        Box::pin(std::future::ready(Ok(result)))
    }

    fn list_locks<'a>(
        &'a self,
        pattern: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockState>, LockError>> {
        let listed = Glob::parse(pattern).map(|glob| {
            let now = Instant::now();
            self.with_state(|state| {
                let keys: Vec<String> = state
                    .holders
                    .iter()
                    .filter(|(key, holder)| holder.expires_at > now && glob.matches(key))
                    .map(|(key, _)| key.clone())
                    .collect();
                keys.iter().map(|key| state.lock_state(key, now)).collect()
            })
        });
        Box::pin(std::future::ready(listed))
    }

    fn inspect_lock<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<LockState, LockError>> {
        let now = Instant::now();
        let state = self.with_state(|state| state.lock_state(key, now));
        Box::pin(std::future::ready(Ok(state)))
    }

    fn force_release<'a>(
        &'a self,
        key: &'a str,
        grant: Grant,
    ) -> BoxFuture<'a, Result<ForcedRelease, LockError>> {
        let forced = self.with_state(|state| state.force_release(key, grant));
        if let Some(event) = forced.announced {
            self.releases.announce(key, event);
        }
        Box::pin(std::future::ready(Ok(forced)))
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
            replicas: 0,
            kind: LockKind::Mutex,
        }
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
