use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job", on_lost = Retry)]
async fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
