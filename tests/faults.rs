//! Mutual exclusion under faults, checked on recorded histories. 4 worker processes x 8 tasks
//! take locks on 2 keys; in each critical section they read a counter and write it back plus
//! one, on a resource (a Redis of its own) that refuses reads and writes with a fencing
//! token older than the newest it has seen. Every section is recorded (CLOCK_MONOTONIC entry
//! and exit, token); the checker then looks for two sections on one key at once and for
//! tokens that do not increase, and the resource's counters show whether an update was lost.
//! Short runs here (3 s each); each scenario prints its figures, which docs/RELIABILITY.md
//! collects, with the command for the long run.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fencelock::testing::history::{HistoryWriter, Section, check, monotonic_ns, read_histories};
use fencelock::testing::{RedisServer, TcpProxy};
use fencelock::{LockClient, LockError, current_token, redis_lock, with_client};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

const PROCESSES: usize = 4;
const TASKS: u32 = 8;
const KEYS: u32 = 2;
const TTL_MS: u64 = 1_000;
/// How long each scenario runs, in ms: 3 s here; the torture run sets
/// `FENCELOCK_FAULT_RUN_MS` (see docs/RELIABILITY.md).
fn run_ms() -> u64 {
    std::env::var("FENCELOCK_FAULT_RUN_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(3_000)
}
const URL: &str = "FENCELOCK_FAULT_URL";
const RESOURCE: &str = "FENCELOCK_FAULT_RESOURCE";
const HISTORY: &str = "FENCELOCK_FAULT_HISTORY";
const BODY_MS: &str = "FENCELOCK_FAULT_BODY_MS";
/// Set for one worker of a scenario: it creates this file as it enters a critical section.
const ENTRY_MARK: &str = "FENCELOCK_FAULT_ENTRY_MARK";

/// The fencing check of the protected resource: a read (no ARGV[2]) or write (ARGV[2] the new
/// value) of KEYS[1] succeeds only with a token at least the newest seen (KEYS[2]); accepted
/// writes are counted in KEYS[3]. Tokens are below 2^53: exact as Lua numbers.
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
        history
            .record(&self.section)
            .expect("history file is writable");
    }
}

#[redis_lock(key = "hist:{key}", ttl_ms = 1_000, wait_ms = 5_000)]
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
    if let Ok(mark) = std::env::var(ENTRY_MARK) {
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

/// A worker process: 8 tasks taking locks until the run ends; prints its error counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the fault scenarios below"]
async fn fault_worker() {
    let env = |name: &str| std::env::var(name).expect("started by a scenario");
    let history = HistoryWriter::append(Path::new(&env(HISTORY))).unwrap();
    let resource = redis::Client::open(env(RESOURCE)).unwrap();
    let worker: &'static Worker = Box::leak(Box::new(Worker {
        history: Mutex::new(history),
        resource: resource.get_multiplexed_async_connection().await.unwrap(),
        body: Duration::from_millis(env(BODY_MS).parse().unwrap()),
    }));
    let locks = LockClient::connect(&env(URL)).await.unwrap();
    let until = Instant::now() + Duration::from_millis(run_ms());
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
    let (mut lost, mut backend, mut other) = (0, 0, 0);
    for task in tasks {
        for error in task.await.unwrap() {
            match error {
                LockError::Lost { .. } => lost += 1,
                LockError::Backend { .. } => backend += 1,
                _ => other += 1,
            }
        }
    }
    println!("errors: lost {lost} backend {backend} other {other}");
}

/// One scenario's run: the lock server under test, the resource, the workers.
struct Run {
    name: &'static str,
    lock_server: RedisServer,
    /// Between the workers and the lock server, when the scenario disturbs the network.
    proxy: Option<TcpProxy>,
    resource: RedisServer,
    dir: PathBuf,
    workers: Vec<Child>,
}

/// What a scenario promises.
#[derive(PartialEq)]
enum Promise {
    /// No two holders at once.
    Exclusion,
    /// Holders may overlap (the lock server lost its data), but the resource's fencing check
    /// refuses every stale write.
    FencingOnly,
}

impl Run {
    /// Starts a lock server, a resource server and the workers; each section's body runs
    /// `body_ms`. Worker 0 marks its entries in `entry_mark` of the run's folder.
    fn start(name: &'static str, body_ms: u64) -> Run {
        Run::start_with(name, body_ms, false)
    }

    /// As [`Run::start`], with the workers reaching the lock server through a proxy if
    /// `through_proxy`.
    fn start_with(name: &'static str, body_ms: u64, through_proxy: bool) -> Run {
        Run::start_on(support::redis_server(), name, body_ms, through_proxy)
    }

    /// As [`Run::start_with`], on a lock server the scenario prepared.
    fn start_on(
        lock_server: RedisServer,
        name: &'static str,
        body_ms: u64,
        through_proxy: bool,
    ) -> Run {
        let resource = support::redis_server();
        let proxy = through_proxy.then(|| {
            let upstream = format!("127.0.0.1:{}", lock_server.port());
            TcpProxy::start(upstream.parse().unwrap()).unwrap()
        });
        let lock_url = proxy
            .as_ref()
            .map_or_else(|| lock_server.url(), TcpProxy::url);
        let dir =
            std::env::temp_dir().join(format!("fencelock-faults-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let workers = (0..PROCESSES)
            .map(|i| {
                Command::new(std::env::current_exe().unwrap())
                    .args(["--ignored", "--exact", "fault_worker", "--nocapture"])
                    .env(URL, &lock_url)
                    .env(RESOURCE, resource.url())
                    .env(HISTORY, dir.join(format!("worker-{i}.history")))
                    .env(BODY_MS, body_ms.to_string())
                    .envs((i == 0).then(|| (ENTRY_MARK, dir.join("entry_mark"))))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Run {
            name,
            lock_server,
            proxy,
            resource,
            dir,
            workers,
        }
    }

    /// Waits for the workers, checks the history and the resource, prints the scenario's
    /// figures, and returns the sections for scenario-specific checks.
    fn finish(self, promise: Promise, killed: Option<usize>, at_least: usize) -> Vec<Section> {
        let scenario = self.name;
        let mut errors = Vec::new();
        for (i, worker) in self.workers.into_iter().enumerate() {
            let output = worker.wait_with_output().unwrap();
            if Some(i) == killed {
                continue;
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{scenario}: worker {i} failed:\n{stdout}\n{stderr}"
            );
            errors.extend(
                stdout
                    .lines()
                    .filter(|l| l.starts_with("errors:"))
                    .map(str::to_owned),
            );
        }
        let files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let sections = read_histories(&files).unwrap();
        let report = check(&sections);
        let (counted, accepted) = tokio::runtime::Runtime::new().unwrap().block_on(async {
            let mut resource = support::inspector(&self.resource).await;
            let (mut counted, mut accepted) = (0i64, 0i64);
            for key in 0..KEYS {
                counted += resource
                    .get::<_, Option<i64>>(format!("counter:{key}"))
                    .await
                    .unwrap()
                    .unwrap_or(0);
                accepted += resource
                    .get::<_, Option<i64>>(format!("accepted:{key}"))
                    .await
                    .unwrap()
                    .unwrap_or(0);
            }
            (counted, accepted)
        });
        eprintln!(
            "scenario {scenario}: {} sections on {} keys, {} violations; {accepted} writes accepted, \
             counters {counted} ({} lost updates); {}",
            report.sections,
            report.keys,
            report.violations.len(),
            accepted - counted,
            errors.join("; ")
        );
        for violation in report.violations.iter().take(3) {
            eprintln!("{violation}");
        }
        if promise == Promise::Exclusion {
            assert!(
                report.violations.is_empty(),
                "{scenario}: mutual exclusion or token order broken"
            );
        }
        assert_eq!(
            counted, accepted,
            "{scenario}: the fencing check let a stale write through"
        );
        assert!(
            report.sections >= at_least,
            "{scenario}: the workers made progress"
        );
        let _ = std::fs::remove_dir_all(&self.dir);
        drop(self.lock_server);
        sections
    }
}

#[test]
fn no_faults() {
    Run::start("no faults", 3).finish(Promise::Exclusion, None, 100);
}

#[test]
fn a_holder_killed_with_sigkill_stops_no_one_for_longer_than_its_ttl() {
    let mut run = Run::start("holder SIGKILL", 3);
    std::thread::sleep(Duration::from_millis(run_ms() / 3));
    run.workers[0].kill().unwrap();
    let killed_at = monotonic_ns();
    let sections = run.finish(Promise::Exclusion, Some(0), 100);
    let after = sections
        .iter()
        .filter(|s| s.entered_ns > killed_at + TTL_MS * 1_000_000)
        .count();
    assert!(
        after > 0,
        "the others went on once the killed holder's leases ran out"
    );
}

#[test]
fn killed_client_connections_keep_exclusion() {
    let run = Run::start("CLIENT KILL every 300 ms", 3);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut admin = support::inspector(&run.lock_server).await;
        for _ in 0..(run_ms() / 300) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
                .query_async(&mut admin)
                .await;
        }
    });
    run.finish(Promise::Exclusion, None, 50);
}

#[test]
fn redis_frozen_longer_than_the_ttl_keeps_exclusion() {
    // Bodies outlast the freeze: a holder that did not stop at its loss deadline would still
    // run when Redis, back, hands its expired key to the next waiter.
    let run = Run::start("Redis SIGSTOP 2 x TTL", 2_500);
    std::thread::sleep(Duration::from_millis(run_ms() / 4));
    run.lock_server.pause().unwrap();
    std::thread::sleep(Duration::from_millis(TTL_MS * 2));
    run.lock_server.resume().unwrap();
    run.finish(Promise::Exclusion, None, 2);
}

#[test]
fn a_redis_restart_that_loses_the_locks_is_caught_by_fencing() {
    let mut run = Run::start("Redis restart (data lost)", 200);
    std::thread::sleep(Duration::from_millis(run_ms() / 2));
    run.lock_server.restart().unwrap();
    run.finish(Promise::FencingOnly, None, 20);
}

#[test]
fn redis_paused_with_client_pause_longer_than_the_ttl_keeps_exclusion() {
    let run = Run::start("CLIENT PAUSE 2 x TTL", 2_500);
    std::thread::sleep(Duration::from_millis(run_ms() / 4));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut admin = support::inspector(&run.lock_server).await;
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(TTL_MS * 2)
            .query_async(&mut admin)
            .await
            .unwrap();
    });
    run.finish(Promise::Exclusion, None, 2);
}

#[test]
fn a_holder_stopped_longer_than_its_ttl_is_fenced_off_and_stops_when_resumed() {
    let run = Run::start("holder SIGSTOP 2 x TTL", 500);
    // Stop worker 0 inside a critical section: once it has marked an entry.
    let mark = run.dir.join("entry_mark");
    let started = Instant::now();
    while !mark.exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(mark.exists(), "worker 0 entered a critical section");
    let worker = run.workers[0].id();
    fencelock::testing::stop_process(worker).unwrap();
    std::thread::sleep(Duration::from_millis(TTL_MS * 2));
    fencelock::testing::continue_process(worker).unwrap();
    // A stopped process cannot be kept from holding: its section overlaps the next holder's.
    // The resource refuses its late write, and its body stops at the next await.
    run.finish(Promise::FencingOnly, None, 10);
}

#[test]
fn latency_and_dropped_connections_keep_exclusion() {
    let run = Run::start_with("20 ms latency, connections cut every 500 ms", 3, true);
    let proxy = run.proxy.as_ref().expect("started through the proxy");
    proxy.set_latency(Duration::from_millis(20));
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(run_ms()) {
        std::thread::sleep(Duration::from_millis(500));
        proxy.sever();
    }
    run.finish(Promise::Exclusion, None, 20);
}

#[test]
fn a_forward_jump_of_the_server_clock_is_caught_by_fencing() {
    let dir = std::env::temp_dir().join(format!("fencelock-clockshift-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shim = dir.join("clockshift.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/clockshift.c");
    let built = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&source)
        .status()
        .expect("gcc is installed");
    assert!(built.success(), "the clock shim compiles");
    let offset = dir.join("offset_ms");
    std::fs::write(&offset, "0").unwrap();
    let (shim, offset_path) = (shim.to_string_lossy(), offset.to_string_lossy());
    let env = [("LD_PRELOAD", &*shim), ("CLOCKSHIFT_FILE", &*offset_path)];
    let lock_server = RedisServer::start_with_env(&[], &env).unwrap();
    let run = Run::start_on(lock_server, "server clock +1 h", 200, false);
    std::thread::sleep(Duration::from_millis(run_ms() / 2));
    // Every lease expires at once on the server: a second holder enters while the first
    // still runs. The tokens (server time) jump with the clock, so the resource refuses the
    // first holder's writes; a body that runs on is stopped by its next renewal.
    std::fs::write(&offset, "3600000").unwrap();
    run.finish(Promise::FencingOnly, None, 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn redis_blocked_by_debug_sleep_longer_than_the_ttl_keeps_exclusion() {
    let lock_server = RedisServer::start_with(&["--enable-debug-command", "local"]).unwrap();
    let run = Run::start_on(lock_server, "DEBUG SLEEP 2 x TTL", 2_500, false);
    std::thread::sleep(Duration::from_millis(run_ms() / 4));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut admin = support::inspector(&run.lock_server).await;
        // The server sleeps once it reads the command; the reply (after the sleep) outlasts
        // the inspector's response timeout, which does not matter here.
        let seconds = (TTL_MS * 2) as f64 / 1000.0;
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query_async(&mut admin)
            .await;
    });
    std::thread::sleep(Duration::from_millis(TTL_MS * 2));
    run.finish(Promise::Exclusion, None, 2);
}
