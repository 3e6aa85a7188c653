//! A segmented lock that finds the stock: a body that finds its shard empty marks it
//! exhausted and runs again on another shard, every client skips the marked shards until they
//! are refilled, and a call for which every shard is marked fails at once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use fencelock::{LockClient, LockError, current_shard, redis_lock, shard_exhausted, with_client};
use futures::future::join_all;

use std::time::Duration;

use crate::support::{client, eventually, inspector, redis_server};

/// An item's stock, one counter per shard, and how often a body ran.
struct Stock {
    units: Mutex<[u32; 8]>,
    runs: AtomicU32,
}

impl Stock {
    fn new(units: [u32; 8]) -> Stock {
        Stock {
            units: Mutex::new(units),
            runs: AtomicU32::new(0),
        }
    }
}

#[redis_lock(key = "stock:{sku}", shards = 8, wait_ms = 10_000)]
async fn buy(sku: &str, stock: &Stock) -> Result<u32, LockError> {
    stock.runs.fetch_add(1, Ordering::Relaxed);
    let shard = current_shard().expect("under the segmented lock");
    let taken = {
        let mut units = stock.units.lock().unwrap();
        let left = &mut units[shard as usize];
        left.checked_sub(1).map(|after| *left = after)
    };
    // Other buyers run meanwhile.
    tokio::task::yield_now().await;
    match taken {
        Some(()) => Ok(shard),
        None => Err(shard_exhausted().await),
    }
}

/// The new user's case: one unit left, in shard 5 of 8, and 20 buyers on two clients. The
/// unit is sold once; the others learn that the item is sold out, at most one body run per
/// shard, and every later buyer without running a body; a refill sells again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_unit_is_sold_and_sold_out_is_said_once_per_shard() {
    let server = redis_server();
    let clients = [client(&server).await, client(&server).await];
    let stock = Stock::new([0, 0, 0, 0, 0, 1, 0, 0]);
    let buys = (0..20).map(|n| with_client(clients[n % 2].clone(), buy("tea", &stock)));
    let outcomes = join_all(buys).await;

    let sold: Vec<u32> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().copied())
        .collect();
    assert_eq!(sold, [5], "the last unit, from its shard: {outcomes:?}");
    for outcome in outcomes.iter().filter(|o| o.is_err()) {
        assert!(
            matches!(outcome, Err(LockError::Exhausted { shard: None, .. })),
            "{outcome:?}"
        );
    }
    let runs = stock.runs.load(Ordering::Relaxed);
    assert!(
        runs <= 9,
        "one sale and one mark per shard at most, ran {runs} times"
    );

    let later = with_client(clients[0].clone(), buy("tea", &stock)).await;
    assert!(
        matches!(later, Err(LockError::Exhausted { shard: None, .. })),
        "{later:?}"
    );
    assert_eq!(
        stock.runs.load(Ordering::Relaxed),
        runs,
        "refused without a run"
    );

    stock.units.lock().unwrap()[1] = 2;
    clients[1].refill_shards("stock:tea").await.unwrap();
    for _ in 0..2 {
        let sold = with_client(clients[0].clone(), buy("tea", &stock)).await;
        assert_eq!(sold.unwrap(), 1, "the refilled shard's stock");
    }
}

/// A shard refilled alone is the only one taken again.
#[tokio::test]
async fn one_shard_refilled_is_the_only_one_taken() {
    let locks = LockClient::memory();
    let stock = Stock::new([0; 8]);
    let sold_out = with_client(locks.clone(), buy("tea", &stock)).await;
    assert!(
        matches!(sold_out, Err(LockError::Exhausted { shard: None, .. })),
        "{sold_out:?}"
    );
    assert_eq!(stock.runs.load(Ordering::Relaxed), 8, "one run per shard");

    stock.units.lock().unwrap()[6] = 1;
    locks.refill_shard("stock:tea", 6).await.unwrap();
    assert_eq!(
        with_client(locks.clone(), buy("tea", &stock))
            .await
            .unwrap(),
        6
    );
    assert_eq!(stock.runs.load(Ordering::Relaxed), 9);
}

#[redis_lock(key = "stock:{sku}", shards = 2)]
async fn buy_and_mark_the_last(sku: &str, stock: &Stock) -> Result<u32, LockError> {
    stock.runs.fetch_add(1, Ordering::Relaxed);
    let shard = current_shard().expect("under the segmented lock");
    let left = {
        let mut units = stock.units.lock().unwrap();
        let left = &mut units[shard as usize];
        left.checked_sub(1).inspect(|after| *left = *after)
    };
    match left {
        Some(after) => {
            if after == 0 {
                // The last unit of the shard is sold: nobody need look here again.
                let _ = shard_exhausted().await;
            }
            Ok(shard)
        }
        None => Err(shard_exhausted().await),
    }
}

/// Review finding: a body that sold the shard's last unit and marked it ran again on
/// another shard and sold a second unit. A run that returns `Ok` ends the call.
#[tokio::test]
async fn a_body_that_marks_and_succeeds_ends_the_call() {
    let locks = LockClient::memory();
    let stock = Stock::new([1, 1, 0, 0, 0, 0, 0, 0]);
    let sold = with_client(locks.clone(), buy_and_mark_the_last("tea", &stock)).await;
    assert!(sold.is_ok(), "{sold:?}");
    assert_eq!(stock.runs.load(Ordering::Relaxed), 1, "one run, one unit");
    let units = *stock.units.lock().unwrap();
    assert_eq!(units[0] + units[1], 1, "one unit left");
}

#[redis_lock(key = "stock:{sku}", shards = 8, retry = 2, sleep_ms = 1_000)]
async fn mark_every_shard(sku: &str) -> Result<u32, LockError> {
    Err(shard_exhausted().await)
}

/// Review finding: without `wait_ms`, each run waited `retry × sleep_ms` afresh. The runs
/// share the call's wait: with every shard held and one freed every 350 ms, the call ends
/// within its 2 s (on the paused clock).
#[tokio::test(start_paused = true)]
async fn the_runs_share_the_wait_of_retry_and_sleep() {
    let locks = LockClient::memory();
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(locks.segmented("stock:tea", 8).acquire().await.unwrap());
    }
    let freeing = async move {
        for guard in held {
            tokio::time::sleep(Duration::from_millis(350)).await;
            guard.release().await.unwrap();
        }
    };
    let started = tokio::time::Instant::now();
    let call = async {
        let call = with_client(locks.clone(), mark_every_shard("tea")).await;
        (call, started.elapsed())
    };
    let ((call, waited), ()) = tokio::join!(call, freeing);
    assert!(call.is_err(), "{call:?}");
    assert!(waited <= Duration::from_millis(2_100), "waited {waited:?}");
}

/// Review finding: foreign data in the key of exhausted shards failed the release script
/// halfway when a segmented waiter was in line (a WRONGTYPE error, no hand-off, no
/// announcement). The waiter is skipped and woken, and its next attempt says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_the_marks_does_not_break_a_release() {
    let server = redis_server();
    let locks = client(&server).await;
    let guard = locks.segmented("stock:tea", 1).acquire().await.unwrap();
    // Its pauses are long: only the release's announcement wakes it in time.
    let other = client(&server).await;
    let waiter = other
        .segmented("stock:tea", 1)
        .wait_ms(20_000)
        .sleep_ms(15_000);
    let waiting = tokio::spawn(waiter.acquire());
    let admin = locks.admin();
    let queued = eventually(Duration::from_secs(5), || async {
        admin.inspect("stock:tea").await.unwrap().waiters == 1
    });
    assert!(queued.await, "the waiter is in line");
    let mut redis = inspector(&server).await;
    put_foreign_marks(&mut redis).await;
    guard.release().await.unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    match refused.expect("the waiter hears of the release").unwrap() {
        Err(LockError::KeyInUse { reason, .. }) => {
            assert!(reason.contains("exhausted shards"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// Review finding: a refill deleted whatever the key of exhausted shards held. Foreign data
/// there is refused by a refill and by a mark, and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_the_marks_is_refused_and_kept() {
    let server = redis_server();
    let locks = client(&server).await;
    let guard = locks.segmented("stock:tea", 2).acquire().await.unwrap();
    let mut redis = inspector(&server).await;
    put_foreign_marks(&mut redis).await;
    let refused = [
        guard.mark_exhausted().await,
        locks.refill_shard("stock:tea", 1).await,
        locks.refill_shards("stock:tea").await,
    ];
    for outcome in refused {
        match outcome {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(reason.contains("exhausted shards"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
    let kept: String = redis::cmd("GET")
        .arg("lock:{stock:tea}:v2:exhausted")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(kept, "not a set");
    guard.release().await.unwrap();
}

/// Writes a string, another program's data, where `stock:tea`'s exhausted shards are kept.
async fn put_foreign_marks(redis: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("SET")
        .arg("lock:{stock:tea}:v2:exhausted")
        .arg("not a set")
        .query_async(redis)
        .await
        .unwrap();
}
