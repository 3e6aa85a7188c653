//! Releases nobody waits for: a dropped guard's, a cancelled acquisition's cleanup.
//!
//! They run on the client's background runtime and retry backend errors until the lease
//! would have ended anyway. The client keeps count of those whose first try has not been
//! answered yet, by key, so that its next request for that key waits for them instead of
//! finding the key still held by itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{HeldLease, Lease, LockBackend, Release};
use crate::background::AwaitedAtExit;
use crate::error::WithSources;
use crate::renewal::{LossCause, LossSignal};
use crate::sync::{Ticket, lock_ignoring_poison};
use crate::telemetry::LockSpan;
use crate::{LockClient, background};

/// Releases `lease` without blocking the caller, retrying backend errors with backoff until
/// the lease has certainly ended by itself. With `min_hold_ms`, the key is kept until
/// `hold_until` instead of deleted. `token`: the fencing token of the grant where it is
/// known (a guard's), so that a retry recognises an earlier send of itself
/// ([`LockBackend::release_held`]).
///
/// `in_doubt`: the acquire may still be on its way (its reply never came). The release then
/// first goes through the caller's own connection, behind that acquire, so it cannot
/// overtake it; a second one follows on the client's background a little later, in case
/// the caller's runtime ends before running the first.
///
/// `held`: the span and the loss signal of the guard nobody released that held the lease.
/// The first release runs in that span, records there how it ended, and reports the loss (a
/// warning, the loss metric) if it finds the key gone or taken: the loss nobody else will
/// hear of (a `#[redis_lock]` function whose output is not `Send` returns before its
/// release). A cleanup of an acquisition has no span: its retries could keep the call's
/// span open for a whole lease after the call returned.
pub(crate) fn release_in_background(
    client: &LockClient,
    lease: Lease,
    token: Option<u64>,
    hold_until: Instant,
    in_doubt: bool,
    held: Option<Holder>,
) {
    let backend = client.backend().clone();
    let caller = in_doubt.then(background::caller_runtime).flatten();
    let mut held = held;
    // Shared by both sends of an in-doubt release: counted until the first answer, also when
    // the caller's runtime drops its send unsent (it is ending).
    let in_flight = Arc::new(Mutex::new(Some(InFlight {
        _key: client.releases_in_flight().start(&lease.key),
        _exit: AwaitedAtExit::new(),
    })));
    let mut delay = Duration::ZERO;
    if let Some(caller) = caller {
        let first = caller.spawn(release_with_retries(
            backend.clone(),
            (lease.clone(), token),
            hold_until,
            Duration::ZERO,
            (held.take(), in_flight.clone()),
        ));
        // Finished already: the runtime is shutting down and cancelled it unsent.
        if !first.is_finished() {
            delay = IN_DOUBT_FALLBACK;
        }
    }
    let span = held.as_ref().map(|held| held.span.clone());
    let release = release_with_retries(
        backend,
        (lease, token),
        hold_until,
        delay,
        (held, in_flight),
    );
    if let Err(error) = client.background().spawn(release) {
        tracing::warn!(target: "fencelock", error = %WithSources(&error), "cannot release in the background; the lease ends by its TTL");
        if let Some(span) = span {
            span.released(Outcome::Failed.label());
        }
    }
}

/// A background release counted in flight until its first try is answered (or it is dropped
/// unsent, its runtime gone): by its client, whose next request for the key waits for it,
/// and by the process, which waits for it at exit.
struct InFlight {
    _key: Ticket,
    _exit: AwaitedAtExit,
}

/// The [`InFlight`] of a release, which its first answered send ends.
type SharedInFlight = Arc<Mutex<Option<InFlight>>>;

/// The guard that held a lease released in the background: its span, its loss signal, and
/// where the release's outcome is reported (a shutdown's count).
pub(crate) struct Holder {
    pub(crate) span: LockSpan,
    pub(crate) signal: Arc<LossSignal>,
    pub(crate) report_to: Option<mpsc::UnboundedSender<Outcome>>,
}

/// How long the background fallback of an in-doubt release waits for the caller's own.
const IN_DOUBT_FALLBACK: Duration = Duration::from_secs(1);

/// How a background release ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Released,
    /// The key was gone or another owner's: `NotOwner`, or `Unconfirmed` after a try whose
    /// reply was lost (it may have released the key).
    Lost(LossCause),
    /// It gave up: the lease ends by its TTL.
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Released => "released",
            Outcome::Lost(_) => "lost",
            Outcome::Failed => "failed",
        }
    }
}

/// Sends the release after `delay`, retrying backend errors with backoff (20 ms doubling to
/// 1 s) until the lease has certainly ended by itself; for a lease `held` by a guard, in its
/// span, where it records how the release ended and reports a loss it finds. `in_flight`
/// counts it in flight until its first try is answered.
async fn release_with_retries(
    backend: Arc<dyn LockBackend>,
    (lease, token): (Lease, Option<u64>),
    hold_until: Instant,
    delay: Duration,
    (held, in_flight): (Option<Holder>, SharedInFlight),
) {
    let releasing = retry_release(&*backend, (&lease, token), hold_until, delay, in_flight);
    let Some(Holder {
        span,
        signal,
        report_to,
    }) = held
    else {
        releasing.await;
        return;
    };
    let released = releasing.instrument(span.span().clone()).await;
    span.released(released.label());
    if let Some(report_to) = report_to {
        // A shutdown that stopped waiting has dropped its receiver: nobody needs the count.
        let _ = report_to.send(released);
    }
    if let Outcome::Lost(cause) = released
        && signal.lose(cause)
    {
        span.lost(&lease.key, cause);
    }
}

/// [`release_with_retries`] itself.
async fn retry_release(
    backend: &dyn LockBackend,
    (lease, token): (&Lease, Option<u64>),
    hold_until: Instant,
    delay: Duration,
    in_flight: SharedInFlight,
) -> Outcome {
    tokio::time::sleep(delay).await;
    let held = token.map(|token| HeldLease {
        lease: lease.clone(),
        token,
        slot: None,
    });
    let deadline = Instant::now().max(hold_until) + lease.ttl;
    let mut pause = Duration::from_millis(20);
    let mut failed_before = false;
    loop {
        let min_hold = hold_until.saturating_duration_since(Instant::now());
        let answer = match &held {
            Some(held) => backend.release_held(held, min_hold).await,
            None => backend.release(lease, min_hold).await,
        };
        lock_ignoring_poison(&in_flight).take();
        match answer {
            Ok(Release::Released) => return Outcome::Released,
            Ok(Release::NotOwner) if !failed_before => return Outcome::Lost(LossCause::NotOwner),
            // A try whose reply was lost may have released the key longer ago than its
            // release is remembered.
            Ok(Release::NotOwner | Release::Unconfirmed) => {
                return Outcome::Lost(LossCause::Unconfirmed);
            }
            Err(error) if Instant::now() + pause < deadline => {
                failed_before = true;
                tracing::debug!(target: "fencelock", key = %lease.key, error = %WithSources(&error), "background release failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(error) => {
                tracing::warn!(target: "fencelock", key = %lease.key, error = %WithSources(&error), "background release gave up; the lease ends by its TTL");
                return Outcome::Failed;
            }
        }
    }
}
