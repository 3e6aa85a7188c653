use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", ttl = 1000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
