//! Seed 000's segmented lock for hot stock: 10,000 units split into 100 shards of 100, each
//! shard under its own lock, so that up to 100 buyers proceed at once; buyers in 4 worker
//! processes buy until everything is sold. The same sale under one lock of the whole stock
//! runs in the same run, and the table compares them. Nothing may be oversold in either.
//!
//! ```text
//! cargo run --release --features testing --example segmented_stock
//! cargo run --features testing --example segmented_stock -- --quick   # 1,000 units
//! ```
//! Uses `REDIS_URL` when set, else starts a private `redis-server`. Exits with an error if
//! any unit was sold twice or the units sold and left do not add up.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fencelock::testing::RedisServer;
use fencelock::{LockClient, LockError, current_shard, redis_lock};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

const WORKERS: usize = 4;
const BUYERS_PER_WORKER: usize = 50;
const SKU: &str = "tea";
/// The business logic of one purchase (payment, order record): what the lock serialises.
const THINK: Duration = Duration::from_millis(1);

/// How many shards the stock is split into.
const SHARDS: u32 = 100;
/// Units for sale, and in a `--quick` run.
const UNITS: i64 = 10_000;
const QUICK_UNITS: i64 = 1_000;

#[derive(Debug)]
enum SaleError {
    Lock(LockError),
    Store(redis::RedisError),
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

impl std::fmt::Display for SaleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaleError::Lock(e) => write!(f, "lock: {e}"),
            SaleError::Store(e) => write!(f, "store: {e}"),
        }
    }
}

/// Where the stock lives: one counter per shard (`stock:<shard>`), sales in `sold`, and the
/// shards found empty in `empty`.
struct Shop {
    store: MultiplexedConnection,
    locks: LockClient,
}

/// What one purchase attempt did.
enum Purchase {
    Bought,
    /// The shard this attempt held was empty: the buyer notes it and tries another.
    Empty,
}

/// Reads the shard's stock, thinks, writes it back one less: a read-modify-write that only
/// the shard's lock keeps from selling a unit twice.
async fn sell_from(store: &mut MultiplexedConnection, shard: u32) -> Result<Purchase, SaleError> {
    let key = format!("seg:stock:{shard}");
    let stock: i64 = store.get::<_, Option<i64>>(&key).await?.unwrap_or(0);
    if stock <= 0 {
        let _: () = store.sadd("seg:empty", shard).await?;
        return Ok(Purchase::Empty);
    }
    tokio::time::sleep(THINK).await;
    let _: () = store.set(&key, stock - 1).await?;
    let _: () = store.incr("seg:sold", 1).await?;
    Ok(Purchase::Bought)
}

/// One purchase from whichever shard is free.
#[redis_lock(key = "stock:{sku}", shards = SHARDS, ttl_ms = 5_000, wait_ms = 60_000, client = shop.locks)]
async fn buy_segmented(shop: &Shop, sku: &str) -> Result<Purchase, SaleError> {
    let shard = current_shard().expect("runs under the segmented lock");
    sell_from(&mut shop.store.clone(), shard).await
}

/// One purchase under one lock of the whole stock, kept in shard 0.
#[redis_lock(key = "stock:{sku}:all", ttl_ms = 5_000, wait_ms = 60_000, client = shop.locks)]
async fn buy_single(shop: &Shop, sku: &str) -> Result<Purchase, SaleError> {
    sell_from(&mut shop.store.clone(), 0).await
}

/// How a round sells: by shards, or under one lock.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Segmented,
    Single,
}

impl Mode {
    fn parse(text: &str) -> Option<Mode> {
        match text {
            "single" => Some(Mode::Single),
            "segmented" => Some(Mode::Segmented),
            _ => None,
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Segmented => "segmented",
        }
    }

    /// How many shards hold stock in this mode.
    fn shards(self) -> u32 {
        match self {
            Mode::Single => 1,
            Mode::Segmented => SHARDS,
        }
    }
}

/// A buyer: buys until every shard is known to be empty.
async fn buyer(shop: &Shop, mode: Mode) -> Result<u64, SaleError> {
    let mut bought = 0;
    let mut store = shop.store.clone();
    loop {
        let purchase = match mode {
            Mode::Single => buy_single(shop, SKU).await?,
            Mode::Segmented => buy_segmented(shop, SKU).await?,
        };
        match purchase {
            Purchase::Bought => bought += 1,
            Purchase::Empty => {
                let empty: u32 = store.scard("seg:empty").await?;
                if empty >= mode.shards() {
                    return Ok(bought);
                }
            }
        }
    }
}

/// A worker process: `segmented_stock worker <url> <mode>`; prints its sales.
async fn worker(url: &str, mode: Mode) -> Result<(), Box<dyn std::error::Error>> {
    let shop = std::sync::Arc::new(Shop {
        store: redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?,
        locks: LockClient::connect(url).await?,
    });
    let buyers: Vec<_> = (0..BUYERS_PER_WORKER)
        .map(|_| {
            let shop = shop.clone();
            tokio::spawn(async move { buyer(&shop, mode).await })
        })
        .collect();
    let mut sold = 0;
    for buyer in buyers {
        sold += buyer.await?.map_err(|e| e.to_string())?;
    }
    println!("{sold}");
    Ok(())
}

/// What one round found.
struct Round {
    sold: i64,
    left: i64,
    took: Duration,
}

/// Stocks the shards, runs `WORKERS` processes in `mode`, and counts.
async fn round(url: &str, units: i64, mode: Mode) -> Result<Round, Box<dyn std::error::Error>> {
    let mut store = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let shards = i64::from(mode.shards());
    let mut stocking = redis::pipe();
    stocking.del("seg:sold").del("seg:empty");
    for shard in 0..shards {
        let share = units / shards + i64::from(shard < units % shards);
        stocking.set(format!("seg:stock:{shard}"), share);
    }
    let _: () = stocking.query_async(&mut store).await?;
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .args(["worker", url, mode.arg()])
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for child in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err("a worker process failed".into());
        }
    }
    let took = started.elapsed();
    let sold: i64 = store.get::<_, Option<i64>>("seg:sold").await?.unwrap_or(0);
    let mut left = 0;
    for shard in 0..shards {
        left += store
            .get::<_, Option<i64>>(format!("seg:stock:{shard}"))
            .await?
            .unwrap_or(0);
    }
    Ok(Round { sold, left, took })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        let mode = Mode::parse(&args[3]).ok_or("mode: `single` or `segmented`")?;
        return worker(&args[2], mode).await;
    }
    let units = if args.iter().any(|arg| arg == "--quick") {
        QUICK_UNITS
    } else {
        UNITS
    };
    let mut _server = None;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) => url,
        Err(_) => {
            let server = RedisServer::start()?;
            let url = server.url();
            _server = Some(server);
            url
        }
    };
    println!(
        "segmented stock: {units} units, {WORKERS} processes x {BUYERS_PER_WORKER} buyers, {} ms of work per purchase, Redis at {url}",
        THINK.as_millis()
    );
    println!(
        "| lock | shards | sold | left | oversold | time | purchases/s | vs one lock |\n|---|---|---|---|---|---|---|---|"
    );
    let mut single_rate = None;
    let mut failures = Vec::new();
    for mode in [Mode::Single, Mode::Segmented] {
        let Round { sold, left, took } = round(&url, units, mode).await?;
        // Every sale took one unit: units sold beyond those that left the shelves were sold
        // twice.
        let oversold = sold - (units - left);
        let rate = sold as f64 / took.as_secs_f64();
        let speedup =
            single_rate.map_or("1.0x".to_owned(), |single| format!("{:.1}x", rate / single));
        single_rate.get_or_insert(rate);
        let name = match mode {
            Mode::Single => "one lock",
            Mode::Segmented => "segmented",
        };
        println!(
            "| {name} | {} | {sold} | {left} | {oversold} | {:.2} s | {rate:.0} | {speedup} |",
            mode.shards(),
            took.as_secs_f64()
        );
        if oversold != 0 || left != 0 || sold != units {
            failures.push(format!(
                "{name}: sold {sold}, left {left}, oversold {oversold}"
            ));
        }
    }
    if !failures.is_empty() {
        return Err(format!("the sale went wrong: {}", failures.join("; ")).into());
    }
    Ok(())
}
