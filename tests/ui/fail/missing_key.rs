use fencelock::{LockError, redis_lock};

#[redis_lock(ttl_ms = 1000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
