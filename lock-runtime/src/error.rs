//! The one error type of the runtime.

use std::error::Error as StdError;
use std::sync::Arc;

/// Why a lock operation failed.
///
/// Match on variants with `{ .. }`: the enum and its variants may gain fields and variants.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Someone else holds the lock, and the request's attempts are used up.
    #[error("lock `{key}` is held by another owner (gave up after {attempts} attempt(s))")]
    #[non_exhaustive]
    NotAcquired {
        /// The lock key, as the caller wrote it.
        key: String,
        /// How many times the backend was asked.
        attempts: u32,
    },
    /// The lease ended while the holder still held the guard: another owner may hold the
    /// key now, so whatever ran since may have overlapped with that owner.
    #[error("lock `{key}` was lost while held: {cause}")]
    #[non_exhaustive]
    Lost {
        /// The lock key, as the caller wrote it.
        key: String,
        /// Why the lease ended.
        cause: crate::LossCause,
    },
    /// The backend could not be reached, timed out, or answered something unexpected.
    /// Says nothing about who holds the lock.
    #[error("lock backend failed{}: {message}", key.as_deref().map(|k| format!(" for lock `{k}`")).unwrap_or_default())]
    #[non_exhaustive]
    Backend {
        /// The lock key, when the failure happened on behalf of one.
        key: Option<String>,
        /// What went wrong.
        message: String,
        /// The underlying error (for Redis, a `redis::RedisError`).
        #[source]
        source: Option<Arc<dyn StdError + Send + Sync>>,
    },
    /// A `#[redis_lock]` function without `client = ...` ran with no client in scope.
    #[error(
        "no lock client: install one with `LockClient::install_global`, run the call inside \
         `fencelock::with_client`, or pass `client = ...` to `#[redis_lock]`"
    )]
    NoClient,
    /// The key is taken by data that is not a lock of this library (another program's value,
    /// a key without a TTL): nobody would ever release it, so the request does not wait.
    #[error("lock key `{key}` is in use by something else: {reason}; use another key or prefix")]
    #[non_exhaustive]
    KeyInUse {
        /// The lock key, as the caller wrote it.
        key: String,
        /// What the backend found there.
        reason: String,
    },
    /// The key cannot be used as a lock key.
    #[error("invalid lock key {key:?}: {reason}")]
    #[non_exhaustive]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },
    /// A request or client was configured with values the runtime refuses.
    #[error("invalid lock configuration: {reason}")]
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong and how to fix it.
        reason: String,
    },
}

impl LockError {
    /// `true` for [`LockError::NotAcquired`]: someone else held the lock.
    pub fn is_not_acquired(&self) -> bool {
        matches!(self, LockError::NotAcquired { .. })
    }

    /// `true` for [`LockError::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// `true` for [`LockError::Backend`]: the store failed, not the lock.
    pub fn is_backend(&self) -> bool {
        matches!(self, LockError::Backend { .. })
    }

    /// A [`LockError::Backend`]: what a [`crate::backend::LockBackend`] returns when its store
    /// failed, timed out or answered something unexpected (the call's effect is then
    /// unknown; see the trait's notes on lost replies).
    pub fn backend(
        key: Option<&str>,
        message: impl Into<String>,
        source: Option<Arc<dyn StdError + Send + Sync>>,
    ) -> Self {
        LockError::Backend {
            key: key.map(str::to_owned),
            message: message.into(),
            source,
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        LockError::InvalidConfig {
            reason: reason.into(),
        }
    }
}
