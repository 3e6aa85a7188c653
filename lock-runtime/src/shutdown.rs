//! A client's shutdown: its locks released at once rather than after their leases, its
//! requests stopped and their places in line given back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::LockClient;
use crate::background_release::{Holder, Outcome, release_in_background};
use crate::renewal::LossCause;
use crate::sync::{Outstanding, Ticket};

/// How long [`LockClient::shutdown`] waits at most for the client's requests to stop, and
/// then for the answers to its releases.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// Whether a client is shut down (and when the shutdown stops waiting for its requests),
/// and its requests still running.
#[derive(Debug)]
pub(crate) struct ShutdownState {
    down: watch::Sender<Option<Instant>>,
    acquisitions: Arc<Outstanding>,
    withdrawn: AtomicUsize,
}

impl Default for ShutdownState {
    fn default() -> Self {
        ShutdownState {
            down: watch::Sender::new(None),
            acquisitions: Arc::default(),
            withdrawn: AtomicUsize::new(0),
        }
    }
}

impl ShutdownState {
    pub(crate) fn is_down(&self) -> bool {
        self.down.borrow().is_some()
    }

    /// How many requests are running.
    #[cfg(feature = "testing")]
    pub(crate) fn running(&self) -> usize {
        self.acquisitions.count()
    }

    /// Counts a request on `key` as running until the ticket is dropped.
    pub(crate) fn acquiring(&self, key: &str) -> Ticket {
        self.acquisitions.start(key)
    }

    /// Completes once the client is shut down, with the instant the shutdown stops waiting
    /// for its requests.
    pub(crate) async fn stopping(&self) -> Instant {
        let mut down = self.down.subscribe();
        // The sender lives as long as this state: `wait_for` only ends when it is down.
        let waited_until = down
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|down| *down);
        waited_until.unwrap_or_else(Instant::now)
    }

    /// Counts a request that stopped for the shutdown, in [`ShutdownReport::withdrawn`].
    pub(crate) fn withdrew(&self) {
        self.withdrawn.fetch_add(1, Ordering::Relaxed);
    }
}

/// What [`LockClient::shutdown`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Locks the client held whose release the store confirmed within [`SHUTDOWN_WAIT`].
    /// The guards and bodies of every lock it held see the lock lost with
    /// [`LossCause::ShutDown`].
    pub released: usize,
    /// Locks the client held that the store no longer had as its own (their leases had
    /// ended, or an operator released them), or whose release went unconfirmed (a try
    /// whose reply was lost may have released it): nothing left to release.
    pub lost: usize,
    /// Requests that were acquiring or waiting, stopped with [`LockError::ShutDown`] after
    /// giving back their places in line, or the grants they got as the shutdown came (one per
    /// key a `lock_all` call took one at a time; one for its call for every key at once).
    /// Every lock a shutdown gives back is counted once: here, or in `released`, `lost` or
    /// `unanswered` if the shutdown released it itself.
    ///
    /// [`LockError::ShutDown`]: crate::LockError::ShutDown
    pub withdrawn: usize,
    /// Locks whose release the store did not confirm within [`SHUTDOWN_WAIT`] (it is slow,
    /// unreachable, or failing): they end with their leases, unless a try of the release,
    /// still going on in the background, is answered later.
    pub unanswered: usize,
}

impl LockClient {
    /// Shuts the client down, as an application does before it exits (on `SIGTERM`, Ctrl-C):
    /// renewal stops and every lock the client holds is released now, so the next holders
    /// get them at once rather than after the leases; requests acquiring or waiting stop
    /// with [`LockError::ShutDown`](crate::LockError::ShutDown) and give back their places in
    /// line; bodies running under its locks see them lost (cause
    /// [`LossCause::ShutDown`]: a `#[redis_lock]` body with `on_lost = Abort` is stopped at
    /// its next `.await`). Later requests fail with `ShutDown`. Clones share the client:
    /// all of them are shut down. Waits at most [`SHUTDOWN_WAIT`] for the requests to stop
    /// and again for the releases' answers. A caller that stops waiting (a timeout around
    /// it) stops only these waits: by its first `.await` the locks are sent for release and
    /// the requests told to stop.
    ///
    /// The locks are released at once, not after their bodies stop: a body still running
    /// (until its next `.await`, or on with `on_lost = Continue`) overlaps with the next
    /// holder, so writes that must never overlap carry the fencing token. `min_hold_ms` is
    /// kept: a key it keeps stays taken until then.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError, LossCause};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let guard = locks.lock("nightly-job").acquire().await?;
    /// let report = locks.shutdown().await;
    /// assert_eq!(report.released, 1);
    /// assert!(matches!(guard.lost().await, LockError::Lost { cause: LossCause::ShutDown, .. }));
    /// let after = locks.lock("nightly-job").acquire().await;
    /// assert!(matches!(after, Err(LockError::ShutDown { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self) -> ShutdownReport {
        let state = self.shutdown_state();
        let (report_to, mut outcomes) = mpsc::unbounded_channel();
        // What is held now is released first: a process that exits before the shutdown
        // ends waits for those releases (they are in flight), not for the requests. And
        // before the requests are told: a call for several keys that stops gives back the
        // keys it holds, which the shutdown must have taken (and counts) by then.
        let mut count = self.release_held(&report_to);
        // A request that notices late stops waiting when the first shutdown does, and no
        // later than this one: its wait is counted from after the first one's.
        state.down.send_if_modified(|down| {
            let first = down.is_none();
            down.get_or_insert_with(|| Instant::now() + SHUTDOWN_WAIT);
            first
        });
        // And again once the requests can tell: a grant tracked between the two, which saw
        // no shutdown yet, is released before the first `.await` too.
        count += self.release_held(&report_to);
        let waited_until = Instant::now() + SHUTDOWN_WAIT;
        // Requests granted before they saw the shutdown hold their locks by the time they
        // end: the locks are then released as well.
        let stopped = state.acquisitions.all_settled();
        let _ = tokio::time::timeout_at(waited_until, stopped).await;
        count += self.release_held(&report_to);
        drop(report_to);
        let answered_until = Instant::now() + SHUTDOWN_WAIT;
        let mut report = ShutdownReport {
            withdrawn: state.withdrawn.load(Ordering::Relaxed),
            ..ShutdownReport::default()
        };
        // Each release's outcome once it has one (an error is tried again until the wait
        // ends), then the releases of guards dropped before, which the process waits for.
        while let Ok(Some(outcome)) = tokio::time::timeout_at(answered_until, outcomes.recv()).await
        {
            match outcome {
                Outcome::Released => report.released += 1,
                Outcome::Lost(_) => report.lost += 1,
                Outcome::Failed => {}
            }
        }
        report.unanswered = count - report.released - report.lost;
        let dropped_before = self.releases_in_flight().all_settled();
        let _ = tokio::time::timeout_at(answered_until, dropped_before).await;
        report
    }

    /// Stops renewing the locks the client holds and releases them in the background, each
    /// telling `report_to` how it ended; how many.
    fn release_held(&self, report_to: &mpsc::UnboundedSender<Outcome>) -> usize {
        let held = self.renewer().drain(LossCause::ShutDown);
        let count = held.len();
        for lease in held {
            let holder = Holder {
                span: lease.span,
                signal: lease.signal,
                report_to: Some(report_to.clone()),
            };
            release_in_background(
                self,
                lease.lease,
                Some(lease.token),
                lease.hold_until,
                false,
                Some(holder),
            );
        }
        count
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use crate::LockClient;
    use crate::backend::memory::MemoryBackend;
    use crate::background::Background;
    use crate::testing::Faults;

    /// Review finding: a shutdown whose caller stopped waiting while requests were still
    /// stopping (a timeout around it) left the client's locks held and renewed for good. By
    /// its first `.await` they are sent for release: the lock is free for another client.
    #[tokio::test(start_paused = true)]
    async fn a_shutdown_whose_caller_stops_waiting_still_releases() {
        let (locks, _faults) = Faults::memory_client();
        let runtime = Background::Runtime(tokio::runtime::Handle::current());
        let other = LockClient::with_background(locks.backend().clone(), runtime, false, None);
        let guard = locks.lock("held").acquire().await.unwrap();
        let blocker = other.lock("waited").acquire().await.unwrap();
        let waiting = locks.lock("waited").wait_ms(60_000).acquire();
        let waiter = tokio::spawn(waiting);
        for _ in 0..1_000 {
            if locks.shutdown_state().running() == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            locks.shutdown_state().running(),
            1,
            "the waiter is acquiring"
        );
        // Polled once, while the waiter has still to stop, and dropped.
        let polled = pin!(locks.shutdown()).poll(&mut Context::from_waker(Waker::noop()));
        assert!(polled.is_pending());
        let next = other.lock("held").wait_ms(10_000).acquire();
        let next = tokio::time::timeout(Duration::from_secs(20), next).await;
        assert!(matches!(next, Ok(Ok(_))), "{next:?}");
        assert!(waiter.await.unwrap().is_err());
        drop((guard, blocker));
    }

    /// Review finding: the locks held were released only once the requests had stopped (up
    /// to the shutdown's wait), so a process that exited in between left them to their
    /// leases. They are released first: here the next holder gets one at once, while a
    /// request whose place the store does not give back holds the shutdown for its wait.
    #[tokio::test(start_paused = true)]
    async fn held_locks_are_released_before_the_requests_stop() {
        use crate::testing::Intercepted;
        use crate::testing::intercept::{Call, Unanswered};

        let unanswered =
            Unanswered(|call| matches!(call, Call::Release { lease, .. } if lease.key == "waited"));
        let backend = Intercepted::new(MemoryBackend::new(), unanswered);
        let backend = std::sync::Arc::new(backend);
        let client = || {
            let runtime = Background::Runtime(tokio::runtime::Handle::current());
            LockClient::with_background(backend.clone(), runtime, true, None)
        };
        let (down, other) = (client(), client());
        let guard = down.lock("held").acquire().await.unwrap();
        let blocker = other.lock("waited").acquire().await.unwrap();
        let waiter = tokio::spawn(down.lock("waited").wait_ms(60_000).acquire());
        for _ in 0..100 {
            if other.admin().inspect("waited").await.unwrap().waiters == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = tokio::time::Instant::now();
        let shutdown = tokio::spawn(async move { down.shutdown().await });
        let next = other.lock("held").wait_ms(60_000).acquire().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let report = shutdown.await.unwrap();
        assert_eq!((report.released, report.withdrawn), (1, 1), "{report:?}");
        assert!(waiter.await.unwrap().is_err());
        drop((guard, blocker, next));
    }

    /// Review finding: a release that failed was counted released. Only the releases the
    /// store confirmed are; those it did not answer within the wait are `unanswered`.
    #[tokio::test(start_paused = true)]
    async fn only_confirmed_releases_are_counted_released() {
        for unreachable in [false, true] {
            let (locks, faults) = Faults::memory_client();
            let guards = [
                locks.lock("a").acquire().await.unwrap(),
                locks.lock("b").acquire().await.unwrap(),
            ];
            faults.unreachable(unreachable);
            let report = locks.shutdown().await;
            let expected = if unreachable { (0, 2) } else { (2, 0) };
            assert_eq!(
                (report.released, report.unanswered),
                expected,
                "unreachable: {unreachable}: {report:?}"
            );
            drop(guards);
        }
    }
}
