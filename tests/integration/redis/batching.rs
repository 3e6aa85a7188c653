//! Natural batching: the calls a client makes to a server while one of its calls is in
//! flight go out together as one call, each with its own reply, and go out even when the
//! request whose call they waited for is cancelled.

use std::time::Duration;

use fencelock::LockClient;
use fencelock::testing::TcpProxy;
use redis::AsyncCommands;

use crate::support::{eventually, inspector, redis_server, script_calls};

/// One acquire is held up at a frozen proxy while 16 more (one of them over another
/// program's hash) come: the 16 go out as one script call once it is answered, 15 are
/// granted, each with a token of its own, and the one over the hash is refused, alone.
#[tokio::test]
async fn calls_made_while_one_is_in_flight_go_out_as_one_each_with_its_own_reply() {
    let server = redis_server();
    let mut redis = inspector(&server).await;
    let _: () = redis
        .hset("lock:{foreign}:v2", "user", "alice")
        .await
        .unwrap();
    let _: () = redis.pexpire("lock:{foreign}:v2", 60_000).await.unwrap();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    locks
        .lock("warm-up")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let calls_before = script_calls(&mut redis).await;

    proxy.freeze();
    let acquire = |key: String| {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock(key).acquire().await })
    };
    let first = acquire("first".to_owned());
    let out = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 1
    })
    .await;
    assert!(out, "the first attempt is out");
    let keys: Vec<String> = (0..15)
        .map(|n| format!("batched:{n}"))
        .chain(["foreign".to_owned()])
        .collect();
    let batched: Vec<_> = keys.iter().cloned().map(acquire).collect();
    let out = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 17
    })
    .await;
    assert!(out, "17 attempts out: {}", locks.attempts_in_flight());
    proxy.thaw();

    let first = first.await.unwrap().expect("the first is granted");
    let mut tokens = vec![first.token()];
    for (key, task) in keys.iter().zip(batched) {
        match (key.as_str(), task.await.unwrap()) {
            ("foreign", Err(error)) => {
                assert!(error.to_string().contains("hash"), "{error}");
            }
            ("foreign", Ok(_)) => panic!("a lock was granted over another program's hash"),
            (_, Ok(guard)) => tokens.push(guard.token()),
            (key, Err(error)) => panic!("{key} was refused: {error}"),
        }
    }
    let calls = script_calls(&mut redis).await - calls_before;
    assert_eq!(calls, 2, "the first call and one batch of 16");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 16, "each grant has a token of its own");
    let foreign: String = redis.hget("lock:{foreign}:v2", "user").await.unwrap();
    assert_eq!(foreign, "alice", "the hash is left as it was");
}

/// The request whose call is in flight is cancelled: the calls that waited for it still go
/// out, and are answered.
#[tokio::test]
async fn calls_waiting_for_a_cancelled_request_s_call_still_go_out() {
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    locks
        .lock("warm-up")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    proxy.freeze();
    let acquire = |key: &str| {
        let (locks, key) = (locks.clone(), key.to_owned());
        tokio::spawn(async move { locks.lock(key).acquire().await })
    };
    let cancelled = acquire("cancelled");
    let out = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 1
    })
    .await;
    assert!(out, "the first attempt is out");
    let waiting = [acquire("waiting:1"), acquire("waiting:2")];
    let out = eventually(Duration::from_secs(5), || async {
        locks.attempts_in_flight() == 3
    })
    .await;
    assert!(out, "three attempts out: {}", locks.attempts_in_flight());
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    proxy.thaw();

    for task in waiting {
        let answered = tokio::time::timeout(Duration::from_secs(10), task).await;
        let guard = answered
            .expect("a waiting call is answered")
            .unwrap()
            .expect("granted");
        guard.release().await.unwrap();
    }
}
