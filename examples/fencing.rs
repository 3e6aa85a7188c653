//! Fencing tokens: why a stale holder's write does no harm when the storage checks them.
//!
//! ```text
//! cargo run --features testing --example fencing
//! ```
//! Writer A takes the lock, then stalls (a GC pause, a slow network) for longer than its
//! lease, with renewal off and `on_lost = Continue` so that it does not notice. Writer B
//! takes the lock after A's lease ran out. Both write; the storage remembers the highest
//! token it has seen and refuses older ones, so A's late write is rejected. (With the
//! default `on_lost = Abort`, A's body would have been stopped when its lease ended.)

use std::sync::Mutex;
use std::time::Duration;

use fencelock::testing::RedisServer;
use fencelock::{LockClient, LockError, current_token, redis_lock};

/// A resource that takes writes only with a token at least as new as the newest it saw.
#[derive(Default)]
struct FencedStore {
    newest_token: Mutex<u64>,
}

impl FencedStore {
    fn write(&self, token: u64, value: &str) -> Result<String, String> {
        let mut newest = self.newest_token.lock().unwrap();
        if token < *newest {
            return Err(format!(
                "rejected {value:?}: token {token} is older than {newest}"
            ));
        }
        *newest = token;
        Ok(format!("stored {value:?} with token {token}"))
    }
}

#[redis_lock(key = "invoice:{id}", ttl_ms = 300, renew = false, on_lost = Continue, client = locks)]
async fn write_invoice(
    locks: &LockClient,
    store: &FencedStore,
    id: u32,
    value: &str,
    stall: Duration,
) -> Result<Result<String, String>, LockError> {
    let token = current_token().unwrap_or(0);
    tokio::time::sleep(stall).await;
    Ok(store.write(token, value))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut _server = None;
    let locks = match RedisServer::start() {
        Ok(server) => {
            let client = LockClient::connect(&server.url()).await?;
            println!("locks on a private redis-server at {}", server.url());
            _server = Some(server);
            client
        }
        Err(e) => {
            println!("no redis-server ({e}); locks on the memory backend");
            LockClient::memory()
        }
    };
    let store = FencedStore::default();
    let stale = write_invoice(
        &locks,
        &store,
        7,
        "A, after a 600 ms stall",
        Duration::from_millis(600),
    );
    let fresh = async {
        tokio::time::sleep(Duration::from_millis(350)).await;
        write_invoice(&locks, &store, 7, "B", Duration::ZERO).await
    };
    let (stale, fresh) = tokio::join!(stale, fresh);
    println!("writer B: {}", fresh?.unwrap_or_else(|e| e));
    println!("writer A: {}", stale?.unwrap_or_else(|e| e));
    Ok(())
}
