//! The web service: `POST /deduct_stock/{sku}` and how each outcome maps to a status.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use fencelock::{LockClient, WithSources};
use serde_json::json;

use crate::service::{AppState, Sale, SaleError, sell};
use crate::stop_signal::stop_signal;
use crate::store::Store;

/// Seconds a buyer refused for contention is told to wait before trying again.
const RETRY_AFTER_SECONDS: &str = "1";

/// Serves on `127.0.0.1:port` (0: a free port) until `SIGTERM` or Ctrl-C; prints
/// `listening on http://127.0.0.1:PORT` once it accepts connections. On the signal it
/// shuts its lock client down (whatever it still holds is released at once, and its
/// waiting requests leave their lines, answered 503), then finishes the requests in
/// progress.
pub async fn serve(port: u16, redis_url: &str, locked: bool) -> Result<(), String> {
    let state = AppState {
        store: Store::connect(redis_url)
            .await
            .map_err(|e| format!("cannot connect to the stock store: {e}"))?,
        locks: LockClient::connect(redis_url)
            .await
            .map_err(|e| WithSources(&e).to_string())?,
        locked,
    };
    let locks = state.locks.clone();
    let router = Router::new()
        .route("/deduct_stock/{sku}", post(handle_deduct_stock))
        .with_state(Arc::new(state));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let lock = if locked { "#[redis_lock]" } else { "none" };
    println!("listening on http://{local} (lock: {lock})");
    // On the signal the lock client shuts down first: requests waiting for a lock stop at
    // once (503) instead of holding the graceful shutdown up, then the server finishes.
    let stopped = async move {
        stop_signal().await;
        let report = locks.shutdown().await;
        eprintln!(
            "shut down: {} lock(s) released, {} request(s) withdrawn",
            report.released, report.withdrawn
        );
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(stopped)
        .await
        .map_err(|e| format!("the server stopped: {e}"))
}

async fn handle_deduct_stock(
    State(state): State<Arc<AppState>>,
    Path(sku): Path<String>,
) -> Response {
    match sell(&state, &sku).await {
        Ok(sale) => sale_response(&sku, sale),
        Err(error) => error_response(&sku, error),
    }
}

/// 200 with the order, or 410 Gone once the SKU is sold out (a final answer: retrying will
/// not help, unlike a 429).
fn sale_response(sku: &str, sale: Sale) -> Response {
    match sale {
        Sale::Sold { order, remaining } => (
            StatusCode::OK,
            Json(json!({ "sku": sku, "order": order, "remaining": remaining })),
        )
            .into_response(),
        Sale::SoldOut => (
            StatusCode::GONE,
            Json(json!({ "sku": sku, "error": "sold out" })),
        )
            .into_response(),
    }
}

/// `NotAcquired` (the line for the SKU was longer than the lock's wait): 429 with
/// `Retry-After`, since the same order may succeed a moment later. An unreachable lock backend
/// or stock store, or an instance shutting down: 503. Anything else (a lease lost mid-sale, a
/// misconfiguration): 500.
fn error_response(sku: &str, error: SaleError) -> Response {
    let status = match &error {
        SaleError::Lock(e) if e.is_not_acquired() => StatusCode::TOO_MANY_REQUESTS,
        SaleError::Lock(e) if e.is_backend() || e.is_shut_down() => StatusCode::SERVICE_UNAVAILABLE,
        SaleError::Lock(_) => StatusCode::INTERNAL_SERVER_ERROR,
        SaleError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = Json(json!({ "sku": sku, "error": error.to_string() }));
    if status == StatusCode::TOO_MANY_REQUESTS {
        let retry_after = [(header::RETRY_AFTER, RETRY_AFTER_SECONDS)];
        return (status, retry_after, body).into_response();
    }
    eprintln!("{sku}: {status}: {}", WithSources(&error));
    (status, body).into_response()
}

#[cfg(test)]
mod tests {
    use std::io;

    use fencelock::testing::assertions::{assert_free, assert_held};
    use fencelock::testing::{Faults, RedisServer};
    use fencelock::{LockError, LossCause};

    use super::*;

    /// A service instance whose locks are the memory backend, with scripted faults (the kit of
    /// `fencelock::testing`), and whose stock is in a private Redis holding `stock` units.
    async fn instance(stock: i64) -> (Arc<AppState>, Arc<Faults>, RedisServer) {
        let redis = RedisServer::start().expect("a private redis-server");
        let store = Store::connect(&redis.url()).await.unwrap();
        store.open_sale("sku-1", stock).await.unwrap();
        let (locks, faults) = Faults::memory_client();
        let state = AppState {
            store,
            locks,
            locked: true,
        };
        (Arc::new(state), faults, redis)
    }

    async fn deduct(state: &Arc<AppState>) -> StatusCode {
        let path = Path("sku-1".to_owned());
        handle_deduct_stock(State(state.clone()), path)
            .await
            .status()
    }

    #[tokio::test]
    async fn a_sale_takes_the_skus_lock_and_gives_it_back() {
        let (state, _faults, _redis) = instance(3).await;
        assert_eq!(deduct(&state).await, StatusCode::OK);
        assert_eq!(state.store.stock("sku-1").await.unwrap(), 2);
        assert_free(&state.locks, "stock:sku-1").await;
    }

    #[tokio::test]
    async fn an_unreachable_lock_store_is_503_and_sells_nothing() {
        let (state, faults, _redis) = instance(3).await;
        faults.unreachable(true);
        assert_eq!(deduct(&state).await, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(state.store.stock("sku-1").await.unwrap(), 3);
        faults.unreachable(false);
        assert_eq!(deduct(&state).await, StatusCode::OK);
    }

    /// Another instance holds the SKU for longer than a buyer waits (2 s): 429, nothing sold.
    #[tokio::test]
    async fn a_sku_held_past_the_wait_is_429_and_sells_nothing() {
        let (state, _faults, _redis) = instance(3).await;
        let other = state.locks.lock("stock:sku-1").acquire().await.unwrap();
        assert_held(&state.locks, "stock:sku-1").await;
        assert_eq!(deduct(&state).await, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(state.store.stock("sku-1").await.unwrap(), 3);
        other.release().await.unwrap();
    }

    fn status_and_retry_after(error: SaleError) -> (StatusCode, Option<String>) {
        let response = error_response("sku-1", error);
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|value| value.to_str().unwrap().to_owned());
        (response.status(), retry_after)
    }

    #[test]
    fn contention_is_429_with_retry_after() {
        let error = LockError::not_acquired("stock:sku-1", 3).into();
        assert_eq!(
            status_and_retry_after(error),
            (StatusCode::TOO_MANY_REQUESTS, Some("1".to_owned()))
        );
    }

    #[test]
    fn an_unreachable_lock_backend_or_store_is_503() {
        let lock = LockError::backend(Some("stock:sku-1"), "cannot connect", None).into();
        assert_eq!(
            status_and_retry_after(lock),
            (StatusCode::SERVICE_UNAVAILABLE, None)
        );
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        let store = SaleError::Store(refused.into());
        assert_eq!(
            status_and_retry_after(store),
            (StatusCode::SERVICE_UNAVAILABLE, None)
        );
    }

    #[test]
    fn an_instance_shutting_down_is_503() {
        let error = LockError::shut_down("stock:sku-1").into();
        assert_eq!(
            status_and_retry_after(error),
            (StatusCode::SERVICE_UNAVAILABLE, None)
        );
    }

    #[test]
    fn a_lease_lost_mid_sale_is_500() {
        let error = LockError::lost("stock:sku-1", LossCause::NotOwner).into();
        assert_eq!(
            status_and_retry_after(error),
            (StatusCode::INTERNAL_SERVER_ERROR, None)
        );
    }

    #[test]
    fn sold_out_is_410() {
        assert_eq!(
            sale_response("sku-1", Sale::SoldOut).status(),
            StatusCode::GONE
        );
    }
}
