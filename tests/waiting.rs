//! Waiting without polling: waiters wake on release, a release racing the subscription is
//! not missed, and fair mode serves waiters in arrival order. Against a real redis-server,
//! and on the memory backend with the paused clock.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::backend::redis::RedisBackend;
use fencelock::backend::{Acquire, BoxFuture, Lease, LockBackend, Release, ReleaseWatch, Turn};
use fencelock::{LockClient, LockError, LockGuard};
use redis::AsyncCommands;
use support::{client, eventually, inspector, redis_server};

/// With `sleep_ms = 5000`, a waiter that polled would take seconds; a woken one, a round trip.
const SLEEPY: u64 = 5_000;

/// Waits until `count` clients are subscribed to the release channel of `key`.
async fn subscribers(redis: &redis::aio::MultiplexedConnection, key: &str, count: u64) {
    let channel = format!("lock:{{{key}}}:released");
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

/// A Redis backend whose subscriptions are slow: the holder's release happens after the
/// waiter's failed attempt but before its subscription is in place, so no notification
/// reaches the waiter.
#[derive(Debug)]
struct ReleaseBeforeSubscribing {
    redis: RedisBackend,
    holder: Mutex<Option<LockGuard>>,
}

impl LockBackend for ReleaseBeforeSubscribing {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        self.redis.acquire(lease, turn)
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        Box::pin(async move {
            let holder = self.holder.lock().unwrap().take();
            if let Some(holder) = holder {
                holder.release().await.unwrap();
            }
            self.redis.subscribe(key).await
        })
    }

    fn extend<'a>(&'a self, leases: &'a [Lease]) -> BoxFuture<'a, Result<Vec<bool>, LockError>> {
        self.redis.extend(leases)
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        self.redis.release(lease, keep)
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
    let redis = RedisBackend::connect(
        &server.url(),
        "lock:".into(),
        Duration::from_secs(2),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let waiter = LockClient::from_backend(ReleaseBeforeSubscribing {
        redis,
        holder: Mutex::new(Some(holder)),
    });
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
        let queued = eventually(Duration::from_secs(10), || {
            let mut redis = redis.clone();
            async move { redis.llen::<_, usize>("lock:{fair}:queue").await.unwrap() == id + 1 }
        })
        .await;
        assert!(queued, "waiter {id} joined the queue");
    }
    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    let leftovers: Vec<String> = redis.keys("lock:{fair}:queue*").await.unwrap();
    assert!(
        leftovers.is_empty(),
        "the queue is gone with its last waiter: {leftovers:?}"
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
    let left = eventually(Duration::from_secs(10), || {
        let mut redis = redis.clone();
        async move { redis.llen::<_, usize>("lock:{fair}:queue").await.unwrap() == 0 }
    })
    .await;
    assert!(left, "the place was given back");
    holder.release().await.unwrap();
    let _: () = redis.del("unused").await.unwrap();
}
