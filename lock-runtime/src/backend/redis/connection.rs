//! One multiplexed Redis connection, created on the driver, replaced after it breaks.
//!
//! redis-rs's `MultiplexedConnection` runs a task that owns the socket; it must live on the
//! driver runtime so it outlives the runtime of whoever called us. Commands from any runtime
//! reach it through its channel. A command that fails because the connection broke returns
//! that error (the lock code decides whether to retry); the next command reconnects.

use std::sync::Mutex;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};

use crate::LockError;
use crate::driver::Background;

pub(crate) struct Connection {
    client: Client,
    config: AsyncConnectionConfig,
    current: Mutex<Option<MultiplexedConnection>>,
    /// Serialises reconnects, so a burst of callers after an outage opens one connection.
    connecting: tokio::sync::Mutex<()>,
}

impl Connection {
    pub(crate) fn new(client: Client, config: AsyncConnectionConfig) -> Self {
        Connection {
            client,
            config,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// `host:port` of the server, without credentials.
    pub(crate) fn addr(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The live connection, opening one on the driver if there is none.
    pub(crate) async fn get(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(connection) = self.cached() {
            return Ok(connection);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(connection) = self.cached() {
            return Ok(connection);
        }
        let client = self.client.clone();
        let config = self.config.clone();
        let opened = Background::Driver
            .spawn(async move {
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
            })
            .map_err(to_redis_error)?
            .await
            .map_err(|e| to_redis_error(LockError::backend(None, e.to_string(), None)))??;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(opened.clone());
        Ok(opened)
    }

    /// Forgets the connection if `error` means it is broken, so the next call reconnects;
    /// returns whether it did.
    pub(crate) fn note_error(&self, error: &RedisError) -> bool {
        let broken = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_unrecoverable_error();
        if broken {
            *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        broken
    }
}

fn to_redis_error(error: LockError) -> RedisError {
    RedisError::from(std::io::Error::other(error.to_string()))
}
