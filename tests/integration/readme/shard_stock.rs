use std::sync::Mutex;

use fencelock::{LockClient, LockError, current_shard, redis_lock, shard_exhausted, with_client};

static STOCK: Mutex<[u32; 8]> = Mutex::new([0, 0, 0, 0, 0, 1, 0, 0]); // one unit, in shard 5

#[redis_lock(key = "stock:{sku}", shards = 8)]
async fn buy(sku: &str) -> Result<u32, LockError> {
    let shard = current_shard().expect("runs under the segmented lock");
    let taken = STOCK.lock().unwrap()[shard as usize].checked_sub(1);
    match taken {
        Some(left) => {
            STOCK.lock().unwrap()[shard as usize] = left;
            Ok(shard)
        }
        None => Err(shard_exhausted().await), // runs again on another shard
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), LockError> {
    let locks = LockClient::memory();
    assert_eq!(with_client(locks.clone(), buy("tea")).await?, 5);
    let sold_out = with_client(locks.clone(), buy("tea")).await;
    assert!(matches!(
        sold_out,
        Err(LockError::Exhausted { shard: None, .. })
    ));
    locks.refill_shards("stock:tea").await // once the stock is back
}

// ---- not in the README: runs it.
#[test]
fn runs() {
    main().unwrap();
}
