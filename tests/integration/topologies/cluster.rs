//! Redis Cluster: 3 masters and 3 replicas, each a private `redis-server`, created with
//! `redis-cli --cluster create` (the conformance suite is in `tests/conformance.rs`): locks
//! on keys of every slot range renewed on every master, releases heard on their shard, and
//! a `CLUSTER FAILOVER` during a run with no two holders at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::testing::RedisCluster;
use fencelock::testing::history;

use crate::support::{eventually, lock_once, record_section, script_calls};
use fencelock::{LockClient, LockError, LossCause};

async fn cluster() -> RedisCluster {
    RedisCluster::start(3, 1)
        .await
        .unwrap_or_else(|e| panic!("cannot start a Redis Cluster: {e}"))
}

async fn cluster_client(cluster: &RedisCluster) -> LockClient {
    LockClient::cluster(cluster.urls())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the cluster: {e}"))
}

/// Locks on 1,024 keys spread over every master's slots, held past several lease lengths:
/// the renewal batch, split by slot, renews them on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_every_master_are_renewed() {
    let cluster = cluster().await;
    let client = cluster_client(&cluster).await;
    let mut guards = Vec::new();
    for i in 0..1024 {
        let guard = client.lock(format!("spread:{i}")).ttl_ms(1_500).give_up();
        guards.push(guard.acquire().await.expect("a free key is granted"));
    }
    let mut per_master = Vec::new();
    for master in cluster.masters().await {
        let keys: u64 = redis::cmd("DBSIZE")
            .query_async(&mut cluster.nodes[master].connection().await.unwrap())
            .await
            .unwrap();
        per_master.push(keys);
    }
    assert!(
        per_master.len() == 3 && per_master.iter().all(|&keys| keys > 100),
        "the locks are spread over the masters: {per_master:?}"
    );
    let lost = tokio::time::timeout(Duration::from_millis(4_000), guards[0].lost()).await;
    assert!(lost.is_err(), "renewed past two lease lengths: {lost:?}");
    assert!(
        guards.iter().all(|guard| !guard.is_lost()),
        "every lease renewed"
    );
    assert!(client.renewal_stats().rounds > 0);
    for guard in guards {
        guard.release().await.expect("released on its master");
    }
}

/// A waiter on a cluster hears the release on the key's shard (`SSUBSCRIBE`), and is handed
/// the key by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_hears_the_release_on_its_shard() {
    let cluster = cluster().await;
    let (holding, waiting) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );
    let holder = holding.lock("sharded").acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        // A pause far longer than the test: only a notification can wake it in time.
        waiting
            .lock("sharded")
            .sleep_ms(30_000)
            .wait_ms(60_000)
            .acquire()
            .await
    });
    let subscribed = eventually(Duration::from_secs(10), || {
        shard_subscribers(&cluster, "lock:{sharded}:v2:released")
    })
    .await;
    assert!(subscribed, "the waiter subscribes on the key's shard");
    holder.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release, not by its pause")
        .unwrap()
        .expect("granted");
    granted.release().await.unwrap();
}

/// Whether a node has a sharded subscriber of `channel` (only the owner of its slot can).
async fn shard_subscribers(cluster: &RedisCluster, channel: &str) -> bool {
    for node in &cluster.nodes {
        let Ok(mut connection) = node.connection().await else {
            continue;
        };
        let counts: redis::RedisResult<(String, u64)> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query_async(&mut connection)
            .await;
        if matches!(counts, Ok((_, subscribers)) if subscribers > 0) {
            return true;
        }
    }
    false
}

/// A manual `CLUSTER FAILOVER` of one master while tasks of two clients take locks on keys
/// of every master: every section is exclusive on the recorded history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_during_a_run_keeps_every_lock_exclusive() {
    let cluster = cluster().await;
    let clients = [
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    ];
    let sections = Arc::new(Mutex::new(Vec::new()));
    let until = std::time::Instant::now() + Duration::from_secs(6);
    let mut workers = Vec::new();
    for (process, client) in clients.iter().enumerate() {
        for task in 0..4u32 {
            let (client, sections) = (client.clone(), sections.clone());
            workers.push(tokio::spawn(async move {
                let mut errors = Vec::new();
                let mut turn = task;
                while std::time::Instant::now() < until {
                    turn += 1;
                    let key = format!("failover:{}", turn % 6);
                    // A lease that outlasts the failover's pause of writes, on a loaded
                    // machine too: the lock must not run out while the slots move.
                    let request = client.lock(key).ttl_ms(6_000).wait_ms(5_000).sleep_ms(50);
                    match request.acquire().await {
                        Ok(guard) => {
                            let body = Duration::from_millis(2);
                            record_section(&sections, process as u32, task, &guard, body).await;
                            if let Err(error) = guard.release().await {
                                errors.push(error);
                            }
                        }
                        Err(error) => errors.push(error),
                    }
                }
                errors
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let master = cluster.masters().await[0];
    let replica = cluster
        .replica_of(master)
        .await
        .expect("the master has a replica");
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query_async(&mut cluster.nodes[replica].connection().await.unwrap())
        .await
        .unwrap();
    let mut errors = Vec::new();
    for worker in workers {
        errors.extend(worker.await.unwrap());
    }
    let sections = std::mem::take(&mut *sections.lock().unwrap());
    let report = history::check(&sections);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(
        sections.len() > 100,
        "work went on: {} sections",
        sections.len()
    );
    // While the slots move, calls may fail or wait, and a holder that cannot confirm its
    // lease in time gives it up (`Unconfirmed`); none finds its lock taken by another.
    assert!(
        errors.iter().all(|e| matches!(
            e,
            LockError::Backend { .. }
                | LockError::NotAcquired { .. }
                | LockError::Lost {
                    cause: LossCause::Unconfirmed,
                    ..
                }
        )),
        "a failover may fail calls, never hand a held lock to another: {errors:?}"
    );
    assert!(
        cluster.masters().await.contains(&replica),
        "the replica took over"
    );
}

/// The script calls every master has run so far.
async fn cluster_script_calls(cluster: &RedisCluster) -> u64 {
    let mut calls = 0;
    for master in cluster.masters().await {
        calls += script_calls(&mut cluster.nodes[master].connection().await.unwrap()).await;
    }
    calls
}

/// Keys whose lock keys share a slot (`acct:{7}:…`: the hash tag is `acct:{7`) are taken
/// by one call on their master; keys of several slots, one at a time, all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_one_slot_are_taken_in_one_call() {
    let cluster = cluster().await;
    let client = cluster_client(&cluster).await;
    for key in ["acct:{7}:warm", "spread:a", "spread:b"] {
        lock_once(&client, key).await;
    }
    for (keys, expected) in [
        (["acct:{7}:from", "acct:{7}:to"], 1),
        (["spread:a", "spread:b"], 2),
    ] {
        let before = cluster_script_calls(&cluster).await;
        let both = client.lock_all(keys).acquire().await.unwrap();
        let calls = cluster_script_calls(&cluster).await - before;
        assert_eq!(calls, expected, "{keys:?}");
        both.release().await.unwrap();
    }
}

/// A TLS root certificate is not applied to cluster nodes (nor Sentinels) yet: refused with a
/// message saying so, rather than ignored.
#[tokio::test]
async fn a_tls_root_certificate_is_refused_where_it_would_be_ignored() {
    let builders = [
        LockClient::cluster_builder(["redis://127.0.0.1:1/"]),
        LockClient::sentinel_builder(["redis://127.0.0.1:1/"], "locks"),
    ];
    for builder in builders {
        match builder.tls_root_certificate("a PEM").connect().await {
            Err(LockError::InvalidConfig { reason, .. }) => {
                assert!(reason.contains("not applied"), "{reason}")
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
}
