//! Release notifications over Redis pub/sub: one subscription connection per client.
//!
//! The release script publishes on `<lock key>:released`. A channel is subscribed while some
//! waiter of this client waits for its key, and for a second after the last one left (so a
//! busy key is not subscribed and unsubscribed at every hand-off). When the connection fails
//! (an error, a timeout, its end, or no answer to a `PING` when quiet), it is closed for good,
//! every waiter wakes to try again, and the next wait subscribes on a new one: correctness
//! never depends on a notification arriving, only the speed of the hand-off does.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use redis::aio::PubSubSink;
use tokio::sync::{Mutex, MutexGuard, mpsc};
use tokio::task::{AbortHandle, JoinHandle};

use super::server::Server;
use crate::LockError;
use crate::background::Background;
use crate::release_hub::{ReleaseEvent, ReleaseHub, ReleaseWatch, parse_announcement};

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(1);

/// How many times a subscribe is sent, each on a new connection if the last one failed.
const SUBSCRIBE_SENDS: usize = 2;

/// How often a quiet subscription connection is asked for a `PING`: a connection that went
/// silent (a partition that keeps the socket open) announces nothing, and would otherwise
/// never be found out.
const KEEPALIVE: Duration = Duration::from_secs(5);

pub(crate) struct Notifier {
    server: Server,
    response_timeout: Duration,
    /// Keyed by channel name.
    hub: Arc<ReleaseHub>,
    /// The subscription connection, opened on first use. Its lock also orders subscribes and
    /// unsubscribes of one channel.
    current: Arc<Mutex<Option<Subscriptions>>>,
    generations: AtomicU64,
}

/// One subscription connection: where to send (un)subscribes, and the task that reads its
/// messages (aborting it closes the connection).
struct Subscriptions {
    sink: PubSubSink,
    generation: u64,
    reader: AbortHandle,
}

/// Closes the current connection if it is the one of `generation` (if that was sent on at
/// all) and wakes every waiter: channels must be subscribed again on the next connection.
fn close(current: &mut Option<Subscriptions>, generation: Option<u64>, hub: &ReleaseHub) {
    if current
        .as_ref()
        .is_some_and(|c| generation == Some(c.generation))
        && let Some(closed) = current.take()
    {
        closed.reader.abort();
        hub.subscriptions_lost();
    }
}

fn io_error(message: impl Into<String>) -> RedisError {
    RedisError::from(std::io::Error::other(message.into()))
}

impl Notifier {
    pub(crate) fn new(server: Server, response_timeout: Duration) -> Self {
        let (idle, idle_channels) = mpsc::unbounded_channel();
        let hub = Arc::new(ReleaseHub::with_idle_reports(idle));
        let current = Arc::new(Mutex::new(None));
        let unsubscriber = unsubscribe_idle(
            idle_channels,
            Arc::downgrade(&hub),
            Arc::downgrade(&current),
            response_timeout,
        );
        if let Err(error) = Background::Driver.spawn(unsubscriber) {
            tracing::warn!(target: "fencelock", %error, "release notifications will not unsubscribe idle channels");
        }
        Notifier {
            server,
            response_timeout,
            hub,
            current,
            generations: AtomicU64::new(0),
        }
    }

    /// A watch of `channel` if it is subscribed already.
    pub(crate) fn watch_if_subscribed(&self, channel: &str) -> Option<ReleaseWatch> {
        self.hub.watch_subscribed(channel)
    }

    /// A watch of `channel`, returned once Redis confirmed the subscription.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<ReleaseWatch, LockError> {
        let (watch, subscribed) = self.hub.watch(channel);
        subscribed
            .get_or_try_init(|| async {
                // Everything, waiting for the lock included, within the response timeout: a
                // half-open connection must not hold waiters past their `wait_ms`.
                let mut sent_on = None;
                let subscribing = self.send_subscribe(channel, &mut sent_on);
                let error = match tokio::time::timeout(self.response_timeout, subscribing).await {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(error)) => error,
                    Err(_) => {
                        if let Ok(mut current) = self.current.try_lock() {
                            close(&mut current, sent_on, &self.hub);
                        }
                        io_error("subscribing timed out")
                    }
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

    /// Subscribes to `channel` on the current connection, opened first if there is none. A
    /// connection that fails fails every subscribe sent on it: each is sent once more, on a
    /// new connection, rather than leave its waiter to poll for the rest of its wait (a
    /// refusal, such as an ACL's, is not sent again). `sent_on`: the generation of the
    /// connection the last subscribe went out on.
    async fn send_subscribe(
        &self,
        channel: &str,
        sent_on: &mut Option<u64>,
    ) -> Result<(), RedisError> {
        let mut failure = None;
        for _ in 0..SUBSCRIBE_SENDS {
            let mut current = self.current.lock().await;
            if failure.is_some() {
                close(&mut current, *sent_on, &self.hub);
            }
            if current.is_none() {
                *current = Some(self.connect().await?);
            }
            let change = Change::Subscribe(channel.to_owned());
            match send_in_order(current, change, sent_on).await {
                Ok(()) => return Ok(()),
                Err(error) if error.is_connection_dropped() => failure = Some(error),
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        close(&mut *self.current.lock().await, *sent_on, &self.hub);
        Err(failure.unwrap_or_else(|| io_error("no subscription connection")))
    }

    /// Opens a subscription connection on the background runtime, with a task there that turns its
    /// messages into wake-ups. If the caller gives up (a timeout, or its future is dropped
    /// with the waiter's), the opening is aborted, and a connection it opened anyway is
    /// closed with the unread result: the reading task starts only once the connection is
    /// handed over.
    async fn connect(&self) -> Result<Subscriptions, RedisError> {
        let server = self.server.clone();
        let opening = Background::Driver
            .spawn(async move { server.client().await?.get_async_pubsub().await })
            .map_err(|e| io_error(e.to_string()))?;
        let mut opening = AbortOnDrop(opening);
        let (sink, messages) =
            match tokio::time::timeout(self.response_timeout, &mut opening.0).await {
                Ok(Ok(Ok(pubsub))) => pubsub.split(),
                Ok(Ok(Err(error))) => return Err(error),
                Ok(Err(join_error)) => return Err(io_error(join_error.to_string())),
                Err(_) => return Err(io_error("opening the subscription connection timed out")),
            };
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let reading = announce(
            messages,
            Keepalive {
                sink: sink.clone(),
                response_timeout: self.response_timeout,
            },
            Arc::downgrade(&self.hub),
            Arc::downgrade(&self.current),
            generation,
        );
        let reader = Background::Driver
            .spawn(reading)
            .map_err(|e| io_error(e.to_string()))?;
        Ok(Subscriptions {
            sink,
            generation,
            reader: reader.abort_handle(),
        })
    }
}

/// Aborts a task when dropped (a `JoinHandle` alone lets it run on).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Ok(mut current) = self.current.try_lock() {
            let generation = current.as_ref().map(|c| c.generation);
            close(&mut current, generation, &self.hub);
        }
    }
}

/// How the reading task checks that a quiet connection still answers.
struct Keepalive {
    sink: PubSubSink,
    response_timeout: Duration,
}

impl Keepalive {
    /// Whether the connection answers a `PING` within the response timeout.
    async fn answers(&mut self) -> bool {
        let ping = self.sink.ping::<redis::Value>();
        matches!(
            tokio::time::timeout(self.response_timeout, ping).await,
            Ok(Ok(_))
        )
    }
}

/// Wakes the waiters of each channel a message arrives on; when its connection ends, or
/// does not answer a `PING` after `KEEPALIVE` without a message, closes it (if it is still the
/// current one), which wakes every waiter.
async fn announce(
    mut messages: redis::aio::PubSubStream,
    mut keepalive: Keepalive,
    hub: Weak<ReleaseHub>,
    current: Weak<Mutex<Option<Subscriptions>>>,
    generation: u64,
) {
    loop {
        let message = match tokio::time::timeout(KEEPALIVE, messages.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(_quiet) if keepalive.answers().await => continue,
            Err(_quiet) => break,
        };
        let Some(hub) = hub.upgrade() else { return };
        hub.announce(message.get_channel_name(), announcement(&message));
    }
    if let (Some(current), Some(hub)) = (current.upgrade(), hub.upgrade()) {
        close(&mut *current.lock().await, Some(generation), &hub);
    }
}

/// What a release message announces.
fn announcement(message: &redis::Msg) -> ReleaseEvent {
    message
        .get_payload::<String>()
        .map_or(ReleaseEvent::Unrecognised, |payload| {
            parse_announcement(&payload)
        })
}

/// A change to the channels the connection is subscribed to.
enum Change {
    Subscribe(String),
    Unsubscribe(String),
}

/// Sends `change` on the connection whose lock `locked` is, and waits for Redis to confirm
/// it. Only the sending is under the lock: the changes of one channel reach Redis in the
/// order they took it, while their round trips overlap (a lock held for each round trip let
/// a client subscribe to one channel per round trip, and under load its waiters queued for
/// hundreds of milliseconds to subscribe). `sent_on`: the connection's generation, once
/// sent.
async fn send_in_order(
    mut locked: MutexGuard<'_, Option<Subscriptions>>,
    change: Change,
    sent_on: &mut Option<u64>,
) -> Result<(), RedisError> {
    let Some(subscriptions) = locked.as_mut() else {
        return Err(io_error("no subscription connection"));
    };
    let generation = subscriptions.generation;
    let mut sink = subscriptions.sink.clone();
    let sending = async move {
        match change {
            Change::Subscribe(channel) => sink.subscribe(channel).await,
            Change::Unsubscribe(channel) => sink.unsubscribe(channel).await,
        }
    };
    let mut sending = pin!(sending);
    // redis-rs queues a command on its connection when the command's future is first polled,
    // before it awaits the reply: polled once under the lock, it is sent in the lock's order.
    let first_poll = poll_fn(|cx| Poll::Ready(sending.as_mut().poll(cx))).await;
    *sent_on = Some(generation);
    drop(locked);
    match first_poll {
        Poll::Ready(confirmed) => confirmed,
        Poll::Pending => sending.await,
    }
}

/// Unsubscribes channels nobody has waited for during `LINGER`.
async fn unsubscribe_idle(
    mut idle_channels: mpsc::UnboundedReceiver<String>,
    hub: Weak<ReleaseHub>,
    current: Weak<Mutex<Option<Subscriptions>>>,
    response_timeout: Duration,
) {
    while let Some(channel) = idle_channels.recv().await {
        let (hub, current) = (hub.clone(), current.clone());
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            let (Some(hub), Some(current)) = (hub.upgrade(), current.upgrade()) else {
                return;
            };
            let unsubscribing = async {
                let locked = current.lock().await;
                // Checked under the connection's lock: a waiter that came back meanwhile
                // subscribes under the same lock, after this.
                if hub.retire_if_idle(&channel) && locked.is_some() {
                    let mut sent_on = None;
                    let change = Change::Unsubscribe(channel);
                    if send_in_order(locked, change, &mut sent_on).await.is_err() {
                        close(&mut *current.lock().await, sent_on, &hub);
                    }
                }
            };
            // A connection that does not answer is left for the next subscribe to replace.
            let _ = tokio::time::timeout(response_timeout, unsubscribing).await;
        });
    }
}
