use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", client = "redis://127.0.0.1/")]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
