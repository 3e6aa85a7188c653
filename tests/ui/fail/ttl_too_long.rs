use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", ttl_ms = 100_000_000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
