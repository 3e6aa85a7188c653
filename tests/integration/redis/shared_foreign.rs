//! Shared kinds on Redis beside foreign data: another program's timed hash or sorted set is
//! refused and left alone; a resent release is recognised after the key changed kind.

use std::time::Duration;

use fencelock::LockKind;
use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::{Acquire, Lease, LockBackend, Release, Turn};
use redis::AsyncCommands;

use crate::support::{inspector, redis_server};

fn lease(key: &str, owner: &str, kind: LockKind) -> Lease {
    Lease {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl: Duration::from_secs(10),
        replicas: 0,
        kind,
    }
}

/// Another program's hash with a TTL (a session, a cache entry) at the lock key, or its
/// sorted set with a TTL at `:leases`, is refused with `KeyInUse` and left as it was, as the
/// mutex refuses a string that is not shaped as a lock's.
#[tokio::test]
async fn a_timed_foreign_hash_or_zset_is_refused_and_left_untouched() {
    let server = redis_server();
    let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let mut conn = inspector(&server).await;
    let _: () = conn
        .hset("lock:{session}:v2", "user", "alice")
        .await
        .unwrap();
    let _: () = conn.pexpire("lock:{session}:v2", 60_000).await.unwrap();
    let _: () = conn
        .zadd("lock:{board}:v2:leases", "alice", 42)
        .await
        .unwrap();
    let _: () = conn
        .pexpire("lock:{board}:v2:leases", 60_000)
        .await
        .unwrap();
    let mut problems = Vec::new();
    for (key, foreign) in [
        ("session", "lock:{session}:v2"),
        ("board", "lock:{board}:v2:leases"),
    ] {
        let outcome = backend
            .acquire(&lease(key, "reader", LockKind::Read), Turn::Once)
            .await;
        let kept: bool = conn.exists(foreign).await.unwrap();
        let is_foreign_again = match foreign.ends_with(":leases") {
            true => conn
                .zscore::<_, _, Option<f64>>(foreign, "alice")
                .await
                .unwrap()
                .is_some(),
            false => conn
                .hget::<_, _, Option<String>>(foreign, "user")
                .await
                .unwrap()
                .is_some(),
        };
        if !matches!(outcome, Err(fencelock::LockError::KeyInUse { .. }))
            || !kept
            || !is_foreign_again
        {
            problems.push(format!(
                "{foreign}: acquire {outcome:?}, foreign data still there: {is_foreign_again}"
            ));
        }
    }
    // The mutex, for comparison: a timed string not shaped as a lock's is refused.
    let _: () = conn
        .set_ex("lock:{greeting}:v2", "hello", 60)
        .await
        .unwrap();
    let mutex = backend
        .acquire(&lease("greeting", "m", LockKind::Mutex), Turn::Once)
        .await;
    assert!(
        matches!(mutex, Err(fencelock::LockError::KeyInUse { .. })),
        "{mutex:?}"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A shared release whose reply was lost is sent again; the first one released. The resend
/// learns that it released also when the key served a mutex meanwhile, and the other way
/// round (each owner's release is remembered in a key of its own).
#[tokio::test]
async fn a_resent_release_is_remembered_after_the_key_changed_kind() {
    let server = redis_server();
    let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let mut problems = Vec::new();
    for (first, then) in [
        (LockKind::Mutex, LockKind::Read),
        (LockKind::Read, LockKind::Mutex),
    ] {
        let key = format!("switch-{}", first.name());
        let before = lease(&key, "before", first);
        backend.acquire(&before, Turn::Once).await.unwrap();
        backend.release(&before, Duration::ZERO).await.unwrap();
        let after = lease(&key, "after", then);
        assert!(matches!(
            backend.acquire(&after, Turn::Once).await,
            Ok(Acquire::Granted { .. })
        ));
        assert_eq!(
            backend.release(&after, Duration::ZERO).await.unwrap(),
            Release::Released
        );
        // The reply was lost; the release is sent again.
        let again = backend.release(&after, Duration::ZERO).await.unwrap();
        if again != Release::Released {
            problems.push(format!(
                "{first:?} then {then:?}: the resent release says {again:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
