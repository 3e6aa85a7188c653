//! The acquire loop behind [`crate::LockRequest::acquire`]: attempts, and the waits between
//! them.
//!
//! An attempt that finds the key held gives up if the request is out of budget; else the
//! request subscribes to the key's releases (once) and attempts again at once, and after
//! that pauses until a release notification, `sleep_ms` (jittered) or the end of the
//! holder's lease, whichever comes first. An explicit `wait_ms` also cuts an attempt or a
//! subscription still out at its deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, HeldLease, Lease, ReleaseWatch, Turn, resend_once};
use crate::background_release::release_in_background;
use crate::error::WithSources;
use crate::release_hub::owner_tag;
use crate::{LockClient, LockError, LockGuard, LockOptions, key, random};

/// One request's way to a guard: what its attempts found so far, and its bounds.
pub(crate) struct Acquisition {
    /// Before `pending`, so dropped first: the watch ends before the cleanup is spawned.
    releases: Option<ReleaseWatch>,
    pending: PendingAcquire,
    options: LockOptions,
    /// No more waiting after this.
    give_up_at: Instant,
    /// With `wait_ms`: the call ends by then, also while an attempt or a subscription is out.
    deadline: Option<Instant>,
    /// When the first attempt that found the key held was sent.
    waiting_since: Option<Instant>,
    /// Cleared once subscribing failed: a failing subscription can cost a response timeout
    /// each time.
    may_subscribe: bool,
    attempts: u32,
    /// Pauses no release notification ended, and subscriptions: what `retry` counts.
    unnotified_waits: u32,
    /// Once an attempt's reply was lost, it may have been applied: the cleanup stays due
    /// whatever comes after, until after the guard's release.
    reply_lost: bool,
    /// What the last answered attempt found: returned if the deadline cuts the next one.
    last_error: Option<LockError>,
}

/// How an attempt ended.
enum Attempt {
    Granted {
        token: u64,
        sent_at: Instant,
    },
    /// The key was held, or the backend failed: worth another attempt.
    Refused {
        holder_remaining: Option<Duration>,
    },
    /// An error no retry changes.
    Failed(LockError),
    /// The deadline came first.
    Cut,
}

/// What subscribing to the key's releases did.
enum Subscribing {
    /// Subscribed now: attempt again at once.
    Subscribed,
    /// Subscribed already, or not to be: go on to the pause.
    Skipped,
    /// The deadline came first.
    Cut,
}

impl Acquisition {
    /// Checks the key and the options; nothing is sent yet.
    pub(crate) fn start(
        client: LockClient,
        key: String,
        options: LockOptions,
    ) -> Result<Self, LockError> {
        key::validate(&key)?;
        options.validate()?;
        let started = Instant::now();
        Ok(Acquisition {
            give_up_at: started + options.wait(),
            deadline: options.wait_bound().map(|wait| started + wait),
            waiting_since: None,
            releases: None,
            may_subscribe: client.notifies(),
            pending: PendingAcquire {
                lease: Lease {
                    key,
                    owner: random::owner_token(),
                    ttl: options.ttl(),
                },
                client,
                leaves_traces: false,
            },
            options,
            attempts: 0,
            unnotified_waits: 0,
            reply_lost: false,
            last_error: None,
        })
    }

    /// Attempts until granted or out of budget, waiting in between.
    pub(crate) async fn run(mut self) -> Result<LockGuard, LockError> {
        loop {
            // No attempt at the deadline: it would be cut as soon as sent.
            if self.attempts > 0 && self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(self.give_up().await);
            }
            let holder_remaining = match self.attempt().await {
                Attempt::Granted { token, sent_at } => {
                    return self
                        .pending
                        .into_guard(token, sent_at, &self.options, self.reply_lost);
                }
                Attempt::Refused { holder_remaining } => holder_remaining,
                Attempt::Failed(error) => return Err(error),
                Attempt::Cut => return Err(self.give_up().await),
            };
            if self.out_of_budget() {
                return Err(self.give_up().await);
            }
            match self.subscribe().await {
                Subscribing::Subscribed => continue,
                Subscribing::Skipped => {}
                Subscribing::Cut => return Err(self.give_up().await),
            }
            self.pause(holder_remaining).await;
        }
    }

    /// One attempt (sent once more if its reply is lost), cut at the deadline; notes what
    /// it found for the error to report.
    async fn attempt(&mut self) -> Attempt {
        self.attempts += 1;
        let sent_at = Instant::now();
        self.pending.leaves_traces = true;
        let turn = self.turn();
        let backend = self.pending.client.backend().clone();
        let attempt = resend_once(|| backend.acquire(&self.pending.lease, turn));
        let Some((outcome, resent)) = until(self.deadline, attempt).await else {
            // Cut at the deadline: the attempt may still be applied.
            self.reply_lost = true;
            return Attempt::Cut;
        };
        self.reply_lost |= resent;
        match outcome {
            Ok(Acquire::Granted { token }) => Attempt::Granted { token, sent_at },
            Ok(Acquire::Held { remaining }) => {
                self.waiting_since.get_or_insert(sent_at);
                // A fair place or a reserved turn stays until the waiter leaves.
                self.pending.leaves_traces = self.reply_lost || turn != Turn::Barge;
                let key = self.pending.lease.key.clone();
                self.last_error = Some(LockError::not_acquired(key, self.attempts));
                Attempt::Refused {
                    holder_remaining: remaining,
                }
            }
            // The attempt may have been applied: stay in doubt, so that a retry with the
            // same owner token is recognised, and giving up deletes the grant.
            Err(error) if error.is_backend() => {
                self.reply_lost = true;
                self.last_error = Some(error);
                Attempt::Refused {
                    holder_remaining: None,
                }
            }
            Err(error) => Attempt::Failed(error),
        }
    }

    /// How the next attempt competes: in the queue if fair, else freely until the waiter
    /// has waited `STARVING_AFTER`, then reserving the next free turn (for as long as a fair
    /// place).
    fn turn(&self) -> Turn {
        if self.options.fair {
            Turn::Queue(self.options.queue_timeout())
        } else if self
            .waiting_since
            .is_some_and(|since| since.elapsed() >= STARVING_AFTER)
        {
            Turn::Reserve(self.options.queue_timeout())
        } else {
            Turn::Barge
        }
    }

    /// Whether the request stops here: a single-attempt request, the wait used up, or the
    /// unnotified retries.
    fn out_of_budget(&self) -> bool {
        self.options.give_up
            || Instant::now() >= self.give_up_at
            || self.unnotified_waits >= self.options.unnotified_retries()
    }

    /// Subscribes to the key's releases, unless subscribed already or subscribing failed
    /// before. It comes before the attempt after which the request waits: a release between
    /// the failed attempt and the subscription is then seen by that attempt, and any later
    /// one is announced.
    async fn subscribe(&mut self) -> Subscribing {
        let subscribed = self
            .releases
            .as_ref()
            .is_some_and(ReleaseWatch::is_subscribed);
        if !self.may_subscribe || subscribed {
            return Subscribing::Skipped;
        }
        let subscribing = self
            .pending
            .client
            .backend()
            .subscribe(&self.pending.lease.key);
        match until(self.deadline, subscribing).await {
            Some(Ok(watch)) => {
                // The attempt right after subscribing counts as a retry: without
                // notifications a request makes exactly `1 + retry` attempts.
                self.releases = Some(watch);
                self.unnotified_waits += 1;
                Subscribing::Subscribed
            }
            Some(Err(error)) => {
                self.may_subscribe = false;
                tracing::debug!(key = %self.pending.lease.key, error = %WithSources(&error), "no release notifications; polling");
                Subscribing::Skipped
            }
            None => Subscribing::Cut,
        }
    }

    /// Waits for a release, at most `sleep_ms` (jittered) or until the holder's lease ends,
    /// and never past `give_up_at`.
    async fn pause(&mut self, holder_remaining: Option<Duration>) {
        let pause = self
            .options
            .pause(holder_remaining)
            .min(self.give_up_at.saturating_duration_since(Instant::now()));
        tracing::debug!(key = %self.pending.lease.key, attempts = self.attempts, ?pause, "lock not acquired; waiting");
        let owner = &self.pending.lease.owner;
        if !wait_for_release(self.releases.as_mut(), pause, owner).await {
            self.unnotified_waits += 1;
        }
    }

    /// Ends the request without a guard: withdraws, and returns the error to report: what
    /// the last answered attempt found, else that no attempt answered in time.
    async fn give_up(&mut self) -> LockError {
        self.pending.withdraw(self.reply_lost, self.deadline).await;
        self.last_error.take().unwrap_or_else(|| {
            LockError::backend(
                Some(&self.pending.lease.key),
                format!(
                    "the backend did not answer within the request's wait ({} ms)",
                    self.options.wait().as_millis()
                ),
                None,
            )
        })
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

/// Sleeps for `pause`, or until `releases` announces a release that `owner` may take; `true`
/// if a release came. A release that names another waiter's turn (only that waiter can take
/// the key) is slept through, not to wake every waiter for one, but still counts: the pause
/// then ends in a free attempt, which also keeps a fair place from lapsing.
async fn wait_for_release(
    releases: Option<&mut ReleaseWatch>,
    pause: Duration,
    owner: &str,
) -> bool {
    let Some(watch) = releases else {
        tokio::time::sleep(pause).await;
        return false;
    };
    let mine = owner_tag(owner);
    let until = Instant::now() + pause;
    let mut released_for_another = false;
    loop {
        tokio::select! {
            biased;
            next = watch.released() => match next {
                Some(next) if next != mine => released_for_another = true,
                _ => return true,
            },
            () = tokio::time::sleep_until(until) => return released_for_another,
        }
    }
}

/// The lease a request is after. If the request ends without a guard while an attempt may
/// have left something behind (a grant whose reply was lost, a place in a fair queue), the release
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
