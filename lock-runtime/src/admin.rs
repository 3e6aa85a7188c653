//! Operating locks: list the held ones, inspect one, release one by force, watch a key's
//! releases. This is what the `fencelock` command-line tool does; [`LockClient::admin`] gives
//! the same to a program.
//!
//! Owners are named by their [`OwnerTag`] (a one-way tag of the owner token, as release
//! notifications name them), never by their token: whoever has a token can release the lock.

use std::sync::Arc;

use crate::backend::{LockBackend, OperatorBackend, not_offered};
use crate::glob::Glob;
use crate::release_hub::Following;
use crate::{LockClient, LockError, key};

pub use crate::backend::state::{
    ForcedRelease, Grant, Holding, LockState, Masters, QUEUE_SHOWN, SharedGrant, Waiter,
};
pub use crate::release_hub::{OwnerTag, ReleaseEvent};

/// An operator's handle on a client's locks, from [`LockClient::admin`]. Keys are lock keys
/// as applications write them (`stock:42`, without the client's prefix), checked like a
/// request's.
///
/// ```
/// use fencelock::admin::Holding;
/// use fencelock::{LockClient, LockError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locks = LockClient::memory();
/// let guard = locks.lock("stock:42").acquire().await?;
/// let admin = locks.admin();
/// let held = admin.list("stock:*").await?;
/// assert_eq!(held[0].key, "stock:42");
/// assert!(matches!(held[0].holding, Holding::Held { token: Some(t), .. } if t == guard.token()));
///
/// // Owner-unchecked: the holder learns of it at its next renewal or release.
/// let forced = admin.force_release("stock:42").await?;
/// assert!(forced.released && forced.found.is_held());
/// assert!(guard.release().await.unwrap_err().is_lost());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockAdmin {
    client: LockClient,
}

impl LockClient {
    /// An operator's handle on this client's locks: list, inspect, force-release, watch.
    pub fn admin(&self) -> LockAdmin {
        LockAdmin {
            client: self.clone(),
        }
    }
}

impl LockAdmin {
    /// The client whose locks this handle operates.
    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    fn backend(&self) -> &Arc<dyn LockBackend> {
        self.client.backend()
    }

    /// The backend's operator calls, or why `what` cannot be done.
    fn operator(&self, what: &str) -> Result<&dyn OperatorBackend, LockError> {
        self.backend().operator().ok_or_else(|| not_offered(what))
    }

    /// The held locks whose key matches `pattern`, sorted by key. `pattern` is a Redis glob
    /// over the lock key text (`*` any text, `?` any byte, `[a-z]`, `\` escapes; `*` lists
    /// every lock). On Redis it is a `SCAN` (never `KEYS`, which blocks the server), page by
    /// page, each page's locks read in one pipeline; on a Redis Cluster every master is
    /// scanned, on Redlock every master and each lock merged over them. A key that appears
    /// in the middle of a listing may be missed, as with any `SCAN`.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        Glob::parse(pattern)?;
        let mut locks = self.operator("listing locks")?.list_locks(pattern).await?;
        locks.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(locks)
    }

    /// What `key` holds now (free or not), read at once.
    pub async fn inspect(&self, key: &str) -> Result<LockState, LockError> {
        key::validate(key)?;
        self.operator("inspecting a lock")?.inspect_lock(key).await
    }

    /// Releases `key` whoever holds it (no owner check), keeping its fencing counter: the
    /// oldest waiter whose place lasts gets the key with a greater token, as after a release,
    /// or waiters hear that it is free. The former holder is not told; its next renewal or
    /// release reports [`LockError::Lost`]. Reads the key first and releases only the grant
    /// it found there ([`force_release_of`](Self::force_release_of)): if another grant took
    /// its place meanwhile, nothing is released. Foreign data in the key (or next to it) is
    /// refused with [`LockError::KeyInUse`] and left alone. Of a key that a shared kind holds
    /// (readers, a writer, permits, shards), it ends the one grant there; with several, it
    /// ends none and says which there are ([`LockError::InvalidConfig`]): name one with
    /// [`force_release_of`](Self::force_release_of) and a grant of [`Holding::grants`].
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease, LockError> {
        let state = self.inspect(key).await?;
        match state.holding {
            Holding::Foreign { reason } => Err(LockError::key_in_use(key, reason)),
            ref holding @ Holding::Shared { holders, .. } => match holding.grants()[..] {
                [only] if holders == 1 => self.force_release_of(key, only).await,
                ref several => Err(several_grants(key, several, holders)),
            },
            holding => match holding.grant() {
                Some(grant) => self.force_release_of(key, grant).await,
                None => Ok(ForcedRelease::not_held(key)),
            },
        }
    }

    /// Releases `key` by force, as [`force_release`](Self::force_release) does, if and only if
    /// it holds `grant` (as [`Holding::grants`] gave it: that grant, or the key it keeps
    /// after its release by `min_hold_ms`), never one that took its place since, also of the same
    /// owner (a later grant carries a greater token). Safe to send again: once released, the
    /// key no longer holds `grant` (so a second send after a lost reply says nothing was
    /// released; [`inspect`](Self::inspect) tells what holds the key). Unlike
    /// `force_release`, it does not look for foreign data next to the key first.
    pub async fn force_release_of(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        key::validate(key)?;
        self.operator("releasing a lock by force")?
            .force_release(key, grant)
            .await
    }

    /// Every release announcement of `key` from now on, in order (returned once the backend
    /// announces them to this watch). Waiters only ever need the last of several; this
    /// keeps each, on its own channel, without adding to their path.
    pub async fn watch(&self, key: &str) -> Result<ReleaseEvents, LockError> {
        key::validate(key)?;
        let watch = self.backend().subscribe(key).await?;
        Ok(ReleaseEvents {
            backend: self.backend().clone(),
            key: key.to_owned(),
            following: watch.follow(),
            interrupted: false,
        })
    }
}

/// Why a forced release of `key`, which `holders` shared grants hold, releases none.
fn several_grants(key: &str, grants: &[Grant], holders: usize) -> LockError {
    let owners: Vec<String> = grants.iter().map(|g| g.owner.to_string()).collect();
    LockError::invalid_config(format!(
        "`{key}` is held by {holders} grants of a shared kind ({}): a forced release ends \
         one grant; name it with force_release_of(key, grant.grant()), or `--holder TAG` on \
         the command line",
        owners.join(", ")
    ))
}

/// The release announcements of one key, from [`LockAdmin::watch`].
#[derive(Debug)]
pub struct ReleaseEvents {
    backend: Arc<dyn LockBackend>,
    key: String,
    following: Following,
    /// The subscription was interrupted: subscribe again before waiting.
    interrupted: bool,
}

impl ReleaseEvents {
    /// The next announcement. After [`ReleaseEvent::Interrupted`] the key is subscribed again
    /// first; an error when that fails (or the backend is gone).
    pub async fn next(&mut self) -> Result<ReleaseEvent, LockError> {
        if self.interrupted {
            // The old watch is kept until the new one exists, so the subscription is never
            // left idle for the backend to drop meanwhile.
            self.following = self.backend.subscribe(&self.key).await?.follow();
            self.interrupted = false;
        }
        let event = self.following.next().await.ok_or_else(|| {
            LockError::backend(
                Some(&self.key),
                "the backend stopped announcing releases",
                None,
            )
        })?;
        self.interrupted = event == ReleaseEvent::Interrupted;
        Ok(event)
    }
}
