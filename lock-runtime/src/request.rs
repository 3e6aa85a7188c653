//! `LockRequest`: the builder returned by `LockClient::lock`, and the acquire loop.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, Lease};
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

    /// Renew the lease every `ttl_ms / 3` while held (default `true`).
    pub fn renew(mut self, renew: bool) -> Self {
        self.options = self.options.renew(renew);
        self
    }

    /// Keep the key taken at least this long after acquiring (ShedLock's `lockAtLeastFor`).
    pub fn min_hold_ms(mut self, min_hold_ms: u64) -> Self {
        self.options = self.options.min_hold_ms(min_hold_ms);
        self
    }

    /// Stop renewing after this long; the lock then counts as lost.
    pub fn max_hold_ms(mut self, max_hold_ms: u64) -> Self {
        self.options = self.options.max_hold_ms(max_hold_ms);
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
            client: self.client,
            lease,
            in_doubt: false,
        };
        let attempts = self.options.attempts();
        let mut attempt = 1;
        loop {
            let sent_at = Instant::now();
            pending.in_doubt = true;
            let outcome = pending.client.backend().acquire(&pending.lease).await;
            let (error, holder_remaining) = match outcome {
                Ok(Acquire::Granted { token }) => {
                    return pending.into_guard(token, sent_at, &self.options);
                }
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
    client: LockClient,
    lease: Lease,
    in_doubt: bool,
}

impl PendingAcquire {
    /// The guard of a grant: from now on the lease is renewed and watched for loss. If that
    /// cannot start, `self` is dropped in doubt and the grant deleted again.
    fn into_guard(
        mut self,
        token: u64,
        sent_at: Instant,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let tracking = self
            .client
            .renewer()
            .track(self.lease.clone(), sent_at, options)?;
        self.in_doubt = false;
        Ok(LockGuard::new(
            self.client.clone(),
            self.lease.clone(),
            token,
            sent_at,
            options.min_hold(),
            tracking,
        ))
    }
}

impl Drop for PendingAcquire {
    fn drop(&mut self) {
        if self.in_doubt {
            release_in_background(&self.client, self.lease.clone(), Duration::ZERO);
        }
    }
}
