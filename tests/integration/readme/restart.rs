//! The guide's restart example: an instance that releases, as it starts, what its killed
//! earlier run left held.

use fencelock::{LockClient, LockError};

async fn start(url: &str, pod_name: &str) -> Result<LockClient, LockError> {
    let locks = LockClient::open_builder(url)
        .instance_id(pod_name) // the same on every run: a StatefulSet's `web-0`
        .connect()
        .await?;
    // What the last run of this instance held when it was killed is free again now,
    // not when its leases end; the next holders get greater fencing tokens.
    let left = locks.release_orphans().await?;
    println!("released {} lock(s) left held", left.released.len());
    Ok(locks)
}

// ---- not in the README: a run on the memory backend.
#[tokio::test]
async fn runs() {
    let locks = start("memory://", "web-0").await.unwrap();
    let guard = locks.lock("report").acquire().await.unwrap();
    assert_eq!(
        locks.release_orphans().await.unwrap().found,
        0,
        "its own run's"
    );
    guard.release().await.unwrap();
}
