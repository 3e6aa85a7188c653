//! The one error type of the runtime.

use std::error::Error as StdError;
use std::sync::Arc;

use crate::open::UrlParts;

/// Why a lock operation failed.
///
/// Match on variants with `{ .. }`: the enum and its variants may gain fields and variants.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Someone else holds the lock, and the request's attempts are used up.
    #[error("lock `{key}` is held by another owner (gave up after {attempts} attempt(s))")]
    #[non_exhaustive]
    NotAcquired {
        /// The lock key, as the caller wrote it.
        key: String,
        /// How many times the backend was asked.
        attempts: u32,
    },
    /// The lease ended while the holder still held the guard: another owner may hold the
    /// key now, so whatever ran since may have overlapped with that owner.
    #[error("lock `{key}` was lost while held: {cause}")]
    #[non_exhaustive]
    Lost {
        /// The lock key, as the caller wrote it.
        key: String,
        /// Why the lease ended.
        cause: crate::LossCause,
    },
    /// The backend could not be reached, timed out, or answered something unexpected.
    /// Says nothing about who holds the lock.
    #[error("lock backend failed{}: {message}", key.as_deref().map(|k| format!(" for lock `{k}`")).unwrap_or_default())]
    #[non_exhaustive]
    Backend {
        /// The lock key, when the failure happened on behalf of one.
        key: Option<String>,
        /// What failed; the underlying error is in `source`, not repeated here.
        message: String,
        /// The underlying error (for Redis, a `redis::RedisError`).
        #[source]
        source: Option<Arc<dyn StdError + Send + Sync>>,
    },
    /// A `#[redis_lock]` function without `client = ...` ran with no client in scope.
    #[error(
        "no lock client: install one with `LockClient::install_global`, run the call inside \
         `fencelock::with_client`, or pass `client = ...` to `#[redis_lock]`"
    )]
    NoClient,
    /// The key is taken by data that is not a lock of this library (another program's value,
    /// a key without a TTL): nobody would ever release it, so the request does not wait.
    #[error("lock key `{key}` is in use by something else: {reason}; use another key or prefix")]
    #[non_exhaustive]
    KeyInUse {
        /// The lock key, as the caller wrote it.
        key: String,
        /// What the backend found there.
        reason: String,
    },
    /// The key cannot be used as a lock key.
    #[error("invalid lock key {key:?}: {reason}")]
    #[non_exhaustive]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },
    /// The request's client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown))
    /// before or while it asked: it holds nothing, and left nothing in line.
    #[error(
        "lock `{key}` was not acquired: its client was shut down; requests need a client that \
         is not (`LockClient::shutdown` ends every clone of it)"
    )]
    #[non_exhaustive]
    ShutDown {
        /// The lock key, as the caller wrote it.
        key: String,
    },
    /// A segmented lock's shards ran out: `shard` is the one a body said is exhausted
    /// ([`shard_exhausted`](crate::shard_exhausted)); `None` says that every shard a request
    /// could take is marked exhausted, so it was refused without waiting. Marks stay until
    /// [`LockClient::refill_shards`](crate::LockClient::refill_shards) clears them.
    #[error("{}", exhausted_message(key, *shard))]
    #[non_exhaustive]
    Exhausted {
        /// The lock key, as the caller wrote it.
        key: String,
        /// The shard found exhausted, or `None` when every shard is.
        shard: Option<u32>,
    },
    /// The request was refused without asking the store: its client already had attempts
    /// out for `limit` other keys, the bound of
    /// [`LockClient::set_max_in_flight`](crate::LockClient::set_max_in_flight). It holds
    /// nothing and left nothing behind; asking again later may succeed.
    #[error(
        "lock `{key}` was not asked for: its client already has attempts out at the store for \
         {limit} keys, its bound; retry later, or raise the bound with \
         `LockClient::set_max_in_flight`"
    )]
    #[non_exhaustive]
    Overloaded {
        /// The lock key, as the caller wrote it.
        key: String,
        /// The bound that was reached.
        limit: usize,
    },
    /// A request or client was configured with values the runtime refuses.
    #[error("invalid lock configuration: {reason}")]
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong and how to fix it.
        reason: String,
    },
}

impl LockError {
    /// A [`LockError::NotAcquired`]: another owner held `key` at each of `attempts` attempts.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// let error = LockError::not_acquired("stock:42", 3);
    /// assert!(error.is_not_acquired());
    /// assert_eq!(
    ///     error.to_string(),
    ///     "lock `stock:42` is held by another owner (gave up after 3 attempt(s))"
    /// );
    /// ```
    pub fn not_acquired(key: impl Into<String>, attempts: u32) -> Self {
        LockError::NotAcquired {
            key: key.into(),
            attempts,
        }
    }

    /// A [`LockError::Lost`]: the lease of `key` ended while held, for `cause`.
    ///
    /// ```
    /// use fencelock::{LockError, LossCause};
    ///
    /// let error = LockError::lost("stock:42", LossCause::Expired);
    /// assert!(error.is_lost());
    /// ```
    pub fn lost(key: impl Into<String>, cause: crate::LossCause) -> Self {
        LockError::Lost {
            key: key.into(),
            cause,
        }
    }

    /// A [`LockError::Backend`]: what a [`crate::backend::LockBackend`] returns when its store
    /// failed, timed out or answered something unexpected (the call's effect is then
    /// unknown; see the trait's notes on lost replies). `message` says what failed; the
    /// underlying error goes in `source`, not in `message`, so that printing the error with
    /// its sources names it once.
    ///
    /// ```
    /// use std::error::Error;
    /// use std::sync::Arc;
    ///
    /// use fencelock::LockError;
    ///
    /// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    /// let error = LockError::backend(Some("stock:42"), "cannot connect", Some(Arc::new(refused)));
    /// assert!(error.is_backend());
    /// assert_eq!(error.to_string(), "lock backend failed for lock `stock:42`: cannot connect");
    /// assert_eq!(error.source().unwrap().to_string(), "refused");
    /// ```
    pub fn backend(
        key: Option<&str>,
        message: impl Into<String>,
        source: Option<Arc<dyn StdError + Send + Sync>>,
    ) -> Self {
        LockError::Backend {
            key: key.map(str::to_owned),
            message: message.into(),
            source,
        }
    }

    /// A [`LockError::NoClient`]: a `#[redis_lock]` function found no client to use.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// assert!(matches!(LockError::no_client(), LockError::NoClient));
    /// ```
    pub fn no_client() -> Self {
        LockError::NoClient
    }

    /// A [`LockError::KeyInUse`]: `key` holds data that is not a lock of this library,
    /// described by `reason`.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// let error = LockError::key_in_use("stock:42", "a value without a TTL");
    /// assert!(matches!(error, LockError::KeyInUse { .. }));
    /// ```
    pub fn key_in_use(key: impl Into<String>, reason: impl Into<String>) -> Self {
        LockError::KeyInUse {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// A [`LockError::InvalidKey`]: `key` cannot be a lock key, for `reason`.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// let error = LockError::invalid_key("", "a lock key may not be empty");
    /// assert!(matches!(error, LockError::InvalidKey { .. }));
    /// ```
    pub fn invalid_key(key: impl Into<String>, reason: impl Into<String>) -> Self {
        LockError::InvalidKey {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// A [`LockError::InvalidConfig`]: a request or client was configured with values the
    /// runtime refuses, for `reason`.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// let error = LockError::invalid_config("ttl_ms must be at least 1");
    /// assert!(matches!(error, LockError::InvalidConfig { .. }));
    /// ```
    pub fn invalid_config(reason: impl Into<String>) -> Self {
        LockError::InvalidConfig {
            reason: reason.into(),
        }
    }

    /// A [`LockError::ShutDown`]: `key` was asked for of a client shut down.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// assert!(LockError::shut_down("stock:42").is_shut_down());
    /// ```
    pub fn shut_down(key: impl Into<String>) -> Self {
        LockError::ShutDown { key: key.into() }
    }

    /// A [`LockError::Overloaded`]: `key` was refused because its client had attempts out
    /// for `limit` keys already.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// assert!(LockError::overloaded("stock:42", 256).is_overloaded());
    /// ```
    pub fn overloaded(key: impl Into<String>, limit: usize) -> Self {
        LockError::Overloaded {
            key: key.into(),
            limit,
        }
    }

    /// A [`LockError::Exhausted`]: `shard` of `key` is exhausted, or every shard if `None`.
    ///
    /// ```
    /// use fencelock::LockError;
    ///
    /// let error = LockError::exhausted("stock:tea", None);
    /// assert!(error.is_exhausted());
    /// assert_eq!(
    ///     error.to_string(),
    ///     "every shard of lock `stock:tea` is marked exhausted: refill them with \
    ///      `LockClient::refill_shards` once there is stock again"
    /// );
    /// ```
    pub fn exhausted(key: impl Into<String>, shard: Option<u32>) -> Self {
        LockError::Exhausted {
            key: key.into(),
            shard,
        }
    }

    /// `true` for [`LockError::Exhausted`]: a segmented lock's shard, or all of them, ran out.
    pub fn is_exhausted(&self) -> bool {
        matches!(self, LockError::Exhausted { .. })
    }

    /// `true` for [`LockError::NotAcquired`]: someone else held the lock.
    pub fn is_not_acquired(&self) -> bool {
        matches!(self, LockError::NotAcquired { .. })
    }

    /// `true` for [`LockError::Overloaded`]: refused at once, as the client's bound on keys
    /// with attempts at the store was reached.
    pub fn is_overloaded(&self) -> bool {
        matches!(self, LockError::Overloaded { .. })
    }

    /// `true` for [`LockError::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// `true` for [`LockError::ShutDown`]: the request's client was shut down.
    pub fn is_shut_down(&self) -> bool {
        matches!(self, LockError::ShutDown { .. })
    }

    /// `true` for [`LockError::Backend`]: the store failed, not the lock.
    pub fn is_backend(&self) -> bool {
        matches!(self, LockError::Backend { .. })
    }
}

/// Shows an error followed by each of its sources, joined with ": " (as `anyhow` prints
/// with `{:#}`), each cause once: a source that says what the error before it said (redis-rs
/// errors show their I/O error and also return it as their source) is left out. For log
/// lines and one-line messages, where nobody walks `source()` afterwards.
///
/// ```
/// use fencelock::{LockError, WithSources};
///
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let error = LockError::backend(None, "cannot connect", Some(std::sync::Arc::new(refused)));
/// assert_eq!(
///     WithSources(&error).to_string(),
///     "lock backend failed: cannot connect: refused"
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct WithSources<'a>(pub &'a (dyn StdError + 'static));

impl std::fmt::Display for WithSources<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut said = self.0.to_string();
        f.write_str(&said)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            let says = cause.to_string();
            if says != said {
                write!(f, ": {says}")?;
            }
            said = says;
            source = cause.source();
        }
        Ok(())
    }
}

/// `url` without its password, query and fragment (a query may carry a password too), for
/// messages: `scheme://user@hosts/path`, cut where [`LockClient::open`](crate::LockClient::open)
/// cuts it ([`UrlParts`]).
pub(crate) fn redacted_url(url: &str) -> String {
    let Some(parts) = UrlParts::of(url) else {
        return "(a URL without a scheme)".to_owned();
    };
    let UrlParts {
        scheme,
        hosts,
        path,
        ..
    } = parts;
    match parts.user() {
        "" => format!("{scheme}://{hosts}{path}"),
        user => format!("{scheme}://{user}@{hosts}{path}"),
    }
}

fn exhausted_message(key: &str, shard: Option<u32>) -> String {
    match shard {
        Some(shard) => format!(
            "shard {shard} of lock `{key}` is exhausted: the call moves on to another shard, \
             or fails with this error when none is left"
        ),
        None => format!(
            "every shard of lock `{key}` is marked exhausted: refill them with \
             `LockClient::refill_shards` once there is stock again"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted_url;

    /// A password may hold any printable character: redaction leaves it out whole, and
    /// keeps the user, the hosts and the path.
    #[test]
    fn a_redacted_url_leaves_out_a_password_whatever_it_holds() {
        for (url, shown) in [
            ("postgres://app:Zq7s#Ecr3t@db/app", "postgres://app@db/app"),
            ("redis://u:p?ss@h:1/0", "redis://u@h:1/0"),
            ("redis://u:p@ss@h:1", "redis://u@h:1"),
            ("mysql://u:p/a:s@h/db", "mysql://u@h/db"),
            ("etcd://u:a#b?c/d:e@f@h:2379", "etcd://u@h:2379"),
            ("mariadb://u:#@h/db", "mariadb://u@h/db"),
            ("redis://u:p@[::1]:6379", "redis://u@[::1]:6379"),
            ("redis://u:p%40ss@h/2?protocol=resp3#frag", "redis://u@h/2"),
            ("redis://h:1/0?x=a%40b", "redis://h:1/0"),
            ("postgres://h/db?sslmode=require", "postgres://h/db"),
            ("mysql://root@127.0.0.1/test", "mysql://root@127.0.0.1/test"),
            ("etcd://u:@h:2379", "etcd://u@h:2379"),
            ("redis://:pass@h", "redis://h"),
            (
                "redis+redlock://u:p#w@a:1,b:2,c:3",
                "redis+redlock://u@a:1,b:2,c:3",
            ),
            (
                "postgres:///locks?host=/run/postgresql&password=secret",
                "postgres:///locks",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }

    /// What breaks the rules (an `@` written raw in a query, a `://` in a password of a URL
    /// without a scheme) is mis-split, but still shows no password.
    #[test]
    fn a_url_that_breaks_the_rules_shows_no_password_either() {
        for url in [
            "postgres:///locks?password=secret&user=me@x",
            "u:se://cret@h",
            "u:secret@h",
            "1nope://u:secret@h",
        ] {
            let shown = redacted_url(url);
            assert!(
                !shown.contains("secret") && !shown.contains("cret"),
                "{url}: {shown}"
            );
        }
    }
}
