//! The locks held around the running `#[redis_lock]` body: its fencing token, its loss
//! signal, and reentry.
//!
//! A task-local scoped to each holder's body, not a thread or task id: only code nested in
//! the body's future sees it. Two branches of one `join!` are polled outside each other's
//! scope, and a task spawned from the body starts with no scope, so both wait like anyone
//! else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::{HeldLease, Lease, not_offered};
use crate::renewal::{LossCause, LossSignal};
use crate::{LockClient, LockError, LockGuard, LockKind, LockOptions};

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
    /// The holder's lease (its key, kind and owner): what a guard re-entering it names.
    pub(crate) lease: Lease,
    pub(crate) token: u64,
    pub(crate) shard: Option<u32>,
    pub(crate) signal: Arc<LossSignal>,
    /// A segmented lock's shard, for [`shard_exhausted`].
    marking: Option<Arc<ShardMarking>>,
}

impl Held {
    /// The lock `guard` holds; `exhausted` is set if the body marks its shard exhausted.
    pub(crate) fn of(guard: &LockGuard, exhausted: &Arc<AtomicBool>) -> Held {
        Held {
            client_id: guard.client_id(),
            lease: guard.held_lease().lease,
            token: guard.token(),
            shard: guard.shard(),
            signal: guard.loss_signal(),
            marking: guard.shard_marking(exhausted.clone()).map(Arc::new),
        }
    }

    fn lost_error(&self) -> Option<LockError> {
        self.signal
            .cause()
            .map(|cause| LockError::lost(self.lease.key.clone(), cause))
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

/// A segmented lock's grant, as marking its shard exhausted needs it.
#[derive(Debug)]
pub(crate) struct ShardMarking {
    pub(crate) client: LockClient,
    pub(crate) held: HeldLease,
    pub(crate) signal: Arc<LossSignal>,
    /// Set once the shard is marked: the call runs its body again on another shard.
    pub(crate) exhausted: Arc<AtomicBool>,
}

impl ShardMarking {
    /// Marks the shard exhausted in the store, if the grant still holds it; a grant that
    /// does not is lost.
    pub(crate) async fn mark(&self) -> Result<u32, LockError> {
        let (key, shard) = (&self.held.lease.key, self.held.slot.unwrap_or_default());
        let Some(marks) = self.client.backend().shard_marks() else {
            return Err(not_offered("exhausted shards"));
        };
        if !marks.mark_exhausted(&self.held).await? {
            self.signal.lose(LossCause::NotOwner);
            let cause = self.signal.cause().unwrap_or(LossCause::NotOwner);
            return Err(LockError::lost(key.clone(), cause));
        }
        self.exhausted.store(true, Ordering::Release);
        Ok(shard)
    }
}

/// Inside the body of a segmented lock (`#[redis_lock(shards = N)]`), marks the shard held
/// (the innermost segmented lock's) exhausted in the store, if it is still held, and returns
/// the error for the body to return: every client's later calls skip the shard until
/// [`LockClient::refill_shards`] clears the mark, and a call whose body names
/// `shard_exhausted` runs its body again on another shard, within its wait, until a run
/// returns something else or no shard is left ([`LockError::Exhausted`] with `shard: None`).
///
/// Returns [`LockError::Exhausted`] naming the shard once it is marked; [`LockError::Lost`]
/// if the shard is no longer held (nothing is marked: what the body saw may be stale, and
/// the call does not move on); the store's error if the mark could not be sent; and
/// [`LockError::InvalidConfig`] outside the body of a segmented lock. A body that runs
/// again must not move its arguments: take them by reference, or clone them.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
///
/// use fencelock::{LockClient, LockError, current_shard, redis_lock, shard_exhausted, with_client};
///
/// // One unit of tea left, in shard 5 of 8.
/// static STOCK: Mutex<[u32; 8]> = Mutex::new([0, 0, 0, 0, 0, 1, 0, 0]);
///
/// #[redis_lock(key = "stock:{sku}", shards = 8)]
/// async fn buy(sku: &str) -> Result<u32, LockError> {
///     let shard = current_shard().expect("runs under a segmented lock");
///     let taken = {
///         let mut stock = STOCK.lock().unwrap();
///         let left = &mut stock[shard as usize];
///         left.checked_sub(1).map(|after| *left = after)
///     };
///     match taken {
///         Some(()) => Ok(shard),
///         None => Err(shard_exhausted().await),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locks = LockClient::memory();
/// assert_eq!(with_client(locks.clone(), buy("tea")).await?, 5, "the last unit is sold");
/// let sold_out = with_client(locks.clone(), buy("tea")).await.unwrap_err();
/// assert!(matches!(sold_out, LockError::Exhausted { shard: None, .. }));
///
/// STOCK.lock().unwrap()[2] = 10;
/// locks.refill_shards("stock:tea").await?;
/// assert_eq!(with_client(locks, buy("tea")).await?, 2);
/// # Ok(())
/// # }
/// ```
pub async fn shard_exhausted() -> LockError {
    let marking = HELD
        .try_with(|chain| chain.locks().find_map(|h| h.marking.clone()))
        .ok()
        .flatten();
    let Some(marking) = marking else {
        return LockError::invalid_config(
            "shard_exhausted() was called outside the body of a segmented lock: call it in the \
             body of a `#[redis_lock(shards = N)]` function, or mark a guard's shard with \
             `LockGuard::mark_exhausted`",
        );
    };
    match marking.mark().await {
        Ok(shard) => LockError::exhausted(marking.held.lease.key.clone(), Some(shard)),
        Err(error) => error,
    }
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
        .map(|held| (held.lease.key, held.token))
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
    let each = held.iter().map(|held| Box::pin(held.signal.lost(false)));
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
            .find(|h| h.client_id == client_id && h.lease.key == key)
            .cloned()
    })
    .ok()
    .flatten()
}

/// Whether a request for `key` of `kind` with `options` through the client `client_id`
/// re-enters a lock the current body holds: `Some` lock to re-enter, `None` if the body does
/// not hold the key (the request acquires it), or the error that says why it cannot re-enter
/// (see [`LockKind::reenters`]). The attribute's calls and the calls by hand inside a body
/// (`lock`, `lock_all`, ...) decide here alike.
pub(crate) fn reentry(
    client_id: u64,
    key: &str,
    kind: LockKind,
    options: &LockOptions,
) -> Result<Option<Held>, LockError> {
    let Some(held) = held(client_id, key) else {
        return Ok(None);
    };
    // Reentering sends nothing, so nothing else checks the options (which expressions may
    // have made invalid); `acquire` does on the other path.
    kind.validate()?;
    kind.reenters(held.lease.kind, held.shard, key)?;
    options.validate()?;
    Ok(Some(held))
}
