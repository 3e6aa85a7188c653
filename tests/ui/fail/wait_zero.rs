use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", wait_ms = 0)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
