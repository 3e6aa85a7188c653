use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", retry = 3, action = GiveUp)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
