//! Releases nobody waits for: a dropped guard's, a cancelled acquisition's cleanup.
//!
//! They run on the client's background runtime and retry backend errors until the lease
//! would have ended anyway.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

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
/// `held`: the lease was held by a guard nobody released; the first release logs a warning
/// if it finds the key gone or taken, the loss nobody else will hear of (a `#[redis_lock]`
/// function whose output is not `Send` returns before its release).
pub(crate) fn release_in_background(
    client: &LockClient,
    lease: Lease,
    hold_until: Instant,
    in_doubt: bool,
    held: bool,
) {
    let backend = client.backend().clone();
    let caller = in_doubt.then(driver::caller_runtime).flatten();
    let reported_by_caller = caller.is_some();
    if let Some(caller) = caller {
        caller.spawn(release_with_retries(
            backend.clone(),
            lease.clone(),
            hold_until,
            Duration::ZERO,
            held,
        ));
    }
    let delay = if in_doubt {
        IN_DOUBT_FALLBACK
    } else {
        Duration::ZERO
    };
    let release = release_with_retries(
        backend,
        lease,
        hold_until,
        delay,
        held && !reported_by_caller,
    );
    let spawned = client.background().spawn(release);
    if let Err(error) = spawned {
        tracing::warn!(error = %WithSources(&error), "cannot release in the background; the lease ends by its TTL");
    }
}

/// How long the background fallback of an in-doubt release waits for the caller's own.
const IN_DOUBT_FALLBACK: Duration = Duration::from_secs(1);

/// Sends the release after `delay`, retrying backend errors with backoff (20 ms doubling to
/// 1 s) until the lease has certainly ended by itself.
async fn release_with_retries(
    backend: Arc<dyn LockBackend>,
    lease: Lease,
    hold_until: Instant,
    delay: Duration,
    held: bool,
) {
    tokio::time::sleep(delay).await;
    let deadline = Instant::now().max(hold_until) + lease.ttl;
    let mut pause = Duration::from_millis(20);
    loop {
        let keep = hold_until.saturating_duration_since(Instant::now());
        match backend.release(&lease, keep).await {
            Ok(Release::NotOwner) if held => {
                tracing::warn!(key = %lease.key, "lock released in the background was gone or held by another owner: the work under it may have overlapped");
                return;
            }
            Ok(_) => return,
            Err(error) if Instant::now() + pause < deadline => {
                tracing::debug!(key = %lease.key, error = %WithSources(&error), "background release failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(error) => {
                tracing::warn!(key = %lease.key, error = %WithSources(&error), "background release gave up; the lease ends by its TTL");
                return;
            }
        }
    }
}
