//! A client's shutdown: its locks released at once rather than after their leases, its
//! requests stopped and their places in line given back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::LockClient;
use crate::background_release::{Holder, release_in_background};
use crate::renewal::LossCause;
use crate::sync::{Outstanding, Ticket};

/// How long [`LockClient::shutdown`] waits at most for the client's requests to stop, and
/// then for the answers to its releases.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// Whether a client is shut down, and its requests still running.
#[derive(Debug)]
pub(crate) struct ShutdownState {
    down: watch::Sender<bool>,
    acquisitions: Arc<Outstanding>,
    withdrawn: AtomicUsize,
}

impl Default for ShutdownState {
    fn default() -> Self {
        ShutdownState {
            down: watch::Sender::new(false),
            acquisitions: Arc::default(),
            withdrawn: AtomicUsize::new(0),
        }
    }
}

impl ShutdownState {
    pub(crate) fn is_down(&self) -> bool {
        *self.down.borrow()
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

    /// Completes once the client is shut down; counts the request that stops for it.
    pub(crate) async fn stopping(&self) {
        let mut down = self.down.subscribe();
        // The sender lives as long as this state: `wait_for` only ends when it is down.
        let _ = down.wait_for(|down| *down).await;
        self.withdrawn.fetch_add(1, Ordering::Relaxed);
    }
}

/// What [`LockClient::shutdown`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Locks the client held, released now. Their guards and bodies see the lock lost with
    /// [`LossCause::ShutDown`].
    pub released: usize,
    /// Requests that were acquiring or waiting, stopped with [`LockError::ShutDown`] after
    /// giving back their places in line.
    ///
    /// [`LockError::ShutDown`]: crate::LockError::ShutDown
    pub withdrawn: usize,
    /// Releases not answered within [`SHUTDOWN_WAIT`] (the store is slow or unreachable):
    /// those locks end with their leases, unless the release still arrives.
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
    /// and again for the releases' answers.
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
        state.down.send_replace(true);
        let waited_until = Instant::now() + SHUTDOWN_WAIT;
        // Requests granted before they saw the shutdown hold their locks by the time they
        // end: the locks are then among those released below.
        let stopped = state.acquisitions.all_settled();
        let _ = tokio::time::timeout_at(waited_until, stopped).await;
        let held = self.renewer().drain(LossCause::ShutDown);
        let released = held.len();
        for lease in held {
            let holder = Holder {
                span: lease.span,
                signal: lease.signal,
            };
            release_in_background(self, lease.lease, lease.hold_until, false, Some(holder));
        }
        let answered = self.releases_in_flight().all_settled();
        let _ = tokio::time::timeout(SHUTDOWN_WAIT, answered).await;
        ShutdownReport {
            released,
            withdrawn: state.withdrawn.load(Ordering::Relaxed),
            unanswered: self.releases_in_flight().count(),
        }
    }
}
