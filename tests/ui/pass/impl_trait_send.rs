//! The annotated future is `Send` as the plain one is, also with an `impl Trait` output
//! that is not `Send`-known in the body (review finding: it was always awaited).
use std::fmt::Display;

use fencelock::{LockClient, redis_lock};

async fn plain(locks: &LockClient) -> Result<impl Display + use<>, Box<dyn std::error::Error>> {
    let _ = locks;
    tokio::task::yield_now().await;
    Ok(5u32)
}

#[redis_lock(key = "report", client = locks)]
async fn annotated(locks: &LockClient) -> Result<impl Display + use<>, Box<dyn std::error::Error>> {
    tokio::task::yield_now().await;
    Ok(5u32)
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let locks = LockClient::memory();
    assert_send(&plain(&locks));
    assert_send(&annotated(&locks));
}
