use fencelock::{LockClient, LockError, redis_lock};

#[redis_lock(
    key = "job",
    client = LockClient::memory(),
    sleep_ms = 100,
    retry = 20,
    wait_ms = 5_000,
    fair = true
)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "report", client = LockClient::memory(), wait_ms = 1, fair = false)]
async fn report() -> Result<(), LockError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    job().await.unwrap();
    report().await.unwrap();
}
