//! `lock_all`: several keys, all or none, without deadlock.
//!
//! Every request takes its keys in one canonical order (sorted, each once), whatever order
//! the caller named them in, so two requests for (a, b) and (b, a) never each hold one key
//! while waiting for the other: a cycle of waits would need some request to wait for a key
//! that sorts before one it holds. A key that cannot be had gives back the ones taken.

use tokio::time::Instant;

use crate::{LockClient, LockError, LockGuard, LockKind, LockOptions};

/// A request for several locks at once (from [`LockClient::lock_all`]): each key a mutex,
/// all of them held or none. Configure it with the setters of [`LockOptions`], which apply
/// to each key; `wait_ms` bounds the whole call. Then `.acquire().await`.
#[must_use = "a lock request does nothing until `.acquire().await`"]
#[derive(Debug, Clone)]
pub struct MultiLockRequest {
    client: LockClient,
    keys: Vec<String>,
    pub(crate) options: LockOptions,
}

impl LockClient {
    /// A request for every key of `keys` at once, all or none, as a transfer between two
    /// accounts needs. The keys are taken in sorted order whatever order they come in, so
    /// requests for overlapping keys never deadlock; each key has its own fencing token.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let both = locks.lock_all(["acct:7", "acct:3"]).wait_ms(5_000).acquire().await?;
    /// let tokens: Vec<(&str, u64)> = both.tokens().collect();
    /// assert_eq!(tokens.iter().map(|(key, _)| *key).collect::<Vec<_>>(), ["acct:3", "acct:7"]);
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_all(&self, keys: impl IntoIterator<Item = impl Into<String>>) -> MultiLockRequest {
        MultiLockRequest {
            client: self.clone(),
            keys: keys.into_iter().map(Into::into).collect(),
            options: LockOptions::new(),
        }
    }
}

impl MultiLockRequest {
    /// Takes every key in sorted order, each as [`LockRequest::acquire`](crate::LockRequest::acquire)
    /// does, within what is left of the call's wait (`wait_ms`, else `retry × sleep_ms`). If
    /// one cannot be had, the keys taken are released before its error is returned: nothing
    /// is held then.
    ///
    /// # Cancel safety
    /// Dropping the future drops the guards taken so far, which releases them in the
    /// background, and cleans up the key being asked for as a dropped request does.
    pub async fn acquire(self) -> Result<MultiGuard, LockError> {
        let mut keys = self.keys;
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Err(LockError::invalid_config(
                "lock_all needs at least one key: name the keys to lock together",
            ));
        }
        let started = Instant::now();
        let mut guards = Vec::with_capacity(keys.len());
        for key in keys {
            let options = self.options.left_since(started);
            let taken = self.client.request(key, LockKind::Mutex).options(options);
            match taken.acquire().await {
                Ok(guard) => guards.push(guard),
                Err(error) => {
                    give_back(guards).await;
                    return Err(error);
                }
            }
        }
        // A key whose lease ended while the later ones were waited for is not held: all or
        // none.
        let lost = guards.iter().find_map(|guard| {
            let cause = guard.loss_signal().cause()?;
            Some(LockError::lost(guard.key().to_owned(), cause))
        });
        if let Some(lost) = lost {
            give_back(guards).await;
            return Err(lost);
        }
        Ok(MultiGuard { guards })
    }
}

/// Releases `guards`, the last taken first; a release that fails is left to the background.
async fn give_back(guards: Vec<LockGuard>) {
    for guard in guards.into_iter().rev() {
        let _ = guard.release().await;
    }
}

/// Several locks held together (from [`MultiLockRequest::acquire`]), in sorted key order.
/// Release them with [`MultiGuard::release`]; dropping it releases each in the background.
#[must_use = "dropping a MultiGuard releases its locks at once"]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// Each key with the fencing token of its grant, in sorted key order: hand each to the
    /// resource the key guards.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, u64)> {
        self.guards.iter().map(|guard| (guard.key(), guard.token()))
    }

    /// The fencing token of `key`'s grant, if it is one of the keys held.
    pub fn token(&self, key: &str) -> Option<u64> {
        self.tokens()
            .find(|(held, _)| *held == key)
            .map(|(_, token)| token)
    }

    /// The guards, one per key, in sorted key order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Completes when any of the leases is lost (at once if one already was), with the
    /// [`LockError::Lost`] that says which and why.
    pub async fn lost(&self) -> LockError {
        let each = self.guards.iter().map(|guard| Box::pin(guard.lost()));
        futures_util::future::select_all(each).await.0
    }

    /// Whether any of the leases has been lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    pub(crate) fn from_guards(guards: Vec<LockGuard>) -> Self {
        MultiGuard { guards }
    }

    pub(crate) fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// Releases every lock, each as [`LockGuard::release`] does; after trying them all,
    /// returns the first [`LockError::Lost`] if a release found a lease lost, else the first
    /// other error.
    pub async fn release(self) -> Result<(), LockError> {
        let (mut first_lost, mut first_error) = (None, None);
        for guard in self.guards {
            match guard.release().await {
                Ok(()) => {}
                Err(error) if error.is_lost() => {
                    first_lost.get_or_insert(error);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_lost.or(first_error).map_or(Ok(()), Err)
    }
}
