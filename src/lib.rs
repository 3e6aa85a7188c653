//! Distributed locks for async Rust, put on a function with one attribute.
//!
//! ```no_run
//! use fencelock::{LockClient, LockError, redis_lock};
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Lock(LockError),
//! }
//!
//! impl From<LockError> for AppError {
//!     fn from(e: LockError) -> Self {
//!         AppError::Lock(e)
//!     }
//! }
//!
//! #[redis_lock(key = "stock:{sku}", ttl_ms = 10_000, retry = 5, action = Continue)]
//! async fn deduct_stock(sku: &str) -> Result<u32, AppError> {
//!     // Runs on one server at a time for a given `sku`.
//!     Ok(41)
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! LockClient::connect("redis://127.0.0.1:6379/").await?.install_global()?;
//! deduct_stock("42").await.map_err(|e| format!("{e:?}"))?;
//! # Ok(())
//! # }
//! ```
//!
//! Every store through one URL ([`LockClient::open`]: `redis://`, `redis+cluster://`,
//! `redis+sentinel://`, `redis+redlock://`, `postgres://`, `mysql://`, `zookeeper://`,
//! `etcd://`, `memory://`; the module [`open`] lists them), or its own constructor
//! ([`LockClient::connect`], [`LockClient::postgres`], …). The attribute's arguments, key
//! templates and compile-time checks: [`redis_lock`]. Locks without the attribute:
//! [`LockClient::lock`], [`LockGuard`]. Tests without Redis: [`LockClient::memory`] and
//! [`with_client`]; with private servers: the `testing` feature. Spans and metrics (feature
//! `metrics`): [`telemetry`]. Operating: [`LockAdmin`] and the `fencelock` command.
//!
//! The guide (every example in it compiled and run by the tests):
//! [lock kinds](https://github.com/fencelock/fencelock/blob/main/docs/guide/kinds.md),
//! [spans, metrics and tasks](https://github.com/fencelock/fencelock/blob/main/docs/guide/observability.md),
//! [testing your code](https://github.com/fencelock/fencelock/blob/main/docs/guide/testing.md),
//! [what it guarantees, and what it does not](https://github.com/fencelock/fencelock/blob/main/docs/guide/guarantees.md),
//! [topologies](https://github.com/fencelock/fencelock/blob/main/docs/guide/topologies.md),
//! [databases](https://github.com/fencelock/fencelock/blob/main/docs/guide/databases.md),
//! [consensus stores](https://github.com/fencelock/fencelock/blob/main/docs/guide/consensus.md),
//! [operating](https://github.com/fencelock/fencelock/blob/main/docs/guide/operating.md),
//! [performance](https://github.com/fencelock/fencelock/blob/main/docs/guide/performance.md).

#![deny(missing_docs)]

pub use fencelock_macros::{lock, redis_lock};
#[allow(deprecated)]
pub use fencelock_runtime::LockClientBuilder;
pub use fencelock_runtime::{
    Action, DEFAULT_MAX_IN_FLIGHT, DEFAULT_RETRY, DEFAULT_SLEEP_MS, DEFAULT_TTL_MS, LockAdmin,
    LockClient, LockError, LockGuard, LockKind, LockOptions, LockRequest, LossCause, MAX_KEY_LEN,
    MAX_PERMITS, MAX_SHARDS, MAX_TTL_MS, MultiGuard, MultiLockRequest, OnLost, OpenBuilder,
    RedisClientBuilder, RenewalStats, WithSources, admin, assert_locked, backend, current_shard,
    current_token, current_tokens, escape_into, instance, is_lost, lost, open, shard_exhausted,
    shutdown, telemetry, with_client,
};

/// The builder of an etcd client ([`LockClient::etcd_builder`]).
#[cfg(feature = "etcd")]
pub use fencelock_runtime::EtcdClientBuilder;
/// The builder of a PostgreSQL or MySQL client ([`LockClient::postgres_builder`],
/// [`LockClient::mysql_builder`]).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use fencelock_runtime::SqlClientBuilder;
/// The builder of a ZooKeeper client ([`LockClient::zookeeper_builder`]).
#[cfg(feature = "zookeeper")]
pub use fencelock_runtime::ZooKeeperClientBuilder;

/// Test support: private `redis-server` processes and the backend conformance suite.
#[cfg(feature = "testing")]
pub use fencelock_runtime::testing;

#[doc(hidden)]
pub mod __private {
    pub use fencelock_runtime::__private::*;
}
