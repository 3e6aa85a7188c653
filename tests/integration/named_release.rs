//! A release names the waiter whose turn it is: interleavings where a waiter must not sleep
//! through a release, and the memory backend naming as the Redis script does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use fencelock::LockClient;
use fencelock::backend::memory::MemoryBackend;
use fencelock::backend::{Acquire, BoxFuture, Lease, LockBackend, Turn};
use fencelock::testing::{Call, Intercepted, Interceptor, Verdict};
use tokio::time::Instant;

/// Counts the acquire calls of every owner but the ones the test makes by hand.
#[derive(Debug, Default)]
struct CountsAttempts {
    attempts: AtomicUsize,
}

impl Interceptor for CountsAttempts {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        if let Call::Acquire { .. } = call {
            self.attempts.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(std::future::ready(Verdict::Pass))
    }
}

fn lease(owner: &str) -> Lease {
    Lease {
        key: "k".into(),
        owner: owner.into(),
        ttl: Duration::from_secs(60),
    }
}

/// A default-mode waiter that has reserved the next free turn may take the key the moment
/// it is free (the acquire script ignores fair queues, and so does the memory backend). A
/// fair waiter queueing for the same key makes the release name the queue's head instead,
/// and the reserver sleeps on through its whole pause, the key free all along.
#[tokio::test(start_paused = true)]
async fn a_reserver_is_not_put_to_sleep_by_a_release_that_names_a_fair_head() {
    const SLEEP_MS: u64 = 1_000;
    let backend = Intercepted::new(MemoryBackend::new(), CountsAttempts::default());
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = client.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    let reserver = tokio::spawn({
        let client = client.clone();
        async move {
            let guard = client
                .lock("k")
                .sleep_ms(SLEEP_MS)
                .wait_ms(60_000)
                .acquire()
                .await;
            (guard, Instant::now())
        }
    });
    // Time for the reserver's second pause to begin: it has reserved the next turn.
    tokio::time::sleep(Duration::from_millis(2 * SLEEP_MS + 10)).await;
    // A fair waiter queues (by hand: it is slow to hear of releases, as on another host).
    let fair = lease("fair");
    let queued = backend
        .backend
        .acquire(&fair, Turn::Queue(Duration::from_secs(60)))
        .await;
    assert!(matches!(queued, Ok(Acquire::Held { .. })), "{queued:?}");
    // Ends the reserver's pause in the middle, whatever its jitter: its next attempt is due.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (guard, granted_at) = reserver.await.unwrap();
    guard.unwrap().release().await.unwrap();
    assert_eq!(
        granted_at - released_at,
        Duration::ZERO,
        "the reserver could take the free key at once, and slept instead"
    );
}

/// Two fair workers hand the key to each other without a pause; a default-mode waiter that
/// reserved the next turn is never woken (each release names the fair queue's head), and its
/// own pauses end while a fair worker holds the key: it starves until its `wait_ms`.
#[tokio::test(start_paused = true)]
async fn a_default_mode_waiter_is_not_starved_by_a_busy_fair_queue() {
    // The same pauses on every run (a pause that happens to end on the very millisecond of
    // a hand-off lets the waiter in by luck).
    fencelock::testing::seed_jitter(7);
    let client = LockClient::memory_on(tokio::runtime::Handle::current());
    const HOLD_MS: u64 = 250;
    let stop = Arc::new(AtomicBool::new(false));
    let holder = client.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (client, stop) = (client.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut grants = 0_u32;
            while !stop.load(Ordering::SeqCst) && grants < 200 {
                let request = client.lock("k").fair(true).sleep_ms(100).wait_ms(60_000);
                let guard = request.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
                guard.release().await.unwrap();
                grants += 1;
            }
        }));
    }
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let request = client.lock("k").sleep_ms(100).wait_ms(3_000);
            request.acquire().await.map(|guard| guard.token())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.release().await.unwrap();
    let outcome = waiter.await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(
        outcome.is_ok(),
        "a waiter that reserved the next turn got it within 3 s of 250 ms turns: {outcome:?}"
    );
}

/// The Redis script names the reserver when the fair queue's keys expired with their last
/// waiter's place; the memory backend keeps the lapsed places in its queue, finds a lapsed
/// head and names nobody: every waiter wakes and attempts, where on Redis only the reserver
/// does.
#[tokio::test(start_paused = true)]
async fn a_fully_lapsed_fair_queue_names_the_reserver_as_on_redis() {
    let backend = Intercepted::new(MemoryBackend::new(), CountsAttempts::default());
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = client.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    // A fair waiter that died: its place lapses after 10 ms.
    let dead = lease("dead");
    let queued = backend
        .backend
        .acquire(&dead, Turn::Queue(Duration::from_millis(10)))
        .await;
    assert!(matches!(queued, Ok(Acquire::Held { .. })), "{queued:?}");
    // A waiter (another process) reserves the next turn.
    let reserver = lease("reserver");
    let reserved = backend
        .backend
        .acquire(&reserver, Turn::Reserve(Duration::from_secs(60)))
        .await;
    assert!(matches!(reserved, Ok(Acquire::Held { .. })), "{reserved:?}");
    // A default-mode waiter in this client, with long pauses.
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let request = client.lock("k").sleep_ms(10_000).wait_ms(60_000);
            let _ = request.acquire().await;
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = backend.interceptor.attempts.load(Ordering::SeqCst);
    holder.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let after = backend.interceptor.attempts.load(Ordering::SeqCst);
    waiter.abort();
    assert_eq!(
        after - before,
        0,
        "the release named the reserver (Redis: the queue keys expired): nobody else attempts"
    );
}

/// A key held on a private redis-server, with waiters queued or reserving by hand, and the
/// message its release publishes.
struct OnRedis {
    server: fencelock::testing::RedisServer,
    backend: fencelock::backend::redis::RedisBackend,
    holder: Lease,
}

impl OnRedis {
    async fn held() -> Self {
        use fencelock::backend::redis::{RedisBackend, RedisSettings};
        let server = crate::support::redis_server();
        let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
            .await
            .unwrap();
        let holder = lease("holder");
        let granted = backend.acquire(&holder, Turn::Barge).await;
        assert!(
            matches!(granted, Ok(Acquire::Granted { .. })),
            "{granted:?}"
        );
        OnRedis {
            server,
            backend,
            holder,
        }
    }

    /// `owner` waits as `turn` says (a fair place or a reservation).
    async fn waits(&self, owner: &str, turn: Turn) {
        let attempt = self.backend.acquire(&lease(owner), turn).await;
        assert!(matches!(attempt, Ok(Acquire::Held { .. })), "{attempt:?}");
    }

    /// What the holder's release publishes.
    async fn release_message(&self) -> String {
        use futures::StreamExt;
        let mut pubsub = redis::Client::open(self.server.url())
            .unwrap()
            .get_async_pubsub()
            .await
            .unwrap();
        pubsub.subscribe("lock:{k}:released").await.unwrap();
        self.backend
            .release(&self.holder, Duration::ZERO)
            .await
            .unwrap();
        let message = pubsub.on_message().next().await.unwrap();
        message.get_payload().unwrap()
    }
}

/// The Redis side of the test above: with the queue's keys expired, the release names the
/// reserver (`released <sha1 of its token>`), what the memory backend mirrors.
#[tokio::test]
async fn on_redis_a_fully_lapsed_fair_queue_names_the_reserver() {
    let key = OnRedis::held().await;
    let mut redis = crate::support::inspector(&key.server).await;
    key.waits("dead", Turn::Queue(Duration::from_millis(10)))
        .await;
    key.waits("reserver", Turn::Reserve(Duration::from_secs(60)))
        .await;
    let lapsed = crate::support::eventually(Duration::from_secs(10), || {
        let mut redis = redis.clone();
        async move {
            !redis::AsyncCommands::exists::<_, bool>(&mut redis, "lock:{k}:queue")
                .await
                .unwrap()
        }
    })
    .await;
    assert!(
        lapsed,
        "the queue's keys expired with the dead waiter's place"
    );
    let sha1: String = redis::cmd("EVAL")
        .arg("return redis.sha1hex(ARGV[1])")
        .arg(0)
        .arg("reserver")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(key.release_message().await, format!("released {sha1}"));
}

/// On Redis too, a release names nobody when a fair queue's head and another waiter's turn
/// reservation could both take the key: both must wake.
#[tokio::test]
async fn on_redis_a_head_and_another_reserver_are_both_woken() {
    let key = OnRedis::held().await;
    key.waits("head", Turn::Queue(Duration::from_secs(60)))
        .await;
    key.waits("reserver", Turn::Reserve(Duration::from_secs(60)))
        .await;
    assert_eq!(key.release_message().await, "released");
}
