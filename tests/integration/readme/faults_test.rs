//! The testing guide's test of a service's behaviour on lock loss, without Redis.

use std::time::Duration;

use fencelock::testing::Faults;
use fencelock::{LockError, LossCause, redis_lock, with_client};

/// The service: copies a ledger's pages while it holds the lock, and stops if it loses it.
#[redis_lock(key = "ledger-copy", ttl_ms = 3_000)]
async fn copy_ledger(pages: u32) -> Result<u32, LockError> {
    for _ in 0..pages {
        tokio::time::sleep(Duration::from_millis(100)).await; // one page
    }
    Ok(pages)
}

#[tokio::test(start_paused = true)]
async fn the_copy_stops_when_its_lock_is_lost() {
    let (locks, faults) = Faults::memory_client();
    let copy = tokio::spawn(with_client(locks, copy_ledger(1_000))); // 100 s of work
    tokio::time::sleep(Duration::from_secs(10)).await; // renewed all along
    faults.fail_renewals(true); // the store stops answering renewals
    let stopped = copy.await.unwrap();
    assert!(matches!(
        stopped,
        Err(LockError::Lost {
            cause: LossCause::Unconfirmed,
            ..
        })
    ));
}
