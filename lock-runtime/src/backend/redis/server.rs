//! Which server a Redis backend's connections go to: one given server, or the server the
//! Sentinels name the master of a service (asked again once a connection to it breaks or
//! finds it demoted, so that after a failover the next connection reaches the new master).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::sentinel::SentinelClient;
use redis::{Client, RedisError, RedisResult};

use crate::sync::lock_ignoring_poison;

#[derive(Clone)]
pub(crate) enum Server {
    /// One server (standalone or a primary).
    Fixed(Box<Client>),
    /// The master of a service, as the Sentinels name it.
    Sentinel(Arc<SentinelMaster>),
}

/// The master of a Sentinel service: asked of the Sentinels when none is known, then kept
/// until a connection to it breaks or finds it demoted, so that opening a connection (a
/// renewal's, say) does not wait for the Sentinels, nor for another caller asking them.
pub(crate) struct SentinelMaster {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    service: Arc<str>,
    known: Mutex<Option<Client>>,
    /// How long asking the Sentinels may take.
    lookup_timeout: Duration,
}

impl Server {
    /// The master of `service` as `sentinels` name it, asked within `lookup_timeout`.
    pub(crate) fn sentinel(
        sentinels: SentinelClient,
        service: &str,
        lookup_timeout: Duration,
    ) -> Server {
        Server::Sentinel(Arc::new(SentinelMaster {
            sentinels: tokio::sync::Mutex::new(sentinels),
            service: Arc::from(service),
            known: Mutex::new(None),
            lookup_timeout,
        }))
    }

    /// A client of the server to connect to now.
    pub(crate) async fn client(&self) -> RedisResult<Client> {
        let master = match self {
            Server::Fixed(client) => return Ok(Client::clone(client)),
            Server::Sentinel(master) => master,
        };
        if let Some(known) = lock_ignoring_poison(&master.known).clone() {
            return Ok(known);
        }
        let asking = async { master.sentinels.lock().await.async_get_client().await };
        let client = tokio::time::timeout(master.lookup_timeout, asking)
            .await
            .map_err(|_| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the Sentinels did not name the master of {} within {:?}",
                        master.service, master.lookup_timeout
                    ),
                ))
            })??;
        *lock_ignoring_poison(&master.known) = Some(client.clone());
        Ok(client)
    }

    /// Forgets the master the Sentinels named: a connection to it broke, or it was demoted.
    pub(crate) fn forget_master(&self) {
        if let Server::Sentinel(master) = self {
            *lock_ignoring_poison(&master.known) = None;
        }
    }

    /// Where connections go, without credentials: `host:port`, or the Sentinel service.
    pub(crate) fn describe(&self) -> String {
        match self {
            Server::Fixed(client) => client.get_connection_info().addr().to_string(),
            Server::Sentinel(master) => {
                format!("the master of Sentinel service {}", master.service)
            }
        }
    }

    /// Whether the server a connection reached may stop being the master while it stays
    /// up (a failover demotes it), so that a refused write means "reconnect".
    pub(crate) fn follows_failover(&self) -> bool {
        matches!(self, Server::Sentinel(_))
    }
}
