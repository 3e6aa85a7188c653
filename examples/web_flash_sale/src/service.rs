//! The business logic: sell one unit of a SKU, under `#[redis_lock]` or (to show the
//! oversell) without it.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use fencelock::{LockClient, LockError, redis_lock};

use crate::store::Store;

/// How long the sale's business step takes between reading the stock and writing it back
/// (payment checks, pricing...): the window in which unlocked buyers race.
const BUSINESS_STEP: Duration = Duration::from_millis(2);

/// What every handler of one service instance shares.
pub struct AppState {
    /// Where the stock is kept.
    pub store: Store,
    /// The locks; `deduct_stock` takes its lock through this client (`client = state.locks`).
    pub locks: LockClient,
    /// Whether sales take the lock (`false` only to show what happens without it).
    pub locked: bool,
}

/// A sale's outcome.
pub enum Sale {
    /// One unit sold: the order's number and the units left.
    Sold { order: i64, remaining: i64 },
    /// Nothing left to sell.
    SoldOut,
}

/// Why a sale failed.
#[derive(Debug)]
pub enum SaleError {
    /// The lock: not acquired in time, or its backend failed.
    Lock(LockError),
    /// The stock store failed.
    Store(redis::RedisError),
}

impl fmt::Display for SaleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SaleError::Lock(e) => e.fmt(f),
            SaleError::Store(e) => write!(f, "stock store failed: {e}"),
        }
    }
}

impl Error for SaleError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            SaleError::Lock(e) => e.source(),
            SaleError::Store(e) => e.source(),
        }
    }
}

impl From<LockError> for SaleError {
    fn from(e: LockError) -> Self {
        SaleError::Lock(e)
    }
}

impl From<redis::RedisError> for SaleError {
    fn from(e: redis::RedisError) -> Self {
        SaleError::Store(e)
    }
}

/// Sells one unit of `sku`, under the lock unless the instance runs without it.
pub async fn sell(state: &AppState, sku: &str) -> Result<Sale, SaleError> {
    if state.locked {
        deduct_stock(state, sku).await
    } else {
        read_modify_write(&state.store, sku).await
    }
}

// The critical section takes about 3 ms, so under a burst of N concurrent buyers of one SKU
// the last in line waits about N × 3 ms: buyers wait their turn (a release hands the lock to
// the oldest waiter, with no polling) for up to 2 s (`wait_ms`, the only bound on the wait),
// and only a line longer than that is refused (`NotAcquired`, answered 429 with Retry-After).
// The 5 s lease is renewed while the body runs and frees the SKU at most 5 s after an
// instance dies holding it.
#[redis_lock(key = "stock:{sku}", ttl_ms = 5_000, wait_ms = 2_000, client = state.locks)]
async fn deduct_stock(state: &AppState, sku: &str) -> Result<Sale, SaleError> {
    read_modify_write(&state.store, sku).await
}

/// Reads the stock, takes the business step, writes the stock back minus one and records the
/// sale: correct only while one buyer of `sku` at a time runs it.
async fn read_modify_write(store: &Store, sku: &str) -> Result<Sale, SaleError> {
    let stock = store.stock(sku).await?;
    if stock <= 0 {
        return Ok(Sale::SoldOut);
    }
    tokio::time::sleep(BUSINESS_STEP).await;
    store.write_stock(sku, stock - 1).await?;
    let order = store.record_sale(sku).await?;
    Ok(Sale::Sold {
        order,
        remaining: stock - 1,
    })
}
