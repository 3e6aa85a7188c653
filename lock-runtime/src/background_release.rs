//! Releases nobody waits for: a dropped guard's, a cancelled acquisition's cleanup.
//!
//! They run on the client's background runtime and retry backend errors until the lease
//! would have ended anyway.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, Span};

use crate::LockClient;
use crate::backend::{Lease, LockBackend, Release};
use crate::driver;
use crate::error::WithSources;

/// Releases `lease` without blocking the caller, retrying backend errors with backoff until
/// the lease has certainly ended by itself. With `min_hold_ms`, the key is kept until
/// `hold_until` instead of deleted.
///
/// `in_doubt`: the acquire may still be on its way (its reply never came). The release then
/// first goes through the caller's own connection, behind that acquire, so it cannot
/// overtake it; a second one follows on the client's background a little later, in case
/// the caller's runtime ends before running the first.
///
/// `held_in`: the span of the guard nobody released that held the lease. The first release
/// runs in it, records how it ended there, and logs a warning if it finds the key gone or
/// taken, the loss nobody else will hear of (a `#[redis_lock]` function whose output is not
/// `Send` returns before its release).
pub(crate) fn release_in_background(
    client: &LockClient,
    lease: Lease,
    hold_until: Instant,
    in_doubt: bool,
    held_in: Option<Span>,
) {
    let backend = client.backend().clone();
    let caller = in_doubt.then(driver::caller_runtime).flatten();
    let mut held_in = held_in;
    if let Some(caller) = caller {
        caller.spawn(release_with_retries(
            backend.clone(),
            lease.clone(),
            hold_until,
            Duration::ZERO,
            held_in.take(),
        ));
    }
    let delay = if in_doubt {
        IN_DOUBT_FALLBACK
    } else {
        Duration::ZERO
    };
    let release = release_with_retries(backend, lease, hold_until, delay, held_in);
    let spawned = client.background().spawn(release);
    if let Err(error) = spawned {
        tracing::warn!(error = %WithSources(&error), "cannot release in the background; the lease ends by its TTL");
    }
}

/// How long the background fallback of an in-doubt release waits for the caller's own.
const IN_DOUBT_FALLBACK: Duration = Duration::from_secs(1);

/// Sends the release after `delay`, retrying backend errors with backoff (20 ms doubling to
/// 1 s) until the lease has certainly ended by itself; in the span of the guard that held
/// the lease, if any, where it records how the release ended.
async fn release_with_retries(
    backend: Arc<dyn LockBackend>,
    lease: Lease,
    hold_until: Instant,
    delay: Duration,
    held_in: Option<Span>,
) {
    let span = held_in.clone().unwrap_or_else(Span::none);
    let released = retry_release(&*backend, &lease, hold_until, delay, held_in.is_some());
    let how = released.instrument(span.clone()).await;
    span.record("release", how);
}

/// [`release_with_retries`] itself; says how the release ended: `released`, `lost` (the key
/// was gone or another owner's), or `failed`.
async fn retry_release(
    backend: &dyn LockBackend,
    lease: &Lease,
    hold_until: Instant,
    delay: Duration,
    held: bool,
) -> &'static str {
    tokio::time::sleep(delay).await;
    let deadline = Instant::now().max(hold_until) + lease.ttl;
    let mut pause = Duration::from_millis(20);
    loop {
        let keep = hold_until.saturating_duration_since(Instant::now());
        match backend.release(lease, keep).await {
            Ok(Release::Released) => return "released",
            Ok(Release::NotOwner) => {
                if held {
                    tracing::warn!(key = %lease.key, "lock released in the background was gone or held by another owner: the work under it may have overlapped");
                }
                return "lost";
            }
            Err(error) if Instant::now() + pause < deadline => {
                tracing::debug!(key = %lease.key, error = %WithSources(&error), "background release failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(error) => {
                tracing::warn!(key = %lease.key, error = %WithSources(&error), "background release gave up; the lease ends by its TTL");
                return "failed";
            }
        }
    }
}
