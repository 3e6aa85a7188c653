//! The flash sale as a web service: `POST /deduct_stock/{sku}` on axum, the stock in Redis,
//! the read-modify-write under `#[redis_lock]`; and a load generator that sends orders to
//! several instances at once and counts what was oversold.
//!
//! Run it without arguments for its usage.
//!
//! `examples/web_flash_sale/run.sh` runs three instances and the load, with and without the
//! lock.

mod args;
mod http;
mod load;
mod report;
mod service;
#[path = "../../shared/stop_signal.rs"]
mod stop_signal;
mod store;

use std::process::ExitCode;

use args::Flags;
use report::Report;
use store::Store;

const USAGE: &str = "usage:
  fencelock-web-flash-sale serve --port PORT --redis URL [--no-lock]
      serves POST /deduct_stock/{sku} on 127.0.0.1:PORT (0: a free port), the stock in Redis
  fencelock-web-flash-sale load --targets URL,URL,... --redis URL --sku SKU --stock N
                                --orders N --concurrency N [--strict]
      puts N units of SKU on sale, sends the orders to the targets in turn and prints what was
      accepted, refused and oversold; --strict exits 1 on an oversold unit or a failed order";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]).await,
        Some("load") => load(&args[1..]).await,
        _ => Err(USAGE.to_owned()),
    };
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: &[String]) -> Result<ExitCode, String> {
    let flags = Flags::parse(args, &["port", "redis"], &["no-lock"])?;
    let port: u16 = flags.required("port")?;
    let redis_url: String = flags.required("redis")?;
    http::serve(port, &redis_url, !flags.switch("no-lock"))
        .await
        .map_err(|e| format!("serve: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

async fn load(args: &[String]) -> Result<ExitCode, String> {
    let valued = ["targets", "redis", "sku", "stock", "orders", "concurrency"];
    let flags = Flags::parse(args, &valued, &["strict"])?;
    let targets: Vec<String> = flags
        .required::<String>("targets")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let sku: String = flags.required("sku")?;
    if sku.is_empty()
        || !sku
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "`--sku {sku}`: use letters, digits, `-` and `_` (it goes into the URL's path)"
        ));
    }
    let stock: i64 = flags.required("stock")?;
    let orders: usize = flags.required("orders")?;
    let concurrency: usize = flags.required("concurrency")?;
    if concurrency == 0 {
        return Err("`--concurrency` must be at least 1".to_owned());
    }
    let store = Store::connect(&flags.required::<String>("redis")?)
        .await
        .map_err(|e| format!("cannot reach the stock store: {e}"))?;
    let store_error = |e: redis::RedisError| format!("stock store: {e}");
    store.open_sale(&sku, stock).await.map_err(store_error)?;
    let (replies, elapsed) = load::drive(&targets, &sku, orders, concurrency).await?;
    let report = Report {
        instances: targets.len(),
        concurrency,
        initial_stock: stock,
        sold_in_store: store.sold(&sku).await.map_err(store_error)?,
        stock_left: store.stock(&sku).await.map_err(store_error)?,
        replies,
        elapsed,
    };
    report.print();
    let violations = report.violations();
    if flags.switch("strict") && !violations.is_empty() {
        for violation in violations {
            eprintln!("FAILED: {violation}");
        }
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
