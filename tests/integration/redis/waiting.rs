//! Waiting without polling: waiters wake on release, a release racing the subscription is
//! not missed, and fair mode serves waiters in arrival order. Against a real redis-server,
//! and on the memory backend with the paused clock.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use fencelock::backend::memory::MemoryBackend;
use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::{Acquire, BoxFuture, Lease, LockBackend, ReleaseWatch, Turn};
use fencelock::testing::{
    Call, Direction, Intercepted, Interceptor, RedisServer, TcpProxy, Verdict,
};
use fencelock::{LockClient, LockError, LockGuard, LockKind};
use redis::AsyncCommands;

use crate::support::{self, client, eventually, inspector, redis_server};

/// With `sleep_ms = 5000`, a waiter that polled would take seconds; a woken one, a round trip.
const SLEEPY: u64 = 5_000;

/// Waits until `count` clients are subscribed to the release channel of `key`.
async fn subscribers(redis: &redis::aio::MultiplexedConnection, key: &str, count: u64) {
    let channel = format!("lock:{{{key}}}:v2:released");
    let subscribed = eventually(Duration::from_secs(10), || {
        let (mut redis, channel) = (redis.clone(), channel.clone());
        async move {
            let reply: (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut redis)
                .await
                .unwrap();
            reply.1 == count
        }
    })
    .await;
    assert!(subscribed, "{count} subscriber(s) on {channel}");
}

/// Waits until the fair queue of the key `fair` holds `length` waiters.
async fn queue_reaches(redis: &redis::aio::MultiplexedConnection, length: usize) {
    let reached = eventually(Duration::from_secs(10), || {
        let mut redis = redis.clone();
        async move {
            redis
                .llen::<_, usize>("lock:{fair}:v2:queue")
                .await
                .unwrap()
                == length
        }
    })
    .await;
    assert!(reached, "the fair queue holds {length} waiter(s)");
}

#[tokio::test]
async fn a_waiter_wakes_on_release_not_after_sleep_ms() {
    let server = redis_server();
    let (holder_client, waiter_client) = (client(&server).await, client(&server).await);
    let redis = inspector(&server).await;
    let holder = holder_client
        .lock("k")
        .ttl_ms(60_000)
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let guard = waiter_client
            .lock("k")
            .sleep_ms(SLEEPY)
            .wait_ms(30_000)
            .acquire()
            .await;
        (guard, Instant::now())
    });
    subscribers(&redis, "k", 1).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (guard, acquired_at) = waiter.await.unwrap();
    guard.unwrap().release().await.unwrap();
    let waited = acquired_at - released_at;
    assert!(
        waited < Duration::from_millis(1_500),
        "woken by the release after {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn on_the_memory_backend_a_waiter_takes_the_lock_the_moment_it_is_released() {
    let client = LockClient::memory_on(tokio::runtime::Handle::current());
    let holder = client.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let guard = client
                .lock("k")
                .sleep_ms(SLEEPY)
                .wait_ms(30_000)
                .acquire()
                .await;
            (guard, tokio::time::Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(1_234)).await;
    let released_at = tokio::time::Instant::now();
    holder.release().await.unwrap();
    let (guard, acquired_at) = waiter.await.unwrap();
    guard.unwrap().release().await.unwrap();
    assert_eq!(
        acquired_at, released_at,
        "no virtual time passed between release and grant"
    );
}

/// Releases the holder when the waiter subscribes: the release happens after the waiter's
/// failed attempt but before its subscription is in place, so no notification reaches it.
#[derive(Debug)]
struct ReleaseBeforeSubscribing {
    holder: Mutex<Option<LockGuard>>,
}

impl Interceptor for ReleaseBeforeSubscribing {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Call::Subscribe { .. } = call {
                let holder = self.holder.lock().unwrap().take();
                if let Some(holder) = holder {
                    holder.release().await.unwrap();
                }
            }
            Verdict::Pass
        })
    }
}

#[tokio::test]
async fn a_release_between_the_failed_attempt_and_the_subscription_is_not_missed() {
    let server = redis_server();
    let holder = client(&server)
        .await
        .lock("k")
        .ttl_ms(60_000)
        .acquire()
        .await
        .unwrap();
    let redis = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let waiter = LockClient::from_backend(Intercepted::new(
        redis,
        ReleaseBeforeSubscribing {
            holder: Mutex::new(Some(holder)),
        },
    ));
    let started = Instant::now();
    let guard = waiter
        .lock("k")
        .sleep_ms(SLEEPY)
        .wait_ms(30_000)
        .acquire()
        .await
        .unwrap();
    let waited = started.elapsed();
    guard.release().await.unwrap();
    assert!(
        waited < Duration::from_millis(1_500),
        "the attempt after subscribing saw the free key: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_serves_waiters_in_arrival_order() {
    const WAITERS: usize = 5;
    let server = redis_server();
    let holder_client = client(&server).await;
    let mut redis = inspector(&server).await;
    let holder = holder_client
        .lock("fair")
        .ttl_ms(60_000)
        .acquire()
        .await
        .unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for id in 0..WAITERS {
        // A client each, as if each waiter were its own process.
        let waiter_client = client(&server).await;
        let served = served.clone();
        waiters.push(tokio::spawn(async move {
            let request = waiter_client
                .lock("fair")
                .fair(true)
                .sleep_ms(200)
                .wait_ms(30_000);
            let guard = request.acquire().await.unwrap();
            served.lock().unwrap().push(id);
            guard.release().await.unwrap();
        }));
        // Start the next waiter only once this one is visibly queued.
        queue_reaches(&redis, id + 1).await;
    }
    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    let leftovers: Vec<String> = redis.keys("lock:{fair}:v2:queue*").await.unwrap();
    assert!(
        leftovers.is_empty(),
        "the queue is gone with its last waiter: {leftovers:?}"
    );
}

/// A release hands the key to the oldest waiter, which holds it without another attempt;
/// the waiters behind it sleep on. Three waiters in line, served one after the other: four
/// releases and no attempt, in either mode (when every release woke every waiter, the
/// attempts were 3 + 2 + 1; when a release named the head, 3).
#[tokio::test]
async fn releases_hand_the_key_down_the_line_without_an_attempt() {
    for fair in [true, false] {
        hand_down_the_line(fair).await;
    }
}

async fn hand_down_the_line(fair: bool) {
    const WAITERS: usize = 3;
    // Pauses of 10 to 20 s: no waiter attempts on its own while the test runs.
    const PAUSE_MS: u64 = 20_000;
    let server = redis_server();
    let holder_client = client(&server).await;
    let mut redis = inspector(&server).await;
    // Loads the scripts, whose first call Redis counts twice (no library yet, then again).
    let warm = holder_client.lock("warm").acquire().await.unwrap();
    warm.release().await.unwrap();
    let holder = holder_client
        .lock("fair")
        .ttl_ms(60_000)
        .acquire()
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for id in 0..WAITERS {
        let waiter_client = client(&server).await;
        waiters.push(tokio::spawn(async move {
            let request = waiter_client
                .lock("fair")
                .fair(fair)
                .sleep_ms(PAUSE_MS)
                .wait_ms(60_000);
            request.acquire().await.unwrap().release().await.unwrap();
        }));
        queue_reaches(&redis, id + 1).await;
    }
    subscribers(&redis, "fair", WAITERS as u64).await;
    let before = support::script_calls(&mut redis).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert!(
        released_at.elapsed() < Duration::from_millis(PAUSE_MS / 2),
        "fair({fair}): each release handed the key on, none waited for its pause"
    );
    let calls = support::script_calls(&mut redis).await - before;
    assert_eq!(calls, 4, "fair({fair}): 4 releases, nothing else");
}

/// Passes every call: an `Intercepted` backend only to keep a handle on the memory backend
/// that the client uses.
#[derive(Debug)]
struct Passes;

impl Interceptor for Passes {
    fn before<'a>(&'a self, _: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(std::future::ready(Verdict::Pass))
    }
}

/// A release that hands the key to a waiter that died (it never attempts again) does not
/// stall the waiters behind it past the documented bound: the grant lasts until its place
/// would have lapsed, `3 × sleep_ms` after its last attempt, and the next waiter's own pause
/// (cut at the end of that lease) then ends in an attempt that gets the key.
#[tokio::test(start_paused = true)]
async fn a_dead_waiter_handed_the_key_holds_it_no_longer_than_its_place() {
    const SLEEP_MS: u64 = 1_000;
    let backend = Intercepted::new(MemoryBackend::new(), Passes);
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = client.lock("k").acquire().await.unwrap();
    // Its lease outlasts its place: the place bounds the grant.
    let dead = Lease {
        key: "k".into(),
        owner: "dead".into(),
        ttl: Duration::from_secs(60),
        replicas: 0,
        kind: LockKind::Mutex,
    };
    let place = Duration::from_millis(3 * SLEEP_MS);
    let queued_at = tokio::time::Instant::now();
    let attempt = backend.backend.acquire(&dead, Turn::Fair(place)).await;
    assert!(matches!(attempt, Ok(Acquire::Held { .. })), "{attempt:?}");
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let request = client
                .lock("k")
                .fair(true)
                .sleep_ms(SLEEP_MS)
                .wait_ms(60_000);
            let guard = request.acquire().await;
            (guard, tokio::time::Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    holder.release().await.unwrap();
    let (guard, granted_at) = waiter.await.unwrap();
    assert!(guard.is_ok(), "{guard:?}");
    let waited = granted_at - queued_at;
    assert!(
        waited >= place && waited <= place + Duration::from_millis(SLEEP_MS + 1),
        "granted {waited:?} after the dead head queued"
    );
}

#[tokio::test]
async fn a_fair_waiter_that_gives_up_leaves_the_queue() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    let holder = locks.lock("fair").ttl_ms(60_000).acquire().await.unwrap();
    let gave_up = locks
        .lock("fair")
        .fair(true)
        .sleep_ms(10)
        .wait_ms(100)
        .acquire()
        .await;
    assert!(
        matches!(gave_up, Err(LockError::NotAcquired { .. })),
        "{gave_up:?}"
    );
    // The place was given back.
    queue_reaches(&redis, 0).await;
    holder.release().await.unwrap();
    let _: () = redis.del("unused").await.unwrap();
}

/// Review defect 7: a waiter cancelled while its client opens the subscription connection must not
/// leave that connection (and the tasks serving it) behind. Before, the task opening it ran
/// on after the cancellation and kept the connection forever.
#[tokio::test]
async fn a_waiter_cancelled_while_subscribing_leaves_no_connection_behind() {
    let server = redis_server();
    let mut redis = inspector(&server).await;
    let holder = client(&server).await;
    let _held = holder.lock("busy").ttl_ms(60_000).acquire().await.unwrap();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let waiter_client = LockClient::connect(&proxy.url()).await.unwrap();
    support::lock_once(&waiter_client, "warm-up").await;
    let connected = |redis: redis::aio::MultiplexedConnection| async move {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap()
    };
    let before = connected(redis.clone()).await;
    for _ in 0..3 {
        proxy.hold_next_connection();
        let waiter = tokio::spawn({
            let waiter_client = waiter_client.clone();
            async move { waiter_client.lock("busy").wait_ms(30_000).acquire().await }
        });
        // The waiter's attempt failed and it is opening the subscription connection.
        proxy.held().await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        proxy.deliver_held().await;
    }
    let back = eventually(Duration::from_secs(5), || {
        let redis = redis.clone();
        async move { connected(redis).await == before }
    })
    .await;
    assert!(
        back,
        "connections: {before} before, {} after three cancelled subscriptions",
        connected(redis.clone()).await
    );
    let _: () = redis.del("unused").await.unwrap();
}

/// A Redis backend whose subscription connection goes through a proxy, opened already (by a
/// subscription of its own), with a response timeout longer than any check here takes: a
/// subscribe held up must fail them by not being sent, not by timing out.
async fn subscribing_through_a_proxy()
-> (RedisServer, Arc<TcpProxy>, Arc<RedisBackend>, ReleaseWatch) {
    let server = redis_server();
    let proxy =
        Arc::new(TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap());
    let mut settings = RedisSettings::default();
    settings.timeouts.response = Duration::from_secs(60);
    let backend = Arc::new(RedisBackend::connect(&proxy.url(), settings).await.unwrap());
    // Only confirmations travel through the proxy from now on (the command connection stays
    // idle).
    let opened = backend.subscribe("opened").await.unwrap();
    (server, proxy, backend, opened)
}

/// Subscribes `backend` to `key`'s releases, in a task of its own.
fn subscribe(
    backend: &Arc<RedisBackend>,
    key: &'static str,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let backend = backend.clone();
    tokio::spawn(async move { backend.subscribe(key).await.map(drop) })
}

/// Subscriptions to different keys overlap their round trips: a subscription whose
/// confirmation is slow holds back no other key's. Before, a client sent one `SUBSCRIBE` per
/// round trip, and under load its waiters queued for hundreds of milliseconds to subscribe
/// (the bench's open loop collapsed at two thirds of its capacity).
#[tokio::test]
async fn a_slow_subscription_holds_back_no_other_key_s() {
    let (server, proxy, backend, _opened) = subscribing_through_a_proxy().await;
    let redis = inspector(&server).await;
    proxy.hold_next(Direction::ToClient);
    let slow = subscribe(&backend, "slow");
    proxy.held().await;
    let other = subscribe(&backend, "other");
    subscribers(&redis, "other", 1).await;
    let delivering = tokio::spawn({
        let proxy = proxy.clone();
        async move { proxy.deliver_held().await }
    });
    slow.await.unwrap().unwrap();
    other.await.unwrap().unwrap();
    delivering.abort();
}

/// A subscription connection that fails fails every subscribe sent on it: each is sent once
/// more, on a new connection, rather than leave its waiter to poll for the rest of its wait.
#[tokio::test]
async fn subscribes_cut_off_with_their_connection_go_out_again_on_a_new_one() {
    let (server, proxy, backend, _opened) = subscribing_through_a_proxy().await;
    let redis = inspector(&server).await;
    proxy.hold_next(Direction::ToClient);
    let first = subscribe(&backend, "first");
    proxy.held().await;
    let second = subscribe(&backend, "second");
    subscribers(&redis, "second", 1).await;
    proxy.sever();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    subscribers(&redis, "first", 1).await;
    subscribers(&redis, "second", 1).await;
}

/// What the client's order of a channel's subscribes and unsubscribes rests on: redis-rs
/// sends a `SUBSCRIBE` or `UNSUBSCRIBE` when the command's future is first polled, so that
/// the client polls it once under its connection's lock and awaits the confirmation outside
/// it. A redis-rs that sent it later would let an unsubscribe overtake a subscribe of the same
/// channel, and the channel's waiters would go unannounced.
#[tokio::test]
async fn redis_rs_sends_a_subscribe_at_its_first_poll() {
    let server = redis_server();
    let redis = inspector(&server).await;
    let client = redis::Client::open(server.url()).unwrap();
    let (mut sink, _messages) = client.get_async_pubsub().await.unwrap().split();
    let channel = "lock:{first-poll}:v2:released";
    {
        let mut subscribing = pin!(sink.subscribe(channel));
        let _ = poll_fn(|cx| Poll::Ready(subscribing.as_mut().poll(cx))).await;
        subscribers(&redis, "first-poll", 1).await;
        subscribing.await.unwrap();
    }
    let mut unsubscribing = pin!(sink.unsubscribe(channel));
    let _ = poll_fn(|cx| Poll::Ready(unsubscribing.as_mut().poll(cx))).await;
    subscribers(&redis, "first-poll", 0).await;
}

/// Calls that answer late, on the paused clock: `acquire` after `attempt_delay`, `subscribe`
/// after `subscribe_delay`.
#[derive(Debug, Default)]
struct Slow {
    attempt_delay: Duration,
    subscribe_delay: Duration,
}

impl Interceptor for Slow {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        let delay = match call {
            Call::Acquire { .. } => self.attempt_delay,
            Call::Subscribe { .. } => self.subscribe_delay,
            _ => Duration::ZERO,
        };
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Verdict::Pass
        })
    }
}

/// Review defect 9: `wait_ms` bounds the whole call, also while the backend is slow to answer an
/// attempt or a subscription. Before, an attempt or a subscription ran to its end (a response
/// timeout: 2 s by default) whatever was left of `wait_ms`.
#[tokio::test(start_paused = true)]
async fn wait_ms_bounds_the_call_while_the_backend_is_slow() {
    let slow_attempts = Slow {
        attempt_delay: Duration::from_secs(2),
        ..Slow::default()
    };
    let slow_subscriptions = Slow {
        subscribe_delay: Duration::from_secs(2),
        ..Slow::default()
    };
    let cases = [
        (slow_attempts, "an attempt", true),
        (slow_subscriptions, "a subscription", false),
    ];
    for (slow, what, backend_error) in cases {
        let backend = Intercepted::new(MemoryBackend::new(), slow);
        let holder = Lease {
            key: "k".into(),
            owner: "holder".into(),
            ttl: Duration::from_secs(60),
            replicas: 0,
            kind: LockKind::Mutex,
        };
        backend.backend.acquire(&holder, Turn::Once).await.unwrap();
        let client = LockClient::from_backend_on(backend, tokio::runtime::Handle::current());
        let started = tokio::time::Instant::now();
        let outcome = client.lock("k").sleep_ms(10).wait_ms(50).acquire().await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(50),
            "{what} that answers in 2 s is cut at wait_ms"
        );
        match outcome {
            Err(LockError::Backend { .. }) if backend_error => {}
            Err(LockError::NotAcquired { attempts: 1, .. }) if !backend_error => {}
            other => panic!("{what}: {other:?}"),
        }
    }
}
