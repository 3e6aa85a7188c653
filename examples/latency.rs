//! Uncontended acquire+release latency against the floor: a `PING` round trip on the same
//! private `redis-server`, measured in the same run. Run it in release mode:
//!
//! ```text
//! cargo run --release --features testing --example latency [iterations]
//! ```

use std::time::{Duration, Instant};

use fencelock::LockClient;
use fencelock::testing::RedisServer;

struct Stats {
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    Stats {
        mean: samples.iter().sum::<Duration>() / samples.len() as u32,
        p50: at(0.50),
        p99: at(0.99),
    }
}

async fn measure<F, Fut>(iterations: usize, mut op: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..iterations / 10 {
        op().await;
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        op().await;
        samples.push(started.elapsed());
    }
    stats(samples)
}

/// A connection whose socket task runs on a runtime of its own thread, as the lock client's
/// does (on the library's background thread): separates the cost of that hop from the scripts'.
fn connection_on_another_thread(
    url: String,
) -> Result<redis::aio::MultiplexedConnection, Box<dyn std::error::Error>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let connection = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await;
            let _ = sender.send(connection);
            std::future::pending::<()>().await
        })
    });
    Ok(receiver.recv()??)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(3_000);
    let server = RedisServer::start()?;
    let plain = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let cross_thread = connection_on_another_thread(server.url())?;
    let locks = LockClient::connect(&server.url()).await?;
    let memory = LockClient::memory();

    let ping = measure(iterations, || {
        let mut plain = plain.clone();
        async move {
            let _: () = redis::cmd("PING").query_async(&mut plain).await.unwrap();
        }
    })
    .await;
    let ping_cross_thread = measure(iterations, || {
        let mut connection = cross_thread.clone();
        async move {
            let _: () = redis::cmd("PING")
                .query_async(&mut connection)
                .await
                .unwrap();
        }
    })
    .await;
    let redis_lock = measure(iterations, || async {
        let guard = locks.lock("bench").acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    let memory_lock = measure(iterations, || async {
        let guard = memory.lock("bench").acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;

    println!(
        "{iterations} sequential operations per row, one client, private redis-server on loopback"
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>12}",
        "operation", "mean µs", "p50 µs", "p99 µs", "mean / PING"
    );
    for (name, s) in [
        ("PING (floor: one round trip)", &ping),
        ("PING, connection on another thread", &ping_cross_thread),
        ("acquire + release (Redis)", &redis_lock),
        ("acquire + release (memory)", &memory_lock),
    ] {
        println!(
            "{:<34} {:>10.1} {:>10.1} {:>10.1} {:>11.2}x",
            name,
            s.mean.as_secs_f64() * 1e6,
            s.p50.as_secs_f64() * 1e6,
            s.p99.as_secs_f64() * 1e6,
            s.mean.as_secs_f64() / ping.mean.as_secs_f64()
        );
    }
    Ok(())
}
