//! The classic multi-key test: concurrent transfers between accounts, in both directions,
//! from several OS processes, half of the tasks under `lock_all([from, to])` and half
//! through `#[redis_lock(keys = [...])]`. No deadlock (every transfer completes), and the
//! balances are conserved (no two transfers overlapped on an account). On Redis and on
//! PostgreSQL as the lock store; the balances live in Redis.

use std::time::{Duration, Instant};

use fencelock::testing::{SqlDatabase, SqlKind};
use fencelock::{LockClient, LockError, current_tokens, redis_lock, with_client};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::support::{self, redis_server};

const WORKER: &str = "FENCELOCK_TRANSFER_WORKER";
const PROCESSES: usize = 3;
const TASKS: usize = 8;
const ROUNDS: usize = 15;
const ACCOUNTS: usize = 4;
const OPENING: i64 = 1_000;

fn account(n: usize) -> String {
    format!("acct:{n}")
}

/// Read, pause, write: without the locks, transfers would overlap here.
async fn move_money(balances: &mut MultiplexedConnection, from: usize, to: usize, amount: i64) {
    let (a, b): (i64, i64) = redis::cmd("MGET")
        .arg(account(from))
        .arg(account(to))
        .query_async(balances)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = balances
        .mset(&[(account(from), a - amount), (account(to), b + amount)])
        .await
        .unwrap();
}

#[redis_lock(keys = ["acct:{from}", "acct:{to}"], ttl_ms = 10_000, sleep_ms = 20, wait_ms = 60_000)]
async fn transfer(
    balances: &mut MultiplexedConnection,
    from: usize,
    to: usize,
    amount: i64,
) -> Result<(), LockError> {
    let held: Vec<String> = current_tokens().into_iter().map(|(key, _)| key).collect();
    let mut named = vec![account(from), account(to)];
    named.sort();
    assert_eq!(held, named, "the body holds both keys, in sorted order");
    move_money(balances, from, to, amount).await;
    Ok(())
}

/// One child process: its tasks move money between accounts, each pair in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of transfers_in_both_directions_never_deadlock_and_conserve_money"]
async fn transfer_worker() {
    let setting = std::env::var(WORKER).expect("started by the parent test");
    let [store, lock_url, table, balances_url] = setting.splitn(4, '|').collect::<Vec<_>>()[..]
    else {
        panic!("{WORKER} is store|lock url|table|balances url");
    };
    let locks = match store {
        "postgres" => {
            LockClient::postgres_builder(lock_url)
                .table(table)
                .connect()
                .await
        }
        _ => LockClient::connect(lock_url).await,
    };
    let locks = locks.unwrap();
    let balances = redis::Client::open(balances_url).unwrap();
    let balances = balances.get_multiplexed_async_connection().await.unwrap();
    let tasks = (0..TASKS).map(|task| {
        let (locks, mut balances) = (locks.clone(), balances.clone());
        tokio::spawn(async move {
            for round in 0..ROUNDS {
                let from = (task + round) % ACCOUNTS;
                let to = (from + 1 + round % (ACCOUNTS - 1)) % ACCOUNTS;
                let amount = 1 + (task * ROUNDS + round) as i64 % 7;
                let failed = |e: LockError| format!("task {task} round {round}: {e}");
                if task % 2 == 1 {
                    let call = transfer(&mut balances, from, to, amount);
                    let done = with_client(locks.clone(), call).await;
                    done.map_err(failed).unwrap();
                    continue;
                }
                let both = locks.lock_all([account(from), account(to)]);
                let both = both.ttl_ms(10_000).sleep_ms(20).wait_ms(60_000).acquire();
                let both = both.await.map_err(failed).unwrap();
                move_money(&mut balances, from, to, amount).await;
                both.release().await.unwrap();
            }
        })
    });
    for task in tasks.collect::<Vec<_>>() {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_both_directions_never_deadlock_and_conserve_money() {
    let balances = redis_server();
    let lock_server = redis_server();
    let mut stores = vec![("redis", lock_server.url(), String::new())];
    if let Some(database) = SqlDatabase::reach(SqlKind::Postgres).await {
        // The first client creates the lock table before the processes share it.
        drop(database.client().await);
        stores.push((
            "postgres",
            database.url().to_owned(),
            database.table().to_owned(),
        ));
    }
    let mut redis = support::inspector(&balances).await;
    for (store, lock_url, table) in stores {
        for n in 0..ACCOUNTS {
            let _: () = redis.set(account(n), OPENING).await.unwrap();
        }
        let setting = format!("{store}|{lock_url}|{table}|{}", balances.url());
        let started = Instant::now();
        let workers: Vec<_> = (0..PROCESSES)
            .map(|_| {
                support::spawn_test_process(
                    "features::transfers::transfer_worker",
                    WORKER,
                    &setting,
                )
            })
            .collect();
        for worker in workers {
            support::test_process_output(worker);
        }
        let mut total = 0;
        for n in 0..ACCOUNTS {
            let balance: i64 = redis.get(account(n)).await.unwrap();
            total += balance;
        }
        println!(
            "{store}: {} transfers in {PROCESSES} processes, {:?}, every one completed \
             (0 deadlocks), total {total}",
            PROCESSES * TASKS * ROUNDS,
            started.elapsed()
        );
        assert_eq!(
            total,
            OPENING * ACCOUNTS as i64,
            "{store}: money is conserved"
        );
    }
}
