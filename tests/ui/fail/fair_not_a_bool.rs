use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", fair = 1)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
