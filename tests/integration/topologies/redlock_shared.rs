//! Redlock's write-back of the chosen token (raise.lua) renames a shared grant's lease: the
//! leases key keeps its TTL (a ZREM of the only member before the ZADD once made a new set
//! without one, which every later attempt took for foreign data, and which never expired).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::LockClient;
use fencelock::admin::{Grant, Holding};
use fencelock::testing::RedisServer;
use redis::AsyncCommands;

use crate::support::{inspector, redis_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_shared_grant_keeps_its_leases_ttl() {
    let masters: Vec<RedisServer> = (0..3).map(|_| redis_server()).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    // Master 0's counter is ahead of the others (it granted an attempt that formed no
    // majority, or a client whose clock runs ahead took the key there): the next grant's
    // tokens disagree, and the others are raised to master 0's.
    let ahead_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
        + 5_000_000;
    let mut m0 = inspector(&masters[0]).await;
    let _: () = redis::cmd("SET")
        .arg("lock:{report}:v2:fence")
        .arg(ahead_us.to_string())
        .arg("PX")
        .arg(60_000)
        .query_async(&mut m0)
        .await
        .unwrap();
    let first = LockClient::redlock(urls.clone()).await.unwrap();
    let reader = first
        .read_lock("report")
        .ttl_ms(1_000)
        .acquire()
        .await
        .unwrap();
    assert!(reader.token() > ahead_us, "the chosen token is master 0's");
    let mut problems = Vec::new();
    for (i, master) in masters.iter().enumerate() {
        let ttl: i64 = inspector(master)
            .await
            .pttl("lock:{report}:v2:leases")
            .await
            .unwrap();
        if ttl < 0 {
            problems.push(format!(
                "after the grant, master {i}: lock:{{report}}:v2:leases has PTTL {ttl}"
            ));
        }
    }
    // A second reader shares the key (a leases key without a TTL would pass for foreign data).
    let second = LockClient::redlock(urls.clone()).await.unwrap();
    match second
        .read_lock("report")
        .ttl_ms(1_000)
        .wait_ms(300)
        .acquire()
        .await
    {
        Ok(guard) => guard.release().await.unwrap(),
        Err(e) => problems.push(format!("second reader: {e:?}")),
    }
    // The holder's own release, right away (before its first renewal, at ttl/3).
    if let Err(e) = reader.release().await {
        problems.push(format!("the holder's release: {e:?}"));
    }
    // Long after every lease ended, a writer of the key.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    match second
        .write_lock("report")
        .ttl_ms(1_000)
        .wait_ms(300)
        .acquire()
        .await
    {
        Ok(guard) => guard.release().await.unwrap(),
        Err(e) => {
            let mut state = Vec::new();
            for master in &masters {
                let mut c = inspector(master).await;
                let leases: i64 = c.pttl("lock:{report}:v2:leases").await.unwrap();
                let hash: i64 = c.pttl("lock:{report}:v2").await.unwrap();
                state.push(format!("hash PTTL {hash}, leases PTTL {leases}"));
            }
            problems.push(format!(
                "a writer 2 s after every lease ended: {e:?}; per master: {state:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The same on one server, no Redlock needed to see the state: a reader alone, raised.
#[tokio::test]
async fn raise_of_the_only_lease_leaves_it_without_ttl() {
    let server = redis_server();
    let backend = fencelock::backend::redis::RedisBackend::connect(
        &server.url(),
        fencelock::backend::redis::RedisSettings::default(),
    )
    .await
    .unwrap();
    use fencelock::backend::{Acquire, Lease, LockBackend, Turn};
    let lease = Lease {
        key: "solo".into(),
        owner: "reader".into(),
        ttl: Duration::from_millis(300),
        replicas: 0,
        kind: fencelock::LockKind::Read,
    };
    let Acquire::Granted { token, .. } = backend.acquire(&lease, Turn::Once).await.unwrap() else {
        panic!("a free key is granted")
    };
    let script = redis::Script::new(&format!(
        "{}\n{}\n{}",
        include_str!("../../../lock-runtime/src/backend/redis/lua/grant.lua"),
        include_str!("../../../lock-runtime/src/backend/redis/lua/shared.lua"),
        include_str!("../../../lock-runtime/src/backend/redis/lua/raise.lua"),
    ));
    let mut conn = inspector(&server).await;
    let raised: i64 = script
        .key("lock:{solo}:v2")
        .key("lock:{solo}:v2:fence")
        .key("lock:{solo}:v2:leases")
        .arg("reader")
        .arg(token.to_string())
        .arg((token + 7).to_string())
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(raised, 1);
    // The reader dies. Its lease ends in 300 ms; then nothing of it may be left.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let other = Lease {
        owner: "writer".into(),
        kind: fencelock::LockKind::Write,
        ..lease
    };
    let outcome = backend.acquire(&other, Turn::Once).await;
    let leases_ttl: i64 = conn.pttl("lock:{solo}:v2:leases").await.unwrap();
    assert!(
        matches!(outcome, Ok(Acquire::Granted { .. })),
        "after the only reader's lease ended: {outcome:?}; lock:{{solo}}:v2:leases PTTL {leases_ttl}"
    );
}

/// A mutex held on a majority of the masters shows as held, with its masters, though a
/// minority holds shared grants of the key (another program mixed kinds there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_on_a_majority_is_shown_over_shared_grants_on_a_minority() {
    let masters: Vec<RedisServer> = (0..3).map(|_| redis_server()).collect();
    for master in &masters[..2] {
        let minute = redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000));
        let mut redis = inspector(master).await;
        let _: () = redis
            .set_options("lock:{k}:v2", "h:7:7:0:y-owner", minute)
            .await
            .unwrap();
    }
    let third = LockClient::connect(&masters[2].url()).await.unwrap();
    let _reader = third.read_lock("k").ttl_ms(60_000).acquire().await.unwrap();

    let locks = LockClient::redlock(masters.iter().map(RedisServer::url))
        .await
        .unwrap();
    let state = locks.admin().inspect("k").await.unwrap();
    assert_eq!(state.holding.token(), Some(7), "{state:?}");
    assert_eq!(state.masters.map(|m| m.holding), Some(2), "{state:?}");
}

/// Past the 100 grants each master shows, Redlock counts the grants and the longest lease a
/// majority of masters has, and a forced release by tag alone ends a grant not shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_beyond_those_shown_are_counted_over_the_masters() {
    let masters: Vec<RedisServer> = (0..3).map(|_| redis_server()).collect();
    let locks = LockClient::redlock(masters.iter().map(RedisServer::url))
        .await
        .unwrap();
    let read = |ttl_ms| locks.read_lock("report").ttl_ms(ttl_ms).acquire();
    let longest = read(600_000).await.unwrap();
    let state = locks.admin().inspect("report").await.unwrap();
    let owner = state.holding.grants()[0].owner;
    let mut others = Vec::new();
    for _ in 0..101 {
        others.push(read(60_000).await.unwrap());
    }

    let state = locks.admin().inspect("report").await.unwrap();
    let Holding::Shared {
        grants, holders, ..
    } = &state.holding
    else {
        panic!("readers hold it: {state:?}");
    };
    assert_eq!((grants.len(), *holders), (100, 102), "{state:?}");
    let ttl = state.holding.remaining().unwrap();
    assert!(ttl > Duration::from_secs(60), "the longest lease: {ttl:?}");
    let admin = locks.admin();
    let forced = admin
        .force_release_of("report", Grant::of_owner(owner))
        .await;
    assert!(forced.unwrap().released, "the grant not shown ended");
    assert!(longest.release().await.unwrap_err().is_lost());
    drop(others);
}
