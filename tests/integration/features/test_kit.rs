//! The assertions an application's tests make on lock keys (`fencelock::testing::assertions`),
//! on the memory backend and on Redis.

use fencelock::LockClient;
use fencelock::testing::assertions::{assert_free, assert_held, assert_held_by};

use crate::support::{client, redis_server};

/// Whether `check` panics (run as a task of its own, so that its panic is caught).
async fn panics<F>(check: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(check)
        .await
        .is_err_and(|error| error.is_panic())
}

async fn each_assertion_passes_and_fails_when_it_should(locks: LockClient) {
    assert_free(&locks, "report").await;
    let guard = locks.lock("report").acquire().await.unwrap();
    assert_held_by(&locks, &guard).await;
    assert_eq!(
        assert_held(&locks, "report").await.token(),
        Some(guard.token())
    );
    let other = locks.clone();
    assert!(panics(async move { assert_free(&other, "report").await }).await);
    let other = locks.clone();
    assert!(
        panics(async move {
            assert_held(&other, "nothing").await;
        })
        .await
    );

    // An operator ends the grant: the guard no longer holds its key.
    let forced = locks.admin().force_release("report").await.unwrap();
    assert!(forced.released);
    let again = locks.lock("report").acquire().await.unwrap();
    let (other, stale) = (locks.clone(), guard);
    assert!(panics(async move { assert_held_by(&other, &stale).await }).await);
    assert_held_by(&locks, &again).await;

    let readers = [
        locks.read_lock("shared").acquire().await.unwrap(),
        locks.read_lock("shared").acquire().await.unwrap(),
    ];
    for reader in &readers {
        assert_held_by(&locks, reader).await;
    }
}

#[tokio::test]
async fn key_assertions_on_the_memory_backend() {
    each_assertion_passes_and_fails_when_it_should(LockClient::memory()).await;
}

#[tokio::test]
async fn key_assertions_on_redis() {
    let server = redis_server();
    each_assertion_passes_and_fails_when_it_should(client(&server).await).await;
}
