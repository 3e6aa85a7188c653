//! A backend whose acquire replies come late, for tests: the client frozen (or the reply held
//! up on the network) between the store's grant and the client's reading of it.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Acquire, BoxFuture, Extended, HeldLease, Lease, LockBackend, Release, ReleaseWatch, Turn,
};
use crate::backend::{ForcedRelease, Grant, LockState};
use crate::{LockError, LockKind};

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

    fn offers(&self, kind: LockKind) -> bool {
        self.inner.offers(kind)
    }

    fn hands_off(&self) -> bool {
        self.inner.hands_off()
    }

    fn always_fair(&self) -> bool {
        self.inner.always_fair()
    }

    fn longest_lease(&self) -> Option<Duration> {
        self.inner.longest_lease()
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
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        self.inner.release(lease, keep)
    }

    fn list_locks<'a>(
        &'a self,
        pattern: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockState>, LockError>> {
        self.inner.list_locks(pattern)
    }

    fn inspect_lock<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<LockState, LockError>> {
        self.inner.inspect_lock(key)
    }

    fn force_release<'a>(
        &'a self,
        key: &'a str,
        grant: Grant,
    ) -> BoxFuture<'a, Result<ForcedRelease, LockError>> {
        self.inner.force_release(key, grant)
    }
}
