//! How long a store's client waits, in the one shape every store's settings share.

use std::time::Duration;

/// How long a client waits for its store: to open a connection, and for each answer. Every
/// store's settings carry one ([`RedisSettings`](crate::backend::redis::RedisSettings),
/// [`SqlSettings`](crate::backend::sql::SqlSettings), `ZooKeeperSettings`, `EtcdSettings`),
/// each with its store's defaults.
///
/// ```
/// use std::time::Duration;
///
/// use fencelock::backend::redis::RedisSettings;
/// use fencelock::backend::Timeouts;
///
/// let mut settings = RedisSettings::default();
/// settings.timeouts = Timeouts::new(Duration::from_secs(1), Duration::from_millis(500));
/// assert_eq!(settings.timeouts.response, Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// How long opening a connection may take.
    pub connect: Duration,
    /// How long a reply may take before the call counts as failed (with its retries, where
    /// the store retries: see each store).
    pub response: Duration,
}

impl Timeouts {
    /// Timeouts of `connect` to open a connection and `response` for each answer.
    pub const fn new(connect: Duration, response: Duration) -> Timeouts {
        Timeouts { connect, response }
    }
}
