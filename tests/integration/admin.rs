//! The operator's view on Redis (`LockClient::admin`), where it differs from the memory
//! backend's: foreign data, keys kept by `min_hold_ms`, lapsed places. What every backend
//! shows is in the conformance suite.

use fencelock::admin::Holding;
use fencelock::{LockClient, LockError};
use redis::AsyncCommands;

use crate::support::{client, inspector, redis_server};

/// Another program's data under the prefix, or next to a held lock, lists as foreign, with
/// what was found, and a forced release refuses it without touching it (nor the grant next
/// to it).
#[tokio::test]
async fn foreign_data_is_listed_as_such_and_never_released_by_force() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    let _: () = redis.set("lock:{plain}", "not a lock").await.unwrap();
    let _: () = redis.hset("lock:{hash}", "field", 1).await.unwrap();
    let guard = locks.lock("queued").acquire().await.unwrap();
    let _: () = redis.set("lock:{queued}:queue", "x").await.unwrap();
    let admin = locks.admin();
    let listed = admin.list("*").await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|state| state.key.as_str()).collect();
    assert_eq!(keys, ["hash", "plain", "queued"]);
    for state in &listed {
        let Holding::Foreign { reason } = &state.holding else {
            panic!("{}: {:?}", state.key, state.holding);
        };
        assert!(!reason.is_empty(), "{}", state.key);
    }
    for key in ["plain", "hash", "queued"] {
        match admin.force_release(key).await {
            Err(LockError::KeyInUse { .. }) => {}
            other => panic!("{key}: expected KeyInUse, got {other:?}"),
        }
    }
    let kept: String = redis.get("lock:{plain}").await.unwrap();
    assert_eq!(kept, "not a lock", "left as it was");
    let grant: Option<String> = redis.get("lock:{queued}").await.unwrap();
    assert!(
        grant.is_some(),
        "the grant next to the foreign queue is kept"
    );
    drop(guard);
}

/// A key that `min_hold_ms` keeps after its release shows as kept (not held), and a place
/// whose waiter stopped attempting shows as lapsed, not as the next waiter.
#[tokio::test]
async fn a_kept_key_and_a_lapsed_place_show_as_such() {
    let server = redis_server();
    let locks = client(&server).await;
    let guard = locks
        .lock("job")
        .min_hold_ms(60_000)
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
    let mut redis = inspector(&server).await;
    // A waiter that died long ago: its place lapsed at server time 1 ms.
    let entry = "ghost-owner 30000";
    let _: () = redis.rpush("lock:{job}:queue", entry).await.unwrap();
    let _: () = redis
        .zadd("lock:{job}:queue:deadlines", entry, 1)
        .await
        .unwrap();
    for queue_key in ["lock:{job}:queue", "lock:{job}:queue:deadlines"] {
        let _: () = redis.pexpire(queue_key, 60_000).await.unwrap();
    }
    let state = locks.admin().inspect("job").await.unwrap();
    assert!(matches!(state.holding, Holding::Kept { .. }), "{state:?}");
    assert_eq!(state.queue.len(), 1, "{state:?}");
    assert_eq!(state.queue[0].place_left, None, "lapsed");
    assert_eq!(state.waiters, 0, "no live place");
    assert_eq!(state.next_waiter(), None, "a hand-off would skip it");
    let listed = locks.admin().list("j*").await.unwrap();
    assert_eq!(listed.len(), 1, "a kept key is still taken: {listed:?}");
}

/// The memory backend has no foreign data; it lists what it holds like Redis does.
#[tokio::test]
async fn the_memory_backend_lists_only_live_leases() {
    let locks = LockClient::memory();
    let short = locks.lock("short").ttl_ms(20).renew(false);
    let _short = short.acquire().await.unwrap();
    let _long = locks.lock("long").acquire().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    let listed = locks.admin().list("*").await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|state| state.key.as_str()).collect();
    assert_eq!(keys, ["long"], "an expired lease is not listed");
}
