//! Shared helpers of the integration tests.

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use fencelock::testing::RedisServer;
use fencelock::testing::history::{Section, monotonic_ns};
use fencelock::{LockClient, LockError, LockGuard, LockKind, redis_lock};
use redis::AsyncCommands;

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

/// The state of the mutex at `redis_key`, as its value starts (`lua/mutex.lua`): `h` or `w`
/// held, `r` or `q` released (a tombstone); `None` when the key is missing or holds
/// something else.
pub async fn mutex_state(
    redis: &mut redis::aio::MultiplexedConnection,
    redis_key: &str,
) -> Option<char> {
    let value: Option<String> = redis::AsyncCommands::get(redis, redis_key).await.ok()?;
    value?
        .split_once(':')
        .and_then(|(state, _)| state.parse().ok())
        .filter(|state| "hwrq".contains(*state))
}

/// Whether the mutex at `redis_key` holds a grant.
pub async fn granted_in(redis: &mut redis::aio::MultiplexedConnection, redis_key: &str) -> bool {
    matches!(mutex_state(redis, redis_key).await, Some('h' | 'w'))
}

/// Whether the mutex at `redis_key` on `server` holds a grant.
pub async fn granted_on(server: &RedisServer, redis_key: &str) -> bool {
    granted_in(&mut inspector(server).await, redis_key).await
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

/// The server's `INFO commandstats`: a line per command run so far.
pub async fn command_stats(redis: &mut redis::aio::MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .unwrap()
}

/// How many script calls (`FCALL`, `EVALSHA`) the server has run so far (`INFO
/// commandstats`).
pub async fn script_calls(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_stats(redis)
        .await
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_fcall:"))
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

/// An application's error type: the lock's failures and its own Redis calls.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the fields are read through Debug in failure messages"
)]
pub enum AppError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<redis::RedisError> for AppError {
    fn from(e: redis::RedisError) -> Self {
        AppError::Redis(e)
    }
}

/// The flash-sale critical section: GET, pause, SET+1. Without the lock, increments are lost.
#[redis_lock(key = "counter:{name}", ttl_ms = 10_000, retry = 10_000, sleep_ms = 20)]
pub async fn increment(
    mut redis: redis::aio::MultiplexedConnection,
    name: &str,
) -> Result<(), AppError> {
    let value: Option<i64> = redis.get(name).await?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = redis.set(name, value.unwrap_or(0) + 1).await?;
    Ok(())
}

/// Runs this test binary again as a child process for the ignored test `test` alone
/// (its full name, e.g. `features::multiprocess::counter_worker`), with the environment variable
/// `var` set to `value`; its standard input and output are piped.
pub fn spawn_test_process(test: &str, var: &str, value: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", test, "--nocapture"])
        .env(var, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child of `spawn_test_process` and returns its stdout. Panics unless its
/// one test ran and passed: a name that matches no test would otherwise pass silently.
pub fn test_process_output(child: Child) -> String {
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains(" 1 passed;"),
        "the test process failed or ran no test:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs a critical section of `body` under `guard` and records it in `sections`, as the
/// history checker reads them (entered after the grant, left before the release).
pub async fn record_section(
    sections: &std::sync::Mutex<Vec<fencelock::testing::history::Section>>,
    process: u32,
    task: u32,
    guard: &fencelock::LockGuard,
    body: Duration,
) {
    use fencelock::testing::history::{Section, monotonic_ns};
    let entered_ns = monotonic_ns();
    tokio::time::sleep(body).await;
    let section = Section {
        process,
        task,
        key: guard.key().to_owned(),
        token: guard.token(),
        entered_ns,
        exited_ns: monotonic_ns(),
    };
    sections.lock().unwrap().push(section);
}

/// The critical sections of a run, as the tasks record them.
pub type Sections = Mutex<Vec<Section>>;

/// Runs a critical section of `body` under `guard`, entered at `entered_ns` (after the
/// grant), and records it under `key` (the guard's key, or a shard's), left before the
/// release.
pub async fn record(
    sections: &Sections,
    (task, key): (u32, String),
    guard: &LockGuard,
    entered_ns: u64,
    body: Duration,
) {
    tokio::time::sleep(body).await;
    let section = Section {
        process: std::process::id(),
        task,
        key,
        token: guard.token(),
        entered_ns,
        exited_ns: monotonic_ns(),
    };
    sections.lock().unwrap().push(section);
}

/// `tasks` tasks, each taking the lock `kind` of `key` `rounds` times (waiting as long as it
/// takes) and holding it for `body`; returns the sections, each recorded under `label` of
/// its guard.
pub async fn run_tasks(
    locks: &LockClient,
    key: &str,
    kind: LockKind,
    tasks: u32,
    rounds: u32,
    body: Duration,
    label: fn(&LockGuard) -> String,
) -> Vec<Section> {
    let sections = std::sync::Arc::new(Sections::default());
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let (locks, key, sections) = (locks.clone(), key.to_owned(), sections.clone());
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let request = locks.request(&key, kind).wait_ms(30_000).sleep_ms(50);
                    let guard = request.acquire().await.unwrap();
                    let entered_ns = monotonic_ns();
                    record(&sections, (task, label(&guard)), &guard, entered_ns, body).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    std::mem::take(&mut *sections.lock().unwrap())
}

/// A section's key: its guard's.
pub fn guard_key(guard: &LockGuard) -> String {
    guard.key().to_owned()
}

/// A section's key: its guard's shard, `<key>#<shard>`.
pub fn shard_key(guard: &LockGuard) -> String {
    format!(
        "{}#{}",
        guard.key(),
        guard.shard().expect("a segmented lock names its shard")
    )
}
