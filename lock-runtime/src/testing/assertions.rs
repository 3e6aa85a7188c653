//! Assertions on lock keys, for an application's tests: whether a key is held or free, and
//! whether a guard's grant is what holds it. They read the store through the operator view
//! ([`LockClient::admin`]), so they work on every store, the memory backend included.

use crate::admin::{Grant, Holding};
use crate::glob;
use crate::instance::OwnerPrefix;
use crate::{LockClient, LockError, LockGuard};

/// Panics unless `key` is free on `client`'s store (nothing holds it).
///
/// ```
/// use fencelock::LockClient;
/// use fencelock::testing::assertions::{assert_free, assert_held_by};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let locks = LockClient::memory();
/// let guard = locks.lock("report").acquire().await.unwrap();
/// assert_held_by(&locks, &guard).await;
/// guard.release().await.unwrap();
/// assert_free(&locks, "report").await;
/// # }
/// ```
pub async fn assert_free(client: &LockClient, key: &str) {
    let holding = holding(client, key).await;
    assert!(
        !holding.is_held(),
        "expected lock `{key}` to be free, but it is held: {holding:?}"
    );
}

/// Panics unless something holds `key` on `client`'s store; returns what holds it (its
/// owner's tag and token, or a shared kind's grants).
pub async fn assert_held(client: &LockClient, key: &str) -> Holding {
    let holding = holding(client, key).await;
    assert!(
        holding.is_held(),
        "expected lock `{key}` to be held, but it is {holding:?}"
    );
    holding
}

/// Panics unless `guard`'s grant holds its key on `client`'s store: the same owner, with the
/// guard's fencing token (among the grants, for a shared kind, also past the first
/// [`QUEUE_SHOWN`](crate::admin::QUEUE_SHOWN) an inspection shows). A guard whose lease was
/// lost (expired, released by an operator, taken over) fails it, also while `min_hold_ms`
/// keeps its key taken.
pub async fn assert_held_by(client: &LockClient, guard: &LockGuard) {
    let key = guard.key();
    let holding = assert_held(client, key).await;
    let holds = match &holding {
        // A key written by a version before tokens were kept names none.
        Holding::Held { owner, token, .. } => {
            *owner == guard.owner() && token.is_none_or(|token| token == guard.token())
        }
        Holding::Shared {
            grants, holders, ..
        } => {
            let shown = grants
                .iter()
                .any(|grant| grant.owner == guard.owner() && grant.token == Some(guard.token()));
            shown || (*holders > grants.len() && held_past_those_shown(client, guard).await)
        }
        Holding::Kept { .. } | Holding::Free | Holding::Foreign { .. } => false,
    };
    assert!(
        holds,
        "expected lock `{key}` to be held by the guard's grant (owner {}, token {}), but it is \
         {holding:?}",
        guard.owner(),
        guard.token()
    );
}

/// Whether `guard`'s grant is among every live grant of its key's owner, read past those an
/// inspection shows.
async fn held_past_those_shown(client: &LockClient, guard: &LockGuard) -> bool {
    let key = guard.key();
    let owner = OwnerPrefix::starting(&guard.held_lease().lease.owner);
    match grants_of(client, key, &owner).await {
        Ok(grants) => grants
            .iter()
            .any(|grant| grant.token == Some(guard.token())),
        Err(error) => panic!(
            "cannot read the grants of lock `{key}` from the store: {}",
            crate::WithSources(&error)
        ),
    }
}

/// Every live grant of `key` whose owner `owners` matches, also past the first
/// [`QUEUE_SHOWN`](crate::admin::QUEUE_SHOWN) an inspection shows; none on a backend
/// without an operator's calls.
pub(super) async fn grants_of(
    client: &LockClient,
    key: &str,
    owners: &OwnerPrefix,
) -> Result<Vec<Grant>, LockError> {
    let Some(operator) = client.backend().operator() else {
        return Ok(Vec::new());
    };
    let owned = operator
        .grants_of_owners(&glob::escape(key), owners)
        .await?;
    let of_key = owned.into_iter().filter(|owned| owned.key == key);
    Ok(of_key.map(|owned| owned.grant).collect())
}

async fn holding(client: &LockClient, key: &str) -> Holding {
    match client.admin().inspect(key).await {
        Ok(state) => state.holding,
        Err(error) => panic!(
            "cannot read lock `{key}` from the store: {}",
            crate::WithSources(&error)
        ),
    }
}
