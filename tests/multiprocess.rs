//! The seed's counter across OS processes: the point of a distributed lock is several
//! servers, not several tasks. The test binary runs itself as 4 child processes.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use fencelock::{LockClient, LockError, redis_lock, with_client};
use redis::AsyncCommands;

const PROCESSES: usize = 4;
const TASKS_PER_PROCESS: usize = 50;
const WORKER_URL: &str = "FENCELOCK_WORKER_URL";

#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the fields are read through Debug in failure messages"
)]
enum WorkerError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl From<LockError> for WorkerError {
    fn from(e: LockError) -> Self {
        WorkerError::Lock(e)
    }
}

impl From<redis::RedisError> for WorkerError {
    fn from(e: redis::RedisError) -> Self {
        WorkerError::Redis(e)
    }
}

#[redis_lock(key = "counter:{name}", ttl_ms = 10_000, retry = 10_000, sleep_ms = 20)]
async fn increment(
    mut redis: redis::aio::MultiplexedConnection,
    name: &str,
) -> Result<(), WorkerError> {
    let value: i64 = redis.get(name).await?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = redis.set(name, value + 1).await?;
    Ok(())
}

/// One child process's share: run only when the parent test starts this binary with
/// `--ignored --exact counter_worker`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of four_processes_increment_the_counter_exactly_two_hundred_times"]
async fn counter_worker() {
    let url = std::env::var(WORKER_URL).expect("started by the parent test");
    let locks = LockClient::connect(&url).await.unwrap();
    let redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let tasks: Vec<_> = (0..TASKS_PER_PROCESS)
        .map(|_| {
            tokio::spawn(with_client(
                locks.clone(),
                increment(redis.clone(), "shared"),
            ))
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn four_processes_increment_the_counter_exactly_two_hundred_times() {
    let server = support::redis_server();
    let mut redis = support::inspector(&server).await;
    let _: () = redis.set("shared", 0).await.unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args(["--ignored", "--exact", "counter_worker", "--nocapture"])
                .env(WORKER_URL, server.url())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "a worker process failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let value: i64 = redis.get("shared").await.unwrap();
    assert_eq!(value, (PROCESSES * TASKS_PER_PROCESS) as i64);
}
