//! The `fencelock.lock` span of each lock call: its fields, its events, its place among the
//! application's spans.

use std::time::Duration;

use fencelock::backend::BoxFuture;
use fencelock::backend::memory::MemoryBackend;
use fencelock::testing::{Call, Intercepted, Interceptor, RedisServer, Verdict};
use fencelock::{LockClient, LockError, LockGuard, current_token, redis_lock, with_client};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tracing::{Instrument, Level};

use crate::capture::{
    self, SpanRecord, closed_lock_span, events_under, lock_spans, spans_where, wait_for,
};

#[redis_lock(key = "spans:granted:{id}")]
async fn granted(id: u32) -> Result<u64, LockError> {
    tracing::info!("in the body");
    Ok(current_token().expect("runs under the lock"))
}

#[tokio::test]
async fn a_locked_call_runs_its_body_in_a_span_that_records_the_grant() {
    capture::install();
    let token = with_client(LockClient::memory(), granted(1)).await.unwrap();

    let span = closed_lock_span("spans:granted:1").await;
    assert_eq!(span.target, "fencelock");
    assert_eq!(span.level, Level::INFO);
    assert_eq!(span.field("lock"), Some("spans:granted:{id}"));
    assert_eq!(span.field("mode"), Some("exclusive"));
    assert_eq!(span.field("outcome"), Some("granted"));
    assert_eq!(span.field("attempts"), Some("1"));
    assert_eq!(
        span.field("fencing_token"),
        Some(token.to_string().as_str())
    );
    assert_eq!(span.field("release"), Some("released"));
    for measured in ["waited_ms", "held_ms"] {
        let ms: u64 = span.field(measured).unwrap().parse().unwrap();
        assert!(ms < 10_000, "{measured}: {ms}");
    }
    assert_eq!(span.field("lost"), None);
    let events = events_under(span.seq);
    assert!(
        events.iter().any(|e| e.message() == "in the body"),
        "{events:#?}"
    );
}

#[redis_lock(key = "spans:whole:{id}")]
#[tracing::instrument]
async fn whole_call(id: u32) -> Result<(), LockError> {
    tracing::info!("whole call body");
    Ok(())
}

#[tracing::instrument]
#[redis_lock(key = "spans:body:{id}")]
async fn body_only(id: u32) -> Result<(), LockError> {
    tracing::info!("body-only body");
    Ok(())
}

/// The README's two orders of `#[redis_lock]` and `#[tracing::instrument]`.
#[tokio::test]
async fn spans_nest_with_tracing_instrument_in_either_order() {
    capture::install();
    let locks = LockClient::memory();
    with_client(locks.clone(), whole_call(1)).await.unwrap();
    with_client(locks, body_only(1)).await.unwrap();

    let named = |name: &'static str| {
        let spans = spans_where(|s| s.name == name);
        assert_eq!(spans.len(), 1, "{spans:#?}");
        spans.into_iter().next().unwrap()
    };
    // Written first, the lock's attribute is inside the application's span.
    let lock = closed_lock_span("spans:whole:1").await;
    let user = named("whole_call");
    assert_eq!(lock.parent, Some(user.seq));
    assert!(
        events_under(lock.seq)
            .iter()
            .any(|e| e.message() == "whole call body")
    );
    // Written second, the application's span covers the body only, inside the lock's.
    let lock = closed_lock_span("spans:body:1").await;
    let user = named("body_only");
    assert_eq!(user.parent, Some(lock.seq));
    assert!(
        events_under(user.seq)
            .iter()
            .any(|e| e.message() == "body-only body")
    );
}

#[redis_lock(key = "spans:outer:{id}")]
async fn outer(id: u32) -> Result<(u64, u64), LockError> {
    let outer = current_token().unwrap();
    let inner = inner(id).await?;
    Ok((outer, inner))
}

#[redis_lock(key = "spans:outer:{id}")]
async fn inner(id: u32) -> Result<u64, LockError> {
    Ok(current_token().unwrap())
}

#[tokio::test]
async fn a_reentrant_call_records_its_holders_token_and_no_attempt() {
    capture::install();
    let (outer_token, inner_token) = with_client(LockClient::memory(), outer(1)).await.unwrap();
    assert_eq!(outer_token, inner_token);

    let spans = wait_for("both spans closed", || {
        let spans = lock_spans("spans:outer:1");
        (spans.len() == 2 && spans.iter().all(|s| s.closed)).then_some(spans)
    })
    .await;
    let [outer, inner] = [&spans[0], &spans[1]];
    assert_eq!(inner.parent, Some(outer.seq));
    assert_eq!(inner.field("outcome"), Some("reentered"));
    assert_eq!(inner.field("attempts"), Some("0"));
    assert_eq!(inner.field("fencing_token"), outer.field("fencing_token"));
    // Only the outermost holder releases.
    assert_eq!(inner.field("release"), None);
    assert_eq!(outer.field("release"), Some("released"));
}

#[redis_lock(key = "spans:refused:{id}", retry = 2, sleep_ms = 20)]
async fn refused(id: u32) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn a_refused_call_records_its_outcome_attempts_and_waits() {
    capture::install();
    let locks = LockClient::memory();
    let held = locks.lock("spans:refused:1").acquire().await.unwrap();
    let error = with_client(locks, refused(1)).await.unwrap_err();
    let LockError::NotAcquired { attempts, .. } = error else {
        panic!("{error:?}")
    };
    held.release().await.unwrap();

    let spans = wait_for("both spans closed", || {
        let spans = lock_spans("spans:refused:1");
        (spans.len() == 2 && spans.iter().all(|s| s.closed)).then_some(spans)
    })
    .await;
    let refused = &spans[1];
    assert_eq!(refused.field("outcome"), Some("not_acquired"));
    assert_eq!(
        refused.field("attempts"),
        Some(attempts.to_string().as_str())
    );
    assert_eq!(refused.field("fencing_token"), None);
    assert_eq!(refused.field("held_ms"), None);
    let waits = events_under(refused.seq)
        .into_iter()
        .filter(|e| e.message() == "lock not acquired; waiting")
        .count();
    assert!(waits >= 1, "{:#?}", events_under(refused.seq));
}

#[tokio::test]
async fn a_call_dropped_while_it_waits_records_that_it_was_cancelled() {
    capture::install();
    let locks = LockClient::memory();
    let held = locks.lock("spans:cancelled").acquire().await.unwrap();
    let waiting = locks.lock("spans:cancelled").wait_ms(30_000).acquire();
    let paused = wait_for("the waiter's pause", || {
        let span = lock_spans("spans:cancelled").pop()?;
        let events = events_under(span.seq);
        events
            .iter()
            .any(|e| e.message() == "lock not acquired; waiting")
            .then_some(())
    });
    tokio::select! {
        acquired = waiting => panic!("the key is held: {acquired:?}"),
        () = paused => {}
    }
    let spans = wait_for("the waiter's span closed", || {
        let spans = lock_spans("spans:cancelled");
        spans[1].closed.then_some(spans)
    })
    .await;
    assert_eq!(spans[1].field("outcome"), Some("cancelled"));
    assert_eq!(spans[1].field("attempts"), Some("2"));
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_manual_guard_keeps_its_span_until_released_and_lends_it_to_work() {
    capture::install();
    let locks = LockClient::memory();
    let guard = locks
        .lock("spans:manual")
        .options(fencelock::LockOptions::new().name("manual"))
        .acquire()
        .await
        .unwrap();
    async { tracing::info!("work under the guard") }
        .instrument(guard.span().clone())
        .await;
    let open = lock_spans("spans:manual");
    assert!(!open[0].closed, "the span ended with the acquisition");
    assert_eq!(open[0].field("lock"), Some("manual"));
    assert_eq!(open[0].field("outcome"), Some("granted"));
    guard.release().await.unwrap();

    let span = closed_lock_span("spans:manual").await;
    assert_eq!(span.field("release"), Some("released"));
    assert!(span.field("held_ms").is_some());
    assert!(
        events_under(span.seq)
            .iter()
            .any(|e| e.message() == "work under the guard")
    );
}

/// Waits until the guard's lease is lost and its span has the warning (told last).
async fn lost_span(key: &str, guard: &LockGuard) -> SpanRecord {
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    assert!(lost.is_ok(), "the lease of {key} was not lost");
    let warned = wait_for("the loss warned under the span", || {
        lock_spans(key).into_iter().find(|span| {
            let events = events_under(span.seq);
            events.iter().any(|e| e.message() == "lock lost")
        })
    })
    .await;
    // Read again: the copy above may predate the loss, recorded on the span just before its
    // warning, which was read after the copy.
    let now = lock_spans(key)
        .into_iter()
        .find(|span| span.seq == warned.seq);
    now.expect("the span is still recorded")
}

/// A private server, a client of it, a guard of `key` held there, and a plain connection.
async fn held_on_redis(
    key: &str,
    ttl_ms: u64,
) -> (RedisServer, LockClient, LockGuard, MultiplexedConnection) {
    let server = RedisServer::start().unwrap();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let guard = locks.lock(key).ttl_ms(ttl_ms).acquire().await.unwrap();
    let redis = server.connection().await.unwrap();
    (server, locks, guard, redis)
}

#[tokio::test]
async fn a_lost_lease_warns_under_its_span_with_the_cause() {
    capture::install();
    let (_server, _locks, guard, mut redis) = held_on_redis("spans:lost", 600).await;
    let _: () = redis.del("lock:{spans:lost}:v2").await.unwrap();

    let span = lost_span("spans:lost", &guard).await;
    assert_eq!(span.field("lost"), Some("not_owner"));
    let warning = events_under(span.seq)
        .into_iter()
        .find(|e| e.message() == "lock lost")
        .expect("a warning under the span");
    assert_eq!(warning.level, Level::WARN);
    assert_eq!(
        warning.fields.get("cause").map(String::as_str),
        Some("the key was gone or held by another owner")
    );
    assert!(guard.release().await.unwrap_err().is_lost());
    let span = closed_lock_span("spans:lost").await;
    assert_eq!(span.field("release"), Some("lost"));
}

/// Renewals fail.
#[derive(Debug)]
pub struct NoRenewals;

impl Interceptor for NoRenewals {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            match call {
                Call::Extend { .. } => {
                    Verdict::Fail(LockError::backend(None, "renewals are cut off", None))
                }
                _ => Verdict::Pass,
            }
        })
    }
}

#[tokio::test]
async fn a_failing_renewal_warns_once_under_its_span_then_the_loss() {
    capture::install();
    let backend = Intercepted::new(MemoryBackend::new(), NoRenewals);
    let locks = LockClient::from_backend(backend);
    let guard = locks
        .lock("spans:no-renewal")
        .ttl_ms(300)
        .acquire()
        .await
        .unwrap();

    let span = lost_span("spans:no-renewal", &guard).await;
    assert_eq!(span.field("lost"), Some("unconfirmed"));
    assert!(locks.renewal_stats().rounds >= 2, "one failed round only");
    let events = events_under(span.seq);
    let failures: Vec<_> = events
        .iter()
        .filter(|e| e.message().starts_with("lock renewal failed"))
        .collect();
    assert_eq!(failures.len(), 1, "{events:#?}");
    assert_eq!(failures[0].level, Level::WARN);
    assert!(failures[0].fields["error"].contains("renewals are cut off"));
    assert!(events.iter().any(|e| e.message() == "lock lost"));
}

#[tokio::test]
async fn refusals_by_the_backend_name_their_outcome() {
    capture::install();
    let mut server = RedisServer::start().unwrap();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let mut redis = server.connection().await.unwrap();
    let _: () = redis
        .set("lock:{spans:foreign}:v2", "not a lock")
        .await
        .unwrap();
    let error = locks.lock("spans:foreign").acquire().await.unwrap_err();
    assert!(matches!(error, LockError::KeyInUse { .. }), "{error:?}");
    assert_eq!(
        closed_lock_span("spans:foreign").await.field("outcome"),
        Some("key_in_use")
    );

    server.kill().unwrap();
    let error = locks.lock("spans:down").give_up().acquire().await;
    assert!(error.unwrap_err().is_backend());
    assert_eq!(
        closed_lock_span("spans:down").await.field("outcome"),
        Some("backend_error")
    );

    let error = locks.lock("").acquire().await.unwrap_err();
    assert!(matches!(error, LockError::InvalidKey { .. }), "{error:?}");
    assert_eq!(closed_lock_span("").await.field("outcome"), Some("invalid"));
}

#[tokio::test]
async fn no_span_or_event_records_the_owner_token() {
    capture::install();
    let (_server, locks, guard, mut redis) = held_on_redis("spans:secret", 300).await;
    let value: String = redis.get("lock:{spans:secret}:v2").await.unwrap();
    let owner = value.rsplit_once(':').unwrap().1.to_owned();
    // Renewal rounds, then a release, all recorded.
    wait_for("two renewal rounds", || {
        (locks.renewal_stats().rounds >= 2).then_some(())
    })
    .await;
    guard.release().await.unwrap();
    closed_lock_span("spans:secret").await;

    let values = capture::every_recorded_value();
    assert!(values.iter().any(|v| v == "spans:secret"));
    let leaked: Vec<_> = values.iter().filter(|v| v.contains(&owner)).collect();
    assert!(
        leaked.is_empty(),
        "the owner token was recorded: {leaked:?}"
    );
}
