//! `LockRequest`: the builder returned by `LockClient::lock`.

use tracing::Instrument;

use crate::acquire::Acquisition;
use crate::body_scope;
use crate::telemetry::LockSpan;
use crate::{LockClient, LockError, LockGuard, LockKind, LockOptions};

/// A request for one lock of any [`LockKind`] (from [`LockClient::lock`],
/// [`read_lock`](LockClient::read_lock), [`write_lock`](LockClient::write_lock),
/// [`semaphore`](LockClient::semaphore) or [`segmented`](LockClient::segmented)). Configure
/// it, then `.acquire().await`.
#[must_use = "a lock request does nothing until `.acquire().await`"]
#[derive(Debug, Clone)]
pub struct LockRequest {
    client: LockClient,
    key: String,
    kind: LockKind,
    pub(crate) options: LockOptions,
}

impl LockRequest {
    pub(crate) fn new(client: LockClient, key: String, kind: LockKind) -> Self {
        LockRequest {
            client,
            key,
            kind,
            options: LockOptions::new(),
        }
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
    /// Inside the body of a `#[redis_lock]` function that holds the key through the same
    /// client, the request re-enters that lock as a nested `#[redis_lock]` call does: nothing
    /// is sent, the guard has the body's token, and its release or drop leaves the lock to the
    /// body's holder (a mix of kinds that cannot re-enter is refused with `InvalidConfig` or
    /// `KeyInUse`). A guard held by hand is not re-entered: asking for its key again waits
    /// for it like any other owner.
    ///
    /// The acquisition runs in a `fencelock.lock` span that the guard keeps until it is
    /// released or dropped ([`LockGuard::span`]; fields and metrics:
    /// [`telemetry`](crate::telemetry)).
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
        if let Some(reentered) = self.reentered().transpose() {
            return reentered;
        }
        let span = LockSpan::new(&self.key, self.kind, &self.options);
        let scope = span.span().clone();
        self.acquire_in(span).instrument(scope).await
    }

    /// [`acquire`](Self::acquire), recording in `span` (a `#[redis_lock]` call's, which
    /// also covers its body and release).
    pub(crate) async fn acquire_in(self, span: LockSpan) -> Result<LockGuard, LockError> {
        Acquisition::start(self.client, self.key, self.kind, self.options, span)?
            .run()
            .await
    }

    /// The guard re-entering the lock of this key that the current body holds through this
    /// client (recorded in a span of its own), the error that says why it cannot, or `None`
    /// if the body does not hold the key: the request is to acquire it.
    pub(crate) fn reentered(&self) -> Result<Option<LockGuard>, LockError> {
        let reentry = body_scope::reentry(self.client.id(), &self.key, self.kind, &self.options);
        let Some(reentry) = reentry.transpose() else {
            return Ok(None);
        };
        let span = LockSpan::new(&self.key, self.kind, &self.options);
        match reentry {
            Ok(held) => Ok(Some(LockGuard::reentered(self.client.clone(), held, span))),
            Err(error) => {
                span.acquired(Err(&error), 0);
                Err(error)
            }
        }
    }

    /// The checked request, not sent yet, and the span to run it in.
    pub(crate) fn start(self) -> Result<(Acquisition, tracing::Span), LockError> {
        let span = LockSpan::new(&self.key, self.kind, &self.options);
        let scope = span.span().clone();
        let acquisition = Acquisition::start(self.client, self.key, self.kind, self.options, span);
        Ok((acquisition?, scope))
    }
}
