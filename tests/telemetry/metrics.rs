//! The metrics of `fencelock::telemetry`, as a recording exporter sees them. Each test labels
//! its locks with a name of its own (`LockOptions::name`, or the key template).

use std::time::Duration;

use fencelock::backend::LockBackend;
use fencelock::backend::memory::MemoryBackend;
use fencelock::telemetry::{
    ACQUISITIONS, ATTEMPT_DURATION, HOLD, LOCKS_HELD, LOSSES, OTHER_LABEL, RENEWAL_FAILURES,
    RENEWAL_ROUNDS, UNNAMED_LABELS, WAIT,
};
use fencelock::testing::{Faults, Intercepted, RedisServer};
use fencelock::{LockClient, LockError, LockOptions, redis_lock, with_client};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis::AsyncCommands;

use crate::capture::{self, counter, gauge, histogram};
use crate::spans::NoRenewals;

#[redis_lock(key = "metrics:call:{id}", action = GiveUp)]
async fn call(id: u32) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

const CALL: &str = "metrics:call:{id}";

#[tokio::test]
async fn acquisitions_are_counted_by_outcome_with_their_waits_and_holds() {
    capture::install();
    let mut server = RedisServer::start().unwrap();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    with_client(locks.clone(), call(1)).await.unwrap();
    with_client(locks.clone(), call(2)).await.unwrap();
    let held = locks.lock("metrics:call:3").acquire().await.unwrap();
    let refused = with_client(locks.clone(), call(3)).await;
    assert!(refused.unwrap_err().is_not_acquired());
    held.release().await.unwrap();
    let mut redis = server.connection().await.unwrap();
    let _: () = redis
        .set("lock:{metrics:call:4}:v2", "foreign")
        .await
        .unwrap();
    let foreign = with_client(locks.clone(), call(4)).await;
    assert!(matches!(foreign, Err(LockError::KeyInUse { .. })));

    let granted = [("lock", CALL), ("outcome", "granted")];
    assert_eq!(counter(ACQUISITIONS, &granted), 2);
    assert_eq!(
        counter(ACQUISITIONS, &[("lock", CALL), ("outcome", "not_acquired")]),
        1
    );
    assert_eq!(
        counter(ACQUISITIONS, &[("lock", CALL), ("outcome", "key_in_use")]),
        1
    );
    assert_eq!(histogram(WAIT, &granted).len(), 2);
    assert_eq!(histogram(HOLD, &[("lock", CALL)]).len(), 2);
    // One attempt a call; the key in use answered too.
    assert_eq!(histogram(ATTEMPT_DURATION, &[("lock", CALL)]).len(), 4);
    assert!(
        histogram(WAIT, &granted)
            .iter()
            .all(|&s| (0.0..10.0).contains(&s))
    );

    let waiting = locks
        .lock("metrics:call:6")
        .options(LockOptions::new().name(CALL));
    let held = locks.lock("metrics:call:6").acquire().await.unwrap();
    let cut = tokio::time::timeout(Duration::from_millis(50), waiting.acquire()).await;
    assert!(cut.is_err(), "the key is held");
    held.release().await.unwrap();
    assert_eq!(
        counter(ACQUISITIONS, &[("lock", CALL), ("outcome", "cancelled")]),
        1
    );

    server.kill().unwrap();
    let down = with_client(locks, call(5)).await;
    assert!(down.unwrap_err().is_backend());
    assert_eq!(
        counter(
            ACQUISITIONS,
            &[("lock", CALL), ("outcome", "backend_error")]
        ),
        1
    );
}

/// A call for several keys answered after the wait counts as its first key's attempt, cut:
/// a backend error, as for one key. Review finding: it was not counted at all.
#[tokio::test(start_paused = true)]
async fn several_keys_answered_after_the_wait_count_as_a_backend_error() {
    capture::install();
    let (locks, faults) = Faults::memory_client();
    faults.delay_next_acquire(Duration::from_secs(5));
    let options = LockOptions::new().name("metrics:late-pair").wait_ms(1_000);
    let keys = ["metrics:late:a", "metrics:late:b"];
    let late = locks.lock_all(keys).options(options).acquire().await;
    assert!(late.is_err_and(|error| error.is_backend()));
    let outcome = [("lock", "metrics:late-pair"), ("outcome", "backend_error")];
    assert_eq!(counter(ACQUISITIONS, &outcome), 1);
}

/// A lock taken by hand without a name is labelled with its key's namespace (the text before
/// the first `:`), for the first `UNNAMED_LABELS` namespaces of the process, then `other`:
/// never with the key itself, and never with an empty label.
#[tokio::test]
async fn unnamed_locks_are_labelled_by_their_namespace_within_a_bound() {
    capture::install();
    let locks = LockClient::memory();
    let namespaces = UNNAMED_LABELS + 16;
    for i in 0..namespaces {
        let key = format!("unnamed{i}:42");
        locks
            .lock(key)
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let granted = |lock| counter(ACQUISITIONS, &[("lock", lock), ("outcome", "granted")]);
    assert_eq!(granted("unnamed0"), 1, "labelled by its namespace");
    assert_eq!(granted("unnamed0:42"), 0, "never by its key");
    assert!(
        granted(OTHER_LABEL) >= 16,
        "beyond the bound: {}",
        granted(OTHER_LABEL)
    );
    assert_eq!(granted(""), 0, "never an empty label");
}

#[tokio::test]
async fn the_held_gauge_follows_guards() {
    capture::install();
    let locks = LockClient::memory();
    let named = LockOptions::new().name("metrics:gauge");
    let labels = [("lock", "metrics:gauge")];
    let first = locks.lock("g1").options(named).acquire().await.unwrap();
    let second = locks.lock("g2").options(named).acquire().await.unwrap();
    assert_eq!(gauge(LOCKS_HELD, &labels), 2.0);
    first.release().await.unwrap();
    assert_eq!(gauge(LOCKS_HELD, &labels), 1.0);
    drop(second);
    assert_eq!(gauge(LOCKS_HELD, &labels), 0.0);
    assert_eq!(histogram(HOLD, &labels).len(), 2);
}

#[tokio::test]
async fn losses_are_counted_by_cause() {
    capture::install();
    let locks = LockClient::memory();
    let named = LockOptions::new().name("metrics:loss").ttl_ms(100);
    let guard = locks
        .lock("expires")
        .options(named.renew(false))
        .acquire()
        .await
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    assert!(lost.is_ok());
    // Told once the renewal loop let go of its registry, after the loss signal.
    let expired = [("lock", "metrics:loss"), ("cause", "expired")];
    crate::capture::wait_for("the loss counted", || {
        (counter(LOSSES, &expired) > 0).then_some(())
    })
    .await;
    assert_eq!(counter(LOSSES, &expired), 1);
    assert_eq!(
        counter(LOSSES, &[("lock", "metrics:loss"), ("cause", "not_owner")]),
        0
    );
}

/// Counts of renewal rounds and failed rounds, exact: a client whose background runs on this
/// current-thread runtime records into a recorder of this thread alone.
async fn renewal_counts(backend: impl LockBackend, ttl_ms: u64, run_for: Duration) -> (u64, u64) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let locks = LockClient::from_backend_on(backend, tokio::runtime::Handle::current());
    let guard = locks
        .lock("renewed")
        .ttl_ms(ttl_ms)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(run_for).await;
    drop(guard);
    // One snapshot: each drains every counter.
    let counters: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => Some((key.key().name().to_owned(), n)),
            _ => None,
        })
        .collect();
    let count = |name: &str| counters.iter().find(|(n, _)| n == name).map_or(0, |c| c.1);
    (count(RENEWAL_ROUNDS), count(RENEWAL_FAILURES))
}

#[tokio::test(start_paused = true)]
async fn renewal_rounds_are_counted() {
    // Renewed every 100 ms.
    let counts = renewal_counts(MemoryBackend::new(), 300, Duration::from_millis(350)).await;
    assert_eq!(counts, (3, 0));
}

#[tokio::test(start_paused = true)]
async fn failed_renewal_rounds_are_counted() {
    // Due at 100 ms, then retried every 25 ms until the lease's deadline (294 ms).
    let failing = Intercepted::new(MemoryBackend::new(), NoRenewals);
    let (rounds, failures) = renewal_counts(failing, 300, Duration::from_millis(400)).await;
    assert_eq!(rounds, failures);
    assert_eq!(rounds, 8);
}
