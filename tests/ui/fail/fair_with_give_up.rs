use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", action = GiveUp, fair = true)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
