//! Release notifications over Redis pub/sub: one subscription connection per client.
//!
//! The release script publishes on `<lock key>:released`. A channel is subscribed while some
//! waiter of this client waits for its key, and for a second after the last one left (so a
//! busy key is not subscribed and unsubscribed at every hand-off). If the connection drops,
//! every waiter wakes to try again, and the next wait subscribes anew: correctness never
//! depends on a notification arriving, only the speed of the hand-off does.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use redis::{Client, RedisError};
use tokio::sync::{Mutex, mpsc};

use crate::LockError;
use crate::driver::Background;
use crate::notify::{ReleaseHub, ReleaseWatch};

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(1);

pub(crate) struct Notifier {
    client: Client,
    response_timeout: Duration,
    /// Keyed by channel name.
    hub: Arc<ReleaseHub>,
    /// The subscription connection, opened on first use. Its lock also orders subscribes and
    /// unsubscribes of one channel.
    sink: Arc<Mutex<Option<PubSubSink>>>,
}

impl Notifier {
    pub(crate) fn new(client: Client, response_timeout: Duration) -> Self {
        let (idle, idle_channels) = mpsc::unbounded_channel();
        let hub = Arc::new(ReleaseHub::with_idle_reports(idle));
        let sink = Arc::new(Mutex::new(None));
        let unsubscriber =
            unsubscribe_idle(idle_channels, Arc::downgrade(&hub), Arc::downgrade(&sink));
        if let Err(error) = Background::Driver.spawn(unsubscriber) {
            tracing::warn!(%error, "release notifications will not unsubscribe idle channels");
        }
        Notifier {
            client,
            response_timeout,
            hub,
            sink,
        }
    }

    /// A watch of `channel`, returned once Redis confirmed the subscription.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<ReleaseWatch, LockError> {
        let (watch, subscribed) = self.hub.watch(channel);
        subscribed
            .get_or_try_init(|| async {
                let mut sink = self.sink.lock().await;
                let subscribing = async {
                    if sink.is_none() {
                        *sink = Some(self.connect().await?);
                    }
                    match sink.as_mut() {
                        Some(sink) => sink.subscribe(channel).await,
                        None => Err(RedisError::from(std::io::Error::other(
                            "no subscription connection",
                        ))),
                    }
                };
                match tokio::time::timeout(self.response_timeout, subscribing).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(error)) => {
                        *sink = None;
                        Err(LockError::backend(
                            None,
                            format!("cannot subscribe to release notifications: {error}"),
                            Some(Arc::new(error)),
                        ))
                    }
                    Err(_) => {
                        *sink = None;
                        Err(LockError::backend(
                            None,
                            "subscribing to release notifications timed out",
                            None,
                        ))
                    }
                }
            })
            .await?;
        Ok(watch)
    }

    /// Opens the subscription connection on the driver, with a task there that turns its
    /// messages into wake-ups.
    async fn connect(&self) -> Result<PubSubSink, RedisError> {
        let client = self.client.clone();
        let hub = Arc::downgrade(&self.hub);
        let sink = Arc::downgrade(&self.sink);
        let opened = Background::Driver
            .spawn(async move {
                let (subscriptions, messages) = client.get_async_pubsub().await?.split();
                tokio::spawn(announce(messages, hub, sink));
                Ok::<_, RedisError>(subscriptions)
            })
            .map_err(|e| RedisError::from(std::io::Error::other(e.to_string())))?;
        match tokio::time::timeout(self.response_timeout, opened).await {
            Ok(Ok(result)) => result,
            Ok(Err(join_error)) => Err(RedisError::from(std::io::Error::other(
                join_error.to_string(),
            ))),
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "opening the subscription connection timed out",
            ))),
        }
    }
}

/// Wakes the waiters of each channel a message arrives on; when the connection ends, forgets
/// it and wakes everyone.
async fn announce(
    mut messages: redis::aio::PubSubStream,
    hub: Weak<ReleaseHub>,
    sink: Weak<Mutex<Option<PubSubSink>>>,
) {
    while let Some(message) = messages.next().await {
        let Some(hub) = hub.upgrade() else { return };
        hub.released(message.get_channel_name());
    }
    if let Some(sink) = sink.upgrade() {
        *sink.lock().await = None;
    }
    if let Some(hub) = hub.upgrade() {
        hub.subscriptions_lost();
    }
}

/// Unsubscribes channels nobody has waited for during `LINGER`.
async fn unsubscribe_idle(
    mut idle_channels: mpsc::UnboundedReceiver<String>,
    hub: Weak<ReleaseHub>,
    sink: Weak<Mutex<Option<PubSubSink>>>,
) {
    while let Some(channel) = idle_channels.recv().await {
        let (hub, sink) = (hub.clone(), sink.clone());
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            let (Some(hub), Some(sink)) = (hub.upgrade(), sink.upgrade()) else {
                return;
            };
            let mut sink = sink.lock().await;
            // Checked under the sink's lock: a waiter that came back meanwhile subscribes
            // under the same lock, after this.
            if hub.retire_if_idle(&channel)
                && let Some(connection) = sink.as_mut()
                && connection.unsubscribe(&channel).await.is_err()
            {
                *sink = None;
            }
        });
    }
}
