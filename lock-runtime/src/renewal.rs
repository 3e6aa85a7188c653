//! Lease tracking: one renewal loop per client for every lease it holds.
//!
//! The loop wakes when the earliest lease is due (every `ttl / 3`) and renews, in one backend
//! call (one Redis pipeline), every lease due within the next half interval, so the leases
//! of a client fall into step and 10,000 of them cost one round trip per interval. Rounds run
//! beside the loop, not inside it: while one is out (or hangs), the loop goes on renewing the
//! other leases, new ones included, and enforcing every lease's deadline. It also decides
//! when a lease is lost:
//! - a renewal finds the key gone or owned by another token;
//! - no renewal got through before `last confirmed send + ttl − drift`, the earliest moment
//!   the server may hand the key to someone else (renewal failures are retried until then);
//! - renewal is off and the lease has run out;
//! - `max_hold_ms` has passed.
//!
//! Times are `tokio::time::Instant`, so a client whose background runs on a paused runtime
//! is tested deterministically.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Extended, HeldLease, Lease, LockBackend};
use crate::background::Background;
use crate::error::WithSources;
use crate::sync::lock_ignoring_poison;
use crate::telemetry::{self, LockSpan};
use crate::{LockError, LockOptions};

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// The key was gone or held by another owner (found by a renewal or the release).
    NotOwner,
    /// No renewal reached the backend before the lease could have ended.
    Unconfirmed,
    /// Renewal was off and the lease ran out.
    Expired,
    /// `max_hold_ms` passed; renewal stopped.
    MaxHold,
    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)),
    /// which released the lock.
    ShutDown,
}

impl std::fmt::Display for LossCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossCause::NotOwner => "the key was gone or held by another owner",
            LossCause::Unconfirmed => "no renewal reached the backend before the lease ended",
            LossCause::Expired => "the lease ran out (renewal off)",
            LossCause::MaxHold => "max_hold_ms passed",
            LossCause::ShutDown => "its client was shut down, which released it",
        })
    }
}

/// Counters of a client's renewal loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewalStats {
    /// Renewal rounds sent (one backend call each: one pipeline for Redis).
    pub rounds: u64,
    /// Leases extended, summed over all rounds.
    pub leases_extended: u64,
    /// Leases counted as lost.
    pub losses: u64,
}

/// The loss signal shared by a lease's guard, the bodies running under it and the renewal
/// loop. Pollable without a future of its own, so that a locked call watches it from its own
/// `poll`. Each waiter holds a registration, given back when it stops waiting; waiters are
/// woken in the order they first waited (not `watch`'s random order): a simulation on the
/// paused clock must take the same path on every run of a seed.
#[derive(Debug, Default)]
pub(crate) struct LossSignal {
    state: Mutex<SignalState>,
}

#[derive(Debug, Default)]
struct SignalState {
    cause: Option<LossCause>,
    /// The holder released the grant (or dropped its guard): lost to the guards that
    /// re-entered it, which have nothing to release.
    ended: bool,
    /// The waiters' wakers, by registration (in the order they first waited).
    waiting: BTreeMap<u64, Waker>,
    next_registration: u64,
}

impl LossSignal {
    /// Records the first loss, and says whether this was it; later ones keep the first cause.
    pub(crate) fn lose(&self, cause: LossCause) -> bool {
        let waiting = {
            let mut state = lock_ignoring_poison(&self.state);
            if state.cause.is_some() {
                return false;
            }
            state.cause = Some(cause);
            std::mem::take(&mut state.waiting)
        };
        waiting.into_values().for_each(Waker::wake);
        true
    }

    pub(crate) fn cause(&self) -> Option<LossCause> {
        lock_ignoring_poison(&self.state).cause
    }

    /// Records that the holder ended its grant (released, or dropped its guard), waking the
    /// guards that re-entered it.
    pub(crate) fn end(&self) {
        let waiting = {
            let mut state = lock_ignoring_poison(&self.state);
            state.ended = true;
            std::mem::take(&mut state.waiting)
        };
        waiting.into_values().for_each(Waker::wake);
    }

    /// The cause, as a guard that re-entered the grant sees it: `NotOwner` once the holder
    /// ended the grant.
    pub(crate) fn cause_or_end(&self) -> Option<LossCause> {
        let state = lock_ignoring_poison(&self.state);
        state.cause.or(state.ended.then_some(LossCause::NotOwner))
    }

    /// Ready with the cause once the lease is lost; until then the task is woken at the loss,
    /// through `registration` (made here, kept by the caller, given back with
    /// [`stop_waiting`](Self::stop_waiting)).
    pub(crate) fn poll_lost(
        &self,
        registration: &mut Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<LossCause> {
        self.poll(false, registration, cx)
    }

    /// [`poll_lost`](Self::poll_lost), also ready at the holder's end when `counts_end`.
    fn poll(
        &self,
        counts_end: bool,
        registration: &mut Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<LossCause> {
        let mut state = lock_ignoring_poison(&self.state);
        if let Some(cause) = state.cause {
            return Poll::Ready(cause);
        }
        if counts_end && state.ended {
            return Poll::Ready(LossCause::NotOwner);
        }
        let state = &mut *state;
        let id = *registration.get_or_insert_with(|| {
            state.next_registration += 1;
            state.next_registration
        });
        let waker = state
            .waiting
            .entry(id)
            .or_insert_with(|| cx.waker().clone());
        if !waker.will_wake(cx.waker()) {
            *waker = cx.waker().clone();
        }
        Poll::Pending
    }

    /// Gives back a waiter's registration: it is woken no more.
    pub(crate) fn stop_waiting(&self, registration: &mut Option<u64>) {
        if let Some(id) = registration.take() {
            lock_ignoring_poison(&self.state).waiting.remove(&id);
        }
    }

    /// Completes when the lease is lost (at once if it already was); with `counts_end`, also
    /// when the holder ended it (see [`cause_or_end`](Self::cause_or_end)).
    pub(crate) async fn lost(&self, counts_end: bool) -> LossCause {
        LossWait {
            signal: self,
            counts_end,
            registration: None,
        }
        .await
    }
}

/// [`LossSignal::lost`]: its registration is given back when it is dropped.
struct LossWait<'a> {
    signal: &'a LossSignal,
    counts_end: bool,
    registration: Option<u64>,
}

impl Future for LossWait<'_> {
    type Output = LossCause;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LossCause> {
        let this = &mut *self;
        this.signal
            .poll(this.counts_end, &mut this.registration, cx)
    }
}

impl Drop for LossWait<'_> {
    fn drop(&mut self) {
        self.signal.stop_waiting(&mut self.registration);
    }
}

/// A lease's place in the renewal loop; dropping it stops renewal at once.
pub(crate) struct Tracking {
    id: u64,
    renewer: Arc<Shared>,
    signal: Arc<LossSignal>,
}

impl Tracking {
    pub(crate) fn signal(&self) -> &Arc<LossSignal> {
        &self.signal
    }

    /// Stops renewal and loss detection of this lease (idempotent).
    pub(crate) fn stop(&self) {
        self.renewer.registry().leases.remove(&self.id);
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The renewal loop of one client.
pub(crate) struct Renewer {
    shared: Arc<Shared>,
}

// Debug output shows counters, never the tracked leases: those carry owner tokens.
impl std::fmt::Debug for Renewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewer")
            .field("stats", &self.stats())
            .finish()
    }
}

impl std::fmt::Debug for Tracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracking")
            .field("id", &self.id)
            .field("lost", &self.signal.cause())
            .finish()
    }
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    background: Background,
    registry: Mutex<Registry>,
    wake: Notify,
    rounds: AtomicU64,
    leases_extended: AtomicU64,
    losses: AtomicU64,
}

#[derive(Default)]
struct Registry {
    /// Ordered by id, so that a client on a paused runtime renews and loses leases in the same
    /// order on every run (the simulator replays seeds exactly).
    leases: BTreeMap<u64, Tracked>,
    next_id: u64,
    loop_running: bool,
    /// While the loop sleeps: when it looks again. A new lease wakes it only if it needs
    /// attention before then, so that taking a lock rarely wakes the loop's thread.
    asleep_until: Option<Instant>,
}

struct Tracked {
    held: HeldLease,
    /// Until when `min_hold_ms` keeps the key taken after a release.
    hold_until: Instant,
    signal: Arc<LossSignal>,
    renew: bool,
    /// When the next renewal is due.
    next_due: Instant,
    /// Until when the server certainly keeps the key for us.
    valid_until: Instant,
    /// When renewal stops (`max_hold_ms`).
    stop_at: Option<Instant>,
    /// A renewal round with this lease is out; it is not sent again until that round ends.
    in_flight: bool,
    /// The last round with this lease failed: the next failure is not reported again.
    failing: bool,
    /// The span of the call that holds the lease, for the events of its renewal and loss.
    span: LockSpan,
    /// The backend's [`longest_lease`](crate::backend::Capabilities::longest_lease): no
    /// lease counts longer.
    longest: Duration,
}

impl Tracked {
    fn interval(&self) -> Duration {
        self.held.lease.ttl.min(self.longest) / 3
    }

    /// Records that the lease was granted or extended by a request sent at `sent_at`.
    fn confirm(&mut self, sent_at: Instant) {
        self.confirm_lease(sent_at, self.held.lease.ttl);
    }

    /// Records that the server holds the grant for at least `lease` after `sent_at` (and the
    /// backend's longest lease): valid until then (less the drift), renewed after a third
    /// of it.
    fn confirm_lease(&mut self, sent_at: Instant, lease: Duration) {
        self.valid_until = valid_until(sent_at, lease, self.longest);
        self.next_due = sent_at + lease.min(self.longest) / 3;
    }

    /// Whether the next round should take this lease: renewed, not out in another round, and
    /// due by `by`.
    fn due_by(&self, by: Instant) -> bool {
        self.renew && !self.in_flight && self.next_due <= by
    }

    /// When the lease is lost unless a renewal gets through first.
    fn loss_deadline(&self) -> Instant {
        self.stop_at
            .map_or(self.valid_until, |stop| stop.min(self.valid_until))
    }

    fn next_wake(&self) -> Instant {
        if self.renew && !self.in_flight {
            self.next_due.min(self.loss_deadline())
        } else {
            self.loss_deadline()
        }
    }

    fn loss_at(&self, now: Instant) -> Option<LossCause> {
        if self.stop_at.is_some_and(|stop| now >= stop) {
            Some(LossCause::MaxHold)
        } else if now >= self.valid_until {
            Some(if self.renew {
                LossCause::Unconfirmed
            } else {
                LossCause::Expired
            })
        } else {
            None
        }
    }
}

/// How long before the server's expiry the client already counts a lease as gone: clock
/// drift between client and server (Redlock's `ttl × 1% + 2 ms`), at most half the lease so
/// that even a 1 ms lease is not lost the moment it is granted.
pub(crate) fn drift(ttl: Duration) -> Duration {
    (ttl / 100 + Duration::from_millis(2)).min(ttl / 2)
}

/// Until when a grant of `lease` by a request sent at `sent_at` surely lasts on the server, as
/// Redlock counts a lock's validity: the lease (at most the backend's `longest` lease) from
/// when the request was sent, less the drift. Whatever delayed the reply (the network, a
/// client frozen between the grant and its reading of the reply) is time the lease spent.
pub(crate) fn valid_until(sent_at: Instant, lease: Duration, longest: Duration) -> Instant {
    let lease = lease.min(longest);
    sent_at + lease - drift(lease)
}

impl Shared {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // Every update is a single insert, remove or field write.
        lock_ignoring_poison(&self.registry)
    }

    /// Counts `tracked` lost, and adds what to tell of it to `reports`.
    fn lose(&self, tracked: &Tracked, cause: LossCause, reports: &mut Vec<Report>) {
        self.losses.fetch_add(1, Ordering::Relaxed);
        if tracked.signal.lose(cause) {
            reports.push(Report::Lost(tracked.report_to(), cause));
        }
    }
}

/// What the loop tells the application of a lease (events under its span, metrics), told
/// once the registry's lock is released: a subscriber may take its time, and every acquire
/// and release of the client waits for that lock.
enum Report {
    RenewalFailed((LockSpan, String), LockError),
    Lost((LockSpan, String), LossCause),
}

impl Report {
    fn tell(reports: Vec<Report>) {
        for report in reports {
            match report {
                Report::RenewalFailed((span, key), error) => span.renewal_failed(&key, &error),
                Report::Lost((span, key), cause) => span.lost(&key, cause),
            }
        }
    }
}

impl Tracked {
    /// Where a report about this lease goes: its span, and its key.
    fn report_to(&self) -> (LockSpan, String) {
        (self.span.clone(), self.held.lease.key.clone())
    }
}

impl Renewer {
    pub(crate) fn new(backend: Arc<dyn LockBackend>, background: Background) -> Self {
        Renewer {
            shared: Arc::new(Shared {
                backend,
                background,
                registry: Mutex::new(Registry::default()),
                wake: Notify::new(),
                rounds: AtomicU64::new(0),
                leases_extended: AtomicU64::new(0),
                losses: AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn stats(&self) -> RenewalStats {
        RenewalStats {
            rounds: self.shared.rounds.load(Ordering::Relaxed),
            leases_extended: self.shared.leases_extended.load(Ordering::Relaxed),
            losses: self.shared.losses.load(Ordering::Relaxed),
        }
    }

    /// Starts tracking a lease that the server holds for at least `lease` after `sent_at`:
    /// the lease asked for, for a grant by a request sent then; for a grant a release handed
    /// over, the waiter's place in line as its attempt sent then renewed it. Renewal failures
    /// and the loss are reported in `span`.
    pub(crate) fn track(
        &self,
        held: HeldLease,
        sent_at: Instant,
        lease: Duration,
        (options, hold_until): (&LockOptions, Instant),
        span: LockSpan,
    ) -> Result<Tracking, LockError> {
        let signal = Arc::new(LossSignal::default());
        let mut tracked = Tracked {
            hold_until,
            next_due: sent_at,
            valid_until: sent_at,
            stop_at: options.max_hold().map(|max| sent_at + max),
            renew: options.renew,
            in_flight: false,
            failing: false,
            span,
            signal: signal.clone(),
            held,
            longest: self
                .shared
                .backend
                .capabilities()
                .longest_lease
                .unwrap_or(Duration::MAX),
        };
        tracked.confirm_lease(sent_at, lease);
        let first_event = tracked.next_wake();
        let mut registry = self.shared.registry();
        if !registry.loop_running {
            self.shared.background.spawn(run(self.shared.clone()))?;
            registry.loop_running = true;
        }
        let wake = registry.asleep_until.is_some_and(|at| first_event < at);
        let id = registry.next_id;
        registry.next_id += 1;
        registry.leases.insert(id, tracked);
        drop(registry);
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(Tracking {
            id,
            renewer: self.shared.clone(),
            signal,
        })
    }
}

/// A lease taken out of the renewal loop by [`Renewer::drain`].
pub(crate) struct Drained {
    pub(crate) lease: Lease,
    pub(crate) token: u64,
    pub(crate) hold_until: Instant,
    pub(crate) span: LockSpan,
    pub(crate) signal: Arc<LossSignal>,
}

impl Renewer {
    /// Stops renewing every lease the client holds, and returns them, each lost for `cause`
    /// first: under the registry's lock, so that a guard released meanwhile either is still
    /// tracked here (and sees the cause) or was released by its own call.
    pub(crate) fn drain(&self, cause: LossCause) -> Vec<Drained> {
        let mut registry = self.shared.registry();
        for tracked in registry.leases.values() {
            tracked.signal.lose(cause);
        }
        let leases = std::mem::take(&mut registry.leases);
        drop(registry);
        leases
            .into_values()
            .map(|tracked| Drained {
                lease: tracked.held.lease,
                token: tracked.held.token,
                hold_until: tracked.hold_until,
                span: tracked.span,
                signal: tracked.signal,
            })
            .collect()
    }
}

/// How long the loop waits for new leases once it tracks none, before it ends.
const LINGER: Duration = Duration::from_secs(1);

/// The loop: runs while the client tracks leases, ends when it has tracked none for
/// `LINGER` (a client taking locks one after another keeps one loop). Rounds are polled here
/// beside the timers, so one loop task drives them all.
async fn run(shared: Arc<Shared>) {
    // If the loop ends in any way but its own return (a backend panicked), the next lease
    // starts a new one instead of trusting a dead loop.
    let mut running = LoopRunning {
        shared: &shared,
        ended_normally: false,
    };
    let mut rounds = FuturesUnordered::new();
    let mut empty_since = None;
    loop {
        let now = Instant::now();
        let mut reports = Vec::new();
        let sleep_until = {
            let mut registry = shared.registry();
            registry.asleep_until = None;
            registry
                .leases
                .retain(|_, tracked| match tracked.loss_at(now) {
                    Some(cause) => {
                        shared.lose(tracked, cause, &mut reports);
                        false
                    }
                    None => true,
                });
            // When a round goes out anyway, leases due within half an interval join it:
            // renewing early costs nothing and puts the leases in step with each other.
            let round_due = registry.leases.values().any(|t| t.due_by(now));
            if round_due {
                let due: Vec<(u64, HeldLease)> = registry
                    .leases
                    .iter_mut()
                    .filter(|(_, t)| t.due_by(now + t.interval() / 2))
                    .map(|(id, t)| {
                        t.in_flight = true;
                        (*id, t.held.clone())
                    })
                    .collect();
                rounds.push(renew(shared.clone(), due));
            }
            let next_wake = registry.leases.values().map(Tracked::next_wake).min();
            let sleep_until = match next_wake {
                Some(next_wake) => {
                    empty_since = None;
                    Some(next_wake)
                }
                None if rounds.is_empty() => {
                    let since = *empty_since.get_or_insert(now);
                    if now >= since + LINGER {
                        // Under the registry's lock: a lease tracked after this starts a loop.
                        registry.loop_running = false;
                        running.ended_normally = true;
                        None
                    } else {
                        Some(since + LINGER)
                    }
                }
                // Only rounds of released leases are out: wait for them to end.
                None => Some(now + LINGER),
            };
            registry.asleep_until = sleep_until;
            sleep_until
        };
        Report::tell(reports);
        let Some(sleep_until) = sleep_until else {
            return;
        };
        tokio::select! {
            biased;
            Some(()) = rounds.next(), if !rounds.is_empty() => {}
            () = tokio::time::sleep_until(sleep_until) => {}
            () = shared.wake.notified() => {}
        }
    }
}

struct LoopRunning<'a> {
    shared: &'a Shared,
    ended_normally: bool,
}

impl Drop for LoopRunning<'_> {
    fn drop(&mut self) {
        if !self.ended_normally {
            let mut registry = self.shared.registry();
            registry.loop_running = false;
            registry.asleep_until = None;
        }
    }
}

/// One renewal round: extends `due` in one backend call and records what it found. The
/// round gives up at the earliest loss deadline of its leases: by then that lease is lost
/// anyway, and the others are sent again.
async fn renew(shared: Arc<Shared>, due: Vec<(u64, HeldLease)>) {
    let leases: Vec<HeldLease> = due.iter().map(|(_, held)| held.clone()).collect();
    let deadline = {
        let registry = shared.registry();
        due.iter()
            .filter_map(|(id, _)| registry.leases.get(id))
            .map(Tracked::loss_deadline)
            .min()
    };
    let Some(deadline) = deadline else { return };
    let sent_at = Instant::now();
    shared.rounds.fetch_add(1, Ordering::Relaxed);
    let outcome = tokio::time::timeout_at(deadline, shared.backend.extend(&leases))
        .await
        .unwrap_or_else(|_| {
            Err(LockError::backend(
                None,
                "renewal round outlasted the earliest deadline of its leases",
                None,
            ))
        })
        .and_then(|extended| {
            if extended.len() == leases.len() {
                Ok(extended)
            } else {
                Err(LockError::backend(
                    None,
                    format!(
                        "the backend answered {} of {} extends",
                        extended.len(),
                        leases.len()
                    ),
                    None,
                ))
            }
        });
    let now = Instant::now();
    telemetry::renewal_round(outcome.is_err());
    let answers = match outcome {
        Ok(extended) => extended,
        Err(error) => {
            tracing::debug!(target: "fencelock", error = %WithSources(&error), leases = due.len(), "renewal failed; retrying until the leases' deadlines");
            vec![Extended::Unknown(error); due.len()]
        }
    };
    let mut reports = Vec::new();
    let mut registry = shared.registry();
    for ((id, _), answer) in due.iter().zip(answers) {
        match answer {
            Extended::Renewed => {
                shared.leases_extended.fetch_add(1, Ordering::Relaxed);
                if let Some(tracked) = registry.leases.get_mut(id) {
                    tracked.in_flight = false;
                    tracked.failing = false;
                    tracked.confirm(sent_at);
                }
            }
            Extended::Lost => {
                if let Some(tracked) = registry.leases.remove(id) {
                    shared.lose(&tracked, LossCause::NotOwner, &mut reports);
                }
            }
            // Asked again soon, until the lease's deadline; the failure told once.
            Extended::Unknown(error) => {
                if let Some(tracked) = registry.leases.get_mut(id) {
                    if !std::mem::replace(&mut tracked.failing, true) {
                        reports.push(Report::RenewalFailed(tracked.report_to(), error));
                    }
                    tracked.in_flight = false;
                    tracked.next_due = now + retry_pause(tracked.interval());
                }
            }
        }
    }
    drop(registry);
    Report::tell(reports);
}

/// The pause before retrying a failed renewal: a few tries fit before the lease ends.
fn retry_pause(interval: Duration) -> Duration {
    (interval / 4).clamp(Duration::from_millis(5), Duration::from_secs(1))
}
