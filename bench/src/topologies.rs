//! The topologies side by side, each on private `redis-server`s started here: W1 (one
//! client, sequential acquire + release) and W3 (`W3_WORKERS` workers on as many keys through
//! one shared client) on a single server, on Redlock over 3 and over 5 masters, on a master
//! behind Sentinel (with and without `min_replicas = 1`), rslock on one and on the same 5
//! masters, and Redis Clusters of 1, 2 and 3 masters; with the first master's PING as the
//! floor (the other topologies' servers are of the same kind).

use fencelock::LockClient;
use fencelock::testing::{RedisCluster, RedisServer, SentinelGroup};

use crate::locker::{Locker, RslockRetry};
use crate::workloads::{self, BoxError, Latency, Throughput, W3_WORKERS};

/// Masters started for the widest Redlock.
const MASTERS: usize = 5;

/// One topology's figures.
pub struct TopologyRun {
    pub name: &'static str,
    pub w1: Latency,
    pub w3: Throughput,
}

/// Runs W1 and W3 on every topology; returns the PING floor and the runs.
pub async fn compare(
    sequential: usize,
    w3_per_worker: usize,
) -> Result<(Latency, Vec<TopologyRun>), BoxError> {
    let masters = (0..MASTERS)
        .map(|_| RedisServer::start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let ping = workloads::ping(&workloads::connect(&urls[0]).await?, sequential).await;
    let sentinel = SentinelGroup::start("bench").await?;
    let behind_sentinel =
        LockClient::sentinel(sentinel.sentinel_urls(), sentinel.service()).await?;
    let lockers = [
        (
            "single",
            Locker::fencelock(LockClient::connect(&urls[0]).await?),
        ),
        (
            "Redlock(3)",
            Locker::fencelock(LockClient::redlock(&urls[..3]).await?),
        ),
        (
            "Redlock(5)",
            Locker::fencelock(LockClient::redlock(&urls).await?),
        ),
        ("Sentinel", Locker::fencelock(behind_sentinel.clone())),
        (
            "Sentinel, min_replicas 1",
            Locker::Fencelock {
                client: behind_sentinel,
                fair: false,
                min_replicas: 1,
            },
        ),
        (
            "rslock(1)",
            Locker::rslock(&urls[0], RslockRetry::DEFAULT).await,
        ),
        (
            "rslock(5)",
            Locker::rslock_over(urls.clone(), RslockRetry::DEFAULT).await,
        ),
    ];
    let mut runs = Vec::with_capacity(lockers.len() + CLUSTER_SIZES.len());
    for (name, locker) in lockers {
        runs.push(run(name, locker, sequential, w3_per_worker).await?);
    }
    drop(sentinel);
    drop(masters);
    for (name, size) in CLUSTER_SIZES {
        let cluster = RedisCluster::start(size, 0).await?;
        let locker = Locker::fencelock(LockClient::cluster(cluster.urls()).await?);
        runs.push(run(name, locker, sequential, w3_per_worker).await?);
    }
    Ok((ping, runs))
}

/// Clusters measured, by their masters (no replicas: W3's scaling with masters).
const CLUSTER_SIZES: [(&str, usize); 3] = [
    ("Cluster, 1 master", 1),
    ("Cluster, 2 masters", 2),
    ("Cluster, 3 masters", 3),
];

async fn run(
    name: &'static str,
    locker: Locker,
    sequential: usize,
    w3_per_worker: usize,
) -> Result<TopologyRun, BoxError> {
    let w1 = workloads::uncontended(&locker, sequential).await;
    let w3 = workloads::many_keys(vec![locker; W3_WORKERS], w3_per_worker).await?;
    Ok(TopologyRun { name, w1, w3 })
}
