//! Test support (feature `testing`): private `redis-server` processes (also a Sentinel
//! group: master, replica, three Sentinels; a Redis Cluster), a TCP proxy that
//! cuts clients off, a backend wrapper that fails, delays or hangs chosen calls, the
//! conformance suite every backend must pass, the history checker that proves mutual
//! exclusion on recorded runs, assertions on lock keys and faults scripted on the memory
//! backend for an application's tests (`assertions`, [`Faults`]), and known defects to plant in the library (`defects`).

pub mod assertions;
mod cluster;
pub mod conformance;
pub mod defects;
#[cfg(feature = "etcd")]
mod etcd;
mod faults;
pub mod history;
pub(crate) mod intercept;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
mod members;
mod proxy;
mod redis_server;
mod sentinel;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(feature = "zookeeper")]
mod zookeeper;

pub use cluster::RedisCluster;
#[cfg(feature = "etcd")]
pub use etcd::{ETCD_ENV, EtcdCluster};
pub use faults::Faults;
pub use intercept::{Call, Intercepted, Interceptor, Verdict};
pub use proxy::{Delivery, Direction, TcpProxy};
pub use redis_server::{RedisServer, continue_process, stop_process};
pub use sentinel::{ReplicationCut, SentinelGroup};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use sql::{DEFAULT_MYSQL_URL, DEFAULT_POSTGRES_URL, SqlDatabase, SqlKind};
#[cfg(feature = "zookeeper")]
pub use zookeeper::{ZOOKEEPER_CLASSPATH_ENV, ZooKeeperEnsemble};

/// How long a topology may take to get ready, or to finish a failover.
const TOPOLOGY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Polls `check` every 50 ms until it gives a value, for at most [`TOPOLOGY_TIMEOUT`]
/// (servers announce neither readiness nor a finished failover); the error says what did not
/// happen.
async fn poll_until<T, F, Fut>(what: &str, mut check: F) -> std::io::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if started.elapsed() > TOPOLOGY_TIMEOUT {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{what} within {TOPOLOGY_TIMEOUT:?}"),
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Seeds the generator of the pauses between attempts on the calling thread, so that a
/// simulation on a current-thread runtime with the paused clock draws the same pauses, and
/// so takes the same path, on every run of one seed.
pub fn seed_jitter(seed: u64) {
    crate::random::seed_jitter(seed);
}
