use fencelock::{LockError, redis_lock};

struct OrderId(u64);

#[redis_lock(key = "order:{id}")]
async fn ship(id: OrderId) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
