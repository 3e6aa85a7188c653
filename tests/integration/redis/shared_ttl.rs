//! The shared kinds' keys on Redis live as long as their longest live lease: once every
//! grant ended, nothing is left, and a mutex of the key is granted, on Redis as on the memory
//! backend.

use std::time::Duration;

use fencelock::LockKind;
use fencelock::backend::memory::MemoryBackend;
use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::{Acquire, Lease, LockBackend, Release, Turn};
use redis::AsyncCommands;

use crate::support::{inspector, redis_server};

fn lease(key: &str, owner: &str, ttl_ms: u64, kind: LockKind) -> Lease {
    Lease {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl: Duration::from_millis(ttl_ms),
        replicas: 0,
        kind,
    }
}

/// A long reader that releases and a short one that crashes; then a mutex of the key once
/// the short lease ended. Returns whether the mutex was granted.
async fn crashed_short_reader_then_mutex(backend: &dyn LockBackend) -> Result<Acquire, String> {
    let long = lease("k1", "long-reader", 10_000, LockKind::Read);
    let short = lease("k1", "short-reader", 200, LockKind::Read);
    assert!(matches!(
        backend.acquire(&long, Turn::Once).await,
        Ok(Acquire::Granted { .. })
    ));
    assert!(matches!(
        backend.acquire(&short, Turn::Once).await,
        Ok(Acquire::Granted { .. })
    ));
    assert_eq!(
        backend.release(&long, Duration::ZERO).await.unwrap(),
        Release::Released
    );
    // The short reader dies: its lease ends 200 ms later.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mutex = lease("k1", "mutex", 10_000, LockKind::Mutex);
    backend
        .acquire(&mutex, Turn::Once)
        .await
        .map_err(|e| e.to_string())
}

/// A reader released with min_hold_ms 100; then a mutex of the key after the hold.
async fn kept_reader_then_mutex(backend: &dyn LockBackend) -> Result<Acquire, String> {
    let reader = lease("k2", "reader", 10_000, LockKind::Read);
    assert!(matches!(
        backend.acquire(&reader, Turn::Once).await,
        Ok(Acquire::Granted { .. })
    ));
    assert_eq!(
        backend
            .release(&reader, Duration::from_millis(100))
            .await
            .unwrap(),
        Release::Released
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mutex = lease("k2", "mutex", 10_000, LockKind::Mutex);
    backend
        .acquire(&mutex, Turn::Once)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_mutex_after_every_shared_grant_ended_is_granted() {
    let server = redis_server();
    let redis = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let memory = MemoryBackend::new();
    let mut problems = Vec::new();
    for (name, memory_outcome, redis_outcome) in [
        (
            "crashed short reader",
            crashed_short_reader_then_mutex(&memory).await,
            crashed_short_reader_then_mutex(&redis).await,
        ),
        (
            "reader kept by min_hold_ms",
            kept_reader_then_mutex(&memory).await,
            kept_reader_then_mutex(&redis).await,
        ),
    ] {
        let granted = |o: &Result<Acquire, String>| matches!(o, Ok(Acquire::Granted { .. }));
        if !granted(&memory_outcome) || !granted(&redis_outcome) {
            problems.push(format!(
                "{name}: memory {memory_outcome:?}, redis {redis_outcome:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn no_shared_key_outlives_its_last_live_lease() {
    let server = redis_server();
    let redis = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let mut conn = inspector(&server).await;
    let long = lease("k3", "long", 20_000, LockKind::Semaphore { permits: 3 });
    let short = lease("k3", "short", 200, LockKind::Semaphore { permits: 3 });
    redis.acquire(&long, Turn::Once).await.unwrap();
    redis.acquire(&short, Turn::Once).await.unwrap();
    redis.release(&long, Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Every grant ended 200 ms ago.
    let mut keys: Vec<String> = conn.keys("*").await.unwrap();
    keys.sort();
    let mut left = Vec::new();
    for key in &keys {
        let ttl: i64 = conn.pttl(key).await.unwrap();
        if !key.ends_with(":fence") && !key.contains("}:v2:released:") {
            left.push(format!("{key} (pttl {ttl} ms)"));
        }
    }
    assert!(
        left.is_empty(),
        "left behind after the last lease ended: {left:?}"
    );
}
