//! The runtime of fencelock: lock client, request builder, guard, backends.
//!
//! Applications use it through the `fencelock` crate, which re-exports everything here
//! together with the `#[redis_lock]` attribute.

#![deny(missing_docs)]

mod acquire;
pub mod admin;
mod admission;
pub mod backend;
mod background;
mod background_release;
mod body_scope;
mod client;
mod error;
#[cfg(not(all(
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper",
    feature = "etcd"
)))]
mod feature_off;
mod glob;
mod guard;
pub mod instance;
mod key;
mod kind;
mod local_line;
mod locked_call;
mod multi;
pub mod open;
mod options;
mod random;
mod release_hub;
mod renewal;
mod request;
mod scoped_client;
pub mod shutdown;
mod single_flight;
mod sync;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
// The defects a test may plant (`testing::defects`); without the feature only their names,
// and none is ever planted.
#[cfg(not(feature = "testing"))]
#[path = "testing/defects.rs"]
mod defects;
#[cfg(feature = "testing")]
use testing::defects;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use admin::LockAdmin;
pub use admission::DEFAULT_MAX_IN_FLIGHT;
#[cfg(feature = "etcd")]
pub use backend::consensus::etcd::EtcdClientBuilder;
#[cfg(feature = "zookeeper")]
pub use backend::consensus::zookeeper::ZooKeeperClientBuilder;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use backend::sql::SqlClientBuilder;
pub use body_scope::{
    assert_locked, current_shard, current_token, current_tokens, is_lost, lost, shard_exhausted,
};
#[allow(deprecated)]
pub use client::LockClientBuilder;
pub use client::{LockClient, RedisClientBuilder};
pub use error::{LockError, WithSources};
pub use guard::LockGuard;
pub use key::{MAX_KEY_LEN, escape_into};
pub use kind::{LockKind, MAX_PERMITS, MAX_SHARDS};
pub use multi::{MultiGuard, MultiLockRequest};
pub use open::OpenBuilder;
pub use options::{
    Action, DEFAULT_RETRY, DEFAULT_SLEEP_MS, DEFAULT_TTL_MS, LockOptions, MAX_TTL_MS, OnLost,
};
pub use renewal::{LossCause, RenewalStats};
pub use request::LockRequest;
pub use scoped_client::with_client;
