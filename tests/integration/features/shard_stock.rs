//! A segmented lock that finds the stock: a body that finds its shard empty marks it
//! exhausted and runs again on another shard, every client skips the marked shards until they
//! are refilled, and a call for which every shard is marked fails at once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use fencelock::{LockClient, LockError, current_shard, redis_lock, shard_exhausted, with_client};
use futures::future::join_all;

use crate::support::{client, redis_server};

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
