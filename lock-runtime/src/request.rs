//! `LockRequest`: the builder returned by `LockClient::lock`.

use crate::acquire::Acquisition;
use crate::{LockClient, LockError, LockGuard, LockOptions};

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

    /// Attempts after the first failed one that follow a wait no release notification
    /// ended (default 5); switches to `Continue`.
    pub fn retry(mut self, retry: u32) -> Self {
        self.options = self.options.retry(retry);
        self
    }

    /// The longest time to wait in all (default `retry × sleep_ms`); switches to `Continue`.
    /// Bounds the whole call, also while the backend is slow to answer.
    pub fn wait_ms(mut self, wait_ms: u64) -> Self {
        self.options = self.options.wait_ms(wait_ms);
        self
    }

    /// Serve waiters in arrival order across processes (default `false`).
    pub fn fair(mut self, fair: bool) -> Self {
        self.options = self.options.fair(fair);
        self
    }

    /// Longest pause between attempts when no release notification comes, in milliseconds
    /// (default 200).
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

    /// Acquires the lock, waiting as the options say.
    ///
    /// After a failed attempt the request subscribes to the key's release notifications
    /// (once, before the next attempt), then waits for a release, at most `sleep_ms`
    /// (jittered) or until the holder's lease ends, and tries again. An attempt that a
    /// notification woke and that lost the race to another waiter does not count against
    /// `retry`; the whole wait is bounded by `wait_ms`.
    ///
    /// Errors: [`LockError::NotAcquired`] if another owner held it at the last attempt,
    /// [`LockError::Backend`] if the last attempt could not reach the backend (or, with
    /// `wait_ms`, no attempt answered in time), [`LockError::KeyInUse`] at once if the key
    /// holds foreign data, [`LockError::InvalidKey`] / [`LockError::InvalidConfig`] before
    /// anything is sent.
    ///
    /// # Cancel safety
    /// If this future is dropped while an attempt may have been applied, or while it waits
    /// in a fair queue, the grant or the queue place is deleted again in the background
    /// (by the owner-checked release script, with this request's owner token).
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let held = locks.lock("import").acquire().await?;
    /// // Waits at most 50 ms in all, then reports who is in the way.
    /// match locks.lock("import").wait_ms(50).acquire().await {
    ///     Err(LockError::NotAcquired { attempts, .. }) => assert!(attempts >= 1),
    ///     other => panic!("the lock is held: {other:?}"),
    /// }
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        Acquisition::start(self.client, self.key, self.options)?
            .run()
            .await
    }
}
