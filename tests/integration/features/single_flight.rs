//! `action = Share`: single-flight. A stampede of 100 callers over 4 OS processes on one key
//! runs the body once, on Redis; so does one of up to 100 clients, each standing for a
//! process, on every store that keeps values; a leader that fails hands over to one of its
//! followers; a call after the flight computes anew; a store that cannot keep the value
//! refuses.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fencelock::backend::BoxFuture;
use fencelock::backend::memory::MemoryBackend;
use fencelock::testing::{
    Call, EtcdCluster, Intercepted, Interceptor, SqlDatabase, SqlKind, Verdict, ZooKeeperEnsemble,
};
use fencelock::{LockClient, LockError, redis_lock, with_client};
use redis::AsyncCommands;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::support::{self, redis_server};

const WORKER: &str = "FENCELOCK_STAMPEDE_WORKER";
const PROCESSES: usize = 4;
const CALLERS: usize = 25;
/// How long the body computes: long enough that every caller arrives while it runs.
const BODY: Duration = Duration::from_millis(100);

/// The body counts its runs in Redis and returns which run it was.
async fn compute(
    mut redis: redis::aio::MultiplexedConnection,
    day: u32,
) -> Result<String, LockError> {
    let run: u64 = redis.incr(format!("runs:{day}"), 1).await.unwrap();
    tokio::time::sleep(BODY).await;
    Ok(format!("report {day}, run {run}"))
}

#[redis_lock(key = "report:{day}", action = Share, wait_ms = 60_000)]
async fn shared_report(
    redis: redis::aio::MultiplexedConnection,
    day: u32,
) -> Result<String, LockError> {
    compute(redis, day).await
}

#[redis_lock(key = "report:{day}", wait_ms = 60_000)]
async fn locked_report(
    redis: redis::aio::MultiplexedConnection,
    day: u32,
) -> Result<String, LockError> {
    compute(redis, day).await
}

/// One child process: its callers ask for the report at once, and print what they got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of a_stampede_over_four_processes_runs_the_body_once"]
async fn stampede_worker() {
    let setting = std::env::var(WORKER).expect("started by the parent test");
    let [lock_url, table, counter_url, mode, day] = setting.splitn(5, '|').collect::<Vec<_>>()[..]
    else {
        panic!("{WORKER} is lock url|table|counter url|mode|day");
    };
    let day: u32 = day.parse().unwrap();
    let locks = LockClient::open_builder(lock_url);
    let locks = if table.is_empty() {
        locks
    } else {
        locks.table(table)
    };
    let locks = locks.connect().await.unwrap();
    let redis = redis::Client::open(counter_url).unwrap();
    let redis = redis.get_multiplexed_async_connection().await.unwrap();
    let calls = (0..CALLERS).map(|_| {
        let (locks, redis) = (locks.clone(), redis.clone());
        let shared = mode == "share";
        tokio::spawn(async move {
            let call = async move {
                match shared {
                    true => shared_report(redis, day).await,
                    false => locked_report(redis, day).await,
                }
            };
            with_client(locks, call).await.unwrap()
        })
    });
    let calls: Vec<_> = calls.collect();
    for call in calls {
        println!("value: {}", call.await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stampede_over_four_processes_runs_the_body_once() {
    let server = redis_server();
    let mut redis = support::inspector(&server).await;
    let mut stores = vec![("Redis", server.url(), String::new())];
    if let Some(database) = SqlDatabase::reach(SqlKind::Postgres).await {
        // The first client creates the tables before the processes share them.
        drop(database.client().await);
        let table = database.table().to_owned();
        stores.push(("PostgreSQL", database.url().to_owned(), table));
    }
    let runs = stores
        .iter()
        .flat_map(|store| [(store, "share"), (store, "lock")]);
    for (day, ((store, lock_url, table), mode)) in (1..).zip(runs) {
        let setting = format!("{lock_url}|{table}|{}|{mode}|{day}", server.url());
        let started = Instant::now();
        let workers: Vec<_> = (0..PROCESSES)
            .map(|_| {
                support::spawn_test_process(
                    "features::single_flight::stampede_worker",
                    WORKER,
                    &setting,
                )
            })
            .collect();
        let mut values: Vec<String> = Vec::new();
        for worker in workers {
            let output = support::test_process_output(worker);
            values.extend(
                output
                    .lines()
                    .filter_map(|line| line.strip_prefix("value: ").map(str::to_owned)),
            );
        }
        let elapsed = started.elapsed();
        let runs: u64 = redis.get(format!("runs:{day}")).await.unwrap();
        println!(
            "{store}, {mode}: {} callers in {PROCESSES} processes, body of {BODY:?} ran \
             {runs} time(s), {elapsed:?} in all",
            values.len()
        );
        assert_eq!(values.len(), PROCESSES * CALLERS, "every caller answered");
        if mode == "share" {
            assert_eq!(runs, 1, "the body ran once");
            let first = format!("report {day}, run 1");
            assert!(values.iter().all(|v| *v == first), "{values:?}");
        } else {
            assert_eq!(
                runs,
                (PROCESSES * CALLERS) as u64,
                "without Share, each computes"
            );
        }
    }
}

/// How long the body of the stampede of clients computes, as in the review that found
/// processes answered one at a time.
const LONG_BODY: Duration = Duration::from_millis(300);

/// Default settings: the call waits `retry × sleep_ms` (1 s) at most.
#[redis_lock(key = "summary:{day}", action = Share)]
async fn summary(runs: Arc<AtomicU32>, day: u32) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(LONG_BODY).await;
    Ok(day)
}

/// A client of its own for each caller, as each process of a deployment has: its own
/// connections, and the SQL stores' tables of `table`, one pooled connection each (so that
/// many fit within PostgreSQL's `max_connections`).
async fn client_of(url: &str, table: Option<&str>) -> LockClient {
    let connected = match table {
        Some(table) if url.starts_with("postgres") => {
            let builder = LockClient::postgres_builder(url).table(table);
            builder.max_connections(1).connect().await
        }
        Some(table) => {
            let builder = LockClient::mysql_builder(url).table(table);
            builder.max_connections(1).connect().await
        }
        None => LockClient::open(url).await,
    };
    connected.unwrap_or_else(|error| panic!("{}", support::with_sources(&error)))
}

/// Each lock attempt and release takes 10 ms on its way to the store.
#[derive(Debug)]
struct SlowAttempts;

impl Interceptor for SlowAttempts {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Call::Acquire { .. } | Call::Release { .. } = call {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Verdict::Pass
        })
    }
}

/// Review finding (2026-12-07): the leader of each process waited in line for the key's
/// mutex only to read the value left by the flight of another, so processes were answered
/// one hand-off at a time: of 100, more than half failed past the default wait although the
/// value was there after 300 ms. Here 100 clients of one store (each with flights of its
/// own, as processes have) call at once, each lock attempt and release taking 10 ms (so that
/// 100 hand-offs take longer than the wait): every one is answered with the one
/// computation's value, at the release that follows it.
#[tokio::test(start_paused = true)]
async fn leaders_of_other_processes_read_the_value_at_its_release() {
    let store = Intercepted::new(MemoryBackend::new(), SlowAttempts);
    let runs = Arc::new(AtomicU32::new(0));
    let calls = (0..100).map(|_| {
        let locks = LockClient::from_backend_on(store.clone(), Handle::current());
        tokio::spawn(with_client(locks, summary(runs.clone(), 1)))
    });
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = calls.collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 1, "every caller is answered");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");
    println!("100 clients answered after {:?}", started.elapsed());
}

#[redis_lock(key = "retried", action = Share, wait_ms = 10_000)]
async fn first_of_processes_fails(runs: Arc<AtomicU32>, go: Arc<Notify>) -> Result<u32, LockError> {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    if run == 1 {
        go.notified().await;
        return Err(LockError::invalid_config("the first run fails"));
    }
    Ok(run)
}

/// Leaders of other processes wait out of line for the value; when the flight that computes
/// it fails, they contend, and one of them computes it for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_of_other_processes_contend_when_the_flight_fails() {
    let (counted, mut attempts) = tokio::sync::watch::channel(0);
    let store = Intercepted::new(MemoryBackend::new(), CountedAttempts(counted));
    let (runs, go) = (Arc::new(AtomicU32::new(0)), Arc::new(Notify::new()));
    let call = |runs: &Arc<AtomicU32>| {
        let locks = LockClient::from_backend(store.clone());
        tokio::spawn(with_client(
            locks,
            first_of_processes_fails(runs.clone(), go.clone()),
        ))
    };
    let calls = [call(&runs), call(&runs), call(&runs)];
    // Each of the three asked for the lock: one holds it and runs first, the others wait.
    let asked = attempts.wait_for(|attempts| *attempts >= 3);
    tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("every process asks for the lock")
        .unwrap();
    go.notify_one();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap().ok());
    }
    answers.sort();
    assert_eq!(
        answers,
        [None, Some(2), Some(2)],
        "one failed, one computed for both"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[redis_lock(key = "long", action = Share, wait_ms = 100)]
async fn longer_than_its_wait(runs: Arc<AtomicU32>) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(7)
}

/// Review finding: the wait out of line was bounded with the attempt that took the lock, so
/// a body longer than `wait_ms` was cut and the call said `NotAcquired`. The wait bounds the
/// asking, never the body.
#[tokio::test(start_paused = true)]
async fn a_body_longer_than_the_wait_runs_to_its_end() {
    let locks = LockClient::from_backend_on(MemoryBackend::new(), Handle::current());
    let runs = Arc::new(AtomicU32::new(0));
    let answer = with_client(locks, longer_than_its_wait(runs.clone())).await;
    assert_eq!(answer.unwrap(), 7);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The store's watches of values fail (as for a Redis user allowed no channels).
#[derive(Debug)]
struct NoWatches;

impl Interceptor for NoWatches {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            match call {
                Call::WatchResult { .. } => {
                    Verdict::Fail(LockError::backend(None, "no channels for this user", None))
                }
                _ => Verdict::Pass,
            }
        })
    }
}

/// Review finding: a watch of the value that could not be made failed every Share call. The
/// leader waits in line then, reading the value at each pause, as a plain call polls.
#[tokio::test(start_paused = true)]
async fn a_share_call_goes_on_without_a_watch() {
    let store = Intercepted::new(MemoryBackend::new(), NoWatches);
    let runs = Arc::new(AtomicU32::new(0));
    let calls = (0..3).map(|_| {
        let locks = LockClient::from_backend_on(store.clone(), Handle::current());
        tokio::spawn(with_client(locks, summary(runs.clone(), 9)))
    });
    let calls: Vec<_> = calls.collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 9);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");
}

#[redis_lock(key = "stopped", action = Share, wait_ms = 120_000, sleep_ms = 60_000)]
async fn waits_out_of_line() -> Result<u32, LockError> {
    Ok(1)
}

/// Review finding: a leader waiting out of line for another process's value did not hear of
/// its client's shutdown, and waited on (here its pause is 3 minutes). It ends with
/// `ShutDown`, as a request waiting in line does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_a_leader_waiting_out_of_line() {
    let (counted, mut attempts) = tokio::sync::watch::channel(0);
    let store = Intercepted::new(MemoryBackend::new(), CountedAttempts(counted));
    let holder = LockClient::from_backend(store.clone());
    let held = holder.lock("stopped").acquire().await.unwrap();
    let asked = *attempts.borrow_and_update();
    let waiter = LockClient::from_backend(store.clone());
    let call = tokio::spawn(with_client(waiter.clone(), waits_out_of_line()));
    let waiting = attempts.wait_for(|attempts| *attempts > asked);
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the call asks for the lock")
        .unwrap();
    waiter.shutdown().await;
    let ended = tokio::time::timeout(Duration::from_secs(10), call).await;
    let ended = ended.expect("the call ends at the shutdown").unwrap();
    assert!(
        matches!(ended, Err(LockError::ShutDown { .. })),
        "{ended:?}"
    );
    held.release().await.unwrap();
}

/// The second and third lock attempts that reach the store fail, as timeouts would (a
/// request sends an attempt that failed once more); each attempt is counted.
#[derive(Debug)]
struct SecondAskFails(tokio::sync::watch::Sender<u32>);

impl Interceptor for SecondAskFails {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        let mut second = false;
        if let Call::Acquire { .. } = call {
            self.0.send_modify(|attempts| {
                *attempts += 1;
                second = matches!(*attempts, 2 | 3);
            });
        }
        Box::pin(async move {
            match second {
                true => Verdict::Fail(LockError::backend(None, "the store timed out", None)),
                false => Verdict::Pass,
            }
        })
    }
}

#[redis_lock(key = "faltering", action = Share, wait_ms = 10_000)]
async fn computed_while_the_store_falters(
    runs: Arc<AtomicU32>,
    go: Arc<Notify>,
) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    go.notified().await;
    Ok(5)
}

/// Review finding: one backend error of the ask out of line failed the whole call, where a
/// request in line retries within its wait. The leader goes to the line, and gets the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ask_out_of_line_waits_in_line() {
    let (counted, mut attempts) = tokio::sync::watch::channel(0);
    let store = Intercepted::new(MemoryBackend::new(), SecondAskFails(counted));
    let (runs, go) = (Arc::new(AtomicU32::new(0)), Arc::new(Notify::new()));
    let call = || {
        let locks = LockClient::from_backend(store.clone());
        let call = computed_while_the_store_falters(runs.clone(), go.clone());
        tokio::spawn(with_client(locks, call))
    };
    let first = call();
    let asked = attempts.wait_for(|attempts| *attempts >= 1);
    tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the first call asks")
        .unwrap();
    let second = call();
    // The second call's ask failed: it is in line by the time it asks again, or reads the
    // value left meanwhile.
    let failed = attempts.wait_for(|attempts| *attempts >= 3);
    tokio::time::timeout(Duration::from_secs(10), failed)
        .await
        .expect("the second call asks")
        .unwrap();
    go.notify_one();
    assert_eq!(first.await.unwrap().unwrap(), 5);
    assert_eq!(
        second.await.unwrap().unwrap(),
        5,
        "the value, not the store's error"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The review's stampede on every store that keeps values, for its figures: 5, 20 and 100
/// clients of their own (30 on PostgreSQL) at once. Under other tests' load a run is slower
/// than the store: `cargo test --all-features --test integration -- --ignored
/// clients_of_many_processes --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures: run alone, with --ignored"]
async fn clients_of_many_processes_take_one_computation() {
    let redis = redis_server();
    let zookeeper = ZooKeeperEnsemble::start(1).expect("ZooKeeper starts");
    let etcd = EtcdCluster::start(1).expect("etcd starts");
    let everywhere = vec![5, 20, 100];
    let mut stores = vec![
        ("Redis", redis.url(), None, everywhere.clone()),
        ("ZooKeeper", zookeeper.url(), None, everywhere.clone()),
        ("etcd", etcd.url(), None, everywhere.clone()),
    ];
    // Two connections a client (its pool's and its listener's): 30 clients leave room in
    // PostgreSQL's default 100 for the tests that run beside this one.
    let sql = [
        (SqlKind::Postgres, "PostgreSQL", vec![5, 20, 30]),
        (SqlKind::MySql, "MySQL", everywhere),
    ];
    for (kind, name, counts) in sql {
        if let Some(database) = SqlDatabase::reach(kind).await {
            // The first client creates the tables before the others share them.
            drop(database.client().await);
            let table = Some(database.table().to_owned());
            stores.push((name, database.url().to_owned(), table, counts));
        }
    }
    let mut day = 0;
    for (store, url, table, counts) in &stores {
        for &count in counts {
            day += 1;
            let clients = (0..count).map(|_| client_of(url, table.as_deref()));
            let clients = futures::future::join_all(clients).await;
            let runs = Arc::new(AtomicU32::new(0));
            let started = Instant::now();
            let calls = clients.iter().map(|locks| {
                let call = with_client(locks.clone(), summary(runs.clone(), day));
                tokio::spawn(async move { (call.await, started.elapsed()) })
            });
            let calls: Vec<_> = calls.collect();
            let mut answers = Vec::new();
            for call in calls {
                answers.push(call.await.unwrap());
            }
            let failed: Vec<_> = answers.iter().filter(|(got, _)| got.is_err()).collect();
            let last = answers.iter().map(|(_, took)| *took).max().unwrap();
            println!(
                "{store}: {count} clients, body of {LONG_BODY:?} ran {} time(s), the last \
                 answered after {last:?}, {} failed",
                runs.load(Ordering::SeqCst),
                failed.len()
            );
            assert!(
                failed.is_empty(),
                "{store}: {} of {count} callers failed, the first with {:?}",
                failed.len(),
                failed[0].0
            );
            assert!(answers.iter().all(|(got, _)| *got.as_ref().unwrap() == day));
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{store}: the body ran once");
        }
    }
}

static RUNS: AtomicU32 = AtomicU32::new(0);

/// The first run fails once every other caller is waiting for it; later runs succeed.
#[redis_lock(key = "flaky", action = Share)]
async fn flaky(started: Arc<Notify>, go: Arc<Notify>) -> Result<u32, LockError> {
    first_run_fails(&RUNS, &started, &go).await
}

/// Counts the run in `runs`; the first fails once `go` is notified, the others succeed with
/// their number after an await (their followers wait meanwhile).
async fn first_run_fails(
    runs: &AtomicU32,
    started: &Notify,
    go: &Notify,
) -> Result<u32, LockError> {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    if run == 1 {
        started.notify_one();
        go.notified().await;
        return Err(LockError::invalid_config("the first run fails"));
    }
    tokio::task::yield_now().await;
    Ok(run)
}

/// Spawns `calls` on a one-thread runtime and returns once each has been polled: a follower
/// polled once has joined its flight (its first poll runs to the wait for the leader).
async fn spawn_followers<F>(calls: Vec<F>) -> Vec<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    let joined = Arc::new(AtomicU32::new(0));
    let count = calls.len() as u32;
    let followers: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let joined = joined.clone();
            tokio::spawn(async move {
                joined.fetch_add(1, Ordering::SeqCst);
                call.await
            })
        })
        .collect();
    for _ in 0..1_000 {
        if joined.load(Ordering::SeqCst) == count {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(joined.load(Ordering::SeqCst), count, "the followers joined");
    followers
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_leader_hands_over_to_one_follower() {
    let locks = LockClient::memory();
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let leader = tokio::spawn(with_client(
        locks.clone(),
        flaky(started.clone(), go.clone()),
    ));
    started.notified().await;
    let calls = (0..10).map(|_| with_client(locks.clone(), flaky(started.clone(), go.clone())));
    let followers = spawn_followers(calls.collect()).await;
    go.notify_one();
    assert!(
        leader.await.unwrap().is_err(),
        "the leader's own call fails"
    );
    for follower in followers {
        let got = tokio::time::timeout(Duration::from_secs(10), follower).await;
        let got = got.expect("a follower takes over").unwrap();
        assert_eq!(got.unwrap(), 2, "one follower computed, once");
    }
    assert_eq!(RUNS.load(Ordering::SeqCst), 2);
    // The flight is over: a later call computes anew.
    let again = with_client(locks, flaky(started, go)).await.unwrap();
    assert_eq!(again, 3, "not a cache");
}

#[redis_lock(key = "report:{day}", action = Share)]
async fn report_of(day: u32) -> Result<u32, LockError> {
    Ok(day)
}

/// Redlock keeps no value a majority would agree on: refused before anything is sent.
#[tokio::test]
async fn a_store_that_cannot_keep_the_value_refuses() {
    let servers = [redis_server(), redis_server(), redis_server()];
    let urls = servers.iter().map(|server| server.url());
    let locks = LockClient::redlock(urls).await.unwrap();
    let refused = with_client(locks.clone(), report_of(1)).await;
    assert!(
        matches!(&refused, Err(LockError::InvalidConfig { reason, .. })
            if reason.contains("PostgreSQL, MySQL, ZooKeeper or etcd") && reason.contains("Redlock")),
        "{refused:?}"
    );
    fencelock::testing::assertions::assert_free(&locks, "report:1").await;
}

// What the review of single-flight found (2026-12-05); each test failed before its fix.

#[redis_lock(key = "rec:{id}", action = Share)]
async fn part(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[redis_lock(key = "rec:{id}", action = Share)]
async fn whole(id: u32) -> Result<u32, LockError> {
    Ok(part(id).await? + 1)
}

/// A Share call nested in a body that holds its key re-enters it, instead of waiting for a
/// flight whose leader waits for that very holder.
#[tokio::test]
async fn a_share_call_nested_under_its_own_key_reenters() {
    let locks = LockClient::memory();
    let nested = tokio::time::timeout(Duration::from_secs(10), with_client(locks, whole(2)));
    assert_eq!(nested.await.expect("no hang").unwrap(), 3);
}

#[redis_lock(key = "user:{id}", action = Share)]
async fn user_name(id: u32, started: Arc<Notify>, go: Arc<Notify>) -> Result<String, LockError> {
    started.notify_one();
    go.notified().await;
    Ok(format!("name-{id}"))
}

#[redis_lock(key = "user:{id}", action = Share)]
async fn user_email(id: u32) -> Result<String, LockError> {
    Ok(format!("{id}@example.com"))
}

/// Counts the lock attempts that reach the store.
#[derive(Debug)]
struct CountedAttempts(tokio::sync::watch::Sender<u32>);

impl Interceptor for CountedAttempts {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        if let Call::Acquire { .. } = call {
            self.0.send_modify(|attempts| *attempts += 1);
        }
        Box::pin(async { Verdict::Pass })
    }
}

/// Two functions that lock the same key share nothing: in a process, and through the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_functions_of_one_key_share_nothing() {
    let backend = Arc::new(fencelock::backend::memory::MemoryBackend::new());
    let (counted, mut attempts) = tokio::sync::watch::channel(0);
    let interceptor = Arc::new(CountedAttempts(counted));
    let process = || {
        LockClient::from_backend(fencelock::testing::Intercepted {
            backend: backend.clone(),
            interceptor: interceptor.clone(),
        })
    };
    let (first, second) = (process(), process());
    for other in [first.clone(), second] {
        let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let name = tokio::spawn(with_client(
            first.clone(),
            user_name(1, started.clone(), go.clone()),
        ));
        started.notified().await;
        let asked = *attempts.borrow_and_update();
        let email = tokio::spawn(with_client(other.clone(), user_email(1)));
        // The email call asks for the lock (held: it waits for the release, in line or out
        // of it) before the name's holder goes on.
        let waiting = attempts.wait_for(|attempts| *attempts > asked);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the email call asks for the lock")
            .unwrap();
        go.notify_one();
        assert_eq!(name.await.unwrap().unwrap(), "name-1");
        assert_eq!(email.await.unwrap().unwrap(), "1@example.com");
    }
}

#[redis_lock(key = "busy", action = Share, wait_ms = 300, sleep_ms = 50)]
async fn busy() -> Result<u32, LockError> {
    Ok(1)
}

/// Each caller waits its own `wait_ms`, not one after another's (on the paused clock).
#[tokio::test(start_paused = true)]
async fn followers_wait_within_their_own_wait() {
    let locks = LockClient::memory();
    let held = locks.lock("busy").acquire().await.unwrap();
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| tokio::spawn(with_client(locks.clone(), busy())))
        .collect();
    for call in calls {
        let refused = call.await.unwrap();
        assert!(refused.is_err(), "{refused:?}");
        let waited = started.elapsed();
        assert!(waited <= Duration::from_millis(400), "waited {waited:?}");
    }
    held.release().await.unwrap();
}

static COUNTED: AtomicU32 = AtomicU32::new(0);

#[redis_lock(key = "counted", action = Share)]
async fn counted() -> Result<u32, LockError> {
    Ok(COUNTED.fetch_add(1, Ordering::SeqCst) + 1)
}

/// Holds every release until `open` is notified.
#[derive(Debug, Default)]
struct HeldReleases {
    open: Notify,
}

impl fencelock::testing::Interceptor for HeldReleases {
    fn before<'a>(
        &'a self,
        call: fencelock::testing::Call<'a>,
    ) -> fencelock::backend::BoxFuture<'a, fencelock::testing::Verdict> {
        Box::pin(async move {
            if matches!(call, fencelock::testing::Call::Release { .. }) {
                self.open.notified().await;
            }
            fencelock::testing::Verdict::Pass
        })
    }
}

/// The flight ends with its value before the release: a call that starts after the
/// computation ended, while the release is still on its way, computes anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_the_computation_computes_anew() {
    let backend = fencelock::testing::Intercepted::new(
        fencelock::backend::memory::MemoryBackend::new(),
        HeldReleases::default(),
    );
    let releases = backend.interceptor.clone();
    let locks = LockClient::from_backend(backend);
    assert_eq!(with_client(locks.clone(), counted()).await.unwrap(), 1);
    let late = tokio::spawn(with_client(locks.clone(), counted()));
    releases.open.notify_one();
    let late = tokio::time::timeout(Duration::from_secs(10), late).await;
    releases.open.notify_one();
    assert_eq!(late.expect("answered").unwrap().unwrap(), 2, "not a cache");
}

static LOST_RUNS: AtomicU32 = AtomicU32::new(0);

#[redis_lock(key = "lost", action = Share, ttl_ms = 3_000, wait_ms = 30_000, on_lost = Continue)]
async fn computed_while_lost(started: Arc<Notify>) -> Result<String, LockError> {
    let run = LOST_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    if run == 1 {
        started.notify_one();
        fencelock::lost().await;
    }
    Ok(format!("run {run}, lost = {}", fencelock::is_lost()))
}

/// With `on_lost = Continue`, a value computed after the lock was lost is the leader's only:
/// a follower computes its own under the lock (on the paused clock).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_value_computed_without_the_lock_is_not_shared() {
    let (locks, faults) = fencelock::testing::Faults::memory_client();
    let started = Arc::new(Notify::new());
    let leader = tokio::spawn(with_client(
        locks.clone(),
        computed_while_lost(started.clone()),
    ));
    started.notified().await;
    let follower = tokio::spawn(with_client(locks.clone(), computed_while_lost(started)));
    tokio::task::yield_now().await;
    faults.fail_renewals(true);
    assert_eq!(leader.await.unwrap().unwrap(), "run 1, lost = true");
    faults.fail_renewals(false);
    assert_eq!(follower.await.unwrap().unwrap(), "run 2, lost = false");
}

#[redis_lock(key = "boxed", action = Share)]
async fn boxed_error() -> Result<u32, Box<dyn std::error::Error>> {
    Ok(1)
}

/// A Share call's future is `Send` whatever the error type, as a plain call's is.
#[tokio::test]
async fn a_share_call_with_a_boxed_error_can_be_spawned() {
    let locks = LockClient::memory();
    let spawned = tokio::spawn(with_client(locks, async { boxed_error().await.is_ok() }));
    assert!(spawned.await.unwrap());
}

// What the second review of single-flight found (2026-12-05); each test failed before its
// fix.

/// The lease is taken away (an operator, an expiry or a failover that no renewal has seen
/// yet) and another holder takes the key while the body still runs.
#[redis_lock(key = "stolen", action = Share, wait_ms = 5_000)]
async fn computed_while_stolen(locks: LockClient) -> Result<u64, LockError> {
    locks.admin().force_release("stolen").await?;
    // Taken in a task of its own: asked for in the body, the key would be re-entered.
    let taking = tokio::spawn(async move { locks.lock("stolen").give_up().acquire().await });
    let other = taking.await.expect("the other holder's task ends")?;
    assert!(!fencelock::is_lost(), "no renewal has seen the loss yet");
    let token = other.token();
    std::mem::forget(other);
    Ok(token)
}

/// A leader whose value the store refuses because another grant holds the key fails with
/// `Lost` (`on_lost = Abort`), and leaves no value, as a plain call would.
#[tokio::test]
async fn a_value_the_store_refuses_as_not_held_is_a_loss() {
    let locks = LockClient::memory();
    let computed = with_client(locks.clone(), computed_while_stolen(locks.clone())).await;
    assert!(
        computed.as_ref().is_err_and(LockError::is_lost),
        "{computed:?}"
    );
    let left = fencelock::testing::assertions::assert_held(&locks, "stolen").await;
    assert!(left.token().is_some(), "the other holder keeps the key");
}

struct Users;
struct Admins;

impl Users {
    #[redis_lock(key = "person:{id}", action = Share, wait_ms = 10_000)]
    async fn load(id: u32, started: Arc<Notify>, go: Arc<Notify>) -> Result<String, LockError> {
        started.notify_one();
        go.notified().await;
        Ok(format!("user {id}"))
    }
}

impl Admins {
    #[redis_lock(key = "person:{id}", action = Share, wait_ms = 10_000)]
    async fn load(id: u32) -> Result<String, LockError> {
        Ok(format!("admin {id}"))
    }
}

/// Two methods of one name in one module, on one key, are two functions: neither gets the
/// other's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_of_one_name_share_nothing() {
    let locks = LockClient::memory();
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let users = tokio::spawn(with_client(
        locks.clone(),
        Users::load(7, started.clone(), go.clone()),
    ));
    started.notified().await;
    let admins = tokio::spawn(with_client(locks.clone(), Admins::load(7)));
    go.notify_one();
    assert_eq!(users.await.unwrap().unwrap(), "user 7");
    assert_eq!(admins.await.unwrap().unwrap(), "admin 7");
}

static LONG_RUNS: AtomicU32 = AtomicU32::new(0);

#[redis_lock(key = "long", action = Share, retry = 1_000_000)]
async fn long_wait(started: Arc<Notify>, go: Arc<Notify>) -> Result<u32, LockError> {
    first_run_fails(&LONG_RUNS, &started, &go).await
}

/// A follower that takes over a flight whose wait (`retry` × `sleep_ms`) is longer than any
/// `wait_ms` may be still waits for the lock, rather than failing as misconfigured.
#[tokio::test(flavor = "current_thread")]
async fn a_follower_with_a_wait_beyond_a_day_takes_over() {
    let locks = LockClient::memory();
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let leader = tokio::spawn(with_client(
        locks.clone(),
        long_wait(started.clone(), go.clone()),
    ));
    started.notified().await;
    let call = with_client(locks, long_wait(started, go.clone()));
    let follower = spawn_followers(vec![call]).await.remove(0);
    go.notify_one();
    assert!(leader.await.unwrap().is_err());
    assert_eq!(follower.await.unwrap().unwrap(), 2);
}

#[redis_lock(key = "slow", action = Share, wait_ms = 1_000)]
async fn slow_to_read() -> Result<u32, LockError> {
    Ok(1)
}

/// Reads of the kept value that are held 5 s on their way to the store.
#[derive(Debug)]
struct SlowReads;

impl Interceptor for SlowReads {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Call::ReadResult { .. } = call {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Verdict::Pass
        })
    }
}

/// Review finding: the reads of the kept value before the lock were not counted in
/// `wait_ms`, so a slow store made a call wait past it. The call ends within its wait.
#[tokio::test(start_paused = true)]
async fn a_share_call_ends_within_its_wait_when_the_store_is_slow() {
    let backend = Intercepted::new(MemoryBackend::new(), SlowReads);
    let locks = LockClient::from_backend_on(backend, tokio::runtime::Handle::current());
    let started = tokio::time::Instant::now();
    let answer = with_client(locks, slow_to_read()).await;
    assert!(answer.is_err_and(|error| error.is_not_acquired()));
    assert_eq!(started.elapsed(), Duration::from_secs(1));
}

/// Review finding: foreign data under a key's single-flight value was named only when it
/// was a string (a hash failed with Redis's WRONGTYPE as a backend error). Any foreign data
/// there is `KeyInUse`, and left as it is.
#[tokio::test]
async fn foreign_data_in_the_value_is_named_and_left_alone() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = support::inspector(&server).await;
    let result_key = "lock:{report:7}:v2:result";
    for foreign in ["hash", "not a value", "123456789012345678901234567890 x"] {
        let _: () = redis.del(result_key).await.unwrap();
        if foreign == "hash" {
            let _: () = redis.hset(result_key, "field", "value").await.unwrap();
        } else {
            let _: () = redis.set(result_key, foreign).await.unwrap();
        }
        let refused = with_client(locks.clone(), report_of(7)).await;
        match refused {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(
                    reason.contains("single-flight value"),
                    "{foreign}: {reason}"
                )
            }
            other => panic!("{foreign}: {other:?}"),
        }
        let kind: String = redis::cmd("TYPE")
            .arg(result_key)
            .query_async(&mut redis)
            .await
            .unwrap();
        let expected = if foreign == "hash" { "hash" } else { "string" };
        assert_eq!(kind, expected, "{foreign} is left as it is");
    }
}

#[redis_lock(key = "once", action = Share, retry = 0)]
async fn computed_with_no_retry() -> Result<u32, LockError> {
    Ok(1)
}

/// Review finding: counting the reads in the wait gave every leader a `wait_ms`, which cuts
/// an attempt still out; with `retry = 0` (a wait of 0) that was 1 ms. Without `wait_ms` the
/// attempt is answered, however slowly.
#[tokio::test(start_paused = true)]
async fn a_share_call_without_wait_ms_waits_for_its_attempt() {
    let (locks, faults) = fencelock::testing::Faults::memory_client();
    faults.delay_next_acquire(Duration::from_millis(50));
    let answer = with_client(locks, computed_with_no_retry()).await;
    assert_eq!(answer.unwrap(), 1);
}
