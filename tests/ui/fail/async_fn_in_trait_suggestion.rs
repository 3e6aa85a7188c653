// rustc's suggestion for an `async fn` in a public trait rewrites the body: it must wrap the
// user's body, as for a function without the attribute, not the attribute's tokens.
#![deny(async_fn_in_trait)]

use fencelock::{LockError, redis_lock};

pub trait Stock {
    fn id(&self) -> u64;

    #[redis_lock(key = "stock:{sku}")]
    async fn deduct(&self, sku: u64) -> Result<u64, LockError> {
        Ok(sku + self.id())
    }
}

fn main() {}
