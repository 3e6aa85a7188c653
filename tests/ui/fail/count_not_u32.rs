use fencelock::{LockError, redis_lock};

// A count that is no literal is checked at run time, but its type here: `u32`.
const PERMITS: u64 = 3;

#[redis_lock(key = "exports", permits = PERMITS)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "stock", shards = "sixteen".len())]
async fn take() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
