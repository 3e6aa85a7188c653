//! `LockGuard`: a held lease, released explicitly or when dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Lease, LockBackend, Release};
use crate::{LockError, driver};

/// A held lock. Release it with [`LockGuard::release`] to learn the outcome; dropping it
/// releases it in the background (also when a body panics or its future is dropped).
#[must_use = "dropping a LockGuard releases the lock at once"]
#[derive(Debug)]
pub struct LockGuard {
    backend: Arc<dyn LockBackend>,
    lease: Lease,
    token: u64,
    /// When the granting request was sent: the lease cannot end before `lease_start + ttl`.
    lease_start: Instant,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        lease: Lease,
        token: u64,
        lease_start: Instant,
    ) -> Self {
        LockGuard {
            backend,
            lease,
            token,
            lease_start,
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

    /// Releases the lock if it is still ours.
    ///
    /// Returns [`LockError::Lost`] if the lease had ended (the key expired or another owner
    /// holds it; that owner's lock is left alone). On a backend error the release is retried
    /// in the background until the lease would have ended anyway.
    ///
    /// # Cancel safety
    /// Dropping this future before it completes leaves the release to the background, as
    /// dropping the guard does: the lock is never left behind.
    pub async fn release(mut self) -> Result<(), LockError> {
        match self.backend.release(&self.lease).await? {
            Release::Released => {
                self.released = true;
                Ok(())
            }
            Release::NotOwner => {
                self.released = true;
                Err(LockError::Lost {
                    key: self.lease.key.clone(),
                })
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            release_in_background(
                self.backend.clone(),
                self.lease.clone(),
                self.lease_start + self.lease.ttl,
            );
        }
    }
}

/// Releases `lease` on the driver, retrying backend errors with backoff until `deadline`,
/// after which the lease has ended by itself. Never blocks the caller.
pub(crate) fn release_in_background(
    backend: Arc<dyn LockBackend>,
    lease: Lease,
    deadline: Instant,
) {
    let spawned = driver::spawn(async move {
        let mut pause = Duration::from_millis(20);
        loop {
            match backend.release(&lease).await {
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
        tracing::warn!(key = %lease_key_hint(&error), %error, "cannot release in the background; the lease ends by its TTL");
    }
}

fn lease_key_hint(error: &LockError) -> String {
    match error {
        LockError::Backend { key: Some(key), .. } => key.clone(),
        _ => String::new(),
    }
}
