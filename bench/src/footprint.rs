//! What a client and a held lock cost: time to connect, and this process's memory, threads
//! and Redis connections for idle clients; memory on both sides per held lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{LockClient, LockGuard};
use redis::aio::MultiplexedConnection;
use tokio::sync::Barrier;

use crate::probe;
use crate::stats::{Failures, Summary};
use crate::workloads::BoxError;

/// Time for a new client's background work (background runtime, connection tasks) to settle before the
/// process is measured.
pub const SETTLE: Duration = Duration::from_millis(200);
/// Settling periods to wait at most for the server's connection count to stop changing
/// (connections of earlier workloads may still be closing).
const SETTLE_ROUNDS: usize = 10;
/// Tasks acquiring (and releasing) the held locks at once through the one client.
pub const HOLDERS: usize = 64;
/// Lease of the held locks: renewal stays on, and no lease may end while they are counted.
pub const HELD_TTL_MS: u64 = 60_000;

/// This process and the server, at one moment.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    rss: i64,
    threads: i64,
    connections: i64,
    used_memory: i64,
    keys: i64,
}

impl Snapshot {
    async fn take(redis: &mut MultiplexedConnection) -> Result<Snapshot, BoxError> {
        let connections = settled_connections(redis).await?;
        Ok(Snapshot {
            rss: probe::rss_bytes()?,
            threads: probe::thread_count()?,
            connections,
            used_memory: probe::used_memory(redis).await?,
            keys: probe::key_count(redis).await?,
        })
    }

    fn minus(self, before: Snapshot) -> Snapshot {
        Snapshot {
            rss: self.rss - before.rss,
            threads: self.threads - before.threads,
            connections: self.connections - before.connections,
            used_memory: self.used_memory - before.used_memory,
            keys: self.keys - before.keys,
        }
    }
}

/// The server's connection count once it is the same twice `SETTLE` apart (or after
/// `SETTLE_ROUNDS` tries).
async fn settled_connections(redis: &mut MultiplexedConnection) -> Result<i64, BoxError> {
    let mut last = probe::connected_clients(redis).await?;
    for _ in 0..SETTLE_ROUNDS {
        tokio::time::sleep(SETTLE).await;
        let now = probe::connected_clients(redis).await?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

/// `LockClient::connect`, timed, and what `clients` idle clients add.
#[derive(Debug)]
pub struct ClientCost {
    pub clients: usize,
    pub connect: Summary,
    pub rss_delta: i64,
    pub threads_delta: i64,
    pub connections_delta: i64,
}

/// Connects `clients` clients one after another, timing each, and measures them idle.
pub async fn client_cost(
    url: &str,
    inspector: &mut MultiplexedConnection,
    clients: usize,
) -> Result<ClientCost, BoxError> {
    let before = Snapshot::take(inspector).await?;
    let mut connected = Vec::with_capacity(clients);
    let mut times = Vec::with_capacity(clients);
    for _ in 0..clients {
        let started = Instant::now();
        connected.push(LockClient::connect(url).await?);
        times.push(started.elapsed());
    }
    let delta = Snapshot::take(inspector).await?.minus(before);
    drop(connected);
    Ok(ClientCost {
        clients,
        connect: Summary::of(times),
        rss_delta: delta.rss,
        threads_delta: delta.threads,
        connections_delta: delta.connections,
    })
}

/// Many locks held at once by one client.
#[derive(Debug)]
pub struct HeldCost {
    pub locks: usize,
    pub held: usize,
    pub acquire_failures: Failures,
    pub release_failures: Failures,
    pub acquire_wall: Duration,
    pub rss_delta: i64,
    pub used_memory_delta: i64,
    pub keys_delta: i64,
    /// `MEMORY USAGE` of one lock's key and of its fencing counter.
    pub lock_key_bytes: Option<i64>,
    pub fence_key_bytes: Option<i64>,
}

impl HeldCost {
    pub fn rss_per_lock(&self) -> f64 {
        self.rss_delta as f64 / self.held.max(1) as f64
    }

    pub fn used_memory_per_lock(&self) -> f64 {
        self.used_memory_delta as f64 / self.held.max(1) as f64
    }
}

fn held_key(i: usize) -> String {
    format!("held:{i}")
}

/// The Redis key of the lock `key` under the default prefix, and its fencing counter
/// (the layout documented in fencelock's Redis backend).
fn redis_keys(key: &str) -> (String, String) {
    let lock_key = format!("lock:{{{key}}}:v2");
    let fence_key = format!("{lock_key}:fence");
    (lock_key, fence_key)
}

/// Acquires `locks` distinct keys on one new client (renewal on), measures both sides while
/// all are held, then releases them all.
pub async fn held_locks(
    url: &str,
    inspector: &mut MultiplexedConnection,
    locks: usize,
) -> Result<HeldCost, BoxError> {
    let client = LockClient::connect(url).await?;
    // Scripts loaded, renewal and notification tasks started: not a held lock's cost.
    client
        .lock("held:warm-up")
        .acquire()
        .await?
        .release()
        .await?;
    let before = Snapshot::take(inspector).await?;
    let started = Instant::now();
    let (guards, acquire_failures) = acquire_all(&client, locks).await?;
    let acquire_wall = started.elapsed();
    let delta = Snapshot::take(inspector).await?.minus(before);
    let (lock_key, fence_key) = redis_keys(&held_key(0));
    let lock_key_bytes = probe::memory_usage(inspector, &lock_key).await?;
    let fence_key_bytes = probe::memory_usage(inspector, &fence_key).await?;
    let held = guards.iter().map(Vec::len).sum();
    let release_failures = release_all(guards).await?;
    Ok(HeldCost {
        locks,
        held,
        acquire_failures,
        release_failures,
        acquire_wall,
        rss_delta: delta.rss,
        used_memory_delta: delta.used_memory,
        keys_delta: delta.keys,
        lock_key_bytes,
        fence_key_bytes,
    })
}

/// `HOLDERS` tasks, task `t` taking keys `t, t + HOLDERS, ...`; each returns its guards.
async fn acquire_all(
    client: &LockClient,
    locks: usize,
) -> Result<(Vec<Vec<LockGuard>>, Failures), BoxError> {
    let start = Arc::new(Barrier::new(HOLDERS));
    let tasks: Vec<_> = (0..HOLDERS)
        .map(|holder| {
            let (client, start) = (client.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let (mut guards, mut failures) = (Vec::new(), Failures::default());
                for i in (holder..locks).step_by(HOLDERS) {
                    let request = client.lock(held_key(i)).ttl_ms(HELD_TTL_MS);
                    match request.acquire().await {
                        Ok(guard) => guards.push(guard),
                        Err(error) => failures.record(error.to_string()),
                    }
                }
                (guards, failures)
            })
        })
        .collect();
    let (mut all, mut failures) = (Vec::with_capacity(HOLDERS), Failures::default());
    for task in tasks {
        let (guards, failed) = task.await?;
        all.push(guards);
        failures.merge(failed);
    }
    Ok((all, failures))
}

/// Releases every guard, a task per holder.
async fn release_all(guards: Vec<Vec<LockGuard>>) -> Result<Failures, BoxError> {
    let tasks: Vec<_> = guards
        .into_iter()
        .map(|guards| {
            tokio::spawn(async move {
                let mut failures = Failures::default();
                for guard in guards {
                    if let Err(error) = guard.release().await {
                        failures.record(error.to_string());
                    }
                }
                failures
            })
        })
        .collect();
    let mut failures = Failures::default();
    for task in tasks {
        failures.merge(task.await?);
    }
    Ok(failures)
}
