//! Redis Cluster: the keys and scripts of one server, sent through redis-rs's cluster client,
//! which routes each script by its first key and follows `MOVED`, `ASK`, resharding and
//! failover. Every key of a lock shares its hash tag, so each script touches one slot; the
//! renewal batch is split by slot (a script or pipeline over several slots would fail with
//! `CROSSSLOT`). Release notifications travel over sharded pub/sub (`SPUBLISH` in the release
//! script, `SSUBSCRIBE` here, Redis 7), so a release is heard on its shard only.
//!
//! What a cluster cannot give that one server does: a connection whose reply was lost is
//! not closed on the server before the next command (the cluster client keeps its
//! connections to itself), so a request delivered long after the client gave up on it can
//! still take the key for one lease; and `min_replicas` is refused (`WAIT` would block the
//! node's shared connection).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, PushInfo, PushKind, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::mpsc;

use super::{query_loading_extend, text};
use crate::LockError;
use crate::background::Background;
use crate::release_hub::{ReleaseHub, ReleaseWatch, parse_announcement};

/// Slots of a Redis Cluster.
const SLOTS: u16 = 16384;
/// How long a channel stays subscribed after its last waiter left (as on one server).
const LINGER: Duration = Duration::from_secs(1);

/// A Redis Cluster: one connection for commands, one (RESP3) for sharded subscriptions.
pub(crate) struct ClusterLink {
    commands: ClusterConnection,
    subscriptions: ClusterConnection,
    hub: Arc<ReleaseHub>,
    /// Orders the subscribes of a channel after the unsubscribe of its retired entry: held
    /// across both, so that an unsubscribe sent late never undoes a new waiter's subscribe.
    subscribing: Arc<tokio::sync::Mutex<()>>,
    /// How long a subscribe may take, waiting for the lock included: a half-open connection
    /// must not hold waiters past their `wait_ms`.
    response_timeout: Duration,
    /// The nodes it was given, without credentials.
    nodes: String,
    /// The first node given: `CLUSTER SLOTS` is asked there, and a master it names without a
    /// host (a one-node cluster's node, which never met another) is that node's host.
    seed: Option<(String, u16)>,
}

impl ClusterLink {
    /// Connects to the cluster that `urls` (some of its nodes) belong to.
    pub(crate) async fn connect(
        urls: &[String],
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<ClusterLink> {
        let builder = || {
            ClusterClientBuilder::new(urls.to_vec())
                .connection_timeout(connect_timeout)
                .response_timeout(response_timeout)
        };
        let commands = builder().build()?.get_async_connection().await?;
        let (pushes, received) = mpsc::unbounded_channel();
        let subscriptions = builder()
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()?
            .get_async_connection()
            .await?;
        let (idle, idle_channels) = mpsc::unbounded_channel();
        let hub = Arc::new(ReleaseHub::with_idle_reports(idle));
        let subscribing = Arc::new(tokio::sync::Mutex::new(()));
        let announcing = announce(received, Arc::downgrade(&hub));
        let unsubscribing = unsubscribe_idle(
            idle_channels,
            Arc::downgrade(&hub),
            subscriptions.clone(),
            Arc::downgrade(&subscribing),
            response_timeout,
        );
        for task in [
            Box::pin(announcing) as crate::backend::BoxFuture<'static, ()>,
            Box::pin(unsubscribing),
        ] {
            if let Err(error) = Background::Driver.spawn(task) {
                tracing::warn!(target: "fencelock", %error, "Redis Cluster release notifications will not work");
            }
        }
        let addrs: Vec<redis::ConnectionAddr> = urls
            .iter()
            .filter_map(|url| redis::Client::open(url.as_str()).ok())
            .map(|client| client.get_connection_info().addr().clone())
            .collect();
        let nodes = addrs.iter().map(ToString::to_string).collect::<Vec<_>>();
        let seed = addrs.first().and_then(|addr| match addr {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
            _ => None,
        });
        Ok(ClusterLink {
            commands,
            subscriptions,
            hub,
            subscribing,
            response_timeout,
            nodes: nodes.join(", "),
            seed,
        })
    }

    /// The nodes given, without credentials.
    pub(crate) fn describe(&self) -> String {
        format!("Redis Cluster ({})", self.nodes)
    }

    /// A handle to the command connection.
    pub(crate) fn commands(&self) -> ClusterConnection {
        self.commands.clone()
    }

    /// Sends the extend calls of `calls` (each a list of lock keys with their arguments, all
    /// in one slot) as one pipeline per slot, all slots at once; the replies in order.
    pub(crate) async fn extend(&self, calls: Vec<ExtendCall>) -> RedisResult<Vec<Vec<i64>>> {
        let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
        for (index, call) in calls.iter().enumerate() {
            by_slot.entry(call.slot).or_default().push(index);
        }
        let pipelines = by_slot.into_values().map(|indices| {
            let mut pipeline = redis::pipe();
            for &index in &indices {
                pipeline.invoke_script(&calls[index].invocation);
            }
            async move {
                let replies = query_loading_extend(&pipeline, &mut self.commands()).await?;
                Ok::<_, RedisError>((indices, replies))
            }
        });
        let mut replies = vec![Vec::new(); calls.len()];
        for outcome in join_all(pipelines).await {
            let (indices, answered): (Vec<usize>, Vec<Vec<i64>>) = outcome?;
            for (index, reply) in indices.into_iter().zip(answered) {
                replies[index] = reply;
            }
        }
        Ok(replies)
    }

    /// A watch of `channel` if it is subscribed already.
    pub(crate) fn watch_if_subscribed(&self, channel: &str) -> Option<ReleaseWatch> {
        self.hub.watch_subscribed(channel)
    }

    /// A watch of `channel`, returned once its shard confirmed the subscription.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<ReleaseWatch, LockError> {
        let (watch, subscribed) = self.hub.watch(channel);
        subscribed
            .get_or_try_init(|| async {
                let subscribing = async {
                    let _subscribing = self.subscribing.lock().await;
                    self.subscriptions.clone().ssubscribe(channel).await
                };
                let error = match tokio::time::timeout(self.response_timeout, subscribing).await {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(error)) => error,
                    Err(_) => RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "subscribing timed out",
                    )),
                };
                Err(LockError::backend(
                    None,
                    "cannot subscribe to release notifications",
                    Some(Arc::new(error)),
                ))
            })
            .await?;
        Ok(watch)
    }
}

/// One node of the cluster, as a connection whose commands and pipelines all go to it (a
/// `SCAN` walks the keys of one node).
pub(crate) struct ClusterNode {
    commands: ClusterConnection,
    host: String,
    port: u16,
}

impl ClusterNode {
    fn route(&self) -> SingleNodeRoutingInfo {
        SingleNodeRoutingInfo::ByAddress {
            host: self.host.clone(),
            port: self.port,
        }
    }
}

impl std::fmt::Display for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl ConnectionLike for ClusterNode {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let routing = RoutingInfo::SingleNode(self.route());
        Box::pin(self.commands.route_command(cmd.clone(), routing))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let route = self.route();
        Box::pin(
            self.commands
                .route_pipeline(pipeline.clone(), offset, count, route),
        )
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl ClusterLink {
    /// The masters, as the cluster names them now (`CLUSTER SLOTS`, from which the cluster
    /// client learns the addresses it routes to): the first node of each slot range.
    pub(crate) async fn masters(&self) -> RedisResult<Vec<ClusterNode>> {
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let slots: Value = match &self.seed {
            Some((host, port)) => {
                let seed = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let to_seed = RoutingInfo::SingleNode(seed);
                self.commands().route_command(slots, to_seed).await?
            }
            None => slots.query_async(&mut self.commands()).await?,
        };
        // As redis-rs reads it: an empty or wildcard host is the answering node's.
        let answering = self.seed.as_ref().map_or("", |(host, _)| host.as_str());
        let host_of = |named: String| match named.as_str() {
            "" | "0.0.0.0" | "::" => answering.to_owned(),
            _ => named,
        };
        let Value::Array(ranges) = slots else {
            return Err(RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected CLUSTER SLOTS reply",
            )));
        };
        let mut masters: Vec<(String, u16)> = ranges
            .iter()
            .filter_map(|range| match range {
                Value::Array(range) => match range.get(2) {
                    Some(Value::Array(master)) => {
                        let host = host_of(text(master.first()?)?);
                        let port = super::integer(master.get(1)?)?;
                        Some((host, u16::try_from(port).ok()?))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        masters.sort();
        masters.dedup();
        Ok(masters
            .into_iter()
            .map(|(host, port)| ClusterNode {
                commands: self.commands(),
                host,
                port,
            })
            .collect())
    }
}

/// One extend script call, with the slot of its keys.
pub(crate) struct ExtendCall {
    pub(crate) slot: u16,
    pub(crate) invocation: redis::ScriptInvocation<'static>,
}

/// Wakes the waiters of each channel a sharded message arrives on; after a disconnection
/// (the cluster client subscribes again by itself) wakes every waiter, since a release may
/// have gone unheard. A channel the server unsubscribed by itself (its slot moved to another
/// node) is marked unsubscribed, so that its waiters subscribe again, on the new owner.
async fn announce(mut pushes: mpsc::UnboundedReceiver<PushInfo>, hub: Weak<ReleaseHub>) {
    while let Some(push) = pushes.recv().await {
        let Some(hub) = hub.upgrade() else { return };
        match push.kind {
            PushKind::SMessage => {
                if let [channel, payload, ..] = push.data.as_slice()
                    && let (Some(channel), Some(payload)) = (text(channel), text(payload))
                {
                    hub.announce(&channel, parse_announcement(&payload));
                }
            }
            PushKind::Disconnection => hub.subscriptions_lost(),
            PushKind::SUnsubscribe => {
                if let Some(channel) = push.data.first().and_then(text) {
                    hub.subscription_lost(&channel);
                }
            }
            _ => {}
        }
    }
}

/// Unsubscribes each channel nobody has waited for during `LINGER` (a timer per channel, as
/// on one server), under the subscribing lock.
async fn unsubscribe_idle(
    mut idle: mpsc::UnboundedReceiver<String>,
    hub: Weak<ReleaseHub>,
    subscriptions: ClusterConnection,
    subscribing: Weak<tokio::sync::Mutex<()>>,
    response_timeout: Duration,
) {
    while let Some(channel) = idle.recv().await {
        let (hub, subscribing) = (hub.clone(), subscribing.clone());
        let mut subscriptions = subscriptions.clone();
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            let (Some(hub), Some(subscribing)) = (hub.upgrade(), subscribing.upgrade()) else {
                return;
            };
            let _subscribing = subscribing.lock().await;
            if hub.retire_if_idle(&channel) {
                let unsubscribing = subscriptions.sunsubscribe(&channel);
                let _ = tokio::time::timeout(response_timeout, unsubscribing).await;
            }
        });
    }
}

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the hash tag (the
/// text between the first `{` and the next `}`, when not empty), else of the whole key.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::slot;

    // The examples of the Redis Cluster specification and `CLUSTER KEYSLOT`.
    #[test]
    fn slots_agree_with_redis_cluster() {
        // CRC16 of "123456789" is 0x31C3, below 16384.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot("lock:{stock:42}:v2:fence"), slot("stock:42"));
    }
}
