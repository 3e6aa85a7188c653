//! The flash sale: 100 units of stock, several worker processes, each running many
//! concurrent buyers that read the stock, think for a moment, and write it back minus one.
//! Without a lock the read-modify-write races and units are sold twice (oversold); with
//! `#[redis_lock]` around it, exactly 100 are sold.
//!
//! ```text
//! cargo run --release --features testing --example flash_sale
//! ```
//! Uses `REDIS_URL` when set, else starts a private `redis-server` when one is on PATH, else
//! runs in one process on the memory backend (and says so).

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::testing::RedisServer;
use fencelock::{LockClient, LockError, redis_lock};
use redis::AsyncCommands;

const STOCK: i64 = 100;
const WORKERS: usize = 4;
const BUYERS_PER_WORKER: usize = 25;
const SKU: &str = "sku-1";

#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the fields are read through Debug in failure messages"
)]
enum SaleError {
    Lock(LockError),
    Store(String),
}

impl From<LockError> for SaleError {
    fn from(e: LockError) -> Self {
        SaleError::Lock(e)
    }
}

impl From<redis::RedisError> for SaleError {
    fn from(e: redis::RedisError) -> Self {
        SaleError::Store(e.to_string())
    }
}

/// Where stock and sales are kept: Redis (shared by processes), or this process's memory.
#[derive(Clone)]
enum Counters {
    Redis(redis::aio::MultiplexedConnection),
    Memory(Arc<Mutex<(i64, i64)>>),
}

impl Counters {
    async fn stock(&mut self) -> Result<i64, SaleError> {
        Ok(match self {
            Counters::Redis(c) => c.get::<_, Option<i64>>("sale:stock").await?.unwrap_or(0),
            Counters::Memory(m) => m.lock().unwrap().0,
        })
    }

    async fn record_sale(&mut self, new_stock: i64) -> Result<(), SaleError> {
        match self {
            Counters::Redis(c) => {
                let _: () = c.set("sale:stock", new_stock).await?;
                let _: () = c.incr("sale:sold", 1).await?;
            }
            Counters::Memory(m) => {
                let mut counters = m.lock().unwrap();
                counters.0 = new_stock;
                counters.1 += 1;
            }
        }
        Ok(())
    }

    async fn reset(&mut self) -> Result<(), SaleError> {
        match self {
            Counters::Redis(c) => {
                let _: () = c.set("sale:stock", STOCK).await?;
                let _: () = c.set("sale:sold", 0).await?;
            }
            Counters::Memory(m) => *m.lock().unwrap() = (STOCK, 0),
        }
        Ok(())
    }

    async fn sold(&mut self) -> Result<i64, SaleError> {
        Ok(match self {
            Counters::Redis(c) => c.get::<_, Option<i64>>("sale:sold").await?.unwrap_or(0),
            Counters::Memory(m) => m.lock().unwrap().1,
        })
    }
}

struct Shop {
    counters: Counters,
    locks: LockClient,
}

/// One purchase: read the stock, take a moment (the business logic), write it back.
async fn buy(counters: &mut Counters) -> Result<bool, SaleError> {
    let stock = counters.stock().await?;
    if stock <= 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    counters.record_sale(stock - 1).await?;
    Ok(true)
}

#[redis_lock(key = "stock:{sku}", ttl_ms = 5_000, retry = 2_000, sleep_ms = 20, client = shop.locks)]
async fn buy_locked(shop: &Shop, sku: &str) -> Result<bool, SaleError> {
    buy(&mut shop.counters.clone()).await
}

/// Runs `buyers` concurrent buyers until the stock is gone; returns this process's sales.
async fn run_buyers(shop: Arc<Shop>, locked: bool, buyers: usize) -> Result<u64, SaleError> {
    let tasks: Vec<_> = (0..buyers)
        .map(|_| {
            let shop = shop.clone();
            tokio::spawn(async move {
                let mut sold = 0u64;
                loop {
                    let bought = if locked {
                        buy_locked(&shop, SKU).await?
                    } else {
                        buy(&mut shop.counters.clone()).await?
                    };
                    if !bought {
                        return Ok::<u64, SaleError>(sold);
                    }
                    sold += 1;
                }
            })
        })
        .collect();
    let mut sold = 0;
    for task in tasks {
        sold += task.await.map_err(|e| SaleError::Store(e.to_string()))??;
    }
    Ok(sold)
}

async fn redis_shop(url: &str) -> Result<Shop, Box<dyn std::error::Error>> {
    let counters = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    Ok(Shop {
        counters: Counters::Redis(counters),
        locks: LockClient::connect(url).await?,
    })
}

/// A worker process: `flash_sale worker <url> <locked>`; prints its sales.
async fn worker(url: &str, locked: bool) -> Result<(), Box<dyn std::error::Error>> {
    let shop = Arc::new(redis_shop(url).await?);
    let sold = run_buyers(shop, locked, BUYERS_PER_WORKER)
        .await
        .map_err(|e| format!("{e:?}"))?;
    println!("{sold}");
    Ok(())
}

/// One round across `WORKERS` processes; returns (sold, stock left).
async fn round_with_processes(
    url: &str,
    locked: bool,
) -> Result<(i64, i64), Box<dyn std::error::Error>> {
    let mut shop = redis_shop(url).await?;
    shop.counters.reset().await.map_err(|e| format!("{e:?}"))?;
    let exe = std::env::current_exe()?;
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .args(["worker", url, if locked { "locked" } else { "unlocked" }])
                .output()
        })
        .collect::<Result<_, _>>()?;
    for child in &children {
        if !child.status.success() {
            return Err(format!(
                "a worker failed: {}",
                String::from_utf8_lossy(&child.stderr)
            )
            .into());
        }
    }
    let sold = shop.counters.sold().await.map_err(|e| format!("{e:?}"))?;
    let left = shop.counters.stock().await.map_err(|e| format!("{e:?}"))?;
    Ok((sold, left))
}

/// One round in this process on the memory backend; returns (sold, stock left).
async fn round_in_memory(locked: bool) -> Result<(i64, i64), Box<dyn std::error::Error>> {
    let mut counters = Counters::Memory(Arc::new(Mutex::new((STOCK, 0))));
    let shop = Arc::new(Shop {
        counters: counters.clone(),
        locks: LockClient::memory(),
    });
    run_buyers(shop, locked, WORKERS * BUYERS_PER_WORKER)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let sold = counters.sold().await.map_err(|e| format!("{e:?}"))?;
    let left = counters.stock().await.map_err(|e| format!("{e:?}"))?;
    Ok((sold, left))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        return worker(&args[2], args[3] == "locked").await;
    }

    let mut _server = None;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) => Some(url),
        Err(_) => match RedisServer::start() {
            Ok(server) => {
                let url = server.url();
                _server = Some(server);
                Some(url)
            }
            Err(e) => {
                println!("no Redis ({e}); running in one process on the memory backend");
                None
            }
        },
    };
    match &url {
        Some(url) => println!(
            "flash sale: {STOCK} units, {WORKERS} worker processes x {BUYERS_PER_WORKER} buyers, Redis at {url}"
        ),
        None => println!(
            "flash sale: {STOCK} units, {} buyers in one process, memory backend",
            WORKERS * BUYERS_PER_WORKER
        ),
    }
    println!(
        "{:<16} {:>6} {:>10} {:>9} {:>9}",
        "mode", "sold", "stock left", "oversold", "time"
    );
    for locked in [false, true] {
        let started = Instant::now();
        let (sold, left) = match &url {
            Some(url) => round_with_processes(url, locked).await?,
            None => round_in_memory(locked).await?,
        };
        // Every sale took one unit; units sold beyond the real stock were sold twice.
        let oversold = sold - (STOCK - left);
        println!(
            "{:<16} {:>6} {:>10} {:>9} {:>8.2}s",
            if locked { "#[redis_lock]" } else { "no lock" },
            sold,
            left,
            oversold,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
