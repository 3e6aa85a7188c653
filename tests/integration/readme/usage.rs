//! The README's usage example. Compiled, not run: it connects to Redis on port 6379.
#![allow(dead_code)]

use fencelock::{LockClient, LockError, redis_lock};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    OutOfStock,
}

// The lock's failures come back through `From<LockError>`, and the body does not run.
impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

#[redis_lock(key = "stock:{sku}", ttl_ms = 10_000, retry = 5, action = Continue)]
async fn deduct_stock(sku: &str, qty: u32) -> Result<u32, AppError> {
    // One holder at a time per `sku`, across every process using this Redis.
    let token = fencelock::current_token().expect("set inside a locked body");
    let remaining = write_stock(sku, qty, token).await?; // hand the fencing token to the storage
    Ok(remaining)
}

// Your storage; a careful one refuses writes with a token older than one it has seen.
async fn write_stock(_sku: &str, qty: u32, _token: u64) -> Result<u32, AppError> {
    100u32.checked_sub(qty).ok_or(AppError::OutOfStock)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = LockClient::connect("redis://127.0.0.1:6379/").await?;
    client.install_global()?;
    match deduct_stock("42", 1).await {
        Ok(remaining) => println!("{remaining} left"),
        Err(AppError::Lock(e)) if e.is_not_acquired() => println!("busy, try again later"),
        Err(e) => return Err(format!("{e:?}").into()),
    }
    Ok(())
}
