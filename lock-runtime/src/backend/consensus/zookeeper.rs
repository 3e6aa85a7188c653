//! The ZooKeeper store of a line: a container node per key under the client's root, an
//! ephemeral sequential node per entry, named after its owner (`<owner>-<sequence>`), its
//! state in its data.
//!
//! ZooKeeper handles one session's requests in the order they were sent, and refuses those of
//! a connection the session has left (`SESSION_MOVED`): a call whose reply was lost has taken
//! effect, or never will, before the next call of the session is handled (the backend
//! contract's settled calls).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode, MultiReadResult, SessionState, Stat};

use super::state::{EntryKind, State};
use super::{ConsensusBackend, ConsensusStore, Entry, Kept, key_of, node_name};
use crate::backend::{BoxFuture, Timeouts};
use crate::background::Background;
use crate::instance::InstanceId;
use crate::sync::lock_ignoring_poison;
use crate::{LockClient, LockError};

/// The root node of the locks unless one is configured.
pub const DEFAULT_ROOT: &str = "/fencelock";

/// The session timeout asked of the ensemble unless one is configured (the servers bound
/// it: 2 to 20 ticks by default, 4 s to 40 s).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting may take unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a ZooKeeper client keeps its locks and how long it waits:
/// [`ZooKeeperClientBuilder::settings`] takes them at once. Start from
/// [`ZooKeeperSettings::default`] and change the fields you need.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZooKeeperSettings {
    /// The node under which every lock lives (default [`DEFAULT_ROOT`]).
    pub root: String,
    /// The session timeout to ask for (default [`DEFAULT_SESSION_TIMEOUT`]).
    pub session_timeout: Duration,
    /// How long connecting may take (default [`DEFAULT_CONNECT_TIMEOUT`]). The response
    /// timeout is not used: a call waits as long as the session lasts, and fails with it.
    pub timeouts: Timeouts,
}

impl Default for ZooKeeperSettings {
    fn default() -> Self {
        ZooKeeperSettings {
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            timeouts: Timeouts::new(DEFAULT_CONNECT_TIMEOUT, DEFAULT_SESSION_TIMEOUT),
        }
    }
}

/// A builder of a ZooKeeper client ([`LockClient::zookeeper_builder`]): its
/// [`ZooKeeperSettings`].
#[derive(Debug, Clone)]
pub struct ZooKeeperClientBuilder {
    connect_string: String,
    settings: ZooKeeperSettings,
    instance: Option<String>,
}

impl ZooKeeperClientBuilder {
    /// Every setting at once.
    pub fn settings(mut self, settings: ZooKeeperSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The node under which every lock lives (default [`DEFAULT_ROOT`]): an absolute path,
    /// created if missing.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.settings.root = root.into();
        self
    }

    /// The session timeout to ask for (default [`DEFAULT_SESSION_TIMEOUT`]; the ensemble
    /// may grant another within its bounds). A holder whose client the ensemble does not
    /// hear from for this long loses its locks, and no lease counts longer.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.session_timeout = timeout;
        self
    }

    /// How long connecting may take (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.connect = timeout;
        self
    }

    /// The instance this client runs as (see [`OpenBuilder::instance_id`](crate::OpenBuilder::instance_id)).
    pub fn instance_id(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// Connects, and creates the root node if missing.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let instance = InstanceId::of_setting(self.instance.as_deref())?;
        let root = &self.settings.root;
        if !root.starts_with('/') || root.ends_with('/') || root.contains("//") {
            return Err(LockError::invalid_config(format!(
                "the ZooKeeper root {:?} is not a node path: write an absolute path without a \
                 trailing slash, e.g. \"{DEFAULT_ROOT}\"",
                root
            )));
        }
        let background = Background::Driver;
        let store = ZooKeeperStore {
            session: Mutex::new(Arc::new(self.open(&background).await?)),
            reconnecting: tokio::sync::Mutex::new(()),
            builder: self,
            background: background.clone(),
        };
        let session = store.session().await?;
        let root = ZooKeeperStore::directory_options();
        let created = session
            .client
            .mkdir(&store.builder.settings.root, &root)
            .await;
        created.map_err(|error| store.error(None, "cannot create the root node", error))?;
        let backend = ConsensusBackend::new(store, background.clone());
        Ok(LockClient::with_background(
            Arc::new(backend),
            background,
            true,
            instance,
        ))
    }

    /// A new session, made on the background runtime where its connection lives. An ensemble that
    /// refuses or drops the connection (still starting, or electing a leader) is tried again,
    /// at growing pauses, until the connect timeout (as Curator's retry policy rides over
    /// it); anything else fails at once.
    async fn open(&self, background: &Background) -> Result<Session, LockError> {
        let connect_timeout = self.settings.timeouts.connect;
        let give_up_at = tokio::time::Instant::now() + connect_timeout;
        let mut pause = FIRST_CONNECT_PAUSE;
        let client = loop {
            let connector = Client::connector()
                .with_session_timeout(self.settings.session_timeout)
                .with_connection_timeout(connect_timeout)
                .with_fail_eagerly();
            let connect_string = self.connect_string.clone();
            let connecting =
                background.spawn(async move { connector.connect(&connect_string).await })?;
            let connected = tokio::time::timeout(connect_timeout * 2, connecting).await;
            let error = match connected {
                Ok(Ok(Ok(client))) => break client,
                Ok(Ok(Err(error))) => error,
                Ok(Err(_)) | Err(_) => return Err(connect_error(&self.connect_string, None)),
            };
            let starting = matches!(
                error,
                zookeeper_client::Error::NoHosts | zookeeper_client::Error::ConnectionLoss
            );
            if !starting || tokio::time::Instant::now() + pause >= give_up_at {
                return Err(connect_error(&self.connect_string, Some(error)));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LAST_CONNECT_PAUSE);
        };
        static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Session {
            client,
            count: SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }
}

/// The first pause before connecting again to an ensemble that is not serving yet; each
/// next one doubles, up to [`LAST_CONNECT_PAUSE`].
const FIRST_CONNECT_PAUSE: Duration = Duration::from_millis(50);
const LAST_CONNECT_PAUSE: Duration = Duration::from_secs(1);

fn connect_error(at: &str, error: Option<zookeeper_client::Error>) -> LockError {
    let cause = error.as_ref().map_or_else(
        || "no session within the connect timeout".to_owned(),
        ToString::to_string,
    );
    LockError::backend(
        None,
        format!(
            "cannot connect to ZooKeeper at {at} ({cause}): check the connect string \
             (host:port[,host:port…][/chroot]) and that the ensemble is up"
        ),
        error.map(|e| Arc::new(e) as _),
    )
}

impl LockClient {
    /// Connects to the ZooKeeper ensemble at `connect_string` (`host:port[,host:port…]`,
    /// optionally followed by a chroot path) with the defaults of
    /// [`LockClient::zookeeper_builder`].
    pub async fn zookeeper(connect_string: &str) -> Result<LockClient, LockError> {
        LockClient::zookeeper_builder(connect_string)
            .connect()
            .await
    }

    /// A builder of a ZooKeeper client: root node, session timeout, connect timeout.
    pub fn zookeeper_builder(connect_string: &str) -> ZooKeeperClientBuilder {
        ZooKeeperClientBuilder {
            connect_string: connect_string.to_owned(),
            settings: ZooKeeperSettings::default(),
            instance: None,
        }
    }
}

/// One ZooKeeper session and its count.
struct Session {
    client: Client,
    count: u64,
}

/// The ZooKeeper side of a [`ConsensusBackend`].
pub(crate) struct ZooKeeperStore {
    builder: ZooKeeperClientBuilder,
    session: Mutex<Arc<Session>>,
    /// Held while a new session is made after the last one ended.
    reconnecting: tokio::sync::Mutex<()>,
    background: Background,
}

impl std::fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("at", &self.builder.connect_string)
            .field("root", &self.builder.settings.root)
            .finish_non_exhaustive()
    }
}

impl ZooKeeperStore {
    /// Commits `writer`'s checks and writes: whether it did (not when a check failed).
    async fn commit_if(
        &self,
        key: &str,
        what: &str,
        mut writer: zookeeper_client::MultiWriter<'_>,
    ) -> Result<bool, LockError> {
        match writer.commit().await {
            Ok(_) => Ok(true),
            Err(failed) => match zookeeper_client::Error::from(failed) {
                zookeeper_client::Error::NoNode
                | zookeeper_client::Error::BadVersion
                | zookeeper_client::Error::NodeExists => Ok(false),
                error => Err(self.error(Some(key), what, error)),
            },
        }
    }

    fn directory_options() -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Persistent.with_acls(Acls::anyone_all())
    }

    /// The current session, or a new one if it ended (its entries are gone with it).
    async fn session(&self) -> Result<Arc<Session>, LockError> {
        let current = lock_ignoring_poison(&self.session).clone();
        if !current.client.state().is_terminated() {
            return Ok(current);
        }
        let _reconnecting = self.reconnecting.lock().await;
        let current = lock_ignoring_poison(&self.session).clone();
        if !current.client.state().is_terminated() {
            return Ok(current);
        }
        tracing::warn!(target: "fencelock", at = %self.builder.connect_string, state = ?current.client.state(), "the ZooKeeper session ended, and with it every lock it held; opening a new one");
        let fresh = Arc::new(self.builder.open(&self.background).await?);
        *lock_ignoring_poison(&self.session) = fresh.clone();
        Ok(fresh)
    }

    fn error(&self, key: Option<&str>, what: &str, error: zookeeper_client::Error) -> LockError {
        let hint = match error {
            zookeeper_client::Error::NoAuth => ": the client lacks a permission on the root node",
            zookeeper_client::Error::SessionExpired => {
                ": the session expired, and with it every lock it held"
            }
            _ => "",
        };
        LockError::backend(
            key,
            format!("ZooKeeper at {}: {what}{hint}", self.builder.connect_string),
            Some(Arc::new(error)),
        )
    }

    fn directory(&self, key: &str) -> String {
        format!("{}/{}", self.builder.settings.root, node_name(key))
    }

    /// The node of `key`'s single-flight value, beside its line: `%` followed by no hex digits
    /// makes a name that no key has (see `key_of`), so listing skips it.
    fn result_path(&self, key: &str) -> String {
        format!("{}%result", self.directory(key))
    }

    /// The node of `key`'s exhausted shards, beside its line as [`result_path`](Self::result_path)'s.
    fn marks_path(&self, key: &str) -> String {
        format!("{}%exhausted", self.directory(key))
    }

    /// The data and version of the node at `path` beside `key`'s line; `None` if missing.
    async fn read_beside(&self, key: &str, path: &str, what: &str) -> Result<Kept, LockError> {
        let session = self.session().await?;
        match session.client.get_data(path).await {
            Ok((data, stat)) => Ok(Some((data, i64::from(stat.version)))),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(error) => Err(self.error(Some(key), what, error)),
        }
    }

    fn entry(
        &self,
        session: &Session,
        name: &str,
        path: String,
        data: &[u8],
        stat: &Stat,
    ) -> Entry {
        let (kind, state) = State::decode(data);
        let (owner, order) = match name.rsplit_once('-') {
            Some((owner, sequence)) => (owner.to_owned(), sequence.parse().unwrap_or(0)),
            None => (name.to_owned(), 0),
        };
        Entry {
            id: path,
            owner,
            order,
            token: u64::try_from(stat.czxid).unwrap_or(0),
            version: i64::from(stat.version),
            kind,
            state,
            session: session.count,
        }
    }
}

impl ConsensusStore for ZooKeeperStore {
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
            let prefix = format!("{directory}/{owner}-");
            let data = state.encode(kind);
            let entry_options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            // The key's container node goes once empty: made again when missing.
            for _ in 0..3 {
                let created = session
                    .client
                    .create(&prefix, data.as_bytes(), &entry_options)
                    .await;
                match created {
                    Ok((stat, sequence)) => {
                        let path = format!("{prefix}{sequence}");
                        let name = &path[directory.len() + 1..];
                        return Ok(self.entry(
                            &session,
                            name,
                            path.clone(),
                            data.as_bytes(),
                            &stat,
                        ));
                    }
                    Err(zookeeper_client::Error::NoNode) => {
                        let container = CreateMode::Container.with_acls(Acls::anyone_all());
                        match session.client.create(&directory, &[], &container).await {
                            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                            Err(error) => {
                                return Err(self.error(
                                    Some(key),
                                    "cannot create the key's node",
                                    error,
                                ));
                            }
                        }
                    }
                    Err(error) => {
                        return Err(self.error(Some(key), "cannot enter the line", error));
                    }
                }
            }
            Err(LockError::backend(
                Some(key),
                "ZooKeeper kept deleting the key's node while the lock entered it",
                None,
            ))
        })
    }

    fn line<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<Entry>, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let directory = self.directory(key);
            let names = match session.client.list_children(&directory).await {
                Ok(names) => names,
                Err(zookeeper_client::Error::NoNode) => return Ok(Vec::new()),
                Err(error) => return Err(self.error(Some(key), "cannot read the line", error)),
            };
            if names.is_empty() {
                return Ok(Vec::new());
            }
            let mut reader = session.client.new_multi_reader();
            let paths: Vec<String> = names
                .iter()
                .map(|name| format!("{directory}/{name}"))
                .collect();
            for path in &paths {
                reader
                    .add_get_data(path)
                    .map_err(|error| self.error(Some(key), "cannot read the line", error))?;
            }
            let read = reader.commit().await;
            let read =
                read.map_err(|error| self.error(Some(key), "cannot read the line", error))?;
            let mut line: Vec<Entry> = names
                .iter()
                .zip(paths)
                .zip(read)
                .filter_map(|((name, path), read)| match read {
                    MultiReadResult::Data { data, stat } => {
                        Some(self.entry(&session, name, path, &data, &stat))
                    }
                    _ => None,
                })
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
            let version = version.and_then(|v| i32::try_from(v).ok());
            let data = state.encode(entry.kind);
            let written = session.client.set_data(&entry.id, data.as_bytes(), version);
            match written.await {
                Ok(stat) => Ok(Some(i64::from(stat.version))),
                Err(zookeeper_client::Error::NoNode | zookeeper_client::Error::BadVersion) => {
                    Ok(None)
                }
                Err(error) => Err(self.error(Some(key), "cannot write the lock's entry", error)),
            }
        })
    }

    fn remove<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let version = version.and_then(|v| i32::try_from(v).ok());
            match session.client.delete(&entry.id, version).await {
                Ok(()) => Ok(true),
                Err(zookeeper_client::Error::NoNode | zookeeper_client::Error::BadVersion) => {
                    Ok(false)
                }
                Err(error) => Err(self.error(Some(key), "cannot delete an entry", error)),
            }
        })
    }

    fn watch<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let watched = session.client.check_and_watch_stat(&entry.id).await;
            match watched {
                Ok((None, _)) => Ok(None),
                Ok((Some(stat), _)) if i64::from(stat.version) != entry.version => Ok(None),
                Ok((Some(_), watcher)) => Ok(Some(Box::pin(async move {
                    watcher.changed().await;
                }) as BoxFuture<'static, ()>)),
                Err(error) => Err(self.error(Some(key), "cannot watch the entry ahead", error)),
            }
        })
    }

    fn watch_result<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            // An `exists` watch: it fires when the node is created, written or deleted.
            let watched = session
                .client
                .check_and_watch_stat(&self.result_path(key))
                .await;
            let (_, watcher) = watched
                .map_err(|error| self.error(Some(key), "cannot watch the shared value", error))?;
            Ok(Some(Box::pin(async move {
                watcher.changed().await;
            }) as BoxFuture<'static, ()>))
        })
    }

    fn result<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>> {
        let path = self.result_path(key);
        Box::pin(async move {
            let what = "cannot read the shared value";
            self.read_beside(key, &path, what).await
        })
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
            let path = self.result_path(key);
            let version = match version.map(i32::try_from) {
                Some(Ok(version)) => Some(version),
                Some(Err(_)) => return Ok(false),
                None => None,
            };
            let mut writer = session.client.new_multi_writer();
            let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
            let added = writer
                .add_check_version(&holder.id, -1)
                .and_then(|()| match version {
                    Some(version) => writer.add_set_data(&path, data, Some(version)),
                    None => writer.add_create(&path, data, &ephemeral),
                });
            let what = "cannot write the shared value";
            added.map_err(|error| self.error(Some(key), what, error))?;
            self.commit_if(key, what, writer).await
        })
    }

    fn marks<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>> {
        let path = self.marks_path(key);
        Box::pin(async move {
            let what = "cannot read the exhausted shards";
            self.read_beside(key, &path, what).await
        })
    }

    fn put_marks<'a>(
        &'a self,
        key: &'a str,
        data: &'a [u8],
        version: Option<i64>,
        holder: Option<&'a Entry>,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let path = self.marks_path(key);
            let version = match version.map(i32::try_from) {
                Some(Ok(version)) => Some(version),
                Some(Err(_)) => return Ok(false),
                None => None,
            };
            if holder.is_none() && data.is_empty() && version.is_none() {
                return Ok(true);
            }
            let mut writer = session.client.new_multi_writer();
            let persistent = Self::directory_options();
            // No marks are an empty node, never a deleted one: a node made again would
            // start its version over, and a mark read before the delete would be written
            // over a later one's.
            let added = holder
                .map_or(Ok(()), |holder| writer.add_check_version(&holder.id, -1))
                .and_then(|()| match (data.is_empty(), version) {
                    (true, None) => Ok(()),
                    (_, Some(version)) => writer.add_set_data(&path, data, Some(version)),
                    (false, None) => writer.add_create(&path, data, &persistent),
                });
            let what = "cannot write the exhausted shards";
            added.map_err(|error| self.error(Some(key), what, error))?;
            self.commit_if(key, what, writer).await
        })
    }

    fn keys(&self) -> BoxFuture<'_, Result<Vec<String>, LockError>> {
        Box::pin(async move {
            let session = self.session().await?;
            let names = session
                .client
                .list_children(&self.builder.settings.root)
                .await;
            let names = names.map_err(|error| self.error(None, "cannot list the locks", error))?;
            Ok(names.iter().filter_map(|name| key_of(name)).collect())
        })
    }

    fn session(&self) -> u64 {
        let session = lock_ignoring_poison(&self.session);
        match session.client.state() {
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => 0,
            _ => session.count,
        }
    }

    fn session_timeout(&self) -> Duration {
        lock_ignoring_poison(&self.session).client.session_timeout()
    }
}
