//! `LockGuard`: a held lease, renewed while held, released explicitly or when dropped.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Lease, Release};
use crate::renewal::{LossCause, Tracking};
use crate::{LockClient, LockError};

/// A held lock. Release it with [`LockGuard::release`] to learn the outcome; dropping it
/// releases it in the background (also when a body panics or its future is dropped).
#[must_use = "dropping a LockGuard releases the lock at once"]
pub struct LockGuard {
    client: LockClient,
    lease: Lease,
    token: u64,
    /// When the granting request was sent.
    acquired_at: Instant,
    min_hold: Duration,
    tracking: Tracking,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(
        client: LockClient,
        lease: Lease,
        token: u64,
        acquired_at: Instant,
        min_hold: Duration,
        tracking: Tracking,
    ) -> Self {
        LockGuard {
            client,
            lease,
            token,
            acquired_at,
            min_hold,
            tracking,
            released: false,
        }
    }

    /// The lock key, as the request named it.
    pub fn key(&self) -> &str {
        &self.lease.key
    }

    /// The fencing token of this grant: greater than every token granted before for this
    /// key. Pass it to the protected resource and let it refuse writes with older tokens.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Completes when the lease is lost (at once if it already was), with the
    /// [`LockError::Lost`] that says why. `select!` on it to stop work that must not go on
    /// without the lock.
    pub async fn lost(&self) -> LockError {
        let cause = self.tracking.signal().lost().await;
        self.lost_error(cause)
    }

    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.tracking.signal().cause().is_some()
    }

    fn lost_error(&self, cause: LossCause) -> LockError {
        LockError::Lost {
            key: self.lease.key.clone(),
            cause,
        }
    }

    /// What is left of `min_hold_ms`: the release keeps the key taken that much longer.
    fn keep(&self) -> Duration {
        self.min_hold.saturating_sub(self.acquired_at.elapsed())
    }

    /// Releases the lock if it is still ours (with `min_hold_ms`, shortens its lease to what
    /// is left of it instead). Renewal stops first.
    ///
    /// Returns [`LockError::Lost`] if the key was no longer ours (it expired, or another owner
    /// holds it; that owner's lock is left alone). On a backend error the release is retried
    /// in the background until the lease would have ended anyway.
    ///
    /// # Cancel safety
    /// Dropping this future before it completes leaves the release to the background, as
    /// dropping the guard does: the lock is never left behind.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.tracking.stop();
        let keep = self.keep();
        match self.client.backend().release(&self.lease, keep).await? {
            Release::Released => {
                self.released = true;
                Ok(())
            }
            Release::NotOwner => {
                self.released = true;
                self.tracking.signal().lose(LossCause::NotOwner);
                Err(self.lost_error(LossCause::NotOwner))
            }
        }
    }
}

// The owner token stays out of Debug output: whoever has it can release the lock.
impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lease.key)
            .field("token", &self.token)
            .field("ttl", &self.lease.ttl)
            .field("lost", &self.tracking.signal().cause())
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            // Stop renewal before the release is sent, so no extend can follow it.
            self.tracking.stop();
            let keep = self.keep();
            release_in_background(&self.client, self.lease.clone(), keep);
        }
    }
}

/// Releases `lease` in the client's background, retrying backend errors with backoff until
/// the lease has certainly ended by itself. Never blocks the caller.
pub(crate) fn release_in_background(client: &LockClient, lease: Lease, keep: Duration) {
    let backend = client.backend().clone();
    let deadline = Instant::now() + lease.ttl + keep;
    let spawned = client.background().spawn(async move {
        let mut pause = Duration::from_millis(20);
        loop {
            match backend.release(&lease, keep).await {
                Ok(_) => return,
                Err(error) if Instant::now() + pause < deadline => {
                    tracing::debug!(key = %lease.key, %error, "background release failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(error) => {
                    tracing::warn!(key = %lease.key, %error, "background release gave up; the lease ends by its TTL");
                    return;
                }
            }
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot release in the background; the lease ends by its TTL");
    }
}
