//! Which server a Redis backend's connections go to: one given server, or whichever server
//! the Sentinels name the master of a service when a connection is opened (so that after a
//! failover the next connection reaches the new master).

use std::sync::Arc;

use redis::sentinel::SentinelClient;
use redis::{Client, RedisResult};

#[derive(Clone)]
pub(crate) enum Server {
    /// One server (standalone or a primary).
    Fixed(Box<Client>),
    /// The master of a service, as the Sentinels name it now.
    Sentinel {
        sentinels: Arc<tokio::sync::Mutex<SentinelClient>>,
        service: Arc<str>,
    },
}

impl Server {
    /// A client of the server to connect to now.
    pub(crate) async fn client(&self) -> RedisResult<Client> {
        match self {
            Server::Fixed(client) => Ok(Client::clone(client)),
            Server::Sentinel { sentinels, .. } => sentinels.lock().await.async_get_client().await,
        }
    }

    /// Where connections go, without credentials: `host:port`, or the Sentinel service.
    pub(crate) fn describe(&self) -> String {
        match self {
            Server::Fixed(client) => client.get_connection_info().addr().to_string(),
            Server::Sentinel { service, .. } => format!("the master of Sentinel service {service}"),
        }
    }

    /// Whether the server a connection reached may stop being the master while it stays
    /// up (a failover demotes it), so that a refused write means "reconnect".
    pub(crate) fn follows_failover(&self) -> bool {
        matches!(self, Server::Sentinel { .. })
    }
}
