//! `LockGuard`: a held lease, renewed while held, released explicitly or when dropped.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{HeldLease, Lease, Release, resend_once};
use crate::background_release::{Holder, release_in_background};
use crate::body_scope::{Held, ShardMarking};
use crate::release_hub::{OwnerTag, owner_tag};
use crate::renewal::{LossCause, LossSignal, Tracking};
use crate::telemetry::{Holding, LockSpan};
use crate::{LockClient, LockError, LockKind};

/// A held lock. Release it with [`LockGuard::release`] to learn the outcome; dropping it
/// releases it in the background (also when a body panics or its future is dropped).
///
/// Taken inside the body of a `#[redis_lock]` function that holds its key through the same
/// client, the guard re-enters the body's lock: it has the body's token and sees its loss,
/// and its release or drop sends nothing, the body's holder releasing the lock. Kept past
/// the body (returned, moved into a task), it holds nothing once the body's lock is given
/// back: it is lost then ([`LossCause::NotOwner`]), as a guard whose key another owner
/// took.
#[must_use = "dropping a LockGuard releases the lock at once"]
pub struct LockGuard {
    client: LockClient,
    lease: Lease,
    token: u64,
    shard: Option<u32>,
    /// Until when `min_hold_ms` keeps the key taken.
    hold_until: Instant,
    hold: Hold,
    released: bool,
    /// A reply to one of the acquire attempts was lost: after the release, one more cleanup
    /// is due, in case a backend that cannot settle lost calls runs that attempt late.
    in_doubt: bool,
}

/// Whose the grant is to renew and release.
enum Hold {
    /// This guard's: renewed and watched for loss while held, its hold recorded in the span.
    Own {
        tracking: Tracking,
        holding: Holding,
    },
    /// A lock the current body holds, re-entered: its holder's loss signal, and the span of
    /// this request (outcome `reentered`). Only the holder ends it.
    Reentered {
        signal: Arc<LossSignal>,
        span: LockSpan,
    },
}

impl LockGuard {
    /// The guard of `lease`'s grant with its fencing token and shard (`granted`).
    pub(crate) fn new(
        client: LockClient,
        lease: Lease,
        (token, shard): (u64, Option<u32>),
        hold_until: Instant,
        tracking: Tracking,
        in_doubt: bool,
        holding: Holding,
    ) -> Self {
        LockGuard {
            client,
            lease,
            token,
            shard,
            hold_until,
            hold: Hold::Own { tracking, holding },
            released: false,
            in_doubt,
        }
    }

    /// A guard re-entering `held`, the lock the current body holds, requested in `span`.
    pub(crate) fn reentered(client: LockClient, held: Held, span: LockSpan) -> Self {
        span.reentered(held.token);
        LockGuard {
            client,
            lease: held.lease,
            token: held.token,
            shard: held.shard,
            hold_until: Instant::now(),
            hold: Hold::Reentered {
                signal: held.signal,
                span,
            },
            released: false,
            in_doubt: false,
        }
    }

    /// The loss signal of the grant: this guard's, or the holder's it re-entered.
    fn signal(&self) -> &Arc<LossSignal> {
        match &self.hold {
            Hold::Own { tracking, .. } => tracking.signal(),
            Hold::Reentered { signal, .. } => signal,
        }
    }

    fn lock_span(&self) -> &LockSpan {
        match &self.hold {
            Hold::Own { holding, .. } => holding.span(),
            Hold::Reentered { span, .. } => span,
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

    /// The tag of this grant's owner, as the operator view ([`LockClient::admin`]) and
    /// release notifications name it (the owner token itself stays secret: whoever has it
    /// can release the lock).
    pub fn owner(&self) -> OwnerTag {
        owner_tag(&self.lease.owner)
    }

    /// The kind of lock held.
    pub fn kind(&self) -> LockKind {
        self.lease.kind
    }

    /// The shard held, `0..shards`, for a segmented lock ([`LockClient::segmented`]); `None`
    /// for other kinds.
    pub fn shard(&self) -> Option<u32> {
        self.shard
    }

    /// For a segmented lock: marks the shard held exhausted in the store, if this grant still
    /// holds it, so that every client's later acquisitions of the key skip it until
    /// [`LockClient::refill_shards`] clears the mark (and one for which every shard is marked
    /// fails with [`LockError::Exhausted`]). Release the guard afterwards and acquire again to
    /// move on to another shard.
    ///
    /// Returns [`LockError::Lost`] if the grant no longer holds the shard (nothing is marked),
    /// and [`LockError::InvalidConfig`] for another kind of lock or a backend without
    /// segmented locks.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let guard = locks.segmented("stock:tea", 1).acquire().await?;
    /// guard.mark_exhausted().await?;
    /// guard.release().await?;
    /// let none_left = locks.segmented("stock:tea", 1).acquire().await.unwrap_err();
    /// assert!(none_left.is_exhausted());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn mark_exhausted(&self) -> Result<(), LockError> {
        let Some(marking) = self.shard_marking(Default::default()) else {
            return Err(LockError::invalid_config(format!(
                "`mark_exhausted` marks a segmented lock's shard, and `{}` is held as a {} lock: \
                 take it with `LockClient::segmented`",
                self.lease.key,
                self.lease.kind.name()
            )));
        };
        marking.mark().await.map(drop)
    }

    /// This grant as the backend knows it: its lease, token and shard.
    pub(crate) fn held_lease(&self) -> HeldLease {
        HeldLease {
            lease: self.lease.clone(),
            token: self.token,
            slot: self.shard,
        }
    }

    /// What marking this grant's shard exhausted needs, for a segmented lock.
    pub(crate) fn shard_marking(
        &self,
        exhausted: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<ShardMarking> {
        self.shard?;
        Some(ShardMarking {
            client: self.client.clone(),
            held: self.held_lease(),
            signal: self.loss_signal(),
            exhausted,
        })
    }

    /// Completes when the lease is lost (at once if it already was), with the
    /// [`LockError::Lost`] that says why. `select!` on it to stop work that must not go on
    /// without the lock.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use fencelock::{LockClient, LockError, LossCause};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// // Without renewal the lease simply runs out: work that takes longer is cut short.
    /// let guard = locks.lock("nightly-job").ttl_ms(100).renew(false).acquire().await?;
    /// let outcome = tokio::select! {
    ///     lost = guard.lost() => Err(lost),
    ///     () = tokio::time::sleep(Duration::from_secs(10)) => Ok(()),
    /// };
    /// assert!(matches!(outcome, Err(LockError::Lost { cause: LossCause::Expired, .. })));
    /// assert!(guard.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lost(&self) -> LockError {
        let cause = self.signal().lost(self.is_reentered()).await;
        self.lost_error(cause)
    }

    /// Whether the lease has been lost (for a guard that re-entered its body's lock: also
    /// once the body's holder released it).
    pub fn is_lost(&self) -> bool {
        self.cause().is_some()
    }

    fn is_reentered(&self) -> bool {
        matches!(self.hold, Hold::Reentered { .. })
    }

    /// Why the lease is lost, if it is: a re-entered lock is lost to this guard once its
    /// holder ended it (the body returned, and the lock was given back).
    fn cause(&self) -> Option<LossCause> {
        match self.is_reentered() {
            true => self.signal().cause_or_end(),
            false => self.signal().cause(),
        }
    }

    /// The id of the client that holds it.
    pub(crate) fn client_id(&self) -> u64 {
        self.client.id()
    }

    /// The loss signal, for the scope of a `#[redis_lock]` body.
    pub(crate) fn loss_signal(&self) -> Arc<LossSignal> {
        self.signal().clone()
    }

    fn lost_error(&self, cause: LossCause) -> LockError {
        LockError::lost(self.lease.key.clone(), cause)
    }

    /// The `fencelock.lock` span of the request that acquired this guard (see
    /// [`telemetry`](crate::telemetry)): it lasts until the guard is released or dropped.
    /// Run the work done under the lock in it to see that work under the lock in traces.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    /// use tracing::Instrument;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let guard = locks.lock("invoice:7").acquire().await?;
    /// async { tracing::info!("writing the invoice") }
    ///     .instrument(guard.span().clone())
    ///     .await;
    /// guard.release().await
    /// # }
    /// ```
    pub fn span(&self) -> &tracing::Span {
        self.lock_span().span()
    }

    /// Releases the lock if it is still ours (with `min_hold_ms`, shortens its lease to what
    /// is left of it instead). Renewal stops first.
    ///
    /// Returns [`LockError::Lost`] if the key was no longer ours (it expired, was deleted, or
    /// another owner holds it; that owner's lock is left alone). A release whose reply is lost
    /// is sent once more; the backend remembers each owner's release for longer than a resend
    /// can take to arrive (three response timeouts and a second), whatever the key saw
    /// meanwhile, so the second send still reports `Ok` when the first one released it; if it
    /// finds the key gone or taken otherwise, the call reports the loss with cause
    /// `LossCause::Unconfirmed`. On a backend error the release is retried in the background
    /// until the lease would have ended anyway.
    ///
    /// A guard that re-entered the lock of the body it was taken in sends nothing: it returns
    /// [`LockError::Lost`] if that lock is known lost or was given back by the body's holder,
    /// else `Ok(())`, and the lock stays held.
    ///
    /// # Cancel safety
    /// Dropping this future before it completes leaves the release to the background, as
    /// dropping the guard does: the lock is never left behind.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let guard = locks.lock("report").acquire().await?;
    /// let meanwhile = locks.lock("report").give_up().acquire().await;
    /// assert!(meanwhile.unwrap_err().is_not_acquired());
    ///
    /// guard.release().await?;
    /// let next = locks.lock("report").give_up().acquire().await?;
    /// assert!(next.token() > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        let Hold::Own { tracking, holding } = &mut self.hold else {
            let cause = self.cause();
            return cause.map_or(Ok(()), |cause| Err(self.lost_error(cause)));
        };
        tracking.stop();
        holding.end();
        tracking.signal().end();
        if released_by_shutdown(self.signal()) {
            self.released = true;
            return Err(self.lost_error(LossCause::ShutDown));
        }
        let min_hold = self.hold_until.saturating_duration_since(Instant::now());
        let backend = self.client.backend().clone();
        let span = self.span().clone();
        let held = self.held_lease();
        let (outcome, resent_at) = resend_once(|| backend.release_held(&held, min_hold))
            .instrument(span)
            .await;
        // On an error the guard stays unreleased: its drop retries in the background.
        let outcome = outcome?;
        self.released = true;
        let span = self.lock_span();
        match outcome {
            Release::Released => {
                span.released("released");
                Ok(())
            }
            Release::NotOwner | Release::Unconfirmed => {
                span.released("lost");
                let cause = if resent_at.is_some() || outcome == Release::Unconfirmed {
                    LossCause::Unconfirmed
                } else {
                    LossCause::NotOwner
                };
                let signal = self.signal();
                if signal.lose(cause) {
                    span.lost(&self.lease.key, cause);
                }
                Err(self.lost_error(signal.cause().unwrap_or(cause)))
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
            .field("kind", &self.lease.kind)
            .field("shard", &self.shard)
            .field("ttl", &self.lease.ttl)
            .field("lost", &self.cause())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// Gives back a grant never handed out (or given back with the call for several keys it
    /// was part of) because its client shut down: released without `min_hold_ms`, since
    /// nothing ran under it, and counted once in the shutdown's report: in
    /// [`withdrawn`](crate::ShutdownReport::withdrawn), unless the shutdown released it
    /// itself (it counts it then) or it was lost already. A re-entered lock is its holder's: nothing is given back.
    pub(crate) fn withdraw_for_shutdown(mut self) {
        self.hold_until = Instant::now();
        let Hold::Own { tracking, .. } = &self.hold else {
            return;
        };
        // Once the lease is no longer tracked, the shutdown has released it or never will; a
        // lease lost before (its renewal found it gone) is nobody's to give back.
        tracking.stop();
        if tracking.signal().cause().is_none() {
            self.client.shutdown_state().withdrew();
        }
    }
}

/// Whether the client's shutdown released the lease whose loss signal is `signal` (and told
/// its holder so); asked once the lease is no longer tracked, when the answer cannot change.
fn released_by_shutdown(signal: &LossSignal) -> bool {
    signal.cause() == Some(LossCause::ShutDown)
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // A re-entered lock is its holder's to release.
        let Hold::Own { tracking, holding } = &mut self.hold else {
            return;
        };
        // Stop renewal before the release is sent, so no extend can follow it; and before the
        // look at a shutdown, which drains only leases still tracked.
        tracking.stop();
        tracking.signal().end();
        let released = self.released || released_by_shutdown(tracking.signal());
        if !released || self.in_doubt {
            holding.end();
            release_in_background(
                &self.client,
                self.lease.clone(),
                Some(self.token),
                self.hold_until,
                self.in_doubt,
                (!released).then(|| Holder {
                    span: holding.span().clone(),
                    signal: tracking.signal().clone(),
                    report_to: None,
                }),
            );
        }
    }
}
