//! A release hands the key to the oldest waiter in line: the waiter holds the lock without
//! another attempt, and the Redis release publishes what the memory backend announces.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fencelock::backend::memory::MemoryBackend;
use fencelock::backend::{Acquire, BoxFuture, Lease, LockBackend, Turn};
use fencelock::testing::{Call, Intercepted, Interceptor, Verdict};
use fencelock::{LockClient, LockKind};
use tokio::time::Instant;

/// Counts the acquire attempts of the client under test (attempts made by hand on the
/// wrapped backend pass by).
#[derive(Debug, Default)]
struct Attempts {
    count: AtomicUsize,
}

impl Interceptor for Attempts {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        if let Call::Acquire { .. } = call {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(std::future::ready(Verdict::Pass))
    }
}

fn lease(owner: &str, ttl: Duration) -> Lease {
    Lease {
        key: "k".into(),
        owner: owner.into(),
        ttl,
        replicas: 0,
        kind: LockKind::Mutex,
    }
}

/// The waiter holds the lock the moment the holder's release hands it over: no attempt
/// follows the release, and the guard carries the token the release granted.
#[tokio::test(start_paused = true)]
async fn a_waiter_handed_the_key_holds_it_without_another_attempt() {
    let backend = Intercepted::new(MemoryBackend::new(), Attempts::default());
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = lease("holder", Duration::from_secs(60));
    let held = backend.backend.acquire(&holder, Turn::Once).await.unwrap();
    let Acquire::Granted {
        token: held_token, ..
    } = held
    else {
        panic!("{held:?}")
    };
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let guard = client.lock("k").sleep_ms(10_000).wait_ms(60_000).acquire();
            let guard = guard.await.unwrap();
            (guard.token(), Instant::now(), guard)
        }
    });
    // The waiter attempts, subscribes, attempts again, and pauses for 5 to 10 s.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let attempts = backend.interceptor.count.load(Ordering::SeqCst);
    assert_eq!(attempts, 2, "one attempt before subscribing, one after");
    let released_at = Instant::now();
    backend
        .backend
        .release(&holder, Duration::ZERO)
        .await
        .unwrap();
    let (token, granted_at, guard) = waiter.await.unwrap();
    assert_eq!(granted_at, released_at, "the waiter holds it at once");
    assert_eq!(
        backend.interceptor.count.load(Ordering::SeqCst),
        attempts,
        "and made no attempt for it"
    );
    assert!(token > held_token, "with a new fencing token");
    let intruder = lease("intruder", Duration::from_secs(1));
    let refused = backend
        .backend
        .acquire(&intruder, Turn::Once)
        .await
        .unwrap();
    assert!(matches!(refused, Acquire::Held { .. }), "{refused:?}");
    guard.release().await.unwrap();
}

/// A key held on a private redis-server, with waiters in line put there by hand, and the
/// message its release publishes.
struct OnRedis {
    server: fencelock::testing::RedisServer,
    backend: fencelock::backend::redis::RedisBackend,
    holder: Lease,
    /// The fencing token of the holder's grant.
    token: u64,
}

impl OnRedis {
    async fn held() -> Self {
        use fencelock::backend::redis::{RedisBackend, RedisSettings};
        let server = crate::support::redis_server();
        let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
            .await
            .unwrap();
        let holder = lease("holder", Duration::from_secs(60));
        let granted = backend.acquire(&holder, Turn::Once).await;
        let Ok(Acquire::Granted { token, .. }) = granted else {
            panic!("the free key is granted: {granted:?}");
        };
        OnRedis {
            server,
            backend,
            holder,
            token,
        }
    }

    /// `waiter` takes a place in line, lasting `place`.
    async fn waits(&self, waiter: &Lease, place: Duration) {
        let attempt = self.backend.acquire(waiter, Turn::InLine(place)).await;
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
        pubsub.subscribe("lock:{k}:v2:released").await.unwrap();
        self.backend
            .release(&self.holder, Duration::ZERO)
            .await
            .unwrap();
        let message = pubsub.on_message().next().await.unwrap();
        message.get_payload().unwrap()
    }
}

/// The Redis release grants the oldest waiter whose place lasts, for the lease it asked for
/// (at most until its place would have lapsed; the waiter's renewal takes over from there),
/// and publishes `granted <sha1 of its owner token> <fencing token>`: the hash,
/// never the token (whoever has it can release the lock). The line's keys go with its last
/// waiter.
#[tokio::test]
async fn on_redis_the_release_grants_the_oldest_live_waiter_and_names_it_by_hash() {
    let key = OnRedis::held().await;
    let mut redis = crate::support::inspector(&key.server).await;
    key.waits(
        &lease("dead", Duration::from_secs(60)),
        Duration::from_millis(10),
    )
    .await;
    let waiter = lease("waiter", Duration::from_secs(45));
    key.waits(&waiter, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let message = key.release_message().await;
    let sha1: String = redis::cmd("EVAL")
        .arg("return redis.sha1hex(ARGV[1])")
        .arg(0)
        .arg("waiter")
        .query_async(&mut redis)
        .await
        .unwrap();
    let token = message
        .strip_prefix(&format!("granted {sha1} "))
        .unwrap_or_else(|| panic!("names the live waiter: {message}"));
    let value: String = redis::AsyncCommands::get(&mut redis, "lock:{k}:v2")
        .await
        .unwrap();
    let run = value
        .strip_suffix(":0:waiter")
        .and_then(|held| held.strip_prefix(&format!("h:{token}:")))
        .unwrap_or_else(|| panic!("held by the waiter, nobody left in line: {value}"));
    assert_eq!(
        run,
        key.token.to_string(),
        "the run of the holder's grant goes on"
    );
    let ttl: i64 = redis::AsyncCommands::pttl(&mut redis, "lock:{k}:v2")
        .await
        .unwrap();
    assert!(
        (44_000..=45_000).contains(&ttl),
        "the waiter's 45 s lease, within its 60 s place: {ttl}"
    );
    let line: bool = redis::AsyncCommands::exists(&mut redis, "lock:{k}:v2:queue")
        .await
        .unwrap();
    assert!(!line, "the line's keys went with its last waiter");
    let again = key.backend.acquire(&waiter, Turn::Once).await.unwrap();
    assert_eq!(
        again,
        Acquire::Granted {
            token: token.parse().unwrap(),
            slot: None,
        }
    );
}

/// With nobody in line (or only lapsed places), the release leaves the key free and says so.
#[tokio::test]
async fn on_redis_a_release_with_only_lapsed_places_leaves_the_key_free() {
    let key = OnRedis::held().await;
    key.waits(
        &lease("dead", Duration::from_secs(60)),
        Duration::from_millis(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The message names the grant released: Redlock's waiters hear it from every master.
    let released = format!("released {}", key.token);
    assert_eq!(key.release_message().await, released);
    let newcomer = lease("newcomer", Duration::from_secs(1));
    let granted = key.backend.acquire(&newcomer, Turn::Once).await.unwrap();
    assert!(matches!(granted, Acquire::Granted { .. }), "{granted:?}");
}

/// A request for a key that another waiter of the client already watches waits behind it in
/// the process, then takes that watch before its first attempt: it hears every release after
/// that attempt, so it needs no second attempt (the one after subscribing), and a contended
/// grant costs one attempt.
#[tokio::test(start_paused = true)]
async fn a_request_for_a_watched_key_needs_no_second_attempt() {
    let backend = Intercepted::new(MemoryBackend::new(), Attempts::default());
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = lease("holder", Duration::from_secs(60));
    backend.backend.acquire(&holder, Turn::Once).await.unwrap();
    let waiter = |client: LockClient| async move {
        let guard = client.lock("k").sleep_ms(10_000).wait_ms(60_000).acquire();
        guard.await.unwrap().release().await.unwrap();
    };
    let first = tokio::spawn(waiter(client.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let count = || backend.interceptor.count.load(Ordering::SeqCst);
    assert_eq!(
        count(),
        2,
        "the first waiter subscribes between two attempts"
    );
    let second = tokio::spawn(waiter(client.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        count(),
        2,
        "the second one waits behind the first, in the process"
    );
    backend
        .backend
        .release(&holder, Duration::ZERO)
        .await
        .unwrap();
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(count(), 3, "and both were handed the key");
}

/// A default-mode waiter that cannot hear of releases takes no place in line: a key handed
/// to it would lie unused until its next attempt. It polls for a free key instead.
#[tokio::test]
async fn a_polling_waiter_takes_no_place_in_line() {
    let server = crate::support::redis_server();
    let mut redis = crate::support::inspector(&server).await;
    let polling = LockClient::builder(&server.url())
        .release_notifications(false)
        .connect()
        .await
        .unwrap();
    let holder = polling.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let polling = polling.clone();
        async move {
            let request = polling.lock("k").sleep_ms(20).wait_ms(10_000);
            request.acquire().await.unwrap().release().await.unwrap();
        }
    });
    let attempted = crate::support::eventually(Duration::from_secs(5), || {
        let mut redis = redis.clone();
        async move { crate::support::script_calls(&mut redis).await >= 4 }
    })
    .await;
    assert!(attempted, "the waiter attempts");
    let line: bool = redis::AsyncCommands::exists(&mut redis, "lock:{k}:v2:queue")
        .await
        .unwrap();
    assert!(!line, "and takes no place in line");
    holder.release().await.unwrap();
    waiter.await.unwrap();
}

/// Makes one kind of call fail or hang; passes the others.
#[derive(Debug)]
enum Meddles {
    /// Every subscription fails: the waiter polls after its first attempt.
    FailSubscriptions,
    /// Every renewal hangs: the holder is as good as hung.
    HangRenewals,
}

impl Interceptor for Meddles {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        let verdict = match (self, call) {
            (Meddles::FailSubscriptions, Call::Subscribe { .. }) => {
                Verdict::Fail(fencelock::LockError::backend(None, "no pub/sub", None))
            }
            (Meddles::HangRenewals, Call::Extend { .. }) => Verdict::Hang,
            _ => Verdict::Pass,
        };
        Box::pin(std::future::ready(verdict))
    }
}

/// A waiter whose first attempt took a place in line, and whose later attempts took none
/// (its subscription failed: it polls), still gives the place back when it gives up: else
/// a release could hand the key to a waiter that has left, and the key would lie unused
/// until the place lapses.
#[tokio::test(start_paused = true)]
async fn a_place_taken_once_is_given_back_when_the_waiter_gives_up() {
    let backend = Intercepted::new(MemoryBackend::new(), Meddles::FailSubscriptions);
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = lease("holder", Duration::from_secs(60));
    backend.backend.acquire(&holder, Turn::Once).await.unwrap();
    let outcome = client
        .lock("k")
        .sleep_ms(1_000)
        .wait_ms(2_500)
        .acquire()
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(
        backend.backend.keys_in_use(),
        1,
        "only the holder's key is in use"
    );
}

/// Review finding: a fair request that makes a single attempt (`give_up`) took a free key
/// whose turn belonged to the line's head (a lease that ran out), jumping the line.
#[tokio::test(start_paused = true)]
async fn a_fair_single_attempt_does_not_jump_the_line() {
    let backend = Intercepted::new(MemoryBackend::new(), Attempts::default());
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = lease("holder", Duration::from_millis(100));
    backend.backend.acquire(&holder, Turn::Once).await.unwrap();
    let head = tokio::spawn({
        let client = client.clone();
        async move {
            let request = client.lock("k").fair(true).sleep_ms(10_000).wait_ms(60_000);
            request.acquire().await.unwrap().release().await.unwrap();
        }
    });
    // The holder's lease has run out; the head's pause ends a millisecond later.
    tokio::time::sleep(Duration::from_micros(100_500)).await;
    let single = client.lock("k").fair(true).give_up().acquire().await;
    assert!(
        matches!(single, Err(fencelock::LockError::NotAcquired { .. })),
        "the head's turn: {single:?}"
    );
    head.await.unwrap();
}

/// Review finding: a release granted the waiter it handed the key to until its place would
/// have lapsed (`3 × sleep_ms`), longer than its `ttl_ms`, and the waiter counted on that: a
/// holder that hung kept the key past its lease. The grant lasts the waiter's lease at most,
/// and the waiter counts on no more.
#[tokio::test(start_paused = true)]
async fn a_handed_over_grant_lasts_no_longer_than_the_waiter_s_lease() {
    const TTL: Duration = Duration::from_millis(500);
    let backend = Intercepted::new(MemoryBackend::new(), Meddles::HangRenewals);
    let client = LockClient::from_backend_on(backend.clone(), tokio::runtime::Handle::current());
    let holder = lease("holder", Duration::from_secs(60));
    backend.backend.acquire(&holder, Turn::Once).await.unwrap();
    let waiter = tokio::spawn({
        let client = client.clone();
        // Places of 600 ms (the default sleep_ms), a lease of 500 ms.
        async move { client.lock("k").ttl_ms(500).wait_ms(10_000).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let handed_at = Instant::now();
    backend
        .backend
        .release(&holder, Duration::ZERO)
        .await
        .unwrap();
    let guard = waiter.await.unwrap().unwrap();
    tokio::time::sleep_until(handed_at + TTL).await;
    assert!(
        guard.is_lost(),
        "the hung holder counts its lease lost by then"
    );
    assert_eq!(
        backend.backend.grants("k"),
        [],
        "and the store has let it go"
    );
}
