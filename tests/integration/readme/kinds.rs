//! The README's lock kinds: read/write, semaphore, segmented.

use fencelock::{LockClient, LockError, current_shard, redis_lock, with_client};

/// Readers share the key; a writer holds it alone.
#[redis_lock(key = "catalog:{shop}", mode = Read)]
async fn show_catalog(shop: &str) -> Result<(), LockError> {
    Ok(()) // read the catalog
}

#[redis_lock(key = "catalog:{shop}", mode = Write)]
async fn update_catalog(shop: &str) -> Result<(), LockError> {
    show_catalog(shop).await // a read inside the write of the same key re-enters it
}

/// At most 4 exports at once, across every server.
#[redis_lock(key = "exports", permits = 4)]
async fn export(report: u64) -> Result<u64, LockError> {
    Ok(report) // export it
}

/// The stock of a hot item split into 100 shards, each under its own lock: up to 100
/// buyers at once, each on the shard it was given.
#[redis_lock(key = "stock:{sku}", shards = 100)]
async fn deduct_one(sku: &str) -> Result<u32, LockError> {
    let shard = current_shard().expect("runs under the segmented lock");
    Ok(shard) // take one unit from this shard's stock
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), LockError> {
    let locks = LockClient::memory();
    with_client(locks.clone(), async {
        update_catalog("north").await?;
        assert_eq!(export(7).await?, 7);
        let shard = deduct_one("tea").await?;
        assert!(shard < 100);
        Ok::<_, LockError>(())
    })
    .await?;
    // By hand: the guard names its shard.
    let guard = locks.segmented("stock:tea", 100).acquire().await?;
    println!(
        "holding shard {:?} under token {}",
        guard.shard(),
        guard.token()
    );
    guard.release().await
}

// ---- not in the README: runs it.
#[test]
fn runs() {
    main().unwrap();
}
