//! The README's two orders of `#[redis_lock]` and `#[tracing::instrument]`.

use fencelock::{LockError, redis_lock};

// Span over the lock wait, the body and the release.
#[redis_lock(key = "job:{id}")]
#[tracing::instrument]
async fn whole_call(id: u32) -> Result<u32, LockError> {
    Ok(id + 1)
}

// Span over the body only.
#[tracing::instrument]
#[redis_lock(key = "job:{id}")]
async fn body_only(id: u32) -> Result<u32, LockError> {
    Ok(id + 1)
}

// ---- not in the README: runs it.
#[tokio::test]
async fn both_orders_lock_and_return() {
    let client = fencelock::LockClient::memory();
    let whole = fencelock::with_client(client.clone(), whole_call(1)).await;
    assert_eq!(whole.unwrap(), 2);
    assert_eq!(
        fencelock::with_client(client, body_only(1)).await.unwrap(),
        2
    );
}
