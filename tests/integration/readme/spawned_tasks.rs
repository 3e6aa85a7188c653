//! The README's spawned task outside a `with_client` scope.

use fencelock::{LockClient, LockError, redis_lock, with_client};

#[redis_lock(key = "job:{id}")]
async fn job(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    with_client(client.clone(), async {
        // Not in the scope: no global client here, so `NoClient`.
        let outside = tokio::spawn(job(1)).await.unwrap();
        assert!(matches!(outside, Err(LockError::NoClient)));

        // The fix: carry the client into the task.
        let inside = tokio::spawn(with_client(client.clone(), job(2)));
        assert_eq!(inside.await.unwrap().unwrap(), 2);
    })
    .await;
}

// ---- not in the README: runs it.
#[test]
fn runs() {
    main();
}
