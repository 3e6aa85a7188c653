//! The integration tests, one binary: each module starts its own private `redis-server`
//! processes (or database, ZooKeeper and etcd servers, or uses the memory backend), so the
//! modules share nothing but `support`. They are grouped so that a test's name says where it
//! runs: `redis::` on one Redis server (Redis-only behaviour: scripts, pub/sub, ACLs, key
//! layout), `topologies::` on several (Cluster, Sentinel, Redlock), `stores::` on the other
//! stores and `open(url)`, `features::` on any store (the attribute, runtimes, timing with
//! the paused clock), and `readme` the documents' examples. What every store must do is the
//! conformance suite (`tests/conformance.rs`). `global_client` (a process-wide client),
//! `simulation`, `telemetry` (a global subscriber and metrics recorder) and `ui` are binaries
//! of their own.

mod features;
mod readme;
mod redis;
mod stores;
mod support;
mod topologies;
