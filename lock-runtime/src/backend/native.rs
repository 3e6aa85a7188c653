//! The backends of this crate, written with `async fn`s: [`LockBackend`] and
//! [`OperatorBackend`] box their futures here, once, for every one of them (a trait object's
//! methods cannot return `impl Future`). A backend outside the crate implements the boxed
//! traits itself.

use std::future::Future;
use std::time::Duration;

use super::{
    Acquire, BoxFuture, Capabilities, Extended, ForcedRelease, Grant, HeldLease, Lease,
    LockBackend, LockState, OperatorBackend, OwnedGrant, OwnerPrefix, Published, Release,
    ReleaseWatch, ResultChange, ResultStore, ShardMarks, SharedResult, TogetherCall, Turn,
};
use crate::LockError;

/// [`LockBackend`], with `async fn`s; each method is that trait's of the same meaning.
pub(crate) trait AsyncBackend: Send + Sync + std::fmt::Debug + 'static {
    /// [`LockBackend::acquire`].
    fn try_acquire(
        &self,
        lease: &Lease,
        turn: Turn,
    ) -> impl Future<Output = Result<Acquire, LockError>> + Send;

    /// [`LockBackend::subscribe`].
    fn watch_releases(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<ReleaseWatch, LockError>> + Send;

    /// [`LockBackend::watch_if_subscribed`].
    fn watch_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        let _ = key;
        None
    }

    /// [`LockBackend::capabilities`].
    fn offers(&self) -> Capabilities {
        Capabilities::MUTEX
    }

    /// [`LockBackend::extend`].
    fn extend_grants(
        &self,
        held: &[HeldLease],
    ) -> impl Future<Output = Result<Vec<Extended>, LockError>> + Send;

    /// [`LockBackend::release`].
    fn release_grant(
        &self,
        lease: &Lease,
        min_hold: Duration,
    ) -> impl Future<Output = Result<Release, LockError>> + Send;

    /// [`LockBackend::release_held`].
    fn release_held_grant(
        &self,
        held: &HeldLease,
        min_hold: Duration,
    ) -> impl Future<Output = Result<Release, LockError>> + Send {
        self.release_grant(&held.lease, min_hold)
    }

    /// [`LockBackend::operator`].
    fn operator_calls(&self) -> Option<&dyn OperatorBackend> {
        None
    }

    /// [`LockBackend::results`].
    fn result_calls(&self) -> Option<&dyn ResultStore> {
        None
    }

    /// [`LockBackend::shard_marks`].
    fn shard_mark_calls(&self) -> Option<&dyn ShardMarks> {
        None
    }

    /// [`LockBackend::acquire_together`].
    fn together_call<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        let _ = leases;
        None
    }
}

/// [`ShardMarks`], with `async fn`s; each method is that trait's of the same meaning.
pub(crate) trait AsyncShardMarks: Send + Sync {
    /// [`ShardMarks::mark_exhausted`].
    fn mark(&self, held: &HeldLease) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// [`ShardMarks::refill`].
    fn clear_marks(
        &self,
        key: &str,
        shard: Option<u32>,
    ) -> impl Future<Output = Result<(), LockError>> + Send;
}

/// [`ResultStore`], with `async fn`s; each method is that trait's of the same meaning.
pub(crate) trait AsyncResults: Send + Sync {
    /// [`ResultStore::read_result`].
    fn read_kept(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<SharedResult>, LockError>> + Send;

    /// [`ResultStore::publish_result`].
    fn publish(
        &self,
        key: &str,
        result: &SharedResult,
        keep: Duration,
    ) -> impl Future<Output = Result<Published, LockError>> + Send;

    /// [`ResultStore::watch_result`].
    fn watch_kept(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<ResultChange>, LockError>> + Send {
        let _ = key;
        async { Ok(None) }
    }
}

/// [`OperatorBackend`], with `async fn`s; each method is that trait's of the same meaning.
pub(crate) trait AsyncOperator: Send + Sync {
    /// [`OperatorBackend::list_locks`].
    fn list_held(
        &self,
        pattern: &str,
    ) -> impl Future<Output = Result<Vec<LockState>, LockError>> + Send;

    /// [`OperatorBackend::inspect_lock`].
    fn inspect_held(&self, key: &str) -> impl Future<Output = Result<LockState, LockError>> + Send;

    /// [`OperatorBackend::force_release`].
    fn force_release_held(
        &self,
        key: &str,
        grant: Grant,
    ) -> impl Future<Output = Result<ForcedRelease, LockError>> + Send;

    /// [`OperatorBackend::grants_of_owners`].
    fn owned_grants(
        &self,
        pattern: &str,
        owners: &OwnerPrefix,
    ) -> impl Future<Output = Result<Vec<OwnedGrant>, LockError>> + Send;
}

impl<B: AsyncBackend> LockBackend for B {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        Box::pin(self.try_acquire(lease, turn))
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        Box::pin(self.watch_releases(key))
    }

    fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.watch_subscribed(key)
    }

    fn capabilities(&self) -> Capabilities {
        self.offers()
    }

    fn extend<'a>(
        &'a self,
        held: &'a [HeldLease],
    ) -> BoxFuture<'a, Result<Vec<Extended>, LockError>> {
        Box::pin(self.extend_grants(held))
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        Box::pin(self.release_grant(lease, min_hold))
    }

    fn release_held<'a>(
        &'a self,
        held: &'a HeldLease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        Box::pin(self.release_held_grant(held, min_hold))
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.operator_calls()
    }

    fn results(&self) -> Option<&dyn ResultStore> {
        self.result_calls()
    }

    fn shard_marks(&self) -> Option<&dyn ShardMarks> {
        self.shard_mark_calls()
    }

    fn acquire_together<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        self.together_call(leases)
    }
}

impl<S: AsyncShardMarks> ShardMarks for S {
    fn mark_exhausted<'a>(&'a self, held: &'a HeldLease) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.mark(held))
    }

    fn refill<'a>(
        &'a self,
        key: &'a str,
        shard: Option<u32>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(self.clear_marks(key, shard))
    }
}

impl<R: AsyncResults> ResultStore for R {
    fn read_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<SharedResult>, LockError>> {
        Box::pin(self.read_kept(key))
    }

    fn publish_result<'a>(
        &'a self,
        key: &'a str,
        result: &'a SharedResult,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Published, LockError>> {
        Box::pin(self.publish(key, result, keep))
    }

    fn watch_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ResultChange>, LockError>> {
        Box::pin(self.watch_kept(key))
    }
}

impl<O: AsyncOperator> OperatorBackend for O {
    fn list_locks<'a>(
        &'a self,
        pattern: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockState>, LockError>> {
        Box::pin(self.list_held(pattern))
    }

    fn inspect_lock<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<LockState, LockError>> {
        Box::pin(self.inspect_held(key))
    }

    fn force_release<'a>(
        &'a self,
        key: &'a str,
        grant: Grant,
    ) -> BoxFuture<'a, Result<ForcedRelease, LockError>> {
        Box::pin(self.force_release_held(key, grant))
    }

    fn grants_of_owners<'a>(
        &'a self,
        pattern: &'a str,
        owners: &'a OwnerPrefix,
    ) -> BoxFuture<'a, Result<Vec<OwnedGrant>, LockError>> {
        Box::pin(self.owned_grants(pattern, owners))
    }
}
