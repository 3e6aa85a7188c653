use fencelock::{LockError, redis_lock};

// An argument error, a validation error and a template error: all three come out of
// one compile, and `ship` is still emitted as written, so `main` can call it.
#[redis_lock(key = "order:{order_id}", ttl = 1_000, ttl_ms = 0)]
async fn ship(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    let _ = ship(1);
}
