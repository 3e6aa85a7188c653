//! The in-process backend: the same semantics as Redis, for tests and single-process use.
//!
//! Leases are measured with `tokio::time::Instant`, so tests can drive expiry with tokio's
//! paused clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, BoxFuture, Lease, LockBackend, Release};
use crate::LockError;

/// Locks held in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    holders: HashMap<String, Holder>,
    /// One counter for all keys: strictly increasing per key, with no per-key state left
    /// behind once a key is released.
    last_token: u64,
}

#[derive(Debug)]
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
        self.with_state(|state| {
            state.live_holder(key, Instant::now()).is_some() && state.holders.remove(key).is_some()
        })
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panic while the lock is held cannot leave the map half-updated (every update is
        // a single insert or remove), so a poisoned mutex is safe to keep using.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
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

    fn acquire(&mut self, lease: &Lease) -> Acquire {
        let now = Instant::now();
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                holder.expires_at = now + lease.ttl;
                Acquire::Granted {
                    token: holder.token,
                }
            }
            Some(holder) => Acquire::Held {
                remaining: Some(holder.expires_at.saturating_duration_since(now)),
            },
            None => {
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
        }
    }

    fn extend(&mut self, lease: &Lease) -> bool {
        let now = Instant::now();
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                holder.expires_at = now + lease.ttl;
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, lease: &Lease, keep: Duration) -> Release {
        let now = Instant::now();
        match self.live_holder(&lease.key, now) {
            Some(holder) if holder.owner == lease.owner => {
                if keep.is_zero() {
                    self.holders.remove(&lease.key);
                } else {
                    holder.expires_at = now + keep;
                }
                Release::Released
            }
            _ => Release::NotOwner,
        }
    }
}

impl LockBackend for MemoryBackend {
    fn acquire<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<Acquire, LockError>> {
        let result = self.with_state(|state| state.acquire(lease));
        Box::pin(std::future::ready(Ok(result)))
    }

    fn extend<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<Vec<bool>, LockError>> {
        let result = self.with_state(|state| leases.iter().map(|l| state.extend(l)).collect());
        Box::pin(std::future::ready(Ok(result)))
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        let result = self.with_state(|state| state.release(lease, keep));
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
        let first = backend.acquire(&lease("a", 100)).await.unwrap();
        assert!(matches!(first, Acquire::Granted { token: 1 }));
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(matches!(
            backend.acquire(&lease("b", 100)).await.unwrap(),
            Acquire::Held { remaining: Some(r) } if r == Duration::from_millis(1)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            backend.acquire(&lease("b", 100)).await.unwrap(),
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
