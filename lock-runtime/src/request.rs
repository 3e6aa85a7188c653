//! `LockRequest`: the builder returned by `LockClient::lock`, and the acquire loop.

use std::sync::Arc;
use std::time::Instant;

use crate::backend::{Acquire, Lease, LockBackend};
use crate::guard::release_in_background;
use crate::{LockClient, LockError, LockGuard, LockOptions, key, random};

/// A request for one lock. Configure it, then `.acquire().await`.
#[must_use = "a lock request does nothing until `.acquire().await`"]
#[derive(Debug, Clone)]
pub struct LockRequest {
    client: LockClient,
    key: String,
    options: LockOptions,
}

impl LockRequest {
    pub(crate) fn new(client: LockClient, key: String) -> Self {
        LockRequest {
            client,
            key,
            options: LockOptions::new(),
        }
    }

    /// Lease length in milliseconds (default 30 000, at most [`crate::MAX_TTL_MS`]).
    pub fn ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.options = self.options.ttl_ms(ttl_ms);
        self
    }

    /// Attempts after the first failed one (default 5); switches to `Continue`.
    pub fn retry(mut self, retry: u32) -> Self {
        self.options = self.options.retry(retry);
        self
    }

    /// Longest pause between attempts in milliseconds (default 200).
    pub fn sleep_ms(mut self, sleep_ms: u64) -> Self {
        self.options = self.options.sleep_ms(sleep_ms);
        self
    }

    /// One attempt, then [`LockError::NotAcquired`] if someone else holds the lock.
    pub fn give_up(mut self) -> Self {
        self.options = self.options.give_up();
        self
    }

    /// Replaces all options at once.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Acquires the lock, trying as the options say.
    ///
    /// Errors: [`LockError::NotAcquired`] if another owner held it at the last attempt,
    /// [`LockError::Backend`] if the last attempt could not reach the backend,
    /// [`LockError::InvalidKey`] / [`LockError::InvalidConfig`] before anything is sent.
    ///
    /// # Cancel safety
    /// If this future is dropped while an attempt may have been applied, the grant is
    /// deleted again in the background (compare-and-delete with this request's owner token).
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        key::validate(&self.key)?;
        self.options.validate()?;
        let lease = Lease {
            key: self.key,
            owner: random::owner_token(),
            ttl: self.options.ttl(),
        };
        let mut pending = PendingAcquire {
            backend: self.client.backend().clone(),
            lease,
            in_doubt: false,
        };
        let attempts = self.options.attempts();
        let mut attempt = 1;
        loop {
            let sent_at = Instant::now();
            pending.in_doubt = true;
            let (error, holder_remaining) = match pending.backend.acquire(&pending.lease).await {
                Ok(Acquire::Granted { token }) => return Ok(pending.into_guard(token, sent_at)),
                Ok(Acquire::Held { remaining }) => {
                    pending.in_doubt = false;
                    let error = LockError::NotAcquired {
                        key: pending.lease.key.clone(),
                        attempts: attempt,
                    };
                    (error, remaining)
                }
                // The attempt may have been applied: stay in doubt, so that a retry with the
                // same owner token is recognised, and giving up deletes the grant.
                Err(error) if error.is_backend() => (error, None),
                Err(error) => return Err(error),
            };
            if attempt >= attempts {
                return Err(error);
            }
            tracing::debug!(key = %pending.lease.key, attempt, %error, "lock not acquired; retrying");
            tokio::time::sleep(self.options.pause(holder_remaining)).await;
            attempt += 1;
        }
    }
}

/// An acquisition in progress; if dropped while an attempt may have been applied, deletes
/// the possible grant in the background.
struct PendingAcquire {
    backend: Arc<dyn LockBackend>,
    lease: Lease,
    in_doubt: bool,
}

impl PendingAcquire {
    fn into_guard(mut self, token: u64, sent_at: Instant) -> LockGuard {
        self.in_doubt = false;
        LockGuard::new(self.backend.clone(), self.lease.clone(), token, sent_at)
    }
}

impl Drop for PendingAcquire {
    fn drop(&mut self) {
        if self.in_doubt {
            release_in_background(
                self.backend.clone(),
                self.lease.clone(),
                Instant::now() + self.lease.ttl,
            );
        }
    }
}
