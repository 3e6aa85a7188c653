//! The one-key mutex (layout v2, `lua/mutex.lua`) where it differs from a lock that keeps
//! its fencing counter and release memory in keys of their own: what a tombstone carries,
//! and what a waiter's mark and a give-back leave.

use std::time::Duration;

use fencelock::LockKind;
use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::{Acquire, HeldLease, Lease, LockBackend, Release, Turn};
use fencelock::testing::RedisServer;
use redis::AsyncCommands;

use crate::support::{inspector, mutex_state, redis_server};

fn lease(owner: &str, kind: LockKind) -> Lease {
    Lease {
        key: "k".into(),
        owner: owner.into(),
        ttl: Duration::from_secs(30),
        replicas: 0,
        kind,
    }
}

/// A private redis-server, a backend on it, and a connection to look at what it holds.
async fn on_redis() -> (RedisServer, RedisBackend, redis::aio::MultiplexedConnection) {
    let server = redis_server();
    let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let redis = inspector(&server).await;
    (server, backend, redis)
}

async fn granted(backend: &RedisBackend, lease: &Lease) -> HeldLease {
    match backend.acquire(lease, Turn::Once).await.unwrap() {
        Acquire::Granted { token, slot } => HeldLease {
            lease: lease.clone(),
            token,
            slot,
        },
        held => panic!("{} is not granted: {held:?}", lease.owner),
    }
}

/// The server's clock in µs.
async fn server_clock_us(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(redis).await.unwrap();
    seconds * 1_000_000 + micros
}

/// A tombstone may be older than the grants a failover or a restart lost (a replica that
/// missed the last ones): a grant over it still takes the server clock, so that its token
/// exceeds the lost grants' too.
#[tokio::test]
async fn a_grant_over_an_old_tombstone_takes_the_server_clock() {
    let (_server, backend, mut redis) = on_redis().await;
    let minute = redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000));
    let _: () = redis
        .set_options("lock:{k}:v2", "r:5:5:0:gone", minute)
        .await
        .unwrap();
    let before = server_clock_us(&mut redis).await;
    let grant = granted(&backend, &lease("next", LockKind::Mutex)).await;
    assert!(
        grant.token >= before,
        "token {} below the server clock {before}",
        grant.token
    );
}

/// A grant given back (`min_replicas` not met) leaves the key's tombstone, not a missing key:
/// a resent release of the grant before it still learns that it released, and the last token
/// stays.
#[tokio::test]
async fn a_grant_given_back_keeps_the_memory_of_the_release_before_it() {
    let (_server, backend, mut redis) = on_redis().await;
    let first = granted(&backend, &lease("first", LockKind::Mutex)).await;
    let released = backend.release_held(&first, Duration::ZERO).await;
    assert_eq!(released.unwrap(), Release::Released);
    // No replica acknowledges: the grant is taken back.
    let replicated = Lease {
        replicas: 1,
        ..lease("replicated", LockKind::Mutex)
    };
    let refused = backend.acquire(&replicated, Turn::Once).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(mutex_state(&mut redis, "lock:{k}:v2").await, Some('r'));
    let again = backend.release_held(&first, Duration::ZERO).await;
    assert_eq!(
        again.unwrap(),
        Release::Released,
        "the resend still finds it"
    );
    let next = granted(&backend, &lease("next", LockKind::Mutex)).await;
    assert!(next.token > first.token + 1, "past the grant given back");
}

/// A waiter that would take a place in line reads the line first, also where the holder's
/// key says nobody waits: another program's data there is reported, not written to.
#[tokio::test]
async fn a_waiter_reports_foreign_data_in_the_line_of_an_unmarked_key() {
    let (_server, backend, mut redis) = on_redis().await;
    granted(&backend, &lease("holder", LockKind::Mutex)).await;
    let _: () = redis.rpush("lock:{k}:v2:queue", "theirs").await.unwrap();
    let waiter = lease("waiter", LockKind::Mutex);
    let attempt = backend
        .acquire(&waiter, Turn::InLine(Duration::from_secs(10)))
        .await;
    assert!(
        matches!(attempt, Err(fencelock::LockError::KeyInUse { .. })),
        "{attempt:?}"
    );
    let line: Vec<String> = redis.lrange("lock:{k}:v2:queue", 0, -1).await.unwrap();
    assert_eq!(line, ["theirs"], "left as it was");
    let ttl: i64 = redis.pttl("lock:{k}:v2:queue").await.unwrap();
    assert_eq!(ttl, -1, "no expiry put on it");
}

/// A shared kind's release on a key whose mutex was released leaves the mutex's tombstone (its
/// memory of the release, its last token); only a shared kind's acquire drops it.
#[tokio::test]
async fn only_a_shared_acquire_drops_a_mutex_tombstone() {
    let (_server, backend, mut redis) = on_redis().await;
    let mutex = granted(&backend, &lease("mutex", LockKind::Mutex)).await;
    backend.release_held(&mutex, Duration::ZERO).await.unwrap();
    let semaphore = lease("stranger", LockKind::Semaphore { permits: 2 });
    let released = backend.release(&semaphore, Duration::ZERO).await;
    assert_eq!(released.unwrap(), Release::NotOwner);
    assert_eq!(mutex_state(&mut redis, "lock:{k}:v2").await, Some('r'));
    let again = backend.release_held(&mutex, Duration::ZERO).await;
    assert_eq!(again.unwrap(), Release::Released);
    let shared = granted(&backend, &semaphore).await;
    assert!(shared.token > mutex.token, "tokens go on increasing");
}
