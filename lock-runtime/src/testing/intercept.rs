//! A backend wrapper for fault-injection tests: before each call, an [`Interceptor`] decides
//! whether the call goes on to the wrapped backend, fails, or never answers, and may take its
//! time deciding (a slow network, on tokio's paused clock an exact one).
//!
//! The verdict comes before the wrapped backend sees the call: a call that fails here was
//! never applied. A reply lost after the store applied the call (the case the runtime's
//! resend and cleanup exist for) needs a real connection cut: see [`TcpProxy`](super::TcpProxy).

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::LockError;
use crate::backend::{
    Acquire, BoxFuture, Capabilities, Extended, HeldLease, Lease, LockBackend, OperatorBackend,
    Published, Release, ReleaseWatch, ResultChange, ResultStore, ShardMarks, SharedResult,
    TogetherCall, Turn,
};

/// A call on its way to the wrapped backend.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Call<'a> {
    /// [`LockBackend::acquire`].
    Acquire {
        /// The lease asked for.
        lease: &'a Lease,
        /// How the attempt competes.
        turn: Turn,
    },
    /// [`LockBackend::subscribe`].
    Subscribe {
        /// The key whose releases are watched.
        key: &'a str,
    },
    /// [`LockBackend::extend`].
    Extend {
        /// The leases to renew.
        held: &'a [HeldLease],
    },
    /// [`LockBackend::release`].
    Release {
        /// The lease to release.
        lease: &'a Lease,
        /// How long the key stays taken (`min_hold_ms`).
        min_hold: Duration,
    },
    /// [`LockBackend::acquire_together`]: several keys in one call.
    AcquireTogether {
        /// The leases asked for.
        leases: &'a [Lease],
    },
    /// [`ResultStore::read_result`] (`action = Share`).
    ReadResult {
        /// The key whose value is read.
        key: &'a str,
    },
    /// [`ResultStore::publish_result`] (`action = Share`).
    PublishResult {
        /// The key whose value is left.
        key: &'a str,
    },
    /// [`ResultStore::watch_result`] (`action = Share`).
    WatchResult {
        /// The key whose value is watched.
        key: &'a str,
    },
    /// [`ShardMarks::mark_exhausted`].
    MarkExhausted {
        /// The segmented lock's grant whose shard is marked.
        held: &'a HeldLease,
    },
    /// [`ShardMarks::refill`].
    Refill {
        /// The key whose shards are refilled.
        key: &'a str,
        /// The shard, or every one.
        shard: Option<u32>,
    },
}

/// What happens to a call.
#[derive(Debug)]
pub enum Verdict {
    /// It goes on to the wrapped backend.
    Pass,
    /// It fails with this error, and the wrapped backend never sees it.
    Fail(LockError),
    /// It never answers (until the caller gives up on it).
    Hang,
}

/// Decides the fate of each call of an [`Intercepted`] backend.
pub trait Interceptor: Debug + Send + Sync + 'static {
    /// Decides what happens to `call`; the call waits for the answer.
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict>;
}

/// `backend` with every call first put to `interceptor`. Clones share both.
///
/// ```
/// use fencelock::backend::memory::MemoryBackend;
/// use fencelock::backend::BoxFuture;
/// use fencelock::testing::{Call, Intercepted, Interceptor, Verdict};
/// use fencelock::{LockClient, LockError};
///
/// /// Renewals fail: the holder loses its lease when it ends.
/// #[derive(Debug)]
/// struct NoRenewals;
///
/// impl Interceptor for NoRenewals {
///     fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
///         Box::pin(async move {
///             match call {
///                 Call::Extend { .. } => {
///                     Verdict::Fail(LockError::backend(None, "renewals are cut off", None))
///                 }
///                 _ => Verdict::Pass,
///             }
///         })
///     }
/// }
///
/// let client = LockClient::from_backend(Intercepted::new(MemoryBackend::new(), NoRenewals));
/// ```
#[derive(Debug)]
pub struct Intercepted<B, I> {
    /// The wrapped backend, e.g. to look at its state behind the client's back.
    pub backend: Arc<B>,
    /// The interceptor, e.g. to change what it does while a test runs.
    pub interceptor: Arc<I>,
}

impl<B, I> Intercepted<B, I> {
    /// Wraps `backend`.
    pub fn new(backend: B, interceptor: I) -> Self {
        Intercepted {
            backend: Arc::new(backend),
            interceptor: Arc::new(interceptor),
        }
    }
}

impl<B, I> Clone for Intercepted<B, I> {
    fn clone(&self) -> Self {
        Intercepted {
            backend: self.backend.clone(),
            interceptor: self.interceptor.clone(),
        }
    }
}

impl<B: LockBackend, I: Interceptor> Intercepted<B, I> {
    /// `Ok` if `call` may go on; else its failure, or never.
    async fn admit(&self, call: Call<'_>) -> Result<(), LockError> {
        match self.interceptor.before(call).await {
            Verdict::Pass => Ok(()),
            Verdict::Fail(error) => Err(error),
            Verdict::Hang => std::future::pending().await,
        }
    }
}

impl<B: LockBackend, I: Interceptor> LockBackend for Intercepted<B, I> {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        Box::pin(async move {
            self.admit(Call::Acquire { lease, turn }).await?;
            self.backend.acquire(lease, turn).await
        })
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        Box::pin(async move {
            self.admit(Call::Subscribe { key }).await?;
            self.backend.subscribe(key).await
        })
    }

    /// Not put to the interceptor: it makes no call to the store.
    fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.backend.watch_if_subscribed(key)
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    fn extend<'a>(
        &'a self,
        held: &'a [HeldLease],
    ) -> BoxFuture<'a, Result<Vec<Extended>, LockError>> {
        Box::pin(async move {
            self.admit(Call::Extend { held }).await?;
            self.backend.extend(held).await
        })
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        Box::pin(async move {
            self.admit(Call::Release { lease, min_hold }).await?;
            self.backend.release(lease, min_hold).await
        })
    }

    fn release_held<'a>(
        &'a self,
        held: &'a HeldLease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        Box::pin(async move {
            let lease = &held.lease;
            self.admit(Call::Release { lease, min_hold }).await?;
            self.backend.release_held(held, min_hold).await
        })
    }

    /// Not put to the interceptor (an operator's calls, not the client's).
    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.backend.operator()
    }

    fn results(&self) -> Option<&dyn ResultStore> {
        self.backend.results().map(|_| self as &dyn ResultStore)
    }

    fn shard_marks(&self) -> Option<&dyn ShardMarks> {
        self.backend.shard_marks().map(|_| self as &dyn ShardMarks)
    }

    fn acquire_together<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        let together = self.backend.acquire_together(leases)?;
        Some(Box::pin(async move {
            self.admit(Call::AcquireTogether { leases }).await?;
            together.await
        }))
    }
}

// Offered when the wrapped backend offers them (`results` and `shard_marks` above).
impl<B: LockBackend, I: Interceptor> ResultStore for Intercepted<B, I> {
    fn read_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<SharedResult>, LockError>> {
        Box::pin(async move {
            self.admit(Call::ReadResult { key }).await?;
            offered(self.backend.results(), "single-flight values")?
                .read_result(key)
                .await
        })
    }

    fn publish_result<'a>(
        &'a self,
        key: &'a str,
        result: &'a SharedResult,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Published, LockError>> {
        Box::pin(async move {
            self.admit(Call::PublishResult { key }).await?;
            offered(self.backend.results(), "single-flight values")?
                .publish_result(key, result, keep)
                .await
        })
    }

    fn watch_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ResultChange>, LockError>> {
        Box::pin(async move {
            self.admit(Call::WatchResult { key }).await?;
            offered(self.backend.results(), "single-flight values")?
                .watch_result(key)
                .await
        })
    }
}

impl<B: LockBackend, I: Interceptor> ShardMarks for Intercepted<B, I> {
    fn mark_exhausted<'a>(&'a self, held: &'a HeldLease) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            self.admit(Call::MarkExhausted { held }).await?;
            offered(self.backend.shard_marks(), "exhausted shards")?
                .mark_exhausted(held)
                .await
        })
    }

    fn refill<'a>(
        &'a self,
        key: &'a str,
        shard: Option<u32>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            self.admit(Call::Refill { key, shard }).await?;
            offered(self.backend.shard_marks(), "exhausted shards")?
                .refill(key, shard)
                .await
        })
    }
}

/// The wrapped backend's `calls`, which it offers whenever the wrapper offers its own.
fn offered<'a, T: ?Sized>(calls: Option<&'a T>, what: &str) -> Result<&'a T, LockError> {
    calls.ok_or_else(|| crate::backend::not_offered(what))
}

/// An interceptor for this crate's tests: the calls for which `.0` is true are never
/// answered, as a store that stopped answering them.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Unanswered(pub(crate) fn(Call<'_>) -> bool);

#[cfg(test)]
impl Interceptor for Unanswered {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        let verdict = match (self.0)(call) {
            true => Verdict::Hang,
            false => Verdict::Pass,
        };
        Box::pin(std::future::ready(verdict))
    }
}
