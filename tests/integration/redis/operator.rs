//! The operator's view on Redis (`LockClient::admin`), where it differs from the memory
//! backend's: foreign data, keys kept by `min_hold_ms`, lapsed places. What every backend
//! shows is in the conformance suite.

use std::time::Duration;

use fencelock::admin::{Grant, Holding};
use fencelock::testing::{RedisCluster, RedisServer};
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
    let _: () = redis.set("lock:{plain}:v2", "not a lock").await.unwrap();
    let _: () = redis.hset("lock:{hash}:v2", "field", 1).await.unwrap();
    let guard = locks.lock("queued").acquire().await.unwrap();
    let _: () = redis.set("lock:{queued}:v2:queue", "x").await.unwrap();
    // A reader's grant whose leases key another program overwrote.
    let reader = locks.read_lock("read").acquire().await.unwrap();
    let _: () = redis.set("lock:{read}:v2:leases", "x").await.unwrap();
    let admin = locks.admin();
    let listed = admin.list("*").await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|state| state.key.as_str()).collect();
    assert_eq!(keys, ["hash", "plain", "queued", "read"]);
    for state in &listed {
        let Holding::Foreign { reason } = &state.holding else {
            panic!("{}: {:?}", state.key, state.holding);
        };
        assert!(!reason.is_empty(), "{}", state.key);
    }
    for key in ["plain", "hash", "queued", "read"] {
        match admin.force_release(key).await {
            Err(LockError::KeyInUse { .. }) => {}
            other => panic!("{key}: expected KeyInUse, got {other:?}"),
        }
    }
    let kept: String = redis.get("lock:{plain}:v2").await.unwrap();
    assert_eq!(kept, "not a lock", "left as it was");
    let grant: Option<String> = redis.get("lock:{queued}:v2").await.unwrap();
    assert!(
        grant.is_some(),
        "the grant next to the foreign queue is kept"
    );
    drop((guard, reader));
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
    let _: () = redis.rpush("lock:{job}:v2:queue", entry).await.unwrap();
    let _: () = redis
        .zadd("lock:{job}:v2:queue:deadlines", entry, 1)
        .await
        .unwrap();
    for queue_key in ["lock:{job}:v2:queue", "lock:{job}:v2:queue:deadlines"] {
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

/// Sets `key` to `value` with a minute's lease, as a grant of this library leaves it.
async fn grant_by_hand(server: &RedisServer, key: &str, value: &str) {
    let mut redis = inspector(server).await;
    let minute = redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000));
    let _: () = redis.set_options(key, value, minute).await.unwrap();
}

/// A forced release of the grant shown leaves a later grant of the same owner (a resent or
/// retried acquisition keeps its owner token; its grant carries a greater token).
#[tokio::test]
async fn a_forced_release_ends_only_the_grant_shown() {
    let server = redis_server();
    let locks = client(&server).await;
    grant_by_hand(&server, "lock:{k}:v2", "h:5:5:0:x-owner").await;
    let shown = locks.admin().inspect("k").await.unwrap().holding;
    grant_by_hand(&server, "lock:{k}:v2", "h:9:9:0:x-owner").await;
    let grant = shown.grant().unwrap();
    let forced = locks.admin().force_release_of("k", grant).await.unwrap();
    assert!(!forced.released, "grant 9 was never shown: {forced:?}");
    assert_eq!(forced.found.token(), Some(9));
}

/// Redlock: the owner shown holds a copy on one master, another owner the key on the other
/// two; the forced release ends that copy, and says it is the one it ended.
#[tokio::test]
async fn on_redlock_a_forced_release_names_the_grant_it_ended() {
    let masters: Vec<RedisServer> = (0..3).map(|_| redis_server()).collect();
    for (master, value) in
        masters
            .iter()
            .zip(["h:5:5:0:x-owner", "h:7:7:0:y-owner", "h:7:7:0:y-owner"])
    {
        grant_by_hand(master, "lock:{k}:v2", value).await;
    }
    let one = client(&masters[0]).await;
    let x = one
        .admin()
        .inspect("k")
        .await
        .unwrap()
        .holding
        .grant()
        .unwrap();
    let locks = LockClient::redlock(masters.iter().map(RedisServer::url))
        .await
        .unwrap();
    let forced = locks.admin().force_release_of("k", x).await.unwrap();
    assert!(forced.released, "{forced:?}");
    assert_eq!(forced.found.grant(), Some(x), "{forced:?}");
    assert_eq!(forced.masters.map(|m| m.holding), Some(1));
}

/// A key kept after its release (`min_hold_ms`) is released by its owner's tag.
#[tokio::test]
async fn a_kept_key_is_released_by_its_owner() {
    let server = redis_server();
    let locks = client(&server).await;
    let kept = locks.lock("kept").min_hold_ms(60_000).acquire().await;
    kept.unwrap().release().await.unwrap();
    let forced = locks.admin().force_release("kept").await.unwrap();
    assert!(forced.released, "{forced:?}");
    assert!(matches!(forced.found, Holding::Kept { .. }), "{forced:?}");
}

/// A one-node cluster serves every slot: a client for one server may use it, and a cluster
/// client lists it (its node names itself without a host). A node of a cluster of several
/// is refused as one server, also as one of Redlock's masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_are_refused_as_one_server_unless_alone() {
    let alone = RedisCluster::start(1, 0).await.expect("a Redis Cluster");
    let single = LockClient::connect(&alone.urls()[0]).await.unwrap();
    let _held = single.lock("k").acquire().await.unwrap();
    let cluster = LockClient::cluster(alone.urls()).await.unwrap();
    let listed = cluster.admin().list("*").await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");

    let two = RedisCluster::start(2, 0).await.expect("a Redis Cluster");
    let refused = LockClient::connect(&two.urls()[0]).await;
    assert!(
        matches!(&refused, Err(LockError::InvalidConfig { reason, .. }) if reason.contains("cluster")),
        "{refused:?}"
    );
    let masters: Vec<RedisServer> = (0..2).map(|_| redis_server()).collect();
    let mut urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    urls.push(two.urls()[0].clone());
    let refused = LockClient::redlock(&urls).await;
    assert!(
        matches!(refused, Err(LockError::InvalidConfig { .. })),
        "a minority of cluster nodes among the masters: {refused:?}"
    );
}

/// For one pattern, every backend lists the same keys: Redis reads an escaped byte in `[...]`
/// alone, and compares range ends as signed bytes; the pattern sent to `SCAN` is widened
/// where Redis would read it otherwise, and what it finds filtered here.
#[tokio::test]
async fn redis_and_memory_list_the_same_keys_for_a_pattern() {
    let server = redis_server();
    let (on_redis, in_memory) = (client(&server).await, LockClient::memory());
    let mut guards = Vec::new();
    for locks in [&on_redis, &in_memory] {
        for key in ["x_", "xb", "xa", "x]", "x-"] {
            guards.push(locks.lock(key).acquire().await.unwrap());
        }
    }
    let keys = |states: Vec<fencelock::admin::LockState>| -> Vec<String> {
        states.into_iter().map(|state| state.key).collect()
    };
    for pattern in ["x[a-é]", r"x[\]-a]", "x[a-]]"] {
        let redis = keys(on_redis.admin().list(pattern).await.unwrap());
        let memory = keys(in_memory.admin().list(pattern).await.unwrap());
        assert_eq!(redis, memory, "{pattern}");
    }
}

/// A reader of `report`, and its grant as inspection shows it.
async fn reader_and_its_grant(locks: &LockClient) -> (fencelock::LockGuard, Grant) {
    let reader = locks.read_lock("report").ttl_ms(60_000).acquire().await;
    let state = locks.admin().inspect("report").await.unwrap();
    let grants = state.holding.grants();
    assert_eq!(grants.len(), 1, "the reader holds it: {state:?}");
    (reader.unwrap(), grants[0])
}

/// Reads a reader's key by hand: its hash field `o:<owner>` and that owner token.
async fn reader_field(redis: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    let fields: Vec<String> = redis.hkeys(key).await.unwrap();
    let field = fields.into_iter().find(|field| field.starts_with("o:"));
    field.expect("the reader's grant")
}

/// A shared key's grant whose token is not a number (another program's write) holds nothing:
/// inspection counts only the other reader, and its lease as the longest, and a forced
/// release naming that owner ends nothing instead of failing its script.
#[tokio::test]
async fn a_shared_grant_of_another_shape_holds_nothing() {
    let server = redis_server();
    let locks = client(&server).await;
    let (reader, grant) = reader_and_its_grant(&locks).await;
    let other = locks.read_lock("report").ttl_ms(60_000).acquire().await;
    let mut redis = inspector(&server).await;
    let field = reader_field(&mut redis, "lock:{report}:v2").await;
    let _: () = redis
        .hset("lock:{report}:v2", &field, "r abc 0 0")
        .await
        .unwrap();
    let owner = &field["o:".len()..];
    let member = format!("{owner}:abc");
    let _: () = redis
        .zadd("lock:{report}:v2:leases", member, u64::MAX / 2)
        .await
        .unwrap();

    let state = locks.admin().inspect("report").await.unwrap();
    assert!(
        matches!(state.holding, Holding::Shared { holders: 1, .. }),
        "{state:?}"
    );
    let longest = state.holding.remaining().unwrap();
    assert!(longest <= Duration::from_secs(60), "{state:?}");
    let admin = locks.admin();
    let forced = admin.force_release_of("report", grant).await.unwrap();
    assert!(!forced.released, "{forced:?}");
    drop((reader, other));
}

/// What is left of a shared key whose leases expired before its hash: a forced release finds
/// nothing held (the key is free, as inspection says), not foreign data.
#[tokio::test]
async fn a_forced_release_of_an_expired_pair_finds_it_free() {
    let server = redis_server();
    let locks = client(&server).await;
    let (reader, grant) = reader_and_its_grant(&locks).await;
    let mut redis = inspector(&server).await;
    let _: () = redis.del("lock:{report}:v2:leases").await.unwrap();

    let admin = locks.admin();
    let forced = admin.force_release_of("report", grant).await.unwrap();
    assert!(!forced.released, "{forced:?}");
    assert_eq!(forced.found, Holding::Free, "{forced:?}");
    drop(reader);
}

/// An instance's sweep leaves foreign data alone and goes on past it: a lock key of the
/// instance's that something else made persistent (no lock is) is neither released nor
/// allowed to stop the release of the instance's other locks.
#[tokio::test]
async fn an_instance_sweep_skips_foreign_data_and_goes_on() {
    let server = redis_server();
    let locks = client(&server).await;
    let builder = LockClient::open_builder(&server.url()).instance_id("sweep-1");
    let instance = builder.connect().await.unwrap();
    let mut guards = Vec::new();
    for key in ["sweep:a", "sweep:b", "sweep:c"] {
        guards.push(instance.lock(key).acquire().await.unwrap());
    }
    let mut redis = inspector(&server).await;
    let _: bool = redis.persist("lock:{sweep:b}:v2").await.unwrap();

    let swept = locks.admin().release_instance("sweep-1").await.unwrap();
    let released: Vec<&str> = swept.released.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(released, ["sweep:a", "sweep:c"], "{swept:?}");
    assert!(swept.failed.is_empty(), "{swept:?}");
    let state = locks.admin().inspect("sweep:b").await.unwrap();
    assert!(
        matches!(state.holding, Holding::Foreign { .. }),
        "{state:?}"
    );
    drop(guards);
}
