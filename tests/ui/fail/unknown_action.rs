use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", action = Wait)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
