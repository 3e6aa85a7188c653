use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", ttl_ms = 10_000, renew = false, min_hold_ms = 60_000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
