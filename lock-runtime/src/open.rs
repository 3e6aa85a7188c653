//! One way in: the store a URL names, picked by its scheme in this one place, as sqlx's
//! `Any` driver picks a database ([`LockClient::open`]).
//!
//! | scheme | store | the rest of the URL |
//! |---|---|---|
//! | `redis://`, `rediss://` | one Redis server | `[user:password@]host[:port][/db]` |
//! | `redis+sentinel://`, `rediss+sentinel://` | the master of a service behind Sentinels | `[user:password@]host:port[,host:port…]/service[/db]` |
//! | `redis+cluster://`, `rediss+cluster://` | Redis Cluster | `[user:password@]host:port[,host:port…]` (some nodes) |
//! | `redis+redlock://`, `rediss+redlock://` | independent masters (Redlock) | `[user:password@]host:port,host:port,host:port[…]` |
//! | `postgres://`, `postgresql://` | PostgreSQL (feature `postgres`) | as sqlx takes it |
//! | `mysql://`, `mariadb://` | MySQL or MariaDB (feature `mysql`) | as sqlx takes it |
//! | `zookeeper://` | ZooKeeper (feature `zookeeper`) | `host:port[,host:port…][/chroot]` |
//! | `etcd://` | etcd (feature `etcd`) | `[user:password@]host:port[,host:port…]` (plain HTTP) |
//! | `memory://` | this process's memory (a new lock space per call) | nothing |
//!
//! Several hosts share the URL's user and password; the store's own constructor
//! ([`LockClient::redlock`] and the others) takes them one by one when they differ.

use std::time::Duration;

use crate::{LockClient, LockClientBuilder, LockError};

/// The stores a URL can name, by scheme (see the [module](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Store {
    /// One Redis server (`redis://`, `rediss://`).
    Redis,
    /// The master of a service behind Redis Sentinels (`redis+sentinel://`).
    Sentinel,
    /// A Redis Cluster (`redis+cluster://`).
    Cluster,
    /// Independent Redis masters, locked with Redlock (`redis+redlock://`).
    Redlock,
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL or MariaDB (`mysql://`, `mariadb://`).
    MySql,
    /// A ZooKeeper ensemble (`zookeeper://`).
    ZooKeeper,
    /// An etcd cluster (`etcd://`).
    Etcd,
    /// This process's memory (`memory://`).
    Memory,
}

impl Store {
    /// Whether the store keeps locks under a key prefix ([`OpenBuilder::key_prefix`]).
    pub fn has_key_prefix(self) -> bool {
        !matches!(self, Store::Postgres | Store::MySql | Store::Memory)
    }

    /// Whether the store keeps locks in a table ([`OpenBuilder::table`]).
    pub fn has_table(self) -> bool {
        matches!(self, Store::Postgres | Store::MySql)
    }

    /// Whether the store is Redis in one of its topologies.
    pub fn is_redis(self) -> bool {
        matches!(
            self,
            Store::Redis | Store::Sentinel | Store::Cluster | Store::Redlock
        )
    }
}

/// The schemes [`LockClient::open`] takes, as error messages list them.
const SCHEMES: &str = "redis://, rediss://, redis+sentinel://, redis+cluster://, \
                       redis+redlock:// (each also as rediss+…), postgres://, mysql://, \
                       mariadb://, zookeeper://, etcd:// or memory://";

/// A URL split into the parts the stores need.
struct Parsed<'a> {
    store: Store,
    /// `redis` or `rediss` for the Redis topologies.
    redis_scheme: &'a str,
    /// `user:password@`, or empty.
    userinfo: &'a str,
    /// The hosts, split at commas.
    hosts: Vec<&'a str>,
    /// What follows the hosts (`/…`), or empty.
    path: &'a str,
}

fn parse(url: &str) -> Result<Parsed<'_>, LockError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(LockError::invalid_config(format!(
            "the URL {:?} has no scheme: start it with {SCHEMES}",
            redacted(url)
        )));
    };
    let (redis_scheme, topology) = match scheme.split_once('+') {
        Some((base @ ("redis" | "rediss"), topology)) => (base, topology),
        _ => (scheme, ""),
    };
    let store = match (redis_scheme, topology) {
        ("redis" | "rediss", "") => Store::Redis,
        ("redis" | "rediss", "sentinel") => Store::Sentinel,
        ("redis" | "rediss", "cluster") => Store::Cluster,
        ("redis" | "rediss", "redlock") => Store::Redlock,
        ("postgres" | "postgresql", _) => Store::Postgres,
        ("mysql" | "mariadb", _) => Store::MySql,
        ("zookeeper", _) => Store::ZooKeeper,
        ("etcd", _) => Store::Etcd,
        ("memory", _) => Store::Memory,
        _ => {
            return Err(LockError::invalid_config(format!(
                "the URL scheme `{scheme}://` names no store fencelock knows: use {SCHEMES}"
            )));
        }
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let hosts = hosts.split(',').filter(|host| !host.is_empty()).collect();
    Ok(Parsed {
        store,
        redis_scheme,
        userinfo,
        hosts,
        path,
    })
}

/// `url` with its password replaced, for error messages.
fn redacted(url: &str) -> String {
    let start = url.find("://").map_or(0, |scheme| scheme + 3);
    match url.rfind('@').filter(|at| *at >= start) {
        Some(at) => match url[start..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..start], &url[at..]),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The error for a store whose cargo feature is off.
#[allow(
    dead_code,
    reason = "unused when every store's feature is on, as in the workspace's own builds"
)]
fn feature_off(store: &str, feature: &str) -> LockError {
    LockError::invalid_config(format!(
        "the URL names {store}, but fencelock was built without its `{feature}` feature: \
         enable it (fencelock = {{ version = \"…\", features = [\"{feature}\"] }})"
    ))
}

/// A builder of a client for the store a URL names ([`LockClient::open_builder`]): the
/// settings the stores share. The store's own builder ([`LockClient::builder`],
/// [`LockClient::postgres_builder`] and the others) has every setting of its store.
#[derive(Clone)]
pub struct OpenBuilder {
    url: String,
    key_prefix: Option<String>,
    table: Option<String>,
    create_tables: Option<bool>,
    allow_eviction: Option<bool>,
    connect_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
}

// The URL's password stays out of Debug output.
impl std::fmt::Debug for OpenBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenBuilder")
            .field("url", &redacted(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("table", &self.table)
            .field("create_tables", &self.create_tables)
            .field("allow_eviction", &self.allow_eviction)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

impl OpenBuilder {
    /// The store the URL names, or why it names none.
    pub fn store(&self) -> Result<Store, LockError> {
        parse(&self.url).map(|parsed| parsed.store)
    }

    /// Where the locks live in the store: the Redis key prefix (default `lock:`), the etcd
    /// key prefix (default `fencelock`), the ZooKeeper root node (default `/fencelock`).
    /// Refused at [`connect`](Self::connect) for the SQL stores (they have
    /// [`table`](Self::table)) and memory.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// The lock table of the SQL stores (default `fencelock_locks`). Refused at
    /// [`connect`](Self::connect) for the other stores.
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = Some(name.into());
        self
    }

    /// Whether connecting to a SQL store creates its lock tables when they are missing
    /// (default: yes). No effect on the other stores.
    pub fn create_tables(mut self, create: bool) -> Self {
        self.create_tables = Some(create);
        self
    }

    /// Whether a Redis server that may evict keys is accepted (default: no; see
    /// [`LockClientBuilder::allow_eviction`](crate::LockClientBuilder::allow_eviction)). No
    /// effect on the stores that never evict.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = Some(allow);
        self
    }

    /// How long connecting may take (each store's default otherwise). No effect on memory.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long a call may wait for its answer (each store's default otherwise; ZooKeeper
    /// answers within its session). No effect on memory.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// Connects to the store the URL names, with these settings.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let parsed = parse(&self.url)?;
        self.refuse_settings_without_a_place(parsed.store)?;
        if parsed.hosts.is_empty() && parsed.store != Store::Memory {
            return Err(LockError::invalid_config(format!(
                "the URL {:?} names no host: add `host:port` after `://`",
                redacted(&self.url)
            )));
        }
        match parsed.store {
            Store::Redis | Store::Sentinel | Store::Cluster | Store::Redlock => {
                self.connect_redis(&parsed).await
            }
            Store::Postgres | Store::MySql => self.connect_sql(parsed.store).await,
            Store::ZooKeeper => self.connect_zookeeper(&parsed).await,
            Store::Etcd => self.connect_etcd(&parsed).await,
            Store::Memory => Ok(LockClient::memory()),
        }
    }

    /// A prefix or a table where the store has none would read and write where no
    /// application's locks are: refused rather than ignored.
    fn refuse_settings_without_a_place(&self, store: Store) -> Result<(), LockError> {
        if self.key_prefix.is_some() && !store.has_key_prefix() {
            return Err(LockError::invalid_config(format!(
                "a key prefix was set, but {store:?} keeps no locks under one: leave it out{}",
                if store.has_table() {
                    " and name the lock table with `table`"
                } else {
                    ""
                }
            )));
        }
        if self.table.is_some() && !store.has_table() {
            return Err(LockError::invalid_config(format!(
                "a lock table was set, but {store:?} is not a SQL store: leave it out{}",
                if store.has_key_prefix() {
                    " (its locks live under `key_prefix`)"
                } else {
                    ""
                }
            )));
        }
        Ok(())
    }

    async fn connect_redis(&self, parsed: &Parsed<'_>) -> Result<LockClient, LockError> {
        let Parsed {
            redis_scheme,
            userinfo,
            ..
        } = parsed;
        let node = |host: &str, path: &str| format!("{redis_scheme}://{userinfo}{host}{path}");
        let builder = match parsed.store {
            Store::Redis => LockClient::builder(&self.url),
            Store::Sentinel => {
                let path = parsed.path.trim_start_matches('/');
                let (service, db) = path.split_once('/').unwrap_or((path, ""));
                if service.is_empty() {
                    return Err(LockError::invalid_config(
                        "a redis+sentinel:// URL names the service after the hosts: \
                         redis+sentinel://host:26379/mymaster",
                    ));
                }
                let db = if db.is_empty() {
                    String::new()
                } else {
                    format!("/{db}")
                };
                let sentinels = parsed.hosts.iter().map(|host| node(host, &db));
                LockClient::sentinel_builder(sentinels, service)
            }
            Store::Cluster => {
                LockClient::cluster_builder(parsed.hosts.iter().map(|host| node(host, "")))
            }
            _ => {
                LockClient::redlock_builder(parsed.hosts.iter().map(|host| node(host, parsed.path)))
            }
        };
        let builder = set(
            builder,
            &self.allow_eviction,
            LockClientBuilder::allow_eviction,
        );
        let builder = set(builder, &self.key_prefix, LockClientBuilder::key_prefix);
        let builder = set(
            builder,
            &self.connect_timeout,
            LockClientBuilder::connect_timeout,
        );
        let builder = set(
            builder,
            &self.response_timeout,
            LockClientBuilder::response_timeout,
        );
        builder.connect().await
    }

    #[cfg_attr(
        not(all(feature = "postgres", feature = "mysql")),
        allow(unused_variables)
    )]
    async fn connect_sql(&self, store: Store) -> Result<LockClient, LockError> {
        let builder = match store {
            #[cfg(feature = "postgres")]
            Store::Postgres => LockClient::postgres_builder(&self.url),
            #[cfg(not(feature = "postgres"))]
            Store::Postgres => return Err(feature_off("PostgreSQL", "postgres")),
            #[cfg(feature = "mysql")]
            _ => LockClient::mysql_builder(&self.url.replacen("mariadb://", "mysql://", 1)),
            #[cfg(not(feature = "mysql"))]
            _ => return Err(feature_off("MySQL", "mysql")),
        };
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        {
            use crate::SqlClientBuilder as Sql;
            let builder = set(builder, &self.table, Sql::table);
            let builder = set(builder, &self.create_tables, Sql::create_tables);
            let builder = set(builder, &self.connect_timeout, Sql::connect_timeout);
            let builder = set(builder, &self.response_timeout, Sql::response_timeout);
            builder.connect().await
        }
    }

    #[cfg_attr(not(feature = "zookeeper"), allow(unused_variables))]
    async fn connect_zookeeper(&self, parsed: &Parsed<'_>) -> Result<LockClient, LockError> {
        #[cfg(not(feature = "zookeeper"))]
        return Err(feature_off("ZooKeeper", "zookeeper"));
        #[cfg(feature = "zookeeper")]
        {
            if !parsed.userinfo.is_empty() {
                return Err(LockError::invalid_config(
                    "a zookeeper:// URL carries no user or password: fencelock's ZooKeeper \
                     client connects without authentication (leave out `user:password@`)",
                ));
            }
            let connect_string = format!("{}{}", parsed.hosts.join(","), parsed.path);
            use crate::ZooKeeperClientBuilder as ZooKeeper;
            let builder = LockClient::zookeeper_builder(&connect_string);
            let builder = set(builder, &self.key_prefix, ZooKeeper::root);
            let builder = set(builder, &self.connect_timeout, ZooKeeper::connect_timeout);
            builder.connect().await
        }
    }

    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    async fn connect_etcd(&self, parsed: &Parsed<'_>) -> Result<LockClient, LockError> {
        #[cfg(not(feature = "etcd"))]
        return Err(feature_off("etcd", "etcd"));
        #[cfg(feature = "etcd")]
        {
            let endpoints = parsed.hosts.iter().map(|host| format!("http://{host}"));
            use crate::EtcdClientBuilder as Etcd;
            let mut builder = LockClient::etcd_builder(endpoints);
            if let Some(userinfo) = parsed.userinfo.strip_suffix('@') {
                let Some((user, password)) = userinfo.split_once(':') else {
                    return Err(LockError::invalid_config(
                        "an etcd:// URL's user needs its password: etcd://user:password@host:2379",
                    ));
                };
                builder = builder.user(percent_decoded(user)?, percent_decoded(password)?);
            }
            let builder = set(builder, &self.key_prefix, Etcd::prefix);
            let builder = set(builder, &self.connect_timeout, Etcd::connect_timeout);
            let builder = set(builder, &self.response_timeout, Etcd::response_timeout);
            builder.connect().await
        }
    }
}

/// `builder` with `value` given to `setter`, or as it is when `value` was not set.
fn set<B, T: Clone>(builder: B, value: &Option<T>, setter: impl FnOnce(B, T) -> B) -> B {
    match value {
        Some(value) => setter(builder, value.clone()),
        None => builder,
    }
}

/// `text` with its `%XX` escapes decoded (a URL's user and password).
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
fn percent_decoded(text: &str) -> Result<String, LockError> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let digits = bytes.get(at + 1..at + 3).and_then(|hex| {
                std::str::from_utf8(hex)
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            });
            let Some(byte) = digits else {
                return Err(LockError::invalid_config(
                    "the URL's user or password has a `%` not followed by two hex digits: \
                     write `%25` for a `%`",
                ));
            };
            decoded.push(byte);
            at += 3;
        } else {
            decoded.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| {
        LockError::invalid_config("the URL's user or password is not UTF-8 once decoded")
    })
}

impl LockClient {
    /// Connects to the store `url` names by its scheme (see [`open`](crate::open) for the
    /// schemes), with that store's defaults: `redis://`, `rediss://`, `redis+sentinel://`,
    /// `redis+cluster://`, `redis+redlock://`, `postgres://`, `mysql://`, `zookeeper://`,
    /// `etcd://`, `memory://`. An unknown scheme, or a store whose cargo feature is off, is
    /// [`LockError::InvalidConfig`] saying what to use or enable.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), fencelock_runtime::LockError> {
    /// let locks = fencelock_runtime::LockClient::open("redis://127.0.0.1:6379/").await?;
    /// # Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<LockClient, LockError> {
        LockClient::open_builder(url).connect().await
    }

    /// A builder of a client for the store `url` names, with the settings the stores share.
    pub fn open_builder(url: &str) -> OpenBuilder {
        OpenBuilder {
            url: url.to_owned(),
            key_prefix: None,
            table: None,
            create_tables: None,
            allow_eviction: None,
            connect_timeout: None,
            response_timeout: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_names_its_store() {
        for (url, store) in [
            ("redis://127.0.0.1:6379/", Store::Redis),
            ("rediss://h:6380", Store::Redis),
            ("redis+sentinel://h:26379/mymaster", Store::Sentinel),
            ("rediss+cluster://a:1,b:2", Store::Cluster),
            ("redis+redlock://a:1,b:2,c:3", Store::Redlock),
            ("postgres://u@h/db", Store::Postgres),
            ("postgresql://u@h/db", Store::Postgres),
            ("mysql://u@h/db", Store::MySql),
            ("mariadb://u@h/db", Store::MySql),
            ("zookeeper://a:2181,b:2181/chroot", Store::ZooKeeper),
            ("etcd://a:2379", Store::Etcd),
            ("memory://", Store::Memory),
        ] {
            let parsed = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(parsed.store, store, "{url}");
        }
    }

    #[test]
    fn hosts_userinfo_and_path_are_split() {
        let parsed = parse("redis+redlock://u:p%40ss@a:1,b:2,c:3/2").unwrap();
        assert_eq!(parsed.redis_scheme, "redis");
        assert_eq!(parsed.userinfo, "u:p%40ss@");
        assert_eq!(parsed.hosts, ["a:1", "b:2", "c:3"]);
        assert_eq!(parsed.path, "/2");
        assert_eq!(percent_decoded("p%40ss").unwrap(), "p@ss");
        assert!(percent_decoded("100%").is_err());
    }

    #[test]
    fn an_unknown_or_missing_scheme_lists_the_schemes() {
        for url in ["http://h:1", "h:6379", "redis+shards://h:1"] {
            let error = parse(url).err().expect(url).to_string();
            assert!(error.contains("redis+sentinel://"), "{url}: {error}");
        }
    }

    /// Built without a store's feature (`scripts/test.sh` runs this module so), its URL is an
    /// error naming the feature.
    #[tokio::test]
    async fn a_store_whose_feature_is_off_names_the_feature() {
        let off = [
            (
                cfg!(not(feature = "postgres")),
                "postgres://u@h/db",
                "postgres",
            ),
            (cfg!(not(feature = "mysql")), "mysql://u@h/db", "mysql"),
            (
                cfg!(not(feature = "zookeeper")),
                "zookeeper://h:2181",
                "zookeeper",
            ),
            (cfg!(not(feature = "etcd")), "etcd://h:2379", "etcd"),
        ];
        for (_, url, feature) in off.into_iter().filter(|(off, ..)| *off) {
            let error = LockClient::open(url).await.expect_err(url).to_string();
            let named = format!("without its `{feature}` feature");
            assert!(error.contains(&named), "{url}: {error}");
        }
    }

    #[test]
    fn a_password_stays_out_of_errors_and_debug_output() {
        let error = parse("nope//u:secret@h").err().unwrap().to_string();
        assert!(!error.contains("secret"), "{error}");
        let builder = LockClient::open_builder("redis://u:secret@h:1/");
        assert!(!format!("{builder:?}").contains("secret"));
    }
}
