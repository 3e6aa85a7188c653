//! Credentials and ACLs: a user limited to the lock prefix (and, as Redis 7 defaults, to no
//! pub/sub channels) can lock and release; a wrong password is a clear error.

mod support;

use std::time::{Duration, Instant};

use fencelock::{LockClient, LockError};
use redis::AsyncCommands;
use support::{inspector, redis_server};

fn url_as(server: &fencelock::testing::RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port())
}

#[tokio::test]
async fn a_user_limited_to_the_lock_prefix_and_no_channels_can_lock_and_wait() {
    let server = redis_server();
    let mut admin = inspector(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            ">secret",
            "~lock:*",
            "resetchannels",
            "+@all",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let locks = LockClient::connect(&url_as(&server, "locker", "secret"))
        .await
        .unwrap();
    let holder = locks.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("k")
                .sleep_ms(100)
                .wait_ms(10_000)
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    // The release script's PUBLISH is refused (no channels): the release itself must stand.
    holder
        .release()
        .await
        .expect("released although PUBLISH is not allowed");
    let next = waiter
        .await
        .unwrap()
        .expect("the waiter, unable to subscribe, polls");
    assert!(released_at.elapsed() < Duration::from_secs(5));
    next.release().await.unwrap();
    let left: Vec<String> = admin.keys("lock:{k}").await.unwrap();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}

#[tokio::test]
async fn a_wrong_password_is_a_backend_error_that_says_so() {
    let server = redis_server();
    let mut admin = inspector(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">secret", "~lock:*", "+@all"])
        .query_async(&mut admin)
        .await
        .unwrap();
    match LockClient::connect(&url_as(&server, "locker", "wrong")).await {
        Err(LockError::Backend { message, .. }) => {
            assert!(
                message.to_lowercase().contains("authentication"),
                "the message names the cause: {message}"
            );
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
}
