//! Shared helpers of the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use fencelock::LockClient;
use fencelock::testing::RedisServer;

pub fn redis_server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("cannot start a private redis-server: {e}"))
}

pub async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

/// A plain redis-rs connection to inspect what the lock left in Redis.
pub async fn inspector(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Polls `check` every 10 ms until it returns true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Asserts that `result` is `Err(LockError::Lost)` with `cause`.
pub fn expect_lost<T: std::fmt::Debug>(
    result: Result<T, fencelock::LockError>,
    cause: fencelock::LossCause,
) {
    match result {
        Err(fencelock::LockError::Lost { cause: c, .. }) if c == cause => {}
        other => panic!("expected Lost ({cause:?}), got {other:?}"),
    }
}

/// Takes and releases `key` once (on a fresh server, this also loads the scripts).
pub async fn lock_once(client: &LockClient, key: &str) {
    let guard = client
        .lock(key)
        .acquire()
        .await
        .expect("a free key is granted");
    guard.release().await.expect("its holder releases it");
}

/// How many `EVALSHA` the server has run so far (`INFO commandstats`).
pub async fn script_calls(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `error` followed by each of its sources, joined with ": " (as anyhow's `{:#}` prints it).
pub fn with_sources(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
