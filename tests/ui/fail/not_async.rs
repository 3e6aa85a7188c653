use fencelock::{LockError, redis_lock};

#[redis_lock(key = "job")]
fn job() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
