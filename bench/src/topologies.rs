//! The topologies side by side, each on private `redis-server`s started here: W1 (one
//! client, sequential acquire + release) and W3 (`W3_WORKERS` workers on as many keys through
//! one shared client) on a single server, on Redlock over 3 and over 5 masters, on a master
//! behind Sentinel (with and without `min_replicas = 1`), and rslock on one and on the same
//! 5 masters; with the first master's PING as the floor (the Sentinel group's master is
//! another server of the same kind).

use fencelock::LockClient;
use fencelock::testing::{RedisServer, SentinelGroup};

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
    let mut runs = Vec::with_capacity(lockers.len());
    for (name, locker) in lockers {
        let w1 = workloads::uncontended(&locker, sequential).await;
        let w3 = workloads::many_keys(vec![locker; W3_WORKERS], w3_per_worker).await?;
        runs.push(TopologyRun { name, w1, w3 });
    }
    Ok((ping, runs))
}
