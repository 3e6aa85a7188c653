//! The integration tests, one binary: each module starts its own private `redis-server`
//! processes (or uses the memory backend), so the modules share nothing but `support`.
//! `global_client` (a process-wide client), `simulation`, `telemetry` (a global subscriber and
//! metrics recorder) and `ui` are binaries of their own.

mod admin;
mod attribute;
mod cluster;
#[cfg(all(feature = "zookeeper", feature = "etcd"))]
mod consensus;
mod hand_off;
mod kinds;
mod late_grants;
mod lease_redis;
mod lease_timing;
mod multiprocess;
mod open;
mod readme;
mod redlock;
mod runtime_redis;
mod runtimes;
mod security;
mod sentinel;
mod shared_foreign;
mod shared_random;
mod shared_redlock;
mod shared_ttl;
mod sql;
mod support;
mod waiting;
