use fencelock::{LockError, redis_lock};

#[async_trait::async_trait]
trait Job {
    async fn run(&self) -> Result<(), LockError>;
}

struct Nightly;

#[async_trait::async_trait]
impl Job for Nightly {
    #[redis_lock(key = "nightly")]
    async fn run(&self) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {}
