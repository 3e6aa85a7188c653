mod locks {
    pub use fencelock::*;
}

use locks::{LockClient, LockError, redis_lock};

#[redis_lock(key = "job", crate = locks, client = LockClient::memory())]
async fn job() -> Result<(), LockError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    job().await.unwrap();
}
