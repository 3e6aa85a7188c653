//! `LockRequest`: the builder returned by `LockClient::lock`, and the acquire loop.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, HeldLease, Lease, ReleaseWatch, Turn, resend_once};
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

    /// Replaces all options at once, e.g. with a `const` [`LockOptions`] that several
    /// locks share. The other setters are those of [`LockOptions`].
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Applies one of the setters of [`LockOptions`] (defined with them).
    pub(crate) fn map_options(mut self, set: impl FnOnce(LockOptions) -> LockOptions) -> Self {
        self.options = set(self.options);
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
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        key::validate(&self.key)?;
        self.options.validate()?;
        let options = self.options;
        // No more waiting after `give_up_at`; with `wait_ms`, the call also ends by it while an
        // attempt or a subscription is still out (`deadline`).
        let started = Instant::now();
        let give_up_at = started + options.wait();
        let deadline = options.wait_bound().map(|wait| started + wait);
        let mut waiting_since = None;
        let mut pending = PendingAcquire {
            lease: Lease {
                key: self.key,
                owner: random::owner_token(),
                ttl: options.ttl(),
            },
            client: self.client,
            leaves_traces: false,
        };
        let mut releases: Option<ReleaseWatch> = None;
        let mut may_subscribe = pending.client.notifies();
        let (mut attempts, mut unnotified_waits) = (0, 0);
        // Once an attempt's reply was lost, it may have been applied: the cleanup stays due
        // whatever comes after, until after the guard's release.
        let mut reply_lost = false;
        // What the last answered attempt found: returned if the deadline cuts the next one.
        let mut last_error: Option<LockError> = None;
        loop {
            // No attempt at the deadline: it would be cut as soon as sent.
            if attempts > 0 && deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(pending
                    .give_up(reply_lost, deadline, last_error, &options)
                    .await);
            }
            attempts += 1;
            let sent_at = Instant::now();
            pending.leaves_traces = true;
            let turn = turn(&options, waiting_since);
            let backend = pending.client.backend().clone();
            let attempt = resend_once(|| backend.acquire(&pending.lease, turn));
            let Some((outcome, resent)) = until(deadline, attempt).await else {
                // Cut at the deadline: the attempt may still be applied.
                reply_lost = true;
                return Err(pending
                    .give_up(reply_lost, deadline, last_error, &options)
                    .await);
            };
            reply_lost |= resent;
            let holder_remaining = match outcome {
                Ok(Acquire::Granted { token }) => {
                    return pending.into_guard(token, sent_at, &options, reply_lost);
                }
                Ok(Acquire::Held { remaining }) => {
                    waiting_since.get_or_insert(sent_at);
                    // A fair place or a reserved turn stays until the waiter leaves.
                    pending.leaves_traces = reply_lost || turn != Turn::Barge;
                    last_error = Some(LockError::NotAcquired {
                        key: pending.lease.key.clone(),
                        attempts,
                    });
                    remaining
                }
                // The attempt may have been applied: stay in doubt, so that a retry with the
                // same owner token is recognised, and giving up deletes the grant.
                Err(error) if error.is_backend() => {
                    reply_lost = true;
                    last_error = Some(error);
                    None
                }
                Err(error) => return Err(error),
            };
            let now = Instant::now();
            if options.give_up
                || now >= give_up_at
                || unnotified_waits >= options.unnotified_retries()
            {
                return Err(pending
                    .give_up(reply_lost, deadline, last_error, &options)
                    .await);
            }
            // Subscribe before the attempt after which we wait: a release between the failed
            // attempt and the subscription is then seen by that attempt, and any later one is
            // announced.
            if may_subscribe && !releases.as_ref().is_some_and(ReleaseWatch::is_subscribed) {
                let subscribing = pending.client.backend().subscribe(&pending.lease.key);
                match until(deadline, subscribing).await {
                    Some(Ok(watch)) => {
                        // The attempt right after subscribing counts as a retry: without
                        // notifications a request makes exactly `1 + retry` attempts.
                        releases = Some(watch);
                        unnotified_waits += 1;
                        continue;
                    }
                    Some(Err(error)) => {
                        // Not again in this request: a failing subscription can cost a
                        // response timeout each time.
                        may_subscribe = false;
                        tracing::debug!(key = %pending.lease.key, %error, "no release notifications; polling");
                    }
                    None => {
                        return Err(pending
                            .give_up(reply_lost, deadline, last_error, &options)
                            .await);
                    }
                }
            }
            let pause = options
                .pause(holder_remaining)
                .min(give_up_at.saturating_duration_since(Instant::now()));
            tracing::debug!(key = %pending.lease.key, attempts, ?pause, "lock not acquired; waiting");
            let notified = wait_for_release(releases.as_mut(), pause).await;
            if !notified {
                unnotified_waits += 1;
            }
        }
    }
}

/// Runs `future` until `deadline` (if any); `None` if the deadline came first.
async fn until<F: Future>(deadline: Option<Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

/// How long a waiter competes freely (barging) before it reserves the next free turn:
/// short enough to bound the wait behind a holder that keeps re-taking the key, long enough
/// that a lock passed around quickly is not handed off (an extra round trip) on every release.
const STARVING_AFTER: Duration = Duration::from_millis(10);

/// How the next attempt competes: in the queue if fair, else freely until the waiter has
/// waited `STARVING_AFTER`, then reserving the next free turn (for as long as a fair place).
fn turn(options: &LockOptions, waiting_since: Option<Instant>) -> Turn {
    if options.fair {
        Turn::Queue(options.queue_timeout())
    } else if waiting_since.is_some_and(|since| since.elapsed() >= STARVING_AFTER) {
        Turn::Reserve(options.queue_timeout())
    } else {
        Turn::Barge
    }
}

/// Sleeps for `pause`, or until `releases` announces a release; `true` in the latter case.
async fn wait_for_release(releases: Option<&mut ReleaseWatch>, pause: Duration) -> bool {
    match releases {
        Some(watch) => tokio::select! {
            biased;
            () = watch.released() => true,
            () = tokio::time::sleep(pause) => false,
        },
        None => {
            tokio::time::sleep(pause).await;
            false
        }
    }
}

/// An acquisition in progress. If it ends without a guard while an attempt may have left
/// something behind (a grant whose reply was lost, a place in a fair queue), the release
/// script deletes it in the background.
struct PendingAcquire {
    client: LockClient,
    lease: Lease,
    leaves_traces: bool,
}

impl PendingAcquire {
    /// The guard of a grant: from now on the lease is renewed and watched for loss. If that
    /// cannot start, `self` is dropped with traces and the grant deleted again. After a lost
    /// reply the guard keeps a cleanup due past its own release.
    fn into_guard(
        mut self,
        token: u64,
        sent_at: Instant,
        options: &LockOptions,
        reply_lost: bool,
    ) -> Result<LockGuard, LockError> {
        let tracking = self.client.renewer().track(
            HeldLease {
                lease: self.lease.clone(),
                token,
            },
            sent_at,
            options,
        )?;
        self.leaves_traces = false;
        Ok(LockGuard::new(
            self.client.clone(),
            self.lease.clone(),
            token,
            sent_at,
            options.min_hold(),
            tracking,
            reply_lost,
        ))
    }

    /// Gives back the place in a fair queue or the reserved turn before giving up, so that
    /// the next request does not find the key held for a waiter that has left. A lost reply
    /// keeps the background cleanup due (its attempt may still arrive); whatever fails here,
    /// or would outlast the deadline, is left to it too.
    async fn withdraw(&mut self, reply_lost: bool, deadline: Option<Instant>) {
        if !self.leaves_traces {
            return;
        }
        let releasing = self.client.backend().release(&self.lease, Duration::ZERO);
        if let Some(Ok(_)) = until(deadline, releasing).await {
            self.leaves_traces = reply_lost;
        }
    }

    /// Ends the request without a guard: withdraws, and returns the error to report: what
    /// the last answered attempt found, else that no attempt answered in time.
    async fn give_up(
        &mut self,
        reply_lost: bool,
        deadline: Option<Instant>,
        last_error: Option<LockError>,
        options: &LockOptions,
    ) -> LockError {
        self.withdraw(reply_lost, deadline).await;
        last_error.unwrap_or_else(|| {
            LockError::backend(
                Some(&self.lease.key),
                format!(
                    "the backend did not answer within the request's wait ({} ms)",
                    options.wait().as_millis()
                ),
                None,
            )
        })
    }
}

impl Drop for PendingAcquire {
    fn drop(&mut self) {
        if self.leaves_traces {
            release_in_background(
                &self.client,
                self.lease.clone(),
                Instant::now(),
                true,
                false,
            );
        }
    }
}
