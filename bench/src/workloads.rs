//! The workloads, each against the one private `redis-server`, and what they record.
//!
//! No workload panics on a failed call: failures are counted (with the first error kept for
//! the report), and every wait is bounded.

use std::error::Error;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{LockClient, LockError, redis_lock};
use redis::aio::MultiplexedConnection;
use tokio::sync::Barrier;

use crate::locker::{Locker, RslockRetry};
use crate::probe::{ServerCost, ServerReading};
use crate::stats::{Failures, Summary};

/// Workers contending for the one W2 key.
pub const W2_WORKERS: usize = 8;
/// Workers of W3, each on a key of its own.
pub const W3_WORKERS: usize = 64;
/// How long a W2 worker waits for the contended lock before counting a failure.
pub const W2_WAIT: Duration = Duration::from_secs(30);
/// The longest `redis-benchmark` may run; 100,000 SETs take a second or two.
const REDIS_BENCHMARK_BOUND: Duration = Duration::from_secs(120);
const COUNTER: &str = "w2:counter";

pub type BoxError = Box<dyn Error + Send + Sync>;

pub async fn connect(url: &str) -> Result<MultiplexedConnection, BoxError> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

/// A sequential latency measurement.
#[derive(Debug)]
pub struct Latency {
    pub iterations: usize,
    /// Calls of the operation, the unmeasured warm-up ones included.
    pub operations: u64,
    pub summary: Summary,
    pub failures: Failures,
    /// The measured calls' times, for [`Latency::merge`].
    samples: Vec<Duration>,
}

impl Latency {
    /// One measurement of the rounds of `rounds`.
    pub fn merge(rounds: Vec<Latency>) -> Latency {
        let mut merged = Latency {
            iterations: 0,
            operations: 0,
            summary: Summary::default(),
            failures: Failures::default(),
            samples: Vec::new(),
        };
        for round in rounds {
            merged.iterations += round.iterations;
            merged.operations += round.operations;
            merged.failures.merge(round.failures);
            merged.samples.extend(round.samples);
        }
        merged.summary = Summary::of(merged.samples.clone());
        merged
    }
}

/// Times `iterations` sequential calls of `op`, after `iterations / 10` unmeasured ones
/// (connections, loaded scripts and caches warm).
pub async fn measure<F, Fut>(iterations: usize, mut op: F) -> Latency
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let warm_up = iterations / 10;
    for _ in 0..warm_up {
        let _ = op().await;
    }
    let mut samples = Vec::with_capacity(iterations);
    let mut failures = Failures::default();
    for _ in 0..iterations {
        let started = Instant::now();
        match op().await {
            Ok(()) => samples.push(started.elapsed()),
            Err(error) => failures.record(error),
        }
    }
    Latency {
        iterations,
        operations: (warm_up + iterations) as u64,
        summary: Summary::of(samples.clone()),
        failures,
        samples,
    }
}

/// W0: sequential `PING`s, the floor every lock operation pays at least once.
pub async fn ping(redis: &MultiplexedConnection, iterations: usize) -> Latency {
    measure(iterations, || {
        let mut redis = redis.clone();
        async move {
            redis::cmd("PING")
                .query_async::<()>(&mut redis)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await
}

/// W1: sequential uncontended acquire + release of one key.
pub async fn uncontended(locker: &Locker, iterations: usize) -> Latency {
    measure(iterations, || async {
        locker.acquire("w1", None).await?.release().await
    })
    .await
}

/// W1 through the attribute: a `#[redis_lock]` function with an empty body, called
/// sequentially (what the attribute's call adds to the guard's acquire + release).
pub async fn uncontended_attribute(client: &LockClient, iterations: usize) -> Latency {
    #[redis_lock(key = "w1:attribute", client = client, ttl_ms = 30_000)]
    async fn locked(client: &LockClient) -> Result<(), LockError> {
        Ok(())
    }
    measure(iterations, || async {
        locked(client).await.map_err(|e| e.to_string())
    })
    .await
}

/// How the W2 workers take the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Fair,
    Polling,
    Rslock,
    RslockTight,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Default,
        Mode::Fair,
        Mode::Polling,
        Mode::Rslock,
        Mode::RslockTight,
    ];

    pub fn is_fencelock(self) -> bool {
        !matches!(self, Mode::Rslock | Mode::RslockTight)
    }

    pub fn label(self) -> &'static str {
        match self {
            Mode::Default => "fencelock (notifications)",
            Mode::Fair => "fencelock fair(true)",
            Mode::Polling => "fencelock polling (no notif.)",
            Mode::Rslock => "rslock",
            Mode::RslockTight => "rslock tight retry (0..3 ms)",
        }
    }

    /// One key per mode, so that nothing a mode leaves behind (a fair queue) meets the next.
    fn key(self) -> &'static str {
        match self {
            Mode::Default => "w2:default",
            Mode::Fair => "w2:fair",
            Mode::Polling => "w2:polling",
            Mode::Rslock => "w2:rslock",
            Mode::RslockTight => "w2:rslock-tight",
        }
    }

    /// A client of its own, as a separate process would have.
    async fn locker(self, url: &str) -> Result<Locker, BoxError> {
        Ok(match self {
            Mode::Default => Locker::fencelock(LockClient::connect(url).await?),
            Mode::Fair => Locker::Fencelock {
                client: LockClient::connect(url).await?,
                fair: true,
                min_replicas: 0,
            },
            Mode::Polling => Locker::fencelock(
                LockClient::builder(url)
                    .release_notifications(false)
                    .connect()
                    .await?,
            ),
            Mode::Rslock => Locker::rslock(url, RslockRetry::DEFAULT).await,
            Mode::RslockTight => Locker::rslock(url, RslockRetry::tight(W2_WAIT)).await,
        })
    }
}

/// W2: one row of the contended counter.
#[derive(Debug)]
pub struct Contention {
    pub mode: Mode,
    pub wall: Duration,
    /// Request start → granted, per grant.
    pub wait: Summary,
    /// Release sent → the next grant, per grant after a release: how long the key stays
    /// unused between two holders.
    pub handoff_gap: Summary,
    /// Granted → release answered, per grant.
    pub critical_section: Summary,
    pub granted: u64,
    /// Grants whose GET and SET both succeeded: what the counter must read.
    pub increments: u64,
    pub counter: i64,
    /// Grants the releases made: hand-offs to the next waiter that the release script
    /// announced (counted by an operator's watch of the key; rslock hands nothing over).
    /// `None` for a store that announces nothing (MySQL), where they cannot be counted.
    pub handoffs: Option<u64>,
    pub acquire_failures: Failures,
    /// Failed GET, SET or release.
    pub op_errors: Failures,
    /// What the server spent while the workers ran.
    pub server: ServerCost,
}

impl Contention {
    pub fn ops_per_s(&self) -> f64 {
        self.granted as f64 / self.wall.as_secs_f64()
    }

    pub fn lost_updates(&self) -> i64 {
        self.increments as i64 - self.counter
    }
}

#[derive(Default)]
struct WorkerLog {
    waits: Vec<Duration>,
    holds: Vec<Duration>,
    /// When each grant came, and when each release was sent.
    granted_at: Vec<Instant>,
    released_at: Vec<Instant>,
    grants: u64,
    increments: u64,
    acquire_failures: Failures,
    op_errors: Failures,
}

/// Hand-offs announced on a key while a workload runs, counted by an operator's watch; none
/// for a library that hands nothing over.
enum HandoffCount {
    Watching {
        stop: tokio::sync::oneshot::Sender<()>,
        counting: tokio::task::JoinHandle<Result<u64, fencelock::LockError>>,
    },
    None,
}

/// Starts counting the hand-offs of `key`, as `client`'s operator hears them; `None` when its
/// store announces nothing (MySQL: its waiters poll, and no release hands a key over).
async fn count_handoffs(client: &LockClient, key: &str) -> Result<Option<HandoffCount>, BoxError> {
    use fencelock::admin::ReleaseEvent;
    let mut events = match client.admin().watch(key).await {
        Ok(events) => events,
        Err(fencelock::LockError::InvalidConfig { .. }) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let counting = tokio::spawn(async move {
        let mut handoffs = 0;
        loop {
            // After the workload, what is still on its way: until the key is quiet.
            let next = tokio::select! {
                next = events.next() => Some(next?),
                _ = &mut stopped => None,
            };
            match next {
                Some(ReleaseEvent::HandedOver { .. }) => handoffs += 1,
                Some(_) => {}
                None => break,
            }
        }
        while let Ok(event) = tokio::time::timeout(Duration::from_millis(200), events.next()).await
        {
            if let ReleaseEvent::HandedOver { .. } = event? {
                handoffs += 1;
            }
        }
        Ok(handoffs)
    });
    Ok(Some(HandoffCount::Watching { stop, counting }))
}

impl HandoffCount {
    async fn finish(self) -> Result<u64, BoxError> {
        match self {
            HandoffCount::Watching { stop, counting } => {
                let _ = stop.send(());
                Ok(counting.await??)
            }
            HandoffCount::None => Ok(0),
        }
    }
}

/// W2: `W2_WORKERS` workers, each with its own lock client and Redis connection, take one
/// key `per_worker` times each and increment a counter under it with GET + SET.
pub async fn contention(url: &str, mode: Mode, per_worker: usize) -> Result<Contention, BoxError> {
    let mut lockers = Vec::with_capacity(W2_WORKERS);
    for _ in 0..W2_WORKERS {
        lockers.push(mode.locker(url).await?);
    }
    contention_with(url, mode, lockers, per_worker).await
}

/// W2 with the given lockers (one per worker, of any topology), the counter on `url`.
pub async fn contention_with(
    url: &str,
    mode: Mode,
    lockers: Vec<Locker>,
    per_worker: usize,
) -> Result<Contention, BoxError> {
    let mut redis = connect(url).await?;
    redis::cmd("DEL")
        .arg(COUNTER)
        .query_async::<()>(&mut redis)
        .await?;
    let handoffs = match lockers.first() {
        Some(Locker::Fencelock { client, .. }) => count_handoffs(client, mode.key()).await?,
        _ => Some(HandoffCount::None),
    };
    let mut workers = Vec::with_capacity(lockers.len());
    for locker in lockers {
        workers.push((locker, connect(url).await?));
    }
    let start = Arc::new(Barrier::new(workers.len()));
    // Counted around the workers only: connecting the clients sends no script.
    let before = ServerReading::read(&mut redis).await?;
    let started = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|(locker, redis)| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                contention_worker(&locker, redis, mode.key(), per_worker).await
            })
        })
        .collect();
    let mut logs = Vec::with_capacity(tasks.len());
    for task in tasks {
        logs.push(task.await?);
    }
    let wall = started.elapsed();
    let server = ServerReading::read(&mut redis).await?.cost_since(&before);
    let counter: Option<i64> = redis::cmd("GET")
        .arg(COUNTER)
        .query_async(&mut redis)
        .await?;

    let (mut waits, mut holds, mut grants) = (Vec::new(), Vec::new(), 0);
    let (mut granted_at, mut released_at) = (Vec::new(), Vec::new());
    let (mut increments, mut acquire_failures, mut op_errors) =
        (0, Failures::default(), Failures::default());
    for log in logs {
        waits.extend(log.waits);
        holds.extend(log.holds);
        granted_at.extend(log.granted_at);
        released_at.extend(log.released_at);
        grants += log.grants;
        increments += log.increments;
        acquire_failures.merge(log.acquire_failures);
        op_errors.merge(log.op_errors);
    }
    let handoffs = match handoffs {
        Some(counting) => Some(counting.finish().await?),
        None => None,
    };
    Ok(Contention {
        mode,
        wall,
        wait: Summary::of(waits),
        handoff_gap: Summary::of(handoff_gaps(granted_at, released_at)),
        critical_section: Summary::of(holds),
        granted: grants,
        increments,
        counter: counter.unwrap_or(0),
        handoffs,
        acquire_failures,
        op_errors,
        server,
    })
}

/// For each grant after a release, the time since the latest release sent before it.
fn handoff_gaps(mut granted_at: Vec<Instant>, mut released_at: Vec<Instant>) -> Vec<Duration> {
    granted_at.sort_unstable();
    released_at.sort_unstable();
    granted_at
        .into_iter()
        .filter_map(|granted| {
            let before = released_at.partition_point(|released| *released < granted);
            let released = released_at[..before].last()?;
            Some(granted - *released)
        })
        .collect()
}

async fn contention_worker(
    locker: &Locker,
    mut redis: MultiplexedConnection,
    key: &str,
    iterations: usize,
) -> WorkerLog {
    let mut log = WorkerLog::default();
    for _ in 0..iterations {
        let requested = Instant::now();
        let held = match locker.acquire(key, Some(W2_WAIT)).await {
            Ok(held) => held,
            Err(error) => {
                log.acquire_failures.record(error.into());
                continue;
            }
        };
        let granted = Instant::now();
        log.grants += 1;
        log.waits.push(granted - requested);
        log.granted_at.push(granted);
        match increment(&mut redis).await {
            Ok(()) => log.increments += 1,
            Err(error) => log.op_errors.record(error.to_string()),
        }
        log.released_at.push(Instant::now());
        if let Err(error) = held.release().await {
            log.op_errors.record(error);
        }
        log.holds.push(granted.elapsed());
    }
    log
}

/// The read-modify-write the lock protects: two commands, so that without mutual exclusion
/// updates get lost.
async fn increment(redis: &mut MultiplexedConnection) -> redis::RedisResult<()> {
    let value: Option<i64> = redis::cmd("GET").arg(COUNTER).query_async(redis).await?;
    redis::cmd("SET")
        .arg(COUNTER)
        .arg(value.unwrap_or(0) + 1)
        .query_async(redis)
        .await
}

/// W3: throughput of uncontended pairs, many keys at once.
#[derive(Debug)]
pub struct Throughput {
    pub pairs: u64,
    pub wall: Duration,
    pub failures: Failures,
    /// What the server spent meanwhile (default where nobody measured it).
    pub server: ServerCost,
}

impl Throughput {
    pub fn ops_per_s(&self) -> f64 {
        self.pairs as f64 / self.wall.as_secs_f64()
    }
}

/// `count` lockers made one after another by `make`, before any clock starts.
async fn lockers<F, Fut>(count: usize, mut make: F) -> Result<Vec<Locker>, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Locker, BoxError>>,
{
    let mut lockers = Vec::with_capacity(count);
    for _ in 0..count {
        lockers.push(make().await?);
    }
    Ok(lockers)
}

/// W3: a task per locker (clones of one shared client, or a client each), task `i` on key
/// `w3:{i}`, `per_worker` acquire + release pairs each, all at once.
pub async fn many_keys(lockers: Vec<Locker>, per_worker: usize) -> Result<Throughput, BoxError> {
    let start = Arc::new(Barrier::new(lockers.len()));
    let started = Instant::now();
    let tasks: Vec<_> = lockers
        .into_iter()
        .enumerate()
        .map(|(i, locker)| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let key = format!("w3:{i}");
                let (mut pairs, mut failures) = (0u64, Failures::default());
                for _ in 0..per_worker {
                    let pair = async { locker.acquire(&key, None).await?.release().await };
                    match pair.await {
                        Ok(()) => pairs += 1,
                        Err(error) => failures.record(error),
                    }
                }
                (pairs, failures)
            })
        })
        .collect();
    throughput(tasks, started).await
}

/// The pairs and failures of `tasks`, each counting its own, over the time since `started`.
pub async fn throughput(
    tasks: Vec<tokio::task::JoinHandle<(u64, Failures)>>,
    started: Instant,
) -> Result<Throughput, BoxError> {
    let (mut pairs, mut failures) = (0, Failures::default());
    for task in tasks {
        let (done, failed) = task.await?;
        pairs += done;
        failures.merge(failed);
    }
    Ok(Throughput {
        pairs,
        wall: started.elapsed(),
        failures,
        server: ServerCost::default(),
    })
}

/// `redis-benchmark -c 64 -n <requests> -t set -q` against the server: its SET requests/s,
/// the ceiling of what W3 could reach in commands/s.
pub async fn redis_benchmark(port: u16, requests: usize) -> Result<f64, String> {
    let mut child = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", "64"])
        .args(["-n", &requests.to_string(), "-t", "set", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "redis-benchmark not installed (package redis-tools)".to_owned()
            }
            _ => format!("redis-benchmark did not start: {e}"),
        })?;
    // std has no wait with a timeout: poll, without blocking the runtime.
    let deadline = Instant::now() + REDIS_BENCHMARK_BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "redis-benchmark still ran after {REDIS_BENCHMARK_BOUND:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut output = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut output).map_err(|e| e.to_string())?;
    }
    // With -q it prints progress lines ended by '\r', then e.g.
    // "SET: 140845.08 requests per second, p50=0.207 msec".
    output
        .split(['\r', '\n'])
        .filter_map(|line| line.strip_prefix("SET: "))
        .find_map(|rest| rest.split(" requests per second").next()?.parse().ok())
        .ok_or_else(|| format!("redis-benchmark ({status}) printed no SET rate: {output:?}"))
}

/// W3's four runs.
#[derive(Debug)]
pub struct ManyKeys {
    pub workers: usize,
    pub fencelock_shared: Throughput,
    pub rslock_shared: Throughput,
    pub fencelock_own: Throughput,
    pub rslock_own: Throughput,
}

impl ManyKeys {
    pub fn rows(&self) -> [(&'static str, &Throughput); 4] {
        [
            ("fencelock, shared client", &self.fencelock_shared),
            ("rslock, shared manager", &self.rslock_shared),
            ("fencelock, client per worker", &self.fencelock_own),
            ("rslock, manager per worker", &self.rslock_own),
        ]
    }
}

/// W3: `W3_WORKERS` workers through `fence` and `rs` shared, then each with a client of its
/// own (connected before the clock starts); what the server spent on each run, as
/// `inspector` reads it.
pub async fn many_keys_all(
    url: &str,
    inspector: &mut MultiplexedConnection,
    fence: &Locker,
    rs: &Locker,
    per_worker: usize,
) -> Result<ManyKeys, BoxError> {
    let fencelock_shared =
        many_keys_measured(inspector, vec![fence.clone(); W3_WORKERS], per_worker).await?;
    let rslock_shared =
        many_keys_measured(inspector, vec![rs.clone(); W3_WORKERS], per_worker).await?;
    let own = lockers(W3_WORKERS, || async {
        Ok(Locker::fencelock(LockClient::connect(url).await?))
    })
    .await?;
    let fencelock_own = many_keys_measured(inspector, own, per_worker).await?;
    let own = lockers(W3_WORKERS, || async {
        Ok(Locker::rslock(url, RslockRetry::DEFAULT).await)
    })
    .await?;
    let rslock_own = many_keys_measured(inspector, own, per_worker).await?;
    Ok(ManyKeys {
        workers: W3_WORKERS,
        fencelock_shared,
        rslock_shared,
        fencelock_own,
        rslock_own,
    })
}

/// [`many_keys`], with what the server spent on it.
async fn many_keys_measured(
    inspector: &mut MultiplexedConnection,
    lockers: Vec<Locker>,
    per_worker: usize,
) -> Result<Throughput, BoxError> {
    let (run, server) = crate::probe::measuring(inspector, many_keys(lockers, per_worker)).await?;
    Ok(Throughput { server, ..run? })
}
