//! The global client: its own test binary, because it is installed once per process.

use fencelock::{LockClient, LockError, redis_lock, with_client};

#[redis_lock(key = "global:{n}")]
async fn job(n: u32) -> Result<u64, LockError> {
    Ok(fencelock::current_token().unwrap_or(0))
}

#[tokio::test]
async fn the_global_client_serves_attributes_and_a_scope_overrides_it() {
    assert!(matches!(job(1).await, Err(LockError::NoClient)));
    let global = LockClient::memory();
    global.clone().install_global().unwrap();
    assert!(
        LockClient::memory().install_global().is_err(),
        "a second global client is refused"
    );
    assert!(job(1).await.unwrap() > 0);

    // A scoped client wins over the global one: hold the key in the global client and
    // the scoped call still gets in.
    let held = global.lock("global:2").acquire().await.unwrap();
    assert!(
        job(2).await.is_err(),
        "the global client sees its own holder"
    );
    assert!(with_client(LockClient::memory(), job(2)).await.is_ok());
    held.release().await.unwrap();
}
