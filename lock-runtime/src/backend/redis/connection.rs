//! Multiplexed Redis connections, replaced after they break.
//!
//! redis-rs's `MultiplexedConnection` runs a task that owns the socket, on the runtime that
//! opened it. Two kinds are kept:
//! - one driven by the library's driver, for background work (renewals, releases behind
//!   dropped guards), so that it outlives the caller's runtime and keeps running while a
//!   body blocks a current-thread runtime;
//! - one per caller runtime, for acquire and release called from the caller's tasks, so
//!   that the fast path does not hop through the driver thread (on a loaded 2-core machine a
//!   thread hop costs as much as the round trip).
//!
//! A command that fails because its connection broke returns that error (the lock code
//! decides whether to retry); the next command on that route reconnects.

use std::sync::Mutex;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::runtime::Id;

use crate::LockError;
use crate::driver::{self, Background};

/// Caller runtimes whose connections are kept; a new runtime beyond this evicts the oldest
/// (runtimes of finished tests, typically).
const FOREGROUND_RUNTIMES: usize = 4;

/// Which connection a command goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The driver's connection.
    Background,
    /// The connection driven by this caller runtime.
    Foreground(Id),
}

impl Route {
    /// The route for a command issued here: the caller's runtime if there is one (and it
    /// is not the driver), else the driver.
    pub(crate) fn here() -> Route {
        match driver::caller_runtime() {
            Some(handle) => Route::Foreground(handle.id()),
            None => Route::Background,
        }
    }
}

pub(crate) struct Connection {
    client: Client,
    config: AsyncConnectionConfig,
    open: Mutex<Vec<(Route, MultiplexedConnection)>>,
    /// Serialise reconnects, so that a burst of callers after an outage opens one connection;
    /// one for the background and one for callers, so that a caller stuck connecting never
    /// holds up renewals.
    connecting_background: tokio::sync::Mutex<()>,
    connecting_foreground: tokio::sync::Mutex<()>,
}

impl Connection {
    pub(crate) fn new(client: Client, config: AsyncConnectionConfig) -> Self {
        Connection {
            client,
            config,
            open: Mutex::new(Vec::new()),
            connecting_background: tokio::sync::Mutex::new(()),
            connecting_foreground: tokio::sync::Mutex::new(()),
        }
    }

    /// `host:port` of the server, without credentials.
    pub(crate) fn addr(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Vec<(Route, MultiplexedConnection)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached(&self, route: Route) -> Option<MultiplexedConnection> {
        self.open()
            .iter()
            .find(|(r, _)| *r == route)
            .map(|(_, connection)| connection.clone())
    }

    /// The live connection for `route`, opening one if there is none.
    pub(crate) async fn get(&self, route: Route) -> Result<MultiplexedConnection, RedisError> {
        if let Some(connection) = self.cached(route) {
            return Ok(connection);
        }
        let _connecting = match route {
            Route::Background => self.connecting_background.lock().await,
            Route::Foreground(_) => self.connecting_foreground.lock().await,
        };
        if let Some(connection) = self.cached(route) {
            return Ok(connection);
        }
        let opened = match route {
            Route::Foreground(_) => {
                self.client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?
            }
            Route::Background => {
                let client = self.client.clone();
                let config = self.config.clone();
                Background::Driver
                    .spawn(async move {
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                    })
                    .map_err(to_redis_error)?
                    .await
                    .map_err(|e| to_redis_error(LockError::backend(None, e.to_string(), None)))??
            }
        };
        let mut open = self.open();
        let foreground = open.iter().filter(|(r, _)| *r != Route::Background).count();
        if route != Route::Background
            && foreground >= FOREGROUND_RUNTIMES
            && let Some(oldest) = open.iter().position(|(r, _)| *r != Route::Background)
        {
            open.remove(oldest);
        }
        open.push((route, opened.clone()));
        Ok(opened)
    }

    /// Forgets the connection of `route` if `error` means it is broken, so the next call
    /// reconnects; returns whether it did.
    pub(crate) fn note_error(&self, route: Route, error: &RedisError) -> bool {
        let broken = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_unrecoverable_error();
        if broken {
            self.open().retain(|(r, _)| *r != route);
        }
        broken
    }
}

fn to_redis_error(error: LockError) -> RedisError {
    RedisError::from(std::io::Error::other(error.to_string()))
}
