use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", renew = "no")]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
