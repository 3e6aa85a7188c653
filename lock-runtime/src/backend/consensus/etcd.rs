//! The etcd store of a line: a key per entry, `<prefix>/<key>/<owner>`, attached to the
//! client's lease, ordered by create revision, its state in its value. Every write and delete
//! is a transaction that compares the entry's create revision (and, for a delete of a lapsed
//! entry, its mod revision), so that it touches that entry only.
//!
//! The lease is the session: granted at connect, kept alive by a task of the client every
//! third of its TTL. When etcd ends it (the client was cut off for a TTL), every entry goes
//! with it and the client grants itself a new one.
//!
//! Lost replies: a gRPC call whose reply was lost can still be applied later. A late write
//! or delete compares the create revision, so it changes nothing after the entry is gone;
//! a late enter can leave an entry behind its owner's release, which holds the key no longer
//! than its lease: a waiter that sees it unchanged that long deletes it, and the request's
//! cleanup releases it again after a lost reply.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};

use super::state::{EntryKind, State};
use super::{ConsensusBackend, ConsensusStore, Entry, Kept, key_of, node_name};
use crate::backend::{BoxFuture, Timeouts};
use crate::background::Background;
use crate::instance::InstanceId;
use crate::sync::lock_ignoring_poison;
use crate::{LockClient, LockError};

/// The key prefix of the locks unless one is configured.
pub const DEFAULT_PREFIX: &str = "fencelock";

/// The lease TTL asked of etcd unless one is configured (whole seconds; etcd grants at least
/// its minimum, about 2 s by default).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// How long connecting, and a call, may take unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where an etcd client keeps its locks and how long it waits:
/// [`EtcdClientBuilder::settings`] takes them at once. Start from [`EtcdSettings::default`]
/// and change the fields you need.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdSettings {
    /// The prefix of every lock's keys (default [`DEFAULT_PREFIX`]).
    pub prefix: String,
    /// The TTL of the client's lease (default [`DEFAULT_LEASE_TTL`], whole seconds).
    pub lease_ttl: Duration,
    /// How long connecting may take, and a call waits for its answer (both
    /// [`DEFAULT_TIMEOUT`] by default).
    pub timeouts: Timeouts,
}

impl Default for EtcdSettings {
    fn default() -> Self {
        EtcdSettings {
            prefix: DEFAULT_PREFIX.to_owned(),
            lease_ttl: DEFAULT_LEASE_TTL,
            timeouts: Timeouts::new(DEFAULT_TIMEOUT, DEFAULT_TIMEOUT),
        }
    }
}

/// A builder of an etcd client ([`LockClient::etcd_builder`]): its [`EtcdSettings`], and
/// the user to authenticate as.
#[derive(Clone)]
pub struct EtcdClientBuilder {
    endpoints: Vec<String>,
    settings: EtcdSettings,
    user: Option<(String, String)>,
    instance: Option<String>,
}

// The password stays out of Debug output.
impl std::fmt::Debug for EtcdClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("settings", &self.settings)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .finish()
    }
}

impl EtcdClientBuilder {
    /// Every setting at once (the user apart).
    pub fn settings(mut self, settings: EtcdSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The prefix of every lock's keys (default [`DEFAULT_PREFIX`]): `<prefix>/<key>/<owner>`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }

    /// The TTL of the client's lease (default [`DEFAULT_LEASE_TTL`], whole seconds): a holder
    /// whose client etcd does not hear from for this long loses its locks, and no lease
    /// counts longer.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.settings.lease_ttl = ttl;
        self
    }

    /// How long connecting may take (default [`DEFAULT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.connect = timeout;
        self
    }

    /// How long a call may wait for its answer (default [`DEFAULT_TIMEOUT`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.response = timeout;
        self
    }

    /// Authenticates as `user` (etcd's authentication enabled).
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// The instance this client runs as (see [`OpenBuilder::instance_id`](crate::OpenBuilder::instance_id)).
    pub fn instance_id(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// Connects and grants the client's lease.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let instance = InstanceId::of_setting(self.instance.as_deref())?;
        let prefix = &self.settings.prefix;
        let bad_prefix = prefix.is_empty() || prefix.ends_with('/');
        if bad_prefix || self.endpoints.is_empty() {
            return Err(LockError::invalid_config(format!(
                "an etcd client needs endpoints (e.g. [\"http://127.0.0.1:2379\"]) and a \
                 prefix without a trailing slash (e.g. \"{DEFAULT_PREFIX}\"); got {:?} and {:?}",
                self.endpoints, prefix
            )));
        }
        let background = Background::Driver;
        let builder = self.clone();
        let connecting = background.spawn(async move { builder.client().await })?;
        let connect_timeout = self.settings.timeouts.connect;
        let client = match tokio::time::timeout(connect_timeout * 2, connecting).await {
            Ok(Ok(client)) => client?,
            Ok(Err(_)) | Err(_) => return Err(self.connect_error(None)),
        };
        let store = EtcdStore {
            session: Mutex::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
            sessions: AtomicU64::new(0),
            builder: self,
            client,
            background: background.clone(),
        };
        store.session().await?;
        let backend = ConsensusBackend::new(store, background.clone());
        Ok(LockClient::with_background(
            Arc::new(backend),
            background,
            true,
            instance,
        ))
    }

    async fn client(&self) -> Result<Client, LockError> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.settings.timeouts.connect)
            .with_timeout(self.settings.timeouts.response)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        let connected = Client::connect(&self.endpoints, Some(options)).await;
        let mut client = connected.map_err(|error| self.connect_error(Some(error)))?;
        // A connect that reaches nothing still succeeds: the first call tells.
        client
            .status()
            .await
            .map_err(|error| self.connect_error(Some(error)))?;
        Ok(client)
    }

    fn connect_error(&self, error: Option<etcd_client::Error>) -> LockError {
        let cause = error.as_ref().map_or_else(
            || "no answer within the connect timeout".to_owned(),
            ToString::to_string,
        );
        LockError::backend(
            None,
            format!(
                "cannot connect to etcd at {} ({cause}): check the endpoints \
                 (http://host:2379), the user and password, and that the cluster is up",
                self.endpoints.join(",")
            ),
            error.map(|e| Arc::new(e) as _),
        )
    }
}

impl LockClient {
    /// Connects to the etcd cluster at `endpoints` (`http://host:2379` each: a slice, an
    /// array, a `Vec` or any iterator of them, as [`LockClient::redlock`] takes its URLs) with
    /// the defaults of [`LockClient::etcd_builder`].
    pub async fn etcd(
        endpoints: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<LockClient, LockError> {
        LockClient::etcd_builder(endpoints).connect().await
    }

    /// A builder of an etcd client: key prefix, lease TTL, timeouts, user.
    pub fn etcd_builder(endpoints: impl IntoIterator<Item = impl AsRef<str>>) -> EtcdClientBuilder {
        EtcdClientBuilder {
            endpoints: endpoints
                .into_iter()
                .map(|e| e.as_ref().to_owned())
                .collect(),
            settings: EtcdSettings::default(),
            user: None,
            instance: None,
        }
    }
}

/// The client's lease, while etcd keeps it.
#[derive(Debug)]
struct Session {
    lease: i64,
    ttl: Duration,
    count: u64,
    alive: AtomicBool,
    /// The keep-alive stream, opened on first use and again after it broke.
    keeper: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

impl Session {
    /// Restarts the lease's TTL; whether etcd still had it. A lease etcd no longer has is
    /// marked ended.
    async fn keep(&self, client: &Client) -> Result<bool, etcd_client::Error> {
        let mut keeper = self.keeper.lock().await;
        // Out of the slot while a keep-alive is on its way: a caller that stops waiting drops
        // the stream with it, so that no later keep-alive reads this one's answer.
        let (mut sender, mut answers) = match keeper.take() {
            Some(stream) => stream,
            None => client.clone().lease_keep_alive(self.lease).await?,
        };
        sender.keep_alive().await?;
        let answer = answers.message().await?.ok_or_else(|| {
            etcd_client::Error::LeaseKeepAliveError("the keep-alive stream ended".into())
        })?;
        *keeper = Some((sender, answers));
        let alive = answer.ttl() > 0;
        if !alive {
            self.alive.store(false, Ordering::Release);
        }
        Ok(alive)
    }
}

/// The etcd side of a [`ConsensusBackend`].
pub(crate) struct EtcdStore {
    builder: EtcdClientBuilder,
    client: Client,
    session: Mutex<Option<Arc<Session>>>,
    /// Held while a new lease is granted after the last one ended.
    reconnecting: tokio::sync::Mutex<()>,
    sessions: AtomicU64,
    background: Background,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.builder.endpoints)
            .field("prefix", &self.builder.settings.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Frees every lock of the client at once rather than after the lease's TTL.
        if let Some(session) = lock_ignoring_poison(&self.session).take() {
            let mut client = self.client.clone();
            let _ = self.background.spawn(async move {
                let _ = client.lease_revoke(session.lease).await;
            });
        }
    }
}

impl EtcdStore {
    fn current(&self) -> Option<Arc<Session>> {
        let session = lock_ignoring_poison(&self.session).clone();
        session.filter(|s| s.alive.load(Ordering::Acquire))
    }

    /// The live lease, or a new one if it ended (its entries are gone with it).
    async fn session(&self) -> Result<Arc<Session>, LockError> {
        if let Some(session) = self.current() {
            return Ok(session);
        }
        let _reconnecting = self.reconnecting.lock().await;
        if let Some(session) = self.current() {
            return Ok(session);
        }
        let ended = lock_ignoring_poison(&self.session).is_some();
        if ended {
            tracing::warn!(target: "fencelock", endpoints = ?self.builder.endpoints, "the etcd lease ended, and with it every lock it held; granting a new one");
        }
        let ttl =
            i64::try_from(self.builder.settings.lease_ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let mut client = self.client.clone();
        let granted = client.lease_grant(ttl, None).await;
        let granted = granted.map_err(|error| self.error(None, "cannot grant a lease", error))?;
        let session = Arc::new(Session {
            lease: granted.id(),
            ttl: Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(1)),
            count: self.sessions.fetch_add(1, Ordering::Relaxed) + 1,
            alive: AtomicBool::new(true),
            keeper: tokio::sync::Mutex::new(None),
        });
        let keeping = keep_alive(self.client.clone(), Arc::downgrade(&session));
        self.background.spawn(keeping)?;
        *lock_ignoring_poison(&self.session) = Some(session.clone());
        Ok(session)
    }

    fn error(&self, key: Option<&str>, what: &str, error: etcd_client::Error) -> LockError {
        LockError::backend(
            key,
            format!("etcd at {}: {what}", self.builder.endpoints.join(",")),
            Some(Arc::new(error)),
        )
    }

    fn directory(&self, key: &str) -> String {
        format!("{}/{}/", self.builder.settings.prefix, node_name(key))
    }

    /// The key of `key`'s single-flight value, beside its line's directory: without a `/`
    /// after the key's name, listing skips it.
    fn result_key(&self, key: &str) -> String {
        format!("{}/{}%result", self.builder.settings.prefix, node_name(key))
    }

    /// The key of `key`'s exhausted shards, beside its line as [`result_key`](Self::result_key)'s.
    fn marks_key(&self, key: &str) -> String {
        format!(
            "{}/{}%exhausted",
            self.builder.settings.prefix,
            node_name(key)
        )
    }

    /// The value and version of `id`, a key beside `key`'s line; `None` if missing.
    async fn read_beside(&self, key: &str, id: String, what: &str) -> Result<Kept, LockError> {
        let mut client = self.client.clone();
        let read = client.get(id, None).await;
        let read = read.map_err(|error| self.error(Some(key), what, error))?;
        Ok(read
            .kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
    }

    fn entry(&self, kv: &etcd_client::KeyValue, directory: &str, session: u64) -> Option<Entry> {
        let owner = kv.key_str().ok()?.strip_prefix(directory)?;
        let id = kv.key_str().ok()?.to_owned();
        let (kind, state) = State::decode(kv.value());
        Some(Entry {
            owner: owner.to_owned(),
            id,
            order: u64::try_from(kv.create_revision()).ok()?,
            token: u64::try_from(kv.create_revision()).ok()?,
            version: kv.mod_revision(),
            kind,
            state,
            session,
        })
    }

    /// Runs `txn` on the entry; whether its comparisons held, and the revision it made.
    async fn transact(&self, key: &str, what: &str, txn: Txn) -> Result<(bool, i64), LockError> {
        let mut client = self.client.clone();
        let response = client.txn(txn).await;
        let response = response.map_err(|error| self.error(Some(key), what, error))?;
        let revision = response.header().map_or(0, |header| header.revision());
        Ok((response.succeeded(), revision))
    }
}

/// The comparisons that `entry` is still there (not another of the same owner), and at
/// `version` if given.
fn still(entry: &Entry, version: Option<i64>) -> Vec<Compare> {
    let token = i64::try_from(entry.token).unwrap_or(i64::MAX);
    let created = Compare::create_revision(entry.id.clone(), CompareOp::Equal, token);
    let modified = version.map(|v| Compare::mod_revision(entry.id.clone(), CompareOp::Equal, v));
    std::iter::once(created).chain(modified).collect()
}

/// The comparison that `id` is at `version` (`None`: that it is missing).
fn at_version(id: &str, version: Option<i64>) -> Compare {
    match version {
        Some(version) => Compare::mod_revision(id.to_owned(), CompareOp::Equal, version),
        None => Compare::create_revision(id.to_owned(), CompareOp::Equal, 0),
    }
}

/// Keeps `session`'s lease alive every third of its TTL until the client drops it; marks it
/// ended when etcd says it is gone or no keep-alive got through for a TTL.
async fn keep_alive(client: Client, session: Weak<Session>) {
    let Some(ttl) = session.upgrade().map(|s| s.ttl) else {
        return;
    };
    let mut last_kept = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(ttl / 3).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        let sent_at = tokio::time::Instant::now();
        match tokio::time::timeout(ttl / 3, session.keep(&client)).await {
            Ok(Ok(true)) => last_kept = sent_at,
            Ok(Ok(false)) => return,
            Ok(Err(_)) | Err(_) if last_kept.elapsed() >= ttl => {
                session.alive.store(false, Ordering::Release);
                return;
            }
            Ok(Err(_)) | Err(_) => {}
        }
    }
}

impl EtcdStore {
    /// A future that completes at the first change of `id` (`what`, for messages) as
    /// `options` watch it, once etcd confirmed the watch; `None` when etcd cancelled it at
    /// once (the revision to start from was compacted away).
    async fn watch_from(
        &self,
        key: &str,
        id: &str,
        options: WatchOptions,
        what: &str,
    ) -> Result<Option<BoxFuture<'static, ()>>, LockError> {
        let failed = |error| self.error(Some(key), &format!("cannot watch {what}"), error);
        let mut client = self.client.clone();
        let mut stream = client.watch(id, Some(options)).await.map_err(failed)?;
        // The first answer confirms the watch; events (or the stream's end) follow.
        match stream.message().await.map_err(failed)? {
            Some(created) if !created.canceled() && created.events().is_empty() => {
                Ok(Some(Box::pin(changed(stream)) as BoxFuture<'static, ()>))
            }
            Some(created) if created.canceled() && created.compact_revision() == 0 => {
                Err(LockError::backend(
                    Some(key),
                    format!("etcd refused to watch {what}: {}", created.cancel_reason()),
                    None,
                ))
            }
            _ => Ok(None),
        }
    }
}

/// Completes at the first event of a watch (or its end: a cancel, a broken stream).
async fn changed(mut stream: etcd_client::WatchStream) {
    loop {
        match stream.message().await {
            Ok(Some(response)) if response.events().is_empty() && !response.canceled() => {}
            _ => return,
        }
    }
}

impl ConsensusStore for EtcdStore {
    fn enter<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        kind: EntryKind,
        state: State,
    ) -> BoxFuture<'a, Result<Entry, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let directory = self.directory(key);
            let id = format!("{directory}{owner}");
            // An entry of this owner kept after its release (`min_hold_ms`) stays as it is:
            // a late copy of the owner's attempt finds it, and takes no second grant.
            let absent = Compare::create_revision(id.clone(), CompareOp::Equal, 0);
            let created = PutOptions::new().with_lease(session.lease);
            let txn = Txn::new()
                .when([absent])
                .and_then([TxnOp::put(id.clone(), state.encode(kind), Some(created))])
                .or_else([TxnOp::get(id.clone(), None)]);
            let mut client = self.client.clone();
            let answer = client
                .txn(txn)
                .await
                .map_err(|error| self.error(Some(key), "cannot enter the line", error))?;
            let existing = answer.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(read) => read.kvs().first().cloned(),
                _ => None,
            });
            let kept = existing
                .as_ref()
                .and_then(|kv| self.entry(kv, &directory, session.count))
                .filter(|entry| matches!(entry.state, State::Kept(_)));
            if let Some(kept) = kept {
                return Ok(kept);
            }
            let (created, version) = if answer.succeeded() {
                let revision = answer.header().map_or(0, |header| header.revision());
                (revision, revision)
            } else {
                // Entered before (a resend): the entry keeps its place.
                let options = PutOptions::new().with_lease(session.lease).with_prev_key();
                let put = client
                    .put(id.clone(), state.encode(kind), Some(options))
                    .await
                    .map_err(|error| self.error(Some(key), "cannot enter the line", error))?;
                let revision = put.header().map_or(0, |header| header.revision());
                let created = put
                    .prev_key()
                    .map_or(revision, |prev| prev.create_revision());
                (created, revision)
            };
            Ok(Entry {
                id,
                owner: owner.to_owned(),
                order: u64::try_from(created).unwrap_or(0),
                token: u64::try_from(created).unwrap_or(0),
                version,
                kind,
                state,
                session: session.count,
            })
        })
    }

    fn line<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<Entry>, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let directory = self.directory(key);
            let options = GetOptions::new().with_prefix();
            let mut client = self.client.clone();
            let read = client.get(directory.clone(), Some(options)).await;
            let read =
                read.map_err(|error| self.error(Some(key), "cannot read the line", error))?;
            let mut line: Vec<Entry> = read
                .kvs()
                .iter()
                .filter_map(|kv| self.entry(kv, &directory, session.count))
                .collect();
            line.sort_by_key(|entry| entry.order);
            Ok(line)
        })
    }

    fn write<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        state: State,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<Option<i64>, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            if session.count != entry.session {
                return Ok(None);
            }
            let keep_lease = PutOptions::new().with_ignore_lease();
            let txn = Txn::new().when(still(entry, version)).and_then([TxnOp::put(
                entry.id.clone(),
                state.encode(entry.kind),
                Some(keep_lease),
            )]);
            let (written, revision) = self
                .transact(key, "cannot write the lock's entry", txn)
                .await?;
            Ok(written.then_some(revision))
        })
    }

    fn remove<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let txn = Txn::new()
                .when(still(entry, version))
                .and_then([TxnOp::delete(entry.id.clone(), None::<DeleteOptions>)]);
            let (removed, _) = self.transact(key, "cannot delete an entry", txn).await?;
            Ok(removed)
        })
    }

    fn watch<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>> {
        Box::pin(async move {
            let failed = |error| self.error(Some(key), "cannot watch the entry ahead", error);
            let mut client = self.client.clone();
            // Watched from the current revision, once a read shows the entry unchanged: a
            // waiting entry is not rewritten, and its own revision may be compacted away.
            let read = client.get(entry.id.clone(), None).await.map_err(failed)?;
            let unchanged = read
                .kvs()
                .first()
                .is_some_and(|kv| kv.mod_revision() == entry.version);
            let Some(header) = read.header().filter(|_| unchanged) else {
                return Ok(None);
            };
            let options = WatchOptions::new().with_start_revision(header.revision() + 1);
            let what = "the entry ahead";
            self.watch_from(key, &entry.id, options, what).await
        })
    }

    fn watch_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>> {
        Box::pin(async move {
            // From the revision the watch is made at: what is written after it.
            let (id, what) = (self.result_key(key), "the shared value");
            self.watch_from(key, &id, WatchOptions::new(), what).await
        })
    }

    fn result<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>> {
        let id = self.result_key(key);
        Box::pin(self.read_beside(key, id, "cannot read the shared value"))
    }

    fn put_result<'a>(
        &'a self,
        key: &'a str,
        data: &'a [u8],
        version: Option<i64>,
        holder: &'a Entry,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let id = self.result_key(key);
            let mut unchanged = vec![at_version(&id, version)];
            unchanged.extend(still(holder, None));
            let options = PutOptions::new().with_lease(session.lease);
            let txn =
                Txn::new()
                    .when(unchanged)
                    .and_then([TxnOp::put(id, data.to_vec(), Some(options))]);
            let (written, _) = self
                .transact(key, "cannot write the shared value", txn)
                .await?;
            Ok(written)
        })
    }

    fn marks<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>> {
        let id = self.marks_key(key);
        Box::pin(self.read_beside(key, id, "cannot read the exhausted shards"))
    }

    fn put_marks<'a>(
        &'a self,
        key: &'a str,
        data: &'a [u8],
        version: Option<i64>,
        holder: Option<&'a Entry>,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let id = self.marks_key(key);
            let mut unchanged = vec![at_version(&id, version)];
            unchanged.extend(holder.map(|holder| still(holder, None)).unwrap_or_default());
            // Not attached to the session's lease: marks stay until refilled.
            let write = match data.is_empty() {
                true => TxnOp::delete(id, None),
                false => TxnOp::put(id, data.to_vec(), None),
            };
            let txn = Txn::new().when(unchanged).and_then([write]);
            let what = "cannot write the exhausted shards";
            let (written, _) = self.transact(key, what, txn).await?;
            Ok(written)
        })
    }

    fn keys(&self) -> BoxFuture<'_, Result<Vec<String>, LockError>> {
        Box::pin(async move {
            let prefix = format!("{}/", self.builder.settings.prefix);
            let options = GetOptions::new().with_prefix().with_keys_only();
            let mut client = self.client.clone();
            let read = client.get(prefix.clone(), Some(options)).await;
            let read = read.map_err(|error| self.error(None, "cannot list the locks", error))?;
            let mut keys: Vec<String> = read
                .kvs()
                .iter()
                .filter_map(|kv| {
                    let rest = kv.key_str().ok()?.strip_prefix(&prefix)?;
                    key_of(rest.split_once('/')?.0)
                })
                .collect();
            keys.dedup();
            Ok(keys)
        })
    }

    fn refresh(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let kept = tokio::time::timeout(
                self.builder.settings.timeouts.response,
                session.keep(&self.client),
            );
            match kept.await {
                Ok(Ok(true)) => Ok(()),
                Ok(Ok(false)) => Err(LockError::backend(
                    None,
                    "etcd ended the client's lease, and with it every lock it held",
                    None,
                )),
                Ok(Err(error)) => Err(self.error(None, "cannot keep the lease alive", error)),
                Err(_) => Err(LockError::backend(
                    None,
                    "etcd did not answer a keep-alive within the response timeout",
                    None,
                )),
            }
        })
    }

    fn session(&self) -> u64 {
        self.current().map_or(0, |session| session.count)
    }

    fn session_timeout(&self) -> Duration {
        self.current()
            .map_or(self.builder.settings.lease_ttl, |session| session.ttl)
    }
}
