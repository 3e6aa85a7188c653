//! The flash-sale counter across OS processes: the point of a distributed lock is several
//! servers, not several tasks. The test binary runs itself as 4 child processes.

use fencelock::{LockClient, with_client};
use redis::AsyncCommands;

use crate::support::{self, increment};

const PROCESSES: usize = 4;
const TASKS_PER_PROCESS: usize = 50;
const WORKER_URL: &str = "FENCELOCK_WORKER_URL";

/// One child process's share: run only when the parent test starts this binary with
/// `--ignored --exact features::multiprocess::counter_worker`.
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
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            support::spawn_test_process(
                "features::multiprocess::counter_worker",
                WORKER_URL,
                &server.url(),
            )
        })
        .collect();
    for worker in workers {
        support::test_process_output(worker);
    }
    let value: i64 = redis.get("shared").await.unwrap();
    assert_eq!(value, (PROCESSES * TASKS_PER_PROCESS) as i64);
}
