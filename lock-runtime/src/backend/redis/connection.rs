//! Multiplexed Redis connections, replaced after they break, and closed on the server before
//! anything else is sent once their commands' fate is unknown.
//!
//! redis-rs's `MultiplexedConnection` runs a task that owns the socket, on the runtime that
//! opened it. Two kinds are kept:
//! - one driven by the library's background runtime, for background work (renewals, releases behind
//!   dropped guards), so that it outlives the caller's runtime and keeps running while a
//!   body blocks a current-thread runtime;
//! - one per caller runtime, for acquire and release called from the caller's tasks, so
//!   that the fast path does not hop through the background thread (on a loaded 2-core machine a
//!   thread hop costs as much as the round trip).
//!
//! A command that fails because its connection broke or timed out returns that error, and
//! the connection is given up. Its commands may still be in the network or in the server's
//! input buffer, and would run whenever they arrive: after a later release, a late acquire
//! would take the key for an owner nobody tracks. So the next command, on whichever
//! connection, first has the server close the given-up ones (`CLIENT KILL ID`, with the id
//! each connection learned when it opened): once that is answered, nothing sent on them can
//! run any more. Ids are kept with the server's `run_id`: a restarted server numbers its
//! connections anew and has none of the old ones left, so only ids of the server that answers
//! are closed. A user that may not run `CLIENT ID` or `CLIENT KILL` (an ACL, or the command
//! renamed) loses this settling (logged once).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};
use tokio::runtime::Id;

use super::server::Server;
use crate::LockError;
use crate::background::{self, Background};
use crate::sync::lock_ignoring_poison;

/// Caller runtimes whose connections are kept; a new runtime beyond this evicts the oldest
/// (runtimes of finished tests, typically).
const FOREGROUND_RUNTIMES: usize = 4;
/// Idle exclusive connections kept for the next caller; more are closed.
const EXCLUSIVE_IDLE: usize = 8;

/// Which connection a command goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The background runtime's connection.
    Background,
    /// The connection driven by this caller runtime.
    Foreground(Id),
    /// A connection lent to one caller at a time (driven by the background runtime).
    Exclusive,
}

impl Route {
    /// The route for a command issued here: the caller's runtime if there is one (and it
    /// is not the background runtime), else the background runtime.
    pub(crate) fn here() -> Route {
        match background::caller_runtime() {
            Some(handle) => Route::Foreground(handle.id()),
            None => Route::Background,
        }
    }
}

/// An open connection, as handed to one command.
#[derive(Clone)]
pub(crate) struct Live {
    route: Route,
    /// Tells connections of one route apart, so that an error on a replaced connection does
    /// not throw away its replacement.
    serial: u64,
    /// The server's id of the connection (`CLIENT ID`), to close it there once given up.
    server_id: Option<i64>,
    /// The server's `run_id`, which changes when it restarts (`None`: not told). Shared:
    /// every command clones its `Live`.
    run_id: Option<Arc<str>>,
    connection: MultiplexedConnection,
}

impl Live {
    /// The connection to send on (a cheap handle to the shared one).
    pub(crate) fn connection(&self) -> MultiplexedConnection {
        self.connection.clone()
    }
}

pub(crate) struct Connection {
    server: Server,
    config: AsyncConnectionConfig,
    open: Mutex<Vec<Live>>,
    /// Idle exclusive connections.
    exclusive: Mutex<Vec<Live>>,
    serials: AtomicU64,
    /// Given-up connections whose commands may still run.
    given_up: Mutex<Vec<GivenUp>>,
    /// Set while `given_up` is not empty: the fast path checks only this.
    unsettled: AtomicBool,
    /// Held while given-up connections are being closed, so that no command overtakes it.
    settling: tokio::sync::Mutex<()>,
    /// Cleared once the server refused `CLIENT KILL` or `CLIENT ID` (an ACL without them).
    can_settle: AtomicBool,
    /// Serialise reconnects, so that a burst of callers after an outage opens one connection;
    /// one for the background and one for callers, so that a caller stuck connecting never
    /// holds up renewals.
    connecting_background: tokio::sync::Mutex<()>,
    connecting_foreground: tokio::sync::Mutex<()>,
}

impl Connection {
    pub(crate) fn new(server: Server, config: AsyncConnectionConfig) -> Self {
        Connection {
            server,
            config,
            open: Mutex::new(Vec::new()),
            exclusive: Mutex::new(Vec::new()),
            serials: AtomicU64::new(0),
            given_up: Mutex::new(Vec::new()),
            unsettled: AtomicBool::new(false),
            settling: tokio::sync::Mutex::new(()),
            can_settle: AtomicBool::new(true),
            connecting_background: tokio::sync::Mutex::new(()),
            connecting_foreground: tokio::sync::Mutex::new(()),
        }
    }

    /// Where the connections go, without credentials.
    pub(crate) fn addr(&self) -> String {
        self.server.describe()
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Vec<Live>> {
        // Every update is one push, remove or retain.
        lock_ignoring_poison(&self.open)
    }

    fn given_up(&self) -> std::sync::MutexGuard<'_, Vec<GivenUp>> {
        lock_ignoring_poison(&self.given_up)
    }

    fn cached(&self, route: Route) -> Option<Live> {
        self.open().iter().find(|live| live.route == route).cloned()
    }

    /// The live connection for `route`, opening one if there is none; connections given up
    /// before this call are closed on the server first.
    pub(crate) async fn get(&self, route: Route) -> Result<Live, RedisError> {
        let live = match self.cached(route) {
            Some(live) => live,
            None => self.reconnect(route).await?,
        };
        if self.unsettled.load(Ordering::Acquire) {
            self.settle(&live).await?;
        }
        Ok(live)
    }

    async fn reconnect(&self, route: Route) -> Result<Live, RedisError> {
        let _connecting = match route {
            Route::Background | Route::Exclusive => self.connecting_background.lock().await,
            Route::Foreground(_) => self.connecting_foreground.lock().await,
        };
        if let Some(live) = self.cached(route) {
            return Ok(live);
        }
        let live = self.open_live(route).await?;
        let mut open = self.open();
        let foreground = open.iter().filter(|l| l.route != Route::Background).count();
        if route != Route::Background
            && foreground >= FOREGROUND_RUNTIMES
            && let Some(oldest) = open.iter().position(|l| l.route != Route::Background)
        {
            open.remove(oldest);
        }
        open.push(live.clone());
        Ok(live)
    }

    /// A connection of its own, lent to one sequence of commands that blocks the connection
    /// it runs on (`WAIT`), so that it never holds up the shared ones; connections given up
    /// before this call are closed on the server first.
    pub(crate) async fn exclusive(&self) -> Result<Lent<'_>, RedisError> {
        let idle = lock_ignoring_poison(&self.exclusive).pop();
        let live = match idle {
            Some(live) => live,
            None => self.open_live(Route::Exclusive).await?,
        };
        let lent = Lent {
            owner: self,
            live,
            given_back: false,
        };
        if self.unsettled.load(Ordering::Acquire) {
            self.settle(lent.live()).await?;
        }
        Ok(lent)
    }

    /// Opens a connection for `route` and learns its server id.
    async fn open_live(&self, route: Route) -> Result<Live, RedisError> {
        let mut connection = match route {
            Route::Foreground(_) => {
                self.server
                    .client()
                    .await?
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?
            }
            Route::Background | Route::Exclusive => {
                let server = self.server.clone();
                let config = self.config.clone();
                Background::Driver
                    .spawn(async move {
                        server
                            .client()
                            .await?
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                    })
                    .map_err(to_redis_error)?
                    .await
                    .map_err(|e| to_redis_error(LockError::backend(None, e.to_string(), None)))??
            }
        };
        let server_id = match redis::cmd("CLIENT")
            .arg("ID")
            .query_async::<i64>(&mut connection)
            .await
        {
            Ok(id) => Some(id),
            Err(error) if refused(&error) => {
                self.cannot_settle("CLIENT ID", &error);
                None
            }
            Err(error) => return Err(error),
        };
        let run_id = match server_id {
            Some(_) => run_id(&mut connection).await?,
            None => None,
        };
        Ok(Live {
            route,
            serial: self.serials.fetch_add(1, Ordering::Relaxed),
            server_id,
            run_id,
            connection,
        })
    }

    /// Closes every given-up connection of the server that `live` reaches, through it.
    async fn settle(&self, live: &Live) -> Result<(), RedisError> {
        let _settling = self.settling.lock().await;
        let settled = self.given_up().clone();
        if settled.is_empty() {
            return Ok(());
        }
        let mut pipeline = redis::pipe();
        // Ids of another server run (before a restart) name nothing there, or someone else.
        let here: Vec<&GivenUp> = settled.iter().filter(|g| g.run_id == live.run_id).collect();
        for given_up in &here {
            // The filter form answers how many it closed: 0 for one already gone.
            pipeline
                .cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(given_up.server_id)
                .ignore();
        }
        let killed = if here.is_empty() {
            Ok(())
        } else {
            pipeline.query_async::<()>(&mut live.connection()).await
        };
        match killed {
            Ok(()) => {}
            Err(error) if refused(&error) => {
                self.cannot_settle("CLIENT KILL", &error);
            }
            Err(error) => {
                self.note_error(live, &error);
                return Err(error);
            }
        }
        // Ids of another run of one server name nothing any more; those of another server
        // (the other master of a Sentinel service) still wait for a connection to it.
        let follows_failover = self.server.follows_failover();
        let mut given_up = self.given_up();
        given_up.retain(|g| !settled.contains(g) || (follows_failover && g.run_id != live.run_id));
        self.unsettled
            .store(!given_up.is_empty(), Ordering::Release);
        Ok(())
    }

    fn cannot_settle(&self, command: &str, error: &RedisError) {
        if self.can_settle.swap(false, Ordering::Relaxed) {
            tracing::warn!(target: "fencelock",
                %error,
                "the Redis user may not run {command}: a command whose reply was lost may \
                 still run after later ones (allow `+client|id +client|kill` to close that gap)"
            );
        }
        self.given_up().clear();
        self.unsettled.store(false, Ordering::Release);
    }

    /// Gives `live` up if `error` means it is broken or timed out, so that the next call
    /// reconnects and first closes it on the server; returns whether it did.
    pub(crate) fn note_error(&self, live: &Live, error: &RedisError) -> bool {
        // A master demoted by a failover refuses writes: the Sentinels name another now.
        // Before Redis 7 a script's refused write comes back as an `ERR` that quotes it.
        let demoted = self.server.follows_failover()
            && (error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                || error.to_string().contains("READONLY"));
        let broken = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_unrecoverable_error()
            || demoted;
        if !broken {
            return false;
        }
        self.open().retain(|l| l.serial != live.serial);
        self.give_up(live);
        // Whatever broke this one (a restart, a failover, a mass kill) broke the idle
        // exclusive ones too, and the master may have moved.
        lock_ignoring_poison(&self.exclusive).clear();
        self.server.forget_master();
        true
    }

    /// Gives `live` up: the next command first closes it on the server. Also when it had
    /// left the cache already (evicted by other runtimes' connections, or lent): what was
    /// sent on it is just as unsettled.
    fn give_up(&self, live: &Live) {
        if let Some(server_id) = live.server_id
            && self.can_settle.load(Ordering::Relaxed)
        {
            let given_up = GivenUp {
                server_id,
                run_id: live.run_id.clone(),
            };
            let mut all = self.given_up();
            if !all.contains(&given_up) {
                all.push(given_up);
            }
            self.unsettled.store(true, Ordering::Release);
        }
    }
}

/// An exclusive connection, lent by [`Connection::exclusive`]. Given back with
/// [`Lent::give_back`] once every command sent on it was answered; dropped otherwise (an
/// error, a cancelled call), it is given up and closed on the server before the next
/// command, as a broken connection is.
pub(crate) struct Lent<'a> {
    owner: &'a Connection,
    live: Live,
    given_back: bool,
}

impl Lent<'_> {
    pub(crate) fn live(&self) -> &Live {
        &self.live
    }

    pub(crate) fn give_back(mut self) {
        self.given_back = true;
        let mut idle = lock_ignoring_poison(&self.owner.exclusive);
        if idle.len() < EXCLUSIVE_IDLE {
            idle.push(self.live.clone());
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if !self.given_back {
            self.owner.give_up(&self.live);
        }
    }
}

/// A given-up connection: its id, on which server run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GivenUp {
    server_id: i64,
    run_id: Option<Arc<str>>,
}

/// Whether the server refused a command (no permission, or renamed away), rather than the
/// connection failing.
fn refused(error: &RedisError) -> bool {
    !(error.is_io_error() || error.is_timeout() || error.is_connection_dropped())
}

/// The server's `run_id` (`INFO server`), or `None` where `INFO` is not allowed.
async fn run_id(connection: &mut MultiplexedConnection) -> Result<Option<Arc<str>>, RedisError> {
    match redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(connection)
        .await
    {
        Ok(info) => Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .map(|id| Arc::from(id.trim()))),
        Err(error) if refused(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

fn to_redis_error(error: LockError) -> RedisError {
    RedisError::from(std::io::Error::other(error.to_string()))
}
