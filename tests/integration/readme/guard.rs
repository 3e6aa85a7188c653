//! The README's guard taken by hand.
#![allow(dead_code)]

use fencelock::{LockClient, LockError};

async fn run(client: &LockClient) -> Result<(), LockError> {
    let guard = client
        .lock("stock:42")
        .ttl_ms(5_000)
        .give_up()
        .acquire()
        .await?;
    let token: u64 = guard.token();
    tokio::select! {
        lost = guard.lost() => return Err(lost), // renewal found the lease gone
        done = work(token) => done?,
    }
    guard.release().await?; // or drop it: released in the background
    Ok(())
}

async fn work(_token: u64) -> Result<(), LockError> {
    Ok(()) // the protected work, handing the token on
}

async fn connect() -> Result<LockClient, LockError> {
    LockClient::builder("redis://127.0.0.1:6379/")
        .key_prefix("lock:")
        .connect()
        .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), LockError> {
    let client = LockClient::memory(); // same semantics, in-process: no Redis needed
    run(&client).await
}

// ---- not in the README: runs it.
#[test]
fn runs() {
    main().unwrap();
}
