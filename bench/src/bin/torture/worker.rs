//! A worker process: tasks that take locks and, in each critical section that excludes the
//! others (a mutex, a writer, a shard), read a counter on the protected resource and write it
//! back plus one, under the section's fencing token; sections that share (readers, permits)
//! are recorded only.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fencelock::testing::history::{HistoryWriter, Section, monotonic_ns};
use fencelock::{LockClient, LockError, current_shard, current_token, redis_lock, with_client};
use redis::aio::MultiplexedConnection;

pub const TASKS: u32 = 8;
pub const KEYS: u32 = 2;
/// The lease of every lock the workers take (the attributes below say the same).
pub const TTL_MS: u64 = 1_000;
/// The permits of the semaphores, and the shards of the segmented locks.
pub const PERMITS: u32 = 2;
pub const SHARDS: u32 = 4;

/// Environment of a worker process, set by the scenario that starts it.
pub const URL: &str = "FENCELOCK_TORTURE_URL";
pub const RESOURCE: &str = "FENCELOCK_TORTURE_RESOURCE";
/// Where the worker records its sections: `<HISTORY>.exclusive.history` for the sections that
/// exclude every other (a mutex's, a writer's, a shard's), `<HISTORY>.shared.history` for
/// readers and permits.
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
/// The kind of lock the workers take: see [`Kind::name`].
pub const KIND: &str = "FENCELOCK_TORTURE_KIND";
/// The session timeout of the ZooKeeper and etcd clients: a killed or frozen holder's
/// session ends this long after its last word.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// `min_replicas` of every mutex section (default 0).
pub const MIN_REPLICAS: &str = "FENCELOCK_TORTURE_MIN_REPLICAS";

/// The kind of lock a scenario's workers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mutex,
    /// One task in four writes, the others read.
    ReadWrite,
    /// [`PERMITS`] permits per key.
    Semaphore,
    /// [`SHARDS`] shards per key: each shard is a resource of its own.
    Segmented,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Mutex,
        Kind::ReadWrite,
        Kind::Semaphore,
        Kind::Segmented,
    ];

    /// Its name in the environment and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::ReadWrite => "read/write",
            Kind::Semaphore => "semaphore",
            Kind::Segmented => "segmented",
        }
    }

    fn from_env() -> Result<Kind, String> {
        let name = std::env::var(KIND).unwrap_or_else(|_| "mutex".to_owned());
        Kind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| format!("{KIND}={name} names no kind of lock"))
    }
}

/// The fencing check of the protected resource: a read (no `ARGV[2]`) or write (`ARGV[2]` the
/// new value) of `KEYS[1]` succeeds only with a token at least the newest seen (`KEYS[2]`);
/// an accepted write is counted in `KEYS[3]` and its token appended to `KEYS[4]`, a refused
/// read or write appends its token to `KEYS[5]`: afterwards, the accepted tokens must
/// strictly increase, and a refusal says which stale token reached the resource. Tokens are
/// below 2^53: exact as Lua numbers.
const FENCED: &str = r"
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('RPUSH', KEYS[5], ARGV[1])
  return -1
end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('INCR', KEYS[3])
  redis.call('RPUSH', KEYS[4], ARGV[1])
  return 0
end
return tonumber(redis.call('GET', KEYS[1]) or '0')
";

/// The resource keys of the lock key (or shard) `label`: value, newest token, accepted
/// writes, their tokens, the refused tokens.
pub fn resource_keys(label: &str) -> [String; 5] {
    ["counter", "newest", "accepted", "writes", "refused"].map(|name| format!("{name}:{label}"))
}

/// Whether a section excludes every other section of its key (and so writes the resource
/// under its token), or shares the key (and only records itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Exclusive,
    Shared,
}

/// What one worker process shares between its tasks.
struct Worker {
    exclusive: Mutex<HistoryWriter>,
    shared: Mutex<HistoryWriter>,
    resource: MultiplexedConnection,
    body: Duration,
    entry_mark: Option<PathBuf>,
    min_replicas: u32,
    /// Sections entered.
    sections: AtomicU64,
}

impl Worker {
    /// A fenced read (`value = None`) or write of the resource `label`; `None` if the
    /// resource refused the token.
    async fn fenced(&self, label: &str, token: u64, value: Option<i64>) -> Option<i64> {
        let script = redis::Script::new(FENCED);
        let mut invocation = script.prepare_invoke();
        for key in resource_keys(label) {
            invocation.key(key);
        }
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

    /// The body of every section: recorded from entry to exit (or to the moment a lost lease
    /// stops it); an exclusive one reads the resource `label`, works, and writes it back
    /// plus one, a shared one works.
    async fn section(&self, task: u32, label: String, role: Role) -> Result<(), LockError> {
        let token = current_token().unwrap_or(0);
        let entered_ns = grant_checks::checked_ns(token).unwrap_or_else(monotonic_ns);
        let history = match role {
            Role::Exclusive => &self.exclusive,
            Role::Shared => &self.shared,
        };
        let _recording = Recording {
            history,
            section: Section {
                process: std::process::id(),
                task,
                key: label.clone(),
                token,
                entered_ns,
                exited_ns: 0,
            },
        };
        self.sections.fetch_add(1, Ordering::Relaxed);
        if let Some(mark) = &self.entry_mark {
            let _ = std::fs::write(mark, b"entered");
        }
        let value = match role {
            Role::Exclusive => match self.fenced(&label, token, None).await {
                Some(value) => Some(value),
                None => return Ok(()),
            },
            Role::Shared => None,
        };
        // Work with await points, as a real body has: a stopped body is dropped at one of them.
        let until = Instant::now() + self.body;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if let Some(value) = value {
            self.fenced(&label, token, Some(value + 1)).await;
        }
        Ok(())
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
async fn mutex_section(worker: &Worker, task: u32, key: u32) -> Result<(), LockError> {
    worker
        .section(task, format!("hist:{key}"), Role::Exclusive)
        .await
}

#[redis_lock(key = "rw:{key}", mode = Read, ttl_ms = 1_000, wait_ms = 5_000)]
async fn read_section(worker: &Worker, task: u32, key: u32) -> Result<(), LockError> {
    worker
        .section(task, format!("rw:{key}"), Role::Shared)
        .await
}

#[redis_lock(key = "rw:{key}", mode = Write, ttl_ms = 1_000, wait_ms = 5_000)]
async fn write_section(worker: &Worker, task: u32, key: u32) -> Result<(), LockError> {
    worker
        .section(task, format!("rw:{key}"), Role::Exclusive)
        .await
}

#[redis_lock(key = "sem:{key}", permits = 2, ttl_ms = 1_000, wait_ms = 5_000)]
async fn permit_section(worker: &Worker, task: u32, key: u32) -> Result<(), LockError> {
    worker
        .section(task, format!("sem:{key}"), Role::Shared)
        .await
}

#[redis_lock(key = "seg:{key}", shards = 4, ttl_ms = 1_000, wait_ms = 5_000)]
async fn shard_section(worker: &Worker, task: u32, key: u32) -> Result<(), LockError> {
    let shard = current_shard().unwrap_or(u32::MAX);
    let label = format!("seg:{key}/{shard}");
    worker.section(task, label, Role::Exclusive).await
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

/// One section of `kind` by `task` on `key`.
async fn take(worker: &'static Worker, kind: Kind, task: u32, key: u32) -> Result<(), LockError> {
    match kind {
        Kind::Mutex => mutex_section(worker, task, key).await,
        Kind::ReadWrite if task.is_multiple_of(4) => write_section(worker, task, key).await,
        Kind::ReadWrite => read_section(worker, task, key).await,
        Kind::Semaphore => permit_section(worker, task, key).await,
        Kind::Segmented => shard_section(worker, task, key).await,
    }
}

/// Runs the worker until its run ends. Prints its error counts on one line (`errors lost
/// not-acquired backend other`) and the sections it entered on another (`sections N`).
pub async fn run() -> Result<(), Box<dyn std::error::Error>> {
    grant_checks::install()?;
    let history = PathBuf::from(env(HISTORY)?);
    let open =
        |role: &str| HistoryWriter::append(&history.with_extension(format!("{role}.history")));
    let resource = redis::Client::open(env(RESOURCE)?)?;
    let kind = Kind::from_env()?;
    let worker: &'static Worker = Box::leak(Box::new(Worker {
        exclusive: Mutex::new(open("exclusive")?),
        shared: Mutex::new(open("shared")?),
        resource: resource.get_multiplexed_async_connection().await?,
        body: Duration::from_millis(env(BODY_MS)?.parse()?),
        entry_mark: std::env::var(ENTRY_MARKS)
            .ok()
            .map(|dir| Path::new(&dir).join(format!("entered-{}", std::process::id()))),
        min_replicas: std::env::var(MIN_REPLICAS).map_or(Ok(0), |n| n.parse())?,
        sections: AtomicU64::new(0),
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
                println!("sections 0");
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
                    let section = take(worker, kind, task, turn % KEYS);
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
    println!("sections {}", worker.sections.load(Ordering::Relaxed));
    Ok(())
}

/// When the runtime confirmed each grant in time, the start of its recorded section.
///
/// The runtime checks a grant's validity and, in the same poll on the same thread, hands the
/// guard to the body. A process frozen between those two steps enters its body after the
/// lease may have ended: no client can prevent that (nor a pause at the body's first step),
/// only fencing catches it. A section recorded from its body's first step would then look
/// like the runtime's fault (a token entering after a greater one); recorded from the check,
/// it is where the runtime's promise ends, and a grant that skipped the check (or passed it
/// late) still enters out of token order.
mod grant_checks {
    use std::cell::Cell;

    use fencelock::testing::history::monotonic_ns;
    use tracing::field::{Field, Visit};
    use tracing::{Event, Level, Metadata, Subscriber};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;

    thread_local! {
        /// The token of the last grant checked on this thread, and when.
        static CHECKED: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    }

    /// When this thread's last check passed, if it was the one of `token`'s grant.
    pub fn checked_ns(token: u64) -> Option<u64> {
        CHECKED
            .get()
            .and_then(|(checked, ns)| (checked == token).then_some(ns))
    }

    pub fn install() -> Result<(), tracing_subscriber::util::TryInitError> {
        tracing_subscriber::registry().with(GrantChecks).try_init()
    }

    struct GrantChecks;

    impl<S: Subscriber> Layer<S> for GrantChecks {
        fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
            is_grant_check(metadata)
        }

        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let ns = monotonic_ns();
            if !is_grant_check(event.metadata()) {
                return;
            }
            let mut token = Token(None);
            event.record(&mut token);
            if let Token(Some(token)) = token {
                CHECKED.set(Some((token, ns)));
            }
        }
    }

    /// The runtime's event "the grant is in time" (fields `key`, `token`, `valid_for`).
    fn is_grant_check(metadata: &Metadata<'_>) -> bool {
        metadata.is_event()
            && metadata.target() == "fencelock"
            && *metadata.level() == Level::TRACE
            && metadata.fields().field("valid_for").is_some()
    }

    struct Token(Option<u64>);

    impl Visit for Token {
        fn record_u64(&mut self, field: &Field, value: u64) {
            if field.name() == "token" {
                self.0 = Some(value);
            }
        }

        fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
    }
}
