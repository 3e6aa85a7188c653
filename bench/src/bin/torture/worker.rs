//! A worker process: tasks that take locks and, in each critical section, read a counter on
//! the protected resource and write it back plus one, under the section's fencing token.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fencelock::testing::history::{HistoryWriter, Section, monotonic_ns};
use fencelock::{LockClient, LockError, current_token, redis_lock, with_client};
use redis::aio::MultiplexedConnection;

pub const TASKS: u32 = 8;
pub const KEYS: u32 = 2;
/// The lease of every lock the workers take (the attribute below says the same).
pub const TTL_MS: u64 = 1_000;

/// Environment of a worker process, set by the scenario that starts it.
pub const URL: &str = "FENCELOCK_TORTURE_URL";
pub const RESOURCE: &str = "FENCELOCK_TORTURE_RESOURCE";
pub const HISTORY: &str = "FENCELOCK_TORTURE_HISTORY";
pub const BODY_MS: &str = "FENCELOCK_TORTURE_BODY_MS";
pub const RUN_MS: &str = "FENCELOCK_TORTURE_RUN_MS";
/// A folder in which each worker creates `entered-<pid>` as it enters a critical section.
pub const ENTRY_MARKS: &str = "FENCELOCK_TORTURE_ENTRY_MARKS";
/// How the workers reach the lock servers: `single` (the default; `URL` is one server),
/// `redlock` (`URL` lists the masters, comma-separated), `cluster` (`URL` lists the nodes),
/// `sentinel:<service>` (`URL` lists the Sentinels), `postgres` or `mysql` (`URL` is the
/// database's, `TABLE` the lock table), `zookeeper` (`URL` is the connect string) or `etcd`
/// (`URL` lists the endpoints).
pub const TOPOLOGY: &str = "FENCELOCK_TORTURE_TOPOLOGY";
/// The lock table, for `postgres` and `mysql` (`URL` is the database's).
pub const TABLE: &str = "FENCELOCK_TORTURE_TABLE";
/// The session timeout of the ZooKeeper and etcd clients: a killed or frozen holder's
/// session ends this long after its last word.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// `min_replicas` of every section (default 0).
pub const MIN_REPLICAS: &str = "FENCELOCK_TORTURE_MIN_REPLICAS";

/// The fencing check of the protected resource: a read (no `ARGV[2]`) or write (`ARGV[2]` the
/// new value) of `KEYS[1]` succeeds only with a token at least the newest seen (`KEYS[2]`);
/// accepted writes are counted in `KEYS[3]`. Tokens are below 2^53: exact as Lua numbers.
const FENCED: &str = r"
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[2]) or '0') then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('INCR', KEYS[3])
  return 0
end
return tonumber(redis.call('GET', KEYS[1]) or '0')
";

/// What one worker process shares between its tasks.
struct Worker {
    history: Mutex<HistoryWriter>,
    resource: MultiplexedConnection,
    body: Duration,
    entry_mark: Option<std::path::PathBuf>,
    min_replicas: u32,
}

impl Worker {
    /// A fenced read (`value = None`) or write; `None` if the resource refused the token.
    async fn fenced(&self, key: u32, token: u64, value: Option<i64>) -> Option<i64> {
        let script = redis::Script::new(FENCED);
        let mut invocation = script.key(format!("counter:{key}"));
        invocation
            .key(format!("newest:{key}"))
            .key(format!("accepted:{key}"));
        invocation.arg(token.to_string());
        if let Some(value) = value {
            invocation.arg(value);
        }
        let reply: i64 = invocation
            .invoke_async(&mut self.resource.clone())
            .await
            .ok()?;
        (reply >= 0).then_some(reply)
    }
}

/// Records one section when dropped: at the end of the body, or when a lost lease stops it.
struct Recording<'a> {
    history: &'a Mutex<HistoryWriter>,
    section: Section,
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        self.section.exited_ns = monotonic_ns();
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(error) = history.record(&self.section) {
            eprintln!("cannot record a section: {error}");
        }
    }
}

#[redis_lock(key = "hist:{key}", ttl_ms = 1_000, wait_ms = 5_000, min_replicas = worker.min_replicas)]
async fn critical_section(worker: &Worker, task: u32, key: u32) -> Result<(), LockError> {
    let token = current_token().unwrap_or(0);
    let _recording = Recording {
        history: &worker.history,
        section: Section {
            process: std::process::id(),
            task,
            key: format!("hist:{key}"),
            token,
            entered_ns: monotonic_ns(),
            exited_ns: 0,
        },
    };
    if let Some(mark) = &worker.entry_mark {
        let _ = std::fs::write(mark, b"entered");
    }
    let Some(value) = worker.fenced(key, token, None).await else {
        return Ok(());
    };
    // Work with await points, as a real body has: a stopped body is dropped at one of them.
    let until = Instant::now() + worker.body;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    worker.fenced(key, token, Some(value + 1)).await;
    Ok(())
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set: workers are started by a scenario"))
}

/// A client of the topology the scenario names.
async fn connect() -> Result<LockClient, Box<dyn std::error::Error>> {
    let urls = env(URL)?;
    let topology = std::env::var(TOPOLOGY).unwrap_or_default();
    Ok(match topology.as_str() {
        "redlock" => LockClient::redlock(urls.split(',')).await?,
        "cluster" => LockClient::cluster(urls.split(',')).await?,
        "postgres" => {
            let builder = LockClient::postgres_builder(&urls);
            builder.table(env(TABLE)?).connect().await?
        }
        "mysql" => {
            let builder = LockClient::mysql_builder(&urls);
            builder.table(env(TABLE)?).connect().await?
        }
        "zookeeper" => {
            let builder = LockClient::zookeeper_builder(&urls);
            builder.session_timeout(SESSION_TIMEOUT).connect().await?
        }
        "etcd" => {
            let endpoints: Vec<&str> = urls.split(',').collect();
            let builder = LockClient::etcd_builder(&endpoints);
            builder.lease_ttl(SESSION_TIMEOUT).connect().await?
        }
        _ => match topology.strip_prefix("sentinel:") {
            Some(service) => LockClient::sentinel(urls.split(','), service).await?,
            None => LockClient::connect(&urls).await?,
        },
    })
}

/// Runs the worker until its run ends; prints its error counts on one line.
pub async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let history = HistoryWriter::append(Path::new(&env(HISTORY)?))?;
    let resource = redis::Client::open(env(RESOURCE)?)?;
    let worker: &'static Worker = Box::leak(Box::new(Worker {
        history: Mutex::new(history),
        resource: resource.get_multiplexed_async_connection().await?,
        body: Duration::from_millis(env(BODY_MS)?.parse()?),
        entry_mark: std::env::var(ENTRY_MARKS)
            .ok()
            .map(|dir| Path::new(&dir).join(format!("entered-{}", std::process::id()))),
        min_replicas: std::env::var(MIN_REPLICAS).map_or(Ok(0), |n| n.parse())?,
    }));
    let until = Instant::now() + Duration::from_millis(env(RUN_MS)?.parse()?);
    // A worker that cannot connect yet (the scenario may be cutting connections already)
    // tries again until its run ends, each failure counted as a backend error.
    let mut failed_connects = 0;
    let locks = loop {
        match connect().await {
            Ok(locks) => break locks,
            Err(_) if Instant::now() < until => {
                failed_connects += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) => {
                println!("errors 0 0 {failed_connects} 0");
                return Ok(());
            }
        }
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let mut errors = Vec::new();
                let mut turn = task;
                while Instant::now() < until {
                    turn = turn.wrapping_add(1);
                    let section = critical_section(worker, task, turn % KEYS);
                    if let Err(error) = with_client(locks.clone(), section).await {
                        errors.push(error);
                    }
                }
                errors
            })
        })
        .collect();
    let mut counts = [0, 0, failed_connects, 0];
    for task in tasks {
        for error in task.await? {
            counts[match error {
                LockError::Lost { .. } => 0,
                LockError::NotAcquired { .. } => 1,
                LockError::Backend { .. } => 2,
                _ => 3,
            }] += 1;
        }
    }
    let [lost, not_acquired, backend, other] = counts;
    println!("errors {lost} {not_acquired} {backend} {other}");
    Ok(())
}
