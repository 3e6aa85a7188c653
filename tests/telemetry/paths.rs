//! Spans and metrics on every path a lock call can take: losses found by the release, every
//! exit of a body, failures, other topologies, and what a slow subscriber may hold up.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use fencelock::backend::BoxFuture;
use fencelock::backend::memory::MemoryBackend;
use fencelock::telemetry::{HOLD, LOCKS_HELD, LOSSES};
use fencelock::testing::{Call, Intercepted, Interceptor, RedisServer, Verdict};
use fencelock::{LockClient, LockError, LockOptions, redis_lock, with_client};
use redis::AsyncCommands;

use crate::capture::{
    self, closed_lock_span, counter, events_under, gauge, histogram, lock_spans, wait_for,
};

#[tokio::test]
async fn a_loss_found_by_the_release_is_recorded_and_counted() {
    capture::install();
    let server = RedisServer::start().unwrap();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let mut redis = server.connection().await.unwrap();
    let name = "paths:release-loss";
    let guard = locks
        .lock("paths:release-loss")
        .options(LockOptions::new().name(name))
        .acquire()
        .await
        .unwrap();
    let _: () = redis.del("lock:{paths:release-loss}:v2").await.unwrap();
    let error = guard.release().await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Lost {
                cause: fencelock::LossCause::NotOwner,
                ..
            }
        ),
        "{error:?}"
    );

    let span = closed_lock_span("paths:release-loss").await;
    assert_eq!(span.field("release"), Some("lost"));
    let warned = events_under(span.seq)
        .iter()
        .any(|e| e.message() == "lock lost");
    let counted = counter(LOSSES, &[("lock", name), ("cause", "not_owner")]);
    assert_eq!(
        (span.field("lost"), counted, warned),
        (Some("not_owner"), 1, true),
        "the call got LockError::Lost(NotOwner); span `lost`, losses_total, `lock lost` warning"
    );
}

/// Fails the first renewal round that reaches it, passes every other call.
#[derive(Debug, Default)]
struct FirstRenewalFails {
    failed: AtomicBool,
}

impl Interceptor for FirstRenewalFails {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            match call {
                Call::Extend { .. } if !self.failed.swap(true, Ordering::SeqCst) => {
                    Verdict::Fail(LockError::backend(None, "one round fails", None))
                }
                _ => Verdict::Pass,
            }
        })
    }
}

/// Renewal warnings are told once the registry's lock is released: a subscriber that blocks
/// on one does not block the client's acquires and releases (each takes that lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_subscriber_does_not_block_acquires() {
    capture::install();
    capture::hold_back_renewal_warnings("paths:slow:");
    // The client's background work runs on this test's workers: the held-back warning
    // blocks one of them, not the library's thread that other tests share.
    let backend = Intercepted::new(MemoryBackend::new(), FirstRenewalFails::default());
    let locks = LockClient::from_backend_on(backend, tokio::runtime::Handle::current());
    let guard = locks
        .lock("paths:slow:1")
        .ttl_ms(600)
        .acquire()
        .await
        .unwrap();
    wait_for("a renewal warning held back", || {
        capture::one_is_held_back().then_some(())
    })
    .await;
    let other = async {
        let other = locks.lock("paths:slow-other").acquire().await.unwrap();
        other.release().await.unwrap();
    };
    let done = tokio::time::timeout(Duration::from_secs(5), other).await;
    capture::let_go();
    assert!(
        done.is_ok(),
        "acquire and release waited for the subscriber"
    );
    drop(guard);
}

const CHECKOUT: LockOptions = LockOptions::new().name("checkout");

#[redis_lock(key = "paths:named:{id}", options = CHECKOUT)]
async fn named_by_options(id: u32) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn a_name_given_in_the_options_names_the_lock() {
    capture::install();
    with_client(LockClient::memory(), named_by_options(1))
        .await
        .unwrap();
    let span = closed_lock_span("paths:named:1").await;
    assert_eq!(span.field("lock"), Some("checkout"));
}

/// Fails the renewal rounds whose number (from 1) is in `failing`.
#[derive(Debug)]
struct FailRounds {
    round: AtomicU32,
    failing: &'static [u32],
}

impl Interceptor for FailRounds {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Call::Extend { .. } = call {
                let round = self.round.fetch_add(1, Ordering::SeqCst) + 1;
                if self.failing.contains(&round) {
                    return Verdict::Fail(LockError::backend(None, "cut", None));
                }
            }
            Verdict::Pass
        })
    }
}

#[tokio::test(start_paused = true)]
async fn the_renewal_warning_comes_again_after_a_renewal_got_through() {
    capture::install();
    let backend = Intercepted::new(
        MemoryBackend::new(),
        FailRounds {
            round: AtomicU32::new(0),
            failing: &[1, 2, 4, 5],
        },
    );
    let locks = LockClient::from_backend_on(backend, tokio::runtime::Handle::current());
    let guard = locks
        .lock("paths:rearm")
        .ttl_ms(3_000)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!guard.is_lost());
    assert!(locks.renewal_stats().rounds >= 6);
    let span = lock_spans("paths:rearm").pop().unwrap();
    let warnings = events_under(span.seq)
        .iter()
        .filter(|e| e.message().starts_with("lock renewal failed"))
        .count();
    assert_eq!(warnings, 2, "two runs of failures (rounds 1-2 and 4-5)");
    guard.release().await.unwrap();
}

const EXITS: &str = "paths:exits:{case}";

#[redis_lock(key = "paths:exits:{case}", on_lost = Continue, min_hold_ms = 50)]
async fn exit(case: &str, how: u8) -> Result<(), LockError> {
    match how {
        0 => Ok(()),
        1 => std::future::pending().await,
        2 => panic!("the body panics"),
        _ => Err(LockError::NoClient),
    }
}

/// A non-`Send` output: released in the background.
#[redis_lock(key = "paths:exits:{case}")]
async fn not_send(case: &str) -> Result<std::rc::Rc<u8>, Box<dyn std::error::Error>> {
    Ok(std::rc::Rc::new(1))
}

#[tokio::test]
async fn every_exit_closes_the_span_once_and_balances_the_gauge() {
    capture::install();
    let locks = LockClient::memory();
    let labels = [("lock", EXITS)];
    with_client(locks.clone(), exit("ok", 0)).await.unwrap();
    with_client(locks.clone(), exit("err", 3))
        .await
        .unwrap_err();
    let cut = tokio::time::timeout(
        Duration::from_millis(50),
        with_client(locks.clone(), exit("dropped-body", 1)),
    )
    .await;
    assert!(cut.is_err());
    let panicked = tokio::spawn(with_client(locks.clone(), exit("panicked", 2))).await;
    assert!(panicked.unwrap_err().is_panic());
    drop(
        with_client(locks.clone(), not_send("not-send"))
            .await
            .unwrap(),
    );

    for case in ["ok", "err", "dropped-body", "panicked", "not-send"] {
        let key = format!("paths:exits:{case}");
        let span = closed_lock_span(&key).await;
        assert_eq!(span.field("outcome"), Some("granted"), "{case}");
        assert_eq!(span.field("release"), Some("released"), "{case}");
        assert!(span.field("held_ms").is_some(), "{case}");
        assert!(span.rerecorded.is_empty(), "{case}: {:?}", span.rerecorded);
    }
    assert_eq!(gauge(LOCKS_HELD, &labels), 0.0);
    assert_eq!(histogram(HOLD, &labels).len(), 5);
}

/// The first release answers after 300 ms.
#[derive(Debug, Default)]
struct FirstReleaseSlow(AtomicBool);

impl Interceptor for FirstReleaseSlow {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Call::Release { .. } = call
                && !self.0.swap(true, Ordering::SeqCst)
            {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Verdict::Pass
        })
    }
}

#[tokio::test]
async fn a_release_dropped_midway_ends_the_hold_once() {
    capture::install();
    let backend = Intercepted::new(MemoryBackend::new(), FirstReleaseSlow::default());
    let locks = LockClient::from_backend(backend);
    let named = LockOptions::new().name("paths:release-dropped");
    let guard = locks
        .lock("paths:release-dropped")
        .options(named)
        .acquire()
        .await
        .unwrap();
    let cut = tokio::time::timeout(Duration::from_millis(50), guard.release()).await;
    assert!(cut.is_err());
    let labels = [("lock", "paths:release-dropped")];
    assert_eq!(gauge(LOCKS_HELD, &labels), 0.0);
    let span = closed_lock_span("paths:release-dropped").await;
    assert_eq!(span.field("release"), Some("released"));
    assert!(span.rerecorded.is_empty(), "{:?}", span.rerecorded);
    assert_eq!(histogram(HOLD, &labels).len(), 1);
}

#[tokio::test]
async fn no_owner_token_or_password_on_failure_paths() {
    capture::install();
    let password = "pw-3f9c1e7a-review";
    let server = RedisServer::start().unwrap();
    let mut admin = server.connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://:{password}@127.0.0.1:{}/", server.port());
    let locks = LockClient::connect(&url).await.unwrap();
    let guard = locks
        .lock("paths:secret")
        .ttl_ms(600)
        .acquire()
        .await
        .unwrap();
    let dropped = locks
        .lock("paths:secret2")
        .ttl_ms(600)
        .acquire()
        .await
        .unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let value: String = redis.get("lock:{paths:secret}:v2").await.unwrap();
    let owner = value.rsplit_once(':').unwrap().1.to_owned();
    let value: String = redis.get("lock:{paths:secret2}:v2").await.unwrap();
    let owner2 = value.rsplit_once(':').unwrap().1.to_owned();
    // The second key is taken over: its background release finds another owner.
    let _: () = redis
        .set("lock:{paths:secret2}:v2", "h:1:1:0:someone-else")
        .await
        .unwrap();
    drop(dropped);
    closed_lock_span("paths:secret2").await;
    server.pause().unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    assert!(lost.is_ok());
    let refused = locks.lock("paths:secret3").give_up().acquire().await;
    assert!(refused.is_err());
    server.resume().unwrap();
    drop(guard);
    wait_for("the spans closed", || {
        let closed = ["paths:secret", "paths:secret2", "paths:secret3"]
            .iter()
            .all(|k| lock_spans(k).iter().all(|s| s.closed));
        closed.then_some(())
    })
    .await;
    let span = lock_spans("paths:secret").pop().unwrap();
    let events = events_under(span.seq);
    assert!(
        events
            .iter()
            .any(|e| e.message().starts_with("lock renewal failed"))
    );
    assert!(events.iter().any(|e| e.message() == "lock lost"));
    let span = lock_spans("paths:secret2").pop().unwrap();
    assert_eq!(span.field("release"), Some("lost"));
    let span = lock_spans("paths:secret3").pop().unwrap();
    assert_eq!(span.field("outcome"), Some("backend_error"));
    let values = capture::every_recorded_value();
    let leaked: Vec<_> = values
        .iter()
        .filter(|v| v.contains(&owner) || v.contains(&owner2) || v.contains(password))
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");
}

#[redis_lock(key = "paths:twice:{case}", ttl_ms = 300, on_lost = Continue)]
async fn continues_after_loss(case: &str) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(fencelock::is_lost());
    Ok(())
}

#[redis_lock(key = "paths:twice:{case}", ttl_ms = 300)]
async fn aborted_by_loss(case: &str) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

#[tokio::test]
async fn no_field_is_recorded_twice_on_failure_paths() {
    capture::install();
    let memory = LockClient::memory();
    let held = memory.lock("paths:twice:refused").acquire().await.unwrap();
    let refused = memory
        .lock("paths:twice:refused")
        .retry(2)
        .sleep_ms(20)
        .acquire()
        .await;
    assert!(refused.unwrap_err().is_not_acquired());
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        memory.lock("paths:twice:refused").wait_ms(5_000).acquire(),
    )
    .await;
    assert!(cut.is_err());
    held.release().await.unwrap();

    let failing = LockClient::from_backend(Intercepted::new(
        MemoryBackend::new(),
        crate::spans::NoRenewals,
    ));
    let guard = failing
        .lock("paths:twice:lost")
        .ttl_ms(300)
        .acquire()
        .await
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    let _ = guard.release().await;
    with_client(failing.clone(), continues_after_loss("continue"))
        .await
        .unwrap();
    let aborted = with_client(failing, aborted_by_loss("abort")).await;
    assert!(aborted.unwrap_err().is_lost());

    wait_for("the spans closed", || {
        let spans: Vec<_> = ["refused", "lost", "continue", "abort"]
            .iter()
            .flat_map(|case| lock_spans(&format!("paths:twice:{case}")))
            .collect();
        (spans.len() == 6 && spans.iter().all(|s| s.closed)).then_some(())
    })
    .await;
    for case in ["refused", "lost", "continue", "abort"] {
        for span in lock_spans(&format!("paths:twice:{case}")) {
            assert!(span.rerecorded.is_empty(), "{case}: {:?}", span.rerecorded);
            let losses = events_under(span.seq)
                .iter()
                .filter(|e| e.message() == "lock lost")
                .count();
            assert!(losses <= 1, "{case}: {losses} `lock lost` warnings");
        }
    }
    let outcomes: Vec<_> = lock_spans("paths:twice:refused")
        .iter()
        .map(|s| s.field("outcome").unwrap_or("").to_owned())
        .collect();
    assert_eq!(outcomes, ["granted", "not_acquired", "cancelled"]);
}

#[redis_lock(key = "paths:redlock:{id}")]
async fn on_redlock(id: u32) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn redlock_calls_record_like_the_others() {
    capture::install();
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let locks = LockClient::redlock(servers.iter().map(RedisServer::url))
        .await
        .unwrap();
    with_client(locks.clone(), on_redlock(1)).await.unwrap();
    let labels = [("lock", "paths:redlock:{id}")];
    let span = closed_lock_span("paths:redlock:1").await;
    assert_eq!(span.field("outcome"), Some("granted"));
    assert_eq!(span.field("release"), Some("released"));
    assert!(span.rerecorded.is_empty());
    assert_eq!(gauge(LOCKS_HELD, &labels), 0.0);
    assert_eq!(histogram(HOLD, &labels).len(), 1);
}

#[redis_lock(key = "paths:noclient:{id}")]
async fn without_client(id: u32) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn no_client_and_a_bad_option_name_their_outcomes() {
    capture::install();
    let error = without_client(1).await.unwrap_err();
    assert!(matches!(error, LockError::NoClient), "{error:?}");
    let span = closed_lock_span("paths:noclient:1").await;
    assert_eq!(span.field("outcome"), Some("no_client"));
    assert_eq!(
        counter(
            fencelock::telemetry::ACQUISITIONS,
            &[("lock", "paths:noclient:{id}"), ("outcome", "no_client")]
        ),
        1
    );
    let error = LockClient::memory()
        .lock("paths:badttl")
        .ttl_ms(0)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(error, LockError::InvalidConfig { .. }),
        "{error:?}"
    );
    let span = closed_lock_span("paths:badttl").await;
    assert_eq!(span.field("outcome"), Some("invalid"));
    assert!(span.rerecorded.is_empty());
}
