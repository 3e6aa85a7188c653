//! The runtime of fencelock: lock client, request builder, guard, backends.
//!
//! Applications use it through the `fencelock` crate, which re-exports everything here
//! together with the `#[redis_lock]` attribute.

#![deny(missing_docs)]

mod acquire;
pub mod admin;
mod ambient;
pub mod backend;
mod background_release;
mod body_locks;
mod client;
mod driver;
mod error;
mod glob;
mod guard;
mod key;
mod kind;
mod locked_call;
pub mod open;
mod options;
mod random;
mod release_hub;
mod renewal;
mod request;
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
pub use ambient::with_client;
#[cfg(feature = "etcd")]
pub use backend::line::etcd::EtcdClientBuilder;
#[cfg(feature = "zookeeper")]
pub use backend::line::zookeeper::ZooKeeperClientBuilder;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use backend::sql::SqlClientBuilder;
pub use body_locks::{current_shard, current_token, is_lost, lost};
pub use client::{LockClient, LockClientBuilder};
pub use error::{LockError, WithSources};
pub use guard::LockGuard;
pub use key::{MAX_KEY_LEN, escape_into};
pub use kind::{LockKind, MAX_PERMITS, MAX_SHARDS};
pub use open::OpenBuilder;
pub use options::{
    Action, DEFAULT_RETRY, DEFAULT_SLEEP_MS, DEFAULT_TTL_MS, LockOptions, MAX_TTL_MS, OnLost,
};
pub use renewal::{LossCause, RenewalStats};
pub use request::LockRequest;
