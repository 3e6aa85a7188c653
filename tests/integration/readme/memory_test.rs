//! The README's test on the memory backend.

use fencelock::{LockClient, LockError, redis_lock, with_client};

#[redis_lock(key = "report:{day}", action = GiveUp)]
async fn build_report(day: u32) -> Result<String, LockError> {
    Ok(format!("report {day}"))
}

#[tokio::test]
async fn refused_while_another_holder_has_the_lock() {
    let client = LockClient::memory();
    let held = client.lock("report:7").acquire().await.unwrap();
    let refused = with_client(client.clone(), build_report(7)).await;
    assert!(matches!(refused, Err(LockError::NotAcquired { .. })));

    held.release().await.unwrap();
    let report = with_client(client, build_report(7)).await.unwrap();
    assert_eq!(report, "report 7");
}
