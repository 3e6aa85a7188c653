use fencelock::{LockClient, LockError, redis_lock};

#[redis_lock(
    key = "job",
    client = LockClient::memory(),
    ttl_ms = 10_000,
    renew = true,
    on_lost = Continue,
    min_hold_ms = 1_000,
    max_hold_ms = 600_000
)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(
    key = "report",
    client = LockClient::memory(),
    renew = false,
    on_lost = Abort,
    min_hold_ms = 30_000
)]
async fn report() -> Result<(), LockError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    job().await.unwrap();
    report().await.unwrap();
}
