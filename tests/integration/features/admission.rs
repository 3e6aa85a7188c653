//! Admission control: a client's bound on the keys it has attempts out for at the store
//! refuses acquisitions of other keys at once past it, leaves nothing behind for them, and
//! neither counts the acquisitions that wait for a holder nor refuses more requests of a key
//! already acquired.

use std::time::{Duration, Instant};

use fencelock::testing::{RedisServer, TcpProxy};
use fencelock::{LockClient, LockGuard};

use crate::support::{eventually, inspector, mutex_state, redis_server};

/// Four attempts held up at a frozen proxy fill a bound of four: the fifth acquisition is
/// refused without waiting and writes nothing; once the four are answered, a new one is
/// admitted again.
#[tokio::test]
async fn a_request_past_the_bound_is_refused_at_once_and_leaves_nothing() {
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    locks.set_max_in_flight(4).unwrap();

    proxy.freeze();
    let held_up: Vec<_> = (0..4)
        .map(|n| {
            let locks = locks.clone();
            tokio::spawn(async move { locks.lock(format!("admitted:{n}")).acquire().await })
        })
        .collect();
    let out = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 4
    })
    .await;
    assert!(out, "four attempts out: {}", locks.attempts_in_flight());

    let asked = Instant::now();
    let refused = locks.lock("refused").acquire().await.unwrap_err();
    let took = asked.elapsed();
    assert!(refused.is_overloaded(), "{refused:?}");
    assert!(
        refused.to_string().contains("set_max_in_flight"),
        "names the fix: {refused}"
    );
    assert!(
        took < Duration::from_millis(500),
        "refused at once, took {took:?}"
    );

    proxy.thaw();
    for task in held_up {
        let guard = task.await.unwrap().expect("an admitted request is granted");
        guard.release().await.unwrap();
    }
    assert_eq!(locks.attempts_in_flight(), 0);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*refused*")
        .query_async(&mut inspector(&server).await)
        .await
        .unwrap();
    assert!(keys.is_empty(), "a refused request wrote {keys:?}");
    let again = locks
        .lock("refused")
        .acquire()
        .await
        .expect("admitted again");
    again.release().await.unwrap();
}

/// An acquisition that waits for another owner's release has no attempt out meanwhile: a
/// bound of one still admits a request for another key.
#[tokio::test]
async fn a_waiting_request_leaves_its_place_to_others() {
    let (server, locks, holder) = held_elsewhere("busy").await;
    locks.set_max_in_flight(1).unwrap();

    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("busy").wait_ms(10_000).acquire().await })
    };
    // Its first attempt marks the key as waited for, and is answered "held": from then on
    // it waits for the release.
    let redis = inspector(&server).await;
    let marked = eventually(Duration::from_secs(5), || {
        let mut redis = redis.clone();
        async move { mutex_state(&mut redis, "lock:{busy}:v2").await == Some('w') }
    })
    .await;
    assert!(marked, "the waiter's attempt reached the store");
    let answered = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 0
    })
    .await;
    assert!(
        answered && !waiter.is_finished(),
        "the waiter waits with no attempt out"
    );
    let free = locks
        .lock("free")
        .acquire()
        .await
        .expect("admitted beside a waiter");
    free.release().await.unwrap();

    holder.release().await.unwrap();
    let granted = waiter.await.unwrap().expect("the waiter gets the key");
    granted.release().await.unwrap();
}

/// A key that another acquisition of the client is under way for is never refused, even
/// while the bound is reached by other keys and that acquisition only waits (no attempt
/// out): the tasks of a flash sale on one item wait for its holder, not for the bound.
#[tokio::test]
async fn requests_of_a_key_already_acquired_are_admitted_past_the_bound() {
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let holder = other.lock("hot").acquire().await.unwrap();
    locks.set_max_in_flight(1).unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("hot").wait_ms(30_000).acquire().await })
    };
    let redis = inspector(&server).await;
    let waiting = eventually(Duration::from_secs(5), || {
        let mut redis = redis.clone();
        let locks = locks.clone();
        async move {
            mutex_state(&mut redis, "lock:{hot}:v2").await == Some('w')
                && locks.attempts_in_flight() == 0
        }
    })
    .await;
    assert!(
        waiting,
        "the first request of `hot` waits with no attempt out"
    );

    proxy.freeze();
    let slow = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("slow").acquire().await })
    };
    let bound_reached = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 1
    })
    .await;
    assert!(bound_reached, "`slow` has its attempt out");
    let refused = locks.lock("cold").acquire().await.unwrap_err();
    assert!(refused.is_overloaded(), "a new key is refused: {refused:?}");
    let second = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("hot").wait_ms(30_000).acquire().await })
    };
    // Refused, it would end at once; admitted, it waits behind the first request of `hot`.
    proxy.thaw();
    slow.await
        .unwrap()
        .expect("`slow` is granted")
        .release()
        .await
        .unwrap();
    holder.release().await.unwrap();
    let first = waiter.await.unwrap().expect("the first waiter gets `hot`");
    first.release().await.unwrap();
    let second = second
        .await
        .unwrap()
        .expect("the second request of `hot` was admitted");
    second.release().await.unwrap();
}

/// A private server, a client of it, and `key` held there through another client.
async fn held_elsewhere(key: &str) -> (RedisServer, LockClient, LockGuard) {
    let server = redis_server();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let holder = other.lock(key).acquire().await.unwrap();
    (server, locks, holder)
}
