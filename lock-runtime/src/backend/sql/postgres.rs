//! PostgreSQL: the pool, and release notifications over `LISTEN/NOTIFY`.
//!
//! A release (or a forced one) calls `pg_notify` in its transaction, on one channel per lock
//! table (`fencelock_<table>`), with `<announcement>\n<key>`: PostgreSQL delivers it when
//! the transaction commits, to every session listening. Each client listens on one
//! connection of its own, opened when a waiter first subscribes; when that connection
//! fails (an error, its end, or no answer to a query when quiet), it is closed for good,
//! every waiter wakes to try again, and the next wait listens on a new one: correctness never
//! depends on a notification arriving, only the speed of the hand-off does.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions};
use sqlx::{Connection, Executor, PgPool};
use tokio::sync::Mutex;
use tokio::task::AbortHandle;

use super::{IDLE_IN_TRANSACTION, LOCK_WAIT, Pool, SqlSettings, connecting, on_background};
use crate::LockError;
use crate::backend::ReleaseWatch;
use crate::background::Background;
use crate::release_hub::{ReleaseHub, parse_announcement};

/// How often a quiet listening connection is asked a query: a connection that went silent
/// (a partition that keeps the socket open) delivers nothing, and would otherwise never be
/// found out.
const KEEPALIVE: Duration = Duration::from_secs(5);

/// Opens the pool on the background runtime, once a first connection succeeded.
pub(super) async fn pool(url: &str, settings: &SqlSettings) -> Result<Pool, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?
        // Names the table, so that an operator tells the clients of each table apart.
        .application_name(&format!("fencelock {}", settings.table))
        .options([
            ("lock_timeout", LOCK_WAIT.as_millis().to_string()),
            // No statement outlives a call's task (see `Calls`).
            (
                "statement_timeout",
                settings.timeouts.response.as_millis().to_string(),
            ),
            (
                "idle_in_transaction_session_timeout",
                IDLE_IN_TRANSACTION.as_millis().to_string(),
            ),
        ]);
    let connect_timeout = settings.timeouts.connect;
    let pool_options = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.timeouts.connect)
        .test_before_acquire(false);
    let (pool, listens) = on_background(async move {
        // One connection of its own first: the pool would retry until its timeout and
        // report only that, not why (a refused login, a closed port).
        let first = connecting(connect_timeout, || PgConnection::connect_with(&options));
        first.await?.close().await?;
        // The listener keeps its connection for good: from a pool of its own, so that it
        // never takes one the statements need.
        let listens = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options.clone());
        Ok::<_, sqlx::Error>((pool_options.connect_lazy_with(options), listens))
    })
    .await?;
    Ok(Pool {
        sessions: Box::new(pool),
        listens: Some(listens),
    })
}

/// The task that reads a listening connection.
struct Reader {
    task: AbortHandle,
    /// Cleared by the task before it wakes the waiters at its end, so that the watch they
    /// take next starts a new one (the task may not have finished yet by then).
    listening: Arc<AtomicBool>,
}

/// A client's release listener.
pub(super) struct Listener {
    pool: PgPool,
    channel: String,
    response_timeout: Duration,
    hub: Arc<ReleaseHub>,
    /// The task reading the listening connection, once started (aborting it closes the
    /// connection), and whether it still listens. Its lock also makes concurrent first
    /// waiters start one.
    reader: Mutex<Option<Reader>>,
}

impl Listener {
    pub(super) fn new(pool: PgPool, channel: String, response_timeout: Duration) -> Self {
        Listener {
            pool,
            channel,
            response_timeout,
            hub: Arc::new(ReleaseHub::default()),
            reader: Mutex::new(None),
        }
    }

    /// A watch of `key`'s releases, once the listening connection listens.
    pub(super) async fn subscribe(&self, key: &str) -> Result<ReleaseWatch, LockError> {
        self.listening().await?;
        let (watch, subscribed) = self.hub.watch(key);
        let _ = subscribed.set(());
        Ok(watch)
    }

    pub(super) fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.hub.watch_subscribed(key)
    }

    /// Starts the reading task unless it runs; returns once its connection listens.
    async fn listening(&self) -> Result<(), LockError> {
        let mut reader = self.reader.lock().await;
        if reader
            .as_ref()
            .is_some_and(|reader| reader.listening.load(Ordering::Acquire))
        {
            return Ok(());
        }
        let (pool, channel) = (self.pool.clone(), self.channel.clone());
        let opening = Background::Driver.spawn(async move {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        })?;
        let opened = tokio::time::timeout(self.response_timeout, opening).await;
        let listener = match opened {
            Ok(Ok(Ok(listener))) => listener,
            Ok(Ok(Err(error))) => return Err(listen_error(Some(error))),
            _ => return Err(listen_error(None)),
        };
        let listening = Arc::new(AtomicBool::new(true));
        let reading = read(listener, self.hub.clone(), listening.clone());
        let task = Background::Driver.spawn(reading)?.abort_handle();
        *reader = Some(Reader { task, listening });
        Ok(())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.get_mut().take() {
            reader.task.abort();
        }
    }
}

fn listen_error(error: Option<sqlx::Error>) -> LockError {
    let source = error.map(|e| Arc::new(e) as Arc<dyn std::error::Error + Send + Sync>);
    LockError::backend(
        None,
        "cannot listen for releases on PostgreSQL (waiters poll meanwhile)",
        source,
    )
}

/// Hands each notification to the waiters of its key, until the connection fails; then
/// clears `listening` and wakes every waiter (a release may have gone unheard).
async fn read(mut listener: PgListener, hub: Arc<ReleaseHub>, listening: Arc<AtomicBool>) {
    loop {
        match tokio::time::timeout(KEEPALIVE, listener.try_recv()).await {
            Ok(Ok(Some(notification))) => {
                if let Some((announcement, key)) = notification.payload().split_once('\n') {
                    hub.announce(key, parse_announcement(announcement));
                }
            }
            // Quiet: the connection must still answer.
            Err(_) => {
                let asked = tokio::time::timeout(KEEPALIVE, listener.execute("SELECT 1")).await;
                if !matches!(asked, Ok(Ok(_))) {
                    break;
                }
            }
            // Lost (`try_recv` would reconnect quietly) or failed.
            Ok(Ok(None) | Err(_)) => break,
        }
    }
    listening.store(false, Ordering::Release);
    hub.subscriptions_lost();
}
