//! A master behind Sentinel: a master, its replica and three Sentinels, each a private
//! `redis-server`. The client follows the master through a failover, keeps the leases the
//! replica had, and reports the ones it did not have as lost.

use std::time::Duration;

use fencelock::testing::{RedisServer, SentinelGroup};
use fencelock::{LockClient, LockError};

use crate::support::{eventually, inspector};

async fn group() -> SentinelGroup {
    SentinelGroup::start("locks")
        .await
        .unwrap_or_else(|e| panic!("cannot start a Sentinel group: {e}"))
}

async fn sentinel_client(group: &SentinelGroup) -> LockClient {
    LockClient::sentinel(group.sentinel_urls(), group.service())
        .await
        .unwrap_or_else(|e| panic!("cannot connect through the Sentinels: {e}"))
}

/// Waits (bounded) until `server` has `key`: the replica received it.
async fn replicated(server: &RedisServer, key: &str) -> bool {
    let mut redis = inspector(server).await;
    eventually(Duration::from_secs(5), || {
        let mut redis = redis.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<bool>(&mut redis)
                .await
                .unwrap_or(false)
        }
    })
    .await
        && redis::cmd("PING")
            .query_async::<()>(&mut redis)
            .await
            .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_client_follows_the_master_through_a_failover_and_keeps_replicated_leases() {
    let mut group = group().await;
    let client = sentinel_client(&group).await;
    let other = sentinel_client(&group).await;
    let kept = client
        .lock("kept")
        .acquire()
        .await
        .expect("granted on the master");
    assert!(replicated(&group.replica, "lock:{kept}").await);
    let old_port = group.master.port();
    group.master.kill().unwrap();
    let new_port = group.wait_for_failover_from(old_port).await.unwrap();
    assert_eq!(new_port, group.replica.port(), "the replica was promoted");
    let after = client
        .lock("after")
        .wait_ms(10_000)
        .acquire()
        .await
        .expect("the client reaches the new master");
    after.release().await.unwrap();
    match other.lock("kept").give_up().acquire().await {
        Err(LockError::NotAcquired { .. }) => {}
        other => panic!("the replicated lease still holds the key: {other:?}"),
    }
    assert!(!kept.is_lost());
    kept.release()
        .await
        .expect("the lease the replica had is released on the new master");
}

/// A lease granted after the replica's last update is gone on the promoted master: its
/// holder's next renewal finds the key missing and reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_new_master_never_had_is_reported_lost() {
    let mut group = group().await;
    let client = sentinel_client(&group).await;
    let guard = client
        .lock("unreplicated")
        .ttl_ms(3_000)
        .acquire()
        .await
        .unwrap();
    assert!(replicated(&group.replica, "lock:{unreplicated}").await);
    let old_port = group.master.port();
    group.master.kill().unwrap();
    group.wait_for_failover_from(old_port).await.unwrap();
    // The replica had the key; take it away there, as an unreplicated grant would be.
    let _: () = redis::cmd("DEL")
        .arg("lock:{unreplicated}")
        .query_async(&mut inspector(&group.replica).await)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the holder learns of the loss within a renewal interval or two");
    crate::support::expect_lost(guard.release().await, fencelock::LossCause::NotOwner);
}
