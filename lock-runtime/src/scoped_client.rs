//! The scoped client: the one a `#[redis_lock]` function without `client = ...` uses, from
//! the innermost [`with_client`] scope, else installed globally.

use std::future::Future;
use std::sync::OnceLock;

use crate::{LockClient, LockError};

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

tokio::task_local! {
    static SCOPED: LockClient;
}

impl LockClient {
    /// Makes this the client of every `#[redis_lock]` without `client = ...` that runs
    /// outside a [`with_client`] scope. Fails if a global client is installed already.
    pub fn install_global(self) -> Result<(), LockError> {
        GLOBAL.set(self).map_err(|_| {
            LockError::invalid_config(
                "a global lock client is installed already; install it once at start-up, or \
                 use `fencelock::with_client` to scope a client",
            )
        })
    }

    /// The client of the innermost [`with_client`] scope, else the global one.
    pub(crate) fn in_scope() -> Result<LockClient, LockError> {
        SCOPED
            .try_with(LockClient::clone)
            .ok()
            .or_else(|| GLOBAL.get().cloned())
            .ok_or_else(LockError::no_client)
    }
}

/// Runs `future` with `client` as the client of every `#[redis_lock]` function without
/// `client = ...` that it calls (checked before the global client). The scope does not
/// follow work into tasks spawned from `future`.
///
/// ```
/// use fencelock::{LockClient, LockError, redis_lock, with_client};
///
/// #[redis_lock(key = "invoice:{id}")]
/// async fn send_invoice(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// // Each test can give its code a lock space of its own.
/// with_client(LockClient::memory(), send_invoice(7)).await?;
/// # Ok(())
/// # }
/// ```
pub async fn with_client<F: Future>(client: LockClient, future: F) -> F::Output {
    SCOPED.scope(client, future).await
}
