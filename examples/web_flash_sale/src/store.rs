//! The shop's data in Redis: each SKU's stock and the number of units sold.

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

/// A connection to the Redis that keeps the stock (shared by every instance of the service).
#[derive(Clone)]
pub struct Store {
    connection: MultiplexedConnection,
}

impl Store {
    /// Connects to the Redis at `url`.
    pub async fn connect(url: &str) -> redis::RedisResult<Store> {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Store { connection })
    }

    /// Units of `sku` in stock (0 when never set).
    pub async fn stock(&self, sku: &str) -> redis::RedisResult<i64> {
        let stock: Option<i64> = self.connection.clone().get(stock_key(sku)).await?;
        Ok(stock.unwrap_or(0))
    }

    /// Overwrites the stock of `sku`: a plain write, not a decrement, so two buyers who read the
    /// same stock write the same value back (what oversells without a lock).
    pub async fn write_stock(&self, sku: &str, stock: i64) -> redis::RedisResult<()> {
        self.connection.clone().set(stock_key(sku), stock).await
    }

    /// Counts one unit of `sku` sold and returns the order's number (atomic, so the count is
    /// exact even when the stock writes race).
    pub async fn record_sale(&self, sku: &str) -> redis::RedisResult<i64> {
        self.connection.clone().incr(sold_key(sku), 1).await
    }

    /// Units of `sku` sold since the last [`Store::open_sale`].
    pub async fn sold(&self, sku: &str) -> redis::RedisResult<i64> {
        let sold: Option<i64> = self.connection.clone().get(sold_key(sku)).await?;
        Ok(sold.unwrap_or(0))
    }

    /// Puts `stock` units of `sku` on sale, with none sold yet.
    pub async fn open_sale(&self, sku: &str, stock: i64) -> redis::RedisResult<()> {
        redis::pipe()
            .atomic()
            .set(stock_key(sku), stock)
            .set(sold_key(sku), 0)
            .query_async(&mut self.connection.clone())
            .await
    }
}

fn stock_key(sku: &str) -> String {
    format!("flash_sale:stock:{sku}")
}

fn sold_key(sku: &str) -> String {
    format!("flash_sale:sold:{sku}")
}
