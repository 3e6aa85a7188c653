//! `action = Share`: single-flight. A stampede of 100 callers over 4 OS processes on one key
//! runs the body once, on Redis; a leader that fails hands over to one of its followers; a
//! call after the flight computes anew; a store that cannot keep the value refuses.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fencelock::{LockClient, LockError, redis_lock, with_client};
use redis::AsyncCommands;
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
    let [url, mode, day] = setting.splitn(3, '|').collect::<Vec<_>>()[..] else {
        panic!("{WORKER} is url|mode|day");
    };
    let day: u32 = day.parse().unwrap();
    let locks = LockClient::connect(url).await.unwrap();
    let redis = redis::Client::open(url).unwrap();
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
    for (mode, day) in [("share", 1), ("lock", 2)] {
        let setting = format!("{}|{mode}|{day}", server.url());
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
            "{mode}: {} callers in {PROCESSES} processes, body of {BODY:?} ran {runs} time(s), \
             {elapsed:?} in all",
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

static RUNS: AtomicU32 = AtomicU32::new(0);

/// The first run fails once every other caller is waiting for it; later runs succeed.
#[redis_lock(key = "flaky", action = Share)]
async fn flaky(started: Arc<Notify>, go: Arc<Notify>) -> Result<u32, LockError> {
    let run = RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    if run == 1 {
        started.notify_one();
        go.notified().await;
        return Err(LockError::invalid_config("the first run fails"));
    }
    // The next leader computes across an await: its followers wait meanwhile.
    tokio::task::yield_now().await;
    Ok(run)
}

/// On one thread: a follower that counted itself has joined the flight (its first poll runs
/// to the wait for the leader before the test runs again).
#[tokio::test(flavor = "current_thread")]
async fn a_failed_leader_hands_over_to_one_follower() {
    let locks = LockClient::memory();
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let leader = tokio::spawn(with_client(
        locks.clone(),
        flaky(started.clone(), go.clone()),
    ));
    started.notified().await;
    let joined = Arc::new(AtomicU32::new(0));
    let followers: Vec<_> = (0..10)
        .map(|_| {
            let call = with_client(locks.clone(), flaky(started.clone(), go.clone()));
            let joined = joined.clone();
            tokio::spawn(async move {
                joined.fetch_add(1, Ordering::SeqCst);
                call.await
            })
        })
        .collect();
    for _ in 0..1_000 {
        if joined.load(Ordering::SeqCst) == 10 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(joined.load(Ordering::SeqCst), 10, "the followers joined");
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
            if reason.contains("the memory backend, Redis (one server, Sentinel, Cluster), ZooKeeper or etcd")),
        "{refused:?}"
    );
    fencelock::testing::assertions::assert_free(&locks, "report:1").await;
}
