//! A backend whose acquire replies come late, for tests: the client frozen (or the reply held
//! up on the network) between the store's grant and the client's reading of it.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Acquire, BoxFuture, Capabilities, Extended, HeldLease, Lease, LockBackend, OperatorBackend,
    Release, ReleaseWatch, ResultStore, ShardMarks, TogetherCall, Turn,
};
use crate::LockError;

/// `inner`, with every acquire answered `reply_delay` after the store answered it.
#[derive(Debug, Clone)]
pub(crate) struct LateReplies {
    inner: Arc<dyn LockBackend>,
    reply_delay: Duration,
}

impl LateReplies {
    pub(crate) fn new(inner: Arc<dyn LockBackend>, reply_delay: Duration) -> Self {
        LateReplies { inner, reply_delay }
    }
}

impl LockBackend for LateReplies {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        Box::pin(async move {
            let answer = self.inner.acquire(lease, turn).await;
            tokio::time::sleep(self.reply_delay).await;
            answer
        })
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        self.inner.subscribe(key)
    }

    fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.inner.watch_if_subscribed(key)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn extend<'a>(
        &'a self,
        held: &'a [HeldLease],
    ) -> BoxFuture<'a, Result<Vec<Extended>, LockError>> {
        self.inner.extend(held)
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        self.inner.release(lease, min_hold)
    }

    fn release_held<'a>(
        &'a self,
        held: &'a HeldLease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        self.inner.release_held(held, min_hold)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.inner.operator()
    }

    fn results(&self) -> Option<&dyn ResultStore> {
        self.inner.results()
    }

    fn shard_marks(&self) -> Option<&dyn ShardMarks> {
        self.inner.shard_marks()
    }

    /// Answered as late as every acquire.
    fn acquire_together<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        let call = self.inner.acquire_together(leases)?;
        Some(Box::pin(async move {
            let answer = call.await;
            tokio::time::sleep(self.reply_delay).await;
            answer
        }))
    }
}
