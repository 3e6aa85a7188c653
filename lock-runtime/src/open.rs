//! One way in: the store a URL names, picked by its scheme in this one place, as sqlx's
//! `Any` driver picks a database ([`LockClient::open`]).
//!
//! | scheme | store | the rest of the URL |
//! |---|---|---|
//! | `redis://`, `rediss://` | one Redis server | `[user:password@]host[:port][/db]` |
//! | `redis+sentinel://`, `rediss+sentinel://` | the master of a service behind Sentinels | `[user:password@]host:port[,host:port…]/service` (database 0) |
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
//!
//! `user:password@` runs from `://` to the URL's **last** `@`, and the user to the first `:`
//! in it: a password may hold any character, `/ : @ # ?` included, written raw or
//! percent-encoded (`%40`). A query or fragment that holds an `@` writes it `%40`, or the
//! text up to it would be taken for a password. The clients of one Redis server, of the
//! Redis topologies and of the databases get the user and password percent-encoded (a `%`
//! followed by two hex digits is kept as the escape it is), so that what the URL's parser of
//! redis-rs and sqlx would end at (`/ ? #`) reaches the server whole. Messages and Debug
//! output show the URL as `scheme://user@hosts/path`, without its password, query and
//! fragment.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::memory::MemoryBackend;
use crate::background::Background;
use crate::error::redacted_url;
use crate::instance::InstanceId;
use crate::{LockClient, LockError, RedisClientBuilder};

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

/// A URL cut into its parts where its password ends: the one reading of a URL that both
/// [`LockClient::open`] and the redaction of URLs in messages and Debug output use, so that
/// they always agree on where the password is.
pub(crate) struct UrlParts<'a> {
    /// What precedes `://`.
    pub(crate) scheme: &'a str,
    /// `user:password@`, or empty: up to the URL's last `@`, so that a password may hold any
    /// character, `/ : @ # ?` included (a query or fragment writes an `@` as `%40`).
    pub(crate) userinfo: &'a str,
    /// The hosts, up to the first `/`, `?` or `#` after the userinfo.
    pub(crate) hosts: &'a str,
    /// What follows the hosts (`/…`) up to the query, or empty.
    pub(crate) path: &'a str,
    /// The query and fragment (`?…`, `#…`), or empty.
    pub(crate) query: &'a str,
}

impl<'a> UrlParts<'a> {
    /// `url` cut into its parts, or `None` without a `scheme://` (letters, digits, `+`, `-`
    /// and `.` after a letter: a `://` inside a password makes no scheme of what precedes
    /// it).
    pub(crate) fn of(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let mut letters = scheme.chars();
        let is_scheme = letters.next().is_some_and(|c| c.is_ascii_alphabetic())
            && letters.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !is_scheme {
            return None;
        }
        let (userinfo, after) = rest.split_at(rest.rfind('@').map_or(0, |at| at + 1));
        let (main, query) = after.split_at(after.find(['?', '#']).unwrap_or(after.len()));
        let (hosts, path) = main.split_at(main.find('/').unwrap_or(main.len()));
        Some(UrlParts {
            scheme,
            userinfo,
            hosts,
            path,
            query,
        })
    }

    /// The user: the userinfo up to its first `:`, and also up to a `/`, `?` or `#`, which
    /// a user hardly holds but a query that wrote an `@` raw does (it may carry a password).
    pub(crate) fn user(&self) -> &'a str {
        let userinfo = self.userinfo.strip_suffix('@').unwrap_or(self.userinfo);
        let end = userinfo
            .find([':', '/', '?', '#'])
            .unwrap_or(userinfo.len());
        &userinfo[..end]
    }
}

/// Whether `userinfo` (up to the URL's last `@`) reads as more than a user and password: an
/// `@` of the path, query or fragment ended it, and its text (a password in a query, say)
/// would go to the host named after that `@`. So read when the user holds a `/`, `?` or `#`;
/// when an `@` in the password is followed by one (`user:pw@db/app?name=a@b`); or when the
/// password starts with digits and one (`host:6379/0?name=a@b`). A user may hold an `@`
/// (`admin@server:pw`).
fn reads_past_the_authority(userinfo: &str) -> bool {
    let userinfo = userinfo.strip_suffix('@').unwrap_or(userinfo);
    let starts_a_path = |text: &str| text.contains(['/', '?', '#']);
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let digits = password.len()
        - password
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    let port_then_path =
        digits > 0 && matches!(password.as_bytes().get(digits), Some(b'/' | b'?' | b'#'));
    starts_a_path(user)
        || password
            .split_once('@')
            .is_some_and(|(_, after)| starts_a_path(after))
        || port_then_path
}

/// A URL split into the parts the stores of several hosts need.
struct Parsed<'a> {
    store: Store,
    /// `rediss` rather than `redis` for the Redis topologies.
    tls: bool,
    /// `user:password@`, or empty: up to the URL's last `@`, so that a password may hold any
    /// character (`/ : @ # ?` too); a query or fragment writes an `@` as `%40`.
    userinfo: &'a str,
    /// The hosts, split at commas.
    hosts: Vec<&'a str>,
    /// What follows the hosts (`/…`), or empty.
    path: &'a str,
    /// The query and fragment (`?…`, `#…`), or empty.
    query: &'a str,
}

fn parse(url: &str) -> Result<Parsed<'_>, LockError> {
    let Some(parts) = UrlParts::of(url) else {
        return Err(LockError::invalid_config(format!(
            "the URL {} has no scheme: start it with {SCHEMES}",
            redacted_url(url)
        )));
    };
    let scheme = parts.scheme;
    let lowercase = scheme.to_ascii_lowercase();
    let (base, topology) = lowercase.split_once('+').unwrap_or((&lowercase, ""));
    let store = match (base, topology) {
        ("redis" | "rediss", "") => Store::Redis,
        ("redis" | "rediss", "sentinel") => Store::Sentinel,
        ("redis" | "rediss", "cluster") => Store::Cluster,
        ("redis" | "rediss", "redlock") => Store::Redlock,
        ("postgres" | "postgresql", "") => Store::Postgres,
        ("mysql" | "mariadb", "") => Store::MySql,
        ("zookeeper", "") => Store::ZooKeeper,
        ("etcd", "") => Store::Etcd,
        ("memory", "") => Store::Memory,
        _ => {
            return Err(LockError::invalid_config(format!(
                "the URL scheme `{scheme}://` names no store fencelock knows: use {SCHEMES}"
            )));
        }
    };
    if reads_past_the_authority(parts.userinfo) {
        return Err(LockError::invalid_config(
            "the URL's user and password would run into its path or query (they end at the \
             URL's last `@`, so that a password may hold any character): percent-encode an \
             `@` of the path, query or fragment, and the characters of a password that holds \
             an `@` and then a `/`, `?` or `#`, or starts with digits and one of them",
        ));
    }
    Ok(Parsed {
        store,
        tls: base == "rediss",
        userinfo: parts.userinfo,
        hosts: parts.hosts.split(',').collect(),
        path: parts.path,
        query: parts.query,
    })
}

impl Parsed<'_> {
    /// The hosts, refused when there are none or one is empty (a stray comma).
    fn hosts(&self) -> Result<&[&str], LockError> {
        if self.hosts.iter().any(|host| host.is_empty()) {
            return Err(LockError::invalid_config(
                "the URL's hosts are `host:port` separated by commas, none empty: it names no \
                 host, or has two commas in a row or one at the end",
            ));
        }
        Ok(&self.hosts)
    }

    /// Refuses a path or a query where the store takes none: it would be ignored.
    fn refuse(&self, path: bool, query: bool, fix: &str) -> Result<(), LockError> {
        let path_given = !matches!(self.path, "" | "/");
        if (path && path_given) || (query && !self.query.is_empty()) {
            return Err(LockError::invalid_config(format!(
                "a {:?} URL takes no {}: {fix}",
                self.store,
                if path && path_given { "path" } else { "query" }
            )));
        }
        Ok(())
    }

    /// The URL for a client that parses it with the `url` crate (redis-rs, sqlx), whose
    /// userinfo ends at the first `/`, `?` or `#`: with the user and password percent-encoded
    /// (see [`escaped_userinfo`]), so that theirs reach the server whole.
    fn escaped_url(&self, scheme: &str) -> String {
        let userinfo = escaped_userinfo(self.userinfo);
        let (hosts, path, query) = (self.hosts.join(","), self.path, self.query);
        format!("{scheme}://{userinfo}{hosts}{path}{query}")
    }
}

/// `userinfo` (`user:password@`, or empty) with each byte of the user and the password
/// percent-encoded but letters, digits, `-._~` and the `%XX` escapes already there (which
/// the clients decode, as they do those added here).
fn escaped_userinfo(userinfo: &str) -> String {
    let Some(userinfo) = userinfo.strip_suffix('@') else {
        return String::new();
    };
    let escaped = |text: &str| {
        let bytes = text.as_bytes();
        let mut escaped = String::with_capacity(text.len());
        for (at, &byte) in bytes.iter().enumerate() {
            let hex = |next: usize| bytes.get(at + next).is_some_and(u8::is_ascii_hexdigit);
            let an_escape = byte == b'%' && hex(1) && hex(2);
            if an_escape || byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                escaped.push(char::from(byte));
            } else {
                escaped.push_str(&format!("%{byte:02X}"));
            }
        }
        escaped
    };
    match userinfo.split_once(':') {
        Some((user, password)) => format!("{}:{}@", escaped(user), escaped(password)),
        None => format!("{}@", escaped(userinfo)),
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
    instance: Option<String>,
}

// The URL's password stays out of Debug output.
impl std::fmt::Debug for OpenBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenBuilder")
            .field("url", &redacted_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("table", &self.table)
            .field("create_tables", &self.create_tables)
            .field("allow_eviction", &self.allow_eviction)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("instance", &self.instance)
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
    /// [`RedisClientBuilder::allow_eviction`](crate::RedisClientBuilder::allow_eviction)). No
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

    /// The instance this client runs as, the same on each of its runs: a pod's or a host's
    /// name (1 to [`MAX_INSTANCE_LEN`](crate::instance::MAX_INSTANCE_LEN) bytes without
    /// control characters; refused at [`connect`](Self::connect) otherwise). Every owner token
    /// the client writes then starts with it (a long one shortened with a hash of it, so that
    /// names stay apart) and with the process's run, so that
    /// [`LockClient::release_orphans`] can release at start what an earlier run left held
    /// (a process killed while holding locks), and an operator can release what one instance
    /// holds ([`LockAdmin::release_instance`](crate::LockAdmin::release_instance), `fencelock
    /// release-instance NAME --force`). One live process per id: see `release_orphans`.
    ///
    /// ```
    /// # async fn run() -> Result<(), fencelock_runtime::LockError> {
    /// let locks = fencelock_runtime::LockClient::open_builder("memory://")
    ///     .instance_id("checkout-2")
    ///     .connect()
    ///     .await?;
    /// let left = locks.release_orphans().await?;
    /// assert_eq!(left.found, 0);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn instance_id(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// Connects to the store the URL names, with these settings. The URL of one Redis
    /// server or of a database goes to its client as it is, but for its user and password,
    /// percent-encoded (see the [module](self)).
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let parsed = parse(&self.url)?;
        self.refuse_settings_without_a_place(parsed.store)?;
        match parsed.store {
            Store::Redis | Store::Sentinel | Store::Cluster | Store::Redlock => {
                self.connect_redis(&parsed).await
            }
            Store::Postgres | Store::MySql => self.connect_sql(&parsed).await,
            Store::ZooKeeper => self.connect_zookeeper(&parsed).await,
            Store::Etcd => self.connect_etcd(&parsed).await,
            Store::Memory => {
                let nothing_after = parsed.hosts == [""] && parsed.path.is_empty();
                if !nothing_after || !parsed.query.is_empty() {
                    return Err(LockError::invalid_config(
                        "memory:// takes nothing after it: each one is a new lock space",
                    ));
                }
                let instance = InstanceId::of_setting(self.instance.as_deref())?;
                let memory = Arc::new(MemoryBackend::new());
                Ok(LockClient::with_background(
                    memory,
                    Background::Driver,
                    true,
                    instance,
                ))
            }
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
        let scheme = if parsed.tls { "rediss" } else { "redis" };
        let (userinfo, query) = (escaped_userinfo(parsed.userinfo), parsed.query);
        let node = |host: &&str, path: &str| format!("{scheme}://{userinfo}{host}{path}{query}");
        let builder = match parsed.store {
            Store::Redis => LockClient::builder(&parsed.escaped_url(scheme)),
            Store::Sentinel => {
                let service = parsed.path.trim_start_matches('/');
                if service.is_empty() || service.contains('/') {
                    return Err(LockError::invalid_config(
                        "a redis+sentinel:// URL's path is the service's name alone (database \
                         0): redis+sentinel://host:26379,host:26380/mymaster",
                    ));
                }
                let sentinels = parsed.hosts()?.iter().map(|host| node(host, ""));
                LockClient::sentinel_builder(sentinels, service)
            }
            Store::Cluster => {
                parsed.refuse(true, false, "a Redis Cluster has database 0 alone")?;
                LockClient::cluster_builder(parsed.hosts()?.iter().map(|host| node(host, "")))
            }
            _ => {
                let masters = parsed.hosts()?.iter().map(|host| node(host, parsed.path));
                LockClient::redlock_builder(masters)
            }
        };
        let builder = set(
            builder,
            &self.allow_eviction,
            RedisClientBuilder::allow_eviction,
        );
        let builder = set(builder, &self.key_prefix, RedisClientBuilder::key_prefix);
        let builder = set(
            builder,
            &self.connect_timeout,
            RedisClientBuilder::connect_timeout,
        );
        let builder = set(
            builder,
            &self.response_timeout,
            RedisClientBuilder::response_timeout,
        );
        let builder = set(builder, &self.instance, RedisClientBuilder::instance_id);
        builder.connect().await
    }

    #[cfg_attr(
        not(all(feature = "postgres", feature = "mysql")),
        allow(unused_variables)
    )]
    async fn connect_sql(&self, parsed: &Parsed<'_>) -> Result<LockClient, LockError> {
        let builder = match parsed.store {
            #[cfg(feature = "postgres")]
            Store::Postgres => LockClient::postgres_builder(&parsed.escaped_url("postgres")),
            #[cfg(not(feature = "postgres"))]
            Store::Postgres => return Err(feature_off("PostgreSQL", "postgres")),
            #[cfg(feature = "mysql")]
            _ => LockClient::mysql_builder(&parsed.escaped_url("mysql")),
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
            let builder = set(builder, &self.instance, Sql::instance_id);
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
            parsed.refuse(false, true, "set the session with `zookeeper_builder`")?;
            let connect_string = format!("{}{}", parsed.hosts()?.join(","), parsed.path);
            use crate::ZooKeeperClientBuilder as ZooKeeper;
            let builder = LockClient::zookeeper_builder(&connect_string);
            let builder = set(builder, &self.key_prefix, ZooKeeper::root);
            let builder = set(builder, &self.connect_timeout, ZooKeeper::connect_timeout);
            let builder = set(builder, &self.instance, ZooKeeper::instance_id);
            builder.connect().await
        }
    }

    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    async fn connect_etcd(&self, parsed: &Parsed<'_>) -> Result<LockClient, LockError> {
        #[cfg(not(feature = "etcd"))]
        return Err(feature_off("etcd", "etcd"));
        #[cfg(feature = "etcd")]
        {
            let fix = "the key prefix is `key_prefix`, the other settings `etcd_builder`'s";
            parsed.refuse(true, true, fix)?;
            let endpoints = parsed.hosts()?.iter().map(|host| format!("http://{host}"));
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
            let builder = set(builder, &self.instance, Etcd::instance_id);
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
            instance: None,
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
    fn hosts_userinfo_path_and_query_are_split() {
        let parsed = parse("REDIS+redlock://u:p/a@ss@a:1,b:2,c:3/2?protocol=resp3").unwrap();
        assert_eq!(parsed.store, Store::Redlock);
        assert!(!parsed.tls);
        assert_eq!(parsed.userinfo, "u:p/a@ss@");
        assert_eq!(parsed.hosts, ["a:1", "b:2", "c:3"]);
        assert_eq!(parsed.path, "/2");
        assert_eq!(parsed.query, "?protocol=resp3");
        assert_eq!(percent_decoded("p%40ss").unwrap(), "p@ss");
        assert!(percent_decoded("100%").is_err());
    }

    /// The userinfo runs to the URL's last `@`: a password may hold `# ? / : @`, and the
    /// query or fragment after the hosts writes an `@` as `%40`.
    #[test]
    fn a_password_may_hold_any_printable_character() {
        for (url, userinfo, hosts, path, query) in [
            (
                "redis://u:Zq7s#Ecr3t@h:1/0",
                "u:Zq7s#Ecr3t@",
                &["h:1"][..],
                "/0",
                "",
            ),
            ("redis://u:p?ss@h:1", "u:p?ss@", &["h:1"], "", ""),
            (
                "postgres://app:a/b:c@d@db/app?x=1",
                "app:a/b:c@d@",
                &["db"],
                "/app",
                "?x=1",
            ),
            (
                "redis+redlock://u:#?/@:x@a:1,b:2,c:3/2#f",
                "u:#?/@:x@",
                &["a:1", "b:2", "c:3"],
                "/2",
                "#f",
            ),
            ("redis://u:p@[::1]:6379", "u:p@", &["[::1]:6379"], "", ""),
            (
                "redis://u:p%40ss@h?x=a%40b",
                "u:p%40ss@",
                &["h"],
                "",
                "?x=a%40b",
            ),
            ("redis://h:1/0?x=a%40b#y", "", &["h:1"], "/0", "?x=a%40b#y"),
            ("mysql://root@h/db", "root@", &["h"], "/db", ""),
            ("etcd://u:@h:2379", "u:@", &["h:2379"], "", ""),
        ] {
            let parsed = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let split = (
                parsed.userinfo,
                &parsed.hosts[..],
                parsed.path,
                parsed.query,
            );
            assert_eq!(split, (userinfo, hosts, path, query), "{url}");
        }
    }

    /// The clients that parse a URL with the `url` crate get the user and password
    /// percent-encoded, the escapes already there kept.
    #[test]
    fn a_url_handed_on_has_its_user_and_password_percent_encoded() {
        for (userinfo, escaped) in [
            ("", ""),
            ("u@", "u@"),
            ("u:@", "u:@"),
            (":p@", ":p@"),
            ("u:p#s?s/w:o@r d@", "u:p%23s%3Fs%2Fw%3Ao%40r%20d@"),
            ("a@b:p%40ss%zz%4@", "a%40b:p%40ss%25zz%254@"),
            ("u:-._~Az09@", "u:-._~Az09@"),
            ("u:\u{e9}@", "u:%C3%A9@"),
        ] {
            assert_eq!(escaped_userinfo(userinfo), escaped, "{userinfo}");
        }
        let parsed = parse("rediss://u:p#insecure@[::1]:6379/2?protocol=resp3").unwrap();
        assert_eq!(
            parsed.escaped_url("rediss"),
            "rediss://u:p%23insecure@[::1]:6379/2?protocol=resp3"
        );
    }

    /// A scheme is letters, digits, `+`, `-` and `.` after a letter: a `://` inside the
    /// password of a URL without a scheme makes no scheme of the text before it.
    #[test]
    fn a_scheme_is_only_scheme_characters() {
        let error = parse("u:sec://ret@h:1").err().unwrap().to_string();
        assert!(error.contains("has no scheme"), "{error}");
        assert!(!error.contains("sec"), "{error}");
    }

    /// What a URL can say that its store would ignore, or that names no host, is refused
    /// before connecting.
    #[tokio::test]
    async fn what_a_store_would_ignore_is_refused() {
        for (url, says) in [
            ("redis+redlock://a:1,,c:3", "none empty"),
            ("redis+cluster://a:1,b:2,", "none empty"),
            ("redis+sentinel://s:26379", "the service's name alone"),
            (
                "redis+sentinel://s:26379/mymaster/2",
                "the service's name alone",
            ),
            ("redis+cluster://a:1,b:2/3", "takes no path"),
            ("etcd://h:2379/myapp", "takes no path"),
            ("zookeeper://h:2181?sessionTimeout=1", "takes no query"),
            ("memory://x", "takes nothing after it"),
        ] {
            let off = (url.starts_with("etcd:") && !cfg!(feature = "etcd"))
                || (url.starts_with("zookeeper:") && !cfg!(feature = "zookeeper"));
            if off {
                continue;
            }
            let error = LockClient::open(url).await.expect_err(url).to_string();
            assert!(error.contains(says), "{url}: {error}");
        }
    }

    /// Review findings: a raw `@` in a query made the query (or the host, port and path
    /// before it) the userinfo, sent, a password in it too, to the host named after that
    /// `@`. Refused, naming the fix; passwords that read as nothing else are taken.
    #[test]
    fn an_at_sign_of_a_query_is_refused_unless_escaped() {
        for url in [
            "postgres:///locks?host=/run/pg&password=secret&user=me@corp",
            "postgres://app:secret@db:5432/app?application_name=ops@corp.example",
            "redis://h:6379/0?client_name=a@b",
            "redis://h/0?user=me@corp",
            "mysql://h/db#frag@x",
        ] {
            let error = parse(url).err().expect(url).to_string();
            assert!(error.contains("percent-encode an `@`"), "{url}: {error}");
            assert!(!error.contains("secret"), "{url}: {error}");
        }
        let escaped = parse("postgres:///locks?host=/run/pg&user=me%40corp").unwrap();
        assert_eq!(escaped.userinfo, "");
        for password in ["Zq7s#Ecr3t", "p/ss:w?rd", "p%40ss#w", "12ab/c"] {
            let url = format!("postgres://app:{password}@db/app");
            assert_eq!(parse(&url).unwrap().hosts, ["db"], "{password}");
        }
        let azure = parse("postgres://admin@server:p@ss@server.example/db").unwrap();
        assert_eq!(azure.hosts, ["server.example"]);
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
        for url in [
            "redis://u:secret@h:1/",
            "postgres://app:secret/x@db/locks",
            "postgres:///locks?host=/run/postgresql&password=secret",
        ] {
            let builder = LockClient::open_builder(url);
            assert!(!format!("{builder:?}").contains("secret"), "{url}");
        }
    }
}

#[cfg(test)]
mod password_tests;
