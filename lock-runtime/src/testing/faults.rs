//! Faults scripted on the memory backend, for an application's tests of how it behaves when
//! its locks misbehave: no Redis needed, and on tokio's paused clock every delay and lease is
//! exact.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::assertions;
use super::{Call, Intercepted, Interceptor, Verdict};
use crate::admin::Holding;
use crate::backend::BoxFuture;
use crate::backend::memory::MemoryBackend;
use crate::instance::OwnerPrefix;
use crate::sync::lock_ignoring_poison;
use crate::{LockClient, LockError};

/// The faults of a client made by [`Faults::memory_client`], changed while a test runs: the
/// store unreachable, renewals failing, acquisitions slow to arrive, a lease ended now.
///
/// ```
/// use std::time::Duration;
///
/// use fencelock::testing::Faults;
/// use fencelock::{LockError, LossCause};
///
/// #[tokio::test(start_paused = true)]
/// async fn renewals_that_fail_lose_the_lock() {
///     let (locks, faults) = Faults::memory_client();
///     let guard = locks.lock("report").ttl_ms(3_000).acquire().await.unwrap();
///     faults.fail_renewals(true);
///     // The paused clock runs on to the loss: no real time passes.
///     let lost = guard.lost().await;
///     assert!(matches!(lost, LockError::Lost { cause: LossCause::Unconfirmed, .. }));
/// }
/// # fn main() {}
/// ```
#[derive(Debug, Default)]
pub struct Faults {
    plan: Mutex<Plan>,
}

#[derive(Debug, Default)]
struct Plan {
    unreachable: bool,
    fail_renewals: bool,
    acquire_delays: VecDeque<Duration>,
}

impl Faults {
    /// A memory client whose every call meets these faults first (none yet), with its
    /// background work (renewal, loss detection) on the current tokio runtime, so that
    /// `#[tokio::test(start_paused = true)]` drives its leases. Panics outside a runtime.
    pub fn memory_client() -> (LockClient, Arc<Faults>) {
        let backend = Intercepted::new(MemoryBackend::new(), Faults::default());
        let faults = backend.interceptor.clone();
        let runtime = tokio::runtime::Handle::current();
        (LockClient::from_backend_on(backend, runtime), faults)
    }

    /// Makes the store unreachable (every call of the client fails with a backend error, as
    /// an outage does), or reachable again. An operator's calls ([`LockClient::admin`], and
    /// the [assertions](super::assertions) that read through them) still reach it: a test
    /// can look at the store during the outage.
    pub fn unreachable(&self, on: bool) {
        self.plan().unreachable = on;
    }

    /// Makes every renewal fail (the holder loses its lease once it would end unconfirmed),
    /// or succeed again.
    pub fn fail_renewals(&self, on: bool) {
        self.plan().fail_renewals = on;
    }

    /// Holds the next acquisition attempt `by` on its way to the store (one attempt per
    /// call; they queue up), as a slow network does: the store applies it only then, and a
    /// caller whose wait ends first gets a backend error for an attempt never applied. (A
    /// reply lost after the store applied the attempt needs a real connection cut: see
    /// [`TcpProxy`](super::TcpProxy).)
    pub fn delay_next_acquire(&self, by: Duration) {
        self.plan().acquire_delays.push_back(by);
    }

    /// Ends every grant of `key` now, as if its leases had run out (or an operator
    /// force-released it): its holders find the lease lost at their next renewal or release.
    pub async fn end_leases(&self, client: &LockClient, key: &str) -> Result<(), LockError> {
        let admin = client.admin();
        let holding = admin.inspect(key).await?.holding;
        let mut grants = holding.grants();
        // A shared kind's grants past the first 100 that an inspection shows.
        if let Holding::Shared { holders, .. } = holding
            && holders > grants.len()
        {
            let every_owner = OwnerPrefix::starting("");
            for grant in assertions::grants_of(client, key, &every_owner).await? {
                if !grants.contains(&grant) {
                    grants.push(grant);
                }
            }
        }
        for grant in grants {
            admin.force_release_of(key, grant).await?;
        }
        Ok(())
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        lock_ignoring_poison(&self.plan)
    }
}

impl Interceptor for Faults {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let (fail, delay) = {
                let mut plan = self.plan();
                let fail = match call {
                    _ if plan.unreachable => Some("the store is unreachable (testing::Faults)"),
                    Call::Extend { .. } if plan.fail_renewals => {
                        Some("renewals fail (testing::Faults)")
                    }
                    _ => None,
                };
                let delay = match call {
                    Call::Acquire { .. } | Call::AcquireTogether { .. } if fail.is_none() => {
                        plan.acquire_delays.pop_front()
                    }
                    _ => None,
                };
                (fail, delay)
            };
            if let Some(message) = fail {
                return Verdict::Fail(LockError::backend(None, message, None));
            }
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            Verdict::Pass
        })
    }
}
