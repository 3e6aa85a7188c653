//! The `fencelock` binary on the other topologies: list and force-release on a Redis Cluster
//! (every master scanned), on Redlock (merged over the masters) and behind Sentinel.

mod support;

use fencelock::testing::{RedisCluster, RedisServer, SentinelGroup};
use fencelock::{LockClient, LockError};
use serde_json::Value;

use support::{fencelock, hold};

/// Holds `keys` with `locks`, then checks that `fencelock ARGS --json list` lists them with
/// their tokens, and that `release --force` ends the first one's grant (its holder's release
/// reports `Lost`); returns the listing.
async fn list_and_force_release(locks: &LockClient, topology: &[&str], keys: &[&str]) -> Value {
    let mut guards = Vec::new();
    for key in keys {
        guards.push(hold(locks, key).await);
    }
    let listed = run(topology, &["--json", "list"]).await.json();
    let listed_keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    let mut sorted = keys.to_vec();
    sorted.sort();
    assert_eq!(listed_keys, sorted, "{listed}");
    for (key, guard) in keys.iter().zip(&guards) {
        let lock = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["key"] == *key)
            .unwrap();
        assert_eq!(lock["token"].as_u64(), Some(guard.token()), "{lock}");
    }
    let forced = run(
        topology,
        &["--json", "release", keys[0], "--force", "--yes"],
    )
    .await
    .json();
    assert_eq!(forced["released"], true, "{forced}");
    assert_eq!(
        forced["found"]["token"].as_u64(),
        Some(guards[0].token()),
        "{forced}"
    );
    let mut guards = guards.into_iter();
    match guards.next().unwrap().release().await {
        Err(LockError::Lost { .. }) => {}
        other => panic!("the former holder's release reports Lost, got {other:?}"),
    }
    listed
}

/// `fencelock TOPOLOGY ARGS`.
async fn run(topology: &[&str], args: &[&str]) -> support::Run {
    let all: Vec<&str> = topology.iter().chain(args).copied().collect();
    fencelock(&all).await
}

fn with_urls<'a>(flag: &[&'a str], urls: &'a [String]) -> Vec<&'a str> {
    let mut args = flag.to_vec();
    for url in urls {
        args.extend(["--url", url.as_str()]);
    }
    args
}

/// Keys of every master's slots are listed (each master scanned) and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_every_master_is_listed() {
    let cluster = RedisCluster::start(3, 0).await.expect("a Redis Cluster");
    let locks = LockClient::cluster(cluster.urls()).await.unwrap();
    let urls = cluster.urls();
    let keys: Vec<String> = (0..12).map(|n| format!("spread:{n}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    list_and_force_release(&locks, &with_urls(&["--cluster"], &urls[..1]), &keys).await;
}

/// Each lock is merged over the masters, and says on how many it is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redlock_each_lock_is_merged_over_the_masters() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let locks = LockClient::redlock(&urls).await.unwrap();
    let listed =
        list_and_force_release(&locks, &with_urls(&["--redlock"], &urls), &["a", "b"]).await;
    let masters = &listed[0]["masters"];
    assert_eq!(
        (masters["holding"].as_u64(), masters["of"].as_u64()),
        (Some(3), Some(3)),
        "{listed}"
    );
}

/// The master is found through the Sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_master_is_listed() {
    let group = SentinelGroup::start("locks")
        .await
        .expect("a Sentinel group");
    let locks = LockClient::sentinel(group.sentinel_urls(), group.service())
        .await
        .unwrap();
    let urls = group.sentinel_urls();
    list_and_force_release(
        &locks,
        &with_urls(&["--sentinel", "locks"], &urls),
        &["job:1", "job:2"],
    )
    .await;
}
