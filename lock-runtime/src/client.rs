//! `LockClient`: the handle applications keep, and the builder of a Redis client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::admission::Admission;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::{RedisBackend, RedisSettings, open};
use crate::backend::redlock::RedlockBackend;
use crate::backend::{BoxFuture, LockBackend};
use crate::background::Background;
use crate::instance::InstanceId;
use crate::local_line::LocalLines;
use crate::renewal::{RenewalStats, Renewer};
use crate::shutdown::ShutdownState;
use crate::sync::Outstanding;
use crate::{LockError, LockKind, LockRequest, random};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};

/// A connection to a lock backend. Cheap to clone: clones share the backend, its connection
/// and one renewal loop.
#[derive(Clone, Debug)]
pub struct LockClient {
    inner: Arc<ClientInner>,
}

#[derive(Debug)]
struct ClientInner {
    /// Tells clients apart for reentrancy: a lock is re-entered only through the client
    /// (and so the backend) that holds it.
    id: u64,
    backend: Arc<dyn LockBackend>,
    background: Background,
    renewer: Renewer,
    /// Background releases not answered yet, which a request for their key waits for.
    releases_in_flight: Arc<Outstanding>,
    shutdown: ShutdownState,
    /// The bound on attempts out at the store.
    admission: Admission,
    /// The lines its own waiting mutex requests form, per key.
    local_lines: Arc<LocalLines>,

    /// Whether waiters subscribe to release notifications (else they poll every `sleep_ms`).
    notifies: bool,
    /// The instance whose owner tokens this client writes, if it was built with one.
    instance: Option<InstanceId>,
}

impl LockClient {
    /// Connects to Redis at `url` (`redis://` or `rediss://`) with the default settings of
    /// [`RedisClientBuilder`].
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        LockClient::builder(url).connect().await
    }

    /// A builder for a Redis client with a key prefix and timeouts.
    pub fn builder(url: &str) -> RedisClientBuilder {
        RedisClientBuilder::new(Topology::Single(url.to_owned()), RedisSettings::default())
    }

    /// Connects to independent Redis masters (Redlock, usually 3 or 5) with the default
    /// settings of [`LockClient::redlock_builder`]: a lock is held while a majority of them
    /// grants it. At least a majority must answer now.
    pub async fn redlock(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<LockClient, LockError> {
        LockClient::redlock_builder(urls).connect().await
    }

    /// Connects to a Redis Cluster through some of its nodes (`urls`, e.g. the masters') with
    /// the default settings of [`LockClient::cluster_builder`]. Slots, `MOVED`/`ASK`,
    /// resharding and failover are followed by redis-rs's cluster client; each lock's keys
    /// share one hash slot, renewal is batched per slot, and releases are announced over
    /// sharded pub/sub (Redis 7).
    pub async fn cluster(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<LockClient, LockError> {
        LockClient::cluster_builder(urls).connect().await
    }

    /// A builder for a Redis Cluster client, with the options of [`LockClient::builder`]
    /// (a TLS root certificate is refused: it is not applied to cluster nodes yet).
    pub fn cluster_builder(urls: impl IntoIterator<Item = impl AsRef<str>>) -> RedisClientBuilder {
        let urls = urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        RedisClientBuilder::new(Topology::Cluster(urls), RedisSettings::default())
    }

    /// Connects to the master of `service` through its Sentinels (`sentinel_urls`, e.g.
    /// `["redis://127.0.0.1:26379"]`) with the default settings of
    /// [`LockClient::sentinel_builder`]. The client follows the master through a failover:
    /// each new connection asks the Sentinels for the current master, and a master that was
    /// demoted (it refuses writes) is left at once.
    pub async fn sentinel(
        sentinel_urls: impl IntoIterator<Item = impl AsRef<str>>,
        service_name: &str,
    ) -> Result<LockClient, LockError> {
        LockClient::sentinel_builder(sentinel_urls, service_name)
            .connect()
            .await
    }

    /// A builder for a Sentinel client, with the options of [`LockClient::builder`] (a TLS
    /// root certificate is refused: it is not applied yet). The master is reached with the
    /// username, password and database of the first Sentinel URL, and over TLS when that URL
    /// is `rediss://`.
    pub fn sentinel_builder(
        sentinel_urls: impl IntoIterator<Item = impl AsRef<str>>,
        service_name: &str,
    ) -> RedisClientBuilder {
        let sentinels = sentinel_urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        let topology = Topology::Sentinel {
            sentinels,
            service: service_name.to_owned(),
        };
        RedisClientBuilder::new(topology, RedisSettings::default())
    }

    /// A builder for a Redlock client, with the options of [`LockClient::builder`], applied
    /// to every master. The response timeout is also how long any call waits for one master
    /// (default [`DEFAULT_NODE_TIMEOUT`](crate::backend::redlock::DEFAULT_NODE_TIMEOUT), shorter than a single server's, and so is the
    /// connect timeout): a slow or unreachable minority costs a call at most that.
    pub fn redlock_builder(urls: impl IntoIterator<Item = impl AsRef<str>>) -> RedisClientBuilder {
        let urls = urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        RedisClientBuilder::new(Topology::Redlock(urls), RedisSettings::redlock())
    }

    /// A client whose locks live in this process's memory: the same semantics as Redis
    /// (leases, renewal, owner-checked release, fencing tokens), for tests and single-process
    /// use. Each call creates a separate lock space; clone the client to share it.
    pub fn memory() -> LockClient {
        LockClient::from_backend(MemoryBackend::new())
    }

    /// A memory client whose background work (renewal, loss detection, background releases)
    /// runs on `runtime` instead of the library's background thread, so that tests can drive
    /// leases with tokio's paused clock (`#[tokio::test(start_paused = true)]`, then
    /// `LockClient::memory_on(Handle::current())`). The client stops working when that
    /// runtime ends.
    pub fn memory_on(runtime: tokio::runtime::Handle) -> LockClient {
        LockClient::from_backend_on(MemoryBackend::new(), runtime)
    }

    /// A client over any [`LockBackend`].
    pub fn from_backend(backend: impl LockBackend) -> LockClient {
        LockClient::with_background(Arc::new(backend), Background::Driver, true, None)
    }

    /// A client over any [`LockBackend`], running as the instance `instance_id` (see
    /// [`OpenBuilder::instance_id`](crate::OpenBuilder::instance_id)): what a store's builder
    /// does with `.instance_id(..)`, for a backend of one's own.
    pub fn from_backend_for_instance(
        backend: impl LockBackend,
        instance_id: &str,
    ) -> Result<LockClient, LockError> {
        let instance = InstanceId::new(instance_id)?;
        let background = Background::Driver;
        Ok(LockClient::with_background(
            Arc::new(backend),
            background,
            true,
            Some(instance),
        ))
    }

    /// A client over any [`LockBackend`] whose background work runs on `runtime` (see
    /// [`LockClient::memory_on`]).
    pub fn from_backend_on(
        backend: impl LockBackend,
        runtime: tokio::runtime::Handle,
    ) -> LockClient {
        LockClient::with_background(Arc::new(backend), Background::Runtime(runtime), true, None)
    }

    pub(crate) fn with_background(
        backend: Arc<dyn LockBackend>,
        background: Background,
        notifies: bool,
        instance: Option<InstanceId>,
    ) -> LockClient {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        LockClient {
            inner: Arc::new(ClientInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                renewer: Renewer::new(backend.clone(), background.clone()),
                backend,
                background,
                releases_in_flight: Arc::default(),
                shutdown: ShutdownState::default(),
                admission: Admission::default(),
                local_lines: Arc::default(),
                notifies,
                instance,
            }),
        }
    }

    /// A request for the lock `key` with default options; finish it with `.acquire()`.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let guard = locks.lock("stock:42").ttl_ms(5_000).acquire().await?;
    /// // Pass the fencing token along with every write the lock protects.
    /// println!("writing stock:42 under token {}", guard.token());
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, key: impl Into<String>) -> LockRequest {
        self.request(key, LockKind::Mutex)
    }

    /// A request for a read lock of `key` ([`LockKind::Read`]): readers hold it together,
    /// never with a writer; a reader that arrives while a writer waits queues behind it.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let first = locks.read_lock("catalog").acquire().await?;
    /// let second = locks.read_lock("catalog").give_up().acquire().await?;
    /// let writer = locks.write_lock("catalog").give_up().acquire().await;
    /// assert!(writer.unwrap_err().is_not_acquired());
    /// first.release().await?;
    /// second.release().await?;
    /// let writer = locks.write_lock("catalog").give_up().acquire().await?;
    /// assert!(writer.token() > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_lock(&self, key: impl Into<String>) -> LockRequest {
        self.request(key, LockKind::Read)
    }

    /// A request for the write lock of `key` ([`LockKind::Write`]): one writer and no
    /// reader at a time; its fencing token exceeds every earlier reader's and writer's.
    pub fn write_lock(&self, key: impl Into<String>) -> LockRequest {
        self.request(key, LockKind::Write)
    }

    /// A request for one of `permits` permits of `key` ([`LockKind::Semaphore`]): at most
    /// `permits` holders at once, each with its own lease.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let a = locks.semaphore("exports", 2).acquire().await?;
    /// let b = locks.semaphore("exports", 2).acquire().await?;
    /// let third = locks.semaphore("exports", 2).give_up().acquire().await;
    /// assert!(third.unwrap_err().is_not_acquired());
    /// # drop((a, b));
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> LockRequest {
        self.request(key, LockKind::Semaphore { permits })
    }

    /// A request for one free shard of the `shards` shards of `key` ([`LockKind::Segmented`]):
    /// each shard is held by one owner at a time; the guard says which
    /// ([`LockGuard::shard`](crate::LockGuard::shard)).
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let a = locks.segmented("stock:42", 4).acquire().await?;
    /// let b = locks.segmented("stock:42", 4).acquire().await?;
    /// assert_ne!(a.shard(), b.shard());
    /// assert!(a.shard().is_some_and(|shard| shard < 4));
    /// # Ok(())
    /// # }
    /// ```
    pub fn segmented(&self, key: impl Into<String>, shards: u32) -> LockRequest {
        self.request(key, LockKind::Segmented { shards })
    }

    /// Clears every exhausted mark of the segmented lock `key` (see
    /// [`shard_exhausted`](crate::shard_exhausted)): call it once the stock its shards guard
    /// is back, and calls take every shard again. Clearing a key without marks does nothing.
    ///
    /// ```
    /// use fencelock::{LockClient, LockError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockClient::memory();
    /// let guard = locks.segmented("stock:tea", 1).acquire().await?;
    /// guard.mark_exhausted().await?;
    /// guard.release().await?;
    ///
    /// locks.refill_shards("stock:tea").await?;
    /// let guard = locks.segmented("stock:tea", 1).acquire().await?;
    /// assert_eq!(guard.shard(), Some(0));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn refill_shards(&self, key: &str) -> Result<(), LockError> {
        self.clear_shard_marks(key, None).await
    }

    /// Clears the exhausted mark of one shard of the segmented lock `key` (see
    /// [`refill_shards`](Self::refill_shards)).
    pub async fn refill_shard(&self, key: &str, shard: u32) -> Result<(), LockError> {
        self.clear_shard_marks(key, Some(shard)).await
    }

    async fn clear_shard_marks(&self, key: &str, shard: Option<u32>) -> Result<(), LockError> {
        crate::key::validate(key)?;
        let Some(marks) = self.backend().shard_marks() else {
            return Err(crate::backend::not_offered("exhausted shards"));
        };
        marks.refill(key, shard).await
    }

    /// A request for a `kind` lock of `key`.
    pub fn request(&self, key: impl Into<String>, kind: LockKind) -> LockRequest {
        LockRequest::new(self.clone(), key.into(), kind)
    }

    /// Counters of this client's renewal loop.
    pub fn renewal_stats(&self) -> RenewalStats {
        self.inner.renewer.stats()
    }

    /// Bounds the keys this client (and every clone of it) sends attempts for to its store at
    /// once: past `limit`, the acquisition of a key that no other request of the client is
    /// acquiring fails at once with [`LockError::Overloaded`], before anything is sent,
    /// instead of queueing behind the others, so that a load the store cannot answer in time
    /// is refused fast rather than made late. Only a first attempt is refused; an acquisition
    /// that waits between attempts for a holder's release does not count meanwhile; releases
    /// and renewals are never refused. The default is
    /// [`DEFAULT_MAX_IN_FLIGHT`](crate::DEFAULT_MAX_IN_FLIGHT) (128); raise it for bursts of
    /// many distinct keys at once or a store far away (it caps new keys at `limit` per round
    /// trip); `usize::MAX` turns the bound off. Zero is refused with
    /// [`LockError::InvalidConfig`]. What counts, in full: the guide's page on guarantees.
    ///
    /// ```
    /// use fencelock::LockClient;
    ///
    /// let locks = LockClient::memory();
    /// locks.set_max_in_flight(1_024)?;
    /// assert_eq!(locks.max_in_flight(), 1_024);
    /// # Ok::<(), fencelock::LockError>(())
    /// ```
    pub fn set_max_in_flight(&self, limit: usize) -> Result<(), LockError> {
        self.inner.admission.set_limit(limit)
    }

    /// The bound of [`LockClient::set_max_in_flight`] now.
    pub fn max_in_flight(&self) -> usize {
        self.inner.admission.limit()
    }

    /// How many attempts of this client (and its clones) are out at the store now, sent and
    /// not answered yet, for every key.
    pub fn attempts_in_flight(&self) -> usize {
        self.inner.admission.attempts()
    }

    pub(crate) fn admission(&self) -> &Admission {
        &self.inner.admission
    }

    pub(crate) fn local_lines(&self) -> &Arc<LocalLines> {
        &self.inner.local_lines
    }

    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    pub(crate) fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.inner.backend
    }

    /// The instance this client was built for, if any.
    pub(crate) fn instance(&self) -> Option<&InstanceId> {
        self.inner.instance.as_ref()
    }

    /// A fresh owner token for one acquisition: random, led by the instance id if any.
    pub(crate) fn owner_token(&self) -> String {
        self.instance()
            .map_or_else(random::owner_token, InstanceId::owner_token)
    }

    pub(crate) fn notifies(&self) -> bool {
        self.inner.notifies
    }

    pub(crate) fn background(&self) -> &Background {
        &self.inner.background
    }

    pub(crate) fn releases_in_flight(&self) -> &Arc<Outstanding> {
        &self.inner.releases_in_flight
    }

    pub(crate) fn shutdown_state(&self) -> &ShutdownState {
        &self.inner.shutdown
    }

    pub(crate) fn renewer(&self) -> &Renewer {
        &self.inner.renewer
    }
}

/// Where a Redis [`LockClient`] keeps its locks.
#[derive(Clone)]
enum Topology {
    /// One server (standalone or a primary).
    Single(String),
    /// Independent masters, a majority of which must grant a lock.
    Redlock(Vec<String>),
    /// A Redis Cluster, reached through some of its nodes.
    Cluster(Vec<String>),
    /// The master of a service, as its Sentinels name it.
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
}

/// A builder of a Redis [`LockClient`], for every topology (one server, Sentinel, Cluster,
/// Redlock): from [`LockClient::builder`] and the topologies' builders. Its settings are a
/// [`RedisSettings`] (key prefix, [`Timeouts`](crate::backend::Timeouts)) and the client's own options.
#[derive(Clone)]
#[must_use = "a builder does nothing until `.connect().await`"]
pub struct RedisClientBuilder {
    topology: Topology,
    settings: RedisSettings,
    release_notifications: bool,
    allow_eviction: bool,
    tls_root_certificate: Option<Vec<u8>>,
    instance: Option<String>,
}

// The URL may carry a password: Debug output leaves it out.
impl std::fmt::Debug for RedisClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers = match &self.topology {
            Topology::Single(_) => 1,
            Topology::Redlock(urls)
            | Topology::Cluster(urls)
            | Topology::Sentinel {
                sentinels: urls, ..
            } => urls.len(),
        };
        f.debug_struct("RedisClientBuilder")
            .field("servers", &servers)
            .field("prefix", &self.settings.prefix)
            .field("timeouts", &self.settings.timeouts)
            .finish_non_exhaustive()
    }
}

/// The former name of [`RedisClientBuilder`].
#[deprecated(
    since = "0.2.0",
    note = "renamed `RedisClientBuilder`: it builds Redis clients"
)]
pub type LockClientBuilder = RedisClientBuilder;

impl RedisClientBuilder {
    fn new(topology: Topology, settings: RedisSettings) -> Self {
        RedisClientBuilder {
            topology,
            settings,
            release_notifications: true,
            allow_eviction: false,
            tls_root_certificate: None,
            instance: None,
        }
    }

    /// Whether waiters sleep until the lock is released, woken by a Redis pub/sub message
    /// (default `true`: one subscription connection per client). With `false` they poll
    /// every `sleep_ms`, as most lock libraries do.
    pub fn release_notifications(mut self, on: bool) -> Self {
        self.release_notifications = on;
        self
    }

    /// Text put before every lock key in Redis (default `"lock:"`); the key itself follows
    /// in braces, e.g. `lock:{stock:42}:v2`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }

    /// Every setting of the backend at once: the key prefix and the timeouts. On a Redlock
    /// builder, start from [`RedisSettings::redlock`]: [`RedisSettings::default`] gives each
    /// master a single server's 2 s.
    pub fn settings(mut self, settings: RedisSettings) -> Self {
        self.settings = settings;
        self
    }

    /// How long opening a connection may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.connect = timeout;
        self
    }

    /// How long a reply may take before the command counts as failed (default 2 s). A
    /// timed-out acquire may still have been applied; the client then deletes it again.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.response = timeout;
        self
    }

    /// Accept a server whose `maxmemory-policy` may evict keys (default `false`: `connect`
    /// fails, because eviction silently deletes held locks).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// For `rediss://`: trust this root certificate (PEM) instead of the system's roots, e.g.
    /// a private CA's. Needs the `tls-rustls` feature.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// The instance this client runs as (see [`OpenBuilder::instance_id`](crate::OpenBuilder::instance_id)).
    pub fn instance_id(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// Connects, checks the servers with `PING`, and (unless allowed) refuses a server that
    /// may evict keys.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let notifies = self.release_notifications;
        let instance = InstanceId::of_setting(self.instance.as_deref())?;
        // Boxed as a trait object: the futures of every topology, nested in the caller's,
        // would make its type deep enough to overflow rustc's query depth in applications.
        let backend: BoxFuture<'static, _> = Box::pin(self.connect_topology());
        Ok(LockClient::with_background(
            backend.await?,
            Background::Driver,
            notifies,
            instance,
        ))
    }

    /// Refuses a TLS root certificate where it would not be applied yet.
    fn no_tls_root(&self, topology: &str) -> Result<(), LockError> {
        match self.tls_root_certificate {
            Some(_) => Err(LockError::invalid_config(format!(
                "a TLS root certificate is not applied to {topology} yet: use `rediss://` URLs \
                 with the system's roots, or drop `tls_root_certificate`"
            ))),
            None => Ok(()),
        }
    }

    /// The backend of the topology, connected and checked.
    async fn connect_topology(self) -> Result<Arc<dyn LockBackend>, LockError> {
        let open = |url: &str| open(url, self.tls_root_certificate.clone());
        Ok(match &self.topology {
            Topology::Single(url) => {
                let backend = RedisBackend::from_client(open(url)?, self.settings).await?;
                if !self.allow_eviction {
                    backend.check_eviction_policy().await?;
                }
                Arc::new(backend)
            }
            Topology::Redlock(urls) => {
                let clients = urls.iter().map(|url| open(url)).collect::<Result<_, _>>()?;
                let backend = RedlockBackend::from_clients(clients, self.settings).await?;
                if !self.allow_eviction {
                    backend.check_eviction_policy().await?;
                }
                Arc::new(backend)
            }
            Topology::Cluster(urls) => {
                self.no_tls_root("a Redis Cluster")?;
                let backend = RedisBackend::cluster(urls, self.settings).await?;
                if !self.allow_eviction {
                    backend.check_eviction_policy().await?;
                }
                Arc::new(backend)
            }
            Topology::Sentinel { sentinels, service } => {
                self.no_tls_root("Sentinel")?;
                let sentinels = sentinel_client(sentinels, service)?;
                let backend = RedisBackend::sentinel(sentinels, service, self.settings).await?;
                if !self.allow_eviction {
                    backend.check_eviction_policy().await?;
                }
                Arc::new(backend)
            }
        })
    }
}

/// A redis-rs Sentinel client for `service` on `urls`, reaching the master as the first URL
/// says (credentials, database, TLS).
fn sentinel_client(urls: &[String], service: &str) -> Result<SentinelClient, LockError> {
    let bad = |what: String| {
        LockError::invalid_config(format!(
            "{what}; expected Sentinel URLs such as redis://127.0.0.1:26379 and the name of \
             the service they monitor"
        ))
    };
    let first = urls
        .first()
        .ok_or_else(|| bad("no Sentinel URL given".to_owned()))?;
    if service.is_empty() {
        return Err(bad("the service name is empty".to_owned()));
    }
    let first = open(first, None)?;
    let mut master = SentinelNodeConnectionInfo::default()
        .set_redis_connection_info(first.get_connection_info().redis_settings().clone());
    if matches!(
        first.get_connection_info().addr(),
        redis::ConnectionAddr::TcpTls { .. }
    ) {
        master = master.set_tls_mode(redis::TlsMode::Secure);
    }
    SentinelClient::build(
        urls.to_vec(),
        String::from(service),
        Some(master),
        SentinelServerType::Master,
    )
    .map_err(|e| bad(format!("cannot use the Sentinel URLs: {e}")))
}
