use fencelock::{LockClient, LockError, redis_lock, with_client};

#[tracing::instrument]
#[redis_lock(key = "job:{id}")]
async fn job(id: u32) -> Result<u32, LockError> {
    Ok(id + 1)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let value = with_client(LockClient::memory(), job(1)).await.unwrap();
    assert_eq!(value, 2);
}
