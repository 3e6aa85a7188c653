use fencelock::{LockError, redis_lock};

#[redis_lock(key = "order:{id")]
async fn ship(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
