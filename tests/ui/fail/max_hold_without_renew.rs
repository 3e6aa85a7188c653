use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", renew = false, max_hold_ms = 600_000)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
