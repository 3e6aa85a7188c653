use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", sleep_ms = 2_000, wait_ms = 1_500)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
