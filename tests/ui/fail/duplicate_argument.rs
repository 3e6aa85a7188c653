use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", ttl_ms = 1000, ttl_ms = 2000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
