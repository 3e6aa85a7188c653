use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", max_hold_ms = 10_000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
