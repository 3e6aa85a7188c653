use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", min_hold_ms = 0)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
