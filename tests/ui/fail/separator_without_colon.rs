use fencelock::{LockError, redis_lock};

#[redis_lock(key = "pair:{a}-{b}")]
async fn pair(a: u32, b: u32) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
