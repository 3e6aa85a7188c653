use fencelock::{LockError, redis_lock};

#[redis_lock(key = "order:{order_id}")]
async fn ship(id: u64, qty: u32) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
