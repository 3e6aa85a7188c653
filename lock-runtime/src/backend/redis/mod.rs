//! The Redis backend: one key per lock, Lua scripts for every step. Where each part of a
//! lock lives is described in `src/backend/redis/layout.rs`.

mod cluster;
mod connection;
mod layout;
mod operator;
mod pubsub;
mod scripts;
mod server;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, Script, ServerErrorKind, Value};

use self::cluster::{ClusterLink, ExtendCall};
use self::connection::{Connection, Live, Route};
use self::pubsub::Notifier;
use self::scripts::{Caller, LIBRARY, LockScript};
use self::server::Server;
use super::sharing::{script_kind, slot_of};
use super::{
    Acquire, AsyncBackend, AsyncResults, AsyncShardMarks, Extended, HeldLease, Lease, Published,
    Release, ReleaseWatch, ResultChange, ResultStore, SharedResult, TogetherCall, Turn,
    change_at_release, mutexes_alone, release_memory,
};
use crate::backend::{Capabilities, OperatorBackend, ShardMarks, Timeouts, foreign_result};
use crate::{LockError, random};

static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/extend.lua")));

/// Leases per extend script call. A script blocks the server while it runs; 500 GET+PEXPIRE
/// pairs take well under a millisecond.
const EXTEND_KEYS_PER_CALL: usize = 500;
/// Extend calls per pipeline: 10,000 leases in one round trip. Halved while a pipeline
/// times out.
const EXTEND_CALLS_PER_PIPELINE: usize = 20;

/// Default key prefix of a Redis client.
pub const DEFAULT_PREFIX: &str = "lock:";
/// Default time to open a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time to wait for a reply (redis-rs's own default of 500 ms is short for a loaded
/// machine; a lease is usually tens of seconds).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`RedisBackend`] names its keys and how long it waits for the server. Start from
/// [`RedisSettings::default`] and change the fields you need.
///
/// ```
/// use std::time::Duration;
///
/// use fencelock::backend::redis::RedisSettings;
///
/// let mut settings = RedisSettings::default();
/// settings.prefix = "billing-lock:".to_owned();
/// settings.timeouts.response = Duration::from_millis(500);
/// assert_eq!(settings.timeouts.connect, Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisSettings {
    /// Text put before every lock key (default [`DEFAULT_PREFIX`]); no braces.
    pub prefix: String,
    /// How long opening a connection may take (default [`DEFAULT_CONNECT_TIMEOUT`]), and a
    /// reply before the command counts as failed (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    pub timeouts: Timeouts,
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            prefix: DEFAULT_PREFIX.to_owned(),
            timeouts: Timeouts::new(DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT),
        }
    }
}

impl RedisSettings {
    /// The defaults of a Redlock client: each master gets
    /// [`DEFAULT_NODE_TIMEOUT`](crate::backend::redlock::DEFAULT_NODE_TIMEOUT) to connect and to
    /// answer, so that a slow minority costs a call little. Start from these, not from
    /// [`RedisSettings::default`], when giving a Redlock builder its settings.
    ///
    /// ```
    /// use fencelock::backend::redis::RedisSettings;
    /// use fencelock::backend::redlock::DEFAULT_NODE_TIMEOUT;
    ///
    /// let mut settings = RedisSettings::redlock();
    /// settings.prefix = "billing-lock:".to_owned();
    /// assert_eq!(settings.timeouts.response, DEFAULT_NODE_TIMEOUT);
    /// let builder = fencelock::LockClient::redlock_builder(["redis://127.0.0.1:6379"]);
    /// let _ = builder.settings(settings);
    /// ```
    pub fn redlock() -> Self {
        let node = crate::backend::redlock::DEFAULT_NODE_TIMEOUT;
        RedisSettings {
            timeouts: Timeouts::new(node, node),
            ..RedisSettings::default()
        }
    }
}

/// Locks in Redis: one server (standalone, a primary, or the master behind Sentinel), or a
/// Redis Cluster.
pub struct RedisBackend {
    link: Link,
    prefix: String,
    /// How long a reply may take (`WAIT` for replicas gets half of it).
    response_timeout: Duration,
    /// Whether a release of a shared key hands it to the waiters at the head of its line.
    /// Not on Redlock's masters: each keeps a line of its own, and could hand the key to
    /// another waiter.
    hands_over: bool,
    caller: Caller,
}

/// How a backend reaches Redis.
#[expect(
    clippy::large_enum_variant,
    reason = "one per backend, made once and never moved"
)]
enum Link {
    /// One server: connections settled after lost replies, and a subscription connection.
    Server {
        connection: Connection,
        notifier: Notifier,
    },
    /// A Redis Cluster, through redis-rs's cluster client.
    Cluster(ClusterLink),
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: show only where the server is.
        f.debug_struct("RedisBackend")
            .field("addr", &self.addr())
            .field("prefix", &self.prefix)
            .finish()
    }
}

// Connecting, and checking the server.
impl RedisBackend {
    /// Opens a connection to `url` (`redis://` or `rediss://`) and checks it with `PING`.
    pub async fn connect(url: &str, settings: RedisSettings) -> Result<Self, LockError> {
        RedisBackend::from_client(open(url, None)?, settings).await
    }

    /// A backend over a `redis::Client` built by the caller (custom TLS settings, for
    /// instance), checked with `PING`.
    pub async fn from_client(client: Client, settings: RedisSettings) -> Result<Self, LockError> {
        let backend = RedisBackend::unchecked(Server::Fixed(Box::new(client)), settings)?;
        backend.check_reachable().await?;
        Ok(backend)
    }

    /// A backend on the master of `service`, as the Sentinels of `sentinels` name it when
    /// a connection opens: after a failover, the next connection reaches the new master.
    /// Checked with `PING`. The master is reached with the `SentinelNodeConnectionInfo`
    /// (credentials, TLS) that `sentinels` was built with.
    pub async fn sentinel(
        sentinels: SentinelClient,
        service: &str,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let server = Server::sentinel(sentinels, service, settings.timeouts.connect);
        let backend = RedisBackend::unchecked(server, settings)?;
        backend.check_reachable().await?;
        Ok(backend)
    }

    /// A backend on the Redis Cluster that `urls` (some of its nodes) belong to; MOVED, ASK,
    /// resharding and failover are followed by redis-rs's cluster client. Checked with
    /// `PING` on every master.
    pub async fn cluster(urls: &[String], settings: RedisSettings) -> Result<Self, LockError> {
        layout::check_prefix(&settings.prefix)?;
        if urls.iter().any(|url| url.starts_with("rediss://")) {
            check_tls_ready()?;
        }
        let link =
            ClusterLink::connect(urls, settings.timeouts.connect, settings.timeouts.response)
                .await
                .map_err(|e| backend_error(None, "cannot connect to the Redis Cluster", e))?;
        let backend = RedisBackend {
            link: Link::Cluster(link),
            prefix: settings.prefix,
            response_timeout: settings.timeouts.response,
            hands_over: true,
            caller: Caller::new(),
        };
        backend.check_reachable().await?;
        Ok(backend)
    }

    /// A backend on `server` that has not talked to it yet (it connects on first use).
    fn unchecked(server: Server, settings: RedisSettings) -> Result<Self, LockError> {
        let RedisSettings { prefix, timeouts } = settings;
        layout::check_prefix(&prefix)?;
        let response_timeout = timeouts.response;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(response_timeout));
        Ok(RedisBackend {
            link: Link::Server {
                notifier: Notifier::new(server.clone(), response_timeout),
                connection: Connection::new(server, config),
            },
            prefix,
            response_timeout,
            hands_over: true,
            caller: Caller::new(),
        })
    }

    /// One of Redlock's masters: a backend on the one server of `client` that has not talked
    /// to it yet, and whose releases never hand a shared key over (they only announce it).
    pub(crate) fn redlock_master(
        client: Client,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let master = RedisBackend::unchecked(Server::Fixed(Box::new(client)), settings)?;
        Ok(RedisBackend {
            hands_over: false,
            ..master
        })
    }

    /// Where the server is, without credentials.
    pub(crate) fn addr(&self) -> String {
        match &self.link {
            Link::Server { connection, .. } => connection.addr(),
            Link::Cluster(cluster) => cluster.describe(),
        }
    }

    /// Checks the server with `PING`.
    pub(crate) async fn check_reachable(&self) -> Result<(), LockError> {
        self.ping().await.map_err(|e| {
            backend_error(
                None,
                &format!("cannot connect to Redis at {}", self.addr()),
                e,
            )
        })?;
        self.check_not_a_cluster_node().await
    }

    /// Refuses a node of a Redis Cluster of several nodes reached as one server: it answers
    /// `MOVED` for every key outside its own slots, and an operator's listing would silently
    /// show a part. A one-node cluster serves every slot, as a server does. A server that
    /// hides `INFO` or `CLUSTER INFO` passes.
    async fn check_not_a_cluster_node(&self) -> Result<(), LockError> {
        let Link::Server { connection, .. } = &self.link else {
            return Ok(());
        };
        let Ok(live) = connection.get(Route::here()).await else {
            return Ok(());
        };
        let field = |info: &str, name: &str| -> Option<u64> {
            info.lines()
                .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.parse().ok())
        };
        let info: Result<String, _> = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut live.connection())
            .await;
        if info.ok().and_then(|info| field(&info, "cluster_enabled")) != Some(1) {
            return Ok(());
        }
        let cluster: Result<String, _> = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut live.connection())
            .await;
        let nodes = cluster
            .ok()
            .and_then(|info| field(&info, "cluster_known_nodes"));
        if nodes.is_some_and(|nodes| nodes > 1) {
            return Err(LockError::invalid_config(format!(
                "the server at {} is a node of a Redis Cluster: connect with \
                 `LockClient::cluster(urls)` (the `fencelock` command: `--cluster`), or keys \
                 outside its slots fail with MOVED",
                self.addr()
            )));
        }
        Ok(())
    }

    /// Refuses a server whose `maxmemory-policy` may evict keys: every policy but
    /// `noeviction` can delete a held lock under memory pressure (the `volatile-*` ones pick
    /// exactly the keys with a TTL, i.e. locks). A server that hides its configuration
    /// (`CONFIG` renamed or not allowed) passes.
    pub async fn check_eviction_policy(&self) -> Result<(), LockError> {
        let mut config = redis::cmd("CONFIG");
        config.arg("GET").arg("maxmemory-policy");
        let reply: Result<Value, _> = match &self.link {
            Link::Server { connection, .. } => {
                let live = connection
                    .get(Route::here())
                    .await
                    .map_err(|e| backend_error(None, "cannot connect to Redis", e))?;
                config.query_async(&mut live.connection()).await
            }
            Link::Cluster(cluster) => {
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                let every_master =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                cluster.commands().route_command(config, every_master).await
            }
        };
        let policies = reply
            .map(|reply| eviction_policies(&reply))
            .unwrap_or_default();
        match policies.iter().find(|policy| *policy != "noeviction") {
            Some(policy) => Err(LockError::invalid_config(format!(
                "the server's maxmemory-policy is {policy}: under memory pressure it can evict \
                 held locks; set `maxmemory-policy noeviction` (or use a separate Redis for \
                 locks), or accept the risk with `RedisClientBuilder::allow_eviction(true)`"
            ))),
            None => Ok(()),
        }
    }

    async fn ping(&self) -> Result<(), RedisError> {
        let connection = match &self.link {
            Link::Server { connection, .. } => connection,
            // Routed to every master by the cluster client.
            Link::Cluster(cluster) => {
                return redis::cmd("PING")
                    .query_async::<Value>(&mut cluster.commands())
                    .await
                    .map(drop);
            }
        };
        let live = connection.get(Route::here()).await?;
        let result = redis::cmd("PING")
            .query_async::<()>(&mut live.connection())
            .await;
        if let Err(e) = &result {
            connection.note_error(&live, e);
        }
        result
    }
}

impl RedisBackend {
    fn lock_key(&self, key: &str) -> String {
        layout::lock_key(&self.prefix, key)
    }
}

// Running scripts.
impl RedisBackend {
    /// Runs `script` once. A reply that does not come (a broken connection, a timeout) is an
    /// error; on one server the connection is then given up and closed on the server before
    /// the next command, so the script either ran before that command or never will. On a
    /// cluster it is not (the cluster client keeps its connections, and resends after an I/O
    /// error itself): every script is owner-checked and safe to run twice, but one delivered
    /// late can still take a key, or extend or queue for it, after the client gave up on it.
    /// The cluster client's own resends stop at the response timeout (it drops a request
    /// nobody waits for): a release it sent again itself, which this client would not know
    /// of, still reaches the server while the release's memory lasts.
    async fn run(
        &self,
        script: &LockScript,
        keys: &[String],
        args: &[&str],
        key: &str,
    ) -> Result<Value, LockError> {
        let connection = match &self.link {
            Link::Server { connection, .. } => connection,
            Link::Cluster(cluster) => {
                let mut commands = cluster.commands();
                let invoked = self.caller.call(script, keys, args, &mut commands);
                return match tokio::time::timeout(self.response_timeout, invoked).await {
                    Ok(replied) => replied
                        .map_err(|error| backend_error(Some(key), "Redis command failed", error)),
                    Err(_) => Err(LockError::backend(
                        Some(key),
                        format!(
                            "Redis Cluster did not answer within the response timeout ({} ms)",
                            self.response_timeout.as_millis()
                        ),
                        None,
                    )),
                };
            }
        };
        let live = connection
            .get(Route::here())
            .await
            .map_err(|e| backend_error(Some(key), "cannot connect to Redis", e))?;
        self.run_on(connection, &live, script, keys, args, key)
            .await
    }

    /// Runs `script` once on `live`, one of `connection`'s.
    async fn run_on(
        &self,
        connection: &Connection,
        live: &Live,
        script: &LockScript,
        keys: &[String],
        args: &[&str],
        key: &str,
    ) -> Result<Value, LockError> {
        let result = self
            .caller
            .call(script, keys, args, &mut live.connection())
            .await;
        result.map_err(|error| {
            connection.note_error(live, &error);
            backend_error(Some(key), "Redis command failed", error)
        })
    }
}

/// What Redlock's client fixes for one attempt on every master, so that masters in the same
/// state grant alike.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Proposal {
    /// The least token to grant (the client's clock), in place of the server clock; `None`
    /// off Redlock.
    pub(crate) floor: Option<u64>,
    /// Where the search for a free permit or shard starts.
    pub(crate) start: u32,
}

// Acquire.
impl RedisBackend {
    /// One acquire attempt as `proposal` says (Redlock's client gives every master the same
    /// one, and groups the masters by the permit or shard each granted).
    pub(crate) async fn acquire_as_proposed(
        &self,
        lease: &Lease,
        turn: Turn,
        proposal: Proposal,
    ) -> Result<Acquire, LockError> {
        let lock_key = self.lock_key(&lease.key);
        let ttl_ms = lease.ttl.as_millis().to_string();
        let place_ms = turn
            .place()
            .map_or(0, |place| place.as_millis().max(1))
            .to_string();
        let fair = if matches!(turn, Turn::Fair(_)) {
            "1"
        } else {
            "0"
        };
        let replicated = if lease.replicas > 0 { "1" } else { "0" };
        let floor = proposal
            .floor
            .map(|token| token.to_string())
            .unwrap_or_default();
        let (kind, count) = script_kind(lease.kind);
        let (count, start) = (count.to_string(), proposal.start.to_string());
        let mut args = vec![
            lease.owner.as_str(),
            &ttl_ms,
            &place_ms,
            fair,
            replicated,
            &floor,
        ];
        let (script, keys) = if lease.kind.is_shared() {
            args.extend([kind, &count, &start]);
            let leases_key = layout::leases_key(&lock_key);
            let exhausted_key = layout::exhausted_key(&lock_key);
            let mut keys = layout::lock_keys(lock_key).to_vec();
            keys.extend([leases_key, exhausted_key]);
            (&LIBRARY.shared_acquire, keys)
        } else {
            let fence_key = layout::fence_key(&lock_key);
            let mut keys = layout::mutex_keys(lock_key).to_vec();
            keys.push(fence_key);
            (&LIBRARY.acquire, keys)
        };
        if lease.replicas == 0 {
            let reply = self.run(script, &keys, &args, &lease.key).await?;
            return parse_acquire(lease, &reply);
        }
        let Link::Server { connection, .. } = &self.link else {
            return Err(LockError::invalid_config(
                "`min_replicas` is not offered on a Redis Cluster (`WAIT` would hold up the \
                 node's shared connection): remove it there",
            ));
        };
        let lent = connection
            .exclusive()
            .await
            .map_err(|e| backend_error(Some(&lease.key), "cannot connect to Redis", e))?;
        let reply = self
            .run_on(connection, lent.live(), script, &keys, &args, &lease.key)
            .await?;
        let acquired = parse_acquire(lease, &reply)?;
        if let Acquire::Granted { .. } = acquired {
            self.confirm_replicated(connection, lent.live(), lease)
                .await?;
        }
        lent.give_back();
        Ok(acquired)
    }

    /// `WAIT`s, on the connection that sent the grant, until `lease.replicas` replicas have
    /// it, for at most half the response timeout; if fewer acknowledge it, takes the grant
    /// back (on the same connection) and says so.
    async fn confirm_replicated(
        &self,
        connection: &Connection,
        live: &Live,
        lease: &Lease,
    ) -> Result<(), LockError> {
        let wait_ms = (self.response_timeout / 2).as_millis().max(1) as u64;
        let acknowledged: Result<u32, RedisError> = redis::cmd("WAIT")
            .arg(lease.replicas)
            .arg(wait_ms)
            .query_async(&mut live.connection())
            .await;
        let acknowledged = acknowledged.map_err(|error| {
            connection.note_error(live, &error);
            backend_error(Some(&lease.key), "Redis WAIT failed", error)
        })?;
        if acknowledged >= lease.replicas {
            return Ok(());
        }
        // Silently: the grant never counted, so nobody is told of a release, and no release
        // is remembered for the owner (a later grant of the same request must not pass for
        // released when it is lost).
        let (keys, args) = self.give_back_call(lease);
        self.run_on(
            connection,
            live,
            &LIBRARY.give_back,
            &keys,
            &args.each_ref().map(String::as_str),
            &lease.key,
        )
        .await?;
        Err(LockError::backend(
            Some(&lease.key),
            format!(
                "the grant reached {acknowledged} of the {} replicas `min_replicas` asks for \
                 within {wait_ms} ms, so it was taken back; check the replicas and their links \
                 to the master, or lower `min_replicas`",
                lease.replicas
            ),
            None,
        ))
    }
}

// Renewal: extends batched into script calls and pipelines.
impl RedisBackend {
    /// One pipeline of extend script calls.
    async fn extend_pipeline(
        &self,
        connection: &Connection,
        calls: &[&[HeldLease]],
    ) -> Result<Vec<Vec<i64>>, RedisError> {
        let mut pipeline = redis::pipe();
        for call in calls {
            pipeline.invoke_script(&self.extend_invocation(call.iter()));
        }
        let live = connection.get(Route::here()).await?;
        let result = query_loading_extend(&pipeline, &mut live.connection()).await;
        if let Err(error) = &result {
            connection.note_error(&live, error);
        }
        result
    }

    /// One extend script call for `held` (keys of one slot on a cluster).
    fn extend_invocation<'a>(
        &self,
        held: impl Iterator<Item = &'a HeldLease>,
    ) -> redis::ScriptInvocation<'static> {
        let mut invocation = EXTEND.prepare_invoke();
        for held in held {
            let lock_key = self.lock_key(&held.lease.key);
            let shared = held.lease.kind.is_shared();
            let leases_key = shared.then(|| layout::leases_key(&lock_key));
            invocation.key(lock_key);
            if let Some(leases_key) = leases_key {
                invocation.key(leases_key);
            }
            invocation
                .arg(&held.lease.owner)
                .arg(held.token.to_string())
                .arg(held.lease.ttl.as_millis().to_string())
                .arg(if shared { "2" } else { "1" })
                .arg(held.slot.map(|slot| slot.to_string()).unwrap_or_default());
        }
        invocation
    }

    /// Extends every grant in `held` on a cluster: script calls by slot, one pipeline per
    /// slot, all at once.
    async fn extend_on_cluster(
        &self,
        cluster: &ClusterLink,
        held: &[HeldLease],
    ) -> Result<Vec<Extended>, LockError> {
        let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
        for (index, lease) in held.iter().enumerate() {
            let slot = cluster::slot(&self.lock_key(&lease.lease.key));
            by_slot.entry(slot).or_default().push(index);
        }
        let mut calls = Vec::new();
        let mut order = Vec::new();
        for (slot, indices) in by_slot {
            for chunk in indices.chunks(EXTEND_KEYS_PER_CALL) {
                let invocation = self.extend_invocation(chunk.iter().map(|&i| &held[i]));
                calls.push(ExtendCall { slot, invocation });
                order.push(chunk.to_vec());
            }
        }
        let replies = cluster
            .extend(calls)
            .await
            .map_err(|error| backend_error(None, "renewing leases failed", error))?;
        let mut extended = vec![Extended::Lost; held.len()];
        for (chunk, reply) in order.iter().zip(replies) {
            for (&index, answer) in chunk.iter().zip(reply) {
                extended[index] = Extended::found(answer == 1);
            }
        }
        Ok(extended)
    }
}

// Redlock's write-back of the fencing token chosen across masters.
impl RedisBackend {
    /// Makes `lease`'s grant (a mutex's key, or a shared kind's grant in its hash), which this
    /// server gave with the fencing token `granted`, carry `chosen` instead, and raises the
    /// fencing counter to at least `chosen`; `false` when the grant is gone.
    pub(crate) async fn raise_token(
        &self,
        lease: &Lease,
        granted: u64,
        chosen: u64,
    ) -> Result<bool, LockError> {
        let lock_key = self.lock_key(&lease.key);
        let fence_key = layout::fence_key(&lock_key);
        let leases_key = layout::leases_key(&lock_key);
        let keys = [lock_key, fence_key, leases_key];
        let args = [
            lease.owner.as_str(),
            &granted.to_string(),
            &chosen.to_string(),
        ];
        let reply = self.run(&LIBRARY.raise, &keys, &args, &lease.key).await?;
        match integer(&reply) {
            Some(raised @ (0 | 1)) => Ok(raised == 1),
            _ => Err(unexpected(&lease.key, "raise", &reply)),
        }
    }
}

// Release.
impl RedisBackend {
    /// The keys and arguments of the release script of `lease`'s kind, keeping the key (or
    /// the shared grant) `min_hold`.
    fn release_call(
        &self,
        lease: &Lease,
        token: Option<u64>,
        min_hold: Duration,
    ) -> (Vec<String>, Vec<String>) {
        let lock_key = self.lock_key(&lease.key);
        let channel = layout::release_channel(&lock_key);
        let mut args = vec![
            lease.owner.clone(),
            min_hold.as_millis().to_string(),
            channel,
            lease.ttl.as_millis().to_string(),
            self.publish_command().to_owned(),
        ];
        let memory_ms = release_memory(self.response_timeout)
            .as_millis()
            .to_string();
        if !lease.kind.is_shared() {
            args.extend([memory_ms, token.map(|t| t.to_string()).unwrap_or_default()]);
            return (layout::mutex_keys(lock_key).to_vec(), args);
        }
        let memory_key = layout::release_memory_key(&lock_key, &lease.owner);
        let leases_key = layout::leases_key(&lock_key);
        let exhausted_key = layout::exhausted_key(&lock_key);
        let [lock_key, fence_key, queue_key, deadlines_key] = layout::lock_keys(lock_key);
        let (kind, count) = script_kind(lease.kind);
        let hand_over = if self.hands_over { "1" } else { "0" };
        args.extend([
            kind.to_owned(),
            count.to_string(),
            hand_over.to_owned(),
            memory_ms,
        ]);
        let keys = vec![
            lock_key,
            fence_key,
            queue_key,
            deadlines_key,
            memory_key,
            leases_key,
            exhausted_key,
        ];
        (keys, args)
    }

    /// Deletes (or, with `min_hold`, shortens) `lease`'s grant if it is still the owner's;
    /// `token`, the grant's fencing token where the caller knows it, lets a resend recognise
    /// its release after other grants (see `lua/mutex.lua`).
    pub(crate) async fn release_of(
        &self,
        lease: &Lease,
        token: Option<u64>,
        min_hold: Duration,
    ) -> Result<Release, LockError> {
        let (keys, args) = self.release_call(lease, token, min_hold);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let script = if lease.kind.is_shared() {
            &LIBRARY.shared_release
        } else {
            &LIBRARY.release
        };
        let reply = self.run(script, &keys, &args, &lease.key).await?;
        match integer(&reply) {
            Some(1) => Ok(Release::Released),
            Some(0 | -1) => Ok(Release::NotOwner),
            _ => Err(unexpected(&lease.key, "release", &reply)),
        }
    }

    /// How the scripts announce a release: on a cluster, on its shard only.
    fn publish_command(&self) -> &'static str {
        match self.link {
            Link::Server { .. } => "PUBLISH",
            Link::Cluster(_) => "SPUBLISH",
        }
    }
}

// Redlock's silent give-back of a grant that formed no majority.
impl RedisBackend {
    /// Deletes any grant of `lease.owner` on this server (a mutex's key, or the owner's grant
    /// in a shared kind's hash) without announcing it; `true` if there was one.
    pub(crate) async fn give_back(&self, lease: &Lease) -> Result<bool, LockError> {
        let (keys, args) = self.give_back_call(lease);
        let args = args.each_ref().map(String::as_str);
        let reply = self
            .run(&LIBRARY.give_back, &keys, &args, &lease.key)
            .await?;
        match integer(&reply) {
            Some(deleted @ (0 | 1)) => Ok(deleted == 1),
            _ => Err(unexpected(&lease.key, "give-back", &reply)),
        }
    }

    /// The keys and arguments of the give-back script: the lock key and a shared kind's
    /// leases; the owner, and how long a mutex's tombstone lasts.
    fn give_back_call(&self, lease: &Lease) -> ([String; 2], [String; 2]) {
        let lock_key = self.lock_key(&lease.key);
        let leases_key = layout::leases_key(&lock_key);
        let memory_ms = release_memory(self.response_timeout).as_millis();
        (
            [lock_key, leases_key],
            [lease.owner.clone(), memory_ms.to_string()],
        )
    }
}

/// Opens a client for `url`; for `rediss://`, trusting `tls_root` (PEM) instead of the
/// system's roots when given.
pub(crate) fn open(url: &str, tls_root: Option<Vec<u8>>) -> Result<Client, LockError> {
    let bad_url = |e: RedisError| {
        LockError::invalid_config(format!(
            "cannot use Redis URL: {e}; expected redis://[user:password@]host[:port][/db] \
             or rediss://..."
        ))
    };
    if !url.starts_with("rediss://") {
        return Client::open(url).map_err(bad_url);
    }
    check_tls_ready()?;
    #[cfg(feature = "tls-rustls")]
    if let Some(root_cert) = tls_root {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        };
        return Client::build_with_tls(url, certificates).map_err(bad_url);
    }
    #[cfg(not(feature = "tls-rustls"))]
    let _ = tls_root;
    Client::open(url).map_err(bad_url)
}

/// A `rediss://` URL needs the `tls-rustls` feature, and rustls needs a process-wide crypto
/// provider: without one it panics on the first handshake, so say so here instead.
fn check_tls_ready() -> Result<(), LockError> {
    #[cfg(feature = "tls-rustls")]
    {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(LockError::invalid_config(
                "a rediss:// URL needs a rustls crypto provider: call \
                 `rustls::crypto::aws_lc_rs::default_provider().install_default()` (or the \
                 ring provider) once at start-up",
            ));
        }
        Ok(())
    }
    #[cfg(not(feature = "tls-rustls"))]
    Err(LockError::invalid_config(
        "a rediss:// URL needs TLS: enable the `tls-rustls` feature of fencelock",
    ))
}

/// Sends a pipeline of extend calls; after `NOSCRIPT` (pipelines do not load scripts, e.g.
/// after a `SCRIPT FLUSH`) loads the script (on a cluster: on every node) and sends it again.
async fn query_loading_extend(
    pipeline: &redis::Pipeline,
    connection: &mut impl redis::aio::ConnectionLike,
) -> Result<Vec<Vec<i64>>, RedisError> {
    let result = pipeline.query_async(connection).await;
    if matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
        EXTEND.load_async(connection).await?;
        return pipeline.query_async(connection).await;
    }
    result
}

/// A script call with these keys and arguments.
fn invocation<'a>(
    script: &'a Script,
    keys: &[String],
    args: &[&str],
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for k in keys {
        invocation.key(k);
    }
    for a in args {
        invocation.arg(*a);
    }
    invocation
}

/// The values of `maxmemory-policy` in a `CONFIG GET` reply: one server's, or every node's
/// (nested as the cluster client gathers them).
fn eviction_policies(reply: &Value) -> Vec<String> {
    match reply {
        Value::Array(items) => {
            let mut found = Vec::new();
            let mut items = items.iter();
            while let Some(item) = items.next() {
                if text(item).as_deref() == Some("maxmemory-policy") {
                    found.extend(items.next().and_then(text));
                } else {
                    found.extend(eviction_policies(item));
                }
            }
            found
        }
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(name, value)| match text(name).as_deref() {
                Some("maxmemory-policy") => text(value).into_iter().collect(),
                _ => eviction_policies(value),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A backend error saying what failed (`context`), with the Redis error as its source.
fn backend_error(key: Option<&str>, context: &str, error: RedisError) -> LockError {
    LockError::backend(key, context, Some(Arc::new(error)))
}

fn unexpected(key: &str, what: &str, reply: &Value) -> LockError {
    LockError::backend(
        Some(key),
        format!("unexpected reply from the {what} script: {reply:?}"),
        None,
    )
}

/// The text of a string reply.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

/// What an acquire script replied: a grant names its permit or shard for the kinds that have
/// one.
fn parse_acquire(lease: &Lease, reply: &Value) -> Result<Acquire, LockError> {
    let key = lease.key.as_str();
    let Value::Array(items) = reply else {
        return Err(unexpected(key, "acquire", reply));
    };
    if let [status, Value::BulkString(why)] = items.as_slice()
        && integer(status) == Some(2)
    {
        return Err(LockError::key_in_use(key, String::from_utf8_lossy(why)));
    }
    if let [status] = items.as_slice()
        && integer(status) == Some(3)
    {
        return Err(LockError::exhausted(key, None));
    }
    let numbers: Option<Vec<i64>> = items.iter().map(integer).collect();
    let granted = |token: i64, slot: Option<u32>| Acquire::Granted {
        token: token as u64,
        slot: slot.and_then(|slot| slot_of(lease.kind, slot)),
    };
    match numbers.as_deref() {
        Some(&[1, token]) if token > 0 => Ok(granted(token, None)),
        Some(&[1, token, slot]) if token > 0 => match u32::try_from(slot) {
            Ok(slot) => Ok(granted(token, Some(slot))),
            Err(_) => Err(unexpected(key, "acquire", reply)),
        },
        Some(&[0, remaining_ms, latest_token]) if latest_token >= 0 => {
            Ok(Acquire::Held {
                // PTTL is -1 for a key without expiry (a foreign value), -2 if it just
                // vanished; -3 is a free key whose turn belongs to an earlier waiter.
                remaining: u64::try_from(remaining_ms).ok().map(Duration::from_millis),
                latest_token: latest_token as u64,
            })
        }
        _ => Err(unexpected(key, "acquire", reply)),
    }
}

// The calls of every lock (see `LockBackend`).
impl AsyncBackend for RedisBackend {
    /// One acquire attempt.
    async fn try_acquire(&self, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        let proposal = Proposal {
            floor: None,
            start: lease.kind.count().map_or(0, random::below),
        };
        self.acquire_as_proposed(lease, turn, proposal).await
    }

    /// A watch of `key`'s release channel.
    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, LockError> {
        let channel = layout::release_channel(&self.lock_key(key));
        match &self.link {
            Link::Server { notifier, .. } => notifier.subscribe(&channel).await,
            Link::Cluster(cluster) => cluster.subscribe(&channel).await,
        }
    }

    fn watch_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        let channel = layout::release_channel(&self.lock_key(key));
        match &self.link {
            Link::Server { notifier, .. } => notifier.watch_if_subscribed(&channel),
            Link::Cluster(cluster) => cluster.watch_if_subscribed(&channel),
        }
    }

    fn offers(&self) -> Capabilities {
        Capabilities::EVERY_KIND
    }

    /// Extends every grant in `held`, in pipelines of script calls.
    async fn extend_grants(&self, held: &[HeldLease]) -> Result<Vec<Extended>, LockError> {
        let connection = match &self.link {
            Link::Server { connection, .. } => connection,
            Link::Cluster(cluster) => return self.extend_on_cluster(cluster, held).await,
        };
        let calls: Vec<&[HeldLease]> = held.chunks(EXTEND_KEYS_PER_CALL).collect();
        let mut extended = Vec::with_capacity(held.len());
        let mut calls_per_pipeline = EXTEND_CALLS_PER_PIPELINE;
        let mut done = 0;
        while done < calls.len() {
            let group = &calls[done..calls.len().min(done + calls_per_pipeline)];
            match self.extend_pipeline(connection, group).await {
                Ok(replies) => {
                    let found = replies.into_iter().flatten();
                    extended.extend(found.map(|reply| Extended::found(reply == 1)));
                    done += group.len();
                }
                // A large pipeline that timed out is split and sent again: every extend
                // is owner-checked, so repeating one is harmless.
                Err(error) if error.is_timeout() && calls_per_pipeline > 1 => {
                    calls_per_pipeline /= 2;
                }
                Err(error) => {
                    return Err(backend_error(None, "renewing leases failed", error));
                }
            }
        }
        Ok(extended)
    }

    /// Deletes (or, with `min_hold`, shortens) `lease`'s grant if it is still the owner's.
    async fn release_grant(&self, lease: &Lease, min_hold: Duration) -> Result<Release, LockError> {
        self.release_of(lease, None, min_hold).await
    }

    async fn release_held_grant(
        &self,
        held: &HeldLease,
        min_hold: Duration,
    ) -> Result<Release, LockError> {
        self.release_of(&held.lease, Some(held.token), min_hold)
            .await
    }

    fn operator_calls(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn result_calls(&self) -> Option<&dyn ResultStore> {
        Some(self)
    }

    fn shard_mark_calls(&self) -> Option<&dyn ShardMarks> {
        Some(self)
    }

    /// `acquire_together.lua`, on one server, or on a cluster when every key is in one slot.
    fn together_call<'a>(&'a self, leases: &'a [Lease]) -> Option<TogetherCall<'a>> {
        let lock_keys: Vec<String> = leases.iter().map(|l| self.lock_key(&l.key)).collect();
        let first = lock_keys.first()?;
        let one_slot = lock_keys
            .iter()
            .all(|k| cluster::slot(k) == cluster::slot(first));
        if !mutexes_alone(leases) || (matches!(self.link, Link::Cluster(_)) && !one_slot) {
            return None;
        }
        Some(Box::pin(async move {
            let keys: Vec<String> = lock_keys.into_iter().flat_map(layout::mutex_keys).collect();
            let ttl_ms = leases[0].ttl.as_millis().to_string();
            let owners = leases.iter().map(|lease| lease.owner.as_str());
            let args: Vec<&str> = std::iter::once(ttl_ms.as_str()).chain(owners).collect();
            let key = &leases[0].key;
            let reply = self
                .run(&LIBRARY.acquire_together, &keys, &args, key)
                .await?;
            parse_together(key, leases.len(), &reply)
        }))
    }
}

/// The tokens of `acquire_together.lua`'s reply for `count` keys, or `None`: not granted.
fn parse_together(key: &str, count: usize, reply: &Value) -> Result<Option<Vec<u64>>, LockError> {
    let unexpected = || unexpected(key, "acquire of several keys", reply);
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    match items.split_first() {
        Some((status, [])) if integer(status) == Some(0) => Ok(None),
        Some((status, tokens)) if integer(status) == Some(1) && tokens.len() == count => {
            let tokens = tokens
                .iter()
                .map(|token| integer(token).and_then(|t| u64::try_from(t).ok()));
            tokens
                .collect::<Option<Vec<u64>>>()
                .map(Some)
                .ok_or_else(unexpected)
        }
        _ => Err(unexpected()),
    }
}

// Exhausted shards (see `ShardMarks`): a set next to the lock key in its slot.
impl AsyncShardMarks for RedisBackend {
    async fn mark(&self, held: &HeldLease) -> Result<bool, LockError> {
        let key = &held.lease.key;
        let lock_key = self.lock_key(key);
        let (leases_key, exhausted_key) = (
            layout::leases_key(&lock_key),
            layout::exhausted_key(&lock_key),
        );
        let keys = [lock_key, leases_key, exhausted_key];
        let (token, shard) = (
            held.token.to_string(),
            held.slot.unwrap_or_default().to_string(),
        );
        let args = [held.lease.owner.as_str(), &token, &shard];
        let reply = self.run(&LIBRARY.shard_mark, &keys, &args, key).await?;
        Ok(marks_count(key, "marking a shard exhausted", &reply)? == 1)
    }

    async fn clear_marks(&self, key: &str, shard: Option<u32>) -> Result<(), LockError> {
        let keys = [layout::exhausted_key(&self.lock_key(key))];
        let shard = shard.map(|shard| shard.to_string()).unwrap_or_default();
        let reply = self
            .run(&LIBRARY.shard_refill, &keys, &[&shard], key)
            .await?;
        marks_count(key, "refilling shards", &reply).map(drop)
    }
}

/// The count a shard marking or refill script replied, or why the set of exhausted shards is
/// not the library's (`{2, why}`).
fn marks_count(key: &str, what: &str, reply: &Value) -> Result<i64, LockError> {
    if let Value::Array(items) = reply
        && let [status, Value::BulkString(why)] = items.as_slice()
        && integer(status) == Some(2)
    {
        return Err(LockError::key_in_use(key, String::from_utf8_lossy(why)));
    }
    integer(reply).ok_or_else(|| unexpected(key, what, reply))
}

// Single-flight values (see `ResultStore`), next to the lock key in its slot.
impl AsyncResults for RedisBackend {
    async fn watch_kept(&self, key: &str) -> Result<Option<ResultChange>, LockError> {
        let releases = self.watch_releases(key).await?;
        Ok(Some(change_at_release(releases)))
    }

    async fn read_kept(&self, key: &str) -> Result<Option<SharedResult>, LockError> {
        let result_key = layout::result_key(&self.lock_key(key));
        let reply = self
            .run(&LIBRARY.result_read, &[result_key], &[], key)
            .await?;
        let kept = match &reply {
            Value::Nil => return Ok(None),
            Value::BulkString(kept) => kept,
            Value::Array(items) if items.len() == 1 && integer(&items[0]) == Some(2) => {
                return Err(foreign_result(key));
            }
            _ => return Err(unexpected(key, "result read", &reply)),
        };
        SharedResult::decode(kept)
            .map(Some)
            .ok_or_else(|| foreign_result(key))
    }

    async fn publish(
        &self,
        key: &str,
        result: &SharedResult,
        keep: Duration,
    ) -> Result<Published, LockError> {
        let lock_key = self.lock_key(key);
        let keys = [lock_key.clone(), layout::result_key(&lock_key)];
        let value = std::str::from_utf8(&result.value).map_err(|_| {
            LockError::invalid_config("a shared value must be UTF-8 text to be kept in Redis")
        })?;
        let (token, keep) = (
            result.token.to_string(),
            keep.as_millis().max(1).to_string(),
        );
        let args = [token.as_str(), value, keep.as_str()];
        let reply = self.run(&LIBRARY.result_publish, &keys, &args, key).await?;
        match integer(&reply) {
            Some(1) => Ok(Published::Kept),
            Some(0) => Ok(Published::NotHeld),
            Some(3) => Ok(Published::LaterKept),
            Some(2) => Err(foreign_result(key)),
            _ => Err(unexpected(key, "result publish", &reply)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WithSources;

    // A Redis error of its own (no source): redis-rs errors that wrap an I/O, server or
    // parse error display that error and also return it as their source, which this
    // library cannot change.
    #[test]
    fn a_backend_error_names_the_redis_error_once_in_its_chain() {
        let redis_error = RedisError::from((ErrorKind::Io, "the wire was cut"));
        let error = backend_error(Some("stock:42"), "Redis command failed", redis_error);
        let chain = WithSources(&error).to_string();
        assert_eq!(chain.matches("the wire was cut").count(), 1, "{chain}");
        assert!(
            chain.starts_with("lock backend failed for lock `stock:42`: Redis command failed: "),
            "{chain}"
        );
    }
}
