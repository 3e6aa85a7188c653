//! The locks held around the running `#[redis_lock]` body: its fencing token, its loss
//! signal, and reentry.
//!
//! A task-local scoped to each holder's body, not a thread or task id: only code nested in
//! the body's future sees it. Two branches of one `join!` are polled outside each other's
//! scope, and a task spawned from the body starts with no scope, so both wait like anyone
//! else.

use std::sync::Arc;

use crate::renewal::LossSignal;
use crate::{LockError, LockGuard, LockKind};

tokio::task_local! {
    static HELD: Arc<Chain>;
}

/// The locks held around a body, innermost first: each body's scope adds a link to the
/// chain of the body it runs in, so entering a scope copies nothing.
#[derive(Debug)]
pub(crate) struct Chain {
    /// The innermost call's locks: one, or a `keys = [...]` call's, in sorted key order.
    pub(crate) held: Vec<Held>,
    outer: Option<Arc<Chain>>,
}

impl Chain {
    /// The chain of the current body (if any) with `held` as its innermost call's locks.
    pub(crate) fn inside_current(held: Vec<Held>) -> Arc<Chain> {
        let outer = HELD.try_with(Arc::clone).ok();
        Arc::new(Chain { held, outer })
    }

    /// Runs `f` (a poll or a drop of the body) with this chain as the body's locks.
    pub(crate) fn scope<T>(self: &Arc<Self>, f: impl FnOnce() -> T) -> T {
        HELD.sync_scope(self.clone(), f)
    }

    fn locks(&self) -> impl Iterator<Item = &Held> {
        std::iter::successors(Some(self), |chain| chain.outer.as_deref())
            .flat_map(|chain| &chain.held)
    }
}

/// One lock held around the current body.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) client_id: u64,
    pub(crate) key: String,
    pub(crate) kind: LockKind,
    pub(crate) token: u64,
    pub(crate) shard: Option<u32>,
    pub(crate) signal: Arc<LossSignal>,
}

impl Held {
    /// The lock `guard` holds.
    pub(crate) fn of(guard: &LockGuard) -> Held {
        Held {
            client_id: guard.client_id(),
            key: guard.key().to_owned(),
            kind: guard.kind(),
            token: guard.token(),
            shard: guard.shard(),
            signal: guard.loss_signal(),
        }
    }

    fn lost_error(&self) -> Option<LockError> {
        self.signal
            .cause()
            .map(|cause| LockError::lost(self.key.clone(), cause))
    }
}

/// The innermost call's locks; empty outside any body.
fn innermost_call() -> Vec<Held> {
    HELD.try_with(|chain| chain.held.clone())
        .unwrap_or_default()
}

fn innermost() -> Option<Held> {
    innermost_call().into_iter().next()
}

/// Inside the body of a `#[redis_lock]` function, the fencing token of the innermost lock
/// held (of a `keys = [...]` call's, the first key's in sorted order: see
/// [`current_tokens`]); `None` elsewhere (including in tasks spawned from the body).
///
/// ```
/// use fencelock::{LockClient, LockError, current_token, redis_lock, with_client};
///
/// #[redis_lock(key = "account:{id}")]
/// async fn debit(id: u64) -> Result<u64, LockError> {
///     // Hand the token to the store, which refuses writes with a token older than the last.
///     Ok(current_token().expect("runs under the lock"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locks = LockClient::memory();
/// let first = with_client(locks.clone(), debit(1)).await?;
/// let second = with_client(locks, debit(1)).await?;
/// assert!(second > first);
/// assert_eq!(current_token(), None);
/// # Ok(())
/// # }
/// ```
pub fn current_token() -> Option<u64> {
    innermost().map(|held| held.token)
}

/// Inside the body of a `#[redis_lock]` function, the shard of the innermost segmented lock
/// held (`#[redis_lock(shards = N)]`), `0..N`; `None` elsewhere. The body uses it to pick
/// the part of the resource its shard guards, e.g. one of N stock counters.
///
/// ```
/// use fencelock::{LockClient, LockError, current_shard, redis_lock, with_client};
///
/// #[redis_lock(key = "stock:{sku}", shards = 8)]
/// async fn take_one(sku: &str) -> Result<u32, LockError> {
///     Ok(current_shard().expect("runs under a segmented lock"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let shard = with_client(LockClient::memory(), take_one("tea")).await?;
/// assert!(shard < 8);
/// assert_eq!(current_shard(), None);
/// # Ok(())
/// # }
/// ```
pub fn current_shard() -> Option<u32> {
    HELD.try_with(|chain| chain.locks().find_map(|h| h.shard))
        .ok()
        .flatten()
}

/// Inside the body of a `#[redis_lock]` function, each key of the innermost call with the
/// fencing token of its grant, in sorted key order: one for `key = ...`, one per key for
/// `keys = [...]`. Empty elsewhere.
///
/// ```
/// use fencelock::{LockClient, LockError, current_tokens, redis_lock, with_client};
///
/// #[redis_lock(keys = ["acct:{from}", "acct:{to}"])]
/// async fn transfer(from: u64, to: u64) -> Result<Vec<(String, u64)>, LockError> {
///     // Each account's store is handed its own key's token.
///     Ok(current_tokens())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let held = with_client(LockClient::memory(), transfer(7, 3)).await?;
/// let keys: Vec<&str> = held.iter().map(|(key, _)| key.as_str()).collect();
/// assert_eq!(keys, ["acct:3", "acct:7"]);
/// # Ok(())
/// # }
/// ```
pub fn current_tokens() -> Vec<(String, u64)> {
    innermost_call()
        .into_iter()
        .map(|held| (held.key, held.token))
        .collect()
}

/// Inside the body of a `#[redis_lock]` function, whether the innermost call's lock (any of
/// them, for `keys = [...]`) has been lost; `false` elsewhere. With `on_lost = Continue` a
/// body runs on after a loss: this is how it learns that what it does next may overlap with
/// another holder.
pub fn is_lost() -> bool {
    innermost_call()
        .iter()
        .any(|held| held.signal.cause().is_some())
}

/// Inside the body of a `#[redis_lock]` function, completes when the innermost call's lock
/// (any of them, for `keys = [...]`) is lost (at once if it already was), with the
/// [`LockError::Lost`] that says which and why; `None` at once elsewhere. `select!` on it to
/// stop work that must not go on without the lock.
pub async fn lost() -> Option<LockError> {
    let held = innermost_call();
    if held.is_empty() {
        return None;
    }
    let each = held.iter().map(|held| Box::pin(held.signal.lost()));
    let (_, first, _) = futures_util::future::select_all(each).await;
    held[first].lost_error()
}

/// Panics unless it runs inside the body of a `#[redis_lock]` function (or `#[lock]`), under
/// the lock it took, as ShedLock's `LockAssert.assertLocked()` does: code that must never
/// run unlocked states so, and a call path that skips the lock (a refactoring that calls
/// the inner function directly, a task spawned from the body) fails at once rather than
/// overlapping with another holder. It checks where the code runs, not whether the lease
/// still lasts: see [`is_lost`] for that.
///
/// ```
/// use fencelock::{LockClient, LockError, assert_locked, redis_lock, with_client};
///
/// #[redis_lock(key = "invoice:{id}")]
/// async fn issue(id: u64) -> Result<u64, LockError> {
///     write_invoice(id);
///     Ok(id)
/// }
///
/// fn write_invoice(id: u64) {
///     assert_locked(); // only ever under the invoice's lock
///     let _ = id;
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// with_client(LockClient::memory(), issue(7)).await?;
/// let unlocked = std::panic::catch_unwind(|| write_invoice(7));
/// assert!(unlocked.is_err(), "called without the lock, it panics");
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn assert_locked() {
    if innermost().is_none() {
        panic!(
            "fencelock::assert_locked: this code runs outside the body of a #[redis_lock] \
             function, so no lock is held for it; call it through the locked function (a task \
             spawned from the body runs outside it too)"
        );
    }
}

/// The lock `key` if the current body runs under it, taken through the same client.
pub(crate) fn held(client_id: u64, key: &str) -> Option<Held> {
    HELD.try_with(|chain| {
        chain
            .locks()
            .find(|h| h.client_id == client_id && h.key == key)
            .cloned()
    })
    .ok()
    .flatten()
}
