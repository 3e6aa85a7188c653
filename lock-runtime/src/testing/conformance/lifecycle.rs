//! The conformance checks of a client's life around its locks: a release still on its way
//! when the key is asked for again, the client's shutdown, and the values single-flight
//! calls leave.

use std::time::{Duration, Instant};

use super::{LONG, LONG_TTL_MS, hands_off, hold};
use crate::admin::Holding;
use crate::backend::{
    Acquire, Lease, Published, Release, ResultChange, ResultStore, SharedResult, Turn,
};
use crate::background::Background;
use crate::instance::InstanceId;
use crate::testing::assertions::assert_held_by;
use crate::{LockClient, LockError, LockKind, LossCause};

/// A key asked for again right after the same client dropped its guard, or dropped its
/// `release()` after the first poll, is not refused by that release still in flight: the
/// request waits for it.
pub async fn a_release_in_flight_does_not_refuse_the_same_client(client: &LockClient, key: &str) {
    for round in 0..20 {
        let guard = hold(client, key).await;
        if round % 2 == 0 {
            drop(guard);
        } else {
            // Polled once, then dropped (a timeout polls before it looks at the clock).
            let release = tokio::time::timeout(Duration::ZERO, guard.release()).await;
            if release.is_ok() {
                continue;
            }
        }
        hold(client, key).await.release().await.expect("release");
    }
}

/// A client's shutdown releases what it holds at once (the next holder does not wait for
/// the lease), tells the holder that the lock ended, stops its waiting request after giving
/// back its place in line, and refuses later requests.
pub async fn shutdown_releases_and_withdraws(client: &LockClient, namespace: &str) {
    let held_key = format!("{namespace}:held");
    let waited_key = format!("{namespace}:waited");
    // A client of its own over the same store: the one under test goes on to other rules.
    let down = LockClient::with_background(
        client.backend().clone(),
        Background::Driver,
        client.notifies(),
        None,
    );
    let guard = hold(&down, &held_key).await;
    let blocker = hold(client, &waited_key).await;
    let wait_long = |client: &LockClient, key: &str, sleep_ms| {
        client
            .lock(key)
            .ttl_ms(LONG_TTL_MS)
            .wait_ms(LONG_TTL_MS)
            .sleep_ms(sleep_ms)
            .acquire()
    };
    // Its place in line lasts 30 s past its last attempt: only a withdrawal ends it sooner.
    let waiter = tokio::spawn(wait_long(&down, &waited_key, 10_000));
    waiting(client, &down, &waited_key).await;
    let next = tokio::spawn(wait_long(client, &held_key, 50));

    let started = Instant::now();
    let report = down.shutdown().await;
    assert_eq!(
        (report.released, report.withdrawn, report.unanswered),
        (1, 1, 0),
        "one lock released, one request withdrawn, every release answered: {report:?}"
    );
    match waiter.await.expect("the waiter ran") {
        Err(LockError::ShutDown { .. }) => {}
        other => panic!("a waiting request stops with ShutDown: {other:?}"),
    }
    if hands_off(client) {
        let line = client.admin().inspect(&waited_key).await.expect("inspects");
        assert_eq!(
            line.waiters, 0,
            "the shutdown gave back the waiter's place: {line:?}"
        );
    }
    match guard.lost().await {
        LockError::Lost {
            cause: LossCause::ShutDown,
            ..
        } => {}
        other => panic!("the holder is told the shutdown ended its lock: {other:?}"),
    }
    let next = next.await.expect("the next request ran");
    let next = next.expect("the next holder gets the key the shutdown released");
    assert!(
        started.elapsed() < LONG / 4,
        "released by the shutdown, not by the lease's expiry"
    );
    match guard.release().await {
        Err(LockError::Lost {
            cause: LossCause::ShutDown,
            ..
        }) => {}
        other => panic!("a release after the shutdown reports it: {other:?}"),
    }
    blocker.release().await.expect("release");
    let free = client.lock(&waited_key).give_up().acquire().await;
    let free = free.expect("no place of the withdrawn waiter is left to hand the key to");
    match down.lock(&held_key).give_up().acquire().await {
        Err(LockError::ShutDown { .. }) => {}
        other => panic!("a shut-down client refuses requests: {other:?}"),
    }
    next.release().await.expect("release");
    free.release().await.expect("release");
}

/// Waits (at most 10 s) until `down`'s request for `key` waits: in the key's line where the
/// store keeps one, else running.
async fn waiting(client: &LockClient, down: &LockClient, key: &str) {
    let in_line = async {
        loop {
            let waits = match hands_off(client) {
                true => client
                    .admin()
                    .inspect(key)
                    .await
                    .is_ok_and(|s| s.waiters == 1),
                false => down.shutdown_state().running() == 1,
            };
            if waits {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), in_line)
        .await
        .expect("the request waits within 10 s");
}

/// Whether the backend keeps single-flight values for other processes.
pub(super) fn keeps_results(client: &LockClient) -> bool {
    client.backend().results().is_some()
}

/// A single-flight value is kept only under the grant that holds the key's mutex, and never
/// over a later grant's; the latest one kept is read back as written.
pub async fn a_shared_value_is_kept_for_its_grant_only(client: &LockClient, key: &str) {
    let results = client.backend().results().expect("offered");
    let value = |token, text: &str| SharedResult {
        token,
        value: text.as_bytes().to_vec(),
    };
    let keep = Duration::from_millis(LONG_TTL_MS);
    assert_eq!(
        results.read_result(key).await.expect("answers"),
        None,
        "nothing yet"
    );
    let publish = |result: SharedResult| async move {
        results
            .publish_result(key, &result, keep)
            .await
            .expect("answers")
    };
    let first = hold(client, key).await;
    let stranger = value(first.token() + 1_000, "\"not the holder's\"");
    let kept = publish(stranger).await;
    assert_eq!(
        kept,
        Published::NotHeld,
        "a token that does not hold the key leaves nothing"
    );
    let mine = value(first.token(), "{\"orders\":7}");
    assert_eq!(publish(mine.clone()).await, Published::Kept);
    assert_eq!(
        results.read_result(key).await.expect("answers"),
        Some(mine.clone())
    );
    let again = publish(value(first.token(), "\"a second value\"")).await;
    assert_eq!(again, Published::LaterKept, "one value per grant");
    first.release().await.expect("release");
    let second = hold(client, key).await;
    assert!(second.token() > mine.token);
    let later = value(second.token(), "[1,2]");
    assert_eq!(publish(later.clone()).await, Published::Kept);
    let earlier = publish(mine).await;
    assert_eq!(
        earlier,
        Published::NotHeld,
        "an earlier grant's value never replaces a later one's"
    );
    assert_eq!(
        results.read_result(key).await.expect("answers"),
        Some(later)
    );
    second.release().await.expect("release");
}

/// Whether the backend keeps single-flight values and announces releases.
pub(super) fn keeps_and_announces(client: &LockClient) -> bool {
    keeps_results(client) && super::notifies(client)
}

/// Where the store keeps values and announces releases, a watch of a key's value completes
/// when a value is left under the key's grant, and when the holder leaves without one (a
/// failed flight): the leaders of other processes read the value, or contend, without
/// waiting in line for it.
pub async fn a_value_left_or_a_holder_gone_is_watched(client: &LockClient, key: &str) {
    let results = client.backend().results().expect("offered");
    let told = |watch, what: &'static str| async move {
        tokio::time::timeout(LONG, watch)
            .await
            .unwrap_or_else(|_| panic!("{what} is told to the value's watchers within {LONG:?}"));
    };
    let holder = hold(client, key).await;
    let change = watched(results, key).await;
    let value = SharedResult {
        token: holder.token(),
        value: b"\"a value\"".to_vec(),
    };
    let keep = Duration::from_millis(LONG_TTL_MS);
    let kept = results.publish_result(key, &value, keep).await;
    assert_eq!(kept.expect("answers"), Published::Kept);
    holder.release().await.expect("release");
    told(change, "a value left").await;
    let holder = hold(client, key).await;
    let change = watched(results, key).await;
    holder.release().await.expect("release");
    told(change, "a holder gone without a value").await;
}

/// The store's watch of `key`'s value, which a store that announces releases makes.
async fn watched(results: &dyn ResultStore, key: &str) -> ResultChange {
    let watch = results.watch_result(key).await.expect("answers");
    watch.expect("a store that announces releases watches values")
}

/// A client built with an instance id releases, at once, the grants an earlier run of that
/// instance left in the store (a process killed while holding them): a mutex, whose waiter
/// gets the key long before the lease would end, and a semaphore's permit where the store
/// offers semaphores. It leaves alone its own run's grants, another instance's, a grant of an
/// owner without an instance, and the other permit of the semaphore.
pub async fn a_restarted_instance_releases_what_its_earlier_run_left(
    client: &LockClient,
    namespace: &str,
) {
    let backend = client.backend();
    // A host's name: longer than owner tokens carry, so written shortened, with a hash.
    let name = "conformance-7.eu-west-1.compute.internal";
    let instance = |run| InstanceId::of_run(name, run).expect("an instance id");
    let (earlier, now) = (instance("0000dead"), instance("1111live"));
    let run_of = |instance: Option<InstanceId>| {
        LockClient::with_background(
            backend.clone(),
            Background::Driver,
            client.notifies(),
            instance,
        )
    };
    // What the killed process left: grants, as it wrote them, that nobody renews or releases.
    let left = |key: &str, kind| Lease {
        key: key.to_owned(),
        owner: earlier.owner_token(),
        ttl: LONG,
        replicas: 0,
        kind,
    };
    let mutex = format!("{namespace}:mutex");
    let leave = |lease: Lease| async move {
        let granted = backend.acquire(&lease, Turn::Once).await;
        assert!(
            matches!(granted, Ok(Acquire::Granted { .. })),
            "{granted:?}"
        );
    };
    leave(left(&mutex, LockKind::Mutex)).await;
    // It also waited for the mutex: where a release hands the key to the line, the sweep's
    // release of the mutex hands it to this dead waiter, which a second pass releases.
    let in_line = backend
        .acquire(&left(&mutex, LockKind::Mutex), Turn::InLine(LONG))
        .await;
    assert!(matches!(in_line, Ok(Acquire::Held { .. })), "{in_line:?}");
    // And it released one with min_hold_ms: kept on purpose, left to its keep.
    let kept_key = format!("{namespace}:kept");
    let kept = left(&kept_key, LockKind::Mutex);
    leave(kept.clone()).await;
    let released = backend.release(&kept, LONG).await;
    assert!(matches!(released, Ok(Release::Released)), "{released:?}");
    let semaphore = LockKind::Semaphore { permits: 2 };
    let permits = format!("{namespace}:permits");
    let other_permit = if backend.capabilities().semaphores {
        leave(left(&permits, semaphore)).await;
        Some(
            client
                .semaphore(&permits, 2)
                .ttl_ms(LONG_TTL_MS)
                .acquire()
                .await,
        )
    } else {
        None
    };
    let restarted = run_of(Some(now));
    let own = restarted
        .lock(format!("{namespace}:own"))
        .ttl_ms(LONG_TTL_MS);
    let own = own.acquire().await.expect("the new run's own lock");
    let other = "conformance-7.eu-west-1.compute.internal-2";
    let other = InstanceId::of_run(other, "0000dead").expect("an instance id");
    let other_run = run_of(Some(other));
    let theirs = other_run
        .lock(format!("{namespace}:theirs"))
        .ttl_ms(LONG_TTL_MS);
    let theirs = theirs.acquire().await.expect("another instance's lock");
    let plain = hold(client, &format!("{namespace}:plain")).await;
    // A waiter for the mutex, which the earlier run holds for LONG.
    let waiting = client.lock(&mutex).wait_ms(LONG_TTL_MS).acquire();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        (waiting.await, started.elapsed())
    });

    let swept = restarted.release_orphans().await.expect("the sweep");
    let handed = backend.capabilities().hands_off;
    let expected = 1 + usize::from(handed) + usize::from(other_permit.is_some());
    assert_eq!(swept.found, expected, "the earlier run's grants: {swept:?}");
    assert_eq!(swept.released.len(), expected, "{swept:?}");
    let (next, waited) = waiter.await.expect("the waiter's task");
    let next = next.expect("the waiter gets the mutex the earlier run left");
    assert!(
        waited < LONG / 2,
        "the waiter got the key when the sweep released it, not at the lease's end: {waited:?}"
    );
    let again = restarted.release_orphans().await.expect("a second sweep");
    assert_eq!(
        again.found, 0,
        "nothing of the earlier run is left: {again:?}"
    );
    for kept in [&own, &theirs, &plain] {
        assert_held_by(client, kept).await;
    }
    let state = client.admin().inspect(&kept_key).await.expect("inspect");
    assert!(
        matches!(state.holding, Holding::Kept { .. }),
        "left to its keep: {state:?}"
    );
    if let Some(permit) = other_permit {
        let permit = permit.expect("the semaphore's other permit");
        assert_held_by(client, &permit).await;
        let freed = client.semaphore(&permits, 2).give_up().acquire().await;
        let freed = freed.expect("the earlier run's permit is free again");
        for guard in [freed, permit] {
            guard.release().await.expect("release");
        }
    }
    for guard in [next, own, theirs, plain] {
        guard.release().await.expect("release");
    }
    let no_instance = client.release_orphans().await.unwrap_err();
    assert!(
        no_instance.to_string().contains("instance_id"),
        "{no_instance}"
    );
}
