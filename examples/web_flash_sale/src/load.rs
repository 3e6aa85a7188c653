//! The load generator: orders sent to every instance in turn, a fixed number in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The longest an order may take before it counts as failed (so a hung instance cannot hang
/// the run).
const ORDER_TIMEOUT: Duration = Duration::from_secs(10);

/// One order's reply: its status (or why none came) and how long it took.
pub struct Reply {
    pub status: Result<StatusCode, String>,
    pub latency: Duration,
}

/// Sends `orders` orders for `sku`, order `i` to `targets[i % targets.len()]`, with
/// `concurrency` of them in flight at a time; returns every reply and the run's duration.
pub async fn drive(
    targets: &[String],
    sku: &str,
    orders: usize,
    concurrency: usize,
) -> Result<(Vec<Reply>, Duration), String> {
    let uris: Vec<Uri> = targets
        .iter()
        .map(|target| {
            let uri = format!("{}/deduct_stock/{sku}", target.trim_end_matches('/'));
            uri.parse()
                .map_err(|e| format!("target `{target}` makes no URL ({e}): give http://HOST:PORT"))
        })
        .collect::<Result<_, _>>()?;
    let uris = Arc::new(uris);
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(concurrency)
        .build_http();
    let next_order = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let buyers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (uris, client, next_order) = (uris.clone(), client.clone(), next_order.clone());
            tokio::spawn(async move {
                let mut replies = Vec::new();
                loop {
                    let order = next_order.fetch_add(1, Ordering::Relaxed);
                    if order >= orders {
                        return replies;
                    }
                    replies.push(send_order(&client, &uris[order % uris.len()]).await);
                }
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(orders);
    for buyer in buyers {
        replies.extend(
            buyer
                .await
                .map_err(|e| format!("a buyer task failed: {e}"))?,
        );
    }
    Ok((replies, started.elapsed()))
}

/// One `POST`, timed until its whole body has arrived.
async fn send_order(client: &Client<HttpConnector, Empty<Bytes>>, uri: &Uri) -> Reply {
    let started = Instant::now();
    let exchange = async {
        let request = Request::post(uri.clone())
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<StatusCode, String>(status)
    };
    let status = tokio::time::timeout(ORDER_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no reply within {ORDER_TIMEOUT:?}")));
    Reply {
        status,
        latency: started.elapsed(),
    }
}
