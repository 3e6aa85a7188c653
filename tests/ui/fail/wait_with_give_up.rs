use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", wait_ms = 5_000, action = GiveUp)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
