//! The assertions an application's tests make on lock keys (`fencelock::testing::assertions`),
//! on the memory backend and on Redis, and the faults it scripts on the memory backend.

use std::time::Duration;

use fencelock::admin::Holding;
use fencelock::testing::Faults;
use fencelock::testing::assertions::{assert_free, assert_held, assert_held_by};
use fencelock::{LockClient, LockError, LossCause};

use crate::support::{client, redis_server};

/// Whether `check` panics (run as a task of its own, so that its panic is caught).
async fn panics<F>(check: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(check)
        .await
        .is_err_and(|error| error.is_panic())
}

async fn each_assertion_passes_and_fails_when_it_should(locks: LockClient) {
    assert_free(&locks, "report").await;
    let guard = locks.lock("report").acquire().await.unwrap();
    assert_held_by(&locks, &guard).await;
    assert_eq!(
        assert_held(&locks, "report").await.token(),
        Some(guard.token())
    );
    let other = locks.clone();
    assert!(panics(async move { assert_free(&other, "report").await }).await);
    let other = locks.clone();
    assert!(
        panics(async move {
            assert_held(&other, "nothing").await;
        })
        .await
    );

    // An operator ends the grant: the guard no longer holds its key.
    let forced = locks.admin().force_release("report").await.unwrap();
    assert!(forced.released);
    let again = locks.lock("report").acquire().await.unwrap();
    let (other, stale) = (locks.clone(), guard);
    assert!(panics(async move { assert_held_by(&other, &stale).await }).await);
    assert_held_by(&locks, &again).await;

    let readers = [
        locks.read_lock("shared").acquire().await.unwrap(),
        locks.read_lock("shared").acquire().await.unwrap(),
    ];
    for reader in &readers {
        assert_held_by(&locks, reader).await;
    }

    // Review findings: a grant past the first 100 shown failed, and a guard whose key a
    // shutdown released while `min_hold_ms` keeps it taken passed.
    let mut permits = Vec::new();
    for _ in 0..PERMITS {
        let permit = locks.semaphore("pool", PERMITS).acquire().await.unwrap();
        permits.push(permit);
    }
    for permit in &permits {
        assert_held_by(&locks, permit).await;
    }
    let kept = locks
        .lock("kept")
        .min_hold_ms(60_000)
        .acquire()
        .await
        .unwrap();
    assert_held_by(&locks, &kept).await;
    locks.shutdown().await;
    let kept_by = assert_held(&locks, "kept").await;
    assert!(matches!(kept_by, Holding::Kept { .. }), "{kept_by:?}");
    assert!(panics(async move { assert_held_by(&locks, &kept).await }).await);
}

/// More permits than an inspection shows (100).
const PERMITS: u32 = 120;

#[tokio::test]
async fn key_assertions_on_the_memory_backend() {
    each_assertion_passes_and_fails_when_it_should(LockClient::memory()).await;
}

#[tokio::test]
async fn key_assertions_on_redis() {
    let server = redis_server();
    each_assertion_passes_and_fails_when_it_should(client(&server).await).await;
}

/// `future`'s output, if it comes within a minute of the (paused) clock.
async fn within_a_minute<T>(future: impl Future<Output = T>) -> T {
    let limit = Duration::from_secs(60);
    tokio::time::timeout(limit, future)
        .await
        .expect("within a minute")
}

/// Each scripted fault of the memory backend does what it says, on the paused clock.
#[tokio::test(start_paused = true)]
async fn scripted_faults_on_the_memory_backend() {
    let (locks, faults) = Faults::memory_client();

    let guard = locks.lock("renewed").ttl_ms(3_000).acquire().await.unwrap();
    faults.fail_renewals(true);
    let lost = within_a_minute(guard.lost()).await;
    assert!(
        matches!(
            lost,
            LockError::Lost {
                cause: LossCause::Unconfirmed,
                ..
            }
        ),
        "{lost:?}"
    );
    faults.fail_renewals(false);

    faults.unreachable(true);
    let refused = locks.lock("down").give_up().acquire().await;
    assert!(
        refused.is_err_and(|error| error.is_backend()),
        "an outage is a backend error"
    );
    // Review finding: the calls of several keys at once, of single-flight values and of
    // exhausted shards still reached the store.
    let together = locks
        .lock_all(["down:a", "down:b"])
        .give_up()
        .acquire()
        .await;
    assert!(together.is_err_and(|error| error.is_backend()));
    let refilled = locks.refill_shards("down").await;
    assert!(refilled.is_err_and(|error| error.is_backend()));
    faults.unreachable(false);

    faults.delay_next_acquire(Duration::from_secs(5));
    let late = locks.lock("late").wait_ms(1_000).acquire().await;
    assert!(
        late.is_err_and(|error| error.is_backend()),
        "the answer came after the wait"
    );
    let started = tokio::time::Instant::now();
    let _late = locks.lock("late").acquire().await.unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "one attempt delayed, not the next"
    );
    // Review finding: several keys whose call was answered after the wait were then taken
    // one by one, past the wait.
    faults.delay_next_acquire(Duration::from_secs(5));
    let late = locks
        .lock_all(["late:a", "late:b"])
        .wait_ms(1_000)
        .acquire()
        .await;
    let late = late.expect_err("the answer for both came after the wait");
    assert!(late.is_backend(), "{late}");
    assert!(late.to_string().contains("wait (1000 ms)"), "{late}");

    let ended = locks.lock("ended").acquire().await.unwrap();
    faults.end_leases(&locks, "ended").await.unwrap();
    assert_free(&locks, "ended").await;
    // Review finding: only the first 100 grants that an inspection shows were ended.
    let mut permits = Vec::new();
    for _ in 0..PERMITS {
        permits.push(locks.semaphore("pool", PERMITS).acquire().await.unwrap());
    }
    faults.end_leases(&locks, "pool").await.unwrap();
    assert_free(&locks, "pool").await;
    drop(permits);
    let lost = within_a_minute(ended.lost()).await;
    assert!(
        matches!(
            lost,
            LockError::Lost {
                cause: LossCause::NotOwner,
                ..
            }
        ),
        "{lost:?}"
    );
}
