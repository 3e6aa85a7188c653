//! Test support (feature `testing`): private `redis-server` processes (also a Sentinel
//! group: master, replica, three Sentinels; a Redis Cluster), a TCP proxy that
//! cuts clients off, a backend wrapper that fails, delays or hangs chosen calls, the
//! conformance suite every backend must pass, and the history checker that proves mutual
//! exclusion on recorded runs.

mod cluster;
pub mod conformance;
pub mod history;
mod intercept;
mod proxy;
mod redis_server;
mod sentinel;

pub use cluster::RedisCluster;
pub use intercept::{Call, Intercepted, Interceptor, Verdict};
pub use proxy::{Delivery, Direction, TcpProxy};
pub use redis_server::{RedisServer, continue_process, stop_process};
pub use sentinel::{ReplicationCut, SentinelGroup};

/// Seeds the generator of the pauses between attempts on the calling thread, so that a
/// simulation on a current-thread runtime with the paused clock draws the same pauses, and
/// so takes the same path, on every run of one seed.
pub fn seed_jitter(seed: u64) {
    crate::random::seed_jitter(seed);
}
