//! What renewal costs, and how fast a lost lock stops its body, on a private `redis-server`.
//! Run it in release mode:
//!
//! ```text
//! cargo run --release --features testing --example renewal_cost
//! ```
//!
//! For 1, 100 and 10,000 held locks (lease 3 s, renewed every 1 s) it reports per renewal
//! interval: renewal rounds (each one pipeline, one round trip), script calls, and the
//! Redis CPU time they took. Then it stops a running body by deleting its key, and by
//! cutting the client off from Redis, and reports how long the body ran on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::testing::{RedisServer, TcpProxy};
use fencelock::{LockClient, LockError, redis_lock, with_client};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

const TTL_MS: u64 = 3_000;
const INTERVALS: u32 = 5;

/// Calls and microseconds of `EVALSHA` so far, from `INFO commandstats`.
async fn script_stats(redis: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or_default();
    let field = |name: &str| -> u64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

async fn renewal_cost(url: &str, redis: &mut MultiplexedConnection, locks: usize) {
    let client = LockClient::connect(url).await.unwrap();
    // Every lock asked for at once: past the default bound on keys at the store.
    client.set_max_in_flight(usize::MAX).unwrap();
    let acquiring: Vec<_> = (0..locks)
        .map(|i| {
            tokio::spawn(
                client
                    .lock(format!("cost:{locks}:{i}"))
                    .ttl_ms(TTL_MS)
                    .acquire(),
            )
        })
        .collect();
    let mut guards = Vec::with_capacity(locks);
    for task in acquiring {
        guards.push(task.await.unwrap().unwrap());
    }
    // Let the leases fall into step, then measure.
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    let (stats_before, (calls_before, usec_before)) =
        (client.renewal_stats(), script_stats(redis).await);
    tokio::time::sleep(Duration::from_millis(TTL_MS / 3 * u64::from(INTERVALS))).await;
    let (stats, (calls, usec)) = (client.renewal_stats(), script_stats(redis).await);
    let per_interval = |value: u64| value as f64 / f64::from(INTERVALS);
    println!(
        "{:>8} {:>16.1} {:>16.1} {:>18.1} {:>10}",
        locks,
        per_interval(stats.rounds - stats_before.rounds),
        per_interval(calls - calls_before),
        per_interval(usec - usec_before),
        stats.losses
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[redis_lock(key = "watched", ttl_ms = 3_000)]
async fn watched(entered: Arc<tokio::sync::Notify>) -> Result<(), LockError> {
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

/// Runs `watched`, applies `cut` once the body runs, and returns how long the body ran on.
async fn time_to_stop<F: FnOnce()>(client: LockClient, delay: Duration, cut: F) -> Duration {
    let entered = Arc::new(tokio::sync::Notify::new());
    let job = tokio::spawn(with_client(client, watched(entered.clone())));
    entered.notified().await;
    tokio::time::sleep(delay).await;
    cut();
    let cut_at = Instant::now();
    let result = job.await.unwrap();
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    cut_at.elapsed()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let url = server.url();
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    println!(
        "renewal cost per interval (lease {TTL_MS} ms, renewed every {} ms), over {INTERVALS} intervals",
        TTL_MS / 3
    );
    println!(
        "{:>8} {:>16} {:>16} {:>18} {:>10}",
        "locks", "round trips", "script calls", "Redis script µs", "losses"
    );
    for locks in [1, 100, 10_000] {
        renewal_cost(&url, &mut redis, locks).await;
    }

    println!("\ntime from loss to the body being stopped (lease 3 s, renewal every 1 s)");
    let client = LockClient::connect(&url).await?;
    let mut deleted = Vec::new();
    for trial in 0..5u64 {
        // Spread the deletion over the renewal interval.
        let delay = Duration::from_millis(trial * 200);
        let mut redis = redis.clone();
        let elapsed = time_to_stop(client.clone(), delay, move || {
            tokio::spawn(async move {
                let _: u32 = redis.del("lock:{watched}:v2").await.unwrap();
            });
        })
        .await;
        deleted.push(elapsed);
    }
    let mean = deleted.iter().sum::<Duration>() / deleted.len() as u32;
    let max = deleted.iter().max().copied().unwrap_or_default();
    println!(
        "key deleted by hand:   mean {mean:?}, max {max:?} over {} trials (bound: one interval)",
        deleted.len()
    );

    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse()?)?;
    let cut_off = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await?;
    let elapsed = time_to_stop(cut_off, Duration::ZERO, || proxy.freeze()).await;
    let remaining: i64 = redis.pttl("lock:{watched}:v2").await?;
    println!(
        "client cut off (proxy): stopped after {elapsed:?}; the key still had {remaining} ms in Redis (bound: ttl - drift after the last renewal)"
    );
    Ok(())
}
